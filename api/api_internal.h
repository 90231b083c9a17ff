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

#endif
