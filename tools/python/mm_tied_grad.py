#!/usr/bin/env python3
"""How hard does each audio read-out head pull on the audio side? (issue 35; bench/NOTES.md
"Forty-second session: the tied head's pull"). A CPU measurement on the proxy preset at its
initialisation, one batch, no training: the norm of the gradient that each head's loss alone
sends into the audio side's parameters (the tower and embed_audio, train_mm_proxy.SIDES), for
the char head (AudioChars, --ctc-units chars --ctc-at embed) and the tied head (TiedCtcHead,
--ctc-tied) at each scale / centering asked. The two heads share that side, and AdamW
normalises each parameter's summed gradient, so the head with the larger pull sets its
direction.

  mm_tied_grad.py DATA [--clips N] [--seed S] [--preset P] [--tied SCALE:CENTER ...]

DATA: make_mm_data.py's folder after `speech` (its speech.jsonl and the rendered clips). The
model (--preset, the proxy's by default) is built as train_mm_proxy builds the run's
(build_model with the recipe's --a-res-scale 0.1, --v-pos-init 0.02, --v-proj-init 0.3), the
tokenizer from the plan's train sentences (--split-digits), the batch the first N train clips
collated as the trainer does (--pad-to 64). Each head's loss is per label, unweighted (the run
multiplies each by its weight, 0.5 and 0.5 in the recipe). One thread; ~1 minute at 16 clips
on this project's 2-core machine.
"""
import argparse
import math
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_mm_proxy as tmp  # noqa: E402


def side_grad_norm(loss, params):
    """The 2-norm of d loss / d params (params with no path to the loss count 0); the graph
    is kept for the next head's loss on the same forward."""
    grads = torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True)
    return math.sqrt(sum(float((g.float() ** 2).sum()) for g in grads if g is not None))


def tied_spec(s):
    """--tied SCALE:CENTER as (scale, centered); a bad one refused in one line."""
    scale, _, center = s.partition(":")
    try:
        v = float(scale)
    except ValueError:
        v = math.nan
    if not (center in ("0", "1") and math.isfinite(v) and v > 0):
        raise SystemExit(f"mm_tied_grad: --tied {s!r}: expected SCALE:CENTER, SCALE finite > 0, "
                         "CENTER 0 or 1")
    return v, center == "1"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("--clips", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", choices=sorted(tmp.PRESETS), default="proxy")
    ap.add_argument("--tied", action="append",
                    help="SCALE:CENTER (default 10:0 30:1 50:1 50:0)")
    args = ap.parse_args()
    tied = [tied_spec(t) for t in args.tied or ["10:0", "30:1", "50:1", "50:0"]]
    if args.clips < 1:
        raise SystemExit(f"mm_tied_grad: --clips {args.clips}: expected 1 or more")
    torch.set_num_threads(1)
    from transformers.models.gemma4.feature_extraction_gemma4 import \
        Gemma4AudioFeatureExtractor

    p = dict(tmp.PRESETS[args.preset])
    tr, _ = tmp.train_parts(tmp.mmd.read_jsonl(os.path.join(args.data, "speech.jsonl")))
    if len(tr) < args.clips:
        raise SystemExit(f"mm_tied_grad: {len(tr)} train clips in {args.data}, --clips "
                         f"{args.clips}")
    with tempfile.TemporaryDirectory() as d:
        tok = tmp.make_tokenizer([i["text"] for i in tr], p["vocab"],
                                 os.path.join(d, "tokenizer.json"), True)
    pr = tmp.Prompter(tok)
    torch.manual_seed(args.seed)
    model = tmp.build_model(p, tok, args.seed, 0.1, 0.02, None, 0.3)
    items = tmp.Items(tr, "audio", args.data, None, pr, Gemma4AudioFeatureExtractor(), 1)
    b = tmp.collate([items.render(k) for k in range(args.clips)], 64)
    side = [x for n, x in model.named_parameters() if n.startswith(tmp.SIDES["audio"])]
    heads = [("char", tmp.AudioChars(model, "embed", args.seed, tok, pr.id["<turn|>"]))]
    for scale, center in tied:
        heads.append((f"tied scale {scale:g}{' centered' if center else ''}",
                      tmp.TiedCtcHead(model, p["vocab"], args.seed, "audio", scale, center)))
    rows = []
    # one forward: every head's tap keeps its frames (as the trainer's warm step, where the
    # char and tied heads read the same forward), then each loss's own backward
    model.model.get_audio_features(b["input_features"], b["input_features_mask"])
    for name, head in heads:
        t = time.time()
        loss = head.loss(b["labels"])
        rows.append((name, float(loss.detach()), side_grad_norm(loss, side), time.time() - t))
    char = rows[0][2]
    print(f"mm_tied_grad: {args.clips} clips of {args.data}, the {args.preset} preset at init "
          f"(seed {args.seed}); |grad| over the audio side's {len(side)} tensors")
    for name, loss, g, s in rows:
        print(f"mm_tied_grad: {name:24s} loss {loss:8.3f} a label  |grad| {g:10.4g}  "
              f"x char {g / char:7.2f}  ({s:.1f} s)")


if __name__ == "__main__":
    main()
