#!/usr/bin/env bash
# On a Debian CPU machine: downloads the .deb files the GPU machine lacks into .debs/ (ignored by
# git; name it in the device call's carry list). About 11 MB; the three font packages (arch-independent
# TrueType files) are what tools/python/make_mm_data.py renders the multimodal proxy's images with.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .debs && cd .debs
apt-get download libprotobuf-c1 libprotobuf-c-dev protobuf-c-compiler libprotoc32 libprotobuf32 \
    libcjson1 libcjson-dev libsndfile1 libsndfile1-dev libflac12 libogg0 libvorbis0a \
    libvorbisenc2 libopus0 libmp3lame0 libmpg123-0 libsoxr0 libsoxr-dev libutf8proc2 \
    libutf8proc-dev libpcre2-8-0 libpcre2-dev libmicrohttpd12 libmicrohttpd-dev \
    fonts-dejavu-core fonts-liberation fonts-freefont-ttf
