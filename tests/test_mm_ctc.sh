#!/usr/bin/env bash
# test_mm_ctc.sh: train_mm_proxy.py's auxiliary CTC loss on the audio side (CtcHead, issue 35),
# on the CPU (tests/mm_ctc_check.py): the head's reduced-column CTC equals torch's ctc_loss over
# the whole vocabulary (loss and gradients, relative 1e-5) and skips the one clip with fewer
# frames than its labels need (3 used, 1 skipped); on the ci preset's audio tower 5 CTC steps on
# 3 clips lower the loss, all finite, 15 clips used, and a second run repeats them to the bit.
# The interpreter needs torch, transformers, tokenizers and numpy: $G4_TORCH_PYTHON (CI's
# tools/install_deps.sh installs no torch); without it the test skips (77) saying why. ~25 s.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_ctc "torch, transformers, tokenizers, numpy"
"$py" "$G4_SOURCE_DIR/tests/mm_ctc_check.py"
