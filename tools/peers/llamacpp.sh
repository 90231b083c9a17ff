#!/usr/bin/env bash
# llama.cpp peer: build, convert, quantize, bench (GPU machine; also runs CPU-only for a try).
#
#   tools/peers/llamacpp.sh build TARBALL DIR [cuda|cpu]
#       unpack TARBALL (.carry/llama.tar.xz, made by tools/peers/pack_llamacpp.sh from the
#       llama-cpp-python 0.3.36 sdist's vendor/llama.cpp) into DIR and build llama-bench and
#       llama-quantize in DIR/build (cuda: -DGGML_CUDA=ON, sm_90a); DIR/BUILD_INFO keeps the
#       source and the cmake flags (LLAMACPP_CONFIGURE_ONLY=1: configure, do not build)
#   tools/peers/llamacpp.sh convert DIR HF_DIR WORK
#       only the conversion and the quantization below (a CPU step the pipeline runs beside
#       the GPU work; `bench` then reuses the GGUFs)
#   tools/peers/llamacpp.sh bench DIR HF_DIR WORK OUT_JSON [quick]
#       HF_DIR (an HF Gemma-4 checkpoint) -> convert_hf_to_gguf.py --outtype f16 -> llama-quantize
#       Q4_K_M, then llama-bench on each GGUF with -fa 1 -ngl 99 -o json:
#         -p 128,512,2048 -n 128            prefill pp128 / pp512 / pp2048, decode tg128 at depth 0
#         -p 0 -n 128 -d 128,4096,16384 -r 3  decode 128 after 128 / 4k / 16k tokens
#                                             (-r: LLAMACPP_DEPTH_REPS, default 3)
#       (quick: -p 16 -n 4, -d 16: the CPU try on a tiny checkpoint). HF_DIR without a
#       tokenizer.json (the random E2B) gets the chat fixture's, padded to the vocabulary with
#       tools/gpu/pad_tokenizer.py --dense, in a side dir of links. OUT_JSON: the build info and,
#       per GGUF, llama-bench's rows or the exact error of the step that failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
die() { echo "llamacpp.sh: $*" >&2; exit 1; }

build() {
    local tar=$1 dir=$2 kind=${3:-cuda}
    [ -f "$tar" ] || die "$tar: no such file (tools/peers/pack_llamacpp.sh makes it)"
    mkdir -p "$dir" || die "cannot create $dir"
    tar -xJf "$tar" -C "$dir" --strip-components=1 || die "$tar: cannot unpack"
    local flags=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
                 -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF
                 -DGGML_NATIVE=ON -DGGML_CCACHE=OFF)
    if [ "$kind" = cuda ]; then
        flags+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a)
    else
        flags+=(-DGGML_CUDA=OFF)
    fi
    { cat "$dir/PEERS_SOURCE" 2>/dev/null; echo "cmake ${flags[*]}"; } >"$dir/BUILD_INFO"
    cmake -S "$dir" -B "$dir/build" "${flags[@]}" >"$dir/cmake.log" 2>&1 ||
        { tail -20 "$dir/cmake.log"; die "cmake failed ($dir/cmake.log)"; }
    # (LLAMACPP_CONFIGURE_ONLY=1: stop here; trying the CUDA configuration on a machine without
    # the time to build it)
    [ "${LLAMACPP_CONFIGURE_ONLY:-0}" = 1 ] && { echo "llamacpp.sh: configured $dir/build ($kind)"; return 0; }
    cmake --build "$dir/build" -j"$(nproc)" --target llama-bench llama-quantize >"$dir/build.log" 2>&1 ||
        { grep -E "error" "$dir/build.log" | head -20; die "build failed ($dir/build.log)"; }
    ls "$dir/build/bin/llama-bench" "$dir/build/bin/llama-quantize" >/dev/null || die "no binaries in $dir/build/bin"
    echo "llamacpp.sh: built $dir/build/bin/llama-bench, llama-quantize ($kind)"
}

# The first line of a log that says what went wrong (else its last line).
why() { grep -m1 -iE "error|exception|failed|unsupported|unknown|not supported" "$1" || tail -1 "$1"; }

