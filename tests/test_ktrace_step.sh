#!/usr/bin/env bash
# test_ktrace_step.sh: tools/python/ktrace_step.py (the decode-step trace analysis of issue 30) on
# a synthetic trace whose answers are known by construction: tests/ktrace_step_check.py (steps,
# warm-up, kernel counts, in-situ durations, gaps, bubbles and critical-path time, the layer
# period, the eager split). Python 3 standard library only.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
command -v python3 >/dev/null || { echo "test_ktrace_step: FAIL: no python3" >&2; exit 1; }
exec python3 "$G4_SOURCE_DIR/tests/ktrace_step_check.py"
