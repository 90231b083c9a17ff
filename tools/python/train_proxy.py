#!/usr/bin/env python3
"""Trains a small Gemma-4 on real English text so that quantization fidelity can be measured on
weights that have learned something (issue 19), then exports it with the mobius exporter.

    python3 tools/python/train_proxy.py OUT [--corpus .carry/corpus] [--preset proxy|tiny]
                                            [--seed 0] [--minutes 8] [--epochs E] [--device D]
                                            [--steps N --batch B: only to try the pipeline]

The corpus is tools/python/prepare_corpus.py's (train.txt / test.txt: the Python 3.11
documentation, Debian package python3.11-doc, PSF license; split by document).

1. Tokenizer: HF `tokenizers` BPE with byte fallback trained on train.txt, saved as
   OUT/tokenizer.json with the pipeline of Gemma's tokenizer.json and Gemma's special ids
   (<pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4, then the chat / media tokens, then the 256
   <0xHH> byte pieces): the vocabulary builder and pipeline of make_tokenizer_fixture.py (which
   loader/tokenizer.c is tested against). Training splits words at "▁" and newline runs; the
   saved pipeline does not split, as Gemma's does not.
2. Model: transformers' own Gemma4ForConditionalGeneration (its Gemma-4 text model: per-layer
   embeddings, KV sharing, sliding + full attention layers, double-wide MLP on shared layers,
   logit soft-cap) with minimal vision / audio towers that no step trains (the exporter and our
   loader expect the whole package). Presets:
     proxy  ~200M parameters at shapes the CUDA kernels take: hidden 768, 15 layers (4 sliding +
            1 full, x3; the last 6 KV-shared), 4 query heads / 1 KV head, head_dim 256 (512 on
            full layers), MLP 3072, PLE 256, window 256, vocab 8192; seq 512, batch 32; GPU.
     tiny   the shapes of tests/fixtures/mobius-tiny-f16 (hidden 64, 10 layers, head_dim 32/64,
            PLE 16, window 16, vocab 1024); seq 128, batch 16; a few CPU minutes.
   Training: causal LM cross-entropy on random windows of the tokenized train split (the order
   drawn from --seed), AdamW, warm-up then cosine decay, bf16 autocast on CUDA (fp32 on CPU),
   torch.manual_seed(seed) and deterministic algorithms: the same seed, steps and device give
   the same weights. The step count is fixed by --epochs (passes over the train tokens); the
   --minutes budget only stops a run that would overrun it (then it says so, and the result
   depends on speed).
3. Saves OUT/hf (float16 safetensors + config + tokenizer.json), the held-out loss of the final
   model on the first windows of test.txt, and OUT/train.json (preset, seed, steps, losses,
   seconds); copies test.txt to OUT/test.txt;
4. exports OUT/hf with tools/python/export_package.py (mobius, --dtype f16) to OUT/f16 and
   copies tokenizer.json into it. Each step prints its time.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_fixture import GEMMA_ADDED, SPECIALS, build_vocab, gemma_tokenizer  # noqa: E402

ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                       "rope_theta": 1000000.0},
}

PRESETS = {
    "proxy": dict(vocab=8192, hidden=768, layers=15, heads=4, kv=1, head_dim=256, global_hd=512,
                  mlp=3072, ple=256, window=256, shared=6, seq=512, batch=32, lr=6e-4,
                  epochs=4.0, warmup=50),
    "tiny": dict(vocab=1024, hidden=64, layers=10, heads=2, kv=1, head_dim=32, global_hd=64,
                 mlp=128, ple=16, window=16, shared=4, seq=128, batch=16, lr=3e-3,
                 epochs=0.25, warmup=20),
}


def train_tokenizer(text, n_vocab, out_path, split_digits=False):
    """A Gemma-layout BPE tokenizer of n_vocab ids learnt from text (gemma_tokenizer's form),
    written to out_path. split_digits: the training splits every digit from its neighbours, so
    no merge joins a digit to anything and every number encodes one id a digit, as Gemma's own
    tokenizer does (its SentencePiece model splits digits); the written tokenizer needs no
    pre-tokenizer of its own for that (no merge can form a digit run), so g4cu and HF read it
    as any other."""
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    n_fixed = len(SPECIALS) + len(GEMMA_ADDED) + 1 + 256  # + the non-special [multimodal]
    tok = Tokenizer(BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "▁")
    words = pre_tokenizers.Split(Regex(r"▁?[^▁\s]+|▁+|\n+|\t+|\s"), behavior="isolated")
    tok.pre_tokenizer = (pre_tokenizers.Sequence([words, pre_tokenizers.Digits(True)])
                         if split_digits else words)
    trainer = BpeTrainer(vocab_size=n_vocab - n_fixed, min_frequency=2, show_progress=False,
                         limit_alphabet=200, special_tokens=[])
    tok.train_from_iterator(text.split("\n\n"), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    pieces = sorted(model["vocab"], key=lambda p: model["vocab"][p])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    if len(build_vocab(pieces)) > n_vocab:
        sys.exit(f"train_proxy: the tokenizer has {len(build_vocab(pieces))} ids > {n_vocab}")
    t = gemma_tokenizer(pieces, merges)
    t.save(out_path)
    return t


def encode(tok, text):
    """Ids of text as one sequence, without <bos>. Merges never span a newline run (training
    isolates them), so encoding the lines separately gives the ids of the whole text."""
    segs = [s for s in re.split(r"(\n+)", text) if s]
    ids = []
    for e in tok.encode_batch(segs, add_special_tokens=False):
        ids.extend(e.ids)
    return np.array(ids, dtype=np.int64)


def model_config(p):
    from transformers import Gemma4Config

    L = p["layers"]
    types = ((["sliding_attention"] * 4 + ["full_attention"]) * L)[:L]
    text = dict(
        vocab_size=p["vocab"], vocab_size_per_layer_input=p["vocab"], hidden_size=p["hidden"],
        intermediate_size=p["mlp"], num_hidden_layers=L, num_attention_heads=p["heads"],
        num_key_value_heads=p["kv"], head_dim=p["head_dim"], global_head_dim=p["global_hd"],
        layer_types=types, sliding_window=p["window"], num_kv_shared_layers=p["shared"],
        use_double_wide_mlp=True, hidden_size_per_layer_input=p["ple"],
        final_logit_softcapping=30.0, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_parameters=ROPE, hidden_activation="gelu_pytorch_tanh", pad_token_id=0,
        bos_token_id=2, eos_token_id=1, tie_word_embeddings=True, attention_k_eq_v=False,
        enable_moe_block=False, attention_bias=False, use_bidirectional_attention=None,
    )
    # The smallest towers the exporter and our loader take (no step trains them).
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=2, head_dim=32, patch_size=16,
                  pooling_kernel_size=3, position_embedding_size=64, use_clipped_linears=True,
                  standardize=False, rope_parameters={"rope_type": "axial", "rope_theta": 100.0})
    audio = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=8,
                 subsampling_conv_channels=[128, 32], conv_kernel_size=5,
                 output_proj_dims=p["hidden"], use_clipped_linears=True)
    # Media token ids beyond the text vocabulary: the model never sees them here.
    return Gemma4Config(text_config=text, vision_config=vision, audio_config=audio,
                        tie_word_embeddings=True, eos_token_id=[1])


def lr_at(step, steps, p):
    if step < p["warmup"]:
        return p["lr"] * (step + 1) / p["warmup"]
    t = (step - p["warmup"]) / max(1, steps - p["warmup"])
    return p["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--corpus", default=".carry/corpus")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="proxy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=8.0, help="training time budget")
    ap.add_argument("--epochs", type=float, help="passes over the train tokens (preset's)")
    ap.add_argument("--steps", type=int, help="override the step count (trying the pipeline)")
    ap.add_argument("--batch", type=int, help="override the batch (trying the pipeline)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's choice)")
    args = ap.parse_args()
    p = dict(PRESETS[args.preset])
    if args.epochs is not None:
        p["epochs"] = args.epochs
    if args.batch:
        p["batch"] = args.batch
    if args.threads:
        torch.set_num_threads(args.threads)
    here = os.path.dirname(os.path.abspath(__file__))
    hf_dir, pkg_dir = os.path.join(args.out, "hf"), os.path.join(args.out, "f16")
    os.makedirs(hf_dir, exist_ok=True)
    times = {}
    t0 = time.time()

    train_text = open(os.path.join(args.corpus, "train.txt"), encoding="utf-8").read()
    test_text = open(os.path.join(args.corpus, "test.txt"), encoding="utf-8").read()
    tok_path = os.path.join(hf_dir, "tokenizer.json")
    tok = train_tokenizer(train_text, p["vocab"], tok_path)
    train_ids, test_ids = encode(tok, train_text), encode(tok, test_text)
    times["tokenizer"] = time.time() - t0
    print(f"train_proxy: tokenizer {tok.get_vocab_size()} ids; train {len(train_ids):,} tokens, "
          f"test {len(test_ids):,} ({times['tokenizer']:.1f} s)", flush=True)

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    from transformers import Gemma4ForConditionalGeneration

    dev = torch.device(args.device)
    model = Gemma4ForConditionalGeneration._from_config(model_config(p), torch_dtype=torch.float32)
    model.to(dev)
    n_params = sum(x.numel() for x in model.parameters())
    n_text = sum(x.numel() for x in model.model.language_model.parameters())
    print(f"train_proxy: {n_params:,} parameters ({n_text:,} in the text model) on {dev}",
          flush=True)
    seq, batch = p["seq"], p["batch"]
    steps = args.steps or max(p["warmup"] + 1, int(p["epochs"] * len(train_ids) / (seq * batch)))
    decay = [x for n, x in model.named_parameters() if x.dim() >= 2]
    no_decay = [x for n, x in model.named_parameters() if x.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=p["lr"], betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(args.seed)
    amp = dev.type == "cuda"
    train_t = torch.from_numpy(train_ids)

    def loss_of(x):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(input_ids=x[:, :-1]).logits
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 x[:, 1:].reshape(-1))

    model.train()
    losses, t1, stopped = [], time.time(), None
    for step in range(steps):
        starts = rng.integers(0, len(train_ids) - seq - 1, size=batch)
        x = torch.stack([train_t[s:s + seq + 1] for s in starts]).to(dev)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, p)
        loss = loss_of(x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        el = time.time() - t1
        if step % 25 == 0 or step == steps - 1:
            print(f"train_proxy: step {step + 1}/{steps} loss {losses[-1]:.3f} "
                  f"lr {lr_at(step, steps, p):.2e} {el:.0f} s", flush=True)
        if el > args.minutes * 60 and step < steps - 1:
            stopped = step + 1
            print(f"train_proxy: --minutes {args.minutes} reached after {stopped}/{steps} steps: "
                  "stopping early (the weights now depend on the machine's speed)", flush=True)
            break
    times["train"] = time.time() - t1

    model.eval()
    with torch.no_grad():
        n = min(8, (len(test_ids) - 1) // (seq + 1))
        xs = torch.stack([torch.from_numpy(test_ids[i * (seq + 1):(i + 1) * (seq + 1)])
                          for i in range(n)]).to(dev)
        test_loss = float(loss_of(xs))
    print(f"train_proxy: held-out loss {test_loss:.3f} (ppl {math.exp(test_loss):.2f}) on "
          f"{n} windows of {seq}; last train loss {np.mean(losses[-20:]):.3f}", flush=True)

    t2 = time.time()
    model.to(torch.float16).save_pretrained(hf_dir, safe_serialization=True)
    shutil.copy(os.path.join(args.corpus, "test.txt"), os.path.join(args.out, "test.txt"))
    times["save"] = time.time() - t2
    t3 = time.time()
    subprocess.run([sys.executable, os.path.join(here, "export_package.py"), hf_dir, pkg_dir],
                   check=True)
    shutil.copy(tok_path, os.path.join(pkg_dir, "tokenizer.json"))
    times["export"] = time.time() - t3
    print(f"train_proxy: exported {pkg_dir} ({times['export']:.1f} s)", flush=True)
    json.dump({"preset": args.preset, "shapes": p, "seed": args.seed, "device": str(dev),
               "parameters": n_params, "text_parameters": n_text, "steps": steps,
               "stopped_at": stopped, "train_tokens": int(len(train_ids)),
               "test_tokens": int(len(test_ids)), "held_out_loss": test_loss,
               "losses_every_25": losses[::25], "seconds": times},
              open(os.path.join(args.out, "train.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
