// g4cu.h: the public C API of g4cu (libg4cu.so, `pkg-config --cflags --libs g4cu`): Gemma-4
// E2B-it (text, vision, audio) from an onnxruntime-genai package directory, on the CPU or a GPU.
//
// A model (g4cu_model) is loaded once and never changes; a state (g4cu_state) holds one
// request at a time (its KV cache, workspaces and, on CUDA, its own stream and captured decode
// step) and is reused by the next request without allocating. A model may have several
// states, each used by one thread at a time, all at once (the towers and the tokenizer are
// shared: their part of a request runs under the model's lock). A call on a state that is
// already running one (another thread's, or one made from its own on_text) is refused with
// G4CU_EUSER ("the state is in use"), never run on the same buffers.
//
// Errors: every function that can fail returns G4CU_OK (0), G4CU_EUSER (bad input: a file, a
// value or a request, named in the message) or G4CU_EINTERNAL (a bug or an environment failure),
// and leaves one line for g4cu_last_error() on the calling thread. The library never exits
// the process on an error and never prints (as in the engine, only a failed allocation or a
// broken internal invariant aborts).
//
//   g4cu_model *m;  g4cu_state *s;  g4cu_request rq;  g4cu_result r;
//   g4cu_model_params mp;  g4cu_model_params_default(&mp);
//   if (g4cu_model_load("pkg", &mp, &m) || g4cu_state_new(m, &s)) fail(g4cu_last_error());
//   g4cu_request_default(&rq);  rq.text = "Describe the weather.";  rq.max_tokens = 16;
//   if (g4cu_generate(s, &rq, &r) == G4CU_OK) puts(r.text);
//   g4cu_result_free(&r);  g4cu_state_free(s);  g4cu_model_free(m);
#ifndef G4CU_H
#define G4CU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define G4CU_VERSION_MAJOR 0
#define G4CU_VERSION_MINOR 1

enum {
    G4CU_OK = 0,
    G4CU_EUSER = -1,     // bad input (a CLI would exit 1)
    G4CU_EINTERNAL = -2, // internal error (exit 2)
};

// The last error message of the calling thread ("" when none); valid until its next call.
const char *g4cu_last_error(void);
// "0.1".
const char *g4cu_version(void);

typedef struct g4cu_model g4cu_model;
typedef struct g4cu_state g4cu_state;

// --- the model ---------------------------------------------------------------------------------
typedef struct {
    const char *backend;        // "cpu", "cuda" or "auto" (NULL: "auto": CUDA when a GPU is
                                // usable, else the CPU)
    const char *tokenizer_path; // NULL: <dir>/tokenizer.json
    int n_ctx;                  // KV rows each state is made with (0: what its first request
                                // needs; a larger request grows it); at most the context
    int ple_host;               // CUDA: keep the per-layer embedding table in pinned host memory
    int text_only;              // 1: the text model alone, for g4cu_generate_ids and
                                // g4cu_logits (no towers, no chat template: g4cu_generate and
                                // the media calls refuse); the tokenizer is optional then: the
                                // one at tokenizer_path, else <dir>/tokenizer.json when it
                                // exists, else none (results without text: ids in, ids out)
} g4cu_model_params;
void g4cu_model_params_default(g4cu_model_params *p);

// Loads the package in dir. p NULL: the defaults.
int g4cu_model_load(const char *dir, const g4cu_model_params *p, g4cu_model **out);
void g4cu_model_free(g4cu_model *m);
// The queries below return NULL / 0 for a NULL model (and leave a message).
const char *g4cu_model_backend(const g4cu_model *m); // "cpu" or "cuda"
int g4cu_model_n_vocab(const g4cu_model *m);         // logits per row
int g4cu_model_n_ctx(const g4cu_model *m);           // the model's context, in tokens
int g4cu_model_has_vision(const g4cu_model *m);
int g4cu_model_has_audio(const g4cu_model *m);
int g4cu_model_audio_rate(const g4cu_model *m); // the audio front end's rate (16000), 0: no audio
// The audio tower's window in samples at g4cu_model_audio_rate (480000: 30 s); 0: no audio.
// A longer clip in a request is cut to it (g4cu_result's cuts); g4cu_transcribe_long is not.
size_t g4cu_model_audio_window(const g4cu_model *m);
int g4cu_model_has_tokenizer(const g4cu_model *m); // 0 only for a text_only model without one

