#!/usr/bin/env python3
"""tests/test_mm_visread.sh's checks of tools/python/mm_vision_readout.py (issue 35) and
train_mm_proxy's vision init options (init_vision_positions, scale_vision_residuals,
init_vision_proj) and --v-chars' items, on the CPU:
  1. decompose_terms on a hand-worked 2 images x 2 positions x 1 dim layout (common 1, position
     +-1, image +-2, glyph +-0.5): sums of squares 4 / 4 / 16 / 1 of 25;
  2. transformers' init of the patch position table is ones (what the option replaces: every
     patch gets the same 2 x ones, so the patch embedder's output minus its pixel projection is
     one vector for every patch); init_vision_positions(0.02): every entry drawn (none is 1),
     sample std within 5% of 0.02 over the 2 x 128 x 64 entries, the same seed the same table,
     the global torch stream untouched, std < 0 refused; afterwards the position term differs
     between patches;
  3. scale_vision_residuals on a 2-layer ci tower: exactly the 2 post-norm weights of each
     layer equal the original x 1e-4, every other parameter unchanged; each layer's output then
     has per-patch cosine > 0.999 with its input, while at scale 1 (position table drawn, so
     the input is not one vector) the median is < 0.9; x <= 0 refused;
  3b. init_vision_proj(0.3): input_proj's sample std within 5% of 0.3, no other tensor moved,
     the global stream untouched, the same seed the same weights, std 0 refused; side_grad_norms
     on gradients set by hand (2 on every input_proj entry, 3 on four embedding entries); and
     char_items: "ab c" at shape 5 -> "c" (5 % 3: the 3rd of 3 non-space characters), a text of
     spaces only dropped, the plan's item unchanged;
  4. features() on a 192 x 816 image: the patch grid 12 x 51, the soft-token grid 4 x 17 (68 =
     image_inputs' count), embed's width the decoder's;
  5. fit_depth on a synthetic cache (240 images, 200 train): grids whose columns hold each
     character's one-hot (2 columns a character, 3 rows, a fixed random projection to 24 dims,
     noise) are read at held-out CER < 0.05; noise-only grids at > 0.5.
Prints one line per check and the count; exit 1 on the first failure."""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import mm_vision_readout as vr  # noqa: E402
import train_mm_proxy as tmp  # noqa: E402
from mm_items import Checks, Img, check_tokenizer, fp32_model  # noqa: E402

CHECKS = Checks("mm_visread_check")
fail, expect = CHECKS.fail, CHECKS.expect


def check_decompose():
    X = torch.tensor([[[4.5], [1.5]], [[-0.5], [-1.5]]], dtype=torch.float64)
    r = vr.decompose_terms(X)
    want = dict(total=25.0, common=4.0, position=4.0, image=16.0, glyph=1.0)
    for k, v in want.items():
        expect(abs(r[k] - v) < 1e-12, f"decompose {k} {r[k]} != {v}")
    expect(abs(r["sum_check"] - 1) < 1e-12, f"sum check {r['sum_check']}")
    print(f"mm_visread_check: decompose_terms hand-worked: {CHECKS.n} checks")


def tower_model(tok, layers=1):
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size(), v_layers=layers)
    return fp32_model(tmp, p, tok).eval()


def image(seed=0, h=192, w=816):
    r = np.random.default_rng(seed)
    return tmp.image_inputs(Img(r.integers(0, 256, (h, w, 3), dtype=np.uint8)))


def position_terms(model, pv, pp):
    pe = model.model.vision_tower.patch_embedder
    with torch.no_grad():
        x = torch.from_numpy(pv)[None]
        out = pe(x, torch.from_numpy(pp)[None], torch.from_numpy((pp == -1).all(-1))[None])
        return (out - pe.input_proj(2 * (x - 0.5)))[0]


def check_positions(tok):
    model = tower_model(tok)
    t = model.model.vision_tower.patch_embedder.position_embedding_table
    expect(bool((t == 1).all()), "transformers' position table is not all ones")
    pv, pp, n = image()
    valid = int((pp >= 0).all(-1).sum())
    d = position_terms(model, pv, pp)[:valid]
    expect(float((d - 2).abs().max()) < 1e-5, f"default: a position term differs from 2 x ones "
           f"by {float((d - 2).abs().max())}")
    torch.manual_seed(123)
    want_next = torch.rand(4)
    torch.manual_seed(123)
    tmp.init_vision_positions(model, 0.02, 5)
    got_next = torch.rand(4)
    expect(torch.equal(want_next, got_next), "init_vision_positions moved the global stream")
    expect(not bool((t == 1).any()), "an entry of the drawn table is still 1")
    sd = float(t.detach().std())
    expect(abs(sd / 0.02 - 1) < 0.05 and t.numel() == 2 * 128 * 64,
           f"drawn table std {sd:.5f} over {t.numel()} entries")
    again = tower_model(tok)
    tmp.init_vision_positions(again, 0.02, 5)
    expect(torch.equal(t, again.model.vision_tower.patch_embedder.position_embedding_table),
           "the same seed gave another table")
    d = position_terms(model, pv, pp)[:valid]
    expect(float((d - d[0]).norm(dim=-1)[1:].min()) > 0, "drawn: two patches share a position "
           "term")
    try:
        tmp.init_vision_positions(model, -1.0, 0)
        expect(False, "std -1 was accepted")
    except SystemExit as e:
        expect("--v-pos-init" in str(e), f"std -1's error: {e}")
    print(f"mm_visread_check: position table ones by default (the same 2 x ones on {valid} "
          f"patches), drawn std {sd:.5f}: {CHECKS.n} checks")


