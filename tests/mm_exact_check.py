#!/usr/bin/env python3
"""tests/test_mm_exact.sh's checks of train_mm_proxy.py's --eval-decode (issue 35: the held-out
evaluation's greedy answers, scored as `g4cu eval` scores them), on the CPU:
  1. tools/python/mm_metrics.py against tests/fixtures/eval/metrics_vectors.json (values that
     lmms-eval 0.7.2's own scorers computed, tools/python/eval_metrics_reference.py): every
     ocrbench vector's score (250, the HME100k items' form included), every wer_tokens
     vector's words (600: remove_sp, Whisper's English and basic normalisers, the evaluation
     tokenizer) and every wer_corpus vector's WER (12);
  2. answer_scores on cases worked by hand from eval/metrics.c's steps: OCR forms (lower,
     strip, newline -> space), the OCRBench substring score, CER, CER against the rolled
     references, the length gap; audio: the spelling map (colour -> color), the number
     normaliser (twenty five -> 25), the period dropped, WER over the corpus;
  3. greedy_decode on prompt_batch's left-padded batches (images of two sizes: 68 and 20 soft
     tokens, so prompts of two lengths; clips of 1, 1.5 and 2.5 s: three lengths) of the ci
     preset's model at its random init (seed 0: its answers differ item to item) gives, item
     for item, the ids of transformers' model.generate(do_sample=False) on that item alone
     (unpadded, its own frames only: an independent path, positions and cache of its own),
     and every forward's last-position logits within LOGIT_TOL of generate's (the random
     model's logits are small: a padding leak moves them ~3e-3, rarely the argmax);
  4. the bound: at max_new 3 each answer is the first 3 ids of the unbounded one and the loop
     ran 3 forwards; at EOS: with eos ids taken from the unbounded answers (each row's second
     id), each answer is the unbounded one cut before its first such id (worked here from the
     unbounded ids), every row ended, and the loop stopped on the forward that ended the last row
     (2 forwards, or 1 when every first id is such an id).
  5. --eval-decode without --eval-every is refused in one line (exit 1).
The run's determinism with --eval-decode on or off is tests/mm_fast_check.py's check 6.
Prints one line per check; exit 1 on the first failure."""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "python"))
import mm_metrics  # noqa: E402
import train_mm_proxy as tmp  # noqa: E402
from mm_items import Img, check_tokenizer, mm_items, trainer_refusals  # noqa: E402

VECTORS = os.path.join(HERE, "fixtures", "eval", "metrics_vectors.json")
LOGIT_TOL = 2e-4  # fp32, batched and left-padded vs one item: measured 1.4e-5 (logits ~0.6)


def fail(msg):
    print(f"mm_exact_check: FAIL: {msg}")
    sys.exit(1)


def check_vectors():
    j = json.load(open(VECTORS))
    bad = [v for v in j["ocrbench"]
           if mm_metrics.ocrbench_score(v["response"], v["answers"], v["dataset"]) != v["score"]]
    if bad or len(j["ocrbench"]) != 250:
        fail(f"ocrbench: {len(bad)} of {len(j['ocrbench'])} vectors differ, e.g. {bad[:1]}")
    bad = [v for v in j["wer_tokens"] if mm_metrics.wer_tokens(v["text"]) != v["tokens"]]
    if bad or len(j["wer_tokens"]) != 600:
        fail(f"wer_tokens: {len(bad)} of {len(j['wer_tokens'])} differ, e.g. {bad[:1]}")
    bad = [v for v in j["wer_corpus"]
           if abs(mm_metrics.wer_percent(v["refs"], v["hyps"]) - v["wer"]) > 1e-9 * abs(v["wer"])]
    if bad or len(j["wer_corpus"]) != 12:
        fail(f"wer_corpus: {len(bad)} of {len(j['wer_corpus'])} differ, e.g. {bad[:1]}")
    print("mm_exact_check: lmms-eval's vectors: ocrbench 250/250, wer_tokens 600/600, "
          "wer_corpus 12/12")