// --- states ------------------------------------------------------------------------------------
int g4cu_state_new(g4cu_model *m, g4cu_state **out);
void g4cu_state_free(g4cu_state *s);

// --- requests ----------------------------------------------------------------------------------
#define G4CU_DEFAULT_MAX_TOKENS 256 // g4cu_request_default's max_tokens
#define G4CU_MAX_MEDIA 64           // media in one request at most

typedef enum {
    G4CU_IMAGE_RGB = 0,     // rgb: [height, width, 3] 8-bit, row-major, interleaved
    G4CU_IMAGE_ENCODED = 1, // data/size: a PNG or JPEG file's bytes
    G4CU_AUDIO_PCM = 2,     // pcm/n_samples: mono float32 at sample_rate Hz (resampled)
    G4CU_AUDIO_ENCODED = 3, // data/size: a sound file's bytes (WAV, FLAC, ...: libsndfile)
    G4CU_IMAGE_FILE = 4,    // path: a PNG or JPEG file, read by the library (errors name path)
    G4CU_AUDIO_FILE = 5,    // path: a sound file, read by the library (errors name path; longer
                            // than the audio window: cut, said in the result's cuts)
} g4cu_media_kind;

typedef struct {
    g4cu_media_kind kind;
    const uint8_t *rgb;
    int width, height;
    const void *data;
    size_t size;
    const float *pcm;
    size_t n_samples;
    int sample_rate;
    const char *path; // G4CU_IMAGE_FILE, G4CU_AUDIO_FILE (borrowed for the call)
} g4cu_media;

// Called with the generated text as it becomes final (never a partial UTF-8 character, never a
// tail that could start a stop string); the pieces add up to the result's text. Return 0 to
// go on, non-zero to end the generation there (finish reason "cancelled").
typedef int (*g4cu_text_fn)(void *user, const char *text, size_t len);

// A generated token's log-probability and the top alternatives (most likely first): the
// distribution after the penalties, logit_bias and the JSON mask, at the temperature (1 when
// greedy), before min_p / top-k / top-p cut it.
#define G4CU_MAX_TOP_LOGPROBS 20
typedef struct {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[G4CU_MAX_TOP_LOGPROBS];
    float top_logprob[G4CU_MAX_TOP_LOGPROBS];
} g4cu_token_logprob;
typedef void (*g4cu_token_fn)(void *user, const g4cu_token_logprob *lp);

enum {
    G4CU_JSON_NONE = 0,   // free text
    G4CU_JSON_OBJECT = 1, // any JSON object (OpenAI's response_format json_object)
    G4CU_JSON_SCHEMA = 2, // a value valid under json_schema (response_format json_schema)
};
// A tool call: one an assistant message made (g4cu_message), or one the model made
// (g4cu_result's tool_calls, strings owned by the result, id NULL).
typedef struct {
    const char *id;        // its id (a tool message's tool_call_id names it); NULL: none
    const char *name;      // the function's name
    const char *arguments; // a JSON object's text (OpenAI's function.arguments); NULL: none
} g4cu_tool_call;

// A message of a conversation (g4cu_request's messages), rendered by the Gemma-4 chat template.
typedef struct {
    const char *role; // "user", "assistant" or "tool"
    const char *text; // its text (UTF-8; NULL: none); an assistant's thinking
                      // (<|channel>...<channel|>) is left out, as the template does
    int n_media;      // user: its images and audio, the next n_media of the request's media
                      // (rendered images first, then audio, then the text)
    const g4cu_tool_call *tool_calls; // assistant: the calls it made
    int n_tool_calls;
    const char *tool_call_id; // tool: the call it answers (it must follow that assistant
    const char *name;         // message); name: the function's, when no call id matches
} g4cu_message;

