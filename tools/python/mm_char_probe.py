#!/usr/bin/env python3
"""Can the proxy's image path learn single characters when given a DIRECT signal? (issue 35)

    python3 tools/python/mm_char_probe.py DATA OUT [--tower tiny|proxy] [--head mean|ctc|pixels]
                                          [--steps N] [--batch B] [--lr LR] [--frozen]
                                          [--v-pos-init S] [--v-proj-init STD] [--n-eval K]
                                          [--every N] [--minutes M] [--seed 0] [--threads 1]

The trainer's --v-chars phase (char_items: one character of each train string, the answer one
token only the pixels tell) did not beat guessing by the characters' frequencies, on the CPU at
the tiny preset nor on the H100 at the proxy's (bench/NOTES.md "Why the proxy does not read its
media"). Here the decoder is taken out: pixels -> the trainer's vision tower (build_model, the
preset's shapes and init options) -> embed_vision's soft tokens -> a read-out trained jointly
with the tower (--frozen: the tower kept at its init) on char_items of the first train strings:
  mean    a linear classifier on the image's mean soft token (the characters present in the
          train items are the classes)
  ctc     train_mm_proxy.VisionAux: CTC from the soft-token columns (the --v-aux-weight head)
  pixels  no tower: the grey image average-pooled to 24 x 24 (whatever the canvas), a 2-layer
          MLP (512 hidden): whether the task is learnable from these images at this budget
Measured every --every steps on --n-eval char items of the LAST train strings (strings the run
never trains on, their planned rendering): cross-entropy a character (ctc: the greedy read's
exact share and the CTC loss a label) and accuracy, against the frequency baseline (the train
characters' entropy; the eval items' loss when guessing by frequency). AdamW (beta2 0.95,
weight decay 0.05 on matrices), warm-up 20 steps then constant, gradient clip 1.0, fp32, one
CPU thread by default. Writes OUT/probe.json (rows, settings)."""
import argparse
import collections
import json
import math
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_mm_data as mmd  # noqa: E402
import train_mm_proxy as T  # noqa: E402


class CharSet(torch.utils.data.Dataset):
    """char items rendered when asked (train_mm_proxy.rendering, as its Items):
    pixel values, position ids, the grey 24 x 24 thumbnail, the character."""

    def __init__(self, items, fonts, reps):
        self.items, self.fonts, self.reps = items, fonts, reps

    def __len__(self):
        return len(self.items) * self.reps

    def __getitem__(self, k):
        it = T.rendering(self.items, k)
        img = mmd.render_image(it, self.fonts)
        pv, pp, _ = T.image_inputs(img)
        g = torch.from_numpy(np.asarray(img.convert("L"), np.float32) / 255.0)[None, None]
        thumb = torch.nn.functional.adaptive_avg_pool2d(g, 24).reshape(-1)
        return torch.from_numpy(pv), torch.from_numpy(pp), thumb, it["text"]


