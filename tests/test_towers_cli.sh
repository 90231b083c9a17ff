#!/usr/bin/env bash
# test_towers_cli.sh: `g4cu logits PKG --ids ... --image F --audio F` on bad and unusual media:
# each gives exit 1 with one line on stderr that names the problem (and the file where there is
# one), or the right conversion (exit 0), never a crash. The files are made here or come from
# the front-end fixtures (tests/fixtures/frontends/media).
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
pkg="$G4_FIXTURES/mobius-tiny-f16/package"
media="$G4_FIXTURES/refdumps/mm/media"
fe="$G4_FIXTURES/frontends/media"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# ids: "2,5," + n copies of id + ",7"
ids_with() {
    local n=$1 id=$2 s="2,5"
    for ((i = 0; i < n; i++)); do s="$s,$id"; done
    echo "$s,7"
}

# expect_err WHAT PATTERN ARGS...: exit 1 and exactly one stderr line containing PATTERN.
expect_err() {
    local what=$1 pat=$2
    shift 2
    "$G4CU" logits "$@" --out "$tmp/out.npy" >"$tmp/stdout" 2>"$tmp/stderr"
    local rc=$? lines
    lines=$(wc -l <"$tmp/stderr")
    if [ $rc -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$pat" "$tmp/stderr"; then
        echo "FAIL $what: exit $rc, $lines stderr lines, expected exit 1 and one line with '$pat':"
        cat "$tmp/stderr"
        fail=$((fail + 1))
    else
        echo "ok   $what: $(cat "$tmp/stderr")"
    fi
}

# expect_ok WHAT ARGS...: exit 0 and a logits file.
expect_ok() {
    local what=$1
    shift
    rm -f "$tmp/out.npy"
    "$G4CU" logits "$@" --out "$tmp/out.npy" >"$tmp/stdout" 2>"$tmp/stderr"
    local rc=$?
    if [ $rc -ne 0 ] || [ ! -s "$tmp/out.npy" ]; then
        echo "FAIL $what: exit $rc, expected 0 and $tmp/out.npy:"
        cat "$tmp/stderr"
        fail=$((fail + 1))
    else
        echo "ok   $what: logits written ($(wc -c <"$tmp/out.npy") bytes)"
    fi
}

# The soft-token count g4cu reports for a file (from the merge error of a prompt without
# placeholders: "... but the image gives N soft tokens").
count_of() { # kind file [extra args]
    local kind=$1 file=$2
    shift 2
    "$G4CU" logits "$pkg" --ids 2,5,7 "--$kind" "$file" "$@" --out "$tmp/x.npy" 2>&1 |
        sed -n "s/.*but the $kind gives \([0-9]*\) soft tokens.*/\1/p"
}

head -c 300 "$media/photo_40x30.png" >"$tmp/truncated.png"
expect_err "truncated PNG" "truncated.png" "$pkg" --ids "$(ids_with 266 258880)" --image "$tmp/truncated.png"
echo "not an image at all" >"$tmp/text.png"
expect_err "text file as image" "text.png" "$pkg" --ids "$(ids_with 266 258880)" --image "$tmp/text.png"
echo "plain text, not a sound file" >"$tmp/notes.wav"
expect_err "non-audio file" "notes.wav" "$pkg" --ids "$(ids_with 3 258881)" --audio "$tmp/notes.wav"
: >"$tmp/empty.flac"
expect_err "0-byte audio file" "empty.flac" "$pkg" --ids "$(ids_with 3 258881)" --audio "$tmp/empty.flac"
# A valid WAV header (16 kHz mono 16-bit) with a 0-byte data chunk: no samples.
printf 'RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80\x3e\x00\x00\x00\x7d\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00' >"$tmp/zero.wav"
expect_err "0-length WAV" "zero.wav" "$pkg" --ids "$(ids_with 3 258881)" --audio "$tmp/zero.wav"
expect_err "missing file" "nowhere.png" "$pkg" --ids 2,258880,7 --image "$tmp/nowhere.png"

# 8-bit unsigned 44.1 kHz stereo WAV: mixed down and resampled to 16 kHz, then the tower.
n=$(count_of audio "$fe/stereo_44k_u8.wav")
if [ -z "$n" ] || [ "$n" -lt 1 ]; then
    echo "FAIL 8-bit 44.1 kHz stereo WAV: no soft-token count"
    fail=$((fail + 1))
else
    expect_ok "8-bit 44.1 kHz stereo WAV ($n soft tokens)" "$pkg" --ids "$(ids_with "$n" 258881)" \
        --audio "$fe/stereo_44k_u8.wav"
    expect_err "one audio placeholder too many" "placeholder ids (258881) but the audio gives $n" \
        "$pkg" --ids "$(ids_with $((n + 1)) 258881)" --audio "$fe/stereo_44k_u8.wav"
fi

# 20000x10: at the package's 280-token budget the grid is 840 x 3 patches, wider than this tiny
# model's 256-entry position table (E2B has 10240): a clear error. At 70 tokens (210 x 3) it runs.
expect_err "20000x10 image, 280 tokens" "exceeds the vision position table of 256" "$pkg" \
    --ids "$(ids_with 280 258880)" --image "$fe/strip_20000x10.png"
n=$(count_of image "$fe/strip_20000x10.png" --image-tokens 70)
if [ "$n" != 70 ]; then
    echo "FAIL 20000x10 image at 70 tokens: count '$n', expected 70"
    fail=$((fail + 1))
else
    expect_ok "20000x10 image, 70 tokens" "$pkg" --ids "$(ids_with 70 258880)" \
        --image "$fe/strip_20000x10.png" --image-tokens 70
fi
expect_err "unsupported image budget" "max_soft_tokens 100" "$pkg" --ids 2,258880,7 \
    --image "$media/photo_40x30.png" --image-tokens 100
expect_err "image placeholders without an image" "1 image placeholder ids (258880) but no image was given" \
    "$pkg" --ids 2,258880,7

echo "test_towers_cli: $fail failed"
[ $fail -eq 0 ]
