// g4cu_batch.c: the public batch API (include/g4cu.h, "batching") over the engine's batch
// (engine/batch.h): request ids, streaming contexts and media per slot, and one lock.
#include <g4cu.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "engine/batch.h"

typedef struct {
    int64_t id;        // 0: the slot is free
    g4_api_stream sc;  // the request's on_text (the engine points at it until it ends)
    g4cu_audio_cut *cuts; // what its media lost to the audio window (moved into the result)
    int n_cuts;
    double cut;
} batch_req;

struct g4cu_batch {
    g4cu_model *m;
    g4_batch *b;
    int slots;
    batch_req *req; // [slots]
    int64_t last_id;
    pthread_mutex_t lock;
};

static int code(int rc) { return g4_api_code(rc); }

void g4cu_batch_params_default(g4cu_batch_params *p) {
    memset(p, 0, sizeof *p);
    p->slots = 8;
}

int g4cu_batch_new(g4cu_model *m, const g4cu_batch_params *p, g4cu_batch **out) {
    if (!out) return g4_fail(G4_EUSER, "g4cu_batch_new: out is NULL");
    *out = NULL;
    if (!m) return g4_fail(G4_EUSER, "g4cu_batch_new: the model is NULL");
    g4cu_batch_params defaults;
    g4cu_batch_params_default(&defaults);
    if (!p) p = &defaults;
    const g4_batch_opts o = {p->slots, p->n_ctx ? p->n_ctx : m->n_ctx, 0};
    g4_batch *b;
    int rc = g4_batch_new(m->pl, &o, &b);
    if (rc) return code(rc);
    g4cu_batch *cb = g4_calloc(1, sizeof *cb);
    cb->m = m;
    cb->b = b;
    cb->slots = p->slots;
    cb->req = g4_calloc((size_t)p->slots, sizeof *cb->req);
    pthread_mutex_init(&cb->lock, NULL);
    *out = cb;
    return G4CU_OK;
}

