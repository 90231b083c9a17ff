#!/usr/bin/env bash
# test_quant_ort.sh: every `g4cu quantize --method` writes plain MatMulNBits that onnxruntime
# (CPU provider, PyPI, pinned in tools/python/requirements-ort.txt) loads unchanged, and whose
# logits on the tiny trained fixture equal g4cu's: tools/python/ort_logits_check.py runs the
# package's embedding + decoder graphs on 24 ids (past the sliding window of 16) and compares
# with `g4cu logits`.
#
# Tolerances (the fixture's logits RMS is ~4): onnxruntime keeps fp16 activations, g4cu's CPU
# backend fp32. Measured (onnxruntime 1.31.1): f16 package RMS 0.0024, max 0.0095; the six Q4
# packages RMS 0.0022-0.0034, max 0.011-0.018 (gptq_imx the largest), top-1 agreement 0.96-1
# (one near-tie in 24).
# (--equalize: kquant_eq, gptq_imx_eq and the folds alone in f16; gptq_cv, G4_GPTQ_DAMP=cv:
# the same budgets.)
# Budgets: RMS 0.01, max 0.05 (3x), top-1 >= 0.9; and ours within 0.1 x the distance from
# onnxruntime's logits of that package to g4cu's logits of the f16 package (0.26-0.28: the
# 4-bit weights move them; a wrong nibble, zero point or scale lands near 1x, ours sit at 0.012).
# The interpreter: $G4_ORT_PYTHON, else the venv tools/install_deps.sh makes (.tools/ort-venv);
# without it (or without onnxruntime in it) the test skips (77) saying why.
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
py=${G4_ORT_PYTHON:-$G4_SOURCE_DIR/.tools/ort-venv/bin/python}
if [ ! -x "$py" ] || ! "$py" -c 'import onnxruntime, numpy' 2>/dev/null; then
    echo "test_quant_ort: skipped: no onnxruntime at $py (run tools/install_deps.sh)"
    exit 77
fi
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
fx="$G4_FIXTURES/fidelity-tiny"
chk="$G4_SOURCE_DIR/tools/python/ort_logits_check.py"
ids=2,412,97,13,655,301,88,902,45,517,230,760,19,384,611,150,73,998,266,431,809,57,340,705

"$G4CU" logits "$fx/package" --ids "$ids" --out "$tmp/f16.npy" >/dev/null 2>&1
check "g4cu logits on the f16 package" $?
"$py" "$chk" "$fx/package" "$ids" "$tmp/f16.npy" --rms 0.01 --max 0.05
check "onnxruntime vs g4cu on the f16 package" $?

n=0
# imatrix_r4: imatrix with the inputs' covariance's 4 leading directions (G4_IMATRIX_RANK=4);
# *_eq: with --equalize (the norms the scales fold into rewritten)
# gptq_cv: gptq with its damping by held-out rows (G4_GPTQ_DAMP=cv)
for m in kquant rtn imatrix imatrix_r4 gptq gptq_cv fit gptq_imx kquant_eq gptq_imx_eq; do
    calib=() rank=0 eq=() damp=
    [ $m = kquant ] || [ $m = rtn ] || calib=(--calib "$fx/calib.txt" --calib-tokens 64)
    [ $m = imatrix_r4 ] && rank=4
    [ $m = gptq_cv ] && damp=cv
    [ "${m%_eq}" != $m ] && eq=(--equalize)
    method=${m%_r4}
    method=${method%_cv}
    G4_GPTQ_DAMP=$damp G4_IMATRIX_RANK=$rank "$G4CU" quantize "$fx/package" "$tmp/$m" --method "${method%_eq}" "${calib[@]}" \
        "${eq[@]}" --threads 2 >"$tmp/$m.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || cat "$tmp/$m.log"
    check "quantize --method $m: exit 0" $rc
    "$G4CU" logits "$tmp/$m" --ids "$ids" --out "$tmp/$m.npy" >/dev/null 2>&1
    check "g4cu logits --method $m" $?
    "$py" "$chk" "$tmp/$m" "$ids" "$tmp/$m.npy" --rms 0.01 --max 0.05 --far "$tmp/f16.npy" --far-ratio 0.1
    check "onnxruntime vs g4cu on --method $m" $?
    n=$((n + 1))
done
[ $n -eq 10 ]
check "six methods, imatrix_r4, gptq_cv and two with --equalize run" $?
# --equalize's folds alone (G4_EQUALIZE_F16=1, alpha 1: fp16 linears scaled, norms folded):
# onnxruntime's logits of it equal g4cu's, and both the f16 package's (test_quant_equalize.sh)
G4_EQUALIZE_F16=1 G4_EQUALIZE_ALPHA=1 "$G4CU" quantize "$fx/package" "$tmp/f16eq" --equalize \
    --calib "$fx/calib.txt" --calib-tokens 64 --threads 2 >"$tmp/f16eq.log" 2>&1
check "quantize --equalize, f16 mode" $?
"$G4CU" logits "$tmp/f16eq" --ids "$ids" --out "$tmp/f16eq.npy" >/dev/null 2>&1
check "g4cu logits of the f16 fold" $?
"$py" "$chk" "$tmp/f16eq" "$ids" "$tmp/f16eq.npy" --rms 0.01 --max 0.05
check "onnxruntime vs g4cu on the f16 fold" $?
"$py" "$chk" "$tmp/f16eq" "$ids" "$tmp/f16.npy" --rms 0.01 --max 0.05
check "onnxruntime's logits of the f16 fold vs g4cu's of the f16 package" $?
echo "onnxruntime $("$py" -c 'import onnxruntime; print(onnxruntime.__version__)')"
finish test_quant_ort
