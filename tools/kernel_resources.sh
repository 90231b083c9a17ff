#!/usr/bin/env bash
# kernel_resources.sh BUILD_DIR [OUT_DIR] [KERNEL_FILE...]: compiles kernel files (default: every
# kernels/*.cu) with `-Xptxas -v` using BUILD_DIR's include flags and prints, per kernel,
# registers, stack frame, spills and shared memory, then counts in each file's SASS the
# tensor-core instructions (HGMMA = wgmma, HMMA = mma.sync), ldmatrix (LDSM), cp.async (LDGSTS),
# local-memory traffic (LDL/STL: must be 0) and 16-byte global accesses. Needs no GPU.
# cuobjdump: $CUOBJDUMP, else the toolkit's, else tools/install_deps.sh's in .tools/cuda.
set -euo pipefail
build=$(cd "${1:?usage: kernel_resources.sh BUILD_DIR [OUT_DIR] [kernel ...]}" && pwd)
out=${2:-$(mktemp -d)}
shift $(($# > 1 ? 2 : 1))
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
nvcc=${NVCC:-nvcc}
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$cuobjdump" ]; then
    for c in /usr/local/cuda/bin/cuobjdump "$src/.tools/cuda/nvidia/cu13/bin/cuobjdump"; do
        [ -x "$c" ] && cuobjdump=$c && break
    done
fi
[ -z "$cuobjdump" ] || export PATH="$(dirname "$cuobjdump"):$PATH" # its nvdisasm
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    for f in "$src"/kernels/*.cu; do files+=("$(basename "$f" .cu)"); done
fi
rsp="$build/CMakeFiles/g4_cuda.dir/includes_CUDA.rsp"
for f in "${files[@]}"; do
    f=${f%.cu}
    (cd "$build" && "$nvcc" -D_GNU_SOURCE --options-file "$rsp" -O2 -DNDEBUG \
        -gencode=arch=compute_90a,code=sm_90a -lineinfo --expt-relaxed-constexpr -Xptxas -v \
        -x cu -c "$src/kernels/$f.cu" -o "$out/$f.o") >"$out/$f.ptxas" 2>&1 ||
        { cat "$out/$f.ptxas"; exit 1; }
    echo "== $f.cu"
    c++filt <"$out/$f.ptxas" | perl -ne '
        s/\(anonymous namespace\):://g;
        if (/Compiling entry function .(?:void )?(.*?)\((?!anon)/) { $k = $1; $k =~ s/.*:://; }
        if (/(\d+ bytes stack frame.*)/) { $st = $1; }
        if (/Used (.*)/) { printf "  %-44s %s | %s\n", $k, $1, $st; }'
    grep -i "warning" "$out/$f.ptxas" || true
    if [ -n "$cuobjdump" ]; then
        "$cuobjdump" --dump-sass "$out/$f.o" >"$out/$f.sass" 2>/dev/null || true
        printf "  SASS: %d HGMMA, %d HMMA, %d LDSM, %d LDGSTS, %d LDL/STL, %d LDG.128, %d STG.128\n" \
            "$(grep -c HGMMA "$out/$f.sass" || true)" "$(grep -c 'HMMA\.' "$out/$f.sass" || true)" \
            "$(grep -c LDSM "$out/$f.sass" || true)" "$(grep -c LDGSTS "$out/$f.sass" || true)" \
            "$(grep -cE '\b(LDL|STL)\b' "$out/$f.sass" || true)" \
            "$(grep -c 'LDG.E.128' "$out/$f.sass" || true)" "$(grep -c 'STG.E.128' "$out/$f.sass" || true)"
    fi
done
echo "(outputs in $out)"
