#!/usr/bin/env bash
# test_mm_guard.sh: train_mm_proxy.py's StepGuard (issue 35: a non-finite loss or gradient never
# lands), on the CPU (tests/mm_guard_check.py): train_step on a tiny Gemma-4 with the test hook's
# faults skips exactly the two faulty steps of 6 (weights bit-identical across them, finite at
# the end), the same fault unguarded leaves non-finite weights, 3 skips in a row stop the run
# with a one-line error and a good step resets the count.
# The interpreter needs torch, transformers, tokenizers and numpy: $G4_TORCH_PYTHON (CI's
# tools/install_deps.sh installs no torch); without it the test skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_guard "torch, transformers, tokenizers, numpy"
"$py" "$G4_SOURCE_DIR/tests/mm_guard_check.py"
