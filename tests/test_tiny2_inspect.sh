#!/usr/bin/env bash
# test_tiny2_inspect.sh: the loader accepts the second, differently shaped tiny package
# (tests/fixtures/tiny2, made by tools/python/make_tiny2.py) and derives the config that script
# built: hidden 80, 7 layers S S F S F S F, 3 heads / 1 KV head, head_dim 48 / 96, window 5,
# 3 KV-shared layers (4 <- 2, 5 <- 3, 6 <- 2), MLP 32 / 64, PLE dim 32, vocab 256, the fp16
# scales of a non-power-of-4 hidden, RoPE theta 2e4 sliding and proportional 0.5 x 96 full.
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
pkg="$G4_FIXTURES/tiny2/package"
fail=0
pass=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$G4CU" inspect "$pkg" >"$out" 2>&1
rc=$?
expect() { # expect DESCRIPTION EXTENDED-REGEX
    if grep -qE "$2" "$out"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: no line matching '$2'"; fi
}
[ $rc -eq 0 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL inspect exit $rc"; cat "$out"; }
expect "text config" "hidden 80, layers 7, heads 3, kv heads 1, vocab 256, ple dim 32 \(table rows 256\)"
expect "kv sharing" "kv layers 4, kv-shared layers 3"
expect "softcap" "final soft-cap 30"
# fp16(sqrt(80)) = 8.9453125, fp16(sqrt(32)) = 5.65625, fp16(80^-0.5) = 0.11181640625, fp16(2^-0.5)
expect "fp16 scales" "embed scale 8.9453125, ple token scale 5.65625, ple projection scale 0.1118164[0-9]*, ple combine scale 0.70703125"
expect "sliding rope" "head_dim 48, rotating pairs 24 of 24, theta 200[0-9.]+, positions 128"
expect "full rope" "head_dim 96, rotating pairs 24 of 48, theta 99[0-9.]+|head_dim 96, rotating pairs 24 of 48, theta 1e\+06"
expect "layer 0" "^  0 +sliding +48 +5 +32 +own 0 <- 0 +0$"
expect "layer 2" "^  2 +full +96 +0 +32 +own 2 <- 2 +1$"
expect "layer 3" "^  3 +sliding +48 +5 +32 +own 3 <- 3 +0$"
expect "layer 4" "^  4 +full +96 +0 +64 +shared 2 <- 2 +1$"
expect "layer 5" "^  5 +sliding +48 +5 +64 +shared 3 <- 3 +0$"
expect "layer 6" "^  6 +full +96 +0 +64 +shared 2 <- 2 +1$"
expect "vision" "vision tower: hidden 32, layers 1, heads 2 x 16, ffn 64, .*output 80"
expect "audio" "audio tower: .*conv channels 128/8, hidden 32, layers 1, heads 8 x 4, .*output 48 -> 80"
expect "consistent" "consistent: all checks passed"
echo "test_tiny2_inspect: $((pass + fail)) checks, $fail failed"
[ "$fail" -eq 0 ]
