#!/usr/bin/env bash
# compute-sanitizer over the CUDA kernel test tables and end-to-end runs, on the GPU machine.
# Needs only the CUDA toolkit's compute-sanitizer (PATH or /usr/local/cuda/bin) and a GPU build.
#
#   [OUT=DIR] [G4_GPU_TINY_PKG=PKG] tools/gpu/sanitize.sh [memcheck] [racecheck] [synccheck] [initcheck]
#
# (default: memcheck racecheck synccheck). Call it after tools/gpu/run.sh's `build` stage (it
# uses build-gpu/, or $BUILD) and, for the package runs, its `tiny` stage (the gpu-tiny package
# in $G4_GPU_TINY_PKG, default $WORK/gpu-tiny/f16 as stage_tiny makes it); run.sh's `sanitize`
# stage calls it as `bash tools/gpu/sanitize.sh memcheck racecheck synccheck`.
#
# What runs under each tool:
#   all tools  first the end-to-end runs on the gpu-tiny package, each with --backend cuda:
#              `g4cu generate --ids <40 ids> --max-new 8` (prefill + the CUDA-graph decode
#              step), `g4cu logits --ids <40 ids>` (a teacher-forced prefill), and `g4cu logits
#              --image --image-tokens 70 --audio` (both towers; left out, saying why, when it
#              fails without the sanitizer too)
#   memcheck   then every case of test_cuda_gemm (per op), test_cuda_attention (per op),
#              test_cuda_ops, test_cuda_conv, test_cuda_towers (op cases and, with the package,
#              both towers), test_cuda_engine (prefill, chunked prefill, graph decode) and
#              test_cuda_ple_host (the PLE table read in place from pinned host memory)
#   racecheck  then the tiny / odd / tile-edge cases of the same tables (partial tiles and odd
#              sizes are where shared-memory hazards live; racecheck is the slow tool)
#   synccheck  as racecheck, plus test_cuda_engine and test_cuda_ple_host
#   initcheck  (on request) as racecheck
# test_cuda_oom is left out: its cudaMalloc failures are what it tests, and compute-sanitizer
# reports every failed API call as an error. A table run whose filter matches no case counts as
# failed ("NO CASES"), so a renamed case cannot make a run pass vacuously; on the CPU,
# tests/test_gpu_filters.sh checks every filter of the harness tables (test_cuda_ops,
# _attention, _conv) against the table itself (`--list`), so the list follows the op table.
#
# Time: G4_SAN_TOTAL_S (default 540 s, one 10-minute device call with room to spare) is split
# evenly between the tools asked for; each run is cut at G4_SAN_RUN_S (default 240 s) or at
# its tool's share, whichever comes first. A run cut short is a TIMEOUT, runs past the share are
# NOT RUN, a test that skips (exit 77) is SKIPPED; any of them makes the verdict
# "CLEAN (partial)" at best.
#
# Output, kept small: one line per run on stdout as it finishes (also in
# $OUT/sanitize_<tool>.txt), then one summary line per tool (also in $OUT/sanitize_summary.txt):
#   sanitize memcheck: CLEAN, 14 runs, 0 errors, 0 failed, 0 timeouts, 0 not run or skipped, 187 s
# Each run's log is $OUT/sanitize/<tool>_<n>.log, cut to its last 40 lines when the run is
# clean. Exit status: 0 when every tool is clean (no sanitizer error, no failed run), else 1.
set -uo pipefail
OUT=${OUT:-/tmp/g4out}
WORK=${WORK:-/tmp/g4work}
BUILD=${BUILD:-build-gpu}
RUN_S=${G4_SAN_RUN_S:-240}
TOTAL_S=${G4_SAN_TOTAL_S:-540}
cd "$(dirname "$0")/../.."
# the carried Debian libraries, as run.sh does (on the GPU machine only: env.sh unpacks them)
if [ -d .debs ] && command -v nvidia-smi >/dev/null; then source tools/gpu/env.sh; fi
mkdir -p "$OUT/sanitize"
: >"$OUT/sanitize_summary.txt"
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck synccheck)
pkg=${G4_GPU_TINY_PKG:-$WORK/gpu-tiny/f16}
fx=tests/fixtures

san=$(command -v compute-sanitizer || true)
[ -n "$san" ] || for d in /usr/local/cuda/bin /usr/local/cuda-13*/bin; do
    [ -x "$d/compute-sanitizer" ] && san="$d/compute-sanitizer" && break
done
if [ -z "$san" ]; then
    echo "sanitize: compute-sanitizer not found (PATH, /usr/local/cuda/bin)" | tee -a "$OUT/sanitize_summary.txt"
    exit 1
