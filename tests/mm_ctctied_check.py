#!/usr/bin/env python3
"""tests/test_mm_ctctied.sh's checks of train_mm_proxy's --ctc-tied (TiedCtcHead: CTC from the
audio soft tokens into the answer's token ids, the classes the decoder's own token embeddings,
detached; issue 35), on the CPU:
  1. the classes ARE the decoder's scaled embedding rows: on a stub (frames given, embed_audio
     x 2, a Gemma-4 scaled embedding table), classes() equals embed_tokens.weight x embed_scale
     row for row and the blank last; a frame set to token 4's row has cosine 1 to class 4 and
     its logit is the scale (10 at init); writing another vector into embed_tokens' row 4 moves
     that logit, and writing the frame's direction into row 2 makes class 2 the frame's argmax;
     the head's parameters are the blank and the log scale only (the table is not one, nor in
     its state_dict); its draws come from its own generator (the global stream untouched; seed
     0 twice the same blank, seed 1 another); --ctc-tied-scale 30 makes that logit 30;
     --ctc-tied-center: the classes are the scaled rows less their mean row (summing to 0), the
     blank as it was, a frame on token 4's row and the mean row plus half of token 4's centered
     row both have cosine 1 to class 4 (the uncentered head: below 0.999 for the second);
     table_mean_cos of a hand table (three rows and a zero row) = the pairs' mean by hand;
  2. the loss is CtcHead's column-picking CTC on the cosine logits: it and its gradients equal
     torch's ctc_loss over the full log-softmax of s x cos computed here by hand (normalised
     frames against normalised scaled rows + the blank), a clip too short for its ids skipped
     and counted (3 used, 1 skipped); the fitting rows are picked by a one-hot product (no
     index gradient on the GPU) that equals indexing bit for bit;
  3. the held-out read-out by hand (TiedCtcHead.items): frames that are one-hot class rows
     ("1 1 _ 2 _" over 5 valid frames + one padding) read [1, 2] against the target [1, 2], the
     token-frame share 3/5 (the padding frame not counted), their cosine 1; the per-label loss
     equals torch's ctc_loss ("none") over the full log-softmax over the 2 labels; the counts
     used / skipped untouched;
  4. on the ci model (3 noise clips of 3 s, the decoder trainable): the tied loss is finite and
     positive; after its backward alone embed_tokens (= the tied LM head) has no gradient (None
     or all 0) and no decoder or vision parameter has one, while the audio tower, embed_audio,
     the blank and the scale do; 12 AdamW steps of the tied loss alone on the same 4 clips (audio
     side + head, lr 3e-3) lower it (last < 0.8 x first) and leave every decoder weight as it
     was; the image twin (--v-aux-tied: the head on VisionAux's columns of 4 random images) the
     same way: finite, no gradient into embed_tokens or any decoder or audio parameter, one into
     the vision tower and embed_vision, and VisionAux's loss on the same columns as its own;
  5. the trainer (ci plan, 2 s noise clips, 6 joint steps, one thread, --ctc-weight 0.5
     --ctc-units chars --a-lr-mult 0.3 --v-aux-weight 0.5 --v-warm-steps 4 --a-warm): + --ctc-tied
     moves the weights (not the same sha256 as without it); + --ctc-tied-weight 0.5 (the
     default: --ctc-weight's) gives its weights bit for bit; + --v-aux-tied moves them again,
     and with --v-aux-tied-weight 0.5 (its default) and with --eval-every 3 --eval-items 4 gives
     one set of weights (the read-out moves no stream); train.json records ctc.tied and
     v_aux.tied (weight, scale, 6 x 4 joint clips / images, all fitting), shapes' ctc_tied /
     v_aux_tied, losses_every_25 / final_loss ctc_tied, a_warm_tied, v_aux_tied, v_warm_tied
     (finite), v_warm's tied_clips and tied_images (4 x 4) and held-out rows (steps 0, 3, 6)
     whose audio and image parts have tied_ctc > 0, tied_cer, tied_cer_other, tied_peaks in
     [0, 1] over 4 items, and a "tied read-out" log line a kind; table_cos0 (the decoder's
     table against its first row's) 1 at step 0 and below 1 once the decoder trained (6 steps
     at lr 3e-3), table_mean_cos a float in [-1, 1] (neither without a tied head); none of
     those keys without the options; the saved layout unchanged (the heads are never saved);
     --ctc-tied-scale 10 (the default) gives --ctc-tied's weights bit for bit, --ctc-tied-scale
     30, --ctc-tied-center and --ctc-tied-joint-only other weights each, recorded in ctc.tied
     (scale_init 10 / 30 / 10 / 10, center false / false / true / false, warm true / true / true /
     false; 6 x 4 joint clips each) and in shapes only when given; joint-only's warm phase reads
     its 4 x 4 clips with the char head alone (no tied_clips, tied_mult or a_warm_tied), the
     joint phase's ctc_tied losses there;
  6. refusals, one line each: --ctc-tied without --ctc-weight, with --ctc-at tower,
     --ctc-tied-weight without --ctc-tied, --ctc-tied-weight 0 and inf, --ctc-tied-scale and
     --ctc-tied-center without --ctc-tied, --ctc-tied-scale 0, nan and inf, --ctc-tied-joint-only
     without --ctc-tied and without --a-warm; --v-aux-tied without --v-aux-weight,
     --v-aux-tied-weight without --v-aux-tied, --v-aux-tied-weight 0.
  7. tools/python/mm_tied_plateau.py (the plateau probe) runs at a small size (vocab 64) and
     learns; a bad run spec is refused in one line.
  8. tools/python/mm_tied_grad.py (each head's pull on the audio side): its gradient norm by
     hand; on the ci plan it prints the char row and each tied row, finite, with their ratio; a
     bad --tied is refused in one line.
Off = main's weights was checked by hand against main's trainer (bench/NOTES.md "ctctied"):
nothing of the option runs without it (no head, no stream drawn, no record key).
Prints one line per check and the count; exit 1 on the first failure."""
import math
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import (  # noqa: E402
    Checks, audio_stub, check_tokenizer, ci_data, ci_trainer_runs, ctc_label_rows, fp32_model,
    full_ctc_loss, grad_by_side, layout, mm_items, tool_refusals, trainer_refusals)

