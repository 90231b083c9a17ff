#!/usr/bin/env bash
# test_ncu_gemv.sh: tools/gpu/ncu_gemv.py (issue 29's Nsight Compute summary of the GEMV kernels)
# on synthetic csv files whose answers are known: tests/ncu_gemv_check.py. Python 3 only.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
command -v python3 >/dev/null || { echo "test_ncu_gemv: FAIL: no python3" >&2; exit 1; }
exec python3 "$G4_SOURCE_DIR/tests/ncu_gemv_check.py"
