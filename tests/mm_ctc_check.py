#!/usr/bin/env python3
"""tests/test_mm_ctc.sh's checks of train_mm_proxy.CtcHead (the auxiliary CTC loss on the audio
side, issue 35), on the CPU:
  1. on a stub tower (frames given), its loss and gradients equal torch's ctc_loss over the full
     vocabulary (the head reduces the columns to the blank and each clip's labels), and the clip
     whose labels (with a blank between equal neighbours) outnumber its frames is skipped and
     counted: 3 used, 1 skipped;
  2. on a tiny Gemma-4 (the ci preset's audio tower, random input features standing in for 3
     clips), 5 steps of the CTC loss alone (tower + embed_audio + head trained) lower it, every
     value finite; the same 5 steps again give the same losses to the bit.
Prints one line per check; exit 1 on the first failure."""
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from train_proxy import train_tokenizer  # noqa: E402
from mm_items import audio_stub, ctc_label_rows, fp32_model, full_ctc_loss  # noqa: E402


def fail(msg):
    print(f"mm_ctc_check: FAIL: {msg}")
    sys.exit(1)


def labels_for(targets, turn):
    return ctc_label_rows(targets, turn, 40, 3)


def check_reduction():
    torch.manual_seed(0)
    V, D, B, T = 50, 16, 4, 20
    m = audio_stub(D)
    head = tmp.CtcHead(m, V, "embed")
    x = torch.randn(B, T, D, requires_grad=True)
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, 15:] = False
    valid[2, 4:] = False  # 4 frames for 5 equal labels (9 with the blanks): no CTC path
    tg = [[3, 3, 7, 9, 1], [5, 6, 5, 6, 2, 2], [8, 8, 8, 8, 8], [10, 11, 1]]
    m.model.embed_audio(m.model.audio_tower(x, valid).last_hidden_state)
    loss = head.loss(labels_for(tg, V - 1))
    loss.backward()
    if (head.used, head.skipped) != (3, 1):
        fail(f"clips used / skipped {head.used} / {head.skipped}, expected 3 / 1")
    gx, gw = x.grad.clone(), head.proj.weight.grad.clone()
    x.grad, head.proj.weight.grad = None, None
    rows = [0, 1, 3]
    lp = head.proj(2.0 * x[rows]).log_softmax(-1).transpose(0, 1).double()
    ref = full_ctc_loss(lp, tg, rows, valid, V)
    ref.backward()
    dl = abs(loss.item() - ref.item())
    dx = float((gx - x.grad).abs().max() / x.grad.abs().max())
    dw = float((gw - head.proj.weight.grad).abs().max() / head.proj.weight.grad.abs().max())
    print(f"mm_ctc_check: reduced vs full-vocabulary CTC: loss {loss.item():.6f} / "
          f"{ref.item():.6f}, gradient rel. diff frames {dx:.1e} head {dw:.1e}; clips 3 used, "
          "1 skipped")
    if dl > 1e-5 * ref.item() or dx > 1e-5 or dw > 1e-5:
        fail("the reduced CTC differs from torch's over the whole vocabulary")


def train_five(tok, p):
    model = fp32_model(tmp, p, tok)
    head = tmp.CtcHead(model, p["vocab"], "embed")
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(3, 160, 128, generator=g)  # 3 clips of 1.6 s of log-mel stand-ins
    mask = torch.ones(3, 160, dtype=torch.bool)
    mask[2, 120:] = False
    ids = [torch.randint(300, p["vocab"], (n,), generator=g).tolist() for n in (6, 9, 4)]
    lab = labels_for(ids, tok.token_to_id("<turn|>"))
    audio = [x for n, x in model.named_parameters() if n.startswith(("model.audio_tower.",
                                                                     "model.embed_audio."))]
    opt = torch.optim.AdamW(audio + list(head.parameters()), lr=3e-3)
    out = []
    for _ in range(5):
        opt.zero_grad(set_to_none=True)
        model.model.get_audio_features(feats, mask)  # the hooks keep the frames
        loss = head.loss(lab)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out, head


def check_training():
    with tempfile.TemporaryDirectory() as d:
        text = "\n\n".join(["the quick brown fox jumps over the lazy dog", tmp.SYSTEM,
                            tmp.ASR_PROMPT, "system", "user", "model"] * 40)
        tok = train_tokenizer(text, 480, os.path.join(d, "tokenizer.json"))
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size())
    a, head = train_five(tok, p)
    b, _ = train_five(tok, p)
    print("mm_ctc_check: CTC loss over 5 steps on 3 clips: " + " ".join(f"{v:.4f}" for v in a) +
          f" (clips used {head.used}, skipped {head.skipped})")
    if not all(torch.isfinite(torch.tensor(a))):
        fail("a CTC loss is not finite")
    if not a[-1] < a[0]:
        fail(f"the CTC loss did not decrease: {a[0]:.4f} -> {a[-1]:.4f}")
    if (head.used, head.skipped) != (15, 0):
        fail(f"clips used / skipped {head.used} / {head.skipped}, expected 15 / 0")
    if a != b:
        fail(f"a second run differs: {b}")
    print("mm_ctc_check: a second run gives the same 5 losses")


if __name__ == "__main__":
    check_reduction()
    check_training()
    print("mm_ctc_check: ok")
