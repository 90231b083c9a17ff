#!/usr/bin/env python3
"""tests/test_mm_speed.sh's checks of train_mm_proxy's --a-speed-perturb F (Kaldi-style speed
perturbation of the train clips' renderings after the first; issue 35), on the CPU:
  1. rendering(): pass 0 of every ci clip is the planned item with F 0.1 as without it (no
     "speed"); pass 1 is the item of F 0 plus a "speed" in [0.9, 1.1] on the 1/160 grid, the
     same on every call; over 50 passes the speeds spread over the range (not one value), and
     images never get one;
  2. the samples (ci clips of 8 s of noise, here without the ci preset's fixed clip length, at
     20 dB SNR, as the proxy's items are): pass 1 at F 0.1 is, counted, 128000 x 16000 /
     (16000 x speed) - 128000 samples longer than pass 1 at F 0 (the silence and noise draws are
     the rendering's, unchanged); Items.render of that pass: its prompt's audio soft tokens
     scale with the samples (within one token of the unperturbed count x the length ratio), and
     pass 0's features are those without the option, byte for byte;
  3. the trainer (ci plan, 6 steps of 8, one thread): with --reps 2, --a-speed-perturb 0 gives
     the weights of no option (sha256 of the saved safetensors); 0.1 twice the same weights as
     each other (deterministic from the seed), not those of no option, and train.json's shapes
     record it; with the ci preset's one rendering the option changes no weight (every clip
     read in pass 0); --a-speed-perturb -0.1 or 0.5 and --reps 0 are refused in one line.
Prints one line per check and the count; exit 1 on the first failure."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import (  # noqa: E402
    Checks, check_tokenizer, ci_data, ci_trainer_runs, trainer_refusals)

CHECKS = Checks("mm_speed_check")
fail, expect = CHECKS.fail, CHECKS.expect
F = 0.1


def check_rendering(items):
    n = len(items)
    for k in range(n):
        expect(tmp.rendering(items, k, F) == tmp.rendering(items, k) == items[k],
               f"pass 0 of {items[k]['id']} changed with --a-speed-perturb {F}")
        a, b = tmp.rendering(items, n + k, F), tmp.rendering(items, n + k)
        s = a.get("speed")
        expect(s is not None and 1 - F <= s <= 1 + F and abs(s * 160 - round(s * 160)) < 1e-9
               and {x: y for x, y in a.items() if x != "speed"} == b and "speed" not in b
               and tmp.rendering(items, n + k, F) == a,
               f"pass 1 of {items[k]['id']}: {a} against {b}")
    speeds = [tmp.rendering(items, v * n, F)["speed"] for v in range(1, 51)]
    expect(min(speeds) < 0.93 and max(speeds) > 1.07 and len(set(speeds)) > 10,
           f"50 passes' speeds {sorted(set(speeds))}: not spread over [0.9, 1.1]")
    print(f"mm_speed_check: rendering: pass 0 unchanged, pass 1 speeds "
          f"{[tmp.rendering(items, n + k, F)['speed'] for k in range(n)]}; 50 passes "
          f"{min(speeds):.4f}-{max(speeds):.4f}, {len(set(speeds))} values")


def check_samples(items, data, tok):
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    # the proxy's kind of item: silence drawn around the speech, noise at an SNR
    its = [{k: v for k, v in dict(it, snr_db=20.0).items() if k != "samples"} for it in items]
    n = len(its)
    # a pass-1 clip at least 5% off speed 1: its soft-token count must move by 10+ tokens
    k = next(k for k in range(n) if abs(tmp.rendering(its, n + k, F)["speed"] - 1) >= 0.05)
    sped, plain = tmp.rendering(its, n + k, F), tmp.rendering(its, n + k)
    n1, n0 = len(tmp.mmd.audio_samples(sped, data)), len(tmp.mmd.audio_samples(plain, data))
    want = 128000 * 16000 // round(16000 * sped["speed"]) - 128000
    expect(n1 - n0 == want, f"pass 1 at speed {sped['speed']}: {n1} samples against {n0} at "
           f"F 0: {n1 - n0} more, want {want}")
    fe, pr = Gemma4AudioFeatureExtractor(), tmp.Prompter(tok)
    a = tmp.Items(its, "audio", data, None, pr, fe, 2, speed=F)
    b = tmp.Items(its, "audio", data, None, pr, fe, 2)
    audio_id = pr.id["<|audio|>"]
    t1 = a.render(n + k)["ids"].count(audio_id)
    t0 = b.render(n + k)["ids"].count(audio_id)
    expect(abs(t1 - t0 * n1 / n0) <= 1.0 and abs(t1 - t0) >= 10,
           f"soft tokens {t1} at speed {sped['speed']} against {t0}: want {t0 * n1 / n0:.1f}")
    p0a, p0b = a.render(k), b.render(k)
    expect(p0a["feats"].tobytes() == p0b["feats"].tobytes() and p0a["ids"] == p0b["ids"],
           "pass 0's features or prompt changed with --a-speed-perturb")
    print(f"mm_speed_check: samples: {its[k]['id']} pass 1 at speed {sped['speed']}: {n1} "
          f"samples against {n0} ({n1 - n0:+d}, want {want:+d}); soft tokens {t1} against {t0} "
          f"(x {n1 / n0:.4f}: {t0 * n1 / n0:.1f}); pass 0's features unchanged")


def check_trainer(data, d):
    trainer_refusals(tmp, [os.path.join(d, "bad"), "--data", data, "--preset", "ci", "--device",
                           "cpu"],
                     ((["--a-speed-perturb", "-0.1"], "expected 0 <= F < 0.5"),
                      (["--a-speed-perturb", "0.5"], "expected 0 <= F < 0.5"),
                      (["--reps", "0"], "expected 1 or more")), expect)
    r2, sp = ["--reps", "2"], ["--a-speed-perturb", str(F)]
    runs = ci_trainer_runs(tmp, data, d, (
        ("off", r2), ("zero", r2 + ["--a-speed-perturb", "0"]), ("sp", r2 + sp),
        ("sp2", r2 + sp), ("r1", []), ("r1_sp", sp)), fail)
    h = {k: v[1] for k, v in runs.items()}
    expect(h["off"] == h["zero"], f"--a-speed-perturb 0 changed the weights ({h['off'][:12]} vs "
           f"{h['zero'][:12]})")
    expect(h["sp"] == h["sp2"], f"two runs at --a-speed-perturb {F} differ ({h['sp'][:12]} vs "
           f"{h['sp2'][:12]})")
    expect(h["sp"] != h["off"], f"--a-speed-perturb {F} with 2 renderings changed no weight")
    expect(h["r1"] == h["r1_sp"], f"--a-speed-perturb {F} with one rendering (pass 0 only) "
           f"changed the weights ({h['r1'][:12]} vs {h['r1_sp'][:12]})")
    sh = runs["sp"][0]["shapes"]
    expect(sh.get("a_speed_perturb") == F and sh.get("reps") == 2 and
           "a_speed_perturb" not in runs["off"][0]["shapes"],
           f"train.json's shapes: {sh.get('a_speed_perturb')}, reps {sh.get('reps')}")
    print(f"mm_speed_check: trainer: reps 2 off {h['off'][:12]} = F 0 {h['zero'][:12]}; F {F} "
          f"{h['sp'][:12]} twice; reps 1 {h['r1'][:12]} = with F {h['r1_sp'][:12]}")


def main():
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d)
        audio = [i for i in tmp.mmd.read_jsonl(os.path.join(data, "speech.jsonl"))
                 if i["split"] == "train"]
        images = [i for i in tmp.mmd.read_jsonl(os.path.join(data, "images.jsonl.gz"))
                  if i["split"] == "train"]
        check_rendering(audio)
        expect(all("speed" not in tmp.rendering(images, len(images) + k, F)
                   for k in range(len(images))), "an image rendering got a speed")
        tok = check_tokenizer(tmp, [i["text"] for i in audio + images])
        # 8 s clips for the soft-token count (a 5% speed change: 10+ of ~200 tokens)
        long_data = ci_data(tmp, os.path.join(d, "long"), seconds=8)
        check_samples([i for i in tmp.mmd.read_jsonl(os.path.join(long_data, "speech.jsonl"))
                       if i["split"] == "train"], long_data, tok)
        check_trainer(data, d)
    print(f"mm_speed_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
