#!/usr/bin/env bash
# test_linear_error_cli.sh: `g4cu compare PKG_F16 PKG_Q4... --linear-error --calib TEXT` on the
# tiny trained fixture (the numbers themselves: tests/test_linear_error.c): the files it writes
# (TSV: a header and exactly the 83 quantized linears; JSON: 83 linears and a summary per
# package; Markdown; both SVGs), the terminal summary, tools/python/fidelity_report.py's section
# from the JSON, and the one-line errors: no --calib,
# --calib without --linear-error, an empty calibration text, a Q4 reference, another model, a
# package that does not exist, more than one reference alone.
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
fx="$G4_FIXTURES/fidelity-tiny"
ref="$fx/package"

"$G4CU" quantize "$ref" "$tmp/q4" --threads 2 >/dev/null 2>&1
check "quantize q4" $?
"$G4CU" quantize "$ref" "$tmp/q4_rtn" --method rtn --threads 2 >/dev/null 2>&1
check "quantize q4_rtn" $?

"$G4CU" compare "$ref" "$tmp/q4" "$tmp/q4_rtn" --linear-error --calib "$fx/calib.txt" \
    --calib-tokens 64 --threads 2 --tsv "$tmp/e.tsv" --json "$tmp/e.json" --md "$tmp/e.md" \
    --svg "$tmp/e.svg" --svg-kind "$tmp/k.svg" >"$tmp/out" 2>"$tmp/err"
check "compare --linear-error: exit 0" $?
[ "$(wc -l <"$tmp/e.tsv")" -eq 84 ] && head -1 "$tmp/e.tsv" | grep -q "^name	kind	layer	K	N	e_q4	e_q4_rtn	ratio_q4_rtn$"
check "TSV: the header and 83 linears" $?
[ "$(grep -c '"kind":' "$tmp/e.json")" -eq 83 ] && grep -q '"calib_tokens":	64' "$tmp/e.json"
check "JSON: 83 linears, 64 calibration tokens" $?
grep -q "^| q4_rtn | 83 | 0 |" "$tmp/e.md" && grep -q "^| lm_head.weight_t | lm_head | -1 | 64 | 1024 |" "$tmp/e.md"
check "Markdown: the summary and the lm_head's row" $?
grep -q "</svg>" "$tmp/e.svg" && [ "$(grep -c ": e in each layer" "$tmp/k.svg")" -eq 10 ]
check "SVGs: the per-layer chart, and one panel per kind (10)" $?
grep -q "^linear error: 83 decoder linears of $ref, 64 calibration tokens" "$tmp/out"
check "terminal summary" $?
# the fidelity report's section from the JSON (tools/python/fidelity_report.py, standard library)
if command -v python3 >/dev/null; then
    python3 "$G4_SOURCE_DIR/tools/python/fidelity_report.py" --linerr "$tmp/e.json" >"$tmp/sec.md"
    check "fidelity_report.py --linerr: exit 0" $?
    [ "$(grep -c "^| q4_rtn | 0 | " "$tmp/sec.md")" -eq 1 ] &&
        [ "$(sed -n '/^By kind/,/^By layer/p' "$tmp/sec.md" | grep -c '^| [a-z_]* | [0-9.]* |$')" -eq 10 ] &&
        [ "$(sed -n '/^By layer/,/^The /p' "$tmp/sec.md" | grep -c '^| -\?[0-9]* | [0-9.]* |$')" -eq 11 ]
    check "fidelity_report.py --linerr: q4_rtn's row, 10 kinds, 10 layers and lm_head" $?
else
    echo "(no python3: fidelity_report.py's section not checked)"
fi

printf '' >"$tmp/empty.txt"
err1 "no --calib" "--linear-error needs --calib TEXT" \
    "$G4CU" compare "$ref" "$tmp/q4" --linear-error
err1 "--calib without --linear-error" "need --linear-error" \
    "$G4CU" compare "$ref" "$tmp/q4" --calib "$fx/calib.txt" --ids 2,3
err1 "only the reference" "takes PKG_F16 and 1 to 64 Q4 packages" \
    "$G4CU" compare "$ref" --linear-error --calib "$fx/calib.txt"
err1 "empty calibration text" "empty.txt.*gives only 1 tokens (at least 8 needed)" \
    "$G4CU" compare "$ref" "$tmp/q4" --linear-error --calib "$tmp/empty.txt"
err1 "Q4 reference" "83 of 83 decoder linears are Q4: the reference must be the f16" \
    "$G4CU" compare "$tmp/q4" "$tmp/q4_rtn" --linear-error --calib "$fx/calib.txt" --tokenizer "$ref"
err1 "another model" "are different models" \
    "$G4CU" compare "$ref" "$G4_FIXTURES/tiny2/package" --linear-error --calib "$fx/calib.txt"
err1 "a package that does not exist" "$tmp/none" \
    "$G4CU" compare "$ref" "$tmp/q4" "$tmp/none" --linear-error --calib "$fx/calib.txt"
finish test_linear_error_cli
