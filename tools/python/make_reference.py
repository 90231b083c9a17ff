#!/usr/bin/env python3
"""HF transformers reference dumps of the Gemma-4 text decoder, one .npz per case, for
`g4cu compare` and the CPU-vs-HF tests; with --mm, a multimodal case (image + audio: the
processors, every vision / audio tower layer, the soft tokens and the decoder), written by
mm_reference.py beside this file (its docstring lists the members).

    python tools/python/make_reference.py --hf tests/fixtures/mobius-tiny-f16/hf \
        --package tests/fixtures/mobius-tiny-f16/package \
        --out tests/fixtures/refdumps/mobius-tiny-f16 [--lengths 1,7,40] [--seed 1234]
    python tools/python/make_reference.py --make-media tests/fixtures/refdumps/mm/media
    python tools/python/make_reference.py --hf ... --package ... --mm OUT.npz --image F \
        --audio F [--image-tokens 280] [--clip] [--seed 1234]

(the exact commands for the committed dumps are in tests/fixtures/refdumps/README.md)

What it does:
  * loads Gemma4ForConditionalGeneration from --hf in float32 on the CPU, eager attention;
  * rounds every floating tensor of the state dict (parameters and persistent buffers such as
    layer_scalar) to float16 and back, so HF computes with exactly the package's fp16 weights;
  * sets the four scale constants to the values the package's fp16 embedding graph multiplies
    by: fp16(sqrt(hidden)) (embed_tokens), fp16(sqrt(ple_dim)) (embed_tokens_per_layer),
    fp16(hidden^-0.5) (per_layer_model_projection) and fp16(2^-0.5) (the PLE combine). HF in
    float32 would use the exact float32 values; the package cannot. With --package the script
    reads those constants from embedding/model.onnx and stops if they differ from the fp16
    roundings, and it checks the package's decoder RoPE cos/sin tables against HF's RoPE;
  * runs each case (text-only input ids, batch 1, no cache, all positions) in float32 with
    output_hidden_states=True plus forward hooks, and writes <out>/len<S>.npz
    (np.savez_compressed) and <out>/meta.json (constants, config summary, versions).

Members (float32 unless noted, float64 for --dtype float64; S = sequence length, H = hidden, L = layers, P = PLE dim,
V = vocab; heads/head_dim are the layer's own):
  input_ids         [S] int64      the case's ids (uniform in [0, V), torch.Generator(seed + S))
  embeds            [S, H]         hidden state entering layer 0 = embed_tokens(ids) * embed
                                   scale: input of language_model.layers[0] (forward pre-hook);
                                   asserted equal to language_model.embed_tokens' output and to
                                   output_hidden_states[0]
  per_layer_inputs  [S, L, P]      (per_layer_projection_norm(per_layer_model_projection(embeds)
                                   * hidden^-0.5) + embed_tokens_per_layer(ids) * sqrt(P))
                                   * 2^-0.5: argument `per_layer_input` of every
                                   language_model.layers[i] (forward pre-hooks), stacked on dim 1
  layer_<i>         [S, H]         output of language_model.layers[i] (forward hook), after
                                   the PLE block and layer_scalar; asserted equal to
                                   output_hidden_states[i + 1] for i < L - 1 (the last entry,
                                   output_hidden_states[L], is final_norm in transformers 5.17)
  q_<i>             [S, heads, head_dim]   query after q_proj, q_norm and RoPE, for every layer
  k_<i>, v_<i>      [S, kv_heads, head_dim] key after k_proj, k_norm, RoPE; value after v_proj,
                                   v_norm (weightless RMSNorm, no RoPE); only for layers that
                                   compute their own K/V (not KV-shared layers, which reuse
                                   k_/v_ of the last earlier non-shared layer of their type)
                    q/k/v are the query/key/value arguments of eager_attention_forward as
                    Gemma4TextAttention.forward calls it (transformers 5.17: after the norms,
                    RoPE, and for shared layers the shared_kv_states lookup), [1, heads, S, d]
                    transposed to [S, heads, d]
  final_norm        [S, H]         output of language_model.norm (forward hook); asserted equal
                                   to output_hidden_states[L]
  logits            [S, V]         model output logits: lm_head(final_norm) then
                                   softcap * tanh(x / softcap)
  hf_dtype          [n] uint8      the dtype HF ran in, as ASCII ("float64", "float32",
                                   "float16", "bfloat16"): g4cu compare --tol-from derives a
                                   tolerance from the dump's error and needs to know what it is
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
from transformers import Gemma4ForConditionalGeneration
from transformers.models.gemma4 import modeling_gemma4

try:
    import mm_reference
except ImportError as e:  # the text cases need only torch, transformers, numpy (onnx: --package)
    mm_reference = None
    mm_import_error = e


def f16(x):
    return float(np.float16(x))


def package_constants(pkg):
    """The scalar multipliers of the package's embedding graph, keyed by what they scale."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(os.path.join(pkg, "embedding", "model.onnx"), load_external_data=False)
    g = m.graph
    scalars = {t.name: numpy_helper.to_array(t) for t in g.initializer if np.prod(t.dims) == 1}
    producer = {o: n for n in g.node for o in n.output}
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and np.prod(a.t.dims) == 1:
                    scalars[n.output[0]] = numpy_helper.to_array(a.t)

    def origin(v):  # the first non-shape op producing v
        n = producer.get(v)
        while n is not None and n.op_type in ("Reshape", "Cast", "Identity", "Unsqueeze"):
            n = producer.get(n.input[0])
        return n

    found = {}
    for n in g.node:
        if n.op_type != "Mul" or len(n.input) != 2:
            continue
        for k in (0, 1):
            c, other = n.input[k], n.input[1 - k]
            if c not in scalars:
                continue
            src = origin(other)
            if src is None:
                continue
            val = float(np.asarray(scalars[c]).reshape(-1)[0])
            if src.op_type == "Gather" and src.input[0].endswith("embed_tokens.weight"):
                found["embed_scale"] = val
            elif src.op_type == "Gather" and src.input[0].endswith("embed_tokens_per_layer.weight"):
                found["ple_token_scale"] = val
            elif src.op_type == "MatMul" and "per_layer_model_projection" in src.input[1]:
                found["ple_proj_scale"] = val
            elif src.op_type == "Add":
                found["ple_combine_scale"] = val
    return found


