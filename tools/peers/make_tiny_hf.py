#!/usr/bin/env python3
"""make_tiny_hf.py OUT: a tiny random-weight Gemma-4 HF checkpoint with a tokenizer, for trying
the llama.cpp path (tools/peers/llamacpp.sh: convert_hf_to_gguf.py, llama-quantize,
llama-bench) on a CPU before the full-size run on the GPU machine.

The text model is make_package.py's gpu-tiny (head_dim 256 / 512, sliding + full layers,
KV-shared layers, per-layer embeddings, soft-capping) narrowed to hidden 64, PLE 16, with E2B's
vocabulary of 262144. Like the random E2B (make_package.py) it has no tokenizer: llamacpp.sh
gives both the same one (the chat fixture's, padded to 262144 ids). About 80 MB, fp16, seed 0."""
import os
import sys

import torch
from transformers import Gemma4Config, Gemma4ForConditionalGeneration

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, os.path.join(root, "tools", "python"))
import make_package  # noqa: E402

VOCAB = 262144


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        raise SystemExit(__doc__)
    out = sys.argv[1]
    base = make_package.gpu_tiny_config()
    text = dict(make_package.gpu_tiny_text(), vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB,
                hidden_size=64, intermediate_size=128, hidden_size_per_layer_input=16)
    cfg = Gemma4Config(text_config=text, vision_config=base.vision_config.to_dict(),
                       audio_config=base.audio_config.to_dict(), tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Gemma4ForConditionalGeneration._from_config(cfg, dtype=torch.float32)
    model.to(torch.float16).save_pretrained(out, safe_serialization=True)
    print(f"make_tiny_hf: {out} ({sum(p.numel() for p in model.parameters()):,} parameters)")


if __name__ == "__main__":
    main()
