#!/usr/bin/env bash
# test_quant_calib.sh: `g4cu quantize`'s calibration length by run (issue 33), on the tiny trained
# fixture (tests/fixtures/fidelity-tiny) and its calib.txt. --calib-tokens / --calib-ctx not
# given: the imatrix / X^T X runs (--method gptq, --imatrix, ...) read 16,384 tokens in windows
# of 512, --keep-auto's sensitivity ranking 256 tokens; given: every run uses them. Each count is
# read from the report line and compared with the count expected, not a ratio:
#   1. the defaults on calib.txt (fewer than 16,384 tokens): gptq and imatrix take all of its
#      tokens (the count `g4cu tokenize --bos` gives), in windows of 512, and say that the text
#      ran out before the default;
#   2. the defaults on a text of more than 16,384 tokens (calib.txt 12 times): gptq takes exactly
#      16,384 in windows of 512, while --keep-auto in the same run ranks on 256;
#   3. given values win: --calib-tokens 300 (one sequence: shorter than the 512 window),
#      --calib-tokens 300 --calib-ctx 64, --calib-ctx 100 alone, --calib-tokens 64 with
#      --keep-auto (both runs on 64), --calib-tokens past the text (the "asked" note);
#   4. bad values: one-line errors, nothing written.
# ~25 s of the ~40 s (2 threads, RelWithDebInfo) are part 2's 16,384-token forward and 256-token
# ranking.
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
fx="$G4_FIXTURES/fidelity-tiny"
pkg="$fx/package"

# ntok FILE: the tokens of FILE with <bos> first, from `g4cu tokenize` (not quantize's code path)
ntok() { "$G4CU" tokenize "$pkg" --bos --json - <"$1" | sed -E 's/.*"ids":\[([^]]*)\].*/\1/' | tr ',' '\n' | wc -l; }
# has NAME FILE LINE: FILE holds LINE exactly (a whole line, fixed string)
has() {
    grep -qxF -- "$3" "$2"
    local ok=$?
    [ $ok -ne 0 ] && { echo "  $1: no line '$3' in:"; cat "$2"; }
    check "$1" $ok
}
# q NAME ARGS...: quantize the fixture into $tmp/NAME, its report in $tmp/NAME.txt
q() {
    local name=$1
    shift
    "$G4CU" quantize "$pkg" "$tmp/$name" --threads 2 "$@" >"$tmp/$name.txt" 2>"$tmp/$name.err"
    check "quantize $name: exit 0" $?
}

n=$(ntok "$fx/calib.txt")
[ "$n" -gt 512 ] && [ "$n" -lt 16384 ]
check "calib.txt: more tokens than one window, fewer than the default ($n)" $?
short="(all the text gives: fewer than the default 16384)"

# 1. the defaults on a short text: all of it, in windows of 512
q gptq --method gptq --calib "$fx/calib.txt"
has "gptq, defaults: all $n tokens in windows of 512" "$tmp/gptq.txt" \
    "gptq: X^T X of 83 linears from $n tokens $short in windows of 512 of $fx/calib.txt"
# (G4_IMATRIX_RANK=0: the importance run alone, without the directions' 7 s; the X^T X run reads
# the same tokens and windows, test_perplexity.sh)
G4_IMATRIX_RANK=0 q imatrix --imatrix --calib "$fx/calib.txt"
has "--imatrix, defaults: all $n tokens in windows of 512" "$tmp/imatrix.txt" \
    "imatrix: activation importance of 83 linears from $n tokens $short in windows of 512 of $fx/calib.txt"

# 2. the defaults on a long text: 16,384 tokens in windows of 512; the ranking on 256
for _ in 1 2 3 4 5 6 7 8 9 10 11 12; do cat "$fx/calib.txt"; done >"$tmp/long.txt"
nl=$(ntok "$tmp/long.txt")
[ "$nl" -gt 16384 ]
check "long.txt: more tokens than the default ($nl)" $?
q d16k --method gptq --keep-auto 20000 --calib "$tmp/long.txt"
grep -qxE "gptq: X\^T X of [0-9]+ linears from 16384 tokens in windows of 512 of $tmp/long.txt" "$tmp/d16k.txt"
check "gptq + --keep-auto, defaults: X^T X from 16384 tokens in windows of 512" $?
grep -qE "^keep-auto: [0-9]+ linears kept fp16 for [0-9]+ of 20000 extra bytes \(sensitivity on 256 tokens of $tmp/long.txt\):$" "$tmp/d16k.txt"
check "gptq + --keep-auto, defaults: the ranking on 256 tokens" $?

# 3. given values are every run's
q t300 --method gptq --calib "$fx/calib.txt" --calib-tokens 300
has "--calib-tokens 300: 300 tokens, one sequence (the 512 window holds them)" "$tmp/t300.txt" \
    "gptq: X^T X of 83 linears from 300 tokens in one sequence of $fx/calib.txt"
q t300w --method gptq --calib "$fx/calib.txt" --calib-tokens 300 --calib-ctx 64
has "--calib-tokens 300 --calib-ctx 64" "$tmp/t300w.txt" \
    "gptq: X^T X of 83 linears from 300 tokens in windows of 64 of $fx/calib.txt"
q w100 --method fit --calib "$fx/calib.txt" --calib-ctx 100
has "--calib-ctx 100 alone: the default tokens in windows of 100" "$tmp/w100.txt" \
    "fit: X^T X of 83 linears from $n tokens $short in windows of 100 of $fx/calib.txt"
q ka64 --method gptq_imx --keep-auto 20000 --calib "$fx/calib.txt" --calib-tokens 64
grep -qxE "gptq_imx: X\^T X of [0-9]+ linears from 64 tokens in one sequence of $fx/calib.txt" "$tmp/ka64.txt" &&
    grep -qE "^keep-auto: [0-9]+ linears kept fp16 for [0-9]+ of 20000 extra bytes \(sensitivity on 64 tokens of " "$tmp/ka64.txt"
check "--calib-tokens 64 with --keep-auto: both runs on 64" $?
q big --method gptq --calib "$fx/calib.txt" --calib-tokens 20000
has "--calib-tokens past the text: all of it, 'asked'" "$tmp/big.txt" \
    "gptq: X^T X of 83 linears from $n tokens (all the text gives: fewer than the asked 20000) in windows of 512 of $fx/calib.txt"

# 4. bad values: one line each, nothing written
for v in 0 4 1048577 64x -8; do
    err1_fixed "--calib-tokens $v" "--calib-tokens expects an integer in [8, 1048576], got '$v'" \
        "$G4CU" quantize "$pkg" "$tmp/x" --method gptq --calib "$fx/calib.txt" --calib-tokens "$v"
done
err1_fixed "--calib-ctx 4" "--calib-ctx expects an integer in [8, 1048576], got '4'" \
    "$G4CU" quantize "$pkg" "$tmp/x" --method gptq --calib "$fx/calib.txt" --calib-ctx 4
err1 "--calib-ctx with --keep-auto alone" "--calib-ctx needs --method imatrix, gptq, fit or gptq_imx" \
    "$G4CU" quantize "$pkg" "$tmp/x" --keep-auto 1000 --calib "$fx/calib.txt" --calib-ctx 64
[ ! -e "$tmp/x" ]
check "bad values: nothing written" $?
finish test_quant_calib
