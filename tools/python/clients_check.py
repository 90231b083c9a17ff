#!/usr/bin/env python3
"""`g4cu serve` driven by three clients no one here wrote: the official `openai` package,
`litellm` and `langchain-openai` (PyPI, pinned in tools/python/requirements-openai.txt, in the
venv tools/install_deps.sh makes). tests/test_clients.sh runs it in CI; by hand:

    .tools/openai-venv/bin/python tools/python/clients_check.py --g4cu build/g4cu

It starts the server on the tiny fixture (--port 0, greedy: temperature 0) and, through each
client: a multi-turn chat (system, user, assistant, user), the same streamed, an image (a data:
URL) and audio (input_audio), logprobs with top_logprobs (greedy: the chosen token first among 3
alternatives, the tokens spelling the reply) and response_format json_schema (strict; over
seeds, each answer finishing "stop" validates against the schema, by hand; langchain's
with_structured_output parses it). The expected texts come from outside the server: the single-turn
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


# --- each client: (multi-turn messages) -> text, streamed text; (user content parts) -> text;
# ask(msgs, **fields) -> (content, finish_reason, [(token, logprob, [(token, logprob)] * k)]) ---
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

    def ask(msgs, **kw):
        ch = c.chat.completions.create(model="package", messages=msgs, **kw).choices[0]
        return ch.message.content, ch.finish_reason, lp_entries(ch.logprobs)
    return chat, f"openai {openai.__version__}", ask


def litellm_client(port):
    import litellm

    def chat(msgs, stream=False, n=MAX):
        r = litellm.completion(model="openai/package", api_base=f"http://127.0.0.1:{port}/v1",
                               api_key="none", messages=msgs, max_tokens=n, temperature=0,
                               stream=stream, num_retries=0)
        if not stream:
            return r.choices[0].message.content
        return "".join(ch.choices[0].delta.content or "" for ch in r if ch.choices)

    def ask(msgs, **kw):
        ch = litellm.completion(model="openai/package", api_base=f"http://127.0.0.1:{port}/v1",
                                api_key="none", messages=msgs, num_retries=0, **kw).choices[0]
        return ch.message.content, ch.finish_reason, lp_entries(getattr(ch, "logprobs", None))
    from importlib.metadata import version
    return chat, f"litellm {version('litellm')}", ask


def langchain_client(port):
    from importlib.metadata import version
    from langchain_openai import ChatOpenAI
    def chat(msgs, stream=False, n=MAX):
        llm = ChatOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", model="package",
                         max_tokens=n, temperature=0, max_retries=0, timeout=120)
        if not stream:
            return llm.invoke(msgs).content
        return "".join(ch.content for ch in llm.stream(msgs))

    def ask(msgs, max_tokens=MAX, temperature=0, seed=None, structured=None, **kw):
        llm = ChatOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", model="package",
                         max_tokens=max_tokens, temperature=temperature, seed=seed,
                         max_retries=0, timeout=120)
        if structured is not None: # langchain's own structured output: (parsed, finish_reason)
            r = llm.with_structured_output(structured, method="json_schema", strict=True,
                                           include_raw=True).invoke(msgs)
            return r["parsed"], r["raw"].response_metadata.get("finish_reason"), None
        m = llm.bind(**kw).invoke(msgs)
        return m.content, m.response_metadata.get("finish_reason"), \
            lp_entries(m.response_metadata.get("logprobs"))
    return chat, f"langchain-openai {version('langchain-openai')}", ask


def lp_entries(lp):
    """A reply's logprobs (the openai types, litellm's or langchain's dicts) as plain tuples."""
    if lp is None:
        return None
    get = lambda o, k: o.get(k) if isinstance(o, dict) else getattr(o, k, None)
    content = get(lp, "content")
    if content is None:
        return None
    return [(get(e, "token"), get(e, "logprob"),
             [(get(t, "token"), get(t, "logprob")) for t in (get(e, "top_logprobs") or [])])
            for e in content]


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
                chat, name, ask = make(port)
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
            sampling_cases(ask, name, check)
    finally:
        srv.send_signal(signal.SIGTERM)
        code = srv.wait(timeout=60)
        check("exit 0 after SIGTERM", code == 0, str(code))
    print(f"clients: {len(results)} checks, {results.count(False)} failed")
    return 1 if False in results else 0


def sampling_cases(ask, name, check):
    """Each client's logprobs / top_logprobs and response_format json_schema (constrained
    decoding), the cases clients_sampling_check.py runs in depth through the openai package."""
    from clients_sampling_check import SCHEMA, valid
    msgs = [{"role": "user", "content": "Say something."}]
    try:
        text, _, lp = ask(msgs, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
        ok = bool(lp) and all(len(top) == 3 and l <= 0 and top[0][0] == t and
                              abs(top[0][1] - l) < 1e-6 and top[0][1] >= top[2][1]
                              for t, l, top in lp)
        check(f"{name}: logprobs (greedy, top 3; the tokens spell the reply)",
              ok and "".join(t for t, _, _ in lp) == text, f"{lp!r} vs {text!r}")
    except Exception as e:
        check(f"{name}: logprobs", False, f"{type(e).__name__}: {e}")
    done = good = 0
    try:
        for seed in range(1, 9):
            if name.startswith("langchain"):
                parsed, fin, _ = ask(msgs, max_tokens=128, temperature=1.0, seed=seed,
                                     structured={"title": "person", **SCHEMA})
                if fin == "stop":
                    done += 1
                    good += valid(parsed)
                continue
            rf = {"type": "json_schema",
                  "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
            content, fin, _ = ask(msgs, max_tokens=128, temperature=1.0, seed=seed,
                                  response_format=rf)
            if fin == "stop":
                done += 1
                try:
                    good += valid(json.loads(content))
                except ValueError:
                    pass
        check(f"{name}: json_schema: every finished answer validates ({done} of 8 finished)",
              done >= 1 and good == done, f"{good} of {done} valid")
    except Exception as e:
        check(f"{name}: json_schema", False, f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    sys.exit(main())
