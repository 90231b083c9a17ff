#!/usr/bin/env bash
# test_logits_media_cli.sh: `g4cu logits --image / --audio` with one placeholder id standing for
# the media block: the logits equal, byte for byte, those of the same prompt with the block
# typed out in full (<|image> + n x <|image|> + <image|>, the ids looked up here with g4cu
# tokenize, n from g4cu features: the path logits always had), for an image, an audio clip and
# both; without a tokenizer it is a one-line error naming the package.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
tok="$G4_FIXTURES/chat/chat_bpe.json"
img="$G4_FIXTURES/frontends/media/square_rgb.png"
wav="$G4_FIXTURES/frontends/media/tone_1s_f32.wav"
id() { "$G4CU" tokenize "$tok" "$1"; }
ph_img=$(id "<|image|>") ph_aud=$(id "<|audio|>")
boi=$(id "<|image>") eoi=$(id "<image|>") boa=$(id "<|audio>") eoa=$(id "<audio|>")
n_img=$("$G4CU" features "$G4_TINY_PKG" --image "$img" | sed -nE 's/.* ([0-9]+) soft tokens.*/\1/p')
n_aud=$("$G4CU" features "$G4_TINY_PKG" --audio "$wav" | sed -nE 's/.* ([0-9]+) soft tokens.*/\1/p')
[ -n "$n_img" ] && [ -n "$n_aud" ] && [ "$n_img" -gt 1 ] && [ "$n_aud" -gt 1 ]
check "soft-token counts from g4cu features ($n_img, $n_aud)" $?
block() { # BEGIN ID N END
    local s=$1
    for ((i = 0; i < $3; i++)); do s="$s,$2"; done
    echo "$s,$4"
}
full_img=$(block "$boi" "$ph_img" "$n_img" "$eoi")
full_aud=$(block "$boa" "$ph_aud" "$n_aud" "$eoa")

run() { "$G4CU" logits "$G4_TINY_PKG" "$@" >/dev/null 2>"$tmp/err"; }
run --ids "2,5,$full_img,7" --image "$img" --out "$tmp/img_full.npy" &&
    run --ids 2,5,"$ph_img",7 --image "$img" --tokenizer "$tok" --out "$tmp/img_one.npy" &&
    cmp -s "$tmp/img_full.npy" "$tmp/img_one.npy"
check "logits --image: one placeholder = the typed-out block" $?
run --ids "2,$full_aud,9,7" --audio "$wav" --out "$tmp/aud_full.npy" &&
    run --ids 2,"$ph_aud",9,7 --audio "$wav" --tokenizer "$tok" --out "$tmp/aud_one.npy" &&
    cmp -s "$tmp/aud_full.npy" "$tmp/aud_one.npy"
check "logits --audio: one placeholder = the typed-out block" $?
run --ids "2,$full_img,$full_aud,7" --image "$img" --audio "$wav" --out "$tmp/both_full.npy" &&
    run --ids 2,"$ph_img,$ph_aud",7 --image "$img" --audio "$wav" --tokenizer "$tok" \
        --out "$tmp/both_one.npy" && cmp -s "$tmp/both_full.npy" "$tmp/both_one.npy"
check "logits --image --audio: one placeholder each = the typed-out blocks" $?
# the expanded prompt's length: the .npy rows (header: shape (rows, vocab))
grep -aq "($((4 + n_img + 2 + n_aud + 2 - 2)), " "$tmp/both_one.npy"
check "the expanded prompt has $((n_img + n_aud + 6)) rows" $?

err1 "a lone placeholder without a tokenizer" "has no tokenizer.json for the media's begin / end ids" \
    "$G4CU" logits "$G4_TINY_PKG" --ids 2,"$ph_img",7 --image "$img" --out "$tmp/x.npy"
err1 "two placeholders: a count mismatch, not expanded" "but the image gives $n_img soft tokens" \
    "$G4CU" logits "$G4_TINY_PKG" --ids 2,"$ph_img","$ph_img",7 --image "$img" --tokenizer "$tok" \
    --out "$tmp/x.npy"
finish test_logits_media_cli
