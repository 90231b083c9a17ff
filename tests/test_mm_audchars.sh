#!/usr/bin/env bash
# test_mm_audchars.sh: train_mm_proxy's --ctc-units chars (AudioChars: CTC from the audio frames to
# the transcript's characters, the audio twin of --v-aux-weight's VisionAux; issue 35), on the CPU
# (tests/mm_audchars_check.py): the transcript as heard hand-worked; the loss and gradients equal
# torch's ctc_loss, a short clip skipped and counted; the head's own generator; the CTC wiring
# reads synthetic frames (and not shuffled transcripts); the gradient reaches the audio side and
# the head only; the trainer off by default (--ctc-units alone = no option: the same weights), on
# it trains the audio side and saves the same layout; the held-out read-out (HeldOut with both
# heads: greedy read and CER of hand-made frames, a zeroed head's CTC worked by hand, the trainer's
# rows and the same weights with the measurement on or off).
# The interpreter needs torch, transformers 5.17, tokenizers, safetensors and numpy:
# $G4_TORCH_PYTHON (CI's tools/install_deps.sh installs no torch); without them the test skips
# (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_audchars "torch, transformers, tokenizers, safetensors, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_audchars_check.py"
