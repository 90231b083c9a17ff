#!/usr/bin/env python3
"""Does the mm proxy's trained audio tower collapse when it must generalise? (issue 35; bench/
NOTES.md "The audio tower's learning rate"). ASR only, on a CPU: a model between train_mm_proxy's
`ci` and `proxy` presets trains on a few hundred utterances of the real plan at one audio
learning-rate multiplier, then is measured on train and held-out clips:

    python3 tools/python/mm_audio_probe.py DATA OUT --a-lr-mult X [--steps N] [--threads 1]
                                           [--a-warmup N] [--ctc-weight W --ctc-at embed|tower]
                                           [--a-var-weight W --a-var-gamma G --a-var-per clip|frame
                                            --a-cov-weight C]

DATA: make_mm_data.py's folder after `speech` (a subset of the proxy plan is enough). Reports,
every --every steps and at the end (OUT/probe.json):
  loss        teacher-forced target loss with the clips' audio
  loss_zero   the same with embed_audio's output zeroed (the decoder as a text-only model)
  loss_shuf   the same with each clip given the next clip's audio tokens (rolled in the batch)
  spread      embed_audio's output across clips: mean pairwise relative difference of the
              time-averaged vectors, their mean pairwise cosine, and per token (first 20 tokens)
  gnorm_a     the gradient norm into the audio side (tower + embedder), before clipping
  wer         greedy decode (HF generate) word error rate, lower-cased, punctuation stripped
  ctc, ctc_wer  with --ctc-weight: train_mm_proxy.CtcHead's loss (the trainer's code) and the
              word error rate of its greedy CTC transcription (what the audio frames carry)
  a_var_run   with --a-var-weight / --a-cov-weight: train_mm_proxy.SpreadTerm's variance hinge
              (and cov) on the training batches, the mean of the last 50 steps (unweighted)
If loss == loss_zero == loss_shuf the audio is not read.
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
from mm_probe import wer  # noqa: E402

# text 128 x 6 (mm_probe's), audio 128 x 2, conv [128, 32]
SHAPE = dict(text=mm_probe.TEXT, v_hidden=64, v_layers=1, v_heads=1, v_mlp=128, a_hidden=128,
             a_layers=2, a_heads=8, a_conv=[128, 32])


def measure(model, hook, tok, pr, batches, items, n_gen, head=None):
    """The losses, the spread and (n_gen items) the WER on these batches / items."""
    model.eval()
    r = {}
    ctc, ctc_refs, ctc_hyps = [], [], []
    counts = (head.used, head.skipped) if head else None
    with torch.no_grad():
        for mode in (None, "zero", "shuf"):
            hook.mode, tot, n = mode, 0.0, 0
            embs = []
            for b in batches:
                b = dict(b)
                lab = b.pop("labels")
                logits = model(**b).logits
                loss = torch.nn.functional.cross_entropy(
                    logits.float().reshape(-1, logits.shape[-1]), lab.reshape(-1),
                    ignore_index=-100, reduction="sum")
                tot, n = tot + loss.item(), n + int((lab != -100).sum())
                if mode is None and head is not None:
                    x, v = head.tap.frames, head.tap.valid
                    c = head.loss(lab)
                    ctc.append(float("nan") if c is None else c.item())
                    ctc_hyps += [tok.decode(h) for h in head.greedy(x, v)]
                    ctc_refs += [tok.decode(row[row != -100][:-1].tolist()) for row in lab]
                if mode is None:
                    m = b["input_features_mask"]
                    valid = model.model.audio_tower(b["input_features"], m,
                                                    return_dict=True).attention_mask
                    for e, v in zip(hook.last, valid):
                        embs.append(e[v])
            r["loss" if mode is None else f"loss_{mode}"] = tot / n
            if mode is None:
                mean = torch.stack([e.mean(0) for e in embs])  # clips x D
                r["spread_mean_reldiff"], r["spread_mean_cos"] = mm_probe.clip_spread(mean)
                k = len(mean)
                iu = torch.triu_indices(k, k, 1)
                T = min(20, min(len(e) for e in embs))
                tok_e = torch.stack([e[:T] for e in embs])  # clips x T x D
                tdiff = ((tok_e[:, None] - tok_e[None]).norm(dim=-1) /
                         tok_e.norm(dim=-1)[:, None]).mean(-1)
                r["spread_token_reldiff"] = float(tdiff[iu[0], iu[1]].mean())
        hook.mode = None
        if head is not None:
            r["ctc"] = float(np.mean(ctc))
            r["ctc_wer"] = wer(ctc_refs, ctc_hyps)
            r["ctc_examples"] = list(zip(ctc_refs[:2], ctc_hyps[:2]))
            head.used, head.skipped = counts
        hyps, refs = [], []
        eos = [1, pr.id["<turn|>"]]
        for it in items[:n_gen]:
            b = tmp.collate([dict(it, tgt=[])])
            out = model.generate(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                                 input_features=b["input_features"],
                                 input_features_mask=b["input_features_mask"], max_new_tokens=24,
                                 do_sample=False, eos_token_id=eos, pad_token_id=0)
            ids = [t for t in out[0, b["input_ids"].shape[1]:].tolist() if t not in eos]
            hyps.append(tok.decode(ids))
            refs.append(tok.decode(it["tgt"][:-1]))
        r["wer"] = wer(refs, hyps) if refs else None
        r["examples"] = list(zip(refs[:3], hyps[:3]))
    model.train()
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--a-lr-mult", type=float, required=True)
    ap.add_argument("--a-warmup", type=int, default=0,
                    help="steps with the audio side frozen, then its lr x a-lr-mult")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--n-train", type=int, default=400)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ctc-weight", type=float, default=0.0,
                    help="auxiliary CTC loss on the audio frames (train_mm_proxy.CtcHead), weight")
    ap.add_argument("--ctc-at", default="embed", help="embed (embed_audio's output) or tower")
    ap.add_argument("--a-var-weight", type=float, default=0.0,
                    help="anti-collapse variance term (train_mm_proxy.SpreadTerm), weight")
    ap.add_argument("--a-var-gamma", type=float, default=0.15)
    ap.add_argument("--a-var-per", default="clip", help="clip (time-averaged) or frame")
    ap.add_argument("--a-cov-weight", type=float, default=0.0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    audio = tmp.mmd.read_jsonl(os.path.join(args.data, "speech.jsonl"))
    tr = tmp.train_split(audio)[:args.n_train]
    te = [i for i in audio if i["split"] == "test"]
    vocab = 640
    tok = tmp.make_tokenizer([i["text"] for i in tr], vocab,
                             os.path.join(args.out, "tokenizer.json"))
    p = dict(SHAPE, vocab=tok.get_vocab_size())
    pr = tmp.Prompter(tok)
    torch.manual_seed(args.seed)
    from transformers import Gemma4ForConditionalGeneration
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    fe = Gemma4AudioFeatureExtractor()
    model = Gemma4ForConditionalGeneration._from_config(tmp.model_config(p, tok),
                                                        dtype=torch.float32,
                                                        attn_implementation="sdpa")
    hook = mm_probe.SoftTokens()  # embed_audio's output: kept, zeroed or rolled
    model.model.embed_audio.register_forward_hook(hook)
    head = tmp.CtcHead(model, p["vocab"], args.ctc_at) if args.ctc_weight else None
    spread = tmp.SpreadTerm(model, args.a_var_weight, args.a_var_gamma, args.a_var_per,
                            args.a_cov_weight) if args.a_var_weight or args.a_cov_weight else None
    ds = tmp.Items(tr, "audio", args.data, None, pr, fe, 8)
    stream = tmp.forever(ds, args.batch, args.seed, 0)
    # fixed measuring sets: 32 train clips (their planned rendering), 40 held-out sentences
    tr_items = [ds.render(k) for k in range(32)]
    te_items = [tmp.Items(te, "audio", args.data, None, pr, fe, 1).render(k)
                for k in range(len(te))]
    tr_b = [tmp.collate(tr_items[k:k + 16]) for k in range(0, 32, 16)]
    te_b = [tmp.collate(te_items[k:k + 20]) for k in range(0, len(te_items), 20)]
    audio_params = [x for n, x in model.named_parameters()
                    if n.startswith(("model.audio_tower.", "model.embed_audio."))]
    aid = {id(x) for x in audio_params}
    rest = [x for x in model.named_parameters() if id(x[1]) not in aid
            and not x[0].startswith(("model.vision_tower.", "model.embed_vision."))]
    groups = [{"params": [x for n, x in rest if x.dim() >= 2], "weight_decay": 0.05, "mult": 1.0},
              {"params": [x for n, x in rest if x.dim() < 2], "weight_decay": 0.0, "mult": 1.0},
              {"params": [x for x in audio_params if x.dim() >= 2], "weight_decay": 0.05,
               "mult": args.a_lr_mult, "audio": True},
              {"params": [x for x in audio_params if x.dim() < 2], "weight_decay": 0.0,
               "mult": args.a_lr_mult, "audio": True}]
    if head is not None:  # the head learns from step 0, also while the audio side is frozen
        groups.append({"params": list(head.parameters()), "weight_decay": 0.0, "mult": 1.0})
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), eps=1e-8)
    sched = dict(lr=args.lr, warmup=args.warmup)
    log, losses, gn, ctcs, avar, acov = [], [], [], [], [], []
    t0 = time.time()

    def report(step):
        rt = measure(model, hook, tok, pr, tr_b, tr_items, 8 if step else 0, head)
        rh = measure(model, hook, tok, pr, te_b, te_items, 40 if step else 0, head)
        e = dict(step=step, s=round(time.time() - t0), train_loss_run=float(np.mean(losses[-50:]))
                 if losses else None, gnorm_a=float(np.mean(gn[-50:])) if gn else None,
                 ctc_run=float(np.mean(ctcs[-50:])) if ctcs else None,
                 ctc_clips=[head.used, head.skipped] if head else None,
                 a_var_run=float(np.mean(avar[-50:])) if avar else None,
                 a_cov_run=float(np.mean(acov[-50:])) if acov else None, train=rt, test=rh)
        log.append(e)
        print(json.dumps(e), flush=True)
        json.dump(dict(args=vars(args), params=sum(x.numel() for x in model.parameters()),
                       log=log), open(os.path.join(args.out, "probe.json"), "w"), indent=1)

    report(0)
    model.train()
    for step in range(args.steps):
        for g in opt.param_groups:
            frozen = g.get("audio") and step < args.a_warmup
            g["lr"] = 0.0 if frozen else tmp.lr_at(step, args.steps, sched) * g["mult"]
        opt.zero_grad(set_to_none=True)
        b = next(stream)
        lab = b.pop("labels")
        logits = model(**b).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 lab.reshape(-1), ignore_index=-100)
        total = loss
        c = head.loss(lab) if head is not None else None
        if c is not None:
            ctcs.append(c.item())
            total = loss + args.ctc_weight * c
        r = spread.loss() if spread is not None else None
        if r is not None:
            avar.append(r[1].item())
            acov.append(r[2].item())
            total = total + r[0]
        total.backward()
        gn.append(float(torch.norm(torch.stack([x.grad.norm() for x in audio_params
                                                if x.grad is not None]))))
        tmp.clip_trained(opt)  # the audio gradient is still computed here: gnorm_a reports it
        opt.step()
        losses.append(loss.item())
        if step % 25 == 0:
            print(f"step {step + 1} loss {np.mean(losses[-25:]):.3f} gnorm_a "
                  f"{np.mean(gn[-25:]):.2e}" + (f" ctc {np.mean(ctcs[-25:]):.3f} clips "
                                                f"{head.used}/{head.skipped} skipped"
                                                if ctcs else "") +
                  (f" a_var {np.mean(avar[-25:]):.4f}" if avar else "") +
                  f" {time.time() - t0:.0f} s", flush=True)
        if (step + 1) % args.every == 0 or step == args.steps - 1:
            report(step + 1)


if __name__ == "__main__":
    main()
