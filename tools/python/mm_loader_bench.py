#!/usr/bin/env python3
"""Times train_mm_proxy.py's data loader on the CPU, one process (issue 35: is the loader what
bounds the proxy's step?):

    python3 tools/python/mm_loader_bench.py DATA [--n 64] [--fonts DIR ...] [--batch 16]

DATA: make_mm_data.py's folder after `plan` and `speech` (a few hundred utterances rendered are
enough; only rendered ones are timed). For N train items of each kind (the first N; rendering 1,
so the varied seeds run) it times Items.__getitem__ split into its parts (image: render_image,
image_inputs; audio: audio_samples, the feature extractor; both: the prompt's tokens), then
collate on a half-batch of BATCH items. Prints seconds per item (median and mean) and per
half-batch; the loader bounds a step when items x seconds / workers exceeds the step's time."""
import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_mm_data as mmd  # noqa: E402
import train_mm_proxy as tmp  # noqa: E402


def clock(f, *a, **k):
    t = time.perf_counter()
    r = f(*a, **k)
    return r, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16, help="half-batch for collate")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--fonts", action="append")
    args = ap.parse_args()
    fonts = mmd.font_roots(args.fonts)
    audio, images = tmp.load_items(args.data)
    tr_a = tmp.train_split(audio)
    tr_i = tmp.train_split(images)
    tok = tmp.make_tokenizer([i["text"] for i in tr_a + tr_i], args.vocab,
                             "/tmp/mm_loader_bench_tok.json")
    pr = tmp.Prompter(tok)
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
    fe = Gemma4AudioFeatureExtractor()
    n = min(args.n, len(tr_i), len(tr_a))
    parts = {k: [] for k in ("render_image", "image_inputs", "image_prompt", "image_item",
                             "audio_samples", "features", "audio_prompt", "audio_item")}
    ds_i = tmp.Items(tr_i, "image", args.data, fonts, pr, fe, 8)
    ds_a = tmp.Items(tr_a, "audio", args.data, fonts, pr, fe, 8)
    got = {"image": [], "audio": []}
    for k in range(n):
        it = dict(tr_i[k])
        it["shape"] = (it["shape"] + 7919) % (1 << 30)
        it["noise_seed"] = it.get("noise_seed", 0)
        img, t = clock(mmd.render_image, it, fonts)
        parts["render_image"].append(t)
        (pv, pp, ns), t = clock(tmp.image_inputs, img)
        parts["image_inputs"].append(t)
        _, t = clock(lambda: (pr.prompt("image", ns), pr.target(it["text"])))
        parts["image_prompt"].append(t)
        x, t = clock(mmd.audio_samples, tr_a[k], args.data)
        parts["audio_samples"].append(t)
        x = x.astype(np.float32) / 32768.0
        f, t = clock(fe, [x], return_tensors="np", padding="longest")
        parts["features"].append(t)
        _, t = clock(lambda: (pr.prompt("audio", tmp.audio_token_count(
            f["input_features_mask"][0])), pr.target(tr_a[k]["text"])))
        parts["audio_prompt"].append(t)
        r, t = clock(ds_i.__getitem__, len(tr_i) + k)  # rendering 1, as the loop above
        parts["image_item"].append(t)
        got["image"].append(r)
        r, t = clock(ds_a.__getitem__, len(tr_a) + k)
        parts["audio_item"].append(t)
        got["audio"].append(r)
    for k, v in parts.items():
        print(f"mm_loader_bench: {k:14s} median {1e3 * statistics.median(v):8.2f} ms  "
              f"mean {1e3 * statistics.mean(v):8.2f} ms  ({len(v)} items)")
    for kind in ("image", "audio"):
        b = got[kind][:args.batch]
        c, t = clock(tmp.collate, b)
        shapes = {k: tuple(v.shape) for k, v in c.items()}
        print(f"mm_loader_bench: collate {kind} x {len(b)}: {1e3 * t:.2f} ms {shapes}")
    sec = [i.get("seconds", 0) for i in tr_a[:n]]
    print(f"mm_loader_bench: audio clips {statistics.mean(sec):.2f} s mean, {max(sec):.2f} max")


if __name__ == "__main__":
    main()
