#!/usr/bin/env python3
"""tests/test_mm_lmwarm.sh's checks of train_mm_proxy's --lm-warm-steps (the decoder alone as a
causal LM on the plan's train texts before the towers' warm phase and the joint steps; issue 35),
on the CPU:
  1. lm_rows: every row starts with <bos> and holds whole segments <|turn> "model\\n" answer
     <turn|>; the labels (read back here from the ids, not from the generator's bookkeeping)
     are exactly each segment's answer ids and closing id at the position before them, nothing
     else; each pass over the texts takes every text once; the same seed gives the same rows.
  2. lm_texts: the ci plan's 16 train texts, its 16 held-out items counted as sharing a text
     (category "memorised": the ci plan's test split is its train items by design); the same
     plan with those held-out items marked "unseen_sentence" is refused in one line; with new
     held-out texts none is shared and none is in the LM text.
  3. lm_warm on the ci model (fp32, one thread): the LM loss falls; torch's and numpy's global
     generators are where they were (the run's data order is not moved); neither tower runs (forward
     hooks) and every vision and audio weight is bit-identical after the phase; the decoder
     moved (embed_tokens included); its optimizer holds the decoder's tensors only.
  4. the trainer (ci plan, noise clips, 6 joint steps): --lm-warm-steps 0 gives the weights of no
     option; --lm-warm-steps 16 twice gives the same weights (deterministic), other weights than
     without; train.json's lm_warm (steps, tokens, rows, losses, seconds) and losses' lm_warm;
     the joint phase's losses as many; with --eval-every a held-out row at step 0 after the
     phase whose answer losses are far under a uniform guess (ln 480 = 6.17); the same layout
     saved; --lm-warm-steps -1 and a plan that shares held-out texts refused in one line.
Prints one line per check and the count; exit 1 on the first failure."""
import math
import os
import shutil
import sys
import tempfile
import time
import types

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import (  # noqa: E402
    READOUT_TEXTS, Checks, check_tokenizer, ci_data, ci_trainer_runs, fp32_model, layout,
    trainer_refusals)

CHECKS = Checks("mm_lmwarm_check")
fail, expect = CHECKS.fail, CHECKS.expect


def check_rows(tok, texts):
    pr = tmp.Prompter(tok)
    opening = [pr.id["<|turn>"]] + pr.enc("model\n")
    targets = {tuple(pr.enc(t) + [pr.id["<turn|>"]]): t for t in texts}
    rows, row_len = 5, 64
    gen = tmp.lm_rows(pr, texts, rows, row_len, np.random.default_rng([0, 36]))
    seq, tokens = [], 0
    for _ in range(4):
        b = next(gen)
        tokens += b["tokens"]
        ids, att, lab = b["input_ids"], b["attention_mask"], b["labels"]
        expect(ids.shape == (rows, row_len) and att.shape == ids.shape, f"shape {ids.shape}")
        for r in range(rows):
            n = int(att[r].sum())
            row = ids[r, :n].tolist()
            expect(att[r, :n].all() and not att[r, n:].any() and not ids[r, n:].any() and
                   row[0] == pr.id["<bos>"], f"row {r}: mask or padding or <bos> wrong")
            # walk the row: segments opening + target, each target one of the texts'
            k, want = 1, [-100] * row_len
            while k < n:
                expect(row[k:k + len(opening)] == opening, f"row {r} at {k}: not a turn opening")
                k += len(opening)
                t = next((t for t in targets if tuple(row[k:k + len(t)]) == t), None)
                expect(t is not None, f"row {r} at {k}: no text's answer + <turn|> follows")
                for j in range(k, k + len(t)):
                    want[j - 1] = row[j]
                seq.append(targets[t])
                k += len(t)
            expect(lab[r].tolist() == want, f"row {r}: labels are not exactly the answers' ids "
                   "at the position before them")
    expect(tokens == sum(len(pr.enc(t)) + 1 for t in seq), "the tokens count")
    passes = [seq[i:i + len(texts)] for i in range(0, len(seq) - len(texts) + 1, len(texts))]
    expect(len(passes) >= 2 and all(sorted(p) == sorted(texts) for p in passes),
           f"a pass does not take every text once: {passes[:2]}")
    again = next(tmp.lm_rows(pr, texts, rows, row_len, np.random.default_rng([0, 36])))
    first = next(tmp.lm_rows(pr, texts, rows, row_len, np.random.default_rng([0, 36])))
    other = next(tmp.lm_rows(pr, texts, rows, row_len, np.random.default_rng([1, 36])))
    expect(torch.equal(again["input_ids"], first["input_ids"]) and
           not torch.equal(other["input_ids"], first["input_ids"]), "the rows' seed")
    print(f"mm_lmwarm_check: rows: {len(seq)} segments in 4 batches of {rows} x {row_len}, "
          f"{tokens} target ids, labels read back from the ids, {len(passes)} whole passes: "
          f"{CHECKS.n} checks")


