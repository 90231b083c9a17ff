#!/usr/bin/env bash
# test_bench_cli.sh: `g4cu bench`'s contract: usage errors exit 1 with one line; the whole-model
# form on a missing package is a user error (exit 1, one line, no numbers) and on the CPU backend
# runs the tiny fixture; --kernels needs a GPU (exit 2 without one; with one, a filter that
# matches nothing prints the device line and exits 0 without timing); --step-model runs on the CPU.
set -u
: "${G4CU:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"

"$G4CU" bench >"$tmp/out" 2>"$tmp/err"
check "no arguments: exit 1" $(($? != 1))
check "no arguments: one line on stderr" $(($(wc -l <"$tmp/err") != 1))

"$G4CU" bench --kernels --reps 0 >"$tmp/out" 2>"$tmp/err"
check "--reps 0: exit 1" $(($? != 1))
grep -q -- "--reps" "$tmp/err"
check "--reps 0: names the option" $?

"$G4CU" bench --kernels --bogus >"$tmp/out" 2>"$tmp/err"
check "unknown option: exit 1" $(($? != 1))

"$G4CU" bench /some/package --backend cpu >"$tmp/out" 2>"$tmp/err"
check "bench missing PKG: exit 1" $(($? != 1))
check "bench missing PKG: one line on stderr" $(($(wc -l <"$tmp/err") != 1))
check "bench missing PKG: prints no numbers" $(($(wc -c <"$tmp/out") != 0))

"$G4CU" bench "$G4_TINY_PKG" --backend cpu --reps 1 --json "$tmp/b.json" >"$tmp/out" 2>"$tmp/err"
check "bench tiny PKG on cpu: exit 0" $?
grep -q "decode [0-9.]* tok/s" "$tmp/out"
check "bench tiny PKG: decode tok/s printed" $?
grep -q '"decode_tok_s"' "$tmp/b.json"
check "bench tiny PKG: json written" $?
grep -q '"f16": {' "$tmp/b.json" && grep -q '"decode_sampled_tok_s": [0-9]' "$tmp/b.json" &&
    grep -q '"decode_4k_tok_s"' "$tmp/b.json" && grep -q '"decode_16k_tok_s"' "$tmp/b.json" &&
        grep -q '"decode_32k_tok_s"' "$tmp/b.json"
check "bench tiny PKG: keyed f16, sampled / 4k / 16k / 32k decode keys" $?
grep -q "sampled (T 1, top-k 64, top-p 0.95) [0-9.]* tok/s" "$tmp/out"
check "bench tiny PKG: sampled decode printed" $?
grep -q "vision 768x768 [0-9.]* ms | audio 30 s [0-9.]* ms" "$tmp/out"
check "bench tiny PKG: tower timings printed" $?
"$G4CU" bench "$G4_TINY_PKG" --backend cpu --ple-host --reps 1 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q -- "--ple-host needs a GPU" "$tmp/err"
check "bench --ple-host on the CPU: one-line user error" $?

# --batch-rows: the one-state step (1) and a batch step (2) on the CPU, numbers and json
"$G4CU" bench "$G4_TINY_PKG" --backend cpu --batch-rows 1,2 --reps 1 --json "$tmp/br.json" \
    >"$tmp/out" 2>"$tmp/err"
check "bench --batch-rows 1,2 on cpu: exit 0" $?
grep -qE "^f16 batch rows +1: step +[0-9.]+ ms" "$tmp/out" &&
    grep -qE "^f16 batch rows +2: step +[0-9.]+ ms \| per stream +[0-9.]+ tok/s \| total" "$tmp/out"
check "bench --batch-rows: a line per count" $?
grep -q '"batch_rows": {' "$tmp/br.json" && grep -q '"rows": 2, "step_ms": [0-9]' "$tmp/br.json"
check "bench --batch-rows: json written" $?
"$G4CU" bench "$G4_TINY_PKG" --backend cpu --batch-rows 2,0 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q -- "--batch-rows '2,0'" "$tmp/err"
check "bench --batch-rows 2,0: one-line user error" $?
"$G4CU" bench "$G4_TINY_PKG" --backend cpu --batch-rows 2 --filter pp128 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "runs alone" "$tmp/err"
check "bench --batch-rows with --filter: refused" $?

"$G4CU" bench --kernels --filter no-such-kernel-row --reps 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
if grep -q "no usable CUDA device" "$tmp/err"; then
    check "--kernels without a GPU: exit 2" $((rc != 2))
else
    check "--kernels --filter (no match): exit 0" $((rc != 0))
    grep -q "^device: " "$tmp/out"
    check "--kernels: device line" $?
    grep -q "no benchmark matched" "$tmp/out"
    check "--kernels: empty filter result reported" $?
fi

# --step-model: the skeleton's cost model, CPU only (test_step_cost checks its numbers)
"$G4CU" bench --grid >"$tmp/out" 2>"$tmp/err"
check "--grid without --step-model: exit 1" $(($? != 1))
"$G4CU" bench --step-model --kernels >"$tmp/out" 2>"$tmp/err"
check "--step-model --kernels: exit 1" $(($? != 1))
"$G4CU" bench --step-model >"$tmp/out" 2>"$tmp/err"
check "--step-model: exit 0 without a GPU" $?
check "--step-model: 9 validation rows" $(($(grep -c '^pf=' "$tmp/out") != 9))
check "--step-model: 6 session-31 plan rows" $(($(grep -c '^plan [0-9].*%' "$tmp/out") != 6))
check "--step-model: 9 session-32 math rows" $(($(grep -c '^s32 plan [0-9].*%' "$tmp/out") != 9))
check "--step-model: the 10 bench plans" $(($(grep -c '^step-model bench plan ' "$tmp/out") != 10))
check "--step-model: 1 unmeasured math plan" \
    $(($(grep -c '^step-model math plan .*(not measured)' "$tmp/out") != 1))

finish test_bench_cli
