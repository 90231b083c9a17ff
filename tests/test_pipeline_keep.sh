#!/usr/bin/env bash
# test_pipeline_keep.sh: a later tools/gpu/pipeline.sh start finds what an earlier start's stages
# made (session 33: "build / mm_make" in call 2, then "mm_run" in call 3 on the same machine found
# neither build-gpu/g4cu nor mm_make's manifests: start copied the tree afresh, and both lived in
# the copy). Four starts with one $WORK, in a small tree: the real pipeline.sh, run.sh, env.sh
# and keep_mtimes.py, a carried plan in .carry/mmdata, and at the root a two-file C project that
# run.sh's real build stage builds into build-gpu/g4cu (it prints msg.c's string). run.sh's
# test-only stages (G4_PIPETEST=1) stand in for mm_make / mm_run: pipetest_make lays out $MM_DATA
# as mm_make does and writes a manifest there; pipetest_run runs build-gpu/g4cu and reads the
# manifest and the plan's copy.
#   1. "build / pipetest_make": nothing written into the tree's copy ($WORK/src/.carry/mmdata
#      as carried); 2. "pipetest_run": g4cu runs, the manifest and plan copy are found;
#   3. "build pipetest_run", no source changed: make compiles nothing; a file a stage left in
#      $WORK/src outside build* is gone (the copy is still fresh);
#   4. the same after msg.c changed with a modification time older than the build (an edit made
#      while the earlier build ran, or a skewed clock): msg.c is compiled again, main.c is not,
#      and g4cu prints the new string;
#   5. a start while the earlier plan's stage still runs is refused, a line then written into the
#      tree's pipeline.sh (the next call's tree) is not run by the running group; once the
#      stage ended, a start runs.
# Needs python3, cmake, make and a C compiler (no GPU, no Python packages).
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
for t in python3 cmake make cc gzip; do
    command -v $t >/dev/null || { echo "no $t: skipped"; exit 77; }
done
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
# (a check whose name holds a $(...) takes the status first, r=$?: the substitution resets $?)

tree=$tmp/tree
mkdir -p "$tree/tools/gpu" "$tree/.carry/mmdata"
for f in pipeline.sh run.sh env.sh keep_mtimes.py; do
    [ -f "$G4_SOURCE_DIR/tools/gpu/$f" ] && cp "$G4_SOURCE_DIR/tools/gpu/$f" "$tree/tools/gpu/"
done
cat >"$tree/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(pipetest C)
add_executable(g4cu main.c msg.c)
EOF
printf '#include <stdio.h>\nconst char *msg(void);\nint main(void) { puts(msg()); return 0; }\n' >"$tree/main.c"
printf 'const char *msg(void) { return "one"; }\n' >"$tree/msg.c"
echo '{"id": "plan-1"}' | gzip >"$tree/.carry/mmdata/speech.jsonl.gz"
echo '{"id": "img-1"}' | gzip >"$tree/.carry/mmdata/images.jsonl.gz"
echo '{"seed": 0}' >"$tree/.carry/mmdata/data.json"

export WORK="$tmp/work" OUT="$tmp/out" G4_PREFIX="$tmp/prefix" G4_PIPETEST=1
# call N PLAN: one device call's worth: start PLAN, wait for it (its stages take seconds)
call() {
    (cd "$tree" && bash tools/gpu/pipeline.sh start "$2") >"$tmp/start$1.txt" 2>&1
    (cd "$tree" && bash tools/gpu/pipeline.sh wait 120) >"$tmp/wait$1.txt" 2>&1
    grep -q "pipeline: all stages done" "$tmp/wait$1.txt" || { echo "  call $1: not done:"; tail -5 "$tmp/wait$1.txt"; }
}
log() { cat "$WORK/logs/$1.log" 2>/dev/null; }
built() { grep -o 'Building C object .*' "$WORK/logs/build.out/build.log" 2>/dev/null | sed 's/.*\///' | sort | tr '\n' ' '; }

call 1 "build / pipetest_make"
[ -x "$WORK/src/build-gpu/g4cu" ] && log pipetest_make | grep -qxF "pipetest_make: $WORK/mm/data"
check "call 1: build-gpu/g4cu built, pipetest_make's data in \$WORK/mm/data" $?
[ "$(find "$WORK/src/.carry/mmdata" -mindepth 1 -printf '%f\n' | sort | tr '\n' ' ')" = "data.json images.jsonl.gz speech.jsonl.gz " ]
check "call 1: nothing written into the tree's copy of .carry/mmdata" $?

