// batch.c: continuous batching over a pipeline's model (see batch.h): slots, each a text state
// and one generation run step by step (generate.h's g4_gen_seq), decoded together by
// g4_text_batch_step.
#include "engine/batch.h"

#include <stdlib.h>
#include <string.h>

#include "base/progress.h"

typedef enum { SLOT_FREE = 0, SLOT_PREFILL, SLOT_DECODE, SLOT_DONE } slot_phase;

typedef struct {
    slot_phase phase;
    long order;        // submission number (the oldest prefills first)
    g4_text_state *st; // made by the slot's first request, reused after it
    g4_gen_seq q;
    g4_gen_result res;
    int rc;     // the request's outcome (SLOT_DONE)
    char *err;  // its error line when rc != G4_OK
    // what the request's parameters point to, owned by the slot
    char **strs; // stop then ignore_stop strings
    const char **stop, **ignore;
    int *eos;
} g4_batch_slot;

struct g4_batch {
    g4_pipeline *pl;
    int n_slots, n_ctx;
    int prefill_tokens; // a round's prefill budget (opts.prefill_tokens)
    int prefill_one;    // G4_BATCH_PREFILL_ONE=1: the budget is the oldest's one chunk (A/B)
    int prompt_rows;    // prompts as rows of the decode step (batch.h; G4_BATCH_PROMPT_ROWS=0: not)
    int max_rows;       // the step's rows at most (its state's max_tokens)
    g4_batch_slot *slots;
    char *taken;               // [n_slots] a round's prefill: the slots it has looked at
    g4_text_state *step_state; // the decode step's rows (activations only; made on first need)
    long submitted;
    g4_batch_stats stats;
    // per step: the rows' states and ids [max_rows] (prompt rows: the sampled rows first), the
    // sampled rows' next ids and slots [n_slots], each slot's prompt rows in this step [n_slots]
    g4_text_state **rows;
    int32_t *ids, *next;
    int *which, *take;
};

static int bad_budget(int n) {
    return g4_fail(G4_EUSER,
                   "batch prefill budget of %d tokens a round: expected >= 1 (0: the default)", n);
}

int g4_batch_new(g4_pipeline *pl, const g4_batch_opts *o, g4_batch **out) {
    *out = NULL;
    const int ctx = pl->pkg->text.context_length;
    if (o->slots < 1 || o->slots > 4096)
        return g4_fail(G4_EUSER, "batch of %d slots: expected 1..4096", o->slots);
    if (o->n_ctx < 0 || o->n_ctx > ctx)
        return g4_fail(G4_EUSER, "batch n_ctx %d: expected 0..%d (the model's context)", o->n_ctx,
                       ctx);
    if (o->prefill_tokens < 0) return bad_budget(o->prefill_tokens);
    g4_batch *b = g4_calloc(1, sizeof *b);
    b->pl = pl;
    b->n_slots = o->slots;
    b->n_ctx = o->n_ctx;
    b->prefill_tokens = o->prefill_tokens ? o->prefill_tokens : pl->max_tokens;
    b->prefill_one = g4_env_is("G4_BATCH_PREFILL_ONE", "1");
    // prompts as rows of the decode step, the default (batch.h): with the row-batched ops, and
    // more than one slot (a lone slot never has a decode row beside a prompt: the rows would
    // only add the step state's activations to its own prefill forward)
    b->prompt_rows = !g4_env_is("G4_BATCH_PROMPT_ROWS", "0") && o->slots > 1 &&
                     g4_text_batch_rows_ops(pl->model);
    // prompt rows: the step takes the slots' decode rows and one forward's worth of prompt rows
    // (at most the 4096 rows the row-batched attention takes, kernels/attention_decode.cuh)
    b->max_rows = o->slots;
    if (b->prompt_rows) {
        b->max_rows = o->slots + pl->max_tokens;
        if (b->max_rows > 4096) b->max_rows = o->slots > 4096 ? o->slots : 4096;
    }
    b->slots = g4_calloc((size_t)o->slots, sizeof *b->slots);
    b->rows = g4_calloc((size_t)b->max_rows, sizeof *b->rows);
    b->ids = g4_calloc((size_t)b->max_rows, sizeof *b->ids);
    b->take = g4_calloc((size_t)o->slots, sizeof *b->take);
    b->next = g4_calloc((size_t)o->slots, sizeof *b->next);
    b->which = g4_calloc((size_t)o->slots, sizeof *b->which);
    b->taken = g4_calloc((size_t)o->slots, 1);
    *out = b;
    return G4_OK;
}