def layer_cos(model, pv, pp):
    got = []
    hooks = [l.register_forward_hook(lambda m, i, o: got.append((i[0], o)))
             for l in model.model.vision_tower.encoder.layers]
    with torch.no_grad():
        model.model.vision_tower(pixel_values=torch.from_numpy(pv)[None],
                                 pixel_position_ids=torch.from_numpy(pp)[None])
    for h in hooks:
        h.remove()
    valid = int((pp >= 0).all(-1).sum())
    return torch.cat([torch.nn.functional.cosine_similarity(i[0, :valid], o[0, :valid], dim=-1)
                      for i, o in got])


def check_res_scale(tok):
    base, small = tower_model(tok, 2), tower_model(tok, 2)
    for m in (base, small):
        tmp.init_vision_positions(m, 0.02, 0)
    tmp.scale_vision_residuals(small, 1e-4)
    names = {f"model.vision_tower.encoder.layers.{k}.{s}.weight" for k in range(2)
             for s in ("post_attention_layernorm", "post_feedforward_layernorm")}
    changed, exact = [], True
    for (n, a), b in zip(base.named_parameters(), small.parameters()):
        if n in names:
            exact = exact and torch.equal(b, a * 1e-4)
        elif not torch.equal(a, b):
            changed.append(n)
    expect(len(names) == 4 and exact, "a residual-branch weight is not the original x 1e-4")
    expect(not changed, f"scale_vision_residuals changed other tensors: {changed[:3]}")
    pv, pp, _ = image(1)
    c1, cs = layer_cos(base, pv, pp), layer_cos(small, pv, pp)
    expect(float(cs.min()) > 0.999, f"scaled 1e-4: min per-patch cosine {float(cs.min()):.5f}")
    expect(float(c1.median()) < 0.9, f"scale 1: median cosine {float(c1.median()):.3f}")
    try:
        tmp.scale_vision_residuals(small, 0.0)
        expect(False, "scale 0 was accepted")
    except SystemExit as e:
        expect("--v-res-scale" in str(e), f"scale 0's error: {e}")
    print(f"mm_visread_check: scale_vision_residuals: {len(names)} tensors x 1e-4, the rest "
          f"unchanged; layer in/out cosine min {float(cs.min()):.5f} (scale 1: median "
          f"{float(c1.median()):.3f})")


def check_features(tok):
    model = tower_model(tok, 2)
    pv, pp, n = image(2)
    with torch.no_grad():
        f = vr.features(model, pv, pp)
    D = model.config.vision_config.hidden_size
    want = dict(pixels=(12, 51, 768), patch=(12, 51, D), L1=(12, 51, D), L2=(12, 51, D),
                pooled=(4, 17, D), embed=(4, 17, model.config.text_config.hidden_size))
    expect(n == 68 and sorted(f) == sorted(want), f"depths {sorted(f)}, soft tokens {n}")
    for d, s in want.items():
        expect(tuple(f[d].shape) == s, f"{d}: shape {tuple(f[d].shape)} != {s}")
    expect(torch.allclose(f["pixels"][0, 1].reshape(-1), torch.from_numpy(2 * pv[1] - 1)),
           "pixels[0, 1] is not the second patch")
    print(f"mm_visread_check: features: grids 12 x 51 and 4 x 17 at every depth: {CHECKS.n} "
          "checks")


def synthetic_cache(d, informative, seed=0):
    r = np.random.default_rng(seed)
    alphabet = list("abcdefgh ")
    proj = r.normal(0, 1, (len(alphabet) + 1, 24))
    ims, grids = [], []
    for k in range(240):
        text = "".join(r.choice(alphabet[:-1], int(r.integers(2, 7))))
        cols = []
        for ch in text:
            cols += [1 + alphabet.index(ch)] * 2
        g = np.eye(len(alphabet) + 1)[cols] @ proj if informative else np.zeros((len(cols), 24))
        g = np.repeat(g[None], 3, 0) + r.normal(0, 0.3, (3, len(cols), 24))
        grids.append(g.reshape(-1, 24).astype(np.float16))
        ims.append(dict(split="train" if k < 200 else "test", text=text, id=f"i{k}", rows=3,
                        cols=len(cols)))
    os.makedirs(os.path.join(d, "cache"), exist_ok=True)
    np.save(os.path.join(d, "cache", "patch.npy"), np.concatenate(grids))
    info = dict(images=ims, depths=["patch"], seconds=0.0)
    json.dump(info, open(os.path.join(d, "cache", "index.json"), "w"))
    return info, alphabet


