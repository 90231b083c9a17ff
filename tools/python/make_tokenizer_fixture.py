#!/usr/bin/env python3
"""Writes the tokenizer fixtures under tests/fixtures/tokenizer/ with HF `tokenizers`.

Two small BPE tokenizers are trained on a corpus generated here (seeded), and HF `tokenizers`
encodes and decodes a few hundred inputs with them; tests/test_tokenizer.c checks that
loader/tokenizer.c gives the same ids and the same text for every case.

  gemma_bpe.json   the pipeline of Gemma-3/Gemma-4's tokenizer.json: normalizer Replace(" ", "▁"),
                   pre-tokenizer Split(" ", merged_with_previous) (a no-op after the normalizer),
                   BPE with byte_fallback, fuse_unk, <0xHH> byte pieces, no dummy prefix, special
                   tokens matched atomically before everything else, decoder
                   Replace("▁", " ") + ByteFallback + Fuse, post-processor "<bos> $A"; merges saved
                   as [a, b] pairs (the current tokenizers format).
  edge_bpe.json    the same vocabulary with every other option the loader accepts switched on:
                   merges as legacy "a b" strings, ignore_merges, Prepend + Replace normalizer,
                   Split pre-tokenizers of each behaviour (one inverted), added tokens with lstrip,
                   rstrip, single_word and normalized=true, missing byte pieces (so <unk> and its
                   fusing appear), a special token with normalized=true (decoded as its
                   normalized form, which decode's skip_special then keeps, as HF 0.23 does),
                   a Strip decoder and a "<bos> $A <eos>" post-processor.

Each *_cases.jsonl starts with a "meta" line (tokenizers version, seed, n_vocab, n_merges,
n_added); every other line is one case:
  {"kind": "encode", "name": ..., "text": ..., "hex": UTF-8 of text, "add_special": bool,
   "ids": [...]}                                        HF Tokenizer.encode(text).ids
  {"kind": "decode", "name": ..., "ids": [...], "skip_special": bool,
   "text": ..., "hex": UTF-8 of the result}             HF Tokenizer.decode(ids, skip_special)
Texts are also stored as hex so that NUL and other control characters survive any JSON reader.

Run (from the repository root, with the venv that has tokenizers):
  /work/venv-hf/bin/python tools/python/make_tokenizer_fixture.py [--out tests/fixtures/tokenizer]
"""

import argparse
import json
import os
import random
import sys

import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers import Regex
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

SEED = 20240607
TRAINED_PIECES = 1730  # learned pieces; with specials, added tokens and 256 bytes ~2000 in all

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]  # ids 0..4 as in Gemma
# Gemma-4-style added tokens (all special, not normalized), ids 5.. in this fixture.
GEMMA_ADDED = ["<|turn>", "<turn|>", "<|image>", "<|image|>", "<image|>", "<|audio>", "<|audio|>",
               "<audio|>", '<|"|>', "<|think|>"]
# A non-special added token: matched atomically like the special ones, kept by decode(skip).
NON_SPECIAL_ADDED = ["[multimodal]"]

WORDS = """the of and to in is that it was for on are as with his they at be this from have or
by one had not but what all were when we there can an your which their said if do will each about
how up out them then she many some so these would other into has more her two like him see time
could no make than first been its who now people my made over did down only way find use may water
long little very after words called just where most know get through back much before go good new
write our used me man too any day same right look think also around another came come work three
word must because does part even place well such here take why things help put years different
away again off went old number great tell men say small every found still between name should home
big give air line set own under read last never us left end along while might next sound below saw
something thought both few those always looked show large often together asked house don't world
going want school important until form food keep children feet land side without boy once animals
life enough took sometimes four head above kind began almost live page got earth need far hand high
year mother light parts country father let night following picture being study second eyes soon
times story boys since white days paper hard near sentence better best across during today others
however sure means knew it's try told young miles sun ways thing whole hear example heard several
change answer room sea against top turned learn point city play toward five using himself usually
tokenizer model engine kernel tensor vector matrix gradient layer attention token embedding""".split()

ACCENTED = """café naïve façade jalapeño smørrebrød crème brûlée Ångström señor coöperate déjà vu
Zürich São Paulo Łódź Kraków Dvořák Mañana résumé élève garçon Über Straße Fußball Köln Ærø
Þingvellir Œuvre Ça été déjà où piñata Jürgen Müller François Hélène Gdańsk Škoda Čapek
Ørsted Åland Ísland Íñigo""".split()