fi
if [ ! -x "$BUILD/g4cu" ] || [ ! -x "$BUILD/tests/test_cuda_gemm" ]; then
    echo "sanitize: $BUILD/g4cu or $BUILD/tests/test_cuda_* missing: run tools/gpu/run.sh build first" | tee -a "$OUT/sanitize_summary.txt"
    exit 1
fi
have_pkg=0
if [ -f "$pkg/genai_config.json" ]; then
    have_pkg=1
    export G4_GPU_TINY_PKG=$pkg # test_cuda_engine, and the towers in test_cuda_towers
    q4=${G4_GPU_TINY_Q4:-$(dirname "$pkg")/q4}
    [ -f "$q4/genai_config.json" ] && export G4_GPU_TINY_Q4=$q4
fi
echo "sanitize: $("$san" --version | tail -1); build $BUILD; package $([ $have_pkg = 1 ] && echo "$pkg" || echo "absent ($pkg): package runs skipped")"

# --- the runs ---------------------------------------------------------------------------------
T=$BUILD/tests
# Small cases: partial tiles, odd sizes, masks, GQA/MHA, cluster split-K (see each table's file).
small_runs=(
    "$T/test_cuda_gemm --shape 'N=40 K=24'"       # f16 mma / wgmma / glu, M=17: tile edges
    "$T/test_cuda_gemm --shape 'N=136 K=72'"      # f16 M=129: partial tiles in M and N
    "$T/test_cuda_gemm --shape 'N=48 K=192'"      # q4 gemv / mma / glu / dequant, odd
    "$T/test_cuda_gemm --shape 'K=3000'"           # f16 gemv, cluster split-K
    "$T/test_cuda_gemm --shape 'K=3008'"           # q4 gemv, split-K
    "$T/test_cuda_attention --shape 'cap=64 '"    # decode, MHA, T=2, L=33
    "$T/test_cuda_attention --shape 'T=45 '"      # prefill, MHA, window 16
    "$T/test_cuda_attention --shape 'past=7 '"    # prefill after a past, GQA 2:1
    "$T/test_cuda_attention --shape 'N=65 '"      # vision attention, most keys masked
    "$T/test_cuda_attention --shape 'T=33 heads=8'" # audio attention, invalid tail
    "$T/test_cuda_ops --shape 'cols=24 '"         # rmsnorm tiny
    "$T/test_cuda_ops --shape 'cols=40 '"         # add_rmsnorm tiny
    "$T/test_cuda_ops --shape 'T=5 heads=4'"      # qkv norm + rope, GQA, hd 128
    "$T/test_cuda_ops --shape 'n=24 '"            # gelu_mul tiny
    "$T/test_cuda_ops --shape 'layers=2 '"        # ple tiny
    "$T/test_cuda_ops --shape 'V=1001 '"          # sample: odd vocabulary, no cap, ties
    "$T/test_cuda_ops --shape 'V=24 '"            # sample: tiny, top-k 5 + top-p
    "$T/test_cuda_ops --shape 'rows=17 '"         # embed tiny
    "$T/test_cuda_ops --shape 'grid=6x3'"          # vision pool / posemb with padding
    "$T/test_cuda_conv --shape 'H=17 W=33'"       # sscp, tensor-core path, odd
    "$T/test_cuda_conv --shape 'H=12 W=64'"       # sscp, CUDA-core paths
    "$T/test_cuda_conv --shape 'T=33 C=1024'"     # dwconv with a clip
    "$T/test_cuda_towers --shape '[17, 33]'"      # clamp / silu / transpose odd
    "$T/test_cuda_towers --shape 'T=17 in=72'"    # clipped linear, odd
)
full_runs=(
    "$T/test_cuda_gemm --op f16"
    "$T/test_cuda_gemm --op q4"
    "$T/test_cuda_gemm --op reject"
    "$T/test_cuda_attention --op attn_decode"
    "$T/test_cuda_attention --op attn_prefill"
    "$T/test_cuda_attention --op attn_bidir"
    "$T/test_cuda_attention --op attn_audio"
    "$T/test_cuda_ops"
    "$T/test_cuda_conv"
    "$T/test_cuda_towers"
)
engine_runs=("$T/test_cuda_engine" "$T/test_cuda_ple_host") # need the package
ids40=$(seq -s, 3 42)

