#!/usr/bin/env bash
# test_tokenize.sh: `g4cu tokenize` on the tokenizer fixture: the ids HF gave for a few cases
# (read from tests/fixtures/tokenizer/gemma_bpe_cases.jsonl), decoding back, stdin input, and the
# exit-code contract (1 with one line on stderr for a missing file, a bad id, invalid UTF-8).
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
tok="$G4_FIXTURES/tokenizer/gemma_bpe.json"
cases="$G4_FIXTURES/tokenizer/gemma_bpe_cases.jsonl"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"

# HF's ids for the encode case NAME (add_special ADD): "1,2,3".
hf_ids() {
    grep -F "\"kind\": \"encode\", \"name\": \"$1\"," "$cases" | grep -F "\"add_special\": $2," |
        sed 's/.*"ids": \[\(.*\)\]}$/\1/' | tr -d ' '
}

want=$(hf_ids "ascii sentence" false)
[ -n "$want" ]
check "fixture has the 'ascii sentence' case" $?
got=$("$G4CU" tokenize "$tok" "The quick brown fox jumps over the lazy dog.")
check "encode exit 0" $?
[ "$got" = "$want" ]
check "encode = HF ($got vs $want)" $?

want=$(hf_ids "special chat" true)
got=$("$G4CU" tokenize "$tok" --bos $'<bos><|turn>user\nWhat is this?<turn|>\n<|turn>model\n')
[ -n "$want" ] && [ "$got" = "$want" ]
check "encode --bos with special tokens = HF ($got vs $want)" $?

got=$(printf 'The quick brown fox jumps over the lazy dog.' | "$G4CU" tokenize "$tok" -)
[ "$got" = "$(hf_ids "ascii sentence" false)" ]
check "encode from stdin" $?

text=$("$G4CU" tokenize "$tok" --decode "$(hf_ids "accents" false)")
[ "$text" = "café naïve façade Ångström Łódź Dvořák" ]
check "decode accents" $?
text=$("$G4CU" tokenize "$tok" --decode "2 5 1 3")
[ "$text" = "<bos><|turn><eos><unk>" ]
check "decode keeps special tokens" $?
text=$("$G4CU" tokenize "$tok" --decode --skip-special "2,5,1,3")
[ -z "$text" ]
check "decode --skip-special drops them" $?

"$G4CU" tokenize "$tok" --pieces "Hello" >"$tmp/out"
check "encode --pieces exit 0" $?
[ "$(cut -f2 "$tmp/out" | tr -d '\n')" = "Hello" ]
check "pieces spell the text" $?

"$G4CU" tokenize "$tmp/missing.json" x >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "missing.json" "$tmp/err"
check "missing file: exit 1, one line naming it" $?
"$G4CU" tokenize "$tok" --decode "1,99999" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "99999" "$tmp/err"
check "bad id: exit 1, one line" $?
printf 'a\xffb' | "$G4CU" tokenize "$tok" - >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "invalid UTF-8 at byte 1" "$tmp/err"
check "invalid UTF-8: exit 1, one line with the offset" $?
echo '{"model": {"type": "Unigram", "vocab": {}, "merges": []}}' >"$tmp/uni.json"
"$G4CU" tokenize "$tmp/uni.json" x >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "only BPE" "$tmp/err"
check "unsupported model: exit 1, one line" $?
"$G4CU" tokenize "$tok" >/dev/null 2>&1
[ $? -eq 1 ]
check "missing TEXT: usage error" $?

finish test_tokenize
