#!/usr/bin/env python3
"""Multi-turn chat cases for tests/test_chat.c: the canonical Gemma-4 E2B chat template
(tests/fixtures/chat/gemma4_e2b_chat_template.jinja and the earlier _c7c2837c version) rendered
by Jinja2 as transformers' apply_chat_template renders it (trim_blocks, lstrip_blocks,
loopcontrols, raise_exception), add_generation_prompt=True, no tools. Media parts are written
{"type": "image"} / {"type": "audio"} and come before the text in each message (as g4cu orders
them). Writes tests/fixtures/chat/multiturn_cases.jsonl: one line a case, {name, system,
messages, rendered}. Needs only jinja2 (3.1); run from the repository root:
    python3 tools/python/make_multiturn_fixture.py
"""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

D = "tests/fixtures/chat/"


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def env():
    e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                      extensions=[jinja2.ext.loopcontrols])
    e.globals["raise_exception"] = raise_exception
    return e


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


U = lambda t: {"role": "user", "content": t}
A = lambda t: {"role": "assistant", "content": t}
CASES = [
    ("two_turns", None, [U("Hi there"), A("Hello! How can I help?"), U(" What is 2+2? ")]),
    ("system_two_turns", "Be brief.", [U("a"), A("b"), U("c")]),
    ("ends_with_assistant", None, [U("Say x"), A("x")]),
    ("assistant_thinking", None,
     [U("q"), A("<|channel>thought\nhmm<channel|>The answer  "), U("and?")]),
    ("two_assistants", None, [U("q"), A("part one"), A("part two"), U("next")]),
    ("media_history", None,
     [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]},
      A("A square."),
      {"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": "And this?"}]}]),
    ("image_then_audio_one_turn", "sys",
     [{"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "audio"},
                                   {"type": "text", "text": "all"}]},
      A("ok"), U("more")]),
    ("tool_call_and_response", None,
     [U("Weather in Paris?"),
      {"role": "assistant", "content": None,
       "tool_calls": [call("c1", "get_weather",
                           {"city": "Paris", "Units": "metric", "days": 3, "alerts": True,
                            "ratio": 0.5, "extra": None, "tags": ["a", 2],
                            "nested": {"b": 1, "A": "x"}})]},
      {"role": "tool", "tool_call_id": "c1", "content": "18 C, sunny"}]),
    ("tool_response_then_user", None,
     [U("Weather?"),
      {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_weather", {"city": "Oslo"})]},
      {"role": "tool", "tool_call_id": "c1", "content": "-3 C"},
      A("It is -3 C in Oslo."), U("Thanks. Warmer places?")]),
    ("tool_call_no_response", None,
     [U("Time?"), {"role": "assistant", "content": "", "tool_calls": [call("t", "now", {})]}]),
    ("two_calls_named_responses", "You call tools.",
     [U("Both"),
      {"role": "assistant", "content": "Checking.",
       "tool_calls": [call("a1", "f", {"x": 1}), call("a2", "g", {"y": "z"})]},
      {"role": "tool", "tool_call_id": "a2", "content": "G"},
      {"role": "tool", "name": "h", "content": "H"},
      U("ok")]),
    ("tool_without_call_dropped", None, [U("a"), {"role": "tool", "content": "x"}, U("b")]),
]


def main():
    e = env()
    tpls = [e.from_string(open(D + f).read()) for f in
            ("gemma4_e2b_chat_template.jinja", "gemma4_e2b_chat_template_c7c2837c.jinja")]
    out = []
    for name, system, msgs in CASES:
        full = ([{"role": "system", "content": system}] if system is not None else []) + msgs
        r = [t.render(messages=full, bos_token="<bos>", add_generation_prompt=True) for t in tpls]
        if r[0] != r[1]:
            print(f"{name}: the two template versions differ; kept the canonical one",
                  file=sys.stderr)
        out.append({"name": name, "system": system, "messages": msgs, "rendered": r[0]})
    with open(D + "multiturn_cases.jsonl", "w") as f:
        for o in out:
            f.write(json.dumps(o, ensure_ascii=False) + "\n")
    print(f"{len(out)} cases -> {D}multiturn_cases.jsonl (jinja2 {jinja2.__version__})")


if __name__ == "__main__":
    main()
