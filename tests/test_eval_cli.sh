#!/usr/bin/env bash
# test_eval_cli.sh: `g4cu eval` / `g4cu eval-merge` without a model run: usage and manifest
# errors (exit 1, one line on stderr naming the file, the line and the field), and eval-merge of
# the recorded smoke predictions (tests/fixtures/eval/smoke_predictions.jsonl, hand-written)
# giving lmms-eval 0.7.2's own scores (smoke_expected.json, from
# tools/python/eval_metrics_reference.py), unsharded and split into shards.
# The runs on the model are in test_eval_model.c (committed media) and test_eval_smoke.sh
# (the Debian smoke media).
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
ev="$G4_FIXTURES/eval"
tok="$G4_FIXTURES/chat/chat_bpe.json"

"$G4CU" help >"$tmp/help"
grep -q "^  eval " "$tmp/help" && grep -q "^  eval-merge " "$tmp/help"
check "help lists eval and eval-merge" $?

# usage errors
m="$ev/ocr_smoke.jsonl"
err1_fixed "no arguments" "needs MANIFEST.jsonl and PKG" "$G4CU" eval
err1_fixed "no --task" "needs --task ocrbench|docvqa|chartqa|librispeech" "$G4CU" eval "$m" "$G4_TINY_PKG"
err1_fixed "unknown task" "--task expects ocrbench|docvqa|chartqa|librispeech, got 'vqav2'" \
    "$G4CU" eval "$m" --task vqav2 "$G4_TINY_PKG"
err1_fixed "--shard 2/2" "--shard expects I/N with 0 <= I < N" "$G4CU" eval "$m" --task ocrbench "$G4_TINY_PKG" --shard 2/2
err1_fixed "--shard x" "--shard expects I/N" "$G4CU" eval "$m" --task ocrbench "$G4_TINY_PKG" --shard x
err1_fixed "--limit 0" "--limit expects an integer" "$G4CU" eval "$m" --task ocrbench "$G4_TINY_PKG" --limit 0
err1_fixed "--batch 0" "--batch expects an integer in [1, 4096], got '0'" "$G4CU" eval "$m" --task ocrbench "$G4_TINY_PKG" --batch 0
err1_fixed "--out without value" "--out needs a value" "$G4CU" eval "$m" --task ocrbench "$G4_TINY_PKG" --out
err1_fixed "unknown option" "unknown option '--nope'" "$G4CU" eval "$m" --task ocrbench "$G4_TINY_PKG" --nope
err1_fixed "bad backend" "--backend 'tpu': expected cpu or cuda" "$G4CU" eval "$m" --task ocrbench "$G4_TINY_PKG" --backend tpu
err1_fixed "eval-merge without DIR" "needs DIR" "$G4CU" eval-merge --task ocrbench
err1_fixed "eval-merge without --task" "needs --task" "$G4CU" eval-merge "$tmp"
err1_fixed "eval-merge of an empty dir" "no predictions*.jsonl" "$G4CU" eval-merge "$tmp" --task ocrbench

# bad manifests: checked before the model loads; one line naming file:line and the field
printf '%s\n' '{"id": "a", "image": "x.png", "question": "q", "answers": ["A"], "category": "c"}' \
    '{"id": "b", "image": "x.png", "question": "q", "answers": "A"}' >"$tmp/m1.jsonl"
err1_fixed "manifest without category" "$tmp/m1.jsonl:2: field 'category': expected a non-empty string, got nothing" \
    "$G4CU" eval "$tmp/m1.jsonl" --task ocrbench "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/o1"
printf '%s\n' '{"id": "a", "image": "x.png", "question": "q", "answers": ["A"], "category": "c"}' '' \
    '{"id": "a", "image": "y.png", "question": "q", "answers": ["A"], "category": "c"}' >"$tmp/m2.jsonl"
err1_fixed "duplicate id" "$tmp/m2.jsonl:3: field 'id': 'a' is already the id of line 1" \
    "$G4CU" eval "$tmp/m2.jsonl" --task ocrbench "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/o2"
printf '%s\n' '{"id": "a", "image": "x.png", "question": "q", "answers": ["1", "2"], "category": "human_test"}' >"$tmp/m3.jsonl"
err1_fixed "chartqa with two answers" "$tmp/m3.jsonl:1: field 'answers'" \
    "$G4CU" eval "$tmp/m3.jsonl" --task chartqa "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/o3"
printf '{"id": "a", "image": "x.png", "question": "q", "answers": ["A"], "category": "c"\n' >"$tmp/m4.jsonl"
err1_fixed "truncated JSON" "$tmp/m4.jsonl:1: not valid JSON" \
    "$G4CU" eval "$tmp/m4.jsonl" --task ocrbench "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/o4"
err1_fixed "librispeech manifest run as ocrbench" "librispeech_smoke.jsonl:1: field 'audio': task ocrbench takes image items" \
    "$G4CU" eval "$ev/librispeech_smoke.jsonl" --task ocrbench "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/o5"
