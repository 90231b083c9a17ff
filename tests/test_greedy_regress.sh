#!/usr/bin/env bash
# test_greedy_regress.sh: greedy `g4cu generate` on both tiny fixtures (CPU) gives the tokens the
# engine gave before the one-decode-step rework (tests/fixtures/chat/greedy_regression.tsv,
# recorded from main at 54bc156 with the same command lines, before any change). A regression
# check against the old code path, beside the HF checks of test_generate / test_asr_vqa /
# test_generate_cli (which compare with HF's own greedy ids on shorter runs): text ids, chat
# prompts, image, audio, image + audio, multi-chunk prefills (soft tokens split across chunks),
# an EOS stop and a context stop on tiny2. (On the GPU, test_cuda_engine compares the CUDA
# step with the old path's algorithm: eager forwards, logits downloaded, argmax on the host.)
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
tokens() { sed -E 's/.*"tokens":\[([^]]*)\].*/\1/' "$1"; }
stop_reason() { sed -E 's/.*"stop_reason":"([^"]*)".*/\1/' "$1"; }

n=0
while IFS=$'\t' read -r -a f; do
    name=${f[0]} pkg="$G4_FIXTURES/${f[1]}" want=${f[2]} want_stop=${f[3]}
    args=()
    for a in "${f[@]:4}"; do args+=("${a//@F@/$G4_FIXTURES}"); done
    "$G4CU" generate "$pkg" "${args[@]}" --json >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && [ "$(tokens "$tmp/out")" = "$want" ] && [ "$(stop_reason "$tmp/out")" = "$want_stop" ]
    ok=$?
    [ $ok -ne 0 ] && { echo "  $name: exit $rc, got $(tokens "$tmp/out") ($(stop_reason "$tmp/out"))"; head -2 "$tmp/err"; }
    check "greedy $name: the old path's tokens ($want_stop)" $ok
    n=$((n + 1))
done <"$G4_FIXTURES/chat/greedy_regression.tsv"
[ $n -ge 11 ]
check "the regression table has its $n cases" $?

# --ignore-eos: the EOS case runs on to max_new, its first tokens the recorded ones
IFS=$'\t' read -r -a f < <(grep "^tiny2_ids30" "$G4_FIXTURES/chat/greedy_regression.tsv")
want=${f[2]}
"$G4CU" generate "$G4_FIXTURES/${f[1]}" --ids "${f[5]}" --max-new 50 --ignore-eos --json >"$tmp/out" 2>"$tmp/err"
got=$(tokens "$tmp/out")
[ "${f[3]}" = eos ] && [ "${got:0:${#want}}" = "$want" ] && [ "$(stop_reason "$tmp/out")" = max_new ] &&
    grep -q '"new_tokens":50' "$tmp/out"
check "--ignore-eos: past the recorded EOS to max_new 50, the same tokens first" $?
finish test_greedy_regress