def check_texts(data):
    audio, images = tmp.load_items(data)
    train, shared = tmp.lm_texts(audio, images)
    expect(len(train) == 16 and shared == 16, f"ci plan: {len(train)} texts, {shared} shared")
    bad = [dict(i, category="unseen_sentence") if i["split"] != "train" else i for i in audio]
    try:
        tmp.lm_texts(bad, images)
        fail("a plan whose held-out sentences are train sentences was not refused")
    except SystemExit as e:
        expect("held-out items' text is a train text" in str(e) and "\n" not in str(e),
               f"the refusal {e}")
    fresh = [dict(i, text=f"A new sentence {k}.", category="unseen_sentence")
             if i["split"] != "train" else i for k, i in enumerate(audio)]
    fresh_i = [dict(i, text=f"new {k}", category="unseen_string")
               if i["split"] != "train" else i for k, i in enumerate(images)]
    train2, shared2 = tmp.lm_texts(fresh, fresh_i)
    held = {i["text"] for i in fresh + fresh_i if i["split"] != "train"}
    expect(shared2 == 0 and not held & set(train2) and len(held) == 16 and len(train2) == 16,
           f"fresh held-out texts: {shared2} shared, {len(held & set(train2))} in the LM text")
    print(f"mm_lmwarm_check: texts: ci {len(train)} train texts, {shared} held-out items share "
          f"one (memorised); a non-memorised share refused; 16 fresh held-out texts, 0 in the "
          f"LM text: {CHECKS.n} checks")


def check_phase(tok, texts):
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size(), batch=4)
    model = fp32_model(tmp, p, tok)
    pr = tmp.Prompter(tok)
    ran = {"vision": 0, "audio": 0}
    for k, m in (("vision", model.model.vision_tower), ("audio", model.model.audio_tower)):
        m.register_forward_hook(lambda *a, k=k: ran.__setitem__(k, ran[k] + 1))
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt = tmp.make_optimizer(model, p, None, None, "foreach")
    wopt = tmp.lm_optimizer(model, p, "foreach")
    held = {id(x) for g in wopt.param_groups for x in g["params"]}
    names = {id(x): n for n, x in model.named_parameters()}
    expect(held == {id(x) for n, x in model.named_parameters() if tmp.side_of(n) == "decoder"} and
           all(tmp.side_of(names[i]) == "decoder" for i in held),
           "the LM optimizer does not hold exactly the decoder's tensors")
    args = types.SimpleNamespace(lm_warm_steps=16, seed=0, max_skips=10, minutes=30)
    losses = {"lm_warm": []}
    t0 = time.time()
    torch.set_num_threads(1)
    rng0, np0 = torch.get_rng_state(), np.random.get_state()[1].copy()
    info = tmp.lm_warm(args, p, model, opt, pr, texts, 0, torch.device("cpu"), False, losses,
                       t0)
    lw = losses["lm_warm"]
    # (the run's streams draw from torch's and their loaders' generators: none may move)
    expect(torch.equal(torch.get_rng_state(), rng0) and
           (np.random.get_state()[1] == np0).all(), "the LM phase drew from a global generator")
    expect(len(lw) == 16 and all(math.isfinite(x) for x in lw) and lw[-1] < 0.7 * lw[0],
           f"the LM loss does not fall: {lw}")
    expect(ran == {"vision": 0, "audio": 0}, f"a tower ran: {ran}")
    moved = {"vision": [], "audio": [], "decoder": []}
    for n, x in model.named_parameters():
        moved[tmp.side_of(n)].append(not torch.equal(x.detach(), before[n]))
    expect(not any(moved["vision"]) and not any(moved["audio"]) and moved["vision"] and
           moved["audio"], "a tower weight moved in the LM phase")
    emb = "model.language_model.embed_tokens.weight"
    expect(any(moved["decoder"]) and
           not torch.equal(dict(model.named_parameters())[emb].detach(), before[emb]),
           "the decoder (embed_tokens) did not move")
    expect(info["done"] == 16 and info["tokens"] > 0 and info["rows"] == 4 and
           info["seconds"] > 0 and info["first_loss"] == lw[0], f"the record {info}")
    print(f"mm_lmwarm_check: phase: 16 steps of 4 rows x {info['row_ids']} ids, lm_warm "
          f"{lw[0]:.3f} -> {lw[-1]:.3f} (median step {info['step_seconds']['median']:.3f} s, one "
          f"thread); towers not run, {len(moved['vision'])} vision + {len(moved['audio'])} audio "
          f"tensors bit-identical, {sum(moved['decoder'])}/{len(moved['decoder'])} decoder "
          f"tensors moved: {CHECKS.n} checks")


