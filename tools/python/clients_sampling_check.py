#!/usr/bin/env python3
"""`g4cu serve`'s sampling fields through the official `openai` Python package:
tests/test_openai_client.sh runs it in CI (after openai_client_check.py) with the venv tools/install_deps.sh makes
(.tools/openai-venv, the pins of tools/python/requirements-openai.txt); by hand:

    .tools/openai-venv/bin/python tools/python/clients_sampling_check.py --g4cu build/g4cu

It starts the server on the tiny fixture (--port 0) and checks, through the client's own
types: logprobs with top_logprobs (plain and streamed: one entry per content token, each with
its token text, bytes and 3 alternatives, most likely first, the chosen one's logprob <= 0 and
among them when greedy), response_format json_schema (strict) and json_object over several
seeds (each answer finishing "stop" parses and validates, checked here by hand), n = 3 sampled
choices, logit_bias forcing a token, tools reaching the prompt, and the 400s for an unsupported
schema keyword and tool_choice "required".
Prints one line per check and "clients sampling: N checks, F failed"; exit 1 when any failed."""
import argparse
import json
import os
import re
import sys
import subprocess

import openai

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FIX = os.path.join(ROOT, "tests", "fixtures")

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"enum": ["ann", "bob"]},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def valid(v):
    """SCHEMA's rules, by hand."""
    if not isinstance(v, dict) or set(v) - {"name", "age", "tags"}:
        return False
    if not {"name", "age", "tags"} <= set(v):
        return False
    return (v["name"] in ("ann", "bob") and isinstance(v["age"], int)
            and not isinstance(v["age"], bool) and isinstance(v["tags"], list)
            and all(t in ("a", "b", 3) and not isinstance(t, bool) for t in v["tags"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--g4cu", default=os.path.join(ROOT, "build", "g4cu"))
    a = ap.parse_args()
    srv = subprocess.Popen([a.g4cu, "serve", os.path.join(FIX, "mobius-tiny-f16", "package"),
                            "--tokenizer", os.path.join(FIX, "chat", "chat_bpe.json"),
                            "--backend", "cpu", "--port", "0", "--parallel", "1"],
                           stdout=subprocess.PIPE, text=True)
    first = srv.stdout.readline()
    m = re.search(r"127\.0\.0\.1:(\d+)", first)
    if not m:
        srv.kill()
        print(f"FAIL the server's first line names no port: {first!r}")
        print("clients sampling: 1 checks, 1 failed")
        return 1
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{m.group(1)}/v1", api_key="none",
                           max_retries=0, timeout=120)
    results = []

    def check(name, ok, detail=""):
        results.append(bool(ok))
        print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"))

    msgs = [{"role": "user", "content": "Say something."}]
    try:
        # 1. logprobs, greedy: the chosen token is the first alternative
        r = client.chat.completions.create(model="g4cu", messages=msgs, max_tokens=8,
                                           logprobs=True, top_logprobs=3)
        c = r.choices[0]
        lp = c.logprobs.content if c.logprobs else None
        ok = lp is not None and len(lp) >= 1
        text = "".join(e.token for e in lp) if ok else ""
        ok = ok and all(len(e.top_logprobs) == 3 and e.logprob <= 0 and
                        e.top_logprobs[0].token == e.token and
                        abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6 and
                        e.top_logprobs[0].logprob >= e.top_logprobs[2].logprob and
                        bytes(e.bytes).decode("utf-8", "replace") == e.token for e in lp)
        check("logprobs (greedy, top 3)", ok and text == c.message.content,
              f"{lp!r} vs {c.message.content!r}")
        # 2. streamed: the same entries, spread over the chunks
        entries, content = [], ""
        for ch in client.chat.completions.create(model="g4cu", messages=msgs, max_tokens=8,
                                                 logprobs=True, top_logprobs=3, stream=True):
            if not ch.choices:
                continue
            d = ch.choices[0]
            content += d.delta.content or ""
            if d.logprobs and d.logprobs.content:
                entries += d.logprobs.content
        check("logprobs streamed", [e.token for e in entries] == [e.token for e in lp] and
              content == c.message.content, f"{[e.token for e in entries]} vs {content!r}")
        # 3. json_schema (strict) and json_object across seeds
        done = good = 0
        for seed in range(1, 9):
            r = client.chat.completions.create(
                model="g4cu", messages=msgs, max_tokens=128, temperature=1.0, seed=seed,
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "person", "schema": SCHEMA,
                                                 "strict": True}})
            c = r.choices[0]
            if c.finish_reason == "stop":
                done += 1
                try:
                    good += valid(json.loads(c.message.content))
                except ValueError:
                    print(f"     not JSON: {c.message.content!r}")
            elif c.finish_reason != "length":
                good -= 100
        print(f"     json_schema: {done} of 8 answers finished")
        check("json_schema: every finished answer validates", done >= 1 and good == done,
              f"{good} of {done} valid")
        done = good = 0
        for seed in range(1, 5):
            r = client.chat.completions.create(model="g4cu", messages=msgs, max_tokens=48,
                                               temperature=1.0, seed=seed,
                                               response_format={"type": "json_object"})
            c = r.choices[0]
            if c.finish_reason == "stop":
                done += 1
                try:
                    good += isinstance(json.loads(c.message.content), dict)
                except ValueError:
                    pass
        check("json_object: every finished answer is an object", good == done,
              f"{good} of {done}")
        # 4. n = 3 sampled choices, indexed 0..2
        r = client.chat.completions.create(model="g4cu", messages=msgs, max_tokens=6, n=3,
                                           temperature=1.0, seed=5)
        check("n = 3", [c.index for c in r.choices] == [0, 1, 2] and
              r.usage.completion_tokens >= 3, f"{r.choices!r}")
        # 5. logit_bias: +100 on the greedy answer's second token forces it everywhere
        forced = None
        r = client.chat.completions.create(model="g4cu", messages=msgs, max_tokens=4,
                                           logprobs=True, logit_bias={"300": 100})
        forced = [e.token for e in r.choices[0].logprobs.content]
        check("logit_bias", len(set(forced)) == 1 and len(forced) == 4, f"{forced}")
        # 6. tools: the declarations reach the prompt (a random model does not call them)
        plain = client.chat.completions.create(model="g4cu", messages=msgs, max_tokens=2)
        r = client.chat.completions.create(model="g4cu", messages=msgs, max_tokens=2,
                                           tools=TOOLS)
        check("tools accepted, declared in the prompt",
              r.usage.prompt_tokens > plain.usage.prompt_tokens + 10 and
              r.choices[0].finish_reason in ("stop", "length", "tool_calls"),
              f"{r.usage.prompt_tokens} vs {plain.usage.prompt_tokens}")
        # 7. refusals name the field
        for name, kw, word in [
                ("schema keyword", {"response_format": {"type": "json_schema", "json_schema": {
                    "name": "x", "schema": {"type": "string", "pattern": "a+"}}}}, "pattern"),
                ("tool_choice required", {"tools": TOOLS, "tool_choice": "required"},
                 "tool_choice")]:
            try:
                client.chat.completions.create(model="g4cu", messages=msgs, max_tokens=4, **kw)
                check(f"400 for {name}", False, "accepted")
            except openai.BadRequestError as e:
                check(f"400 for {name}", word in str(e), str(e))
    except Exception as e:  # a failure of the client or server, not of one check
        check("no exception", False, repr(e))
    srv.terminate()
    rc = srv.wait(timeout=60)
    check("server exit 0 after SIGTERM", rc == 0, f"exit {rc}")
    failed = results.count(False)
    print(f"clients sampling: {len(results)} checks, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