CHECKS = Checks("mm_ctctied_check")
fail, expect = CHECKS.fail, CHECKS.expect


def tied_stub(V, D, scale):
    """audio_stub(D) with a decoder embedding table of V rows at embed_scale `scale` (Gemma-4's
    own scaled embedding class), drawn from torch seed 3."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextScaledWordEmbedding

    m = audio_stub(D)
    m.model.language_model = torch.nn.Module()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        m.model.language_model.embed_tokens = Gemma4TextScaledWordEmbedding(V, D, 0, scale)
    return m


def forward(m, x, valid):
    m.model.embed_audio(m.model.audio_tower(x, valid).last_hidden_state)


def grad_sum(module):
    """The summed |gradient| of module's parameters (0 where none has one)."""
    return sum(float(x.grad.abs().sum()) for x in module.parameters() if x.grad is not None)


def labels_for(targets, turn):
    return ctc_label_rows(targets, turn, 24, 2)


def check_classes():
    V, D = 12, 8
    m = tied_stub(V, D, 3.0)
    e = m.model.language_model.embed_tokens
    before = torch.random.get_rng_state()
    head = tmp.TiedCtcHead(m, V, 0)
    expect(torch.equal(before, torch.random.get_rng_state()), "the head moved the global stream")
    again, other = tmp.TiedCtcHead(tied_stub(V, D, 3.0), V, 0), \
        tmp.TiedCtcHead(tied_stub(V, D, 3.0), V, 1)
    expect(torch.equal(head.blank_vec, again.blank_vec) and
           not torch.equal(head.blank_vec, other.blank_vec), "the blank's generator")
    names = sorted(n for n, _ in head.named_parameters())
    expect(names == ["blank_vec", "log_scale"] and
           sorted(head.state_dict()) == ["blank_vec", "log_scale"] and
           not any(x is e.weight for x in head.parameters()),
           f"the head's parameters {names}, state {sorted(head.state_dict())}")
    c = head.classes()
    expect(c.shape == (V + 1, D) and torch.equal(c[:V], e.weight.detach() * 3.0) and
           torch.equal(c[V], head.blank_vec.detach()), "classes() is not the scaled rows + blank")
    x = (e.weight[4].detach() * 3.0 * 0.5).reshape(1, 1, D)  # the direction of token 4's row
    z0 = head.logits(x)[0, 0].detach()
    expect(abs(float(z0[4]) - tmp.TIED_SCALE_INIT) < 1e-5 and int(z0.argmax()) == 4,
           f"token 4's own direction: logit {float(z0[4])} (want {tmp.TIED_SCALE_INIT}), argmax "
           f"{int(z0.argmax())}")
    with torch.no_grad():
        e.weight[4] = torch.randn(D, generator=torch.Generator().manual_seed(7))
    z1 = head.logits(x)[0, 0].detach()
    expect(float(z1[4]) < float(z0[4]) - 1.0 and torch.allclose(z1[:4], z0[:4], atol=1e-6),
           f"a new row 4 left its logit at {float(z1[4])} (was {float(z0[4])})")
    with torch.no_grad():
        e.weight[2] = x.reshape(D) * 5.0
    z2 = head.logits(x)[0, 0].detach()
    expect(int(z2.argmax()) == 2 and abs(float(z2[2]) - tmp.TIED_SCALE_INIT) < 1e-5,
           f"row 2 set to the frame's direction: argmax {int(z2.argmax())}, logit {float(z2[2])}")
    print(f"mm_ctctied_check: the classes are embed_tokens x embed_scale + the blank: logit of "
          f"token 4's direction {float(z0[4]):.4f}, {float(z1[4]):.4f} once row 4 changed, row 2 "
          f"set to it -> argmax 2: {CHECKS.n} checks")
    check_scale_center(V, D)


