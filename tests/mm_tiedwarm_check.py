#!/usr/bin/env python3
"""tests/test_mm_tiedwarm.sh's checks of tools/python/mm_audio_probe.py --warm-only (the towers'
warm phase alone: the char head, train_mm_proxy.AudioChars, and with --ctc-tied the tied head,
train_mm_proxy.TiedCtcHead; issue 35), on the CPU, on the ci plan with 2 s tone clips:
  1. warm_measure (the held-out read-outs) against a hand computation on the ci model (seed 0,
     the tied head at scale 50, centered): char_ctc and tied_ctc equal torch's full-vocabulary
     CTC of each head's log-softmax, a label, averaged over the clips; tied_peaks the share of
     valid frames whose argmax is not the blank; char_cer / tied_cer of a greedy read merged
     here; scale 50 and table_mean_cos by hand; the heads' used / skipped counts untouched;
  2. the probe's runs (4 steps of batch 4, a report every 2, 3 LM steps): rows at steps 0, 2,
     4; each head's clips used + skipped = steps x batch; without --ctc-tied no tied field;
     the step-0 char read-out the same with and without the tied head (its draws are its own)
     and the step-4 char train loss not (the tied loss is in the same backward); the scale 50
     at step 0 and moved by step 4; the LM phase's record the same in both; --lm-warm-from the
     first run's decoder gives its step-0 tied read-out bit for bit (and no LM record);
  3. refusals in one line: --ctc-tied without --warm-only, --ctc-tied-scale without --ctc-tied,
     --lm-warm without --warm-only, --warm-only with --ctc-weight, --ctc-tied-scale inf and
     --ctc-tied-weight 0.
Prints one line per group; exit 1 on the first failure."""
import json
import math
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools", "python")
sys.path.insert(0, TOOLS)
import mm_audio_probe as ap  # noqa: E402
import train_mm_proxy as tmp  # noqa: E402
from mm_items import (  # noqa: E402
    Checks, check_tokenizer, ci_data, fp32_model, full_ctc_loss, tool_refusals)

C = Checks("mm_tiedwarm_check")


def edits(a, b):
    d = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, y in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (x != y))
    return d[-1]


def collapse(ids, blank):
    out, last = [], None
    for c in ids:
        if c != last and c != blank:
            out.append(c)
        last = c
    return out


def by_hand(model, chars, tied, tok, closing, batches):
    """The read-outs computed here: per-clip full CTC a label, greedy reads, peak frames."""
    c_nll, t_nll, c_err, c_len, t_err, t_len, peak, frames = [], [], 0, 0, 0, 0, 0, 0
    V = tied.vocab
    with torch.no_grad():
        for b in batches:
            model.model.get_audio_features(b["input_features"], b["input_features_mask"])
            x, valid = chars.tap.take()
            tied.tap.take()
            zc = x.float() @ chars.proj.weight.T + chars.proj.bias
            emb = model.model.language_model.embed_tokens
            rows = emb.weight[:V].float() * emb.embed_scale  # centered: less the mean row
            cls = torch.cat([rows - rows.mean(0), tied.blank_vec[None]], 0)
            zt = tied.log_scale.exp() * (
                torch.nn.functional.normalize(x - rows.mean(0), dim=-1) @
                torch.nn.functional.normalize(cls, dim=-1).T)
            texts = tmp.answer_texts(tok, b["labels"], closing)
            for r in range(len(x)):
                n = int(valid[r].sum())
                lab = chars.labels(texts[r])
                lp = torch.log_softmax(zc[r:r + 1], -1).transpose(0, 1).double()
                c_nll.append(full_ctc_loss(lp, [lab], [0], valid[r:r + 1], chars.blank).item())
                hyp = "".join(chars.chars[k] for k in collapse(zc[r, :n].argmax(-1).tolist(),
                                                                chars.blank))
                ref = "".join(chars.chars[k] for k in lab)
                c_err, c_len = c_err + edits(ref, hyp), c_len + len(ref)
                ids = [t for t in b["labels"][r].tolist() if t != -100][:-1]
                lp = torch.log_softmax(zt[r:r + 1], -1).transpose(0, 1).double()
                t_nll.append(full_ctc_loss(lp, [ids], [0], valid[r:r + 1], V).item())
                arg = zt[r, :n].argmax(-1)
                peak, frames = peak + int((arg != V).sum()), frames + n
                hyp = tok.decode(collapse(arg.tolist(), V), skip_special_tokens=False)
                ref = tok.decode(ids, skip_special_tokens=False)
                t_err, t_len = t_err + edits(ref, hyp), t_len + len(ref)
    return dict(char_ctc=sum(c_nll) / len(c_nll), tied_ctc=sum(t_nll) / len(t_nll),
                char_cer=c_err / c_len, tied_cer=t_err / t_len, tied_peaks=peak / frames,
                items=len(c_nll))