call 2 "pipetest_run"
log pipetest_run >"$tmp/run2"
grep -qxF "pipetest_run: g4cu says one" "$tmp/run2"
r=$?
check "call 2: the earlier start's build-gpu/g4cu runs ($(grep 'g4cu says' "$tmp/run2"))" $r
grep -qxF 'pipetest_run: manifest {"id": "pipetest"}' "$tmp/run2" &&
    grep -qxF 'pipetest_run: plan {"id": "plan-1"}' "$tmp/run2"
r=$?
check "call 2: the earlier start's manifest and plan copy found ($(grep -c 'No such' "$tmp/run2") missing files)" $r

touch "$WORK/src/stray.txt"
call 3 "build pipetest_run"
[ -z "$(built)" ] && log pipetest_run | grep -qxF "pipetest_run: g4cu says one"
r=$?
check "call 3: no source changed: nothing compiled (compiled: '$(built)')" $r
[ ! -e "$WORK/src/stray.txt" ]
check "call 3: a file a stage left in \$WORK/src is gone (a fresh copy)" $?

printf 'const char *msg(void) { return "two"; }\n' >"$tree/msg.c"
touch -d '2000-01-01 00:00' "$tree/msg.c"
call 4 "build pipetest_run"
[ "$(built)" = "msg.c.o " ]
r=$?
check "call 4: msg.c changed with an old time: only msg.c compiled (compiled: '$(built)')" $r
log pipetest_run | grep -qxF "pipetest_run: g4cu says two"
r=$?
check "call 4: the rebuilt g4cu runs ($(log pipetest_run | grep 'g4cu says'))" $r
grep -q "^keep_mtimes: .* 1 changed, 0 new$" "$tmp/start4.txt"
r=$?
check "call 4: keep_mtimes.py counted one changed file ($(grep keep_mtimes "$tmp/start4.txt"))" $r

# a start while the earlier plan still runs (past the 10 s start gives a group to exit) is
# refused (it would replace the tree under it);
# PIPELINE_FORCE=1 is not tried (it would leave a stage running in the removed folder)
(cd "$tree" && G4_PIPETEST_SLEEP=14 bash tools/gpu/pipeline.sh start pipetest_make) >"$tmp/start5.txt" 2>&1
(cd "$tree" && bash tools/gpu/pipeline.sh start pipetest_run) >"$tmp/start6.txt" 2>"$tmp/start6.err"
r=$?
[ $r -eq 1 ] && [ "$(wc -l <"$tmp/start6.err")" -eq 1 ] && grep -q "^pipeline: an earlier plan still runs in $WORK/src (pids [0-9]" "$tmp/start6.err" &&
    [ "$(cat "$WORK/logs/plan.txt")" = pipetest_make ]
r=$?
check "a start while pipetest_make runs: refused in one line, the plan left alone ($(cat "$tmp/start6.err"))" $r
# meanwhile the device tool replaces the tree (and this pipeline.sh) for the next call: a line
# written into the tree's pipeline.sh in place is never run by the running group, which reads
# its own copy ($WORK/src) as it goes
cp "$tree/tools/gpu/pipeline.sh" "$tmp/pipeline.sh.orig"
echo 'echo "PIPETEST: the tree'"'"'s pipeline.sh ran" >>"$WORK/logs/pipeline.log"' >>"$tree/tools/gpu/pipeline.sh"
n=0
while [ ! -f "$WORK/logs/pipetest_make.done" ] && [ $n -lt 60 ]; do sleep 1; n=$((n + 1)); done
sleep 2
cp "$tmp/pipeline.sh.orig" "$tree/tools/gpu/pipeline.sh"
[ -f "$WORK/logs/pipetest_make.done" ] && ! grep -q "PIPETEST" "$WORK/logs/pipeline.log"
check "the running group never ran a line written into the tree's pipeline.sh" $?
(cd "$tree" && bash tools/gpu/pipeline.sh wait 90) >"$tmp/wait5.txt" 2>&1
call 6 "pipetest_run"
log pipetest_run | grep -qxF "pipetest_run: g4cu says two"
check "after it ended: the next start runs" $?

# run.sh refuses the test-only stages outside the test
G4_PIPETEST=0 OUT="$tmp/o5" bash "$tree/tools/gpu/run.sh" pipetest_run >"$tmp/run5" 2>&1
grep -q "pipetest: test-only stages" "$tmp/run5" && grep -q "stage pipetest_run FAILED" "$tmp/run5"
check "G4_PIPETEST unset: pipetest_run refused" $?

finish test_pipeline_keep
