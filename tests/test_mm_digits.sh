#!/usr/bin/env bash
# test_mm_digits.sh: the tokenizer's split_digits (train_mm_proxy.py --split-digits: one id a
# digit, as Gemma's tokenizer; issue 35), on the CPU (tests/mm_digits_check.py): the BPE learns
# no digit merge with it (and does without it), g4cu's tokenizer reads the result as HF does, the
# trainer writes and records it. The interpreter needs torch, transformers, tokenizers and numpy:
# $G4_TORCH_PYTHON (CI's tools/install_deps.sh installs no torch); without it the test skips
# (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_digits "torch, transformers, tokenizers, safetensors, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_digits_check.py"
