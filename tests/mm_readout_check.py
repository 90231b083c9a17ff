#!/usr/bin/env python3
"""tests/test_mm_readout.sh's checks of tools/python/mm_audio_readout.py (issue 35) and
train_mm_proxy.scale_audio_residuals, on the CPU:
  1. hand-worked values: the transcript's labels ("Hello, world's end." -> "hello world's end",
     17 labels), a digit refused with a one-line error; CTC's frame need (a a: 3 frames, a b: 2);
     greedy decoding (repeats merged, blanks dropped: blank a a blank a b -> "aab"); the spread
     of (1, 0), (0, 1): relative difference sqrt(2), cosine 0;
  2. fit_depth on a cache it is given: 320 clips (256 train) of letter strings whose frames
     hold each character's one-hot (2 frames a character, a blank frame between, then a fixed random
     projection to 32 dims and noise): the linear read-out's held-out CER < 0.05; the same clips
     with frames that hold nothing of the labels (noise only): held-out CER > 0.5, so the read-out
     cannot pass on the labels' statistics alone;
  3. scale_audio_residuals on the ci preset's tower (seed 0, two layers): exactly the four
     residual-branch tensors of each layer are multiplied (by 1e-4: equal to the original x 1e-4
     elementwise, every other parameter unchanged); each layer's output then has per-frame
     cosine > 0.999 with its input (near identity) while at scale 1 the median cosine is < 0.9;
     x <= 0 is refused.
Prints one line per check and the count; exit 1 on the first failure."""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import mm_audio_readout as mr  # noqa: E402
import train_mm_proxy as tmp  # noqa: E402
from mm_items import Checks, check_tokenizer, fp32_model  # noqa: E402

CHECKS = Checks("mm_readout_check")
fail, expect = CHECKS.fail, CHECKS.expect


def check_values():
    lab = mr.labels_of("Hello, world's end.")
    want = [1 + mr.ALPHABET.index(c) for c in "hello world's end"]
    expect(lab == want and len(lab) == 17, f"labels {lab}")
    try:
        mr.labels_of("room 101")
        expect(False, "a digit in a transcript was accepted")
    except SystemExit as e:
        expect("outside" in str(e), f"the digit's error: {e}")
    expect(mr.tmp.ctc_fits(3, [1, 1]) and not mr.tmp.ctc_fits(2, [1, 1]), "ctc_fits a a")
    expect(mr.tmp.ctc_fits(2, [1, 2]) and not mr.tmp.ctc_fits(1, [1, 2]), "ctc_fits a b")
    a, b = 1 + mr.ALPHABET.index("a"), 1 + mr.ALPHABET.index("b")
    seq = [0, a, a, 0, a, b]
    lp = torch.full((6, 29), -10.0)
    lp[torch.arange(6), torch.tensor(seq)] = 0.0
    g = mr.greedy(lp, 6)
    expect(g == "aab", f"greedy {g!r}")
    expect(mr.greedy(lp, 3) == "a", "greedy reads only the valid frames")
    x = np.array([[1, 0], [1, 0], [0, 1]], dtype=np.float16)
    d, c = mr.spread(x, [0, 2, 3], [0, 1])
    expect(abs(d - 2 ** 0.5) < 1e-6 and abs(c) < 1e-6, f"spread {d} {c}")
    print(f"mm_readout_check: hand-worked labels, ctc_fits, greedy, spread: {CHECKS.n} checks")


def synthetic_cache(d, informative, seed=0):
    """OUT/cache as cache_features writes it, for 320 clips (256 train, 64 held out)."""
    r = np.random.default_rng(seed)
    proj = r.normal(0, 1, (29, 32))  # 32 >= 29 classes: linearly separable
    clips, frames = [], []
    for k in range(320):
        text = "".join(r.choice(list("abcdefgh "), int(r.integers(3, 9)))).strip() or "a"
        lab = mr.labels_of(text)
        onehot = []
        for c in lab:
            onehot += [c, c, 0]
        f = np.eye(29)[onehot] @ proj if informative else np.zeros((len(onehot), 32))
        f = f + r.normal(0, 0.3, f.shape)
        frames.append(f.astype(np.float16))
        clips.append(dict(split="train" if k < 256 else "test", text=text, id=f"c{k}",
                          rendering=0, frames=len(onehot)))
    os.makedirs(os.path.join(d, "cache"), exist_ok=True)
    np.save(os.path.join(d, "cache", "x.npy"), np.concatenate(frames))
    info = dict(clips=clips, depths=["x"], seconds=0.0)
    json.dump(info, open(os.path.join(d, "cache", "index.json"), "w"))
    return info


