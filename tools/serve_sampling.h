// serve_sampling.h: the sampling fields of `g4cu serve`'s chat requests (tools/serve.c) and
// their response parts, written against the public C API only:
//   logprobs (bool), top_logprobs (0..20, with logprobs), presence_penalty and
//   frequency_penalty ([-2, 2]), repetition_penalty ((0, 10]), min_p ([0, 1]), logit_bias
//   ({"<token id>": bias in [-100, 100]}, at most SS_MAX_BIAS), n (1..SS_MAX_N; not with
//   stream), response_format ({"type": "text" | "json_object" | "json_schema", "json_schema":
//   {"name", "schema", "strict", "description"}}), tools (function tools, Gemma-4's format)
//   with tool_choice "auto" (or absent; "none": the tools are not shown to the model; not with
//   stream).
#ifndef G4_SERVE_SAMPLING_H
#define G4_SERVE_SAMPLING_H

#include <cjson/cJSON.h>
#include <g4cu.h>

#define SS_MAX_N    8
#define SS_MAX_BIAS 300

// What a request's sampling fields own (freed by ss_free).
typedef struct {
    int n;         // choices (1 by default)
    char *schema;  // the json_schema's schema, printed
    char *tools;   // the tools array, printed (tool_choice "auto" or absent)
    int32_t *bias_ids;
    float *bias_vals;
} ss_fields;

// Reads the fields of root into rq (and f, which owns their buffers). 0 with a message in
// err[0..n_err) naming the field when a value is refused.
int ss_parse(const cJSON *root, g4cu_request *rq, ss_fields *f, int stream, char *err,
             size_t n_err);
void ss_free(ss_fields *f);

// OpenAI's chat "logprobs" object {"content": [...], "refusal": null} for lp[0..n) (each with
// its token text, bytes and top_logprobs: top of them). Tokens with no bytes (end of turn) are
// left out.
cJSON *ss_logprobs(g4cu_model *m, const g4cu_token_logprob *lp, size_t n, int top);

// A chat choice's "message" content and tool_calls (ids call_<id>_<k>) from r. A generation
// that opened the thought channel (<|channel>) answers with what follows the last <channel|>
// ("" while it never closed), cut before the first of stop[0, n_stop), and the thought in
// reasoning_content; t: the model's tokenizer (NULL: the text as it is).
void ss_message(cJSON *msg, const g4cu_result *r, unsigned long long id, const g4cu_tokenizer *t,
                const char *const *stop, int n_stop);

#endif
