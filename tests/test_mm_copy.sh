#!/usr/bin/env bash
# test_mm_copy.sh: train_mm_proxy's --lm-copy P (copy rows <sep> TEXT <sep> TEXT in the LM warm
# phase, the loss on the second copy) and --dec-freeze-steps N (the joint phase's first N steps
# train the towers, embedders and heads against a frozen decoder held out of AdamW; issue 35),
# on the CPU (tests/mm_copy_check.py): the copy rows' labels are exactly the second copy's ids,
# counted; the copy loss falls under half the plain rows' and new strings are copied; after N
# frozen steps the decoder is bit-identical with no AdamW state while the towers, embedders and
# head moved, after N + k it moved; no option = both at 0 (same sha256); refusals in one line.
# The interpreter needs torch, transformers 5.17, tokenizers, safetensors and numpy:
# $G4_TORCH_PYTHON (CI's tools/install_deps.sh installs no torch); without them the test skips
# (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_copy "torch, transformers, tokenizers, safetensors, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_copy_check.py"
