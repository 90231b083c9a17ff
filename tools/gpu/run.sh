#!/usr/bin/env bash
# The GPU-machine batch (one H200, Ubuntu 24.04 + CUDA 13, no registry): build, test and bench
# in one call. Run from the repository root with the .debs/ folder carried (tools/gpu/
# fetch_debs.sh makes it on a Debian CPU machine):
#
#   OUT=/some/dir tools/gpu/run.sh [stage ...]
#
# Stages (default: build tests tiny kernels):
#   build    cmake Release + build (sm_90a) into build-gpu/
#   tests    the whole ctest suite (GPU tests run here instead of skipping)
#   tiny     gpu-tiny package (tools/python/make_package.py --preset gpu-tiny) + its Q4 form +
#            HF dumps; test_cuda_engine and g4cu compare --backend cuda|cpu against HF
#   sanitize compute-sanitizer memcheck, racecheck, synccheck over the CUDA test tables and
#            end-to-end runs on the gpu-tiny package (tools/gpu/sanitize.sh; after build, tiny)
#   kernels  g4cu bench --kernels --json
#   prefill  the prefill kernels alone (issues 18, 22; after build): test_cuda_gemm --op wgmma,
#            --op q4, test_cuda_attention --op attn_prefill, then their kernel bench rows
#            (wgmma GEMMs next to cuBLAS, wgmma attention next to the HMMA kernel). A deadlocked
#            mbarrier traps after seconds ("unspecified launch failure"), it never hangs.
#   e2b_bg   start making the full-size random E2B package in the background (f16, Q4 via
#            g4cu quantize, HF dumps of a 16-token prompt): e2b_make, detached
#   e2b_wait wait for it (a later call on the same, still warm machine)
#   e2b_run  g4cu compare (cuda vs HF, f16 and Q4), bench f16 + Q4 + HF peers
# Logs and JSON go to $OUT (the device tool brings them back). Each stage prints its time.
set -uo pipefail
OUT=${OUT:-/tmp/g4out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
source tools/gpu/env.sh
export PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(build tests tiny kernels)
WORK=${WORK:-/tmp/g4work}
mkdir -p "$WORK"
t_start=$(date +%s)
stamp() { echo "[$(($(date +%s) - t_start)) s] $*"; }

stage_build() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
    cmake -S . -B build-gpu -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release -DG4_WERROR=OFF >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; return 1; }
    cmake --build build-gpu -j"$(nproc)" -- -k >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; }; ls build-gpu/g4cu >/dev/null || return 1
}

stage_tests() {
    ctest --test-dir build-gpu --output-on-failure -j4 --timeout 600 >"$OUT/ctest.log" 2>&1
    grep -E "tests passed|Failed|\*\*\*|Skipped" "$OUT/ctest.log" | tail -25
}

stage_tiny() {
    local d="$WORK/gpu-tiny"
    rm -rf "$d"
    python3 tools/python/make_package.py "$d" --preset gpu-tiny >"$OUT/tiny.log" 2>&1 || { tail -20 "$OUT/tiny.log"; return 1; }
    build-gpu/g4cu quantize "$d/f16" "$d/q4" >>"$OUT/tiny.log" 2>&1 || { tail -5 "$OUT/tiny.log"; return 1; }
    python3 tools/python/make_reference.py --hf "$d/hf" --package "$d/f16" --out "$d/dumps" \
        --lengths 1,40,100 >>"$OUT/tiny.log" 2>&1 || { tail -10 "$OUT/tiny.log"; return 1; }
    python3 tools/python/make_reference.py --hf "$d/hf" --out "$d/dumps16" --lengths 1,40,100 \
        --dtype float16 --device cuda >>"$OUT/tiny.log" 2>&1 || { tail -10 "$OUT/tiny.log"; return 1; }
    for b in cpu cuda; do
        for k in len1 len40 len100; do
            tol=""; [ $b = cuda ] && tol="--tol-from $d/dumps16/$k.npz"
            build-gpu/g4cu compare "$d/f16" "$d/dumps/$k.npz" --backend $b $tol >"$OUT/tiny_cmp_${b}_$k.txt" 2>&1
            echo "compare $b $k: exit $? $(tail -1 "$OUT/tiny_cmp_${b}_$k.txt")"
        done
    done
    build-gpu/g4cu compare "$d/q4" "$d/dumps/len40.npz" --backend cuda --tol-from "$d/dumps16/len40.npz" >"$OUT/tiny_cmp_q4_cuda_len40.txt" 2>&1
    echo "compare q4 cuda len40: exit $? $(tail -1 "$OUT/tiny_cmp_q4_cuda_len40.txt")"
    G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" build-gpu/tests/test_cuda_engine 2>&1 | tee "$OUT/test_cuda_engine.log" | grep -v "    step" | tail -14
    G4_GPU_TINY_PKG="$d/f16" build-gpu/tests/test_cuda_towers 2>&1 | tee "$OUT/test_cuda_towers.log" | tail -12
    G4_GPU_TINY_PKG="$d/f16" build-gpu/tests/test_cuda_ple_host 2>&1 | tee "$OUT/test_cuda_ple_host.log" | tail -4
    G4_GPU_TINY_PKG="$d/f16" build-gpu/tests/test_cuda_oom 2>&1 | tee "$OUT/test_cuda_oom.log" | tail -6
}

stage_sanitize() { # one line per run and per tool (logs in $OUT/sanitize/); SAN_TOOLS to narrow
    G4_GPU_TINY_PKG="$WORK/gpu-tiny/f16" bash tools/gpu/sanitize.sh ${SAN_TOOLS:-memcheck racecheck synccheck}
}

