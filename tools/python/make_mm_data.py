#!/usr/bin/env python3
"""The reading and listening data of the multimodal proxy (issue 35; tools/python/
train_mm_proxy.py trains on it), deterministic from a seed.

    python3 tools/python/make_mm_data.py plan OUT --corpus .carry/corpus [--seed 0]
                                         [--preset proxy|tiny] [--speech-pieces N] [--diverse]
                                         (a CPU machine)
    python3 tools/python/make_mm_data.py plan OUT --preset ci     (no corpus: tools/make_mm_tiny.sh)
    python3 tools/python/make_mm_data.py speech OUT [--espeak PREFIX] [--jobs N]  (anywhere)
    python3 tools/python/make_mm_data.py media OUT [--fonts DIR ...] [--jobs N]   (anywhere)

Three steps because of what each needs and what the device tool carries (64 MiB in all, the
tracked tree ~42 of them). `plan` needs the corpus (11 MB), so it runs on the CPU machine
(tools/gpu/fetch_mm_carry.sh) and writes the items alone, gzipped (~2.4 MB), into OUT
(.carry/mmdata). `speech` and `media` run on the GPU machine (tools/gpu/run.sh mm_make, in a copy
of the plan under $WORK, $WORK/mm/data, which a later call's mm_run reads): the speech is
rendered there by espeak-ng from Debian's .debs carried in OUT/espeak/ (~1 MB:
tools/gpu/espeak_prefix.sh unpacks them into PREFIX, with English data only and a libpcaudio
without a device in place of the PulseAudio / ALSA / X11 chain espeak-ng links and never uses
when it writes files), the fonts come from three arch-independent .debs (tools/gpu/
fetch_debs.sh), and PIL, numpy are the image's.

`plan` (needs numpy and the corpus of tools/python/prepare_corpus.py):
  1. Sentences: the corpus's prose (train.txt for training, test.txt, other documents, for the
     held-out items) cut at ". ", kept when 4 to 14 words of plain letters (apostrophes and
     commas allowed) with no reST markup (`sentences`, the narrow cut); the train vocabulary is
     the words of the kept train sentences; a held-out sentence must not be a train sentence
     and its words must be in the train vocabulary (the model can know every word, never the
     sentence). The proxy preset's train speech reads from a wider cut of the same train.txt
     (`prose_sentences`: the prose of directive bodies and list items too, inline markup read
     as its text, cut at ". ", "? ", "! ", 4 to 20 words; 16,794 sentences against the narrow
     cut's 2,332, which it holds): with 2,332 the decoder learnt the train sentences' text by
     heart and did not listen (bench/NOTES.md "give the audio side enough distinct speech").
     Its held-out speech, its images and the tiny preset stay on the narrow cut (the same
     items as before; a held-out sentence is then no sentence of the wider cut either and its
     words are train words of both).
  2. Voices: espeak-ng English voices x variants; the train voices never use the held-out
     variant "f4"; held-out items alternate between a train voice (category
     "unseen_sentence") and en-us+f4 (category "held_out_voice"). Rate 140-200 wpm, pitch
     30-70, drawn per item; each item's SNR in dB and the noise seed `media` uses.
  3. OCR strings (no rendering yet): words of the train vocabulary (every 10th word only in
     held-out images), numbers (integers, decimals,
     grouped digits, dates, codes like "AB-1234"), and 2-4 word pieces of sentences; the
     held-out strings come from the held-out sentences and fresh numbers and are never a train
     string. Each item draws a font, size, colours, background, rotation and noise; the font
     family FreeSerif is held out (category "held_out_font" on half the held-out images).
  4. --speech-pieces N (default 0: none; any preset): N more train clips, after all the others
     (ids train_p00000..., category "piece"), each saying 1 to 4 consecutive words of a train
     clip's sentence as that sentence writes them (no comma or . ? ! at the piece's end),
     voice, rate, pitch, SNR and noise seed drawn as a train clip's, all from a generator of
     their own (rng_for(seed, "train", "piece", i)): the plan without them is the plan with
     them less its last N utterances, byte for byte. A piece whose words are a held-out
     answer's (audio or image, words_of) is drawn again. train_mm_proxy.py --a-pieces reads
     them (a share of each audio half-batch); without it the trainer leaves them out. The
     images' answers are 1-4 words and the decoder reads them; the speech's are sentences of
     4-20 words, which it ignores for its LM prior (issue 35): short clips make the audio
     decide the whole answer.
  5. --diverse (default off; proxy and tiny presets): the TRAIN items (clips, pieces, images)
     draw their variant from WIDE_VARIANTS (97: every carried espeak-ng variant that speaks
     clearly, f4 never) and their font from WIDE_FONTS (30: every TTF file of the three font
     .debs but FreeSerif's four) in place of VARIANTS (9) and FONTS (11 train files), with the
     same generator calls (an index drawn in a longer list); the held-out items keep the narrow
     lists and their own generators: their lines are those of the plan without it, byte for
     byte (the train lines' other draws could move, a bounded draw taking more than one word
     of the generator now and then; in the proxy plan none did: 15,808 of 16,000 clips changed
     voice and 19,325 of 20,000 images font, nothing else). Off, the plan is as before. The
     held-out voice / font were read at 0.787 / 0.956 char CER against ~0.23 / ~0.40 for the
     seen ones (session 39): 6 x 9 voices and 11 files did not teach the towers to generalise.
  OUT/speech.jsonl.gz and OUT/images.jsonl.gz list the items, OUT/data.json: seed, preset,
  counts (and speech_pieces, speech_piece_sentences, speech_pieces_redrawn when N > 0;
  diverse, train_variants, train_fonts with --diverse). `--preset ci` (tests/fixtures/mm-tiny)
  plans CI_STRINGS and CI_SENTENCES instead, in one font and one voice, clean, one canvas and
  one clip length (plan_ci), the test split the train items again.

`speech` (needs espeak-ng: the system's, or PREFIX/usr/bin/espeak-ng with its data under
PREFIX/usr/lib/x86_64-linux-gnu): each planned utterance -> espeak-ng WAV (22050 Hz) -> 16 kHz
(our windowed-sinc resampler, below), peak 0.7 -> OUT/speech/<split>/<id>.wav (16-bit PCM);
OUT/speech.jsonl: the plan's items with their "seconds"; data.json gains espeak-ng's version
and the seconds in all. A run that stopped part way resumes (the files it finds are kept).

`media` writes OUT/media/test/<id>.png and .wav (16 kHz mono 16-bit) and the manifests (the
training renders its items itself with render_image() and audio_samples(), in its data loader;
--train-files writes them too, with OUT/train.jsonl: {"id", "kind", "file", "text", "sha256"}):
  OUT/ocr_test.jsonl        `g4cu eval --task ocrbench` manifest of the held-out images
  OUT/asr_test.jsonl        `g4cu eval --task librispeech` manifest of the held-out audio
each media line with its sha256. Images are drawn at sizes the Gemma-4 image processor keeps as
they are at 70 soft tokens (a multiple of 48 on each side that fills the patch budget: no
resize, so HF's torchvision and PIL backends and g4cu see the same pixels). Every random choice
comes from numpy's PCG64 seeded with (seed, split, index): the same seed gives the same plan,
and with the same espeak-ng, fonts and PIL the same speech and media files, whatever --jobs.
"""
import argparse
import gzip
import hashlib
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import wave
from concurrent.futures import ProcessPoolExecutor

