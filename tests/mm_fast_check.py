#!/usr/bin/env python3
"""tests/test_mm_fast.sh's checks of train_mm_proxy.py's step cuts (issue 35: the GPU step is
CPU-bound, ~11,600 launches a step), on the CPU, with train_step itself on the tiny preset's
shapes (923,672 parameters, 199 tensors) and two fixed half-batches (2 synthetic images, 2
synthetic clips, --pad-to 64):
  1. exactness: 6 steps of train_step with AdamW as --adamw auto builds it on the CPU (foreach)
     against 6 steps of the step as it was written before the cuts, kept here (each half's loss
     read with .item(), then its backward; torch's clip_grad_norm_ read with float(); AdamW's
     per-tensor loop): the 12 losses and the 6 gradient norms equal bit for bit, and all 199
     fp32 weights after the 6 steps;
  2. fused AdamW (--adamw auto's CUDA choice) against the same reference: it rounds otherwise,
     the update and then the weight's own fp32 add, so after one step every weight w within
     eps32 |w| + FUSED_UPDATE_TOL of the loop's (one ulp of w, which no absolute bound honours
     for the norm weights at ~1.0, plus the update's rounding; that step moves a weight by up
     to lr = 6e-4; measured 2026-12-07, torch 2.15 on AVX512 / AVX2 / no vector kernels:
     ~14,500 of 923,672 weights differ, the largest by 5.96e-8 = one ulp of a norm weight at
     0.9994, and no weight by more than 1.2e-10 beyond its ulp) and step 2's losses within
     FUSED_LOSS_TOL; some weight
     must differ (a fused path that silently ran the loop would pass 1 and fail here). Not
     compared after more steps: at this lr the tiny run amplifies any rounding ~5-10x a step
     (measured max |dw| 2.8e-5 after 2 steps, 1.1e-4 after 3, 8e-3 after 6, losses 2e-2 apart
     at step 6), as it did the padding's (bench/NOTES.md "The multimodal proxy's step is
     CPU-bound"); the 6 fused losses must be finite;
  3. the op count of one step (after 2 warm ones) as the GPU runs it (bf16 autocast on, AdamW
     fused): train_mm_proxy.step_ops' launch-like ops at most OPS_MAX in all and OPTIMIZER_MAX
     in the optimizer, and no .item() of the trainer's own (outside the model, autograd and
     the optimizer; its one read of the losses and norm is a tolist(), no aten op on the
     CPU); the control: the reference step as the GPU ran it (foreach AdamW) counted the same
     way exceeds both bounds and has its 3 .item() (2 losses, the norm).
  4. --compile refuses what it cannot honour, each with a one-line error and exit 1 before any
     data is read: no --pad-to, --strict-determinism, --ctc-weight, --a-var-weight.
  5. --pad-frames: collate(pad 64, pad_frames 512) rounds the clips' frames to 512 and the
     sequence to 64, and the audio half's loss (half_loss, fp32) equals pad 64's within 1e-6
     (relative; padding is inert, tests/mm_pad_check.py).
  6. --eval-every (HeldOut, issue 35: does the model use its media before exact match moves?):
     heldout_pick on made-up soft-token counts keeps no count alone (a lone image has no
     neighbour to roll to) and picks the same items twice; then the trainer itself (main(), the
     ci preset at --batch 8, 10 steps, one thread, --no-export) on a data folder made here
     (make_mm_data.py's `ci` plan: 8 strings rendered by the trainer, DejaVu; 8 noise clips
     written as the speech step's WAVs) with --eval-every 4 --eval-items 4 and with
     --eval-every 0: train.json's final_loss (the mean of every step's losses, both kinds),
     grad_norm_max and the saved weights' sha256 equal (the evaluation moves no stream and
     leaves no hook); the rows are steps 4, 8 and 10 (the end), each kind's loss, zeroed and
     rolled finite, and zeroed and rolled differ from as is in every row: the tiny model's
     answer tokens attend (causally, through every layer) to the media positions, so a
     different soft token there changes every answer logit; equal values would mean the hook
     did not reach the decoder (a model that ignores its media); a third run with
     --eval-decode (each held-out item's greedy answer too, tests/mm_exact_check.py) gives the
     same final_loss, grad_norm_max and weights, the same held-out losses, and a decode record
     (4 answers, its scores finite, 1 to its bound forwards, no answer from non-finite logits)
     for each kind and row;
, not under ctest: the first call compiles for ~2-10 minutes on a
shared CPU) it checks instead that --compile's half_loss (train_mm_proxy.compile_loss) gives
each half's loss within COMPILE_LOSS_TOL (relative) and every gradient within COMPILE_GRAD_TOL
(norm-relative) of the eager ones on the tiny model at step 1, every gradient finite, in one
graph a half (no graph break).
The bounds were measured with torch 2.15 and transformers 5.17 (bench/NOTES.md "Fewer launches a
step"): another version may move them; the failure prints the count by phase.
Prints one line per check; exit 1 on the first failure."""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import (  # noqa: E402
    check_tokenizer, ci_data, ci_trainer_runs, fp32_model, mm_items, trainer_refusals)

