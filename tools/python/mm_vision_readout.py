#!/usr/bin/env python3
"""What does the mm proxy's frozen random VISION tower keep of the glyphs? (issue 35; bench/
NOTES.md "What the random vision tower keeps of the glyphs"). The image twin of
mm_audio_readout.py, in two commands:

    python3 tools/python/mm_vision_readout.py decompose DATA OUT [--tower proxy|probe]
        [--seed 0] [--v-pos-init S] [--v-res-scale X] [--n 32] [--canvas 192x768]
    python3 tools/python/mm_vision_readout.py readout DATA OUT [tower options]
        [--n-train 1000] [--depths pixels,patch,L1,...,pooled,embed] [--steps N] [--threads 1]

DATA: make_mm_data.py's folder after `plan` (.carry/mmdata; images are rendered here by
make_mm_data.render_image through train_mm_proxy.Items, fonts under $G4_PREFIX/usr/share/fonts).
The tower: train_mm_proxy.model_config at the proxy preset (--tower proxy: 384 x 6) or at
mm_vision_probe's default shape (--tower probe: 128 x 2), the whole model built at --seed as
the trainer builds it; then the init options under test: --v-pos-init S
(train_mm_proxy.init_vision_positions: the patch position table drawn N(0, S) instead of
transformers' ones) and --v-res-scale X (train_mm_proxy.scale_vision_residuals).
Depths (features per patch, or per soft token for the last two):
  pixels  the patch's 768 pixel values as the patch embedder sees them (2 x (p - 0.5))
  patch   the patch embedder's output (input_proj + the x and y position embeddings)
  L1..Ln  after each encoder layer
  pooled  the pooler's output (3 x 3 patches averaged, x sqrt(D)): the tower's soft tokens
  embed   embed_vision's output (RMSNorm without scale, projection): what the decoder reads

decompose: --n held-out strings (the plan's test split, first --n) rendered at ONE canvas
(--canvas HxW, one of make_mm_data.fixed_sizes), so every image has the same grid of P
positions; each depth's X[i, p] (N x P x D) is split as a balanced two-way layout:
common c (the mean of all), position pos[p] (mean over images at p, minus c), image img[i]
(mean over the image's positions, minus c) and glyph (the rest). The four sums of squares add
up to sum |X|^2 (printed as a check); reported as shares, with visprobe's mean cosine of each
vector to the common mean. OUT/decompose.json.

readout: the plan's first --n-train train strings and its held-out strings (test split), each
in its planned rendering (its own canvas; --canvas HxW renders every image at that one, so the
glyphs' size varies less: 144x1056 gives 9 x 66 patches), cached once per depth (OUT/cache:
float16, every image's valid grid rows x columns x D). A small CTC read-out per depth reads
the string's characters (the plan's train characters, case and punctuation kept; blank +
those) along the horizontal order of the grid: the text is one line across the canvas, so a
column of patches is a slice of the line. The read-out (features standardised with the train
patches' mean and std): a 1 x 1 convolution to 96 channels, ReLU, a 3 x 3 convolution, ReLU
(it sees each patch with its neighbours: a glyph spans several rows), a max over the image's
rows, a k3 1-D convolution, ReLU, a k3 one at dilation 2, ReLU, and a linear map to K frames
x classes a column (K = 2 at the patch grid, 6 at the 3 x 3-pooled one: the same 2 frames per
16 pixels, enough for CTC on the densest strings). Trained with mm_probe.train_ctc (AdamW,
warm-up, cosine; batch 16; fixed steps, no selection on held-out strings; --readout-seed its
init and draw order). Reports per depth: held-out CTC per label, greedy CER (the strings as
written) and exact share, train CER (200 train strings). OUT/readout.json. Measured (bench/
NOTES.md): at 1,200 strings and 1,500 steps it does not read even the pixels (CER ~0.97; the
same features at two read-out seeds 0.74 / 0.99), so it ranks no init; and being
standardised it cannot see a constant common vector, which the decoder does.
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
import mm_vision_probe  # noqa: E402
import train_mm_proxy as tmp  # noqa: E402

def build_tower(args):
    """(model, prompter, p): the whole model as train_mm_proxy (proxy) or mm_vision_probe
    (probe) builds it at args.seed, then the init options."""
    images = tmp.mmd.read_jsonl(os.path.join(args.data, "images.jsonl"))
    speech = tmp.mmd.read_jsonl(os.path.join(args.data, "speech.jsonl"))
    texts = [i["text"] for i in tmp.train_split(speech + images)]
    os.makedirs(args.out, exist_ok=True)
    p = dict(tmp.PRESETS["proxy"])
    if args.tower == "probe":
        p.update(mm_vision_probe.probe_shape(**mm_vision_probe.TOWER))
    elif args.tower != "proxy":
        raise SystemExit(f"mm_vision_readout: --tower {args.tower}: proxy or probe")
    tok = tmp.make_tokenizer(texts, p["vocab"], os.path.join(args.out, "tokenizer.json"))
    torch.manual_seed(args.seed)
    model = tmp.build_model(p, tok, args.seed, v_pos_init=args.v_pos_init,
                            v_res_scale=args.v_res_scale)
    model.eval()
    return model, tmp.Prompter(tok), p


def depth_names(model):
    n = len(model.model.vision_tower.encoder.layers)
    return ["pixels", "patch"] + [f"L{k + 1}" for k in range(n)] + ["pooled", "embed"]


def features(model, pv, pp):
    """{depth: rows x cols x D} of one image (pv 630 x 768, pp 630 x 2 as image_inputs gives),
    its valid patches only; patch-level depths on the patch grid, pooled / embed on the 3 x 3
    soft-token grid (both row-major, as the pooler orders them)."""
    m = model.model
    vt, got = m.vision_tower, {}
    hooks = [vt.patch_embedder.register_forward_hook(lambda mod, i, o: got.__setitem__("patch", o)),
             vt.pooler.register_forward_hook(lambda mod, i, o: got.__setitem__("pooled", o[0]))]
    for n, layer in enumerate(vt.encoder.layers):
        hooks.append(layer.register_forward_hook(
            lambda mod, i, o, n=n: got.__setitem__(f"L{n + 1}", o)))
    try:
        x, pos = torch.from_numpy(pv)[None], torch.from_numpy(pp)[None]
        out = vt(pixel_values=x, pixel_position_ids=pos).last_hidden_state
        got["embed"] = m.embed_vision(out[None])[0]
    finally:
        for h in hooks:
            h.remove()
    valid = (pp >= 0).all(-1)
    n = int(valid.sum())
    if not valid[:n].all():
        raise SystemExit("mm_vision_readout: the valid patches are not a prefix")
    cols, rows = int(pp[:n, 0].max()) + 1, int(pp[:n, 1].max()) + 1
    if rows * cols != n or rows % 3 or cols % 3:
        raise SystemExit(f"mm_vision_readout: {n} patches are not a {rows} x {cols} grid of 3s")
    got["pixels"] = 2 * (x - 0.5)
    res = {}
    for d, v in got.items():
        v = v[0] if v.dim() == 3 else v
        if d in ("pooled", "embed"):
            k = rows * cols // 9
            if d == "pooled" and not bool((v[k:] == 0).all()):
                raise SystemExit("mm_vision_readout: the pooler wrote past the image's soft tokens")
            res[d] = v[:k].reshape(rows // 3, cols // 3, -1)
        else:
            res[d] = v[:n].reshape(rows, cols, -1)
    return res


def decompose_terms(X):
    """X: N x P x D (float64). The balanced two-way split's sums of squares and shares, and
    the mean cosine of each vector to the common mean."""
    c = X.mean((0, 1))
    pos = X.mean(0) - c
    img = X.mean(1) - c
    rest = X - c - pos[None] - img[:, None]
    N, P = X.shape[:2]
    ss = dict(total=float((X ** 2).sum()), common=float(N * P * (c ** 2).sum()),
              position=float(N * (pos ** 2).sum()), image=float(P * (img ** 2).sum()),
              glyph=float((rest ** 2).sum()))
    cos = torch.nn.functional.cosine_similarity(X.reshape(-1, X.shape[-1]), c[None], dim=-1)
    parts = ss["common"] + ss["position"] + ss["image"] + ss["glyph"]
    return dict(ss, shares={k: ss[k] / ss["total"] for k in ("common", "position", "image",
                                                             "glyph")},
                sum_check=parts / ss["total"], cos_to_mean=float(cos.mean()),
                rms=float((ss["total"] / (N * P * X.shape[-1])) ** 0.5))


def check_canvas(spec):
    h, w = (int(v) for v in spec.split("x"))
    if (h, w) not in tmp.mmd.fixed_sizes():
        raise SystemExit(f"mm_vision_readout: --canvas {spec}: not one of "
                         f"{tmp.mmd.fixed_sizes()}")
    return h, w


def decompose(args):
    model, pr, p = build_tower(args)
    h, w = check_canvas(args.canvas)
    images = tmp.mmd.read_jsonl(os.path.join(args.data, "images.jsonl"))
    te = [dict(i, canvas=(h, w)) for i in images if i["split"] == "test"][:args.n]
    if len(te) < args.n:
        raise SystemExit(f"mm_vision_readout: {len(te)} held-out images < --n {args.n}")
    ds = tmp.Items(te, "image", args.data, tmp.mmd.font_roots(args.fonts), pr, None, 1)
    feats = {}
    with torch.no_grad():
        for k in range(len(te)):
            it = ds.render(k)
            for d, v in features(model, it["pv"], it["pp"]).items():
                feats.setdefault(d, []).append(v.reshape(-1, v.shape[-1]).double())
    rows = {}
    for d in depth_names(model):
        r = decompose_terms(torch.stack(feats[d]))
        rows[d] = r
        s = r["shares"]
        print(f"{args.tower} {p['v_hidden']}x{p['v_layers']} pos {args.v_pos_init} res "
              f"{args.v_res_scale} {d:>6}: common {100 * s['common']:5.1f}% position "
              f"{100 * s['position']:5.1f}% image {100 * s['image']:5.1f}% glyph "
              f"{100 * s['glyph']:5.1f}% | cos to mean {r['cos_to_mean']:.3f} rms {r['rms']:.3f}"
              f" (sum {r['sum_check']:.6f})", flush=True)
    json.dump(dict(args=vars(args), rows=rows), open(os.path.join(args.out, "decompose.json"),
                                                      "w"), indent=1)


# --- read-out -------------------------------------------------------------------------------
def cache_features(args, model, pr, depths):
    """Renders the train and held-out strings (planned rendering), runs the tower once an image
    and writes OUT/cache/<depth>.npy (float16, each image's grid rows x cols flattened in
    order) and OUT/cache/index.json (per image: split, text, id, rows and cols at the patch
    grid)."""
    cdir = os.path.join(args.out, "cache")
    if os.path.exists(os.path.join(cdir, "index.json")):
        return json.load(open(os.path.join(cdir, "index.json")))
    os.makedirs(cdir, exist_ok=True)
    images = tmp.mmd.read_jsonl(os.path.join(args.data, "images.jsonl"))
    tr = tmp.train_split(images)[:args.n_train]
    te = [i for i in images if i["split"] == "test"][:args.n_test or None]
    if len(tr) < args.n_train or not te:
        raise SystemExit(f"mm_vision_readout: {len(tr)} train / {len(te)} held-out images in "
                         f"{args.data} (--n-train {args.n_train})")
    if args.canvas:  # every image at one canvas (the glyphs' scale varies less)
        h, w = check_canvas(args.canvas)
        tr, te = [dict(i, canvas=(h, w)) for i in tr], [dict(i, canvas=(h, w)) for i in te]
    feats, index, t0 = {d: [] for d in depths}, [], time.time()
    ds = tmp.Items(tr + te, "image", args.data, tmp.mmd.font_roots(args.fonts), pr, None, 1)
    with torch.no_grad():
        for k, (split, it) in enumerate([("train", i) for i in tr] + [("test", i) for i in te]):
            r = ds.render(k)
            f = features(model, r["pv"], r["pp"])
            for d in depths:
                feats[d].append(f[d].reshape(-1, f[d].shape[-1]).numpy().astype(np.float16))
            rows, cols = f["patch"].shape[:2]
            index.append(dict(split=split, text=it["text"], id=it["id"], rows=rows, cols=cols))
            if k % 200 == 0:
                print(f"cache {k + 1}/{len(tr) + len(te)} {time.time() - t0:.0f} s", flush=True)
    for d in depths:
        np.save(os.path.join(cdir, f"{d}.npy"), np.concatenate(feats[d]))
    info = dict(images=index, depths=depths, seconds=round(time.time() - t0, 1))
    json.dump(info, open(os.path.join(cdir, "index.json"), "w"))
    return info


class Readout(torch.nn.Module):
    """Per patch 1 x 1 conv to H, ReLU, 3 x 3 conv, ReLU, max over the valid rows, k3 1-D conv,
    ReLU, k3 dilation 2, ReLU, linear to K frames x classes a column (module docstring)."""

    def __init__(self, dim, classes, frames, hidden=96):
        super().__init__()
        self.k, self.classes = frames, classes
        self.grid = torch.nn.Sequential(torch.nn.Conv2d(dim, hidden, 1), torch.nn.ReLU(),
                                        torch.nn.Conv2d(hidden, hidden, 3, padding=1),
                                        torch.nn.ReLU())
        self.line = torch.nn.Sequential(torch.nn.Conv1d(hidden, hidden, 3, padding=1),
                                        torch.nn.ReLU(),
                                        torch.nn.Conv1d(hidden, hidden, 3, padding=2,
                                                        dilation=2), torch.nn.ReLU(),
                                        torch.nn.Conv1d(hidden, frames * classes, 1))

    def forward(self, x, rows):  # x: B x R x C x D, rows: valid rows per image
        h = self.grid(x.permute(0, 3, 1, 2))  # B x H x R x C
        pad = torch.arange(h.shape[2])[None, :] >= torch.tensor(rows)[:, None]  # B x R
        h = h.masked_fill(pad[:, None, :, None], float("-inf")).amax(2)
        y = self.line(h)  # B x K*classes x C
        B, _, C = y.shape
        y = y.reshape(B, self.k, self.classes, C).permute(3, 1, 0, 2).reshape(C * self.k, B, -1)
        return torch.log_softmax(y, -1)  # T x B x classes, T = C * K (column-major frames)


def fit_depth(args, info, depth, alphabet):
    x = np.load(os.path.join(args.out, "cache", f"{depth}.npy"), mmap_mode="r")
    ims = info["images"]
    g = 3 if depth in ("pooled", "embed") else 1
    shape = [(c["rows"] // g, c["cols"] // g) for c in ims]
    offs = np.concatenate([[0], np.cumsum([r * c for r, c in shape])]).tolist()
    if offs[-1] != len(x):
        raise SystemExit(f"mm_vision_readout: {depth}.npy has {len(x)} rows, the index {offs[-1]}")
    tr = [k for k, c in enumerate(ims) if c["split"] == "train"]
    te = [k for k, c in enumerate(ims) if c["split"] == "test"]
    xt = torch.from_numpy(np.asarray(x, dtype=np.float32))
    trf = xt[:offs[tr[-1] + 1]]
    mu, sd = trf.mean(0), trf.std(0).clamp_min(1e-6)
    xt = (xt - mu) / sd
    K = 2 * g
    labs = [[1 + alphabet.index(ch) for ch in c["text"]] for c in ims]
    usable = [k for k in tr if tmp.ctc_fits(shape[k][1] * K, labs[k])]

    def batch(idx):
        R, C = max(shape[k][0] for k in idx), max(shape[k][1] for k in idx)
        b = torch.zeros(len(idx), R, C, xt.shape[1])
        for r, k in enumerate(idx):
            b[r, :shape[k][0], :shape[k][1]] = xt[offs[k]:offs[k + 1]].reshape(*shape[k], -1)
        return b, [shape[k][0] for k in idx]

    def evaluate(idx):
        net.eval()
        loss, fit, refs, hyps = 0.0, 0, [], []
        with torch.no_grad():
            for s in range(0, len(idx), 16):
                part = idx[s:s + 16]
                lp = net(*batch(part))
                for r, k in enumerate(part):
                    n = shape[k][1] * K
                    refs.append(ims[k]["text"])
                    hyps.append(mm_probe.ctc_greedy(lp[:, r], n, alphabet))
                    if tmp.ctc_fits(n, labs[k]):
                        c = torch.nn.functional.ctc_loss(
                            lp[:n, r:r + 1], torch.tensor([labs[k]]), [n], [len(labs[k])],
                            blank=0, reduction="sum")
                        loss, fit = loss + c.item() / len(labs[k]), fit + 1
        net.train()
        return dict(ctc=loss / max(1, fit), cer=mm_probe.cer(refs, hyps), fit=fit,
                    exact=sum(a == b for a, b in zip(refs, hyps)), images=len(idx),
                    examples=list(zip(refs, hyps))[:4])

    rs = args.seed if getattr(args, "readout_seed", None) is None else args.readout_seed
    torch.manual_seed(rs)
    net = Readout(xt.shape[1], 1 + len(alphabet), K)
    rng = np.random.default_rng(rs)
    t0, curve = time.time(), []

    def draw(step):
        idx = [usable[i] for i in rng.choice(len(usable), args.batch, replace=False)]
        b, rows = batch(idx)
        return (net(b, rows), torch.cat([torch.tensor(labs[k]) for k in idx]),
                [shape[k][1] * K for k in idx], [len(labs[k]) for k in idx])

    def probe(step, run):
        e = evaluate(te[:64])
        curve.append(dict(step=step, train_ctc=float(np.mean(run[-50:])), cer64=e["cer"]))
        print(f"  {depth} step {step} train ctc {np.mean(run[-50:]):.3f} held-out (64) cer "
              f"{e['cer']:.3f} {time.time() - t0:.0f} s", flush=True)

    run = mm_probe.train_ctc(net, draw, args.steps, args.lr, args.every, probe)
    return dict(depth=depth, dim=int(xt.shape[1]), steps=args.steps, lr=args.lr,
                train_ctc_run=float(np.mean(run[-50:])), held=evaluate(te),
                train=evaluate(tr[:200]), curve=curve, train_used=len(usable),
                train_images=len(tr), seconds=round(time.time() - t0))


def readout(args):
    model, pr, p = build_tower(args)
    names = depth_names(model)
    depths = args.depths.split(",") if args.depths else names
    bad = [d for d in depths if d not in names]
    if bad:
        raise SystemExit(f"mm_vision_readout: --depths {bad}: not among {names}")
    info = cache_features(args, model, pr, depths)
    del model
    images = tmp.mmd.read_jsonl(os.path.join(args.data, "images.jsonl"))
    alphabet = sorted({ch for i in images if i["split"] == "train" for ch in i["text"]})
    unseen = sorted({ch for c in info["images"] for ch in c["text"]} - set(alphabet))
    if unseen:
        raise SystemExit(f"mm_vision_readout: characters {unseen} of the cached strings are not "
                         "in the train strings' alphabet")
    path = os.path.join(args.out, "readout.json")
    rows = json.load(open(path))["rows"] if os.path.exists(path) else []
    done = {r["depth"] for r in rows}
    tower = dict(tower=args.tower, seed=args.seed, v_hidden=p["v_hidden"],
                 v_layers=p["v_layers"], v_pos_init=args.v_pos_init, v_res_scale=args.v_res_scale)
    for d in depths:
        if d in done:
            continue
        r = fit_depth(args, info, d, alphabet)
        rows.append(r)
        print(f"{args.tower} {p['v_hidden']}x{p['v_layers']} pos {args.v_pos_init} res "
              f"{args.v_res_scale} {d:>6}: held-out ctc {r['held']['ctc']:.3f} cer "
              f"{r['held']['cer']:.3f} exact {r['held']['exact']}/{r['held']['images']} | train "
              f"cer {r['train']['cer']:.3f} | {r['seconds']} s  {r['held']['examples'][:2]}",
              flush=True)
        json.dump(dict(args=vars(args), tower=tower, alphabet="".join(alphabet),
                       cache_seconds=info["seconds"], rows=rows), open(path, "w"), indent=1)


def add_tower_args(ap):
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--tower", default="proxy", help="proxy (the preset's) or probe (its shape)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--v-pos-init", type=float,
                    help="position table ~ N(0, S) (train_mm_proxy.init_vision_positions)")
    ap.add_argument("--v-res-scale", type=float,
                    help="residual branches x X (train_mm_proxy.scale_vision_residuals)")
    ap.add_argument("--fonts", action="append", help="fonts root (make_mm_data.py's)")
    ap.add_argument("--threads", type=int, default=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("decompose")
    add_tower_args(d)
    d.add_argument("--n", type=int, default=32)
    d.add_argument("--canvas", default="192x768")
    r = sub.add_parser("readout")
    add_tower_args(r)
    r.add_argument("--n-train", type=int, default=1000)
    r.add_argument("--n-test", type=int, default=0, help="held-out images (0: all)")
    r.add_argument("--depths", help="comma list (default: every depth)")
    r.add_argument("--canvas", help="HxW: every image at this canvas (default: its planned one)")
    r.add_argument("--steps", type=int, default=800)
    r.add_argument("--lr", type=float, default=2e-3)
    r.add_argument("--batch", type=int, default=16)
    r.add_argument("--readout-seed", type=int,
                   help="the read-out's init and draw order (default --seed, the tower's)")
    r.add_argument("--every", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.cmd == "decompose":
        decompose(args)
    else:
        readout(args)


if __name__ == "__main__":
    main()