// One user turn (the Gemma-4 chat template, with an optional system turn): the media (images
// are put before audio, as the template orders them), then the text. Or a conversation:
// messages (text NULL), whose media are the request's media in message order.
typedef struct {
    const char *system; // NULL: no system turn
    const char *text;   // the user's text (UTF-8); NULL: none
    const g4cu_media *media;
    int n_media;        // 0 to G4CU_MAX_MEDIA
    int max_tokens;     // new tokens at most (default G4CU_DEFAULT_MAX_TOKENS)
    float temperature;  // <= 0: greedy (default 0)
    int top_k;          // 0: off
    float top_p;        // (0, 1]; 1: off
    uint64_t seed;      // sampling seed: the same seed gives the same tokens
    const char *const *stop; // stop strings: the text ends before the first one
    int n_stop;
    int ignore_eos;     // 1: run max_tokens tokens (benchmarks)
    const int32_t *eos; // end-of-sequence ids beyond the package's (its generation config and
    int n_eos;          // the template's <turn|>), each in [0, n_vocab)
    g4cu_text_fn on_text;
    void *user;
    int system_as_parts; // 1: the system turn as a text part (the template renders it
                         // trim(system) + " ", as the eval harness and `g4cu generate` send
                         // it); 0: as a string (default)
    const char *const *ignore_stop; // stop strings left out of stop (the same strings)
    int n_ignore_stop;
    int prefill_chunk; // prompt rows per prefill forward (0: the state's, 512; in a batch's
                       // prompt rows, the default, the batch's budget instead: g4cu_batch_step)
    // A conversation after the system turn (NULL: the one user turn of text and media): the
    // answer follows its last message (the template's generation prompt <|turn>model\n, left
    // out after a tool call or a tool response: the model goes on in its own turn).
    const g4cu_message *messages;
    int n_messages;
    // Sampling beyond temperature / top-k / top-p. With any of these set, the request's logits
    // row comes to the host at every step and is processed there in this order (the defaults,
    // all 0, keep the device's sampling as it was): repetition_penalty, presence / frequency
    // penalties, logit_bias, the JSON mask, [logprobs are taken here], temperature, min_p,
    // top-k, top-p, the draw.
    int logprobs;             // 1: result.logprobs has each generated token's log-probability
    int top_logprobs;         // 0..20: the most likely alternatives per token (with logprobs)
    float repetition_penalty; // > 0, HF's (prompt and output tokens); 0 or 1: off
    float presence_penalty;   // OpenAI's (output tokens); 0: off
    float frequency_penalty;  // OpenAI's (output tokens); 0: off
    float min_p;              // [0, 1]: drop tokens below min_p x the top probability; 0: off
    const int32_t *logit_bias_ids; // [n_logit_bias] ids in [0, n_vocab), and the value added
    const float *logit_bias;       // to each one's logit (finite)
    int n_logit_bias;
    int json;                // G4CU_JSON_*: constrained decoding (the output is one JSON value)
    const char *json_schema; // G4CU_JSON_SCHEMA: the schema's JSON text (README: the subset)
    g4cu_token_fn on_token;  // with logprobs: each token as it is picked (user as on_text's)
    const char *tools_json;  // OpenAI's "tools" array (JSON text) or NULL: their declarations
                             // go into the system turn in Gemma-4's format, the model's calls
                             // come back in the result's tool_calls (g4cu_generate only; not
                             // with on_text: the call text is not streamed)
} g4cu_request;
void g4cu_request_default(g4cu_request *r);

// An audio medium of a request that was longer than the audio window (the rest is not heard).
typedef struct {
    const char *path;    // its path (G4CU_AUDIO_FILE; borrowed from the request), else NULL
    double seconds;      // its whole length
    double used_seconds; // what the model heard: the first 30 s
} g4cu_audio_cut;

