#!/usr/bin/env bash
# test_text_vs_hf.sh: the CPU backend against the HF reference dumps (tools/python/
# make_reference.py), layer by layer, for the exporter's tiny package and the differently shaped
# tiny2 package: every tensor within the named cpu-f32 tolerance (rel err <= 1e-4, see
# tools/cmd_compare.c) and the logits' argmax equal at every position.
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
fail=0
n=0
for model in mobius-tiny-f16 tiny2; do
    for dump in "$G4_FIXTURES/refdumps/$model"/*.npz; do
        n=$((n + 1))
        out=$("$G4CU" compare "$G4_FIXTURES/$model/package" "$dump" 2>&1)
        rc=$?
        rows=$(echo "$out" | grep -c ' ok')
        argmax=$(echo "$out" | grep -o 'argmax [0-9]*/[0-9]*' | head -1)
        agree=${argmax#argmax }
        if [ $rc -ne 0 ] || [ -z "$agree" ] || [ "${agree%/*}" != "${agree#*/}" ]; then
            echo "FAIL $model/$(basename "$dump") (exit $rc, $argmax)"
            echo "$out"
            fail=$((fail + 1))
        else
            echo "ok   $model/$(basename "$dump"): $rows tensors within tolerance, $argmax"
        fi
    done
done
[ $n -ge 6 ] || { echo "FAIL: expected >= 6 dumps, found $n"; fail=$((fail + 1)); }
# A dump the engine does not agree with must fail: perturb one member through numpy-free means
# (compare the tiny package with the other model's dump: shapes differ -> FAIL, exit 1).
"$G4CU" compare "$G4_FIXTURES/mobius-tiny-f16/package" "$G4_FIXTURES/refdumps/tiny2/len7.npz" >/dev/null 2>&1
rc=$?
[ $rc -eq 1 ] || { echo "FAIL: mismatched dump gave exit $rc, expected 1"; fail=$((fail + 1)); }
echo "test_text_vs_hf: $n dumps, $fail failed"
[ $fail -eq 0 ]