def check_rope_tables(pkg, model, n_pos):
    """The package's fp16 cos/sin caches must equal HF's RoPE (fp32, rounded to fp16) on the
    positions we dump; otherwise the package and HF are different models."""
    import onnx
    from onnx import numpy_helper

    path = os.path.join(pkg, "decoder", "model.onnx")
    m = onnx.load(path, load_external_data=False)
    onnx.external_data_helper.load_external_data_for_model(m, os.path.dirname(path))
    tabs = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer if "rotary_emb" in t.name}
    rot = model.model.language_model.rotary_emb
    pos = torch.arange(n_pos)[None]
    x = torch.zeros(1, dtype=torch.float32)
    for layer_type, tag in (("sliding_attention", "local"), ("full_attention", "global")):
        cos, sin = rot(x, pos, layer_type)  # [1, n_pos, head_dim] = cat(freqs, freqs)
        half = cos.shape[-1] // 2
        for name, ref in (("cos", cos), ("sin", sin)):
            key = [k for k in tabs if f"rotary_emb_{tag}.{name}_cache" in k]
            assert len(key) == 1, f"package has no rotary_emb_{tag}.{name}_cache"
            t = tabs[key[0]].astype(np.float32)[:n_pos]
            want = ref[0, :, :half].numpy()
            err = np.abs(t - want).max()
            # fp16 rounding of values in [-1, 1]: at most 2^-12
            assert t.shape == want.shape and err <= 2.0**-11, \
                f"{key[0]}: differs from HF's {layer_type} RoPE by {err} (shape {t.shape} vs {want.shape})"


