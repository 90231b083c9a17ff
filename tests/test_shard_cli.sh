#!/usr/bin/env bash
# test_shard_cli.sh: `g4cu eval --shard auto` and the launchers built on it.
#  1. The variable handling, each case in a clean environment (the eval stops at the missing
#     manifest after saying which shard and GPU it took): Slurm arrays (MIN, STEP), RANK /
#     WORLD_SIZE, SLURM_PROCID / SLURM_NTASKS, their precedence, the GPU from LOCAL_RANK /
#     SLURM_LOCALID against CUDA_VISIBLE_DEVICES, and the one-line errors.
#  2. End to end on the tiny fixture (CPU): tools/eval_gpus.sh with 2 processes, and
#     tools/slurm/eval.sbatch through a stand-in sbatch (below: it runs each array task with the
#     variables Slurm sets, then the dependent merge job) each give, per item, the tokens of the
#     unsharded run, and eval-merge's score.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
tok="$G4_FIXTURES/chat/chat_bpe.json"
vars=(SLURM_ARRAY_TASK_ID SLURM_ARRAY_TASK_COUNT SLURM_ARRAY_TASK_MIN SLURM_ARRAY_TASK_STEP RANK
    WORLD_SIZE SLURM_PROCID SLURM_NTASKS LOCAL_RANK SLURM_LOCALID CUDA_VISIBLE_DEVICES)
clean=()
for v in "${vars[@]}"; do clean+=(-u "$v"); done

# shard NAME EXPECTED VAR=VALUE...: the "--shard auto:" line contains EXPECTED
shard() {
    local name=$1 want=$2
    shift 2
    env "${clean[@]}" "$@" "$G4CU" eval "$tmp/none.jsonl" --task ocrbench "$G4_TINY_PKG" \
        --shard auto >/dev/null 2>"$tmp/e"
    grep -q "^g4cu eval: --shard auto: .*$want" "$tmp/e" && grep -q "none.jsonl" "$tmp/e"
    local ok=$?
    [ $ok -ne 0 ] && cat "$tmp/e"
    check "$name" $ok
}
# bad NAME PATTERN VAR=VALUE...: exit 1, one line matching PATTERN
bad() {
    local name=$1 pat=$2
    shift 2
    err1_fixed "$name" "$pat" env "${clean[@]}" "$@" "$G4CU" eval "$tmp/none.jsonl" \
        --task ocrbench "$G4_TINY_PKG" --shard auto
}
shard "array" "shard 3 of 8 from SLURM_ARRAY_TASK_ID=3, SLURM_ARRAY_TASK_COUNT=8$" \
    SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_TASK_COUNT=8
shard "array from 2 (--array=2-5)" "shard 3 of 4 from SLURM_ARRAY_TASK_ID=5" \
    SLURM_ARRAY_TASK_ID=5 SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_MIN=2
shard "array with a step (--array=2-6:2)" "shard 2 of 3 from SLURM_ARRAY_TASK_ID=6" \
    SLURM_ARRAY_TASK_ID=6 SLURM_ARRAY_TASK_COUNT=3 SLURM_ARRAY_TASK_MIN=2 SLURM_ARRAY_TASK_STEP=2
shard "torchrun" "shard 1 of 2 from RANK=1, WORLD_SIZE=2$" RANK=1 WORLD_SIZE=2
shard "srun tasks" "shard 5 of 6 from SLURM_PROCID=5, SLURM_NTASKS=6$" SLURM_PROCID=5 SLURM_NTASKS=6
shard "an array before RANK" "shard 0 of 2 from SLURM_ARRAY_TASK_ID=0" SLURM_ARRAY_TASK_ID=0 \
    SLURM_ARRAY_TASK_COUNT=2 RANK=3 WORLD_SIZE=4