STEPS = 6
FUSED_UPDATE_TOL = 1e-9  # beyond one ulp of the weight, after one step; measured 1.2e-10
FUSED_LOSS_TOL = 2e-6  # step 2's losses (after one update); measured 4.8e-7
OPS_MAX = 7940  # measured 7,918 (fused, autocast); the reference step: 7,962
COMPILE_LOSS_TOL = 1e-6  # measured 0 (image), 7.8e-8 (audio)
COMPILE_GRAD_TOL = 1e-3  # measured 2.1e-4 (image, a layer norm's weight: a sum over positions)
OPTIMIZER_MAX = 12  # 6 groups x (the step counts' add, the fused update)


def fail(msg):
    print(f"mm_fast_check: FAIL: {msg}")
    sys.exit(1)


def setup(tok, p, impl, ref):
    """The tiny model from seed 0 and its optimizer: train_mm_proxy.make_optimizer's (impl: its
    --adamw), or ref: the groups as the trainer built them before the cuts, AdamW's per-tensor
    loop (impl "loop") or foreach (torch's CUDA default, as the GPU ran it)."""
    model = fp32_model(tmp, p, tok)
    if not ref:
        return model, tmp.make_optimizer(model, p, None, torch.device("cpu"), impl)
    groups = []
    v, a = tmp.SIDES["vision"], tmp.SIDES["audio"]
    for pre in (None, v, a):
        named = [x for n, x in model.named_parameters()
                 if (n.startswith(pre) if pre else not n.startswith(v + a))]
        for wd, keep in ((0.05, lambda x: x.dim() >= 2), (0.0, lambda x: x.dim() < 2)):
            groups.append({"params": [x for x in named if keep(x)], "weight_decay": wd})
    return model, torch.optim.AdamW(groups, lr=p["lr"], betas=(0.9, 0.98), eps=1e-8,
                                    foreach=impl == "foreach")


def reference_step(model, opt, b, amp, losses, norms):
    """The step as train_step wrote it before the cuts (every loss finite here)."""
    opt.zero_grad(set_to_none=True)
    for kind in ("image", "audio"):
        bb = dict(b[kind])
        lab = bb.pop("labels")
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            logits = model(**bb).logits
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), lab.reshape(-1), ignore_index=-100)
        losses[kind].append(loss.item())
        (loss / 2).backward()
    live = [x for g in opt.param_groups if g["lr"] > 0 for x in g["params"]]
    norms.append(float(torch.nn.utils.clip_grad_norm_(live, 1.0)))
    opt.step()


def run(tok, p, b, impl, steps, amp=False, profile_step=None, ref=False):
    """steps steps from seed 0 (ref: reference_step's, else train_step's); returns (losses,
    norms, weights, the profiled step's events)."""
    model, opt = setup(tok, p, impl, ref)
    losses, norms, events = {"image": [], "audio": [], "ctc": []}, [], None
    guard = tmp.StepGuard(1)  # a skipped step stops the check
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = tmp.lr_at(s, 30, p)
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      with_stack=True)  # (the model's modules: step_ops)
        if s == profile_step:
            prof.__enter__()
        if ref:
            reference_step(model, opt, b, amp, losses, norms)
        elif not tmp.train_step(model, opt, b, s, guard, losses, amp=amp, norms=norms):
            fail(f"step {s + 1} skipped")
        if s == profile_step:
            prof.__exit__(None, None, None)
            events = prof.events()
    return losses, norms, [x.detach().clone() for x in model.parameters()], events