# "PLACEHOLDER_ID COUNT" the package's front end gives a file (from the merge error of a prompt
# without placeholders, on the CPU), for the multimodal end-to-end run.
soft_count() { # kind file [options]
    "$BUILD/g4cu" logits "$pkg" --ids 2,5,7 "--$1" "$2" "${@:3}" --out "$scratch/count.npy" 2>&1 |
        sed -n "s/.*$1 placeholder ids (\([0-9]*\)) but the $1 gives \([0-9]*\) soft tokens.*/\1 \2/p"
}
e2e_runs=()
e2e_note=""
scratch=$WORK/sanitize # the runs' .npy outputs (not brought back)
mkdir -p "$scratch"
if [ $have_pkg = 1 ]; then
    e2e_runs+=("$BUILD/g4cu generate $pkg --ids $ids40 --max-new 8 --backend cuda --json")
    e2e_runs+=("$BUILD/g4cu logits $pkg --ids $ids40 --backend cuda --out $scratch/e2e_logits.npy")
    img=$fx/frontends/media/square_rgb.png aud=$fx/frontends/media/tone_1s_f32.wav
    # 70 image tokens: image + audio + markers fit gpu-tiny's 256-token context
    read -r pi ni <<<"$(soft_count image "$img" --image-tokens 70)"
    read -r pa na <<<"$(soft_count audio "$aud")"
    if [ -n "${ni:-}" ] && [ -n "${na:-}" ]; then
        mm_ids="2,5"
        for ((i = 0; i < ni; i++)); do mm_ids="$mm_ids,$pi"; done
        mm_ids="$mm_ids,9"
        for ((i = 0; i < na; i++)); do mm_ids="$mm_ids,$pa"; done
        mm_ids="$mm_ids,7"
        mm="$BUILD/g4cu logits $pkg --ids $mm_ids --image $img --image-tokens 70 --audio $aud --backend cuda --out $scratch/e2e_mm.npy"
        # Only when it runs without the sanitizer (the CUDA tower ops may not be there yet).
        if $mm >"$OUT/sanitize/e2e_mm_plain.log" 2>&1; then
            e2e_runs+=("$mm")
        else
            e2e_note="multimodal e2e not run: without the sanitizer it fails: $(tail -1 "$OUT/sanitize/e2e_mm_plain.log")"
        fi
    else
        e2e_note="multimodal e2e not run: no soft-token counts for $img / $aud"
    fi
    # the eval's ASR path (the audio tower on the state's queue, item after item in one state):
    # the path whose answers changed run to run in the thirty-fifth session; a fresh --out each
    # run. (The chat fixture's ids pass gpu-tiny's vocabulary, so each item then fails at the
    # prefill: the tower is what this run checks; initcheck found the FFN race here.)
    # (mm-tiny-grow: 2, 3, 2.5 and 4 s, so the state grows twice and is reused once larger)
    [ -f $fx/mm-tiny-grow/asr_test.jsonl ] &&
        e2e_runs+=("$BUILD/g4cu eval $fx/mm-tiny-grow/asr_test.jsonl --task librispeech $pkg --tokenizer $fx/chat/chat_bpe.json --backend cuda --max-new 8 --limit 4 --out \$(mktemp -d -p $scratch eval.XXXX)")
fi

