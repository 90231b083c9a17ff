#!/usr/bin/env python3
"""tests/test_mm_spread.sh's checks of train_mm_proxy.py's anti-collapse term on the audio soft
tokens (spread_terms / SpreadTerm, issue 35), on the CPU:
  1. hand-worked values (gamma 0.5, eps 1e-4): vectors whose every feature's std across the clips
     is >= gamma give var 0 exactly, whatever the padding frames hold; the same vector for every
     clip (at four different scales: the RMS normalisation makes them one) gives gamma -
     sqrt(1e-4) = 0.49 and cov 0; two clips (1, 1) and (1, -1) give var (0.5 - 0.01 + 0) / 2 =
     0.245, cov 0; (1, 1) and (-1, -1) give var 0 and cov 2 x 2^2 / 2 = 4; (1, 1) and
     (1.4, 0.2) give var (0.5 - sqrt(0.0801)) / 2 (the unbiased variance) and cov 0.0256;
     per="frame" reads exactly the valid frames (3 of 6); one clip gives None; a bad `per`
     stops with a one-line error;
  2. the gradient pushes the clips apart: from 6 nearly collapsed clips (spread 1e-3), 40 plain
     gradient steps on var alone raise every step's mean std and lower var, every value finite,
     the padding frames' gradient exactly 0;
  3. train_step with a SpreadTerm on a tiny Gemma-4 (the ci preset's shapes, the audio side
     trained, 2 synthetic clips + 2 images): weight 0 gives weights bit-identical to no term;
     weight 20 records one var and one cov per step (3 of 3), leaves the recorded audio loss
     (the CE) of the first step unchanged, and changes the audio side's update.
Prints one line per check; exit 1 on the first failure."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import Checks, check_tokenizer, fp32_model, mm_items  # noqa: E402

CHECKS = Checks("mm_spread_check")
fail, expect = CHECKS.fail, CHECKS.expect


def close(a, b, tol=1e-6):
    return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b)))


def clips(vectors, pad=1):
    """B x (1 + pad) x D frames: each clip's one valid frame, then `pad` padding frames of 1e3."""
    v = torch.tensor(vectors, dtype=torch.float64)
    x = torch.full((v.shape[0], 1 + pad, v.shape[1]), 1e3, dtype=torch.float64)
    x[:, 0] = v
    valid = torch.zeros(v.shape[0], 1 + pad, dtype=torch.bool)
    valid[:, 0] = True
    return x, valid


