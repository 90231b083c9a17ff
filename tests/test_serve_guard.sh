#!/usr/bin/env bash
# test_serve_guard.sh: `g4cu serve`'s guard (tools/serve_guard.c) over plain HTTP on the tiny
# fixture: the API key, Host / Origin, the log line, and the abuse cases of issue 32 with the
# server's RSS against the stated bound. The checks are tests/serve_guard_check.py (Python's
# standard library only; Debian's python3); it prints one line per check and a summary.
set -u
: "${G4CU:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
if "$G4CU" serve 2>&1 | grep -q 'without libmicrohttpd'; then
    echo "test_serve_guard: skipped: g4cu was built without libmicrohttpd"
    exit 77
fi
command -v python3 >/dev/null || { echo "test_serve_guard: FAIL: no python3" >&2; exit 1; }
exec python3 "$G4_SOURCE_DIR/tests/serve_guard_check.py"