def check_scale_center(V, D):
    """--ctc-tied-scale / --ctc-tied-center on the stub's table (embed_scale 3): the logit of a
    frame on token 4's row is the given scale; centered, the class rows are the scaled rows less
    their mean (computed here) and sum to 0, a frame equal to token 4's scaled row has cosine 1
    to class 4 as uncentered, and so has that row's mean plus half its centered part (a
    direction the uncentered head does not give cosine 1); the blank is not centered; and
    table_mean_cos by hand (rows (1, 0), (0, 1), (1, 1) and a zero row: the three pairs' cosines
    0, 1 / sqrt 2, 1 / sqrt 2)."""
    m = tied_stub(V, D, 3.0)
    e = m.model.language_model.embed_tokens
    rows = e.weight.detach().float() * 3.0
    x = rows[4].reshape(1, 1, D)
    s30 = tmp.TiedCtcHead(m, V, 0, "audio", 30.0)
    z = s30.logits(x)[0, 0].detach()
    expect(abs(float(z[4]) - 30.0) < 1e-4 and int(z.argmax()) == 4 and not s30.center,
           f"scale 30: token 4's own row's logit {float(z[4])}, argmax {int(z.argmax())}")
    cen = tmp.TiedCtcHead(m, V, 0, "audio", tmp.TIED_SCALE_INIT, True)
    mean = rows.mean(0)
    c = cen.classes()
    expect(torch.allclose(c[:V], rows - mean, atol=1e-6, rtol=0) and
           float(c[:V].sum(0).abs().max()) < 1e-5 and torch.equal(c[V], cen.blank_vec.detach()),
           "centered classes are not the scaled rows less their mean + the blank")
    half = (mean + 0.5 * (rows[4] - mean)).reshape(1, 1, D)
    cc = [float(cen.cosines(f)[0, 0, 4]) for f in (x, half)]
    plain = tmp.TiedCtcHead(m, V, 0)
    cp = float(plain.cosines(half)[0, 0, 4])
    expect(all(abs(v - 1.0) < 1e-5 for v in cc) and cp < 0.999,
           f"centered cosines to class 4 {cc} (want 1, 1); uncentered of the half frame {cp}")
    w = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    got, want = tmp.table_mean_cos(w), (0 + 2 * 0.5 ** 0.5) / 3
    expect(abs(got - want) < 1e-6, f"table_mean_cos {got}, by hand {want}")
    print(f"mm_ctctied_check: scale 30 gives token 4's row logit {float(z[4]):.4f}; centered: "
          f"cosines {cc[0]:.6f} / {cc[1]:.6f} (the uncentered head's of the half frame "
          f"{cp:.4f}); table_mean_cos {got:.6f} = {want:.6f}: {CHECKS.n} checks")


def check_loss():
    torch.manual_seed(0)
    V, D, T = 20, 16, 12
    m = tied_stub(V, D, 4.0)
    head = tmp.TiedCtcHead(m, V, 0)
    with torch.no_grad():
        head.log_scale.fill_(math.log(7.0))
    x = torch.randn(4, T, D, requires_grad=True)
    valid = torch.ones(4, T, dtype=torch.bool)
    valid[1, 9:] = False
    valid[2, 4:] = False  # 4 frames for [6, 6, 6] (5 with the blanks): skipped
    tg = [[3, 3, 7, 9, 1], [5, 6, 5, 2], [6, 6, 6], [10, 11]]
    forward(m, x, valid)
    loss = head.loss(labels_for(tg, V - 1))
    loss.backward()
    expect((head.used, head.skipped) == (3, 1), f"used / skipped {head.used} / {head.skipped}")
    gx, gb, gs = x.grad.clone(), head.blank_vec.grad.clone(), head.log_scale.grad.clone()
    x.grad = head.blank_vec.grad = head.log_scale.grad = None
    rows = [0, 1, 3]
    f = 2.0 * x[rows]  # embed_audio's output on the stub
    f = f / f.norm(dim=-1, keepdim=True)
    cls = torch.cat([m.model.language_model.embed_tokens.weight.detach() * 4.0,
                     head.blank_vec[None]], 0)
    cls = cls / cls.norm(dim=-1, keepdim=True).clamp_min(1e-12)  # (row 0, the pad's, is 0)
    lp = (head.log_scale.exp() * f @ cls.T).log_softmax(-1).transpose(0, 1).double()
    ref = full_ctc_loss(lp, tg, rows, valid, V)
    ref.backward()

    def rel(a, b):
        return float((a - b).abs().max() / b.abs().max())

    dx, db, ds = rel(gx, x.grad), rel(gb, head.blank_vec.grad), rel(gs, head.log_scale.grad)
    expect(abs(loss.item() - ref.item()) <= 1e-5 * ref.item() and max(dx, db, ds) <= 1e-4,
           f"loss {loss.item()} vs {ref.item()}, gradients rel. {dx:.1e} / {db:.1e} / {ds:.1e}")
    expect(torch.equal(gx[2], torch.zeros_like(gx[2])), "the skipped clip got a gradient")
    expect(torch.equal(head.rows_of(x.detach(), rows), x.detach()[rows]),
           "the one-hot row pick is not indexing's values")
    print(f"mm_ctctied_check: tied loss {loss.item():.5f} = torch's full-vocabulary CTC "
          f"{ref.item():.5f} (gradients frames {dx:.1e}, blank {db:.1e}, scale {ds:.1e}); 3 "
          f"used 1 skipped: {CHECKS.n} checks")


