#!/usr/bin/env python3
"""tests/test_mm_vwarm.sh's checks of train_mm_proxy's --v-warm-steps (the vision-only warm phase
before the joint steps; issue 35), on the CPU:
  1. vision_warm on the ci model with real 192 x 816 images (a stream of collated half-batches,
     as the trainer hands it): the phase runs the vision tower once a step and never the
     decoder or the audio tower; every decoder and audio weight is bit-identical after the phase,
     every vision tensor that the aux loss reaches (the tower, embed_vision) and the head moved
     (a weight changed in each); the warm losses are finite, one a step, and their record says
     the steps done, the images read and the seconds;
  2. the warm optimizer holds the vision side and the head only, the decoder and audio sides none
     of their tensors; its schedule warms up over min(the run's warm-up, N / 10) steps;
  3. the trainer (ci plan, noise clips, 6 joint steps, one thread): --v-warm-steps 0 gives the
     same weights as no option (sha256 of the saved safetensors), also with --v-aux-weight 0.5;
     --v-warm-steps 4 --v-aux-weight 0.5 twice gives the same weights (deterministic from the
     seed), records train.json's v_warm (4 steps done, finite losses in losses_every_25 /
     final_loss, its seconds), keeps the 6 joint steps' losses, and saves the same tensor names,
     shapes and dtypes as without it; with --eval-every a held-out row at step 0 after the warm
     phase (then the run's), each with the aux head's held-out read-out, and train.json's v_aux
     counts the joint steps' images only; --v-warm-steps without --v-aux-weight, and a negative
     count, are refused in one line.
Prints one line per check and the count; exit 1 on the first failure."""
import math
import os
import subprocess
import sys
import tempfile
import time
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import (  # noqa: E402
    Checks, check_tokenizer, ci_data, ci_trainer_runs, fp32_model, layout, mm_items)

CHECKS = Checks("mm_vwarm_check")
fail, expect = CHECKS.fail, CHECKS.expect


def side(n):
    return ("vision" if n.startswith(tmp.SIDES["vision"]) else
            "audio" if n.startswith(tmp.SIDES["audio"]) else "decoder")


def check_phase(tok, texts):
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size())
    model = fp32_model(tmp, p, tok)
    vaux = tmp.VisionAux(model, "".join(texts), 0, tok, tmp.Prompter(tok).id["<turn|>"])
    items = mm_items(tmp, tok, 4, texts, [])["image"]
    half, n = 4, 5

    def stream():
        k = 0
        while True:
            yield tmp.collate([items[(k + i) % len(items)] for i in range(half)])
            k += half

    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    head_before = vaux.proj.weight.detach().clone()
    opt = tmp.make_optimizer(model, p, None, None, "foreach", vaux)
    wopt = tmp.warm_optimizer(model, p, vaux, "foreach")
    ids = {id(x): side(n) for n, x in model.named_parameters()}
    held = [ids.get(id(x), "head") for g in wopt.param_groups for x in g["params"]]
    expect(set(held) == {"vision", "head"} and held.count("vision") ==
           sum(1 for k in before if side(k) == "vision"),
           f"the warm optimizer holds {sorted(set(held))} ({held.count('vision')} vision)")
    sched = tmp.warm_schedule(p, 400)
    expect(sched["warmup"] == min(p["warmup"], 40) and tmp.warm_schedule(p, 3)["warmup"] == 1,
           f"warm schedules {sched}, {tmp.warm_schedule(p, 3)}")
    args = types.SimpleNamespace(v_warm_steps=n, v_warm_batch=None, minutes=30.0, max_skips=10,
                                 data=None, seed=0, pad_to=0)
    losses = {"v_warm": []}
    calls = {"decoder": 0, "audio": 0, "vision": 0}  # (the forwards the phase runs)
    for name, mod in (("decoder", model.model.language_model), ("audio", model.model.audio_tower),
                      ("vision", model.model.vision_tower)):
        mod.register_forward_hook(lambda *a, name=name: calls.__setitem__(name, calls[name] + 1))
    info = tmp.vision_warm(args, p, model, vaux, opt, {"image": stream()}, None, [], half,
                           False, torch.device("cpu"), False, losses, time.time())
    lw = losses["v_warm"]
    expect(calls == {"decoder": 0, "audio": 0, "vision": n}, f"forwards in the phase {calls}")
    expect(len(lw) == n and all(math.isfinite(v) and v > 0 for v in lw), f"warm losses {lw}")
    expect(info["done"] == n and info["images"] + info["images_too_short"] == n * half and
           info["seconds"] > 0 and not info["skipped_steps"] and info["stopped_at"] is None,
           f"the warm record {info}")
    moved = {"decoder": [], "audio": [], "vision": []}
    for k, v in model.named_parameters():
        moved[side(k)].append(not torch.equal(v, before[k]))
    expect(not any(moved["decoder"]) and not any(moved["audio"]),
           f"the warm phase moved {sum(moved['decoder'])} decoder and {sum(moved['audio'])} "
           "audio tensors")
    tower = [not torch.equal(v, before[k]) for k, v in model.named_parameters()
             if k.startswith("model.vision_tower.")]
    embed = [not torch.equal(v, before[k]) for k, v in model.named_parameters()
             if k.startswith("model.embed_vision.")]
    expect(sum(tower) > len(tower) // 2 and any(embed),
           f"vision tensors moved: tower {sum(tower)}/{len(tower)}, embed_vision "
           f"{sum(embed)}/{len(embed)}")
    expect(not torch.equal(vaux.proj.weight, head_before), "the head did not move")
    print(f"mm_vwarm_check: vision_warm on the ci model: {n} steps, v_warm {lw[0]:.3f} -> "
          f"{lw[-1]:.3f}; decoder / audio tensors moved 0 / 0 of {len(moved['decoder'])} / "
          f"{len(moved['audio'])}; tower {sum(tower)}/{len(tower)}, embed_vision "
          f"{sum(embed)}/{len(embed)}, head moved: {CHECKS.n} checks")


