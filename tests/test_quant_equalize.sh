#!/usr/bin/env bash
# test_quant_equalize.sh: `g4cu quantize --equalize` (quant/equalize.h) on the tiny trained fixture.
#
# 1. The folds leave the f16 function unchanged: G4_EQUALIZE_F16=1 writes the groups' linears
#    fp16 (scaled, not quantized) beside the folded norms; at G4_EQUALIZE_ALPHA=1 (the largest
#    scales, up to 16x) `g4cu compare` of the f16 package against it gives a mean logits KL
#    <= 1e-6 nats over 24 positions (measured 9.4e-8: fp16 rounding of s W; with down_proj's
#    fold into up_proj's columns left out it was 0.26), every top-1 the same.
# 2. Every group got an alpha: the report's group lines, counted by kind, equal the groups the
#    package's shapes give (3-linear q|k|v: the layers with a k_proj; 1-linear q|k|v: the
#    others; gate|up and down: one a layer; the lm_head), and the summary line says as many.
# 3. The searched package (kquant, 256 tokens): the norms it says it rewrote are exactly the
#    fold norms whose bytes differ from the f16 package's; the other norms (post_*, q/k_norm)
#    are unchanged; its logits run. The f16 package's files are unchanged (sha256).
# 4. alpha 0 everywhere (G4_EQUALIZE_ALPHA=0) is the method byte for byte: kquant and imatrix
#    decoder data equal to the packages without --equalize.
# 5. Bad uses: one-line errors (no --calib, with --keep, a G4_EQUALIZE_ALPHA off the grid).
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
fx="$G4_FIXTURES/fidelity-tiny"
ids=2,412,97,13,655,301,88,902,45,517,230,760,19,384,611,150,73,998,266,431,809,57,340,705
sums() { (cd "$fx/package" && find . -type f | sort | xargs sha256sum); }
before=$(sums)

# 1. the fold alone
G4_EQUALIZE_F16=1 G4_EQUALIZE_ALPHA=1 "$G4CU" quantize "$fx/package" "$tmp/f16eq" --equalize \
    --calib "$fx/calib.txt" --calib-tokens 64 --threads 2 >"$tmp/f16eq.log" 2>&1
check "quantize --equalize (f16 mode, alpha 1): exit 0" $?
grep -q "0 linears quantized to 4 bits" "$tmp/f16eq.log"
check "f16 mode: nothing quantized" $?
"$G4CU" compare "$fx/package" "$tmp/f16eq" --ids "$ids" --max-kl 1e-6 >"$tmp/cmp.txt" 2>&1
check "f16 mode: logits KL <= 1e-6 against the f16 package" $?
grep -q "top-1 agreement 24/24" "$tmp/cmp.txt"
check "f16 mode: every top-1 the same" $?
grep "logits KL" "$tmp/cmp.txt"

# 2. the groups from the package's shapes
"$G4CU" inspect "$fx/package" >"$tmp/inspect.txt" 2>&1
n_layers=$(grep -c "^ *decoder\.model\.layers\.[0-9]*\.mlp\.down_proj\.weight_t " "$tmp/inspect.txt")
n_kv=$(grep -c "^ *decoder\.model\.layers\.[0-9]*\.self_attn\.k_proj\.weight_t " "$tmp/inspect.txt")
n_lm=$(grep -c "^ *decoder\.lm_head\.weight_t " "$tmp/inspect.txt")
[ "$n_layers" -gt 0 ] && [ "$n_kv" -gt 0 ] && [ "$n_lm" -eq 1 ]
check "the package lists its linears ($n_layers layers, $n_kv with k_proj)" $?
log="$tmp/f16eq.log"
[ "$(grep -c 'q|k|v (K [0-9]*, 3 linears)' "$log")" -eq "$n_kv" ]
check "a 3-linear q|k|v group per KV-owning layer ($n_kv)" $?
[ "$(grep -c 'q|k|v (K [0-9]*, 1 linear)' "$log")" -eq $((n_layers - n_kv)) ]
check "a q-only group per KV-shared layer ($((n_layers - n_kv)))" $?
[ "$(grep -c 'gate|up (K' "$log")" -eq "$n_layers" ] && [ "$(grep -c ' down (K' "$log")" -eq "$n_layers" ]
check "a gate|up and a down group per layer" $?
[ "$(grep -c '^equalize: lm_head (K' "$log")" -eq 1 ]
check "an lm_head group" $?
groups=$((3 * n_layers + 1))
grep -q "^equalize: $groups groups (q|k|v $n_layers, gate|up $n_layers, down $n_layers, lm_head 1), $((2 * n_layers + 1)) norms rewritten" "$log"
check "the summary: $groups groups, every fold norm rewritten at alpha 1" $?

