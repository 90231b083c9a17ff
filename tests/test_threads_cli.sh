#!/usr/bin/env bash
# test_threads_cli.sh: --threads N and G4_THREADS on the tiny fixture (CPU backend): logits
# (bit for bit, the .npy files compared byte for byte) and greedy generate with an image and
# audio (the towers' attention and convs too) give the same output on 1, 3 and all cores; bad
# values are one-line usage errors. The ops themselves at odd shapes: test_threads.c.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
tok="$G4_FIXTURES/chat/chat_bpe.json"
media="$G4_FIXTURES/frontends/media"
ids=2,105,236,107,368,563,506,760,881,106,107,105,436,107

for n in 1 3 all; do
    opt=(--threads "$n")
    [ $n = all ] && opt=()
    "$G4CU" logits "$G4_TINY_PKG" --ids "$ids" "${opt[@]}" --out "$tmp/logits_$n.npy" \
        >/dev/null 2>"$tmp/err"
    check "logits --threads $n" $?
    "$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --image "$media/square_rgb.png" \
        --audio "$media/tone_1s_f32.wav" --prompt "Both?" --max-new 6 --ignore-eos \
        "${opt[@]}" --json >"$tmp/gen_$n" 2>"$tmp/err"
    check "generate --image --audio --threads $n" $?
    sed -E 's/.*"tokens":\[([^]]*)\].*/\1/' "$tmp/gen_$n" >"$tmp/tok_$n"
done
for n in 3 all; do
    cmp -s "$tmp/logits_1.npy" "$tmp/logits_$n.npy"
    check "logits: $n threads bit-identical to 1" $?
    [ -s "$tmp/tok_1" ] && cmp -s "$tmp/tok_1" "$tmp/tok_$n"
    check "generate tokens: $n threads the same as 1" $?
done
# G4_THREADS, and --threads before the command's own arguments
G4_THREADS=3 "$G4CU" logits "$G4_TINY_PKG" --ids "$ids" --out "$tmp/logits_env.npy" >/dev/null 2>&1 &&
    cmp -s "$tmp/logits_1.npy" "$tmp/logits_env.npy"
check "G4_THREADS=3 logits bit-identical" $?
"$G4CU" logits --threads 2 "$G4_TINY_PKG" --ids "$ids" --out "$tmp/logits_pre.npy" >/dev/null 2>&1 &&
    cmp -s "$tmp/logits_1.npy" "$tmp/logits_pre.npy"
check "--threads before the package" $?

err1 "--threads 0" "--threads expects an integer in \[1, 1024\], got '0'" \
    "$G4CU" logits "$G4_TINY_PKG" --ids 2 --out "$tmp/x.npy" --threads 0
err1 "--threads without a value" "--threads expects an integer" \
    "$G4CU" logits "$G4_TINY_PKG" --ids 2 --out "$tmp/x.npy" --threads
err1 "G4_THREADS=lots" "G4_THREADS expects an integer in \[1, 1024\], got 'lots'" \
    env G4_THREADS=lots "$G4CU" logits "$G4_TINY_PKG" --ids 2 --out "$tmp/x.npy"
"$G4CU" help | grep -q -- "--threads N"
check "g4cu help names --threads" $?
finish test_threads_cli
