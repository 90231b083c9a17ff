#!/usr/bin/env python3
"""Writes the chat-template fixtures under tests/fixtures/chat/ with HF's own machinery.

What it writes (all read by tests/test_chat.c; nothing here is produced by g4cu):

  chat_bpe.json          a small Gemma-style tokenizer.json made with HF `tokenizers` (the
                         pipeline of Gemma-4's tokenizer.json, as tests/fixtures/tokenizer's
                         gemma_bpe.json) that carries every Gemma-4 chat/media special token and
                         fits the tiny fixture models: all text pieces and <|image> <image|>
                         <|audio> <audio|> have ids < 1024 (the vocabulary of mobius-tiny-f16),
                         the placeholders <|image|> <|audio|> <|video|> have the real E2B ids
                         258880 / 258881 / 258884 (the ids the tiny packages' configs name), and
                         <pad> <eos> <bos> <|turn> <turn|> ... have the real Gemma ids (0, 1, 2,
                         105, 106, ...). So the same prompts run on the tiny models (HF and ours).
  tokenizer_config.json  the Gemma-4 tokenizer_config.json keys (token names, GemmaTokenizer,
                         Gemma4Processor), so that transformers builds its tokenizer from
                         chat_bpe.json the way it builds the real one.
  chat_cases.jsonl       one "meta" line, then one line per prompt: the request (system text and
                         whether it was sent as a string or as [{"type": "text"}] parts, image
                         sizes, audio lengths, the user text and whether it was a string or a
                         text part), the template's rendering (placeholders not yet expanded), the
                         soft-token count per media item and the token ids HF's Gemma4Processor
                         produces: processor.apply_chat_template(messages, tokenize=True,
                         add_generation_prompt=True) with the real E2B chat template.

The chat template: gemma4_e2b_chat_template.jinja beside the output is the E2B template text as
ollama keeps it in model/renderers/testdata/gemma4_e2b_chat_template.jinja2 ("Google Gemma 4
Canonical Chat Template", published 2026-07-09; stored version at commit 0f5944a5), and
gemma4_e2b_chat_template_c7c2837c.jinja an earlier version of the same file (commit c7c2837c,
without the header, older tool-call handling). The script renders every case with both and
stops unless they agree.

The processor is built offline: Gemma4Processor(Gemma4AudioFeatureExtractor from the tiny
package's audio_feature_extraction.json, Gemma4ImageProcessor from its image_processor.json,
GemmaTokenizer from chat_bpe.json + tokenizer_config.json, Gemma4VideoProcessor(), the
template). Images are synthetic PIL RGB images of the listed sizes (only their size matters for
the ids); audio is a seeded noise waveform at 16 kHz of the listed length.

Checks made here: HF's ids equal `tokenizers`' own encoding of the expanded text with
add_special_tokens=False (one <bos>: the processor does not add a second one, because the
template's text already starts with it); every media block is <|image>/<|audio> + N
placeholders + <image|>/<audio|> with N = the processor's count.

Run from the repository root (about 20 s on a CPU):
  /work/venv-hf/bin/python tools/python/make_chat_fixture.py [--out tests/fixtures/chat]
      [--package tests/fixtures/mobius-tiny-f16/package]
"""

import argparse
import json
import os
import random
import sys

import numpy as np
import tokenizers
import torch
import transformers
from PIL import Image
from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers import Regex
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_fixture import WORDS, ACCENTED, PUNCT  # noqa: E402  (word lists only)

SEED = 20260611
TEXT_ID_LIMIT = 1020  # text pieces and bytes take ids < 1020; 1020..1023 hold the media brackets

# Special tokens at fixed ids: Gemma-4's own ids where they are below 1024, else a free id below
# 1024 (media brackets) or the E2B placeholder ids (which the tiny configs use too).
FIXED = {
    "<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<mask>": 4,
    "<|tool>": 46, "<tool|>": 47, "<|tool_call>": 48, "<tool_call|>": 49,
    "<|tool_response>": 50, "<tool_response|>": 51, '<|"|>': 52,
    "<|think|>": 98, "<|channel>": 100, "<channel|>": 101, "<|turn>": 105, "<turn|>": 106,
    "<|image>": 1020, "<|audio>": 1021, "<image|>": 1022, "<audio|>": 1023,
    "<|image|>": 258880, "<|audio|>": 258881, "<|video|>": 258884,
}