def check_items():
    V = 6
    m = tied_stub(V, V + 1, 2.0)
    with torch.no_grad():  # token v's row: one-hot v; the blank: one-hot V
        m.model.language_model.embed_tokens.weight.copy_(torch.eye(V, V + 1))
    head = tmp.TiedCtcHead(m, V, 0)
    with torch.no_grad():  # (scale 2: a loss of ~1 a label, far from float32's rounding)
        head.blank_vec.copy_(torch.eye(V + 1)[V])
        head.log_scale.fill_(math.log(2.0))
    seq = [1, 1, V, 2, V, 3]  # the last frame is padding
    x = torch.eye(V + 1)[seq][None] * 0.7
    valid = torch.tensor([[True] * 5 + [False]])
    lab = labels_for([[1, 2]], 5)
    with torch.no_grad():
        losses, reads, refs, skipped, share, cos = head.items(x, valid, lab)
    lp = (2.0 * torch.eye(V + 1)[seq[:5]]).log_softmax(-1)[:, None].double()
    want = float(torch.nn.functional.ctc_loss(lp, torch.tensor([[1, 2]]), torch.tensor([5]),
                                              torch.tensor([2]), blank=V,
                                              reduction="none")) / 2
    expect(reads == [[1, 2]] and refs == [[1, 2]] and skipped == 0 and
           abs(share - 3 / 5) < 1e-12 and abs(cos - 1.0) < 1e-6,
           f"reads {reads}, refs {refs}, skipped {skipped}, share {share}, cosine {cos}")
    expect(len(losses) == 1 and abs(losses[0] - want) < 1e-5 * want,
           f"per-label loss {losses} (torch's {want})")
    expect((head.used, head.skipped) == (0, 0), f"counts moved {head.used} / {head.skipped}")
    print(f"mm_ctctied_check: held-out read by hand: {reads[0]} for {refs[0]}, token frames "
          f"{share:.2f} at cosine {cos:.4f}, loss a label {losses[0]:.6f} (torch {want:.6f}): "
          f"{CHECKS.n} checks")


