# cli_check.sh: what the ctest shell tests share (sourced, after the script has checked the
# environment it needs): the pass/fail counters and check, a temporary directory $tmp removed at
# exit (a script with more to clean up sets its own trap after sourcing), err1 for the one-line
# user errors, expect (an exit code and one stderr line), same_lines (two files equal), pkg (a
# writable package copy), and the closing summary.
fail=0
pass=0
check() { # check NAME STATUS (0 = ok)
    if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# err1 NAME PATTERN CMD...: CMD exits 1 with exactly one stderr line matching PATTERN (a grep
# basic regex; err1_fixed: a fixed string).
err1_grep() { # GREP-FLAGS NAME PATTERN CMD...
    local flags=$1 name=$2 pat=$3
    shift 3
    "$@" >"$tmp/o" 2>"$tmp/e"
    local rc=$?
    [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/e")" -eq 1 ] && grep $flags -- "$pat" "$tmp/e"
    local ok=$?
    [ $ok -ne 0 ] && { echo "  exit $rc, stderr:"; cat "$tmp/e"; }
    check "$name" $ok
}
err1() { err1_grep -q "$@"; }
err1_fixed() { err1_grep -qF "$@"; }

# expect NAME EXIT PATTERN CMD...: exit code EXIT, one stderr line matching PATTERN (grep -E),
# printed as "ok NAME: <the line>" (the bad-input tables cite these names).
expect() {
    local name=$1 want=$2 pat=$3
    shift 3
    "$@" >"$tmp/stdout" 2>"$tmp/stderr"
    local rc=$? lines
    lines=$(wc -l <"$tmp/stderr")
    if [ $rc -ne "$want" ] || [ "$lines" -ne 1 ] || ! grep -qE -- "$pat" "$tmp/stderr"; then
        echo "FAIL $name: exit $rc, $lines stderr lines; expected exit $want and one line matching '$pat':"
        head -5 "$tmp/stderr"
        fail=$((fail + 1))
    else
        echo "ok   $name: $(cat "$tmp/stderr")"
        pass=$((pass + 1))
    fi
}

# pkg NAME: a writable copy of the tiny package ($G4_TINY_PKG) at $tmp/NAME; prints the path.
pkg() {
    cp -r "$G4_TINY_PKG" "$tmp/$1" && chmod -R u+w "$tmp/$1"
    echo "$tmp/$1"
}

# same_lines NAME FILE1 FILE2: a check that the two files are equal, else their diff printed.
same_lines() {
    diff "$2" "$3" >"$tmp/diff"
    local rc=$?
    [ $rc -eq 0 ] || { echo "  $1: expected < > got"; cat "$tmp/diff"; }
    check "$1" $rc
}

# finish NAME: the summary line; the script's exit status is 0 only when nothing failed.
finish() {
    echo "$1: $((pass + fail)) checks, $fail failed"
    [ "$fail" -eq 0 ]
}
