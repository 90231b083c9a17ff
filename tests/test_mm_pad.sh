#!/usr/bin/env bash
# test_mm_pad.sh: train_mm_proxy.py's --pad-to (collate rounds each half-batch's sequence length
# and audio frames up to a multiple of N so the GPU sees few shapes, issue 35), on the CPU
# (tests/mm_pad_check.py): with pad 64 and 7 the lengths grow to the multiple, the image and
# audio losses equal the unpadded ones within 1e-6 and their gradients within 1e-5 (relative);
# labelled padding and noisy frames marked valid (the controls) change the loss.
# The interpreter needs torch, transformers, tokenizers and numpy: $G4_TORCH_PYTHON (CI's
# tools/install_deps.sh installs no torch); without it the test skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_pad "torch, transformers, tokenizers, numpy"
"$py" "$G4_SOURCE_DIR/tests/mm_pad_check.py"
