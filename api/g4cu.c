// g4cu.c: the public C API (include/g4cu.h) over the engine's pipeline (engine/pipeline.h):
// a g4cu_model is a pipeline opened once; each g4cu_state is a text state of its model, passed
// to g4_pipeline_generate_on, so several run at once on one set of weights.
#include <g4cu.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "base/base.h"
#include "engine/pipeline.h"
#include "kernels/backend_select.h"

const char *g4cu_last_error(void) { return g4_error(); }
const char *g4cu_version(void) { return "0.1"; }
void g4cu_free(void *p) { free(p); }

static int code(int rc) { return g4_api_code(rc); }
// The command's exit codes come from the API's codes through tools/cli.h's g4_cli_fail.
_Static_assert((int)G4CU_OK == (int)G4_OK && (int)G4CU_EUSER == (int)G4_EUSER &&
                   (int)G4CU_EINTERNAL == (int)G4_EINTERNAL,
               "the API's error codes are the engine's");

void g4cu_model_params_default(g4cu_model_params *p) { memset(p, 0, sizeof *p); }

int g4cu_model_load(const char *dir, const g4cu_model_params *p, g4cu_model **out) {
    if (!out) return g4_fail(G4_EUSER, "g4cu_model_load: out is NULL");
    *out = NULL;
    if (!dir) return g4_fail(G4_EUSER, "g4cu_model_load: the package directory is NULL");
    g4cu_model_params defaults;
    g4cu_model_params_default(&defaults);
    if (!p) p = &defaults;
    const char *name = p->backend ? p->backend : "auto";
    g4_backend *be = NULL;
    int rc;
    if (!strcmp(name, "auto")) {
        const char *why;
        be = g4_backend_cuda(&why);
        if (!be) be = g4_backend_cpu();
    } else if ((rc = g4_backend_by_name(name, &be))) {
        return code(rc);
    }
    if (p->n_ctx < 0) return g4_fail(G4_EUSER, "n_ctx %d: expected >= 0 (0: per request)", p->n_ctx);
    g4_pipeline_opts o = {0};
    o.tokenizer_path = p->tokenizer_path;
    o.load.ple_host = p->ple_host;
    g4cu_model *m = g4_calloc(1, sizeof *m);
    if ((rc = g4_pipeline_open_opts(dir, be, &o, &m->pl))) {
        free(m);
        return code(rc);
    }
    pthread_mutex_init(&m->lock, NULL);
    const int ctx = m->pl->pkg->text.context_length;
    m->n_ctx = p->n_ctx < ctx ? p->n_ctx : ctx;
    *out = m;
    return G4CU_OK;
}

