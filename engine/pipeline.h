// pipeline.h: a package ready to answer chat requests: package, backend, text model, tokenizer,
// media encoder and one text state, opened once; each request goes media -> soft tokens
// (media.h, written into the state's soft rows on the backend) -> chat template ids (chat.h) ->
// generation (generate.h) on that state, which every request reuses. The generate / asr / vqa
// commands and the eval runner use it.
#ifndef G4_PIPELINE_H
#define G4_PIPELINE_H

#include "engine/chat.h"
#include "engine/generate.h"
#include "engine/media.h"

// An audio file of the last request that was cut to the audio tower's window (media.h).
typedef struct {
    const char *path;    // the request's own string
    double seconds;      // the file's length
    double used_seconds; // what the model heard: the first 30 s
} g4_media_cut;

typedef struct {
    g4_package *pkg;
    g4_backend *be;
    g4_text_model *model;
    g4_tokenizer *tok;
    char *tokenizer_path;
    g4_chat_tokens ct;
    g4_media_encoder *media;
    g4_text_state *state; // the requests' state (KV cache, workspaces, soft rows, graph): made
                          // at open (n_ctx given) or by the first request, reused after it
    int max_tokens;       // its rows per prefill forward
    // What the last g4_pipeline_prepare / _generate cut (nothing is dropped without the caller
    // being able to say so: the commands print it on stderr and in --json, eval records it).
    g4_media_cut *cuts;
    int n_cuts;
    // Seconds the requests spent in the front ends (g4_pipeline_generate's g4_media_load) and
    // in the towers (g4_media_encode, wall time: an asynchronous backend's tower ends with a
    // sync), summed since open: where eval's time goes.
    double frontend_s, tower_s;
} g4_pipeline;

typedef struct {
    const char *tokenizer_path; // NULL: <pkg_dir>/tokenizer.json
    g4_text_load_opts load;     // model placement (ple_host)
    int n_ctx;      // KV rows of the state, made at open (0: made by the first request for its
                    // prompt + max_new rows, as `g4cu generate --ids` and `g4cu bench` size
                    // theirs); a request that needs more grows it (g4_text_state_reserve)
    int max_tokens; // rows per prefill forward (0: G4_GEN_DEFAULT_CHUNK)
    int text_only;  // 1: the text model alone (no media encoder, no chat template tokens), and
                    // the tokenizer only when tokenizer_path is given or <pkg_dir>/tokenizer.json
                    // exists (tok NULL: ids in, ids out): what `g4cu generate --ids` loads
} g4_pipeline_opts;

// Opens pkg_dir on backend be (g4_backend_cpu(), or kernels/backend_select.h by name) with the
// tokenizer at o->tokenizer_path, or <pkg_dir>/tokenizer.json when that is NULL (a package
// without one needs the path: a clear error says so). The tokenizer's <bos> must be the
// package's bos id. o NULL: the defaults.
int g4_pipeline_open_opts(const char *pkg_dir, g4_backend *be, const g4_pipeline_opts *o,
                          g4_pipeline **out);
// The same with default options and this tokenizer path.
int g4_pipeline_open(const char *pkg_dir, g4_backend *be, const char *tokenizer_path,
                     g4_pipeline **out);
void g4_pipeline_close(g4_pipeline *pl);

// The E2B model card's ASR prompt (spec gemma4-architecture.md 6.2): `g4cu asr`'s and the C
// API's default.
#define G4_ASR_PROMPT                                                                              \
    "Transcribe the following speech segment in its original language. Follow these specific "     \
    "instructions for formatting the answer:\n* Only output the transcription, with no "           \
    "newlines.\n* When transcribing numbers, write the digits, i.e. write 1.7 and not one point "  \
    "seven, and write 3 instead of three."

// One user turn: media files (images first, then audio, as the eval harness orders them) and
// text, with an optional system message (see g4_chat_request).
typedef struct {
    const char *system;
    int system_as_parts;
    const char *const *images;
    int n_images;
    const char *const *audio;
    int n_audio;
    const char *text;
} g4_prompt;

// The prompt's ids and the soft tokens of its media, in placeholder order: soft->rows is a view
// of the pipeline state's soft rows on the backend (valid until the next prepare; n 0 when
// there is no media; the state is made for the prompt when there is none yet). Errors name the
// media file or the prompt.
int g4_pipeline_prepare(g4_pipeline *pl, const g4_prompt *pr, g4_ids *ids, g4_soft_tokens *soft);

// prepare + g4_generate. The chat template's <turn|> id is added to the EOS ids (the model ends
// its turn with it; the E2B config lists it too).
int g4_pipeline_generate(g4_pipeline *pl, const g4_prompt *pr, const g4_gen_params *p,
                         g4_gen_result *out);

// A user turn whose media went through their front ends already (g4_media_load,
// g4_media_load_rgb / _pcm): media[0..n_images) images, then n_audio clips, each named in
// errors by names[i].
typedef struct {
    const char *system;
    int system_as_parts;
    const g4_media_input *media;
    const char *const *names;
    int n_images, n_audio;
    const char *text;
    // A conversation instead of the one user turn (text NULL): media[] is then in prompt order
    // (each message's images, then its audio), n_images / n_audio their totals.
    const g4_chat_message *messages;
    int n_messages;
    const char *tools; // rendered tool declarations (engine/chat_tools.h), or NULL
} g4_prompt_loaded;

// g4_pipeline_generate on a state of the caller's (*state; NULL: one is made for the prompt +
// max_new rows and left there for the caller to free) instead of the pipeline's own: several
// states, each on its own thread, can share one pipeline (the C API's g4cu_state). The towers
// and the tokenizer are the pipeline's: a caller running states at once serialises this call's
// media and prompt encoding with g4_pipeline_generate_on's `lock` (NULL: no lock), which is
// called with 1 before and 0 after them.
int g4_pipeline_generate_on(g4_pipeline *pl, g4_text_state **state, const g4_prompt_loaded *pr,
                            const g4_gen_params *p, void (*lock)(void *ctx, int on),
                            void *lock_ctx, g4_gen_result *out);

// The chat ids of pr and its media's soft tokens in (*state)'s soft rows (the towers run here;
// *state NULL: one is made for the prompt + max_new rows), without generating: what a batch
// (engine/batch.h) does when a request takes a slot.
int g4_pipeline_prepare_on(g4_pipeline *pl, g4_text_state **state, const g4_prompt_loaded *pr,
                           int max_new, g4_ids *ids, g4_soft_tokens *soft);

#endif