shard "GPU: LOCAL_RANK, no CUDA_VISIBLE_DEVICES" "; GPU from LOCAL_RANK=1: CUDA_VISIBLE_DEVICES=1$" \
    RANK=1 WORLD_SIZE=2 LOCAL_RANK=1
shard "GPU: LOCAL_RANK in a device list" "GPU from LOCAL_RANK=2: CUDA_VISIBLE_DEVICES=6 (of 4,5,6)$" \
    RANK=2 WORLD_SIZE=3 LOCAL_RANK=2 CUDA_VISIBLE_DEVICES=4,5,6
shard "GPU: SLURM_LOCALID" "GPU from SLURM_LOCALID=1: CUDA_VISIBLE_DEVICES=5 (of 4,5)$" \
    SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1 CUDA_VISIBLE_DEVICES=4,5
shard "GPU: one bound device stays" "CUDA_VISIBLE_DEVICES=7 (one device, as the scheduler bound it)$" \
    SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=2 SLURM_LOCALID=0 CUDA_VISIBLE_DEVICES=7
shard "no local rank: no GPU choice" "from RANK=0, WORLD_SIZE=1$" RANK=0 WORLD_SIZE=1 \
    CUDA_VISIBLE_DEVICES=3,4
bad "nothing set" "none of SLURM_ARRAY_TASK_ID / _COUNT, RANK / WORLD_SIZE, SLURM_PROCID / SLURM_NTASKS is set"
bad "RANK without WORLD_SIZE" "RANK is set but WORLD_SIZE is not" RANK=1
bad "array id past the count" "SLURM_ARRAY_TASK_ID=4 gives shard 4, not below SLURM_ARRAY_TASK_COUNT=4" \
    SLURM_ARRAY_TASK_ID=4 SLURM_ARRAY_TASK_COUNT=4
bad "array id off the step" "SLURM_ARRAY_TASK_ID=5 is not in the array (min 2, step 2)" \
    SLURM_ARRAY_TASK_ID=5 SLURM_ARRAY_TASK_COUNT=3 SLURM_ARRAY_TASK_MIN=2 SLURM_ARRAY_TASK_STEP=2
bad "not a number" "RANK='one': expected an integer >= 0" RANK=one WORLD_SIZE=2
bad "WORLD_SIZE 0" "WORLD_SIZE='0': expected an integer >= 1" RANK=0 WORLD_SIZE=0
bad "local rank past the device list" "LOCAL_RANK=2 but CUDA_VISIBLE_DEVICES='4,5' has fewer devices" \
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=2 CUDA_VISIBLE_DEVICES=4,5

# --- end to end ---------------------------------------------------------------------------
img="$G4_FIXTURES/frontends/media/square_rgb.png"
for k in 1 2 3; do
    echo "{\"id\": \"q$k\", \"image\": \"$img\", \"question\": \"What is shown $k?\", \"answers\": [\"a square\"], \"category\": \"Scene Text-centric VQA\"}"
done >"$tmp/m.jsonl"
run_opts=("$tmp/m.jsonl" --task ocrbench "$G4_TINY_PKG" --tokenizer "$tok" --max-new 2 --backend cpu)
per_item() { # DIR: "id tokens" lines of every predictions file, sorted
    cat "$1"/predictions*.jsonl | sed -E 's/.*"id":"([^"]*)".*"tokens":\[([^]]*)\].*/\1 \2/' | sort
}
env "${clean[@]}" "$G4CU" eval "${run_opts[@]}" --out "$tmp/one" >/dev/null 2>&1
check "unsharded run" $?
per_item "$tmp/one" >"$tmp/one.items"
[ "$(wc -l <"$tmp/one.items")" -eq 3 ]
check "unsharded run: 3 items" $?

env "${clean[@]}" G4_EVAL_PROCS=2 G4CU="$G4CU" bash "$G4_SOURCE_DIR/tools/eval_gpus.sh" \
    "${run_opts[@]}" --out "$tmp/gpus" >"$tmp/gpus.out" 2>&1
