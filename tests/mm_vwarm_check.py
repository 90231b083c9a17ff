#!/usr/bin/env python3
"""tests/test_mm_vwarm.sh's checks of train_mm_proxy's --v-warm-steps (the vision-only warm phase
before the joint steps; issue 35), its --a-warm and --tower-joint-lr-mult, on the CPU:
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
  4. --a-warm (the phase also trains the audio side from the --ctc-weight head's CTC loss): on
     the ci model with 2 s noise clips the phase runs the vision and the audio tower once a step
     each and never the decoder; the decoder is bit-identical after it, both towers, both
     embedders and both heads moved; the warm optimizer holds exactly those (each side at its
     lr multiplier, the heads x 1), and the record counts the clips (the head's own counts stay
     the joint phase's). The trainer: --a-warm twice gives the same weights, not those without
     it; train.json's v_warm says a_warm, its clips, and losses_every_25 / final_loss its audio
     loss (none of that without it); refused without --v-warm-steps, without --ctc-weight, and
     with the audio side at lr x 0.
  5. --tower-joint-lr-mult X: the joint optimizer's vision and audio groups x X, the decoder and
     heads x 1; X = 1 gives the no-option weights, 0.5 others, the record says X; refused
     without --v-warm-steps and at X <= 0.
Prints one line per check and the count; exit 1 on the first failure."""
import math
import os
import sys
import tempfile
import time
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import (  # noqa: E402
    READOUT_TEXTS, Checks, check_tokenizer, ci_data, ci_trainer_runs, fp32_model, layout,
    mm_items, trainer_refusals)

CHECKS = Checks("mm_vwarm_check")
fail, expect = CHECKS.fail, CHECKS.expect


