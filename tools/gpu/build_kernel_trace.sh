#!/usr/bin/env bash
# build_kernel_trace.sh OUTDIR: compiles tools/gpu/kernel_trace.c into OUTDIR/libg4ktrace.so (the
# CUPTI kernel tracer of issue 30; not part of the CMake build, which cannot count on CUPTI).
# Finds cupti.h, cuda.h and libcupti.so* in one place each, prints what it found and the
# compile line. Looked at, in order: $CUPTI_INCLUDE + $CUPTI_LIB (both set: used as given),
# $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, /usr/local/cuda-* (include + lib64 / lib, and
# extras/CUPTI), python's site-packages nvidia/cu13 and nvidia/cuda_cupti (the pip wheel
# nvidia-cuda-cupti: what the GPU machine has), the repository's .tools/cuda/nvidia/cu13.
# Exit 2: no CUPTI header or library found (the reason printed); 1: the compile failed.
set -uo pipefail
outdir=${1:?usage: build_kernel_trace.sh OUTDIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CC:-cc}

# site-packages and the other python path entries (PYTHONPATH included)
py_roots=()
if command -v python3 >/dev/null; then
    while IFS= read -r d; do
        [ -n "$d" ] && py_roots+=("$d/nvidia/cu13" "$d/nvidia/cuda_cupti" "$d/nvidia/cuda_runtime")
    done < <(python3 -c 'import os, site, sys
seen = []
for d in sys.path + site.getsitepackages() + [site.getusersitepackages()]:
    if d and os.path.isdir(d) and d not in seen:
        seen.append(d); print(d)' 2>/dev/null)
fi
roots=()
for r in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
    [ -n "$r" ] && [ -d "$r" ] && roots+=("$r" "$r/extras/CUPTI")
done
roots+=("${py_roots[@]}" "$src/.tools/cuda/nvidia/cu13")

inc=${CUPTI_INCLUDE:-}
lib=${CUPTI_LIB:-}
if [ -n "$inc" ] && [ -n "$lib" ]; then
    [ -f "$inc/cupti.h" ] && [ -f "$lib" ] || {
        echo "build_kernel_trace: no cupti.h in CUPTI_INCLUDE=$inc or no library CUPTI_LIB=$lib"
        exit 2
    }
else
    inc="" lib=""
    # header and library from the same root (a 13.0 header with a 12.x library would misread
    # the records)
    for r in "${roots[@]}"; do
        [ -f "$r/include/cupti.h" ] || continue
        for l in "$r/lib64" "$r/lib"; do
            f=$(ls "$l"/libcupti.so "$l"/libcupti.so.[0-9]* 2>/dev/null | head -1)
            [ -n "$f" ] && inc=$r/include lib=$f && break 2
        done
    done
fi
if [ -z "$inc" ] || [ -z "$lib" ]; then
    echo "build_kernel_trace: no cupti.h with a libcupti.so beside it (looked in: ${roots[*]})"
    exit 2
fi
# cupti.h includes cuda.h and the runtime's builtin_types.h: beside it, else in another root
cuda_inc=""
for d in "$inc" "${roots[@]/%//include}"; do
    [ -f "$d/cuda.h" ] && [ -f "$d/builtin_types.h" ] && cuda_inc=$d && break
done
if [ -z "$cuda_inc" ]; then
    echo "build_kernel_trace: cupti.h at $inc but no cuda.h + builtin_types.h found"
    exit 2
fi
echo "build_kernel_trace: cupti.h in $inc, cuda.h in $cuda_inc, library $lib"
mkdir -p "$outdir" || exit 1
cmd=("$cc" -O2 -g -std=gnu11 -Wall -Wextra -shared -fPIC -I"$inc" -I"$cuda_inc"
    -o "$outdir/libg4ktrace.so" "$src/tools/gpu/kernel_trace.c" "$lib"
    -Wl,-rpath,"$(dirname "$lib")" -ldl -lpthread)
echo "build_kernel_trace: ${cmd[*]}"
"${cmd[@]}" || { echo "build_kernel_trace: compile failed"; exit 1; }
echo "build_kernel_trace: $outdir/libg4ktrace.so"