def check_compile(tok, p, b):
    from torch._dynamo.utils import counters

    model, _ = setup(tok, p, "auto", False)
    out = {}
    for name, fn in (("eager", tmp.half_loss), ("compiled", tmp.compile_loss(model))):
        for kind in ("image", "audio"):
            model.zero_grad(set_to_none=True)
            bb = dict(b[kind])
            lab = bb.pop("labels")
            loss = fn(model, bb, lab, False)
            loss.backward()
            out[name, kind] = (float(loss.detach()),
                               {n: x.grad.clone() for n, x in model.named_parameters()
                                if x.grad is not None})
    for kind in ("image", "audio"):
        (le, ge), (lc, gc) = out["eager", kind], out["compiled", kind]
        dl = abs(le - lc) / abs(le)
        worst = max(float((ge[n] - gc[n]).norm() / ge[n].norm()) for n in ge)
        bad = sum(int((~torch.isfinite(g)).sum()) for g in gc.values())
        print(f"mm_fast_check: compiled {kind}: loss {lc:.9f} vs {le:.9f} ({dl:.2g}), {len(gc)}/"
              f"{len(ge)} gradients, worst {worst:.2g} (tols {COMPILE_LOSS_TOL}, "
              f"{COMPILE_GRAD_TOL}), non-finite {bad}")
        if set(gc) != set(ge) or bad or not (dl <= COMPILE_LOSS_TOL and
                                             worst <= COMPILE_GRAD_TOL):
            fail(f"the compiled {kind} half is not the eager one within the tolerances")
    n_breaks = sum(counters["graph_break"].values())
    n_graphs = counters["stats"]["unique_graphs"]
    print(f"mm_fast_check: compiled: {n_graphs} graphs, {n_breaks} graph breaks")
    if n_breaks or n_graphs != 2:
        fail("expected one graph a half and no break")
    print("mm_fast_check: ok")


