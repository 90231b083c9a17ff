#!/usr/bin/env python3
"""Writes tests/fixtures/chat/generate_cases.jsonl: what HF transformers' greedy `generate`
produces on the two tiny fixture models, for tests/test_generate.c and tests/test_asr_vqa.c.

How HF is run (the same model preparation as tools/python/make_reference.py, so that HF
computes with exactly the package's weights): Gemma4ForConditionalGeneration from <fixture>/hf
in float32 on the CPU, eager attention for text and vision, "sdpa" for the audio tower (its
eager path in transformers 5.17 inverts the attention band: tools/python/mm_reference.py); every floating state-dict tensor rounded to float16 and
back; embed_scale = fp16(sqrt(hidden)), PLE token scale fp16(sqrt(ple_dim)), PLE projection
scale fp16(hidden^-0.5), PLE combine scale fp16(2^-0.5) (checked against the package's
embedding graph). Then

    model.generate(input_ids, do_sample=False, max_new_tokens=N, eos_token_id=EOS,
                   pad_token_id=0)          (+ pixel_values / input_features for media cases)

and the new ids are recorded (an EOS id that ends generation is part of them, as generate
returns it). Each text case is also re-run as a plain greedy loop of full forward passes
without a KV cache, which must give the same ids (so HF's cache is not what we compare to), and
the smallest top-1 / top-2 logit gap over the steps is recorded: the margin a correct engine
(fp32 on the same fp16 weights, rel err ~1e-6) has before a near-tie could flip a token.

Cases:
  text  prompt ids given directly: random ids (seeded) and a chat-template prompt made with
        HF's processor and tests/fixtures/chat/chat_bpe.json; mobius-tiny-f16 (vocab 1024,
        EOS [1, 106] from its generation_config) and tiny2 (vocab 256, EOS [1]).
        For the chat prompt also: the generated text (HF tokenizers decode, special tokens
        skipped) and stop-string cases derived from it with Python's str.find (two pieces of the
        text, and "\n\n", which this model's text happens to contain): for a stop string
        S, the text before its first occurrence and the number of tokens generated when the
        decoded text first contains S (what an engine that checks after every token stops at).
  media a VQA prompt (frontends/media/square_rgb.png + a question) and ASR prompts
        (frontends/media/tone_1s_f32.wav, speech_7.3s_8k.flac + the E2B ASR prompt) through
        Gemma4Processor.apply_chat_template (the chat fixture's processor: image_processor.json
        and audio_feature_extraction.json of the package, audio loaded as librosa.load would:
        soundfile float32, mono mean, soxr_hq to 16 kHz, fix_length), then generate with the
        processor's pixel_values / image_position_ids / input_features / input_features_mask.
(The sampler's draw, a counter-based SplitMix64, and its exact picks have their own fixture:
tools/python/make_sample_fixture.py.)

Run from the repository root (about 30 s on a CPU):
  /work/venv-hf/bin/python tools/python/make_generate_fixture.py [--out tests/fixtures/chat]
"""

import argparse
import json
import math
import os
import random
import sys

import numpy as np
import soundfile as sf
import torch
import transformers
from transformers import Gemma4ForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import f16, package_constants  # noqa: E402
from make_frontend_fixture import librosa_like_load  # noqa: E402
import make_chat_fixture as chatfx  # noqa: E402

SEED = 20260612
FIX = "tests/fixtures"


def load_model(name):
    hf = os.path.join(FIX, name, "hf")
    pkg = os.path.join(FIX, name, "package")
    model = Gemma4ForConditionalGeneration.from_pretrained(
        hf, dtype=torch.float32, attn_implementation="eager").eval()
    for _, t in model.state_dict().items():
        if t.is_floating_point():
            t.copy_(t.to(torch.float16).to(torch.float32))
    tc = model.config.get_text_config()
    lm = model.model.language_model
    H, P = tc.hidden_size, tc.hidden_size_per_layer_input
    consts = {"embed_scale": f16(math.sqrt(H)), "ple_token_scale": f16(math.sqrt(P)),
              "ple_proj_scale": f16(H ** -0.5), "ple_combine_scale": f16(2.0 ** -0.5)}
    pc = package_constants(pkg)
    for k, v in consts.items():
        assert pc.get(k) == v, f"{pkg}: {k} is {pc.get(k)!r}, expected {v!r}"
    lm.embed_tokens.embed_scale.fill_(consts["embed_scale"])
    lm.embed_tokens_per_layer.embed_scale.fill_(consts["ple_token_scale"])
    lm.per_layer_model_projection_scale = consts["ple_proj_scale"]
    lm.per_layer_input_scale = consts["ple_combine_scale"]
    # the audio tower runs "sdpa": in transformers 5.17 its eager path inverts the attention band
    # (a float additive mask meets Gemma4AudioAttention's logical_not; see mm_reference.py)
    model.model.audio_tower.config._attn_implementation = "sdpa"
    gen_eos = model.generation_config.eos_token_id
    eos = gen_eos if isinstance(gen_eos, list) else [gen_eos]
    return model, tc, eos


