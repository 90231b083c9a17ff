#!/usr/bin/env python3
"""tests/test_mm_visaux.sh's checks of train_mm_proxy's --v-aux-weight (VisionAux: an auxiliary
CTC read-out of the answer's characters from the image soft-token columns; issue 35), on the CPU:
  1. soft_columns on hand-made soft tokens: two images of 2 x 3 and 1 x 2 soft-token grids
     (6 x 9 and 3 x 6 patches, padded to 70 x 9 rows), each token's value its row-major index:
     the columns are the row means (1.5, 2.5, 3.5 / 0, 1), the second image's third column
     zero, widths [3, 2]; a token count that does not fit the grids refused;
  2. answer_texts gives back each answer from collate's labels (the trainer's BPE decodes its
     encoding exactly, spaces and punctuation included);
  3. on the ci model with real 192 x 816 images: the loss is finite and positive; its gradient
     reaches the vision tower, embed_vision and the head, and no decoder or audio parameter;
     the head's weights come from their own generator (the same seed the same weights, another
     seed others, the global torch stream untouched); an answer longer than its image's columns
     is skipped and counted;
  4. the CTC wiring reads: the head alone, fitted on synthetic columns that hold each
     character's code (one column a character, blank columns between), reads 60 held-out
     strings exactly (>= 0.9); fitted on the same columns with the answers shuffled, it does
     not (<= 0.2);
  5. the trainer (ci plan, noise clips, 6 steps, one thread): --v-aux-weight 0 gives the same
     weights as no option (off by default: the same run); --v-aux-weight 0.5 trains (train.json's
     v_aux block, a finite v_aux loss a step), moves the vision weights, and saves exactly the
     same tensor names, shapes and dtypes as without it (the exported package's layout comes
     from them: the head is never saved); a batch whose half the train items cannot fill is
     refused in one line (it hung).
Prints one line per check and the count; exit 1 on the first failure."""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import (  # noqa: E402
    READOUT_TEXTS, Checks, check_tokenizer, ci_data, ci_trainer_runs, fp32_model, grad_by_side,
    layout, mm_items, side_moved)

CHECKS = Checks("mm_visaux_check")
fail, expect = CHECKS.fail, CHECKS.expect


def grid_pos(ph, pw):
    pos = np.full((70 * 9, 2), -1, np.int64)
    xy = np.stack(np.meshgrid(np.arange(pw), np.arange(ph), indexing="xy"), -1).reshape(-1, 2)
    pos[:len(xy)] = xy
    return pos


def check_columns():
    pos = torch.from_numpy(np.stack([grid_pos(6, 9), grid_pos(3, 6)]))
    x = torch.cat([torch.arange(6.0), torch.arange(2.0)])[:, None].repeat(1, 4)  # 8 x 4
    cols, w = tmp.soft_columns(x, pos)
    want = torch.tensor([[1.5, 2.5, 3.5], [0.0, 1.0, 0.0]])[..., None].repeat(1, 1, 4)
    expect(w == [3, 2], f"widths {w}")
    expect(torch.equal(cols, want), f"columns {cols[..., 0].tolist()}")
    try:
        tmp.soft_columns(x[:7], pos)
        fail("soft_columns took 7 tokens for grids of 6 + 2")
    except SystemExit as e:
        expect("do not fit" in str(e), f"refusal {e}")
    print(f"mm_visaux_check: soft_columns hand-worked: {CHECKS.n} checks")


def check_answers(tok, texts):
    pr = tmp.Prompter(tok)
    batch = [dict(kind="image", pv=np.zeros((630, 768), np.float32),
                  pp=grid_pos(3, 51), ids=pr.prompt("image", 17), tgt=pr.target(t))
             for t in texts]
    lab = tmp.collate(batch)["labels"]
    got = tmp.answer_texts(tok, lab, pr.id["<turn|>"])
    expect(got == texts, f"answer_texts {got} != {texts}")
    print(f"mm_visaux_check: answer_texts: {len(texts)} answers decoded back exactly")


