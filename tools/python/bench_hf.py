#!/usr/bin/env python3
"""HF transformers peer benchmark on the same weights as a g4cu package (GPU machine).

    python3 tools/python/bench_hf.py HF_DIR [--dtypes bf16,fp16] [--reps 5] [--json F]
    python3 tools/python/bench_hf.py --check HF_DIR   (exit 0 when the benchmark can run: torch
                                                       and transformers import, a CUDA device,
                                                       HF_DIR/config.json; g4cu bench --hf runs
                                                       it before its own long benchmark)

For each dtype: Gemma4ForConditionalGeneration on cuda (sdpa attention), text only:
  prefill_<n>_ms  forward over n random ids (n = 128, 512, 2048), no cache kept
  ttft_128_ms     generate(max_new_tokens=1) on a 128-token prompt
  decode_tok_s    generate 128 new tokens (greedy, min_new_tokens = max_new_tokens = 128) after
                  a 128-token prompt: (128 - 1) / (time - TTFT)
Median of --reps runs after one warm-up, torch.cuda.synchronize() around each run. Ids are
seeded random in [3, vocab) like g4cu bench.
"""
import argparse
import json
import os
import statistics
import sys
import time

try:
    import torch
    from transformers import Gemma4ForConditionalGeneration
except ImportError as e:  # reported by --check (and by a run) as one line
    torch = None
    import_error = e


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)


def bench(hf_dir, dtype, reps):
    model = Gemma4ForConditionalGeneration.from_pretrained(
        hf_dir, dtype=dtype, attn_implementation="sdpa").to("cuda").eval()
    vocab = model.config.text_config.vocab_size
    g = torch.Generator().manual_seed(0x5EED)
    ids = torch.randint(3, vocab, (1, 2048 + 256), generator=g).to("cuda")
    r = {}
    with torch.inference_mode():
        for n in (128, 512, 2048):
            r[f"prefill_{n}_ms"] = timed(lambda: model(input_ids=ids[:, :n], use_cache=False), reps)
            r[f"prefill_{n}_tok_s"] = n / (r[f"prefill_{n}_ms"] / 1e3)
        prompt = ids[:, :128]
        kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
        r["ttft_128_ms"] = timed(lambda: model.generate(prompt, max_new_tokens=1,
                                                        min_new_tokens=1, **kw), reps)
        full = timed(lambda: model.generate(prompt, max_new_tokens=128, min_new_tokens=128, **kw),
                     reps)
        r["decode_tok_s"] = 127 / ((full - r["ttft_128_ms"]) / 1e3)
    del model
    torch.cuda.empty_cache()
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--check", action="store_true", help="only check that the benchmark can run")
    a = ap.parse_args()
    why = None
    if torch is None:
        why = f"cannot import torch / transformers: {import_error}"
    elif not torch.cuda.is_available():
        why = "torch sees no CUDA device"
    elif not os.path.isfile(os.path.join(a.hf_dir, "config.json")):
        why = f"{a.hf_dir}: no config.json (expected an HF checkpoint directory)"
    if why:
        print(f"bench_hf: {why}", file=sys.stderr)
        sys.exit(1)
    if a.check:
        print(f"bench_hf: ok (torch {torch.__version__}, {torch.cuda.get_device_name(0)})")
        return
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    for d in a.dtypes.split(","):
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[d]
        res[d] = bench(a.hf_dir, dt, a.reps)
        print(f"hf {d}: " + ", ".join(f"{k} {v:.1f}" for k, v in res[d].items()), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
