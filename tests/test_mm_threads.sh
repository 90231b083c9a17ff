#!/usr/bin/env bash
# test_mm_threads.sh: tools/python/train_mm_proxy.py's loader workers hold numpy's OpenBLAS to
# one thread (worker_init; issue 35: each worker kept the parent's pool of one thread a core,
# 14 workers x 16 threads on the H100 host), on the CPU (tests/mm_threads_check.py): a worker
# reports OpenBLAS at 1 and the env vars at 1 where one without worker_init reports the parent's
# pool; the trainer's speed-perturbed audio batches are bit-identical at either pool size.
# The interpreter needs torch, transformers 5.17, tokenizers, PIL and numpy: $G4_TORCH_PYTHON
# (CI's tools/install_deps.sh installs no torch); without them the test skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_threads "torch, transformers, tokenizers, PIL, numpy" 5.17
OMP_NUM_THREADS=1 "$py" -W ignore::UserWarning "$G4_SOURCE_DIR/tests/mm_threads_check.py"
