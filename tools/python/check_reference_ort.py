#!/usr/bin/env python3
"""Cross-checks HF reference dumps (make_reference.py) against onnxruntime running the package
itself, an independent third implementation: the package's embedding graph on the dump's
input_ids must give `embeds` / `per_layer_inputs`, and its decoder (no past, all positions)
must give `logits`, up to fp16 arithmetic (onnxruntime computes the fp16 package in fp16).

    python tools/python/check_reference_ort.py PACKAGE DUMP_DIR

Prints the relative error ||a-b|| / ||b|| per tensor and the logits' argmax agreement; exits 1
when a relative error exceeds 5e-2 or the argmax differs at more than one position in ten.
Why so loose: onnxruntime keeps every activation in fp16. HF itself run in fp16 (same weights
and constants) differs from its fp32 dump by up to 9e-2 at single positions and about 2.5e-2
overall on tiny2's 40-token case, and flips 2 of 40 near-tied argmaxes; this check catches
semantic differences (a wrong window, RoPE or constant gives errors of order 1), not rounding.
"""
import glob
import os
import sys

import numpy as np
import onnxruntime as ort


def rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b.astype(np.float64)), 1e-30))


def main():
    pkg, dumps = sys.argv[1], sys.argv[2]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    emb = ort.InferenceSession(os.path.join(pkg, "embedding", "model.onnx"), so,
                               providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(os.path.join(pkg, "decoder", "model.onnx"), so,
                               providers=["CPUExecutionProvider"])
    bad = 0
    for path in sorted(glob.glob(os.path.join(dumps, "*.npz"))):
        d = np.load(path)
        ids = d["input_ids"][None]
        S = ids.shape[1]
        feeds = {"input_ids": ids}
        for i in emb.get_inputs()[1:]:  # no image/audio features: zero rows
            feeds[i.name] = np.zeros((0, i.shape[1]), np.float16)
        embeds, ple = emb.run(None, feeds)
        dfeeds = {"inputs_embeds": embeds, "per_layer_inputs": ple,
                  "attention_mask": np.ones((1, S), np.int64)}
        for i in dec.get_inputs():
            if i.name.startswith("past_key_values"):
                dfeeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float16)
            elif i.name == "position_ids":
                dfeeds[i.name] = np.arange(S, dtype=np.int64)[None]
        logits = dec.run(["logits"], dfeeds)[0][0].astype(np.float32)
        res = {
            "embeds": rel(embeds[0].astype(np.float32), d["embeds"]),
            "per_layer_inputs": rel(ple[0].astype(np.float32).reshape(d["per_layer_inputs"].shape),
                                    d["per_layer_inputs"]),
            "logits": rel(logits, d["logits"]),
        }
        agree = float((logits.argmax(-1) == d["logits"].argmax(-1)).mean())
        ok = max(res.values()) <= 5e-2 and agree >= 0.9
        bad += not ok
        print(f"{os.path.basename(path)}: " + ", ".join(f"{k} rel {v:.2e}" for k, v in res.items())
              + f", argmax agree {agree:.3f} {'ok' if ok else 'FAIL'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
