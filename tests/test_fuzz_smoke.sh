#!/usr/bin/env bash
# test_fuzz_smoke.sh: a short run of every libFuzzer target (tests/fuzz/) from the committed
# seeds, so a parser change that crashes on near-valid input fails CI. Builds the targets with
# clang (tests/fuzz/build.sh, about 10 s on 2 cores) into <build dir>/fuzz (or G4_FUZZ_OUT),
# then runs all six at once, each for G4_FUZZ_SMOKE_S seconds (default 20; G4_FUZZ_SMOKE_PAR
# caps how many run at a time): about 35 s in all. Each run first executes every seed, then
# mutates; any crash, leak, UB report, invariant abort or 30 s hang fails the test and prints
# the stack and the input (base64). The long runs (>= 10 min per target) are in
# tests/fuzz/README.md.
# Skips (exit 77, saying why) when clang or its libFuzzer runtime is absent (CI installs both
# through tools/install_deps.sh, so there it runs) and in the sanitizer build (the targets carry
# ASan + UBSan themselves; one run per test command is enough).
set -u
: "${G4CU:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
bdir=$(cd "$(dirname "$G4CU")" && pwd)
if grep -q '^G4_SANITIZE:BOOL=ON' "$bdir/CMakeCache.txt" 2>/dev/null; then
    echo "SKIP test_fuzz_smoke: the sanitizer build; the smoke runs in the plain build"
    exit 77
fi
secs=${G4_FUZZ_SMOKE_S:-20}
out=${G4_FUZZ_OUT:-$bdir/fuzz}
tmp=$(mktemp -d)
log=$tmp/build.log
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
G4_PROTO_DIR="$bdir/proto" bash "$G4_SOURCE_DIR/tests/fuzz/build.sh" "$out" >"$log" 2>&1
rc=$?
if [ $rc -eq 77 ]; then
    echo "SKIP test_fuzz_smoke: $(tail -1 "$log")"
    exit 77
fi
if [ $rc -ne 0 ]; then
    echo "FAIL test_fuzz_smoke: tests/fuzz/build.sh exit $rc:"
    tail -20 "$log"
    exit 1
fi
echo "built the fuzz targets in $(($(date +%s) - t0)) s"

targets=(onnx json npz tokenizer audio image)
par=${G4_FUZZ_SMOKE_PAR:-${#targets[@]}}
run_one() { # target: a fresh corpus from the seeds; -seed fixed so a failure can be rerun
    local t=$1
    mkdir -p "$tmp/corpus_$t" "$tmp/art_$t"
    "$out/fuzz_$t" -seed=1 -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$tmp/art_$t/" "$tmp/corpus_$t" "$out/seeds_$t" \
        >"$tmp/$t.log" 2>&1
    echo $? >"$tmp/$t.rc"
}
for t in "${targets[@]}"; do
    run_one "$t" &
    while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do wait -n; done
done
wait
fail=0
for t in "${targets[@]}"; do
    rc=$(cat "$tmp/$t.rc" 2>/dev/null || echo "?")
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/$t.log" | tail -1)
    if [ "$rc" != 0 ] || [ -z "$execs" ] || grep -qE "^==[0-9]+==ERROR|runtime error:" "$tmp/$t.log"; then
        echo "FAIL fuzz_$t: exit $rc after ${execs:-?} executions (rerun: $out/fuzz_$t -seed=1 ...):"
        grep -E "ERROR|runtime error|deadly signal|SUMMARY|    #[0-9]+ " "$tmp/$t.log" | head -25
        [ -s "$tmp/$t.log" ] || echo "  (no output)"
        for a in "$tmp/art_$t"/*; do
            [ -f "$a" ] && echo "  input (base64): $(head -c 3000 "$a" | base64 -w0)"
        done
        fail=$((fail + 1))
    else
        echo "ok   fuzz_$t: $execs executions in $secs s, corpus $(ls "$tmp/corpus_$t" | wc -l) files"
    fi
done
echo "test_fuzz_smoke: ${#targets[@]} targets, $fail failed, $(($(date +%s) - t0)) s"
[ $fail -eq 0 ]
