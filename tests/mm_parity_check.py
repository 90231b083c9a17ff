#!/usr/bin/env python3
"""tests/test_mm_parity.sh's checks of tools/python/mm_parity.py's near-tie report (issue 35),
on the CPU: a random-init tiny Gemma-4 (the ci preset's shapes, seed 0, float32) saved as an HF
folder, 3 noise images and 1 noise clip as items, and a predictions file made from HF's own
greedy answers (generate with output_logits: the cached decode path, not mm_parity's
teacher-forced forward), altered at known positions:
  the first image whose answer has a step k >= 1 with its top-2 gap within the cuda-f16 margin
      (2 x 2e-2 x RMS of the row): HF's second-ranked token at k, the answer ending there: a
      near tie at k, gap = HF's top-2 gap (the check fails if no image has such a step);
  the next image: at step 3, HF's lowest-ranked token: a real disagreement at 3, gap = max - min;
  the last: HF's answer unchanged (agrees, not analysed);
  a0: HF's first 2 tokens then the eos id 6: a difference at 2 with g4cu's token 6.
mm_parity's json must give, for each altered item, that position and those tokens (exact), HF's
two logits, the gap, the top-2 gap and the RMS within 1e-4 x RMS of generate's row (the two
paths differ only by fp32 summation order, measured <= 5e-6 x RMS; a wrong row or token is off
by ~RMS, and the near-tie margin is 400x wider), the verdict the row's own numbers give; counts:
ocr agree 1/3, asr 0/1, near ties and real disagreements as expected; the printed criterion
line with "(R real)"; the exit status 1 (below 0.95). TIE_TOLS must equal fidelity/tolerance.c's
constants. Prints one line per check; exit 1 if any failed."""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(SRC, "tools", "python"))
import mm_parity  # noqa: E402
import train_mm_proxy as tmp  # noqa: E402
from train_proxy import train_tokenizer  # noqa: E402

fails = 0


def check(c, what):
    global fails
    print(("ok   " if c else "FAIL ") + what)
    fails += not c