// The slot's own copies of what its request's parameters point to: freed.
static void slot_free_params(g4_batch_slot *sl) {
    for (int i = 0; sl->strs && sl->strs[i]; i++) free(sl->strs[i]);
    free(sl->strs);
    free(sl->stop);
    free(sl->ignore);
    free(sl->eos);
    sl->strs = NULL, sl->stop = sl->ignore = NULL, sl->eos = NULL;
}

static void slot_clear(g4_batch_slot *sl) {
    g4_gen_result_free(&sl->res);
    free(sl->err);
    sl->err = NULL;
    slot_free_params(sl);
    sl->phase = SLOT_FREE;
}

void g4_batch_free(g4_batch *b) {
    if (!b) return;
    for (int i = 0; i < b->n_slots; i++) {
        g4_batch_slot *sl = &b->slots[i];
        if (sl->phase == SLOT_PREFILL || sl->phase == SLOT_DECODE) // dropped: no final text,
            g4_gen_seq_end(&sl->q, G4_EINTERNAL);                  // no callback, result freed
        slot_clear(sl);
        g4_text_state_free(sl->st);
    }
    g4_text_state_free(b->step_state);
    free(b->slots);
    free(b->rows);
    free(b->ids);
    free(b->take);
    free(b->next);
    free(b->which);
    free(b->taken);
    free(b);
}

// p with its arrays and strings copied into the slot (extra_eos: one more EOS id, -1: none).
static void own_params(g4_batch_slot *sl, const g4_gen_params *p, int extra_eos, g4_gen_params *q) {
    *q = *p;
    const int n = p->n_stop + p->n_ignore_stop;
    sl->strs = g4_calloc((size_t)n + 1, sizeof *sl->strs);
    sl->stop = g4_calloc((size_t)p->n_stop + 1, sizeof *sl->stop);
    sl->ignore = g4_calloc((size_t)p->n_ignore_stop + 1, sizeof *sl->ignore);
    for (int i = 0; i < p->n_stop; i++) sl->stop[i] = sl->strs[i] = g4_strdup(p->stop[i]);
    for (int i = 0; i < p->n_ignore_stop; i++)
        sl->ignore[i] = sl->strs[p->n_stop + i] = g4_strdup(p->ignore_stop[i]);
    sl->eos = g4_calloc((size_t)p->n_eos + 2, sizeof *sl->eos);
    for (int i = 0; i < p->n_eos; i++) sl->eos[i] = p->eos[i];
    q->n_eos = p->n_eos;
    if (extra_eos >= 0) sl->eos[q->n_eos++] = extra_eos;
    q->stop = sl->stop;
    q->ignore_stop = sl->ignore;
    q->eos = sl->eos;
}

// The request in sl has ended (rc: its error, or G4_OK): its result is final, it leaves the
// batch.
static void slot_finish(g4_batch_slot *sl, int rc) {
    sl->rc = g4_gen_seq_end(&sl->q, rc);
    if (sl->rc) sl->err = g4_strdup(g4_error());
    sl->phase = SLOT_DONE;
}