void g4cu_model_free(g4cu_model *m) {
    if (!m) return;
    g4_pipeline_close(m->pl);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

const char *g4cu_model_backend(const g4cu_model *m) { return m->pl->be->name; }
int g4cu_model_n_vocab(const g4cu_model *m) { return m->pl->pkg->text.vocab; }
int g4cu_model_n_ctx(const g4cu_model *m) { return m->pl->pkg->text.context_length; }
int g4cu_model_has_vision(const g4cu_model *m) {
    return g4_package_component(m->pl->pkg, G4_COMP_VISION) && m->pl->pkg->has_image_proc;
}
int g4cu_model_has_audio(const g4cu_model *m) {
    return g4_package_component(m->pl->pkg, G4_COMP_AUDIO) && m->pl->pkg->has_audio_fe;
}
int g4cu_model_audio_rate(const g4cu_model *m) {
    return g4cu_model_has_audio(m) ? m->pl->pkg->audio_fe.sampling_rate : 0;
}

int g4cu_state_new(g4cu_model *m, g4cu_state **out) {
    if (!m || !out) return g4_fail(G4_EUSER, "g4cu_state_new: model or out is NULL");
    *out = NULL;
    g4cu_state *s = g4_calloc(1, sizeof *s);
    s->m = m;
    if (m->n_ctx > 0) {
        const g4_text_state_opts so = {m->n_ctx, m->pl->max_tokens, 1, 0};
        int rc = g4_text_state_new_opts(m->pl->model, &so, &s->ts);
        if (rc) {
            free(s);
            return code(rc);
        }
    }
    *out = s;
    return G4CU_OK;
}

void g4cu_state_free(g4cu_state *s) {
    if (!s) return;
    g4_text_state_free(s->ts);
    free(s);
}

void g4cu_request_default(g4cu_request *r) {
    memset(r, 0, sizeof *r);
    r->max_tokens = G4_GEN_DEFAULT_MAX_NEW;
    r->top_p = 1.0f;
}

void g4cu_result_free(g4cu_result *r) {
    if (!r) return;
    free(r->text);
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

// --- media -------------------------------------------------------------------------------------
// A file's bytes as a path the file readers take: an anonymous in-memory file (memfd), read
// through /proc/self/fd like any regular file.
static int bytes_file(const void *data, size_t size, const char *what, int *fd, char *path,
                      size_t n) {
    *fd = memfd_create("g4cu-media", MFD_CLOEXEC);
    if (*fd < 0) return g4_fail(G4_EINTERNAL, "%s: memfd_create failed", what);
    const char *p = data;
    for (size_t done = 0; done < size;) {
        ssize_t w = write(*fd, p + done, size - done);
        if (w <= 0) {
            close(*fd);
            return g4_fail(G4_EINTERNAL, "%s: writing %zu bytes to a memfd failed", what, size);
        }
        done += (size_t)w;
    }
    snprintf(path, n, "/proc/self/fd/%d", *fd);
    return G4_OK;
}

int g4cu_decode_audio(const g4cu_model *m, const void *data, size_t size, float **pcm,
                      size_t *n_samples, double *seconds) {
    *pcm = NULL;
    *n_samples = 0;
    if (seconds) *seconds = 0;
    if (!g4cu_model_has_audio(m))
        return g4_fail(G4_EUSER, "audio: the package %s has no audio encoder", m->pl->pkg->dir);
    if (!data || !size) return g4_fail(G4_EUSER, "audio: no bytes given");
    int fd;
    char path[64];
    int rc = bytes_file(data, size, "audio", &fd, path, sizeof path);
    if (rc) return code(rc);
    g4_audio a;
    rc = g4_audio_load(path, m->pl->pkg->audio_fe.sampling_rate, G4_AUDIO_MAX_SAMPLES + 1, &a);
    close(fd);
    if (rc) {
        g4_error_prefix("audio (%zu bytes)", size); // (the memfd path means nothing to a caller)
        return code(rc);
    }
    *pcm = a.samples;
    *n_samples = (size_t)a.n_samples;
    if (seconds) *seconds = (double)a.src_frames / a.src_rate;
    return G4CU_OK;
}

// One request medium through its front end; name names it in errors ("image 1", "audio 2").
static int load_media(g4cu_model *m, const g4cu_media *md, const char *name, g4_media_input *in) {
    g4_media_encoder *e = m->pl->media;
    int rc;
    switch (md->kind) {
    case G4CU_IMAGE_RGB: {
        const g4_image img = {(uint8_t *)md->rgb, md->width, md->height};
        return g4_media_load_rgb(e, &img, name, in);
    }
    case G4CU_IMAGE_ENCODED: {
        if (!md->data || !md->size) return g4_fail(G4_EUSER, "%s: no bytes given", name);
        g4_image img;
        if ((rc = g4_image_decode(md->data, md->size, name, &img))) return rc;
        rc = g4_media_load_rgb(e, &img, name, in);
        g4_image_free(&img);
        return rc;
    }
    case G4CU_AUDIO_PCM:
        return g4_media_load_pcm(e, md->pcm, (int64_t)md->n_samples, md->sample_rate, name, in);
    case G4CU_AUDIO_ENCODED: {
        float *pcm;
        size_t n;
        if ((rc = g4cu_decode_audio(m, md->data, md->size, &pcm, &n, NULL))) {
            g4_error_prefix("%s", name);
            return rc == G4CU_EUSER ? G4_EUSER : G4_EINTERNAL;
        }
        rc = g4_media_load_pcm(e, pcm, (int64_t)n, m->pl->pkg->audio_fe.sampling_rate, name, in);
        free(pcm);
        return rc;
    }
    }
    return g4_fail(G4_EUSER, "%s: media kind %d: expected an image (RGB or encoded) or audio",
                   name, (int)md->kind);
}

static int is_image(const g4cu_media *md) {
    return md->kind == G4CU_IMAGE_RGB || md->kind == G4CU_IMAGE_ENCODED;
}

// --- generation --------------------------------------------------------------------------------
typedef struct {
    const g4cu_request *rq;
    volatile int cancel;
} stream_ctx;

static void on_text(void *ctx, const char *text, size_t len) {
    stream_ctx *c = ctx;
    if (!c->cancel && c->rq->on_text(c->rq->user, text, len)) c->cancel = 1;
}

static void model_lock(void *ctx, int on) {
    g4cu_model *m = ctx;
    if (on)
        pthread_mutex_lock(&m->lock);
    else
        pthread_mutex_unlock(&m->lock);
}

static int check_request(const g4cu_request *rq) {
    if (rq->max_tokens < 1)
        return g4_fail(G4_EUSER, "max_tokens %d: expected at least 1", rq->max_tokens);
    if (!(rq->temperature >= 0) || !isfinite(rq->temperature))
        return g4_fail(G4_EUSER, "temperature %g: expected a finite value >= 0",
                       (double)rq->temperature);
    if (!(rq->top_p > 0 && rq->top_p <= 1))
        return g4_fail(G4_EUSER, "top_p %g: expected in (0, 1]", (double)rq->top_p);
    if (rq->top_k < 0) return g4_fail(G4_EUSER, "top_k %d: expected >= 0 (0: off)", rq->top_k);
    if (rq->n_media < 0 || (rq->n_media && !rq->media))
        return g4_fail(G4_EUSER, "n_media %d: expected >= 0 with the media given", rq->n_media);
    if (rq->n_stop < 0 || (rq->n_stop && !rq->stop))
        return g4_fail(G4_EUSER, "n_stop %d: expected >= 0 with the strings given", rq->n_stop);
    for (int i = 0; i < rq->n_stop; i++)
        if (!rq->stop[i]) return g4_fail(G4_EUSER, "stop string %d is NULL", i + 1);
    if (rq->n_eos < 0 || (rq->n_eos && !rq->eos))
        return g4_fail(G4_EUSER, "n_eos %d: expected >= 0 with the ids given", rq->n_eos);
    if (!rq->text && !rq->n_media)
        return g4_fail(G4_EUSER, "the request has no text and no media");
    return G4_OK;
}

static int generate(g4cu_state *s, const g4cu_request *rq, g4cu_result *out) {
    g4cu_model *m = s->m;
    int rc = check_request(rq);
    if (rc) return rc;
    for (int i = 0; i < rq->n_eos; i++)
        if (rq->eos[i] < 0 || rq->eos[i] >= m->pl->pkg->text.vocab)
            return g4_fail(G4_EUSER, "eos id %d: expected 0 <= id < %d", rq->eos[i],
                           m->pl->pkg->text.vocab);
    // media, images first (the template's order), each through its front end
    const int n = rq->n_media;
    g4_media_input *in = g4_calloc((size_t)n + 1, sizeof *in);
    char **names = g4_calloc((size_t)n + 1, sizeof *names);
    int n_images = 0, k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if (is_image(&rq->media[i]) != (pass == 0)) continue;
            n_images += pass == 0;
            names[k] = g4_sprintf("%s %d", pass == 0 ? "image" : "audio", i + 1);
            k++;
        }
    double cut = 0;
    k = 0;
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int i = 0; i < n && !rc; i++) {
            if (is_image(&rq->media[i]) != (pass == 0)) continue;
            rc = load_media(m, &rq->media[i], names[k], &in[k]);
            if (!rc && in[k].truncated) cut += in[k].src_seconds - in[k].used_seconds;
            k++;
        }
    if (!rc) {
        const g4_prompt_loaded pr = {rq->system, 0, in, (const char *const *)names,
                                     n_images, n - n_images, rq->text};
        g4_gen_params p;
        g4_gen_params_default(&p);
        p.max_new = rq->max_tokens;
        p.sampler.temperature = rq->temperature;
        p.sampler.top_k = rq->top_k;
        p.sampler.top_p = rq->top_p;
        p.seed = rq->seed;
        p.stop = rq->stop;
        p.n_stop = rq->n_stop;
        p.ignore_eos = rq->ignore_eos;
        int *eos = g4_malloc(sizeof(int) * (size_t)(rq->n_eos + 1)); // the engine's id type
        for (int i = 0; i < rq->n_eos; i++) eos[i] = rq->eos[i];
        p.eos = eos;
        p.n_eos = rq->n_eos;
        stream_ctx sc = {rq, 0};
        if (rq->on_text) {
            p.on_text = on_text;
            p.on_text_ctx = &sc;
            p.cancel = &sc.cancel;
        }
        g4_gen_result r;
        rc = g4_pipeline_generate_on(m->pl, &s->ts, &pr, &p, model_lock, m, &r);
        if (!rc) {
            out->text = r.text;
            out->text_len = r.text_len;
            r.text = NULL;
            out->n_prompt_tokens = r.n_prompt;
            out->n_tokens = (int)r.tokens.n;
            out->finish_reason = r.stop == G4_STOP_EOS || r.stop == G4_STOP_STRING ? "stop"
                                 : r.stop == G4_STOP_CANCEL                        ? "cancelled"
                                                                                   : "length";
            out->prefill_ms = r.prefill_ms;
            out->decode_ms = r.decode_ms;
            out->audio_seconds_cut = cut;
            out->tokens = g4_malloc(sizeof(int32_t) * (r.tokens.n + 1));
            for (size_t i = 0; i < r.tokens.n; i++) out->tokens[i] = r.tokens.v[i];
            out->stop_token = r.stop == G4_STOP_EOS ? r.stop_id : -1;
            out->stop_string = r.stop_string; // (one of rq->stop: the params borrow them)
            out->stop_reason = g4_stop_reason_name(r.stop);
            g4_gen_result_free(&r);
        }
        free(eos);
    }
    for (int i = 0; i < n; i++) {
        g4_media_input_free(&in[i]);
        free(names[i]);
    }
    free(in);
    free(names);
    return rc;
}

