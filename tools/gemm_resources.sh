#!/usr/bin/env bash
# gemm_resources.sh BUILD_DIR [OUT_DIR]: compiles the GEMM kernel files with `-Xptxas -v` using
# BUILD_DIR's flags and prints, per kernel, registers / stack / spills / shared memory, then
# counts the tensor-core instructions in the SASS (HGMMA = wgmma, HMMA = mma.sync). Needs no GPU.
# cuobjdump: $CUOBJDUMP, else the toolkit's, else the one Triton's wheel carries.
set -euo pipefail
build=$(cd "${1:?usage: gemm_resources.sh BUILD_DIR [OUT_DIR]}" && pwd)
out=${2:-$(mktemp -d)}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
nvcc=${NVCC:-nvcc}
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$cuobjdump" ]; then
    for c in /usr/local/cuda/bin/cuobjdump /work/venv-hf/lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump; do
        [ -x "$c" ] && cuobjdump=$c && break
    done
fi
rsp="$build/CMakeFiles/g4_cuda.dir/includes_CUDA.rsp"
for f in gemm_f16 gemm_f16_wgmma gemm_q4; do
    (cd "$build" && "$nvcc" -D_GNU_SOURCE --options-file "$rsp" -O2 -DNDEBUG \
        -gencode=arch=compute_90a,code=sm_90a -lineinfo --expt-relaxed-constexpr -Xptxas -v \
        -x cu -c "$src/kernels/$f.cu" -o "$out/$f.o") >"$out/$f.ptxas" 2>&1 ||
        { cat "$out/$f.ptxas"; exit 1; }
    echo "== $f.cu"
    c++filt <"$out/$f.ptxas" | perl -ne '
        if (/Compiling entry function .(?:void )?(.*?)\((?:void|__half|CUtensorMap)/) { $k = $1; $k =~ s/.*:://; }
        if (/(\d+ bytes stack frame.*)/) { $st = $1; }
        if (/Used (.*)/) { printf "  %-28s %s | %s\n", $k, $1, $st; }'
    grep -i "warning" "$out/$f.ptxas" || true
    if [ -n "$cuobjdump" ]; then
        "$cuobjdump" --dump-sass "$out/$f.o" >"$out/$f.sass" 2>/dev/null || true
        printf "  SASS: %s HGMMA, %s HMMA, %s LDL/STL (local memory)\n" \
            "$(grep -c HGMMA "$out/$f.sass" || true)" "$(grep -c 'HMMA\.' "$out/$f.sass" || true)" \
            "$(grep -cE '\b(LDL|STL)\b' "$out/$f.sass" || true)"
    fi
done
echo "(outputs in $out)"