# tokenizer_config.json of google/gemma-4-E2B-it (token names; the chat template is passed
# separately and the response schema is left out).
TOKENIZER_CONFIG = {
    "audio_token": "<|audio|>", "backend": "tokenizers", "boa_token": "<|audio>",
    "boi_token": "<|image>", "bos_token": "<bos>", "eoa_token": "<audio|>",
    "eoc_token": "<channel|>", "eoi_token": "<image|>", "eos_token": "<eos>",
    "eot_token": "<turn|>", "escape_token": '<|"|>', "etc_token": "<tool_call|>",
    "etd_token": "<tool|>", "etr_token": "<tool_response|>", "extra_special_tokens": ["<|video|>"],
    "image_token": "<|image|>", "mask_token": "<mask>", "pad_token": "<pad>",
    "padding_side": "left", "processor_class": "Gemma4Processor", "soc_token": "<|channel>",
    "sot_token": "<|turn>", "stc_token": "<|tool_call>", "std_token": "<|tool>",
    "str_token": "<|tool_response>", "think_token": "<|think|>",
    "tokenizer_class": "GemmaTokenizer", "unk_token": "<unk>",
}

ASR_PROMPT = ("Transcribe the following speech segment in its original language. Follow these "
              "specific instructions for formatting the answer:\n* Only output the transcription, "
              "with no newlines.\n* When transcribing numbers, write the digits, i.e. write 1.7 "
              "and not one point seven, and write 3 instead of three.")
SYSTEM = "You are a helpful assistant."
LIBRISPEECH = "Please recognize the speech and only output the recognized content:"


def corpus(rng):
    extra = (ASR_PROMPT + " " + LIBRISPEECH + " " + SYSTEM + " What is in this image? Answer the "
             "question using a single word or phrase. Answer the question with a single word. "
             "Describe the picture. What does the chart show? user model system").split()
    lines = []
    for _ in range(4000):
        parts = []
        for _ in range(rng.randint(3, 14)):
            r = rng.random()
            if r < 0.6:
                w = rng.choice(WORDS)
            elif r < 0.8:
                w = rng.choice(extra)
            elif r < 0.85:
                w = rng.choice(ACCENTED)
            elif r < 0.93:
                w = str(rng.randint(0, 10 ** rng.randint(1, 4)))
            else:
                w = rng.choice(PUNCT)
            parts.append(w.capitalize() if rng.random() < 0.1 else w)
        lines.append(" ".join(parts) + rng.choice(["\n", "\n\n", ".\n", "?\n"]))
    return lines


def build_tokenizer(rng, path):
    free = [i for i in range(TEXT_ID_LIMIT) if i not in FIXED.values()]
    n_pieces = len(free) - 256
    tok = Tokenizer(BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "▁")
    # training only: SentencePiece-like pieces (a word with its leading ▁, whitespace runs)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"▁?[^▁\s]+|▁+|\n+|\t+|\s"),
                                             behavior="isolated")
    trainer = BpeTrainer(vocab_size=n_pieces, min_frequency=2, show_progress=False,
                         limit_alphabet=120, special_tokens=[])
    tok.train_from_iterator(corpus(rng), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    pieces = sorted(model["vocab"], key=lambda p: model["vocab"][p])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    assert len(pieces) <= n_pieces, (len(pieces), n_pieces)

    vocab = dict(FIXED)
    it = iter(free)
    for b in range(256):
        vocab["<0x%02X>" % b] = next(it)
    for p in pieces:
        if p not in vocab:
            vocab[p] = next(it)
    hf = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                       byte_fallback=True, dropout=None))
    hf.normalizer = normalizers.Replace(" ", "▁")
    hf.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
    hf.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                    decoders.Fuse()])
    hf.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", vocab["<bos>"])])
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in FIXED])
    hf.save(path)
    loaded = Tokenizer.from_file(path)
    for t, i in FIXED.items():  # the sparse ids survive saving and loading
        assert loaded.token_to_id(t) == i, (t, loaded.token_to_id(t), i)
    return loaded, len(vocab)


