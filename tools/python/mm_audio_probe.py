#!/usr/bin/env python3
"""Does the mm proxy's trained audio tower collapse when it must generalise? (issue 35; bench/
NOTES.md "The audio tower's learning rate"). ASR only, on a CPU: a model between train_mm_proxy's
`ci` and `proxy` presets trains on a few hundred utterances of the real plan at one audio
learning-rate multiplier, then is measured on train and held-out clips:

    python3 tools/python/mm_audio_probe.py DATA OUT --a-lr-mult X [--steps N] [--threads 1]
                                           [--a-warmup N] [--ctc-weight W --ctc-at embed|tower]
                                           [--a-var-weight W --a-var-gamma G --a-var-per clip|frame
                                            --a-cov-weight C]
    python3 tools/python/mm_audio_probe.py DATA OUT --warm-only [--a-lr-mult X --lr L]
                                           [--lm-warm N] [--vocab V] [--ctc-tied
                                            --ctc-tied-weight W --ctc-tied-scale S
                                            --ctc-tied-center]

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

--warm-only: the towers' warm phase of train_mm_proxy (--a-warm, vision_warm_step's audio half)
alone, no decoder loss: the audio side (tower + embed_audio) through get_audio_features only, the
character head (train_mm_proxy.AudioChars on embed_audio's output: --ctc-units chars, "the char
head") and with --ctc-tied the tied head (train_mm_proxy.TiedCtcHead: --ctc-tied-scale,
--ctc-tied-center) on the same frames, char + W x tied summed into one backward, the gradient
over the audio side and both heads clipped to 1.0 together (the trainer's warm optimizer and
schedule: the audio side at lr x --a-lr-mult, weight decay 0.05 on matrices, the heads at lr;
a linear warm-up of min(--warmup, steps / 10) steps, cosine to 5%). --lm-warm N first trains the
decoder alone N steps as a causal LM on the train texts (train_mm_proxy.lm_rows, the
trainer's --lm-warm-steps), so the tied head's classes (the decoder's token rows) are a
trained table with a shared direction as on the GPU, not random rows. Reports every --every
steps and at the end (OUT/probe.json, "warm" rows): char_run / tied_run (the train losses, mean
of the last --every steps), the clips each head used / skipped, the learned scale, and on the
held-out clips: char_ctc (a label), char_cer (greedy read against the transcript as heard),
tied_ctc (a label), tied_peaks (the share of valid frames whose argmax is a token, not the
blank: ~0 is CTC's all-blank plateau), tied_peak_cos, tied_cer (the greedy token read decoded
against the answer), table_mean_cos (train_mm_proxy.table_mean_cos of the class table).
"""
import argparse
import json
import math
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


def warm_measure(model, chars, tied, tok, closing, batches):
    """The warm-only held-out read-outs of the char head (chars) and the tied head (tied, or
    None) on batches; the heads' used / skipped counts are left as they were."""
    model.eval()
    counts = [(h.used, h.skipped) for h in (chars, tied) if h is not None]
    c_loss, c_refs, c_hyps, c_n = [], [], [], 0
    t_loss, t_reads, t_refs, t_skip, t_peak, t_cos, t_frames = [], [], [], 0, 0.0, 0.0, 0
    with torch.no_grad():
        for b in batches:
            model.model.get_audio_features(b["input_features"], b["input_features_mask"])
            x, valid = chars.tap.take()
            w = valid.sum(-1).tolist()
            texts = tmp.answer_texts(tok, b["labels"], closing)
            used = chars.used
            c = tmp.char_ctc_loss(chars, x, w, texts)
            if c is not None:  # (a batch mean a label: weighted by its clips)
                c_loss.append(c.item() * (chars.used - used))
                c_n += chars.used - used
            c_hyps += tmp.char_ctc_greedy(chars, x, w)
            c_refs += [tmp.char_target(chars, t) for t in texts]
            if tied is None:
                continue
            x, valid = tied.tap.take()
            per, reads, tgts, skipped, share, cos = tied.items(x, valid, b["labels"])
            n = int(valid.sum())
            t_loss += per
            t_reads += [tok.decode(r, skip_special_tokens=False) for r in reads]
            t_refs += [tok.decode(r, skip_special_tokens=False) for r in tgts]
            t_skip += skipped
            t_frames += n
            t_peak += share * n
            t_cos += 0.0 if cos is None else cos * share * n
    for h, (u, k) in zip([h for h in (chars, tied) if h is not None], counts):
        h.used, h.skipped = u, k
    r = dict(char_ctc=sum(c_loss) / c_n if c_n else None, char_cer=mm_probe.cer(c_refs, c_hyps),
             char_items=len(c_refs), char_fit=c_n, char_example=[c_refs[0], c_hyps[0]])
    if tied is not None:
        r.update(tied_ctc=float(np.mean(t_loss)) if t_loss else None,
                 tied_cer=mm_probe.cer(t_refs, t_reads) if t_refs else None,
                 tied_items=len(t_refs), tied_skipped=t_skip, tied_frames=t_frames,
                 tied_peaks=t_peak / t_frames if t_frames else None,
                 tied_peak_cos=t_cos / t_peak if t_peak else None,
                 tied_example=[t_refs[0], t_reads[0]] if t_refs else None,
                 scale=float(tied.log_scale.detach().exp()),
                 table_mean_cos=tmp.table_mean_cos(tied.table()))
    model.train()
    return r


