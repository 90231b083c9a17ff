#!/usr/bin/env python3
"""Writes tests/fixtures/chat/sample_cases.jsonl: what the sample op (kernels/ops.h `sample`)
must pick, computed without the engine, for tests/test_generate.c:

  splitmix  SplitMix64 outputs n = 0 .. 7 of a few seeds (Steele, Lea and Flood's published
            algorithm: state_n = seed + (n + 1) * 0x9e3779b97f4a7c15, then the mix), the
            counter-based draw of the engine's sampler.
  warp      seeded float32 logits (some with ties planted at the top-k threshold) and a sampler
            (temperature, top_k, top_p); `kept`: the ids HF transformers' own warpers leave
            finite (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, in the order
            generate() applies them, on float32 scores); `picks`: the id drawn for draw index
            n = 0 .. 7 of `seed` under the engine's documented arithmetic (kernels/ref/sample_math.h:
            tokens ordered by logit desc then id asc, integer weights floor(exp((x - max) / T) *
            2^40) with Python's math.exp, the top-p cut at mass point ceil(top_p * Z) - 1, the draw
            at floor(u * Z_kept), u = the draw's top 53 bits / 2^53), in exact Python integers.
            Cases whose top-p boundary lies within 1e-4 of a token's cumulative probability are
            skipped (float32 HF and the exact integers would then be allowed to differ).

Run from the repository root (a few seconds on a CPU):
  /work/pyenv/bin/python tools/python/make_sample_fixture.py [--out tests/fixtures/chat]
"""

import argparse
import json
import math
import os

import numpy as np
import torch
from transformers.generation.logits_process import (TemperatureLogitsWarper,
                                                    TopKLogitsWarper, TopPLogitsWarper)

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures")
M64 = (1 << 64) - 1
SEED = 20261201


def splitmix(seed, n):
    z = (seed + (n + 1) * 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def hf_kept(logits, temperature, top_k, top_p):
    scores = torch.tensor(logits, dtype=torch.float32)[None, :]
    ids = torch.zeros((1, 1), dtype=torch.long)
    scores = TemperatureLogitsWarper(temperature)(ids, scores)
    if top_k > 0:
        scores = TopKLogitsWarper(top_k)(ids, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(ids, scores)
    return sorted(int(i) for i in torch.nonzero(torch.isfinite(scores[0])).flatten())


def engine_pick(logits, temperature, top_k, top_p, seed, n):
    V = len(logits)
    order = sorted(range(V), key=lambda i: (-logits[i], i))
    m = V
    if 0 < top_k < V:
        kth = logits[order[top_k - 1]]
        m = top_k
        while m < V and logits[order[m]] == kth:
            m += 1
    mx = logits[order[0]]
    inv_t = 1.0 / float(np.float32(temperature))
    w = []
    for j in range(m):
        s = (logits[order[j]] - mx) * inv_t
        w.append(int(math.floor(math.exp(s) * 2.0**40)) if s * (1 / math.log(2)) > -41 else 0)
    z = sum(w)
    if top_p < 1.0:
        t = math.ceil(float(np.float32(top_p)) * float(z)) - 1
        a = 0
        for j in range(m):
            a += w[j]
            if a > t:
                m, z = j + 1, a
                break
    u = splitmix(seed, n) & ~0x7FF
    r = (u * z) >> 64
    a = 0
    for j in range(m):
        a += w[j]
        if r < a:
            return order[j]
    return order[m - 1]


def boundary_margin(logits, temperature, top_k, top_p):
    """The smallest |cumulative probability - top_p| over the kept tokens' boundaries (inf when
    top-p is off), in float64."""
    if top_p >= 1.0:
        return math.inf
    V = len(logits)
    order = sorted(range(V), key=lambda i: (-logits[i], i))
    m = V
    if 0 < top_k < V:
        kth = logits[order[top_k - 1]]
        m = sum(1 for x in logits if x >= kth)
    mx = logits[order[0]]
    p = [math.exp((logits[order[j]] - mx) / temperature) for j in range(m)]
    zs = sum(p)
    acc, best = 0.0, math.inf
    for j in range(m):
        acc += p[j]
        best = min(best, abs(acc / zs - top_p))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(FIX, "chat"))
    args = ap.parse_args()
    rng = np.random.default_rng(SEED)
    lines = [{"kind": "meta", "seed": SEED, "torch": torch.__version__}]
    for seed in (0, 1, 0xDEADBEEF, 0x123456789ABCDEF0):
        lines.append({"kind": "splitmix", "seed": str(seed),
                      "u64": [str(splitmix(seed, n)) for n in range(8)]})
    samplers = [(1.0, 0, 1.0), (0.7, 0, 0.9), (1.0, 50, 1.0), (1.5, 5, 0.8), (1.0, 64, 0.95),
                (0.5, 1, 1.0), (1.0, 0, 0.5), (2.0, 20, 0.7)]
    n_cases = 0
    for V in (1000, 37):
        for ci, (temp, top_k, top_p) in enumerate(samplers):
            for attempt in range(20):
                x = (rng.standard_normal(V) * (3.0 if attempt % 2 == 0 else 1.0)).astype(np.float32)
                ties = 1 < top_k < V - 2 and ci % 2 == 0
                if ties:  # the k-th largest value repeated below it: HF keeps them all
                    o = np.argsort(-x, kind="stable")
                    x[o[top_k]] = x[o[top_k - 1]]
                    x[o[top_k + 1]] = x[o[top_k - 1]]
                logits = [float(v) for v in x]
                if boundary_margin(logits, temp, top_k, top_p) < 1e-4:
                    continue
                seed = int(rng.integers(0, 2**63))
                picks = [engine_pick(logits, temp, top_k, top_p, seed, n) for n in range(8)]
                kept = hf_kept(logits, temp, top_k, top_p)
                assert all(p in kept for p in picks)
                lines.append({"kind": "warp", "V": V, "temperature": temp, "top_k": top_k,
                              "top_p": top_p, "ties": ties, "seed": str(seed), "logits": logits,
                              "kept": kept, "picks": picks})
                n_cases += 1
                break
    with open(os.path.join(args.out, "sample_cases.jsonl"), "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    print(f"{n_cases} warp cases")


if __name__ == "__main__":
    main()
