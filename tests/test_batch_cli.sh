#!/usr/bin/env bash
# test_batch_cli.sh: many inputs with the model loaded once, on the tiny fixture (CPU):
# `asr PKG a.wav b.wav ...` and `vqa PKG --batch items.jsonl` give one result per input, in
# order, each with the tokens the same input gets alone (`asr PKG a.wav --json`, `vqa PKG IMAGE
# Q --json`); a failing input (a missing file, a line that is not JSON, a line without an
# image) gets an "error" line and one stderr line naming it, the rest go on, and the exit code
# is 1; text mode heads each result with "==> input <==".
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
tok="$G4_FIXTURES/chat/chat_bpe.json"
media="$G4_FIXTURES/frontends/media"
opts=(--tokenizer "$tok" --max-new 5 --ignore-eos)
tokens() { sed -E 's/.*"tokens":\[([^]]*)\].*/\1/'; }

a="$media/tone_1s_f32.wav" b="$media/silence_1s.wav"
"$G4CU" asr "$G4_TINY_PKG" "$a" "${opts[@]}" --json | tokens >"$tmp/a_alone"
"$G4CU" asr "$G4_TINY_PKG" "$b" "${opts[@]}" --json | tokens >"$tmp/b_alone"
[ -s "$tmp/a_alone" ] && [ -s "$tmp/b_alone" ]
check "asr alone: tokens" $?
"$G4CU" asr "$G4_TINY_PKG" "$a" "$tmp/missing.wav" "$b" "${opts[@]}" --json >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$tmp/out")" -eq 3 ]
check "asr 3 files, one missing: exit 1, 3 JSON lines (exit $rc)" $?
sed -n 1p "$tmp/out" | grep -qF "\"input\":\"$a\"" && [ "$(sed -n 1p "$tmp/out" | tokens)" = "$(cat "$tmp/a_alone")" ]
check "asr line 1: a.wav's tokens, as alone" $?
sed -n 2p "$tmp/out" | grep -qF "\"input\":\"$tmp/missing.wav\"" && sed -n 2p "$tmp/out" | grep -q '"error":".*missing.wav'
check "asr line 2: the missing file's error" $?
sed -n 3p "$tmp/out" | grep -qF "\"input\":\"$b\"" && [ "$(sed -n 3p "$tmp/out" | tokens)" = "$(cat "$tmp/b_alone")" ]
check "asr line 3: b.wav's tokens, as alone (after a failed input)" $?
[ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^g4cu asr: .*missing.wav" "$tmp/err"
check "asr: one stderr line for the failed file" $?
"$G4CU" asr "$G4_TINY_PKG" "$a" "$b" "${opts[@]}" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(grep -c '^==> .* <==$' "$tmp/out")" -eq 2 ] && grep -qxF "==> $b <==" "$tmp/out"
check "asr text mode: a header per file, exit 0" $?

img="$media/square_rgb.png"
"$G4CU" vqa "$G4_TINY_PKG" "$img" "What is it?" "${opts[@]}" --json | tokens >"$tmp/q1_alone"
"$G4CU" vqa "$G4_TINY_PKG" "$img" "And the colour?" "${opts[@]}" --json | tokens >"$tmp/q2_alone"
cp "$img" "$tmp/pic.png"
cat >"$tmp/items.jsonl" <<JSONL
{"image": "$img", "question": "What is it?", "id": "q1"}
not json

{"question": "no image", "id": 7}
{"image": "pic.png", "question": "And the colour?", "id": 42}
JSONL
"$G4CU" vqa "$G4_TINY_PKG" --batch "$tmp/items.jsonl" "${opts[@]}" --json >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$tmp/out")" -eq 4 ]
check "vqa --batch: 4 items (a blank line skipped), exit 1 (exit $rc)" $?
sed -n 1p "$tmp/out" | grep -q '"id":"q1"' && [ "$(sed -n 1p "$tmp/out" | tokens)" = "$(cat "$tmp/q1_alone")" ]
check "vqa --batch line 1: id q1, the tokens alone" $?
sed -n 2p "$tmp/out" | grep -qF "\"input\":\"$tmp/items.jsonl:2\"" && sed -n 2p "$tmp/out" | grep -q '"error":"not a JSON object"'
check "vqa --batch line 2: not JSON, named by file:line" $?
sed -n 3p "$tmp/out" | grep -q '"id":7' && sed -n 3p "$tmp/out" | grep -q '"error":"needs \\"image\\"'
check "vqa --batch line 3: no image, its id kept" $?
sed -n 4p "$tmp/out" | grep -q '"id":42' && [ "$(sed -n 4p "$tmp/out" | tokens)" = "$(cat "$tmp/q2_alone")" ]
check "vqa --batch line 4: a path relative to the file, the tokens alone" $?
[ "$(wc -l <"$tmp/err")" -eq 2 ]
check "vqa --batch: one stderr line per failed item" $?
err1 "vqa --batch with IMAGE too" "--batch takes PKG only" \
    "$G4CU" vqa "$G4_TINY_PKG" "$img" --batch "$tmp/items.jsonl" "${opts[@]}"
err1 "vqa --batch on a missing file" "nothing.jsonl" \
    "$G4CU" vqa "$G4_TINY_PKG" --batch "$tmp/nothing.jsonl" "${opts[@]}"
finish test_batch_cli