def check_model(tok):
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size())
    model = fp32_model(tmp, p, tok)
    head = tmp.TiedCtcHead(model, p["vocab"], 0)
    texts = ["the cat sat down", "open the red door", "we walk", "the red cat"]
    items = mm_items(tmp, tok, 3, [], [(t, 48000) for t in texts])["audio"]  # 3 s clips
    b = tmp.collate(items)
    lab = b.pop("labels")
    emb = model.model.language_model.embed_tokens.weight
    expect(emb.requires_grad and model.lm_head.weight is emb,
           "the ci decoder's table is not trainable or not the LM head's")

    def tied_loss():
        model.model.get_audio_features(b["input_features"], b["input_features_mask"])
        return head.loss(lab)

    model.zero_grad(set_to_none=True)
    loss = tied_loss()
    expect(loss is not None and math.isfinite(loss.item()) and loss.item() > 0, f"loss {loss}")
    loss.backward()
    moved = grad_by_side(tmp, model)
    ea = grad_sum(model.model.embed_audio)
    at = grad_sum(model.model.audio_tower)
    hb, hs = float(head.blank_vec.grad.abs().sum()), float(head.log_scale.grad.abs())
    expect(emb.grad is None or not emb.grad.any(), "the tied loss reached embed_tokens")
    expect(moved["decoder"] == 0 and moved["vision"] == 0, f"gradient leaked: {moved}")
    expect(ea > 0 and at > 0 and hb > 0 and hs > 0,
           f"embed_audio {ea}, audio tower {at}, blank {hb}, scale {hs}")
    print(f"mm_ctctied_check: the ci model: tied loss {loss.item():.3f}; gradient embed_tokens "
          f"{'None' if emb.grad is None else float(emb.grad.abs().sum())}, decoder "
          f"{moved['decoder']}, vision {moved['vision']}; audio tower {at:.3g}, embed_audio "
          f"{ea:.3g}, blank {hb:.3g}, scale {hs:.3g}: {CHECKS.n} checks")
    dec = {n: x.detach().clone() for n, x in model.named_parameters()
           if not n.startswith(tmp.SIDES["vision"] + tmp.SIDES["audio"])}
    audio = [x for n, x in model.named_parameters() if n.startswith(tmp.SIDES["audio"])]
    opt = torch.optim.AdamW(audio + list(head.parameters()), lr=3e-3)
    vals = []
    for _ in range(12):
        opt.zero_grad(set_to_none=True)
        loss = tied_loss()
        vals.append(loss.item())
        loss.backward()
        opt.step()
    expect(all(math.isfinite(v) for v in vals) and vals[-1] < 0.8 * vals[0],
           f"12 steps of the tied loss: {[round(v, 3) for v in vals]}")
    same = [torch.equal(x, dec[n]) for n, x in model.named_parameters() if n in dec]
    expect(all(same), f"{same.count(False)} decoder tensors moved under the tied loss")
    print(f"mm_ctctied_check: 12 AdamW steps of the tied loss alone on 4 clips: "
          f"{vals[0]:.3f} -> {vals[-1]:.3f} ({', '.join(f'{v:.2f}' for v in vals)}); "
          f"{len(same)} decoder tensors unchanged: {CHECKS.n} checks")
    closing = tmp.Prompter(tok).id["<turn|>"]
    vaux = tmp.VisionAux(model, "".join(texts), 0, tok, closing)
    vtied = tmp.TiedCtcHead(model, p["vocab"], 0, "image")
    expect(vtied.tap is None and not torch.equal(vtied.blank_vec, head.blank_vec),
           "the image head has a tap or the audio head's blank")
    b = tmp.collate(mm_items(tmp, tok, 4, texts, [])["image"])
    lab = b.pop("labels")
    model.zero_grad(set_to_none=True)
    model.model.get_image_features(b["pixel_values"], b["image_position_ids"])
    frames = vaux.frames
    v, t = tmp.image_aux_losses(vaux, vtied, b["image_position_ids"], lab)
    vaux.frames = frames  # VisionAux alone on the same forward's columns
    v_own = vaux.loss_from_labels(b["image_position_ids"], lab)
    expect(t is not None and math.isfinite(t.item()) and t.item() > 0 and
           torch.equal(v.detach(), v_own.detach()) and (vtied.used, vtied.skipped) == (4, 0),
           f"image tied loss {t}, aux {v} vs {v_own}, used / skipped {vtied.used} / "
           f"{vtied.skipped}")
    t.backward()
    moved = grad_by_side(tmp, model)
    ev = grad_sum(model.model.embed_vision)
    vt = grad_sum(model.model.vision_tower)
    expect(emb.grad is None or not emb.grad.any(), "the image tied loss reached embed_tokens")
    expect(moved["decoder"] == 0 and moved["audio"] == 0 and ev > 0 and vt > 0 and
           vtied.blank_vec.grad is not None and vaux.proj.weight.grad is None,
           f"image tied gradient: {moved}, embed_vision {ev}, vision tower {vt}")
    print(f"mm_ctctied_check: the image twin on 4 images: tied loss {t.item():.3f} (aux "
          f"{v.item():.3f} = VisionAux's own); gradient embed_tokens "
          f"{'None' if emb.grad is None else float(emb.grad.abs().sum())}, decoder "
          f"{moved['decoder']}, audio {moved['audio']}; vision tower {vt:.3g}, embed_vision "
          f"{ev:.3g}: {CHECKS.n} checks")


