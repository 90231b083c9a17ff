#!/usr/bin/env python3
"""Parity of `g4cu eval`'s greedy answers with HF transformers' on the multimodal proxy's
held-out items (issue 35), and HF's own scores on them.

    python3 tools/python/mm_parity.py --hf PROXY/hf --data DATA \\
        --ocr EVAL_OCR/predictions.jsonl --asr EVAL_ASR/predictions.jsonl \\
        [--device cuda] [--dtype float32|float16] [--max-new 48] [--min-agree 0.95] [--json F] \\
        [--tie-tol cuda-f16|cpu-f32]
    python3 tools/python/mm_parity.py --same A/predictions.jsonl B/predictions.jsonl

For each item of DATA/ocr_test.jsonl and DATA/asr_test.jsonl that g4cu predicted: the prompt ids
train_mm_proxy.py trains on (which are g4cu's chat template: engine/chat.h), the media read from
the files g4cu read (the PNG through PIL; the WAV as int16 / 32768 through Gemma4AudioFeature
Extractor), HF's Gemma4ForConditionalGeneration (OUT/hf: the float16 weights, run in --dtype)
generates greedily up to --max-new tokens or an eos id of its config (<eos>, <turn|>). Agreement:
HF's new tokens equal g4cu's "tokens" (both without the final eos id). The prompt lengths must
agree too (g4cu's "prompt_tokens"): a difference is reported as such, because then the two did
not see the same input. Exit 0 when the agreement is >= --min-agree on each task, else 1.
Near ties: for each differing answer, HF is teacher-forced on the prompt and the tokens both
answers share (one forward, no cache), and at the first differing position the tool reports HF's
logit of its own token and of g4cu's (an eos id where an answer ends there), their gap and HF's
top-2 gap. The item is a near tie when the gap is <= 2 x TOL x RMS of HF's logit row there,
TOL the relative tolerance `g4cu compare` holds this backend's logits to (--tie-tol: cuda-f16
2e-2, cpu-f32 1e-4, fidelity/tolerance.c): rel err = ||ours - HF|| / ||HF|| <= TOL lets each logit
of the row be off by TOL x RMS(row), and two such errors in opposite directions move the gap of
two tokens by twice that. Else it is a real disagreement (also when one answer ran to --max-new
where the other goes on). The criterion stays the issue's plain agreement; the real count is
printed beside it. --json: per task agree, items, near_ties, real_disagreements, tie_rule and, per
differing answer, position, hf_token, g4cu_token, hf_logit_hf, hf_logit_g4cu, gap, top2_gap, rms,
margin, near_tie and tf_argmax (the teacher-forced row's argmax: HF's token, unless HF's cached
and uncached paths disagree there).
Also printed: HF's exact-match accuracy on the OCR items (the answer equals the prediction after
strip()) and its WER on the ASR items (words of lower-case text without punctuation; the
official figures are `g4cu eval`'s, with the Whisper normalizer), next to g4cu's on the same
predictions by the same rule.
--same A B: no HF; two g4cu runs' predictions of the same items (e.g. the CPU and CUDA backends)
compared token for token (each answer's "tokens", its stop token included): the count of equal
answers, and for each differing item its first differing position and the two tokens there.
Exit 0 when every item of A is in B with the same tokens.
"""
import argparse
import json
import os
import re
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_mm_proxy as tmp  # noqa: E402


def words(s):
    return re.sub(r"[^a-z0-9' ]+", " ", s.lower()).split()


def edits(a, b):
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            cur = min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
            prev, d[j] = d[j], cur
    return d[len(b)]


# `g4cu compare`'s fixed relative tolerances (fidelity/tolerance.c), by backend
TIE_TOLS = {"cuda-f16": 2e-2, "cpu-f32": 1e-4}
TIE_FACTOR = 2.0  # the gap of two logits, each within TOL x RMS(row)


def upto_eos(t, eos):
    """t up to and including its first eos id."""
    i = next((i for i, x in enumerate(t) if x in eos), None)
    return list(t) if i is None else list(t[:i + 1])


def first_difference(hf, g4):
    """hf, g4: the answers up to and including an eos id. The first position where they differ
    and each side's token there (None where that answer stopped at --max-new before it)."""
    m = min(len(hf), len(g4))
    k = next((i for i in range(m) if hf[i] != g4[i]), m)
    return k, (hf[k] if k < len(hf) else None), (g4[k] if k < len(g4) else None)