def check_model(tok, texts):
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size())
    model = fp32_model(tmp, p, tok)
    before = torch.random.get_rng_state()
    head = tmp.VisionAux(model, "".join(texts), 0, tok, tmp.Prompter(tok).id["<turn|>"])
    expect(torch.equal(before, torch.random.get_rng_state()), "VisionAux moved the global stream")
    again = tmp.VisionAux(model, "".join(texts), 0)
    other = tmp.VisionAux(model, "".join(texts), 1)
    expect(torch.equal(head.proj.weight, again.proj.weight), "same seed, other head weights")
    expect(not torch.equal(head.proj.weight, other.proj.weight), "other seed, same head")
    items = mm_items(tmp, tok, 3, texts, [])["image"]
    b = tmp.collate(items)
    lab = b.pop("labels")
    model.zero_grad(set_to_none=True)
    model.model.get_image_features(b["pixel_values"], b["image_position_ids"])
    loss = head.loss_from_labels(b["image_position_ids"], lab)
    expect(loss is not None and math.isfinite(loss.item()) and loss.item() > 0, f"loss {loss}")
    loss.backward()
    moved = grad_by_side(tmp, model)
    hg = sum(float(x.grad.abs().sum()) for x in head.parameters())
    expect(moved["vision"] > 0 and hg > 0, f"no gradient to the vision side / head: {moved} {hg}")
    expect(moved["decoder"] == 0 and moved["audio"] == 0, f"gradient leaked: {moved}")
    ev = sum(float(x.grad.abs().sum()) for x in model.model.embed_vision.parameters())
    vt = sum(float(x.grad.abs().sum()) for x in model.model.vision_tower.parameters())
    expect(ev > 0 and vt > 0, f"embed_vision {ev}, vision tower {vt}")
    # 192 x 816: 17 columns; an answer of 24 known characters has no CTC path
    long = texts[3] * 2
    model.model.get_image_features(b["pixel_values"][:2], b["image_position_ids"][:2])
    used, skipped = head.used, head.skipped
    r = head.loss(b["image_position_ids"][:2], [texts[0], long])
    expect(r is not None and head.skipped == skipped + 1 and head.used == used + 1,
           f"the long answer: used {head.used - used}, skipped {head.skipped - skipped}")
    print(f"mm_visaux_check: VisionAux on the ci model: loss {loss.item():.3f}, gradient "
          f"vision {moved['vision']:.3g} / head {hg:.3g} / decoder {moved['decoder']} / audio "
          f"{moved['audio']}; own generator; long answer skipped: {CHECKS.n} checks")


