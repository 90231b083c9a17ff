"""The answer scoring of `g4cu eval` in Python, for the trainer's held-out decoding
(train_mm_proxy.HeldOut, --eval-decode; issue 35): the same normalisation as eval/metrics.c
(lmms-eval 0.7.2's scorers, ../shared/spec/eval-metrics.md), so the exact match the trainer
prints is the one `g4cu eval` would score on the exported package's answers.

  ocrbench   ocr_form: the response stripped (Task.process_results), then both sides
             lower(), strip(), "\\n" -> " " (tasks/ocrbench/utils.py; not the HME100k items);
             the score: the answer's form inside the response's (g4_ocrbench_score)
  WER        wer_tokens: remove_sp, Whisper's EnglishTextNormalizer (its spelling map is
             eval/whisper_spelling.c's, the generated copy of whisper's english.json), then
             BasicTextNormalizer, then EvaluationTokenizer "none" (punctuation-only tokens
             dropped), lower(), split() (g4_wer_tokens). The normalisers are transformers' copy
             of Whisper's (models/whisper/english_normalizer.py), the Python twin of
             eval/whisper_norm.c.
tests/mm_exact_check.py checks both against tests/fixtures/eval/metrics_vectors.json (values
computed by lmms-eval's own code) and hand-worked cases.
answer_scores: per kind, what HeldOut prints and stores."""
import functools
import os
import re
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
SPELLING_C = os.path.join(HERE, "..", "..", "eval", "whisper_spelling.c")


# --- OCRBench ---------------------------------------------------------------------------------
def ocr_form(s):
    """lower_form of eval/metrics.c: s.lower().strip().replace("\\n", " ")."""
    return s.lower().strip().replace("\n", " ")


def hme_form(s):
    """The HME100k items' form: s.strip().replace("\\n", " ").replace(" ", "")."""
    return s.strip().replace("\n", " ").replace(" ", "")


def ocrbench_score(response, answers, dataset=None):
    """g4_ocrbench_score: 1 when some answer's form is inside the stripped response's."""
    form = hme_form if dataset == "HME100k" else ocr_form
    p = form((response or "").strip())
    return int(any(form(a) in p for a in answers))


# --- LibriSpeech WER --------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def spelling_map():
    """Whisper's British -> American map as eval/whisper_spelling.c holds it (its
    {"british", "american"} rows; plain ASCII words, no escapes)."""
    with open(SPELLING_C, encoding="utf-8") as f:
        rows = re.findall(r'^\s*\{"([^"\\]*)", "([^"\\]*)"\},?$', f.read(), re.M)
    if len(rows) < 1000:  # (1739 in whisper 20250625's english.json)
        raise SystemExit(f"mm_metrics: {SPELLING_C}: {len(rows)} spelling rows, expected 1739")
    return dict(rows)


@functools.lru_cache(maxsize=1)
def normalisers():
    from transformers.models.whisper.english_normalizer import (BasicTextNormalizer,
                                                                EnglishTextNormalizer)

    return EnglishTextNormalizer(spelling_map()), BasicTextNormalizer()


def remove_sp(text):
    """asr_wer_utils.remove_sp(text, "en")."""
    text = re.sub(r"<\|.*?\|>", " ", text)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r" ?([!,.?;:])", r"\1", text)
    return text.lstrip(" ")


def eval_tokenize(s):
    """EvaluationTokenizer("none", lowercase=True, punctuation_removal=True) then split():
    tokens split on " ", those made only of punctuation (categories P*; empty ones too)
    dropped, joined, lower(), split()."""
    kept = [t for t in s.split(" ") if not all(unicodedata.category(c)[0] == "P" for c in t)]
    return " ".join(kept).lower().split()


def wer_tokens(text):
    """g4_wer_tokens: the words lmms-eval's LibriSpeech WER compares."""
    english, basic = normalisers()
    return eval_tokenize(basic(english(remove_sp(text))))


def wer_percent(refs, hyps):
    """Corpus WER in percent (g4_wer_add + g4_wer_percent: total word edits / total reference
    words; each response stripped first)."""
    return wer_percent_of_tokens([wer_tokens(r) for r in refs],
                                 [wer_tokens((h or "").strip()) for h in hyps])


def wer_percent_of_tokens(tr, th):
    """wer_percent of references and responses already in wer_tokens' words."""
    from mm_parity import edits

    e = sum(edits(a, b) for a, b in zip(tr, th))
    n = sum(len(a) for a in tr)
    if n == 0:
        raise SystemExit(f"mm_metrics: the {len(tr)} references hold no words (WER undefined)")
    return e / n * 100


# --- what the trainer reports -----------------------------------------------------------------
def answer_scores(kind, refs, hyps):
    """The held-out greedy answers (hyps) against their references, per kind, each string in
    the form its metric normalises it to (image: ocr_form; audio: wer_tokens joined by spaces):
      exact      share whose normalised answer equals the reference's
      ocrbench   (image) g4cu eval's OCRBench accuracy: the reference inside the answer
      wer        (audio) corpus word error rate (fraction): word edits / reference words
      cer        character edits / reference characters over the set
      cer_other  the same against the references rolled by one (another item's): near cer when
                 the answers fit the answers' statistics but not their own item
      len_diff   mean |len(answer) - len(reference)| in characters
      ref_chars  mean reference length in characters (the scale of len_diff)."""
    import mm_probe

    if len(refs) != len(hyps) or len(refs) < 2:
        raise SystemExit(f"mm_metrics: {len(refs)} references, {len(hyps)} answers (>= 2 each)")
    if kind == "image":
        r = [ocr_form(x) for x in refs]
        h = [ocr_form(x.strip()) for x in hyps]
        extra = {"ocrbench": sum(ocrbench_score(a, [b]) for a, b in zip(hyps, refs)) / len(refs)}
    elif kind == "audio":
        tr = [wer_tokens(x) for x in refs]
        th = [wer_tokens(x.strip()) for x in hyps]
        r, h = [" ".join(t) for t in tr], [" ".join(t) for t in th]
        extra = {"wer": wer_percent_of_tokens(tr, th) / 100}
    else:
        raise SystemExit(f"mm_metrics: kind {kind!r}: image or audio")
    out = {"exact": sum(a == b for a, b in zip(r, h)) / len(r)}
    out.update(extra)
    out.update(cer=mm_probe.cer(r, h), cer_other=mm_probe.cer(r[1:] + r[:1], h),
               len_diff=sum(abs(len(a) - len(b)) for a, b in zip(r, h)) / len(r),
               ref_chars=sum(len(a) for a in r) / len(r))
    return out
