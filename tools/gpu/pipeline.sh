#!/usr/bin/env bash
# One GPU session as a detached pipeline that outlives each device call, so a 25-minute batch
# can run under calls of at most 10 minutes (the machine stays warm ~30 s between calls):
#
#   bash tools/gpu/pipeline.sh start [PLAN]   copy the tree to $WORK/src, start PLAN detached
#   bash tools/gpu/pipeline.sh wait SECONDS    follow it for up to SECONDS, then pack the logs
#
# Each stage of tools/gpu/run.sh runs as `bash tools/gpu/run.sh STAGE` inside $WORK/src with
# its output in $WORK/logs/STAGE.log (its $OUT: $WORK/logs/STAGE.out); `wait` prints each
# finished stage's tail and the fidelity rows measured so far (the newest
# $WORK/logs/*.out/fidelity/FIDELITY.md: run.sh's train stage measures each package as it is
# written) and packs $WORK/logs into $OUT/logs.tar.gz (the device tool brings back at most 8
# files).
# PLAN (default below) is a list of groups separated by '/': the stages of one group run one
# after another; the groups run side by side, and a group may wait for another group's
# stage with `after:STAGE`.
#
# A later call's `start` (same warm machine) finds what an earlier call's stages made: $WORK
# stays (the machine's /tmp lives while it is warm), $WORK/src is copied afresh but keeps the
# earlier copy's build folders (refresh_src: build-gpu, rebuilt only where sources changed), and
# run.sh writes every stage's products under $WORK, never into $WORK/src (mm_make's data in
# $WORK/mm/data, fidelity_make's corpus in $WORK/fidelity/corpus). So "build / mm_make" in one
# call and "mm_run" in the next work. $WORK/logs is new each start (the earlier start's stage
# logs and $OUT folders go: bring them back with `wait` first).
set -uo pipefail
WORK=${WORK:-/tmp/g4work}
export WORK # (run.sh's stages read it)
OUT=${OUT:-/tmp/g4out}
mkdir -p "$WORK/logs" "$OUT"
cmd=${1:-}
shift || true

stage_done() { [ -f "$WORK/logs/$1.done" ]; }

