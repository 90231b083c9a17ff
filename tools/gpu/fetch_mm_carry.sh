#!/usr/bin/env bash
# On a Debian CPU machine (root): everything tools/gpu/run.sh's mm_* stages (issue 35) need that
# the GPU machine cannot make, for the device call's carry list (.debs .whl .carry/mmdata):
#   .debs/          the font packages (tools/gpu/fetch_debs.sh)
#   .whl/opt/       a Pillow wheel for the GPU machine's Python 3.12, installed there only when
#                   its python3 has no PIL
#   .carry/corpus   the sentences (tools/python/prepare_corpus.py), unless present
#   .carry/mmdata   the espeak-ng speech and the item plan (tools/python/make_mm_data.py speech;
#                   about 15 MB; resumes an interrupted run: the same samples either way)
# The speech takes ~0.25 s of CPU per utterance (3080 of them): about 7 minutes on 2 idle cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v espeak-ng >/dev/null || apt-get install -y -q espeak-ng >/dev/null
ls .debs/fonts-freefont-ttf_*.deb >/dev/null 2>&1 || tools/gpu/fetch_debs.sh
venv=.tools/mm-venv # numpy + soundfile (Opus) for make_mm_data.py
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check numpy soundfile
fi
mkdir -p .whl/opt
ls .whl/opt/pillow-*.whl >/dev/null 2>&1 ||
    "$venv/bin/pip" download -q --disable-pip-version-check --only-binary=:all: --no-deps \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        pillow==12.0.0 -d .whl/opt
[ -f .carry/corpus/train.txt ] || python3 tools/python/prepare_corpus.py --out .carry/corpus
"$venv/bin/python" tools/python/make_mm_data.py speech .carry/mmdata --corpus .carry/corpus \
    --preset "${MM_PRESET:-proxy}" --jobs "${MM_JOBS:-$(nproc)}"
du -sh .debs .whl .carry/mmdata
