#!/usr/bin/env bash
# espeak-ng without PulseAudio, ALSA or X11, for make_mm_data.py's speech step on the GPU
# machine (issue 35):
#   tools/gpu/espeak_prefix.sh SRC PREFIX
# SRC (.carry/mmdata/espeak, tools/gpu/fetch_mm_carry.sh) holds Debian's espeak-ng,
# libespeak-ng1 and libsonic0 .debs and espeak-ng-data-en.tar.xz (the English part of
# espeak-ng-data: phoneme tables, en_dict, the English voices and the variants); they are
# unpacked into PREFIX and libpcaudio.so.0 is built from tools/gpu/pcaudio_stub.c (libpcaudio0
# would pull the audio servers' libraries; espeak-ng -w never opens a device). Then
#   make_mm_data.py speech OUT --espeak PREFIX
# runs PREFIX/usr/bin/espeak-ng with LD_LIBRARY_PATH and --path at PREFIX/usr/lib/x86_64-linux-gnu.
set -euo pipefail
src=${1:?usage: espeak_prefix.sh SRC PREFIX}
prefix=${2:?usage: espeak_prefix.sh SRC PREFIX}
here=$(cd "$(dirname "$0")" && pwd)
lib=$prefix/usr/lib/x86_64-linux-gnu
n=0
for f in "$src"/*.deb; do
    [ -f "$f" ] || continue
    dpkg -x "$f" "$prefix"
    n=$((n + 1))
done
[ $n -eq 3 ] || { echo "espeak_prefix: $n .deb files in $src, expected 3 (espeak-ng libespeak-ng1 libsonic0)" >&2; exit 1; }
# python's tarfile, not tar -J: the xz program may be missing where the GPU image is slim
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
    "$src/espeak-ng-data-en.tar.xz" "$lib"
${CC:-cc} -shared -fPIC -O2 -o "$lib/libpcaudio.so.0" "$here/pcaudio_stub.c"
# LD_BIND_NOW: every symbol the library imports resolves now, not at first use. --version
# ignores --path (it reads the default /usr/lib/x86_64-linux-gnu/espeak-ng-data, absent on the
# GPU machine: "Error processing file .../phontab"); ESPEAK_DATA_PATH points it at the prefix's
# data, so the line names the data the speech step uses, and a prefix whose data espeak-ng
# cannot read (it still exits 0) fails here.
ver=$(LD_BIND_NOW=1 LD_LIBRARY_PATH="$lib" ESPEAK_DATA_PATH="$lib" "$prefix/usr/bin/espeak-ng" --path="$lib" --version 2>&1)
echo "$ver"
[[ $ver == *"Data at: $lib/espeak-ng-data"* && $ver != *Error* ]] ||
    { echo "espeak_prefix: espeak-ng cannot read its data in $lib/espeak-ng-data (above)" >&2; exit 1; }
