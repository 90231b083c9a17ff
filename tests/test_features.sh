#!/usr/bin/env bash
# test_features.sh: `g4cu features` on the front-end fixtures: the counts HF reported (see
# tests/fixtures/frontends/manifest.txt), the --out files, and one-line errors with exit 1.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
fx="$G4_FIXTURES/frontends"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"

"$G4CU" features "$G4_TINY_PKG" --image "$fx/media/big_down.png" --out "$tmp/pv.npy" >"$tmp/out" 2>&1
check "image exit 0" $?
cat "$tmp/out"
# 640x480 under 280 soft tokens (the package's budget): HF's rule gives 912x672 (manifest line
# "target 480 640 280 672 912"), 57x42 patches, 266 soft tokens
grep -q "640x480 -> 912x672 pixels (w x h), 57x42 patches of 768 values (HF pads to 2520), 266 soft tokens" "$tmp/out"
check "image counts" $?
# .npy v1.0: a header of a multiple of 64 bytes, then 2394 x 768 float32
size=$(stat -c %s "$tmp/pv.npy")
[ $(( (size - 2394 * 768 * 4) % 64 )) -eq 0 ] && [ "$size" -gt $((2394 * 768 * 4)) ]
check "pixel_values file size ($size)" $?
size=$(stat -c %s "$tmp/pv.positions.npy")
[ $(( (size - 2394 * 2 * 4) % 64 )) -eq 0 ] && [ "$size" -gt $((2394 * 2 * 4)) ]
check "positions file written ($size)" $?

"$G4CU" features "$G4_TINY_PKG" --audio "$fx/media/long_31s.flac" --out "$tmp/feat" >"$tmp/out" 2>&1
check "audio exit 0" $?
cat "$tmp/out"
grep -q "log-mel \[2999, 128\], 2999 valid frames, 750 soft tokens" "$tmp/out"
check "audio counts" $?
grep -q "truncated to the first 30 s" "$tmp/out"
check "audio truncation reported" $?
[ -s "$tmp/feat" ] && [ -s "$tmp/feat.mask.npy" ]
check "audio files written" $?

"$G4CU" features "$G4_TINY_PKG" --audio "$fx/media/stereo_44k_u8.wav" >"$tmp/out" 2>&1
check "8-bit stereo 44.1 kHz exit 0" $?
grep -q "44100 Hz, 2 channel(s), 22050 frames -> 8000 samples at 16000 Hz" "$tmp/out"
check "8-bit stereo conversion" $?

"$G4CU" features "$G4_TINY_PKG" --image "$fx/manifest.txt" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "manifest.txt: not a PNG or JPEG" "$tmp/err"
check "non-image: exit 1, one line naming the file" $?
"$G4CU" features "$G4_TINY_PKG" --audio "$fx/media/photo.jpg" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "photo.jpg: not a sound file" "$tmp/err"
check "non-audio: exit 1, one line naming the file" $?
"$G4CU" features "$G4_TINY_PKG" --image a.png --audio b.wav >/dev/null 2>&1
[ $? -eq 1 ]
check "both --image and --audio: usage error" $?
"$G4CU" features "$G4_TINY_PKG" >/dev/null 2>&1
[ $? -eq 1 ]
check "neither: usage error" $?

finish test_features
