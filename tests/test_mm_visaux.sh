#!/usr/bin/env bash
# test_mm_visaux.sh: train_mm_proxy's --v-aux-weight (VisionAux: an auxiliary CTC read-out of the
# answer's characters from the image soft-token columns; issue 35), on the CPU
# (tests/mm_visaux_check.py): soft_columns hand-worked; answer_texts decodes the answers back;
# the loss is finite and its gradient reaches the vision side and the head only; the head's own
# generator; the CTC wiring reads synthetic columns (and not shuffled answers); the trainer off
# by default (weight 0 = no option: the same weights), on it trains and saves the same layout.
# The interpreter needs torch, transformers 5.17, tokenizers, safetensors and numpy:
# $G4_TORCH_PYTHON (CI's tools/install_deps.sh installs no torch); without them the test skips
# (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_visaux "torch, transformers, tokenizers, safetensors, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_visaux_check.py"