def check_values():
    g = 0.5
    # every feature of +-1 entries with two of each sign over 4 clips: std sqrt(4/3) >= 0.5
    x, v = clips([[1, -1, 1, 1], [1, 1, -1, -1], [-1, 1, 1, -1], [-1, -1, -1, 1]])
    var, cov = tmp.spread_terms(x, v, g)
    expect(var.item() == 0.0, f"var {var.item()} for stds >= gamma, expected 0")
    x2 = x.clone()
    x2[:, 1:] = -7.0  # other padding: the same terms
    var2, cov2 = tmp.spread_terms(x2, v, g)
    expect(var2.item() == 0.0 and cov2.item() == cov.item(),
           f"padding frames change the terms: {var2.item()} {cov2.item()} vs 0 {cov.item()}")
    # one vector at four scales: collapsed after the RMS normalisation
    base = [0.3, -1.2, 2.0, 0.7, -0.1]
    x, v = clips([[s * e for e in base] for s in (1, 2, 3, 0.5)])
    var, cov = tmp.spread_terms(x, v, g)
    expect(close(var, g - 1e-2), f"collapsed var {var.item()}, expected {g - 1e-2}")
    expect(abs(cov.item()) < 1e-12, f"collapsed cov {cov.item()}, expected 0")
    # (1, 1) and (1, -1): feature 0 std 0 -> 0.01, feature 1 values 1, -1 -> var 2
    x, v = clips([[1, 1], [1, -1]])
    var, cov = tmp.spread_terms(x, v, g)
    expect(close(var, (g - 0.01) / 2), f"var {var.item()}, expected {(g - 0.01) / 2}")
    expect(abs(cov.item()) < 1e-12, f"cov {cov.item()}, expected 0")
    # (1, 1) and (-1, -1): centred rows (1, 1), (-1, -1): C = [[2, 2], [2, 2]]
    x, v = clips([[1, 1], [-1, -1]])
    var, cov = tmp.spread_terms(x, v, g)
    expect(var.item() == 0.0, f"var {var.item()}, expected 0")
    expect(close(cov, 4.0), f"cov {cov.item()}, expected 4")
    # (1, 1) and (1.4, 0.2), both RMS 1: feature 0 values 1, 1.4 -> unbiased var 0.08, std
    # sqrt(0.0801) below gamma; feature 1 values 1, 0.2 -> var 0.32, std above; centred rows
    # (-0.2, 0.4), (0.2, -0.4): C = [[0.08, -0.16], [-0.16, 0.32]], cov 2 x 0.16^2 / 2
    x, v = clips([[1, 1], [1.4, 0.2]])
    var, cov = tmp.spread_terms(x, v, g)
    want = (g - 0.0801 ** 0.5) / 2
    expect(close(var, want), f"var {var.item()}, expected {want}")
    expect(close(cov, 0.0256), f"cov {cov.item()}, expected 0.0256")
    # per clip the frames are averaged first: (1, 1) and (1, -1) over two valid frames each
    x = torch.tensor([[[1.0, 3.0], [1.0, -1.0]], [[2.0, 0.0], [0.0, -2.0]]], dtype=torch.float64)
    v = torch.ones(2, 2, dtype=torch.bool)
    var, _ = tmp.spread_terms(x, v, g)
    expect(close(var, (g - 0.01) / 2), f"per-clip mean: var {var.item()}, expected 0.245")
    # per frame: valid frames (1, 1), (1, -1) of clip 0 and (1, 1) of clip 1 (the rest padding)
    x = torch.tensor([[[1.0, 1.0], [1.0, -1.0], [5.0, 9.0]],
                      [[1.0, 1.0], [3.0, 3.0], [-4.0, 2.0]]], dtype=torch.float64)
    v = torch.tensor([[True, True, False], [True, False, False]])
    var, cov = tmp.spread_terms(x, v, g, per="frame")
    s1 = (4.0 / 3.0 + 1e-4) ** 0.5  # feature 1: 1, -1, 1 -> mean 1/3, unbiased var 4/3
    expect(close(var, ((g - 0.01) + max(0.0, g - s1)) / 2),
           f"per-frame var {var.item()}, expected 0.245")
    expect(abs(cov.item()) < 1e-12, f"per-frame cov {cov.item()}, expected 0")
    x, v = clips([[1, 2, 3]])
    expect(tmp.spread_terms(x, v, g) is None, "one clip gives terms, expected None")
    try:
        tmp.spread_terms(x, v, g, per="token")
        expect(False, "per='token' accepted")
    except SystemExit as e:
        expect("--a-var-per token" in str(e) and "\n" not in str(e), f"error text: {e}")
    print(f"mm_spread_check: hand-worked values: var 0 at stds >= gamma, {g - 0.01:.2f} "
          "collapsed, 0.245 / cov 4 on two clips, per frame the 3 valid frames, None for one clip")


def mean_std(x, valid):
    m = valid.unsqueeze(-1).to(x.dtype)
    vec = (x * m).sum(1) / m.sum(1)
    vec = vec / vec.pow(2).mean(-1, keepdim=True).sqrt()
    return float(vec.std(0).mean())


