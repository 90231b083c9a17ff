#!/usr/bin/env python3
"""What a train_mm_proxy audio read-out loss costs a step (issue 35, bench/NOTES.md "ctctied"):
one forward + backward of AudioChars' loss and of TiedCtcHead's (--ctc-tied) on stub frames
(mm_items.audio_stub: the frames given, embed_audio x 2) at the proxy's shapes, a decoder table
of --vocab rows x --dim at Gemma-4's embed scale: the launch-like ops a pass (train_mm_proxy.
step_ops, the CPU's stand-in for a GPU step's launches; the tied head's column picking is built
on host tensors, so most of its ops are host work on a GPU, not launches) and the CPU seconds
(min of --reps, one thread).

    python3 tools/python/mm_tied_cost.py [--clips 32] [--frames 128] [--dim 768] [--vocab 4096]
                                         [--ids 15] [--reps 3]
"""
import argparse
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import audio_stub  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=32)
    ap.add_argument("--frames", type=int, default=128)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--ids", type=int, default=15, help="answer ids a clip")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if min(a.clips, a.frames, a.dim, a.vocab, a.ids, a.reps) < 1 or a.ids > a.frames:
        raise SystemExit("mm_tied_cost: every count >= 1 and --ids <= --frames")
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextScaledWordEmbedding

    torch.set_num_threads(1)
    B, T, D, V = a.clips, a.frames, a.dim, a.vocab
    m = audio_stub(D)
    m.model.language_model = torch.nn.Module()
    torch.manual_seed(0)
    m.model.language_model.embed_tokens = Gemma4TextScaledWordEmbedding(V, D, 0, D ** 0.5)
    heads = {"chars": tmp.AudioChars(m, "embed", 0), "tied": tmp.TiedCtcHead(m, V, 0)}
    g = torch.Generator().manual_seed(1)
    lab = torch.full((B, a.ids + 8), -100)
    for b in range(B):  # the ids, then one more: the closing id the heads drop
        lab[b, 4:5 + a.ids] = torch.randint(3, V, (a.ids + 1,), generator=g)
    texts = ["the quick brown fox jumps over the lazy dog and the cat sat down"] * B

    def run(which):
        x = torch.randn(B, T, D, requires_grad=True)
        m.model.embed_audio(m.model.audio_tower(x, torch.ones(B, T, dtype=torch.bool))
                            .last_hidden_state)
        for k, h in heads.items():  # (each head's tap holds the frames: the other drops them)
            if k != which:
                h.tap.take()
        h = heads[which]
        loss = h.loss(lab) if which == "tied" else h.loss_of(texts)
        loss.backward()
        return float(loss.detach())

    for which in heads:
        run(which)
        ts = []
        for _ in range(a.reps):
            t = time.time()
            v = run(which)
            ts.append(time.time() - t)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            run(which)
        ops = tmp.step_ops(prof.events())
        print(f"mm_tied_cost: {which}: loss {v:.2f} a label, {ops['total']} launch-like ops "
              f"({dict(ops['phase'])}), CPU {min(ts):.3f} s (min of {a.reps}, one thread)")


if __name__ == "__main__":
    main()
