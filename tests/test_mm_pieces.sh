#!/usr/bin/env bash
# test_mm_pieces.sh: make_mm_data.py plan --speech-pieces N and train_mm_proxy's --a-pieces P
# (short train clips for the audio side: 1-4 words of a train sentence; issue 35), on the CPU
# (tests/mm_pieces_check.py): the ci plan with pieces is the plan without them + N lines (a byte
# prefix), each piece 1-4 consecutive words of a train sentence and no held-out answer;
# join_halves equals collate of the joined list; at --a-pieces 0.5 every audio half-batch holds
# exactly round(P x half) piece rows (counted from the decoded answers); a plan with pieces at
# --a-pieces 0 trains the sha256 of the plan without them; 0.5 other weights, twice the same;
# train.json's a_pieces; refusals in one line. The plan's checks on other presets:
# test_mm_data.sh. The interpreter needs torch, transformers 5.17, tokenizers, safetensors and
# numpy: $G4_TORCH_PYTHON (CI's tools/install_deps.sh installs no torch); without them the test
# skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_pieces "torch, transformers, tokenizers, safetensors, numpy" 5.17
OMP_NUM_THREADS=1 "$py" "$G4_SOURCE_DIR/tests/mm_pieces_check.py"