def tie_at(logits, hf_tok, g4_tok, tol):
    """HF's logit row at the first difference (float64 numpy) judged: the gap of HF's token over
    g4cu's against TIE_FACTOR x tol x RMS(row)."""
    top = np.argsort(-logits, kind="stable")[:2]
    rms = float(np.sqrt(np.mean(logits * logits)))
    margin = TIE_FACTOR * tol * rms
    r = dict(tf_argmax=int(top[0]), top2_gap=float(logits[top[0]] - logits[top[1]]), rms=rms,
             margin=margin)
    if hf_tok is None or g4_tok is None:
        r.update(near_tie=False, why="one answer ran to --max-new")
        return r
    r.update(hf_logit_hf=float(logits[hf_tok]), hf_logit_g4cu=float(logits[g4_tok]),
             gap=float(logits[hf_tok] - logits[g4_tok]))
    r["near_tie"] = r["gap"] <= margin
    return r


def hf_side(hf_dir, dev, dtype, load_model=True):
    """HF's side of a parity check: (Gemma4ForConditionalGeneration from HF_DIR in dtype on
    dev, eval mode, or None without load_model (the prompts only); its tokenizer;
    train_mm_proxy.Prompter on it; a default Gemma4AudioFeatureExtractor). The decoder runs
    eager attention; the audio tower sdpa: its eager path inverts its band mask in transformers
    5.17 (tools/python/mm_reference.py)."""
    from tokenizers import Tokenizer
    from transformers import Gemma4ForConditionalGeneration
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    model = None
    if load_model:
        model = Gemma4ForConditionalGeneration.from_pretrained(
            hf_dir, dtype=dtype, attn_implementation="eager").to(dev).eval()
        model.model.audio_tower.config._attn_implementation = "sdpa"
    tok = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    return model, tok, tmp.Prompter(tok), Gemma4AudioFeatureExtractor()


def item_inputs(it, data, pr, fe, dev, dtype):
    """One manifest item as HF reads it: (prompt ids, the generate / forward media kwargs). The
    image through PIL and train_mm_proxy.image_inputs, the WAV as int16 / 32768 through fe (a
    Gemma4AudioFeatureExtractor), the prompt train_mm_proxy.Prompter's (g4cu's chat template)."""
    if "image" in it:
        from PIL import Image

        pv, pp, k = tmp.image_inputs(Image.open(os.path.join(data, it["image"])))
        return pr.prompt("image", k), dict(
            pixel_values=torch.from_numpy(pv)[None].to(dev, dtype),
            image_position_ids=torch.from_numpy(pp)[None].to(dev))
    import soundfile as sf

    x, rate = sf.read(os.path.join(data, it["audio"]), dtype="int16")
    f = fe([x.astype(np.float32) / 32768.0], return_tensors="np", padding="longest")
    return pr.prompt("audio", tmp.audio_token_count(f["input_features_mask"][0])), dict(
        input_features=torch.from_numpy(f["input_features"]).to(dev, dtype),
        input_features_mask=torch.from_numpy(f["input_features_mask"]).to(dev))


def same_tokens(a_path, b_path):
    """Two predictions files of the same items: (equal, items, [(id, position, a, b), ...]) by
    each item's tokens; an item of A missing from B counts as differing (position None)."""
    b = {}
    for line in open(b_path):
        if line.strip():
            p = json.loads(line)
            b[p["id"]] = p.get("tokens", [])
    equal = n = 0
    diff = []
    for line in open(a_path):
        if not line.strip():
            continue
        p = json.loads(line)
        n += 1
        if p["id"] not in b:
            diff.append((p["id"], None, None, None))
            continue
        ta, tb = p.get("tokens", []), b[p["id"]]
        if ta == tb:
            equal += 1
        else:
            k, x, y = first_difference(ta, tb)
            diff.append((p["id"], k, x, y))
    return equal, n, diff


