#!/usr/bin/env python3
"""HF transformers peer benchmark on the same weights as a g4cu package (GPU machine).

    python3 tools/python/bench_hf.py HF_DIR [--dtypes bf16,fp16] [--reps 5] [--json F]
                                     [--long 4096,16384]
    python3 tools/python/bench_hf.py HF_DIR --logits IDS_FILE --out F.npy [--device cuda|cpu]
                                     (teacher-forced fp32 logits, below)
    python3 tools/python/bench_hf.py --check HF_DIR   (exit 0 when the benchmark can run: torch
                                                       and transformers import, a CUDA device,
                                                       HF_DIR/config.json; g4cu bench --hf runs
                                                       it before its own long benchmark)

For each dtype: Gemma4ForConditionalGeneration on cuda (sdpa attention), text only:
  prefill_<n>_ms  forward over n random ids (n = 128, 512, 2048), no cache kept
  ttft_128_ms     generate(max_new_tokens=1) on a 128-token prompt
  decode_tok_s    generate 128 new tokens (greedy, min_new_tokens = max_new_tokens = 128) after
                  a 128-token prompt: (128 - 1) / (time - TTFT)
  ttft_<k>k_ms, decode_<k>k_tok_s (--long, off by default: g4cu bench --hf leaves them out)
                  the same after each --long prompt length (3 timed runs at most)
Median of --reps runs after one warm-up, torch.cuda.synchronize() around each run. Ids:
tools/python/peer_ids.py (g4cu bench's seeded draws, minus the checkpoint's special and
placeholder ids).

--logits: Gemma4ForConditionalGeneration in float32 (eager attention) on --device, one forward
over the ids of IDS_FILE (.npy or comma / space separated text): the soft-capped logits as
float32 [n, vocab] .npy.
"""
import argparse
import json
import os
import statistics
import sys
import time

import peer_ids

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


def bench(hf_dir, dtype, reps, long_lens=()):
    model = Gemma4ForConditionalGeneration.from_pretrained(
        hf_dir, dtype=dtype, attn_implementation="sdpa").to("cuda").eval()
    vocab = model.config.text_config.vocab_size
    n_ids = max([2048 + 256, *[n + 128 for n in long_lens]])
    ids = torch.tensor([peer_ids.bench_ids(n_ids, vocab, peer_ids.special_ids(hf_dir))],
                       dtype=torch.long).to("cuda")
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
        for n in long_lens:
            k, lr = f"{n // 1024}k", min(reps, 3)
            prompt = ids[:, :n]
            r[f"ttft_{k}_ms"] = timed(lambda: model.generate(prompt, max_new_tokens=1,
                                                             min_new_tokens=1, **kw), lr)
            full = timed(lambda: model.generate(prompt, max_new_tokens=128, min_new_tokens=128,
                                                **kw), lr)
            r[f"decode_{k}_tok_s"] = 127 / ((full - r[f"ttft_{k}_ms"]) / 1e3)
    del model
    torch.cuda.empty_cache()
    return r


def logits(hf_dir, ids, device):
    model = Gemma4ForConditionalGeneration.from_pretrained(
        hf_dir, dtype=torch.float32, attn_implementation="eager").to(device).eval()
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long, device=device)).logits
    return out[0].float().cpu().numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--long", default="", help="decode after these prompt lengths too (4096,16384)")
    ap.add_argument("--logits", metavar="IDS_FILE", help="teacher-forced fp32 logits of these ids")
    ap.add_argument("--out", help="--logits: the .npy to write")
    ap.add_argument("--device", default="cuda", help="--logits: cuda or cpu")
    ap.add_argument("--check", action="store_true", help="only check that the benchmark can run")
    a = ap.parse_args()
    why = None
    if torch is None:
        why = f"cannot import torch / transformers: {import_error}"
    elif a.logits and not a.out:
        why = "--logits needs --out F.npy"
    elif not torch.cuda.is_available() and not (a.logits and a.device == "cpu"):
        why = "torch sees no CUDA device"
    elif not os.path.isfile(os.path.join(a.hf_dir, "config.json")):
        why = f"{a.hf_dir}: no config.json (expected an HF checkpoint directory)"
    if why:
        print(f"bench_hf: {why}", file=sys.stderr)
        sys.exit(1)
    if a.logits:
        import numpy as np
        ids = peer_ids.read_ids(a.logits)
        out = logits(a.hf_dir, ids, a.device)
        np.save(a.out, out)
        print(f"bench_hf: fp32 logits [{out.shape[0]}, {out.shape[1]}] on {a.device} -> {a.out}")
        return
    if a.check:
        print(f"bench_hf: ok (torch {torch.__version__}, {torch.cuda.get_device_name(0)})")
        return
    import transformers
    res = {"torch": torch.__version__, "transformers": transformers.__version__,
           "device": torch.cuda.get_device_name(0)}
    for d in a.dtypes.split(","):
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[d]
        res[d] = bench(a.hf_dir, dt, a.reps, [int(x) for x in a.long.split(",") if x])
        print(f"hf {d}: " + ", ".join(f"{k} {v:.1f}" for k, v in res[d].items()), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
