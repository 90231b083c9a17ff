#!/usr/bin/env python3
"""tests/test_mm_pieces.sh's checks of make_mm_data.py --speech-pieces and train_mm_proxy's
--a-pieces (short train clips for the audio side, issue 35), on the CPU:
  1. the ci plan with 16 pieces: its speech.jsonl.gz decompressed is the plan without them
     plus 16 lines (a byte prefix), images.jsonl.gz the same bytes; the 16 are train_p00000..
     train_p00015, category piece, split train, 1-4 words, each a run of consecutive words of
     a CI sentence (its casing and inner commas, no end punctuation), none with a held-out
     answer's words; data.json says speech_pieces only with pieces.
  2. join_halves(collate(A), collate(B)) is collate(A + B), tensor for tensor, for clips of
     several lengths, at --pad-to 0 and 8 and --pad-frames 32, either half the longer.
  3. the trainer's streams at --a-pieces 0.5, half-batch 4 (--batch 8): each of 6 audio
     half-batches holds exactly 2 rows whose answer is a piece text and 2 a whole sentence
     (counted from the decoded labels; the piece and whole texts never overlap), and its
     whole rows are the whole-clip loader's batches of 2 at the run's seed.
  4. the trainer (ci plan, 6 steps of 8, one thread): the plan with pieces and --a-pieces 0
     (and without the flag) gives the sha256 of the plan without pieces; --a-pieces 0.5 other
     weights, twice the same, and train.json's a_pieces {p 0.5, clips 16, per_batch 2, ...};
     refused in one line: -0.1, 1.0, 0.5 on a plan without pieces, 0.1 (round(0.1 x 4) = 0).
Prints one line per check group and the count; exit 1 on the first failure."""
import gzip
import json
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import (  # noqa: E402
    Checks, check_tokenizer, ci_data, ci_trainer_runs, mm_items, trainer_refusals)

CHECKS = Checks("mm_pieces_check")
fail, expect = CHECKS.fail, CHECKS.expect
mmd = tmp.mmd
N_PIECES = 16


def runs_of(sentence):
    """Every text a piece of `sentence` may be: 1-4 consecutive words as written, the trailing
    , . ? ! dropped."""
    w = sentence.split()
    return {" ".join(w[i:i + n]).rstrip(",.?!") for n in range(1, 5)
            for i in range(len(w) - n + 1)}


def check_plan(d):
    plain, more = ci_data(tmp, os.path.join(d, "a")), ci_data(tmp, os.path.join(d, "b"),
                                                               pieces=N_PIECES)
    text = {k: gzip.open(os.path.join(x, "speech.jsonl.gz")).read() for k, x in
            (("plain", plain), ("more", more))}
    expect(text["more"].startswith(text["plain"]) and
           text["more"].count(b"\n") == text["plain"].count(b"\n") + N_PIECES,
           "the plan with pieces is not the plan without them + the pieces' lines")
    expect(open(os.path.join(plain, "images.jsonl.gz"), "rb").read() ==
           open(os.path.join(more, "images.jsonl.gz"), "rb").read(), "the images moved")
    info = {k: json.load(open(os.path.join(x, "data.json"))) for k, x in
            (("plain", plain), ("more", more))}
    expect("speech_pieces" not in info["plain"] and info["more"]["speech_pieces"] == N_PIECES,
           f"data.json: {info}")
    audio = mmd.read_jsonl(os.path.join(more, "speech.jsonl.gz"))
    pieces = audio[len(audio) - N_PIECES:]
    held = {tuple(mmd.words_of(i["text"])) for i in audio if i["split"] == "test"}
    ok_runs = set().union(*(runs_of(s) for s in mmd.CI_SENTENCES))
    expect([i["id"] for i in pieces] == [f"train_p{k:05d}" for k in range(N_PIECES)] and
           all(i["category"] == "piece" and i["split"] == "train" for i in pieces),
           f"the pieces' ids, categories, splits: {pieces}")
    expect(all(1 <= len(i["text"].split()) <= 4 and i["text"] in ok_runs for i in pieces),
           f"a piece is not 1-4 consecutive words of a CI sentence: {[i['text'] for i in pieces]}")
    expect(not any(tuple(mmd.words_of(i["text"])) in held for i in pieces),
           "a piece has a held-out answer's words")
    expect(sum(i.get("category") == "piece" for i in audio) == N_PIECES, "pieces elsewhere")
    # piece_of alone: the only text whose words are not held is drawn (again and again), and a
    # sentence all of whose runs are held is refused in one line
    rr = np.random.default_rng(0)
    s = "Alpha bravo, charlie delta."
    held = {tuple(mmd.words_of(t)) for t in runs_of(s)} - {("bravo", "charlie")}
    t, k = mmd.piece_of(rr, [s], held)
    expect(t == "bravo, charlie" and k > 0, f"piece_of: {t!r} after {k} redraws")
    try:
        mmd.piece_of(rr, [s], held | {("bravo", "charlie")}, tries=50)
        fail("piece_of: every run held: not refused")
    except SystemExit as e:
        expect("held-out" in str(e), f"piece_of's refusal: {e}")
    print(f"mm_pieces_check: plan: {N_PIECES} pieces after the ci plan's "
          f"{len(audio) - N_PIECES} clips (a byte prefix), e.g. "
          f"{[i['text'] for i in pieces[:4]]}; piece_of redraws {k}: {CHECKS.n} checks")
    return plain, more


