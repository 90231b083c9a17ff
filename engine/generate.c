// generate.c: the generation loop: chunked prefill, sampling, EOS ids, stop strings and
// streaming (semantics in generate.h).
#include "engine/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/str.h"

void g4_gen_params_default(g4_gen_params *p) {
    memset(p, 0, sizeof *p);
    p->max_new = G4_GEN_DEFAULT_MAX_NEW;
    p->sampler.top_p = 1.0f;
}

const char *g4_stop_reason_name(g4_stop_reason r) {
    switch (r) {
    case G4_STOP_EOS:
        return "eos";
    case G4_STOP_STRING:
        return "stop_string";
    case G4_STOP_MAX_NEW:
        return "max_new";
    case G4_STOP_CONTEXT:
        return "context";
    case G4_STOP_CANCEL:
        return "cancelled";
    case G4_STOP_JSON:
        return "json_end";
    }
    return "?";
}

void g4_gen_result_free(g4_gen_result *r) {
    g4_ids_free(&r->tokens);
    free(r->text);
    r->text = NULL;
    free(r->logprobs);
    r->logprobs = NULL;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

// --- the loop ---------------------------------------------------------------------------------
static int is_eos(const g4_text_config *c, const g4_gen_params *p, int id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return 1;
    for (int i = 0; i < p->n_eos; i++)
        if (p->eos[i] == id) return 1;
    return 0;
}

static int check_params(const g4_text_model *m, const g4_tokenizer *tok, int n_prompt,
                        const g4_gen_params *p) {
    const g4_text_config *c = m->cfg;
    if (n_prompt < 1) return g4_fail(G4_EUSER, "generate: the prompt has no tokens");
    if (n_prompt > c->context_length)
        return g4_fail(G4_EUSER,
                       "prompt of %d tokens is longer than the model's context of %d tokens",
                       n_prompt, c->context_length);
    if (p->max_new < 1)
        return g4_fail(G4_EUSER, "max_new %d: expected at least 1 new token", p->max_new);
    if (p->prefill_chunk < 0)
        return g4_fail(G4_EUSER, "prefill_chunk %d: expected >= 0", p->prefill_chunk);
    if (p->sampler.temperature > 0 && p->sampler.top_k < 0)
        return g4_fail(G4_EUSER, "top_k %d: expected >= 0 (0 = off)", p->sampler.top_k);
    if (p->sampler.temperature > 0 && !(p->sampler.top_p > 0))
        return g4_fail(G4_EUSER, "top_p %g: expected in (0, 1] (1 = off)",
                       (double)p->sampler.top_p);
    for (int i = 0; i < p->n_stop; i++) {
        if (!p->stop[i][0]) return g4_fail(G4_EUSER, "stop string %d is empty", i + 1);
        int rc = g4_py_check_utf8(p->stop[i], "stop string");
        if (rc) return rc;
    }
    if ((p->n_stop || p->on_text) && !tok)
        return g4_fail(G4_EUSER, "generate: stop strings and streaming need a tokenizer");
    if (p->top_logprobs < 0 || p->top_logprobs > G4_MAX_TOP_LOGPROBS)
        return g4_fail(G4_EUSER, "top_logprobs %d: expected 0..%d", p->top_logprobs,
                       G4_MAX_TOP_LOGPROBS);
    if (p->json && !p->vocab)
        return g4_fail(G4_EINTERNAL, "generate: a JSON constraint without the token bytes");
    if (p->json && p->ignore_eos)
        return g4_fail(G4_EUSER, "generate: a JSON format ends at its value: not with ignore_eos");
    return g4_logit_rules_check(&p->rules, c->vocab);
}

// --- the host-side pick (sample_rules.h) --------------------------------------------------------
typedef struct g4_host_pick {
    int on, V;
    float *row;      // [V] the step's logits
    uint8_t *seen;   // [V] prompt + output tokens (repetition penalty), else NULL
    int32_t *counts; // [V] output counts (presence / frequency), else NULL
    uint8_t *allowed;           // [V] the JSON mask, else NULL
    g4_json_state js;           // the output's JSON so far
    g4_json_state *scratch;     // [vocab max_len + 1]
} host_pick;

static void host_init(host_pick *h, const g4_text_config *c, const g4_gen_params *p,
                      const int32_t *prompt, int n_prompt) {
    memset(h, 0, sizeof *h);
    h->on = p->logprobs || p->json || g4_logit_rules_active(&p->rules);
    if (!h->on) return;
    h->V = c->vocab;
    h->row = g4_malloc(sizeof(float) * (size_t)h->V);
    if (p->rules.repetition > 0 && p->rules.repetition != 1) {
        h->seen = g4_calloc((size_t)h->V, 1);
        for (int i = 0; i < n_prompt; i++)
            if (prompt[i] >= 0 && prompt[i] < h->V) h->seen[prompt[i]] = 1;
    }
    if (p->rules.presence != 0 || p->rules.frequency != 0)
        h->counts = g4_calloc((size_t)h->V, sizeof(int32_t));
    if (p->json) {
        h->allowed = g4_malloc((size_t)h->V);
        h->scratch = g4_malloc(sizeof(g4_json_state) * (size_t)(p->vocab->max_len + 1));
        g4_json_start(p->json, &h->js);
    }
}

static void host_free(host_pick *h) {
    free(h->row);
    free(h->seen);
    free(h->counts);
    free(h->allowed);
    free(h->scratch);
}

// Picks the token after h->row (the logits of position `pos`), in sample_rules.h's order.
static int host_choose(host_pick *h, const g4_text_config *c, const g4_gen_params *p, int pos,
                       g4_gen_result *out, int *id) {
    float *x = h->row;
    g4_logit_rules_apply(&p->rules, x, h->V, h->seen, h->counts);
    if (p->json) {
        int n = g4_json_mask(&h->js, p->vocab, h->allowed, h->V, h->scratch);
        if (g4_json_can_end(&h->js)) // the value is whole: an end of sequence may come
            for (int i = 0; i < h->V; i++)
                if (is_eos(c, p, i) && !h->allowed[i]) h->allowed[i] = 1, n++;
        if (!n)
            return g4_fail(G4_EUSER,
                           "response_format: no token of the vocabulary continues the JSON "
                           "after %zu bytes",
                           h->js.n_bytes);
        for (int i = 0; i < h->V; i++)
            if (!h->allowed[i]) x[i] = -INFINITY;
    }
    g4_token_logprob lp = {0};
    double log_z = 0;
    const float t = p->sampler.temperature;
    if (p->logprobs) log_z = g4_logprobs_top(x, h->V, t, p->top_logprobs, &lp);
    g4_min_p_apply(p->rules.min_p, t, x, h->V);
    int rc = g4_sample(&p->sampler, x, h->V, p->seed, (uint32_t)pos, id);
    if (rc) return rc;
    if (*id < 0 || *id >= h->V)
        return g4_fail(G4_EINTERNAL, "sample: no token picked after position %d", pos);
    if (p->logprobs) {
        lp.id = *id;
        lp.logprob = g4_logprob_of(x, h->V, t, log_z, *id);
        out->logprobs = realloc(out->logprobs, sizeof lp * (out->tokens.n + 1));
        if (!out->logprobs) abort();
        out->logprobs[out->tokens.n] = lp;
        if (p->on_token) p->on_token(p->on_token_ctx, &lp);
    }
    if (h->seen) h->seen[*id] = 1;
    if (h->counts) h->counts[*id]++;
    if (p->json && *id < p->vocab->n) {
        const g4_vocab_bytes *vb = p->vocab;
        g4_json_feed(&h->js, vb->bytes + vb->off[*id], vb->off[*id + 1] - vb->off[*id]);
    }
    return G4_OK;
}

// The step of T tokens: on the device (g4_text_step), or with the row brought to the host.
static int step_pick(g4_text_state *s, host_pick *h, const g4_gen_params *p, const int32_t *ids,
                     int T, const g4_soft_tokens *soft, g4_gen_result *out, int *id) {
    if (!h || !h->on) {
        int32_t next;
        int rc = g4_text_step(s, ids, T, soft, &next);
        *id = next;
        return rc;
    }
    int rc = g4_text_forward(s, ids, T, soft, h->row, 0);
    if (rc) return rc;
    return host_choose(h, s->m->cfg, p, s->n_past - 1, out, id); // (the device's draw index)
}

// --- one generation, step by step (g4_gen_seq) ------------------------------------------------
int g4_gen_seq_begin(g4_gen_seq *q, g4_text_state *s, const g4_tokenizer *tok,
                     const int32_t *prompt, int n_prompt, const g4_soft_tokens *soft,
                     const g4_gen_params *p, g4_gen_result *out) {
    memset(q, 0, sizeof *q);
    memset(out, 0, sizeof *out);
    out->stop_id = -1;
    q->out = out;
    int rc = check_params(s->m, tok, n_prompt, p);
    if (rc) return rc;
    if (!prompt) return g4_fail(G4_EUSER, "generate: the prompt ids are NULL");
    const g4_text_config *c = s->m->cfg;
    q->s = s;
    q->tok = tok;
    q->p = *p;
    q->soft = soft ? *soft : (g4_soft_tokens){{0}, 0};
    q->prompt = g4_malloc(sizeof(int32_t) * (size_t)n_prompt);
    memcpy(q->prompt, prompt, sizeof(int32_t) * (size_t)n_prompt);
    q->n_prompt = n_prompt;

    // KV rows: prompt + max_new, at most the context. The last token is never fed back, so
    // `capacity - n_prompt + 1` tokens fit.
    long cap = (long)n_prompt + p->max_new;
    if (cap > c->context_length) cap = c->context_length;
    q->limit = p->max_new;
    if (cap - n_prompt + 1 < q->limit) q->limit = (int)(cap - n_prompt + 1);
    out->n_prompt = n_prompt;
    out->max_new = q->limit;
    q->chunk = p->prefill_chunk && p->prefill_chunk < s->max_tokens ? p->prefill_chunk
                                                                      : s->max_tokens;
    if (q->chunk > n_prompt) q->chunk = n_prompt;

    // the effective stop list: the stop strings less the ignored ones
    q->stops = g4_malloc(sizeof(char *) * (size_t)(p->n_stop + 1));
    for (int i = 0; i < p->n_stop; i++) {
        int ignored = 0;
        for (int j = 0; j < p->n_ignore_stop; j++)
            if (!strcmp(p->stop[i], p->ignore_stop[j])) ignored = 1;
        if (!ignored) q->stops[q->n_stops++] = p->stop[i];
    }
    g4_text_stream_init(&q->ts, tok, q->stops, q->n_stops, p->on_text, p->on_text_ctx);
    q->started = 1;
    host_pick *hp = g4_calloc(1, sizeof *hp);
    host_init(hp, c, &q->p, q->prompt, n_prompt);
    if (hp->on) {
        q->hp = hp;
    } else {
        host_free(hp);
        free(hp);
    }
    if ((rc = g4_text_state_reserve(s, (int)cap))) return rc; // (resets the state)
    g4_text_state_set_sampler(s, &p->sampler, p->seed);
    q->t0 = now_ms();
    return G4_OK;
}

int g4_gen_seq_prefill(g4_gen_seq *q) { return g4_gen_seq_prefill_upto(q, q->chunk); }

int g4_gen_seq_prefill_upto(g4_gen_seq *q, int max_rows) {
    const g4_text_config *c = q->s->m->cfg;
    const g4_soft_tokens *soft = q->soft.n ? &q->soft : NULL;
    const int chunk = max_rows < q->chunk ? max_rows : q->chunk;
    const int a = q->at, T = q->n_prompt - a < chunk ? q->n_prompt - a : chunk;
    if (T < 1) return g4_fail(G4_EINTERNAL, "generate: prefill after the prompt's end");
    int n_ph = 0, rc;
    for (int t = a; t < a + T; t++) n_ph += g4_placeholder_of(c, q->prompt[t]) != G4_PH_NONE;
    if (q->soft_used + n_ph > q->soft.n)
        return g4_fail(G4_EUSER,
                       "the prompt has more image/audio placeholder tokens than the %d soft "
                       "tokens given",
                       q->soft.n);
    g4_soft_tokens part = {{0}, n_ph};
    if (n_ph) {
        part.rows = soft->rows;
        part.rows.data = (float *)soft->rows.data + (size_t)q->soft_used * c->hidden;
        part.rows.rows = n_ph;
    }
    const g4_soft_tokens *sp = n_ph ? &part : NULL;
    q->soft_used += n_ph;
    q->at += T;
    if (q->at < q->n_prompt) return g4_text_forward(q->s, q->prompt + a, T, sp, NULL, 0);
    // the last chunk's step picks the first token
    int32_t first;
    if ((rc = step_pick(q->s, q->hp, &q->p, q->prompt + a, T, sp, q->out, &first))) return rc;
    if (q->soft_used != q->soft.n)
        return g4_fail(G4_EUSER,
                       "%d soft tokens given, but the prompt has %d image/audio placeholder tokens",
                       q->soft.n, q->soft_used);
    return g4_gen_seq_accept(q, first);
}

int g4_gen_seq_rows_done(g4_gen_seq *q, int T, int32_t first) {
    if (T < 1 || q->at + T > q->n_prompt || q->soft.n || q->hp)
        return g4_fail(G4_EINTERNAL,
                       "generate: %d prompt rows stepped after %d of %d (soft tokens %d, host "
                       "pick %d): expected text rows within the prompt",
                       T, q->at, q->n_prompt, q->soft.n, q->hp != NULL);
    q->at += T;
    return q->at < q->n_prompt ? G4_OK : g4_gen_seq_accept(q, first);
}

int g4_gen_seq_accept(g4_gen_seq *q, int32_t id) {
    g4_gen_result *out = q->out;
    const g4_gen_params *p = &q->p;
    int rc;
    g4_ids_push(&out->tokens, id);
    if (out->tokens.n == 1) q->t1 = now_ms();
    q->next = id;
    int stop = -1, which = -1;
    long cut = -1;
    if (q->n_stops) {
        free(q->text);
        q->text = NULL;
        if ((rc = g4_tokenizer_decode(q->tok, out->tokens.v, out->tokens.n, 1, &q->text,
                                      &q->text_len)))
            return rc;
        cut = g4_find_stop(q->stops, q->n_stops, q->text, q->text_len, &which);
    }
    if (cut >= 0) {
        stop = G4_STOP_STRING;
        out->stop_string = q->stops[which];
    } else if (!p->ignore_eos && is_eos(q->s->m->cfg, p, id)) {
        stop = G4_STOP_EOS;
        out->stop_id = id;
    } else if (p->json && q->hp && g4_json_done(&q->hp->js)) {
        stop = G4_STOP_JSON;
    } else if ((int)out->tokens.n >= q->limit) {
        stop = q->limit < p->max_new ? G4_STOP_CONTEXT : G4_STOP_MAX_NEW;
    }
    if (stop >= 0) {
        out->stop = (g4_stop_reason)stop;
        q->done = 1;
        q->t2 = now_ms();
        return G4_OK;
    }
    if (p->on_text && (rc = g4_text_stream_update(&q->ts, out->tokens.v, out->tokens.n)))
        return rc;
    if (p->cancel && *p->cancel) g4_gen_seq_cancel(q);
    return G4_OK;
}

void g4_gen_seq_cancel(g4_gen_seq *q) {
    q->out->stop = G4_STOP_CANCEL;
    q->done = 1;
    q->t2 = now_ms();
}

int g4_gen_seq_end(g4_gen_seq *q, int rc) {
    g4_gen_result *out = q->out;
    if (!rc && q->tok) { // the final text, cut before the stop string; stream what is left
        rc = g4_tokenizer_decode(q->tok, out->tokens.v, out->tokens.n, 1, &out->text,
                                 &out->text_len);
        int which;
        long cut2 = rc ? -1 : g4_find_stop(q->stops, q->n_stops, out->text, out->text_len, &which);
        if (cut2 >= 0) {
            out->text_len = (size_t)cut2;
            out->text[cut2] = 0;
        }
        if (!rc && q->p.on_text) g4_text_stream_finish(&q->ts, out->text, out->text_len);
    }
    if (!rc) {
        const double t2 = q->t2;
        out->prefill_ms = q->t1 - q->t0;
        out->decode_ms = t2 - q->t1;
        out->prefill_tok_s = out->prefill_ms > 0 ? q->n_prompt / (out->prefill_ms * 1e-3) : 0;
        out->decode_tok_s = out->tokens.n > 1 && out->decode_ms > 0
                                ? (out->tokens.n - 1) / (out->decode_ms * 1e-3)
                                : 0;
    }
    free(q->text);
    free(q->stops);
    free(q->prompt);
    if (q->hp) {
        host_free(q->hp);
        free(q->hp);
        q->hp = NULL;
    }
    if (q->started) g4_text_stream_free(&q->ts);
    q->text = NULL, q->stops = NULL, q->prompt = NULL, q->started = 0;
    if (rc) g4_gen_result_free(out);
    return rc;
}

int g4_generate(g4_text_state *s, const g4_tokenizer *tok, const int32_t *prompt, int n_prompt,
                const g4_soft_tokens *soft, const g4_gen_params *p, g4_gen_result *out) {
    g4_gen_seq q;
    int rc = g4_gen_seq_begin(&q, s, tok, prompt, n_prompt, soft, p, out);
    while (!rc && q.at < q.n_prompt) rc = g4_gen_seq_prefill(&q);
    // decode: feed each token back through the one decode step
    while (!rc && !q.done) {
        const int32_t fed = g4_fed_back_id(s->m->cfg, q.next);
        int32_t next;
        if (!(rc = step_pick(s, q.hp, &q.p, &fed, 1, NULL, out, &next)))
            rc = g4_gen_seq_accept(&q, next);
    }
    return g4_gen_seq_end(&q, rc);
}