typedef struct {
    char *text;      // the generated text, cut before a stop string (malloc'ed)
    size_t text_len; // (it may hold NUL bytes the model generated)
    int n_prompt_tokens;
    int n_tokens;               // generated tokens
    const char *finish_reason;  // "stop" (end of turn, a stop string or the JSON's end),
                                // "tool_calls" (the model called tools), "length"
                                // (max_tokens or the context's end), "cancelled"
    double prefill_ms, decode_ms;
    double audio_seconds_cut;   // seconds of audio not heard (clips are cut to 30 s), 0: none
    int32_t *tokens;            // the generated ids [n_tokens] (malloc'ed, as text)
    int stop_token;             // the end-of-sequence id it ended at, else -1
    const char *stop_string;    // the request's stop string it ended at (rq->stop[i]), else NULL
    const char *stop_reason;    // finish_reason in detail: "eos", "stop_string", "max_new",
                                // "context" (the context ended first), "cancelled"
    int max_new;                // the token limit used: max_tokens, or less at the context's end
    double prefill_tok_s;       // n_prompt_tokens / prefill time (tokens per second)
    double decode_tok_s;        // (n_tokens - 1) / decode time (0 with one token)
    g4cu_audio_cut *cuts;       // each audio medium cut to the audio window, in the order
    int n_cuts;                 // the prompt has them [n_cuts] (malloc'ed, g4cu_result_free)
    g4cu_token_logprob *logprobs; // [n_tokens] with rq->logprobs, else NULL (malloc'ed)
    g4cu_tool_call *tool_calls;   // the calls the model made (rq->tools_json) [n_tool_calls];
    int n_tool_calls;             // then finish_reason is "tool_calls" and text what is left
} g4cu_result;
void g4cu_result_free(g4cu_result *r);

// Generates the answer to rq on s. *out is filled on success (and zeroed on error).
int g4cu_generate(g4cu_state *s, const g4cu_request *rq, g4cu_result *out);
// Generation after prompt ids[0..n) as they are (no chat template, no media, no <turn|> end;
// each id in [0, n_vocab)): opts gives the options (its text, system and media must be unset;
// NULL: the defaults). On a model without a tokenizer the result has no text (text NULL) and
// opts may not have stop strings nor on_text.
int g4cu_generate_ids(g4cu_state *s, const int32_t *ids, int n, const g4cu_request *opts,
                      g4cu_result *out);
// Speech recognition: mono PCM at `rate` Hz, with the model card's ASR prompt (opts: the
// generation options; its text, when set, replaces the prompt; its media must be empty; NULL:
// the defaults).
int g4cu_transcribe(g4cu_state *s, const float *pcm, size_t n_samples, int rate,
                    const g4cu_request *opts, g4cu_result *out);
// A question about one image (G4CU_IMAGE_RGB or G4CU_IMAGE_ENCODED); opts as for transcribe
// (the question is the text: opts->text is not used).
int g4cu_vqa(g4cu_state *s, const g4cu_media *image, const char *question,
             const g4cu_request *opts, g4cu_result *out);

// The E2B model card's ASR prompt: g4cu_transcribe's default (a static string).
const char *g4cu_asr_prompt(void);

// Long-form speech recognition (audio of any length): consecutive windows of `window` samples
// overlapping by `overlap`, each transcribed alone with g4cu_transcribe, stitched by dropping
// from each window's tokens the longest prefix that ends the previous window's (HF's chunked ASR
// pipeline in its exact-match form); segment k spans from the middle of its overlap with window
// k - 1 to the middle of its overlap with window k + 1.
typedef struct g4cu_segment g4cu_segment; // (below)
typedef struct {
    const g4cu_request *opts; // each window's options, as g4cu_transcribe takes them (on_text is
                              // not used: the text is final only once stitched); NULL: defaults
    const char *name;         // errors start with it ("name: ..."; NULL: none), e.g. the file
    size_t window;            // samples per window (0: g4cu_model_audio_window; at most that)
    size_t overlap;           // samples (0 with window 0: a sixth of the window; < window)
    // Called as each window finishes with its segment k of n, final from then on (so a long
    // recording's transcript comes out as it is made, and a stopped run keeps what it printed);
    // non-zero stops the run (G4CU_EUSER). NULL: none.
    int (*on_segment)(void *user, const g4cu_segment *seg, int k, int n);
    void *user;
} g4cu_transcribe_long_params;
void g4cu_transcribe_long_params_default(g4cu_transcribe_long_params *p);

