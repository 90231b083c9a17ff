#!/usr/bin/env python3
"""Writes tests/fixtures/fidelity-tiny/ from a train_proxy.py --preset tiny run: the trained
package, its held-out text, and reference perplexity / KL-divergence numbers computed here with
torch on logits from independent sources (HF transformers, onnxruntime), never from g4cu's
forward pass. tests/test_perplexity.sh checks `g4cu perplexity` against them.

    python tools/python/make_fidelity_fixture.py TRAIN_OUT G4CU [--out tests/fixtures/fidelity-tiny]
                                                [--ctx 64] [--chunks 24]

1. Copies TRAIN_OUT/hf (float16 safetensors, config, tokenizer.json) and TRAIN_OUT/f16 (the
   mobius package, with tokenizer.json) to OUT/hf and OUT/package.
2. OUT/test.txt: the first paragraphs of TRAIN_OUT/test.txt (held-out documents) that HF
   tokenizers encodes (with <bos>) to at least ctx * chunks + 1 tokens.
3. Perplexity in llama-perplexity's convention (chunks of ctx tokens, the first replaced by
   <bos>, scored on positions ctx/2 .. ctx-2) from HF transformers' logits of OUT/hf run in
   float32 (the package's fp16 weights, upcast): ppl and its standard error in float64.
4. `G4CU quantize` writes the Q4 package (the package under test of the KLD check); onnxruntime
   (CPU) runs the f16 and the Q4 package's embedding + decoder on each chunk; from those logits,
   in float64 torch: KLD(f16 || Q4) per scored token (over the entries whose f16 log-probability
   is above -16, as llama.cpp), its mean, median, 99th percentile (linear interpolation at
   0.99 (n-1)), same top p, RMS delta-p (delta-p = q[tok] - p[tok]), and both perplexities.
5. OUT/reference.json holds all numbers, the versions, ctx and chunks.
6. OUT/calib.txt: the first paragraphs (about 4 KB) of the corpus's train.txt, the calibration
   text of the `quantize --keep-auto` test (never the held-out text).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_q4_fixture import run_logits  # noqa: E402


def chunks_of(ids, ctx, n, bos):
    out = []
    for c in range(n):
        x = list(ids[c * ctx:(c + 1) * ctx])
        x[0] = bos
        out.append(x)
    return out


def scored(ids, ctx, c):
    """(row indices in the chunk's logits, the correct next tokens) of chunk c."""
    first = ctx // 2
    rows = list(range(first, ctx - 1))
    toks = [ids[c * ctx + r + 1] for r in rows]
    return rows, toks


def ppl_stats(nll):
    nll = torch.tensor(nll, dtype=torch.float64)
    n = nll.numel()
    m = nll.mean()
    var = (nll * nll).mean() - m * m
    unc = math.sqrt(var / (n - 1)) if var > 0 and n > 10 else 0.0
    ppl = math.exp(m)
    return {"ppl": ppl, "ppl_stderr": ppl * unc, "scored_tokens": n}


def kld_stats(base_rows, test_rows, toks):
    p = torch.log_softmax(torch.tensor(np.stack(base_rows), dtype=torch.float64), -1)
    q = torch.log_softmax(torch.tensor(np.stack(test_rows), dtype=torch.float64), -1)
    t = torch.tensor(toks)
    kld = torch.where(p > -16, p.exp() * (p - q), torch.zeros_like(p)).sum(-1)
    same = (p.argmax(-1) == q.argmax(-1)).double()
    dp = q.gather(1, t[:, None])[:, 0].exp() - p.gather(1, t[:, None])[:, 0].exp()
    n = kld.numel()
    return {
        "rows": n,
        "kld_mean": float(kld.mean()),
        "kld_median": float(torch.quantile(kld, 0.5, interpolation="linear")),
        "kld_p99": float(torch.quantile(kld, 0.99, interpolation="linear")),
        "kld_max": float(kld.max()),
        "same_top": float(same.mean()),
        "rms_dp": float(torch.sqrt((dp * dp).mean())),
        "ppl_base": math.exp(float(-p.gather(1, t[:, None]).mean())),
        "ppl_test": math.exp(float(-q.gather(1, t[:, None]).mean())),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("train_out")
    ap.add_argument("g4cu")
    ap.add_argument("--out", default="tests/fixtures/fidelity-tiny")
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=24)
    ap.add_argument("--corpus", default=".carry/corpus")
    args = ap.parse_args()
    import onnxruntime
    import tokenizers
    import transformers
    from transformers import Gemma4ForConditionalGeneration

    ctx, n_chunks = args.ctx, args.chunks
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    shutil.copytree(os.path.join(args.train_out, "hf"), os.path.join(args.out, "hf"))
    shutil.copytree(os.path.join(args.train_out, "f16"), os.path.join(args.out, "package"))
    tok = tokenizers.Tokenizer.from_file(os.path.join(args.out, "package", "tokenizer.json"))
    bos = tok.token_to_id("<bos>")

    paras = open(os.path.join(args.train_out, "test.txt"), encoding="utf-8").read().split("\n\n")
    need = ctx * n_chunks + 1
    text = ""
    for k in range(1, len(paras) + 1):
        text = "\n\n".join(paras[:k]) + "\n"
        if len(tok.encode(text).ids) >= need:
            break
    with open(os.path.join(args.out, "test.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    calib = ""
    for p in open(os.path.join(args.corpus, "train.txt"), encoding="utf-8").read().split("\n\n"):
        if len(calib) >= 4000:
            break
        calib += p + "\n\n"
    with open(os.path.join(args.out, "calib.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(calib)
    ids = tok.encode(text).ids  # add_special_tokens: "<bos> $A"
    assert ids[0] == bos and len(ids) >= need, (len(ids), need)
    n_chunks = min(n_chunks, len(ids) // ctx)

    model = Gemma4ForConditionalGeneration.from_pretrained(os.path.join(args.out, "hf"),
                                                           dtype=torch.float32).eval()
    nll_hf = []
    with torch.no_grad():
        for c, x in enumerate(chunks_of(ids, ctx, n_chunks, bos)):
            logits = model(input_ids=torch.tensor([x])).logits[0].double()
            rows, toks = scored(ids, ctx, c)
            lp = torch.log_softmax(logits[rows], -1)
            nll_hf += (-lp[torch.arange(len(rows)), torch.tensor(toks)]).tolist()
    ref = {"ctx": ctx, "chunks": n_chunks, "tokens": len(ids),
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "onnxruntime": onnxruntime.__version__,
                        "tokenizers": tokenizers.__version__},
           "hf_f32": ppl_stats(nll_hf)}

    with tempfile.TemporaryDirectory() as tmp:
        q4 = os.path.join(tmp, "q4")
        f16 = os.path.join(args.out, "package")
        subprocess.run([args.g4cu, "quantize", f16, q4], check=True)
        base_rows, test_rows, toks_all, nll_f16 = [], [], [], []
        for c, x in enumerate(chunks_of(ids, ctx, n_chunks, bos)):
            a = run_logits(f16, os.path.join(f16, "decoder", "model.onnx"), x)
            b = run_logits(q4, os.path.join(q4, "decoder", "model.onnx"), x)
            rows, toks = scored(ids, ctx, c)
            base_rows += [a[r] for r in rows]
            test_rows += [b[r] for r in rows]
            toks_all += toks
        ref["ort_f16_vs_q4"] = kld_stats(base_rows, test_rows, toks_all)
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main()
