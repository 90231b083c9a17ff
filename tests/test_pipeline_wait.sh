#!/usr/bin/env bash
# test_pipeline_wait.sh: tools/gpu/pipeline.sh wait prints the fidelity rows measured so far (the
# proxy's method table of the newest $WORK/logs/*.out/fidelity/FIDELITY.md, which run.sh's
# measurer rebuilds after each row), a line a row, and packs them in $OUT/logs.tar.gz; nothing
# when no stage has written a FIDELITY.md. The FIDELITY.md files are tools/python/
# fidelity_report.py's, from hand-written perplexity JSONs.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
pl="$G4_SOURCE_DIR/tools/gpu/pipeline.sh"
rep="$G4_SOURCE_DIR/tools/python/fidelity_report.py"
w="$tmp/w"
mkdir -p "$w/logs"
echo "build train fidelity_measure" >"$w/logs/plan.txt"
echo "rc=0 seconds=1" >"$w/logs/build.done"
echo "build ok" >"$w/logs/build.log"

# row DIR NAME KLD: a perplexity JSON and decoder bytes as run.sh's fid_ppl writes them
row() {
    echo "{\"ctx\": 64, \"chunks\": 2, \"scored_tokens\": 64, \"backend\": \"cpu\", \"ppl\": 30.5,
\"ppl_stderr\": 1.0, \"kld_mean\": $3, \"kld_mean_stderr\": 0.0001, \"kld_median\": 0.001,
\"kld_p99\": 0.02, \"same_top\": 0.95, \"rms_dp\": 0.01}" >"$1/proxy_$2.json"
    echo 300 >"$1/proxy_$2.bytes"
}

# no FIDELITY.md yet: no rows line
WORK="$w" OUT="$tmp/o0" bash "$pl" wait 0 >"$tmp/out0" 2>&1
grep -q "pipeline: still running" "$tmp/out0" && ! grep -q "fidelity rows" "$tmp/out0"
check "wait before any row: still running, no rows line" $?

# train's measurer: f16 and two rows; an older fidelity_measure folder with one row
t="$w/logs/train.out/fidelity" m="$w/logs/fidelity_measure.out/fidelity"
mkdir -p "$t" "$m"
echo '{"ctx": 64, "chunks": 2, "scored_tokens": 64, "backend": "cpu", "ppl": 30.0, "ppl_stderr": 1.0}' >"$t/proxy_f16.json"
echo 1000 >"$t/proxy_f16.bytes"
cp "$t"/proxy_f16.* "$m/"
row "$t" q4 0.0123
row "$t" q4_keep_auto 0.0051
row "$m" q4 0.0999
python3 "$rep" "$t" "$t/FIDELITY.md" && python3 "$rep" "$m" "$m/FIDELITY.md"
check "fidelity_report.py: both reports written" $?
touch -d '2026-01-01 00:00' "$m/FIDELITY.md"
WORK="$w" OUT="$tmp/o1" bash "$pl" wait 0 >"$tmp/out1" 2>&1
grep -qxF "fidelity rows so far (train.out/fidelity/FIDELITY.md):" "$tmp/out1"
check "wait: names the newest FIDELITY.md (train's)" $?
[ "$(sed -n '/^fidelity rows so far/,$p' "$tmp/out1" | grep -c '^| ')" -eq 4 ]
check "wait: the header and exactly 3 rows (f16, q4, q4_keep_auto)" $?
grep -q '^| q4 | 300 | 0.300 | 30.5000 +/- 1.0000 | 0.01230 +/- 0.00010 |' "$tmp/out1" &&
    grep -q '^| q4_keep_auto | .* | 0.00510 +/- 0.00010 |' "$tmp/out1" && ! grep -q '0.09990' "$tmp/out1"
check "wait: train's values, not the older folder's" $?
tar -tzf "$tmp/o1/logs.tar.gz" | grep -qx "logs/train.out/fidelity/FIDELITY.md"
check "wait: logs.tar.gz carries train's FIDELITY.md" $?

# fidelity_measure's report newer: its rows
touch -d '2026-01-01 00:00' "$t/FIDELITY.md"
touch "$m/FIDELITY.md"
WORK="$w" OUT="$tmp/o2" bash "$pl" wait 0 >"$tmp/out2" 2>&1
grep -qxF "fidelity rows so far (fidelity_measure.out/fidelity/FIDELITY.md):" "$tmp/out2" &&
    [ "$(sed -n '/^fidelity rows so far/,$p' "$tmp/out2" | grep -c '^| ')" -eq 3 ] &&
    grep -q '^| q4 | .* | 0.09990 +/- 0.00010 |' "$tmp/out2"
check "wait: the newer fidelity_measure report, its header and 2 rows" $?

finish test_pipeline_wait
