#!/usr/bin/env python3
"""`g4cu serve` driven by the official `openai` Python package (PyPI; Debian bookworm has no
python3-openai). tests/test_openai_client.sh runs it in CI with the venv tools/install_deps.sh
makes (.tools/openai-venv, pinned by tools/python/requirements-openai.txt); by hand:

    .tools/openai-venv/bin/python tools/python/openai_client_check.py --g4cu build/g4cu

It starts the server on the tiny fixture (--port 0), then through the client: chat (plain and
streaming), with an image (a data: URL) and with audio (input_audio), a transcription, the model
list, and a malformed request (openai.BadRequestError); each answer is compared with HF's
greedy text / ids from tests/fixtures/chat/generate_cases.jsonl (the media cases' ids decoded
with the `tokenizers` package when it is installed, else only checked non-empty). Prints one
line per check and "openai client: N checks, F failed"; exit 1 when any failed."""
import argparse
import base64
import json
import os
import re
import signal
import subprocess
import sys

import openai

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FIX = os.path.join(ROOT, "tests", "fixtures")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--g4cu", default=os.path.join(ROOT, "build", "g4cu"))
    a = ap.parse_args()
    cases = {}
    for line in open(os.path.join(FIX, "chat", "generate_cases.jsonl"), encoding="utf-8"):
        d = json.loads(line)
        if d.get("package") == "mobius-tiny-f16":
            cases[d["name"]] = d
    try:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(FIX, "chat", "chat_bpe.json"))
        hf_text = lambda c: tok.decode(c["ids"], skip_special_tokens=True)
    except ImportError:
        hf_text = lambda c: None

    srv = subprocess.Popen([a.g4cu, "serve", os.path.join(FIX, "mobius-tiny-f16", "package"),
                            "--tokenizer", os.path.join(FIX, "chat", "chat_bpe.json"),
                            "--backend", "cpu", "--port", "0", "--parallel", "2"],
                           stdout=subprocess.PIPE, text=True)
    first = srv.stdout.readline()
    m = re.search(r"127\.0\.0\.1:(\d+)", first)
    if not m:
        srv.kill()
        print(f"FAIL the server's first line names no port: {first!r} (exit {srv.wait()})")
        print("openai client: 1 checks, 1 failed")
        return 1
    port = int(m.group(1))
    # No retries: a retried 5xx or dropped connection would hide a server fault.
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                           timeout=120)
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(f"{'ok' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}")

    try:
        models = client.models.list()
        check("models.list", [m.id for m in models.data] == ["package"])
        want = cases["chat_text"]["text"]
        r = client.chat.completions.create(model="package", max_tokens=40,
                                           messages=[{"role": "user", "content": "Hello, who are you?"}])
        check("chat = HF's text", r.choices[0].message.content == want, repr(r.choices[0].message.content))
        check("chat usage", r.usage.prompt_tokens == 21 and r.usage.completion_tokens == 40)
        parts = []
        for ch in client.chat.completions.create(model="package", max_tokens=40, stream=True,
                                                 messages=[{"role": "user", "content": "Hello, who are you?"}]):
            if ch.choices and ch.choices[0].delta.content:
                parts.append(ch.choices[0].delta.content)
        check("streamed chat = HF's text", "".join(parts) == want, repr("".join(parts)))

        v = cases["vqa_square"]
        img = base64.b64encode(open(os.path.join(FIX, v["file"]), "rb").read()).decode()
        r = client.chat.completions.create(model="package", max_tokens=v["max_new"], messages=[
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{img}"}},
                {"type": "text", "text": v["text"]}]}])
        t = r.choices[0].message.content
        check("image (data: URL) = HF", t == hf_text(v) if hf_text(v) is not None else bool(t), repr(t))

        s = cases["asr_tone"]
        wav = open(os.path.join(FIX, s["file"]), "rb").read()
        r = client.chat.completions.create(model="package", max_tokens=s["max_new"], messages=[
            {"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav).decode(),
                                                        "format": "wav"}},
                {"type": "text", "text": s["text"]}]}])
        t = r.choices[0].message.content
        check("audio (input_audio) = HF", t == hf_text(s) if hf_text(s) is not None else bool(t), repr(t))

        tr = client.audio.transcriptions.create(model="package", file=("tone.wav", wav, "audio/wav"))
        w = hf_text(s)
        check("transcription starts with HF's text", tr.text.startswith(w) if w is not None else bool(tr.text),
              repr(tr.text[:80]))

        try:
            client.chat.completions.create(model="package", messages=[{"role": "user", "content": "x"}],
                                           max_tokens=0)
            check("max_tokens 0 is a BadRequestError", False)
        except openai.BadRequestError as e:
            check("max_tokens 0 is a BadRequestError", "max_tokens" in str(e))
    finally:
        srv.send_signal(signal.SIGTERM)
        code = srv.wait(timeout=60)
        check("exit 0 after SIGTERM", code == 0, str(code))
    print(f"openai client: {len(results)} checks, {results.count(False)} failed")
    return 1 if False in results else 0


if __name__ == "__main__":
    sys.exit(main())