int g4cu_generate(g4cu_state *s, const g4cu_request *rq, g4cu_result *out) {
    if (!out) return g4_fail(G4_EUSER, "g4cu_generate: out is NULL");
    memset(out, 0, sizeof *out);
    if (!s || !rq) return g4_fail(G4_EUSER, "g4cu_generate: state or request is NULL");
    return code(generate(s, rq, out));
}

// opts (or the defaults) with one medium and the text (transcribe: opts->text, when set,
// replaces the default prompt; vqa: the question is the text).
static int one_media(g4cu_state *s, const g4cu_media *md, const char *text, int text_from_opts,
                     const g4cu_request *opts, g4cu_result *out) {
    if (!out) return g4_fail(G4_EUSER, "g4cu: out is NULL");
    memset(out, 0, sizeof *out);
    if (!s) return g4_fail(G4_EUSER, "g4cu: the state is NULL");
    g4cu_request rq;
    if (opts)
        rq = *opts;
    else
        g4cu_request_default(&rq);
    if (rq.n_media)
        return g4_fail(G4_EUSER, "g4cu_transcribe / g4cu_vqa: the options must carry no media");
    if (text_from_opts && opts && opts->text) text = opts->text;
    rq.text = text;
    rq.media = md;
    rq.n_media = 1;
    return code(generate(s, &rq, out));
}

