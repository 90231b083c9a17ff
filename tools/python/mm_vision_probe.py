#!/usr/bin/env python3
"""How fast does the mm proxy learn to READ strings it never saw? (issue 35; bench/NOTES.md
"How fast the proxy learns to read"). The image-side twin of tools/python/mm_audio_probe.py:
OCR only, on a CPU, a model between train_mm_proxy's `ci` and `proxy` presets trains on the
real plan's train strings (.carry/mmdata: make_mm_data.py's `plan` is enough, no media step),
rendered by the trainer's own loader (train_mm_proxy.Items: make_mm_data.render_image, each
string in --reps renderings), then every --every steps is measured on the plan's held-out
images (all of them: 200 in the proxy plan; their planned rendering, the pixels of
media/test/*.png) and on --n-train-eval train strings (their planned rendering):

    python3 tools/python/mm_vision_probe.py DATA OUT [--steps N] [--minutes M] [--threads 1]
        [--lr 1e-3] [--warmup 30] [--beta2 0.95] [--batch 16] [--v-lr-mult X]
        [--v-hidden 128] [--v-layers 2] [--v-heads 2] [--vocab 4096]
        [--v-pos-init S] [--v-res-scale X]
        [--curriculum N] [--every 100] [--fonts ROOT ...]

  loss         teacher-forced target loss (per target token) with the images
  loss_zero    the same with embed_vision's output zeroed (the decoder as a text-only model)
  loss_shuf    the same with each image given its batch neighbour's soft tokens (measuring
               batches hold images of one soft-token count, so the roll moves whole images;
               an image alone in its count is left out of every measure: "left_out")
  tf_exact     share of items whose every target token (the closing <turn|> included) is the
               teacher-forced argmax: equals greedy exact match (ties aside)
  exact        greedy decoding (HF generate, batched, left-padded) equal to the string
  ocrbench     g4cu eval's OCRBench score: the lower-cased, stripped string inside the answer
  cer          character edits / reference characters of the greedy answers (mm_probe.cer)
If loss == loss_zero == loss_shuf the image is not read; exact and tf_exact disagreeing by more
than a tie or two would mean the batched decoding is wrong (it is reported, not hidden).
The decoder, optimizer and schedule are the trainer's (model_config, make_optimizer, lr_at,
half_loss, clip_trained, StepGuard): AdamW beta2 --beta2, warm-up then cosine over --steps;
the audio side is built (the config needs it) and never trained nor fed. --minutes stops the
run early (measured once more at the stop). --curriculum N: the first N steps draw only the
one-word train strings (no space), then the whole plan. OUT/probe.json: the args, the
parameter counts and every measurement; OUT/tokenizer.json.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mm_probe  # noqa: E402
import train_mm_proxy as tmp  # noqa: E402


# the probe's vision tower by default (mm_vision_readout's --tower probe builds the same)
TOWER = dict(v_hidden=128, v_layers=2, v_heads=2)


def probe_shape(v_hidden, v_layers, v_heads):
    """The probe model's shapes: mm_probe's small decoder, a vision tower of the given size and
    a one-layer audio tower the probe never trains (train_mm_proxy.model_config's keys)."""
    return dict(text=mm_probe.TEXT, v_hidden=v_hidden, v_layers=v_layers, v_heads=v_heads,
                v_mlp=4 * v_hidden, a_hidden=64, a_layers=1, a_heads=8)


def left_batch(items):
    """Prompts only, left-padded (for generate): input_ids, attention_mask, pixel_values,
    image_position_ids."""
    T = max(len(it["ids"]) for it in items)
    ids = torch.zeros(len(items), T, dtype=torch.long)
    att = torch.zeros(len(items), T, dtype=torch.long)
    for r, it in enumerate(items):
        ids[r, T - len(it["ids"]):] = torch.tensor(it["ids"])
        att[r, T - len(it["ids"]):] = 1
    return dict(input_ids=ids, attention_mask=att,
                pixel_values=torch.from_numpy(np.stack([it["pv"] for it in items])),
                image_position_ids=torch.from_numpy(np.stack([it["pp"] for it in items])))


class VisionMemo:
    """Inside measure(): the vision tower's output for a batch computed once and reused by the
    zeroed and rolled passes and generate's prefill (the tower is the costly part on a CPU; its
    output does not depend on the mode). key: the batch being measured (set before each call);
    the hook on embed_vision still runs on every pass."""

    def __init__(self, tower):
        self.tower, self.orig, self.key, self.memo = tower, tower.forward, None, {}
        tower.forward = self

    def __call__(self, *a, **k):
        if self.key not in self.memo:
            self.memo[self.key] = self.orig(*a, **k)
        return self.memo[self.key]

    def close(self):
        self.tower.forward = self.orig


def measure(model, hook, tok, pr, items, size):
    """The losses, the teacher-forced exact share and the greedy exact share, OCRBench score and
    CER on these items (dicts of Items.render plus "text" and "n"), in batches of <= size;
    "items" counts those measured, "left_out" the images alone in their soft-token count."""
    # batches of one soft-token count (the roll moves whole images), never an image alone (its
    # rolled pass would be its own): a count held by one image is left out (train_mm_proxy's
    # roll_chunks, shared with the trainer's HeldOut)
    chunks, lone = tmp.roll_chunks([it["n"] for it in items], size)
    model.eval()
    memo = VisionMemo(model.model.vision_tower)
    sums = {m: [0.0, 0] for m in ("loss", "loss_zero", "loss_shuf")}
    tf_ok, refs, hyps, ok, ocr = 0, [], [], 0, 0
    eos = [1, pr.id["<turn|>"]]
    try:
        with torch.no_grad():
            for bi, (n, ks) in enumerate(chunks):
                memo.key = bi
                b = tmp.collate([items[k] for k in ks])
                lab = b.pop("labels")
                hook.shift = n
                for mode, name in ((None, "loss"), ("zero", "loss_zero"), ("shuf", "loss_shuf")):
                    hook.mode = mode
                    logits = model(**b).logits.float()
                    loss = torch.nn.functional.cross_entropy(
                        logits.reshape(-1, logits.shape[-1]), lab.reshape(-1), ignore_index=-100,
                        reduction="sum")
                    sums[name][0] += loss.item()
                    sums[name][1] += int((lab != -100).sum())
                    if mode is None:
                        hit = (logits.argmax(-1) == lab) | (lab == -100)
                        tf_ok += int(hit.all(-1).sum())
                hook.mode = None
                g = left_batch([items[k] for k in ks])
                out = model.generate(**g, max_new_tokens=32, do_sample=False, eos_token_id=eos,
                                     pad_token_id=0)
                for r, k in enumerate(ks):
                    got = out[r, g["input_ids"].shape[1]:].tolist()
                    got = got[:next((j for j, t in enumerate(got) if t in eos), len(got))]
                    h, ref = tok.decode(got), items[k]["text"]
                    refs.append(ref)
                    hyps.append(h)
                    ok += h == ref
                    ocr += ref.lower().strip() in h.lower().strip()
    finally:
        memo.close()
        hook.mode, hook.shift = None, 1
    model.train()
    r = {k: v[0] / v[1] for k, v in sums.items()}
    n_items = sum(len(ks) for _, ks in chunks)
    r.update(items=n_items, left_out=len(lone), tf_exact=tf_ok / max(1, n_items),
             generated=len(refs))
    if refs:
        r.update(exact=ok / len(refs), ocrbench=ocr / len(refs), cer=mm_probe.cer(refs, hyps),
                 exact_count=ok, tf_exact_count=tf_ok,
                 examples=[[a, b] for a, b in zip(refs, hyps)][:6])
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=600, help="the schedule's length")
    ap.add_argument("--minutes", type=float, default=0.0,
                    help="stop (and measure) after this much training time (0: never)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--beta2", type=float, default=0.95, help="(the proxy preset's)")
    ap.add_argument("--v-lr-mult", type=float, default=1.0)
    ap.add_argument("--v-hidden", type=int, default=TOWER["v_hidden"])
    ap.add_argument("--v-layers", type=int, default=TOWER["v_layers"])
    ap.add_argument("--v-heads", type=int, default=TOWER["v_heads"])
    ap.add_argument("--v-pos-init", type=float, metavar="S",
                    help="the patch position table ~ N(0, S) at init (train_mm_proxy."
                    "init_vision_positions; default: transformers' ones)")
    ap.add_argument("--v-res-scale", type=float, metavar="X",
                    help="the vision layers' residual branches x X at init "
                    "(train_mm_proxy.scale_vision_residuals)")
    ap.add_argument("--vocab", type=int, default=4096, help="(the proxy preset's)")
    ap.add_argument("--reps", type=int, default=8, help="renderings a string (the proxy's)")
    ap.add_argument("--n-train", type=int, default=0,
                    help="train strings drawn from (0: every train string of the plan)")
    ap.add_argument("--curriculum", type=int, default=0, metavar="N",
                    help="the first N steps draw only one-word train strings")
    ap.add_argument("--n-test", type=int, default=0, help="held-out images (0: all)")
    ap.add_argument("--n-train-eval", type=int, default=100)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--eval-batch", type=int, default=25)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fonts", action="append", help="fonts root (make_mm_data.py's)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    fonts = tmp.mmd.font_roots(args.fonts)
    images = tmp.mmd.read_jsonl(os.path.join(args.data, "images.jsonl"))
    speech = tmp.mmd.read_jsonl(os.path.join(args.data, "speech.jsonl"))
    tr = tmp.train_split(images)
    te = [i for i in images if i["split"] == "test"]
    if args.n_train:
        tr = tr[:args.n_train]
    if args.n_test:
        te = te[:args.n_test]
    if not tr or not te or len(tr) < args.n_train_eval:
        raise SystemExit(f"mm_vision_probe: {args.data}: {len(tr)} train and {len(te)} held-out "
                         f"images (need > 0 and >= --n-train-eval {args.n_train_eval})")
    # the trainer's tokenizer: every train text of the plan, spoken and written
    tok = tmp.make_tokenizer([i["text"] for i in tmp.train_split(speech)] +
                             [i["text"] for i in tmp.train_split(images)], args.vocab,
                             os.path.join(args.out, "tokenizer.json"))
    if tok.get_vocab_size() != args.vocab:
        raise SystemExit(f"mm_vision_probe: the tokenizer has {tok.get_vocab_size()} ids for "
                         f"--vocab {args.vocab}")
    p = dict(probe_shape(args.v_hidden, args.v_layers, args.v_heads), vocab=args.vocab,
             lr=args.lr, warmup=args.warmup, beta2=args.beta2, v_lr_mult=args.v_lr_mult,
             a_lr_mult=0.0)
    if args.v_hidden % args.v_heads or args.v_hidden // args.v_heads != 64:
        raise SystemExit(f"mm_vision_probe: --v-hidden {args.v_hidden} / --v-heads "
                         f"{args.v_heads}: head_dim must be 64 (the CUDA kernels' and E2B's)")
    pr = tmp.Prompter(tok)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    model = tmp.build_model(p, tok, args.seed, v_pos_init=args.v_pos_init,
                            v_res_scale=args.v_res_scale)
    hook = mm_probe.SoftTokens()
    model.model.embed_vision.register_forward_hook(hook)
    opt = tmp.make_optimizer(model, p, None, torch.device("cpu"), "foreach")
    for g in opt.param_groups:  # the audio side (lr x 0) needs no gradient
        for x in g["params"]:
            x.requires_grad_(not g["audio"])
    live = [x for g in opt.param_groups if not g["audio"] for x in g["params"]]
    ds = tmp.Items(tr, "image", args.data, fonts, pr, None, args.reps)
    stream = tmp.forever(ds, args.batch, args.seed, 0)
    if args.curriculum:
        words = [i for i in tr if " " not in i["text"] and i["text"].isalpha()]
        first = tmp.forever(tmp.Items(words, "image", args.data, fonts, pr, None, args.reps),
                            args.batch, args.seed + 7, 0)
        print(f"mm_vision_probe: curriculum: {len(words)} one-word strings for "
              f"{args.curriculum} steps", flush=True)

    def rendered(its, k, src):
        d = tmp.Items(its, "image", args.data, fonts, pr, None, 1).render(k)
        return dict(d, text=src[k]["text"], n=d["ids"].count(pr.id["<|image|>"]))

    te_items = [rendered(te, k, te) for k in range(len(te))]
    tr_items = [rendered(tr, k, tr) for k in range(args.n_train_eval)]
    counts = {"all": sum(x.numel() for x in model.parameters()),
              "vision": sum(x.numel() for n, x in model.named_parameters()
                            if n.startswith(tmp.SIDES["vision"])),
              "trained": sum(x.numel() for x in live)}
    print(f"mm_vision_probe: {len(tr)} train strings x {args.reps} renderings, {len(te)} "
          f"held-out; parameters {counts}", flush=True)
    guard = tmp.StepGuard(10)
    log, losses, norms = [], [], []
    t0 = time.time()
    train_s = 0.0

    def report(step):
        tm = time.time()
        rt = measure(model, hook, tok, pr, tr_items, args.eval_batch)
        rh = measure(model, hook, tok, pr, te_items, args.eval_batch)
        e = dict(step=step, items_seen=step * args.batch, train_s=round(train_s),
                 measure_s=round(time.time() - tm),
                 train_loss_run=float(np.mean(losses[-50:])) if losses else None,
                 grad_norm_run=float(np.mean(norms[-50:])) if norms else None,
                 train=rt, test=rh)
        log.append(e)
        print(json.dumps(e), flush=True)
        json.dump(dict(args=vars(args), params=counts, log=log, skipped=guard.skipped),
                  open(os.path.join(args.out, "probe.json"), "w"), indent=1)

    report(0)
    model.train()
    for step in range(args.steps):
        ts = time.time()
        for g in opt.param_groups:
            g["lr"] = 0.0 if g["audio"] else tmp.lr_at(step, args.steps, p) * g["mult"]
        opt.zero_grad(set_to_none=True)
        b = next(first if step < args.curriculum else stream)
        lab = b.pop("labels")
        loss = tmp.half_loss(model, b, lab, False)
        loss.backward()
        norm = float(tmp.clip_trained(opt, live=live))
        bad = [] if np.isfinite(loss.item()) and np.isfinite(norm) else \
            [f"loss {loss.item()} norm {norm}"]
        if guard.step_ok(step, bad):
            opt.step()
        else:
            opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        norms.append(norm)
        train_s += time.time() - ts
        if step % 25 == 0:
            print(f"step {step + 1} loss {np.mean(losses[-25:]):.3f} grad norm "
                  f"{np.mean(norms[-25:]):.2f} lr {tmp.lr_at(step, args.steps, p):.2e} "
                  f"{train_s:.0f} s training, {time.time() - t0:.0f} s in all", flush=True)
        stop = args.minutes and train_s > args.minutes * 60
        if (step + 1) % args.every == 0 or step == args.steps - 1 or stop:
            report(step + 1)
        if stop:
            print(f"mm_vision_probe: --minutes {args.minutes} reached at step {step + 1}",
                  flush=True)
            break


if __name__ == "__main__":
    main()
