#!/usr/bin/env python3
"""Where a g4cu answer leaves HF's (issue 35's ASR parity): each item teacher-forced on g4cu's own
answer, by HF and by `g4cu logits` on each backend, row by row.

    python3 tools/python/mm_logits_check.py --hf PROXY/hf --package PROXY/f16 --data DATA \\
        --preds EVAL/predictions.jsonl [--parity parity.json] [--items 8] \\
        [--backend cuda --backend cpu] [--decode] [--json F]

Items, up to --items: with --parity, its real disagreements first (mm_parity.py's ASR or OCR
mismatches that are not near ties), then its near ties; then the other items of --preds in
order. For each:
the prompt (mm_parity.item_inputs: train_mm_proxy's prompt, the media as HF reads them) followed by
g4cu's answer tokens but the last, so row j of the answer predicts answer token j. HF
(Gemma4ForConditionalGeneration, float32, no cache) and `g4cu logits PKG --ids ... --image/--audio
F --backend B` give the logits of every row; on the answer rows the tool reports per backend:
  rel      ||g4cu - HF|| / ||HF|| over the answer rows (compare's rel err measure)
  max_abs  the largest |g4cu - HF| of a logit on those rows
  own      answer rows where g4cu's teacher-forced argmax is not the token g4cu's eval chose
           there: the eval's generation (its decode steps) differs from its own prefill
  hf       answer rows where g4cu's teacher-forced argmax is not HF's
and per item the first row where HF's argmax is not g4cu's token (HF would have gone elsewhere),
HF's logit gap there, and g4cu's (this backend's) gap between the same two tokens.
Reading: own > 0 on a backend: its decode path, not its prefill, leaves HF; own == 0 and hf > 0:
the prefill itself (the media path or a length's kernels) leaves HF at that row.
--decode: each backend's call is `g4cu logits --decode-from P --prefill-out F --step-out F` (P
the prompt's length: generate's prompt prefill, then each answer token one decode step, the path
`g4cu eval` takes; its prefill, written beside, gives the measures above), and per backend:
  dec_rel  ||decode - prefill|| / ||prefill|| over the answer rows, this backend's own prefill
           (row P - 1 as generate's last prompt step computes it, the later rows decode steps)
  dec_max_abs  the largest |decode - prefill| there
  dec_pf   answer rows where the decode argmax is not the prefill's
  dec_own  answer rows where the decode argmax is not the token the eval chose (0: the tool
           reproduces the eval's generation; dec_pf > 0 with it: the decode path is the cause)
  dec_first  the first row where decode and prefill argmax differ, with the prefill's gap
           between the two tokens there (dec_first_gap)
  dec_sample  answer rows where the id the step sampled (the device sample op, greedy) is not
           the argmax of the row it capped (0: the sample op is not it)
--no-hf (with --decode: an A/B of the decode path under another environment, tools/gpu/run.sh
mm_deccheck): HF's model is not loaded (only its tokenizer and the feature extractor, for the
prompts); the HF measures (rel, max_abs, hf, HF's leaving row) are left out, the rest stay.
--text-only (with --no-hf): each prompt without its media block (<|audio> ... <audio|>, or the
image's), no media file to g4cu, the same answer tokens after it: the decode measures on a
text-only context of the same model (own and dec_own then compare with an eval that saw the
media: read dec_rel and dec_pf only).
Exit 0 when every backend's own and hf (and with --decode dec_pf and dec_own) are 0 on every
item, else 1 (2 on a failed g4cu call).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mm_parity  # noqa: E402


def pick_items(preds, parity, n):
    """The ids to check: parity's real disagreements, its near ties, then preds' order."""
    order = []
    if parity:
        rep = json.load(open(parity))
        for near in (False, True):
            for task in ("asr", "ocr"):
                order += [m["id"] for m in rep.get(task, {}).get("mismatches", [])
                          if bool(m.get("near_tie")) == near]
    order += list(preds)  # then the agreeing items, in the predictions' order
    seen = []
    for i in order:
        if i in preds and i not in seen:
            seen.append(i)
    return seen[:n]


def g4cu_logits(g4cu, pkg, ids, media, backend, tmpdir, decode_from=0):
    """The prefill's logits [rows, V] (media: (flag, path) or ()); with decode_from, (prefill,
    decode, step row [V]) from one `g4cu logits --decode-from` call (the package loaded once)."""
    out = os.path.join(tmpdir, f"logits_{backend}.npy")
    cmd = [g4cu, "logits", pkg, "--ids", ",".join(map(str, ids)), *media,
           "--backend", backend, "--out", out]
    pf = os.path.join(tmpdir, f"prefill_{backend}.npy")
    step = os.path.join(tmpdir, f"step_{backend}.npy")
    smp = os.path.join(tmpdir, f"sampled_{backend}.npy")
    if decode_from:
        cmd += ["--decode-from", str(decode_from), "--prefill-out", pf, "--step-out", step,
                "--sampled-out", smp]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"g4cu logits ({backend}) exit {r.returncode}: "
                           f"{r.stderr.strip()[-500:]}")
    if not decode_from:
        return np.load(out).astype(np.float64)
    return (np.load(pf).astype(np.float64), np.load(out).astype(np.float64),
            np.load(step).astype(np.float64)[0], np.load(smp)[:, 0].astype(np.int64))


def decode_measures(pf, dec, ans, sampled=None):
    """dec_* of decode rows dec [len(ans), V] (the eval's path) against the prefill's pf;
    sampled: the id each of those steps sampled."""
    pa, da = pf.argmax(-1), dec.argmax(-1)
    diff = [j for j in range(len(ans)) if pa[j] != da[j]]
    r = dict(dec_rel=float(np.linalg.norm(dec - pf) / np.linalg.norm(pf)),
             dec_max_abs=float(np.abs(dec - pf).max()),
             dec_pf=len(diff),
             dec_own=int(sum(da[j] != ans[j] for j in range(len(ans)))))
    if sampled is not None:
        r["dec_sample"] = int(sum(sampled[j] != da[j] for j in range(len(ans))))
    if diff:
        j = diff[0]
        r.update(dec_first=j, dec_first_gap=float(pf[j, pa[j]] - pf[j, da[j]]))
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf", required=True)
    ap.add_argument("--package", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--preds", required=True, help="g4cu eval predictions.jsonl (ocr or asr)")
    ap.add_argument("--parity", help="mm_parity.py --json's report: its mismatches first")
    ap.add_argument("--items", type=int, default=8)
    ap.add_argument("--backend", action="append", choices=("cpu", "cuda"))
    ap.add_argument("--g4cu", default="build-gpu/g4cu")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--decode", action="store_true",
                    help="also run each answer token as a decode step (g4cu logits --decode-from)")
    ap.add_argument("--no-hf", action="store_true",
                    help="--decode only: skip HF's forward (and its model), keep the g4cu measures")
    ap.add_argument("--text-only", action="store_true",
                    help="--no-hf only: the prompts without their media block (decode measures)")
    ap.add_argument("--json")
    args = ap.parse_args()
    backends = args.backend or ["cuda", "cpu"]
    if args.no_hf and not args.decode:
        ap.error("--no-hf needs --decode (without HF the decode measures are all there is)")
    if args.text_only and not args.no_hf:
        ap.error("--text-only needs --no-hf (HF would read another prompt)")
    dev = torch.device(args.device)
    # (--no-hf: the prompts only, the tokenizer's Prompter and the feature extractor)
    dtype = torch.float32
    model, _, pr, fe = mm_parity.hf_side(args.hf, dev, dtype, load_model=not args.no_hf)
    items = {}
    for name in ("ocr_test.jsonl", "asr_test.jsonl"):
        path = os.path.join(args.data, name)
        if os.path.exists(path):
            for line in open(path):
                it = json.loads(line)
                items[it["id"]] = it
    preds = {}
    for line in open(args.preds):
        if line.strip():
            p = json.loads(line)
            preds[p["id"]] = p
    ids_to_check = pick_items(preds, args.parity, args.items)
    report, ok = [], True
    with tempfile.TemporaryDirectory() as tdir:
        for i in ids_to_check:
            it, p = items[i], preds[i]
            prompt, extra = mm_parity.item_inputs(it, args.data, pr, fe, dev, dtype)
            ans = list(p.get("tokens", []))
            if not ans:
                continue
            if args.text_only:  # the media block out: begin id through end id
                kind = "image" if "image" in it else "audio"
                a = prompt.index(pr.id[f"<|{kind}>"])
                prompt = prompt[:a] + prompt[prompt.index(pr.id[f"<{kind}|>"]) + 1:]
            seq = prompt + ans[:-1]
            rows = slice(len(prompt) - 1, len(seq))  # row j of these predicts ans[j]
            h = leave = None
            if model is not None:
                x = torch.tensor([seq], device=dev)
                with torch.no_grad():
                    h = model(input_ids=x, attention_mask=torch.ones_like(x), **extra).logits[0]
                h = h.double().cpu().numpy()[rows]
                h_arg = h.argmax(-1)
                leave = next((j for j in range(len(ans)) if h_arg[j] != ans[j]), None)
            rec = dict(id=i, prompt_tokens=len(prompt), answer=len(ans), hf_leaves_at=leave)
            if leave is not None:
                a, b = int(h_arg[leave]), int(ans[leave])
                rec.update(hf_token=a, g4cu_token=b, hf_gap=float(h[leave, a] - h[leave, b]))
            media = ("--image", os.path.join(args.data, it["image"])) if "image" in it else \
                    ("--audio", os.path.join(args.data, it["audio"]))
            if args.text_only:
                media = ()
            for be in backends:
                try:
                    g = g4cu_logits(args.g4cu, args.package, seq, media, be, tdir,
                                    len(prompt) if args.decode else 0)
                    if args.decode:
                        g, dec, step, smp = g
                except RuntimeError as e:
                    print(f"mm_logits_check: {i}: {e}")
                    return 2
                if g.shape[0] != len(seq):
                    print(f"mm_logits_check: {i}: g4cu logits ({be}) has {g.shape[0]} rows for "
                          f"{len(seq)} ids")
                    return 2
                g = g[rows]
                g_arg = g.argmax(-1)
                r = dict(own=int(sum(g_arg[j] != ans[j] for j in range(len(ans)))))
                if h is not None:
                    r.update(rel=float(np.linalg.norm(g - h) / np.linalg.norm(h)),
                             max_abs=float(np.abs(g - h).max()), hf=int((g_arg != h_arg).sum()))
                if leave is not None:
                    a, b = rec["hf_token"], rec["g4cu_token"]
                    r["gap_at_leave"] = float(g[leave, a] - g[leave, b])
                if args.decode:  # the eval's rows: the prompt step's, then the decode steps'
                    d = np.concatenate([step[None, :], dec[len(prompt):]])
                    r.update(decode_measures(g, d, ans, smp[len(prompt) - 1:]))
                    ok &= r["dec_pf"] == 0 and r["dec_own"] == 0
                rec[be] = r
                ok &= r["own"] == 0 and r.get("hf", 0) == 0
            report.append(rec)
            line = (f"mm_logits_check {i}: prompt {len(prompt)}, answer {len(ans)} tokens; HF "
                    + ("not run" if h is None else "keeps g4cu's answer" if leave is None else
                       f"leaves at {leave} ({rec['hf_token']} over {rec['g4cu_token']} by "
                       f"{rec['hf_gap']:.4g})"))
            for be in backends:
                r = rec[be]
                line += (f"; {be}: own {r['own']}" if h is None else
                         f"; {be}: rel {r['rel']:.3g}, max abs {r['max_abs']:.3g}, own {r['own']}, "
                         f"hf {r['hf']}" + (f", gap there {r['gap_at_leave']:.4g}"
                                            if "gap_at_leave" in r else ""))
                if args.decode:
                    line += (f"; {be} decode: dec_rel {r['dec_rel']:.3g}, max abs "
                             f"{r['dec_max_abs']:.3g}, dec_pf {r['dec_pf']}, "
                             f"dec_own {r['dec_own']}, dec_sample {r['dec_sample']}"
                             + (f", first at {r['dec_first']} (prefill gap "
                                f"{r['dec_first_gap']:.4g})" if "dec_first" in r else ""))
            print(line)
    for be in backends:
        own = sum(r[be]["own"] > 0 for r in report)
        hf = sum(r[be].get("hf", 0) > 0 for r in report)
        print(f"mm_logits_check {be}: {len(report)} items; the eval left its own prefill's argmax "
              f"on {own}, the prefill left HF's on " + ("(HF not run)" if args.no_hf else f"{hf}"))
        if args.decode and report:
            rel = [r[be]["dec_rel"] for r in report]
            print(f"mm_logits_check {be} decode: {len(report)} items; dec_rel mean "
                  f"{sum(rel) / len(rel):.3g} max {max(rel):.3g}; decode argmax left the "
                  f"prefill's on {sum(r[be]['dec_pf'] > 0 for r in report)} items "
                  f"({sum(r[be]['dec_pf'] for r in report)} rows); the decode left the eval's "
                  f"tokens on {sum(r[be]['dec_own'] > 0 for r in report)} items "
                  f"({sum(r[be]['dec_own'] for r in report)} rows); a sampled id left its row's "
                  f"argmax on {sum(r[be]['dec_sample'] for r in report)} rows")
    if args.json:
        json.dump(report, open(args.json, "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
