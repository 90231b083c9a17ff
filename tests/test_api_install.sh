#!/usr/bin/env bash
# test_api_install.sh: `cmake --install` into a temporary prefix puts the header, libg4cu.so
# (with its SONAME) and g4cu.pc there; the README's example program (the ```c block of its
# "The C API" section, taken from README.md itself) compiles against that copy with
# `cc $(pkg-config --cflags --libs g4cu)`, runs on the tiny fixture and streams 16 tokens; a
# bad package makes it print the library's one-line error and exit 1. The library exports the
# g4cu_* functions only. The developer header (g4cu_dev.h) is installed and usable on its own.
# A program on <g4cu_eval.h> (the measuring part) compiles against the same copy and gets the
# logits of a 3-id prompt, [3, the package's vocabulary].
set -u
: "${G4_BUILD_DIR:?run through ctest}" "${G4_FIXTURES:?run through ctest}" "${G4_SOURCE_DIR:?}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
pre="$tmp/prefix"
cmake --install "$G4_BUILD_DIR" --prefix "$pre" >"$tmp/install.log" 2>&1
check "cmake --install to a temporary prefix" $?
[ -f "$pre/include/g4cu.h" ] && [ -f "$pre/include/g4cu_eval.h" ]
check "the headers are installed (g4cu.h, g4cu_eval.h)" $?
pc=$(find "$pre" -name g4cu.pc | head -1)
lib=$(find "$pre" -name 'libg4cu.so.0' | head -1)
[ -n "$pc" ] && [ -n "$lib" ]
check "g4cu.pc and libg4cu.so.0 are installed" $?
libdir=$(dirname "$lib")
objdump -p "$lib" | grep -q 'SONAME *libg4cu.so.0'
check "SONAME libg4cu.so.0" $?
others=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDB]$/ && $3 !~ /^g4cu_/' | wc -l)
[ "$others" -eq 0 ]
check "only g4cu_* symbols exported ($others others)" $?

awk '/^## The C API/{s=1} s && /^```c$/{c=1; next} c && /^```$/{exit} c' \
    "$G4_SOURCE_DIR/README.md" >"$tmp/example.c"
grep -q 'g4cu_generate' "$tmp/example.c"
check "README's example program extracted" $?
flags=$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs g4cu)
check "pkg-config --cflags --libs g4cu" $?
# A sanitized build's library needs the sanitizer runtime first: the example is built with it.
grep -q '^G4_SANITIZE:BOOL=ON' "$G4_BUILD_DIR/CMakeCache.txt" &&
    flags="$flags -fsanitize=address,undefined -fno-omit-frame-pointer"
cc -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter "$tmp/example.c" $flags \
    -o "$tmp/example" 2>"$tmp/cc.log"
ok=$?
[ $ok -ne 0 ] && cat "$tmp/cc.log"
check "the example compiles against the installed library" $ok

pkgdir="$G4_FIXTURES/mobius-tiny-f16/package"
tok="$G4_FIXTURES/chat/chat_bpe.json"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/example" "$pkgdir" "$tok" "Describe the weather." \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -qE '^\[[0-9]+ prompt tokens, 16 generated, length\]$' "$tmp/out"
ok=$?
[ $ok -ne 0 ] && { echo "  exit $rc:"; cat "$tmp/out" "$tmp/err"; }
check "the example runs on the tiny fixture: 16 tokens" $ok
# the library loaded is the installed one (not the build tree's)
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LD_DEBUG=libs "$tmp/example" 2>&1 | grep -q "$libdir/libg4cu.so.0"
check "the installed libg4cu.so.0 is the one loaded" $?
err1 "a bad package: one-line error, exit 1" "example: .*no-such-pkg" \
    env LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/example" "$tmp/no-such-pkg" "$tok" "hi"
cat >"$tmp/eval_example.c" <<'EOF'
#include <g4cu_eval.h>
#include <stdio.h>

int main(int argc, char **argv) {
    const int32_t ids[3] = {2, 5, 17};
    float *lg;
    int rows, vocab;
    if (argc != 2 || g4cu_eval_logits(argv[1], ids, 3, NULL, &lg, &rows, &vocab))
        return fprintf(stderr, "eval_example: %s\n", g4cu_last_error()), 1;
    printf("%d rows of %d\n", rows, vocab);
    g4cu_free(lg);
    return 0;
}
EOF
cc -std=c11 -Wall -Wextra -Werror "$tmp/eval_example.c" $flags -o "$tmp/eval_example" 2>"$tmp/cc.log"
ok=$?
[ $ok -ne 0 ] && cat "$tmp/cc.log"
check "a <g4cu_eval.h> program compiles against the installed library" $ok
vocab=$(sed -nE 's/.*"vocab_size": *([0-9]+).*/\1/p' "$pkgdir/genai_config.json" | head -1)
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/eval_example" "$pkgdir" >"$tmp/out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -n "$vocab" ] && [ "$(cat "$tmp/out")" = "3 rows of $vocab" ]
ok=$?
[ $ok -ne 0 ] && { echo "  exit $rc, vocab '$vocab':"; cat "$tmp/out"; }
check "g4cu_eval_logits from the installed library: [3, $vocab]" $ok

