#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan + fuzzer) into build-fuzz/.
# Needs the protoc-c output of a normal build (build/proto), so run tools/test.sh or cmake first.
# Run one: build-fuzz/fuzz_onnx -max_total_time=600 build-fuzz/corpus_onnx tests/fuzz/seeds_onnx
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build-fuzz
mkdir -p "$out"
[ -f build/proto/onnx.pb-c.c ] || { cmake -S . -B build >/dev/null && cmake --build build --target g4_proto; }
flags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE -I. -Ibuild/proto"
loader="loader/base.c loader/onnx_model.c loader/json.c build/proto/onnx.pb-c.c"
clang $flags tests/fuzz/fuzz_onnx.c $loader -lprotobuf-c -lcjson -lm -o "$out/fuzz_onnx"
clang $flags tests/fuzz/fuzz_json.c $loader -lprotobuf-c -lcjson -lm -o "$out/fuzz_json"
# Seed corpora from the fixtures.
mkdir -p "$out/seeds_onnx" "$out/seeds_json" "$out/corpus_onnx" "$out/corpus_json"
for c in decoder embedding vision_encoder audio_encoder; do
    cp tests/fixtures/mobius-tiny-f16/package/$c/model.onnx "$out/seeds_onnx/$c.onnx"
done
cp tests/fixtures/mobius-tiny-f16/package/*.json "$out/seeds_json/"
echo "built $out/fuzz_onnx $out/fuzz_json"
