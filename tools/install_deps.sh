#!/usr/bin/env bash
# Installs the Debian packages g4cu builds against (the CUDA 13 toolkit itself is assumed: nvcc
# on PATH, cuBLAS and cuDNN in its lib64), then lays out the eval smoke set's media in
# .smoke-data/ from two Debian packages without installing them or their dependencies
# (tools/fetch_smoke_set.sh: pocketsphinx-testdata's LibriVox utterances, python3-skimage's text
# images; tests/test_eval_smoke.sh reads them), and puts cuobjdump + nvdisasm in .tools/ when
# the toolkit lacks them (tests/test_pdl_sass.sh), and makes the venv .tools/openai-venv with
# the official `openai` client, litellm and langchain-openai from PyPI (tests/test_openai_client.sh, test_clients.sh). Runs apt-get as root, or
# through sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
# libmicrohttpd-dev: `g4cu serve` (without it the build works and serve says so).
# python3 + python3-venv: the venv below (no pip into the system python).
# clang + libclang-rt-dev: the libFuzzer, ASan and UBSan runtimes of Debian's default clang
# (tests/fuzz/build.sh, tests/test_fuzz_smoke.sh); the unversioned names follow the release.
# slurmctld + slurmd + slurm-client + munge: tests/test_slurm_real.sh runs tools/slurm/eval.sbatch
# under a one-node Slurm it starts itself (its own slurm.conf and munge key in a temporary
# directory); the packages' own services are not used.
pkgs=(cmake make gcc g++ clang libclang-rt-dev
      protobuf-c-compiler libprotobuf-c-dev libcjson-dev zlib1g-dev libpng-dev libjpeg-dev
      libsndfile1-dev libsoxr-dev libutf8proc-dev libpcre2-dev libmicrohttpd-dev
      python3 python3-venv slurmctld slurmd slurm-client munge)
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
# The official `openai` Python client (Debian bookworm has no python3-openai): a venv of
# Debian's python3 in .tools/openai-venv (ignored), every package pinned by
# tools/python/requirements-openai.txt; made again when that file changes (its hash in the
# venv). tests/test_openai_client.sh runs tools/python/openai_client_check.py with it against
# `g4cu serve`; it skips without the venv, and fails without it under CI=true.
venv=.tools/openai-venv
req=tools/python/requirements-openai.txt
req_sha=$(sha256sum "$req" | cut -d' ' -f1)
if [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$req_sha" ]; then
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
    echo "$req_sha" >"$venv/.requirements.sha256"
    ver=$("$venv/bin/python" -c 'import openai; print(openai.__version__)')
    echo "install_deps: $venv: openai $ver"
else
    echo "install_deps: $venv up to date"
fi
# onnxruntime's CPU provider (tests/test_quant_ort.sh: every quantize method's package run by
# onnxruntime): the venv .tools/ort-venv, pinned by tools/python/requirements-ort.txt, made again
# when that file changes (its hash in the venv). Without it that test skips, saying why.
venv_ort=.tools/ort-venv
req_ort=tools/python/requirements-ort.txt
req_ort_sha=$(sha256sum "$req_ort" | cut -d' ' -f1)
if [ "$(cat "$venv_ort/.requirements.sha256" 2>/dev/null)" != "$req_ort_sha" ]; then
    rm -rf "$venv_ort"
    if /usr/bin/python3 -m venv "$venv_ort" &&
        "$venv_ort/bin/python" -m pip install -q --disable-pip-version-check -r "$req_ort"; then
        echo "$req_ort_sha" >"$venv_ort/.requirements.sha256"
        echo "install_deps: $venv_ort: onnxruntime $("$venv_ort/bin/python" -c 'import onnxruntime; print(onnxruntime.__version__)')"
    else
        rm -rf "$venv_ort"
        echo "install_deps: could not make $venv_ort; tests/test_quant_ort.sh will skip" >&2
    fi
else
    echo "install_deps: $venv_ort up to date"
fi
# cuobjdump + nvdisasm (it calls nvdisasm for SASS): a toolkit of nvcc + ptxas only lacks them;
# tests/test_pdl_sass.sh reads the kernels' SASS with them. NVIDIA's PyPI wheels (any 13.x reads
# sm_90a code), pinned by hash, unpacked into .tools/cuda (ignored; both land in nvidia/cu13/bin).
# Without them that test skips, saying why.
CUDA_TOOLS_VER=13.5.37
CUDA_TOOLS=("nvidia-cuda-cuobjdump nvidia_cuda_cuobjdump 38780fee50863252a0b8926357faa91615ca1c8346490563f33a06100cd73f58"
            "nvidia-cuda-nvdisasm nvidia_cuda_nvdisasm d3fdbdd49fa53e2e4aacd3db8259d052bd2b049ececdcb69e92e083c6728e7ca")
nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /none/nvcc)")
if ! { command -v cuobjdump && command -v nvdisasm; } >/dev/null 2>&1 &&
    ! [ -x "$nvcc_dir/cuobjdump" -a -x "$nvcc_dir/nvdisasm" ] &&
    ! [ -x .tools/cuda/nvidia/cu13/bin/cuobjdump -a -x .tools/cuda/nvidia/cu13/bin/nvdisasm ]; then
    tmp=$(mktemp -d)
    rm -rf .tools/cuda && mkdir -p .tools/cuda
    for t in "${CUDA_TOOLS[@]}"; do
        read -r name file sha <<<"$t"
        whl="$tmp/$file-$CUDA_TOOLS_VER-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
        # The venv's pip: a clean Debian's python3 has none (no python3-pip).
        if "$venv/bin/python" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" \
                "$name==$CUDA_TOOLS_VER" &&
            echo "$sha  $whl" | sha256sum -c --quiet; then
            python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
                "$whl" .tools/cuda
        else
            echo "install_deps: could not fetch $name $CUDA_TOOLS_VER from PyPI; tests/test_pdl_sass.sh will skip" >&2
        fi
    done
    chmod +x .tools/cuda/nvidia/cu13/bin/* 2>/dev/null || true
    rm -rf "$tmp"
fi
