#!/usr/bin/env bash
# test_mm_sweep.sh: tools/python/mm_warm_timing.py's batch sweep (--batches: the joint and warm +
# audio steps' seconds, items/s and peak memory at each batch size, an OOM row where one does not
# fit) and loader measurement (--loader-workers: the trainer's loaders alone, items/s) for issue
# 35's "how fast can the proxy train on one GPU?" (tools/gpu/run.sh's mm_speed stage), on the CPU
# (tests/mm_sweep_check.py; named sweep, not speed: test_mm_speed.sh is --a-speed-perturb's):
# 2 rows a kind at --batches 2,4, an injected OOM row passed over, the loader's items counted
# (N batches x batch), the single form's lines as before, refusals in one line.
# The interpreter needs torch, transformers 5.17, tokenizers, PIL and numpy: $G4_TORCH_PYTHON
# (CI's tools/install_deps.sh installs no torch); without them the test skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_sweep "torch, transformers, tokenizers, PIL, numpy" 5.17
OMP_NUM_THREADS=1 "$py" "$G4_SOURCE_DIR/tests/mm_sweep_check.py"
