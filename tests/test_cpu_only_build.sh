#!/usr/bin/env bash
# test_cpu_only_build.sh: the build without CUDA (cmake -DG4CU_CUDA=OFF, and G4CU_CUDA=AUTO
# where no nvcc is found). Configures a temporary build of this source tree and builds only the
# g4cu command and libg4cu.so (not the tests: the whole suite in a second build would double the
# CI time), then: neither links the CUDA runtime, cuBLAS nor cuDNN (ldd); --version says it was
# built without CUDA; a CPU generate on the tiny fixture gives the ids this build's g4cu gives;
# --backend cuda is one line saying it was built without CUDA. AUTO is checked at configure
# time only, with a PATH that holds no nvcc. First, this build's own g4cu (with CUDA or not): a
# CPU run does not load cuBLAS or cuDNN (issue 34: bench --kernels and --version dlopen them):
# the loader's log (LD_DEBUG=libs) of a CPU generate names neither, while that of --version,
# which loads them, does; and neither g4cu nor libg4cu.so has a NEEDED entry for them (readelf).
# Skipped (77) in the sanitizer build: it checks the build configuration, which the plain
# build's run already covers.
set -u
: "${G4CU:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}" "${G4_TINY_PKG:?}"
: "${G4_CMAKE:?run through ctest}"
if [ "${G4_SANITIZE:-OFF}" = "ON" ]; then
    echo "test_cpu_only_build: skipped: the CPU-only build is checked by the plain build's ctest"
    exit 77
fi
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
checkd() { # NAME STATUS DETAIL: check, printing DETAIL when it failed
    [ "$2" -ne 0 ] && echo "  $1: $3"
    check "$1" "$2"
}
start=$SECONDS

# The CPU run of this build's g4cu maps neither cuBLAS nor cuDNN.
LD_DEBUG=libs "$G4CU" generate "$G4_TINY_PKG" --ids 2,5,17 --max-new 4 --backend cpu \
    >/dev/null 2>"$tmp/ld_cpu.txt"
rc=$?
[ $rc -eq 0 ] && grep -q 'calling init:' "$tmp/ld_cpu.txt" &&
    ! grep -qE 'libcublas|libcudnn' "$tmp/ld_cpu.txt"
checkd "generate --backend cpu loads neither libcublas nor libcudnn (LD_DEBUG=libs)" $? \
    "exit $rc: $(grep -m3 -E 'libcublas|libcudnn' "$tmp/ld_cpu.txt")"
if ! "$G4CU" --version | grep -qx 'CUDA: none (built without CUDA: --backend cpu only)'; then
    # the same log does show them where they are loaded: --version (a found library, or not)
    LD_DEBUG=libs "$G4CU" --version >"$tmp/ver.txt" 2>"$tmp/ld_ver.txt"
    grep -q 'libcublas' "$tmp/ld_ver.txt" && grep -q 'libcudnn' "$tmp/ld_ver.txt"
    checkd "--version: the loader's log names libcublas and libcudnn (the check above sees them)" \
        $? "$(tail -2 "$tmp/ver.txt")"
fi
if command -v readelf >/dev/null; then
    for f in "$G4CU" "${G4_BUILD_DIR:-/nonexistent}/libg4cu.so"; do
        [ -f "$f" ] || continue
        needed=$(readelf -d "$f" | grep NEEDED | grep -E 'libcublas|libcudnn' | tr '\n' ' ')
        [ -z "$needed" ]
        checkd "${f##*/}: no NEEDED entry for libcublas or libcudnn (readelf -d)" $? "$needed"
    done
else
    echo "skip the NEEDED check: no readelf"
fi

b="$tmp/build-off"
args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="${G4_C_COMPILER:-cc}")
[ -n "${G4_C_LAUNCHER:-}" ] && args+=(-DCMAKE_C_COMPILER_LAUNCHER="$G4_C_LAUNCHER")

"$G4_CMAKE" -S "$G4_SOURCE_DIR" -B "$b" -DG4CU_CUDA=OFF "${args[@]}" >"$tmp/cfg.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "g4cu: CUDA backend OFF" "$tmp/cfg.txt"
checkd "configure -DG4CU_CUDA=OFF: CUDA backend OFF" $? "$(tail -3 "$tmp/cfg.txt")"
"$G4_CMAKE" --build "$b" -j2 --target g4cu g4cu_shared >"$tmp/build.txt" 2>&1
rc=$?
checkd "build g4cu and libg4cu.so without CUDA" $rc "$(grep -m3 -E 'error|Error' "$tmp/build.txt")"
off="$b/g4cu"
if [ $rc -eq 0 ]; then
    for f in "$off" "$b/libg4cu.so"; do
        libs=$(ldd "$f" | grep -iE 'libcuda|libcublas|libcudnn|libcudart|libnvidia' | tr '\n' ' ')
        [ -z "$libs" ]
        checkd "${f##*/}: no CUDA library linked (ldd)" $? "$libs"
    done
    "$off" --version >"$tmp/v.txt" 2>&1
    grep -qx 'CUDA: none (built without CUDA: --backend cpu only)' "$tmp/v.txt"
    checkd "--version: built without CUDA" $? "$(cat "$tmp/v.txt")"
    # the CPU backend: the same ids as this build's g4cu (with CUDA or not) on the same case
    "$G4CU" generate "$G4_TINY_PKG" --ids 2,5,17 --max-new 4 --backend cpu >"$tmp/want.txt" 2>&1
    "$off" generate "$G4_TINY_PKG" --ids 2,5,17 --max-new 4 --backend cpu >"$tmp/got.txt" 2>&1
    rc=$?
    [ $rc -eq 0 ] && [ -s "$tmp/got.txt" ] && cmp -s "$tmp/want.txt" "$tmp/got.txt"
    checkd "generate --backend cpu: exit 0, the ids of the full build" $? \
        "exit $rc: '$(head -c 200 "$tmp/got.txt")' vs '$(head -c 200 "$tmp/want.txt")'"
    expect "--backend cuda in a build without CUDA" 1 \
        "^g4cu: --backend cuda: this g4cu was built without CUDA \(cmake -DG4CU_CUDA=OFF\); use --backend cpu$" \
        "$off" generate "$G4_TINY_PKG" --ids 2,5,17 --max-new 4 --backend cuda
fi

# AUTO (the default) without nvcc: a CPU-only build, saying what was missing
plain_path=/usr/sbin:/usr/bin:/sbin:/bin
if PATH=$plain_path command -v nvcc >/dev/null; then
    echo "skip AUTO without nvcc: $(PATH=$plain_path command -v nvcc) is on $plain_path"
else
    env -u CUDACXX PATH="$plain_path" "$G4_CMAKE" -S "$G4_SOURCE_DIR" -B "$tmp/build-auto" \
        "${args[@]}" >"$tmp/auto.txt" 2>&1
    rc=$?
    [ $rc -eq 0 ] && grep -q "g4cu: nvcc .* not found: a CPU-only build (G4CU_CUDA=AUTO)" "$tmp/auto.txt" &&
        grep -q "g4cu: CUDA backend OFF" "$tmp/auto.txt"
    checkd "configure without nvcc (AUTO): a CPU-only build, saying so" $? "$(tail -3 "$tmp/auto.txt")"
fi
echo "test_cpu_only_build: $((SECONDS - start)) s"
finish test_cpu_only_build
