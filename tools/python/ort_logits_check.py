#!/usr/bin/env python3
"""onnxruntime (CPU provider) runs a package's embedding and decoder graphs on token ids (no past,
every position) and compares its logits with g4cu's (`g4cu logits ... --out OURS.npy`).

    python tools/python/ort_logits_check.py PKG IDS OURS.npy [--far OTHER.npy] [--rms R] [--max M]
                                            [--top1 T] [--far-ratio F]

IDS: comma-separated ids. Prints one line: RMS and max |ours - onnxruntime|, the logits' RMS,
top-1 agreement, and with --far the RMS distance from onnxruntime's logits to OTHER (another
package's logits: the comparison must tell packages apart, RMS <= F x that distance). Exits 1
when a bound fails (NaN fails every bound), 2 when onnxruntime cannot load or run the package.
"""
import argparse
import os
import sys

import numpy as np
import onnxruntime as ort


def run(pkg, ids):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    cpu = ["CPUExecutionProvider"]
    emb = ort.InferenceSession(os.path.join(pkg, "embedding", "model.onnx"), so, providers=cpu)
    dec = ort.InferenceSession(os.path.join(pkg, "decoder", "model.onnx"), so, providers=cpu)
    x = np.array([ids], dtype=np.int64)
    feeds = {"input_ids": x}
    for i in emb.get_inputs():
        if i.name != "input_ids":  # no image / audio features
            feeds[i.name] = np.zeros((0, i.shape[-1]), np.float16)
    embeds, ple = emb.run(["inputs_embeds", "per_layer_inputs"], feeds)
    s = x.shape[1]
    f = {"inputs_embeds": embeds, "per_layer_inputs": ple, "attention_mask": np.ones((1, s), np.int64)}
    for i in dec.get_inputs():
        if i.name.startswith("past_key_values"):
            f[i.name] = np.zeros((1, i.shape[1], 0, i.shape[-1]), np.float16)
        elif i.name == "position_ids":
            f[i.name] = np.arange(s, dtype=np.int64)[None]
    return dec.run(["logits"], f)[0][0].astype(np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pkg")
    ap.add_argument("ids")
    ap.add_argument("ours")
    ap.add_argument("--far")
    ap.add_argument("--rms", type=float, default=0.02)
    ap.add_argument("--max", type=float, default=0.1)
    ap.add_argument("--top1", type=float, default=0.9)
    ap.add_argument("--far-ratio", type=float, default=0.1)
    a = ap.parse_args()
    ids = [int(t) for t in a.ids.split(",")]
    try:
        ref = run(a.pkg, ids)
    except Exception as e:  # noqa: BLE001 (any load / run failure is the finding)
        print(f"onnxruntime cannot run {a.pkg}: {e}")
        sys.exit(2)
    ours = np.load(a.ours).astype(np.float64).reshape(ref.shape)
    d = ours - ref
    rms, mx = float(np.sqrt(np.mean(d * d))), float(np.max(np.abs(d)))
    top1 = float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
    line = (f"{os.path.basename(a.pkg.rstrip('/'))}: {ref.shape[0]} x {ref.shape[1]} logits (RMS "
            f"{np.sqrt(np.mean(ref * ref)):.3f}); ours - onnxruntime RMS {rms:.4g} (<= {a.rms}), max "
            f"{mx:.4g} (<= {a.max}), top-1 agreement {top1:.3f} (>= {a.top1})")
    ok = rms <= a.rms and mx <= a.max and top1 >= a.top1
    if a.far:
        o = np.load(a.far).astype(np.float64).reshape(ref.shape)
        far = float(np.sqrt(np.mean((o - ref) ** 2)))
        line += f"; distance to {os.path.basename(a.far)} RMS {far:.4g} (ours within {a.far_ratio}x)"
        ok = ok and rms <= a.far_ratio * far
    print(line + ("" if ok else "  FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