def main():
    torch.set_num_threads(1)
    tok = check_tokenizer(tmp, ["the quick brown fox jumps over the lazy dog blue sky 42"])
    p = dict(tmp.PRESETS["tiny"], vocab=tok.get_vocab_size())
    its = mm_items(tmp, tok, 0, ("blue sky", "42"), (("the cat sat", 16000),
                                                     ("open the door", 16000)))
    b = {k: tmp.collate(v, 64) for k, v in its.items()}
    if sys.argv[1:] == ["--compile"]:
        return check_compile(tok, p, b)

    # 1. the cuts are exact with AdamW foreach
    ref_l, ref_n, ref_w, _ = run(tok, p, b, "loop", STEPS, ref=True)
    new_l, new_n, new_w, _ = run(tok, p, b, "auto", STEPS)
    n_w = len(ref_w)
    print(f"mm_fast_check: reference losses image {ref_l['image']} audio {ref_l['audio']}")
    n_loss = sum(x == y for k in ("image", "audio") for x, y in zip(ref_l[k], new_l[k]))
    n_norm = sum(x == y for x, y in zip(ref_n, new_n))
    n_same = sum(torch.equal(x, y) for x, y in zip(ref_w, new_w))
    print(f"mm_fast_check: foreach vs reference: {n_loss}/{2 * STEPS} losses, {n_norm}/{STEPS} "
          f"norms, {n_same}/{n_w} weight tensors bit-identical")
    if n_w != 199 or n_loss != 2 * STEPS or n_norm != STEPS or n_same != n_w:
        fail("train_step with foreach AdamW is not the reference step bit for bit")
    if any(not math.isfinite(x) for k in ("image", "audio") for x in new_l[k]):
        fail("a loss is not finite")
    if ref_l["image"][-1] >= ref_l["image"][0] - 0.5:  # the 6 steps train: weights moved
        fail(f"the image loss did not fall ({ref_l['image'][0]} -> {ref_l['image'][-1]})")

    # 2. fused AdamW: within the named tolerance, and not the same bits
    _, _, ref1_w, _ = run(tok, p, b, "loop", 1, ref=True)
    _, _, fu1_w, _ = run(tok, p, b, "fused", 1)
    fu_l, _, _, _ = run(tok, p, b, "fused", STEPS)
    eps = torch.finfo(torch.float32).eps
    dw = max(float((x - y).abs().max()) for x, y in zip(ref1_w, fu1_w))
    over = float(torch.stack([((x - y).abs() - eps * torch.maximum(x.abs(), y.abs())).max()
                              for x, y in zip(ref1_w, fu1_w)]).max())  # beyond w's ulp; NaN stays
    dl = max(abs(ref_l[k][1] - fu_l[k][1]) for k in ("image", "audio"))
    n_diff = sum(int((x != y).sum()) for x, y in zip(ref1_w, fu1_w))
    d6 = max(abs(ref_l[k][-1] - fu_l[k][-1]) for k in ("image", "audio"))
    print(f"mm_fast_check: fused vs reference: after step 1 {n_diff} weights differ, max |dw| "
          f"{dw:.3g}, {over:.3g} beyond one ulp (tol {FUSED_UPDATE_TOL}); step 2's losses "
          f"{dl:.3g} apart (tol {FUSED_LOSS_TOL})"
          f"; step {STEPS}'s {d6:.3g} apart (not bounded)")
    if not (over <= FUSED_UPDATE_TOL and dl <= FUSED_LOSS_TOL):  # (NaN fails)
        fail("fused AdamW moved the run beyond the named tolerance")
    if n_diff == 0:
        fail("fused AdamW gave the loop's bits: the fused path did not run")
    if any(not math.isfinite(x) for k in ("image", "audio") for x in fu_l[k]):
        fail("a fused run's loss is not finite")

    # 3. the op count of a step as the GPU runs it
    _, _, _, ev_new = run(tok, p, b, "fused", 3, amp=True, profile_step=2)
    _, _, _, ev_ref = run(tok, p, b, "foreach", 3, amp=True, profile_step=2, ref=True)
    new, ref = tmp.step_ops(ev_new), tmp.step_ops(ev_ref)
    print(f"mm_fast_check: ops a step (autocast, fused AdamW): {new['total']} {new['phase']}, "
          f"trainer .item() {new['trainer_items']} (bound {OPS_MAX}, optimizer "
          f"{OPTIMIZER_MAX}, 0)")
    print(f"mm_fast_check: the reference step (foreach AdamW, as the GPU ran it): "
          f"{ref['total']} {ref['phase']}, trainer .item() {ref['trainer_items']}")
    if new["total"] > OPS_MAX or new["phase"].get("optimizer", 0) > OPTIMIZER_MAX or \
            new["trainer_items"] != 0:
        fail("the step's op count went back above its bound")
    if ref["total"] <= OPS_MAX or ref["phase"].get("optimizer", 0) <= OPTIMIZER_MAX or \
            ref["trainer_items"] != 3:
        fail("the reference step is within the bounds or has not its 3 .item() (the count "
             "cannot fail)")
    # 4. --compile's refusals
    cases = ((["--compile"], "--pad-to"),
             (["--compile", "--pad-to", "64", "--strict-determinism"], "--strict-determinism"),
             (["--compile", "--pad-to", "64", "--ctc-weight", "0.3"], "--ctc-weight"),
             (["--compile", "--pad-to", "64", "--a-var-weight", "20"], "--a-var-weight"))
    lines = trainer_refusals(tmp, [os.devnull, "--data", "/nonexistent", "--device", "cpu",
                                   "--preset", "tiny"], cases, lambda ok, msg: ok or fail(msg))
    for (extra, _), line in zip(cases, lines):
        print(f"mm_fast_check: {' '.join(extra)}: refused: {line}")
    # 5. --pad-frames
    a64, a512 = tmp.collate(its["audio"], 64), tmp.collate(its["audio"], 64, pad_frames=512)
    f64, f512 = a64["input_features"].shape[1], a512["input_features"].shape[1]
    t64, t512 = a64["input_ids"].shape[1], a512["input_ids"].shape[1]
    if f512 % 512 or f512 <= f64 or t512 != t64 or t512 % 64:
        fail(f"pad_frames 512: frames {f64} -> {f512}, sequence {t64} -> {t512}")
    model, _ = setup(tok, p, "auto", False)
    with torch.no_grad():
        ls = []
        for bb in (a64, a512):
            bb = dict(bb)
            lab = bb.pop("labels")
            ls.append(float(tmp.half_loss(model, bb, lab, False)))
    print(f"mm_fast_check: pad_frames 512: frames {f64} -> {f512}, sequence {t512}; audio loss "
          f"{ls[0]:.7f} vs {ls[1]:.7f}")
    if not abs(ls[0] - ls[1]) <= 1e-6 * abs(ls[0]):
        fail("the frames' padding changed the audio loss")
    check_heldout()
    print("mm_fast_check: ok")


