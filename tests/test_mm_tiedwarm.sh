#!/usr/bin/env bash
# test_mm_tiedwarm.sh: tools/python/mm_audio_probe.py --warm-only (the towers' warm phase alone:
# the char head, train_mm_proxy.AudioChars, and with --ctc-tied the tied head, TiedCtcHead, in
# one clipped backward, no decoder loss; issue 35, bench/NOTES.md "The tied head in the warm
# phase") on the CPU (tests/mm_tiedwarm_check.py): its held-out read-outs against a hand
# computation, the probe's rows and clip counts, the tied head in the backward and out of the
# step-0 draws, --lm-warm-from, refusals in one line. The interpreter needs torch, transformers
# 5.17, tokenizers and numpy: $G4_TORCH_PYTHON (CI's tools/install_deps.sh installs no torch);
# without them the test skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_tiedwarm "torch, transformers, tokenizers, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_tiedwarm_check.py"