def check_reads():
    """Synthetic columns: one column a character with its fixed random code (+ noise), a blank
    column (a fixed code of its own) between characters; 2 soft-token rows."""
    chars = "abcdefghij"
    r = np.random.default_rng(5)
    code = {c: r.normal(0, 1, 16) for c in chars + "_"}

    def sample(text, k):
        cols = []
        for c in text:
            cols += [code[c], code["_"]]
        cols += [code["_"]] * (12 - len(cols))
        x = np.stack(cols)[None].repeat(2, 0) + np.random.default_rng(k).normal(0, 0.3, (2, 12, 16))
        return torch.tensor(x.reshape(-1, 16), dtype=torch.float32)

    def strings(n, seed):
        g = np.random.default_rng(seed)
        return ["".join(g.choice(list(chars), g.integers(2, 6))) for _ in range(n)]

    train, held = strings(400, 1), strings(60, 2)
    pos1 = torch.from_numpy(grid_pos(6, 36))  # 2 x 12 soft tokens
    stub = torch.nn.Module()
    stub.model = torch.nn.Module()
    stub.model.embed_vision = torch.nn.Identity()
    stub.model.embed_vision.text_hidden_size = 16

    def fit(labels):
        torch.manual_seed(0)
        head = tmp.VisionAux(stub, chars, 0)
        opt = torch.optim.Adam(head.parameters(), lr=0.05)
        for step in range(150):
            ks = np.random.default_rng(step).choice(len(train), 32, replace=False)
            x = torch.cat([sample(train[k], 1000 + k) for k in ks])
            stub.model.embed_vision(x)
            loss = head.loss(pos1[None].repeat(32, 1, 1), [labels[k] for k in ks])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            stub.model.embed_vision(torch.cat([sample(t, 5000 + k) for k, t in enumerate(held)]))
            got = head.greedy(pos1[None].repeat(len(held), 1, 1))
        return float(np.mean([a == b for a, b in zip(got, held)]))

    good = fit(train)
    shuffled = list(np.random.default_rng(9).permutation(train))
    bad = fit(shuffled)
    expect(good >= 0.9, f"the head read {good:.2f} of held-out synthetic strings (< 0.9)")
    expect(bad <= 0.2, f"shuffled answers still read {bad:.2f} (> 0.2)")
    print(f"mm_visaux_check: CTC read-out on synthetic columns: held-out exact {good:.2f}, "
          f"with shuffled answers {bad:.2f}")


def check_trainer():
    trainer = os.path.join(os.path.dirname(tmp.__file__), "train_mm_proxy.py")
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d)
        runs = ci_trainer_runs(tmp, data, d, (
            ("off", []), ("zero", ["--v-aux-weight", "0"]), ("on", ["--v-aux-weight", "0.5"])),
            fail)
        # 8 clips x 1 rendering cannot fill a half-batch of 16: refused at once (it hung: a
        # drop_last loader with no batch never yields)
        try:
            res = subprocess.run([sys.executable, trainer, os.path.join(d, "big"), "--data", data,
                                  "--preset", "ci", "--batch", "32", "--steps", "2", "--device",
                                  "cpu", "--threads", "1", "--no-export", "--eval-every", "0"],
                                 capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            fail("--batch 32 on 8 clips: no answer in 300 s (the empty loader's hang)")
        expect(res.returncode == 1 and "renderings for half-batches of 16" in res.stderr,
               f"--batch 32 on 8 clips: exit {res.returncode}: {res.stderr[-300:]}")
    (off, h_off, t_off), (_, h_zero, _), (on, h_on, t_on) = runs["off"], runs["zero"], \
        runs["on"]
    expect(h_off == h_zero, f"--v-aux-weight 0 changed the weights ({h_off[:12]} vs "
           f"{h_zero[:12]})")
    expect("v_aux" not in off and "v_aux" not in off["final_loss"], "v_aux rows without the option")
    va = on.get("v_aux") or {}
    lv = on["losses_every_25"].get("v_aux", [])
    expect(va.get("weight") == 0.5 and va.get("images", 0) > 0 and lv and
           all(math.isfinite(v) for v in lv), f"the on run's v_aux {va}, losses {lv}")
    lay = layout(t_off)
    expect(lay == layout(t_on),
           "the saved tensors' names, shapes or dtypes changed with --v-aux-weight")
    expect(side_moved(t_on, t_off, (".vision_tower.", ".embed_vision.")),
           "--v-aux-weight 0.5 moved no vision weight")
    print(f"mm_visaux_check: trainer: off {h_off[:12]} = weight 0 {h_zero[:12]}; on {h_on[:12]}"
          f" (v_aux {va}, final {on['final_loss'].get('v_aux'):.3f}); {len(lay)} saved "
          "tensors, the same layout")


def main():
    texts = READOUT_TEXTS
    with tempfile.TemporaryDirectory() as d:
        tok = check_tokenizer(tmp, texts, os.path.join(d, "tok.json"))
    check_columns()
    check_answers(tok, texts)
    check_model(tok, texts)
    check_reads()
    check_trainer()
    print(f"mm_visaux_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