struct g4cu_segment {
    size_t start, end;               // the segment's samples [start, end) of the whole audio
    size_t window_start, window_end; // the window's samples it was transcribed from
    char *text;                      // its kept tokens decoded, special tokens left out
    int32_t *tokens;                 // the kept tokens [n_tokens] (after the stitch, no EOS)
    int n_tokens;
    int window_tokens;  // the window's own tokens (no EOS)
    int dropped_tokens; // of them, the ones the previous window ended with
    double prefill_ms, decode_ms;
};

typedef struct {
    char *text; // every segment's kept tokens decoded together
    size_t text_len;
    g4cu_segment *segments; // [n_segments], in order; all malloc'ed (g4cu_transcript_free)
    int n_segments;
    int sample_rate;                   // the samples' rate (g4cu_model_audio_rate)
    size_t n_samples, window, overlap; // the audio's length and the windows used, in samples
} g4cu_transcript;
void g4cu_transcript_free(g4cu_transcript *t);

// pcm[0..n_samples): mono float32 at g4cu_model_audio_rate. *out is filled on success (zeroed
// on error).
int g4cu_transcribe_long(g4cu_state *s, const float *pcm, size_t n_samples,
                         const g4cu_transcribe_long_params *p, g4cu_transcript *out);

// --- batching: many requests decoded together ----------------------------------------------
// A batch runs up to `slots` requests of one model at once: one decode step computes the next
// token of every running request (the linears read each weight once for all of them), and a
// new request's prompt goes in as more rows of those steps (G4_BATCH_PROMPT_ROWS=0: in chunks
// of their own forwards between them; see g4cu_batch_step). Each request keeps its own
// KV cache (a slot's, reused by the slot's next request), sampler and seed, so it gets the
// tokens it would get alone on a g4cu_state (exactly on the CPU backend). KV memory: at most
// slots x n_ctx rows. The caller drives it: submit requests, call g4cu_batch_step in a loop
// while any runs, poll each request for its result (its text also streams through the
// request's on_text, called from inside g4cu_batch_step). Every call locks the batch, so
// other threads may submit, poll and cancel while one thread steps; on_text must not call the
// batch. A server with N slots: one thread loops g4cu_batch_step while requests run (and
// waits for a submit otherwise), each connection submits (retrying after a step when the
// slots are full), streams through on_text and polls its id once its on_text saw the end.
//
//   g4cu_batch *b;  g4cu_batch_params bp;  g4cu_batch_params_default(&bp);  bp.slots = 4;
//   g4cu_batch_new(m, &bp, &b);
//   g4cu_batch_submit(b, &rq1, &id1);  g4cu_batch_submit(b, &rq2, &id2);
//   for (int running = 1; running;) g4cu_batch_step(b, &running);
//   g4cu_batch_poll(b, id1, &r1, &done);  g4cu_batch_poll(b, id2, &r2, &done);
typedef struct g4cu_batch g4cu_batch;
typedef struct {
    int slots; // requests decoded together (default 8; 1..4096)
    int n_ctx; // KV rows of each slot (0: the model's n_ctx when set, else what each request
               // needs, grown by a larger one); at most the model's context
} g4cu_batch_params;
void g4cu_batch_params_default(g4cu_batch_params *p);
int g4cu_batch_new(g4cu_model *m, const g4cu_batch_params *p, g4cu_batch **out);
// Frees the batch and every request still in it (their results are lost).
void g4cu_batch_free(g4cu_batch *b);

// Starts rq (as g4cu_generate takes it) in a free slot: *id > 0 names it, or *id = 0 when every
// slot is taken (nothing was done: step, poll the finished requests, then submit again). The
// media go through their front ends and towers here. rq's strings and arrays are copied;
// on_text and user stay borrowed until the request ends. Errors in the request (as
// g4cu_generate's) are returned here and take no slot.
int g4cu_batch_submit(g4cu_batch *b, const g4cu_request *rq, int64_t *id);
// The same for prompt ids as they are (g4cu_generate_ids' rules; opts NULL: the defaults).
int g4cu_batch_submit_ids(g4cu_batch *b, const int32_t *ids, int n, const g4cu_request *opts,
                          int64_t *id);