CHINESE = ("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对"
           "可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公"
           "同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名"
           "定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加")
JAPANESE = "こんにちはありがとうございますさようならひらがなカタカナ日本語東京大阪です"
KOREAN = "안녕하세요감사합니다한국어서울부산사랑해요"
EMOJI = ["😀", "😂", "👍", "🎉", "❤️", "🔥", "✨", "🚀", "🙂", "🤔", "👍🏽", "👨‍👩‍👧‍👦",
         "🏳️‍🌈", "🇫🇷", "🇯🇵", "🧑‍💻", "👩🏾‍🔬"]
PUNCT = list(".,;:!?()[]{}'\"-/*&%$#@+=<>|_~^`")


def corpus_line(rng):
    """One training line: prose with accents, CJK, emoji, digits and whitespace runs."""
    parts = []
    for _ in range(rng.randint(3, 14)):
        r = rng.random()
        if r < 0.55:
            w = rng.choice(WORDS)
            if rng.random() < 0.15:
                w = w.capitalize()
            parts.append(w)
        elif r < 0.65:
            parts.append(rng.choice(ACCENTED))
        elif r < 0.75:
            parts.append("".join(rng.choice(CHINESE) for _ in range(rng.randint(1, 6))))
        elif r < 0.78:
            parts.append("".join(rng.choice(JAPANESE) for _ in range(rng.randint(1, 5))))
        elif r < 0.80:
            parts.append("".join(rng.choice(KOREAN) for _ in range(rng.randint(1, 4))))
        elif r < 0.85:
            parts.append(rng.choice(EMOJI))
        elif r < 0.92:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 6))))
        else:
            parts.append(rng.choice(PUNCT))
    out = ""
    for i, p in enumerate(parts):
        if i:
            r = rng.random()
            out += " " if r < 0.85 else ("  " if r < 0.9 else rng.choice(["   ", "\t", "\n", "    "]))
        out += p
    if rng.random() < 0.3:
        out += rng.choice([".", "!", "?", ":"])
    return out + rng.choice(["\n", "\n", "\n\n", " \n", "\n\n\n"])


def train_pieces(rng):
    """Trains BPE on the generated corpus; returns (pieces in rank order of creation, merges)."""
    corpus = [corpus_line(rng) for _ in range(6000)]
    tok = Tokenizer(BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "▁")
    # Training only: words with their leading ▁, and whitespace runs on their own, the way
    # SentencePiece pieces look. The saved tokenizer gets Gemma's pre-tokenizer instead.
    tok.pre_tokenizer = pre_tokenizers.Split(
        Regex(r"▁?[^▁\s]+|▁+|\n+|\t+|\s"), behavior="isolated")
    trainer = BpeTrainer(vocab_size=TRAINED_PIECES, min_frequency=2, show_progress=False,
                         limit_alphabet=400, special_tokens=[])
    tok.train_from_iterator(corpus, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    pieces = sorted(model["vocab"], key=lambda p: model["vocab"][p])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    return pieces, merges


def byte_piece(b):
    return "<0x%02X>" % b


def build_vocab(pieces, drop_bytes=()):
    vocab = {}
    for t in SPECIALS + GEMMA_ADDED + NON_SPECIAL_ADDED:
        vocab[t] = len(vocab)
    for b in range(256):
        if b not in drop_bytes:
            vocab[byte_piece(b)] = len(vocab)
    for p in pieces:
        if p not in vocab:
            vocab[p] = len(vocab)
    return vocab


def gemma_tokenizer(pieces, merges):
    vocab = build_vocab(pieces)
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                        byte_fallback=True, dropout=None))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", vocab["<bos>"])])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in SPECIALS + GEMMA_ADDED])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL_ADDED])
    return tok


EDGE_ADDED = [  # (content, special, normalized, lstrip, rstrip, single_word)
    ("<L>", True, False, True, False, False),
    ("<R>", True, False, False, True, False),
    ("<LR>", False, False, True, True, False),
    ("cat", False, False, False, False, True),
    ("hello world", False, True, False, False, False),
    ("ok", False, True, False, True, False),
    ("<S>", True, True, False, False, False),
]


