#!/usr/bin/env bash
# test_text_vs_hf.sh: the CPU backend against the HF reference dumps (tools/python/
# make_reference.py), layer by layer, for the exporter's tiny package and the differently shaped
# tiny2 package. The reference is HF run in float64 (refdumps/<model>/float64/len<S>.npz); each
# tensor's tolerance is derived from HF's own fp32 error on the same case (refdumps/<model>/
# len<S>.npz, `g4cu compare --tol-from`): hf-fp32x8, 8x that error floored at 1e-5 (see
# fidelity/tolerance.c), so the check means the same at any depth, where the fixed cpu-f32 1e-4
# does not. Every tensor within it and the logits' argmax equal at every position.
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "$0")/compare_json.sh" # reads the --json report
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0
for model in mobius-tiny-f16 tiny2; do
    for dump in "$G4_FIXTURES/refdumps/$model"/float64/*.npz; do
        n=$((n + 1))
        case=$(basename "$dump")
        rm -f "$tmp/r.json"
        out=$("$G4CU" compare "$G4_FIXTURES/$model/package" "$dump" \
            --tol-from "$G4_FIXTURES/refdumps/$model/$case" --json "$tmp/r.json" 2>&1)
        rc=$?
        rows=0 total=0 agree=""
        if [ -s "$tmp/r.json" ]; then
            rows=$(cj_ok "$tmp/r.json" hf-fp32x8)
            total=$(cj_total "$tmp/r.json")
            agree=$(cj_argmax "$tmp/r.json")
        fi
        argmax="argmax ${agree:-?}"
        if [ $rc -ne 0 ] || [ -z "$agree" ] || [ "${agree%/*}" != "${agree#*/}" ] ||
            [ "$total" -eq 0 ] || [ "$rows" != "$total" ]; then
            echo "FAIL $model/$case (exit $rc, $rows of ${total:-?} rows ok under hf-fp32x8, $argmax)"
            echo "$out"
            fail=$((fail + 1))
        else
            echo "ok   $model/float64/$case: $rows tensors within hf-fp32x8, $argmax"
        fi
    done
done
[ $n -ge 6 ] || { echo "FAIL: expected >= 6 float64 dumps, found $n"; fail=$((fail + 1)); }
# A dump the engine does not agree with must fail: compare the tiny package with the other
# model's dump (shapes differ -> FAIL, exit 1).
"$G4CU" compare "$G4_FIXTURES/mobius-tiny-f16/package" "$G4_FIXTURES/refdumps/tiny2/len7.npz" >/dev/null 2>&1
rc=$?
[ $rc -eq 1 ] || { echo "FAIL: mismatched dump gave exit $rc, expected 1"; fail=$((fail + 1)); }
echo "test_text_vs_hf: $n dumps, $fail failed"
[ $fail -eq 0 ]