def lm_warm(model, pr, texts, n, batch, lr, seed):
    """--lm-warm N: N steps of the decoder alone as a causal LM on the train texts
    (train_mm_proxy.lm_rows: `batch` rows of min(LM_ROW, the decoder's positions) ids a step;
    its own AdamW over the decoder, decay_groups; warm_schedule at lr; the gradient clipped to
    1.0), as the trainer's --lm-warm-steps. Returns the loss every 25 steps and the last."""
    named = [x for k, x in model.named_parameters()
             if not k.startswith(tmp.SIDES["vision"] + tmp.SIDES["audio"])]
    opt = tmp.adamw(tmp.decay_groups(named, 1.0), dict(lr=lr), "foreach")
    sched = tmp.warm_schedule(dict(lr=lr, warmup=30), n)
    row_len = min(tmp.LM_ROW, model.config.text_config.max_position_embeddings)
    rows = tmp.lm_rows(pr, texts, batch, row_len, np.random.default_rng([seed, 36]))
    out = []
    for step in range(n):
        for g in opt.param_groups:
            g["lr"] = tmp.lr_at(step, n, sched) * g["mult"]
        b = next(rows)
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 b["labels"].reshape(-1), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(named, 1.0)
        opt.step()
        if step % 25 == 0 or step == n - 1:
            out.append([step + 1, loss.item()])
            print(f"LM warm step {step + 1}/{n} loss {loss.item():.3f}", flush=True)
    return out