import numpy as np

PRESETS = {  # items per split
    # proxy train_audio 16,000: each clip a sentence of its own (of the 16,794 sentences of the
    # wide cut, WIDE_SPEECH); 3,000 before, of 2,332 sentences
    "proxy": dict(train_audio=16000, test_audio=80, train_images=20000, test_images=200),
    "tiny": dict(train_audio=24, test_audio=6, train_images=48, test_images=6),
}
QUESTION = "What is written in the image?"
VOICES = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan"]
VARIANTS = ["", "+m1", "+m2", "+m3", "+m4", "+f1", "+f2", "+f3", "+f5"]  # never +f4
HELD_OUT_VOICE = "en-us+f4"
# the presets whose train speech reads prose_sentences (the wide cut), not sentences; a set apart
# from PRESETS, whose dict data.json records as the counts (tiny's data.json stays as it was)
WIDE_SPEECH = {"proxy"}
FONTS = [  # (file under a fonts root, family); FreeSerif is the held-out family
    ("truetype/dejavu/DejaVuSans.ttf", "DejaVuSans"),
    ("truetype/dejavu/DejaVuSans-Bold.ttf", "DejaVuSans"),
    ("truetype/dejavu/DejaVuSansMono.ttf", "DejaVuSansMono"),
    ("truetype/dejavu/DejaVuSerif.ttf", "DejaVuSerif"),
    ("truetype/liberation/LiberationSans-Regular.ttf", "LiberationSans"),
    ("truetype/liberation/LiberationSans-Bold.ttf", "LiberationSans"),
    ("truetype/liberation/LiberationSerif-Regular.ttf", "LiberationSerif"),
    ("truetype/liberation/LiberationSerif-Italic.ttf", "LiberationSerif"),
    ("truetype/liberation/LiberationMono-Regular.ttf", "LiberationMono"),
    ("truetype/freefont/FreeSans.ttf", "FreeSans"),
    ("truetype/freefont/FreeMono.ttf", "FreeMono"),
    ("truetype/freefont/FreeSerif.ttf", "FreeSerif"),
    ("truetype/freefont/FreeSerifBold.ttf", "FreeSerif"),
]
HELD_OUT_FAMILY = "FreeSerif"
# --diverse (issue 35: the towers did not generalise to the held-out voice and font, char CER
# 0.787 against ~0.23 seen and 0.956 against ~0.40): the TRAIN items' variants and fonts, fixed
# here (sorted, not looked up at plan time), so that a plan is the same on any machine. The
# variants: "" and every file of the carried espeak-ng-data-en.tar.xz's voices/!v (espeak-ng
# 1.51, Debian 1.51+dfsg-10+deb12u2), each checked on a CPU machine (en-us+V saying a sentence
# of 3.75 s at 170 wpm: every one ran and gave 0.78-1.20 x the plain voice's length, its
# energy above -40 dB of the peak in 79-100% of 20 ms frames), except
#   f4                 the held-out variant (HELD_OUT_VOICE)
#   Mr serious         a space in its name (one argv word "en-us+Mr serious"; its settings are
#                      john's and Tweaky's, which are here)
#   RicishayMax, RicishayMax2, RicishayMax3
#                      an echo that fills the pauses: "stop go" with a 1 s word gap is above
#                      -30 dB of its peak in 33-46% of 20 ms frames, against 14-26% for every
#                      other variant and 22% for the plain voice (their echo smears the words)
# (whisper and whisperf, unvoiced, are kept: speech that a listener follows). 97 variants x 6
# VOICES = 582 train voices.
WIDE_VARIANTS = [
    "", "+Alex", "+Alicia", "+Andrea", "+Andy", "+Annie", "+AnxiousAndy", "+Demonic", "+Denis",
    "+Diogo", "+Gene", "+Gene2", "+Henrique", "+Hugo", "+Jacky", "+Lee", "+Marco", "+Mario",
    "+Michael", "+Mike", "+Nguyen", "+Storm", "+Tweaky", "+UniRobot", "+adam", "+anika",
    "+anikaRobot", "+announcer", "+antonio", "+aunty", "+belinda", "+benjamin", "+boris",
    "+caleb", "+croak", "+david", "+ed", "+edward", "+edward2", "+f1", "+f2", "+f3", "+f5",
    "+fast", "+grandma", "+grandpa", "+gustave", "+iven", "+iven2", "+iven3", "+iven4", "+john",
    "+kaukovalta", "+klatt", "+klatt2", "+klatt3", "+klatt4", "+klatt5", "+klatt6", "+linda",
    "+m1", "+m2", "+m3", "+m4", "+m5", "+m6", "+m7", "+m8", "+marcelo", "+max", "+michel",
    "+miguel", "+norbert", "+pablo", "+paul", "+pedro", "+quincy", "+rob", "+robert", "+robosoft",
    "+robosoft2", "+robosoft3", "+robosoft4", "+robosoft5", "+robosoft6", "+robosoft7",
    "+robosoft8", "+sandro", "+shelby", "+steph", "+steph2", "+steph3", "+travis", "+victor",
    "+whisper", "+whisperf", "+zac",
]
# the fonts: every TTF file of the three carried .debs (fonts-dejavu-core 2.37-6,
# fonts-liberation 1.07.4-11, fonts-freefont-ttf 20120503-10: 34 files) but the held-out
# family's four (FreeSerif, Bold, Italic, BoldItalic): 30, each checked to draw every character
# the plan's strings use (digits, letters, "-", "/", ",", ".", "'": a glyph other than the
# font's missing-glyph box; tests/test_mm_data.sh checks it again where PIL and the fonts are)
WIDE_FONTS = [(f"truetype/{d}/{f}.ttf", fam) for d, f, fam in (
    ("dejavu", "DejaVuSans-Bold", "DejaVuSans"), ("dejavu", "DejaVuSans", "DejaVuSans"),
    ("dejavu", "DejaVuSansMono-Bold", "DejaVuSansMono"),
    ("dejavu", "DejaVuSansMono", "DejaVuSansMono"),
    ("dejavu", "DejaVuSerif-Bold", "DejaVuSerif"), ("dejavu", "DejaVuSerif", "DejaVuSerif"),
    ("freefont", "FreeMono", "FreeMono"), ("freefont", "FreeMonoBold", "FreeMono"),
    ("freefont", "FreeMonoBoldOblique", "FreeMono"), ("freefont", "FreeMonoOblique", "FreeMono"),
    ("freefont", "FreeSans", "FreeSans"), ("freefont", "FreeSansBold", "FreeSans"),
    ("freefont", "FreeSansBoldOblique", "FreeSans"), ("freefont", "FreeSansOblique", "FreeSans"),
    ("liberation", "LiberationMono-Bold", "LiberationMono"),
    ("liberation", "LiberationMono-BoldItalic", "LiberationMono"),
    ("liberation", "LiberationMono-Italic", "LiberationMono"),
    ("liberation", "LiberationMono-Regular", "LiberationMono"),
    ("liberation", "LiberationSans-Bold", "LiberationSans"),
    ("liberation", "LiberationSans-BoldItalic", "LiberationSans"),
    ("liberation", "LiberationSans-Italic", "LiberationSans"),
    ("liberation", "LiberationSans-Regular", "LiberationSans"),
    ("liberation", "LiberationSansNarrow-Bold", "LiberationSansNarrow"),
    ("liberation", "LiberationSansNarrow-BoldItalic", "LiberationSansNarrow"),
    ("liberation", "LiberationSansNarrow-Italic", "LiberationSansNarrow"),
    ("liberation", "LiberationSansNarrow-Regular", "LiberationSansNarrow"),
    ("liberation", "LiberationSerif-Bold", "LiberationSerif"),
    ("liberation", "LiberationSerif-BoldItalic", "LiberationSerif"),
    ("liberation", "LiberationSerif-Italic", "LiberationSerif"),
    ("liberation", "LiberationSerif-Regular", "LiberationSerif"))]
