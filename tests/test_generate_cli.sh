#!/usr/bin/env bash
# test_generate_cli.sh: the generate / asr / vqa commands on the tiny fixture (CPU): their ids
# equal HF's greedy generate (tests/fixtures/chat/generate_cases.jsonl, made by
# tools/python/make_generate_fixture.py), --json fields, stop strings and --ignore-stop, exit
# codes and one-line errors. The engine-level checks are in test_generate.c / test_asr_vqa.c.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
cases="$G4_FIXTURES/chat/generate_cases.jsonl"
tok="$G4_FIXTURES/chat/chat_bpe.json"
media="$G4_FIXTURES/frontends/media"
tiny2="$G4_FIXTURES/tiny2/package"

# field NAME KEY: the comma-joined int list KEY of the fixture line whose "name" is NAME
field() {
    grep "\"package\": \"${3:-mobius-tiny-f16}\"" "$cases" | grep "\"name\": \"$1\"" |
        sed -E "s/.*\"$2\": \[([^]]*)\].*/\1/" | tr -d ' '
}
# tokens of a --json output
tokens() { sed -E 's/.*"tokens":\[([^]]*)\].*/\1/' "$1"; }

# --ids on both packages: HF's greedy ids (with the EOS ids of HF's generation_config)
for pkg in mobius-tiny-f16 tiny2; do
    dir="$G4_FIXTURES/$pkg/package"
    for name in ids_short ids_long; do
        eos=()
        for e in $(field $name eos $pkg | tr , ' '); do eos+=(--eos "$e"); done
        "$G4CU" generate "$dir" --ids "$(field $name prompt_ids $pkg)" --max-new 24 "${eos[@]}" \
            --json >"$tmp/out" 2>"$tmp/err"
        [ $? -eq 0 ] && [ "$(tokens "$tmp/out")" = "$(field $name ids $pkg)" ]
        check "generate --ids $pkg/$name: HF's ids" $?
    done
done
grep -q '"stop_reason":"max_new"' "$tmp/out" && grep -q '"prompt_tokens":40' "$tmp/out" &&
    grep -q '"new_tokens":24' "$tmp/out" && grep -q '"decode_tok_s":' "$tmp/out" &&
    grep -q '"prefill_ms":' "$tmp/out" && grep -q '"text":null' "$tmp/out"
check "generate --json fields" $?
# without a tokenizer the ids are the output
"$G4CU" generate "$tiny2" --ids "$(field ids_short prompt_ids tiny2)" --max-new 24 >"$tmp/out" 2>&1
[ $? -eq 0 ] && [ "$(cat "$tmp/out")" = "$(field ids_short ids tiny2)" ]
check "generate --ids without tokenizer prints the ids" $?

# chat-template prompt: the same ids as HF's processor + generate
"$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --prompt "Hello, who are you?" --max-new 40 \
    --json >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(tokens "$tmp/out")" = "$(field chat_text ids)" ] &&
    grep -q '"prompt_tokens":21' "$tmp/out"
check "generate --prompt: HF's ids" $?
# streamed text: the same text as --json (compared through the JSON-escaped form's length)
"$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --prompt "Hello, who are you?" --max-new 40 \
    >"$tmp/text" 2>"$tmp/err"
[ $? -eq 0 ] && [ -s "$tmp/text" ] && [ ! -s "$tmp/err" ]
check "generate streams text to stdout, nothing on stderr" $?

# stop strings: "\n\n" (escaped on the command line) stops after 31 tokens; ignored, it runs on
"$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --prompt "Hello, who are you?" --max-new 40 \
    --stop '\n\n' --json >"$tmp/out" 2>&1
grep -q '"stop_reason":"stop_string"' "$tmp/out" && grep -q '"new_tokens":31' "$tmp/out" &&
    grep -q '"stop_string":"\\n\\n"' "$tmp/out"
check "generate --stop '\\n\\n'" $?
"$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --prompt "Hello, who are you?" --max-new 40 \
    --stop '\n\n' --ignore-stop '\n\n' --json >"$tmp/out" 2>&1
grep -q '"stop_reason":"max_new"' "$tmp/out" && [ "$(tokens "$tmp/out")" = "$(field chat_text ids)" ]
check "generate --ignore-stop '\\n\\n'" $?
# an extra EOS id: the first id HF generated ends it at once
first=$(field chat_text ids | cut -d, -f1)
"$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --prompt "Hello, who are you?" --eos "$first" \
    --json >"$tmp/out" 2>&1
