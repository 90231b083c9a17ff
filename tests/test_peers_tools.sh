#!/usr/bin/env bash
# test_peers_tools.sh: the pure-Python parts of the peers stage (tools/gpu/run.sh peers), which
# run only on the GPU machine otherwise: the prompt ids (tools/python/peer_ids.py), the
# tokenizer the llama.cpp converter gets (tools/gpu/pad_tokenizer.py --dense) and the table's
# ratios (tools/python/peers_table.py). Python 3 standard library only; skips without python3.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
src=$G4_SOURCE_DIR
pkg=$src/tests/fixtures/mobius-tiny-f16/package

# g4cu bench's draws for vocab 1024: 1018 918 669 454 820 (api/g4cu_dev_bench_model.c's loop
# compiled alone: xorshift64 13/7/17 from 0x5eed, 3 + s % 1021); skipping ids takes the next draws.
out=$(python3 - "$src/tools/python" "$pkg" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import peer_ids as p
print(p.bench_ids(5, 1024), p.bench_ids(2, 1024, {1018, 918}), sorted(p.special_ids(sys.argv[2])))
PY
)
[ "$out" = "[1018, 918, 669, 454, 820] [669, 454] [0, 1, 2, 256000, 258880, 258881]" ]
check "peer_ids: g4cu bench's draws, skips, the tiny package's special ids ($out)" $?

# --dense: every id below VOCAB exactly once (BPE vocabulary or added token), the fixture's own
# pieces keep their ids, the placeholders past its dense prefix become added tokens
for v in 262144 1024; do
    python3 "$src/tools/gpu/pad_tokenizer.py" "$src/tests/fixtures/chat/chat_bpe.json" "$tmp/t$v.json" $v --dense
    python3 - "$src/tests/fixtures/chat/chat_bpe.json" "$tmp/t$v.json" $v <<'PY'
import json, sys
a, b, v = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
ids = set(b["model"]["vocab"].values()) | {t["id"] for t in b["added_tokens"]}
assert ids == set(range(v)), "ids are not exactly 0 .. VOCAB - 1"
assert len(b["model"]["vocab"]) == len(set(b["model"]["vocab"].values())) == max(b["model"]["vocab"].values()) + 1
piece = {t["id"]: t["content"] for t in b["added_tokens"]}
piece.update({k: s for s, k in b["model"]["vocab"].items()})
for s, k in a["model"]["vocab"].items():
    assert k >= v or piece[k] == s, f"{s} moved from {k}"
PY
    check "pad_tokenizer --dense $v: ids 0 .. $((v - 1)) once, the pieces keep their ids" $?
done
python3 "$src/tools/gpu/pad_tokenizer.py" "$src/tests/fixtures/chat/chat_bpe.json" "$tmp/plain.json" 262144
python3 -c 'import json, sys; t = json.load(open(sys.argv[1])); a = [x["id"] for x in t["added_tokens"]]
assert "<|image|>" in t["model"]["vocab"] and a[-1] == 262143 and "<g4_pad_258885>" in [x["content"] for x in t["added_tokens"]]' "$tmp/plain.json"
check "pad_tokenizer without --dense: pads only past the highest id, the vocabulary as it was" $?

# peers_table: ratios g4cu / peer for tok/s, peer / g4cu for ms; a failed peer shows its reason
cat >"$tmp/g4.json" <<'J'
{"backend": "cuda", "reps": 5, "packages": {"f16": {"prefill_2048_tok_s": 80000, "ttft_128_ms": 8,
 "decode_tok_s": 360, "decode_16k_tok_s": 300}, "q4": {"decode_tok_s": 500}}}
J
echo '{"onnxruntime_genai": "0.18.0", "prefill_2048_tok_s": 40000, "ttft_128_ms": 12, "decode_tok_s": 120}' >"$tmp/ort.json"
echo 'onnxruntime-genai q4: out of memory' >"$tmp/ortq.json.error"
echo '{"source": ["x"], "cmake": "cmake -DGGML_CUDA=ON", "runs": {"f16": {"rows": [{"n_prompt": 0, "n_gen": 128, "n_depth": 16384, "avg_ts": 150}]}, "q4_k_m": {"error": "llama-bench: unknown model architecture"}}}' >"$tmp/llama.json"
python3 "$src/tools/python/peers_table.py" --g4cu "$tmp/g4.json" --ort-f16 "$tmp/ort.json" \
    --ort-q4 "$tmp/ortq.json" --llama "$tmp/llama.json" --md "$tmp/t.md" --json "$tmp/t.json" >/dev/null
check "peers_table: runs" $?
grep -q "^| decode 128 after 128 (tok/s) | 360.0 | 120.0 (3.0x) | - | - | - | 500.0 | - |" "$tmp/t.md"
check "peers_table: decode ratio 3.0x, a failed peer '-'" $?
grep -q "^| TTFT, 128-token prompt (ms) | 8.0 | 12.0 (1.5x) |" "$tmp/t.md" &&
    grep -q "^| prefill 2048 (tok/s) | 80,000 | 40,000 (2.0x) |" "$tmp/t.md" &&
    grep -q "^| decode 128 after 16k (tok/s) | 300.0 | - | 150.0 (2.0x) |" "$tmp/t.md"
check "peers_table: TTFT ratio peer / g4cu, prefill, llama.cpp's tg128 at depth 16384" $?
grep -q "^- onnxruntime-genai Q4: onnxruntime-genai q4: out of memory" "$tmp/t.md" &&
    grep -q "^- llama.cpp Q4_K_M: llama-bench: unknown model architecture" "$tmp/t.md" &&
    grep -q "^- HF fp16: not run" "$tmp/t.md"
check "peers_table: the reasons of the peers that did not run" $?
finish test_peers_tools
