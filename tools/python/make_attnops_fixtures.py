#!/usr/bin/env python3
"""Writes tests/fixtures/attnops/*.g4fx: inputs and outputs of HF transformers' Gemma-4 vision and
audio building blocks (tiny random configs), the independent source the CPU references in
kernels/ref/ are checked against by tests/test_ref_ops.c.

Every case runs the real HF modules (transformers.models.gemma4.modeling_gemma4) in float32 on
the CPU and captures the tensors around the op under test with forward hooks, so the masks, the
blocked audio attention with its rel_shift, the 2-D RoPE and the pooling are HF's own code, not a
re-derivation.

Usage:  /work/venv-hf/bin/python tools/python/make_attnops_fixtures.py [OUT_DIR]
        (default OUT_DIR: tests/fixtures/attnops beside this script's repository root)

Container format (.g4fx, little-endian), read by tests/test_ref_ops.c:
  "G4FX" u32 version(1) u32 count, then per tensor:
  u32 name_len, name bytes, u32 dtype (0 f32, 1 i32, 2 u8), u32 ndim, u32 dims[ndim], data.
"""
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers.models.gemma4 import modeling_gemma4 as m4
from transformers.models.gemma4.configuration_gemma4 import Gemma4AudioConfig, Gemma4VisionConfig

SEED = 1234


def write_g4fx(path, tensors):
    """tensors: list of (name, np.ndarray) with dtype float32, int32 or uint8."""
    codes = {np.dtype(np.float32): 0, np.dtype(np.int32): 1, np.dtype(np.uint8): 2}
    out = bytearray(b"G4FX" + struct.pack("<II", 1, len(tensors)))
    for name, a in tensors:
        a = np.ascontiguousarray(a)
        nb = name.encode()
        out += struct.pack("<I", len(nb)) + nb
        out += struct.pack("<II", codes[a.dtype], a.ndim)
        out += struct.pack("<%dI" % a.ndim, *a.shape)
        out += a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(out)
    os.replace(tmp, path)
    print("wrote %s (%d bytes)" % (path, len(out)))


def f32(t):
    return t.detach().to(torch.float32).cpu().numpy().astype(np.float32)