def check_trainer():
    base = ["--ctc-weight", "0.5", "--ctc-units", "chars", "--a-lr-mult", "0.3",
            "--v-aux-weight", "0.5", "--v-warm-steps", "4", "--a-warm"]
    out = {}
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d, seconds=2)
        trainer_refusals(tmp, [os.path.join(d, "bad"), "--data", data, "--preset", "ci",
                               "--device", "cpu"],
                         ((["--ctc-tied"], "--ctc-tied needs --ctc-weight"),
                          (["--ctc-weight", "0.5", "--ctc-tied", "--ctc-at", "tower"],
                           "--ctc-at tower"),
                          (["--ctc-weight", "0.5", "--ctc-tied-weight", "0.5"],
                           "--ctc-tied-weight needs --ctc-tied"),
                          (["--ctc-weight", "0.5", "--ctc-tied", "--ctc-tied-weight", "0"],
                           "expected a finite W > 0"),
                          (["--ctc-weight", "0.5", "--ctc-tied", "--ctc-tied-weight", "inf"],
                           "expected a finite W > 0"),
                          (["--ctc-weight", "0.5", "--ctc-tied-scale", "30"],
                           "--ctc-tied-scale needs --ctc-tied"),
                          (["--ctc-weight", "0.5", "--ctc-tied-center"],
                           "--ctc-tied-center needs --ctc-tied"),
                          (["--ctc-weight", "0.5", "--ctc-tied", "--ctc-tied-scale", "0"],
                           "expected a finite S > 0"),
                          (["--ctc-weight", "0.5", "--ctc-tied", "--ctc-tied-scale", "nan"],
                           "expected a finite S > 0"),
                          (["--ctc-weight", "0.5", "--ctc-tied", "--ctc-tied-scale", "inf"],
                           "expected a finite S > 0"),
                          (["--ctc-weight", "0.5", "--ctc-tied-joint-only"],
                           "--ctc-tied-joint-only needs --ctc-tied"),
                          (["--ctc-weight", "0.5", "--ctc-tied", "--ctc-tied-joint-only"],
                           "--ctc-tied-joint-only needs --a-warm"),
                          (["--v-aux-tied"], "--v-aux-tied needs --v-aux-weight"),
                          (["--v-aux-weight", "0.5", "--v-aux-tied-weight", "0.5"],
                           "--v-aux-tied-weight needs --v-aux-tied"),
                          (["--v-aux-weight", "0.5", "--v-aux-tied", "--v-aux-tied-weight",
                            "0"], "expected a finite W > 0")), expect)
        both = base + ["--ctc-tied", "--v-aux-tied"]
        runs = ci_trainer_runs(tmp, data, d, (
            ("off", base), ("tied", base + ["--ctc-tied"]),
            ("tied_w", base + ["--ctc-tied", "--ctc-tied-weight", "0.5"]),
            ("tied_s10", base + ["--ctc-tied", "--ctc-tied-scale", "10"]),
            ("tied_s30", base + ["--ctc-tied", "--ctc-tied-scale", "30"]),
            ("tied_center", base + ["--ctc-tied", "--ctc-tied-center"]),
            ("tied_joint", base + ["--ctc-tied", "--ctc-tied-joint-only"]),
            ("both", both), ("both_w", both + ["--v-aux-tied-weight", "0.5"]),
            ("both_eval", both + ["--eval-every", "3", "--eval-items", "4"])),
            fail, stdout=out)
    h = {k: v[1] for k, v in runs.items()}
    expect(h["tied"] != h["off"], "--ctc-tied changed no weight")
    expect(h["tied_w"] == h["tied"], f"--ctc-tied-weight 0.5 (the default) {h['tied_w'][:12]}, "
           f"plain {h['tied'][:12]}: not the same weights")
    expect(h["tied_s10"] == h["tied"], f"--ctc-tied-scale 10 (the default) "
           f"{h['tied_s10'][:12]}, plain {h['tied'][:12]}: not the same weights")
    expect(len({h["tied"], h["tied_s30"], h["tied_center"], h["tied_joint"]}) == 4,
           "--ctc-tied-scale 30, --ctc-tied-center or --ctc-tied-joint-only changed no weight")
    for k, sc, ce, wa in (("tied", 10.0, False, True), ("tied_s30", 30.0, False, True),
                          ("tied_center", 10.0, True, True), ("tied_joint", 10.0, False, False)):
        rec = runs[k][0]["ctc"].get("tied") or {}
        expect(rec.get("scale_init") == sc and rec.get("center") is ce and
               rec.get("warm") is wa and math.isfinite(rec.get("scale_final", math.nan)) and
               rec.get("clips") == 6 * 4,
               f"{k}: the tied record {rec} (want scale_init {sc}, center {ce}, warm {wa})")
    jt, tw = runs["tied_joint"][0], runs["tied"][0]
    expect("tied_clips" not in jt["v_warm"] and "tied_mult" not in jt["v_warm"] and
           not jt["losses_every_25"].get("a_warm_tied") and
           jt["losses_every_25"].get("ctc_tied") and jt["v_warm"].get("clips") == 4 * 4 and
           tw["v_warm"].get("tied_clips") == 4 * 4 and tw["losses_every_25"].get("a_warm_tied"),
           f"--ctc-tied-joint-only's warm record {jt['v_warm']} / losses "
           f"{sorted(jt['losses_every_25'])}")
    expect("ctc_tied_scale" not in runs["tied"][0]["shapes"] and
           runs["tied_s30"][0]["shapes"].get("ctc_tied_scale") == 30.0 and
           runs["tied_center"][0]["shapes"].get("ctc_tied_center") is True,
           "the shapes' ctc_tied_scale / ctc_tied_center")
    expect(h["both"] != h["tied"], "--v-aux-tied changed no weight")
    expect(h["both_w"] == h["both"] == h["both_eval"],
           f"--v-aux-tied-weight 0.5 (the default) {h['both_w'][:12]}, with the held-out "
           f"read-out {h['both_eval'][:12]}, plain {h['both'][:12]}: not the same weights")
    off = runs["off"][0]
    flat = repr(off)
    expect("_tied" not in flat and "tied" not in off["ctc"] and "tied" not in off["v_aux"] and
           "tied_clips" not in flat and "tied_images" not in flat,
           "tied records without the options")
    expect("v_aux_tied" not in repr(runs["tied"][0]), "image tied records with --ctc-tied alone")
    j = runs["both_eval"][0]
    for kind, rec, unit in (("audio", j["ctc"].get("tied") or {}, "clips"),
                            ("image", j["v_aux"].get("tied") or {}, "images")):
        expect(rec.get("weight") == 0.5 and rec.get("scale_init") == tmp.TIED_SCALE_INIT and
               math.isfinite(rec.get("scale_final", math.nan)) and rec.get(unit) == 6 * 4 and
               rec.get(f"{unit}_too_short") == 0, f"the {kind} tied record {rec}")
    expect(j["shapes"].get("ctc_tied") is True and j["shapes"].get("v_aux_tied") is True,
           f"shapes {j['shapes']}")
    ls = {k: j["losses_every_25"].get(k, []) for k in ("ctc_tied", "a_warm_tied", "v_aux_tied",
                                                        "v_warm_tied")}
    expect(all(v and all(math.isfinite(x) and x > 0 for x in v) for v in ls.values()) and
           all(math.isfinite(j["final_loss"].get(k, math.nan)) for k in ls),
           f"tied losses {ls}, final {j['final_loss']}")
    vw = j["v_warm"]
    expect(vw.get("tied_clips", 0) + vw.get("tied_clips_too_short", 0) == 4 * 4 and
           vw.get("tied_images", 0) + vw.get("tied_images_too_short", 0) == 4 * 4 and
           vw.get("tied_mult") == 1.0 and vw.get("vtied_mult") == 1.0, f"the warm record {vw}")
    rows = j["heldout"]
    expect([r["step"] for r in rows] == [0, 3, 6], f"held-out rows at {[r['step'] for r in rows]}")
    for r in rows:
        for kind in ("audio", "image"):
            a = r[kind]
            expect(a.get("tied_items", 0) + a.get("tied_skipped", 0) == 4 and
                   a["tied_items"] > 0 and isinstance(a.get("tied_ctc"), float) and
                   a["tied_ctc"] > 0 and
                   all(isinstance(a.get(k), float) and math.isfinite(a[k])
                       for k in ("tied_cer", "tied_cer_other", "tied_peaks")) and
                   0 <= a["tied_peaks"] <= 1 and len(a.get("tied_example") or []) == 2,
                   f"step {r['step']} {kind}: { {k: v for k, v in a.items() if 'tied' in k} }")
    drift = [r.get("table_cos0") for r in rows]
    mc = [r.get("table_mean_cos") for r in rows]
    expect(all(isinstance(c, float) and -1 <= c <= 1 for c in mc) and
           not any("table_mean_cos" in r for r in runs["off"][0]["heldout"]),
           f"table_mean_cos {mc}, or present without a tied head")
    expect(all(isinstance(c, float) for c in drift) and abs(drift[0] - 1.0) < 1e-6 and
           -1 <= drift[2] < 0.999, f"the table's cosine to step 0's: {drift}")
    expect(not any("table_cos0" in r for r in runs["off"][0]["heldout"]),
           "table_cos0 without a tied head")
    lines = [x for x in out["both_eval"].splitlines() if "tied read-out" in x]
    expect(len(lines) == 6 and all(x.startswith("train_mm_proxy: held-out") for x in lines) and
           sum(": image ctc" in x for x in lines) == 3, f"tied read-out lines {lines}")
    expect(layout(runs["off"][2]) == layout(runs["both"][2]),
           "the saved tensors' names, shapes or dtypes changed with the tied heads")
    for x in lines:
        print(f"mm_ctctied_check: {x}")
    fl = j["final_loss"]
    print(f"mm_ctctied_check: trainer: without {h['off'][:12]}, --ctc-tied {h['tied'][:12]} = "
          f"--ctc-tied-weight 0.5 {h['tied_w'][:12]}; + --v-aux-tied {h['both'][:12]} = "
          f"--v-aux-tied-weight 0.5 {h['both_w'][:12]} = with the read-out "
          f"{h['both_eval'][:12]}; final ctc_tied {fl['ctc_tied']:.3f} v_aux_tied "
          f"{fl['v_aux_tied']:.3f}; refusals in one line: {CHECKS.n} checks")