int g4cu_transcribe(g4cu_state *s, const float *pcm, size_t n_samples, int rate,
                    const g4cu_request *opts, g4cu_result *out) {
    const g4cu_media md = {.kind = G4CU_AUDIO_PCM, .pcm = pcm, .n_samples = n_samples,
                           .sample_rate = rate};
    return one_media(s, &md, G4_ASR_PROMPT, 1, opts, out);
}

int g4cu_vqa(g4cu_state *s, const g4cu_media *image, const char *question,
             const g4cu_request *opts, g4cu_result *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!image || !is_image(image))
        return g4_fail(G4_EUSER, "g4cu_vqa: expected an image (G4CU_IMAGE_RGB or _ENCODED)");
    if (!question) return g4_fail(G4_EUSER, "g4cu_vqa: the question is NULL");
    return one_media(s, image, question, 0, opts, out);
}

// --- tokens and logits -------------------------------------------------------------------------
int g4cu_tokenize(const g4cu_model *m, const char *text, int32_t **ids, int *n) {
    *ids = NULL;
    *n = 0;
    if (!text) return g4_fail(G4_EUSER, "g4cu_tokenize: the text is NULL");
    g4_ids v = {0};
    g4cu_model *mm = (g4cu_model *)m; // (the lock only)
    pthread_mutex_lock(&mm->lock);
    int rc = g4_tokenizer_encode(m->pl->tok, text, strlen(text), 0, &v);
    pthread_mutex_unlock(&mm->lock);
    if (rc) return code(rc);
    *ids = g4_malloc(sizeof(int32_t) * (v.n + 1));
    for (size_t i = 0; i < v.n; i++) (*ids)[i] = v.v[i];
    *n = (int)v.n;
    g4_ids_free(&v);
    return G4CU_OK;
}

