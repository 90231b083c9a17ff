#!/usr/bin/env python3
"""`g4cu serve` driven by three clients no one here wrote: the official `openai` package,
`litellm` and `langchain-openai` (PyPI, pinned in tools/python/requirements-openai.txt, in the
venv tools/install_deps.sh makes). tests/test_clients.sh runs it in CI; by hand:

    .tools/openai-venv/bin/python tools/python/clients_check.py --g4cu build/g4cu

It starts the server on the tiny fixture (--port 0, greedy: temperature 0) and, through each
client: a multi-turn chat (system, user, assistant, user), the same streamed, an image (a data:
URL) and audio (input_audio). The expected texts come from outside the server: the single-turn
media answers are HF's greedy ids (tests/fixtures/chat/generate_cases.jsonl) decoded with the
`tokenizers` package; the multi-turn answer is the greedy continuation of the prompt that Jinja
renders from the canonical chat template (tests/fixtures/chat/multiturn_cases.jsonl, case
system_two_turns), taken from /v1/completions on that rendered text (no template involved) and
equal for all three clients, plain and streamed. Prints one line per check and
"clients: N checks, F failed"; exit 1 when any failed."""
import argparse
import base64
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # (no fetch of litellm's price list)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FIX = os.path.join(ROOT, "tests", "fixtures")
MAX = 12  # new tokens a chat answer


def load_cases():
    gen, conv = {}, {}
    for line in open(os.path.join(FIX, "chat", "generate_cases.jsonl"), encoding="utf-8"):
        d = json.loads(line)
        if d.get("package") == "mobius-tiny-f16":
            gen[d["name"]] = d
    for line in open(os.path.join(FIX, "chat", "multiturn_cases.jsonl"), encoding="utf-8"):
        d = json.loads(line)
        conv[d["name"]] = d
    return gen, conv


def start(g4cu):
    srv = subprocess.Popen([g4cu, "serve", os.path.join(FIX, "mobius-tiny-f16", "package"),
                            "--tokenizer", os.path.join(FIX, "chat", "chat_bpe.json"),
                            "--backend", "cpu", "--port", "0", "--parallel", "2"],
                           stdout=subprocess.PIPE, text=True)
    m = re.search(r"127\.0\.0\.1:(\d+)", srv.stdout.readline())
    return srv, int(m.group(1)) if m else 0


def post(port, path, body):
    rq = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=120) as r:
        return json.load(r)


# --- each client: (multi-turn messages) -> text, streamed text; (user content parts) -> text ---
def openai_client(port):
    import openai
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                      timeout=120)

    def chat(msgs, stream=False, n=MAX):
        r = c.chat.completions.create(model="package", messages=msgs, max_tokens=n,
                                      temperature=0, stream=stream)
        if not stream:
            return r.choices[0].message.content
        return "".join(ch.choices[0].delta.content or "" for ch in r if ch.choices)
    return chat, f"openai {openai.__version__}"


def litellm_client(port):
    import litellm

    def chat(msgs, stream=False, n=MAX):
        r = litellm.completion(model="openai/package", api_base=f"http://127.0.0.1:{port}/v1",
                               api_key="none", messages=msgs, max_tokens=n, temperature=0,
                               stream=stream, num_retries=0)
        if not stream:
            return r.choices[0].message.content
        return "".join(ch.choices[0].delta.content or "" for ch in r if ch.choices)
    from importlib.metadata import version
    return chat, f"litellm {version('litellm')}"


def langchain_client(port):
    from importlib.metadata import version
    from langchain_openai import ChatOpenAI
    def chat(msgs, stream=False, n=MAX):
        llm = ChatOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", model="package",
                         max_tokens=n, temperature=0, max_retries=0, timeout=120)
        if not stream:
            return llm.invoke(msgs).content
        return "".join(ch.content for ch in llm.stream(msgs))
    return chat, f"langchain-openai {version('langchain-openai')}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--g4cu", default=os.path.join(ROOT, "build", "g4cu"))
    a = ap.parse_args()
    gen, conv = load_cases()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(FIX, "chat", "chat_bpe.json"))
    hf_text = lambda c: tok.decode(c["ids"], skip_special_tokens=True)
    results = []

    def check(name, ok, detail=""):
        results.append(bool(ok))
        print(f"{'ok' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}")

    srv, port = start(a.g4cu)
    if not port:
        srv.kill()
        print("FAIL the server's first line names no port")
        print("clients: 1 checks, 1 failed")
        return 1
    try:
        case = conv["system_two_turns"]
        msgs = [{"role": "system", "content": case["system"]}] + case["messages"]
        raw = post(port, "/v1/completions", {"prompt": case["rendered"], "max_tokens": MAX})
        want_turns = raw["choices"][0]["text"]
        v, s = gen["vqa_square"], gen["asr_tone"]
        img = base64.b64encode(open(os.path.join(FIX, v["file"]), "rb").read()).decode()
        wav = base64.b64encode(open(os.path.join(FIX, s["file"]), "rb").read()).decode()
        image_msgs = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{img}"}},
            {"type": "text", "text": v["text"]}]}]
        audio_msgs = [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}},
            {"type": "text", "text": s["text"]}]}]
        for make in (openai_client, litellm_client, langchain_client):
            try:
                chat, name = make(port)
            except ImportError as e:
                check(f"{make.__name__}: importable", False, str(e))
                continue
            print(f"-- {name}")
            for what, fn in [
                ("multi-turn = the rendered prompt's greedy text", lambda: chat(msgs)),
                ("multi-turn streamed = the same", lambda: chat(msgs, stream=True)),
            ]:
                try:
                    t = fn()
                    # (the chat also stops at <turn|>: its text is a prefix of the raw one)
                    check(f"{name}: {what}", t and want_turns.startswith(t), repr(t))
                except Exception as e:  # a client that cannot parse us is a failure, said
                    check(f"{name}: {what}", False, f"{type(e).__name__}: {e}")
            for what, m, c in [("image (data: URL) = HF", image_msgs, v),
                               ("audio (input_audio) = HF", audio_msgs, s)]:
                try:
                    want = hf_text(c)
                    got = chat(m, n=c["max_new"])
                    check(f"{name}: {what}", got == want, repr(got))
                except Exception as e:
                    check(f"{name}: {what}", False, f"{type(e).__name__}: {e}")
            sampling_cases(chat, name, check)
    finally:
        srv.send_signal(signal.SIGTERM)
        code = srv.wait(timeout=60)
        check("exit 0 after SIGTERM", code == 0, str(code))
    print(f"clients: {len(results)} checks, {results.count(False)} failed")
    return 1 if False in results else 0


def sampling_cases(chat, name, check):
    """The sampling helper's cases go here, for each client: logprobs / top_logprobs, and
    response_format with a JSON schema (constrained decoding), when the server takes them."""


if __name__ == "__main__":
    sys.exit(main())