def greedy(model, ids, max_new, eos, extra=None):
    inp = torch.tensor([ids], dtype=torch.long)
    kw = dict(extra or {})
    out = model.generate(input_ids=inp, attention_mask=torch.ones_like(inp), do_sample=False,
                         max_new_tokens=max_new, eos_token_id=eos, pad_token_id=0,
                         output_scores=True, return_dict_in_generate=True, **kw)
    new = out.sequences[0, len(ids):].tolist()
    gaps = []
    for s in out.scores:  # processed scores == logits for greedy without processors
        top = torch.topk(s[0].float(), 2).values
        gaps.append(float(top[0] - top[1]))
    return new, min(gaps)


def greedy_nocache(model, ids, max_new, eos):
    seq = list(ids)
    for _ in range(max_new):
        logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
        nxt = int(torch.argmax(logits))
        seq.append(nxt)
        if nxt in eos:
            break
    return seq[len(ids):]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(FIX, "chat"))
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    lines = [{"kind": "meta", "transformers": transformers.__version__,
              "torch": torch.__version__, "numpy": np.__version__, "seed": SEED}]

    # the chat fixture's tokenizer and processor (HF's own), for chat-template prompts
    with open(os.path.join(args.out, "gemma4_e2b_chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    tmp_tok = os.path.join(args.out, "tokenizer.json")
    with open(os.path.join(args.out, "chat_bpe.json"), "rb") as src, open(tmp_tok, "wb") as dst:
        dst.write(src.read())
    try:
        proc, _ = chatfx.build_processor(args.out, os.path.join(FIX, "mobius-tiny-f16", "package"),
                                         template)
    finally:
        os.remove(tmp_tok)

    for name in ("mobius-tiny-f16", "tiny2"):
        model, tc, eos = load_model(name)
        V = tc.vocab_size
        cases = [("ids_short", [2] + [rng.randrange(3, V) for _ in range(11)], 24),
                 ("ids_long", [2] + [rng.randrange(3, V) for _ in range(39)], 24)]
        if name == "mobius-tiny-f16":
            msgs = [{"role": "user", "content": [{"type": "text", "text": "Hello, who are you?"}]}]
            chat_ids = [int(i) for i in np.asarray(proc.apply_chat_template(
                msgs, tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"])
                .reshape(-1)]
            assert max(chat_ids) < V
            cases.append(("chat_text", chat_ids, 40))
        for cname, ids, max_new in cases:
            new, gap = greedy(model, ids, max_new, eos)
            assert new == greedy_nocache(model, ids, max_new, eos), f"{name}/{cname}: cache differs"
            line = {"kind": "text", "package": name, "name": cname, "prompt_ids": ids,
                    "max_new": max_new, "eos": eos, "ids": new, "min_top2_gap": gap}
            if cname == "chat_text":
                tok = proc.tokenizer
                text = tok.decode(new, skip_special_tokens=True)
                line["text"] = text
                stops = []
                # stop strings: pieces of the text a few tokens in, and "\n\n" (the stop
                # lmms-eval injects, which the benchmark ignores) when the text has it
                cands = [tok.decode(new[a:b], skip_special_tokens=True) for a, b in ((3, 5), (10, 11))]
                for s in [c.strip() or c for c in cands] + ["\n\n"]:
                    if not s or s not in text:
                        continue
                    n = next(k for k in range(1, len(new) + 1)
                             if s in tok.decode(new[:k], skip_special_tokens=True))
                    stops.append({"stop": s, "text": text[:text.find(s)], "n_tokens": n})
                line["stops"] = stops
            lines.append(line)
            print(f"{name}/{cname}: {len(ids)} prompt ids -> {new} (min gap {gap:.4f})")

        if name != "mobius-tiny-f16":
            continue
        media = os.path.join(FIX, "frontends", "media")
        mcases = [
            ("vqa_square", "image", "square_rgb.png", "What is in this image?", 16),
            ("asr_tone", "audio", "tone_1s_f32.wav", chatfx.ASR_PROMPT, 16),
            ("asr_speech_8k", "audio", "speech_7.3s_8k.flac", chatfx.ASR_PROMPT, 16),
        ]
        from PIL import Image
        for cname, kind, fname, text, max_new in mcases:
            path = os.path.join(media, fname)
            if kind == "image":
                item = {"type": "image", "image": Image.open(path)}
            else:
                item = {"type": "audio", "audio": librosa_like_load(path, 16000)}
            msgs = [{"role": "user", "content": [item, {"type": "text", "text": text}]}]
            inputs = proc.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True,
                                              return_dict=True, return_tensors="pt")
            ids = inputs["input_ids"][0].tolist()
            assert max(i for i in ids if i not in (258880, 258881)) < V
            extra = {k: v for k, v in inputs.items()
                     if k in ("pixel_values", "image_position_ids", "input_features",
                              "input_features_mask")}
            new, gap = greedy(model, ids, max_new, eos, extra)
            n_soft = sum(1 for i in ids if i in (258880, 258881))
            lines.append({"kind": "media", "package": name, "name": cname, "media": kind,
                          "file": os.path.relpath(path, FIX), "text": text, "prompt_ids": ids,
                          "n_soft_tokens": n_soft, "max_new": max_new, "eos": eos, "ids": new,
                          "min_top2_gap": gap})
            print(f"{name}/{cname}: {len(ids)} prompt ids ({n_soft} soft) -> {new} "
                  f"(min gap {gap:.4f})")

    with open(os.path.join(args.out, "generate_cases.jsonl"), "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
