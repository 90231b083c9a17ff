#!/usr/bin/env python3
"""tests/test_mm_audchars.sh's checks of train_mm_proxy's --ctc-units chars (AudioChars: CTC from
the audio frames to the transcript's characters, the audio twin of VisionAux; issue 35), on the
CPU:
  1. the transcript as heard, hand-worked: "Hello, World's  END." -> "hello world's end" and its
     labels (ALPHABET's indices: space 0, a 1 .. z 26, apostrophe 27; blank 28);
  2. on a stub tower (frames given, embed_audio x 2): the loss and its gradients equal torch's
     ctc_loss over the full log-softmax of the head on those frames (the clips that fit, their
     valid frames), a clip with fewer valid frames than its label needs is skipped and counted
     (3 used, 1 skipped); the head's weights come from their own generator (the global stream
     untouched; the same seed the same weights, another seed others);
  3. the CTC wiring reads: fitted on synthetic frames that hold each character's code (a frame a
     character, blank frames between and after), the head reads 60 held-out transcripts exactly
     (>= 0.9); fitted on the same frames with the transcripts shuffled, it does not (<= 0.2);
  4. on the ci model (its audio tower, 3 noise clips): the loss is finite and positive; its
     gradient reaches the audio tower, embed_audio and the head, and no decoder or vision
     parameter;
  5. the trainer (ci plan, 2 s noise clips, 6 steps, one thread): --ctc-units chars without
     --ctc-weight gives the weights of no option (off by default: the same run); --ctc-weight
     0.5 --ctc-units chars --a-lr-mult 1 trains (train.json's ctc block says chars, clips used,
     a finite ctc loss a step), moves the audio weights, and saves the same tensor names, shapes
     and dtypes as without it (the head is never saved).
  6. the held-out read-out (HeldOut's heads: char_ctc_items, issue 35's question whether the tower
     carries the held-out items' characters): the greedy read of hand-made one-hot frames
     ("aa_b_  cc" + a frame past the valid ones -> "ab c"; "c_c" -> "cc") and its CER against
     the references ["ab c", "cd"]: 1 edit in 6 characters, against the rolled references
     (4 + 3 edits) 7/6; a head with zeroed weights (every class 1/29 a frame) gives the CTC of
     "ab" over 3 frames as 3 ln 29 - ln 5 (the 5 alignments aab abb ab_ a_b _ab) over 2 labels,
     of "a" over 2 frames 2 ln 29 - ln 3 (aa a_ _a), a transcript longer than its frames skipped
     and counted, the head's training counts untouched;
  7. the trainer with --ctc-weight 0.5 --ctc-units chars --v-aux-weight 0.5, --eval-every 4
     --eval-items 4 vs --eval-every 0: the same weights (sha256), final_loss and heads' counts
     (the measurement moves no stream and no count); each held-out row (steps 4, 6) has the
     audio and image ctc, ctc_cer, ctc_cer_other finite (ctc > 0) on 4 clips, and a read-out
     log line that run.sh's mm log pattern keeps ("held-out").
Prints one line per check and the count; exit 1 on the first failure."""
import math
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import (  # noqa: E402
    Checks, audio_stub, check_tokenizer, ci_data, ci_trainer_runs, fp32_model, grad_by_side,
    layout, mm_items, side_moved)

CHECKS = Checks("mm_audchars_check")
fail, expect = CHECKS.fail, CHECKS.expect


def forward(m, x, valid):
    m.model.embed_audio(m.model.audio_tower(x, valid).last_hidden_state)


def check_labels():
    got = tmp.AudioChars.normalise("Hello, World's  END.")
    expect(got == "hello world's end", f"normalised {got!r}")
    head = tmp.AudioChars(audio_stub(4), "embed", 0)
    lab = head.labels("Hi, it's")
    expect(lab == [8, 9, 0, 9, 20, 27, 19], f"labels {lab}")
    expect(head.blank == 28 and len(head.chars) == 28, f"blank {head.blank}")
    print(f"mm_audchars_check: the transcript as heard, hand-worked: {CHECKS.n} checks")