int g4_batch_submit(g4_batch *b, const g4_prompt_loaded *pr, const int32_t *ids, int n_ids,
                    const g4_gen_params *p, int *slot) {
    *slot = -1;
    if (p->logprobs || p->json || g4_logit_rules_active(&p->rules)) // (the C API names the field)
        return g4_fail(G4_EUSER, "batch: logprobs, JSON formats, penalties, logit_bias and min_p "
                                 "are not batched yet (the decode step samples on the device)");
    int k = 0;
    while (k < b->n_slots && b->slots[k].phase != SLOT_FREE) k++;
    if (k == b->n_slots) return G4_OK; // every slot taken
    g4_batch_slot *sl = &b->slots[k];
    g4_pipeline *pl = b->pl;
    const int max_new = p->max_new > 0 ? p->max_new : 0;
    int rc = G4_OK;
    g4_ids chat = {0};
    g4_soft_tokens soft = {{0}, 0};
    const int had_state = sl->st != NULL;
    if (!sl->st && b->n_ctx > 0) {
        const g4_text_state_opts so = {b->n_ctx, pl->max_tokens, 1, 0};
        rc = g4_text_state_new_opts(pl->model, &so, &sl->st);
    }
    if (!rc && pr) {
        if (!pl->media)
            rc = g4_fail(G4_EUSER, "batch: the pipeline was opened text_only: no chat turns");
        else
            rc = g4_pipeline_prepare_on(pl, &sl->st, pr, max_new, &chat, &soft);
        ids = chat.v;
        n_ids = (int)chat.n;
    } else if (!rc && !sl->st) {
        long cap = (long)(n_ids > 0 ? n_ids : 1) + max_new;
        if (cap > pl->pkg->text.context_length) cap = pl->pkg->text.context_length;
        const g4_text_state_opts so = {(int)cap, pl->max_tokens, 1, 0};
        rc = g4_text_state_new_opts(pl->model, &so, &sl->st);
    }
    if (!had_state && sl->st) b->stats.states_made++;
    // A reused state that is too small for this request grows with headroom, to a multiple of
    // G4_BATCH_KV_STEP rows: requests of varying length (eval's audio items) would otherwise
    // regrow a slot at each new longest one, and a regrowth opens a new handle and recaptures
    // the step's graph (CUDA). (g4_gen_seq_begin's own reserve then finds the rows there.)
    if (!rc && had_state && sl->st) {
        const long ctx = pl->pkg->text.context_length;
        long need = (long)(n_ids > 0 ? n_ids : 1) + max_new;
        if (need > ctx) need = ctx;
        if (need > sl->st->capacity) {
            long cap = (need + G4_BATCH_KV_STEP - 1) / G4_BATCH_KV_STEP * G4_BATCH_KV_STEP;
            rc = g4_text_state_reserve(sl->st, (int)(cap < ctx ? cap : ctx));
            b->stats.states_grown++;
        }
    }
    if (!rc) {
        g4_gen_params q;
        own_params(sl, p, pr ? pl->ct.turn_close : -1, &q);
        rc = g4_gen_seq_begin(&sl->q, sl->st, pl->tok, ids, n_ids, soft.n ? &soft : NULL, &q,
                              &sl->res);
        if (rc) {
            g4_gen_seq_end(&sl->q, rc);
            slot_free_params(sl);
        }
    }
    g4_ids_free(&chat);
    if (rc) return rc;
    sl->phase = SLOT_PREFILL;
    sl->order = b->submitted++;
    *slot = k;
    return G4_OK;
}

void g4_batch_cancel(g4_batch *b, int slot) {
    if (slot < 0 || slot >= b->n_slots) return;
    g4_batch_slot *sl = &b->slots[slot];
    if (sl->phase != SLOT_PREFILL && sl->phase != SLOT_DECODE) return;
    g4_gen_seq_cancel(&sl->q);
    slot_finish(sl, G4_OK);
}

int g4_batch_take(g4_batch *b, int slot, g4_gen_result *out, int *rc, char **err) {
    memset(out, 0, sizeof *out);
    *rc = G4_OK;
    *err = NULL;
    if (slot < 0 || slot >= b->n_slots || b->slots[slot].phase != SLOT_DONE) return 0;
    g4_batch_slot *sl = &b->slots[slot];
    *out = sl->res;
    memset(&sl->res, 0, sizeof sl->res);
    *rc = sl->rc;
    *err = sl->err;
    sl->err = NULL;
    slot_clear(sl);
    return 1;
}

// The oldest request still prefilling that is not yet in this round (taken[i] set), or -1.
static int oldest_prefilling(const g4_batch *b, const char *taken) {
    int k = -1;
    for (int i = 0; i < b->n_slots; i++)
        if (b->slots[i].phase == SLOT_PREFILL && !taken[i] &&
            (k < 0 || b->slots[i].order < b->slots[k].order))
            k = i;
    return k;
}

