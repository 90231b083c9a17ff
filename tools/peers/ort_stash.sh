#!/usr/bin/env bash
# On the GPU machine, in each device call that carries a part of the onnxruntime-genai carry
# (tools/peers/make_ort_carry.sh) in .ortc/: keeps the part in $WORK/ortc (outside the carried
# path, which the next call replaces), and once every part named by ort.sha256's size is there
# and the checksum holds, unpacks $WORK/ort (PYTHONPATH for onnxruntime_genai). Prints one line.
set -uo pipefail
WORK=${WORK:-/tmp/g4work}
mkdir -p "$WORK/ortc"
[ -d .ortc ] && cp -f .ortc/ort.tar.xz.part* .ortc/ort.sha256 "$WORK/ortc/" 2>/dev/null
[ -d "$WORK/ort/onnxruntime_genai" ] && { echo "ort: $WORK/ort ready"; exit 0; }
cd "$WORK/ortc" || exit 1
[ -f ort.sha256 ] || { echo "ort: no ort.sha256 yet ($(ls | wc -l) files)"; exit 0; }
cat ort.tar.xz.part* >ort.tar.xz
if sha256sum -c --status ort.sha256 2>/dev/null; then
    rm -rf "$WORK/ort" && tar xJf ort.tar.xz -C "$WORK" && rm -f ort.tar.xz &&
        echo "ort: unpacked to $WORK/ort ($(ls ort.tar.xz.part* | wc -l) parts)"
else
    echo "ort: $(ls ort.tar.xz.part* | wc -l) parts, checksum not yet complete"
    rm -f ort.tar.xz
fi
