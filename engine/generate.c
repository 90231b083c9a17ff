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
typedef struct {
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
    if (!h->on) {
        int32_t next;
        int rc = g4_text_step(s, ids, T, soft, &next);
        *id = next;
        return rc;
    }
    int rc = g4_text_forward(s, ids, T, soft, h->row, 0);
    if (rc) return rc;
    return host_choose(h, s->m->cfg, p, s->n_past - 1, out, id); // (the device's draw index)
}

int g4_generate(g4_text_state *s, const g4_tokenizer *tok, const int32_t *prompt, int n_prompt,
                const g4_soft_tokens *soft, const g4_gen_params *p, g4_gen_result *out) {
    memset(out, 0, sizeof *out);
    out->stop_id = -1;
    int rc = check_params(s->m, tok, n_prompt, p);
    if (rc) return rc;
    const g4_text_config *c = s->m->cfg;

    // KV rows: prompt + max_new, at most the context. The last token is never fed back, so
    // `capacity - n_prompt + 1` tokens fit.
    long cap = (long)n_prompt + p->max_new;
    if (cap > c->context_length) cap = c->context_length;
    int limit = p->max_new;
    if (cap - n_prompt + 1 < limit) limit = (int)(cap - n_prompt + 1);
    out->n_prompt = n_prompt;
    out->max_new = limit;
    int chunk = p->prefill_chunk && p->prefill_chunk < s->max_tokens ? p->prefill_chunk
                                                                       : s->max_tokens;
    if (chunk > n_prompt) chunk = n_prompt;

    // the effective stop list: the stop strings less the ignored ones
    const char **stops = g4_malloc(sizeof(char *) * (size_t)(p->n_stop + 1));
    int n_stops = 0;
    for (int i = 0; i < p->n_stop; i++) {
        int ignored = 0;
        for (int j = 0; j < p->n_ignore_stop; j++)
            if (!strcmp(p->stop[i], p->ignore_stop[j])) ignored = 1;
        if (!ignored) stops[n_stops++] = p->stop[i];
    }
    g4_text_stream ts;
    g4_text_stream_init(&ts, tok, stops, n_stops, p->on_text, p->on_text_ctx);

    char *text = NULL; // decoded text during the loop (stop strings)
    size_t text_len = 0;
    double t0 = 0, t1 = 0, t2 = 0;
    host_pick hp;
    host_init(&hp, c, p, prompt, n_prompt);
    if ((rc = g4_text_state_reserve(s, (int)cap))) goto done; // (resets the state)
    g4_text_state_set_sampler(s, &p->sampler, p->seed);

    // Prefill in chunks; each chunk gets the soft-token rows of its own placeholders. The last
    // chunk's step picks the first token.
    t0 = now_ms();
    int soft_used = 0, id = -1;
    for (int a = 0; a < n_prompt; a += chunk) {
        int T = n_prompt - a < chunk ? n_prompt - a : chunk;
        int n_ph = 0;
        for (int t = a; t < a + T; t++)
            n_ph += g4_placeholder_of(c, prompt[t]) != G4_PH_NONE;
        if (soft_used + n_ph > (soft ? soft->n : 0)) {
            rc = g4_fail(G4_EUSER,
                         "the prompt has more image/audio placeholder tokens than the %d soft "
                         "tokens given",
                         soft ? soft->n : 0);
            goto done;
        }
        g4_soft_tokens part = {{0}, n_ph};
        if (n_ph) {
            part.rows = soft->rows;
            part.rows.data = (float *)soft->rows.data + (size_t)soft_used * c->hidden;
            part.rows.rows = n_ph;
        }
        const g4_soft_tokens *sp = n_ph ? &part : NULL;
        if (a + T < n_prompt)
            rc = g4_text_forward(s, prompt + a, T, sp, NULL, 0);
        else
            rc = step_pick(s, &hp, p, prompt + a, T, sp, out, &id);
        if (rc) goto done;
        soft_used += n_ph;
    }
    if (soft && soft_used != soft->n) {
        rc = g4_fail(G4_EUSER,
                     "%d soft tokens given, but the prompt has %d image/audio placeholder tokens",
                     soft->n, soft_used);
        goto done;
    }

    // Decode: check the stops, feed the token back through the one decode step.
    for (int step = 0;; step++) {
        g4_ids_push(&out->tokens, id);
        if (step == 0) t1 = now_ms();
        int stop = -1, which = -1;
        long cut = -1;
        if (n_stops) {
            free(text);
            text = NULL;
            if ((rc = g4_tokenizer_decode(tok, out->tokens.v, out->tokens.n, 1, &text, &text_len)))
                goto done;
            cut = g4_find_stop(stops, n_stops, text, text_len, &which);
        }
        if (cut >= 0) {
            stop = G4_STOP_STRING;
            out->stop_string = stops[which];
        } else if (!p->ignore_eos && is_eos(c, p, id)) {
            stop = G4_STOP_EOS;
            out->stop_id = id;
        } else if (p->json && g4_json_done(&hp.js)) {
            stop = G4_STOP_JSON;
        } else if ((int)out->tokens.n >= limit) {
            stop = limit < p->max_new ? G4_STOP_CONTEXT : G4_STOP_MAX_NEW;
        }
        if (stop >= 0) {
            out->stop = (g4_stop_reason)stop;
            break;
        }
        if (p->on_text && (rc = g4_text_stream_update(&ts, out->tokens.v, out->tokens.n)))
            goto done;
        if (p->cancel && *p->cancel) {
            out->stop = G4_STOP_CANCEL;
            break;
        }
        const int32_t fed = id;
        if ((rc = step_pick(s, &hp, p, &fed, 1, NULL, out, &id))) goto done;
    }
    t2 = now_ms();

    // The final text, cut before the stop string; stream what is left of it.
    if (tok) {
        if ((rc = g4_tokenizer_decode(tok, out->tokens.v, out->tokens.n, 1, &out->text,
                                      &out->text_len)))
            goto done;
        int which;
        long cut2 = g4_find_stop(stops, n_stops, out->text, out->text_len, &which);
        if (cut2 >= 0) {
            out->text_len = (size_t)cut2;
            out->text[cut2] = 0;
        }
        if (p->on_text) g4_text_stream_finish(&ts, out->text, out->text_len);
    }
    out->prefill_ms = t1 - t0;
    out->decode_ms = t2 - t1;
    out->prefill_tok_s = out->prefill_ms > 0 ? n_prompt / (out->prefill_ms * 1e-3) : 0;
    out->decode_tok_s =
        out->tokens.n > 1 && out->decode_ms > 0 ? (out->tokens.n - 1) / (out->decode_ms * 1e-3) : 0;
done:
    host_free(&hp);
    free(text);
    free(stops);
    g4_text_stream_free(&ts);
    if (rc) g4_gen_result_free(out);
    return rc;
}
