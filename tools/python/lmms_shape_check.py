"""lmms_shape_check.py: the CI stand-in for tools/lmms_eval_check.sh (lmms-eval itself needs a
~6 GB venv). A client written here, standard library only, that sends what lmms-eval 0.7.3's
`--model openai` sends (lmms_eval/models/chat/openai.py, protocol.py to_openai_messages): every
request of the run at once (its num_concurrent=32 exceeds the items), each a system turn as a
text part, then a user turn with an image as a data:image/png;base64 URL or an audio file's local
path as {"type": "audio_url", "audio_url": {"url": PATH}} and the task's text after it,
max_tokens and temperature 0. `g4cu serve` (defaults: one state and the queue; --media-dir the
fixtures) answers them; `g4cu eval` then runs the same manifests with the same max_new_tokens.

    lmms_shape_check.py --g4cu BIN --fixtures DIR --out DIR [--max-new N] [--quick]

Checks: every request 200 at the first try (no retry: a 429 or an error counts as failed); the
server's log holds one 200 line for each request and no other; every reply's text identical to
`g4cu eval`'s prediction for the item (greedy on both routes, the same prompt), a reply whose
generation opened Gemma-4's thought channel included (at least one does here). Prints
"lmms_shape: N checks, F failed"; exit 0 when F is 0.
"""
import argparse
import base64
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

SYSTEM = "You are a helpful assistant."  # G4_EVAL_SYSTEM_PROMPT (eval/eval_task.h)
ASR_TEXT = "Please recognize the speech and only output the recognized content:"
# (the fixtures' media: the answers are the tiny random model's noise, only compared)
OCR = [("photo", "refdumps/mm/media/photo_40x30.png", "What is written in the image?"),
       ("square", "frontends/media/square_rgb.png", "  What is written on the first line?  ")]
ASR = [("speech", "refdumps/mm/media/speech_16k.wav"),
       ("stereo48k", "frontends/media/stereo_48k_16.wav"),
       ("tone", "frontends/media/tone_1s_f32.wav")]


def manifests(fix, out):
    ocr, asr = os.path.join(out, "ocr.jsonl"), os.path.join(out, "asr.jsonl")
    with open(ocr, "w", encoding="utf-8") as f:
        for i, path, q in OCR:
            f.write(json.dumps({"id": i, "image": os.path.join(fix, path), "question": q,
                                "answers": ["x"], "category": "Regular Text Recognition"}) + "\n")
    with open(asr, "w", encoding="utf-8") as f:
        for i, path in ASR:
            f.write(json.dumps({"id": i, "audio": os.path.join(fix, path), "transcript": "x",
                                "category": "fixture"}) + "\n")
    return ocr, asr


