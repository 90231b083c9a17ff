#!/usr/bin/env bash
# eval_gpus.sh: one `g4cu eval --shard auto` per GPU of this host, in parallel, then eval-merge.
#   tools/eval_gpus.sh MANIFEST.jsonl --task T PKG --out DIR [other g4cu eval options]
# Process i of n gets RANK=i WORLD_SIZE=n LOCAL_RANK=i: --shard auto takes shard i of n and GPU
# i (the i-th entry of CUDA_VISIBLE_DEVICES, or device i when it is unset; tools/shard_env.h).
# n: the entries of CUDA_VISIBLE_DEVICES, else the GPUs `nvidia-smi -L` lists; G4_EVAL_PROCS=n
# overrides it (a CPU run, a test). Each shard's log is DIR/shard-i-of-n.log. G4CU: the binary
# (default: build/g4cu beside this script's tools/). Exit 0 when every shard and the merge did.
set -u
g4cu=${G4CU:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/g4cu}
out="" task=""
args=("$@")
for ((k = 0; k < ${#args[@]}; k++)); do
    case "${args[k]}" in
    --out) out=${args[k + 1]:-} ;;
    --task) task=${args[k + 1]:-} ;;
    --shard) echo "eval_gpus.sh: --shard is set here (one shard per GPU)" >&2 && exit 1 ;;
    esac
done
[ -n "$out" ] && [ -n "$task" ] || {
    echo "usage: eval_gpus.sh MANIFEST.jsonl --task T PKG --out DIR [g4cu eval options]" >&2
    exit 1
}
if [ -n "${G4_EVAL_PROCS:-}" ]; then
    n=$G4_EVAL_PROCS
elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    n=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
else
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
case "$n" in '' | *[!0-9]* | 0)
    echo "eval_gpus.sh: no GPUs found (set CUDA_VISIBLE_DEVICES or G4_EVAL_PROCS)" >&2
    exit 1
    ;;
esac
mkdir -p "$out" || exit 1
pids=()
for ((i = 0; i < n; i++)); do
    RANK=$i WORLD_SIZE=$n LOCAL_RANK=$i "$g4cu" eval "$@" --shard auto \
        >"$out/shard-$i-of-$n.log" 2>&1 &
    pids+=($!)
done
failed=0
for ((i = 0; i < n; i++)); do
    if ! wait "${pids[i]}"; then
        echo "eval_gpus.sh: shard $i of $n failed (see $out/shard-$i-of-$n.log)" >&2
        failed=1
    fi
done
[ $failed -eq 0 ] || exit 1
"$g4cu" eval-merge "$out" --task "$task"
