#!/usr/bin/env python3
"""pad_tokenizer.py IN OUT VOCAB: IN (a tokenizer.json) with special added tokens <g4_pad_N> for
every id up to VOCAB - 1, so that each id a random-weight model of that vocabulary emits decodes.
The full-size random E2B package has no tokenizer; the chat fixture's (tests/fixtures/chat) has
Gemma's special ids (<|audio|> 258881, ...) but stops at 258884. Load tests only: the pads are
not text."""
import json
import sys

src, dst, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = json.load(open(src, encoding="utf-8"))
used = set(t["model"]["vocab"].values()) | {a["id"] for a in t.get("added_tokens", [])}
t.setdefault("added_tokens", [])
for k in range(max(used) + 1, vocab):
    t["added_tokens"].append({"id": k, "content": f"<g4_pad_{k}>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": True})
json.dump(t, open(dst, "w", encoding="utf-8"))
