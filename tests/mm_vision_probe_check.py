#!/usr/bin/env python3
"""tests/test_mm_vision_probe.sh's checks of tools/python/mm_vision_probe.py's measuring
(issue 35), on the CPU in fp32 with a tiny Gemma-4 (the ci preset's shapes) at its seed-0
initialisation and synthetic random-pixel images of three canvases (68, 64 and 70 soft tokens):
  1. greedy decoding of a left-padded batch (left_batch + HF generate, what the probe's exact,
     OCRBench and CER columns come from) gives each item the same 6 tokens as decoding it alone;
     the control: the same batch right-padded changes the shorter prompts' tokens (the check can
     fail);
  2. SoftTokens with shift n (the "shuf" pass, on a batch of images of n soft tokens each) gives
     the loss of the batch with its pixels rolled by one image, within 1e-5 (relative); the
     control: shift 1 (one soft token, not one image) is more than 1e-4 away;
  3. roll_chunks (the probe's and the trainer's HeldOut's batches) keeps one soft-token count a
     batch, every item with company once, <= `size` a batch, never one alone; a lone count is
     left out (its rolled pass would be its own: the gap's bias toward 0 this prevents);
  4. cer counts character edits over reference characters: ("kitten", "sitting") 3 / 6, an
     exact answer 0, an empty one 1.
Prints one line per check; exit 1 on the first failure."""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import mm_probe  # noqa: E402
import mm_vision_probe as vp  # noqa: E402
import train_mm_proxy as tmp  # noqa: E402
from mm_items import Img, check_tokenizer, fp32_model  # noqa: E402


def fail(msg):
    print(f"mm_vision_probe_check: FAIL: {msg}")
    sys.exit(1)


def image(pr, r, hw, text):
    pv, pp, n = tmp.image_inputs(Img(r.integers(0, 256, hw + (3,), dtype=np.uint8)))
    return dict(kind="image", pv=pv, pp=pp, ids=pr.prompt("image", n), tgt=pr.target(text),
                text=text, n=n)


def batch_loss(model, b):
    b = dict(b)
    lab = b.pop("labels")
    with torch.no_grad():
        logits = model(**b).logits.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             lab.reshape(-1), ignore_index=-100).item()


def main():
    torch.set_num_threads(1)
    tok = check_tokenizer(tmp, ["the quick brown fox jumps over 42 lazy dogs"])
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size())
    model = fp32_model(tmp, p, tok).eval()
    pr = tmp.Prompter(tok)
    r = np.random.default_rng(5)
    mixed = [image(pr, r, hw, t) for hw, t in (((192, 816), "42"), ((192, 768), "fox"),
                                                ((240, 672), "the lazy dog"), ((192, 816), "over"))]
    if len({it["n"] for it in mixed}) != 3:
        fail(f"the canvases give soft-token counts {[it['n'] for it in mixed]}, expected 3 kinds")
    eos = [1, pr.id["<turn|>"]]

    def gen(b):
        with torch.no_grad():
            out = model.generate(**b, max_new_tokens=6, min_new_tokens=6, do_sample=False,
                                 eos_token_id=eos, pad_token_id=0)
        return out[:, b["input_ids"].shape[1]:].tolist()

    # 1. left-padded batched greedy == one at a time
    alone = [gen(vp.left_batch([it]))[0] for it in mixed]
    batched = gen(vp.left_batch(mixed))
    if batched != alone:
        fail(f"left-padded batch decodes {batched}, one at a time {alone}")
    right = vp.left_batch(mixed)
    T = right["input_ids"].shape[1]
    for k, it in enumerate(mixed):  # the control: the same prompts right-padded
        L = len(it["ids"])
        right["input_ids"][k] = 0
        right["attention_mask"][k] = 0
        right["input_ids"][k, :L] = torch.tensor(it["ids"])
        right["attention_mask"][k, :L] = 1
    short = [k for k, it in enumerate(mixed) if len(it["ids"]) < T]
    rb = gen(right)
    if all(rb[k] == alone[k] for k in short):
        fail("control: right padding decodes the shorter prompts as alone; check 1 proves "
             "nothing")
    print(f"mm_vision_probe_check: left-padded greedy = alone for {len(mixed)} items "
          f"(prompts {sorted({len(it['ids']) for it in mixed})} long); right-padded differs on "
          f"{sum(rb[k] != alone[k] for k in short)} of {len(short)} shorter")

    # 2. the roll moves whole images
    same = [image(pr, r, (192, 816), t) for t in ("42", "fox", "the lazy dog")]
    n = same[0]["n"]
    hook = mm_probe.SoftTokens()
    h = model.model.embed_vision.register_forward_hook(hook)
    b = tmp.collate(same)
    hook.mode, hook.shift = "shuf", n
    shuf = batch_loss(model, b)
    hook.shift = 1
    tokroll = batch_loss(model, b)
    hook.mode = None
    rolled = dict(b, pixel_values=torch.roll(b["pixel_values"], 1, 0),
                  image_position_ids=torch.roll(b["image_position_ids"], 1, 0))
    ref = batch_loss(model, rolled)
    own = batch_loss(model, b)
    h.remove()
    if abs(shuf - ref) > 1e-5 * abs(ref):
        fail(f"loss with soft tokens rolled by {n} rows {shuf}, with the pixels rolled {ref}")
    if abs(tokroll - ref) <= 1e-4 * abs(ref) or abs(own - ref) <= 1e-4 * abs(ref):
        fail(f"control: rolled by one row {tokroll} / not rolled {own} vs pixels rolled {ref}")
    print(f"mm_vision_probe_check: shuf (shift {n}) {shuf:.6f} = pixels rolled {ref:.6f}; "
          f"shift 1 {tokroll:.6f}, unrolled {own:.6f}")

    # 3. roll_chunks (train_mm_proxy's, the probe's batches and the trainer's HeldOut's): one
    # count a chunk, every item of a count with company once, at most size a chunk (size + 1
    # at size 2, odd counts), never a chunk of one; a count of one item left out
    ns = [k % 3 for k in range(11)] + [7]  # counts 0: 4 items, 1: 4, 2: 3, 7: 1
    for size, top in ((2, 3), (3, 3), (25, 4)):
        eb, lone = tmp.roll_chunks(ns, size)
        seen = sorted(k for _, ks in eb for k in ks)
        if seen != list(range(11)) or lone != [11] or \
                any(not 2 <= len(ks) <= top or {ns[k] for k in ks} != {m} for m, ks in eb):
            fail(f"roll_chunks size {size}: {eb}, left out {lone}")
    print(f"mm_vision_probe_check: roll_chunks: {len(eb)} batches at size 25, one count each, "
          "none alone, 11 items once, the lone count left out")

    # 4. cer
    got = (mm_probe.cer(["kitten"], ["sitting"]), mm_probe.cer(["abc", "de"], ["abc", "de"]),
           mm_probe.cer(["abcd"], [""]))
    if got != (0.5, 0.0, 1.0):
        fail(f"cer {got}, expected (0.5, 0.0, 1.0)")
    print("mm_vision_probe_check: cer 3/6, 0, 1")
    print("mm_vision_probe_check: all checks passed")


if __name__ == "__main__":
    main()
