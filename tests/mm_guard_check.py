#!/usr/bin/env python3
"""tests/test_mm_guard.sh's checks of train_mm_proxy.py's StepGuard (issue 35: the first GPU
run went NaN at step ~425 and nothing guarded opt.step), on the CPU, with train_step itself on
a tiny Gemma-4 (the ci preset's shapes) and two fixed half-batches (2 synthetic images, 2
synthetic clips), through the documented test hook (--inject-nonfinite's set):
  1. 6 steps with the image loss made inf at step 2 and a decoder gradient made inf at step 4
     (steps counted from 1, as the log and the hook do): exactly steps 2 and 4 skipped (2
     records, the first naming the image loss, the second the gradient norm and the decoder),
     the weights bit-identical across each skipped step and changed by each of the 4 others,
     AdamW's step count 4, every weight finite;
  2. the control: the same gradient fault with a guard that lets every step through leaves
     non-finite weights (the fault the check injects is one the guard must stop);
  3. image losses inf from step 3 on, limit 3: the run stops at step 5 with the one-line error
     (SystemExit naming 3 steps in a row), 3 skips recorded; a good step between two bad ones
     resets the count (bad at 2, 3, 5, 6 with limit 3: no stop, 4 skips);
  4. parse_inject rejects a malformed spec with a one-line error.
Prints one line per check; exit 1 on the first failure."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import check_tokenizer, fp32_model, mm_items  # noqa: E402


def fail(msg):
    print(f"mm_guard_check: FAIL: {msg}")
    sys.exit(1)


def batches(tok):
    its = mm_items(tmp, tok, 0, ("blue sky", "42"), (("the cat sat", 16000),
                                                     ("open the door", 16000)))
    return {k: tmp.collate(v) for k, v in its.items()}


def setup(tok, p):
    model = fp32_model(tmp, p, tok)
    audio = [x for n, x in model.named_parameters() if n.startswith(tmp.SIDES["audio"])]
    for x in audio:  # as the presets: the audio side frozen (lr x 0)
        x.requires_grad_(False)
    live = [x for x in model.parameters() if x.requires_grad]
    opt = torch.optim.AdamW([{"params": live}], lr=1e-3, betas=(0.9, 0.98))
    return model, opt


def snapshot(model):
    return [x.detach().clone() for x in model.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def run(tok, p, b, steps, inject, guard):
    model, opt = setup(tok, p)
    losses = {"image": [], "audio": [], "ctc": []}
    snaps, applied = [snapshot(model)], []
    for s in range(steps):
        applied.append(tmp.train_step(model, opt, b, s, guard, losses, inject=inject))
        snaps.append(snapshot(model))
    return model, opt, snaps, applied, losses


class NoGuard:
    def step_ok(self, step, bad):
        return True


def main():
    tok = check_tokenizer(tmp, ["the quick brown fox jumps over the lazy dog blue sky 42"])
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size())
    b = batches(tok)

    # 1. two faults, two skips, nothing else touched
    g = tmp.StepGuard(10)
    model, opt, snaps, applied, losses = run(tok, p, b, 6, {(2, "image", "loss"),
                                                           (4, "audio", "grad")}, g)
    steps = [r["step"] for r in g.skipped]
    print(f"mm_guard_check: skipped {g.skipped}; applied {applied}")
    if steps != [2, 4]:
        fail(f"skipped steps {steps}, expected [2, 4]")
    if "image loss inf" not in g.skipped[0]["bad"][0]:
        fail(f"step 2's record {g.skipped[0]} does not name the image loss")
    if not ("gradient norm" in g.skipped[1]["bad"][0] and "decoder" in g.skipped[1]["bad"][0]):
        fail(f"step 4's record {g.skipped[1]} does not name the gradient norm and the decoder")
    for s in range(6):  # snaps[s] -> snaps[s + 1]: step s + 1
        if same(snaps[s], snaps[s + 1]) != (s + 1 in (2, 4)):
            fail(f"step {s + 1}: weights {'unchanged' if s + 1 not in (2, 4) else 'changed'}")
    n_adam = {int(st["step"]) for st in opt.state.values()}
    if n_adam != {4}:
        fail(f"AdamW's step counts {n_adam}, expected {{4}}")
    if not all(torch.isfinite(x).all() for x in model.parameters()):
        fail("a weight is not finite after the guarded run")
    tmp.check_finite(model)
    print("mm_guard_check: guarded: steps 2 and 4 skipped (weights bit-identical across them), "
          "4 applied, AdamW at 4 steps, every weight finite")

    # 2. the control: the same fault unguarded corrupts the weights
    model, _, _, _, _ = run(tok, p, b, 4, {(4, "audio", "grad")}, NoGuard())
    n_bad = sum(int((~torch.isfinite(x)).sum()) for x in model.parameters())
    print(f"mm_guard_check: unguarded control: {n_bad} non-finite weights")
    if n_bad == 0:
        fail("the injected gradient fault left the unguarded weights finite (the check is void)")
    try:
        tmp.check_finite(model)
        fail("check_finite passed non-finite weights")
    except SystemExit as e:
        print(f"mm_guard_check: check_finite: {e}")

    # 3. K in a row stops the run; a good step resets the count
    g = tmp.StepGuard(3)
    try:
        run(tok, p, b, 6, {(s, "image", "loss") for s in range(3, 7)}, g)
        fail("3 bad steps in a row did not stop the run")
    except SystemExit as e:
        msg = str(e)
    print(f"mm_guard_check: limit 3: {msg}")
    if "3 steps in a row" not in msg or "step 5" not in msg or \
            [r["step"] for r in g.skipped] != [3, 4, 5]:
        fail(f"expected a stop at step 5 after 3 skips: {msg}; {g.skipped}")
    g = tmp.StepGuard(3)
    _, _, _, applied, _ = run(tok, p, b, 6, {(s, "image", "loss") for s in (2, 3, 5, 6)}, g)
    if applied != [True, False, False, True, False, False] or len(g.skipped) != 4:
        fail(f"bad at 2, 3, 5, 6 (limit 3): applied {applied}, {len(g.skipped)} skips")
    print("mm_guard_check: bad at 2, 3, 5, 6 with limit 3: 4 skips, no stop")

    # 4. the hook's spec is checked
    for bad in ("3:image", "x:image:loss", "3:text:loss", "3:audio:nan"):
        try:
            tmp.parse_inject(bad)
            fail(f"parse_inject accepted {bad!r}")
        except SystemExit:
            pass
    if tmp.parse_inject("3:image:loss,4:audio:grad") != {(3, "image", "loss"),
                                                           (4, "audio", "grad")}:
        fail("parse_inject misread a good spec")
    print("mm_guard_check: parse_inject: 4 bad specs refused, a good one read")
    print("mm_guard_check: ok")


if __name__ == "__main__":
    main()
