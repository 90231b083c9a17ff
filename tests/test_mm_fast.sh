#!/usr/bin/env bash
# test_mm_fast.sh: train_mm_proxy.py's step cuts (issue 35: the GPU step is CPU-bound), on the
# CPU (tests/mm_fast_check.py): train_step with foreach AdamW gives the step as it was before the
# cuts bit for bit (6 steps of the tiny preset's shapes: 12 losses, 6 norms, 199 weight
# tensors); fused AdamW stays within its named tolerance after one step; a step's launch-like
# op count (bf16 autocast, fused AdamW) stays under its measured bound with no .item() of the
# trainer's own, where the old step exceeds it; --compile refuses what it cannot honour;
# --eval-every's held-out rows (the trainer run on a ci plan made here, 10 steps) exist at
# steps 4, 8, 10, finite, zeroed and rolled off as is, and the run's weights and losses are
# those of --eval-every 0 to the bit, with --eval-decode (the held-out greedy answers) as well.
# The interpreter needs torch, transformers, tokenizers and numpy: $G4_TORCH_PYTHON (CI's
# tools/install_deps.sh installs no torch); without it the test skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_fast "torch, transformers, tokenizers, numpy"
"$py" "$G4_SOURCE_DIR/tests/mm_fast_check.py"
