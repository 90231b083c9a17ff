#!/usr/bin/env bash
# test_seed_cli.sh: `g4cu generate` sampling without --seed (issue 32): each run draws a fresh
# seed, says it on stderr and in --json ("seed"), and --seed with that number repeats the run's
# tokens exactly; a greedy run reports no seed; --seed given is the one reported.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
gen=("$G4CU" generate "$G4_TINY_PKG" --tokenizer "$G4_FIXTURES/chat/chat_bpe.json" --prompt Hello
    --max-new 12 --json)
seed_of() { sed -nE 's/.*"seed":([0-9]+).*/\1/p' "$1"; }
tokens() { sed -nE 's/.*"tokens":\[([^]]*)\].*/\1/p' "$1"; }

"${gen[@]}" --temperature 1.5 >"$tmp/a" 2>"$tmp/ea"
check "run 1 exits 0" $?
"${gen[@]}" --temperature 1.5 >"$tmp/b" 2>"$tmp/eb"
check "run 2 exits 0" $?
sa=$(seed_of "$tmp/a")
sb=$(seed_of "$tmp/b")
[ -n "$sa" ] && [ -n "$sb" ] && [ "$sa" != "$sb" ]
check "two runs without --seed draw two seeds ('$sa', '$sb')" $?
grep -q "seed $sa (drawn; --seed $sa repeats this sample)" "$tmp/ea"
check "the drawn seed on stderr" $?
"${gen[@]}" --temperature 1.5 --seed "$sa" >"$tmp/c" 2>"$tmp/ec"
[ "$(seed_of "$tmp/c")" = "$sa" ] && [ -n "$(tokens "$tmp/a")" ] &&
    [ "$(tokens "$tmp/c")" = "$(tokens "$tmp/a")" ] && ! grep -q drawn "$tmp/ec"
check "--seed $sa repeats run 1's tokens" $?
"${gen[@]}" >"$tmp/g" 2>"$tmp/eg"
[ $? -eq 0 ] && [ -z "$(seed_of "$tmp/g")" ] && ! grep -q seed "$tmp/eg"
check "a greedy run has no seed" $?

finish test_seed_cli