def build_processor(out, pkg, template):
    from transformers import GemmaTokenizer
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
    from transformers.models.gemma4.image_processing_gemma4 import Gemma4ImageProcessor
    from transformers.models.gemma4.processing_gemma4 import Gemma4Processor
    from transformers.models.gemma4.video_processing_gemma4 import Gemma4VideoProcessor

    with open(os.path.join(pkg, "image_processor.json")) as f:
        img = [t["operation"]["attrs"] for t in json.load(f)["processor"]["transforms"]
               if t["operation"]["type"] == "Gemma4ImageTransform"][0]
    with open(os.path.join(pkg, "audio_feature_extraction.json")) as f:
        fe = [t["operation"]["attrs"] for t in json.load(f)["feature_extraction"]["sequence"]
              if t["operation"]["type"] == "Gemma4LogMel"][0]
    image_processor = Gemma4ImageProcessor(patch_size=img["patch_size"],
                                           max_soft_tokens=img["max_soft_tokens"],
                                           pooling_kernel_size=img["pooling_kernel_size"])
    feature_extractor = Gemma4AudioFeatureExtractor(
        feature_size=fe["feature_size"], sampling_rate=fe["sampling_rate"],
        frame_length_ms=fe["frame_length_ms"], hop_length_ms=fe["hop_length_ms"],
        min_frequency=fe["min_frequency"], max_frequency=fe["max_frequency"],
        preemphasis=fe["preemphasis"], preemphasis_htk_flavor=bool(fe["preemphasis_htk_flavor"]),
        fft_overdrive=bool(fe["fft_overdrive"]), mel_floor=fe["mel_floor"])
    tokenizer = GemmaTokenizer.from_pretrained(out)  # chat_bpe.json via tokenizer_config.json
    proc = Gemma4Processor(feature_extractor=feature_extractor, image_processor=image_processor,
                           tokenizer=tokenizer, video_processor=Gemma4VideoProcessor(),
                           chat_template=template, image_seq_length=img["max_soft_tokens"])
    return proc, img


# name, system (None | str), system_parts, images [(h, w)], audio [n_samples], text,
# text_as_string (the user content is a plain string, not a list of parts; no media then)
CASES = [
    ("text", None, False, [], [], "What is the capital of France?", False),
    ("text_string", None, False, [], [], "  Hello there!\n\n", True),
    ("text_unicode_trim", None, False, [], [], "\u3000\u00a0 Grüße, café \u2003\n", False),
    ("text_newlines_inside", None, False, [], [], "line one\n\nline two\n* bullet", False),
    ("text_special_literal", None, False, [], [], "say <|turn> and <turn|> and <bos>", False),
    ("text_empty", None, False, [], [], "", False),
    ("system_parts", SYSTEM, True, [], [], "Hi!", False),
    ("system_string", "  Be brief. \n", False, [], [], "Why is the sky blue?", False),
    ("image_square", None, False, [(96, 96)], [], "What is in this image?", False),
    ("image_wide", SYSTEM, True, [(80, 300)], [],
     "What does the chart show?\nAnswer the question with a single word.", False),
    ("image_tall", None, False, [(170, 50)], [], "Describe the picture.", False),
    ("image_tiny", None, False, [(3, 5)], [], "", False),
    ("image_two", None, False, [(96, 96), (480, 640)], [], "Compare them.", False),
    ("audio_1s", None, False, [], [16000], ASR_PROMPT, False),
    ("audio_odd", SYSTEM, True, [], [16037], LIBRISPEECH, False),
    ("audio_short", None, False, [], [200], "Transcribe this audio", False),
    ("audio_7s", None, False, [], [116800], "", False),
    ("image_audio", SYSTEM, True, [(64, 128)], [8000], "What is shown and said?", False),
]