def main():
    from PIL import Image
    import soundfile as sf
    from transformers import Gemma4ForConditionalGeneration
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    # the constants mirror fidelity/tolerance.c
    c = open(os.path.join(SRC, "fidelity", "tolerance.c")).read()
    for name, rel in mm_parity.TIE_TOLS.items():
        m = re.search(r'\{"%s",\s*([0-9.e+-]+)\}' % re.escape(name), c)
        check(m is not None and float(m.group(1)) == rel,
              f"TIE_TOLS[{name}] {rel} is fidelity/tolerance.c's ({m and m.group(1)})")

    with tempfile.TemporaryDirectory() as d:
        text = "\n\n".join(["the quick brown fox jumps over the lazy dog blue sky 42", tmp.SYSTEM,
                            tmp.OCR_PROMPT, tmp.ASR_PROMPT, "system", "user", "model"] * 40)
        hf_dir, data = os.path.join(d, "hf"), os.path.join(d, "data")
        os.makedirs(hf_dir)
        os.makedirs(data)
        tok = train_tokenizer(text, 480, os.path.join(hf_dir, "tokenizer.json"))
        p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size())
        torch.manual_seed(0)
        model = Gemma4ForConditionalGeneration._from_config(tmp.model_config(p, tok),
                                                            dtype=torch.float32,
                                                            attn_implementation="eager").eval()
        model.save_pretrained(hf_dir, safe_serialization=True)
        model.model.audio_tower.config._attn_implementation = "sdpa"  # as mm_parity
        eos = sorted(set(model.config.eos_token_id))
        r = np.random.default_rng(1)
        ocr, asr = [], []
        for i in range(3):
            Image.fromarray(r.integers(0, 256, (192, 816, 3), dtype=np.uint8)).save(
                os.path.join(data, f"i{i}.png"))
            ocr.append(dict(id=f"i{i}", image=f"i{i}.png", answers=["blue sky"]))
        sf.write(os.path.join(data, "a0.wav"), (r.normal(0, 0.1, 16000) * 32767).astype(np.int16),
                 16000, subtype="PCM_16")
        asr.append(dict(id="a0", audio="a0.wav", transcript="the cat sat"))
        for name, items in (("ocr_test.jsonl", ocr), ("asr_test.jsonl", asr)):
            with open(os.path.join(data, name), "w") as f:
                f.writelines(json.dumps(x) + "\n" for x in items)

        pr, fe = tmp.Prompter(tok), Gemma4AudioFeatureExtractor()
        max_new = 12

        def greedy(it):
            if "image" in it:
                pv, pp, k = tmp.image_inputs(Image.open(os.path.join(data, it["image"])))
                ids = pr.prompt("image", k)
                extra = dict(pixel_values=torch.from_numpy(pv)[None],
                             image_position_ids=torch.from_numpy(pp)[None])
            else:
                x, _ = sf.read(os.path.join(data, it["audio"]), dtype="int16")
                f = fe([x.astype(np.float32) / 32768.0], return_tensors="np", padding="longest")
                ids = pr.prompt("audio", tmp.audio_token_count(f["input_features_mask"][0]))
                extra = dict(input_features=torch.from_numpy(f["input_features"]),
                             input_features_mask=torch.from_numpy(f["input_features_mask"]))
            x = torch.tensor([ids])
            with torch.no_grad():
                o = model.generate(input_ids=x, attention_mask=torch.ones_like(x), **extra,
                                   max_new_tokens=max_new, do_sample=False, eos_token_id=eos,
                                   pad_token_id=0, return_dict_in_generate=True,
                                   output_logits=True)
            return (len(ids), o.sequences[0, len(ids):].tolist(),
                    [lg[0].double().numpy() for lg in o.logits])

        g = {it["id"]: greedy(it) for it in ocr + asr}
        tol = mm_parity.TIE_TOLS["cuda-f16"]
        for k_, (_, t, _) in g.items():
            check(len(t) == max_new and not set(t) & set(eos),
                  f"{k_}: HF's answer runs to {max_new} tokens without an eos id ({t})")

        def rms(row):
            return float(np.sqrt(np.mean(row * row)))

        # the near-tie item: the first image whose answer has a step k >= 1 within the margin
        tie_at = {}
        for it in ocr:
            rows = g[it["id"]][2]
            k = next((j for j in range(1, max_new) if
                      np.sort(rows[j])[-1] - np.sort(rows[j])[-2] <= 2 * tol * rms(rows[j])), None)
            if k is not None:
                tie_at[it["id"]] = k
        check(len(tie_at) > 0, f"a step within the cuda-f16 margin in an image's answer ({tie_at})")
        if not tie_at:
            return 1
        tie_id = next(iter(tie_at))
        real_id, same_id = [it["id"] for it in ocr if it["id"] != tie_id][:2]
        print(f"mm_parity_check: near tie {tie_id} at {tie_at[tie_id]}, real {real_id} at 3, "
              f"unchanged {same_id}")
        exp = {}  # id -> (position, hf token, g4cu token, row)
        preds = []
        for it in ocr + asr:
            n, t, rows = g[it["id"]]
            t2 = list(t)
            if it["id"] == tie_id:
                k = tie_at[tie_id]
                t2[k] = int(np.argsort(-rows[k], kind="stable")[1])
                t2 = t2[:k + 1]
            elif it["id"] == real_id:
                k = 3
                t2[k] = int(np.argmin(rows[k]))
            elif it["id"] == "a0":
                k = 2
                t2 = t[:2] + [6]
            if it["id"] != same_id:
                exp[it["id"]] = (k, t[k], t2[k], rows[k])
            preds.append(dict(id=it["id"], prediction=tok.decode(t2), prompt_tokens=n, tokens=t2))
        for task in ("ocr", "asr"):
            with open(os.path.join(d, f"{task}.jsonl"), "w") as f:
                f.writelines(json.dumps(x) + "\n" for x in preds
                             if x["id"] in {it["id"] for it in (ocr if task == "ocr" else asr)})

        out = subprocess.run([sys.executable, os.path.join(SRC, "tools", "python", "mm_parity.py"),
                              "--hf", hf_dir, "--data", data, "--ocr", os.path.join(d, "ocr.jsonl"),
                              "--asr", os.path.join(d, "asr.jsonl"), "--device", "cpu",
                              "--max-new", str(max_new), "--tie-tol", "cuda-f16",
                              "--json", os.path.join(d, "parity.json")],
                             capture_output=True, text=True)
        print(out.stdout + out.stderr[-2000:])
        check(out.returncode == 1, f"mm_parity exit {out.returncode}, expected 1 (below 0.95)")
        rep = json.load(open(os.path.join(d, "parity.json")))
        want_tie, worst = {}, 0.0
        for i, (k, ht, gt, row) in exp.items():
            task = "ocr" if i[0] == "i" else "asr"
            m = [x for x in rep[task]["mismatches"] if x["id"] == i]
            check(len(m) == 1, f"{i}: one mismatch record ({len(m)})")
            if not m:
                continue
            m = m[0]
            s = rms(row)
            check((m["position"], m["hf_token"], m["g4cu_token"]) == (k, ht, gt),
                  f"{i}: position, hf, g4cu token {(m['position'], m['hf_token'], m['g4cu_token'])}"
                  f" == {(k, ht, gt)}")
            srt = np.sort(row)
            want = dict(hf_logit_hf=row[ht], hf_logit_g4cu=row[gt], gap=row[ht] - row[gt],
                        top2_gap=srt[-1] - srt[-2], rms=s)
            for key, v in want.items():
                worst = max(worst, abs(m[key] - v) / s)
                check(abs(m[key] - v) <= 1e-4 * s,
                      f"{i}: {key} {m[key]:.7g} is generate's {v:.7g} (within 1e-4 x RMS {s:.4g})")
            check(m["tf_argmax"] == ht, f"{i}: the teacher-forced argmax {m['tf_argmax']} is HF's "
                  f"generated token {ht}")
            tie = bool(row[ht] - row[gt] <= 2 * tol * s)
            want_tie[i] = tie
            check(m["near_tie"] == tie and abs(m["margin"] - 2 * tol * s) <= 1e-5 * s,
                  f"{i}: near_tie {m['near_tie']} (expected {tie}: gap {row[ht] - row[gt]:.4g}, "
                  f"margin {2 * tol * s:.4g})")
        check(want_tie.get(tie_id) is True and want_tie.get(real_id) is False,
              f"the altered items cover a near tie ({tie_id}) and a real disagreement ({real_id}): "
              f"{want_tie}")
        for task, agree, n, ids in (("ocr", 1, 3, (tie_id, real_id)), ("asr", 0, 1, ("a0",))):
            t = rep[task]
            k_tie = sum(want_tie[i] for i in ids)
            real = len(ids) - k_tie
            check((t["agree"], t["items"], t["near_ties"], t["real_disagreements"])
                  == (agree, n, k_tie, real),
                  f"{task}: agree {t['agree']}/{t['items']}, near ties {t['near_ties']}, real "
                  f"{t['real_disagreements']} == {agree}/{n}, {k_tie}, {real}")
            check(f"mm_parity {task}: agree {agree}/{n}, near ties {k_tie}, real disagreements "
                  f"{real} " in out.stdout, f"{task}: the counts line printed")
            check(re.search(rf"mm_parity {task}: {agree}/{n} greedy answers equal \(.*need >= "
                            rf"0\.95: BELOW \({real} real\)\)", out.stdout) is not None,
                  f"{task}: the criterion line with ({real} real)")
        print(f"mm_parity_check: the largest logit difference from generate's: {worst:.3g} x RMS")

        # --same: g4cu against g4cu (the CPU and CUDA backends' predictions), no HF. B: the
        # OCR answers with the first item's token 1 changed, the second's cut after token 0,
        # the third's unchanged, and one item A does not have.
        a_path, b_path = os.path.join(d, "ocr.jsonl"), os.path.join(d, "ocr_b.jsonl")
        a = [json.loads(x) for x in open(a_path)]
        b = [dict(x, tokens=list(x["tokens"])) for x in a]
        check(len(a) == 3 and all(len(x["tokens"]) >= 2 for x in a),
              f"--same: 3 OCR answers of >= 2 tokens to alter ({[len(x['tokens']) for x in a]})")
        b[0]["tokens"][1] += 1
        b[1]["tokens"] = b[1]["tokens"][:1]
        b.append(dict(id="extra", tokens=[5]))
        with open(b_path, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in b)
        eq, n, diff = mm_parity.same_tokens(a_path, b_path)
        want = [(a[0]["id"], 1, a[0]["tokens"][1], a[0]["tokens"][1] + 1),
                (a[1]["id"], 1, a[1]["tokens"][1], None)]
        check((eq, n, diff) == (1, 3, want), f"--same: equal {eq}/{n}, {diff} == 1/3, {want}")
        out = subprocess.run([sys.executable, os.path.join(SRC, "tools", "python", "mm_parity.py"),
                              "--same", a_path, b_path], capture_output=True, text=True)
        check(out.returncode == 1 and "mm_parity same: 1/3 answers token for token equal"
              in out.stdout and out.stdout.count("  differs ") == 2,
              f"--same: exit {out.returncode} (1), the count line and 2 differing items printed")
        out = subprocess.run([sys.executable, os.path.join(SRC, "tools", "python", "mm_parity.py"),
                              "--same", a_path, a_path], capture_output=True, text=True)
        check(out.returncode == 0 and "3/3 answers" in out.stdout,
              f"--same A A: exit {out.returncode} (0), 3/3 equal")
    print(f"mm_parity_check: {fails} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
