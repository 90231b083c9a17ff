#!/usr/bin/env bash
# test_mm_readout.sh: tools/python/mm_audio_readout.py's read-out machinery and
# train_mm_proxy.scale_audio_residuals (issue 35), on the CPU (tests/mm_readout_check.py):
# hand-worked labels, CTC frame need, greedy decoding and spread; a linear CTC read-out fitted
# on a synthetic cache reads frames that hold the labels (held-out CER < 0.05) and not frames
# that do not (> 0.5); the residual-branch scale touches exactly its 8 tensors and leaves each
# layer near identity at 1e-4 (per-frame cosine > 0.999; scale 1: median < 0.9).
# The interpreter needs torch, transformers 5.17, tokenizers and numpy: $G4_TORCH_PYTHON (CI's
# tools/install_deps.sh installs no torch); without them the test skips (77) saying why. ~30 s.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_readout "torch, transformers, tokenizers, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_readout_check.py"
