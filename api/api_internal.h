// api_internal.h: what the public API's implementation files (api/*.c) share: the handles'
// insides and the error-code mapping. Not installed; only api/ includes it.
#ifndef G4_API_INTERNAL_H
#define G4_API_INTERNAL_H

#include <g4cu.h>
#include <pthread.h>
#include <stdatomic.h>

#include "base/base.h"
#include "engine/pipeline.h"

struct g4cu_model {
    g4_pipeline *pl;
    pthread_mutex_t lock; // the towers and the tokenizer's encoding (shared by the states)
    int n_ctx;            // KV rows of a new state (0: made by its first request)
    g4_vocab_bytes vocab; // each token's bytes (JSON masks, logprobs), made on first use
    int vocab_made;       // (under lock)
};

struct g4cu_state {
    g4cu_model *m;
    g4_text_state *ts; // made at g4cu_state_new (the model's n_ctx) or by the first request
    atomic_int busy;   // 1 while a call runs on it: a second thread's call, or one from its own
                       // on_text, is refused (g4_state_enter) instead of sharing the buffers
};

// Takes s for one call (fn names the call in the error), or refuses: the state is in use.
int g4_state_enter(g4cu_state *s, const char *fn);
void g4_state_leave(g4cu_state *s);

// Internal errors keep their code; anything else a library call returns is one of the two.
static inline int g4_api_code(int rc) {
    return rc == G4_OK ? G4CU_OK : rc == G4_EUSER ? G4CU_EUSER : G4CU_EINTERNAL;
}

// The calibration tokens of `quantize --calib` and `compare --linear-error --calib`: the first
// n_max tokens (with <bos>) of the text file (its first 64 KiB, or 16 bytes a token where
// n_max > 4096, cut back to a whole UTF-8 character) through the tokenizer at tok_path; a text
// of under 8 tokens is an error naming it. *cut (may be NULL): the bytes read where the text
// was longer than that cap, 0 where it was read whole (so *n < n_max says which ran out).
int g4_api_calib_ids(const char *path, const char *tok_path, int n_max, int32_t **ids, int *n,
                     size_t *cut);

// What the generation calls (api/g4cu.c) and the batch (api/g4cu_batch.c) share.
// A request's streaming callbacks as the engine calls them (cancel: set once fn returns
// non-zero), and what its sampling fields need while it runs (g4cu_generate's; NULL in a batch).
typedef struct {
    g4cu_text_fn fn;
    void *user;
    volatile int cancel;
    g4cu_token_fn on_token; // (with logprobs)
    g4_logit_bias *bias;    // the request's logit_bias in the engine's form
    g4_json_schema *schema; // its compiled JSON format
} g4_api_stream;
// The request's checks (values, and its eos ids in the model's vocabulary).
int g4_api_check_request(const g4cu_request *rq);
int g4_api_check_eos(const g4cu_model *m, const g4cu_request *rq);
// The options of a raw-ids request (opts, or the defaults, into *rq), checked: no text, system
// or media (who: the call, named in the error), then as g4_api_check_request / _check_eos.
int g4_api_ids_request(const g4cu_model *m, const g4cu_request *opts, const char *who,
                       g4cu_request *rq);
// The engine's parameters of rq (eos: the caller's buffer of n_eos + 1 ids; sc: streaming).
void g4_api_gen_params(const g4cu_request *rq, int *eos, g4_api_stream *sc, g4_gen_params *p);
// The engine's result r moved into out (r is freed).
void g4_api_take_result(g4_gen_result *r, g4cu_result *out);

// A chat request's media through their front ends, images first (the template's order); a
// file is named by its path, as the engine's path-taking calls name it.
typedef struct {
    g4_media_input *in;
    char **names;
    int n, n_images;
    double cut;           // seconds of audio not heard
    g4cu_audio_cut *cuts; // [n_cuts] (moved into the result)
    int n_cuts;
    g4_chat_message *msgs; // the request's messages in the engine's form, their media counted
    int n_msgs;            // (NULL, 0: one user turn)
} g4_api_media;
// The checks of a chat request (who: the call, for the text_only error), its conversation and
// its media loaded into rm, a conversation's media in message order (nothing to free on error).
int g4_api_media_load(g4cu_model *m, const g4cu_request *rq, const char *who, g4_api_media *rm);
void g4_api_media_free(g4_api_media *rm);

#endif