def check_fit():
    torch.set_num_threads(1)
    cer = {}
    for informative in (True, False):
        with tempfile.TemporaryDirectory() as d:
            info = synthetic_cache(d, informative)
            args = argparse.Namespace(out=d, seed=0, steps=400, lr=1e-2, batch=16, every=10 ** 9)
            r = mr.fit_depth(args, info, "x", "linear")
        cer[informative] = r["held"]["cer"]
        expect(r["held"]["clips"] == 64 and r["train_clips"] == 256,
               f"clips {r['held']['clips']} held out, {r['train_clips']} train")
    expect(cer[True] < 0.05, f"informative frames: held-out CER {cer[True]:.3f} >= 0.05")
    expect(cer[False] > 0.5, f"frames without the labels: held-out CER {cer[False]:.3f} <= 0.5")
    print(f"mm_readout_check: fit_depth linear: held-out CER {cer[True]:.3f} (frames hold the "
          f"labels), {cer[False]:.3f} (noise only)")


def layer_cos(model, feats, mask):
    """Per-frame cosine between each audio layer's input and output (all layers' frames)."""
    got = []
    hooks = [l.register_forward_hook(lambda m, i, o: got.append((i[0], o)))
             for l in model.model.audio_tower.layers]
    with torch.no_grad():
        model.model.audio_tower(feats, mask, return_dict=True)
    for h in hooks:
        h.remove()
    return torch.cat([torch.nn.functional.cosine_similarity(i, o, dim=-1).flatten()
                      for i, o in got])


def check_res_scale():
    tok = check_tokenizer(tmp, ["the cat sat", "open the door"])
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size(), a_layers=2)
    base = fp32_model(tmp, p, tok).eval()
    small = fp32_model(tmp, p, tok).eval()
    tmp.scale_audio_residuals(small, 1e-4)
    names = set()
    for k in range(2):
        for s in ("feed_forward1.post_layer_norm.weight", "norm_post_attn.weight",
                  "lconv1d.linear_end.linear.weight", "feed_forward2.post_layer_norm.weight"):
            names.add(f"model.audio_tower.layers.{k}.{s}")
    changed, exact = [], True
    for (n, a), b in zip(base.named_parameters(), small.parameters()):
        if n in names:
            exact = exact and torch.equal(b, a * 1e-4)
        elif not torch.equal(a, b):
            changed.append(n)
    expect(exact, "a residual-branch tensor is not the original x 1e-4")
    expect(not changed, f"scale_audio_residuals changed other tensors: {changed[:3]}")
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    r = np.random.default_rng(0)
    f = Gemma4AudioFeatureExtractor()([r.normal(0, 0.1, 16000).astype(np.float32)],
                                      return_tensors="pt", padding="longest")
    feats, mask = f["input_features"], f["input_features_mask"]
    c1 = layer_cos(base, feats, mask)
    cs = layer_cos(small, feats, mask)
    expect(float(cs.min()) > 0.999, f"scaled 1e-4: min per-frame cosine {float(cs.min()):.5f}")
    expect(float(c1.median()) < 0.9, f"scale 1: median cosine {float(c1.median()):.3f}")
    try:
        tmp.scale_audio_residuals(small, 0.0)
        expect(False, "scale 0 was accepted")
    except SystemExit as e:
        expect("--a-res-scale" in str(e), f"scale 0's error: {e}")
    print(f"mm_readout_check: scale_audio_residuals: {len(names)} tensors x 1e-4, the rest "
          f"unchanged; layer in/out cosine min {float(cs.min()):.5f} (scale 1: median "
          f"{float(c1.median()):.3f})")


def main():
    check_values()
    check_fit()
    check_res_scale()
    print(f"mm_readout_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
