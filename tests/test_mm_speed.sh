#!/usr/bin/env bash
# test_mm_speed.sh: train_mm_proxy.py's --a-speed-perturb F (issue 35: each train clip's
# renderings after the first play its speech at a speed in [1 - F, 1 + F], tempo and pitch
# together), on the CPU (tests/mm_speed_check.py): pass 0 unchanged, pass 1's speed on its grid
# and range and its sample count (counted) and soft tokens following it, the trainer's weights
# the same without the option or at F 0, the same twice at F 0.1 and not those of no option.
# The interpreter needs torch, transformers, tokenizers, safetensors and numpy:
# $G4_TORCH_PYTHON (CI's tools/install_deps.sh installs no torch); without it the test skips
# (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_speed "torch, transformers, tokenizers, safetensors, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_speed_check.py"
