#!/usr/bin/env bash
# test_gpu_filters.sh: every filter tools/gpu/sanitize.sh gives a harness table (test_cuda_ops,
# test_cuda_attention, test_cuda_conv: tests/attnops_harness.h) selects at least one case of
# that table, checked on the CPU with the table's `--list` (no GPU needed). A case renamed or
# dropped from a table fails here, in CI, instead of leaving racecheck / synccheck without it
# ("0 cases": the sampler was lost that way when 'V=1000 ' stopped matching). Also: a filter
# that matches nothing makes `--list` fail (as it makes a GPU run fail).
set -u
: "${G4_BUILD_DIR:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
T="$G4_BUILD_DIR/tests"
san="$G4_SOURCE_DIR/tools/gpu/sanitize.sh"
n=0
# the runs: "$T/test_cuda_X [--op 'S' | --shape 'S']" (quotes optional)
while IFS= read -r line; do
    bin=$(sed -nE 's/^[^"]*"\$T\/(test_cuda_(ops|attention|conv))( [^"]*)?".*/\1/p' <<<"$line")
    [ -n "$bin" ] || continue
    args=$(sed -nE 's/^[^"]*"\$T\/test_cuda_[a-z]+ ?([^"]*)".*/\1/p' <<<"$line")
    eval "set -- $args" # (the file's own quoting: 'T=33 C=1024')
    "$T/$bin" --list "$@" >"$tmp/out" 2>&1
    rc=$?
    cases=$(grep -c "^case " "$tmp/out")
    [ $rc -eq 0 ] && [ "$cases" -ge 1 ]
    ok=$?
    [ $ok -ne 0 ] && echo "  $bin $args: exit $rc, $cases cases: $(tail -1 "$tmp/out")"
    check "sanitize.sh's run '$bin $args' selects a case of the table ($cases)" $ok
    n=$((n + 1))
done < <(grep -E '^\s*"\$T/test_cuda_(ops|attention|conv)' "$san")
[ "$n" -ge 15 ]
check "sanitize.sh's harness runs found ($n)" $?
"$T/test_cuda_ops" --list --shape 'V=1000 ' >"$tmp/out" 2>&1
[ $? -eq 1 ] && grep -q "no case matched the filters" "$tmp/out"
check "a filter that matches no case fails (--list)" $?
finish test_gpu_filters
