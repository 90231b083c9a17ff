#!/usr/bin/env bash
# test_mm_ansmask.sh: train_mm_proxy's --answer-mask P [--answer-mask-kind audio|image|both]
# (AnswerMask: the joint phase's teacher-forced answer input ids of the chosen kind become
# <mask> with probability P, the labels unchanged; issue 35), on the CPU
# (tests/mm_ansmask_check.py): only answer input positions of the chosen kind change, within a
# binomial bound of P, labels as they were, seeded, P 0 = nothing; --answer-mask 0 = no option
# (same sha256), 0.3 twice the same weights, other than 0; the record; neither the LM phase nor
# the held-out evaluation masks; refusals in one line; the held-out audio rolled gap with 0 and
# 0.5 on tone clips (measured and printed; only a loose bound asserted).
# The interpreter needs torch, transformers 5.17, tokenizers, safetensors and numpy:
# $G4_TORCH_PYTHON (CI's tools/install_deps.sh installs no torch); without them the test skips
# (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_ansmask "torch, transformers, tokenizers, safetensors, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_ansmask_check.py"
