#!/usr/bin/env python3
"""What can be READ from the mm proxy's frozen audio tower? (issue 35; bench/NOTES.md "What a
read-out finds in the frozen audio tower"). The tower's output is computed once per clip and
cached at several depths; small CTC read-outs are then fitted on the cached features to the
characters of the transcript, thousands of steps in minutes on one CPU thread:

    python3 tools/python/mm_audio_readout.py DATA OUT [--tower proxy|probe] [--seed 0]
        [--a-layers N] [--a-hidden H] [--a-conv C0,C1] [--a-res-scale X]
        [--n-train 1500] [--held-renderings 3] [--readout linear|conv ...]
        [--depths mel,conv,L1,...,embed] [--steps N] [--threads 1]

DATA: make_mm_data.py's folder after `speech` (the proxy plan; run.sh mm_make's $WORK/mm/data,
MM_DATA: train items are
the plan's first --n-train train utterances in their planned rendering; held-out items are the
plan's test split, the trainer's held-out sentences and voice, each in --held-renderings
renderings: rendering 0 the planned one, the others other noise, silence and gain draws, as
train_mm_proxy.Items makes them).

The tower: train_mm_proxy.model_config at the proxy preset (--tower proxy: the trainer's
tokenizer, so the model and its random audio side are the trainer's at --seed) or at
mm_audio_probe.SHAPE (--tower probe: the probe's), with --a-layers / --a-hidden / --a-conv
overrides and --a-res-scale (train_mm_proxy.scale_audio_residuals: the residual branches' output
scales x X at init). Depths (each frame at 25 Hz, the tower's valid frames):
  mel     the log-mel features, 4 consecutive frames stacked (what the subsampling sees)
  conv    after the subsampling convolutions and their projection to the tower's width
  L1..Ln  after each conformer layer
  embed   after embed_audio (the soft tokens the decoder reads)
Read-outs (a CTC head over the blank + ALPHABET; features standardised per dimension with the
train frames' mean and std): linear (one linear map of a window of 5 frames, t-2..t+2: a
1-D convolution without a nonlinearity) and conv (1-D convolution k5 to 128 channels, ReLU,
another k5 to 128, ReLU, linear). AdamW, cosine decay, batch 16 clips, fixed steps (no
selection on the held-out clips). Reports per depth: the held-out CTC loss (per label, mean
over the clips that fit), the greedy CER and WER (lower-cased, [^a-z'] to spaces, as
mm_parity.words), the train CER (200 train clips) and the spread across the held-out clips
(mm_audio_probe's: mean pairwise relative difference of the clips' time-averaged vectors, and
their mean pairwise cosine). OUT/readout.json holds every row; OUT/cache the features.
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
import mm_audio_probe as probe  # noqa: E402
import mm_probe  # noqa: E402
import train_mm_proxy as tmp  # noqa: E402
from mm_parity import edits, words  # noqa: E402

ALPHABET = tmp.AudioChars.ALPHABET  # CTC labels 1..28; 0 is the blank (the trainer's head's)
WINDOW = 5  # frames a read-out sees around each frame (t-2..t+2)


def normalise(text):
    return " ".join(words(text))


def labels_of(text):
    s = normalise(text)
    bad = sorted({c for c in s if c not in ALPHABET})
    if bad:  # the plan's sentences are letters, apostrophes and commas (make_mm_data WORD)
        raise SystemExit(f"mm_audio_readout: transcript {text!r} has characters {bad} outside "
                         "the read-out's alphabet")
    return [1 + ALPHABET.index(c) for c in s]


def build_tower(args, data):
    """(model, prompter): the whole Gemma-4 model as the trainer (or the probe) builds it at
    args.seed, so its audio side is the one that run would keep frozen."""
    audio = tmp.mmd.read_jsonl(os.path.join(data, "speech.jsonl"))
    tr_a = tmp.train_split(audio)
    os.makedirs(args.out, exist_ok=True)
    tok_path = os.path.join(args.out, "tokenizer.json")
    if args.tower == "proxy":  # train_mm_proxy.main's tokenizer and parameters
        images = tmp.mmd.read_jsonl(os.path.join(data, "images.jsonl"))
        tr_i = tmp.train_split(images)
        p = dict(tmp.PRESETS["proxy"])
        tok = tmp.make_tokenizer([i["text"] for i in tr_a + tr_i], p["vocab"], tok_path)
    elif args.tower == "probe":  # mm_audio_probe.main's (its first 400 train utterances)
        tok = tmp.make_tokenizer([i["text"] for i in tr_a[:400]], 640, tok_path)
        p = dict(probe.SHAPE, vocab=tok.get_vocab_size())
    else:
        raise SystemExit(f"mm_audio_readout: --tower {args.tower}: proxy or probe")
    if args.a_layers is not None:
        p["a_layers"] = args.a_layers
    if args.a_hidden is not None:
        p["a_hidden"] = args.a_hidden
    if args.a_conv is not None:
        p["a_conv"] = [int(c) for c in args.a_conv.split(",")]
        if len(p["a_conv"]) != 2 or min(p["a_conv"]) < 1:
            raise SystemExit(f"mm_audio_readout: --a-conv {args.a_conv}: two channel counts")
    torch.manual_seed(args.seed)
    model = tmp.build_model(p, tok, args.seed, a_res_scale=args.a_res_scale)
    model.eval()
    return model, tmp.Prompter(tok), p


def clips(args, data, pr):
    """The train and held-out items as rendered feature dicts (train_mm_proxy.Items)."""
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    fe = Gemma4AudioFeatureExtractor()
    audio = tmp.mmd.read_jsonl(os.path.join(data, "speech.jsonl"))
    tr = tmp.train_split(audio)[:args.n_train]
    te = [i for i in audio if i["split"] == "test"]
    if len(tr) < args.n_train:
        raise SystemExit(f"mm_audio_readout: {len(tr)} train utterances in {data} < --n-train "
                         f"{args.n_train}")
    ds_tr = tmp.Items(tr, "audio", data, None, pr, fe, 1)
    ds_te = tmp.Items(te, "audio", data, None, pr, fe, args.held_renderings)
    out = [("train", tr[k]["text"], tr[k]["id"], 0, ds_tr, k) for k in range(len(tr))]
    out += [("test", te[k % len(te)]["text"], te[k % len(te)]["id"], k // len(te), ds_te, k)
            for k in range(len(te) * args.held_renderings)]
    return out


def cache_features(args, model, pr, depths):
    """Runs the tower once per clip (batch 1: no padding) and writes OUT/cache/<depth>.npy
    (float16, all clips' valid frames in order) and OUT/cache/index.json."""
    cdir = os.path.join(args.out, "cache")
    if os.path.exists(os.path.join(cdir, "index.json")):
        return json.load(open(os.path.join(cdir, "index.json")))
    os.makedirs(cdir, exist_ok=True)
    m = model.model
    tower, got = m.audio_tower, {}
    hooks = [tower.subsample_conv_projection.register_forward_hook(
        lambda mod, i, o: got.__setitem__("conv", o[0]))]
    for n, layer in enumerate(tower.layers):
        hooks.append(layer.register_forward_hook(
            lambda mod, i, o, n=n: got.__setitem__(f"L{n + 1}", o)))
    feats = {d: [] for d in depths}
    index = []
    t0 = time.time()
    items = clips(args, args.data, pr)
    with torch.no_grad():
        for k, (split, text, cid, rendering, ds, j) in enumerate(items):
            it = ds.render(j)
            x = torch.from_numpy(it["feats"])[None]
            mask = torch.from_numpy(it["mask"])[None]
            out = tower(x, mask, return_dict=True)
            valid = out.attention_mask[0]
            n = int(valid.sum())
            if not bool(valid[:n].all()):
                raise SystemExit(f"mm_audio_readout: {cid}: the tower's valid frames are not a "
                                 "prefix")
            got["embed"] = m.embed_audio(out.last_hidden_state)
            mel = x[0][mask[0].bool()]
            stacked = torch.zeros(4 * n, mel.shape[1])
            stacked[:min(len(mel), 4 * n)] = mel[:4 * n]
            got["mel"] = stacked.reshape(1, n, -1)
            for d in depths:
                feats[d].append(got[d][0, :n].float().numpy().astype(np.float16))
            index.append(dict(split=split, text=text, id=cid, rendering=rendering, frames=n))
            if k % 250 == 0:
                print(f"cache {k + 1}/{len(items)} {time.time() - t0:.0f} s", flush=True)
    for h in hooks:
        h.remove()
    for d in depths:
        np.save(os.path.join(cdir, f"{d}.npy"), np.concatenate(feats[d]))
    info = dict(clips=index, depths=depths, seconds=round(time.time() - t0, 1))
    json.dump(info, open(os.path.join(cdir, "index.json"), "w"))
    return info


def spread(x, offs, idx):
    """mm_probe.clip_spread of these clips' time-averaged vectors (x: all clips' frames, offs:
    each clip's first row)."""
    mean = torch.stack([torch.from_numpy(x[offs[k]:offs[k + 1]].astype(np.float32)).mean(0)
                        for k in idx])
    return mm_probe.clip_spread(mean)


class Readout(torch.nn.Module):
    def __init__(self, kind, dim, classes, hidden=128):
        super().__init__()
        if kind == "linear":
            self.net = torch.nn.Conv1d(dim, classes, WINDOW, padding=WINDOW // 2)
        elif kind == "conv":
            self.net = torch.nn.Sequential(
                torch.nn.Conv1d(dim, hidden, WINDOW, padding=WINDOW // 2), torch.nn.ReLU(),
                torch.nn.Conv1d(hidden, hidden, WINDOW, padding=WINDOW // 2), torch.nn.ReLU(),
                torch.nn.Conv1d(hidden, classes, 1))
        else:
            raise SystemExit(f"mm_audio_readout: --readout {kind}: linear or conv")

    def forward(self, x):  # B x T x D -> T x B x C log-probabilities
        return torch.log_softmax(self.net(x.transpose(1, 2)), 1).permute(2, 0, 1)


def batch_of(x, offs, idx):
    T = max(offs[k + 1] - offs[k] for k in idx)
    b = torch.zeros(len(idx), T, x.shape[1])
    for r, k in enumerate(idx):
        b[r, :offs[k + 1] - offs[k]] = x[offs[k]:offs[k + 1]]
    return b


def greedy(lp, n):
    return mm_probe.ctc_greedy(lp, n, ALPHABET)


def evaluate(net, x, offs, idx, texts, labs):
    """Per-label CTC loss (mean over the clips that fit), CER and WER over all clips."""
    net.eval()
    loss, fit, ce, cn, we, wn, hyps = 0.0, 0, 0, 0, 0, 0, []
    with torch.no_grad():
        for s in range(0, len(idx), 32):
            part = idx[s:s + 32]
            lp = net(batch_of(x, offs, part))
            for r, k in enumerate(part):
                n = offs[k + 1] - offs[k]
                hyp, ref = greedy(lp[:, r], n), normalise(texts[k])
                hyps.append(hyp)
                ce, cn = ce + edits(list(ref), list(hyp)), cn + len(ref)
                we, wn = we + edits(ref.split(), hyp.split()), wn + len(ref.split())
                if tmp.ctc_fits(n, labs[k]):
                    c = torch.nn.functional.ctc_loss(lp[:n, r:r + 1], torch.tensor([labs[k]]),
                                                     [n], [len(labs[k])], blank=0,
                                                     reduction="sum")
                    loss, fit = loss + c.item() / len(labs[k]), fit + 1
    net.train()
    return dict(ctc=loss / max(1, fit), cer=ce / max(1, cn), wer=we / max(1, wn), fit=fit,
                clips=len(idx), examples=list(zip([normalise(texts[k]) for k in idx[:2]],
                                                  hyps[:2])))


def fit_depth(args, info, depth, kind):
    x = np.load(os.path.join(args.out, "cache", f"{depth}.npy"))
    cl = info["clips"]
    offs = np.concatenate([[0], np.cumsum([c["frames"] for c in cl])]).tolist()
    tr = [k for k, c in enumerate(cl) if c["split"] == "train"]
    te = [k for k, c in enumerate(cl) if c["split"] == "test"]
    sp = spread(x, offs, te)
    xt = torch.from_numpy(x.astype(np.float32))
    del x
    trf = torch.cat([xt[offs[k]:offs[k + 1]] for k in tr])
    mu, sd = trf.mean(0), trf.std(0).clamp_min(1e-6)
    del trf
    xt = (xt - mu) / sd
    texts = [c["text"] for c in cl]
    labs = [labels_of(t) for t in texts]
    usable = [k for k in tr if tmp.ctc_fits(cl[k]["frames"], labs[k])]
    torch.manual_seed(args.seed)
    net = Readout(kind, xt.shape[1], 1 + len(ALPHABET))
    steps = args.steps or (3000 if kind == "linear" else 1500)
    lr = args.lr or (3e-3 if kind == "linear" else 1e-3)
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    curve = []

    def draw(step):
        idx = [usable[i] for i in rng.choice(len(usable), args.batch, replace=False)]
        tg = torch.cat([torch.tensor(labs[k]) for k in idx])
        return (net(batch_of(xt, offs, idx)), tg, [offs[k + 1] - offs[k] for k in idx],
                [len(labs[k]) for k in idx])

    def probe(step, run):
        e = evaluate(net, xt, offs, te[:80], texts, labs)
        curve.append(dict(step=step, train_ctc=float(np.mean(run[-50:])), cer80=e["cer"]))
        print(f"  {depth} {kind} step {step} train ctc {np.mean(run[-50:]):.3f} "
              f"held-out (80) cer {e['cer']:.3f} {time.time() - t0:.0f} s", flush=True)

    run = mm_probe.train_ctc(net, draw, steps, lr, args.every, probe)
    held = evaluate(net, xt, offs, te, texts, labs)
    planned = evaluate(net, xt, offs, [k for k in te if cl[k]["rendering"] == 0], texts, labs)
    train = evaluate(net, xt, offs, tr[:200], texts, labs)
    return dict(depth=depth, readout=kind, dim=int(xt.shape[1]), spread_reldiff=sp[0],
                spread_cos=sp[1], steps=steps, lr=lr, train_ctc_run=float(np.mean(run[-50:])),
                held=held, held_planned=planned, train=train, curve=curve,
                train_clips_used=len(usable), train_clips=len(tr), seconds=round(time.time() - t0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--tower", default="proxy", help="proxy (the preset's) or probe (its shape)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--a-layers", type=int)
    ap.add_argument("--a-hidden", type=int)
    ap.add_argument("--a-conv", help="subsampling channels C0,C1")
    ap.add_argument("--a-res-scale", type=float,
                    help="the audio layers' residual branch scales x X at init "
                    "(train_mm_proxy.scale_audio_residuals)")
    ap.add_argument("--n-train", type=int, default=1500)
    ap.add_argument("--held-renderings", type=int, default=3)
    ap.add_argument("--depths", help="comma list (default: mel, conv, every layer, embed)")
    ap.add_argument("--readout", action="append", help="linear and/or conv (default linear)")
    ap.add_argument("--conv-depths", help="depths the conv read-out also fits (default: all "
                    "of --depths when --readout conv is given)")
    ap.add_argument("--steps", type=int, help="read-out steps (linear 3000, conv 1500)")
    ap.add_argument("--lr", type=float, help="read-out peak lr (linear 3e-3, conv 1e-3)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, pr, p = build_tower(args, args.data)
    n_layers = len(model.model.audio_tower.layers)
    all_depths = ["mel", "conv"] + [f"L{k + 1}" for k in range(n_layers)] + ["embed"]
    depths = args.depths.split(",") if args.depths else all_depths
    bad = [d for d in depths if d not in all_depths]
    if bad:
        raise SystemExit(f"mm_audio_readout: --depths {bad}: not among {all_depths}")
    info = cache_features(args, model, pr, all_depths)
    del model
    kinds = args.readout or ["linear"]
    conv_depths = args.conv_depths.split(",") if args.conv_depths else depths
    path = os.path.join(args.out, "readout.json")
    rows = json.load(open(path))["rows"] if os.path.exists(path) else []
    done = {(r["depth"], r["readout"]) for r in rows}
    tower = dict(tower=args.tower, seed=args.seed, a_hidden=p["a_hidden"],
                 a_layers=p["a_layers"], a_conv=p.get("a_conv", [128, 32]),
                 a_res_scale=args.a_res_scale)
    for kind in kinds:
        for d in depths:
            if (d, kind) in done or (kind == "conv" and d not in conv_depths):
                continue
            r = fit_depth(args, info, d, kind)
            rows.append(r)
            print(f"{args.tower} {p['a_hidden']}x{p['a_layers']} seed {args.seed} {d:>5} {kind}: "
                  f"spread {100 * r['spread_reldiff']:.1f}% cos {r['spread_cos']:.3f} | held-out "
                  f"ctc {r['held']['ctc']:.3f} cer {r['held']['cer']:.3f} wer "
                  f"{r['held']['wer']:.3f} | train cer {r['train']['cer']:.3f} | "
                  f"{r['seconds']} s  {r['held']['examples'][0]}", flush=True)
            json.dump(dict(args=vars(args), tower=tower, cache_seconds=info["seconds"],
                           rows=rows), open(path, "w"), indent=1)


if __name__ == "__main__":
    main()
