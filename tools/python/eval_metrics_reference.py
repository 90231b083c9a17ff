#!/usr/bin/env python3
"""Reference values for the C task metrics (eval/metrics.c), computed by lmms-eval's own scoring
code: lmms-eval 0.7.2 from PyPI, whose scorer files are identical to commit 3e675904, the one
Olive pins (../shared/spec/eval-metrics.md section 1).

What runs is lmms-eval's code, unmodified, with its real dependencies:
  tasks/librispeech/utils.py (librispeech_wer, remove_sp, the vendored Whisper normalisers),
  tasks/asr_wer_utils.py (EvaluationTokenizer, editdistance), tasks/chartqa/utils.py
  (relaxed_correctness), tasks/ocrbench/utils.py (ocrbench_process_results), and the `anls` /
  `levenshtein_distance` functions of api/metrics.py (taken out of the module with `ast`, because
  importing api/metrics.py pulls in the whole evaluation stack). The `.strip()` that
  api/task.py Task.process_results applies to every response is applied here the same way.
lmms_eval/tasks/__init__.py (the task registry) is bypassed with a stub package so that only
the task files above are imported.

Usage (from the repository root, in a venv with pip access):
    pip install regex more-itertools editdistance sacrebleu loguru
    python3 tools/python/eval_metrics_reference.py vectors   # -> tests/fixtures/eval/metrics_vectors.json
    python3 tools/python/eval_metrics_reference.py smoke     # -> tests/fixtures/eval/smoke_expected.json
Options: --lmms-eval PATH (an lmms_eval-0.7.2 wheel or an unpacked one; default: pip download),
--seed N (vectors; default 20260710).
"""
import argparse
import ast
import contextlib
import glob
import importlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import types
import zipfile

LMMS_EVAL_VERSION = "0.7.2"
FIXTURES = "tests/fixtures/eval"


# --- loading lmms-eval's scorers -----------------------------------------------------------------
def unpack_lmms_eval(path, tmp):
    if path and os.path.isdir(path):
        return path
    if not path:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", tmp,
                        f"lmms-eval=={LMMS_EVAL_VERSION}"], check=True)
        (path,) = glob.glob(os.path.join(tmp, "lmms_eval-*.whl"))
    root = os.path.join(tmp, "lmms_eval_wheel")
    with zipfile.ZipFile(path) as z:
        z.extractall(root)
    return root


class Scorers:
    def __init__(self, root):
        sys.path.insert(0, root)
        import lmms_eval  # noqa: F401  (its __init__ is empty)
        stub = types.ModuleType("lmms_eval.tasks")
        stub.__path__ = [os.path.join(root, "lmms_eval", "tasks")]
        sys.modules["lmms_eval.tasks"] = stub
        self.ls = importlib.import_module("lmms_eval.tasks.librispeech.utils")
        self.cq = importlib.import_module("lmms_eval.tasks.chartqa.utils")
        self.oc = importlib.import_module("lmms_eval.tasks.ocrbench.utils")
        src = open(os.path.join(root, "lmms_eval", "api", "metrics.py"), encoding="utf-8").read()
        fns = [n for n in ast.parse(src).body
               if isinstance(n, ast.FunctionDef) and n.name in ("anls", "levenshtein_distance")]
        for n in fns:
            n.decorator_list = []  # @register_metric needs the registry; the body is what counts
        ns = {}
        exec(compile(ast.Module(fns, []), "lmms_eval/api/metrics.py", "exec"), ns)
        self._anls = ns["anls"]

    @staticmethod
    def strip(response):  # api/task.py Task.process_results
        return response.strip() if response is not None else ""

    def ocrbench(self, response, answers, dataset):
        doc = {"answer": answers, "dataset": dataset, "question_type": "x"}
        r = self.oc.ocrbench_process_results(doc, [self.strip(response)])
        return r["ocrbench_accuracy"]["score"]

    def anls(self, response, answers):
        return self._anls(answers, [self.strip(response)])["anls"]

    def chartqa(self, response, target):
        return bool(self.cq.relaxed_correctness(self.strip(response), target))

    def wer(self, refs, responses):
        results = [{"gt": r, "pred": self.strip(h), "source": "s", "task": "asr_en"}
                   for r, h in zip(refs, responses)]
        with contextlib.redirect_stdout(io.StringIO()):  # compute_wer prints the first pair
            return self.ls.librispeech_wer(results, None)

    def wer_tokens(self, text):
        tok = self.ls.EvaluationTokenizer(tokenizer_type="none", lowercase=True, punctuation_removal=True)
        s = self.ls.remove_sp(text, "en")
        s = self.ls.english_normalizer(s)
        s = self.ls.basic_normalizer(s)
        return tok.tokenize(s).split()

    def numbers(self, text):
        return self.ls.english_normalizer.standardize_numbers(text)


def py_float(s):
    try:
        return repr(float(s))
    except ValueError:
        return None


