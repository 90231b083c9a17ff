#!/usr/bin/env bash
# test_mm_vwarm.sh: train_mm_proxy's --v-warm-steps (a vision-only warm phase before the joint
# steps: the tower, embed_vision and the VisionAux head on image half-batches, the aux CTC loss
# alone; issue 35), on the CPU (tests/mm_vwarm_check.py): the phase leaves every decoder and
# audio weight bit-identical and moves the vision side and the head; its optimizer holds only
# those; the trainer with --v-warm-steps 0 = without (same sha256), with it deterministic, its
# losses and seconds in train.json, the saved layout unchanged; bad uses refused in one line.
# --a-warm (the audio side and its CTC head in the same phase) and --tower-joint-lr-mult (the
# towers' joint lr after it): the same checks for the audio side, both off = the same weights.
# The interpreter needs torch, transformers 5.17, tokenizers, safetensors and numpy:
# $G4_TORCH_PYTHON (CI's tools/install_deps.sh installs no torch); without them the test skips
# (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_vwarm "torch, transformers, tokenizers, safetensors, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_vwarm_check.py"