SPLIT_CODE = {"train": 1, "test": 2}
KIND_CODE = {"audio": 1, "image": 2, "plan": 3, "piece": 4}


def rng_for(seed, split, kind, index):
    return np.random.default_rng([seed, SPLIT_CODE[split], KIND_CODE[kind], index])


# --- sentences and strings ------------------------------------------------------------------
WORD = re.compile(r"^[A-Za-z]+(?:'[a-z]+)?,?$")


def sentences(text):
    out = []
    for para in text.split("\n\n"):
        if para.startswith((" ", "..", "*", "-", "=", "#", ">")):
            continue  # code, directives, lists, titles
        flat = " ".join(para.split())
        for s in re.split(r"(?<=\.) ", flat):
            if not s.endswith(".") or not s[:1].isupper():
                continue
            words = s[:-1].split()
            if 4 <= len(words) <= 14 and all(WORD.match(w) for w in words):
                out.append(s)
    return list(dict.fromkeys(out))  # first occurrence order, no repeats


# prose_sentences' reST: a directive whose indented body is code, not prose
CODE_DIRECTIVE = re.compile(r"\.\. (code-block|code|sourcecode|doctest|testcode|testoutput|"
                            r"testsetup|testcleanup|productionlist|literalinclude|highlight)::")
ROLE = re.compile(r":[A-Za-z][\w:+.-]*:`(?:([^`<]*?)\s*<[^`>]*>|[~!]?([^`]*))`")  # :func:`x`
LINK = re.compile(r"`([^`<]+?)(?:\s*<[^`>]*>)?`_{0,2}")  # `text <url>`_, `text`_, `text`
EMPHASIS = re.compile(r"(?<![\w*])\*{1,2}([^*\s][^*]*?)\*{1,2}(?![\w*])")  # *x*, **x**


def plain_text(s):
    """A line of reST prose as read aloud: each inline markup replaced by its text (a role by
    its title or target without ~ or !, ``literal`` and `link`_ by their text, *emphasis* and
    **strong** by theirs)."""
    s = ROLE.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), s)
    s = re.sub(r"``([^`]+)``", r"\1", s)
    return EMPHASIS.sub(r"\1", LINK.sub(r"\1", s))


def prose_sentences(text, lo=4, hi=20):
    """The wide cut (the proxy's train speech): sentences() from more of the same prose. Of
    train.txt, sentences() keeps 2,332 sentences, plan() with this one 16,794 (bench/NOTES.md
    "give the audio side enough distinct speech": each widening's gain). Beside sentences()'
    paragraphs:
      - indented paragraphs: the bodies of directives (`.. function::`, `.. class::`,
        `.. note::`: most of the library reference's prose is indented under one), but not
        literal blocks (the paragraphs indented deeper than one that ends in "::" or is a code
        directive, CODE_DIRECTIVE);
      - list items ("* ", "- ", "#. "), without their bullet;
      - inline markup read as its text (plain_text): "Return ``True`` if ..." is a sentence;
      - cut at "? " and "! " too; hi words 20, not 14 (at 140 words a minute 8.6 s of speech).
    Still skipped: directive, title, table and doctest lines. The same word rule (WORD) after
    the markup's removal, so no code or symbol is spoken."""
    out = []
    code_at = None  # the indentation of the paragraph that opened a literal block
    for para in text.split("\n\n"):
        if not para.strip():
            continue
        ind = len(para) - len(para.lstrip(" "))
        if code_at is not None:
            if ind > code_at:
                continue
            code_at = None
        body = para.strip()
        if body.endswith("::") or CODE_DIRECTIVE.match(body):
            code_at = ind
        if body.startswith((".", "=", ">", "+", "|")):
            continue  # directives and comments, titles and simple tables, doctest, grid tables
        if body.startswith(("*", "-", "#")):
            m = re.match(r"(?:[*-]|#\.)\s+", body)
            if not m:
                continue  # **strong** or a rule or a title, not a list item
            body = body[m.end():]
        flat = plain_text(" ".join(body.split()))
        for s in re.split(r"(?<=[.?!]) ", flat):
            if not s or s[-1] not in ".?!" or not s[:1].isupper():
                continue
            words = s[:-1].split()
            if lo <= len(words) <= hi and all(WORD.match(w) for w in words):
                out.append(s)
    return list(dict.fromkeys(out))


