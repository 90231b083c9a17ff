#!/usr/bin/env bash
# attnops_resources.sh BUILD_DIR [OUT_DIR]: compiles the attention / small-op / conv kernel files
# with `-Xptxas -v` using BUILD_DIR's include flags and prints, per kernel, registers, stack
# frame, spills and static shared memory, then counts in each file's SASS the tensor-core MMAs
# (HMMA = mma.sync), ldmatrix (LDSM), cp.async (LDGSTS), local-memory traffic (LDL/STL: must be 0)
# and 16-byte global accesses. Needs no GPU.
# cuobjdump: $CUOBJDUMP, else the toolkit's, else the one Triton's wheel carries.
set -euo pipefail
build=$(cd "${1:?usage: attnops_resources.sh BUILD_DIR [OUT_DIR]}" && pwd)
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
for f in attention_prefill attention_decode attention_audio rmsnorm qkv_rope gelu_mul ple logits \
         embed vision_pool vision_posemb conv_sscp conv_dw1d; do
    (cd "$build" && "$nvcc" -D_GNU_SOURCE --options-file "$rsp" -O2 -DNDEBUG \
        -gencode=arch=compute_90a,code=sm_90a -lineinfo --expt-relaxed-constexpr -Xptxas -v \
        -x cu -c "$src/kernels/$f.cu" -o "$out/$f.o") >"$out/$f.ptxas" 2>&1 ||
        { cat "$out/$f.ptxas"; exit 1; }
    echo "== $f.cu"
    c++filt <"$out/$f.ptxas" | perl -ne '
        s/\(anonymous namespace\):://g;
        if (/Compiling entry function .(?:void )?(.*?)\((?!anon)/) { $k = $1; }
        if (/(\d+ bytes stack frame.*)/) { $st = $1; }
        if (/Used (.*)/) { printf "  %-44s %s | %s\n", $k, $1, $st; }'
    grep -i "warning" "$out/$f.ptxas" || true
    if [ -n "$cuobjdump" ]; then
        sass=$("$cuobjdump" --dump-sass "$out/$f.o" 2>/dev/null)
        printf "  SASS: %d HMMA, %d LDSM, %d LDGSTS, %d LDL/STL, %d LDG.128, %d STG.128\n" \
            "$(grep -c HMMA <<<"$sass" || true)" "$(grep -c LDSM <<<"$sass" || true)" \
            "$(grep -c LDGSTS <<<"$sass" || true)" "$(grep -cE '\bLDL|\bSTL' <<<"$sass" || true)" \
            "$(grep -c 'LDG.E.128' <<<"$sass" || true)" "$(grep -c 'STG.E.128' <<<"$sass" || true)"
    fi
done
