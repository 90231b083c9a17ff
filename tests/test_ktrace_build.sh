#!/usr/bin/env bash
# test_ktrace_build.sh: tools/gpu/build_kernel_trace.sh compiles the CUPTI kernel tracer
# (tools/gpu/kernel_trace.c, issue 30; not part of the CMake build) without a warning, the
# library links libcupti and exports the injection entry point, and preloaded into a process
# that runs no kernel it neither breaks it nor leaves a CSV behind (no GPU: CUPTI refuses with
# one "g4ktrace: ... failed" line; with one: "no activity record came back"). Skips (77), saying
# why, where no cupti.h with its library is found. Running it on kernels needs a GPU (run.sh
# stage ktrace).
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
command -v cc >/dev/null || { echo "SKIP test_ktrace_build: no cc"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash "$G4_SOURCE_DIR/tools/gpu/build_kernel_trace.sh" "$tmp/lib" >"$tmp/build.log" 2>&1
rc=$?
cat "$tmp/build.log"
if [ $rc -eq 2 ]; then
    echo "SKIP test_ktrace_build: $(grep -m1 'build_kernel_trace: no' "$tmp/build.log")"
    exit 77
fi
fails=0
fail() { echo "FAIL test_ktrace_build: $*"; fails=$((fails + 1)); }
[ $rc -eq 0 ] || fail "build_kernel_trace.sh exit $rc"
so=$tmp/lib/libg4ktrace.so
[ -f "$so" ] || { fail "no $so"; exit 1; }
if grep -q "warning:" "$tmp/build.log"; then fail "compiler warnings"; fi
readelf -d "$so" | grep -q 'NEEDED.*libcupti' || fail "libg4ktrace.so does not link libcupti"
nm -D --defined-only "$so" | grep -qw InitializeInjection || fail "no InitializeInjection export"
(cd "$tmp" && G4_KTRACE_OUT="$tmp/k.csv" timeout 60 env LD_PRELOAD="$so" sh -c 'exit 3') 2>"$tmp/run.err"
rc=$?
cat "$tmp/run.err"
[ $rc -eq 3 ] || fail "a preloaded 'sh -c \"exit 3\"' exited $rc, not 3"
grep -q '^g4ktrace: ' "$tmp/run.err" || fail "the tracer printed no g4ktrace line (not loaded?)"
if grep -q 'cannot be preloaded' "$tmp/run.err"; then fail "the loader refused the library"; fi
[ ! -e "$tmp/k.csv" ] || fail "a process without kernels left $tmp/k.csv"
echo "test_ktrace_build: $fails failed"
[ $fails -eq 0 ]