def main_same(a_path, b_path):
    equal, n, diff = same_tokens(a_path, b_path)
    print(f"mm_parity same: {equal}/{n} answers token for token equal ({a_path} vs {b_path})")
    for i, k, x, y in diff:
        print(f"  differs {i}: " + ("missing from the second" if k is None else
                                    f"at token {k}: {x} vs {y}"))
    return 0 if equal == n else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--same", nargs=2, metavar=("A", "B"),
                    help="compare two g4cu predictions files token for token (no HF)")
    ap.add_argument("--hf")
    ap.add_argument("--data")
    ap.add_argument("--ocr", help="g4cu eval predictions.jsonl of ocr_test.jsonl")
    ap.add_argument("--asr", help="g4cu eval predictions.jsonl of asr_test.jsonl")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--min-agree", type=float, default=0.95)
    ap.add_argument("--tie-tol", choices=sorted(TIE_TOLS), default="cuda-f16",
                    help="the compare tolerance of g4cu's backend the near-tie margin derives from")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.same:
        sys.exit(main_same(*args.same))
    if not args.hf or not args.data:
        ap.error("--hf and --data are needed (or --same A B)")
    dev = torch.device(args.device)
    model, tok, pr, fe = hf_side(args.hf, dev, getattr(torch, args.dtype))
    eos = set(model.config.eos_token_id if isinstance(model.config.eos_token_id, list)
              else [model.config.eos_token_id])
    report, ok = {}, True
    for task, manifest, preds_path in (("ocr", "ocr_test.jsonl", args.ocr),
                                       ("asr", "asr_test.jsonl", args.asr)):
        if not preds_path:
            continue
        items = {}
        for line in open(os.path.join(args.data, manifest)):
            it = json.loads(line)
            items[it["id"]] = it
        preds = [json.loads(x) for x in open(preds_path) if x.strip()]
        agree = n = prompt_diff = ties = 0
        hf_score = g4_score = 0.0
        ref_words = 0
        mism = []
        for p in preds:
            it = items[p["id"]]
            ids, extra = item_inputs(it, args.data, pr, fe, dev, model.dtype)
            if len(ids) != p.get("prompt_tokens", len(ids)):
                prompt_diff += 1
            x = torch.tensor([ids], device=dev)
            with torch.no_grad():
                out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), **extra,
                                     max_new_tokens=args.max_new, do_sample=False,
                                     eos_token_id=sorted(eos), pad_token_id=0)
            hf_e = upto_eos(out[0, len(ids):].tolist(), eos)
            g4_e = upto_eos(p.get("tokens", []), eos)
            hf = [t for t in hf_e if t not in eos]
            g4 = [t for t in g4_e if t not in eos]
            same = hf == g4
            agree += same
            n += 1
            hf_text = tok.decode(hf).strip()
            if not same:
                k, ht, gt = first_difference(hf_e, g4_e)
                # teacher-forced: the prompt and the k tokens both answers share, no cache
                xf = torch.tensor([ids + hf_e[:k]], device=dev)
                with torch.no_grad():
                    lg = model(input_ids=xf, attention_mask=torch.ones_like(xf), **extra).logits
                t = tie_at(lg[0, -1].double().cpu().numpy(), ht, gt, TIE_TOLS[args.tie_tol])
                ties += t["near_tie"]
                mism.append(dict(id=p["id"], hf=hf_text, g4cu=p.get("prediction", ""), position=k,
                                 hf_token=ht, g4cu_token=gt, **t))
            if task == "ocr":
                ans = it["answers"][0].strip()
                hf_score += hf_text == ans
                g4_score += p.get("prediction", "").strip() == ans
            else:
                ref = words(it["transcript"])
                ref_words += len(ref)
                hf_score += edits(ref, words(hf_text))
                g4_score += edits(ref, words(p.get("prediction", "")))
        rate = agree / max(1, n)
        metric = "exact" if task == "ocr" else "wer"
        den = n if task == "ocr" else max(1, ref_words)
        verdict = "ok" if rate >= args.min_agree and prompt_diff == 0 else "BELOW"
        ok &= verdict == "ok"
        real = len(mism) - ties
        report[task] = dict(items=n, agree=agree, agreement=rate, prompt_length_differs=prompt_diff,
                            min_agree=args.min_agree, verdict=verdict, near_ties=ties,
                            real_disagreements=real,
                            tie_rule=dict(tol=args.tie_tol, rel=TIE_TOLS[args.tie_tol],
                                          factor=TIE_FACTOR),
                            **{f"hf_{metric}": hf_score / max(1, den),
                               f"g4cu_{metric}": g4_score / max(1, den)}, mismatches=mism)
        print(f"mm_parity {task}: {agree}/{n} greedy answers equal ({rate:.3f}, need >= "
              f"{args.min_agree}: {verdict} ({real} real)); prompt length differs on "
              f"{prompt_diff}; {metric} hf {hf_score / max(1, den):.4f} g4cu "
              f"{g4_score / max(1, den):.4f}")
        print(f"mm_parity {task}: agree {agree}/{n}, near ties {ties}, real disagreements {real} "
              f"(near tie: on HF's teacher-forced logit row at the first difference, g4cu's token "
              f"within {TIE_FACTOR:g} x {args.tie_tol} {TIE_TOLS[args.tie_tol]:g} x RMS(row) of "
              f"HF's)")
        shown = [m for m in mism if not m["near_tie"]][:5] + [m for m in mism if m["near_tie"]][:3]
        for m in shown:
            if "gap" in m:
                why = (f"gap {m['gap']:.4g} {'<=' if m['near_tie'] else '>'} margin "
                       f"{m['margin']:.4g} (RMS {m['rms']:.4g}), HF top-2 gap {m['top2_gap']:.4g}")
            else:
                why = m["why"]
            print(f"  differs {m['id']} at token {m['position']}: hf {m['hf_token']} g4cu "
                  f"{m['g4cu_token']}: {why}: {'near tie' if m['near_tie'] else 'REAL'}; "
                  f"hf {m['hf']!r} g4cu {m['g4cu']!r}")
    if args.json:
        json.dump(report, open(args.json, "w"), indent=1)
    sys.exit(0 if ok and report else 1)


if __name__ == "__main__":
    main()
