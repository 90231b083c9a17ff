#!/usr/bin/env python3
"""The seconds of a --v-warm-steps step (train_mm_proxy.vision_warm_step: the image half-batch
through the vision tower and embed_vision, VisionAux's CTC alone) against a joint step
(train_step: the same image half-batch and an audio half-batch through the towers and the
decoder, both backwards), on the same fixed batches, interleaved (warm, joint, warm, ...) so
that the machine's load falls on both alike (bench/NOTES.md "vpre: a vision-only warm phase").

    python3 tools/python/mm_warm_timing.py DATA [--preset tiny] [--batch 16] [--rounds 20]
                                                [--threads 1] [--device cpu]

DATA: make_mm_data.py's folder (the first half-batch of train images and clips, rendering 0).
Prints each kind's median and the ratio, one line."""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_mm_proxy as tmp  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--preset", choices=sorted(tmp.PRESETS), default="tiny")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--v-pos-init", type=float, default=0.02)
    args = ap.parse_args()
    if args.rounds < 2 or args.batch < 2:
        raise SystemExit("mm_warm_timing: --rounds and --batch: expected 2 or more")
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    p = dict(tmp.PRESETS[args.preset])
    audio, images = tmp.load_items(args.data)
    tr_a = [i for i in audio if i["split"] == "train"]
    tr_i = [i for i in images if i["split"] == "train"]
    with tempfile.TemporaryDirectory() as d:
        tok = tmp.make_tokenizer([i["text"] for i in tr_a + tr_i], p["vocab"],
                                 os.path.join(d, "tokenizer.json"))
    pr = tmp.Prompter(tok)
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    fe, fonts, half = Gemma4AudioFeatureExtractor(), tmp.mmd.font_roots(None), args.batch // 2
    torch.manual_seed(0)
    model = tmp.build_model(p, tok, 0, v_pos_init=args.v_pos_init).to(dev).train()
    vaux = tmp.VisionAux(model, "".join(i["text"] for i in tr_i), 0, tok,
                         pr.id["<turn|>"]).to(dev)
    batches = {}
    for kind, items in (("image", tr_i), ("audio", tr_a)):
        ds = tmp.Items(items, kind, args.data, fonts, pr, fe, 1)
        batches[kind] = {k: v.to(dev) for k, v in
                         tmp.collate([ds.render(k) for k in range(half)]).items()}
    opt = tmp.make_optimizer(model, p, None, dev, "auto", vaux)
    for g in opt.param_groups:
        g["lr"] = p["lr"] * g["mult"]
    wopt = tmp.warm_optimizer(model, p, vaux, tmp.opt_impl(opt))
    for g in wopt.param_groups:
        g["lr"] = p["lr"] * g["mult"]
    wlive = [x for g in wopt.param_groups for x in g["params"]]
    live = tmp.trained_params(opt)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    guard, losses = tmp.StepGuard(args.rounds + 1), {k: [] for k in (
        "image", "audio", "ctc", "a_var", "a_cov", "v_aux", "v_warm")}
    warm_s, joint_s = [], []
    for r in range(args.rounds + 1):  # round 0: warm-up of both, not counted
        sync()
        t = time.time()
        tmp.vision_warm_step(model, vaux, wopt, dict(batches["image"]), r, guard, losses,
                             dev.type == "cuda", wlive)
        sync()
        t2 = time.time()
        tmp.train_step(model, opt, batches, r, guard, losses, amp=dev.type == "cuda",
                       live=live, vaux=vaux, vaux_w=0.5)
        sync()
        if r:
            warm_s.append(t2 - t)
            joint_s.append(time.time() - t2)
    w, j = statistics.median(warm_s), statistics.median(joint_s)
    print(f"mm_warm_timing: {args.preset}, {half} images (+ {half} clips in the joint step), "
          f"{args.rounds} rounds on {dev} ({args.threads} threads): warm step median {w:.3f} s "
          f"(min {min(warm_s):.3f}), joint step median {j:.3f} s (min {min(joint_s):.3f}): "
          f"warm / joint {w / j:.3f}")


if __name__ == "__main__":
    main()