def check_probe():
    """tools/python/mm_tied_plateau.py at a small size (vocab 64, dim 32, 60 steps at lr 3e-3,
    batch 8, one run: mean cosine 0.3, centered, scale 30): the table's measured mean cosine
    within 0.1 of the asked, a row at steps 0, 50 and 60, each finite, the loss lower at the end
    than at step 0; a bad run spec refused in one line, exit 1."""
    import re
    import subprocess

    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "python",
                        "mm_tied_plateau.py")
    r = subprocess.run([sys.executable, tool, "--vocab", "64", "--dim", "32", "--steps", "60",
                        "--lr", "3e-3", "--batch", "8", "0.3:1:30"], capture_output=True,
                       text=True, timeout=300)
    head = re.search(r"mean cosine (-?[0-9.]+) \(asked 0.3\), center 1, scale 30", r.stdout)
    rows = re.findall(r"step (\d+): tied ctc ([0-9.]+) a label, token frames ([0-9.]+)", r.stdout)
    expect(r.returncode == 0 and head and abs(float(head.group(1)) - 0.3) < 0.1 and
           [int(x[0]) for x in rows] == [0, 50, 60] and
           all(math.isfinite(float(x[1])) for x in rows) and float(rows[-1][1]) < float(rows[0][1]),
           f"mm_tied_plateau: exit {r.returncode}, {r.stdout[-600:]!r} {r.stderr[-300:]!r}")
    tool_refusals(tool, [], [(["0.3:2:30"], "CENTER 0 or 1")], expect)
    print(f"mm_ctctied_check: mm_tied_plateau at vocab 64: table mean cosine {head.group(1)}, "
          f"tied ctc {rows[0][1]} -> {rows[-1][1]} a label over 60 steps; a bad spec refused: "
          f"{CHECKS.n} checks")