def words_of(s):
    return [w.strip(",.").lower() for w in s.split()]


PIECE = "piece"  # --speech-pieces' clips' category


def train_parts(items):
    """The plan's train items (split "train") in two lists: (whole, pieces), pieces being the
    --speech-pieces clips (category PIECE), which only train_mm_proxy.py --a-pieces reads (its
    own stream), whole the rest (train_split)."""
    whole, pieces = [], []
    for i in items:
        if i["split"] == "train":
            (pieces if i.get("category") == PIECE else whole).append(i)
    return whole, pieces


def train_split(items):
    """The plan's train items as the trainer reads them: train_parts' whole items, so a plan
    with pieces gives every use but --a-pieces (the tokenizer, the LM phase, the whole-clip
    stream, mm_warm_timing's rows, run.sh's calibration sentences) the items of the plan
    without them."""
    return train_parts(items)[0]


def piece_of(rr, sents, held, tries=1000):
    """--speech-pieces: 1 to 4 consecutive words of one of sents (drawn from rr), written as the
    sentence writes them (its casing, its commas inside) without the punctuation that ends the
    piece (a comma, the sentence's . ? !), as make_string cuts the images' pieces. Drawn again
    while its words (words_of) are a held-out answer's (held: a set of words_of tuples): a
    4-word held-out sentence inside a longer train sentence, a held-out image's word. Returns
    the text and the draws refused."""
    for k in range(tries):
        words = sents[rr.integers(0, len(sents))].split()
        n = min(int(rr.integers(1, 5)), len(words))
        i = int(rr.integers(0, len(words) - n + 1))
        text = " ".join(words[i:i + n]).rstrip(",.?!")
        if tuple(words_of(text)) not in held:
            return text, k
    sys.exit(f"make_mm_data: --speech-pieces: {tries} draws in a row were held-out answers")


def held_answers(items):
    """piece_of's `held`: the words (words_of) of every held-out answer, audio and image."""
    return {tuple(words_of(i["text"])) for k in ("audio", "image") for i in items[k]
            if i["split"] == "test"}


def plan_pieces(seed, count, sents, held, draws):
    """--speech-pieces N: N train clips (ids train_p00000..., category PIECE) that say a short
    piece of a train speech sentence (piece_of), each from a generator of its own,
    rng_for(seed, "train", "piece", i): no other item's draws move, and the plan without them
    is the plan with them less these items (they come last). draws(rr): the clip's voice,
    rate, pitch, snr_db, noise_seed (and more), drawn after the text as the train clips'.
    Returns the items and the count of pieces drawn again (piece_of)."""
    out, redrawn = [], 0
    for i in range(count):
        rr = rng_for(seed, "train", "piece", i)
        text, k = piece_of(rr, sents, held)
        redrawn += k
        out.append(dict(id=f"train_p{i:05d}", split="train", text=text, category=PIECE,
                        **draws(rr)))
    return out, redrawn


def make_number(rng):
    k = rng.integers(0, 5)
    if k == 0:
        return str(int(rng.integers(0, 100000)))
    if k == 1:
        return f"{rng.integers(0, 1000)}.{rng.integers(0, 100):02d}"
    if k == 2:
        return f"{rng.integers(1, 1000)},{rng.integers(0, 1000):03d}"
    if k == 3:
        return f"{rng.integers(1, 29):02d}/{rng.integers(1, 13):02d}/{rng.integers(1950, 2030)}"
    letters = "".join(chr(65 + int(c)) for c in rng.integers(0, 26, 2))
    return f"{letters}-{rng.integers(100, 10000)}"


def make_string(rng, sents, vocab):
    k = rng.random()
    if k < 0.35:
        w = vocab[rng.integers(0, len(vocab))]
        return w.capitalize() if rng.random() < 0.3 else w
    if k < 0.6:
        return make_number(rng)
    words = sents[rng.integers(0, len(sents))].rstrip(".").split()
    n = int(rng.integers(2, 5))
    i = int(rng.integers(0, max(1, len(words) - n + 1)))
    return " ".join(words[i:i + n]).rstrip(",")


def image_style(rng, held_font, fonts=FONTS):
    fam_ok = [f for f in fonts if (f[1] == HELD_OUT_FAMILY) == held_font]
    font = fam_ok[rng.integers(0, len(fam_ok))][0]
    dark = rng.random() < 0.75  # dark text on a light background, else the reverse
    lo, hi = (0, 90), (170, 256)
    fg = rng.integers(*(lo if dark else hi), 3).tolist()
    bg = rng.integers(*(hi if dark else lo), 3).tolist()
    bg2 = np.clip(np.array(bg) + rng.integers(-40, 41, 3), 0, 255).tolist()
    return dict(font=font, size_frac=float(rng.uniform(0.45, 0.8)), fg=fg, bg=bg,
                bg2=bg2 if rng.random() < 0.5 else bg, angle=float(rng.uniform(-4, 4)),
                noise=float(rng.uniform(0, 12)), shape=int(rng.integers(0, 1 << 30)))


def clip_draws(rr, variants, voice=None):
    """A clip's draws from rr after its text, in this order: its voice (one of VOICES + one of
    variants; none drawn when `voice` is given: the held-out voice), rate, pitch, SNR and the
    noise seed `media` uses. The sentence clips' and --speech-pieces' clips' (one rule, so the
    pieces sound like the train clips)."""
    if voice is None:
        voice = VOICES[rr.integers(0, len(VOICES))] + variants[rr.integers(0, len(variants))]
    return dict(voice=voice, rate=int(rr.integers(140, 201)), pitch=int(rr.integers(30, 71)),
                snr_db=float(rr.uniform(15, 40)), noise_seed=int(rr.integers(0, 1 << 31)))