def load_model(args):
    """The HF model in float32 on the CPU with the package's fp16 weights and constants (see the
    module docstring); returns (model, consts, n_rounded)."""
    model = Gemma4ForConditionalGeneration.from_pretrained(
        args.hf, dtype=torch.float32, attn_implementation="eager").eval()
    tc = model.config.get_text_config()
    lm = model.model.language_model
    H, P = tc.hidden_size, tc.hidden_size_per_layer_input

    # fp16 weights: every floating tensor of the state dict, in place (tied weights share storage)
    n_rounded = 0
    for name, t in model.state_dict().items():
        if t.is_floating_point():
            t.copy_(t.to(torch.float16).to(torch.float32))
            n_rounded += 1

    consts = {
        "embed_scale": f16(math.sqrt(H)),
        "ple_token_scale": f16(math.sqrt(P)),
        "ple_proj_scale": f16(H ** -0.5),
        "ple_combine_scale": f16(2.0 ** -0.5),
    }
    if args.package:
        pc = package_constants(args.package)
        for k, v in consts.items():
            if k not in pc:
                sys.exit(f"{args.package}: embedding graph has no '{k}' multiplier")
            if pc[k] != v:
                sys.exit(f"{args.package}: embedding graph multiplies by {pc[k]!r} for {k}, "
                         f"expected fp16-rounded {v!r}")
    lm.embed_tokens.embed_scale.fill_(consts["embed_scale"])
    lm.embed_tokens_per_layer.embed_scale.fill_(consts["ple_token_scale"])
    lm.per_layer_model_projection_scale = consts["ple_proj_scale"]
    lm.per_layer_input_scale = consts["ple_combine_scale"]
    return model, consts, n_rounded


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf", help="HF checkpoint dir (Gemma4ForConditionalGeneration)")
    ap.add_argument("--out", help="text cases: output dir for len<S>.npz and meta.json")
    ap.add_argument("--package", help="the exported package, to check constants and RoPE tables "
                    "(and, for --mm, to read the processor configs)")
    ap.add_argument("--lengths", default="1,7,40", help="sequence lengths, one case each")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dtype", choices=["float64", "float32", "float16", "bfloat16"],
                    default="float32",
                    help="text cases: run HF in this dtype. The float32 dump is the reference for "
                    "fp16 engines; a float16 dump measures HF's own fp16 error against it (g4cu "
                    "compare --tol-from). The float64 dump (members kept in float64) is the "
                    "reference for fp32 engines, and the float32 dump measures HF's own fp32 "
                    "error against it. --mm: float32 or float64 (same roles for the CPU "
                    "backend's multimodal compare).")
    ap.add_argument("--device", default="cpu", help="text cases: cpu or cuda")
    ap.add_argument("--greedy", metavar="K:N",
                    help="text cases: also OUT/greedy.json, HF's greedy continuation (N new "
                    "tokens, argmax of a full no-cache forward per step) of the first K ids "
                    "of case len<K>'s input_ids, with the top-2 logit gap of every step")
    if mm_reference:
        mm_reference.add_args(ap)
    else:  # the multimodal flags exist, but say what they need
        for flag in ("--mm", "--make-media", "--image", "--audio", "--image-tokens"):
            ap.add_argument(flag, help=f"needs mm_reference.py's modules ({mm_import_error})")
        ap.add_argument("--clip", action="store_true", help="(see --mm)")
    args = ap.parse_args()
    if not mm_reference and (args.mm or args.make_media):
        ap.error(f"--mm / --make-media need mm_reference.py's modules: {mm_import_error}")
    torch.set_grad_enabled(False)
    torch.manual_seed(args.seed)
    if args.make_media:
        mm_reference.make_media(args.make_media)
    if not args.out and not args.mm:
        if not args.make_media:
            ap.error("nothing to do: give --out (text cases), --mm (multimodal case) or --make-media")
        return
    if not args.hf:
        ap.error("--hf is required for --out / --mm")
    if args.mm:
        if not args.package:
            ap.error("--mm needs --package (its image_processor.json / audio_feature_extraction.json)")
        if args.dtype not in ("float32", "float64") or args.device != "cpu":
            ap.error("--mm runs on the CPU in float32 or float64 (the reference for the CPU "
                     "backend, judged with --tol-from the float32 dump)")
        if args.clip and args.dtype != "float32":
            # the bounds come from a calibration run: a float64 run would calibrate other bounds
            # than the float32 dump beside it, i.e. another model
            ap.error("--clip: float32 only")
    model, consts, n_rounded = load_model(args)
    if args.dtype != "float32" or args.device != "cpu":
        # after the fp16 rounding and the constants, in the requested dtype/device
        model = model.to(dtype=getattr(torch, args.dtype), device=args.device)
    if args.out and args.greedy:
        greedy_case(args, model)
    if args.out:
        text_cases(args, model, consts, n_rounded)
    if args.mm:
        mm_reference.mm_case(args, model, consts, n_rounded)


