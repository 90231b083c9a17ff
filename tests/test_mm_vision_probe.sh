#!/usr/bin/env bash
# test_mm_vision_probe.sh: tools/python/mm_vision_probe.py's measuring (issue 35; the OCR probe
# of bench/NOTES.md "How fast the proxy learns to read"), on the CPU (tests/
# mm_vision_probe_check.py, ~10 s): left-padded batched greedy decoding equals one-at-a-time
# (control: right padding differs), the "shuf" pass rolls whole images (= the pixels rolled;
# control: a one-row roll differs), roll_chunks' grouping, cer's counts.
# The interpreter needs torch, transformers, tokenizers and numpy: $G4_TORCH_PYTHON (CI's
# tools/install_deps.sh installs no torch); without it the test skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_vision_probe "torch, transformers, tokenizers, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_vision_probe_check.py"
