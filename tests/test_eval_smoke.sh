#!/usr/bin/env bash
# test_eval_smoke.sh: `g4cu eval` over the real-media smoke manifests
# (tests/fixtures/eval/{ocr,librispeech}_smoke.jsonl) on the tiny package, CPU: the mechanics
# of the runner, not the scores (random weights give random text):
#   - a run writes predictions (one line per item, in order), run.json, scores.json / .md, the
#     metric on stdout and, when stderr is not a terminal, nothing on stderr but plain progress
#     lines ("librispeech: 3/10 (30%), ...": long work shows progress under nohup and CI too);
#   - the progress bar (count, rate, ETA) on a terminal (script(1) provides one);
#   - resume: a predictions file cut in the middle of a line, and a run killed with SIGKILL,
#     both resumed to the predictions of an uninterrupted run;
#   - shards 0/3, 1/3, 2/3 merged by eval-merge: the unsharded run's predictions and its
#     corpus-level score, digit for digit;
#   - docvqa / chartqa prompts run with their max_new_tokens; --keep-stop cuts at "\n\n";
#   - --batch 4 with the front ends on worker threads gives the same predictions in order, and
#     --time prints where the time went.
# Media: the Debian packages pocketsphinx-testdata and python3-skimage (tools/install_deps.sh
# installs them) laid out by tools/fetch_smoke_set.sh, or an already laid out directory in
# G4_SMOKE_DATA. Skipped, with the reason printed, only when neither is there.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
bg=""
trap '[ -n "$bg" ] && kill -9 "$bg" 2>/dev/null; rm -rf "$tmp"' EXIT
ev="$G4_FIXTURES/eval"
tok="$G4_FIXTURES/chat/chat_bpe.json"

if [ -n "${G4_SMOKE_DATA:-}" ]; then
    data=$G4_SMOKE_DATA
elif [ -f /usr/share/pocketsphinx/test/data/librivox/transcription ] &&
    [ -f /usr/lib/python3/dist-packages/skimage/data/page.png ]; then
    data="$tmp/data"
    if ! "$G4_SOURCE_DIR/tools/fetch_smoke_set.sh" "$data" >"$tmp/fetch.log" 2>&1; then
        echo "FAIL tools/fetch_smoke_set.sh:"
        cat "$tmp/fetch.log"
        exit 1
    fi
else
    echo "SKIP test_eval_smoke: the smoke media are absent: install pocketsphinx-testdata and" \
        "python3-skimage (tools/install_deps.sh), or set G4_SMOKE_DATA to a directory laid out" \
        "by tools/fetch_smoke_set.sh"
    exit 77
fi

# Whole manifests (10 utterances, 6 questions). Under AddressSanitizer, whose -O0 build runs
# the CPU towers several times slower, fewer items to stay well inside the ctest timeout: 4
# utterances (the first, whose default prediction holds "\n\n", and three short card names)
# and 2 questions. The mechanics checked are the same.
ls_man="$ev/librispeech_smoke.jsonl"
ocr_man="$ev/ocr_smoke.jsonl"
n_ls=10 n_ocr=6 lim_ocr=() lim_doc=(--limit 2)
if ldd "$G4CU" 2>/dev/null | grep -q libasan; then
    grep -E '"id": "(librivox-0870|cards-00[123])"' "$ev/librispeech_smoke.jsonl" >"$tmp/ls_asan.jsonl"
    ls_man="$tmp/ls_asan.jsonl"
    n_ls=4 n_ocr=2 lim_ocr=(--limit 2) lim_doc=(--limit 1)
    echo "note: g4cu is built with AddressSanitizer: $n_ls utterances and $n_ocr questions"
fi
n_librivox=$(grep -c '"category": "librivox"' "$ls_man")

