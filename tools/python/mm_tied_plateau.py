#!/usr/bin/env python3
"""Does --ctc-tied's head (train_mm_proxy.TiedCtcHead) leave CTC's all-blank plateau over a
vocabulary of thousands? A CPU probe on synthetic frames (issue 35; bench/NOTES.md "The tied
head's plateau"): no speech, no decoder, so that only the head's logits are under test.

  mm_tied_plateau.py [--vocab 4096] [--dim 768] [--steps 400] [--lr 1.5e-4] [--batch 16]
                     [--seed 0] RUN [RUN ...]        RUN: MEAN_COS:CENTER:SCALE, e.g. 0.3:1:30

The token table: vocab rows of dim, each sqrt(c) u + sqrt(1 - c) r_v (u one shared unit
direction, r_v random unit rows) x 0.02 sqrt(dim), so two rows' cosine is ~c (a trained
table's rows share a direction: table_mean_cos in train.json's held-out rows says how much).
An idealised tower: each clip is 4-11 token ids (uniform over the first 1,000), each held for 1-3
frames with 0-2 blank frames before it and 2 after; a frame's input is a fixed random 128-vector
of its id (or of the blank) plus N(0, 0.5) noise, mapped by a trainable Linear-GELU-Linear to
dim. The head is TiedCtcHead itself (scale SCALE at init, learned; CENTER 1: --ctc-tied-center)
on that table with embed_scale sqrt(dim); AdamW (betas 0.9, 0.98) at --lr over the tower and
the head, one batch of --batch fresh clips a step. Every 50 steps (and at the end) one fresh
batch is read with TiedCtcHead.items: its CTC a label, the share of frames whose argmax is a
token, their cosine to it, clips read exactly, the scale. One thread; ~75 s a run of 400 steps
at the defaults on this project's 2-core machine.
"""
import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_mm_proxy as tmp  # noqa: E402


class Table:
    """What TiedCtcHead reads of the decoder's embedding: weight and embed_scale."""

    def __init__(self, weight):
        self.weight = weight
        self.embed_scale = torch.tensor(math.sqrt(weight.shape[1]))


class Stub:
    """model.model.language_model.embed_tokens, for TiedCtcHead's constructor (and the audio
    modules its tap hooks, never run here: the frames go to loss_of / items directly)."""

    def __init__(self, weight):
        self.model = torch.nn.Module()
        self.model.audio_tower, self.model.embed_audio = torch.nn.Identity(), torch.nn.Identity()
        self.model.language_model = torch.nn.Module()
        self.model.language_model.__dict__["embed_tokens"] = Table(weight)


def table(vocab, dim, c, g):
    u = torch.nn.functional.normalize(torch.randn(dim, generator=g), dim=0)
    r = torch.nn.functional.normalize(torch.randn(vocab, dim, generator=g), dim=-1)
    return (math.sqrt(c) * u + math.sqrt(1 - c) * r) * 0.02 * math.sqrt(dim)


def batch(g, vocab, n, feats):
    """n clips: frames' inputs (n x T x 128), valid (n x T), labels (collate's: ids, then a
    closing id that CtcHead.fit drops, -100 after)."""
    clips = []
    for _ in range(n):
        ids = torch.randint(0, min(vocab, 1000), (int(torch.randint(4, 12, (1,), generator=g)),),
                            generator=g).tolist()
        frames = []
        for t in ids:
            frames += [vocab] * int(torch.randint(0, 3, (1,), generator=g))
            frames += [t] * int(torch.randint(1, 4, (1,), generator=g))
        clips.append((ids, frames + [vocab] * 2))
    T, S = max(len(f) for _, f in clips), max(len(i) for i, _ in clips) + 1
    x = torch.zeros(n, T, feats.shape[1])
    valid = torch.zeros(n, T, dtype=torch.bool)
    lab = torch.full((n, S), -100, dtype=torch.long)
    for b, (ids, frames) in enumerate(clips):
        x[b, :len(frames)] = feats[frames] + 0.5 * torch.randn(len(frames), feats.shape[1],
                                                                generator=g)
        valid[b, :len(frames)] = True
        lab[b, :len(ids) + 1] = torch.tensor(ids + [1])
    return x, valid, lab


def run(a, c, center, scale):
    torch.manual_seed(a.seed)
    g = torch.Generator().manual_seed(a.seed)
    w = table(a.vocab, a.dim, c, g)
    feats = torch.randn(a.vocab + 1, 128, generator=g)
    tower = torch.nn.Sequential(torch.nn.Linear(128, a.dim), torch.nn.GELU(),
                                torch.nn.Linear(a.dim, a.dim))
    head = tmp.TiedCtcHead(Stub(w), a.vocab, a.seed, "audio", scale, center)
    opt = torch.optim.AdamW(list(tower.parameters()) + list(head.parameters()), lr=a.lr,
                            betas=(0.9, 0.98))
    data = torch.Generator().manual_seed(a.seed + 1)
    print(f"mm_tied_plateau: table rows' mean cosine {tmp.table_mean_cos(w):.3f} (asked {c}), "
          f"center {int(center)}, scale {scale:g}, vocab {a.vocab}, dim {a.dim}, lr {a.lr:g}",
          flush=True)
    t0 = time.time()
    for s in range(a.steps + 1):
        x, valid, lab = batch(data, a.vocab, a.batch, feats)
        frames = tower(x)
        if s % 50 == 0 or s == a.steps:
            with torch.no_grad():
                per, reads, refs, _, share, cos = head.items(frames, valid, lab)
            exact = sum(r == t for r, t in zip(reads, refs))
            print(f"  step {s}: tied ctc {sum(per) / len(per):.3f} a label, token frames "
                  f"{share:.3f}, their cosine " + ("-" if cos is None else f"{cos:.3f}")
                  + f", exact {exact}/{len(refs)}, scale "
                  f"{float(head.log_scale.detach().exp()):.2f}",
                  flush=True)
        if s == a.steps:
            break
        loss = head.loss_of(frames, valid, lab)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print(f"  ({time.time() - t0:.0f} s)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="MEAN_COS:CENTER:SCALE")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lr", type=float, default=1.5e-4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for r in a.runs:
        try:
            c, center, scale = r.split(":")
            c, center, scale = float(c), int(center), float(scale)
        except ValueError:
            sys.exit(f"mm_tied_plateau: run {r!r}: expected MEAN_COS:CENTER:SCALE, e.g. 0.3:1:30")
        if not (0 <= c < 1 and center in (0, 1) and 0 < scale < math.inf):
            sys.exit(f"mm_tied_plateau: run {r!r}: MEAN_COS in [0, 1), CENTER 0 or 1, SCALE > 0")
        run(a, c, bool(center), scale)


if __name__ == "__main__":
    main()