def check_fit():
    cer = {}
    for informative in (True, False):
        with tempfile.TemporaryDirectory() as d:
            info, alphabet = synthetic_cache(d, informative)
            args = argparse.Namespace(out=d, seed=0, steps=300, lr=1e-2, batch=16, every=10 ** 9)
            r = vr.fit_depth(args, info, "patch", alphabet)
        cer[informative] = r["held"]["cer"]
        expect(r["held"]["images"] == 40 and r["train_images"] == 200,
               f"{r['held']['images']} held out, {r['train_images']} train")
    expect(cer[True] < 0.05, f"informative grids: held-out CER {cer[True]:.3f} >= 0.05")
    expect(cer[False] > 0.5, f"grids without the labels: held-out CER {cer[False]:.3f} <= 0.5")
    print(f"mm_visread_check: fit_depth: held-out CER {cer[True]:.3f} (columns hold the "
          f"characters), {cer[False]:.3f} (noise only)")


def check_proj_and_chars(tok):
    """init_vision_proj (--v-proj-init), side_grad_norms and char_items (--v-chars)."""
    model = tower_model(tok)
    w = model.model.vision_tower.patch_embedder.input_proj.weight
    before = {n: x.detach().clone() for n, x in model.named_parameters()}
    torch.manual_seed(7)
    want_next = torch.rand(4)
    torch.manual_seed(7)
    tmp.init_vision_proj(model, 0.3, 5)
    expect(torch.equal(want_next, torch.rand(4)), "init_vision_proj moved the global stream")
    sd = float(w.detach().std())
    expect(abs(sd / 0.3 - 1) < 0.05, f"drawn input_proj std {sd:.4f}, expected 0.3")
    moved = [n for n, x in model.named_parameters() if not torch.equal(x, before[n])]
    expect(moved == ["model.vision_tower.patch_embedder.input_proj.weight"],
           f"init_vision_proj changed {moved}")
    again = tower_model(tok)
    tmp.init_vision_proj(again, 0.3, 5)
    expect(torch.equal(w, again.model.vision_tower.patch_embedder.input_proj.weight),
           "the same seed gave another input_proj")
    tmp.init_vision_positions(again, 0.3, 5)  # (--v-pos-init's draw is another stream: seed + 1)
    t = again.model.vision_tower.patch_embedder.position_embedding_table
    expect(not torch.equal(t.flatten()[:64], w.flatten()[:64]), "the two draws share a stream")
    try:
        tmp.init_vision_proj(model, 0.0, 0)
        expect(False, "std 0 was accepted")
    except SystemExit as e:
        expect("--v-proj-init" in str(e), f"std 0's error: {e}")
    # side_grad_norms: a gradient put by hand on one tensor of each of two sides
    for x in model.parameters():
        x.grad = None
    model.model.vision_tower.patch_embedder.input_proj.weight.grad = torch.full_like(w, 2.0)
    e = model.model.language_model.embed_tokens.weight
    e.grad = torch.zeros_like(e)
    e.grad.view(-1)[:4] = 3.0
    got = tmp.side_grad_norms(model)
    want = {"vision_tower": 2.0 * w.numel() ** 0.5, "decoder": 6.0}
    expect(set(got) == set(want) and all(abs(got[k] / want[k] - 1) < 1e-3 for k in want),
           f"side_grad_norms {got}, expected {want}")
    # char_items: one non-space character of each text, chosen by the item's shape seed
    its = [dict(id="a", text="ab c", shape=5), dict(id="b", text="x", shape=3),
           dict(id="c", text=" ", shape=1)]
    ch = tmp.char_items(its)
    expect([c["text"] for c in ch] == ["c", "x"] and [c["id"] for c in ch] == ["a_c", "b_c"]
           and ch[0]["shape"] == 5 and its[0]["text"] == "ab c",
           f"char_items {ch}")
    print(f"mm_visread_check: input_proj drawn std {sd:.4f} (own stream), side_grad_norms, "
          f"char_items: {CHECKS.n} checks")


def main():
    torch.set_num_threads(1)
    check_decompose()
    tok = check_tokenizer(tmp, ["the cat sat", "open the door"])
    check_positions(tok)
    check_res_scale(tok)
    check_proj_and_chars(tok)
    check_features(tok)
    check_fit()
    print(f"mm_visread_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
