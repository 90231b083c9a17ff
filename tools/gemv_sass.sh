#!/usr/bin/env bash
# gemv_sass.sh BUILD_DIR [PATCH]: the Q4 GEMV's instructions a main-loop step, by kind, from the
# SASS (tools/python/gemv_sass_steps.py) of every instantiation of gemv_q4_v3_kernel (and of an
# experiment's kernels, when PATCH applies to kernels/gemm_q4.cu: bench/gemvdiet/v6_variants.patch
# adds gemv_q4_v6_kernel), then their registers and spills. Compiles a copy of kernels/gemm_q4.cu
# with BUILD_DIR's flags (RelWithDebInfo: -O2, sm_90a); the tree is not touched. Needs nvcc and
# cuobjdump, no GPU. GEMV_SASS_KEEP=FILE keeps the demangled SASS there.
set -euo pipefail
build=$(cd "${1:?usage: gemv_sass.sh BUILD_DIR [PATCH]}" && pwd)
patch=${2:-}
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -z "${GEMV_SASS_KEEP:-}" ] || trap 'cp "$tmp/q4.sass" "$GEMV_SASS_KEEP"; rm -rf "$tmp"' EXIT
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
[ -n "$cuobjdump" ] || cuobjdump=$src/.tools/cuda/nvidia/cu13/bin/cuobjdump
[ -x "$cuobjdump" ] || { echo "gemv_sass.sh: no cuobjdump (set CUOBJDUMP)" >&2; exit 1; }
cudir=$(dirname "$cuobjdump")
export PATH="$cudir:$PATH"
mkdir -p "$tmp/kernels"
cp "$src/kernels/gemm_q4.cu" "$tmp/kernels/"
[ -z "$patch" ] || patch -s -d "$tmp" -p1 <"$patch"
(cd "$build" && "${NVCC:-nvcc}" -D_GNU_SOURCE --options-file CMakeFiles/g4_cuda.dir/includes_CUDA.rsp \
    -O2 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a -lineinfo --expt-relaxed-constexpr \
    -x cu -c "$tmp/kernels/gemm_q4.cu" -o "$tmp/q4.o")
"$cuobjdump" -sass "$tmp/q4.o" | c++filt >"$tmp/q4.sass"
grep -o 'gemv_q4_v[0-9]_kernel<[^>]*>' "$tmp/q4.sass" | sort -u | while read -r k; do
    python3 "$src/tools/python/gemv_sass_steps.py" "$tmp/q4.sass" "$k"
done
# registers and spills of each instantiation (the loop changes must not spill or grow past 128)
"$cuobjdump" -res-usage "$tmp/q4.o" | c++filt | grep -A1 'gemv_q4_v[0-9]_kernel' |
    sed -n 's/.*\(gemv_q4_v[0-9]_kernel<[^>]*>\).*/\1/p; s/.*\(REG:[0-9]*\) \(STACK:[0-9]*\) .*\(LOCAL:[0-9]*\).*/    \1 \2 \3/p'
