#!/usr/bin/env bash
# Runs the fuzz targets built by tests/fuzz/build.sh, each for SECONDS, G4_FUZZ_PAR of them at
# a time (default: nproc), niced (the machine is shared), and prints one Markdown row per
# target for tests/fuzz/README.md: target, wall time, executions, exec/s, corpus size, result.
#
#   [G4_FUZZ_PAR=N] tests/fuzz/run_all.sh OUT SECONDS [target ...]
#   e.g. tests/fuzz/run_all.sh build-fuzz 620 audio image        (both at once on 2 cores)
#
# Each run starts from OUT/corpus_<t> (kept between runs, so a second run goes on from what the
# first found) plus OUT/seeds_<t>; its log is OUT/logs/<t>.log, and an input that crashes,
# leaks, hangs (-timeout, 30 s) or runs out of memory is written to OUT/artifacts/<t>-*.
# Exit status 1 when any target reported a finding.
set -uo pipefail
out=${1:?usage: run_all.sh OUT SECONDS [target ...]}
secs=${2:?usage: run_all.sh OUT SECONDS [target ...]}
shift 2
out=$(cd "$out" && pwd) || exit 1
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(onnx json npz tokenizer audio image)
par=${G4_FUZZ_PAR:-$(nproc)}
mkdir -p "$out/logs" "$out/artifacts"

run_one() { # target: writes OUT/logs/<t>.{log,rc,secs}
    local t=$1 t0 rc
    mkdir -p "$out/corpus_$t"
    t0=$(date +%s)
    nice -n 10 "$out/fuzz_$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" \
        "$out/corpus_$t" "$out/seeds_$t" >"$out/logs/$t.log" 2>&1
    rc=$?
    echo $rc >"$out/logs/$t.rc"
    echo $(($(date +%s) - t0)) >"$out/logs/$t.secs"
}
for t in "${targets[@]}"; do
    [ -x "$out/fuzz_$t" ] || { echo "run_all: $out/fuzz_$t not built (tests/fuzz/build.sh)"; exit 1; }
    run_one "$t" &
    while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do wait -n; done
done
wait

found=0
echo "| target | time | execs | exec/s | corpus (files) | corpus (bytes) | result |"
echo "|---|---|---|---|---|---|---|"
for t in "${targets[@]}"; do
    log="$out/logs/$t.log"
    rc=$(cat "$out/logs/$t.rc")
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    files=$(find "$out/corpus_$t" -type f | wc -l)
    bytes=$(du -sb "$out/corpus_$t" | cut -f1)
    if [ "$rc" -ne 0 ] || grep -qE "^==[0-9]+==ERROR|runtime error:|ERROR: libFuzzer|^SUMMARY:" "$log"; then
        result="FINDING (exit $rc, see $log)"
        found=1
    else
        result="no finding"
    fi
    echo "| fuzz_$t | $(cat "$out/logs/$t.secs") s | ${execs:-?} | ${rate:-?} | $files | $bytes | $result |"
done
exit $found