check "eval_gpus.sh, 2 processes: exit 0" $?
ls "$tmp/gpus"/predictions.shard-0-of-2.jsonl "$tmp/gpus"/predictions.shard-1-of-2.jsonl >/dev/null 2>&1 &&
    grep -q "shard 1 of 2 from RANK=1, WORLD_SIZE=2; GPU from LOCAL_RANK=1" "$tmp/gpus/shard-1-of-2.log"
check "eval_gpus.sh: one shard per process, GPU from the local rank" $?
per_item "$tmp/gpus" | cmp -s - "$tmp/one.items"
check "eval_gpus.sh: per item, the unsharded run's tokens" $?
grep -q "ocrbench_accuracy = .* over 3 items" "$tmp/gpus.out"
check "eval_gpus.sh: eval-merge scored the 3 items" $?

# A stand-in sbatch: --parsable prints a job id; an --array=A-B job runs its script once per
# task with the variables Slurm sets; a --dependency job runs after (the calls are in order).
mkdir "$tmp/bin"
cat >"$tmp/bin/sbatch" <<'SB'
#!/usr/bin/env bash
echo "$*" >>"$SBATCH_LOG"
array="" script=""
while [ $# -gt 0 ]; do
    case "$1" in
    --array=*) array=${1#--array=} ;;
    --*) ;;
    *) script=$1 && shift && break ;;
    esac
    shift
done
id=$((1000 + $(wc -l <"$SBATCH_LOG")))
if [ -n "$array" ]; then
    lo=${array%-*} hi=${array#*-}
    for ((t = lo; t <= hi; t++)); do
        SLURM_JOB_ID=$id SLURM_ARRAY_JOB_ID=$id SLURM_ARRAY_TASK_ID=$t SLURM_ARRAY_TASK_MIN=$lo \
            SLURM_ARRAY_TASK_MAX=$hi SLURM_ARRAY_TASK_COUNT=$((hi - lo + 1)) \
            bash "$script" "$@" >"$SBATCH_OUT/task-$t.log" 2>&1 || exit 1
    done
else
    SLURM_JOB_ID=$id bash "$script" "$@" >"$SBATCH_OUT/merge.log" 2>&1 || exit 1
fi
echo "$id"
SB
chmod +x "$tmp/bin/sbatch"
env "${clean[@]}" PATH="$tmp/bin:$PATH" SBATCH_LOG="$tmp/sbatch.calls" SBATCH_OUT="$tmp" \
    G4CU="$G4CU" bash "$G4_SOURCE_DIR/tools/slurm/eval.sbatch" submit 2 "${run_opts[@]}" \
    --out "$tmp/slurm" >"$tmp/submit.out" 2>&1
check "eval.sbatch submit 2: exit 0" $?
grep -q -- "--array=0-1 .*eval.sbatch shard" "$tmp/sbatch.calls" &&
    grep -q -- "--dependency=afterok:1001 .*eval.sbatch merge $tmp/slurm --task ocrbench" "$tmp/sbatch.calls"
check "eval.sbatch: an array job of 2, then the merge after it" $?
grep -q "shard 1 of 2 from SLURM_ARRAY_TASK_ID=1, SLURM_ARRAY_TASK_COUNT=2" "$tmp/task-1.log"
check "eval.sbatch: array task 1 took shard 1 of 2" $?
per_item "$tmp/slurm" | cmp -s - "$tmp/one.items"
check "eval.sbatch: per item, the unsharded run's tokens" $?
grep -q "ocrbench_accuracy = .* over 3 items" "$tmp/merge.log"
check "eval.sbatch: the merge job scored the 3 items" $?
err1 "eval.sbatch submit without a count" "expected a shard count" \
    bash "$G4_SOURCE_DIR/tools/slurm/eval.sbatch" submit x "${run_opts[@]}" --out "$tmp/x"
finish test_shard_cli
