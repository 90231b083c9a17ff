#!/usr/bin/env bash
# test_cli.sh: the g4cu command's contract: exit codes (0 ok, 1 bad input/usage), one-line
# errors on stderr, and inspect's output on the shipped fixture.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"

# The in-repo fixture must stay identical to the shared one it was copied from.
shared="$(dirname "$0")/../../shared/fixtures/mobius-tiny-f16"
if [ -d "$shared" ]; then
    diff -r "$shared" "$(dirname "$G4_TINY_PKG")" -x PROVENANCE.md >/dev/null
    check "fixture copy identical to ../shared" $?
fi

"$G4CU" inspect "$G4_TINY_PKG" >"$tmp/out" 2>"$tmp/err"
check "inspect exit 0" $?
grep -q "hidden 64, layers 10, heads 2, kv heads 1, vocab 1024, ple dim 16" "$tmp/out"
check "inspect text config line" $?
grep -q "kv layers 6, kv-shared layers 4" "$tmp/out"
check "inspect kv sharing" $?
grep -q "consistent: all checks passed" "$tmp/out"
check "inspect consistent" $?
for c in decoder embedding vision_encoder audio_encoder; do
    grep -q "^$c: .*/$c/model.onnx" "$tmp/out"
    check "inspect lists $c" $?
done
# every initializer of the shared listing appears in the tensor table
n_listed=$(grep -cP '^[^#\t][^\t]*\t\d+\t\[' "$(dirname "$G4_TINY_PKG")/INITIALIZERS.txt")
n_shown=$(grep -cE '^  [a-zA-Z_0-9.]+ +(float16|float32|int64|uint8|bool) ' "$tmp/out")
[ "$n_listed" -eq "$n_shown" ]
check "inspect shows all $n_listed tensors (shown $n_shown)" $?

"$G4CU" inspect "$G4_TINY_PKG" --tensor decoder.lm_head.weight_t >"$tmp/out" 2>&1
check "inspect --tensor exit 0" $?
grep -q "float16 \[64, 1024\]" "$tmp/out" && grep -q "NaN 0" "$tmp/out"
check "inspect --tensor stats" $?
"$G4CU" inspect "$G4_TINY_PKG" --tensor model.layers.0.layer_scalar >"$tmp/out" 2>&1
check "inspect --tensor without prefix" $?

"$G4CU" inspect "$G4_TINY_PKG" --tensor no.such.tensor >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "no tensor named 'no.such.tensor'" "$tmp/err"
check "inspect unknown tensor: exit 1, one line" $?

cp -r "$G4_TINY_PKG" "$tmp/pkg" && chmod -R u+w "$tmp/pkg"
truncate -s 1000 "$tmp/pkg/embedding/model.onnx.data"
"$G4CU" inspect "$tmp/pkg" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^g4cu: .*embedding/model.onnx: tensor 'embedding\..*past the end .*truncated" "$tmp/err"
check "inspect truncated package: exit 1, one line naming file and tensor" $?
[ ! -s "$tmp/out" ]
check "inspect truncated package: nothing on stdout" $?

"$G4CU" inspect >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "missing package directory" "$tmp/err"
check "inspect without args: usage error" $?
"$G4CU" frobnicate >/dev/null 2>&1
[ $? -eq 1 ]
check "unknown command: exit 1" $?
"$G4CU" help >/dev/null 2>&1
check "help: exit 0" $?

finish test_cli