def check_loss():
    torch.manual_seed(0)
    D, T = 16, 20
    m = audio_stub(D)
    before = torch.random.get_rng_state()
    head = tmp.AudioChars(m, "embed", 0)
    expect(torch.equal(before, torch.random.get_rng_state()), "AudioChars moved the global stream")
    again = tmp.AudioChars(audio_stub(D), "embed", 0)
    other = tmp.AudioChars(audio_stub(D), "embed", 1)
    expect(torch.equal(head.proj.weight, again.proj.weight), "same seed, other head weights")
    expect(not torch.equal(head.proj.weight, other.proj.weight), "other seed, same head")
    texts = ["a cab", "hello", "zzzzz", "it's"]  # "zzzzz" needs 9 frames (blanks between)
    x = torch.randn(4, T, D, requires_grad=True)
    valid = torch.ones(4, T, dtype=torch.bool)
    valid[1, 15:] = False
    valid[2, 8:] = False
    forward(m, x, valid)
    loss = head.loss_of(texts)
    loss.backward()
    expect((head.used, head.skipped) == (3, 1), f"used / skipped {head.used} / {head.skipped}")
    gx, gw = x.grad.clone(), head.proj.weight.grad.clone()
    x.grad, head.proj.weight.grad = None, None
    rows = [0, 1, 3]
    lp = head.proj(2.0 * x[rows]).log_softmax(-1).transpose(0, 1).double()
    t = [torch.tensor(head.labels(texts[r])) for r in rows]
    ref = torch.nn.functional.ctc_loss(
        lp, torch.nn.utils.rnn.pad_sequence(t, batch_first=True),
        torch.tensor([int(valid[r].sum()) for r in rows]), torch.tensor([len(u) for u in t]),
        blank=28, reduction="mean")
    ref.backward()
    dl = abs(loss.item() - ref.item())
    dx = float((gx - x.grad).abs().max() / x.grad.abs().max())
    dw = float((gw - head.proj.weight.grad).abs().max() / head.proj.weight.grad.abs().max())
    expect(dl <= 1e-5 * ref.item() and dx <= 1e-5 and dw <= 1e-5,
           f"loss {loss.item()} vs {ref.item()}, gradients rel. {dx:.1e} / {dw:.1e}")
    expect(torch.equal(gx[2], torch.zeros_like(gx[2])), "the skipped clip got a gradient")
    print(f"mm_audchars_check: loss {loss.item():.5f} = torch's {ref.item():.5f} (gradients "
          f"{dx:.1e} / {dw:.1e}), 3 used 1 skipped, own generator: {CHECKS.n} checks")


def check_reads():
    """Synthetic frames: a frame a character with its fixed random code (+ noise), a blank frame
    (a code of its own) after each, blank frames to the end."""
    letters = "abcdefghij"
    r = np.random.default_rng(5)
    code = {c: r.normal(0, 1, 16) for c in letters + "_"}
    T = 12

    def sample(text, k):
        fr = []
        for c in text:
            fr += [code[c], code["_"]]
        fr += [code["_"]] * (T - len(fr))
        return np.stack(fr) + np.random.default_rng(k).normal(0, 0.3, (T, 16))

    def strings(n, seed):
        g = np.random.default_rng(seed)
        return ["".join(g.choice(list(letters), g.integers(2, 6))) for _ in range(n)]

    train, held = strings(400, 1), strings(60, 2)
    m = audio_stub(16)

    def run(batch, ks):
        x = torch.tensor(np.stack([batch(k) for k in ks]), dtype=torch.float32)
        forward(m, x, torch.ones(len(ks), T, dtype=torch.bool))

    def fit(labels):
        head = tmp.AudioChars(m, "embed", 0)
        opt = torch.optim.Adam(head.parameters(), lr=0.05)
        for step in range(150):
            ks = np.random.default_rng(step).choice(len(train), 32, replace=False)
            run(lambda k: sample(train[k], 1000 + k), ks)
            loss = head.loss_of([labels[k] for k in ks])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            run(lambda k: sample(held[k], 5000 + k), range(len(held)))
            got = head.greedy()
        return float(np.mean([a == b for a, b in zip(got, held)]))

    good = fit(train)
    bad = fit(list(np.random.default_rng(9).permutation(train)))
    expect(good >= 0.9, f"the head read {good:.2f} of held-out synthetic transcripts (< 0.9)")
    expect(bad <= 0.2, f"shuffled transcripts still read {bad:.2f} (> 0.2)")
    print(f"mm_audchars_check: CTC read-out on synthetic frames: held-out exact {good:.2f}, "
          f"with shuffled transcripts {bad:.2f}")


