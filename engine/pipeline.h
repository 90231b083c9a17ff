// pipeline.h: a package ready to answer chat requests: package, backend, text model, tokenizer
// and media encoder, opened once; each request goes media -> soft tokens (media.h) -> chat
// template ids (chat.h) -> generation (generate.h). The generate / asr / vqa commands and the
// eval runner use it.
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
    // What the last g4_pipeline_prepare / _generate cut (nothing is dropped without the caller
    // being able to say so: the commands print it on stderr and in --json, eval records it).
    g4_media_cut *cuts;
    int n_cuts;
} g4_pipeline;

// Opens pkg_dir on backend be (g4_backend_cpu(), or kernels/backend_select.h by name) with the
// tokenizer at tokenizer_path, or <pkg_dir>/tokenizer.json when that is NULL (a package without
// one needs the path: a clear error says so). The tokenizer's <bos> must be the package's bos id.
int g4_pipeline_open(const char *pkg_dir, g4_backend *be, const char *tokenizer_path,
                     g4_pipeline **out);
void g4_pipeline_close(g4_pipeline *pl);

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

// The prompt's ids and the soft tokens of its media, in placeholder order (soft->rows is a new
// array, NULL when there is no media). Errors name the media file or the prompt.
int g4_pipeline_prepare(g4_pipeline *pl, const g4_prompt *pr, g4_ids *ids, g4_soft_tokens *soft);

// prepare + g4_generate. The chat template's <turn|> id is added to the EOS ids (the model ends
// its turn with it; the E2B config lists it too).
int g4_pipeline_generate(g4_pipeline *pl, const g4_prompt *pr, const g4_gen_params *p,
                         g4_gen_result *out);

#endif
