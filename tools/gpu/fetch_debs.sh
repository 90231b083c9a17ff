#!/usr/bin/env bash
# On a Debian CPU machine: downloads the .deb files the GPU machine lacks into .debs/ (ignored by
# git; name it in the device call's carry list). About 5 MB. The font packages the multimodal
# proxy's images are rendered with travel in .carry/mmdata/fonts/ instead (tools/gpu/
# fetch_mm_carry.sh): only the mm calls carry them, and the fidelity call's carry (.debs .whl
# .carry/corpus) stays under the device tool's 64 MiB with the tracked tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .debs && cd .debs
apt-get download libprotobuf-c1 libprotobuf-c-dev protobuf-c-compiler libprotoc32 libprotobuf32 \
    libcjson1 libcjson-dev libsndfile1 libsndfile1-dev libflac12 libogg0 libvorbis0a \
    libvorbisenc2 libopus0 libmp3lame0 libmpg123-0 libsoxr0 libsoxr-dev libutf8proc2 \
    libutf8proc-dev libpcre2-8-0 libpcre2-dev libmicrohttpd12 libmicrohttpd-dev