def check_model(tok):
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size())
    model = fp32_model(tmp, p, tok)
    head = tmp.AudioChars(model, "embed", 0, tok, tmp.Prompter(tok).id["<turn|>"])
    texts = ["the cat sat down", "open the red door", "we walk"]
    items = mm_items(tmp, tok, 3, [], [(t, 48000) for t in texts])["audio"]  # 3 s clips
    b = tmp.collate(items)
    lab = b.pop("labels")
    model.zero_grad(set_to_none=True)
    model.model.get_audio_features(b["input_features"], b["input_features_mask"])
    loss = head.loss(lab)
    expect(loss is not None and math.isfinite(loss.item()) and loss.item() > 0, f"loss {loss}")
    expect((head.used, head.skipped) == (3, 0), f"used / skipped {head.used} / {head.skipped}")
    loss.backward()
    moved = grad_by_side(tmp, model)
    hg = sum(float(x.grad.abs().sum()) for x in head.parameters())
    ea = sum(float(x.grad.abs().sum()) for x in model.model.embed_audio.parameters()
             if x.grad is not None)
    at = sum(float(x.grad.abs().sum()) for x in model.model.audio_tower.parameters()
             if x.grad is not None)
    expect(ea > 0 and at > 0 and hg > 0, f"embed_audio {ea}, audio tower {at}, head {hg}")
    expect(moved["decoder"] == 0 and moved["vision"] == 0, f"gradient leaked: {moved}")
    print(f"mm_audchars_check: AudioChars on the ci model: loss {loss.item():.3f}, gradient "
          f"audio tower {at:.3g} / embed_audio {ea:.3g} / head {hg:.3g} / decoder "
          f"{moved['decoder']} / vision {moved['vision']}: {CHECKS.n} checks")


def check_trainer():
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d, seconds=2)  # 50 frames (the ci clips' most): every sentence fits
        runs = ci_trainer_runs(tmp, data, d, (
            ("off", []), ("units", ["--ctc-units", "chars"]),
            ("on", ["--ctc-weight", "0.5", "--ctc-units", "chars", "--a-lr-mult", "1"])), fail)
    (off, h_off, t_off), (_, h_units, _), (on, h_on, t_on) = runs["off"], runs["units"], \
        runs["on"]
    expect(h_off == h_units, f"--ctc-units chars alone changed the weights ({h_off[:12]} vs "
           f"{h_units[:12]})")
    expect("ctc" not in off, "a ctc block without the option")
    c = on.get("ctc") or {}
    lc = on["losses_every_25"].get("ctc", [])
    expect(c.get("units") == "chars" and c.get("weight") == 0.5 and c.get("clips", 0) > 0 and
           c.get("clips_too_short") == 0, f"the on run's ctc block {c}")
    expect(lc and all(math.isfinite(v) for v in lc), f"ctc losses {lc}")
    lay = layout(t_off)
    expect(lay == layout(t_on),
           "the saved tensors' names, shapes or dtypes changed with --ctc-units chars")
    expect(side_moved(t_on, t_off, (".audio_tower.", ".embed_audio.")),
           "--ctc-weight 0.5 --ctc-units chars --a-lr-mult 1 moved no audio weight")
    print(f"mm_audchars_check: trainer: off {h_off[:12]} = --ctc-units chars alone "
          f"{h_units[:12]}; on {h_on[:12]} (ctc {c}, final {on['final_loss']['ctc']:.3f}); "
          f"{len(lay)} saved tensors, the same layout")


