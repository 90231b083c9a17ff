// generate.h: token generation on a text model: chunked prefill, then one token at a time,
// greedy or sampled, until an EOS id, a stop string, max_new tokens or the context's end.
//
// Semantics (what HF's generate and the lmms-eval / Olive ORT-GenAI adapter do; spec
// eval-metrics.md 2.3, gemma4-architecture.md 6.1):
// - EOS ids: the model config's (genai_config.json eos_token_id: [1, 106] for E2B) plus the
//   caller's extras (the commands add the chat template's <turn|>; generation_config.json also
//   lists 50). The EOS token that ends generation is kept in `tokens`, as HF's generate
//   returns it; special tokens never reach the text.
// - Stop strings: after each token the generated ids are decoded (special tokens skipped) and
//   the text is cut before the first occurrence of any stop string (the stop string itself is
//   dropped), as the ORT adapter does. `ignore_stop` removes strings from the stop list (the
//   benchmark's ignore_stop_strings: ["\n\n"], which leaves lmms-eval's injected "\n\n" out).
// - Sampling (temperature > 0), in HF's order: logits / temperature, keep every logit >= the
//   k-th largest (HF TopKLogitsWarper; 0: all), then the smallest set of the most likely whose
//   probability reaches top_p (HF's TopPLogitsWarper: a token stays while the probability of
//   the tokens above it is below top_p; at least one stays), one draw from what is left.
//   temperature <= 0 is greedy: the first index of the largest logit (torch.argmax). The pick
//   is the sample op of kernels/ops.h, on the backend (the exact arithmetic of
//   kernels/ref/sample_math.h: every backend picks the same id from the same logits). The draw of
//   the token after position p is SplitMix64's output p for the seed: a pure function of
//   (seed, p), so the same seed gives the same tokens run to run (a different backend's
//   logits can differ in the last bits, and so can its samples).
// - Context: the KV cache holds prompt + max_new rows, at most the model's context. A prompt
//   longer than the context is a user error; when prompt + max_new does not fit, generation
//   stops where the context ends (stop reason "context").
// - Prefill runs in chunks of `prefill_chunk` rows (at most the state's max_tokens); soft
//   tokens are handed to each chunk in the order of their placeholders.
// - Streaming: on_text receives the text as it becomes final: never a partial UTF-8
//   character, never text from a trailing run of byte-fallback pieces (a later byte can still
//   change how the run decodes), never a tail that could be the start of a stop string.
//   The concatenation of all calls equals the result's text.
#ifndef G4_GENERATE_H
#define G4_GENERATE_H

#include <stdint.h>

#include "engine/json_mask.h"
#include "engine/sample_rules.h"
#include "engine/text_model.h"
#include "loader/tokenizer.h"

// --- one token from host logits ----------------------------------------------------------
// The sample op's reference on a host row (g4_sampler: engine/text_model.h): soft-cap is not
// applied. n is the draw index. A NaN logit is an internal error (it means a broken forward
// pass, never a valid distribution).
int g4_sample(const g4_sampler *s, const float *logits, int V, uint64_t seed, uint32_t n,
              int *token);

// --- stop strings and streamed text (text_stream.c) -------------------------------------------
typedef void (*g4_gen_text_fn)(void *ctx, const char *text, size_t len);

// Byte offset of the first occurrence of any of the n stop strings in text[0..len) (*which:
// its index), or -1.
long g4_find_stop(const char *const *stop, int n, const char *text, size_t len, int *which);

// The streamed text of a generation: after each token, update() passes on the part of the text
// that is final (see "Streaming" above); finish() passes on the rest of the final text.
typedef struct {
    const g4_tokenizer *tok;
    const char *const *stop; // (borrowed)
    int n_stop;
    g4_gen_text_fn fn;
    void *ctx;
    size_t emitted; // bytes passed on
    char *sent;     // what was passed on, [emitted]
} g4_text_stream;
void g4_text_stream_init(g4_text_stream *s, const g4_tokenizer *tok, const char *const *stop,
                         int n_stop, g4_gen_text_fn fn, void *ctx);
