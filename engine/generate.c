// generate.c: the generation loop: chunked prefill, sampling, EOS ids, stop strings and
// streaming (semantics in generate.h).
#include "engine/generate.h"

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
    }
    return "?";
}

void g4_gen_result_free(g4_gen_result *r) {
    g4_ids_free(&r->tokens);
    free(r->text);
    r->text = NULL;
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
    return G4_OK;
}

int g4_generate(g4_text_model *m, const g4_tokenizer *tok, const int32_t *prompt, int n_prompt,
                const g4_soft_tokens *soft, const g4_gen_params *p, g4_gen_result *out) {
    memset(out, 0, sizeof *out);
    out->stop_id = -1;
    int rc = check_params(m, tok, n_prompt, p);
    if (rc) return rc;
    const g4_text_config *c = m->cfg;
    const int V = c->vocab;

    // KV rows: prompt + max_new, at most the context. The last token is never fed back, so
    // `capacity - n_prompt + 1` tokens fit.
    long cap = (long)n_prompt + p->max_new;
    if (cap > c->context_length) cap = c->context_length;
    int limit = p->max_new;
    if (cap - n_prompt + 1 < limit) limit = (int)(cap - n_prompt + 1);
    out->n_prompt = n_prompt;
    out->max_new = limit;
    int chunk = p->prefill_chunk ? p->prefill_chunk : G4_GEN_DEFAULT_CHUNK;
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

    g4_text_state *s = NULL;
    char *text = NULL; // decoded text during the loop (stop strings)
    size_t text_len = 0;
    double t0 = 0, t1 = 0, t2 = 0;
    float *logits = g4_malloc(sizeof(float) * (size_t)V);
    g4_rng rng;
    g4_rng_seed(&rng, p->seed);
    if ((rc = g4_text_state_new(m, (int)cap, chunk, &s))) goto done;

    // Prefill in chunks; each chunk gets the soft-token rows of its own placeholders.
    t0 = now_ms();
    int soft_used = 0;
    for (int a = 0; a < n_prompt; a += chunk) {
        int T = n_prompt - a < chunk ? n_prompt - a : chunk;
        int n_ph = 0;
        for (int t = a; t < a + T; t++)
            if ((c->image_token_id >= 0 && prompt[t] == c->image_token_id) ||
                (c->audio_token_id >= 0 && prompt[t] == c->audio_token_id))
                n_ph++;
        if (soft_used + n_ph > (soft ? soft->n : 0)) {
            rc = g4_fail(G4_EUSER,
                         "the prompt has more image/audio placeholder tokens than the %d soft "
                         "tokens given",
                         soft ? soft->n : 0);
            goto done;
        }
        g4_soft_tokens part = {soft ? soft->rows + (size_t)soft_used * c->hidden : NULL, n_ph};
        int last = a + T == n_prompt;
        if ((rc = g4_text_forward(s, prompt + a, T, n_ph ? &part : NULL, last ? logits : NULL, 0)))
            goto done;
        soft_used += n_ph;
    }
    if (soft && soft_used != soft->n) {
        rc = g4_fail(G4_EUSER,
                     "%d soft tokens given, but the prompt has %d image/audio placeholder tokens",
                     soft->n, soft_used);
        goto done;
    }

    // Decode: sample, check the stops, feed the token back.
    for (int step = 0;; step++) {
        int id;
        if ((rc = g4_sample(&p->sampler, logits, V, &rng, &id))) goto done;
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
        } else if (is_eos(c, p, id)) {
            stop = G4_STOP_EOS;
            out->stop_id = id;
        } else if ((int)out->tokens.n >= limit) {
            stop = limit < p->max_new ? G4_STOP_CONTEXT : G4_STOP_MAX_NEW;
        }
        if (stop >= 0) {
            out->stop = (g4_stop_reason)stop;
            break;
        }
        if (p->on_text && (rc = g4_text_stream_update(&ts, out->tokens.v, out->tokens.n)))
            goto done;
        int32_t next = id;
        if ((rc = g4_text_forward(s, &next, 1, NULL, logits, 0))) goto done;
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
    free(text);
    free(stops);
    g4_text_stream_free(&ts);
    free(logits);
    g4_text_state_free(s);
    if (rc) g4_gen_result_free(out);
    return rc;
}