def check_gradient():
    torch.manual_seed(0)
    B, T, D = 6, 5, 16
    base = torch.randn(1, 1, D, dtype=torch.float64)
    x = (base + 1e-3 * torch.randn(B, T, D, dtype=torch.float64)).requires_grad_(True)
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[2, 3:] = False
    valid[5, 1:] = False
    stds, vars_ = [mean_std(x.detach(), valid)], []
    for k in range(40):
        var, _ = tmp.spread_terms(x, valid, 0.15)
        x.grad = None
        var.backward()
        expect(torch.isfinite(x.grad).all(), f"step {k}: a non-finite gradient")
        expect(x.grad[~valid].abs().max().item() == 0.0,
               f"step {k}: padding frames get gradient {x.grad[~valid].abs().max().item()}")
        vars_.append(var.item())
        with torch.no_grad():
            x -= 0.5 * x.grad
        stds.append(mean_std(x.detach(), valid))
    up = sum(b > a for a, b in zip(stds, stds[1:]))
    down = sum(b < a for a, b in zip(vars_, vars_[1:]))
    print(f"mm_spread_check: 40 gradient steps on var: mean std {stds[0]:.2e} -> {stds[-1]:.3f} "
          f"(up at {up} of 40 steps), var {vars_[0]:.4f} -> {vars_[-1]:.4f} (down at {down} "
          "of 39)")
    expect(up == 40, f"the mean std rose at {up} of 40 steps")
    expect(down == 39, f"var fell at {down} of 39 steps")
    expect(stds[-1] > 100 * stds[0], f"std {stds[0]:.2e} -> {stds[-1]:.2e}: not pushed apart")


def setup(tok, p):
    model = fp32_model(tmp, p, tok)
    opt = torch.optim.AdamW([{"params": list(model.parameters())}], lr=1e-3, betas=(0.9, 0.98))
    return model, opt


def run(tok, p, b, weight, steps=3):
    model, opt = setup(tok, p)
    spread = tmp.SpreadTerm(model, weight, 0.15) if weight is not None else None
    losses = {"image": [], "audio": [], "ctc": [], "a_var": [], "a_cov": []}
    for s in range(steps):
        ok = tmp.train_step(model, opt, b, s, tmp.StepGuard(), losses, spread=spread)
        expect(ok, f"weight {weight}: step {s + 1} skipped")
    return model, losses


def check_train_step():
    tok = check_tokenizer(tmp, ["the cat sat", "open the door", "blue sky", "42"])
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size())
    its = mm_items(tmp, tok, 0, ("blue sky", "42"), (("the cat sat", 16000),
                                                     ("open the door", 24000)))
    b = {k: tmp.collate(v) for k, v in its.items()}
    m0, l0 = run(tok, p, b, None)
    mz, lz = run(tok, p, b, 0.0)
    m1, l1 = run(tok, p, b, 20.0)
    same = all(torch.equal(x, y) for x, y in zip(m0.parameters(), mz.parameters()))
    expect(same, "weight 0 changes the weights")
    expect(len(l0["a_var"]) == 0 and len(l1["a_var"]) == 3 and len(l1["a_cov"]) == 3,
           f"var recorded {len(l0['a_var'])} / {len(l1['a_var'])} times, expected 0 / 3")
    expect(all(torch.isfinite(torch.tensor(l1["a_var"] + l1["a_cov"]))), "a non-finite term")
    expect(l1["audio"][0] == l0["audio"][0],
           f"the recorded audio CE of step 1 {l1['audio'][0]} differs from {l0['audio'][0]}")
    audio = [(n, x, y) for (n, x), y in zip(m0.named_parameters(), m1.parameters())
             if n.startswith(tmp.SIDES["audio"])]
    diff = sum(not torch.equal(x, y) for _, x, y in audio)
    expect(diff > 0, "the term did not change the audio side's update")
    print(f"mm_spread_check: train_step: weight 0 bit-identical to no term; weight 20 var "
          f"{' '.join(f'{v:.4f}' for v in l1['a_var'])} (3 of 3 steps), audio CE of step 1 "
          f"{l1['audio'][0]:.4f} unchanged, {diff} of {len(audio)} audio tensors updated "
          "differently")


if __name__ == "__main__":
    check_values()
    check_gradient()
    check_train_step()
    print(f"mm_spread_check: ok ({CHECKS.n} checks)")