def check_join(tok):
    items = mm_items(tmp, tok, 5, [], [(t, n) for t, n in zip(
        mmd.CI_SENTENCES, (16000, 24000, 40000, 20000, 36000, 30000))])["audio"]
    for pad, pf in ((0, None), (8, None), (8, 32)):
        for a, b in ((items[:2], items[2:6]), (items[2:5], items[:2])):
            want = tmp.collate(a + b, pad, pf)
            got = tmp.join_halves(tmp.collate(a, pad, pf), tmp.collate(b, pad, pf))
            expect(sorted(got) == sorted(want) and all(
                got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]) for k in want),
                f"join_halves at pad {pad}, pad_frames {pf}: not collate of the joined list")
    print(f"mm_pieces_check: join_halves = collate(A + B) at 3 paddings, 2 orders: "
          f"{CHECKS.n} checks")


def check_streams(more, tok):
    from transformers.models.gemma4.feature_extraction_gemma4 import \
        Gemma4AudioFeatureExtractor

    audio, _ = tmp.load_items(more)
    tr_a = tmp.train_split(audio)
    pieces = [i for i in audio if i.get("category") == "piece"]
    whole_t, piece_t = {i["text"] for i in tr_a}, {i["text"] for i in pieces}
    expect(len(tr_a) == 8 and len(pieces) == N_PIECES and not whole_t & piece_t,
           f"train_split: {len(tr_a)} whole clips, {len(pieces)} pieces")
    pr, fe = tmp.Prompter(tok), Gemma4AudioFeatureExtractor()
    p = dict(tmp.PRESETS["ci"])
    half, n = 4, round(0.5 * 4)

    def stream(items, batch, seed):
        return tmp.item_stream(items, "audio", more, [], pr, fe, p, False, batch, seed, 0, 0,
                               False)

    mix = tmp.piece_mix(stream(tr_a, half - n, 1), stream(pieces, n, 1 + tmp.PIECE_STREAM))
    ref = stream(tr_a, half - n, 1)
    counts = []
    for _ in range(6):
        b, r = next(mix), next(ref)
        texts = tmp.answer_texts(tok, b["labels"], pr.id["<turn|>"])
        counts.append((sum(t in piece_t for t in texts), sum(t in whole_t for t in texts)))
        expect(len(texts) == half and texts[:half - n] == tmp.answer_texts(
            tok, r["labels"], pr.id["<turn|>"]), "the whole rows are not the whole loader's")
    expect(counts == [(n, half - n)] * 6, f"piece / whole rows a half-batch: {counts} "
           f"(expected ({n}, {half - n}) each)")
    print(f"mm_pieces_check: streams: 6 audio half-batches of {half} at --a-pieces 0.5, each "
          f"{n} piece rows and {half - n} whole rows (decoded answers): {CHECKS.n} checks")


def check_trainer(d, plain, more):
    base = [os.path.join(d, "bad"), "--preset", "ci", "--device", "cpu", "--batch", "8"]
    lines = trainer_refusals(tmp, base + ["--data", more], (
        (["--a-pieces", "-0.1"], "expected 0 <= P < 1"),
        (["--a-pieces", "1.0"], "expected 0 <= P < 1"),
        (["--a-pieces", "0.1"], "round(P x 4) = 0 piece clips")), expect)
    lines += trainer_refusals(tmp, base + ["--data", plain], (
        (["--a-pieces", "0.5"], "has no piece clips"),), expect)
    runs = ci_trainer_runs(tmp, plain, d, (("plain", []),), fail)
    runs.update(ci_trainer_runs(tmp, more, d, (
        ("off", []), ("zero", ["--a-pieces", "0"]), ("half", ["--a-pieces", "0.5"]),
        ("half2", ["--a-pieces", "0.5"])), fail))
    h = {k: v[1] for k, v in runs.items()}
    expect(h["plain"] == h["off"] == h["zero"], f"pieces in the plan moved the weights at "
           f"--a-pieces 0: {h['plain'][:16]} {h['off'][:16]} {h['zero'][:16]}")
    expect(h["half"] == h["half2"] != h["plain"], f"--a-pieces 0.5: {h['half'][:16]} "
           f"{h['half2'][:16]} (plain {h['plain'][:16]})")
    expect(all("a_pieces" not in runs[k][0] for k in ("plain", "off", "zero")),
           "an a_pieces record at P 0")
    rec = runs["half"][0].get("a_pieces")
    expect(rec == {"p": 0.5, "clips": N_PIECES, "per_batch": 2, "whole_per_batch": 2,
                   "workers": [0, 0]}, f"train.json's a_pieces {rec}")
    expect(runs["half"][0]["train_audio"] == runs["plain"][0]["train_audio"] == 8,
           "train_audio counts the pieces")
    print(f"mm_pieces_check: trainer: plan without pieces {h['plain'][:16]} = with pieces "
          f"{h['off'][:16]} = --a-pieces 0 {h['zero'][:16]}; 0.5 {h['half'][:16]} twice; "
          f"record {rec}; refusals: {' | '.join(lines)}: {CHECKS.n} checks")


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        plain, more = check_plan(d)
        tok = check_tokenizer(tmp, mmd.CI_SENTENCES)
        check_join(tok)
        check_streams(more, tok)
        check_trainer(d, plain, more)
    print(f"mm_pieces_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
