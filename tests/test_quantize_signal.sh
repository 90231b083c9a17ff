#!/usr/bin/env bash
# test_quantize_signal.sh: SIGINT or SIGTERM in the middle of `g4cu quantize` leaves nothing:
# OUT.tmp-<pid> removed, OUT absent, the process ended by that signal (exit 128 + N in bash).
# "In the middle" without a race: the command's stderr is a FIFO whose buffer this script filled
# first, so its first progress line ("quantize: 0/83", written once the work directory holds
# the package's copy) blocks it there until the signal has been sent.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}"
tmp=$(mktemp -d)
trap 'exec 3>&- 4>&- 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
check() { # NAME OK(0/1) [DETAIL]
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1${3:+: $3}"; fails=$((fails + 1)); fi
}

# interrupt SIGNAL: quantize the tiny fixture, send SIGNAL once its work directory exists
interrupt() {
    local sig=$1 out="$tmp/q4-$1" fifo="$tmp/err-$1"
    mkfifo "$fifo"
    exec 3<>"$fifo"                       # (read-write: opening blocks neither side)
    timeout 1 cat /dev/zero >"$fifo" 2>/dev/null # fill the pipe's buffer: the next write blocks
    # (env: a background job of a script starts with SIGINT ignored, which quantize keeps)
    env --default-signal=INT,TERM "$G4CU" quantize "$G4_TINY_PKG" "$out" --threads 1 \
        >"$tmp/out-$sig" 2>"$fifo" &
    local pid=$! work="$out.tmp-$!" seen=1 i
    for i in $(seq 1 500); do # up to 10 s for the package's copy to appear
        if [ -d "$work" ] && [ -e "$work/genai_config.json" ]; then seen=0; break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
    done
    check "$sig: the work directory $(basename "$work") exists mid-run" $seen
    kill -"$sig" "$pid"
    exec 4<"$fifo" 3>&- # the drain below ends when the command's stderr closes
    cat <&4 | tr -d '\0' >"$tmp/err-$sig.txt"
    exec 4<&-
    wait "$pid"
    local rc=$? want ok
    want=$((128 + $(kill -l "$sig")))
    # (each status is taken before the check's arguments run command substitutions)
    [ "$rc" -eq "$want" ]
    ok=$?
    check "$sig: the command ended by $sig (exit $want)" $ok "exit $rc; $(tail -c 300 "$tmp/err-$sig.txt")"
    [ ! -e "$work" ]
    ok=$?
    check "$sig: $(basename "$work") removed" $ok "$(ls "$work" 2>&1 | head -5 | tr '\n' ' ')"
    [ ! -e "$out" ]
    check "$sig: no OUT" $?
    grep -q "removed $work" "$tmp/err-$sig.txt"
    ok=$?
    check "$sig: stderr says what was removed" $ok "$(tail -c 300 "$tmp/err-$sig.txt")"
}

interrupt INT
interrupt TERM

# An uninterrupted run still completes (the watcher thread changes nothing else).
"$G4CU" quantize "$G4_TINY_PKG" "$tmp/q4" --threads 1 >/dev/null 2>"$tmp/err.txt"
rc=$?
[ $rc -eq 0 ] && [ -d "$tmp/q4" ] && [ -z "$(ls -d "$tmp"/q4.tmp-* 2>/dev/null)" ]
ok=$?
check "no signal: exit 0, OUT written, no temporary left" $ok "exit $rc; $(tail -c 300 "$tmp/err.txt")"

echo "test_quantize_signal: $fails failed"
[ $fails -eq 0 ]