def greedy_case(args, model):
    """OUT/greedy.json: {"prompt": ids, "tokens": HF's greedy new ids, "gaps": top-1 minus top-2
    logit of each step, "dtype"}: every step a whole no-cache forward over prompt + the tokens so
    far (no KV cache in the reference), for checking an engine's cached decode (`g4cu generate`)."""
    K, N = (int(x) for x in args.greedy.split(":"))
    V = model.config.get_text_config().vocab_size
    g = torch.Generator().manual_seed(args.seed + K)  # the ids of case len<K>
    ids = torch.randint(0, V, (1, K), generator=g, dtype=torch.int64)
    prompt, tokens, gaps = ids[0].tolist(), [], []
    for _ in range(N):
        logits = model(input_ids=ids.to(args.device), use_cache=False).logits[0, -1]
        top = torch.topk(logits.double().cpu(), 2)
        tokens.append(int(top.indices[0]))
        gaps.append(float(top.values[0] - top.values[1]))
        ids = torch.cat([ids, top.indices[:1].view(1, 1)], dim=1)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "greedy.json"), "w") as f:
        json.dump({"prompt": prompt, "tokens": tokens, "gaps": gaps, "dtype": args.dtype}, f)
        f.write("\n")
    print(f"greedy: {K} prompt ids + {N} new, smallest top-2 gap {min(gaps):.3g}")