def check_trainer():
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d, seconds=2)
        # a copy of the plan whose held-out items claim to be unseen: refused
        bad = os.path.join(d, "baddata")
        shutil.copytree(data, bad)
        items = tmp.mmd.read_jsonl(os.path.join(bad, "speech.jsonl"))
        tmp.mmd.write_jsonl(os.path.join(bad, "speech.jsonl"), [
            dict(i, category="unseen_sentence") if i["split"] != "train" else i for i in items])
        trainer_refusals(tmp, [os.path.join(d, "bad"), "--preset", "ci", "--device", "cpu"],
                         ((["--data", data, "--lm-warm-steps", "-1"], "expected 0 or more"),
                          (["--data", bad, "--lm-warm-steps", "2"],
                           "held-out items' text is a train text")), expect)
        lm = ["--lm-warm-steps", "16"]
        runs = ci_trainer_runs(tmp, data, d, (
            ("off", []), ("zero", ["--lm-warm-steps", "0"]),
            ("lm", lm + ["--eval-every", "3", "--eval-items", "4"]), ("lm2", lm)), fail)
    h = {k: v[1] for k, v in runs.items()}
    expect(h["off"] == h["zero"], f"--lm-warm-steps 0 changed the weights ({h['off'][:12]} vs "
           f"{h['zero'][:12]})")
    expect(h["lm"] == h["lm2"], f"two LM-warm runs of one seed (one with the held-out "
           f"evaluation) differ ({h['lm'][:12]} vs {h['lm2'][:12]})")
    expect(h["lm"] != h["off"], "the LM phase changed no weight")
    for k in ("off", "zero"):
        j = runs[k][0]
        expect("lm_warm" not in j and "lm_warm" not in j["losses_every_25"] and
               "lm_warm" not in j["seconds"], f"{k}: lm_warm records without the option")
    j = runs["lm"][0]
    r = j.get("lm_warm") or {}
    lw = j["losses_every_25"].get("lm_warm", [])
    expect(r.get("steps") == 16 and r.get("done") == 16 and r.get("rows") == 8 and
           r.get("tokens", 0) > 0 and r.get("texts") == 16 and r.get("seconds", 0) > 0 and
           r["step_seconds"]["median"] > 0 and lw and lw[0] == r["first_loss"] and
           r["last_loss"] < r["first_loss"] and j["seconds"].get("lm_warm", 0) > 0 and
           math.isfinite(j["final_loss"].get("lm_warm", float("nan"))),
           f"the LM run's lm_warm {r}, losses {lw}")
    expect(len(j["losses_every_25"]["image"]) == len(runs["off"][0]["losses_every_25"]["image"])
           and j["stopped_at"] is None, "the LM run's joint steps")
    rows = j["heldout"]
    uniform = math.log(480)
    expect([x["step"] for x in rows] == [0, 3, 6] and
           all(rows[0][k]["loss"] < 0.8 * uniform for k in ("image", "audio")),
           f"held-out rows {[(x['step'], x['image']['loss'], x['audio']['loss']) for x in rows]}")
    lay = layout(runs["off"][2])
    expect(lay == layout(runs["lm"][2]), "the saved layout changed with --lm-warm-steps")
    print(f"mm_lmwarm_check: trainer: off {h['off'][:12]} = LM 0 {h['zero'][:12]}; LM 16 "
          f"{h['lm'][:12]} twice (lm_warm {r['first_loss']:.3f} -> {r['last_loss']:.3f}, "
          f"{r['tokens']} ids, {r['seconds']:.2f} s); held-out step 0 answer loss image "
          f"{rows[0]['image']['loss']:.3f} audio {rows[0]['audio']['loss']:.3f} (uniform "
          f"{uniform:.3f}); {len(lay)} saved tensors, the same layout; refusals in one line: "
          f"{CHECKS.n} checks")


def main():
    texts = READOUT_TEXTS
    with tempfile.TemporaryDirectory() as d:
        tok = check_tokenizer(tmp, texts, os.path.join(d, "tok.json"))
        check_rows(tok, texts)
        check_phase(tok, texts)
        data = ci_data(tmp, d, seconds=2)
        check_texts(data)
    check_trainer()
    print(f"mm_lmwarm_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
