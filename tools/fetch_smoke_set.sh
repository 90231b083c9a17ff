#!/usr/bin/env bash
# fetch_smoke_set.sh: lays out the eval smoke set's media (tests/fixtures/eval/*_smoke.jsonl) in a
# data directory, from two Debian packages, without installing them or their dependencies:
#
#   pocketsphinx-testdata (BSD-2-Clause, Carnegie Mellon University; Debian 12: 0.8+5prealpha+1-15)
#     librivox/*.wav  5 LibriVox utterances of "Sense and Sensibility" (public-domain recordings,
#                     the source LibriSpeech is cut from), 16 kHz mono s16, 24.6 s in all, with
#                     their transcription
#     cards/*.wav     5 spoken playing-card names ("ten of clubs", ...), 16 kHz mono s16, 9.7 s
#   python3-skimage   (BSD-3-Clause, the scikit-image team; Debian 12: 0.19.3-8)
#     skimage/page.png     384x191 grey photo of a printed textbook page
#     skimage/bw_text.png  516x333 rendered prose ("Men may seem detestable as joint ...")
#
# Usage: tools/fetch_smoke_set.sh DATA_DIR [--debs DIR] [--no-verify] [--write-manifest FILE]
#   Files come from the installed packages when present, else from DIR/*.deb (--debs: for a
#   machine without a registry, carry the two .deb files there), else from `apt-get download`
#   (needs `apt-get update` once; no root needed). Each file's sha256 is checked against the one
#   the manifests and the recorded predictions were written for (--no-verify skips that).
#   --write-manifest FILE regenerates librispeech_smoke.jsonl from the shipped transcriptions.
# The manifests' audio/image paths are relative to DATA_DIR. Licence texts go to DATA_DIR/licenses.
set -euo pipefail

usage() { echo "usage: $0 DATA_DIR [--debs DIR] [--no-verify] [--write-manifest FILE]" >&2; exit 1; }
[ $# -ge 1 ] || usage
out=$1
shift
debs="" verify=1 manifest=""
while [ $# -gt 0 ]; do
    case $1 in
        --debs) [ $# -ge 2 ] || usage; debs=$2; shift 2 ;;
        --no-verify) verify=0; shift ;;
        --write-manifest) [ $# -ge 2 ] || usage; manifest=$2; shift 2 ;;
        *) usage ;;
    esac
done

PS_DIR=/usr/share/pocketsphinx/test/data
SK_DIR=/usr/lib/python3/dist-packages/skimage/data
LIBRIVOX_IDS="0870 0880 0890 0920 0930"
CARD_IDS="001 002 003 004 005"

# file (relative to DATA_DIR) and the sha256 the fixtures were made against
SHA256="
librivox/sense_and_sensibility_01_austen_64kb-0870.wav b0557cf95c974d930577e58e46b7f068c432a6e3afcc286563d88922b2a5315c
librivox/sense_and_sensibility_01_austen_64kb-0880.wav fbec491ef00ee734a67f0ee318e98c51c157b479e1629ff4f4426861ecac0414
librivox/sense_and_sensibility_01_austen_64kb-0890.wav 5793ffbdee55fb8bfd284943a6866864c832d9d4accf2661cabd39915c84ee10
librivox/sense_and_sensibility_01_austen_64kb-0920.wav 40882414ef4cc51f3ff7a63bad0c8c87e7f595ffeb8209fbf756c8ebc5c28a59
librivox/sense_and_sensibility_01_austen_64kb-0930.wav 954adbf0b56ac8a148cbe77b39ca18d76b5f2a1e1f405565bd786ce3e68a68b7
cards/001.wav 899951e768666f27c8f8b1d4090b96fe7909cae9cec01bec0a5d5d1b8a8d566e
cards/002.wav a3f9eae6fdb69a1231989e39a14d62388a6f52fb59666c76d95005318fadafec
cards/003.wav 00d283e46bc257ae479e4aa86593cadb541656eba1d19fc8abeece37f6a5a18b
cards/004.wav 4c44a8177f5b128b99f078cdeb918119933155574231f1833e8840d1af09c521
cards/005.wav 090f18f5f76cf8b2b43cd9e6b07823f4685a4742d9a36cd98b174a6586c18cf9
skimage/page.png 341a6f0a61557662b02734a9b6e56ec33a915b2c41886b97509dedf2a43b47a3
skimage/bw_text.png 308c2b09f8975a69b212e103b18520e8cbb7a4eccfce0f757836cd371f1b9094
"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# root_of PKG PROBE: a directory that holds the package's files under their installed paths
# (/ when the package is installed, else an extraction of its .deb).
root_of() {
    local pkg=$1 probe=$2 deb
    if [ -f "$probe" ]; then
        dpkg-query -W -f '${Version} (installed)' "$pkg" >"$tmp/version-$pkg" 2>/dev/null || echo "installed" >"$tmp/version-$pkg"
        echo /
        return
    fi
    deb=""
    if [ -n "$debs" ]; then deb=$(find "$debs" -maxdepth 1 -name "${pkg}_*.deb" | sort | head -n1); fi
    if [ -z "$deb" ]; then
        if ! (cd "$tmp" && apt-get download "$pkg" >"$tmp/apt-$pkg.log" 2>&1); then
            echo "fetch_smoke_set: cannot get $pkg: $(tail -n1 "$tmp/apt-$pkg.log") (run 'apt-get update', or pass --debs DIR with ${pkg}_*.deb)" >&2
            exit 1
        fi
        deb=$(find "$tmp" -maxdepth 1 -name "${pkg}_*.deb" | sort | head -n1)
    fi
    echo "$(dpkg-deb -f "$deb" Version) ($(basename "$deb"))" >"$tmp/version-$pkg"
    mkdir -p "$tmp/root-$pkg"
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/root-$pkg"
    echo "$tmp/root-$pkg"
}