def text_cases(args, model, consts, n_rounded):
    tc = model.config.get_text_config()
    lm = model.model.language_model
    H, L, P, V = tc.hidden_size, tc.num_hidden_layers, tc.hidden_size_per_layer_input, tc.vocab_size

    lengths = [int(s) for s in args.lengths.split(",")]
    if args.package and args.dtype == "float32":  # the fp32 run validates the package's tables
        check_rope_tables(args.package, model, max(lengths))

    # --- capture ---------------------------------------------------------------------------
    cap = {}

    # what the members are stored in: float32, or float64 for a float64 run (so the reference
    # keeps the digits an fp32 engine is judged by)
    keep = torch.float64 if args.dtype == "float64" else torch.float32
    keep_np = np.float64 if args.dtype == "float64" else np.float32

    def grab(name, t):
        assert name not in cap, f"{name} captured twice"
        cap[name] = t.detach().to(device="cpu", dtype=keep).clone()

    def pre_hook(i):
        def f(mod, a, kw):
            hs = a[0] if a else kw["hidden_states"]
            ple = a[1] if len(a) > 1 else kw["per_layer_input"]
            if i == 0:
                grab("embeds", hs[0])
            grab(f"ple_{i}", ple[0])
        return f

    handles = []
    for i, layer in enumerate(lm.layers):
        handles.append(layer.register_forward_pre_hook(pre_hook(i), with_kwargs=True))
        handles.append(layer.register_forward_hook(
            lambda mod, a, out, i=i: grab(f"layer_{i}", (out[0] if isinstance(out, tuple) else out)[0])))
    handles.append(lm.norm.register_forward_hook(lambda mod, a, out: grab("final_norm", out[0])))
    handles.append(lm.embed_tokens.register_forward_hook(lambda mod, a, out: grab("embed_tokens_out", out[0])))

    real_eager = modeling_gemma4.eager_attention_forward

    def eager_capture(module, query, key, value, attention_mask, **kw):
        i = module.layer_idx
        grab(f"q_{i}", query[0].transpose(0, 1))  # [heads, S, d] -> [S, heads, d]
        if not module.is_kv_shared_layer:
            grab(f"k_{i}", key[0].transpose(0, 1))
            grab(f"v_{i}", value[0].transpose(0, 1))
        return real_eager(module, query, key, value, attention_mask, **kw)

    # Gemma4TextAttention resolves the eager function from the module globals at call time
    modeling_gemma4.eager_attention_forward = eager_capture

    os.makedirs(args.out, exist_ok=True)
    cases = []
    for S in lengths:
        g = torch.Generator().manual_seed(args.seed + S)
        ids = torch.randint(0, V, (1, S), generator=g, dtype=torch.int64)
        cap.clear()
        out = model(input_ids=ids.to(args.device), output_hidden_states=True, use_cache=False)
        hs = [h.to(device="cpu", dtype=keep) for h in out.hidden_states]
        assert torch.equal(cap.pop("embed_tokens_out"), cap["embeds"]), "embeds != embed_tokens output"
        assert torch.equal(hs[0][0], cap["embeds"]), "embeds != hidden_states[0]"
        assert len(hs) == L + 1, f"{len(hs)} hidden states for {L} layers"
        for i in range(L - 1):
            assert torch.equal(hs[i + 1][0], cap[f"layer_{i}"]), f"layer_{i} != hidden_states[{i + 1}]"
        # transformers 5.17 records the final norm's output as the last hidden state
        assert torch.equal(hs[L][0], cap["final_norm"]), "final_norm != hidden_states[L]"
        d = {"input_ids": ids[0].numpy()}
        d["embeds"] = cap.pop("embeds").numpy()
        d["per_layer_inputs"] = torch.stack([cap.pop(f"ple_{i}") for i in range(L)], dim=1).numpy()
        for i in range(L):
            d[f"layer_{i}"] = cap.pop(f"layer_{i}").numpy()
        for i in range(L):
            for k in "qkv":
                if f"{k}_{i}" in cap:
                    d[f"{k}_{i}"] = cap.pop(f"{k}_{i}").numpy()
        d["final_norm"] = cap.pop("final_norm").numpy()
        d["logits"] = out.logits[0].to(device="cpu", dtype=keep).numpy()
        assert not cap, f"uncollected captures: {sorted(cap)}"
        for k, v in d.items():
            assert np.isfinite(v).all(), f"{k} has NaN/inf"
            if k != "input_ids":
                assert v.dtype == keep_np, k
        # the precision HF ran in, for g4cu compare --tol-from (ASCII bytes, uint8)
        d["hf_dtype"] = np.frombuffer(args.dtype.encode(), dtype=np.uint8).copy()
        # the final soft-cap bounds the logits
        cap_v = tc.final_logit_softcapping
        assert cap_v is None or np.abs(d["logits"]).max() < cap_v
        name = f"len{S}"
        np.savez_compressed(os.path.join(args.out, name + ".npz"), **d)
        cases.append({"case": name, "length": S, "dtype": args.dtype, "ids": d["input_ids"].tolist(),
                      "members": {k: list(v.shape) for k, v in d.items()}})
        print(f"{name}: {len(d)} members, argmax of last logits {int(d['logits'][-1].argmax())}")
    modeling_gemma4.eager_attention_forward = real_eager
    for h in handles:
        h.remove()

    meta = {
        "hf_dir": os.path.relpath(os.path.abspath(args.hf), os.path.abspath(args.out)),
        "package": os.path.relpath(os.path.abspath(args.package), os.path.abspath(args.out)) if args.package else None,
        "seed": args.seed,
        "constants": consts,
        "weights": f"{n_rounded} floating state-dict tensors rounded to float16 and back",
        "text_config": {"hidden": H, "layers": L, "ple_dim": P, "vocab": V,
                        "heads": tc.num_attention_heads, "kv_heads": tc.num_key_value_heads,
                        "layer_types": tc.layer_types, "sliding_window": tc.sliding_window,
                        "num_kv_shared_layers": tc.num_kv_shared_layers,
                        "head_dim": [lm.layers[i].self_attn.head_dim for i in range(L)],
                        "kv_shared": [bool(lm.layers[i].self_attn.is_kv_shared_layer) for i in range(L)],
                        "final_logit_softcapping": tc.final_logit_softcapping},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__},
        "cases": cases,
    }
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")



if __name__ == "__main__":
    main()