def check_heldout():
    import tempfile

    ns = [66, 69, 69, 64, 69, 66, 70, 66, 68, 69]
    picks = [tmp.heldout_pick(ns, 4, seed) for seed in range(20)]
    for seed, pk in enumerate(picks):
        cnt = {n: sum(ns[i] == n for i in pk) for n in set(ns[i] for i in pk)}
        grouped = [ns[i] for i in pk] == sorted(ns[i] for i in pk)
        if min(cnt.values()) < 2 or 70 in cnt or len(set(pk)) != len(pk) or not grouped or \
                pk != tmp.heldout_pick(ns, 4, seed):
            fail(f"heldout_pick seed {seed}: {pk} (counts {cnt})")
    if len(set(map(tuple, picks))) < 5:
        fail(f"heldout_pick: the seed hardly changes the pick ({len(set(map(tuple, picks)))})")
    print(f"mm_fast_check: heldout_pick: 20 seeds, no count alone, {len(set(map(tuple, picks)))} "
          "distinct picks")
    out = {}
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d)
        ev = ["--eval-items", "4"]
        runs = ci_trainer_runs(tmp, data, d, (
            ("on", ev + ["--eval-every", "4"]), ("off", ev),
            ("decode", ev + ["--eval-every", "4", "--eval-decode"])), fail, steps=10, stdout=out)
    lines, lines_off, lines_dec = ([x for x in out[k].splitlines() if "held-out step" in x]
                                   for k in ("on", "off", "decode"))
    (on, h_on, _), (off, h_off, _), (dec, h_dec, _) = runs["on"], runs["off"], runs["decode"]
    same = [on[k] == off[k] == dec[k] for k in ("final_loss", "grad_norm_max")] + \
        [h_on == h_off == h_dec]
    print(f"mm_fast_check: --eval-every 4 vs 0 vs 4 --eval-decode: final_loss {on['final_loss']}"
          f" vs {off['final_loss']} vs {dec['final_loss']}, weights {h_on[:12]} vs {h_off[:12]}"
          f" vs {h_dec[:12]}: {sum(same)}/3 equal")
    if sum(same) != 3:
        fail("the held-out evaluation (or its decoding) changed the training run")
    rows = on["heldout"]
    for x in lines:
        print(f"mm_fast_check: {x}")
    if [x["step"] for x in rows] != [4, 8, 10] or len(lines) != 3 or off["heldout"] or \
            lines_off or on["eval_items"] != {"image": 4, "audio": 4}:
        fail(f"held-out rows at steps {[x['step'] for x in rows]}, {len(lines)} log lines "
             f"(expected 4, 8, 10: 3), off: {off['heldout']} {len(lines_off)}; items "
             f"{on['eval_items']}")
    # --eval-decode: the same losses (its forwards come after them and move nothing), a decode
    # record a kind and row, each with its 4 answers, and one more log line a kind and row
    keys = ("loss", "zeroed", "rolled", "soft_rms", "soft_cos")
    same_rows = all(a[k][m] == b[k][m] for a, b in zip(rows, dec["heldout"])
                    for k in ("image", "audio") for m in keys)
    decs = [x[k].get("decode") for x in dec["heldout"] for k in ("image", "audio")]
    good = [x is not None and len(x["answers"]) == 4 and 1 <= x["forwards"] <= x["bound"] and
            x["nonfinite"] == 0 and
            all(math.isfinite(x[m]) for m in ("exact", "cer", "cer_other", "len_diff"))
            for x in decs]
    print(f"mm_fast_check: --eval-decode: held-out losses {'equal' if same_rows else 'differ'}; "
          f"{sum(good)}/{len(good)} decode records whole; {len(lines_dec)} log lines")
    if not same_rows or len(decs) != 6 or not all(good) or len(lines_dec) != 9 or \
            any("decode" in x[k] for x in rows for k in ("image", "audio")) or \
            dec.get("eval_decode") is not True:
        fail(f"--eval-decode's rows: {dec['heldout']}")
    vals = [x[k][m] for x in rows for k in ("image", "audio") for m in ("loss", "zeroed",
                                                                      "rolled")]
    moved = sum(x[k][m] != x[k]["loss"] for x in rows for k in ("image", "audio")
                for m in ("zeroed", "rolled"))
    print(f"mm_fast_check: held-out rows: {len(vals)} values, "
          f"{sum(math.isfinite(v) for v in vals)} finite; zeroed / rolled differ from as is in "
          f"{moved}/12")
    if len(vals) != 18 or not all(math.isfinite(v) for v in vals) or moved != 12:
        fail("a held-out value is not finite, or the media's soft tokens did not reach the "
             "decoder")


if __name__ == "__main__":
    main()
