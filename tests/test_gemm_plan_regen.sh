#!/usr/bin/env bash
# test_gemm_plan_regen.sh: kernels/gemm_tuned.inc is exactly what tools/python/gemm_plan.py
# makes of the committed prefill sweep (bench/runs/*-xover.json), so the table AUTO follows is
# the measurement's, not a hand edit. Then the script must refuse a row that is not a sweep row.
set -u
src=${G4_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
command -v python3 >/dev/null || { echo "SKIP test_gemm_plan_regen: no python3"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
sweeps=$(ls "$src"/bench/runs/*-xover.json)
sweep=$(echo "$sweeps" | tail -1) # the newest sweep is the table's
if ! python3 "$src/tools/python/gemm_plan.py" "$sweep" >"$tmp/tuned.inc"; then
    echo "FAIL gemm_plan.py failed on $sweep"
    fail=1
elif ! cmp -s "$tmp/tuned.inc" "$src/kernels/gemm_tuned.inc"; then
    echo "FAIL kernels/gemm_tuned.inc is not gemm_plan.py's output for $sweep:"
    diff "$tmp/tuned.inc" "$src/kernels/gemm_tuned.inc" | head -5
    fail=1
fi
printf '{"device": "X, 132 SMs", "rows": [{"op": "gemm_f16_wgmma", "shape": "M=16 N=8 K=8 x", "median_ms": 1}]}\n' >"$tmp/bad.json"
if python3 "$src/tools/python/gemm_plan.py" "$tmp/bad.json" >/dev/null 2>"$tmp/err"; then
    echo "FAIL gemm_plan.py took a row that is not a sweep row"
    fail=1
elif ! grep -q "not a prefill sweep row" "$tmp/err"; then
    echo "FAIL gemm_plan.py's error: $(cat "$tmp/err")"
    fail=1
fi
[ $fail -eq 0 ] && echo "test_gemm_plan_regen: ok ($(grep -c '^{' "$src/kernels/gemm_tuned.inc") entries)"
exit $fail