# The developer part (include/g4cu_dev.h): installed, self-contained (a C11 program that
# includes only it), its functions exported; g4cu_dev_inspect of the tiny package from there.
cat >"$tmp/dev.c" <<'C'
#include <g4cu_dev.h>
#include <string.h>
int main(int argc, char **argv) {
    g4cu_dev_inspect_params p;
    g4cu_dev_inspect_params_default(&p);
    p.summary = 1;
    int n_issues = -1;
    if (argc != 2 || g4cu_dev_inspect(argv[1], &p, stdout, &n_issues) != G4CU_OK) return 2;
    return n_issues != 0;
}
C
[ -f "$pre/include/g4cu_dev.h" ] &&
    cc -std=c11 -Wall -Wextra -Werror -pedantic "$tmp/dev.c" $flags -o "$tmp/dev" 2>"$tmp/cc.log"
ok=$?
[ $ok -ne 0 ] && cat "$tmp/cc.log"
check "g4cu_dev.h installed; a program on it alone compiles against the installed library" $ok
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/dev" "$pkgdir" >"$tmp/out" 2>&1 &&
    grep -q "^consistent: all checks passed$" "$tmp/out"
check "g4cu_dev_inspect from the installed library: the tiny package consistent" $?
# The command too, with an RPATH: the installed g4cu and the README's example run from the
# prefix without LD_LIBRARY_PATH (issue 34), and bench --hf's script is installed where the
# installed g4cu looks for it. On a failure: what the run printed and what the loader could not
# find without LD_LIBRARY_PATH.
unresolved() { # unresolved BINARY...: the `ldd` lines "not found" without LD_LIBRARY_PATH
    local b
    for b in "$@"; do env -u LD_LIBRARY_PATH ldd "$b" 2>&1 | grep 'not found' | sed "s|^|  $b: |"; done
}
[ -x "$pre/bin/g4cu" ] && env -u LD_LIBRARY_PATH "$pre/bin/g4cu" --version >"$tmp/out" 2>&1 &&
    grep -q "^g4cu " "$tmp/out" && [ -f "$pre/share/g4cu/python/bench_hf.py" ]
ok=$?
[ $ok -ne 0 ] && { echo "  g4cu --version without LD_LIBRARY_PATH:"; cat "$tmp/out"; unresolved "$pre/bin/g4cu"; }
check "cmake --install installs g4cu (runs without LD_LIBRARY_PATH) and bench_hf.py" $ok
# cuBLAS and cuDNN are not linked but loaded on use (bench --kernels, --version): the installed
# g4cu finds them without LD_LIBRARY_PATH too (its RPATH names their directories; CMakeLists.txt).
if grep -q '^cuBLAS ' "$tmp/out"; then
    grep -qE '^cuBLAS .* loaded [0-9.]+ \(' "$tmp/out" && grep -qE '^cuDNN .* loaded [0-9.]+ \(' "$tmp/out"
    ok=$?
    [ $ok -ne 0 ] && grep -E '^cu(BLAS|DNN) ' "$tmp/out"
    check "the installed g4cu loads cuBLAS and cuDNN on use without LD_LIBRARY_PATH" $ok
fi
readelf -d "$pre/bin/g4cu" | grep -qE '\(RPATH\).*\$ORIGIN/\.\./lib'
check "the installed g4cu carries an RPATH to the prefix's lib" $?
# DT_RPATH, not DT_RUNPATH (CMakeLists.txt says why): a RUNPATH would leave the dependencies of a
# library found through it (libsndfile's libFLAC) to LD_LIBRARY_PATH. libg4cu.so has an RPATH
# only for link directories outside the loader's own paths (none on a machine with the packages).
! readelf -d "$pre/bin/g4cu" "$lib" | grep -q '(RUNPATH)'
check "the installed g4cu and libg4cu.so.0 carry no RUNPATH (an RPATH serves their dependencies' dependencies too)" $?
env -u LD_LIBRARY_PATH "$tmp/example" "$pkgdir" "$tok" "Describe the weather." >"$tmp/out" 2>"$tmp/err" &&
    grep -qE '^\[[0-9]+ prompt tokens, 16 generated, length\]$' "$tmp/out" &&
    env -u LD_LIBRARY_PATH LD_DEBUG=libs "$tmp/example" 2>&1 | grep -q "$libdir/libg4cu.so.0"
ok=$?
[ $ok -ne 0 ] && { echo "  the example without LD_LIBRARY_PATH:"; cat "$tmp/out" "$tmp/err"; unresolved "$tmp/example" "$lib"; }
check "the README's example runs from the prefix without LD_LIBRARY_PATH" $ok
finish test_api_install