# version_of PKG: the version the files came from
version_of() { cat "$tmp/version-$1"; }

ps_root=$(root_of pocketsphinx-testdata "$PS_DIR/librivox/transcription")
sk_root=$(root_of python3-skimage "$SK_DIR/page.png")

mkdir -p "$out/librivox" "$out/cards" "$out/skimage" "$out/licenses"
for id in $LIBRIVOX_IDS; do
    cp "$ps_root$PS_DIR/librivox/sense_and_sensibility_01_austen_64kb-$id.wav" "$out/librivox/"
done
cp "$ps_root$PS_DIR/librivox/transcription" "$out/librivox/transcription"
for id in $CARD_IDS; do cp "$ps_root$PS_DIR/cards/$id.wav" "$out/cards/"; done
cp "$ps_root$PS_DIR/cards/cards.transcription" "$out/cards/cards.transcription"
cp "$sk_root$SK_DIR/page.png" "$sk_root$SK_DIR/bw_text.png" "$out/skimage/"
cp "$ps_root/usr/share/doc/pocketsphinx-testdata/copyright" "$out/licenses/pocketsphinx-testdata.copyright"
cp "$sk_root/usr/share/doc/python3-skimage/copyright" "$out/licenses/python3-skimage.copyright"
chmod -R u+w "$out"

bad=0
if [ "$verify" -eq 1 ]; then
    while read -r f sum; do
        [ -n "$f" ] || continue
        got=$(sha256sum "$out/$f" | cut -d' ' -f1)
        if [ "$got" != "$sum" ]; then
            echo "fetch_smoke_set: $out/$f: sha256 $got, expected $sum (another package version?)" >&2
            bad=1
        fi
    done <<<"$SHA256"
fi
[ "$bad" -eq 0 ] || exit 1

if [ -n "$manifest" ]; then
    # {"id", "audio", "question", "transcript", "category"} per utterance, from "<s> text </s> (id)"
    q="Please recognize the speech and only output the recognized content:"
    {
        sed -E 's/^<s> *(.*[^ ]) *<\/s> *\((sense_and_sensibility_01_austen_64kb-([0-9]+))\)$/\3\t\2\t\1/' \
            "$out/librivox/transcription" |
            while IFS=$'\t' read -r short fid text; do
                text=$(echo "$text" | tr -s ' ')
                printf '{"id": "librivox-%s", "audio": "librivox/%s.wav", "question": "%s", "transcript": "%s", "category": "librivox"}\n' \
                    "$short" "$fid" "$q" "$text"
            done
        sed -E 's/^<s> *(.*[^ ]) *<\/s> *\(([0-9]+)\)$/\2\t\1/' "$out/cards/cards.transcription" |
            while IFS=$'\t' read -r fid text; do
                text=$(echo "$text" | tr -s ' ')
                printf '{"id": "cards-%s", "audio": "cards/%s.wav", "question": "%s", "transcript": "%s", "category": "cards"}\n' \
                    "$fid" "$fid" "$q" "$text"
            done
    } >"$manifest"
    echo "fetch_smoke_set: wrote $manifest"
fi

{
    echo "eval smoke set media, laid out by tools/fetch_smoke_set.sh"
    echo "pocketsphinx-testdata $(version_of pocketsphinx-testdata): BSD-2-Clause, licenses/pocketsphinx-testdata.copyright"
    echo "python3-skimage $(version_of python3-skimage): BSD-3-Clause, licenses/python3-skimage.copyright"
} >"$out/SOURCES.txt"
echo "fetch_smoke_set: $(echo "$SHA256" | grep -c .) media files in $out$([ "$verify" -eq 1 ] && echo ', sha256 verified')"