grep -q "\"stop_reason\":\"eos\"" "$tmp/out" && grep -q "\"stop_token\":$first" "$tmp/out" &&
    grep -q '"new_tokens":1' "$tmp/out"
check "generate --eos" $?
# sampling: the same seed gives the same tokens
for s in 1 2; do
    "$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --prompt "Hi" --max-new 12 --temperature 0.9 \
        --top-k 50 --top-p 0.95 --seed 11 --json >"$tmp/s$s" 2>&1
done
[ "$(tokens "$tmp/s1")" = "$(tokens "$tmp/s2")" ] && [ -n "$(tokens "$tmp/s1")" ]
check "generate --seed reproducible" $?

# vqa / asr: HF's ids on the fixture's media
"$G4CU" vqa "$G4_TINY_PKG" "$media/square_rgb.png" "What is in this image?" --tokenizer "$tok" \
    --max-new 16 --json >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(tokens "$tmp/out")" = "$(field vqa_square ids)" ] &&
    grep -q '"prompt_tokens":278' "$tmp/out"
check "vqa: HF's ids" $?
"$G4CU" asr "$G4_TINY_PKG" "$media/speech_7.3s_8k.flac" --tokenizer "$tok" --max-new 16 \
    --json >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(tokens "$tmp/out")" = "$(field asr_speech_8k ids)" ] &&
    grep -q '"prompt_tokens":251' "$tmp/out"
check "asr (default prompt): HF's ids" $?
"$G4CU" asr "$G4_TINY_PKG" "$media/tone_1s_f32.wav" --tokenizer "$tok" --max-new 4 >"$tmp/out" 2>&1
[ $? -eq 0 ] && [ -s "$tmp/out" ]
check "asr streams a transcript" $?
"$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --image "$media/square_rgb.png" \
    --audio "$media/tone_1s_f32.wav" --prompt "Both?" --max-new 3 --json >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q '"new_tokens":3' "$tmp/out"
check "generate --image --audio" $?

# errors: exit 1 and one line on stderr
err1 "no tokenizer" "has no tokenizer.json; pass one with --tokenizer" \
    "$G4CU" generate "$G4_TINY_PKG" --prompt hi
err1 "missing tokenizer file" "nope.json" \
    "$G4CU" generate "$G4_TINY_PKG" --prompt hi --tokenizer "$tmp/nope.json"
err1 "prompt longer than the context" "longer than the model's context of 128" \
    "$G4CU" generate "$tiny2" --ids "$(seq -s, 3 133)"
err1 "--max-new 0" "--max-new expects" "$G4CU" generate "$G4_TINY_PKG" --ids 2,3 --max-new 0
err1 "--top-p 2" "--top-p expects" "$G4CU" generate "$G4_TINY_PKG" --ids 2,3 --top-p 2
err1 "empty --stop" "empty" "$G4CU" generate "$G4_TINY_PKG" --ids 2,3 --stop ''
err1 "--ids with --prompt" "--ids is the whole prompt" \
    "$G4CU" generate "$G4_TINY_PKG" --ids 2,3 --prompt x
err1 "bad --ids" "--ids '2,x'" "$G4CU" generate "$G4_TINY_PKG" --ids 2,x
err1 "id outside the vocabulary" "outside the vocabulary" "$G4CU" generate "$G4_TINY_PKG" --ids 2,5000
err1 "unknown option" "unknown option '--nope'" "$G4CU" generate "$G4_TINY_PKG" --nope
err1 "generate without prompt" "needs --prompt" "$G4CU" generate "$G4_TINY_PKG"
err1 "asr without audio" "needs PKG and AUDIO" "$G4CU" asr "$G4_TINY_PKG"
err1 "vqa without question" "needs PKG, IMAGE and QUESTION" "$G4CU" vqa "$G4_TINY_PKG" x.png
err1 "vqa missing image" "$tmp/none.png" \
    "$G4CU" vqa "$G4_TINY_PKG" "$tmp/none.png" "q" --tokenizer "$tok"
printf 'not audio' >"$tmp/bad.wav"
err1 "asr on a non-audio file" "$tmp/bad.wav" \
    "$G4CU" asr "$G4_TINY_PKG" "$tmp/bad.wav" --tokenizer "$tok"
err1 "image placeholder typed in the prompt" "placeholder token '<|image|>'" \
    "$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --prompt "see <|image|>"
err1 "tokenizer whose placeholder is not the package's" "placeholder id is 258880" \
    "$G4CU" vqa "$G4_TINY_PKG" "$media/square_rgb.png" q --tokenizer "$G4_FIXTURES/tokenizer/gemma_bpe.json"

finish test_generate_cli