int g4cu_logits(g4cu_state *s, const int32_t *ids, int n, float *logits) {
    if (!s || !ids || !logits) return g4_fail(G4_EUSER, "g4cu_logits: a NULL argument");
    g4_pipeline *pl = s->m->pl;
    const int V = pl->pkg->text.vocab, ctx = pl->pkg->text.context_length;
    if (n < 1 || n > ctx)
        return g4_fail(G4_EUSER, "g4cu_logits: %d ids: expected 1 to the context's %d", n, ctx);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return g4_fail(G4_EUSER, "g4cu_logits: id %d at %d: expected 0 <= id < %d", ids[i], i, V);
    int rc;
    if (!s->ts) {
        const g4_text_state_opts so = {n, pl->max_tokens, 1, 0};
        if ((rc = g4_text_state_new_opts(pl->model, &so, &s->ts))) return code(rc);
    }
    if ((rc = g4_text_state_reserve(s->ts, n))) return code(rc); // (resets it)
    g4_text_state_reset(s->ts);
    for (int a = 0; a < n && !rc; a += s->ts->max_tokens) {
        const int T = n - a < s->ts->max_tokens ? n - a : s->ts->max_tokens;
        rc = g4_text_forward(s->ts, ids + a, T, NULL, a + T == n ? logits : NULL, 0);
    }
    return code(rc);
}

// --- a tokenizer alone -------------------------------------------------------------------------
// The public handle is the loader's tokenizer itself (no state of its own).
struct g4cu_tokenizer {
    g4_tokenizer *t;
};

int g4cu_tokenizer_load(const char *path, g4cu_tokenizer **out) {
    if (!out) return g4_fail(G4_EUSER, "g4cu_tokenizer_load: out is NULL");
    *out = NULL;
    if (!path) return g4_fail(G4_EUSER, "g4cu_tokenizer_load: the path is NULL");
    g4_tokenizer *t;
    int rc = g4_tokenizer_open(path, &t);
    if (rc) return code(rc);
    *out = g4_malloc(sizeof **out);
    (*out)->t = t;
    return G4CU_OK;
}

void g4cu_tokenizer_free(g4cu_tokenizer *t) {
    if (!t) return;
    g4_tokenizer_close(t->t);
    free(t);
}

int g4cu_tokenizer_n_vocab(const g4cu_tokenizer *t) { return g4_tokenizer_n_vocab(t->t); }

int g4cu_tokenizer_encode(const g4cu_tokenizer *t, const char *text, size_t len, int add_bos,
                          int32_t **ids, int *n) {
    if (!ids || !n) return g4_fail(G4_EUSER, "g4cu_tokenizer_encode: ids or n is NULL");
    *ids = NULL;
    *n = 0;
    if (!t || (!text && len)) return g4_fail(G4_EUSER, "g4cu_tokenizer_encode: a NULL argument");
    g4_ids v = {0};
    int rc = g4_tokenizer_encode(t->t, text ? text : "", len, add_bos, &v);
    if (rc) return code(rc);
    *ids = g4_malloc(sizeof(int32_t) * (v.n + 1));
    for (size_t i = 0; i < v.n; i++) (*ids)[i] = v.v[i];
    *n = (int)v.n;
    g4_ids_free(&v);
    return G4CU_OK;
}

int g4cu_tokenizer_decode(const g4cu_tokenizer *t, const int32_t *ids, int n, int skip_special,
                          char **text, size_t *len) {
    if (!text || !len) return g4_fail(G4_EUSER, "g4cu_tokenizer_decode: text or len is NULL");
    *text = NULL;
    *len = 0;
    if (!t || n < 0 || (!ids && n))
        return g4_fail(G4_EUSER, "g4cu_tokenizer_decode: bad arguments");
    int *v = g4_malloc(sizeof(int) * (size_t)(n + 1)); // the loader's id type
    for (int i = 0; i < n; i++) v[i] = ids[i];
    int rc = g4_tokenizer_decode(t->t, v, (size_t)n, skip_special, text, len);
    free(v);
    return code(rc);
}

const char *g4cu_tokenizer_piece(const g4cu_tokenizer *t, int32_t id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= g4_tokenizer_n_vocab(t->t)) return NULL;
    const char *p = g4_tokenizer_piece(t->t, id, len);
    if (!p) *len = 0;
    return p;
}
