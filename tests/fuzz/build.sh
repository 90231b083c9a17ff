#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan + fuzzer) and their seed corpora.
#
#   tests/fuzz/build.sh [OUT]        OUT defaults to build-fuzz (relative to the repository root)
#
# The ONNX target needs protoc-c's output of a CMake build: G4_PROTO_DIR (default build/proto;
# when that default is absent it is made with `cmake --build build --target g4_proto`). Each
# library source is compiled once, in parallel (G4_FUZZ_JOBS, default nproc), and the objects
# are linked into every target. Exits 77 (after saying why) when clang or its libFuzzer
# runtime is missing, so a ctest calling it can skip.
#
# Run one (see tests/fuzz/README.md):
#   OUT/fuzz_onnx -max_total_time=600 -timeout=30 OUT/corpus_onnx OUT/seeds_onnx
# or several at once: tests/fuzz/run_all.sh OUT 620 [target ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-fuzz}
proto=${G4_PROTO_DIR:-build/proto}
jobs=${G4_FUZZ_JOBS:-$(nproc)}
targets=(onnx json npz tokenizer audio image)

command -v clang >/dev/null || { echo "fuzz build: clang not found (tools/install_deps.sh installs it)"; exit 77; }
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err" ||
    { echo "fuzz build: clang cannot link libFuzzer ($(head -1 "$probe/err"))"; exit 77; }

if [ ! -f "$proto/onnx.pb-c.c" ]; then
    [ -z "${G4_PROTO_DIR:-}" ] || { echo "fuzz build: $proto/onnx.pb-c.c missing (build that tree first)"; exit 1; }
    cmake -S . -B build >/dev/null && cmake --build build --target g4_proto
fi

mkdir -p "$out/obj"
rm -f "$out"/obj/*.o # always rebuilt: a stale object must not hide a failed compile
flags=(-g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -D_GNU_SOURCE -I. -I"$proto")
# The library code the targets reach (one list: every target links all of it).
srcs=(base/base.c loader/onnx_model.c loader/json.c "$proto/onnx.pb-c.c"
      loader/tokenizer.c loader/tokenizer_vocab.c loader/tokenizer_encode.c loader/tokenizer_decode.c
      fidelity/npy.c fidelity/npz.c fidelity/printable.c
      engine/audio_decode.c engine/audio_fe.c engine/fft.c
      engine/image_decode.c engine/image_fe.c engine/image_resize.c)
libs=(-lprotobuf-c -lcjson -lz -lutf8proc -lpng -ljpeg -lsndfile -lsoxr -lm)
objs=()
for s in "${srcs[@]}"; do objs+=("$out/obj/$(echo "$s" | tr / _ | sed 's/\.c$/.o/')"); done
# compile, $jobs at a time
for i in "${!srcs[@]}"; do
    clang "${flags[@]}" -c "${srcs[$i]}" -o "${objs[$i]}" &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
done
wait || true
for o in "${objs[@]}"; do [ -f "$o" ] || { echo "fuzz build: $o was not built"; exit 1; }; done
for t in "${targets[@]}"; do
    rm -f "$out/fuzz_$t" # a failed link must not leave the old binary in place
    clang "${flags[@]}" -fsanitize=fuzzer tests/fuzz/fuzz_$t.c "${objs[@]}" "${libs[@]}" -o "$out/fuzz_$t" &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
done
wait || true
for t in "${targets[@]}"; do [ -x "$out/fuzz_$t" ] || { echo "fuzz build: $out/fuzz_$t was not built"; exit 1; }; done

# Seed corpora from the committed fixtures (the corpus_* folders keep what the fuzzer finds).
fx=tests/fixtures
for t in "${targets[@]}"; do rm -rf "$out/seeds_$t"; mkdir -p "$out/seeds_$t" "$out/corpus_$t"; done
for c in decoder embedding vision_encoder audio_encoder; do
    cp $fx/mobius-tiny-f16/package/$c/model.onnx "$out/seeds_onnx/$c.onnx"
done
cp $fx/mobius-tiny-f16/package/*.json "$out/seeds_json/"
cp $fx/readers/*.npz $fx/readers/*.npy "$out/seeds_npz/" 2>/dev/null || true
cp $fx/refdumps/tiny2/len1.npz "$out/seeds_npz/"
cp $fx/tokenizer/*.json "$out/seeds_tokenizer/"
# (not long_31s.flac: 7 s per execution under ASan, and every mutation of it as slow; the
# 30 s truncation is tested in test_frontends.c)
cp $fx/frontends/media/*.wav $fx/frontends/media/*.flac $fx/refdumps/mm/media/*.wav \
    $fx/refdumps/mm/media/*.flac "$out/seeds_audio/"
rm "$out/seeds_audio/long_31s.flac"
cp $fx/frontends/media/*.png $fx/frontends/media/*.jpg $fx/refdumps/mm/media/*.png \
    $fx/refdumps/mm/media/*.jpg "$out/seeds_image/"
echo "built $out/fuzz_{$(IFS=,; echo "${targets[*]}")}"