// One round: ONE decode step over every decoding request and the prompt rows of the requests
// still prefilling, within the prefill budget (g4cu_batch_set_prefill_tokens), oldest first,
// each as many rows as fit (the last one cut to what is left; a longer prompt goes over several
// rounds); a prompt's last row samples its first token. A prompt with media goes in as chunks
// of its own forward before the step. The default with 2 slots or more (engine/batch.h);
// G4_BATCH_PROMPT_ROWS=0 (read by g4cu_batch_new; also one slot): prompt chunks of their own
// forwards first (the oldest always gets one chunk, cut to the budget; each next one, oldest
// first, whose whole chunk fits in what is left, so short prompts submitted together start
// decoding in the same round), then one decode step over every decoding request. *running (may
// be NULL): requests prefilling or decoding after it. A request's own failure ends that request
// only (its poll returns the error).
int g4cu_batch_step(g4cu_batch *b, int *running);
// The prompt tokens one round prefills at most (>= 1; 0: the default, 512, the default prefill
// chunk: every prompt is chunked as g4cu_generate chunks it, and short prompts that wait
// together share a round). Smaller keeps a round nearer one decode step while a long prompt
// goes in (the running requests stall less), at the cost of more rounds (smaller prefill
// chunks).
int g4cu_batch_set_prefill_tokens(g4cu_batch *b, int n);
// Makes every free slot's KV cache (n_ctx rows: g4cu_batch_params' n_ctx, else the model's;
// needed here) and the decode step's activations now, rather than as the first requests come:
// a server's start-up, so its first requests do not wait for them. The memory is what the slots
// hold anyway once each has run a request: slots x n_ctx KV rows, and the step's activations
// for slots + 512 rows with prompt rows (slots rows without; README "Batching").
int g4cu_batch_reserve(g4cu_batch *b);
// Ends request id where it is (finish reason "cancelled", its tokens so far); its slot is free
// for the next request once it is polled. An unknown id is a user error.
int g4cu_batch_cancel(g4cu_batch *b, int64_t id);
// *done = 1 when request id has ended: its result moved into *out (zeroed on error) and its
// own return code returned (G4CU_OK, or its error with the line in g4cu_last_error); the id is
// forgotten and its slot free. *done = 0 while it runs (G4CU_OK, out untouched). An unknown id
// (0, what a refused submit leaves, or one polled already) is a user error, *out zeroed.
int g4cu_batch_poll(g4cu_batch *b, int64_t id, g4cu_result *out, int *done);
// The batch now: requests in it (running or finished and not yet polled), requests running,
// the most rows one decode step has run, decode steps and rows stepped in all (decode rows: a
// step's prompt rows are not counted here).
typedef struct {
    int slots, in_use, running, max_rows;
    int states; // KV caches (text states) made so far: at most one per slot, reused after it
    long steps, rows_stepped;
} g4cu_batch_info;
void g4cu_batch_get_info(g4cu_batch *b, g4cu_batch_info *info);
// Where the batch's rounds spent their time, cumulative since g4cu_batch_new: wall seconds
// (monotonic clock) of the thread calling g4cu_batch_step. (A struct of its own rather than
// fields appended to g4cu_batch_info: a program built against the older, smaller struct would
// have the library write past it.)
typedef struct {
    long rounds;         // g4cu_batch_step calls
    long steps;          // decode steps (g4cu_batch_info's; with prompt rows, one a round)
    // prompt chunks run (rows of a step or own forwards: one a prompt a round), and the prompt
    // tokens they took
    long prefill_chunks;
    long prefill_tokens;
    double prefill_s; // in prompt chunks of their own forward: the forward, the first token's
                      // pick, a request ending (with prompt rows, the default: media prompts')
    double decode_s;  // in the decode step: the forward over every row (prompt rows included),
                      // the sampler, the ids back to the host
    double accept_s;  // after each decode step, per row on the host: stop checks, detokenizing
                      // (for stop strings and on_text), on_text calls, ending requests
} g4cu_batch_times;
void g4cu_batch_get_times(g4cu_batch *b, g4cu_batch_times *t);
// One slot of the batch (0 <= slot < slots): the request in it (id 0: none), what it is doing,
// its prompt tokens, those prefilled so far, the tokens it has generated so far, and the KV
// rows the slot's cache holds (0: not made yet). A slot index outside the batch: all zero.
typedef enum {
    G4CU_SLOT_FREE = 0,
    G4CU_SLOT_PREFILL, // its prompt is going in, a chunk a round
    G4CU_SLOT_DECODE,  // one token a step, in the batch's decode step
    G4CU_SLOT_DONE     // ended; its result waits for g4cu_batch_poll
} g4cu_slot_phase;
typedef struct {
    int64_t id;
    g4cu_slot_phase phase;
    int n_prompt, n_prefilled, n_generated, n_ctx;
} g4cu_batch_slot_info;
void g4cu_batch_get_slot(g4cu_batch *b, int slot, g4cu_batch_slot_info *info);
// 1 when g4cu_batch_submit takes rq's sampling fields; 0 when rq asks for something the
// batch's device-side sampler does not do (logprobs, penalties, logit_bias, min_p, a JSON
// format, tools): run such a request with g4cu_generate on a state. Sets no error.
int g4cu_batch_accepts(const g4cu_request *rq);