// A prefill chunk of T rows of slot sl in its own forward, its time in prefill_s: the slot
// finishes on an error or a stop, and decodes once its whole prompt is in.
static void own_chunk(g4_batch *b, g4_batch_slot *sl, int T) {
    const double t0 = g4_progress_now();
    const int rc = g4_gen_seq_prefill_upto(&sl->q, T);
    if (rc || sl->q.done)
        slot_finish(sl, rc);
    else if (sl->q.at == sl->q.n_prompt)
        sl->phase = SLOT_DECODE;
    b->stats.prefill_s += g4_progress_now() - t0;
}

// The round's prefill (batch.h): the oldest request still prefilling gets one chunk (its own
// chunk size, cut to the budget), then each next one, oldest first, whose whole chunk fits in
// what is left of the budget; none is cut to fill it. Each request at most one chunk a round.
// With prefill_one (G4_BATCH_PREFILL_ONE=1) the budget is that first chunk: nothing is left.
static void prefill_round(g4_batch *b) {
    char *taken = b->taken;
    memset(taken, 0, (size_t)b->n_slots);
    int left = b->prefill_tokens;
    for (int first = 1; left > 0; first = 0) {
        const int k = oldest_prefilling(b, taken);
        if (k < 0) return;
        taken[k] = 1;
        g4_batch_slot *sl = &b->slots[k];
        int T = sl->q.n_prompt - sl->q.at < sl->q.chunk ? sl->q.n_prompt - sl->q.at : sl->q.chunk;
        if (T > left) {
            if (!first) continue; // it waits for a round of its own; a younger one may fit
            T = left;
        }
        own_chunk(b, sl, T);
        b->stats.prefill_chunks++;
        b->stats.prefill_tokens += T;
        left = b->prefill_one ? 0 : left - T;
    }
}

// The decode step's own state (activations for max_rows rows: n_slots, or with prompt rows
// n_slots + the pipeline's rows per forward, at most 4096; logits for n_slots; no KV), made on
// first need.
static int step_state(g4_batch *b) {
    if (b->step_state) return G4_OK;
    const g4_text_state_opts so = {1, b->max_rows, b->n_slots, 1};
    return g4_text_state_new_opts(b->pl->model, &so, &b->step_state);
}

// One decode step over every decoding slot (one row each, in slot order).
static int decode_all(g4_batch *b) {
    int n = 0;
    for (int i = 0; i < b->n_slots; i++) {
        g4_batch_slot *sl = &b->slots[i];
        if (sl->phase != SLOT_DECODE) continue;
        b->which[n] = i;
        b->rows[n] = sl->st;
        b->ids[n] = g4_fed_back_id(sl->st->m->cfg, sl->q.next);
        n++;
    }
    if (!n) return G4_OK;
    b->stats.decode_steps++;
    b->stats.decode_rows += n;
    if (n > b->stats.max_decoding) b->stats.max_decoding = n;
    int rc = G4_OK;
    const double t0 = g4_progress_now();
    if (n == 1) { // one row: the state's own step (its captured graph where there is one)
        rc = g4_text_step(b->rows[0], &b->ids[0], 1, NULL, &b->next[0]);
    } else {
        rc = step_state(b);
        if (!rc) rc = g4_text_batch_step(b->step_state, b->rows, b->ids, n, b->next);
    }
    const double t1 = g4_progress_now();
    for (int r = 0; r < n; r++) {
        g4_batch_slot *sl = &b->slots[b->which[r]];
        const int rr = rc ? rc : g4_gen_seq_accept(&sl->q, b->next[r]);
        if (rr || sl->q.done) slot_finish(sl, rr);
    }
    b->stats.decode_s += t1 - t0;
    b->stats.accept_s += g4_progress_now() - t1;
    return rc;
}

