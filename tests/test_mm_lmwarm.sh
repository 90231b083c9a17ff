#!/usr/bin/env bash
# test_mm_lmwarm.sh: train_mm_proxy's --lm-warm-steps (the decoder alone as a causal LM on the
# plan's train texts, before the towers' warm phase and the joint steps; issue 35), on the CPU
# (tests/mm_lmwarm_check.py): the packed rows' labels are exactly the answers' ids; the LM text
# holds no held-out text (a plan that shares one is refused); the LM loss falls, neither tower
# runs or moves, the decoder moves; --lm-warm-steps 0 = no option (same sha256), on: the same
# weights twice, its records, a held-out row at step 0; refusals in one line.
# The interpreter needs torch, transformers 5.17, tokenizers, safetensors and numpy:
# $G4_TORCH_PYTHON (CI's tools/install_deps.sh installs no torch); without them the test skips
# (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_lmwarm "torch, transformers, tokenizers, safetensors, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_lmwarm_check.py"