// --- tokens and logits -------------------------------------------------------------------------
// The text's token ids (no special tokens added); *ids is malloc'ed (g4cu_free).
int g4cu_tokenize(const g4cu_model *m, const char *text, int32_t **ids, int *n);
// The soft-capped next-token logits after ids[0..n) (a fresh sequence on s): logits[n_vocab].
int g4cu_logits(g4cu_state *s, const int32_t *ids, int n, float *logits);

// --- a tokenizer alone (no model: `g4cu tokenize`) -------------------------------------------
typedef struct g4cu_tokenizer g4cu_tokenizer;
// Loads a tokenizer.json (HF tokenizers' format: Gemma-4's BPE).
int g4cu_tokenizer_load(const char *path, g4cu_tokenizer **out);
void g4cu_tokenizer_free(g4cu_tokenizer *t);
int g4cu_tokenizer_n_vocab(const g4cu_tokenizer *t); // ids are in [0, n_vocab)
// text[0, len) (UTF-8; NUL bytes allowed) -> ids, <bos> first when add_bos (HF's
// add_special_tokens); special tokens written in the text ("<|turn>") are matched as such.
// *ids is malloc'ed (g4cu_free).
int g4cu_tokenizer_encode(const g4cu_tokenizer *t, const char *text, size_t len, int add_bos,
                          int32_t **ids, int *n);
// ids -> UTF-8 text (special tokens left out when skip_special); *text is malloc'ed (g4cu_free)
// and NUL-terminated, *len its length (it may hold NUL bytes).
int g4cu_tokenizer_decode(const g4cu_tokenizer *t, const int32_t *ids, int n, int skip_special,
                          char **text, size_t *len);
// The vocabulary's piece of id as it stores it ("\xe2\x96\x81the" for " the"), not
// NUL-terminated: its length in *len. NULL (and *len 0) for an id outside the vocabulary.
const char *g4cu_tokenizer_piece(const g4cu_tokenizer *t, int32_t id, size_t *len);

// A sound file's bytes -> mono float32 at the model's audio rate (*pcm malloc'ed, g4cu_free):
// the first 30 s (the audio window; what the model hears), and in *seconds (may be NULL) the
// file's whole length.
int g4cu_decode_audio(const g4cu_model *m, const void *data, size_t size, float **pcm,
                      size_t *n_samples, double *seconds);
// The sound file at path -> mono float32 at the model's audio rate, all of it (no window cut;
// *pcm malloc'ed, g4cu_free). Errors name the path.
int g4cu_audio_load(const g4cu_model *m, const char *path, float **pcm, size_t *n_samples);
// The bytes token id decodes to alone (special tokens: none), copied to buf[0..cap) (at most);
// *len the full count. For logprobs' token text / bytes.
int g4cu_token_bytes(g4cu_model *m, int32_t id, char *buf, size_t cap, size_t *len);
void g4cu_free(void *p);

#ifdef __cplusplus
}
#endif

#endif