def check_trainer():
    trainer = os.path.join(os.path.dirname(tmp.__file__), "train_mm_proxy.py")
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d)
        for extra, want in ((["--v-warm-steps", "3"], "needs --v-aux-weight"),
                            (["--v-warm-steps", "-1", "--v-aux-weight", "0.5"], "expected 0")):
            res = subprocess.run([sys.executable, trainer, os.path.join(d, "bad"), "--data",
                                  data, "--preset", "ci", "--device", "cpu"] + extra,
                                 capture_output=True, text=True, timeout=300)
            expect(res.returncode == 1 and want in res.stderr and
                   len(res.stderr.strip().splitlines()) == 1,
                   f"{extra}: exit {res.returncode}: {res.stderr[-300:]}")
        aux = ["--v-aux-weight", "0.5"]
        runs = ci_trainer_runs(tmp, data, d, (
            ("off", []), ("zero", ["--v-warm-steps", "0"]), ("aux", aux),
            ("aux_zero", aux + ["--v-warm-steps", "0"]),
            ("warm", aux + ["--v-warm-steps", "4", "--eval-every", "3", "--eval-items", "4"]),
            ("warm2", aux + ["--v-warm-steps", "4"])), fail)
    h = {k: v[1] for k, v in runs.items()}
    expect(h["off"] == h["zero"], f"--v-warm-steps 0 changed the weights ({h['off'][:12]} vs "
           f"{h['zero'][:12]})")
    expect(h["aux"] == h["aux_zero"], f"--v-warm-steps 0 changed the aux run's weights "
           f"({h['aux'][:12]} vs {h['aux_zero'][:12]})")
    expect(h["warm"] == h["warm2"], f"two warm runs of one seed (one with the held-out "
           f"evaluation) differ ({h['warm'][:12]} vs {h['warm2'][:12]})")
    expect(h["warm"] != h["aux"], "the warm phase changed no weight")
    for k in ("off", "zero", "aux", "aux_zero"):
        j = runs[k][0]
        expect("v_warm" not in j and "v_warm" not in j["losses_every_25"] and
               "v_warm" not in j["seconds"], f"{k}: v_warm records without the option")
    w = runs["warm"][0]
    vw = w.get("v_warm") or {}
    lw = w["losses_every_25"].get("v_warm", [])
    expect(vw.get("steps") == 4 and vw.get("done") == 4 and vw.get("batch") == 4 and
           vw.get("seconds", 0) > 0 and lw and all(math.isfinite(v) for v in lw) and
           math.isfinite(w["final_loss"].get("v_warm", float("nan"))) and
           w["seconds"].get("v_warm", 0) > 0, f"the warm run's v_warm {vw}, losses {lw}")
    expect(len(w["losses_every_25"]["image"]) == len(runs["aux"][0]["losses_every_25"]["image"])
           and w["stopped_at"] is None, "the warm run's joint steps")
    # a held-out row after the warm phase (step 0), then at steps 3 and 6, each with the aux
    # head's read-out of the 4 held-out images (HeldOut's heads)
    rows = [{k: r["image"].get(k) for k in ("ctc", "ctc_items", "ctc_skipped")}
            for r in w["heldout"]]
    expect([r["step"] for r in w["heldout"]] == [0, 3, 6] and all(
        r["ctc_items"] is not None and r["ctc_items"] + r["ctc_skipped"] == 4 and
        (r["ctc"] is None if r["ctc_items"] == 0 else math.isfinite(r["ctc"]) and r["ctc"] > 0)
        for r in rows), f"held-out rows {[r['step'] for r in w['heldout']]}: {rows}")
    expect(w["v_aux"]["images"] + w["v_aux"]["images_too_short"] == 6 * 4,
           f"the joint phase's v_aux counts {w['v_aux']} (the warm and held-out images counted)")
    lay = layout(runs["off"][2])
    expect(lay == layout(runs["warm"][2]),
           "the saved tensors' names, shapes or dtypes changed with --v-warm-steps")
    print(f"mm_vwarm_check: trainer: off {h['off'][:12]} = warm 0 {h['zero'][:12]}; aux "
          f"{h['aux'][:12]} = aux + warm 0 {h['aux_zero'][:12]}; warm 4 {h['warm'][:12]} twice "
          f"(v_warm {lw[0]:.3f} -> {w['final_loss']['v_warm']:.3f}, {vw['seconds']:.2f} s); "
          f"{len(lay)} saved tensors, the same layout; refusals in one line")


def main():
    texts = ["stop 42", "Main St.", "x-ray 7/8", "Hello, world", "the cat's hat", "a b c",
             "READ 100", "quiet"]
    with tempfile.TemporaryDirectory() as d:
        tok = check_tokenizer(tmp, texts, os.path.join(d, "tok.json"))
    check_phase(tok, texts)
    check_trainer()
    print(f"mm_vwarm_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
