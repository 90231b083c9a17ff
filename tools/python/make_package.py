#!/usr/bin/env python3
"""Builds a random-weight Gemma-4 package through transformers + the mobius exporter (runs on
the GPU machine; the presets below).

    python3 tools/python/make_package.py OUT [--preset e2b|gpu-tiny|gpu-eval|deep|mm-decoder|
                                             alt|alt-tiny] [--seed 0] [--device cuda]
                                             [--layers N] [--hidden N] [--like PKG]

Presets:
  e2b       the full-size E2B (below): speed, memory and numerics at the real shapes.
  gpu-tiny  a few-MB model whose every shape the CUDA kernels take (head_dim 256 / 512, GQA,
            sliding window 32, PLE 256, vision heads of 64, audio heads of 32), for GPU-vs-CPU
            and GPU-vs-HF tests of every op at tiny cost; made at test time, not committed.
  gpu-eval  gpu-tiny's shapes, with the real E2B's vision position table (10240 per axis, so
            any image the image processor lays out fits: the smoke set's 2:1 page is a 69-patch-wide
            grid, past gpu-tiny's 64), for running `g4cu eval --backend cuda` on real media at tiny
            cost. Needs --like (the vocabulary and ids the eval tokenizer was made for).
  deep      hidden 2048, 12 layers, GQA 4:1 (deep_config): the fp32 tolerances at depth, on a
            CPU (about 1 GB; not committed).
  mm-decoder  the multimodal proxy's text decoder (train_mm_proxy.py --preset proxy: 768 x 15
            layers, 4 heads / 1 KV head, head_dim 256 / 512, MLP 3072, PLE 256, window 256, the
            last 6 layers KV-shared, vocab 4096) with gpu-tiny's towers, random init: the CPU-vs-HF
            drift at the proxy's decoder shapes (issue 35; about 330 MB, not committed).
  alt       another shape than E2B (alt_config): GQA 8:2, a full layer every 3rd, the last third
            KV-shared, one MLP width, PLE 512; hidden 2048 x 24 layers, head_dim 256 / 512, for
            the GPU (tools/gpu/run.sh stage alt; about 4.8 GB f16, not committed).
  alt-tiny  the same pattern at tiny size (hidden 48, 9 layers, head_dim 16 / 40): committed as
            tests/fixtures/alt-tiny (its README has the command). --hidden N changes the hidden
            size of either.

  1. Gemma4ForConditionalGeneration (transformers 5.17) with the real E2B configuration
     (spec/gemma4-architecture.md section 1: text 1536 x 35 layers, 8 heads / 1 KV head,
     head_dim 256 / 512 on full layers, MLP 6144 (12288 on the 20 KV-shared layers), PLE 256,
     vocab 262144, window 512, soft-cap 30; vision 768 x 16; audio 1024 x 12), random init with
     torch.manual_seed(seed) on --device, weights in float16 -> OUT/hf (safetensors);
  2. the public mobius exporter (tools/python/export_package.py, `--dtype f16 --ep cuda
     --runtime ort-genai`) -> OUT/f16: decoder/ embedding/ vision_encoder/ audio_encoder/
     model.onnx + model.onnx.data, genai_config.json (model.type "gemma4", not mobius's
     "gemma4_text": onnxruntime-genai 0.18 refuses "gemma4_text" for a package with an embedding
     component; export_package.py rewrites it; g4cu reads both), processor JSONs;
  3. prints each step's time and the component file sizes next to the real package's
     (spec/onnx-package-format.md section 1: decoder 4,733,337,600 bytes f16).

--like PKG takes the vocabulary size, the context length and the special and media-placeholder
ids (bos, eos, pad, image, audio, boa) from PKG/genai_config.json, so that a tokenizer made for
PKG (tests/fixtures/chat/chat_bpe.json for the tiny fixtures) fits the new package too; after
the export it checks that the new genai_config.json has those values and that the new processor
JSONs (image_processor.json, audio_feature_extraction.json) equal PKG's, and stops otherwise.

--layers N shrinks the text decoder (N layers, the last 4/7 of them KV-shared) for trying the
pipeline on a small machine; the numbers then do not match the real package.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
from transformers import Gemma4Config, Gemma4ForConditionalGeneration

REAL_SIZES = {  # spec/onnx-package-format.md section 1 (f16 package)
    "decoder": 4_733_337_600,
    "embedding": 5_530_517_504,
    "vision_encoder": 358_088_704,
    "audio_encoder": 614_727_680,
}


def e2b_config(layers=35):
    pattern = (["sliding_attention"] * 4 + ["full_attention"]) * 7
    # E2B: the last 20 of 35 layers reuse K/V; smaller trial models keep >= 5 own-KV layers so a
    # full-attention layer (every 5th) owns a cache for the shared full layers to read
    shared = layers - max(5, round(layers * 15 / 35))
    text = dict(
        vocab_size=262144, vocab_size_per_layer_input=262144, hidden_size=1536,
        intermediate_size=6144, num_hidden_layers=layers, num_attention_heads=8,
        num_key_value_heads=1, head_dim=256, global_head_dim=512,
        layer_types=(pattern * 2)[:layers], sliding_window=512, num_kv_shared_layers=shared,
        use_double_wide_mlp=True, hidden_size_per_layer_input=256,
        final_logit_softcapping=30.0, max_position_embeddings=131072, rms_norm_eps=1e-6,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0},
        },
        hidden_activation="gelu_pytorch_tanh", pad_token_id=0, bos_token_id=2, eos_token_id=1,
        tie_word_embeddings=True, attention_k_eq_v=False, enable_moe_block=False,
        attention_bias=False, use_bidirectional_attention=None,
    )
    vision = dict(
        hidden_size=768, intermediate_size=3072, num_hidden_layers=16, num_attention_heads=12,
        num_key_value_heads=12, head_dim=64, patch_size=16, pooling_kernel_size=3,
        position_embedding_size=10240, use_clipped_linears=True, standardize=False,
        default_output_length=280, rope_parameters={"rope_type": "axial", "rope_theta": 100.0},
        hidden_activation="gelu_pytorch_tanh",
    )
    audio = dict(
        hidden_size=1024, num_hidden_layers=12, num_attention_heads=8,
        subsampling_conv_channels=[128, 32], conv_kernel_size=5, attention_chunk_size=12,
        attention_context_left=13, attention_context_right=0, attention_logit_cap=50.0,
        residual_weight=0.5, output_proj_dims=1536, use_clipped_linears=True,
        rms_norm_eps=1e-6, hidden_act="silu",
    )
    return Gemma4Config(text_config=text, vision_config=vision, audio_config=audio,
                        tie_word_embeddings=True, image_token_id=258880, audio_token_id=258881,
                        boi_token_id=255999, boa_token_id=256000, eoi_token_id=258882,
                        eoa_token_index=258883, video_token_id=258884, eos_token_id=[1, 106])


def gpu_tiny_text():
    return dict(
        vocab_size=512, vocab_size_per_layer_input=512, hidden_size=256, intermediate_size=256,
        num_hidden_layers=5, num_attention_heads=2, num_key_value_heads=1, head_dim=256,
        global_head_dim=512,
        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention", "full_attention"],
        sliding_window=32, num_kv_shared_layers=2, use_double_wide_mlp=True,
        hidden_size_per_layer_input=256, final_logit_softcapping=30.0,
        max_position_embeddings=256, rms_norm_eps=1e-6,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0},
        },
        hidden_activation="gelu_pytorch_tanh", pad_token_id=0, bos_token_id=2, eos_token_id=1,
        tie_word_embeddings=True, attention_k_eq_v=False, enable_moe_block=False,
    )


def gpu_tiny_config():
    text = gpu_tiny_text()
    vision = dict(
        hidden_size=128, intermediate_size=256, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, head_dim=64, patch_size=16, pooling_kernel_size=3,
        position_embedding_size=64, use_clipped_linears=True, standardize=False,
        rope_parameters={"rope_type": "axial", "rope_theta": 100.0},
    )
    audio = dict(
        hidden_size=256, num_hidden_layers=1, num_attention_heads=8,
        subsampling_conv_channels=[128, 32], conv_kernel_size=5, output_proj_dims=256,
        use_clipped_linears=True,
    )
    return Gemma4Config(text_config=text, vision_config=vision, audio_config=audio,
                        tie_word_embeddings=True)


def gpu_eval_config():
    cfg = gpu_tiny_config()
    vision = dict(cfg.vision_config.to_dict(), position_embedding_size=10240)
    return Gemma4Config(text_config=cfg.text_config.to_dict(), vision_config=vision,
                        audio_config=cfg.audio_config.to_dict(), tie_word_embeddings=True)


# --like: genai_config.json "model" keys -> where they go in the HF config (text_config or the
# top level); the exporter writes them back from there.
LIKE_KEYS = {
    "vocab_size": ("text", ["vocab_size", "vocab_size_per_layer_input"]),
    "context_length": ("text", ["max_position_embeddings"]),
    "bos_token_id": ("text", ["bos_token_id"]),
    "eos_token_id": ("text", ["eos_token_id"]),
    "pad_token_id": ("text", ["pad_token_id"]),
    "image_token_id": ("top", ["image_token_id"]),
    "audio_token_id": ("top", ["audio_token_id"]),
    "boa_token_id": ("top", ["boa_token_id"]),
}
LIKE_FILES = ["image_processor.json", "audio_feature_extraction.json"]


def like_values(pkg):
    path = os.path.join(pkg, "genai_config.json")
    try:
        with open(path) as f:
            model = json.load(f)["model"]
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"make_package: --like {path}: {e}")
    vals = {k: model[k] for k in LIKE_KEYS if k in model}
    if "vocab_size" not in vals:
        raise SystemExit(f"make_package: --like {path}: no model.vocab_size")
    return vals


def apply_like(cfg, vals):
    for key, v in vals.items():
        where, names = LIKE_KEYS[key]
        for n in names:
            setattr(cfg.text_config if where == "text" else cfg, n, v)
    return cfg


def check_like(pkg_dir, like_pkg, vals):
    """The exported package has --like's values and processor files (else a tokenizer made for
    that package would not fit this one)."""
    with open(os.path.join(pkg_dir, "genai_config.json")) as f:
        model = json.load(f)["model"]
    for k, v in vals.items():
        if model.get(k) != v:
            raise SystemExit(f"make_package: {pkg_dir}/genai_config.json: model.{k} is "
                             f"{model.get(k)!r}, expected {v!r} (as in {like_pkg})")
    for name in LIKE_FILES:
        mine, theirs = os.path.join(pkg_dir, name), os.path.join(like_pkg, name)
        if not os.path.exists(theirs):
            continue
        with open(theirs) as f:
            want = json.load(f)
        got = None
        if os.path.exists(mine):
            with open(mine) as f:
                got = json.load(f)
        if got != want:
            raise SystemExit(f"make_package: {mine} differs from {theirs} (the image or audio "
                             f"front end of the new package would not match the tokenizer's)")


def deep_config():
    """Deeper and wider than the CPU fixtures, small enough for a CPU: hidden 2048, 12 layers
    (S S S S F S S S S F S F, the last 4 KV-shared), 8 query heads / 2 KV heads (GQA 4:1), head_dim
    256 / 512, MLP 4096 (8192 on shared layers), PLE 256, vocab 4096, 256 positions; the towers
    as gpu-tiny's. For checking that the fp32 tolerances, which are derived from HF's own fp32
    error (g4cu compare --tol-from), hold where the network amplifies rounding layer by layer
    (tests/fixtures/refdumps/README.md has the numbers); made on demand, not committed."""
    cfg = gpu_tiny_config()
    S, F = "sliding_attention", "full_attention"
    text = dict(gpu_tiny_text(),
                vocab_size=4096, vocab_size_per_layer_input=4096, hidden_size=2048,
                intermediate_size=4096, num_hidden_layers=12, num_attention_heads=8,
                num_key_value_heads=2,
                layer_types=[S, S, S, S, F, S, S, S, S, F, S, F],  # HF wants the last layer full
                num_kv_shared_layers=4)
    return Gemma4Config(text_config=text, vision_config=cfg.vision_config.to_dict(),
                        audio_config=cfg.audio_config.to_dict(), tie_word_embeddings=True)


def mm_decoder_config():
    """train_mm_proxy.py's text decoder (its model_config, preset proxy) with gpu-tiny's towers."""
    from train_proxy import PRESETS, ROPE

    cfg = gpu_tiny_config()
    t = PRESETS["proxy"]
    L, V = t["layers"], 4096  # train_mm_proxy.py PRESETS["proxy"]["vocab"]
    text = dict(gpu_tiny_text(),
                vocab_size=V, vocab_size_per_layer_input=V, hidden_size=t["hidden"],
                intermediate_size=t["mlp"], num_hidden_layers=L, num_attention_heads=t["heads"],
                num_key_value_heads=t["kv"], head_dim=t["head_dim"], global_head_dim=t["global_hd"],
                layer_types=((["sliding_attention"] * 4 + ["full_attention"]) * L)[:L],
                sliding_window=t["window"], num_kv_shared_layers=t["shared"],
                hidden_size_per_layer_input=t["ple"], max_position_embeddings=4096,
                rope_parameters=ROPE)
    return Gemma4Config(text_config=text, vision_config=cfg.vision_config.to_dict(),
                        audio_config=cfg.audio_config.to_dict(), tie_word_embeddings=True)


def alt_config(tiny, hidden=None):
    """A Gemma-4 of another shape than E2B and the other fixtures (issue 30: sizes come from the
    package, never fitted to E2B): GQA 8 query heads : 2 KV heads (E2B 8:1), a full-attention layer
    every 3rd layer (E2B every 5th), the last third of the layers KV-shared, one MLP width on every
    layer (use_double_wide_mlp off: E2B doubles it on the KV-shared layers; transformers 5.17's
    Gemma4TextMLP takes one intermediate_size, so that is all the per-layer freedom the config has).
      alt-tiny  hidden 32, 9 layers S S F x 3 (6 <- 4, 7 <- 4, 8 <- 5 share K/V), head_dim 16 /
                48 on full layers (3x; onnxruntime's attention takes multiples of 16 only;
                proportional RoPE 0.25: 6 rotating pairs of 24), window 6, MLP 40, PLE 24, vocab
                256, 48 positions; tiny2's towers. Committed as tests/fixtures/alt-tiny (CPU:
                head_dim 16 / 48 is not a CUDA kernel shape).
      alt       hidden 2048, 24 layers S S F x 8 (the last 8 KV-shared), head_dim 256 / 512 (the
                CUDA attention kernels' head widths), window 1024, MLP 8192, PLE 512 (E2B 256),
                vocab 32768, 32768 positions; gpu-tiny's towers. About 2.1e9 parameters (4.2 GB
                in f16): for the GPU (tools/gpu/run.sh stage alt), not committed.
    hidden overrides the hidden size (the head widths do not depend on it)."""
    from make_tiny2 import tiny2_config

    S, F = "sliding_attention", "full_attention"

    def pattern(layers, vocab, **sizes):
        return dict(num_hidden_layers=layers, layer_types=[S, S, F] * (layers // 3),
                    num_kv_shared_layers=layers // 3, num_attention_heads=8,
                    num_key_value_heads=2, use_double_wide_mlp=False, vocab_size=vocab,
                    vocab_size_per_layer_input=vocab, **sizes)

    if tiny:
        towers = tiny2_config()
        text = dict(towers.text_config.to_dict(),
                    **pattern(9, 256, hidden_size=32, intermediate_size=40, head_dim=16,
                              global_head_dim=48, sliding_window=6,
                              hidden_size_per_layer_input=24, max_position_embeddings=48))
        text["rope_parameters"] = {
            S: {"rope_type": "default", "rope_theta": 10000.0},
            F: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6},
        }
    else:
        towers = gpu_tiny_config()
        text = dict(gpu_tiny_text(),
                    **pattern(24, 32768, hidden_size=2048, intermediate_size=8192, head_dim=256,
                              global_head_dim=512, sliding_window=1024,
                              hidden_size_per_layer_input=512, max_position_embeddings=32768))
    # (a text_config dict from to_dict() carries per_layer_config keyed by the old layers)
    text.pop("per_layer_config", None)
    if hidden:
        text["hidden_size"] = hidden
    return Gemma4Config(text_config=text, vision_config=towers.vision_config.to_dict(),
                        audio_config=towers.audio_config.to_dict(), tie_word_embeddings=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--preset", choices=["e2b", "gpu-tiny", "gpu-eval", "deep", "mm-decoder",
                                         "alt", "alt-tiny"], default="e2b")
    ap.add_argument("--layers", type=int, default=35, help="e2b only: text layers")
    ap.add_argument("--hidden", type=int, help="alt / alt-tiny only: the text hidden size")
    ap.add_argument("--like", metavar="PKG",
                    help="vocabulary, context length and token ids from PKG/genai_config.json")
    args = ap.parse_args()
    if args.preset == "gpu-eval" and not args.like:
        ap.error("--preset gpu-eval needs --like PKG (the package the eval tokenizer fits)")
    if args.hidden and not args.preset.startswith("alt"):
        ap.error("--hidden is for --preset alt / alt-tiny")
    like = like_values(args.like) if args.like else None
    here = os.path.dirname(os.path.abspath(__file__))
    hf_dir, pkg_dir = os.path.join(args.out, "hf"), os.path.join(args.out, "f16")
    os.makedirs(args.out, exist_ok=True)

    t0 = time.time()
    torch.manual_seed(args.seed)
    cfg = {"e2b": lambda: e2b_config(args.layers), "gpu-tiny": gpu_tiny_config,
           "gpu-eval": gpu_eval_config, "deep": deep_config,
           "mm-decoder": mm_decoder_config, "alt": lambda: alt_config(False, args.hidden),
           "alt-tiny": lambda: alt_config(True, args.hidden)}[args.preset]()
    if like:
        cfg = apply_like(cfg, like)
    # fp16 random init is fast on a GPU; on a CPU init in float32 (vectorized) and cast
    init_dtype = torch.float16 if args.device.startswith("cuda") else torch.float32
    with torch.device(args.device):
        model = Gemma4ForConditionalGeneration._from_config(cfg, torch_dtype=init_dtype)
    model = model.to(torch.float16)
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    t1 = time.time()
    print(f"make_package: random {n_params:,} parameters on {args.device} in {t1 - t0:.1f} s",
          flush=True)
    model.save_pretrained(hf_dir, safe_serialization=True, max_shard_size="50GB")
    del model
    t2 = time.time()
    print(f"make_package: saved {hf_dir} in {t2 - t1:.1f} s", flush=True)
    subprocess.run([sys.executable, os.path.join(here, "export_package.py"), hf_dir, pkg_dir],
                   check=True)
    t3 = time.time()
    print(f"make_package: exported {pkg_dir} in {t3 - t2:.1f} s", flush=True)
    if like:
        check_like(pkg_dir, args.like, like)
        print(f"make_package: vocabulary, ids and processor files as in {args.like}", flush=True)
    for comp, real in (REAL_SIZES.items() if args.preset == "e2b" else []):
        path = os.path.join(pkg_dir, comp, "model.onnx.data")
        size = os.path.getsize(path) if os.path.exists(path) else -1
        verdict = "same as the real package" if size == real else f"differs by {size - real:+,}"
        print(f"  {comp:15s} {size:>15,} bytes (real {real:,}: {verdict})")
    json.dump({"preset": args.preset, "seed": args.seed, "layers": args.layers, "like": args.like,
               "hidden": args.hidden,
               "parameters": n_params,
               "seconds": {"init": t1 - t0, "save": t2 - t1, "export": t3 - t2}},
              open(os.path.join(args.out, "make_package.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
