#!/usr/bin/env bash
# Installs the Debian packages g4cu builds against (the CUDA 13 toolkit itself is assumed:
# nvcc on PATH, cuBLAS and cuDNN in its lib64). Runs apt-get as root, or through sudo.
set -euo pipefail
pkgs=(cmake make gcc g++ clang libclang-rt-14-dev
      protobuf-c-compiler libprotobuf-c-dev libcjson-dev zlib1g-dev libpng-dev libjpeg-dev
      libsndfile1-dev libsoxr-dev libutf8proc-dev libpcre2-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -eq 0 ]; then echo "install_deps: all ${#pkgs[@]} packages present"; exit 0; fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
