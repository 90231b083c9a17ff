#!/usr/bin/env bash
# On a Debian CPU machine (root): what tools/gpu/run.sh's mm_* stages (issue 35) need that the
# GPU machine cannot make, for the device call's carry list (.debs .whl .carry/mmdata):
#   .debs/                 the build's packages (tools/gpu/fetch_debs.sh), as every call
#   .carry/corpus          the sentences (tools/python/prepare_corpus.py), unless present; used
#                          here only (the plan), never carried
#   .carry/mmdata/         the item plan, gzipped (make_mm_data.py plan: speech.jsonl.gz,
#                          images.jsonl.gz, data.json; ~2.4 MB); MM_SPEECH_PIECES=N plans N
#                          short train clips more (--speech-pieces N, train_mm_proxy.py
#                          --a-pieces reads them; 8000: +0.3 MB, the others byte for byte as
#                          without them, and a trainer without --a-pieces reads the same items);
#                          MM_DIVERSE=1 plans with --diverse (the train items' voices and fonts
#                          from WIDE_VARIANTS / WIDE_FONTS, all in the espeak / fonts carried
#                          below; the held-out items as without it; the same size)
#   .carry/mmdata/fonts/   fonts-dejavu-core, fonts-liberation, fonts-freefont-ttf (.debs, ~4.4
#                          MB; tools/gpu/env.sh unpacks them into the prefix make_mm_data.py reads)
#   .carry/mmdata/espeak/  espeak-ng, libespeak-ng1, libsonic0 (.debs) and the English part of
#                          espeak-ng-data (~1 MB): mm_make renders the speech there
#                          (tools/gpu/espeak_prefix.sh, make_mm_data.py speech)
# The GPU image has PIL, numpy, torch, torchvision, transformers, tokenizers; .whl/ (tools/gpu/
# README "GPU machine": mobius-onnx, onnx-shape-inference, soundfile, soxr, cffi, pycparser) the rest.
set -euo pipefail
cd "$(dirname "$0")/../.."
ls .debs/libcjson1_*.deb >/dev/null 2>&1 || tools/gpu/fetch_debs.sh
venv=.tools/mm-venv # numpy for make_mm_data.py plan
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check numpy
fi
[ -f .carry/corpus/train.txt ] || python3 tools/python/prepare_corpus.py --out .carry/corpus
# an earlier version of this script put a Pillow wheel (6.8 MB) there; in .whl it would travel
rm -rf .whl/opt
out=.carry/mmdata
# a fresh folder: speech or media files of an earlier plan would travel (and be taken as this
# plan's by the speech step's resume)
rm -rf "$out" && mkdir -p "$out/espeak" "$out/fonts"
"$venv/bin/python" tools/python/make_mm_data.py plan "$out" --corpus .carry/corpus \
    --preset "${MM_PRESET:-proxy}" --seed "${MM_SEED:-0}" --speech-pieces "${MM_SPEECH_PIECES:-0}" \
    ${MM_DIVERSE:+--diverse}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$out/espeak" && apt-get download -q espeak-ng libespeak-ng1 libsonic0 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
(cd "$tmp" && apt-get download -q espeak-ng-data 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
dpkg -x "$tmp"/espeak-ng-data_*.deb "$tmp/p"
# the English voices and every variant (make_mm_data.py VOICES, VARIANTS, WIDE_VARIANTS)
tar -C "$tmp/p/usr/lib/x86_64-linux-gnu" -cJf "$out/espeak/espeak-ng-data-en.tar.xz" \
    espeak-ng-data/phondata espeak-ng-data/phonindex espeak-ng-data/phontab \
    espeak-ng-data/intonations espeak-ng-data/en_dict espeak-ng-data/lang/gmw \
    'espeak-ng-data/voices/!v'
(cd "$out/fonts" && apt-get download -q fonts-dejavu-core fonts-liberation fonts-freefont-ttf 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
ls "$out"/fonts/fonts-dejavu-core_*.deb "$out"/fonts/fonts-liberation_*.deb "$out"/fonts/fonts-freefont-ttf_*.deb >/dev/null
ls "$out"/espeak/espeak-ng_*.deb "$out"/espeak/libespeak-ng1_*.deb "$out"/espeak/libsonic0_*.deb >/dev/null
# what mm_make does with them, tried here: the prefix's espeak-ng speaks (the stub library
# resolves every symbol), and where this machine has espeak-ng the same WAV bytes as it
if command -v cc >/dev/null; then
    bash tools/gpu/espeak_prefix.sh "$out/espeak" "$tmp/prefix" >/dev/null
    lib=$tmp/prefix/usr/lib/x86_64-linux-gnu
    say=(-v en-gb-scotland+m3 -s 170 -p 40)
    text="Only immediate children are supported, 12 of them."
    LD_BIND_NOW=1 LD_LIBRARY_PATH="$lib" "$tmp/prefix/usr/bin/espeak-ng" --path="$lib" "${say[@]}" -w "$tmp/a.wav" "$text"
    if command -v espeak-ng >/dev/null; then
        espeak-ng "${say[@]}" -w "$tmp/b.wav" "$text"
        cmp "$tmp/a.wav" "$tmp/b.wav" && echo "fetch_mm_carry: the carried espeak-ng speaks as this machine's"
    fi
fi
# what travels: these three (the mm stages' carry list) and the tracked tree
tools/gpu/carry_size.sh .debs .whl "$out" || echo "fetch_mm_carry: the mm carry passes the margin: see tools/gpu/carry_size.sh"