def check_hand():
    # images: forms "abc" / "hello" against "abd" / "hello" (the answer's case and trailing
    # space go); OCRBench: "abc" not in "abd", "hello" in "hello"; CER (1 + 0) / (3 + 5);
    # rolled: edits("hello", "abd") = 5 (3 substitutions, 2 deletions), edits("abc", "hello") = 5
    # -> 10 / 8; lengths equal after the forms
    got = mm_metrics.answer_scores("image", ["abc", "Hello"], ["abd", "HELLO "])
    want = dict(exact=0.5, ocrbench=0.5, cer=1 / 8, cer_other=10 / 8, len_diff=0.0, ref_chars=4.0)
    # substring, newline: the answer's form inside the response's ("the word: hello world.")
    sub = [mm_metrics.ocrbench_score(" The word: HELLO\nworld. ", ["Hello\nWorld"]),
           mm_metrics.ocrbench_score("hello", ["hello world"]),
           mm_metrics.ocr_form(" A\nB ") == "a\nb".replace("\n", " ")]
    # audio: "The colour is red." -> the color is red (spelling map, period dropped), against
    # "the color is read": 1 word edit; "twenty five cats" -> 25 cats (number normaliser) =
    # "25 cats": exact. WER 1 / (4 + 2); CER over "the color is red" (16) + "25 cats" (7): one
    # insertion -> 1 / 23; lengths 16 vs 17 and 7 vs 7 -> 0.5
    aud = mm_metrics.answer_scores("audio", ["The colour is red.", "twenty five cats"],
                                   ["the color is read", "25 cats"])
    want_a = dict(exact=0.5, wer=1 / 6, cer=1 / 23, len_diff=0.5, ref_chars=11.5)
    bad = [(k, got[k], v) for k, v in want.items() if abs(got[k] - v) > 1e-12] + \
        [(k, aud[k], v) for k, v in want_a.items() if abs(aud[k] - v) > 1e-12]
    if bad or sub != [1, 0, True]:
        fail(f"hand-worked scores: (name, got, expected) {bad}; substring cases {sub} "
             "(expected [1, 0, True])")
    print(f"mm_exact_check: hand-worked: image {got}; audio {aud}")


def inputs_of(g, r):
    """Row r of prompt_batch's dict as its item alone: its prompt without the left padding and
    its media (a clip's own frames only)."""
    keep = g["attention_mask"][r] == 1
    one = dict(input_ids=g["input_ids"][r][keep][None],
               attention_mask=g["attention_mask"][r][keep][None])
    if "pixel_values" in g:
        one.update(pixel_values=g["pixel_values"][r:r + 1],
                   image_position_ids=g["image_position_ids"][r:r + 1])
    else:
        n = int(g["input_features_mask"][r].sum())
        if not g["input_features_mask"][r, :n].all():
            fail(f"clip {r}: its frame mask is not a prefix")
        one.update(input_features=g["input_features"][r:r + 1, :n],
                   input_features_mask=g["input_features_mask"][r:r + 1, :n])
    return one