# 3. the searched package
"$G4CU" quantize "$fx/package" "$tmp/eq" --equalize --calib "$fx/calib.txt" --calib-tokens 256 \
    --threads 2 >"$tmp/eq.log" 2>&1
check "quantize --equalize (kquant, searched): exit 0" $?
[ "$(grep -c '^equalize: .*alpha [01]\.[0-9], calibration error' "$tmp/eq.log")" -eq "$groups" ]
check "searched: every group an alpha and its error" $?
said=$(sed -n 's/^equalize: [0-9]* groups .*), \([0-9]*\) norms rewritten.*/\1/p' "$tmp/eq.log")
stats() { "$G4CU" inspect "$1" --tensor "$2" 2>&1 | tail -1; }
changed=0 unchanged_other=0 n_other=0
for l in $(seq 0 $((n_layers - 1))); do
    for nm in input_layernorm pre_feedforward_layernorm; do
        t=decoder.model.layers.$l.$nm.weight
        [ "$(stats "$fx/package" $t)" = "$(stats "$tmp/eq" $t)" ] || changed=$((changed + 1))
    done
    for nm in post_attention_layernorm post_feedforward_layernorm post_per_layer_input_norm self_attn.q_norm; do
        t=decoder.model.layers.$l.$nm.weight
        n_other=$((n_other + 1))
        [ "$(stats "$fx/package" $t)" = "$(stats "$tmp/eq" $t)" ] && unchanged_other=$((unchanged_other + 1))
    done
done
[ "$(stats "$fx/package" decoder.model.norm.weight)" = "$(stats "$tmp/eq" decoder.model.norm.weight)" ] ||
    changed=$((changed + 1))
[ -n "$said" ] && [ "$changed" -eq "$said" ] && [ "$changed" -gt 0 ]
check "the fold norms that differ ($changed) are the ones the report names ($said)" $?
[ "$unchanged_other" -eq "$n_other" ]
check "the other norms unchanged ($unchanged_other of $n_other)" $?
"$G4CU" logits "$tmp/eq" --ids "$ids" --out "$tmp/eq.npy" >/dev/null 2>&1
check "logits of the equalized package" $?
[ "$(sums)" = "$before" ]
check "the f16 package's files unchanged" $?

# 4. alpha 0: the method itself
for m in kquant imatrix; do
    cal=()
    [ $m = imatrix ] && cal=(--calib "$fx/calib.txt" --calib-tokens 256)
    "$G4CU" quantize "$fx/package" "$tmp/$m" --method $m "${cal[@]}" --threads 2 >/dev/null 2>&1
    G4_EQUALIZE_ALPHA=0 "$G4CU" quantize "$fx/package" "$tmp/${m}_a0" --method $m --equalize \
        --calib "$fx/calib.txt" --calib-tokens 256 --threads 2 >"$tmp/${m}_a0.log" 2>&1
    cmp -s "$tmp/$m/decoder/model.onnx.data" "$tmp/${m}_a0/decoder/model.onnx.data" &&
        cmp -s "$tmp/$m/decoder/model.onnx" "$tmp/${m}_a0/decoder/model.onnx"
    check "$m: --equalize at alpha 0 is $m byte for byte" $?
done

# 5. bad uses
err1 "--equalize without --calib" "need --calib TEXT (.*and --equalize)" "$G4CU" quantize "$fx/package" "$tmp/x1" --equalize
err1 "--equalize with --keep" "equalize with keep or keep_auto_bytes: not supported" \
    "$G4CU" quantize "$fx/package" "$tmp/x2" --equalize --calib "$fx/calib.txt" --keep 'lm_head*'
G4_EQUALIZE_ALPHA=0.35 "$G4CU" quantize "$fx/package" "$tmp/x3" --equalize --calib "$fx/calib.txt" \
    >"$tmp/x3.out" 2>"$tmp/x3.err"
rc=$?
[ $rc -eq 1 ] && grep -q "G4_EQUALIZE_ALPHA '0.35': expected 0, 0.1, .., 1" "$tmp/x3.err" && [ ! -e "$tmp/x3" ]
check "G4_EQUALIZE_ALPHA off the grid: an error, no package" $?
finish test_quant_equalize