// Counts the slots prefilling or decoding now into b->stats.
static void count_running(g4_batch *b) {
    int n = 0, d = 0;
    for (int i = 0; i < b->n_slots; i++) {
        n += b->slots[i].phase == SLOT_PREFILL || b->slots[i].phase == SLOT_DECODE;
        d += b->slots[i].phase == SLOT_DECODE;
    }
    b->stats.running = n;
    b->stats.decoding = d;
}

// 1 when ids[0..n) can be rows of a batch step (stage_inputs' checks pass: text ids within the
// vocabularies); else the prompt goes through its own prefill, which fails it alone.
static int text_ids(const g4_text_config *c, const int32_t *ids, int n) {
    for (int t = 0; t < n; t++)
        if (g4_placeholder_of(c, ids[t]) != G4_PH_NONE || ids[t] < 0 || ids[t] >= c->vocab ||
            ids[t] >= c->vocab_ple)
            return 0;
    return 1;
}

// A round with prompt rows (the default, batch.h): the requests still prefilling,
// oldest first, take prompt rows within the budget (the round's prefill budget, and the step's
// rows less the decode rows), each as many as fit (the last one cut to what is left); a prompt
// with media (or ids the step cannot take) gets a chunk of its own forward, as in
// prefill_round. Then ONE step: each decoding slot's row and the last row of each prompt that
// ends in it sample (rows [0, nl)), the other prompt rows only store their k, v.
static int rows_round(g4_batch *b) {
    memset(b->taken, 0, (size_t)b->n_slots);
    memset(b->take, 0, sizeof *b->take * (size_t)b->n_slots);
    int nd = 0, any = 0;
    for (int i = 0; i < b->n_slots; i++) nd += b->slots[i].phase == SLOT_DECODE;
    int left = b->max_rows - nd < b->prefill_tokens ? b->max_rows - nd : b->prefill_tokens;
    while (left > 0) {
        const int k = oldest_prefilling(b, b->taken);
        if (k < 0) break;
        b->taken[k] = 1;
        g4_batch_slot *sl = &b->slots[k];
        g4_gen_seq *q = &sl->q;
        int T = q->n_prompt - q->at < left ? q->n_prompt - q->at : left;
        if (q->soft.n || q->hp || !text_ids(sl->st->m->cfg, q->prompt + q->at, T)) {
            if (T > q->chunk) T = q->chunk; // its own forward (soft rows live in its state)
            own_chunk(b, sl, T); // (done: it decodes in this round's step, as prefill_round's)
        } else {
            b->take[k] = T;
            any = 1;
        }
        b->stats.prefill_chunks++;
        b->stats.prefill_tokens += T;
        left -= T;
    }
    if (!any) return decode_all(b);
    // the rows: sampled ones in rows[0, nl) (decode rows, then ending prompts' last rows, in
    // slot order), then the other prompt rows (slot order, each prompt's in order)
    int nl = 0;
    for (int i = 0; i < b->n_slots; i++) {
        g4_batch_slot *sl = &b->slots[i];
        if (sl->phase != SLOT_DECODE) continue;
        b->which[nl] = i;
        b->rows[nl] = sl->st;
        b->ids[nl++] = g4_fed_back_id(sl->st->m->cfg, sl->q.next);
    }
    nd = nl;
    for (int i = 0; i < b->n_slots; i++) {
        g4_batch_slot *sl = &b->slots[i];
        const int T = b->take[i];
        if (!T || sl->q.at + T != sl->q.n_prompt) continue;
        b->which[nl] = i;
        b->rows[nl] = sl->st;
        b->ids[nl++] = sl->q.prompt[sl->q.n_prompt - 1];
    }
    int n = nl;
    for (int i = 0; i < b->n_slots; i++) {
        g4_batch_slot *sl = &b->slots[i];
        const int T = b->take[i];
        if (!T) continue;
        const int ends = sl->q.at + T == sl->q.n_prompt; // (its last row is sampled, above)
        for (int t = 0; t < T - ends; t++) {
            b->rows[n] = sl->st;
            b->ids[n++] = sl->q.prompt[sl->q.at + t];
        }
    }
    G4_ASSERT(nl <= b->n_slots && n <= b->max_rows);
    b->stats.decode_steps++;
    b->stats.decode_rows += nd;
    if (nd > b->stats.max_decoding) b->stats.max_decoding = nd;
    const double t0 = g4_progress_now();
    const int rc = g4_text_batch_step_rows(b->step_state, b->rows, b->ids, n, nl, b->next);
    const double t1 = g4_progress_now();
    for (int r = 0; r < nl; r++) { // (the slots that sample: decode rows, ending prompts)
        g4_batch_slot *sl = &b->slots[b->which[r]];
        int rr = rc;
        if (!rr && b->take[b->which[r]])
            rr = g4_gen_seq_rows_done(&sl->q, b->take[b->which[r]], b->next[r]);
        else if (!rr)
            rr = g4_gen_seq_accept(&sl->q, b->next[r]);
        if (rr || sl->q.done)
            slot_finish(sl, rr);
        else if (sl->phase == SLOT_PREFILL)
            sl->phase = SLOT_DECODE;
        b->take[b->which[r]] = 0;
    }
    for (int i = 0; i < b->n_slots; i++) { // prompts that go on in a later round
        g4_batch_slot *sl = &b->slots[i];
        if (!b->take[i]) continue;
        const int rr = rc ? rc : g4_gen_seq_rows_done(&sl->q, b->take[i], -1);
        if (rr) slot_finish(sl, rr);
    }
    b->stats.decode_s += t1 - t0;
    b->stats.accept_s += g4_progress_now() - t1;
    return rc;
}

