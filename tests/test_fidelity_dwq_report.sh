#!/usr/bin/env bash
# test_fidelity_dwq_report.sh: tools/python/fidelity_report.py's table of the output-KL fits
# (--dwq DIR or LOG..., and the section FIDELITY.md gets) from dwq_fit.py logs as
# tools/gpu/run.sh's fid_dwq writes them (NAME.dwq.log, with the `time` line it adds): a fit
# stopped by --minutes (with the steps' CPU line), one by the validation patience (a codes fit:
# its step lines end in the codes changed), one that ran to --steps without the `time` line, and
# one that died before its first step.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
rep="$G4_SOURCE_DIR/tools/python/fidelity_report.py"
d="$tmp/fid"
mkdir -p "$d"
cat >"$d/q4_dwq.dwq.log" <<'LOG'
dwq_fit: step 1/800 KL 0.008955 0.4 s (0.427 s/step)
dwq_fit: step 375/800 fit KL 0.006926 (mean of the last 25 batches) validation KL 0.007062 118.6 s (0.316 s/step)
dwq_fit: step 378/800 fit KL 0.006774 (mean of the last 3 batches) validation KL 0.007080 120.1 s (0.318 s/step)
dwq_fit: --minutes 2.0 reached after 378/800 steps: stopping
dwq_fit: the steps used 96.1 CPU s in 120.1 s (0.80 cores)
dwq_fit: kept the scales of step 300 of 378 (121.8 s); |log scale change| mean 0.0224, max 0.1908
dwq_fit: fit KL 0.009857 -> 0.005618 (-43.0%); validation KL 0.010265 -> 0.007060 (-31.2%)
dwq_fit: wrote /tmp/g4work/fidelity/proxy/q4_dwq (124 initializers replaced; 143.2 s in all)
dwq_fit: process 150.000 s wall, 140.500 s user, 9.500 s system
LOG
cat >"$d/q4_dwqc.dwq.log" <<'LOG'
dwq_fit: step 250/800 fit KL 0.006000 (mean of the last 25 batches) validation KL 0.006500 90.0 s (0.360 s/step); 12,345 codes changed
dwq_fit: validation KL not below 0.006400 (step 150) for 4 evaluations after 250/800 steps: stopping
dwq_fit: kept the scales of step 150 of 250 (91.0 s); |log scale change| mean 0.0200, max 0.1500; 9,000 of 190,000,000 codes changed
dwq_fit: fit KL 0.009857 -> 0.005000 (-49.3%); validation KL 0.010265 -> 0.006400 (-37.7%)
dwq_fit: process 120.000 s wall, 200.000 s user, 40.000 s system
LOG
cat >"$d/q4_fit_dwq.dwq.log" <<'LOG'
dwq_fit: step 40/40 fit KL 0.000500 (mean of the last 10 batches) validation KL 0.000400 best 30.7 s (0.766 s/step)
dwq_fit: kept the scales of step 40 of 40 (31.0 s); |log scale change| mean 0.0100, max 0.0500
dwq_fit: fit KL 0.000600 -> 0.000500 (-16.7%); validation KL 0.000450 -> 0.000400 (-11.1%)
LOG
cat >"$d/q4_x.dwq.log" <<'LOG'
Traceback (most recent call last):
RuntimeError: CUDA out of memory
dwq_fit: process 12.000 s wall, 10.000 s user, 2.000 s system
LOG

python3 "$rep" --dwq "$d" >"$tmp/sec.md" 2>"$tmp/err"
check "--dwq: exit 0, nothing on stderr" $(($? + $(wc -c <"$tmp/err")))
[ "$(grep -c '^| ' "$tmp/sec.md")" -eq 5 ] && grep -q '^| fit | steps | stopped by |' "$tmp/sec.md"
check "--dwq: the header and exactly 4 rows" $?
grep -qxF '| q4_dwq | 378 | --minutes 2.0 reached | 300 | 0.318 | -31.2% | 0.8 |' "$tmp/sec.md"
check "--dwq: the time-capped fit (last step, its s/step, kept step, the steps' cores)" $?
grep -qxF '| q4_dwqc | 250 | validation KL not below 0.006400 (step 150) for 4 evaluations | 150 | 0.360 | -37.7% | 2.0 |' "$tmp/sec.md"
check "--dwq: the patience stop of a codes fit (the process's cores: no steps line)" $?
grep -qxF '| q4_fit_dwq | 40 | ran to --steps | 40 | 0.766 | -11.1% | - |' "$tmp/sec.md"
check "--dwq: a fit run to --steps, no time line" $?
grep -qxF '| q4_x | - | no step logged (see q4_x.dwq.log) | - | - | - | - |' "$tmp/sec.md"
check "--dwq: a fit that died before its first step" $?

# logs named one by one: only those rows, in the order given
python3 "$rep" --dwq "$d/q4_x.dwq.log" "$d/q4_dwq.dwq.log" >"$tmp/two.md"
[ "$(grep -c '^| q4_' "$tmp/two.md")" -eq 2 ] && grep '^| q4_' "$tmp/two.md" | head -1 | grep -q '^| q4_x |'
check "--dwq LOG LOG: those 2 rows, in that order" $?

# the whole report carries the same table after the method table
echo '{"ctx": 64, "chunks": 2, "scored_tokens": 64, "backend": "cpu", "ppl": 30.0, "ppl_stderr": 1.0}' >"$d/proxy_f16.json"
echo 1000 >"$d/proxy_f16.bytes"
python3 "$rep" "$d" "$tmp/F.md"
check "report: exit 0" $?
[ "$(grep -c '^| q4_' "$tmp/F.md")" -eq 4 ] && grep -q '^The output-KL fits' "$tmp/F.md"
check "report: the fits' section and its 4 rows" $?

rm -f "$d"/*.dwq.log
python3 "$rep" --dwq "$d" >"$tmp/o" 2>"$tmp/e"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/e")" -eq 1 ] && grep -q "no dwq_fit.py log in" "$tmp/e"
check "--dwq without logs: exit 1, one line" $?

finish test_fidelity_dwq_report