def payloads(fix, max_new):
    out = []
    for i, path, q in OCR:  # ocrbench_doc_to_text: question.strip()
        b64 = base64.b64encode(open(os.path.join(fix, path), "rb").read()).decode()
        part = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64}}
        out.append(("ocrbench", i, part, q.strip()))
    for i, path in ASR:
        part = {"type": "audio_url", "audio_url": {"url": os.path.join(fix, path)}}
        out.append(("librispeech", i, part, ASR_TEXT))
    return [(t, i, {"model": "package", "max_tokens": max_new, "temperature": 0,
                    "messages": [{"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
                                 {"role": "user", "content": [part, {"type": "text", "text": text}]}]})
            for t, i, part, text in out]


def post(port, body):
    rq = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(rq, timeout=300) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--g4cu", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-new", type=int, default=8)
    ap.add_argument("--quick", action="store_true",
                    help="one image and two clips ('stereo48k' kept), for sanitizer builds")
    a = ap.parse_args()
    if a.quick:  # (module-level lists: the helpers read them)
        OCR[:] = [x for x in OCR if x[0] == "square"]
        ASR[:] = [x for x in ASR if x[0] in ("speech", "stereo48k")]
    fix = os.path.realpath(a.fixtures)
    pkg = os.path.join(fix, "mobius-tiny-f16", "package")
    tok = os.path.join(fix, "chat", "chat_bpe.json")
    n_checks = fails = 0

    def check(ok, what):
        nonlocal n_checks, fails
        n_checks += 1
        fails += not ok
        print(("ok   " if ok else "FAIL ") + what)

    ocr_man, asr_man = manifests(fix, a.out)
    log_path = os.path.join(a.out, "serve.log")
    with open(log_path, "w") as log:
        srv = subprocess.Popen([a.g4cu, "serve", pkg, "--tokenizer", tok, "--backend", "cpu",
                                "--port", "0", "--media-dir", fix], stdout=subprocess.PIPE,
                               stderr=log, text=True)
    try:
        m = re.search(r"127\.0\.0\.1:(\d+)", srv.stdout.readline())
        if not m:
            check(False, "the server's first line names no port")
            return 1
        reqs = payloads(fix, a.max_new)
        with ThreadPoolExecutor(max_workers=32) as ex:  # all at once, as lmms-eval's pool does
            replies = list(ex.map(lambda r: post(int(m.group(1)), r[2]), reqs))
    finally:
        srv.terminate()
        srv.wait(timeout=60)
    bad = [(i, st, str(body)[:200]) for (_, i, _), (st, body) in zip(reqs, replies) if st != 200]
    check(not bad, f"{len(reqs)} requests at once: all 200 at the first try {bad}")
    lines = [ln.strip() for ln in open(log_path) if " POST /v1/chat/completions " in ln]
    check(len(lines) == len(reqs) and all(" 200 " in ln for ln in lines),
          f"serve log: {len(lines)} chat request lines, all 200 (expected {len(reqs)}) {lines[:3]}")

    preds, eval_tokens = {}, {}
    for task, man in (("ocrbench", ocr_man), ("librispeech", asr_man)):
        d = os.path.join(a.out, "eval-" + task)
        r = subprocess.run([a.g4cu, "eval", man, "--task", task, pkg, "--tokenizer", tok,
                            "--backend", "cpu", "--max-new", str(a.max_new), "--out", d],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"g4cu eval --task {task} exit {r.returncode} {r.stderr[-300:]}")
        if r.returncode == 0:
            for ln in open(os.path.join(d, "predictions.jsonl"), encoding="utf-8"):
                p = json.loads(ln)
                preds[(task, p["id"])] = p.get("prediction")
                eval_tokens[(task, p["id"])] = p.get("tokens", [])
    for (task, i, _), (st, body) in zip(reqs, replies):
        got = body["choices"][0]["message"]["content"] if st == 200 else None
        want = preds.get((task, i))
        check(got is not None and got == want,
              f"{task} '{i}': serve {got!r} == g4cu eval {want!r}")
    # Gemma-4's thought channel: `g4cu eval` scores what follows the last <channel|> (nothing
    # while the channel never closed); the server must answer the same and put the thought in
    # reasoning_content. On this fixture the greedy 'stereo48k' reply opens the channel and
    # never closes it: checked from g4cu eval's own tokens, so the test says when the fixture
    # no longer reaches that path.
    vocab = json.load(open(tok, encoding="utf-8"))
    soc = [t["id"] for t in vocab["added_tokens"] if t["content"] == "<|channel>"]
    opened = [k for k, (task, i, _) in enumerate(reqs)
              if soc and soc[0] in eval_tokens.get((task, i), [])]
    msgs = [replies[k][1]["choices"][0]["message"] for k in opened if replies[k][0] == 200]
    check(len(opened) >= 1 and len(msgs) == len(opened) and
          all(isinstance(m.get("reasoning_content"), str) for m in msgs),
          f"{len(opened)} replies opened the thought channel, each with reasoning_content "
          f"{[m.get('reasoning_content') for m in msgs]}")
    print(f"lmms_shape: {n_checks} checks, {fails} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