def plan(args, corpus):
    """Every item's text and draws (no media), deterministic from the seed."""
    n = dict(PRESETS[args.preset])
    tr_text = open(os.path.join(corpus, "train.txt"), encoding="utf-8").read()
    tr_s = sentences(tr_text)
    te_s = sentences(open(os.path.join(corpus, "test.txt"), encoding="utf-8").read())
    vocab = sorted({w for s in tr_s for w in words_of(s)})
    wide = args.preset in WIDE_SPEECH
    # the train speech's sentences: the narrow cut's, then (WIDE_SPEECH) the wide cut's others;
    # a superset of tr_s, so its vocabulary holds vocab
    a_s = list(dict.fromkeys(tr_s + prose_sentences(tr_text))) if wide else tr_s
    tr_set = set(tr_s)
    te_s = [s for s in te_s if s not in tr_set and all(w in set(vocab) for w in words_of(s))]
    r = rng_for(args.seed, "train", "plan", 0)
    tr_order = r.permutation(len(tr_s))
    te_order = r.permutation(len(te_s))
    # the wide cut's order from a generator of its own: te_order (the held-out speech) and the
    # images' draws stay those of the narrow plan
    a_order = rng_for(args.seed, "train", "plan", 1).permutation(len(a_s)) if wide else tr_order
    if len(te_s) < n["test_audio"]:
        sys.exit(f"make_mm_data: {len(te_s)} held-out sentences < {n['test_audio']}")
    # the held-out speech: te_s in te_order (the narrow plan's), except that a sentence of the
    # train speech (the wide cut found it in train.txt) gives its place to the next of that
    # order that is not one; the other items keep their sentence, voice and draws
    te_seq = [te_s[j] for j in te_order]
    a_set = set(a_s)
    spare = [s for s in te_seq[n["test_audio"]:] if s not in a_set]
    te_a = []
    for s in te_seq[:n["test_audio"]]:
        if s in a_set and not spare:
            sys.exit(f"make_mm_data: {sum(s not in a_set for s in te_seq)} held-out sentences "
                     f"outside the train speech < {n['test_audio']}")
        te_a.append(spare.pop(0) if s in a_set else s)
    # every 10th word (alphabetical) is never a single-word train image
    vocab_words = [w for w in vocab if len(w) >= 3]
    words = {"train": [w for i, w in enumerate(vocab_words) if i % 10],
             "test": vocab_words[::10]}
    items = {"audio": [], "image": []}
    diverse = getattr(args, "diverse", False)
    tr_variants, tr_fonts = (WIDE_VARIANTS, WIDE_FONTS) if diverse else (VARIANTS, FONTS)
    for split, count, order, pool in (("train", n["train_audio"], a_order, a_s),
                                      ("test", n["test_audio"], range(len(te_a)), te_a)):
        for i in range(count):
            rr = rng_for(args.seed, split, "audio", i)
            text = pool[order[i % len(order)]]
            if split == "test" and i % 2 == 1:
                voice, cat = HELD_OUT_VOICE, "held_out_voice"
            else:  # (the held-out items draw from the narrow lists, --diverse or not)
                voice, cat = None, "unseen_sentence" if split == "test" else "train"
            d = clip_draws(rr, tr_variants if split == "train" else VARIANTS, voice)
            items["audio"].append(dict(id=f"{split}_a{i:05d}", split=split, text=text,
                                       voice=d.pop("voice"), category=cat, **d))
    train_strings = set()
    for split, count in (("train", n["train_images"]), ("test", n["test_images"])):
        sents = tr_s if split == "train" else te_s
        for i in range(count):
            rr = rng_for(args.seed, split, "image", i)
            while True:
                s = make_string(rr, sents, words[split])
                if split == "train" or s not in train_strings:
                    break
            if split == "train":
                train_strings.add(s)
            held = split == "test" and i % 2 == 1
            items["image"].append(dict(
                id=f"{split}_i{i:05d}", split=split, text=s,
                category="held_out_font" if held else ("unseen_string" if split == "test"
                                                        else "train"),
                **image_style(rr, held, tr_fonts if split == "train" else FONTS)))
    stats = dict(train_sentences=len(tr_s), test_sentences=len(te_s), vocab=len(vocab))
    pieces = getattr(args, "speech_pieces", 0)
    if pieces:  # (last: every item above is the plan's without them)
        said = list(dict.fromkeys(i["text"] for i in items["audio"] if i["split"] == "train"))
        more, redrawn = plan_pieces(args.seed, pieces, said, held_answers(items),
                                    lambda rr: clip_draws(rr, tr_variants))
        items["audio"] += more
        stats.update(speech_pieces=pieces, speech_piece_sentences=len(said),
                     speech_pieces_redrawn=redrawn)
    if diverse:  # (only here: a plan without it keeps its data.json)
        stats.update(diverse=True, train_variants=len(tr_variants), train_fonts=len(tr_fonts))
    if wide:  # (only here: the narrow presets' data.json stays as it was)
        stats.update(speech_train_sentences=len(a_s),
                     speech_test_replaced=sum(s in a_set for s in te_seq[:n["test_audio"]]),
                     speech_vocab=len({w for s in a_s for w in words_of(s)}))
    return items, stats


# The CI fixture's items (--preset ci, tests/fixtures/mm-tiny): a handful to memorise, not to
# generalise, so no corpus: short strings in one font, short sentences in one voice, clean (no
# rotation, noise or gradient; no added noise in the speech). Every image on one canvas and
# every clip padded to one length, so that the prompts are the same length: the model can tell
# the items apart by their pixels and samples only, not by how many soft tokens they take. The
# held-out split repeats the train items under test ids: `g4cu eval` scores the memorised items
# themselves.
CI_STRINGS = ["cat", "42", "blue sky", "AB-1234", "river", "7.50", "open door", "Hello"]
CI_SENTENCES = ["The cat sat down.", "Open the red door.", "We walk to the river.",
                "Birds sing in the morning.", "She reads a long book.", "The sun is warm today.",
                "Put the cup on the table.", "He plays the old piano."]
CI_FONT = "truetype/dejavu/DejaVuSans.ttf"
CI_VOICE = "en-us"
CI_CANVAS = [192, 816]  # (h, w): one of fixed_sizes(), 68 soft tokens
CI_SAMPLES = 32000  # 2 s at 16 kHz: the longest sentence (1.82 s) and some silence