void g4cu_batch_free(g4cu_batch *b) {
    if (!b) return;
    g4_batch_free(b->b);
    for (int i = 0; i < b->slots; i++) free(b->req[i].cuts);
    free(b->req);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

// The first field of rq that needs the request's logits row on the host (engine/generate.c's
// host pick), or NULL: the batch's decode step samples every row on the device.
static const char *host_pick_field(const g4cu_request *rq) {
    const char *f = NULL;
    if (rq->logprobs)
        f = "logprobs";
    else if (rq->repetition_penalty != 0 && rq->repetition_penalty != 1)
        f = "repetition_penalty";
    else if (rq->presence_penalty != 0)
        f = "presence_penalty";
    else if (rq->frequency_penalty != 0)
        f = "frequency_penalty";
    else if (rq->n_logit_bias)
        f = "logit_bias";
    else if (rq->min_p != 0)
        f = "min_p";
    else if (rq->json)
        f = rq->json == G4CU_JSON_SCHEMA ? "json_schema" : "json";
    else if (rq->tools_json)
        f = "tools_json";
    return f;
}

int g4cu_batch_accepts(const g4cu_request *rq) { return rq && !host_pick_field(rq); }

// The host-pick fields refused (who: the call, named in the error).
static int host_pick_fields(const g4cu_request *rq, const char *who) {
    const char *f = host_pick_field(rq);
    if (!f) return G4_OK;
    return g4_fail(G4_EUSER, "%s: %s is not batched yet (the batch samples on the device); "
                             "g4cu_generate runs it",
                   who, f);
}

// The engine's submit of a chat turn (pr) or of prompt ids, for rq; *id as g4cu_batch_submit.
// Runs under the batch's lock; the towers and the tokenizer also under the model's (shared with
// the states of the same model).
static int submit(g4cu_batch *cb, const g4cu_request *rq, const g4_prompt_loaded *pr,
                  const int32_t *ids, int n, g4_api_media *rm, int64_t *id) {
    int *eos = g4_malloc(sizeof(int) * (size_t)(rq->n_eos + 1));
    g4_api_stream sc;
    g4_gen_params p;
    g4_api_gen_params(rq, eos, &sc, &p);
    // The slot the engine will take is its first free one: its stream context is set first
    // (the engine keeps the pointer).
    int k = 0;
    while (k < cb->slots && cb->req[k].id) k++;
    int rc = G4_OK, slot = -1;
    if (k < cb->slots) {
        batch_req *r = &cb->req[k];
        r->sc = sc;
        if (rq->on_text) p.on_text_ctx = &r->sc, p.cancel = &r->sc.cancel;
        pthread_mutex_lock(&cb->m->lock);
        rc = g4_batch_submit(cb->b, pr, ids, n, &p, &slot);
        pthread_mutex_unlock(&cb->m->lock);
        if (!rc && slot != k)
            rc = g4_fail(G4_EINTERNAL, "batch: the request took slot %d, expected %d", slot, k);
        if (!rc) {
            r->id = ++cb->last_id;
            *id = r->id;
            if (rm) {
                r->cuts = rm->cuts, r->n_cuts = rm->n_cuts, r->cut = rm->cut;
                rm->cuts = NULL;
            }
        }
    }
    free(eos);
    return rc;
}

int g4cu_batch_submit(g4cu_batch *cb, const g4cu_request *rq, int64_t *id) {
    if (!id) return g4_fail(G4_EUSER, "g4cu_batch_submit: id is NULL");
    *id = 0;
    if (!cb || !rq) return g4_fail(G4_EUSER, "g4cu_batch_submit: batch or request is NULL");
    int rc = host_pick_fields(rq, "g4cu_batch_submit");
    if (rc) return code(rc);
    pthread_mutex_lock(&cb->lock);
    int k = 0;
    while (k < cb->slots && cb->req[k].id) k++;
    if (k == cb->slots) { // every slot taken: *id 0
        pthread_mutex_unlock(&cb->lock);
        return G4CU_OK;
    }
    g4_api_media rm;
    rc = g4_api_media_load(cb->m, rq, "g4cu_batch_submit", &rm);
    if (!rc) {
        const g4_prompt_loaded pr = {rq->system,  rq->system_as_parts,
                                     rm.in,       (const char *const *)rm.names,
                                     rm.n_images, rm.n - rm.n_images,
                                     rq->text,    rm.msgs,
                                     rm.n_msgs,   NULL};
        rc = submit(cb, rq, &pr, NULL, 0, &rm, id);
        g4_api_media_free(&rm);
    }
    pthread_mutex_unlock(&cb->lock);
    return code(rc);
}

int g4cu_batch_submit_ids(g4cu_batch *cb, const int32_t *ids, int n, const g4cu_request *opts,
                          int64_t *id) {
    if (!id) return g4_fail(G4_EUSER, "g4cu_batch_submit_ids: id is NULL");
    *id = 0;
    if (!cb || (!ids && n)) return g4_fail(G4_EUSER, "g4cu_batch_submit_ids: a NULL argument");
    g4cu_request rq;
    int rc = g4_api_ids_request(cb->m, opts, "g4cu_batch_submit_ids", &rq);
    if (!rc) rc = host_pick_fields(&rq, "g4cu_batch_submit_ids");
    if (rc) return code(rc);
    if (n < 1) return g4_fail(G4_EUSER, "g4cu_batch_submit_ids: the prompt has no tokens");
    const int V = g4cu_model_n_vocab(cb->m);
    for (int i = 0; i < n; i++) // (checked here: the prompt's forward runs in a later step)
        if (ids[i] < 0 || ids[i] >= V)
            return g4_fail(G4_EUSER, "token id %d at position %d is outside the vocabulary [0, %d)",
                           ids[i], i, V);
    pthread_mutex_lock(&cb->lock);
    rc = submit(cb, &rq, NULL, ids, n, NULL, id);
    pthread_mutex_unlock(&cb->lock);
    return code(rc);
}

int g4cu_batch_step(g4cu_batch *cb, int *running) {
    if (running) *running = 0;
    if (!cb) return g4_fail(G4_EUSER, "g4cu_batch_step: the batch is NULL");
    pthread_mutex_lock(&cb->lock);
    int rc = g4_batch_step(cb->b, running);
    pthread_mutex_unlock(&cb->lock);
    return code(rc);
}

// The slot of request id, or -1 (a user error recorded).
static int slot_of(g4cu_batch *cb, int64_t id, const char *who) {
    for (int k = 0; id > 0 && k < cb->slots; k++)
        if (cb->req[k].id == id) return k;
    g4_fail(G4_EUSER, "%s: request id %lld is not in the batch (never submitted, or polled "
                      "already)",
            who, (long long)id);
    return -1;
}

int g4cu_batch_cancel(g4cu_batch *cb, int64_t id) {
    if (!cb) return g4_fail(G4_EUSER, "g4cu_batch_cancel: the batch is NULL");
    pthread_mutex_lock(&cb->lock);
    const int k = slot_of(cb, id, "g4cu_batch_cancel");
    if (k >= 0) g4_batch_cancel(cb->b, k);
    pthread_mutex_unlock(&cb->lock);
    return k >= 0 ? G4CU_OK : G4CU_EUSER;
}

int g4cu_batch_poll(g4cu_batch *cb, int64_t id, g4cu_result *out, int *done) {
    if (!out || !done) return g4_fail(G4_EUSER, "g4cu_batch_poll: out or done is NULL");
    *done = 0;
    if (!cb) {
        memset(out, 0, sizeof *out);
        return g4_fail(G4_EUSER, "g4cu_batch_poll: the batch is NULL");
    }
    pthread_mutex_lock(&cb->lock);
    int rc = G4_OK;
    const int k = slot_of(cb, id, "g4cu_batch_poll");
    if (k < 0) { // zeroed, as on a request's error: a caller may free it after any failed poll
        rc = G4_EUSER;
        memset(out, 0, sizeof *out);
    }
    g4_gen_result r;
    int req_rc = G4_OK;
    char *err = NULL;
    if (!rc && g4_batch_take(cb->b, k, &r, &req_rc, &err)) {
        batch_req *q = &cb->req[k];
        memset(out, 0, sizeof *out);
        *done = 1;
        if (req_rc) {
            g4_fail(req_rc, "%s", err ? err : "the request failed");
            rc = req_rc;
            free(q->cuts);
        } else {
            g4_api_take_result(&r, out);
            out->audio_seconds_cut = q->cut;
            out->cuts = q->cuts, out->n_cuts = q->n_cuts;
        }
        g4_gen_result_free(&r);
        free(err);
        memset(q, 0, sizeof *q);
    }
    pthread_mutex_unlock(&cb->lock);
    return code(rc);
}

// The batch's stats and (in_use not NULL) how many of its slots hold a request, read together
// under its lock.
static g4_batch_stats locked_stats(g4cu_batch *cb, int *in_use) {
    g4_batch_stats st;
    pthread_mutex_lock(&cb->lock);
    g4_batch_get_stats(cb->b, &st);
    for (int k = 0; in_use && k < cb->slots; k++) *in_use += cb->req[k].id != 0;
    pthread_mutex_unlock(&cb->lock);
    return st;
}

void g4cu_batch_get_info(g4cu_batch *cb, g4cu_batch_info *info) {
    memset(info, 0, sizeof *info);
    if (!cb) return;
    const g4_batch_stats st = locked_stats(cb, &info->in_use);
    info->slots = cb->slots;
    info->running = st.running;
    info->max_rows = st.max_decoding;
    info->states = st.states_made;
    info->steps = st.decode_steps;
    info->rows_stepped = st.decode_rows;
}

int g4cu_batch_set_prefill_tokens(g4cu_batch *cb, int n) {
    if (!cb) return g4_fail(G4_EUSER, "g4cu_batch_set_prefill_tokens: the batch is NULL");
    pthread_mutex_lock(&cb->lock);
    const int rc = g4_batch_set_prefill_tokens(cb->b, n);
    pthread_mutex_unlock(&cb->lock);
    return code(rc);
}

int g4cu_batch_reserve(g4cu_batch *cb) {
    if (!cb) return g4_fail(G4_EUSER, "g4cu_batch_reserve: the batch is NULL");
    pthread_mutex_lock(&cb->lock);
    const int rc = g4_batch_reserve(cb->b);
    pthread_mutex_unlock(&cb->lock);
    return code(rc);
}

void g4cu_batch_get_times(g4cu_batch *cb, g4cu_batch_times *t) {
    if (!t) return;
    memset(t, 0, sizeof *t);
    if (!cb) return;
    const g4_batch_stats st = locked_stats(cb, NULL);
    t->rounds = st.rounds;
    t->steps = st.decode_steps;
    t->prefill_chunks = st.prefill_chunks;
    t->prefill_tokens = st.prefill_tokens;
    t->prefill_s = st.prefill_s;
    t->decode_s = st.decode_s;
    t->accept_s = st.accept_s;
}

void g4cu_batch_get_slot(g4cu_batch *cb, int slot, g4cu_batch_slot_info *info) {
    memset(info, 0, sizeof *info);
    if (!cb || slot < 0 || slot >= cb->slots) return;
    pthread_mutex_lock(&cb->lock);
    g4_batch_slot_state st;
    g4_batch_get_slot(cb->b, slot, &st);
    info->id = cb->req[slot].id;
    info->phase = (g4cu_slot_phase)st.phase;
    info->n_prompt = st.n_prompt;
    info->n_prefilled = st.n_prefilled;
    info->n_generated = st.n_generated;
    info->n_ctx = st.n_ctx;
    pthread_mutex_unlock(&cb->lock);
}