int g4_batch_step(g4_batch *b, int *running) {
    b->stats.rounds++;
    int rc;
    // (the step state reads G4_BATCH_ROWS again when it is made: without the row-batched ops
    // then, or without the state, the rounds without prompt rows)
    if (b->prompt_rows && !step_state(b) && b->step_state->batch_rows_ops) {
        rc = rows_round(b);
    } else {
        prefill_round(b);
        rc = decode_all(b);
    }
    count_running(b);
    if (running) *running = b->stats.running;
    return rc;
}

void g4_batch_get_stats(g4_batch *b, g4_batch_stats *st) {
    count_running(b);
    *st = b->stats;
}

int g4_batch_reserve(g4_batch *b) {
    if (b->n_ctx < 1)
        return g4_fail(G4_EUSER, "batch: making the slots' states ahead needs n_ctx (the KV rows "
                                 "of each); without it each is sized by its first request");
    for (int i = 0; i < b->n_slots; i++) {
        g4_batch_slot *sl = &b->slots[i];
        if (sl->st || sl->phase != SLOT_FREE) continue;
        const g4_text_state_opts so = {b->n_ctx, b->pl->max_tokens, 1, 0};
        const int rc = g4_text_state_new_opts(b->pl->model, &so, &sl->st);
        if (rc) return rc;
        b->stats.states_made++;
    }
    return b->n_slots > 1 ? step_state(b) : G4_OK; // (prompt rows need 2 slots too)
}

int g4_batch_set_prefill_tokens(g4_batch *b, int n) {
    if (n < 0) return bad_budget(n);
    b->prefill_tokens = n ? n : b->pl->max_tokens;
    return G4_OK;
}

void g4_batch_get_slot(g4_batch *b, int slot, g4_batch_slot_state *out) {
    memset(out, 0, sizeof *out);
    if (slot < 0 || slot >= b->n_slots) return;
    const g4_batch_slot *sl = &b->slots[slot];
    out->phase = sl->phase == SLOT_PREFILL  ? 1
                 : sl->phase == SLOT_DECODE ? 2
                 : sl->phase == SLOT_DONE   ? 3
                                            : 0;
    out->n_ctx = sl->st ? sl->st->capacity : 0;
    if (sl->phase == SLOT_PREFILL || sl->phase == SLOT_DECODE) {
        out->n_prompt = sl->q.n_prompt;
        out->n_prefilled = sl->q.at;
        out->n_generated = (int)sl->res.tokens.n;
    } else if (sl->phase == SLOT_DONE) {
        out->n_prompt = sl->res.n_prompt;
        out->n_prefilled = sl->res.n_prompt;
        out->n_generated = (int)sl->res.tokens.n;
    }
}
