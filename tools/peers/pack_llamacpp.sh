#!/usr/bin/env bash
# Repack the llama.cpp that the llama-cpp-python 0.3.36 sdist (PyPI) vendors into
# .carry/llama.tar.xz: only what building llama-bench + llama-quantize (CPU and CUDA backends)
# and convert_hf_to_gguf.py need, so the GPU machine (no registry) can build and convert there.
#
#   tools/peers/pack_llamacpp.sh [SDIST_OR_LLAMA_DIR] [OUT]   (defaults below)
#
# The sdist's vendor/llama.cpp is 176 MB (docs, models, tests, every backend); this keeps
# CMakeLists, cmake/, ggml/ (its CPU and CUDA backends only), src/, include/, common/, vendor/,
# tools/llama-bench and tools/quantize (with a tools/CMakeLists.txt that adds only those two),
# convert_hf_to_gguf.py, conversion/ (the converter imports it) and gguf-py/.
set -euo pipefail
src=${1:-/work/peers_dl/llama_cpp_python-0.3.36.tar.gz}
out=${2:-.carry/llama.tar.xz}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -f "$src" ]; then
    tar -xzf "$src" -C "$tmp" --wildcards '*/vendor/llama.cpp/*'
    src=$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)
fi
[ -f "$src/convert_hf_to_gguf.py" ] || { echo "pack_llamacpp: $src is not a llama.cpp tree (no convert_hf_to_gguf.py)" >&2; exit 1; }
dst="$tmp/llama.cpp"
mkdir -p "$dst/tools" "$dst/ggml/src"
for p in CMakeLists.txt LICENSE cmake src include common vendor convert_hf_to_gguf.py conversion gguf-py; do
    cp -a "$src/$p" "$dst/"
done
cp -a "$src/tools/llama-bench" "$src/tools/quantize" "$dst/tools/"
# ggml: everything but the backends we do not build (each is added only when its GGML_<X> is ON)
cp -a "$src/ggml/CMakeLists.txt" "$src/ggml/cmake" "$src/ggml/include" "$dst/ggml/"
for f in "$src"/ggml/src/*; do
    case "$(basename "$f")" in
        ggml-*) [ -f "$f" ] || continue ;;
    esac
    cp -a "$f" "$dst/ggml/src/"
done
cp -a "$src/ggml/src/ggml-cpu" "$src/ggml/src/ggml-cuda" "$dst/ggml/src/"
# the sdist's tools/CMakeLists.txt adds a dozen tools; we ship two
cat >"$dst/tools/CMakeLists.txt" <<'CM'
# (tools/peers/pack_llamacpp.sh: only the two tools the peers stage builds)
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(llama-bench)
add_subdirectory(quantize)
CM
# an upstream source marker, so the stage can print what it built
(cd "$src" && { git rev-parse HEAD 2>/dev/null || true; }) >"$dst/PEERS_SOURCE"
echo "llama-cpp-python 0.3.36 sdist vendor/llama.cpp" >>"$dst/PEERS_SOURCE"
find "$dst" -name '__pycache__' -prune -exec rm -rf {} +
mkdir -p "$(dirname "$out")"
tar -C "$tmp" -cJf "$out" llama.cpp
echo "pack_llamacpp: $out $(du -h "$out" | cut -f1) ($(du -sh "$dst" | cut -f1) unpacked)"