# running: " PID" for each process still alive of the earlier start's groups
# ($WORK/logs/groups.pid) and of run.sh's detached stages ($WORK/*.pid, bg_start)
running() {
    local f p
    for f in "$WORK/logs/groups.pid" "$WORK"/*.pid; do
        [ -f "$f" ] || continue
        while read -r p; do
            [ -n "$p" ] && kill -0 "$p" 2>/dev/null && printf ' %s' "$p"
        done <"$f"
    done
}

# refresh_src: $WORK/src becomes a fresh copy of this tree (no build*, no .git: what a stage left
# in the earlier copy is gone), except the earlier copy's top-level build* folders (run.sh's
# build-gpu), which move into the new copy, so a later call's stages find the build and cmake
# rebuilds only what changed. tools/gpu/keep_mtimes.py sets the copy's times from its bytes (a
# file as before keeps the time the build saw, a changed one gets now): the carried times can
# be older than the build's objects (an edit made while the earlier build ran). Without python3
# every file gets now (a full rebuild, never a stale one).
refresh_src() {
    local new="$WORK/src.new" b
    rm -rf "$new" && mkdir -p "$new" || return 1
    tar --exclude=./build\* --exclude=./.git -cf - . | tar -xf - -C "$new" || return 1
    if [ -d "$WORK/src" ]; then
        if ! python3 tools/gpu/keep_mtimes.py "$WORK/src" "$new"; then
            echo "pipeline: keep_mtimes.py failed: every file counts as changed"
            find "$new" -type f -exec touch {} +
        fi
        for b in "$WORK"/src/build*; do
            [ -d "$b" ] && [ ! -L "$b" ] && mv "$b" "$new/"
        done
    fi
    rm -rf "$WORK/src" && mv "$new" "$WORK/src"
}

run_group() { # stages of one group, in order
    for s in "$@"; do
        case "$s" in
        after:*)
            local dep=${s#after:} n=0
            while ! stage_done "$dep" && [ $n -lt 3000 ]; do sleep 2; n=$((n + 2)); done
            ;;
        *)
            local t0
            t0=$(date +%s)
            echo "[$(date +%T)] start $s" >>"$WORK/logs/pipeline.log"
            (cd "$WORK/src" && OUT="$WORK/logs/$s.out" bash tools/gpu/run.sh "$s") \
                >"$WORK/logs/$s.log" 2>&1
            echo "rc=$? seconds=$(($(date +%s) - t0))" >"$WORK/logs/$s.done"
            echo "[$(date +%T)] done $s $(cat "$WORK/logs/$s.done")" >>"$WORK/logs/pipeline.log"
            ;;
        esac
    done
}

case "$cmd" in
start)
    plan=${1:-"build tests tiny engine after:train kernels after:e2b_make e2b_run fidelity_measure / after:build e2b_make / after:build train"}
    # the earlier plan's groups (and run.sh's detached mm_bg / fidelity_bg stages) run in
    # $WORK/src, which refresh_src replaces: a start under them would pull the tree and the
    # build from under their next step. PIPELINE_FORCE=1 starts anyway (a stage that hangs).
    # (a group lives a moment past its last .done: `wait` may return first; give it 10 s)
    busy=$(running) n=0
    while [ -n "$busy" ] && [ $n -lt 10 ]; do sleep 1; n=$((n + 1)); busy=$(running); done
    if [ -n "$busy" ] && [ "${PIPELINE_FORCE:-0}" != 1 ]; then
        echo "pipeline: an earlier plan still runs in $WORK/src (pids$busy): wait for it, or PIPELINE_FORCE=1" >&2
        exit 1
    fi
    refresh_src || { echo "pipeline: could not copy the tree to $WORK/src" >&2; exit 1; }
    # a fresh log folder: an earlier plan's .done files would make `wait` return at once and
    # an `after:` dependency pass before its stage ran
    rm -rf "$WORK/logs" && mkdir -p "$WORK/logs"
    echo "$plan" >"$WORK/logs/plan.txt"
    # the .deb prefix and the wheels, once, before the groups fork
    (cd "$WORK/src" && source tools/gpu/env.sh && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv) \
        >"$WORK/logs/env.log" 2>&1
    IFS='/' read -r -a groups <<<"$plan"
    for g in "${groups[@]}"; do
        # shellcheck disable=SC2086
        # the groups run the copy's pipeline.sh: bash reads a script as it goes, and the device
        # tool replaces the tree's (this file) at each call, under a group still running
        setsid nohup bash "$WORK/src/tools/gpu/pipeline.sh" group $g >>"$WORK/logs/pipeline.log" 2>&1 </dev/null &
        echo $! >>"$WORK/logs/groups.pid"
    done
    echo "pipeline started: $plan"
    ;;
group)
    run_group "$@"
    ;;
wait)
    limit=${1:-540}
    t0=$(date +%s)
    seen=" "
    while :; do
        for f in "$WORK"/logs/*.done; do
            [ -f "$f" ] || continue
            s=$(basename "$f" .done)
            case "$seen" in *" $s "*) continue ;; esac
            seen="$seen$s "
            echo "=== $s: $(cat "$f")"
            tail -n 25 "$WORK/logs/$s.log" | cut -c1-220
        done
        all=1
        for s in $(tr '/' ' ' <"$WORK/logs/plan.txt"); do
            case "$s" in after:*) continue ;; esac
            stage_done "$s" || all=0
        done
        [ $all = 1 ] && { echo "pipeline: all stages done"; break; }
        [ $(($(date +%s) - t0)) -ge "$limit" ] && { echo "pipeline: still running:"; tail -n 5 "$WORK/logs/pipeline.log"; break; }
        sleep 5
    done
    # the fidelity rows measured so far (run.sh's measurer rebuilds a stage's
    # $OUT/fidelity/FIDELITY.md after each row; the newest one), a line a row
    md=
    for f in "$WORK"/logs/*.out/fidelity/FIDELITY.md; do
        [ -f "$f" ] && { [ -z "$md" ] || [ "$f" -nt "$md" ]; } && md=$f
    done
    if [ -n "$md" ]; then
        echo "fidelity rows so far (${md#"$WORK"/logs/}):"
        sed -n '/^| variant |/,/^$/p' "$md" | grep '^| ' | grep -v '^|---' | cut -c1-200
    fi
    tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs 2>/dev/null
    ls -la "$OUT"
    ;;
*)
    echo "usage: $0 start [PLAN] | wait SECONDS" >&2
    exit 2
    ;;
esac