def warm_only(args, model, tok, pr, stream, te_b, t0, out):
    """--warm-only's training and reports (the module's docstring): out (the record) gains
    "warm", the report rows, written to OUT/probe.json at each report."""
    closing = pr.id["<turn|>"]
    chars = tmp.AudioChars(model, "embed", args.seed, tok, closing)
    tied = (tmp.TiedCtcHead(model, model.config.text_config.vocab_size, args.seed,
                            scale=args.ctc_tied_scale, center=args.ctc_tied_center)
            if args.ctc_tied else None)
    named = [x for k, x in model.named_parameters() if k.startswith(tmp.SIDES["audio"])]
    groups = tmp.decay_groups(named, args.a_lr_mult, True) + [tmp.head_group(chars)]
    groups += [tmp.head_group(tied)] if tied is not None else []
    opt = tmp.adamw(groups, dict(lr=args.lr), "foreach")
    live = [x for g in opt.param_groups for x in g["params"]]
    sched = tmp.warm_schedule(dict(lr=args.lr, warmup=args.warmup), args.steps)
    log, closs, tloss, norms, skipped_steps = [], [], [], [], 0

    def report(step):
        e = dict(step=step, s=round(time.time() - t0),
                 char_run=float(np.mean(closs[-args.every:])) if closs else None,
                 tied_run=float(np.mean(tloss[-args.every:])) if tloss else None,
                 gnorm_run=float(np.mean(norms[-args.every:])) if norms else None,
                 char_clips=[chars.used, chars.skipped],
                 tied_clips=[tied.used, tied.skipped] if tied is not None else None,
                 steps_without_loss=skipped_steps,
                 test=warm_measure(model, chars, tied, tok, closing, te_b))
        log.append(e)
        print(json.dumps(e), flush=True)
        out["warm"] = log
        with open(os.path.join(args.out, "probe.json"), "w") as f:
            json.dump(out, f, indent=1)

    report(0)
    model.train()
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = tmp.lr_at(step, args.steps, sched) * g["mult"]
        opt.zero_grad(set_to_none=True)
        b = next(stream)
        model.model.get_audio_features(b["input_features"], b["input_features_mask"])
        c = chars.loss(b["labels"])
        t = tied.loss(b["labels"]) if tied is not None else None
        if c is None and t is None:
            skipped_steps += 1
            continue
        total = None
        for x, m in ((c, 1.0), (t, args.ctc_tied_weight)):
            if x is not None:
                total = m * x if total is None else total + m * x
        total.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(live, 1.0)))
        opt.step()
        if c is not None:
            closs.append(c.item())
        if t is not None:
            tloss.append(t.item())
        if step % 25 == 0:
            print(f"step {step + 1} char {np.mean(closs[-25:]):.3f}" +
                  (f" tied {np.mean(tloss[-25:]):.3f} scale {tied.log_scale.exp().item():.2f}"
                   if tloss else "") + f" gnorm {np.mean(norms[-25:]):.2f} "
                  f"{time.time() - t0:.0f} s", flush=True)
        if (step + 1) % args.every == 0 or step == args.steps - 1:
            report(step + 1)


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
    ap.add_argument("--warm-only", action="store_true",
                    help="the towers' warm phase alone: char (+ tied) CTC, no decoder loss")
    ap.add_argument("--lm-warm", type=int, default=0, metavar="N",
                    help="--warm-only: N decoder-only LM steps on the train texts first")
    ap.add_argument("--lm-warm-from", metavar="FILE",
                    help="--warm-only: the decoder an --lm-warm run saved (OUT/lm_warm.pt) in "
                    "place of training it again (the same seed, data and --vocab)")
    ap.add_argument("--vocab", type=int, default=640, help="the tokenizer's ids")
    ap.add_argument("--ctc-tied", action="store_true",
                    help="--warm-only: train_mm_proxy.TiedCtcHead beside the char head")
    ap.add_argument("--ctc-tied-weight", type=float, default=1.0,
                    help="the tied loss's weight against the char head's 1 (the trainer's "
                    "--ctc-tied-weight / --ctc-weight)")
    ap.add_argument("--ctc-tied-scale", type=float, default=tmp.TIED_SCALE_INIT)
    ap.add_argument("--ctc-tied-center", action="store_true")
    args = ap.parse_args()
    tied_set = [k for k, v in (("--ctc-tied-weight", args.ctc_tied_weight != 1.0),
                               ("--ctc-tied-scale", args.ctc_tied_scale != tmp.TIED_SCALE_INIT),
                               ("--ctc-tied-center", args.ctc_tied_center)) if v]
    if args.ctc_tied and not args.warm_only:
        raise SystemExit("mm_audio_probe: --ctc-tied needs --warm-only")
    if tied_set and not args.ctc_tied:
        raise SystemExit(f"mm_audio_probe: {', '.join(tied_set)} without --ctc-tied")
    if (args.lm_warm or args.lm_warm_from) and not args.warm_only:
        raise SystemExit("mm_audio_probe: --lm-warm / --lm-warm-from need --warm-only")
    if args.warm_only and (args.ctc_weight or args.a_var_weight or args.a_cov_weight or
                           args.a_warmup):
        raise SystemExit("mm_audio_probe: --warm-only trains the char head (and the tied head) "
                         "alone: no --ctc-weight, --a-var-weight, --a-cov-weight, --a-warmup")
    if args.ctc_tied and not all(0 < x < math.inf for x in (args.ctc_tied_weight,
                                                             args.ctc_tied_scale)):
        raise SystemExit("mm_audio_probe: --ctc-tied-weight and --ctc-tied-scale must be "
                         "finite > 0")
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    audio = tmp.mmd.read_jsonl(os.path.join(args.data, "speech.jsonl"))
    tr = tmp.train_split(audio)[:args.n_train]
    te = [i for i in audio if i["split"] == "test"]
    tok = tmp.make_tokenizer([i["text"] for i in tr], args.vocab,
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
    if args.warm_only:
        t0 = time.time()
        lm = lm_warm(model, pr, [i["text"] for i in tr], args.lm_warm, args.batch, args.lr,
                     args.seed) if args.lm_warm and not args.lm_warm_from else None
        dec = [k for k in model.state_dict() if not k.startswith(tmp.SIDES["vision"] +
                                                                 tmp.SIDES["audio"])]
        if lm is not None:  # (the decoder after it: --lm-warm-from of another arm reads it)
            torch.save({k: model.state_dict()[k] for k in dec},
                       os.path.join(args.out, "lm_warm.pt"))
        if args.lm_warm_from:
            got = torch.load(args.lm_warm_from)
            if sorted(got) != sorted(dec):
                raise SystemExit(f"mm_audio_probe: {args.lm_warm_from}: not this model's decoder")
            model.load_state_dict(got, strict=False)
        ds = tmp.Items(tr, "audio", args.data, None, pr, fe, 8)
        te_items = [tmp.Items(te, "audio", args.data, None, pr, fe, 1).render(k)
                    for k in range(len(te))]
        te_b = [tmp.collate(te_items[k:k + 20]) for k in range(0, len(te_items), 20)]
        out = dict(args=vars(args), params=sum(x.numel() for x in model.parameters()),
                   vocab=p["vocab"], n_train=len(tr), n_test=len(te), lm_warm=lm,
                   table_mean_cos=tmp.table_mean_cos(
                       model.model.language_model.embed_tokens.weight))
        warm_only(args, model, tok, pr, tmp.forever(ds, args.batch, args.seed, 0), te_b, t0, out)
        return
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
