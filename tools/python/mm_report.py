#!/usr/bin/env python3
"""The multimodal proxy's fidelity table (issue 35) from tools/gpu/run.sh stage mm_run's folder.

    python3 tools/python/mm_report.py DIR OUT.md

DIR holds, per package v (f16 and each Q4 variant): eval_<v>_ocr/ and eval_<v>_asr/ (`g4cu eval`
outputs: scores.json, predictions.jsonl), <v>.bytes (decoder bytes), compare_<v>.txt (g4cu compare
against the HF dump of one image + audio prompt); ocr_test.jsonl / asr_test.jsonl (the
manifests); parity.json (tools/python/mm_parity.py: agreement, near ties, real disagreements);
train.json. Columns: decoder MB; OCRBench
accuracy (`g4cu eval`'s metric) and exact match (prediction.strip() == the answer) overall and on
the held-out font; WER (`g4cu eval`'s, Whisper normalizer) overall and on the held-out voice
(from the per-category scores); agreement of the greedy answers with f16's (same text); a
compare line (f16: the verdict of the layer-by-layer check on the image + audio prompt; a Q4
variant: the logits' KL and top-1 agreement there; the per-layer errors are in compare_<v>.md). Missing inputs leave "-".
Then, from compare_<v>.json (compare_f16_<backend>.json for f16), a table by span (issue 35): per
package, the worst decoder layer's rel err on the text, image and audio rows of the prompt
(tools/python/cmp_spans.py).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cmp_spans  # noqa: E402  (tools/python)


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def preds(path):
    try:
        return {p["id"]: p for p in map(json.loads, open(path)) if p}
    except OSError:
        return {}


def cat_value(scores, name):
    for c in (scores or {}).get("categories", []):
        if c["name"] == name and c.get("value") is not None:
            return c["value"]
    return None


def fmt(x, f="{:.3f}"):
    return "-" if x is None else f.format(x)


def main():
    d, out = sys.argv[1], sys.argv[2]
    ocr_items = {j["id"]: j for j in map(json.loads, open(os.path.join(d, "ocr_test.jsonl")))}
    # every package with an OCR eval: run.sh's rows in its order, then any other name (sorted)
    # rather than dropped
    order = ("q4", "q4_keep_auto", "q4_imatrix", "q4_rtn", "q4_gptq", "q4_gptq_act", "q4_fit",
             "q4_best_keep_auto", "q4_gptq_imx_16k")
    found = {e[len("eval_"):-len("_ocr")] for e in os.listdir(d)
             if e.startswith("eval_") and e.endswith("_ocr")
             and os.path.isdir(os.path.join(d, e))} - {"f16"}
    variants = ["f16"] + [v for v in order if v in found] + sorted(found - set(order))
    base = {t: preds(os.path.join(d, f"eval_f16_{t}", "predictions.jsonl")) for t in ("ocr", "asr")}
    rows = []
    for v in variants:
        so = load(os.path.join(d, f"eval_{v}_ocr", "scores.json"))
        sa = load(os.path.join(d, f"eval_{v}_asr", "scores.json"))
        po = preds(os.path.join(d, f"eval_{v}_ocr", "predictions.jsonl"))
        pa = preds(os.path.join(d, f"eval_{v}_asr", "predictions.jsonl"))
        ex = [p.get("prediction", "").strip() == ocr_items[i]["answers"][0].strip()
              for i, p in po.items() if i in ocr_items]
        exh = [p.get("prediction", "").strip() == ocr_items[i]["answers"][0].strip()
               for i, p in po.items() if i in ocr_items
               and ocr_items[i]["category"] == "held_out_font"]
        agree = []
        for t, pp in (("ocr", po), ("asr", pa)):
            same = [base[t].get(i, {}).get("prediction") == p.get("prediction") for i, p in pp.items()]
            agree.append(sum(same) / len(same) if same else None)
        try:
            nbytes = int(open(os.path.join(d, f"{v}.bytes")).read())
        except (OSError, ValueError):
            nbytes = None
        names = ([("cpu", "compare_f16_cpu.txt"), ("cuda", "compare_f16_cuda.txt")] if v == "f16"
                 else [("", f"compare_{v}.txt")])
        parts = []
        for tag, name in names:  # f16: the verdict of the layer-by-layer check; Q4: KL, top-1
            try:
                lines = open(os.path.join(d, name)).read().strip().splitlines()
            except OSError:
                continue
            kl = [x for x in lines if x.startswith("logits KL")]
            m = re.search(r"mean ([0-9.e+-]+).*top-1 agreement (\d+/\d+)", kl[-1]) if kl else None
            if v != "f16" and m:
                parts.append(f"KL mean {float(m.group(1)):.2e}, top-1 {m.group(2)}")
            elif lines:
                parts.append(f"{tag}: {lines[-1].split(': ', 1)[-1]}" if tag else lines[-1])
        cmp_last = "; ".join(parts) or "-"
        rows.append([v, fmt(nbytes and nbytes / 1e6, "{:.1f}"),
                     fmt(so and so.get("value")), fmt(sum(ex) / len(ex) if ex else None),
                     fmt(sum(exh) / len(exh) if exh else None),
                     fmt(sa and sa.get("value"), "{:.2f}"),
                     fmt(cat_value(sa, "held_out_voice"), "{:.2f}"),
                     fmt(agree[0]), fmt(agree[1]), cmp_last.replace("|", "/")])
    head = ["package", "decoder MB", "OCR acc (ocrbench)", "OCR exact", "exact, held-out font",
            "WER %", "WER %, held-out voice", "same OCR answer as f16", "same ASR answer as f16",
            "compare vs HF (image + audio prompt)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    par = load(os.path.join(d, "parity.json")) or {}
    tr = load(os.path.join(d, "train.json")) or {}
    notes = [f"\nHeld-out items: {len(ocr_items)} images, "
             f"{sum(1 for _ in open(os.path.join(d, 'asr_test.jsonl')))} utterances "
             f"(tools/python/make_mm_data.py; strings and sentences never in training, half on a "
             f"held-out font / voice)."]
    if tr:
        notes.append(f"Training: preset {tr.get('preset')}, {tr.get('parameters', 0):,} parameters, "
                     f"{tr.get('stopped_at') or tr.get('steps')} steps, "
                     f"{tr.get('seconds', {}).get('train', 0):.0f} s; final loss "
                     f"{tr.get('final_loss')}.")
    for t in ("ocr", "asr"):
        if t in par:
            p = par[t]
            line = (f"Parity {t} (g4cu f16 vs HF, greedy): {p['agree']}/{p['items']} "
                    f"({p['agreement']:.3f}")
            if "near_ties" in p:  # mm_parity.py since the near-tie report
                r = p["tie_rule"]
                line += (f", need >= {p['min_agree']}: {p['verdict']} ({p['real_disagreements']} "
                         f"real)); near ties {p['near_ties']}, real disagreements "
                         f"{p['real_disagreements']} (near tie: on HF's teacher-forced logit row "
                         f"at the first differing token, g4cu's token within {r['factor']:g} x "
                         f"{r['tol']} {r['rel']:g} x RMS(row) of HF's)")
            else:
                line += ")"
            notes.append(line + f"; prompt lengths differ on {p['prompt_length_differs']}.")
    open(out, "w").write("\n".join(lines + notes + span_table(d, variants)) + "\n")


def span_table(d, variants):
    """The worst decoder layer's rel err per span kind of each package's compare (markdown
    lines; none when no report has spans)."""
    rows = []
    for v in variants:
        names = ["compare_f16_cuda.json", "compare_f16_cpu.json"] if v == "f16" else [f"compare_{v}.json"]
        for name in names:
            s = cmp_spans.summary(load(os.path.join(d, name)) or {})
            if not s:
                continue
            cells = []
            for kind in cmp_spans.KINDS:
                e = s[kind]
                cells.append(f"{cmp_spans.fmt(e['rel'])} ({e['layer']}, {e['rows']} of "
                             f"{e['positions']} rows)" if "layer" in e else "-")
            rows.append(f"| {v}{' (' + name[12:-5] + ')' if v == 'f16' else ''} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["", "Per span of the image + audio prompt (g4cu compare vs HF): the worst decoder "
            "layer's rel err on the text, image and audio rows (the dump's rows of each kind; "
            "the markers count as text).", "",
            "| package | text rows | image rows | audio rows |", "|---|---|---|---|"] + rows


if __name__ == "__main__":
    main()
