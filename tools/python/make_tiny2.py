#!/usr/bin/env python3
"""Creates tests/fixtures/tiny2: a second tiny random Gemma-4 whose every shape differs from
mobius-tiny-f16, to prove the engine derives everything from the package.

    python tools/python/make_tiny2.py [--out tests/fixtures/tiny2]

  1. builds Gemma4ForConditionalGeneration (transformers 5.17) from the config below with
     torch.manual_seed(SEED), rounds it to float16 and saves it to OUT/hf (config.json,
     generation_config.json, model.safetensors in F16: half the bytes of float32, and exactly
     the weights the fp16 package holds);
  2. exports OUT/hf with tools/python/export_package.py (the public mobius exporter,
     `--dtype f16 --ep cuda --runtime ort-genai`) into OUT/package.

Text decoder (what differs from mobius-tiny-f16, and why it is still small):
  hidden 96 (not a power of 4: the fp16 constants sqrt(96) and 96^-0.5 are inexact, so the
  package's fp16-rounded scales differ from float32 ones), 7 layers S S F S F S F, 3 query heads
  / 1 KV head, head_dim 48 sliding / 96 full, sliding window 5, 3 KV-shared layers (4 S reads
  layer 3; 5.. reads per type: full layers 4 and 6 read layer 2, which is not the last
  non-shared layer), MLP 32 (64 on KV-shared layers), PLE dim 32 (sqrt(32) inexact in fp16),
  vocab 256, softcap 30, RoPE theta 20000 on sliding layers and proportional RoPE with
  partial_rotary_factor 0.5 on full layers, 256 positions (the package's RoPE tables have
  max_position_embeddings rows, which dominate the size otherwise).
Vision: hidden 32, 1 layer, 2 heads of 16, MLP 64, 64 positions. Audio: hidden 32, 1 layer,
8 heads of 4, subsampling channels (128, 8), output dims 48 (the exporter fixes the audio heads
at 8 and the depthwise kernel at 5, and HF's input projection assumes channels[0] = 128 = mel
bins, so those keep E2B's values).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import torch
import transformers
from transformers import Gemma4Config, Gemma4ForConditionalGeneration

SEED = 4242


def tiny2_config():
    text = dict(
        vocab_size=256, vocab_size_per_layer_input=256, hidden_size=80, intermediate_size=32,
        num_hidden_layers=7, num_attention_heads=3, num_key_value_heads=1, head_dim=48,
        global_head_dim=96,
        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention", "full_attention", "sliding_attention",
                     "full_attention"],
        sliding_window=5, num_kv_shared_layers=3, use_double_wide_mlp=True,
        hidden_size_per_layer_input=32, final_logit_softcapping=30.0,
        max_position_embeddings=128, rms_norm_eps=1e-6,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                               "rope_theta": 1000000.0},
        },
        pad_token_id=0, bos_token_id=2, eos_token_id=1, tie_word_embeddings=True,
        attention_k_eq_v=False, enable_moe_block=False,
    )
    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, head_dim=16, patch_size=16, pooling_kernel_size=3,
        position_embedding_size=64, use_clipped_linears=True, standardize=False,
        rope_parameters={"rope_type": "axial", "rope_theta": 100.0},
    )
    audio = dict(
        # mobius 0.1.0 fixes 8 heads, kernel 5 and left context 13 (E2B's values) for audio;
        # HF sizes input_proj_linear as (channels[0] // 4) * channels[1], which matches the
        # 128 mel bins only when channels[0] == 128
        hidden_size=32, num_hidden_layers=1, num_attention_heads=8,
        subsampling_conv_channels=[128, 8], conv_kernel_size=5, output_proj_dims=48,
        use_clipped_linears=True,
    )
    return Gemma4Config(text_config=text, vision_config=vision, audio_config=audio,
                        tie_word_embeddings=True)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "fixtures", "tiny2"))
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    hf_dir, pkg_dir = os.path.join(out, "hf"), os.path.join(out, "package")
    for d in (hf_dir, pkg_dir):
        shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(SEED)
    cfg = tiny2_config()
    model = Gemma4ForConditionalGeneration(cfg).eval()
    model = model.to(torch.float16)
    model.save_pretrained(hf_dir)
    subprocess.run([sys.executable, os.path.join(here, "export_package.py"), hf_dir, pkg_dir],
                   check=True)
    n = sum(p.numel() for p in model.parameters())
    with open(os.path.join(hf_dir, "config.json")) as f:
        saved = json.load(f)["text_config"]
    print(f"tiny2: {n} parameters; text layers {saved['layer_types']}; "
          f"transformers {transformers.__version__}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