def measure_checks(d, data):
    tok = check_tokenizer(tmp, [i["text"] for i in tmp.mmd.read_jsonl(
        os.path.join(data, "speech.jsonl"))])
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size())
    model = fp32_model(tmp, p, tok)
    pr = tmp.Prompter(tok)
    closing = pr.id["<turn|>"]
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    fe = Gemma4AudioFeatureExtractor()
    te = [i for i in tmp.mmd.read_jsonl(os.path.join(data, "speech.jsonl"))
          if i["split"] == "test"]
    items = tmp.Items(te, "audio", data, None, pr, fe, 1)
    batches = [tmp.collate([items.render(k) for k in range(j, min(j + 4, len(te)))])
               for j in range(0, len(te), 4)]
    chars = tmp.AudioChars(model, "embed", 0, tok, closing)
    tied = tmp.TiedCtcHead(model, p["vocab"], 0, scale=50.0, center=True)
    chars.used, chars.skipped, tied.used, tied.skipped = 5, 1, 7, 2
    got = ap.warm_measure(model, chars, tied, tok, closing, batches)
    C.expect((chars.used, chars.skipped, tied.used, tied.skipped) == (5, 1, 7, 2),
             f"warm_measure moved the heads' counts: {chars.used, chars.skipped, tied.used}")
    want = by_hand(model, chars, tied, tok, closing, batches)
    C.expect(want["items"] == len(te) == got["char_items"] == got["tied_items"] + got[
        "tied_skipped"] and got["char_fit"] == len(te) and got["tied_skipped"] == 0,
             f"items: {len(te)} held-out clips, warm_measure {got['char_items']} / "
             f"{got['char_fit']} / {got['tied_items']} + {got['tied_skipped']}")
    for k in ("char_ctc", "tied_ctc", "char_cer", "tied_cer", "tied_peaks"):
        C.expect(math.isclose(got[k], want[k], rel_tol=1e-4, abs_tol=1e-6),
                 f"{k}: warm_measure {got[k]} against {want[k]} by hand")
    C.expect(want["tied_peaks"] > 0.5 and want["tied_ctc"] > 5.0,
             f"scale 50 at init: most frames a token ({want['tied_peaks']:.3f}), a high loss "
             f"({want['tied_ctc']:.2f})")
    C.expect(abs(got["scale"] - 50.0) < 1e-4, f"scale {got['scale']}, not 50")
    w = model.model.language_model.embed_tokens.weight.detach().float()
    u = torch.nn.functional.normalize(w[w.norm(dim=-1) > 0], dim=-1)
    cos = u @ u.T
    n = len(u)
    c = float((cos.sum() - cos.diagonal().sum()) / (n * (n - 1)))
    C.expect(abs(got["table_mean_cos"] - c) < 1e-5, f"table_mean_cos {got['table_mean_cos']} "
             f"against {c} by hand")
    print(f"mm_tiedwarm_check: warm_measure by hand on {len(te)} held-out clips: char ctc "
          f"{got['char_ctc']:.3f} cer {got['char_cer']:.3f}, tied ctc {got['tied_ctc']:.3f} cer "
          f"{got['tied_cer']:.3f} token frames {got['tied_peaks']:.3f} ({C.n} checks)", flush=True)


PROBE = os.path.join(TOOLS, "mm_audio_probe.py")
PROBE_ARGS = ["--a-lr-mult", "0.3", "--lr", "1e-3", "--steps", "4", "--every", "2", "--batch",
              "4", "--vocab", "480", "--threads", "1"]


def probe(data, out, *extra):
    return subprocess.run([sys.executable, PROBE, data, out] + PROBE_ARGS + list(extra),
                          capture_output=True, text=True)


