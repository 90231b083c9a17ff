#!/usr/bin/env bash
# test_help_cli.sh: `g4cu COMMAND --help` for every command `g4cu help` lists: exit 0, nothing
# on stderr, every line under 100 characters, and every option the command's source names (the
# "--x" literals of tools/cmd_COMMAND.c, and tools/gen_cli.c's for the commands built on it: an
# independent list of what the parser handles) is in the help; an option not in the tables is
# refused in one line. `g4cu --version`: the version, this checkout's commit, CUDA, and cuBLAS and
# cuDNN (headers, and the library loaded on use or why not: a missing file, a missing symbol).
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
: "${G4_FIXTURES:?run through ctest}"
tok="$G4_FIXTURES/chat/chat_bpe.json"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"

cmds=$("$G4CU" help | sed -nE 's/^  ([a-z][a-z-]*) .*/\1/p')
[ "$(echo "$cmds" | wc -w)" -ge 10 ]
check "g4cu help lists the commands" $?
for c in $cmds; do
    "$G4CU" "$c" --help >"$tmp/help" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && [ ! -s "$tmp/err" ] && grep -q "^usage: g4cu $c" "$tmp/help" &&
        grep -q -- "--threads N" "$tmp/help"
    check "$c --help: exit 0, usage, nothing on stderr (exit $rc)" $?
    long=$(awk 'length >= 100 { n++ } END { print n + 0 }' "$tmp/help")
    [ "$long" -eq 0 ]
    check "$c --help: every line under 100 characters ($long longer)" $?
    src="$G4_SOURCE_DIR/tools/cmd_${c//-/_}.c"
    srcs=("$src")
    grep -q '#include "tools/gen_cli.h"' "$src" && srcs+=("$G4_SOURCE_DIR/tools/gen_cli.c")
    missing=""
    for o in $(grep -ohE '"--[a-z][a-z0-9-]*' "${srcs[@]}" | tr -d '"' | sort -u); do
        grep -qE -- "^  $o( |$)" "$tmp/help" || missing="$missing $o"
    done
    [ -z "$missing" ]
    check "$c --help lists every option its parser names (missing:$missing)" $?
    err1 "$c refuses an option not in its table" "unknown option '--no-such-option'" \
        "$G4CU" "$c" --no-such-option
done
# --help anywhere in the line, after arguments and option values
"$G4CU" generate "$G4_TINY_PKG" --max-new 3 --help >"$tmp/help" 2>&1 && grep -q "^  --max-new N" "$tmp/help"
check "generate PKG --max-new 3 --help" $?
# an option's value is not taken for an option
"$G4CU" tokenize --decode "$tok" 2,3 >/dev/null 2>&1
check "tokenize --decode runs" $?
"$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --ids 2,3 --max-new 1 --stop --no-such-option >/dev/null 2>"$tmp/err"
[ $? -eq 0 ]
check "a value that looks like an option stays a value" $?

"$G4CU" --version >"$tmp/v" 2>"$tmp/err"
check "--version exit 0" $?
# (a build without CUDA says so instead of the CUDA lines: G4CU_CUDA=OFF)
lib_line='(loaded [0-9]+\.[0-9]+\.[0-9]+ \(.*libcu(blas|dnn)\.so\.[0-9]+\)|not loaded: .+)$'
grep -qE '^g4cu [0-9]+\.[0-9]+\.[0-9]+$' "$tmp/v" && { grep -qE '^CUDA runtime [0-9]+\.[0-9]+ ' "$tmp/v" &&
    grep -qE "^cuBLAS [0-9]+\.[0-9]+\.[0-9]+ \(headers\), $lib_line" "$tmp/v" &&
    grep -qE "^cuDNN [0-9]+\.[0-9]+\.[0-9]+ \(headers\), $lib_line" "$tmp/v" ||
    grep -qx 'CUDA: none (built without CUDA: --backend cpu only)' "$tmp/v"; }
check "--version: version, CUDA runtime, cuBLAS, cuDNN lines (or: built without CUDA)" $?
if grep -q '^cuBLAS ' "$tmp/v"; then
    # cuBLAS and cuDNN are loaded on use (kernels/bench/baselines.h): one missing, or lacking a
    # function, is a line saying so, and --version still succeeds (as bench --kernels goes on
    # without that baseline). libc: a library that loads but has none of their functions.
    G4_CUBLAS_LIB=/nonexistent/libcublas.so.13 G4_CUDNN_LIB=libc.so.6 "$G4CU" --version \
        >"$tmp/v2" 2>"$tmp/err"
    check "--version with cuBLAS and cuDNN unusable: exit 0" $?
    grep -qE '^cuBLAS [0-9.]+ \(headers\), not loaded: /nonexistent/libcublas\.so\.13: .*No such file.* \(from G4_CUBLAS_LIB\)$' "$tmp/v2"
    check "--version: a missing cuBLAS says so with the loader's message" $?
    grep -qE '^cuDNN [0-9.]+ \(headers\), not loaded: .*libc\.so\.6: undefined symbol: cudnn[A-Za-z]+$' "$tmp/v2"
    check "--version: a cuDNN without its functions says so with the loader's message" $?
    [ ! -s "$tmp/err" ]
    check "--version with cuBLAS and cuDNN unusable: nothing on stderr" $?
fi
if head=$(git -C "$G4_SOURCE_DIR" rev-parse HEAD 2>/dev/null); then
    commit=$(sed -nE 's/^commit ([0-9a-f]+)(-dirty)?$/\1/p' "$tmp/v")
    [ -n "$commit" ] && [ "${head#"$commit"}" != "$head" ]
    check "--version names this checkout's commit ($commit vs $head)" $?
else
    grep -q '^commit unknown$' "$tmp/v"
    check "--version outside a git checkout: commit unknown" $?
fi
finish test_help_cli