# --- seeded inputs --------------------------------------------------------------------------------
SPEECH_VOCAB = (
    "zero o oh one two three four five six seven eight nine ten eleven twelve thirteen nineteen "
    "twenty thirty forty ninety hundred thousand million billion decillion first second third "
    "fourth fifth nineth ninth twelfth twentieth thirties hundreds thousandth millions and a half "
    "point double triple minus plus negative positive dollar dollars cents cent pound pounds euro "
    "euros per cent percent the cat of st mr dr won't can't let's i'm he's she'd you're they've "
    "we'll colour centre organisation hmm uh um [noise] <unk> (laughs) 1 1s 2 10 007 1.5 1.0 0.5 "
    "3.14 $5 $0.36 £3 €2.5 -5 +3 1,000 10% 5th 10km rc232 b747 1960s . , ! ? ; : - — … ’ ' café "
    "naïve straße œuvre ① ² ٣ ١٢ ＡＢＣ １２ İstanbul ΣΑΣ x_y a.b.c u.s.a. e.g. ok. <|en|>").split()
NUMBER_VOCAB = (
    "zero o oh one two three five nine ten eleven twelve nineteen twenty thirty ninety hundred "
    "thousand million decillion first second third fifth twelfth twentieth thirties hundreds "
    "thousandth millions and a half point double triple minus plus dollars cents pounds euro per "
    "cent percent ones sixes 1 2 0 00 10 007 1.5 1.0 0.5 .5 3. $5 -5 £0 ٣ ١٢ x").split()
SEPS = [" ", " ", " ", "  ", "\n", "\t", "", ", ", "\u00a0", "\u2028"]


def word_salad(rng, vocab, max_words, seps=SEPS):
    n = rng.randint(0, max_words)
    s = "".join(rng.choice(vocab) + rng.choice(seps) for _ in range(n))
    return s.upper() if rng.random() < 0.3 else s


def float_text(rng):
    atoms = list(" _0123456789.eE+-%\t\u00a0\u2003١２x") + ["inf", "nan", "infinity", "INF", "1e5", "12", "1_0", "50%"]
    return "".join(rng.choice(atoms) for _ in range(rng.randint(0, 6)))


def text_for_anls(rng):
    atoms = list("abcAB c  ") + ["ß", "İ", "Σ", "σ", "ς", "é", "e\u0301", "\t", "\u00a0", "\n", "ﬁ", "1/8", "$", "Dr.", "Coca", "Cola"]
    return "".join(rng.choice(atoms) for _ in range(rng.randint(0, 8)))


CHART_POOL = ["12", "12.5", "12.6", "12.60", "13", "11.4", "11.41", "0", "0.0", "-0", "-5", "5", "50%",
              "50", "0.5", "12%%", "0.12", "1e3", "1000", "1,000", "1_000", "nan", "inf", "-inf", "Yes",
              "yes", "YES", "no", "yes.", " 7 ", "7", "２０", "20", "5 %", "0.05", "%", "", "Dark Blue",
              "dark blue", "2019", "2020", "1.05", "1", "0.95", "0.949", "1.0500000001", "Σ", "σ"]


