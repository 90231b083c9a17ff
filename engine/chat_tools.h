// chat_tools.h: Gemma-4's tool-call format, apart from engine/chat.c's turns: the tool
// declarations the E2B chat template writes into the system turn, and the calls the model
// writes back (tests/fixtures/chat/tool_cases.jsonl: Jinja2's own rendering of the template).
//
//   declarations: <|tool>declaration:NAME{description:<|"|>...<|"|>,parameters:{properties:{
//                 KEY:{description:...,type:<|"|>STRING<|"|>},...},required:[...],
//                 type:<|"|>OBJECT<|"|>}}<tool|>   (one per tool; keys sorted case-blind)
//   a call:       <|tool_call>call:NAME{KEY:VALUE,...}<tool_call|>   then <|tool_response>
//   values:       <|"|>text<|"|>, numbers, true, false, null, {KEY:VALUE,...}, [VALUE,...]
#ifndef G4_CHAT_TOOLS_H
#define G4_CHAT_TOOLS_H

#include <stddef.h>

#include "loader/tokenizer.h"

// The declarations of tools_json (OpenAI's "tools": an array of {"type": "function",
// "function": {"name", "description", "parameters"}}) as the template writes them, one
// <|tool>...<tool|> each, into *out (a new string). Errors name the tool and field.
int g4_chat_tools_render(const char *tools_json, size_t len, char **out);

// One call's text between <|tool_call> and <tool_call|> ("call:NAME{...}") -> its name and its
// arguments as JSON (new strings). A user error (naming the byte) when it is not that form.
int g4_tool_call_parse(const char *text, size_t len, char **name, char **arguments_json);

// The calls among generated ids[0..n): each <|tool_call> ... <tool_call|> span whose text
// (special tokens kept) parses (a span that does not stays text). *calls gets them (name and
// arguments as new strings; *n_calls, 0 when none) and, when there is any, *text the ids
// outside them decoded (special tokens skipped). Errors: the tokenizer lacks the two tokens.
typedef struct {
    char *name;
    char *arguments; // a JSON object's text
} g4_tool_call;
int g4_tool_calls_extract(const g4_tokenizer *t, const int *ids, int n, g4_tool_call **calls,
                          int *n_calls, char **text, size_t *text_len);
void g4_tool_calls_free(g4_tool_call *calls, int n);

#endif