def randomize(module, gen, scale=0.5):
    """Random weights (HF init leaves some at 0 or 1, which would hide indexing errors), rounded
    to fp16 values so the C side can hold them as fp16 bits (the package format) exactly."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_((torch.randn(p.shape, generator=gen) * scale).half().float())


def audio_attention_case(out_dir):
    """One Gemma4AudioAttention layer inside Gemma4AudioModel (so the mask is HF's own 5-D blocked
    mask with invalid frames), hidden 256 = 2 heads x 128 (head_dim as in E2B)."""
    gen = torch.Generator().manual_seed(SEED)
    cfg = Gemma4AudioConfig(hidden_size=256, num_hidden_layers=1, num_attention_heads=2,
                            subsampling_conv_channels=[128, 32], output_proj_dims=256,
                            use_clipped_linears=True)
    # The default attention implementation (sdpa) on purpose: with "eager", HF 5.17 hands the
    # audio attention a float additive mask and its masked_fill(mask.logical_not()) inverts it.
    assert cfg._attn_implementation in (None, "sdpa"), cfg._attn_implementation
    model = m4.Gemma4AudioModel(cfg).eval()
    randomize(model, gen, 0.08)
    attn = model.layers[0].self_attn
    with torch.no_grad():
        attn.per_dim_scale.copy_(torch.randn(attn.per_dim_scale.shape, generator=gen))
    cap = {}
    attn.q_proj.register_forward_hook(lambda mod, i, o: cap.__setitem__("q", o))
    attn.k_proj.register_forward_hook(lambda mod, i, o: cap.__setitem__("k", o))
    attn.v_proj.register_forward_hook(lambda mod, i, o: cap.__setitem__("v", o))
    attn.post.register_forward_pre_hook(lambda mod, i: cap.__setitem__("attn", i[0]))

    def pre(mod, args, kwargs):
        cap["pos_emb"] = kwargs["position_embeddings"]
        cap["mask5"] = kwargs["attention_mask"]
    attn.register_forward_pre_hook(pre, with_kwargs=True)
    # 148 mel frames -> 74 -> 37 audio frames; the last 59 mel frames invalid -> frames 23..36
    # invalid (14 >= 12 consecutive: queries 35, 36 see no valid key at all).
    n_mel, n_valid_mel = 148, 89
    feats = torch.randn(1, n_mel, 128, generator=gen)
    mask = torch.zeros(1, n_mel, dtype=torch.bool)
    mask[0, :n_valid_mel] = True
    with torch.no_grad():
        out = model(feats, attention_mask=mask)
    valid = out.attention_mask[0].to(torch.uint8)
    T = valid.shape[0]
    # R(d) = relative_k_proj(sinusoid(d)): HF's position_embeddings row c holds d = 12 - c.
    with torch.no_grad():
        R_hf = attn.relative_k_proj(cap["pos_emb"])[0] if cap["pos_emb"].dim() == 3 else \
            attn.relative_k_proj(cap["pos_emb"])
    R_hf = R_hf.reshape(-1, 256)
    R_by_d = torch.flip(R_hf, dims=[0])
    write_g4fx(os.path.join(out_dir, "audio_attention.g4fx"), [
        ("q", f32(cap["q"][0])), ("k", f32(cap["k"][0])), ("v", f32(cap["v"][0])),
        ("rel", f32(R_by_d)),
        ("per_dim_scale", f32(attn.per_dim_scale)), ("valid", valid.numpy().astype(np.uint8)),
        ("mask5", cap["mask5"][0, 0].to(torch.uint8).numpy().astype(np.uint8)),
        ("out", f32(cap["attn"][0, :T])),
    ])


def sscp_case(out_dir):
    """The two SSCP conv layers (conv 3x3 s2 p1 + LayerNorm(weight only) + ReLU), NCHW, with the
    frame mask, on a small odd-sized input."""
    gen = torch.Generator().manual_seed(SEED + 1)
    l0 = m4.Gemma4AudioSubSampleConvProjectionLayer(1, 16, 1e-6).eval()
    l1 = m4.Gemma4AudioSubSampleConvProjectionLayer(16, 8, 1e-6).eval()
    randomize(l0, gen, 0.5)
    randomize(l1, gen, 0.3)
    H, W = 13, 18
    x = torch.randn(1, 1, H, W, generator=gen)
    mask = torch.ones(1, H, dtype=torch.bool)
    mask[0, 10:] = False
    with torch.no_grad():
        y0, m0 = l0(x, mask)
        y1, m1 = l1(y0, m0)
    write_g4fx(os.path.join(out_dir, "sscp.g4fx"), [
        ("x", f32(x[0])), ("valid", mask[0].to(torch.uint8).numpy()),
        ("w0", f32(l0.conv.weight)), ("ln0", f32(l0.norm.weight)), ("y0", f32(y0[0])),
        ("valid0", m0[0].to(torch.uint8).numpy()),
        ("w1", f32(l1.conv.weight)), ("ln1", f32(l1.norm.weight)), ("y1", f32(y1[0])),
    ])


def lconv_case(out_dir):
    """Gemma4AudioLightConv1d pieces: GLU of linear_start's output, the causal depthwise conv
    (k=5, left pad 4), the clip, conv_norm and SiLU, captured around each module."""
    gen = torch.Generator().manual_seed(SEED + 2)
    cfg = Gemma4AudioConfig(hidden_size=16, num_attention_heads=2, use_clipped_linears=True)
    lc = m4.Gemma4AudioLightConv1d(cfg).eval()
    randomize(lc, gen, 0.5)
    cap = {}
    lc.linear_start.register_forward_hook(lambda mod, i, o: cap.__setitem__("start", o))
    def conv_hook(mod, i, o):
        cap["conv_in"], cap["conv_out"] = i[0], o
    lc.depthwise_conv1d.register_forward_hook(conv_hook)
    lc.conv_norm.register_forward_hook(lambda mod, i, o: cap.__setitem__("norm_out", o))
    lc.linear_end.register_forward_pre_hook(lambda mod, i: cap.__setitem__("act_out", i[0]))
    T = 23
    x = torch.randn(1, T, 16, generator=gen)
    with torch.no_grad():
        lc(x)
    write_g4fx(os.path.join(out_dir, "lconv.g4fx"), [
        ("start", f32(cap["start"][0])),                       # [T, 2C] linear_start output
        ("glu", f32(cap["conv_in"][0].transpose(0, 1))),       # [T, C] GLU output
        ("conv_w", f32(lc.depthwise_conv1d.weight[:, 0, :])),  # [C, K]
        ("conv", f32(cap["conv_out"][0].transpose(0, 1))),     # [T, C]
        ("norm_w", f32(lc.conv_norm.weight)),
        ("norm", f32(cap["norm_out"][0])),                     # conv_norm(clip(conv))
        ("silu", f32(cap["act_out"][0])),                      # silu(norm)
    ])


def vision_case(out_dir):
    """One Gemma4VisionModel layer, hidden 128 = 2 heads x 64 (head_dim as in E2B), patch 4,
    a 6x3 patch grid (18 valid patches) padded to 27 = 9 x 3 output tokens: captures the patch
    embedder (projection + position embeddings), the attention (q/k after norm, before RoPE; v;
    the attention output before o_proj) and the pooler."""
    gen = torch.Generator().manual_seed(SEED + 3)
    cfg = Gemma4VisionConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2, head_dim=64,
                             patch_size=4, position_embedding_size=16, pooling_kernel_size=3)
    model = m4.Gemma4VisionModel(cfg).eval()
    randomize(model, gen, 0.1)
    with torch.no_grad():
        model.patch_embedder.position_embedding_table.copy_(
            torch.randn(model.patch_embedder.position_embedding_table.shape,
                        generator=gen).half().float())
    att = model.encoder.layers[0].self_attn
    cap = {}
    model.patch_embedder.input_proj.register_forward_hook(lambda mod, i, o: cap.__setitem__("proj", o))
    model.patch_embedder.register_forward_hook(lambda mod, i, o: cap.__setitem__("embed", o))
    att.q_norm.register_forward_hook(lambda mod, i, o: cap.__setitem__("q", o))
    att.k_norm.register_forward_hook(lambda mod, i, o: cap.__setitem__("k", o))
    att.v_norm.register_forward_hook(lambda mod, i, o: cap.__setitem__("v", o))
    att.o_proj.register_forward_pre_hook(lambda mod, i: cap.__setitem__("attn", i[0]))
    def pool_hook(mod, i, o):
        cap["pool_out"], cap["pool_mask"] = o
    model.pooler.register_forward_hook(pool_hook)

    def pool_pre(mod, args, kwargs):
        cap["pool_in"] = kwargs["hidden_states"]
    model.pooler.register_forward_pre_hook(pool_pre, with_kwargs=True)
    Wp, Hp, N = 6, 3, 27
    pos = torch.full((1, N, 2), -1, dtype=torch.long)
    for r in range(Hp):
        for c in range(Wp):
            pos[0, r * Wp + c] = torch.tensor([c, r])
    pix = torch.rand(1, N, 3 * 4 * 4, generator=gen)
    pix[0, Wp * Hp:] = 0
    with torch.no_grad():
        model(pix, pos)
    n = N
    key_valid = (pos[0] != -1).all(dim=-1).to(torch.uint8)
    write_g4fx(os.path.join(out_dir, "vision.g4fx"), [
        ("pos", pos[0].to(torch.int32).numpy()), ("key_valid", key_valid.numpy()),
        ("proj", f32(cap["proj"][0])), ("pos_table", f32(model.patch_embedder.position_embedding_table)),
        ("embed", f32(cap["embed"][0])),
        ("q", f32(cap["q"][0].reshape(n, -1))), ("k", f32(cap["k"][0].reshape(n, -1))),
        ("v", f32(cap["v"][0].reshape(n, -1))), ("attn", f32(cap["attn"][0])),
        ("pool_in", f32(cap["pool_in"][0])), ("pool_out", f32(cap["pool_out"][0])),
        ("pool_valid", cap["pool_mask"][0].to(torch.uint8).numpy()),
    ])


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "fixtures", "attnops")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(SEED)
    print("transformers %s, torch %s, numpy %s" % (transformers.__version__, torch.__version__,
                                                   np.__version__))
    audio_attention_case(out_dir)
    sscp_case(out_dir)
    lconv_case(out_dir)
    vision_case(out_dir)


if __name__ == "__main__":
    main()
