#!/usr/bin/env bash
# The test command: builds twice and runs the whole ctest suite in each (RelWithDebInfo in
# build/, ASan+UBSan in build-asan/), then builds the other build types a user may type
# (Release in build-release/, plain Debug in build-debug/) without running the suite again:
# the optimiser's warnings differ by build type (gcc 12 -O3 -Werror=format-truncation), so a
# build type that nobody builds breaks without anyone noticing. GPU tests skip with a printed
# reason where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DG4_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs"
# These two builds exist for the host compiler's warnings: the device code they would assemble
# (ptxas, sm_90a) is the same PTX whatever the build type (the type sets host flags only; device
# code is -O3 and -lineinfo in every type) and was assembled by the two builds above, so they
# stop at PTX (code=compute_90a): every host and front-end warning, no second ptxas pass.
for type in Release Debug; do
    dir=build-$(echo "$type" | tr '[:upper:]' '[:lower:]')
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" \
        -DG4_CUDA_ARCH="-gencode=arch=compute_90a,code=compute_90a" >/dev/null
    cmake --build "$dir" -j"$jobs"
    echo "tools/test.sh: $type build in $dir: ok"
done