err1_fixed "missing media file" "ocr_smoke.jsonl:1: field 'image': $tmp/nodata/skimage/page.png is not a readable file" \
    "$G4CU" eval "$m" --task ocrbench "$G4_TINY_PKG" --tokenizer "$tok" --data-dir "$tmp/nodata" --out "$tmp/o6"
err1_fixed "missing manifest" "$tmp/none.jsonl" \
    "$G4CU" eval "$tmp/none.jsonl" --task ocrbench "$G4_TINY_PKG" --out "$tmp/o7"
[ ! -e "$tmp/o1" ] && [ ! -e "$tmp/o6" ]
check "no output directory made for a bad manifest" $?

# eval-merge of the recorded predictions = lmms-eval's scores (exact, as Python prints them)
# expected KEY: the number after "KEY": in smoke_expected.json (the aggregate, not per item)
expected() { grep -E "^  \"$1\": " "$ev/smoke_expected.json" | sed -E 's/.*: ([0-9.e+-]+).*/\1/'; }
split_preds() { # WHICH DIR PARTS: the recorded predictions of one manifest, round-robin in PARTS files
    mkdir -p "$2"
    grep "\"manifest\": \"$1\"" "$ev/smoke_predictions.jsonl" | sed -E 's/, "manifest": "[a-z]*"//' |
        awk -v d="$2" -v n="$3" '{ f = (n == 1) ? d "/predictions.jsonl" : sprintf("%s/predictions.shard-%d-of-%d.jsonl", d, (NR - 1) % n, n); print > f }'
}
for spec in "librispeech librispeech librispeech_smoke wer" "ocr ocrbench ocr_smoke ocrbench_accuracy" \
    "ocr docvqa ocr_smoke anls"; do
    set -- $spec
    which=$1 task=$2 man=$3 key=$4
    want=$(expected "$key")
    for parts in 1 3; do
        d="$tmp/rec-$task-$parts"
        split_preds "$which" "$d" "$parts"
        "$G4CU" eval-merge "$d" --task "$task" --manifest "$ev/$man.jsonl" >"$tmp/o" 2>"$tmp/e"
        rc=$?
        [ $rc -eq 0 ] && [ -n "$want" ] && grep -qE "\"value\":[[:space:]]*$want,\$" "$d/scores.json" &&
            grep -q "^# g4cu eval: $task" "$d/scores.md" && grep -q "^$task $key = " "$tmp/o" && [ ! -s "$tmp/e" ]
        check "eval-merge $task in $parts file(s) = lmms-eval's $key $want" $?
    done
done
d="$tmp/rec-librispeech-3"
grep -qE '"edits":[[:space:]]*6,' "$d/scores.json" && grep -qE '"ref_words":[[:space:]]*91,?$' "$d/scores.json" &&
    grep -q '| word edits / reference words | 6 / 91 |' "$d/scores.md" &&
    grep -q '| librivox | 5 |' "$d/scores.md" && grep -q '| cards | 5 |' "$d/scores.md"
check "merged WER is corpus-level: 6 edits / 91 words, per category" $?
grep -q '| Doc-oriented VQA | 4 | 4 | 1.000000 |' "$tmp/rec-ocrbench-1/scores.md" &&
    grep -q '| Regular Text Recognition | 1 | 0 | 0.000000 |' "$tmp/rec-ocrbench-1/scores.md"
check "OCRBench per-category table" $?

# eval-merge errors: an id twice, an id missing, a torn line, another task's predictions
d="$tmp/dup"
split_preds librispeech "$d" 2
head -n1 "$d/predictions.shard-0-of-2.jsonl" >>"$d/predictions.shard-1-of-2.jsonl"
err1_fixed "eval-merge: id predicted twice" "predicted twice (also $d/predictions.shard-0-of-2.jsonl:1)" \
    "$G4CU" eval-merge "$d" --task librispeech --manifest "$ev/librispeech_smoke.jsonl"
d="$tmp/miss"
split_preds librispeech "$d" 2
rm "$d/predictions.shard-1-of-2.jsonl"
err1_fixed "eval-merge: a shard missing" "5 of the 10 selected items have no prediction (first: id 'librivox-0880', manifest line 2)" \
    "$G4CU" eval-merge "$d" --task librispeech --manifest "$ev/librispeech_smoke.jsonl"
d="$tmp/torn"
split_preds librispeech "$d" 2
printf '{"id": "cards-00' >>"$d/predictions.shard-1-of-2.jsonl"
err1_fixed "eval-merge: torn last line" "predictions.shard-1-of-2.jsonl:6: torn last line" \
    "$G4CU" eval-merge "$d" --task librispeech --manifest "$ev/librispeech_smoke.jsonl"
d="$tmp/other"
split_preds librispeech "$d" 1
sed -i 's/^{"id"/{"task": "ocrbench", "id"/' "$d/predictions.jsonl"
err1_fixed "eval-merge: another task's predictions" "field 'task': the file holds predictions of task 'ocrbench', not 'librispeech'" \
    "$G4CU" eval-merge "$d" --task librispeech --manifest "$ev/librispeech_smoke.jsonl"
err1_fixed "eval-merge: no manifest known" "pass --manifest M" "$G4CU" eval-merge "$tmp/rec-docvqa-1" --task docvqa

finish test_eval_cli
