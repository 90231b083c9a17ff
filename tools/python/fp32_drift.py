#!/usr/bin/env python3
"""How far HF transformers' own float32 run, and variants of it, drift from HF in float64 on a
package's text cases (issue 35: is the CPU backend's drift at depth rounding or a semantic
error?). bench/NOTES.md "CPU vs HF drift on the mm proxy decoder (issue 35)" has the numbers.
The model is loaded as make_reference.py loads it (fp16-rounded weights, the package's fp16
constants); the ids are make_reference.py's case len<S> (seed 1234 + S).

    python3 tools/python/fp32_drift.py variants HF_DIR REF64.npz S NAME..
        each NAME run, every layer output and the logits against REF64 (make_reference.py
        --dtype float64, case len<S>), rel err ||a - b|| / ||b||:
          32          HF in float32 (= make_reference.py's float32 dump)
          32seq       float32, every nn.Linear accumulated one k at a time in order (the CPU
                      backend's kernels/ref/gemm_f16.c order; slow: a Python loop over K)
          64eps1e-5   float64 with rms_norm_eps 1e-5 in the decoder's norms
          64f16resid  float64, the residual stream rounded to fp16 after every layer
          64f16attn   float64, the attention output rounded to fp16 before o_proj
          64bf16mlp   float64, the MLP hidden (gate x up) rounded to bf16 before down_proj
          64nosoftcap float64 without the final logit soft-cap
          64win<N>    float64 with sliding window N
    python3 tools/python/fp32_drift.py pure64 HF_DIR OUT S[,S..]
        make_reference.py's float64 text dumps (OUT/len<S>.npz) without transformers' float32
        casts: Gemma4RMSNorm, the eager softmax and the text RoPE (exact theta^(-2i/d) inverse
        frequencies, float64 angles) computed in float64
    python3 tools/python/fp32_drift.py damp HF_DIR S F..
        HF float32 vs float64 per layer with the attention scores damped: every q_norm weight
        times F (random init: score std sqrt(head_dim) x F)

Everything is patched at run time in this process only (transformers 5.17's modeling_gemma4).
"""
import math
import os
import sys
import types

import numpy as np
import torch
from transformers.models.gemma4 import modeling_gemma4 as mg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_reference as mr  # noqa: E402


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return math.sqrt(((a - b) ** 2).sum() / (b ** 2).sum())


def case_ids(model, S):
    V = model.config.get_text_config().vocab_size
    return torch.randint(0, V, (1, S), generator=torch.Generator().manual_seed(1234 + S))


def load(hf):
    model, consts, n = mr.load_model(types.SimpleNamespace(hf=hf, package=None))
    return model, consts, n


def layer_outputs(model, S):
    """Every decoder layer's output and the logits of case len<S>, as float64 numpy."""
    lm = model.model.language_model
    cap = {}
    hs = [layer.register_forward_hook(
        lambda m, a, o, i=i: cap.__setitem__(f"layer_{i}", (o[0] if isinstance(o, tuple) else o)[0]
                                            .double().numpy()))
          for i, layer in enumerate(lm.layers)]
    cap["logits"] = model(input_ids=case_ids(model, S), use_cache=False).logits[0].double().numpy()
    for h in hs:
        h.remove()
    return cap


def seq_linear(self, x):  # one k at a time, in order, in x's dtype
    w = self.weight
    y = torch.zeros(x.shape[:-1] + (w.shape[0],), dtype=x.dtype)
    for k in range(w.shape[1]):
        y += x[..., k:k + 1] * w[:, k]
    return y if self.bias is None else y + self.bias


def variant(hf, name):
    model, _, _ = load(hf)
    lm = model.model.language_model
    dt = torch.float64 if name.startswith("64") else torch.float32
    model = model.to(dt)
    tc = model.config.get_text_config()
    if name == "32seq":
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.forward = types.MethodType(seq_linear, m)
    elif name == "64eps1e-5":
        for m in lm.modules():
            if isinstance(m, mg.Gemma4RMSNorm):
                m.eps = 1e-5
    elif name == "64f16resid":
        for layer in lm.layers:
            layer.register_forward_hook(
                lambda m, a, o: (o[0].half().to(dt),) + tuple(o[1:]) if isinstance(o, tuple)
                else o.half().to(dt))
    elif name == "64f16attn":
        for layer in lm.layers:
            layer.self_attn.o_proj.register_forward_pre_hook(lambda m, a: (a[0].half().to(dt),))
    elif name == "64bf16mlp":
        for layer in lm.layers:
            layer.mlp.down_proj.register_forward_pre_hook(lambda m, a: (a[0].bfloat16().to(dt),))
    elif name == "64nosoftcap":
        tc.final_logit_softcapping = None
    elif name.startswith("64win"):
        tc.sliding_window = int(name[5:])
    elif name not in ("32", "64"):
        sys.exit(f"fp32_drift: unknown variant {name}")
    return model, dt


