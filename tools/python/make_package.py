#!/usr/bin/env python3
"""Builds a random-weight Gemma-4 package through transformers + the mobius exporter (runs on
the GPU machine; the presets below).

    python3 tools/python/make_package.py OUT [--preset e2b|gpu-tiny] [--seed 0] [--device cuda]
                                             [--layers N]

Presets:
  e2b       the full-size E2B (below): speed, memory and numerics at the real shapes.
  gpu-tiny  a few-MB model whose every shape the CUDA kernels take (head_dim 256 / 512, GQA,
            sliding window 32, PLE 256, vision heads of 64, audio heads of 32), for GPU-vs-CPU
            and GPU-vs-HF tests of every op at tiny cost; made at test time, not committed.
  deep      hidden 2048, 12 layers, GQA 4:1 (deep_config): the fp32 tolerances at depth, on a
            CPU (about 1 GB; not committed).

  1. Gemma4ForConditionalGeneration (transformers 5.17) with the real E2B configuration
     (spec/gemma4-architecture.md section 1: text 1536 x 35 layers, 8 heads / 1 KV head,
     head_dim 256 / 512 on full layers, MLP 6144 (12288 on the 20 KV-shared layers), PLE 256,
     vocab 262144, window 512, soft-cap 30; vision 768 x 16; audio 1024 x 12), random init with
     torch.manual_seed(seed) on --device, weights in float16 -> OUT/hf (safetensors);
  2. the public mobius exporter (tools/python/export_package.py, `--dtype f16 --ep cuda
     --runtime ort-genai`) -> OUT/f16: decoder/ embedding/ vision_encoder/ audio_encoder/
     model.onnx + model.onnx.data, genai_config.json, processor JSONs;
  3. prints each step's time and the component file sizes next to the real package's
     (spec/onnx-package-format.md section 1: decoder 4,733,337,600 bytes f16).

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


def gpu_tiny_config():
    text = dict(
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


def deep_config():
    """Deeper and wider than the CPU fixtures, small enough for a CPU: hidden 2048, 12 layers
    (S S S S F S S S S F S F, the last 4 KV-shared), 8 query heads / 2 KV heads (GQA 4:1), head_dim
    256 / 512, MLP 4096 (8192 on shared layers), PLE 256, vocab 4096, 256 positions; the towers
    as gpu-tiny's. For checking that the fp32 tolerances, which are derived from HF's own fp32
    error (g4cu compare --tol-from), hold where the network amplifies rounding layer by layer
    (tests/fixtures/refdumps/README.md has the numbers); made on demand, not committed."""
    cfg = gpu_tiny_config()
    S, F = "sliding_attention", "full_attention"
    text = dict(
        vocab_size=4096, vocab_size_per_layer_input=4096, hidden_size=2048,
        intermediate_size=4096, num_hidden_layers=12, num_attention_heads=8,
        num_key_value_heads=2, head_dim=256, global_head_dim=512,
        layer_types=[S, S, S, S, F, S, S, S, S, F, S, F],  # HF wants the last layer full
        sliding_window=32, num_kv_shared_layers=4,
        use_double_wide_mlp=True, hidden_size_per_layer_input=256,
        final_logit_softcapping=30.0, max_position_embeddings=256, rms_norm_eps=1e-6,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0},
        },
        hidden_activation="gelu_pytorch_tanh", pad_token_id=0, bos_token_id=2, eos_token_id=1,
        tie_word_embeddings=True, attention_k_eq_v=False, enable_moe_block=False,
    )
    return Gemma4Config(text_config=text, vision_config=cfg.vision_config.to_dict(),
                        audio_config=cfg.audio_config.to_dict(), tie_word_embeddings=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--preset", choices=["e2b", "gpu-tiny", "deep"], default="e2b")
    ap.add_argument("--layers", type=int, default=35, help="e2b only: text layers")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    hf_dir, pkg_dir = os.path.join(args.out, "hf"), os.path.join(args.out, "f16")
    os.makedirs(args.out, exist_ok=True)

    t0 = time.time()
    torch.manual_seed(args.seed)
    cfg = {"e2b": lambda: e2b_config(args.layers), "gpu-tiny": gpu_tiny_config,
           "deep": deep_config}[args.preset]()
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
    for comp, real in (REAL_SIZES.items() if args.preset == "e2b" else []):
        path = os.path.join(pkg_dir, comp, "model.onnx.data")
        size = os.path.getsize(path) if os.path.exists(path) else -1
        verdict = "same as the real package" if size == real else f"differs by {size - real:+,}"
        print(f"  {comp:15s} {size:>15,} bytes (real {real:,}: {verdict})")
    json.dump({"preset": args.preset, "seed": args.seed, "layers": args.layers, "parameters": n_params,
               "seconds": {"init": t1 - t0, "save": t2 - t1, "export": t3 - t2}},
              open(os.path.join(args.out, "make_package.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