def run_checks(d, data):
    base = ["--warm-only", "--lm-warm", "3"]
    tied = ["--ctc-tied", "--ctc-tied-scale", "50", "--ctc-tied-center"]
    runs = {}
    for name, extra in (("char", base), ("tied", base + tied)):
        r = probe(data, os.path.join(d, name), *extra)
        C.expect(r.returncode == 0, f"probe {name}: exit {r.returncode} {r.stderr[-800:]}")
        runs[name] = json.load(open(os.path.join(d, name, "probe.json")))
    for name, rec in runs.items():
        rows = rec["warm"]
        C.expect([e["step"] for e in rows] == [0, 2, 4], f"{name}: rows at "
                 f"{[e['step'] for e in rows]}")
        for e in rows:
            C.expect(sum(e["char_clips"]) == 4 * e["step"], f"{name} step {e['step']}: char "
                     f"clips {e['char_clips']}, not {4 * e['step']}")
            if name == "tied":
                C.expect(sum(e["tied_clips"]) == 4 * e["step"], f"tied step {e['step']}: "
                         f"tied clips {e['tied_clips']}")
            else:
                C.expect(e["tied_clips"] is None and e["tied_run"] is None and
                         "tied_ctc" not in e["test"], f"char step {e['step']}: a tied field")
        C.expect(len(rec["lm_warm"]) == 2 and rec["lm_warm"][0][0] == 1 and
                 rec["lm_warm"][1][0] == 3, f"{name}: lm_warm record {rec['lm_warm']}")
    a, b = runs["char"]["warm"], runs["tied"]["warm"]
    C.expect(a[0]["test"]["char_ctc"] == b[0]["test"]["char_ctc"] and
             a[0]["test"]["char_cer"] == b[0]["test"]["char_cer"],
             f"step 0 char read-out with / without the tied head: {a[0]['test']['char_ctc']} / "
             f"{b[0]['test']['char_ctc']}")
    C.expect(a[2]["char_run"] != b[2]["char_run"], f"step 4 char loss the same with the tied "
             f"head ({a[2]['char_run']}): it is not in the backward")
    C.expect(runs["char"]["lm_warm"] == runs["tied"]["lm_warm"], "LM records differ")
    C.expect(abs(b[0]["test"]["scale"] - 50.0) < 1e-4 and abs(b[2]["test"]["scale"] - 50) > 1e-4
             and math.isfinite(b[2]["tied_run"]), f"scale {b[0]['test']['scale']} -> "
             f"{b[2]['test']['scale']}, tied_run {b[2]['tied_run']}")
    r = probe(data, os.path.join(d, "from"), "--warm-only", "--lm-warm-from",
              os.path.join(d, "tied", "lm_warm.pt"), *tied)
    C.expect(r.returncode == 0, f"probe --lm-warm-from: exit {r.returncode} {r.stderr[-800:]}")
    f = json.load(open(os.path.join(d, "from", "probe.json")))
    C.expect(f["lm_warm"] is None and f["warm"][0]["test"] == b[0]["test"],
             f"--lm-warm-from: step 0 {f['warm'][0]['test'].get('tied_ctc')} against "
             f"{b[0]['test']['tied_ctc']}")
    print(f"mm_tiedwarm_check: probe runs: char loss at step 4 {a[2]['char_run']:.3f} alone, "
          f"{b[2]['char_run']:.3f} with the tied head (tied {b[2]['tied_run']:.3f}, scale "
          f"{b[2]['test']['scale']:.3f}) ({C.n} checks)", flush=True)
    tool_refusals(PROBE, [data, os.path.join(d, "bad")] + PROBE_ARGS, [
        (tied, "--ctc-tied needs --warm-only"),
        (["--warm-only", "--ctc-tied-scale", "30"], "without --ctc-tied"),
        (["--lm-warm", "3"], "need --warm-only"),
        (["--warm-only", "--ctc-weight", "0.5"], "no --ctc-weight"),
        (["--warm-only", "--ctc-tied", "--ctc-tied-scale", "inf"], "finite > 0"),
        (["--warm-only", "--ctc-tied", "--ctc-tied-weight", "0"], "finite > 0")], C.expect)
    print(f"mm_tiedwarm_check: refusals in one line: {C.n} checks")


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d, seconds=2, tones=True)
        measure_checks(d, data)
        run_checks(d, data)


if __name__ == "__main__":
    main()