def messages_for(case, rng):
    name, system, system_parts, images, audio, text, as_string = case
    msgs = []
    if system is not None:
        msgs.append({"role": "system",
                     "content": [{"type": "text", "text": system}] if system_parts else system})
    if as_string:
        assert not images and not audio
        msgs.append({"role": "user", "content": text})
        return msgs, [], []
    content, pil, waves = [], [], []
    for h, w in images:  # media first, images then audio, as the eval harness sends them
        arr = np.asarray([[[(x * 7 + y * 3 + c * 50) % 256 for c in range(3)] for x in range(w)]
                          for y in range(h)], dtype=np.uint8)
        im = Image.fromarray(arr, "RGB")
        pil.append(im)
        content.append({"type": "image", "image": im})
    for n in audio:
        wave = (np.asarray([rng.uniform(-0.3, 0.3) for _ in range(n)], dtype=np.float32))
        waves.append(wave)
        content.append({"type": "audio", "audio": wave})
    content.append({"type": "text", "text": text})
    msgs.append({"role": "user", "content": content})
    return msgs, pil, waves


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/chat")
    ap.add_argument("--package", default="tests/fixtures/mobius-tiny-f16/package")
    args = ap.parse_args()
    rng = random.Random(SEED)
    torch.manual_seed(SEED)

    with open(os.path.join(args.out, "gemma4_e2b_chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    with open(os.path.join(args.out, "gemma4_e2b_chat_template_c7c2837c.jinja"),
              encoding="utf-8") as f:
        template_old = f.read()

    tok, n_vocab_pieces = build_tokenizer(rng, os.path.join(args.out, "chat_bpe.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(TOKENIZER_CONFIG, f, indent=2, sort_keys=True)
        f.write("\n")
    # transformers looks for tokenizer.json; point it at chat_bpe.json through a temporary copy
    tmp_tok = os.path.join(args.out, "tokenizer.json")
    with open(os.path.join(args.out, "chat_bpe.json"), "rb") as src, open(tmp_tok, "wb") as dst:
        dst.write(src.read())
    try:
        proc, img_attrs = build_processor(args.out, args.package, template)
    finally:
        os.remove(tmp_tok)
    ht = proc.tokenizer
    for name, tid in FIXED.items():
        assert ht.convert_tokens_to_ids(name) == tid, (name, ht.convert_tokens_to_ids(name), tid)
    assert ht.image_token_id == FIXED["<|image|>"] and ht.audio_token_id == FIXED["<|audio|>"]

    lines = [{"kind": "meta", "transformers": transformers.__version__,
              "tokenizers": tokenizers.__version__, "torch": torch.__version__,
              "numpy": np.__version__, "seed": SEED, "tokenizer": "chat_bpe.json",
              "n_vocab_entries": n_vocab_pieces,
              "template": "gemma4_e2b_chat_template.jinja",
              "image_processor": img_attrs, "package": args.package}]
    for case in CASES:
        name, system, system_parts, images, audio, text, as_string = case
        msgs, pil, waves = messages_for(case, rng)
        rendered = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        rendered_old = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                                chat_template=template_old)
        assert rendered == rendered_old, f"{name}: the two template versions differ"
        out = proc.apply_chat_template(msgs, tokenize=True, return_dict=True,
                                       add_generation_prompt=True)
        ids = [int(i) for i in np.asarray(out["input_ids"]).reshape(-1)]
        # soft tokens per media item, from the processor's own outputs
        n_img = [int(n) for n in out.get("num_soft_tokens_per_image", [])] if images else []
        if images and not n_img:
            n_img = []
            for im in pil:
                h, w = im.size[1], im.size[0]
                mm = proc._get_num_multimodal_tokens(image_sizes=[[h, w]])
                n_img.append(int(mm.num_image_tokens[0]))
        n_aud = []
        for k, wave in enumerate(waves):
            fe_out = proc.feature_extractor([wave], return_tensors="np")
            rep = proc.replace_audio_token({"input_features_mask": fe_out["input_features_mask"]}, 0)
            n_aud.append(rep.count("<|audio|>"))
        # the expansion HF made, rebuilt from the counts, and tokenized by `tokenizers` itself
        expanded, ki, ka = "", 0, 0
        for piece in rendered.split("<|image|>"):
            if expanded or ki:
                expanded += "<|image>" + "<|image|>" * n_img[ki - 1] + "<image|>"
            expanded += piece
            ki += 1
        assert ki - 1 == len(n_img), name
        parts = expanded.split("<|audio|>")
        assert len(parts) - 1 == len(n_aud), name
        expanded = parts[0] + "".join("<|audio>" + "<|audio|>" * n_aud[k] + "<audio|>" + parts[k + 1]
                                      for k in range(len(n_aud)))
        direct = tok.encode(expanded, add_special_tokens=False).ids
        assert direct == ids, f"{name}: processor ids differ from tokenizers' ids of the expansion"
        assert ids.count(FIXED["<bos>"]) == (1 + text.count("<bos>")) and ids[0] == FIXED["<bos>"]
        assert ids.count(FIXED["<|image|>"]) == sum(n_img)
        assert ids.count(FIXED["<|audio|>"]) == sum(n_aud)
        lines.append({"kind": "chat", "name": name, "system": system,
                      "system_parts": system_parts, "images": [list(s) for s in images],
                      "audio_samples": audio, "text": text, "text_as_string": as_string,
                      "rendered": rendered, "n_image_tokens": n_img, "n_audio_tokens": n_aud,
                      "ids": ids})
        print(f"{name}: {len(ids)} ids, image tokens {n_img}, audio tokens {n_aud}")

    with open(os.path.join(args.out, "chat_cases.jsonl"), "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
