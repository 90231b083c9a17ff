#!/usr/bin/env python3
"""Writes tests/fixtures/chat/tool_cases.jsonl: the E2B chat template's rendering of tool
declarations and tool calls, made by Jinja2 itself (read by tests/test_chat_tools.c; nothing
here is produced by g4cu).

Each line: {"name", "tools": [OpenAI tool objects], "system": text or null, "rendered": the
template's text for messages [system?, user "Hi"] with these tools and the generation prompt,
"call": {"name", "arguments"} and "call_text": the template's rendering of that call in an
assistant message's tool_calls (what the model is trained to write)}.

The environment is the one transformers' apply_chat_template builds (an immutable sandbox,
trim_blocks and lstrip_blocks, the loopcontrols extension, raise_exception), over
tests/fixtures/chat/gemma4_e2b_chat_template.jinja. Run from the repository root:
  python3 tools/python/make_tool_fixture.py [--out tests/fixtures/chat]
"""
import argparse
import json
import os

from jinja2.sandbox import ImmutableSandboxedEnvironment

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer"}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "Tags": {"type": "array", "items": {"type": "string"}, "description": "tags"},
        "filter": {"type": "object", "description": "filters",
                   "properties": {"site": {"type": "string"}, "n": {"type": "number"}},
                   "required": ["site"]},
        "safe": {"type": "boolean", "nullable": True}},
        "required": ["query", "filter"]}}}
NOARGS = {"type": "function", "function": {"name": "now", "description": "The time."}}

CASES = [
    ("one_tool", [WEATHER], None, {"name": "get_weather",
                                   "arguments": {"city": "Paris", "days": 3}}),
    ("two_tools_system", [WEATHER, SEARCH], "Be brief.",
     {"name": "search", "arguments": {"query": "a \"b\"", "filter": {"site": "x.org", "n": 2.5},
                                      "Tags": ["p", "q"], "safe": True, "none": None}}),
    ("no_args", [NOARGS], None, {"name": "now", "arguments": {}}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/chat")
    a = ap.parse_args()
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(msg):
        raise ValueError(msg)
    env.globals["raise_exception"] = raise_exception
    with open(os.path.join(a.out, "gemma4_e2b_chat_template.jinja"), encoding="utf-8") as f:
        tpl = env.from_string(f.read())
    with open(os.path.join(a.out, "tool_cases.jsonl"), "w", encoding="utf-8") as out:
        for name, tools, system, call in CASES:
            msgs = ([{"role": "system", "content": system}] if system else []) + \
                [{"role": "user", "content": "Hi"}]
            rendered = tpl.render(messages=msgs, tools=tools, bos_token="<bos>",
                                  add_generation_prompt=True)
            with_call = tpl.render(messages=msgs + [{"role": "assistant", "content": "",
                                                     "tool_calls": [{"id": "c1", "type":
                                                                     "function",
                                                                     "function": call}]}],
                                   tools=tools, bos_token="<bos>", add_generation_prompt=False)
            start = with_call.index("<|tool_call>")
            end = with_call.index("<tool_call|>") + len("<tool_call|>")
            out.write(json.dumps({"name": name, "tools": tools, "system": system,
                                  "rendered": rendered, "call": call,
                                  "call_text": with_call[start:end]}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
