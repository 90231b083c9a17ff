#!/usr/bin/env bash
# test_mm_parity.sh: tools/python/mm_parity.py's near-tie report (issue 35), on the CPU
# (tests/mm_parity_check.py): a random-init tiny Gemma-4 saved as an HF folder, noise images and
# a noise clip as items, and predictions made from HF's own greedy answers (generate's cached
# path, with its logits) altered at known positions: a near tie, a real disagreement, an answer
# that ends early, one unchanged. mm_parity's position, tokens, HF logits, gap, top-2 gap, verdict
# and counts must be those the generate logits give; its margin constants fidelity/tolerance.c's.
# The interpreter needs torch, transformers, tokenizers, numpy, pillow and soundfile:
# $G4_TORCH_PYTHON (CI's tools/install_deps.sh installs no torch), with transformers 5.17; without
# them the test skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_parity "torch, transformers, tokenizers, numpy, PIL, soundfile" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_parity_check.py"
