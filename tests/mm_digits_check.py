#!/usr/bin/env python3
"""tests/test_mm_digits.sh's checks of the tokenizer's split_digits (train_proxy.train_tokenizer,
train_mm_proxy.py --split-digits; issue 35: an OCR answer's ids should follow its characters, as
Gemma's own tokenizer splits digits), on the CPU:
  1. a tokenizer of 600 ids learnt from text dense in numbers: without split_digits its BPE has
     learnt pieces that hold a digit and another character (so the check below can fail); with
     it, none (the byte-fallback pieces <0x..> aside), and each of five strings encodes to the
     ids counted by hand: one id a digit, "835,618" 7 ids;
  2. g4cu's tokenizer (`g4cu tokenize`, $G4CU) reads the written tokenizer.json to HF's ids on
     the same strings (no pre-tokenizer of its own is needed for the split);
  3. the trainer (ci plan, 1 step of 8, one thread): --split-digits writes a tokenizer whose
     numbers are one id a digit and train.json's shapes record it; without the option the
     shapes hold no split_digits key (the run as before).
Prints one line per check and the count; exit 1 on the first failure."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import Checks, ci_data, ci_trainer_runs  # noqa: E402

CHECKS = Checks("mm_digits_check")
fail, expect = CHECKS.fail, CHECKS.expect
# (string, its ids counted by hand under split_digits: every digit one id; the rest is BPE's)
STRINGS = ["835,618", "25/07/1974", "420.01", "LI-5004", "year 1974"]
DIGITS = [sum(c.isdigit() for c in s) for s in STRINGS]


def is_byte(p):
    return p.startswith("<0x") and p.endswith(">")  # byte fallback: its name holds hex digits


def mixed_pieces(tok):
    """Vocabulary pieces holding a digit and any other character (byte pieces aside)."""
    return sorted(p for p in tok.get_vocab()
                  if any(c.isdigit() for c in p) and len(p) > 1 and not is_byte(p))


def digit_pieces(tok, s):
    """s's pieces that carry a digit (a byte piece of one, when the vocabulary lacks it), and all
    its pieces."""
    toks = tok.encode(s, add_special_tokens=False).tokens
    return [t for t in toks if (0x30 <= int(t[3:-1], 16) <= 0x39 if is_byte(t)
                                else any(c.isdigit() for c in t))], toks


def check_tokenizer(d):
    # numbers that recur (so a BPE merges their digits) among words
    nums = ["835,618", "1974", "25/07/1974", "420.01", "5004", "365", "2024", "19.99"] * 40
    text = "\n\n".join(nums + ["the year had many days and the river ran"] * 40)
    plain = tmp.train_tokenizer(text, 600, os.path.join(d, "plain.json"))
    mixed = mixed_pieces(plain)
    expect(len(mixed) >= 5, f"without split_digits only {mixed} mix digits: the text should "
           "teach the BPE digit merges, else the check below proves nothing")
    split = tmp.train_tokenizer(text, 600, os.path.join(d, "split.json"), split_digits=True)
    expect(mixed_pieces(split) == [], f"split_digits: pieces {mixed_pieces(split)[:10]} mix a "
           "digit with another character")
    for s, nd in zip(STRINGS, DIGITS):
        dig, toks = digit_pieces(split, s)
        expect(len(dig) == nd and all(len(t) == 1 or is_byte(t) for t in dig),
               f"split_digits: {s!r} -> {toks}: want {nd} one-digit ids")
    n = len(split.encode("835,618", add_special_tokens=False).ids)
    expect(n == 7, f"split_digits: '835,618' -> {n} ids, want 7 (6 digits and the comma)")
    print(f"mm_digits_check: tokenizer: {len(mixed)} mixed pieces without split_digits (e.g. "
          f"{mixed[:4]}), 0 with; {STRINGS[0]!r} -> "
          f"{split.encode(STRINGS[0], add_special_tokens=False).tokens}")
    return split, os.path.join(d, "split.json")


def check_g4cu(split, path):
    g4cu = os.environ.get("G4CU")
    if not g4cu:
        fail("G4CU is not set (run through ctest)")
    for s in STRINGS:
        r = subprocess.run([g4cu, "tokenize", path, s], capture_output=True, text=True)
        got = r.stdout.strip()
        want = ",".join(map(str, split.encode(s, add_special_tokens=False).ids))
        expect(r.returncode == 0 and got == want,
               f"g4cu tokenize {s!r}: {got!r} (exit {r.returncode}: {r.stderr.strip()}), "
               f"HF {want!r}")
    print(f"mm_digits_check: g4cu tokenize = HF on {len(STRINGS)} strings")


def check_trainer(d):
    from tokenizers import Tokenizer

    data = ci_data(tmp, d)
    runs = ci_trainer_runs(tmp, data, d, [("plain", []), ("split", ["--split-digits"])], fail,
                           steps=1)
    expect("split_digits" not in runs["plain"][0]["shapes"],
           f"without --split-digits train.json's shapes hold split_digits: "
           f"{runs['plain'][0]['shapes'].get('split_digits')}")
    expect(runs["split"][0]["shapes"].get("split_digits") is True,
           f"--split-digits: shapes' split_digits {runs['split'][0]['shapes'].get('split_digits')}")
    tok = Tokenizer.from_file(os.path.join(d, "split", "hf", "tokenizer.json"))
    ci = ["42", "AB-1234", "7.50"]  # the ci plan's numbers (its BPE merges their digits)
    for s, nd in zip(ci + STRINGS, [2, 4, 3] + DIGITS):
        dig, toks = digit_pieces(tok, s)
        expect(len(dig) == nd and all(len(t) == 1 or is_byte(t) for t in dig),
               f"--split-digits' tokenizer: {s!r} -> {toks}: want {nd} one-digit ids")
    print("mm_digits_check: trainer: --split-digits' tokenizer one id a digit, recorded in "
          "train.json; off: not recorded")


def main():
    with tempfile.TemporaryDirectory() as d:
        split, path = check_tokenizer(d)
        check_g4cu(split, path)
        check_trainer(d)
    print(f"mm_digits_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