// ids[0..n): every token generated so far.
int g4_text_stream_update(g4_text_stream *s, const int *ids, size_t n);
// text: the final text (already cut before a stop string).
void g4_text_stream_finish(g4_text_stream *s, const char *text, size_t len);
void g4_text_stream_free(g4_text_stream *s);

// --- generation ------------------------------------------------------------------------------
#define G4_GEN_DEFAULT_MAX_NEW 256
#define G4_GEN_DEFAULT_CHUNK   512

typedef struct {
    int max_new;        // new tokens at most (>= 1)
    g4_sampler sampler; // greedy by default
    uint64_t seed;      // PRNG seed (sampling only)
    const int *eos;     // extra EOS ids beyond the config's
    int n_eos;
    const char *const *stop; // stop strings (non-empty UTF-8)
    int n_stop;
    const char *const *ignore_stop; // stop strings to leave out
    int n_ignore_stop;
    int prefill_chunk;      // rows per prefill forward (0: the state's max_tokens)
    int ignore_eos;         // 1: EOS ids do not end generation (llama.cpp --ignore-eos;
                            // benchmarks run max_new tokens on random weights with it)
    g4_gen_text_fn on_text; // streaming (NULL: none)
    void *on_text_ctx;
    const volatile int *cancel; // non-NULL: checked after each token; once non-zero the
                                // generation ends there (stop reason "cancelled": a streaming
                                // caller's callback or a server whose client left sets it)
    // Host-side sampling (engine/sample_rules.h). A request with any of these brings its logits
    // row to the host at each step (g4_text_forward) and picks there with the sample op's
    // reference; without them every step is the device's g4_text_step, as before.
    g4_logit_rules rules;
    int logprobs;     // 1: each token's log-probability (the result's logprobs, on_token)
    int top_logprobs; // 0..G4_MAX_TOP_LOGPROBS alternatives per token (with logprobs)
    const g4_json_schema *json;  // constrained decoding (NULL: none); needs vocab
    const g4_vocab_bytes *vocab; // the tokenizer's token bytes (g4_vocab_bytes_build)
    void (*on_token)(void *ctx, const g4_token_logprob *lp); // each token as it is picked
    void *on_token_ctx;                                       // (with logprobs)
} g4_gen_params;

// max_new G4_GEN_DEFAULT_MAX_NEW, greedy, top_p 1, seed 0, nothing else.
void g4_gen_params_default(g4_gen_params *p);

typedef enum {
    G4_STOP_EOS = 0,     // an EOS id was generated
    G4_STOP_STRING = 1,  // the text reached a stop string
    G4_STOP_MAX_NEW = 2, // max_new tokens were generated
    G4_STOP_CONTEXT = 3, // the context ended before max_new
    G4_STOP_CANCEL = 4,  // the caller's cancel flag was set
    G4_STOP_JSON = 5,    // the JSON value of a json constraint closed
} g4_stop_reason;
// "eos", "stop_string", "max_new", "context", "cancelled", "json_end".
const char *g4_stop_reason_name(g4_stop_reason r);

typedef struct {
    g4_ids tokens;   // generated ids (with the EOS id that ended it)
    char *text;      // decoded, special tokens skipped, cut before a stop string
    size_t text_len; // (the text may hold NUL bytes from <0x00> pieces)
    g4_stop_reason stop;
    int stop_id;             // the EOS id when stop == G4_STOP_EOS, else -1
    const char *stop_string; // the stop string found (borrowed from the params), else NULL
    int n_prompt;
    int max_new;          // the limit actually used (max_new, or less at the context's end)
    double prefill_ms;    // prompt forward passes and the first token's sampling
    double decode_ms;     // every later step (forward + sampling + stop checks)
    double prefill_tok_s; // n_prompt / prefill time
    double decode_tok_s;  // (tokens - 1) / decode time (0 when only one token)
    g4_token_logprob *logprobs; // [tokens.n] with params.logprobs, else NULL
} g4_gen_result;
void g4_gen_result_free(g4_gen_result *r);