stage_kernels() {
    build-gpu/g4cu bench --kernels --reps 30 --json "$OUT/kbench.json" >"$OUT/kbench.txt" 2>&1
    echo "bench --kernels: exit $?"
    cat "$OUT/kbench.txt" | cut -c1-160
}

stage_prefill() {
    local t
    for t in "test_cuda_gemm --op wgmma" "test_cuda_gemm --op q4" "test_cuda_attention --op attn_prefill"; do
        local log="$OUT/prefill_${t// /_}.log"
        timeout 480 build-gpu/tests/$t >"$log" 2>&1
        echo "$t: exit $? ($(grep -c '^case' "$log") cases) $(tail -1 "$log")"
        grep -E "FAIL|error|CUDA" "$log" | head -8
    done
    build-gpu/g4cu bench --kernels --filter wgmma --reps 30 --json "$OUT/prefill_kbench_gemm.json" >"$OUT/prefill_kbench_gemm.txt" 2>&1
    echo "bench --kernels --filter wgmma: exit $?"; cut -c1-160 "$OUT/prefill_kbench_gemm.txt"
    build-gpu/g4cu bench --kernels --filter attn_prefill --reps 20 --json "$OUT/prefill_kbench_attn.json" >"$OUT/prefill_kbench_attn.txt" 2>&1
    echo "bench --kernels --filter attn_prefill: exit $?"; cut -c1-160 "$OUT/prefill_kbench_attn.txt"
}

# The full-size package takes minutes to make (random init, save, mobius export, quantize, HF
# dumps): e2b_bg starts it detached (setsid) so a later call can wait for it (e2b_wait) on the
# same machine while this call goes on with other stages.
stage_e2b_make() {
    local d="$WORK/e2b"
    rm -rf "$d" && mkdir -p "$d"
    python3 tools/python/make_package.py "$d" --preset e2b || { touch "$d/FAILED"; return 1; }
    while [ ! -x build-gpu/g4cu ]; do sleep 5; done # the foreground build may still run
    build-gpu/g4cu inspect "$d/f16" --summary >"$d/inspect.txt" 2>&1
    build-gpu/g4cu quantize "$d/f16" "$d/q4" --threads "$(nproc)" || { touch "$d/FAILED"; return 1; }
    ls -l "$d/q4/decoder/model.onnx.data" | awk '{print "q4 decoder data: " $5 " bytes (real 1,511,784,448)"}'
    python3 tools/python/make_reference.py --hf "$d/hf" --package "$d/f16" --out "$d/dumps" \
        --lengths 16 || { touch "$d/FAILED"; return 1; }
    python3 tools/python/make_reference.py --hf "$d/hf" --out "$d/dumps16" --lengths 16 \
        --dtype float16 --device cuda || { touch "$d/FAILED"; return 1; }
    touch "$d/READY"
}

stage_e2b_bg() {
    mkdir -p "$WORK/e2b"
    setsid nohup bash tools/gpu/run.sh e2b_make >"$WORK/e2b_make.log" 2>&1 < /dev/null &
    echo "e2b_make started in the background (log $WORK/e2b_make.log)"
}

stage_e2b_wait() {
    local d="$WORK/e2b" n=0
    while [ ! -f "$d/READY" ] && [ ! -f "$d/FAILED" ] && [ $n -lt 500 ]; do sleep 5; n=$((n + 5)); done
    cp "$WORK/e2b_make.log" "$OUT/" 2>/dev/null
    grep -E "make_package|bytes|Error|error" "$WORK/e2b_make.log" | grep -v Warn | tail -15
    [ -f "$d/READY" ]
}

stage_e2b_run() {
    local d="$WORK/e2b"
    cp "$d/inspect.txt" "$OUT/e2b_inspect.txt" 2>/dev/null
    local tol="--tol-from $d/dumps16/len16.npz"
    build-gpu/g4cu compare "$d/f16" "$d/dumps/len16.npz" --backend cuda $tol >"$OUT/e2b_compare_cuda.txt" 2>&1
    echo "e2b compare cuda vs HF fp32 (tolerance 3x HF fp16's error): exit $? $(tail -1 "$OUT/e2b_compare_cuda.txt")"
    build-gpu/g4cu compare "$d/q4" "$d/dumps/len16.npz" --backend cuda >"$OUT/e2b_compare_cuda_q4.txt" 2>&1
    echo "e2b Q4 compare cuda vs HF(f16) (fidelity, not a pass/fail): $(grep KL "$OUT/e2b_compare_cuda_q4.txt")"
    build-gpu/g4cu compare "$d/f16" "$d/q4" --ids 2,818,3022,48,1000,77777,262000,5 --backend cuda >"$OUT/e2b_fidelity_q4.txt" 2>&1
    echo "e2b Q4 vs f16 fidelity: $(grep KL "$OUT/e2b_fidelity_q4.txt")"
    stamp "e2b compared"
    build-gpu/g4cu bench "$d/f16" "$d/q4" --reps 10 --hf "$d/hf" --json "$OUT/e2b_bench.json" 2>&1 | tee "$OUT/e2b_bench.txt"
    # per-op split of an eager decode step (events around every op; not the graph-replayed path)
    G4_PROFILE=1 build-gpu/g4cu bench "$d/f16" "$d/q4" --reps 1 2>&1 | grep -v "^pkg\|^  *(" | tee "$OUT/e2b_profile.txt"
}

for s in "${stages[@]}"; do
    stamp "stage $s"
    "stage_$s" || echo "stage $s FAILED"
done
stamp "done"