def check_heldout_read():
    head = tmp.AudioChars(audio_stub(29), "embed", 0)
    with torch.no_grad():
        head.proj.weight.copy_(torch.eye(29))  # logits = the frames
        head.proj.bias.zero_()
    C = head.chars + "_"  # column 28: the blank

    def frames(s, T):
        x = torch.zeros(T, 29)
        for t, c in enumerate(s):
            x[t, C.index(c)] = 1.0
        return x

    x = torch.stack([frames("aa_b_  cc_z", 11), frames("c_c__z", 11)])
    texts = ["Ab, C", "CD"]  # as heard: "ab c", "cd"
    with torch.no_grad():
        _, reads, refs, skipped = tmp.char_ctc_items(head, x, [10, 5], texts)
    expect(reads == ["ab c", "cc"] and refs == ["ab c", "cd"] and skipped == 0,
           f"reads {reads}, references {refs}, skipped {skipped}")
    held = tmp.HeldOut.__new__(tmp.HeldOut)  # (read_scores needs only mm_probe's cer)
    import mm_probe
    held.cer = mm_probe.cer
    sc = held.read_scores([1.0, 3.0], reads, refs, 0)
    expect(abs(sc["ctc_cer"] - 1 / 6) < 1e-12 and abs(sc["ctc_cer_other"] - 7 / 6) < 1e-12 and
           sc["ctc"] == 2.0 and sc["ctc_items"] == 2, f"scores {sc}")
    with torch.no_grad():
        head.proj.weight.zero_()
        x = torch.randn(3, 4, 29)
        losses, reads, refs, skipped = tmp.char_ctc_items(head, x, [3, 3, 2],
                                                          ["ab", "hello", "A."])
    want = [(3 * math.log(29) - math.log(5)) / 2, 2 * math.log(29) - math.log(3)]
    expect(skipped == 1 and refs == ["ab", "a"] and len(losses) == 2 and
           all(abs(a - b) < 1e-6 * b for a, b in zip(losses, want)),  # (float32 log-softmax)
           f"zeroed head: losses {losses} (want {want}), refs {refs}, skipped {skipped}")
    expect((head.used, head.skipped) == (0, 0), f"counts moved {head.used} / {head.skipped}")
    print(f"mm_audchars_check: held-out read: 'ab c' 'cc', cer {sc['ctc_cer']:.4f} other "
          f"{sc['ctc_cer_other']:.4f}; zeroed head {losses[0]:.6f} {losses[1]:.6f} (by hand "
          f"{want[0]:.6f} {want[1]:.6f}), 1 skipped: {CHECKS.n} checks")


def check_heldout_trainer():
    heads = ["--ctc-weight", "0.5", "--ctc-units", "chars", "--a-lr-mult", "1",
             "--v-aux-weight", "0.5"]
    out = {}
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d, seconds=2)
        runs = ci_trainer_runs(tmp, data, d, (
            ("eval", heads + ["--eval-every", "4", "--eval-items", "4"]),
            ("none", heads)), fail, stdout=out)
    lines = [x for x in out["eval"].splitlines() if "read-out heads" in x]
    (on, h_on, _), (off, h_off, _) = runs["eval"], runs["none"]
    same = [h_on == h_off] + [on[k] == off[k] for k in ("final_loss", "grad_norm_max", "ctc",
                                                        "v_aux", "losses_every_25")]
    expect(all(same), f"the held-out read-out changed the run: {same}, weights {h_on[:12]} vs "
           f"{h_off[:12]}, final {on['final_loss']} vs {off['final_loss']}, ctc {on['ctc']} "
           f"vs {off['ctc']}, v_aux {on['v_aux']} vs {off['v_aux']}")
    rows = on["heldout"]
    expect([r["step"] for r in rows] == [4, 6] and len(lines) == 2 and
           all("held-out" in x and x.startswith("train_mm_proxy: ") for x in lines),
           f"rows at {[r['step'] for r in rows]}, read-out lines {lines}")
    for r in rows:
        for k in ("audio", "image"):
            v = r[k]
            expect(all(isinstance(v.get(m), float) and math.isfinite(v[m])
                       for m in ("ctc", "ctc_cer", "ctc_cer_other")) and v["ctc"] > 0,
                   f"step {r['step']} {k}: {v}")
        expect(r["audio"]["ctc_items"] == 4 and r["audio"]["ctc_skipped"] == 0,
               f"step {r['step']} audio items {r['audio']}")
    for x in lines:
        print(f"mm_audchars_check: {x}")
    print(f"mm_audchars_check: trainer with both heads, --eval-every 4 vs 0: weights {h_on[:12]} "
          f"= {h_off[:12]}, final_loss, heads' counts equal; rows at 4, 6 with the read-outs")


def main():
    words = ["the cat sat down", "open the red door", "we walk"]
    with tempfile.TemporaryDirectory() as d:
        tok = check_tokenizer(tmp, words, os.path.join(d, "tok.json"))
    check_labels()
    check_loss()
    check_reads()
    check_model(tok)
    check_trainer()
    check_heldout_read()
    check_heldout_trainer()
    print(f"mm_audchars_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
