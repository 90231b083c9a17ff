#!/usr/bin/env python3
"""The seconds of a --v-warm-steps step (train_mm_proxy.vision_warm_step: the image half-batch
through the vision tower and embed_vision, VisionAux's CTC alone) against a joint step
(train_step: the same image half-batch and an audio half-batch through the towers and the
decoder, both backwards), on the same fixed batches, interleaved (warm, joint, warm, ...) so
that the machine's load falls on both alike (bench/NOTES.md "vpre: a vision-only warm phase").
--a-warm: a third step in each round, the warm step with --a-warm's audio half (the same image
half-batch and the joint step's clips through the audio tower and embed_audio, AudioChars' CTC
added; its own warm optimizer over both sides and both heads), and the joint step then carries
that head's loss too (--ctc-weight 0.5 --ctc-units chars, as the runs it stands for); the order
in a round: warm, warm + audio, joint (bench/NOTES.md "awarm: the warm phase for the audio side").
--count-ops: then one more step of each kind under torch.profiler, its launch-like ops counted
as train_mm_proxy.step_ops counts them (the GPU step is launch-bound: bench/NOTES.md "The
multimodal proxy's step is CPU-bound"), one line.

    python3 tools/python/mm_warm_timing.py DATA [--preset tiny] [--batch 16] [--rounds 20]
                                                [--threads 1] [--device cpu] [--a-warm]
                                                [--count-ops]

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
    ap.add_argument("--count-ops", action="store_true",
                    help="count each step kind's launch-like ops (one profiled step each)")
    ap.add_argument("--a-warm", action="store_true",
                    help="also time the warm step with the audio side (vision_warm_step's head)")
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
    head = tmp.AudioChars(model, "embed", 0, tok, pr.id["<turn|>"]).to(dev) if args.a_warm \
        else None
    opt = tmp.make_optimizer(model, p, head, dev, "auto", vaux)
    for g in opt.param_groups:
        g["lr"] = p["lr"] * g["mult"]
    wopts = {}  # (a warm optimizer each, as each run has its own)
    for kind, h in (("warm", None), ("a_warm", head)):
        if kind == "warm" or head is not None:
            o = tmp.warm_optimizer(model, p, vaux, tmp.opt_impl(opt), h)
            for g in o.param_groups:
                g["lr"] = p["lr"] * g["mult"]
            wopts[kind] = (o, [x for g in o.param_groups for x in g["params"]], h)
    live = tmp.trained_params(opt)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    guard, losses = tmp.StepGuard(3 * args.rounds + 3), {k: [] for k in (
        "image", "audio", "ctc", "a_var", "a_cov", "v_aux", "v_warm", "a_warm")}
    amp = dev.type == "cuda"
    secs = {k: [] for k in list(wopts) + ["joint"]}
    def run(kind, r):
        if kind == "joint":
            tmp.train_step(model, opt, batches, r, guard, losses, head, 0.5 if head else 0.0,
                           amp, live=live, vaux=vaux, vaux_w=0.5)
        else:
            o, wlive, h = wopts[kind]
            tmp.vision_warm_step(model, vaux, o, dict(batches["image"]), r, guard, losses, amp,
                                 wlive, h, dict(batches["audio"]))

    for r in range(args.rounds + 1):  # round 0: warm-up of each, not counted
        t = {}
        for kind in secs:
            sync()
            t0 = time.time()
            run(kind, r)
            sync()
            t[kind] = time.time() - t0
        if r:
            for k, v in t.items():
                secs[k].append(v)
    med = {k: statistics.median(v) for k, v in secs.items()}
    w, j = med["warm"], med["joint"]
    print(f"mm_warm_timing: {args.preset}, {half} images (+ {half} clips in the joint step"
          + (" and the audio warm step, AudioChars' CTC in both" if head else "") + "), "
          f"{args.rounds} rounds on {dev} ({args.threads} threads): warm step median {w:.3f} s "
          f"(min {min(secs['warm']):.3f}), "
          + (f"warm + audio step median {med['a_warm']:.3f} s (min {min(secs['a_warm']):.3f}), "
             if head else "")
          + f"joint step median {j:.3f} s (min {min(secs['joint']):.3f}): warm / joint "
          f"{w / j:.3f}"
          + (f", warm + audio / joint {med['a_warm'] / j:.3f}, warm + audio / warm "
             f"{med['a_warm'] / w:.3f}" if head else ""))
    if args.count_ops:
        ops = {}
        for kind in secs:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as pr_:
                run(kind, args.rounds + 1)
            ops[kind] = tmp.step_ops(pr_.events())
        print("mm_warm_timing: launch-like ops a step (step_ops): " + "; ".join(
            f"{k} {v['total']} ({', '.join(f'{a} {b}' for a, b in sorted(v['phase'].items()))})"
            for k, v in ops.items()))


if __name__ == "__main__":
    main()
