#!/usr/bin/env bash
# tools/make_mm_tiny.sh PYTHON [WORK]: rebuilds tests/fixtures/mm-tiny (issue 35's CI check,
# tests/test_mm_tiny.sh) from the repository root, on the CPU, one thread, deterministic:
#   make_mm_data.py plan --preset ci   the 8 strings and 8 sentences (no corpus), seed 0
#   make_mm_data.py speech / media     espeak-ng (the system's), the DejaVu font (fonts-dejavu-core)
#   train_mm_proxy.py --preset ci      memorise them, export the f16 package (mobius)
# then copies the package (without the HF checkpoint), the two manifests and their media into
# the fixture. PYTHON: torch, transformers 5.17, tokenizers, mobius-onnx 0.1.0 (.whl/), numpy,
# pillow, soundfile (and libsndfile with FLAC). WORK (default /tmp/mm-tiny) is emptied first.
set -euo pipefail
py=${1:?usage: tools/make_mm_tiny.sh PYTHON [WORK]}
work=${2:-/tmp/mm-tiny}
fx=tests/fixtures/mm-tiny
[ -f tools/python/make_mm_data.py ] || { echo "make_mm_tiny: run from the repository root"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
"$py" tools/python/make_mm_data.py plan "$work/data" --preset ci
"$py" tools/python/make_mm_data.py speech "$work/data" --jobs 1
"$py" tools/python/make_mm_data.py media "$work/data" --jobs 1
"$py" tools/python/train_mm_proxy.py "$work/model" --data "$work/data" --preset ci \
    --device cpu --threads 1 --minutes 30 2>&1 | grep -v "^Saving\|it/s\]"
rm -rf "${fx:?}/package" "${fx:?}/media"
mkdir -p "$fx/media"
cp -r "$work/model/f16" "$fx/package"
cp -r "$work/data/media/test" "$fx/media/test"
cp "$work/data/ocr_test.jsonl" "$work/data/asr_test.jsonl" "$work/model/train.json" "$fx/"
# the clips as FLAC (lossless: the samples trained on, 40% of the WAV bytes; g4cu reads them
# through libsndfile), the manifest's paths and sha256 to match
"$py" - "$fx" <<'PY'
import hashlib, json, os, sys
import soundfile as sf
fx, out = sys.argv[1], []
for line in open(os.path.join(fx, "asr_test.jsonl")):
    it = json.loads(line)
    wav = os.path.join(fx, it["audio"])
    flac = wav[:-len(".wav")] + ".flac"
    x, rate = sf.read(wav, dtype="int16")
    sf.write(flac, x, rate, subtype="PCM_16", format="FLAC")
    if not (sf.read(flac, dtype="int16")[0] == x).all():
        raise SystemExit(f"make_mm_tiny: {flac} does not read back as {wav}")
    os.remove(wav)
    it["audio"] = it["audio"][:-len(".wav")] + ".flac"
    it["sha256"] = hashlib.sha256(open(flac, "rb").read()).hexdigest()
    out.append(json.dumps(it) + "\n")
open(os.path.join(fx, "asr_test.jsonl"), "w").write("".join(out))
PY
du -sh "$fx"