def plan_ci(seed, pieces=0):
    items = {"audio": [], "image": []}
    for split in SPLIT_CODE:
        for i, text in enumerate(CI_SENTENCES):
            rr = rng_for(seed, "train", "audio", i)  # the train draws: test = train
            items["audio"].append(dict(
                id=f"{split}_a{i:05d}", split=split, text=text, voice=CI_VOICE,
                category="memorised", rate=160, pitch=50, snr_db=None,
                noise_seed=int(rr.integers(0, 1 << 31)), samples=CI_SAMPLES))
        for i, text in enumerate(CI_STRINGS):
            rr = rng_for(seed, "train", "image", i)
            items["image"].append(dict(
                id=f"{split}_i{i:05d}", split=split, text=text, category="memorised",
                font=CI_FONT, size_frac=0.6, fg=[0, 0, 0], bg=[255, 255, 255],
                bg2=[255, 255, 255], angle=0.0, noise=0.0, shape=int(rr.integers(0, 1 << 30)),
                canvas=CI_CANVAS))
    stats = dict(strings=len(CI_STRINGS), sentences=len(CI_SENTENCES))
    if pieces:  # (last, as plan()'s; the held-out answers are the train items' texts)
        more, redrawn = plan_pieces(seed, pieces, CI_SENTENCES, held_answers(items),
                                    lambda rr: dict(voice=CI_VOICE, rate=160, pitch=50,
                                                    snr_db=None,
                                                    noise_seed=int(rr.integers(0, 1 << 31)),
                                                    samples=CI_SAMPLES))
        items["audio"] += more
        stats.update(speech_pieces=pieces, speech_pieces_redrawn=redrawn)
    return items, stats


