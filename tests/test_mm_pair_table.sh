#!/usr/bin/env bash
# test_mm_pair_table.sh: tools/python/mm_pair_table.py (issue 35: the table of two recipes
# trained side by side in one mm_make, MM_TRAIN_ARGS_B) on two hand-written train.json files
# whose rows are written out by hand in tests/mm_pair_table_check.py; a missing key, a file that
# is not JSON or absent: one line, exit 1. Python 3 standard library only.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
command -v python3 >/dev/null || { echo "test_mm_pair_table: FAIL: no python3" >&2; exit 1; }
exec python3 "$G4_SOURCE_DIR/tests/mm_pair_table_check.py"
