#!/usr/bin/env bash
# Installs the Debian packages g4cu builds against (the CUDA 13 toolkit itself is assumed: nvcc
# on PATH, cuBLAS and cuDNN in its lib64), then lays out the eval smoke set's media in
# .smoke-data/ from two Debian packages without installing them or their dependencies
# (tools/fetch_smoke_set.sh: pocketsphinx-testdata's LibriVox utterances, python3-skimage's text
# images; tests/test_eval_smoke.sh reads them). Runs apt-get as root, or through sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
# clang + libclang-rt-dev: the libFuzzer, ASan and UBSan runtimes of Debian's default clang
# (tests/fuzz/build.sh, tests/test_fuzz_smoke.sh); the unversioned names follow the release.
pkgs=(cmake make gcc g++ clang libclang-rt-dev
      protobuf-c-compiler libprotobuf-c-dev libcjson-dev zlib1g-dev libpng-dev libjpeg-dev
      libsndfile1-dev libsoxr-dev libutf8proc-dev libpcre2-dev)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
updated=0
if [ ${#missing[@]} -gt 0 ]; then
    $sudo apt-get update -qq
    updated=1
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "install_deps: all ${#pkgs[@]} packages present"
fi
if [ ! -f .smoke-data/.complete ]; then
    [ $updated -eq 1 ] || $sudo apt-get update -qq
    rm -rf .smoke-data
    tools/fetch_smoke_set.sh .smoke-data && touch .smoke-data/.complete
fi