def collate(b):
    return (torch.stack([x[0] for x in b]), torch.stack([x[1] for x in b]),
            torch.stack([x[2] for x in b]), [x[3] for x in b])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--tower", choices=("tiny", "proxy"), default="tiny")
    ap.add_argument("--head", choices=("mean", "ctc", "pixels"), default="mean")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--frozen", action="store_true", help="the tower kept at its init")
    ap.add_argument("--v-pos-init", type=float)
    ap.add_argument("--v-proj-init", type=float)
    ap.add_argument("--n-train", type=int, default=8000, help="train strings (first N)")
    ap.add_argument("--n-eval", type=int, default=400, help="eval strings (last N)")
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    if args.steps < 1 or args.batch < 2 or args.every < 1 or args.n_eval < 2:
        raise SystemExit("mm_char_probe: --steps >= 1, --batch >= 2, --every >= 1, "
                         "--n-eval >= 2")
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    _, images = T.load_items(args.data)
    tr = T.train_split(images)
    if args.n_train + args.n_eval > len(tr):
        raise SystemExit(f"mm_char_probe: {args.n_train} + {args.n_eval} strings asked, "
                         f"{len(tr)} in {args.data}")
    fonts = mmd.font_roots(None)
    train = T.char_items(tr[:args.n_train])
    evals = T.char_items(tr[len(tr) - args.n_eval:])
    freq = collections.Counter(i["text"] for i in train)
    classes = sorted(freq)
    cls = {c: k for k, c in enumerate(classes)}
    total = sum(freq.values())
    entropy = -sum(v / total * math.log(v / total) for v in freq.values())
    # the frequency guess's loss on the eval items (an unseen class gets one count)
    freq_eval = float(np.mean([-math.log(freq.get(i["text"], 1) / total) for i in evals]))
    majority = max(freq, key=freq.get)
    maj_acc = float(np.mean([i["text"] == majority for i in evals]))
    print(f"mm_char_probe: {len(train)} train / {len(evals)} eval characters, {len(classes)} "
          f"classes; frequency guess: train entropy {entropy:.3f}, eval loss {freq_eval:.3f}, "
          f"majority '{majority}' acc {maj_acc:.3f}", flush=True)

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    p = dict(T.PRESETS[args.tower])
    tok = T.make_tokenizer([i["text"] for i in tr], p["vocab"],
                           os.path.join(args.out, "tokenizer.json"))
    model = T.build_model(p, tok, args.seed, None, args.v_pos_init, None, args.v_proj_init)
    m = model.model
    tower = torch.nn.ModuleList([m.vision_tower, m.embed_vision])
    H = m.embed_vision.text_hidden_size
    if args.head == "mean":
        head = torch.nn.Linear(H, len(classes))
    elif args.head == "ctc":
        head = T.VisionAux(model, "".join(classes), args.seed)
    else:
        head = torch.nn.Sequential(torch.nn.Linear(576, 512), torch.nn.GELU(),
                                   torch.nn.Linear(512, len(classes)))
    params = list(head.parameters())
    if args.head != "pixels" and not args.frozen:
        params += list(tower.parameters())
    else:
        tower.requires_grad_(False)
    opt = torch.optim.AdamW([{"params": [x for x in params if x.dim() >= 2], "weight_decay": 0.05},
                             {"params": [x for x in params if x.dim() < 2], "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))

    def forward(pv, pp, thumb, texts):
        """(loss, number right) of a batch; the ctc head: (loss, its greedy reads)."""
        y = torch.tensor([cls.get(t, -100) for t in texts])
        if args.head == "pixels":
            z = head(thumb)
        else:
            soft = m.get_image_features(pv, pp).pooler_output  # a tuple, one n_i x H per image
            if args.head == "ctc":
                cols, w = head.columns(pp)  # (the hook's embed_vision output, taken)
                return head.loss_of(cols, w, texts), head.greedy_of(cols, w)
            z = head(torch.stack([s.mean(0) for s in soft]))
        loss = torch.nn.functional.cross_entropy(z, y, ignore_index=-100)
        return loss, int((z.argmax(-1) == y).sum())

    g = torch.Generator().manual_seed(args.seed)
    dl = torch.utils.data.DataLoader(CharSet(train, fonts, 8), batch_size=args.batch, shuffle=True,
                                     generator=g, drop_last=True, collate_fn=collate,
                                     num_workers=args.workers,
                                     persistent_workers=args.workers > 0,
                                     worker_init_fn=T.worker_init if args.workers else None)
    ev = list(torch.utils.data.DataLoader(CharSet(evals, fonts, 1), batch_size=32,
                                          collate_fn=collate))

    def measure():
        model.eval()
        head.eval()
        s, right, n, exact = 0.0, 0, 0, 0
        with torch.no_grad():
            for pv, pp, th, texts in ev:
                loss, r = forward(pv, pp, th, texts)
                if args.head == "ctc":
                    exact += sum(a == b for a, b in zip(r, texts))
                else:
                    right += r
                s += float(loss) * len(texts)
                n += len(texts)
        model.train()
        head.train()
        return {"loss": s / n, "acc": (exact if args.head == "ctc" else right) / n}

    rows, run, t0, step = [], [], time.time(), 0
    it = iter(dl)
    while step < args.steps:
        try:
            pv, pp, th, texts = next(it)
        except StopIteration:
            it = iter(dl)
            continue
        for gr in opt.param_groups:
            gr["lr"] = args.lr * min(1.0, (step + 1) / 20)
        opt.zero_grad(set_to_none=True)
        loss, _ = forward(pv, pp, th, texts)
        loss.backward()
        gn = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
        opt.step()
        run.append(loss.item())
        step += 1
        if step % args.every == 0 or step == args.steps or time.time() - t0 > args.minutes * 60:
            r = measure()
            rows.append(dict(step=step, images=step * args.batch,
                             train_loss=float(np.mean(run[-args.every:])), grad_norm=gn,
                             eval_loss=r["loss"], eval_acc=r["acc"],
                             seconds=round(time.time() - t0, 1)))
            print(f"mm_char_probe: step {step} images {step * args.batch} train loss "
                  f"{rows[-1]['train_loss']:.3f} eval loss {r['loss']:.3f} acc {r['acc']:.3f} "
                  f"(frequency {freq_eval:.3f} / {maj_acc:.3f}) {time.time() - t0:.0f} s",
                  flush=True)
            if time.time() - t0 > args.minutes * 60:
                print(f"mm_char_probe: --minutes {args.minutes} reached at step {step}",
                      flush=True)
                break
    json.dump({"args": vars(args), "classes": len(classes), "train_entropy": entropy,
               "freq_eval_loss": freq_eval, "majority_acc": maj_acc, "rows": rows},
              open(os.path.join(args.out, "probe.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