# --- runner -----------------------------------------------------------------------------------
# run_one TOOL N LIMIT "CMD": one line to stdout and $OUT/sanitize_<tool>.txt; sets the counters.
run_one() {
    local tool=$1 n=$2 limit=$3 cmd=$4 log="$OUT/sanitize/${1}_$2.log" extra=()
    case $tool in
        memcheck) extra=(--leak-check no) ;;
        racecheck) extra=(--racecheck-report hazard) ;;
    esac
    local t0 rc errs app status cases
    t0=$(date +%s)
    # eval: the command strings carry quoted filters with spaces
    eval "timeout --signal=INT --kill-after=20 $limit \"\$san\" --tool $tool ${extra[*]} \
        --error-exitcode 99 --print-limit 50 $cmd" >"$log" 2>&1
    rc=$?
    # "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: H hazards displayed (N errors,
    # W warnings)" (warnings are hazards it judges benign; they are in the log)
    errs=$(sed -n 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) error.*/\1/p' "$log" | tail -1)
    [ -n "$errs" ] || errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | tail -1)
    app=$(grep -E "checks, [0-9]+ failed|cases, [0-9]+ failed|^SKIP" "$log" | tail -1)
    [ -n "$app" ] || app=$(grep "^g4cu: " "$log" | tail -1)
    # cases the filters selected: the harness's "NAME: N cases, M failed", test_cuda_gemm's
    # "N cases in T s" (its --op reject run has none by design)
    cases=$(sed -n -E 's/.*: ([0-9]+) cases, [0-9]+ failed.*/\1/p; s/^([0-9]+) cases in .*/\1/p' "$log" | tail -1)
    if [ $rc -eq 124 ] || [ $rc -eq 137 ] || { [ $rc -eq 130 ] && [ -z "$errs" ]; }; then
        status="TIMEOUT after $limit s"
        n_timeout=$((n_timeout + 1))
    elif [ -z "$errs" ]; then
        status="NO SUMMARY (exit $rc)"
        n_failed=$((n_failed + 1))
    elif [ "$errs" != 0 ] || [ $rc -eq 99 ]; then
        status="ERRORS $errs"
        n_errors=$((n_errors + ${errs:-1}))
    elif [ $rc -eq 77 ]; then # the test skipped (no GPU, no package): nothing was checked
        status="SKIPPED (exit 77)"
        n_skipped=$((n_skipped + 1))
    elif [ $rc -ne 0 ]; then
        status="APP FAILED (exit $rc)"
        n_failed=$((n_failed + 1))
    elif [ "$cases" = 0 ] && [[ $cmd != *"--op reject"* ]]; then
        status="NO CASES"
        n_failed=$((n_failed + 1))
    else
        status="clean"
    fi
    if [ "$status" = clean ]; then # keep the logs small: the tail says what ran
        tail -40 "$log" >"$log.tail" && mv "$log.tail" "$log"
    fi
    local shown=${cmd#$BUILD/}
    shown=${shown//$ids40/<40 ids>}
    [ -n "${mm_ids:-}" ] && shown=${shown//$mm_ids/<ids with placeholders>}
    shown=${shown//$pkg/PKG}
    shown=${shown//$scratch\//}
    printf '%-20s %4d s  %-15s | %s | %s\n' "$status" $(($(date +%s) - t0)) "$(basename "$log")" \
        "$shown" "${app:-}" | tee -a "$OUT/sanitize_$tool.txt"
}

overall=0
share=$((TOTAL_S / ${#tools[@]}))
for tool in "${tools[@]}"; do
    runs=()
    [ $have_pkg = 1 ] && runs+=("${e2e_runs[@]}")
    case $tool in
        memcheck) runs+=("${full_runs[@]}") ;;
        racecheck | synccheck | initcheck) runs+=("${small_runs[@]}") ;;
        *) echo "sanitize: unknown tool '$tool' (memcheck, racecheck, synccheck, initcheck)"; overall=1; continue ;;
    esac
    if [ $have_pkg = 1 ] && { [ $tool = memcheck ] || [ $tool = synccheck ]; }; then
        runs+=("${engine_runs[@]}")
    fi
    : >"$OUT/sanitize_$tool.txt"
    echo "sanitize $tool: ${#runs[@]} runs, ${share} s" | tee -a "$OUT/sanitize_$tool.txt"
    [ -n "$e2e_note" ] && echo "  ($e2e_note)" | tee -a "$OUT/sanitize_$tool.txt"
    n_errors=0 n_failed=0 n_timeout=0 n_skipped=0
    if [ $have_pkg = 0 ]; then # the end-to-end runs are part of the job: their absence shows
        printf '%-20s %4s    %-15s | %s |\n' "NOT RUN (no package)" - - "g4cu generate/logits --backend cuda: $pkg is not a package" |
            tee -a "$OUT/sanitize_$tool.txt"
        n_skipped=1
    fi
    start=$(date +%s)
    i=0
    for cmd in "${runs[@]}"; do
        i=$((i + 1))
        left=$((start + share - $(date +%s)))
        if [ $left -lt 15 ]; then
            printf '%-20s %4s    %-15s | %s |\n' "NOT RUN (time)" - - "${cmd#$BUILD/}" |
                tee -a "$OUT/sanitize_$tool.txt"
            n_skipped=$((n_skipped + 1))
            continue
        fi
        run_one "$tool" $i $((left < RUN_S ? left : RUN_S)) "$cmd"
    done
    verdict=CLEAN
    { [ $n_errors -gt 0 ] || [ $n_failed -gt 0 ]; } && verdict=DIRTY
    [ $verdict = CLEAN ] && { [ $n_timeout -gt 0 ] || [ $n_skipped -gt 0 ]; } && verdict="CLEAN (partial)"
    line="sanitize $tool: $verdict, ${#runs[@]} runs, $n_errors errors, $n_failed failed, $n_timeout timeouts, $n_skipped not run or skipped, $(($(date +%s) - start)) s"
    echo "$line" | tee -a "$OUT/sanitize_summary.txt"
    [ "$verdict" = DIRTY ] && overall=1
done
exit $overall