def check_phase(tok, texts, a_warm=False):
    """vision_warm on the ci model; a_warm: with the audio CTC head (--a-warm: AudioChars on
    2 s noise clips, the audio side at lr x 0.3, ci's own x 0 being refused)."""
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size(), a_lr_mult=0.3)
    model = fp32_model(tmp, p, tok)
    closing = tmp.Prompter(tok).id["<turn|>"]
    vaux = tmp.VisionAux(model, "".join(texts), 0, tok, closing)
    head = tmp.AudioChars(model, "embed", 0, tok, closing) if a_warm else None
    got = mm_items(tmp, tok, 4, texts, [(t, 32000) for t in texts] if a_warm else [])
    half, n = 4, 5

    def stream(items):
        k = 0
        while True:
            yield tmp.collate([items[(k + i) % len(items)] for i in range(half)])
            k += half

    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    head_before = vaux.proj.weight.detach().clone()
    if a_warm:
        ctc_before = head.proj.weight.detach().clone()
    opt = tmp.make_optimizer(model, p, head, None, "foreach", vaux)
    wopt = tmp.warm_optimizer(model, p, vaux, "foreach", head)
    ids = {id(x): tmp.side_of(n) for n, x in model.named_parameters()}
    ids.update({id(x): "vision head" for x in vaux.parameters()})
    if a_warm:
        ids.update({id(x): "audio head" for x in head.parameters()})
    held = [ids[id(x)] for g in wopt.param_groups for x in g["params"]]
    want = {"vision", "vision head"} | ({"audio", "audio head"} if a_warm else set())
    expect(set(held) == want and len(held) == len(set(map(id, (
        x for g in wopt.param_groups for x in g["params"])))) and all(
        held.count(s) == sum(1 for k in before if tmp.side_of(k) == s) for s in ("vision", "audio")
        if s in want) and held.count("vision head") == 2 and
        held.count("audio head") == (2 if a_warm else 0),
        f"the warm optimizer holds {sorted(set(held))} ({held.count('vision')} vision, "
        f"{held.count('audio')} audio)")
    # --tower-joint-lr-mult: the joint optimizer's vision and audio groups x X, the rest x 1
    jm = {}
    for g in tmp.make_optimizer(model, p, head, None, "foreach", vaux, 0.25).param_groups:
        jm.setdefault(ids.get(id(g["params"][0]), "decoder"), set()).add(g["mult"])
    expect(jm["vision"] == {p["v_lr_mult"] * 0.25} and jm["audio"] == {0.3 * 0.25} and
           jm["decoder"] == jm["vision head"] == {1.0} and jm.get("audio head", {1.0}) == {1.0},
           f"the joint optimizer's multipliers at --tower-joint-lr-mult 0.25: {jm}")
    mults = {ids[id(g["params"][0])]: g["mult"] for g in wopt.param_groups if g["params"]}
    expect(mults.get("vision") == p["v_lr_mult"] and mults.get("audio", 0.3) == 0.3 and
           mults["vision head"] == 1.0 and mults.get("audio head", 1.0) == 1.0,
           f"the warm optimizer's lr multipliers {mults}")
    sched = tmp.warm_schedule(p, 400)
    expect(sched["warmup"] == min(p["warmup"], 40) and tmp.warm_schedule(p, 3)["warmup"] == 1,
           f"warm schedules {sched}, {tmp.warm_schedule(p, 3)}")
    args = types.SimpleNamespace(v_warm_steps=n, v_warm_batch=None, minutes=30.0, max_skips=10,
                                 data=None, seed=0, pad_to=0)
    losses = {"v_warm": [], "a_warm": []}
    calls = {"decoder": 0, "audio": 0, "vision": 0}  # (the forwards the phase runs)
    for name, mod in (("decoder", model.model.language_model), ("audio", model.model.audio_tower),
                      ("vision", model.model.vision_tower)):
        mod.register_forward_hook(lambda *a, name=name: calls.__setitem__(name, calls[name] + 1))
    info = tmp.vision_warm(args, p, model, vaux, opt,
                           {"image": stream(got["image"]),
                            "audio": stream(got["audio"]) if a_warm else None},
                           None, [], half, False, torch.device("cpu"), False, losses,
                           time.time(), head)
    lw, la = losses["v_warm"], losses["a_warm"]
    expect(calls == {"decoder": 0, "audio": n if a_warm else 0, "vision": n},
           f"forwards in the phase {calls}")
    expect(len(lw) == n and all(math.isfinite(v) and v > 0 for v in lw), f"warm losses {lw}")
    expect(len(la) == (n if a_warm else 0) and all(math.isfinite(v) and v > 0 for v in la),
           f"warm audio losses {la}")
    expect(info["done"] == n and info["images"] + info["images_too_short"] == n * half and
           info["seconds"] > 0 and not info["skipped_steps"] and info["stopped_at"] is None,
           f"the warm record {info}")
    if a_warm:  # every clip of 2 s fits its label; the head's counts stay the joint phase's
        expect(info.get("a_warm") is True and info["clips"] == n * half and
               info["clips_too_short"] == 0 and info["a_lr_mult"] == 0.3 and
               head.used == head.skipped == 0, f"the warm record's audio {info}, head "
               f"{head.used} / {head.skipped}")
    else:
        expect(not {"a_warm", "clips", "clips_too_short"} & set(info),
               f"audio keys in the vision-only record {info}")
    moved = {"decoder": [], "audio": [], "vision": []}
    for k, v in model.named_parameters():
        moved[tmp.side_of(k)].append(not torch.equal(v, before[k]))
    expect(not any(moved["decoder"]) and (a_warm or not any(moved["audio"])),
           f"the warm phase moved {sum(moved['decoder'])} decoder and {sum(moved['audio'])} "
           "audio tensors")
    parts = {}
    for pre in ("vision_tower", "embed_vision") + (("audio_tower", "embed_audio") if a_warm
                                                    else ()):
        parts[pre] = [not torch.equal(v, before[k]) for k, v in model.named_parameters()
                      if k.startswith(f"model.{pre}.")]
    expect(all(sum(m) > len(m) // 2 for k, m in parts.items() if k.endswith("_tower")) and
           all(any(m) for m in parts.values()),
           "tensors moved: " + ", ".join(f"{k} {sum(m)}/{len(m)}" for k, m in parts.items()))
    expect(not torch.equal(vaux.proj.weight, head_before), "the vision head did not move")
    if a_warm:
        expect(not torch.equal(head.proj.weight, ctc_before), "the audio head did not move")
    print(f"mm_vwarm_check: vision_warm{' --a-warm' if a_warm else ''} on the ci model: {n} "
          f"steps, v_warm {lw[0]:.3f} -> {lw[-1]:.3f}"
          + (f", a_warm {la[0]:.3f} -> {la[-1]:.3f}" if a_warm else "")
          + f"; decoder / audio tensors moved 0 / {sum(moved['audio'])} of "
          f"{len(moved['decoder'])} / {len(moved['audio'])}; "
          + ", ".join(f"{k} {sum(m)}/{len(m)}" for k, m in parts.items())
          + f", heads moved: {CHECKS.n} checks")


def check_trainer():
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d, seconds=2)  # 50 frames: every ci sentence fits AudioChars
        aux = ["--v-aux-weight", "0.5"]
        ctc = ["--ctc-weight", "0.5", "--ctc-units", "chars", "--a-lr-mult", "0.3"]
        trainer_refusals(tmp, [os.path.join(d, "bad"), "--data", data, "--preset", "ci",
                               "--device", "cpu"],
                         ((["--v-warm-steps", "3"], "needs --v-aux-weight"),
                          (["--v-warm-steps", "-1", "--v-aux-weight", "0.5"], "expected 0"),
                          (ctc + ["--a-warm"], "--a-warm needs --v-warm-steps"),
                          (aux + ["--v-warm-steps", "3", "--a-warm"],
                           "--a-warm needs --ctc-weight"),
                          (aux + ctc[:4] + ["--v-warm-steps", "3", "--a-warm"], "lr x 0"),
                          (["--tower-joint-lr-mult", "0.5"], "needs --v-warm-steps"),
                          (aux + ["--v-warm-steps", "3", "--tower-joint-lr-mult", "0"],
                           "expected a finite X > 0")), expect)
        runs = ci_trainer_runs(tmp, data, d, (
            ("off", []), ("zero", ["--v-warm-steps", "0"]), ("aux", aux),
            ("aux_zero", aux + ["--v-warm-steps", "0"]),
            ("warm", aux + ["--v-warm-steps", "4", "--eval-every", "3", "--eval-items", "4"]),
            ("warm2", aux + ["--v-warm-steps", "4"]),
            ("warm_m1", aux + ["--v-warm-steps", "4", "--tower-joint-lr-mult", "1"]),
            ("warm_m05", aux + ["--v-warm-steps", "4", "--tower-joint-lr-mult", "0.5"]),
            ("ctc", aux + ctc + ["--v-warm-steps", "4"]),
            ("awarm", aux + ctc + ["--v-warm-steps", "4", "--a-warm"]),
            ("awarm2", aux + ctc + ["--v-warm-steps", "4", "--a-warm"])), fail)
    h = {k: v[1] for k, v in runs.items()}
    expect(h["off"] == h["zero"], f"--v-warm-steps 0 changed the weights ({h['off'][:12]} vs "
           f"{h['zero'][:12]})")
    expect(h["aux"] == h["aux_zero"], f"--v-warm-steps 0 changed the aux run's weights "
           f"({h['aux'][:12]} vs {h['aux_zero'][:12]})")
    expect(h["warm"] == h["warm2"], f"two warm runs of one seed (one with the held-out "
           f"evaluation) differ ({h['warm'][:12]} vs {h['warm2'][:12]})")
    expect(h["warm"] != h["aux"], "the warm phase changed no weight")
    expect(h["warm_m1"] == h["warm2"], f"--tower-joint-lr-mult 1 changed the weights "
           f"({h['warm_m1'][:12]} vs {h['warm2'][:12]})")
    expect(h["warm_m05"] != h["warm2"], "--tower-joint-lr-mult 0.5 changed no weight")
    expect(h["awarm"] == h["awarm2"], f"two --a-warm runs of one seed differ ({h['awarm'][:12]} "
           f"vs {h['awarm2'][:12]})")
    expect(h["awarm"] != h["ctc"], "--a-warm changed no weight")
    for k in ("warm", "warm_m1", "ctc"):
        j = runs[k][0]
        expect("a_warm" not in j["losses_every_25"] and "a_warm" not in j["final_loss"] and
               "a_warm" not in j["v_warm"] and j["v_warm"]["tower_joint_lr_mult"] == 1.0,
               f"{k}: a_warm records without --a-warm, or its multiplier not 1: {j['v_warm']}")
    expect(runs["warm_m05"][0]["v_warm"]["tower_joint_lr_mult"] == 0.5,
           f"the x 0.5 run's record {runs['warm_m05'][0]['v_warm']}")
    a = runs["awarm"][0]
    la = a["losses_every_25"].get("a_warm", [])
    expect(a["v_warm"].get("a_warm") is True and a["v_warm"]["a_lr_mult"] == 0.3 and
           a["v_warm"]["clips"] + a["v_warm"]["clips_too_short"] == 4 * 4 and
           a["v_warm"]["clips"] > 0 and la and all(math.isfinite(v) for v in la) and
           math.isfinite(a["final_loss"].get("a_warm", float("nan"))) and
           a["ctc"]["clips"] + a["ctc"]["clips_too_short"] == 6 * 4,
           f"the --a-warm run's v_warm {a['v_warm']}, losses {la}, ctc {a['ctc']} (the joint "
           "phase's clips only)")
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
          f"{len(lay)} saved tensors, the same layout; --tower-joint-lr-mult 1 "
          f"{h['warm_m1'][:12]}, 0.5 {h['warm_m05'][:12]}; ctc + warm {h['ctc'][:12]}, + "
          f"--a-warm {h['awarm'][:12]} twice (a_warm {la[0]:.3f} -> "
          f"{a['final_loss']['a_warm']:.3f}); refusals in one line")


def main():
    texts = READOUT_TEXTS
    with tempfile.TemporaryDirectory() as d:
        tok = check_tokenizer(tmp, texts, os.path.join(d, "tok.json"))
    check_phase(tok, texts)
    check_phase(tok, texts, a_warm=True)
    check_trainer()
    print(f"mm_vwarm_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
