#!/usr/bin/env bash
# test_mm_spread.sh: train_mm_proxy.py's anti-collapse term on the audio soft tokens
# (spread_terms / SpreadTerm, issue 35), on the CPU (tests/mm_spread_check.py): hand-worked
# values (0 when every feature's std across the clips >= gamma, gamma - 0.01 for one vector at
# four scales, 0.245 / cov 4 on two clips, the valid frames only), 40 gradient steps that push
# 6 nearly collapsed clips apart (std up at every step, padding frames' gradient 0), and
# train_step on the ci preset's shapes (weight 0 bit-identical to no term; weight 20 recorded
# 3 of 3 steps and changing the audio side's update).
# The interpreter needs torch, transformers, tokenizers and numpy: $G4_TORCH_PYTHON (CI's
# tools/install_deps.sh installs no torch), with transformers 5.17 (the trainer's: 5.25 refuses
# sdpa for the audio tower); without them the test skips (77) saying why. ~30 s.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_spread "torch, transformers, tokenizers, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_spread_check.py"
