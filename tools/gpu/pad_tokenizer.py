#!/usr/bin/env python3
"""pad_tokenizer.py IN OUT VOCAB [--dense] [--text]: IN (a tokenizer.json) with special added tokens
<g4_pad_N> for every id up to VOCAB - 1, so that each id a random-weight model of that vocabulary
emits decodes. The full-size random E2B package has no tokenizer; the chat fixture's (tests/
fixtures/chat) has Gemma's special ids (<|audio|> 258881, ...) but stops at 258884. Load tests
only: the pads are not text.

--dense also fills the gaps below the highest used id, and moves the BPE vocabulary's entries
past its dense prefix (the fixture keeps <|image|> 258880 .. <|video|> 258884 there) to added
tokens, and drops ids >= VOCAB (a tiny model's vocabulary ends before the placeholders):
llama.cpp's convert_hf_to_gguf.py (gguf-py LlamaHfVocab) walks ids 0 .. the base vocabulary size
and then the added tokens, and needs every id from 0 to VOCAB - 1 exactly once.

--text also fills the gaps, with pads that are not special: every id decodes to visible text
(a gap id decodes to nothing and a special pad is left out of a reply), so a load test's
streamed replies carry text whatever ids the random model samples (its TTFT is measurable)."""
import json
import sys

args = [a for a in sys.argv[1:] if a not in ("--dense", "--text")]
dense = "--dense" in sys.argv[1:]
text = "--text" in sys.argv[1:]
src, dst, vocab = args[0], args[1], int(args[2])
t = json.load(open(src, encoding="utf-8"))
t.setdefault("added_tokens", [])


def added(k, content, special=True):
    return {"id": k, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


if dense:
    bpe = t["model"]["vocab"]
    prefix = 0
    while prefix in set(bpe.values()):
        prefix += 1
    have = {a["id"] for a in t["added_tokens"]}
    for piece, k in sorted(bpe.items(), key=lambda x: x[1]):
        if k >= prefix:
            del bpe[piece]
            if k not in have and k < vocab:
                t["added_tokens"].append(added(k, piece))
    t["added_tokens"] = [a for a in t["added_tokens"] if a["id"] < vocab]
used = set(t["model"]["vocab"].values()) | {a["id"] for a in t["added_tokens"]}
start = 0 if dense or text else max(used) + 1
for k in range(start, vocab):
    if k not in used:
        t["added_tokens"].append(added(k, f"<g4_pad_{k}>", special=not text))
t["added_tokens"].sort(key=lambda a: a["id"])
json.dump(t, open(dst, "w", encoding="utf-8"))