# HF_DIR -> WORK/model-f16.gguf -> WORK/model-q4_k_m.gguf (errors in WORK/llama_results/*.error);
# WORK/ggufs.made marks it done, so that `bench` after `convert` does not convert again.
make_ggufs() {
    local dir=$1 hf=$2 work=$3
    local bin=$dir/build/bin
    [ -x "$bin/llama-quantize" ] || die "$bin/llama-quantize: not built (llamacpp.sh build first)"
    [ -f "$hf/config.json" ] || die "$hf: no config.json (expected an HF checkpoint)"
    mkdir -p "$work"
    rm -f "$work/ggufs.made"
    local src=$hf
    if [ ! -f "$hf/tokenizer.json" ]; then # the random E2B has none: links + a padded tokenizer
        src=$work/hf_tok
        rm -rf "$src" && mkdir -p "$src"
        for f in "$hf"/*; do ln -s "$(realpath "$f")" "$src/$(basename "$f")"; done
        local vocab
        vocab=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c.get('text_config', c)['vocab_size'])" "$hf/config.json")
        python3 "$root/tools/gpu/pad_tokenizer.py" "$root/tests/fixtures/chat/chat_bpe.json" \
            "$src/tokenizer.json" "$vocab" --dense || die "pad_tokenizer.py failed"
        cp "$root/tests/fixtures/chat/tokenizer_config.json" "$src/"
    fi
    local f16=$work/model-f16.gguf q4=$work/model-q4_k_m.gguf
    local res=$work/llama_results
    rm -rf "$res" && mkdir -p "$res"
    local t0=$SECONDS
    if PYTHONPATH="$dir/gguf-py${PYTHONPATH:+:$PYTHONPATH}" python3 "$dir/convert_hf_to_gguf.py" "$src" \
        --outtype f16 --outfile "$f16" >"$work/convert.log" 2>&1; then
        echo "llamacpp.sh: converted to $f16 ($(du -h "$f16" | cut -f1), $((SECONDS - t0)) s)"
    else
        echo "convert_hf_to_gguf.py: $(why "$work/convert.log")" >"$res/f16.error"
        cat "$res/f16.error"
    fi
    if [ -f "$f16" ] && [ ! -f "$res/f16.error" ]; then
        t0=$SECONDS
        if "$bin/llama-quantize" "$f16" "$q4" Q4_K_M >"$work/quantize.log" 2>&1; then
            echo "llamacpp.sh: quantized to $q4 ($(du -h "$q4" | cut -f1), $((SECONDS - t0)) s)"
        else
            echo "llama-quantize: $(why "$work/quantize.log")" >"$res/q4_k_m.error"
            cat "$res/q4_k_m.error"
        fi
    else
        echo "not made: the f16 conversion failed" >"$res/q4_k_m.error"
    fi
    touch "$work/ggufs.made"
}

bench() {
    local dir=$1 hf=$2 work=$3 out=$4 quick=${5:-}
    local bin=$dir/build/bin
    [ -x "$bin/llama-bench" ] || die "$bin/llama-bench: not built (llamacpp.sh build first)"
    [ -f "$work/ggufs.made" ] || make_ggufs "$dir" "$hf" "$work"
    local p="128,512,2048" n=128 d="128,4096,16384" reps=${LLAMACPP_DEPTH_REPS:-3}
    [ "$quick" = quick ] && p=16 n=4 d=16
    local f16=$work/model-f16.gguf q4=$work/model-q4_k_m.gguf res=$work/llama_results
    local k g
    for k in f16 q4_k_m; do
        g=$f16; [ $k = q4_k_m ] && g=$q4
        [ -f "$res/$k.error" ] && continue
        "$bin/llama-bench" -m "$g" -p "$p" -n "$n" -fa 1 -ngl 99 -o json >"$res/$k.json" 2>"$res/$k.log" ||
            { echo "llama-bench: $(why "$res/$k.log")" >"$res/$k.error"; cat "$res/$k.error"; continue; }
        "$bin/llama-bench" -m "$g" -p 0 -n "$n" -d "$d" -r "$reps" -fa 1 -ngl 99 -o json >"$res/${k}_depth.json" 2>"$res/${k}_depth.log" ||
            { echo "llama-bench -d: $(why "$res/${k}_depth.log")" >"$res/${k}_depth.error"; cat "$res/${k}_depth.error"; }
        echo "llamacpp.sh: llama-bench $k done"
    done
    python3 - "$dir" "$res" "$out" <<'PY'
import json, os, sys
d, res, out = sys.argv[1:]
info = open(os.path.join(d, "BUILD_INFO")).read().strip().splitlines()
o = {"source": info[:-1], "cmake": info[-1], "runs": {}}
for k in ("f16", "q4_k_m"):
    r = o["runs"][k] = {}
    for part in ("", "_depth"):
        e = os.path.join(res, k + part + ".error")
        j = os.path.join(res, k + part + ".json")
        if os.path.exists(e):
            r["error" + part] = open(e).read().strip()
        elif os.path.exists(j):
            rows = json.load(open(j))
            r.setdefault("rows", []).extend(
                {x: row.get(x) for x in ("n_prompt", "n_gen", "n_depth", "avg_ts", "stddev_ts",
                                         "avg_ns", "model_type", "model_size", "build_commit",
                                         "build_number", "gpu_info", "backends", "flash_attn",
                                         "n_gpu_layers")} for row in rows)
json.dump(o, open(out, "w"), indent=1)
for k, r in o["runs"].items():
    for row in r.get("rows", []):
        t = f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"
        print(f"llama.cpp {k}: {t} @ d{row['n_depth']}: {row['avg_ts']:.1f} tok/s")
    for e in ("error", "error_depth"):
        if e in r:
            print(f"llama.cpp {k}: {r[e]}")
PY
}

case "${1:-}" in
    build) shift; [ $# -ge 2 ] || die "usage: llamacpp.sh build TARBALL DIR [cuda|cpu]"; build "$@" ;;
    bench) shift; [ $# -ge 4 ] || die "usage: llamacpp.sh bench DIR HF_DIR WORK OUT_JSON [quick]"; bench "$@" ;;
    convert) shift; [ $# -ge 3 ] || die "usage: llamacpp.sh convert DIR HF_DIR WORK"; make_ggufs "$@" ;;
    *) sed -n '2,20p' "$0"; exit 1 ;;
esac
