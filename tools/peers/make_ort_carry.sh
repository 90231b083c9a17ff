#!/usr/bin/env bash
# Makes the onnxruntime-genai carry for the GPU machine (run on a CPU machine that reaches PyPI):
#
#   bash tools/peers/make_ort_carry.sh DIR [CHUNK_MB]
#
# Downloads onnxruntime-genai-cuda 0.18.0 and onnxruntime-gpu 1.31.1 (cp312, the GPU image's
# python), keeps only what onnxruntime-genai loads (../shared/bench/PEERS.md), zeroes the CUDA
# provider's cubins for other GPUs than sm_90 (tools/peers/prune_fatbin.py: 284 -> 77 MB of GPU
# code), packs it as ort.tar.xz and splits it into DIR/ort.tar.xz.partNN of CHUNK_MB (default 30)
# with DIR/ort.sha256: one part goes in each device call (.ortc), tools/peers/ort_stash.sh puts
# them together on the machine.
set -euo pipefail
dir=$1 chunk=${2:-30}
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 -d "$tmp/whl" onnxruntime-genai-cuda==0.18.0 onnxruntime-gpu==1.31.1
mkdir -p "$tmp/ort/onnxruntime/capi" "$dir"
(cd "$tmp/ort" && unzip -q "$tmp"/whl/onnxruntime_gpu-*.whl 'onnxruntime/capi/libonnxruntime.so.*' \
    'onnxruntime/capi/libonnxruntime_providers_shared.so' 'onnxruntime/capi/libonnxruntime_providers_cuda.so' &&
    unzip -q "$tmp"/whl/onnxruntime_genai_cuda-*.whl 'onnxruntime_genai/*' -x 'onnxruntime_genai/models/*')
: >"$tmp/ort/onnxruntime/__init__.py" # onnxruntime-genai only locates the package
p=$tmp/ort/onnxruntime/capi/libonnxruntime_providers_cuda.so
"$py" "$(dirname "$0")/prune_fatbin.py" "$p" "$p.pruned" --keep-sm 90 | tail -1
mv "$p.pruned" "$p"
(cd "$tmp" && tar cf - ort | xz -6 -T2 >ort.tar.xz)
rm -f "$dir"/ort.tar.xz.part*
split -b "${chunk}M" -d "$tmp/ort.tar.xz" "$dir/ort.tar.xz.part"
(cd "$tmp" && sha256sum ort.tar.xz) >"$dir/ort.sha256"
ls -l "$dir"