def edge_tokenizer(pieces, merges, path):
    """Writes edge_bpe.json (legacy string merges) and returns HF's tokenizer loaded from it."""
    # Without the lead bytes of 3- and 4-byte UTF-8 most CJK and all emoji absent from the
    # vocabulary can no longer fall back to bytes and become (fused) <unk>.
    vocab = build_vocab(pieces, drop_bytes=(0xE3, 0xF0))
    for content, *_ in EDGE_ADDED:
        if content not in vocab:
            vocab[content] = len(vocab)
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                        byte_fallback=True, dropout=None, ignore_merges=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("▁", behavior="merged_with_next"),
        pre_tokenizers.Split("\n", behavior="isolated"),
        pre_tokenizers.Split("\t", behavior="removed"),
        pre_tokenizers.Split("!", behavior="contiguous"),
        pre_tokenizers.Split(".", behavior="merged_with_previous"),
        pre_tokenizers.Split("-", behavior="isolated", invert=True),
    ])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", special_tokens=[("<bos>", vocab["<bos>"]),
                                                 ("<eos>", vocab["<eos>"])])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in SPECIALS + GEMMA_ADDED])
    for content, special, normalized, lstrip, rstrip, single_word in EDGE_ADDED:
        t = AddedToken(content, special=special, normalized=normalized, lstrip=lstrip,
                       rstrip=rstrip, single_word=single_word)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    doc = json.loads(tok.to_str())
    doc["model"]["merges"] = ["%s %s" % (a, b) for a, b in doc["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return Tokenizer.from_file(path)


def fixed_inputs():
    long_para = " ".join(WORDS[:300]) + " " + "".join(CHINESE[:200]) + " " + " ".join(ACCENTED)
    return [
        ("empty", ""),
        ("ascii word", "Hello"),
        ("ascii sentence", "The quick brown fox jumps over the lazy dog."),
        ("ascii punctuation", "Hello, world! How's it going? (fine) [ok] {x} a+b=c; 100%"),
        ("leading space", " hello"),
        ("leading spaces", "    indented text"),
        ("trailing spaces", "trailing   "),
        ("space runs", "a  b   c    d     e"),
        ("only spaces", "        "),
        ("long space run", " " * 300),
        ("single space", " "),
        ("newline", "\n"),
        ("newline runs", "one\ntwo\n\nthree\n\n\nfour\n\n\n\n"),
        ("crlf", "line1\r\nline2\r\n"),
        ("tabs", "\tx\t\ty\t\t\t"),
        ("mixed whitespace", " \t \n \u00a0 \u3000 \u2003 x"),
        ("accents", "café naïve façade Ångström Łódź Dvořák"),
        ("nfd accents", "cafe\u0301 nai\u0308ve"),
        ("german", "Die Straße in Köln ist schön, Fußball über alles."),
        ("chinese", "我们的国家是一个大国，人民在这里生活。"),
        ("japanese", "こんにちは、東京です。カタカナ"),
        ("korean", "안녕하세요 감사합니다"),
        ("emoji", "😀😂👍🎉"),
        ("emoji text", "I love it ❤️ so much 🔥🔥🔥!"),
        ("emoji zwj family", "👨‍👩‍👧‍👦"),
        ("emoji zwj mixed", "🧑‍💻 codes, 👩🏾‍🔬 tests, 🏳️‍🌈 waves"),
        ("emoji skin tone", "👍🏽👍🏻👍🏿"),
        ("flags", "🇫🇷🇯🇵🇺🇸🇩🇪"),
        ("digits", "0123456789"),
        ("numbers", "3.14159 2,718 1e-9 -42 +7 2024-06-07 12:30:45 $1,000,000.00"),
        ("long number", "1234567890" * 8),
        ("special bos", "<bos>hello"),
        ("special chat", "<bos><|turn>user\nWhat is this?<turn|>\n<|turn>model\n"),
        ("special image block", "<|image><|image|><|image|><|image|><image|>Describe it."),
        ("special audio block", "<|audio><|audio|><|audio|><audio|>Transcribe."),
        ("special adjacent", "<eos><eos><pad><bos><unk><mask>"),
        ("special spaced", " <bos> a <eos> "),
        ("special inside word", "x<pad>y<|turn>z"),
        ("special escape", 'say <|"|>quoted<|"|> now'),
        ("special think", "<|think|>\nhmm"),
        ("non-special added", "[multimodal] and [multimodal][multimodal]"),
        ("partial specials", "<|turn <turn| <|image| <bo s> <<bos>> <|turn>> <|im < | >"),
        ("literal byte pieces", "<0x41><0xE2><0xZZ><0x4> <0x41 0x41>"),
        ("literal metaspace", "▁ ▁▁ a▁b ▁x"),
        ("byte fallback cyrillic", "Привет, мир!"),
        ("byte fallback arabic", "مرحبا بالعالم"),
        ("byte fallback devanagari", "नमस्ते दुनिया"),
        ("byte fallback thai", "สวัสดีครับ"),
        ("byte fallback 4-byte cjk", "𠀀𠀁𪚥"),
        ("byte fallback math", "∑∫√∞≠≤ π≈3.14"),
        ("byte fallback box", "┌─┐│└┘"),
        ("replacement char", "\ufffd bad \ufffd"),
        ("zero width", "a\u200bb\u200cc\u200dd\ufeffe"),
        ("control chars", "a\x01b\x7fc\x1bd"),
        ("nul", "a\x00b"),
        ("private use", "\ue000\uf8ff"),
        ("max codepoint", "\U0010ffff"),
        ("combining run", "a\u0300\u0301\u0302\u0303\u0304"),
        ("long paragraph", long_para),
        ("long repeat", "a" * 1000),
        ("long mixed", ("Hello 世界 😀 " * 120).strip()),
    ]


def random_text(rng, pools):
    n = rng.randint(1, 40)
    return "".join(rng.choice(rng.choice(pools)) for _ in range(n))


def random_inputs(rng, count):
    pools = [
        [w + " " for w in WORDS], list(CHINESE), list(JAPANESE), list(KOREAN), EMOJI, PUNCT,
        [" ", "  ", "\n", "\t", "\n\n"], list("0123456789"), ACCENTED,
        ["<|turn>", "<turn|>", "<bos>", "<|image|>", "<eos>", "[multimodal]", "<|", "|>", "<"],
        ["Ж", "ש", "ع", "ह", "ก", "𝔘", "𠀀", "€", "™", "\u0301", "\u200d", "\ufe0f", "▁"],
    ]
    return [("random %d" % i, random_text(rng, pools)) for i in range(count)]


def edge_inputs():
    return [
        ("lstrip token", "a   <L>b"),
        ("rstrip token", "a<R>   b"),
        ("lstrip+rstrip token", "x  <LR>  y"),
        ("lstrip at start", "   <L>"),
        ("rstrip at end", "<R>\t\n "),
        ("strip unicode space", "a\u3000<LR>\u00a0b"),
        ("adjacent strip tokens", "a <R> <L> b <LR> <LR> c"),
        ("single word ok", "the cat sat"),
        ("single word start end", "cat"),
        ("single word inside", "concatenate cats bobcat"),
        ("single word punct", "(cat) cat. cat,cat"),
        ("single word digit", "cat9 9cat"),
        ("single word accent", "écat caté"),
        ("normalized added", "say hello world twice: hello world"),
        ("normalized added no prefix", "hello world"),
        ("normalized added rstrip", "it is ok   fine ok"),
        ("normalized special", "x <S> y<S>"),
        ("prepend per split", "a<bos>b<eos>c"),
        ("split behaviours", "wow!!! yes. a.b.c x-y--z - end!"),
        ("split newline tab", "a\nb\tc\n\n\td"),
        # 🦀 🦉 and small kana are absent from the corpus; their lead bytes are dropped.
        ("unk fused emoji", "a🦀🦉b"),
        ("unk then byte fallback", "🦀Ж"),
        ("unk then known", "🦀a"),
        ("unk kana", "ぁぃ😀ぅ"),
        ("unk between specials", "<bos>🦀<eos>🦀🦉"),
        ("ignore merges whole word", "the people children"),
        ("whole text in vocab", "the"),
    ]


def decode_id_cases(rng, tok, count):
    """Random id sequences, with runs of byte pieces that form valid and invalid UTF-8."""
    vocab = tok.get_vocab(with_added_tokens=True)
    n = max(vocab.values()) + 1
    byte_ids = [vocab[byte_piece(b)] for b in range(256) if byte_piece(b) in vocab]
    special_ids = [vocab[t] for t in SPECIALS + GEMMA_ADDED + NON_SPECIAL_ADDED]
    seqs = []
    # Byte pieces of bs (those the vocabulary has: edge_bpe.json lacks a few).
    bp = lambda bs: [vocab[byte_piece(b)] for b in bs if byte_piece(b) in vocab]  # noqa: E731
    for s in ["é", "€", "😀", "👨‍👩‍👧‍👦", "𠀀", "Ж"]:  # complete sequences as bytes
        seqs.append(bp(s.encode()))
    e = "€".encode()
    seqs += [
        bp(e[:2]),                                   # truncated 3-byte sequence
        bp(e[:2]) + [vocab["<bos>"]] + bp(e[2:]),    # split by a special token
        bp(b"\x80\x80"),                             # lone continuation bytes
        bp(b"\xc3") + bp(b"A"),                      # lead byte then ASCII byte
        bp(b"A\xc3\xa9B"),                           # valid run with ASCII bytes
        bp(b"A\xc3\xa9\xffB"),                       # one bad byte spoils the whole run
        bp(b"\xed\xa0\x80"),                         # UTF-16 surrogate encoded as UTF-8
        bp(b"\xc0\xaf"),                             # overlong
        bp(b"\xf4\x90\x80\x80"),                     # above U+10FFFF
        bp(b" \n\t"),
        [],
    ]
    for _ in range(count):
        k = rng.randint(1, 24)
        seq = []
        for _ in range(k):
            r = rng.random()
            if r < 0.35:
                seq.append(rng.choice(byte_ids))
            elif r < 0.5:
                seq.append(rng.choice(special_ids))
            else:
                seq.append(rng.randrange(n))
        seqs.append(seq)
    return seqs


def cases_for(tok, inputs, decode_seqs, add_special_names):
    out = []
    for name, text in inputs:
        for add in (False, True):
            if add and name not in add_special_names:
                continue
            ids = tok.encode(text, add_special_tokens=add).ids
            out.append({"kind": "encode", "name": name, "text": text,
                        "hex": text.encode("utf-8").hex(), "add_special": add, "ids": ids})
            if not add:
                for skip in (False, True):
                    d = tok.decode(ids, skip_special_tokens=skip)
                    out.append({"kind": "decode", "name": "roundtrip " + name, "ids": ids,
                                "skip_special": skip, "text": d, "hex": d.encode("utf-8").hex()})
    for i, ids in enumerate(decode_seqs):
        for skip in (False, True):
            d = tok.decode(ids, skip_special_tokens=skip)
            out.append({"kind": "decode", "name": "ids %d" % i, "ids": ids, "skip_special": skip,
                        "text": d, "hex": d.encode("utf-8").hex()})
    return out


def write_jsonl(path, tok, n_merges, cases):
    meta = {"kind": "meta", "tokenizers": tokenizers.__version__, "seed": SEED,
            "n_vocab": tok.get_vocab_size(with_added_tokens=True), "n_merges": n_merges,
            "n_added": len(tok.get_added_tokens_decoder())}
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(meta) + "\n")
        for c in cases:
            f.write(json.dumps(c, ensure_ascii=True) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/tokenizer")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(SEED)
    pieces, merges = train_pieces(rng)

    gemma = gemma_tokenizer(pieces, merges)
    gemma_path = os.path.join(args.out, "gemma_bpe.json")
    gemma.save(gemma_path, pretty=True)
    gemma = Tokenizer.from_file(gemma_path)  # test what a reader of the file gets
    inputs = fixed_inputs() + random_inputs(rng, 150)
    add_names = {"empty", "ascii sentence", "special bos", "special chat", "emoji zwj family"}
    gcases = cases_for(gemma, inputs, decode_id_cases(rng, gemma, 60), add_names)
    write_jsonl(os.path.join(args.out, "gemma_bpe_cases.jsonl"), gemma, len(merges), gcases)

    edge = edge_tokenizer(pieces, merges, os.path.join(args.out, "edge_bpe.json"))
    einputs = edge_inputs() + fixed_inputs() + random_inputs(rng, 40)
    ecases = cases_for(edge, einputs, decode_id_cases(rng, edge, 20),
                       add_names | {"lstrip token", "unk fused emoji"})
    write_jsonl(os.path.join(args.out, "edge_bpe_cases.jsonl"), edge, len(merges), ecases)

    print("tokenizers %s, python %s, seed %d" % (tokenizers.__version__, sys.version.split()[0],
                                                  SEED))
    print("gemma_bpe.json: %d ids, %d merges; %d cases" % (
        gemma.get_vocab_size(), len(merges), len(gcases)))
    print("edge_bpe.json: %d ids; %d cases" % (edge.get_vocab_size(), len(ecases)))


if __name__ == "__main__":
    main()