# --- speech ---------------------------------------------------------------------------------
def resample(x, src, dst, taps=64):
    """Windowed-sinc (Blackman window) polyphase resampling of float x from src Hz to dst Hz,
    cut-off at 0.95 x the lower Nyquist frequency. Plain numpy, so the same everywhere. The
    outputs of one residue r mod up share a phase and step `down` inputs apart: each residue is
    one product of a strided view of the input (no copy, no index array) with its phase's taps
    (40 ms for 5 s at 22050 -> 16000 Hz as one gathered [outputs x taps] array, 3 ms so)."""
    g = math.gcd(src, dst)
    up, down = dst // g, src // g
    n_out = (len(x) * up) // down
    cut = 0.95 * min(1.0, up / down)  # relative to the input Nyquist
    k = np.arange(-taps // 2 + 1, taps // 2 + 1)
    # output n sits at input position n * down / up = base + phase / up
    d = (np.arange(up)[:, None] / up) - k[None, :]  # [phase, tap]: distance to each tap
    win = 0.42 + 0.5 * np.cos(np.pi * d / (taps / 2)) + 0.08 * np.cos(2 * np.pi * d / (taps / 2))
    bank = cut * np.sinc(cut * d) * np.where(np.abs(d) < taps / 2, win, 0.0)
    xp = np.concatenate([np.zeros(taps), np.asarray(x, np.float64), np.zeros(taps)])
    y = np.empty(n_out)
    step = xp.strides[0]
    for r in range(min(up, n_out)):
        # output n = r + up j reads xp[base(n) + k + taps], base(n) = (r down) // up + down j:
        # at most base(n_out - 1) + taps / 2 + taps < len(x) + 2 taps, inside xp
        first = (r * down) // up + int(k[0]) + taps
        rows = (n_out - r + up - 1) // up
        view = np.lib.stride_tricks.as_strided(xp[first:], shape=(rows, taps),
                                               strides=(down * step, step), writeable=False)
        y[r::up] = view @ bank[(r * down) % up]
    return y


SPEED_STEP = 160  # speed factors are multiples of 1/160: 16 kHz x factor a multiple of 100 Hz


def speed_perturb(x, factor):
    """x (16 kHz) played `factor` times as fast, tempo and pitch together (Kaldi's and sox's
    speed perturbation): x taken as sampled at 16000 x factor Hz, resampled to 16 kHz, so
    len(x) / factor samples. factor must be a multiple of 1/SPEED_STEP, which keeps resample's
    polyphase bank at 160 phases or fewer; factor 1 gives x itself."""
    src = factor * 16000
    if factor <= 0 or abs(src - round(src / 100) * 100) > 1e-6:
        raise SystemExit(f"make_mm_data: speed factor {factor}: expected a positive multiple "
                         f"of 1/{SPEED_STEP}")
    src = int(round(src))
    return x if src == 16000 else resample(x, src, 16000)


def font_roots(given=None):
    """The folders the renderer searches for fonts: the given --fonts roots, else the prefix's
    Debian fonts ($G4_PREFIX, tools/gpu/env.sh unpacks them there) and the system's."""
    prefix = os.environ.get("G4_PREFIX", "/tmp/g4prefix")
    return given or [os.path.join(prefix, "usr/share/fonts"), "/usr/share/fonts"]


def read_jsonl(path):
    """The items of PATH (gzipped when it ends in .gz), else of PATH.gz (the plan as carried)."""
    if not path.endswith(".gz") and os.path.exists(path):
        return [json.loads(x) for x in open(path, encoding="utf-8")]
    with gzip.open(path if path.endswith(".gz") else path + ".gz", "rt", encoding="utf-8") as f:
        return [json.loads(x) for x in f]


def write_jsonl(path, items):
    """Items one a line; PATH ending in .gz is gzipped without a name or time in its header,
    so the same items give the same bytes."""
    text = "".join(json.dumps(it) + "\n" for it in items).encode("utf-8")
    if path.endswith(".gz"):
        with open(path, "wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as f:
            f.write(text)
    else:
        open(path, "wb").write(text)


def espeak_command(prefix):
    """espeak-ng's argv head and environment: the system's, or the one unpacked into PREFIX by
    tools/gpu/espeak_prefix.sh (its libraries and English data under usr/lib/x86_64-linux-gnu)."""
    if not prefix:
        return ["espeak-ng"], None
    lib = os.path.join(prefix, "usr/lib/x86_64-linux-gnu")
    exe = os.path.join(prefix, "usr/bin/espeak-ng")
    if not os.path.exists(os.path.join(lib, "espeak-ng-data", "en_dict")) or not os.access(exe, os.X_OK):
        raise SystemExit(f"make_mm_data: no espeak-ng or no English data under {prefix} "
                         "(tools/gpu/espeak_prefix.sh)")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH")
                                    else "")
    # --version ignores --path: without this, data.json's espeak_ng names (and espeak-ng's stderr
    # fails to read) the system's /usr/lib/x86_64-linux-gnu/espeak-ng-data, not the prefix's
    env["ESPEAK_DATA_PATH"] = lib
    return [exe, f"--path={lib}"], env


def render_speech(job):
    item, out_dir, exe, env = job  # exe, env: espeak_command's, resolved once by cmd_speech
    path = os.path.join(out_dir, item["split"], item["id"] + ".wav")
    if os.path.exists(path):  # an earlier, interrupted run's (the same samples)
        with wave.open(path) as w:
            return item["id"], w.getnframes() / 16000
    with tempfile.NamedTemporaryFile(suffix=".wav") as tmp:
        subprocess.run(exe + ["-v", item["voice"], "-s", str(item["rate"]), "-p",
                              str(item["pitch"]), "-w", tmp.name, item["text"]], check=True,
                       env=env)
        with wave.open(tmp.name) as w:
            rate = w.getframerate()
            x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64)
    if len(x) == 0:
        raise SystemExit(f"make_mm_data: espeak-ng gave no samples for {item['id']}")
    y = resample(x / 32768.0, rate, 16000)
    y = y / max(1e-6, np.abs(y).max()) * 0.7
    pcm = np.clip(np.rint(y * 32767), -32768, 32767).astype("<i2")
    with wave.open(path + ".tmp", "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    os.replace(path + ".tmp", path)
    return item["id"], len(pcm) / 16000


def cmd_plan(args):
    if args.diverse and args.preset == "ci":
        raise SystemExit("make_mm_data: --diverse: the ci preset has one voice and one font")
    if args.speech_pieces < 0:
        raise SystemExit(f"make_mm_data: --speech-pieces {args.speech_pieces}: expected 0 or more")
    items, stats = (plan_ci(args.seed, args.speech_pieces) if args.preset == "ci" else
                    plan(args, args.corpus))
    write_jsonl(os.path.join(args.out, "speech.jsonl.gz"), items["audio"])
    write_jsonl(os.path.join(args.out, "images.jsonl.gz"), items["image"])
    json.dump(dict(seed=args.seed, preset=args.preset, counts=PRESETS.get(args.preset), **stats),
              open(os.path.join(args.out, "data.json"), "w"), indent=1)
    print(f"make_mm_data: planned {len(items['audio'])} utterances, {len(items['image'])} "
          f"images (seed {args.seed}, preset {args.preset}); {stats}")


def cmd_speech(args):
    audio = read_jsonl(os.path.join(args.out, "speech.jsonl.gz"))
    exe, env = espeak_command(args.espeak)
    ver = subprocess.run(exe + ["--version"], capture_output=True, text=True, env=env,
                         check=True).stdout.strip()
    # every variant the plan names is a file of the data espeak-ng reads (an unknown variant
    # would be spoken in the plain voice, saying nothing)
    data = re.search(r"Data at: (\S+)", ver)
    for v in sorted({it["voice"].split("+", 1)[1] for it in audio if "+" in it["voice"]}):
        if data and not os.path.exists(os.path.join(data.group(1), "voices", "!v", v)):
            raise SystemExit(f"make_mm_data: speech: variant {v} is not in "
                             f"{data.group(1)}/voices/!v (the carried espeak-ng data)")
    sp = os.path.join(args.out, "speech")
    for s in SPLIT_CODE:
        os.makedirs(os.path.join(sp, s), exist_ok=True)
    jobs = [(it, sp, exe, env) for it in audio]
    secs = {}
    with ProcessPoolExecutor(args.jobs) as ex:
        for k, (i, d) in enumerate(ex.map(render_speech, jobs, chunksize=16)):
            secs[i] = d
            if k % 500 == 0:
                print(f"make_mm_data: speech {k + 1}/{len(jobs)}", flush=True)
    for it in audio:
        it["seconds"] = round(secs[it["id"]], 3)
    write_jsonl(os.path.join(args.out, "speech.jsonl"), audio)
    total = sum(secs.values())
    info = json.load(open(os.path.join(args.out, "data.json")))
    info.update(espeak_ng=ver, speech_seconds=round(total, 1))
    json.dump(info, open(os.path.join(args.out, "data.json"), "w"), indent=1)
    print(f"make_mm_data: {len(jobs)} utterances, {total:.0f} s of speech ({ver.split('  ')[0]})")


# --- media ----------------------------------------------------------------------------------
def fixed_sizes(max_soft_tokens=70, patch=16, pool=3):
    """(h, w) that Gemma4ImageProcessor keeps unresized at this budget (its
    get_aspect_ratio_preserving_size is the identity there), aspect 1 to 12."""
    side, budget = patch * pool, max_soft_tokens * pool * pool * patch * patch
    out = []
    for h in range(side, 1000, side):
        for w in range(h, 12 * h + 1, side):
            if h * w > budget:
                break
            f = math.sqrt(budget / (h * w))
            if (math.floor(f * h / side) * side, math.floor(f * w / side) * side) == (h, w):
                out.append((h, w))
    return out


def font_path(font, fonts_roots):
    """The file of a plan's font (a path under a fonts root) in the first root that has it;
    none: one line naming the font and the roots."""
    path = next((os.path.join(r, font) for r in fonts_roots
                 if os.path.exists(os.path.join(r, font))), None)
    if path is None:
        raise SystemExit(f"make_mm_data: font {font} not under {fonts_roots}")
    return path


def render_image(item, fonts_roots):
    from PIL import Image, ImageDraw, ImageFont

    sizes = fixed_sizes()
    path = font_path(item["font"], fonts_roots)
    r = np.random.default_rng(item["shape"])
    # the canvas whose aspect is nearest the text's at a height-filling size
    probe = ImageFont.truetype(path, 100)
    x0, y0, x1, y1 = probe.getbbox(item["text"])
    aspect = (x1 - x0) / max(1, y1 - y0) / item["size_frac"] * 1.15
    h, w = item.get("canvas") or min(sizes, key=lambda s: abs(math.log(s[1] / s[0] /
                                                                   max(1.0, aspect))))
    if (h, w) not in sizes:
        raise SystemExit(f"make_mm_data: {item['id']}: canvas {h}x{w} is not one of {sizes}")
    px = max(8, int(100 * min(h * item["size_frac"] / max(1, y1 - y0),
                              w * 0.9 / max(1, x1 - x0))))
    font = ImageFont.truetype(path, px)
    bg, bg2 = np.array(item["bg"], np.float64), np.array(item["bg2"], np.float64)
    ramp = np.linspace(0, 1, w)[None, :, None]
    canvas = Image.fromarray((bg * (1 - ramp) + bg2 * ramp).repeat(h, 0).astype(np.uint8))
    layer = Image.new("L", (w, h), 0)
    d = ImageDraw.Draw(layer)
    bx0, by0, bx1, by1 = d.textbbox((0, 0), item["text"], font=font)
    ox = (w - (bx1 - bx0)) / 2 - bx0 + r.uniform(-0.04, 0.04) * w
    oy = (h - (by1 - by0)) / 2 - by0 + r.uniform(-0.06, 0.06) * h
    d.text((ox, oy), item["text"], fill=255, font=font)
    layer = layer.rotate(item["angle"], resample=Image.BILINEAR)
    canvas.paste(Image.new("RGB", (w, h), tuple(item["fg"])), (0, 0), layer)
    a = np.asarray(canvas).astype(np.float64)
    a += r.normal(0, item["noise"], a.shape)
    return Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8))


