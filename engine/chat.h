// chat.h: the Gemma-4 E2B chat template for one user turn (with an optional system turn), as
// token ids.
//
// What HF produces (transformers 5.17, Gemma4Processor.apply_chat_template(messages,
// tokenize=True, add_generation_prompt=True) with the E2B chat template; spec
// gemma4-architecture.md 6.2; the template text and the ids it gives are in
// tests/fixtures/chat/):
//
//   <bos>                                                   the template's bos_token
//   [<|turn>system\n{system}<turn|>\n]                      only when there is a system message
//   <|turn>user\n{media...}{text}<turn|>\n
//   <|turn>model\n                                          the generation prompt (E2B has no
//                                                           empty thought channel after it)
//
// - {text} is the user text through Jinja's `trim` (Python str.strip(): Unicode whitespace);
//   a system message sent as a string is trimmed the same way, one sent as text parts
//   ([{"type": "text", "text": ...}], as the lmms-eval / Olive harness sends its system prompt)
//   becomes trim(text) + " " (the template appends a space after each part).
// - {media...}: the template writes one <|image|> / <|audio|> per item; the processor expands
//   each to <|image> + N x <|image|> + <image|> (N = the image's soft tokens) and
//   <|audio> + M x <|audio|> + <audio|>, with no separators. Images come before audio, and both
//   before the text, as the eval harness orders its content parts.
// - The text is tokenized with add_special_tokens=False: the processor drops the tokenizer's
//   own <bos> because the template's text already starts with it, so there is exactly one.
// Special tokens are looked up in the tokenizer by name; no id is assumed.
#ifndef G4_CHAT_H
#define G4_CHAT_H

#include "loader/tokenizer.h"

// The template's special tokens in a tokenizer (-1 where the tokenizer has none; the turn
// tokens and <bos> are required, the media ones only by a request with media).
typedef struct {
    int bos;             // <bos>
    int turn_open;       // <|turn>
    int turn_close;      // <turn|>
    int boi, image, eoi; // <|image> <|image|> <image|>
    int boa, audio, eoa; // <|audio> <|audio|> <audio|>
} g4_chat_tokens;

// Looks the tokens up by name. Errors (a tokenizer without <bos>, <|turn> or <turn|>) name
// `what` (the tokenizer file).
int g4_chat_tokens_find(const g4_tokenizer *tok, const char *what, g4_chat_tokens *out);

// A conversation's message after the system turn (g4_chat_request's messages): the template's
// message loop (the canonical E2B template, tests/fixtures/chat/gemma4_e2b_chat_template.jinja):
//   user:      <|turn>user\n{media...}{trim(text)}<turn|>\n
//   model:     <|turn>model\n{calls}{responses}{strip_thinking(text)}<turn|>\n, where a call is
//              <|tool_call>call:NAME{k:v,...}<tool_call|> (keys sorted as Jinja's dictsort) and
//              the tool messages right after it become
//              <|tool_response>response:NAME{value:<|"|>TEXT<|"|>}<tool_response|>; a model
//              message that follows a model message continues its turn; a call without a
//              response leaves the turn open at <|tool_response>
//   tool:      only as a response to the model message before it (alone, the template drops it)
// and then the generation prompt <|turn>model\n, unless the last model turn ended in a call or
// a tool response (the model goes on in its own turn).
typedef enum { G4_CHAT_USER, G4_CHAT_MODEL, G4_CHAT_TOOL } g4_chat_role;

typedef struct {
    const char *id;        // the call's id (a tool message's tool_call_id names it), NULL: none
    const char *name;      // the function's name
    const char *arguments; // a JSON object's text (NULL: no arguments)
} g4_chat_tool_call;

typedef struct {
    g4_chat_role role;
    const char *text;      // its text (NULL: none; valid UTF-8)
    int n_images, n_audio; // user: its media, the next ones of media_tokens (images first)
    const g4_chat_tool_call *tool_calls; // model: the calls it made
    int n_tool_calls;
    const char *tool_call_id; // tool: the call it answers (its name is then the call's)
    const char *name;         // tool: the function's name when no call id matches
} g4_chat_message;

typedef struct {
    const char *system;      // system message text, NULL for no system turn
    int system_as_parts;     // 1: sent as text parts (rendered trim(text) + " "), 0: a string
    const int *image_tokens; // [n_images] soft tokens of each image, in prompt order
    int n_images;
    const int *audio_tokens; // [n_audio] soft tokens of each clip
    int n_audio;
    const char *text; // the user text (NULL = none); must be valid UTF-8
    // A conversation instead of one user turn (text, image_tokens and audio_tokens unused):
    // messages[0..n_messages) with the soft-token counts of all their media in prompt order.
    const g4_chat_message *messages;
    int n_messages;
    const int *media_tokens;
    int n_media_tokens;
    const char *tools; // tool declarations (engine/chat_tools.h's g4_chat_tools_render) written
                       // after the system text in the system turn, which they open if needed
} g4_chat_request;

// The template's text before the processor's expansion (one <|image|> / <|audio|> per item),
// as apply_chat_template(tokenize=False) returns it. *out is a new string.
int g4_chat_render(const g4_chat_request *req, char **out);

// Appends the prompt's token ids to out. Errors: invalid UTF-8, a tokenizer without the media
// tokens a request needs, a negative soft-token count, and text that contains a media
// placeholder token itself (HF refuses that too: the count of placeholders would not match
// the media).
int g4_chat_encode(const g4_tokenizer *tok, const g4_chat_request *req, g4_ids *out);

#endif