def check_grad_tool():
    """tools/python/mm_tied_grad.py (each head's pull on the audio side): side_grad_norm by hand
    (loss = sum(a x) + |b|^2 / 2: the gradients x and b, an unused tensor counting 0); the tool
    on the ci plan (3 noise clips of 2 s, the ci preset, --tied 10:0 --tied 50:1): exit 0, three
    rows (char, then the two tied heads in order), every loss and norm finite and > 0, the char
    row x 1.00 and each row's "x char" its norm over the char row's; a bad --tied refused in one
    line, exit 1."""
    import re
    import subprocess

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "python")
    sys.path.insert(0, here)
    import mm_tied_grad

    x, a = torch.tensor([1.0, -2.0, 2.0]), torch.zeros(3, requires_grad=True)
    b = torch.tensor([[3.0, 0.0], [0.0, 4.0]], requires_grad=True)
    unused = torch.ones(2, requires_grad=True)
    g = mm_tied_grad.side_grad_norm((a * x).sum() + (b ** 2).sum() / 2, [a, b, unused])
    expect(abs(g - math.sqrt(9.0 + 25.0)) < 1e-6, f"side_grad_norm {g}, by hand sqrt(34)")
    tool = os.path.join(here, "mm_tied_grad.py")
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d, seconds=2)
        r = subprocess.run([sys.executable, tool, data, "--preset", "ci", "--clips", "3",
                            "--tied", "10:0", "--tied", "50:1"], capture_output=True, text=True,
                           timeout=300)
    rows = re.findall(r"mm_tied_grad: (char|tied scale \S+(?: centered)?) +loss +(\S+) a label"
                      r" +\|grad\| +(\S+) +x char +(\S+)", r.stdout)
    expect(r.returncode == 0 and [x[0] for x in rows] ==
           ["char", "tied scale 10", "tied scale 50 centered"],
           f"mm_tied_grad: exit {r.returncode}, rows {rows}, {r.stdout[-600:]!r} "
           f"{r.stderr[-300:]!r}")
    vals = [(float(x[1]), float(x[2]), float(x[3])) for x in rows]
    expect(all(math.isfinite(v) and v > 0 for row in vals for v in row[:2]),
           f"mm_tied_grad: losses and norms {vals}")
    expect(vals[0][2] == 1.0 and all(abs(v[2] - v[1] / vals[0][1]) <= 0.006 * max(1, v[2])
                                     for v in vals), f"mm_tied_grad: x char {vals}")
    tool_refusals(tool, ["unused"], [(["--tied", "50:2"], "CENTER 0 or 1")], expect)
    print(f"mm_ctctied_check: mm_tied_grad by hand and on the ci plan: |grad| char "
          f"{vals[0][1]:.4g}, tied scale 10 x {vals[1][2]}, scale 50 centered x {vals[2][2]}; a "
          f"bad --tied refused: {CHECKS.n} checks")


def main():
    words = ["the cat sat down", "open the red door", "we walk", "the red cat"]
    with tempfile.TemporaryDirectory() as d:  # (check_model's images show these too)
        tok = check_tokenizer(tmp, words, os.path.join(d, "tok.json"))
    check_classes()
    check_loss()
    check_items()
    check_model(tok)
    check_trainer()
    check_probe()
    check_grad_tool()
    print(f"mm_ctctied_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