def write_image(job):
    item, out, fonts_roots = job
    path = os.path.join(out, "media", item["split"], item["id"] + ".png")
    render_image(item, fonts_roots).save(path, optimize=False, compress_level=6)
    return item["id"], sha_of(path)


def audio_samples(item, data_dir):
    """The item's int16 samples at 16 kHz: the clean speech (`speech`; sped up or slowed down
    when the item has a "speed", speed_perturb: the trainer's renderings), silence before and
    after, white noise at the item's SNR, a gain (what the WAV file holds)."""
    with wave.open(os.path.join(data_dir, "speech", item["split"], item["id"] + ".wav")) as w:
        if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (16000, 1, 2):
            raise SystemExit(f"make_mm_data: {item['id']}: not 16 kHz mono 16-bit")
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2") / 32768.0
    if "speed" in item:
        x = speed_perturb(x, item["speed"])
    r = np.random.default_rng(item["noise_seed"])
    lead, tail = r.integers(0, 4800, 2)  # up to 0.3 s of silence before and after
    if item.get("samples"):  # (--preset ci) speech from sample 0, silence after to this length
        lead, tail = 0, item["samples"] - len(x)
        if tail < 0:
            raise SystemExit(f"make_mm_data: {item['id']}: {lead + len(x)} samples > "
                             f"{item['samples']}")
    x = np.concatenate([np.zeros(lead), x, np.zeros(tail)])
    if item["snr_db"] is not None:  # None: clean (--preset ci)
        p = np.mean(x ** 2)
        x = x + r.normal(0, math.sqrt(p / 10 ** (item["snr_db"] / 10)), len(x))
    x = x * r.uniform(0.5, 1.0) / max(1e-6, np.abs(x).max())
    return np.clip(np.rint(x * 32767), -32768, 32767).astype("<i2")


def write_audio(job):
    item, out = job
    path = os.path.join(out, "media", item["split"], item["id"] + ".wav")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(audio_samples(item, out).tobytes())
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return item["id"], sha_of(path)


def sha_of(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def cmd_media(args):
    roots = font_roots(args.fonts)
    if not os.path.exists(os.path.join(args.out, "speech.jsonl")):
        raise SystemExit(f"make_mm_data: no {args.out}/speech.jsonl: run the speech step first")
    audio = read_jsonl(os.path.join(args.out, "speech.jsonl"))
    images = read_jsonl(os.path.join(args.out, "images.jsonl"))
    # every font of the plan, train items' too (the trainer renders them): found, before work
    for f in sorted({it["font"] for it in images}):
        font_path(f, roots)
    for s in SPLIT_CODE:
        os.makedirs(os.path.join(args.out, "media", s), exist_ok=True)
    sha = {}
    pick = ("train", "test") if args.train_files else ("test",)
    with ProcessPoolExecutor(args.jobs) as ex:
        for i, h in ex.map(write_image, [(it, args.out, roots) for it in images
                                         if it["split"] in pick], chunksize=8):
            sha[i] = h
        for i, h in ex.map(write_audio, [(it, args.out) for it in audio if it["split"] in pick],
                           chunksize=8):
            sha[i] = h
    if args.train_files:
        with open(os.path.join(args.out, "train.jsonl"), "w") as f:
            for kind, its, ext in (("image", images, "png"), ("audio", audio, "wav")):
                for it in its:
                    if it["split"] == "train":
                        f.write(json.dumps(dict(id=it["id"], kind=kind,
                                                file=f"media/train/{it['id']}.{ext}",
                                                text=it["text"], sha256=sha[it["id"]])) + "\n")
    with open(os.path.join(args.out, "ocr_test.jsonl"), "w") as f:
        for it in images:
            if it["split"] == "test":
                f.write(json.dumps(dict(id=it["id"], image=f"media/test/{it['id']}.png",
                                        question=QUESTION, answers=[it["text"]],
                                        category=it["category"], sha256=sha[it["id"]])) + "\n")
    with open(os.path.join(args.out, "asr_test.jsonl"), "w") as f:
        for it in audio:
            if it["split"] == "test":
                f.write(json.dumps(dict(id=it["id"], audio=f"media/test/{it['id']}.wav",
                                        transcript=it["text"], category=it["category"],
                                        sha256=sha[it["id"]])) + "\n")
    print(f"make_mm_data: {sum(i['split'] in pick for i in images)} images, "
          f"{sum(i['split'] in pick for i in audio)} audio files under "
          f"{os.path.join(args.out, 'media')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=["plan", "speech", "media"])
    ap.add_argument("out")
    ap.add_argument("--corpus", default=".carry/corpus")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", choices=sorted(PRESETS) + ["ci"], default="proxy")
    ap.add_argument("--speech-pieces", type=int, default=0, metavar="N",
                    help="plan: N more train clips (category piece, last) that say 1-4 "
                    "consecutive words of a train speech sentence (train_mm_proxy --a-pieces)")
    ap.add_argument("--diverse", action="store_true",
                    help="plan: the train items draw from WIDE_VARIANTS (97) and WIDE_FONTS (30), "
                    "the held-out items as without it (issue 35)")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--espeak", help="speech: espeak-ng unpacked here (tools/gpu/"
                    "espeak_prefix.sh), else the system's")
    ap.add_argument("--fonts", action="append", help="fonts root (has truetype/...)")
    ap.add_argument("--train-files", action="store_true",
                    help="media: write the train items' files too (training renders them itself)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    dict(plan=cmd_plan, speech=cmd_speech, media=cmd_media)[args.step](args)


if __name__ == "__main__":
    main()
