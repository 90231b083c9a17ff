#!/usr/bin/env bash
# test_lmms_shape.sh: lmms-eval's request shapes against `g4cu serve`, every request at once,
# each reply identical to `g4cu eval`'s prediction on the same manifest
# (tools/python/lmms_shape_check.py; the full run with lmms-eval itself is
# tools/lmms_eval_check.sh, whose venv is too big for CI). Python's standard library only.
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
if "$G4CU" serve 2>&1 | grep -q 'without libmicrohttpd'; then
    [ "${CI:-}" = true ] && { echo "test_lmms_shape: FAIL: g4cu was built without libmicrohttpd" >&2; exit 1; }
    echo "test_lmms_shape: skipped: g4cu was built without libmicrohttpd"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 2 images and 3 clips; under AddressSanitizer (its -O0 build runs the towers several times
# slower) 1 image and 2 clips, the one that opens the thought channel among them
quick=() n_items=5
if ldd "$G4CU" 2>/dev/null | grep -q libasan; then
    quick=(--quick) n_items=3
    echo "note: g4cu is built with AddressSanitizer: $n_items items"
fi
out=$(python3 "$G4_SOURCE_DIR/tools/python/lmms_shape_check.py" --g4cu "$G4CU" \
    --fixtures "$G4_FIXTURES" --out "$tmp" "${quick[@]}" 2>&1)
rc=$?
echo "$out"
# 2 checks on the requests + 2 eval runs + one an item + the thought channel: a script that
# died early counts fewer
if [ $rc -ne 0 ] || ! grep -Eq "^lmms_shape: $((n_items + 5)) checks, 0 failed" <<<"$out"; then
    echo "test_lmms_shape: FAIL (exit $rc)" >&2
    exit 1
fi
echo "test_lmms_shape: ok"