// Generates after prompt[0..n_prompt) with soft tokens for its placeholders (NULL when it has
// none) on state s (of its model), which is reset first and left holding the request: a state
// serves one request after another without allocating (g4_text_state_reserve grows it when a
// request needs more rows than it has). Every token comes from g4_text_step (the prefill's
// last row, then one graph-replayed step per token where the backend has graphs): the same
// call every command and the benchmark make. tok decodes the text (stop strings and streaming
// need it; NULL: no text). Errors: an empty prompt, a prompt longer than the context, bad
// parameters, stop strings without a tokenizer, and forward errors.
int g4_generate(g4_text_state *s, const g4_tokenizer *tok, const int32_t *prompt, int n_prompt,
                const g4_soft_tokens *soft, const g4_gen_params *p, g4_gen_result *out);

// --- one generation, step by step ---------------------------------------------------------------
// g4_generate cut into the calls a batch (engine/batch.h) interleaves with other sequences':
//   begin: checks, sizes the state (reserve: resets it) and sets its sampler;
//   prefill: one chunk of the prompt (while at < n_prompt); the last chunk's step picks the
//            first token, which it accepts;
//   accept: a token some step chose for this sequence (its own state's next row): EOS, stop
//           strings, limits, streaming and the cancel flag, as g4_generate checks them; sets
//           done when the generation ends, else `next` is the id to feed the next step;
//   end:    the final text and timings into out (rc != 0: out is freed), always called once.
// g4_generate is begin + prefill until the prompt is in + (g4_text_step + accept) until done +
// end, so a sequence that a batch runs gets exactly the tokens g4_generate gives it wherever the
// batch's step gives each row the logits a step of its own would (the CPU backend: exactly).
typedef struct {
    g4_text_state *s;
    const g4_tokenizer *tok;
    g4_gen_params p;      // (the pointers in it are borrowed until end)
    g4_soft_tokens soft;  // (n 0: none)
    int32_t *prompt;      // a copy [n_prompt]
    int n_prompt;
    int at;               // prompt rows already prefilled
    int chunk, limit;     // rows per prefill chunk; the token limit (max_new or the context's)
    int soft_used;
    int32_t next;         // the last accepted token (the next step's input)
    int done;             // the generation has ended (out->stop says why)
    int started;          // begin got as far as the stream (end frees it)
    const char **stops;   // the active stop strings [n_stops]
    int n_stops;
    g4_text_stream ts;
    char *text;           // the decoded text (stop strings)
    size_t text_len;
    double t0, t1, t2;
    g4_gen_result *out;
    struct g4_host_pick *hp; // the request's logits row picked on the host (logprobs,
                             // penalties, logit_bias, min_p, the JSON mask), else NULL
} g4_gen_seq;
int g4_gen_seq_begin(g4_gen_seq *q, g4_text_state *s, const g4_tokenizer *tok,
                     const int32_t *prompt, int n_prompt, const g4_soft_tokens *soft,
                     const g4_gen_params *p, g4_gen_result *out);
int g4_gen_seq_prefill(g4_gen_seq *q);
// The same with the chunk cut to at most max_rows rows (>= 1): a batch's prefill budget.
int g4_gen_seq_prefill_upto(g4_gen_seq *q, int max_rows);
int g4_gen_seq_accept(g4_gen_seq *q, int32_t id);
// A batch step took the prompt's next T rows itself (g4_text_batch_step_rows: ids
// q->prompt + q->at, which advanced the state's n_past by T; a text prompt: no soft tokens, no
// host pick): marks them prefilled. When they were the prompt's last, `first` is the token the
// step picked after them, accepted as the prefill's last chunk's pick is.
int g4_gen_seq_rows_done(g4_gen_seq *q, int T, int32_t first);
// Ends the generation where it is (stop reason "cancelled").
void g4_gen_seq_cancel(g4_gen_seq *q);
int g4_gen_seq_end(g4_gen_seq *q, int rc);

#endif
