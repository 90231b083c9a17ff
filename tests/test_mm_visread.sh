#!/usr/bin/env bash
# test_mm_visread.sh: tools/python/mm_vision_readout.py's decomposition and read-out machinery
# and train_mm_proxy's vision init options (init_vision_positions, scale_vision_residuals,
# init_vision_proj; side_grad_norms, --v-chars' char_items;
# issue 35), on the CPU (tests/mm_visread_check.py): a hand-worked decomposition; the default
# position table is ones (one 2 x ones vector on every patch), the drawn one N(0, 0.02) from its
# own generator; the residual scale touches exactly its 4 tensors and leaves a layer near
# identity at 1e-4; the feature grids' shapes; a CTC read-out reads grids that hold the labels
# (held-out CER < 0.05) and not grids that do not (> 0.5).
# The interpreter needs torch, transformers 5.17, tokenizers and numpy: $G4_TORCH_PYTHON (CI's
# tools/install_deps.sh installs no torch); without them the test skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_visread "torch, transformers, tokenizers, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_visread_check.py"