run() { # run OUT TASK MANIFEST [options]: g4cu eval on the tiny package
    local out=$1 task=$2 man=$3
    shift 3
    "$G4CU" eval "$man" --task "$task" "$G4_TINY_PKG" --tokenizer "$tok" --data-dir "$data" \
        --out "$out" "$@"
}
# The predictions without the timings (which differ from run to run), one line per item.
stable() { sed -E 's/,"item_ms":[^,]*,"prefill_ms":[^,]*,"decode_ms":[^,}]*//' "$@"; }
value() { grep -E '^[[:space:]]"value":' "$1"; }

# 1. librispeech, uninterrupted: the reference for resume and shards
run "$tmp/ls" librispeech "$ls_man" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -q "^librispeech: 0/$n_ls (0%)" "$tmp/err" &&
    ! grep -qvE "^librispeech: [0-9]+/$n_ls \([0-9]+%\)" "$tmp/err" && grep -q "^librispeech wer = .* over $n_ls items -> $tmp/ls/scores.json\$" "$tmp/out"
check "librispeech run: metric on stdout, only progress lines on stderr" $?
[ "$(wc -l <"$tmp/ls/predictions.jsonl")" -eq $n_ls ] &&
    [ "$(sed -E 's/^\{"id":"([^"]*)".*/\1/' "$tmp/ls/predictions.jsonl" | tr '\n' ' ')" = \
        "$(head -n $n_ls "$ls_man" | sed -E 's/^\{"id": "([^"]*)".*/\1/' | tr '\n' ' ')" ] &&
    grep -qE '"max_new":[[:space:]]*256,' "$tmp/ls/run.json" && [ -s "$tmp/ls/scores.md" ] &&
    ! grep -q '"new_tokens":\(25[7-9]\|2[6-9][0-9]\|[3-9][0-9][0-9]\)' "$tmp/ls/predictions.jsonl"
check "librispeech: $n_ls predictions in manifest order, max_new 256" $?
grep -q '"task":"librispeech"' "$tmp/ls/predictions.jsonl" && grep -q '"stop_reason":"' "$tmp/ls/predictions.jsonl" &&
    grep -q "| librivox | $n_librivox |" "$tmp/ls/scores.md" &&
    grep -q '^## Timings' "$tmp/ls/scores.md"
check "librispeech: predictions fields, per-category table, timings" $?

# 1b. --batch 4 with the front ends on 2 threads ahead of the batch (eval/prep.h): the
# one-at-a-time predictions of the first 4 items, in order; --time's line on stderr after the
# progress lines, the split in scores.json
G4_EVAL_PREP_THREADS=2 run "$tmp/lsb" librispeech "$ls_man" --limit 4 --batch 4 --time \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && [ "$(stable "$tmp/lsb/predictions.jsonl")" = "$(head -n 4 "$tmp/ls/predictions.jsonl" | stable)" ] &&
    grep -qE "^g4cu eval: time: 4 items in [0-9.]+ s \([0-9.]+ items/s, batch 4\): front end [0-9.]+ s \(2 threads ahead, waited [0-9.]+ s\), towers [0-9.]+ s, .*decode [0-9.]+ s, .*scoring [0-9.]+ s\$" "$tmp/err" &&
    [ "$(grep -vcE "^librispeech: [0-9]+/4 \([0-9]+%\)" "$tmp/err")" -eq 1 ] &&
    grep -qE '"prep_threads":[[:space:]]*2,' "$tmp/lsb/scores.json"
check "librispeech --batch 4, 2 front-end threads: the same predictions in order; --time" $?

# 2. progress bar on a terminal: count, rate, ETA
if command -v script >/dev/null; then
    script -qec "'$G4CU' eval '$ls_man' --task librispeech '$G4_TINY_PKG' --tokenizer '$tok' --data-dir '$data' --out '$tmp/prog' --limit 2" \
        /dev/null >"$tmp/tty" 2>&1
    grep -q 'librispeech \[\.*\] 0/2  -- it/s  ETA ?' "$tmp/tty" &&
        grep -qE 'librispeech \[#{24}\] 2/2  [0-9.]+ it/s  ETA 0s' "$tmp/tty"
    check "progress bar on a terminal" $?
else
    echo "FAIL script(1) (bsdutils) is missing: cannot give the command a terminal"
    fail=$((fail + 1))
fi

# 3. resume after a torn line: whole lines, then half of the next, as a crash mid-write leaves
mkdir -p "$tmp/torn"
keep=$((n_ls - 3))
head -n $keep "$tmp/ls/predictions.jsonl" >"$tmp/torn/predictions.jsonl"
half=$(( $(sed -n $((keep + 1))p "$tmp/ls/predictions.jsonl" | wc -c) / 2 )) # bytes, not characters
sed -n $((keep + 1))p "$tmp/ls/predictions.jsonl" | head -c "$half" >>"$tmp/torn/predictions.jsonl"
run "$tmp/torn" librispeech "$ls_man" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
    grep -q "predictions.jsonl:$((keep + 1)): torn last line ($half bytes without a newline: the run was interrupted); finish it with g4cu eval ... --resume" "$tmp/err"
check "an interrupted run's file needs --resume" $?
run "$tmp/torn" librispeech "$ls_man" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -q "dropped a torn last line ($half bytes)" "$tmp/err" &&
    grep -q "resuming .*: $keep of $n_ls items already predicted" "$tmp/err" &&
    diff <(stable "$tmp/ls/predictions.jsonl") <(stable "$tmp/torn/predictions.jsonl") >/dev/null &&
    [ "$(value "$tmp/torn/scores.json")" = "$(value "$tmp/ls/scores.json")" ]
check "resume after a torn line = the uninterrupted run" $?

# 4. a run killed with SIGKILL while it works, then resumed (images: ~1 s an item on the CPU)
run "$tmp/ocr" ocrbench "$ocr_man" "${lim_ocr[@]}" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(wc -l <"$tmp/ocr/predictions.jsonl")" -eq $n_ocr ] && grep -qE '"max_new":[[:space:]]*128,' "$tmp/ocr/run.json" &&
    grep -q '^ocrbench ocrbench_accuracy = ' "$tmp/out" && grep -q '| Doc-oriented VQA | ' "$tmp/ocr/scores.md"
check "ocrbench run" $?
# (g4cu itself in the background, not a shell function: $! must be g4cu's own pid)
"$G4CU" eval "$ocr_man" --task ocrbench "$G4_TINY_PKG" --tokenizer "$tok" --data-dir "$data" \
    --out "$tmp/kill" "${lim_ocr[@]}" >/dev/null 2>&1 &
bg=$!
for _ in $(seq 600); do # until the first item is on disk (at most 60 s)
    [ -s "$tmp/kill/predictions.jsonl" ] && break
    sleep 0.1
done
kill -9 "$bg" 2>/dev/null
wait "$bg" 2>/dev/null
killed=$?
bg=""
done_before=$(wc -l <"$tmp/kill/predictions.jsonl")
[ "$killed" -eq 137 ] && [ "$done_before" -ge 1 ] && [ "$done_before" -lt $n_ocr ] && [ ! -e "$tmp/kill/scores.json" ]
check "SIGKILL mid-run (exit $killed, $done_before of $n_ocr items on disk)" $?
run "$tmp/kill" ocrbench "$ocr_man" "${lim_ocr[@]}" --resume >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && diff <(stable "$tmp/ocr/predictions.jsonl") <(stable "$tmp/kill/predictions.jsonl") >/dev/null &&
    [ "$(value "$tmp/kill/scores.json")" = "$(value "$tmp/ocr/scores.json")" ]
check "resume after SIGKILL = the uninterrupted run" $?

# 5. three shards into one directory, merged: the unsharded predictions and corpus WER
for i in 0 1 2; do
    run "$tmp/shards" librispeech "$ls_man" --shard $i/3 >"$tmp/out.$i" 2>"$tmp/err.$i" || echo "  shard $i: $(cat "$tmp/err.$i")"
done
[ "$(wc -l <"$tmp/shards/predictions.shard-0-of-3.jsonl")" -eq $(((n_ls + 2) / 3)) ] &&
    [ "$(wc -l <"$tmp/shards/predictions.shard-2-of-3.jsonl")" -eq $((n_ls / 3)) ] &&
    [ -s "$tmp/shards/scores.shard-1-of-3.json" ] && grep -q "eval-merge $tmp/shards --task librispeech" "$tmp/out.1"
check "shards: every 3rd item each, a shard's own scores" $?
"$G4CU" eval-merge "$tmp/shards" --task librispeech >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(value "$tmp/shards/scores.json")" = "$(value "$tmp/ls/scores.json")" ] &&
    [ "$(grep -E '"(edits|ref_words)":' "$tmp/shards/scores.json" | head -n2)" = "$(grep -E '"(edits|ref_words)":' "$tmp/ls/scores.json" | head -n2)" ] &&
    diff <(stable "$tmp/ls/predictions.jsonl" | sort) <(stable "$tmp/shards"/predictions.shard-*.jsonl | sort) >/dev/null &&
    grep -qE '"merged_files":[[:space:]]*3,' "$tmp/shards/scores.json"
check "eval-merge of 3 shards = the unsharded run (value, edits, words, predictions)" $?

# 6. docvqa and chartqa prompts through the command, with their max_new_tokens
run "$tmp/doc" docvqa "$ocr_man" "${lim_doc[@]}" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -qE '"max_new":[[:space:]]*32,' "$tmp/doc/run.json" && [ "$(wc -l <"$tmp/doc/predictions.jsonl")" -eq "${lim_doc[1]}" ] &&
    ! grep -qE '"new_tokens":(3[3-9]|[4-9][0-9]|[0-9]{3})' "$tmp/doc/predictions.jsonl" && grep -q '^docvqa anls = ' "$tmp/out"
check "docvqa ${lim_doc[*]}" $?
printf '%s\n' '{"id": "c1", "image": "skimage/page.png", "question": "How many lines of code?", "answer": "1", "category": "human_test"}' \
    '{"id": "c2", "image": "skimage/bw_text.png", "question": "How many words?", "answer": "54", "category": "augmented_test"}' >"$tmp/chart.jsonl"
run "$tmp/chart" chartqa "$tmp/chart.jsonl" "${lim_doc[@]}" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -qE '"max_new":[[:space:]]*16,' "$tmp/chart/run.json" &&
    ! grep -qE '"new_tokens":(1[7-9]|[2-9][0-9]|[0-9]{3})' "$tmp/chart/predictions.jsonl" &&
    grep -q 'relaxed_human_split (1 items)' "$tmp/chart/scores.md"
check "chartqa" $?

# 7. --keep-stop: lmms-eval's "\n\n" stop kept; the first default librispeech prediction holds
# one (on this fixture)
head -n 1 "$tmp/ls/predictions.jsonl" | grep -qF '\n\n'
check "a default prediction holds \"\\n\\n\" (the benchmark ignores that stop)" $?
run "$tmp/keep" librispeech "$ls_man" --limit 1 --keep-stop >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ! grep -qF '\n\n' "$tmp/keep/predictions.jsonl" && grep -q '"stop_reason":"stop_string"' "$tmp/keep/predictions.jsonl" &&
    grep -qE '"stop_strings":[[:space:]]*\["\\n\\n"\]' "$tmp/keep/scores.json"
check "--keep-stop" $?
run "$tmp/ls" librispeech "$ls_man" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "predictions.jsonl already holds $n_ls predictions; pass --resume to continue that run" "$tmp/err"
check "a finished run's file needs --resume" $?
run "$tmp/ls" librispeech "$ls_man" --resume --keep-stop >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q 'the earlier run ignored the "\\n\\n" stop' "$tmp/err"
check "--resume with another stop setting is refused" $?

finish test_eval_smoke
