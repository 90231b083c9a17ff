#!/usr/bin/env bash
# test_mm_exact.sh: train_mm_proxy.py's --eval-decode (issue 35: the held-out evaluation's greedy
# answers, scored as `g4cu eval` scores them), on the CPU (tests/mm_exact_check.py):
# tools/python/mm_metrics.py gives lmms-eval's own values on tests/fixtures/eval/
# metrics_vectors.json (ocrbench 250, wer_tokens 600, wer_corpus 12) and hand-worked scores;
# greedy_decode on left-padded batches (images of two sizes, clips of three lengths) of the ci
# model gives model.generate's ids item for item, its logits within a named tolerance, and stops
# at its bound and at its eos ids. The run's determinism with it on is test_mm_fast's.
# The interpreter needs torch, transformers 5.17 and tokenizers: $G4_TORCH_PYTHON (CI's
# tools/install_deps.sh installs no torch); without it the test skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_exact "torch, transformers, tokenizers, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_exact_check.py"