def cmd_variants(hf, ref, S, names):
    r = np.load(ref)
    L = sum(1 for k in r.files if k.startswith("layer_"))
    cols = [f"layer_{i}" for i in sorted({0, 1, L // 4, L // 2, 3 * L // 4, L - 1})] + ["logits"]
    print(f"{'variant':12s} " + " ".join(f"{c:>9s}" for c in cols))
    for name in names:
        model, dt = variant(hf, name)
        ids = case_ids(model, S)
        if not np.array_equal(ids[0].numpy(), r["input_ids"]):
            sys.exit(f"fp32_drift: {ref} is not case len{S} of this model")
        cap = layer_outputs(model, S)
        print(f"{name:12s} " + " ".join(f"{rel(cap[c], r[c]):9.2e}" for c in cols), flush=True)


def cmd_pure64(hf, out, lengths):
    args = types.SimpleNamespace(hf=hf, package=None, out=out, lengths=lengths, seed=1234,
                                 dtype="float64", device="cpu")
    model, consts, n = mr.load_model(args)
    tc = model.config.get_text_config()
    rot = model.model.language_model.rotary_emb
    inv64 = {}
    for lt in ("sliding_attention", "full_attention"):
        buf = getattr(rot, f"{lt}_inv_freq").double()
        theta = tc.rope_parameters[lt]["rope_theta"]
        d = next(tc.per_layer_config[j].head_dim for j, t in enumerate(tc.layer_types) if t == lt)
        i = torch.arange(buf.numel(), dtype=torch.float64)
        exact = torch.where(buf != 0, theta ** (-2 * i / d), torch.zeros_like(buf))
        off = ((buf - exact).abs() / exact.clamp_min(1e-300))[buf != 0].max().item()
        if off > 3e-7:  # HF's buffer must be this formula to float32 rounding
            sys.exit(f"fp32_drift: {lt} inv_freq is not theta^(-2i/{d}) (off by {off:.2e})")
        ulp = int((buf.float() != exact.float()).sum())
        print(f"{lt}: theta {theta:g}, head_dim {d}, {int((buf != 0).sum())} rotating; HF's "
              f"float32 inv_freq differs from the correctly rounded one at {ulp}")
        inv64[lt] = exact

    def rope(self, x, position_ids, layer_type):
        f = (inv64[layer_type][None, :, None] @ position_ids[:, None, :].double()).transpose(1, 2)
        emb = torch.cat((f, f), dim=-1)
        s = getattr(self, f"{layer_type}_attention_scaling")
        return (emb.cos() * s).to(x.dtype), (emb.sin() * s).to(x.dtype)

    def norm(self, x):
        y = self._norm(x)
        return y * self.weight if self.with_scale else y

    def eager(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None,
              **kw):
        scaling = module.head_dim ** -0.5 if scaling is None else scaling
        k = mg.repeat_kv(key, module.num_key_value_groups)
        v = mg.repeat_kv(value, module.num_key_value_groups)
        w = torch.matmul(query, k.transpose(2, 3)) * scaling
        if softcap is not None:
            w = torch.tanh(w / softcap) * softcap
        if attention_mask is not None:
            w = w + attention_mask
        w = torch.softmax(w, dim=-1, dtype=torch.float64).to(query.dtype)
        return torch.matmul(w, v).transpose(1, 2).contiguous(), w

    mg.Gemma4TextRotaryEmbedding.forward = rope
    mg.Gemma4RMSNorm.forward = norm
    mg.eager_attention_forward = eager  # make_reference.text_cases wraps this one
    mr.text_cases(args, model.to(torch.float64), consts, n)


def cmd_damp(hf, S, factors):
    for f in factors:
        caps = []
        for dt in (torch.float32, torch.float64):
            model, _, _ = load(hf)
            for layer in model.model.language_model.layers:
                layer.self_attn.q_norm.weight.mul_(f)
            caps.append(layer_outputs(model.to(dt), S))
        a, b = caps
        L = sum(1 for k in a if k.startswith("layer_"))
        cols = " ".join(f"layer_{i} {rel(a[f'layer_{i}'], b[f'layer_{i}']):.1e}"
                        for i in sorted({0, L // 4, L // 2, L - 1}))
        print(f"q_norm x {f:g}: HF32 vs HF64 {cols} logits {rel(a['logits'], b['logits']):.1e}",
              flush=True)


def main():
    torch.set_grad_enabled(False)
    a = sys.argv[1:]
    if len(a) >= 5 and a[0] == "variants":
        cmd_variants(a[1], a[2], int(a[3]), a[4:])
    elif len(a) == 4 and a[0] == "pure64":
        cmd_pure64(a[1], a[2], a[3])
    elif len(a) >= 4 and a[0] == "damp":
        cmd_damp(a[1], int(a[2]), [float(x) for x in a[3:]])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