def check_decode():
    torch.set_num_threads(1)
    texts = ["hello world", "abc", "the cat sat", "def"]
    tok = check_tokenizer(tmp, texts)
    p = tmp.PRESETS["ci"]
    torch.manual_seed(0)
    model = tmp.build_model(p, tok, 0).eval()
    its = mm_items(tmp, tok, 1, texts, [("hello", 16000), ("the cat sat", 24000),
                                        ("abc def", 40000)])
    pr = tmp.Prompter(tok)
    r = np.random.default_rng(2)
    small = []  # 96 x 480: 6 x 30 patches, 20 soft tokens (the others: 68)
    for text in ("cat", "sat on"):
        pv, pp, n = tmp.image_inputs(Img(r.integers(0, 256, (96, 480, 3), dtype=np.uint8)))
        small.append(dict(kind="image", pv=pv, pp=pp, ids=pr.prompt("image", n),
                          tgt=pr.target(text)))
    eos = model.config.eos_token_id
    bound = 10
    kinds = {"image": [tmp.collate(its["image"][:2]), tmp.collate(small),
                       tmp.collate(its["image"][2:])],
             "audio": [tmp.collate(its["audio"][:2]), tmp.collate(its["audio"][2:])]}
    with torch.no_grad():
        for kind, batches in kinds.items():
            g, targets = tmp.prompt_batch(batches)
            lens = sorted(set(g["attention_mask"].sum(1).tolist()))
            want_t = [t for b in batches for t in b["labels"][b["labels"] != -100].split(
                (b["labels"] != -100).sum(1).tolist())]
            if [t.tolist() for t in want_t] != targets or len(lens) < 2:
                fail(f"{kind}: prompt_batch's targets {targets} (labels' {want_t}), prompt "
                     f"lengths {lens} (expected two or more: left padding exercised)")
            cap = []  # each forward's last-position logits (the random model's are small and
            # close: the argmax alone would hide a leak of the padding, measured ~3e-3 a logit)
            hook = model.lm_head.register_forward_hook(
                lambda m, i, o: cap.append(o[:, -1].detach().clone()))
            try:
                ids, n, ended, bad = tmp.greedy_decode(model, g, eos, bound, False)
                mine, cap[:] = list(cap), []
                ref, gap = [], 0.0
                for row in range(len(ids)):
                    one = inputs_of(g, row)
                    out = model.generate(**one, max_new_tokens=bound, do_sample=False,
                                         eos_token_id=eos, pad_token_id=0)
                    t = out[0, one["input_ids"].shape[1]:].tolist()
                    k = next((j for j, x in enumerate(t) if x in eos), None)
                    ref.append(t if k is None else t[:k])
                    if len(cap) != len(t) or len(t) > len(mine):
                        fail(f"{kind} row {row}: generate ran {len(cap)} forwards for {len(t)} "
                             f"ids, greedy_decode {len(mine)}")
                    gap = max([gap] + [float((a[row] - b[0]).abs().max())
                                       for a, b in zip(mine, cap)])
                    cap[:] = []
            finally:
                hook.remove()
            distinct = len(set(map(tuple, ids)))
            print(f"mm_exact_check: {kind}: {len(ids)} items, prompts of {lens} ids, "
                  f"{distinct} distinct answers, {n} forwards: "
                  f"{sum(a == b for a, b in zip(ids, ref))}/{len(ids)} equal generate's; "
                  f"logits within {gap:.2e} (tolerance {LOGIT_TOL:.0e})")
            if ids != ref or not gap <= LOGIT_TOL or bad:
                fail(f"{kind}: greedy_decode {ids} vs generate {ref}, logits {gap:.2e} apart, "
                     f"{bad} rows with non-finite logits")
            if distinct < 2:
                fail(f"{kind}: every item got the same answer: the comparison shows little")
            # the bound
            short, n3, _, _ = tmp.greedy_decode(model, g, eos, 3, False)
            if n3 != 3 or short != [x[:3] for x in ids] or any(len(x) < 3 for x in ids):
                fail(f"{kind}: max_new 3: {short} in {n3} forwards (expected {[x[:3] for x in ids]}"
                     " in 3; the unbounded answers must be longer for this check)")
            # EOS: every row's second id is an eos id; each row then stops at the first of them
            stops = sorted({x[1] for x in ids})
            cut = [x[:next(j for j, y in enumerate(x) if y in stops)] for x in ids]
            runs = max(map(len, cut)) + 1  # the last row to stop stops on its eos id's forward
            got, n2, ended2, _ = tmp.greedy_decode(model, g, stops, bound, False)
            if got != cut or n2 != runs or not all(ended2):
                fail(f"{kind}: eos {stops}: {got} in {n2} forwards, ended {ended2} (expected "
                     f"{cut} in {runs}, every row ended)")
            print(f"mm_exact_check: {kind}: max_new 3 -> 3 forwards, prefixes; eos {stops} -> "
                  f"answers of {[len(x) for x in cut]} ids, {n2} forwards")


def check_refusal():
    line, = trainer_refusals(tmp, [os.devnull, "--data", os.devnull, "--device", "cpu"],
                             [(["--eval-every", "0", "--eval-decode"],
                               "--eval-decode needs --eval-every")],
                             lambda ok, msg: ok or fail(msg))
    print(f"mm_exact_check: --eval-decode --eval-every 0: refused: {line}")


def main():
    check_refusal()
    check_vectors()
    check_hand()
    check_decode()
    print("mm_exact_check: ok")


if __name__ == "__main__":
    main()
