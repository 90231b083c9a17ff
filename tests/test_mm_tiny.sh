#!/usr/bin/env bash
# test_mm_tiny.sh: `g4cu eval` on a multimodal model that has learned something (issue 35's CI
# check): tests/fixtures/mm-tiny, a Gemma-4 of 0.63M parameters trained on the CPU to memorise
# 8 rendered strings (ocrbench) and 8 espeak-ng sentences (librispeech) (tools/make_mm_tiny.sh;
# the items, canvas and clip length in its README). Every image has one canvas and every clip
# one length, so all prompts of a task are the same length: an answer can only come from the
# pixels or samples, through the towers. On the CPU backend:
#   1. f16: ocrbench accuracy 8/8 and librispeech WER 0 over 8 items, each prediction the
#      item's text character for character (the manifests' answers and transcripts), each
#      prompt the same number of tokens;
#   2. a copy with the vision tower's patch projection zeroed, and one with the audio tower's
#      first convolution zeroed: the tower then gives every item the same soft tokens, so
#      every item the same answer (checked), and the score falls (at most 1 of 8 strings;
#      WER > 0): the scores above come from reading and listening;
#   3. its Q4 (`g4cu quantize`, made here): both evals run to 8 predictions; the scores are
#      printed (measured when the fixture was made: the README), not checked, as a 4-bit
#      copy of a memorised 64-wide model may flip a near-tie on another compiler.
# Needs g4cu and the committed files only (no Python).
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
fx="$G4_FIXTURES/mm-tiny"
n=8

# ev NAME TASK MANIFEST PKG: g4cu eval into $tmp/NAME (stdout $tmp/NAME.out, stderr .err)
ev() {
    "$G4CU" eval "$fx/$3" --task "$2" "$4" --out "$tmp/$1" --threads 2 --max-new 24 \
        >"$tmp/$1.out" 2>"$tmp/$1.err"
    local rc=$?
    [ $rc -eq 0 ] || { echo "  $1: exit $rc"; tail -3 "$tmp/$1.err"; }
    return $rc
}
# id<TAB>prediction of each line of predictions.jsonl / id<TAB>text of each manifest item
preds() { sed -E 's/^\{"id":"([^"]*)",.*"prediction":"([^"]*)",.*/\1\t\2/' "$tmp/$1/predictions.jsonl"; }
texts() { sed -E 's/^\{"id": "([^"]*)",.*"'"$2"'": \[?"([^"]*)".*/\1\t\2/' "$fx/$1"; }

# 1. f16: every item right, each prompt of a task the same length (no item told apart by its
# soft-token count)
for t in "ocr:ocrbench:answers:ocrbench ocrbench_accuracy = 1.000000" \
    "asr:librispeech:transcript:librispeech wer = 0.0000"; do
    IFS=: read -r name task field score <<<"$t"
    ev "$name" "$task" "${name}_test.jsonl" "$fx/package"
    check "f16 $task: exit 0" $?
    grep -qx "$score over $n items -> $tmp/$name/scores.json" "$tmp/$name.out"
    check "f16 $task: $score ($(head -1 "$tmp/$name.out"))" $?
    texts "${name}_test.jsonl" "$field" >"$tmp/$name.want"
    preds "$name" >"$tmp/$name.got"
    [ "$(wc -l <"$tmp/$name.want")" -eq $n ]
    check "$name manifest: $n items" $?
    same_lines "f16 $task: each prediction the item's text" "$tmp/$name.want" "$tmp/$name.got"
    [ "$(sed -E 's/.*"prompt_tokens":([0-9]+),.*/\1/' "$tmp/$name/predictions.jsonl" | sort -u | wc -l)" -eq 1 ]
    check "f16 $task: every prompt the same length" $?
done

# 2. a tower's input projection zeroed: one answer for all items, the score down
deaf() { # deaf NAME TENSOR: a copy of the package with TENSOR's bytes (external data) zeroed
    cp -r "$fx/package" "$tmp/$1" && chmod -R u+w "$tmp/$1" || return 1
    local row off len
    row=$("$G4CU" inspect "$tmp/$1" | grep -E "^ +$2 .* model\.onnx\.data @[0-9]+ \+[0-9]+$")
    [ "$(grep -c . <<<"$row")" -eq 1 ] || { echo "  no one external tensor $2"; return 1; }
    off=$(sed -E 's/.*@([0-9]+) .*/\1/' <<<"$row")
    len=$(sed -E 's/.*\+([0-9]+)$/\1/' <<<"$row")
    dd if=/dev/zero of="$tmp/$1/${2%%.*}/model.onnx.data" bs=4096 count="$len" seek="$off" \
        iflag=count_bytes oflag=seek_bytes conv=notrunc status=none
}
# the score's number and a bound a model that answers the same for every item stays within
# (ocrbench: at most 1 of 8; WER: above 0)
for t in "ocr:ocrbench:vision_encoder.encoder.patch_embedder.input_proj.weight_t:ocrbench ocrbench_accuracy:<= 0.125" \
    "asr:librispeech:audio_encoder.encoder.subsample_conv_projection.conv0.weight:librispeech wer:> 0"; do
    IFS=: read -r name task tensor score bound <<<"$t"
    deaf "zero_$name" "$tensor"
    check "$tensor zeroed" $?
    ev "zero_${name}_ev" "$task" "${name}_test.jsonl" "$tmp/zero_$name"
    check "$tensor zeroed: $task exit 0" $?
    [ "$(preds "zero_${name}_ev" | cut -f2 | sort -u | wc -l)" -eq 1 ]
    check "$tensor zeroed: one answer for every item" $?
    v=$(sed -nE "s/^$score = ([0-9.]+) over.*/\1/p" "$tmp/zero_${name}_ev.out")
    awk -v v="$v" "BEGIN { exit !(v != \"\" && v $bound) }"
    check "$tensor zeroed: $score ${v:-none} $bound" $?
    echo "$task, ${tensor%%.*} zeroed: $score = ${v:-none}, every answer \"$(preds "zero_${name}_ev" | cut -f2 | head -1)\""
done

# 3. Q4: runs, scores printed
"$G4CU" quantize "$fx/package" "$tmp/q4" --threads 2 >"$tmp/quant.out" 2>&1
rc=$?
[ $rc -eq 0 ] || tail -3 "$tmp/quant.out"
check "quantize: exit 0" $rc
for t in ocr:ocrbench:ocr_test.jsonl asr:librispeech:asr_test.jsonl; do
    IFS=: read -r name task man <<<"$t"
    ev "q4_$name" "$task" "$man" "$tmp/q4"
    check "q4 $task: exit 0" $?
    [ "$(wc -l <"$tmp/q4_$name/predictions.jsonl")" -eq $n ]
    check "q4 $task: $n predictions" $?
    echo "q4: $(head -1 "$tmp/q4_$name.out" | sed -E 's/ -> .*//'); f16: $(head -1 "$tmp/$name.out" | sed -E 's/ -> .*//')"
    preds "q4_$name" | paste - "$tmp/$name.got" | awk -F'\t' '$2 != $4 { print "  q4 differs: " $1 ": \"" $2 "\" (f16 \"" $4 "\")" }'
done
finish test_mm_tiny