def build_vectors(sc, seed):
    rng = random.Random(seed)
    v = {"seed": seed, "lmms_eval": LMMS_EVAL_VERSION, "python": sys.version.split()[0]}

    fl = ["1e400", "-1e400", "1e-400", "4.9e-324", "0.1", "1_000", "1__000", "_1", "1_", "1_.5", "1._5",
          "1e1_0", "1e_10", " 1 ", "\u00a01\u00a0", "\x1c1", "１２", "١٢.٥", "-nan", "+inf", "INFINITY",
          "infinit", ".", "5.", ".5", "e5", "1e", "1e+", "0x10", "1.5e3", "½", "12.5abc", "5 ", "\u20281",
          "", " ", "+", "-0", "1e-5", "123456789012345678901234567890"]
    fl += [float_text(rng) for _ in range(300)]
    v["float"] = [{"text": s, "value": py_float(s)} for s in fl]

    ch = []
    for _ in range(200):  # mixed strings: the parse and exact-match paths
        p, t = rng.choice(CHART_POOL), rng.choice(CHART_POOL)
        if rng.random() < 0.2:
            p = float_text(rng)
        ch.append({"response": p, "target": t, "correct": sc.chartqa(p, t)})
    for _ in range(300):  # numbers near each other: the 5% boundary
        t = rng.choice([rng.randint(-3000, 3000), round(rng.uniform(-100, 100), rng.randint(0, 4)), rng.randint(1, 9) / 100])
        p = t * (1 + rng.uniform(-0.08, 0.08)) if rng.random() < 0.8 else t * rng.choice([0.95, 1.05, 1.0])
        fmt = rng.choice(["{:g}", "{:.2f}", "{:.1f}", "{}", "{:.0f}", "{:.3e}"])
        ts, ps = str(t), fmt.format(p)
        if rng.random() < 0.2:
            ts, ps = ts + "%", fmt.format(p * 100) + "%" if rng.random() < 0.5 else ps
        ch.append({"response": ps, "target": ts, "correct": sc.chartqa(ps, ts)})
    v["chartqa"] = ch

    an = []
    for _ in range(250):
        answers = [text_for_anls(rng) for _ in range(rng.randint(1, 3))]
        resp = rng.choice(answers) if rng.random() < 0.3 else text_for_anls(rng)
        if rng.random() < 0.3:
            resp = " " + resp.upper() + "\n"
        an.append({"answers": answers, "response": resp, "score": sc.anls(resp, answers)})
    v["anls"] = an

    oc = []
    for _ in range(250):
        answers = [text_for_anls(rng) for _ in range(rng.randint(0, 3))]
        resp = text_for_anls(rng) + (rng.choice(answers) if answers and rng.random() < 0.5 else "") + text_for_anls(rng)
        if rng.random() < 0.3:
            resp = resp.upper()
        ds = rng.choice(["HME100k", "IIIT5K", "hme100k", "ST-VQA"])
        oc.append({"answers": answers, "response": resp, "dataset": ds, "score": sc.ocrbench(resp, answers, ds)})
    v["ocrbench"] = oc

    wt = []
    for _ in range(600):
        s = word_salad(rng, SPEECH_VOCAB, 9)
        wt.append({"text": s, "tokens": sc.wer_tokens(s)})
    v["wer_tokens"] = wt

    nu = []
    for _ in range(400):
        s = word_salad(rng, NUMBER_VOCAB, 8, seps=[" ", " ", "  "])
        try:
            nu.append({"text": s, "out": sc.numbers(s)})
        except AssertionError:  # Whisper's own assertion; never seen, but not a vector then
            pass
    v["numbers"] = nu

    wc = []
    while len(wc) < 12:
        n = rng.randint(1, 12)
        refs = [word_salad(rng, SPEECH_VOCAB, 10) for _ in range(n)]
        hyps = [word_salad(rng, SPEECH_VOCAB, 10) if rng.random() < 0.5 else refs[i] for i in range(n)]
        try:
            w = sc.wer(refs, hyps)
        except (IndexError, ZeroDivisionError):  # lmms-eval fails on an empty first reference
            continue
        wc.append({"refs": refs, "hyps": hyps, "wer": w})
    v["wer_corpus"] = wc

    lo = ["ΣΑΣ", "ΑΣ", "Σ", "ΑΣ.", "ΑΣΑ", "Α.Σ", "ΑΣ'Α", "a\u0301Σ", "İ", "İSTANBUL", "ẞ", "ǅ", "Ａ"]
    lo += ["".join(rng.choice(["Σ", "A", "α", ".", "'", " ", "\u0301", "1", "İ"]) for _ in range(rng.randint(1, 6))) for _ in range(60)]
    v["lower"] = [{"text": s, "out": s.lower()} for s in lo]
    return v


# --- the smoke set ----------------------------------------------------------------------------------
def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def build_smoke(sc):
    ls_rows = read_jsonl(os.path.join(FIXTURES, "librispeech_smoke.jsonl"))
    ocr_rows = read_jsonl(os.path.join(FIXTURES, "ocr_smoke.jsonl"))
    preds = {p["id"]: p["prediction"] for p in read_jsonl(os.path.join(FIXTURES, "smoke_predictions.jsonl"))}
    out = {"lmms_eval": LMMS_EVAL_VERSION, "librispeech": {}, "ocr": {}}
    items = []
    for r in ls_rows:
        single = sc.wer([r["transcript"]], [preds[r["id"]]])
        items.append({"id": r["id"], "wer": single,
                      "ref_tokens": sc.wer_tokens(r["transcript"]),
                      "hyp_tokens": sc.wer_tokens(sc.strip(preds[r["id"]]))})
    out["librispeech"]["items"] = items
    out["librispeech"]["wer"] = sc.wer([r["transcript"] for r in ls_rows], [preds[r["id"]] for r in ls_rows])
    items = []
    for r in ocr_rows:
        p = preds[r["id"]]
        items.append({"id": r["id"], "ocrbench": sc.ocrbench(p, r["answers"], r.get("dataset", "")),
                      "anls": sc.anls(p, r["answers"])})
    out["ocr"]["items"] = items
    out["ocr"]["ocrbench_accuracy"] = sum(i["ocrbench"] for i in items) / len(items)
    out["ocr"]["anls"] = sum(i["anls"] for i in items) / len(items)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["vectors", "smoke"])
    ap.add_argument("--lmms-eval", dest="lmms_eval")
    ap.add_argument("--seed", type=int, default=20260710)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sc = Scorers(unpack_lmms_eval(a.lmms_eval, tmp))
        if a.what == "vectors":
            data, path = build_vectors(sc, a.seed), os.path.join(FIXTURES, "metrics_vectors.json")
        else:
            data, path = build_smoke(sc), os.path.join(FIXTURES, "smoke_expected.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
