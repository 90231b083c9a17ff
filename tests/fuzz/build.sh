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
readers="eval/npy.c eval/npz.c eval/printable.c eval/safetensors.c"
libs="-lprotobuf-c -lcjson -lz -lm"
tokenizer="loader/tokenizer.c loader/tokenizer_vocab.c loader/tokenizer_encode.c loader/tokenizer_decode.c"
for t in onnx json npz safetensors tokenizer; do
    clang $flags tests/fuzz/fuzz_$t.c $loader $readers $tokenizer $libs -lutf8proc -o "$out/fuzz_$t"
done
# Seed corpora from the fixtures.
for t in onnx json npz safetensors tokenizer; do mkdir -p "$out/seeds_$t" "$out/corpus_$t"; done
for c in decoder embedding vision_encoder audio_encoder; do
    cp tests/fixtures/mobius-tiny-f16/package/$c/model.onnx "$out/seeds_onnx/$c.onnx"
done
cp tests/fixtures/mobius-tiny-f16/package/*.json "$out/seeds_json/"
cp tests/fixtures/readers/*.npz tests/fixtures/readers/*.npy "$out/seeds_npz/" 2>/dev/null || true
cp tests/fixtures/refdumps/tiny2/len1.npz "$out/seeds_npz/"
cp tests/fixtures/tokenizer/*.json "$out/seeds_tokenizer/"
cp tests/fixtures/readers/*.safetensors "$out/seeds_safetensors/" 2>/dev/null || true
echo "built $out/fuzz_{onnx,json,npz,safetensors,tokenizer}"
