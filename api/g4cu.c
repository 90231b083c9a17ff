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
#include "engine/asr_window.h"
#include "engine/chat_tools.h"
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
_Static_assert(G4CU_DEFAULT_MAX_TOKENS == G4_GEN_DEFAULT_MAX_NEW,
               "the API's default is the engine's");

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
    o.text_only = p->text_only;
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
    g4_vocab_bytes_free(&m->vocab);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

// The queries on a NULL model: NULL / 0 and a message (they return no code).
static int null_model(const g4cu_model *m, const char *fn) {
    if (!m) g4_fail(G4_EUSER, "%s: the model is NULL", fn);
    return !m;
}
const char *g4cu_model_backend(const g4cu_model *m) {
    return null_model(m, "g4cu_model_backend") ? NULL : m->pl->be->name;
}
int g4cu_model_n_vocab(const g4cu_model *m) {
    return null_model(m, "g4cu_model_n_vocab") ? 0 : m->pl->pkg->text.vocab;
}
int g4cu_model_n_ctx(const g4cu_model *m) {
    return null_model(m, "g4cu_model_n_ctx") ? 0 : m->pl->pkg->text.context_length;
}
int g4cu_model_has_vision(const g4cu_model *m) {
    return !null_model(m, "g4cu_model_has_vision") &&
           g4_package_component(m->pl->pkg, G4_COMP_VISION) && m->pl->pkg->has_image_proc;
}
int g4cu_model_has_audio(const g4cu_model *m) {
    return !null_model(m, "g4cu_model_has_audio") &&
           g4_package_component(m->pl->pkg, G4_COMP_AUDIO) && m->pl->pkg->has_audio_fe;
}
size_t g4cu_model_audio_window(const g4cu_model *m) {
    return g4cu_model_has_audio(m) ? G4_AUDIO_MAX_SAMPLES : 0;
}
int g4cu_model_has_tokenizer(const g4cu_model *m) {
    return !null_model(m, "g4cu_model_has_tokenizer") && m->pl->tok != NULL;
}
const char *g4cu_asr_prompt(void) {
    return G4_ASR_PROMPT;
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
    if (!s || atomic_load(&s->busy)) return; // (freeing a state mid-request: left alone)
    g4_text_state_free(s->ts);
    free(s);
}

int g4_state_enter(g4cu_state *s, const char *fn) {
    int idle = 0;
    if (atomic_compare_exchange_strong(&s->busy, &idle, 1)) return G4_OK;
    return g4_fail(G4_EUSER,
                   "%s: the state is in use by another call (a state serves one call at a time: "
                   "one thread each, and no call on it from its own on_text); give each thread "
                   "its own g4cu_state",
                   fn);
}

void g4_state_leave(g4cu_state *s) { atomic_store(&s->busy, 0); }

void g4cu_request_default(g4cu_request *r) {
    memset(r, 0, sizeof *r);
    r->max_tokens = G4_GEN_DEFAULT_MAX_NEW;
    r->top_p = 1.0f;
}

void g4cu_result_free(g4cu_result *r) {
    if (!r) return;
    free(r->text);
    free(r->tokens);
    free(r->cuts);
    free(r->logprobs);
    for (int i = 0; i < r->n_tool_calls; i++) {
        free((void *)r->tool_calls[i].name); // (owned by the result)
        free((void *)r->tool_calls[i].arguments);
    }
    free(r->tool_calls);
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
    if (!pcm || !n_samples) return g4_fail(G4_EUSER, "g4cu_decode_audio: pcm or n_samples is NULL");
    *pcm = NULL;
    *n_samples = 0;
    if (seconds) *seconds = 0;
    if (!m) return g4_fail(G4_EUSER, "g4cu_decode_audio: the model is NULL");
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

int g4cu_audio_load(const g4cu_model *m, const char *path, float **pcm, size_t *n_samples) {
    if (!pcm || !n_samples) return g4_fail(G4_EUSER, "g4cu_audio_load: pcm or n_samples is NULL");
    *pcm = NULL;
    *n_samples = 0;
    if (!m) return g4_fail(G4_EUSER, "g4cu_audio_load: the model is NULL");
    if (!g4cu_model_has_audio(m))
        return g4_fail(G4_EUSER, "audio: the package %s has no audio encoder", m->pl->pkg->dir);
    if (!path) return g4_fail(G4_EUSER, "g4cu_audio_load: the path is NULL");
    g4_audio a;
    int rc = g4_audio_load(path, m->pl->pkg->audio_fe.sampling_rate, 0, &a);
    if (rc) return code(rc);
    *pcm = a.samples;
    *n_samples = (size_t)a.n_samples;
    return G4CU_OK;
}

// One request medium through its front end; name names it in errors ("image 1", "audio 2",
// a file's path).
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
    case G4CU_IMAGE_FILE:
    case G4CU_AUDIO_FILE:
        if (!md->path) return g4_fail(G4_EUSER, "%s: no path given", name);
        return g4_media_load(e, md->kind == G4CU_IMAGE_FILE ? G4_MEDIA_IMAGE : G4_MEDIA_AUDIO,
                             md->path, in);
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
    return md->kind == G4CU_IMAGE_RGB || md->kind == G4CU_IMAGE_ENCODED ||
           md->kind == G4CU_IMAGE_FILE;
}
static int is_file(const g4cu_media *md) {
    return (md->kind == G4CU_IMAGE_FILE || md->kind == G4CU_AUDIO_FILE) && md->path;
}

// --- generation --------------------------------------------------------------------------------
_Static_assert(G4CU_MAX_TOP_LOGPROBS == G4_MAX_TOP_LOGPROBS, "the API's top is the engine's");
static void logprob_out(const g4_token_logprob *a, g4cu_token_logprob *b) {
    memset(b, 0, sizeof *b);
    b->id = a->id;
    b->logprob = a->logprob;
    b->n_top = a->n_top;
    for (int k = 0; k < a->n_top; k++) {
        b->top_id[k] = a->top_id[k];
        b->top_logprob[k] = a->top_logprob[k];
    }
}
static void on_token(void *ctx, const g4_token_logprob *lp) {
    g4_api_stream *c = ctx;
    if (c->on_token) {
        g4cu_token_logprob t;
        logprob_out(lp, &t);
        c->on_token(c->user, &t);
    }
}

static void on_text(void *ctx, const char *text, size_t len) {
    g4_api_stream *c = ctx;
    if (!c->cancel && c->fn(c->user, text, len)) c->cancel = 1;
}

static void model_lock(void *ctx, int on) {
    g4cu_model *m = ctx;
    if (on)
        pthread_mutex_lock(&m->lock);
    else
        pthread_mutex_unlock(&m->lock);
}

int g4_api_check_request(const g4cu_request *rq) {
    if (rq->max_tokens < 1)
        return g4_fail(G4_EUSER, "max_tokens %d: expected at least 1", rq->max_tokens);
    if (!(rq->temperature >= 0) || !isfinite(rq->temperature))
        return g4_fail(G4_EUSER, "temperature %g: expected a finite value >= 0",
                       (double)rq->temperature);
    if (!(rq->top_p > 0 && rq->top_p <= 1))
        return g4_fail(G4_EUSER, "top_p %g: expected in (0, 1]", (double)rq->top_p);
    if (rq->top_k < 0) return g4_fail(G4_EUSER, "top_k %d: expected >= 0 (0: off)", rq->top_k);
    if (rq->n_media < 0 || rq->n_media > G4CU_MAX_MEDIA || (rq->n_media && !rq->media))
        return g4_fail(G4_EUSER, "n_media %d: expected 0 to %d with the media given",
                       rq->n_media, G4CU_MAX_MEDIA);
    if (rq->n_stop < 0 || (rq->n_stop && !rq->stop))
        return g4_fail(G4_EUSER, "n_stop %d: expected >= 0 with the strings given", rq->n_stop);
    for (int i = 0; i < rq->n_stop; i++)
        if (!rq->stop[i]) return g4_fail(G4_EUSER, "stop string %d is NULL", i + 1);
    if (rq->n_ignore_stop < 0 || (rq->n_ignore_stop && !rq->ignore_stop))
        return g4_fail(G4_EUSER, "n_ignore_stop %d: expected >= 0 with the strings given",
                       rq->n_ignore_stop);
    for (int i = 0; i < rq->n_ignore_stop; i++)
        if (!rq->ignore_stop[i]) return g4_fail(G4_EUSER, "ignore_stop string %d is NULL", i + 1);
    if (rq->n_eos < 0 || (rq->n_eos && !rq->eos))
        return g4_fail(G4_EUSER, "n_eos %d: expected >= 0 with the ids given", rq->n_eos);
    if (rq->prefill_chunk < 0)
        return g4_fail(G4_EUSER, "prefill_chunk %d: expected >= 0 (0: the state's)",
                       rq->prefill_chunk);
    if (rq->top_logprobs < 0 || rq->top_logprobs > G4CU_MAX_TOP_LOGPROBS)
        return g4_fail(G4_EUSER, "top_logprobs %d: expected 0..%d", rq->top_logprobs,
                       G4CU_MAX_TOP_LOGPROBS);
    if (rq->n_logit_bias < 0 || (rq->n_logit_bias && (!rq->logit_bias_ids || !rq->logit_bias)))
        return g4_fail(G4_EUSER, "n_logit_bias %d: expected >= 0 with the ids and values given",
                       rq->n_logit_bias);
    if (rq->json < G4CU_JSON_NONE || rq->json > G4CU_JSON_SCHEMA)
        return g4_fail(G4_EUSER, "json %d: expected G4CU_JSON_NONE, _OBJECT or _SCHEMA", rq->json);
    if ((rq->json == G4CU_JSON_SCHEMA) != (rq->json_schema != NULL))
        return g4_fail(G4_EUSER, "json_schema: given exactly when json is G4CU_JSON_SCHEMA");
    return G4_OK;
}

// The token bytes of m's tokenizer, made once.
static int model_vocab(g4cu_model *m, const g4_vocab_bytes **out) {
    if (!m->pl->tok)
        return g4_fail(G4_EUSER, "JSON formats and token bytes need a tokenizer (this model "
                                 "was loaded without one)");
    int rc = G4_OK;
    pthread_mutex_lock(&m->lock);
    if (!m->vocab_made && !(rc = g4_vocab_bytes_build(m->pl->tok, &m->vocab))) m->vocab_made = 1;
    pthread_mutex_unlock(&m->lock);
    *out = &m->vocab;
    return rc;
}

int g4cu_token_bytes(g4cu_model *m, int32_t id, char *buf, size_t cap, size_t *len) {
    if (!m || !len || (!buf && cap)) return g4_fail(G4_EUSER, "g4cu_token_bytes: a NULL argument");
    *len = 0;
    const g4_vocab_bytes *vb = NULL; // (model_vocab sets it on success: gcc 12 -O3 misses that)
    int rc = model_vocab(m, &vb);
    if (rc) return code(rc);
    if (id < 0 || id >= g4cu_model_n_vocab(m))
        return g4_fail(G4_EUSER, "token id %d: expected 0 <= id < %d", id, g4cu_model_n_vocab(m));
    if (id >= vb->n) return G4CU_OK; // past the tokenizer's ids: no bytes
    *len = vb->off[id + 1] - vb->off[id];
    if (buf && cap) memcpy(buf, vb->bytes + vb->off[id], *len < cap ? *len : cap);
    return G4CU_OK;
}

// The request's sampling rules, logprobs and JSON format in p (sc owns what they need).
static int extra_params(g4cu_model *m, const g4cu_request *rq, g4_api_stream *sc, g4_gen_params *p) {
    p->rules.repetition = rq->repetition_penalty;
    p->rules.presence = rq->presence_penalty;
    p->rules.frequency = rq->frequency_penalty;
    p->rules.min_p = rq->min_p;
    if (rq->n_logit_bias) {
        sc->bias = g4_malloc(sizeof(g4_logit_bias) * (size_t)rq->n_logit_bias);
        for (int i = 0; i < rq->n_logit_bias; i++)
            sc->bias[i] = (g4_logit_bias){rq->logit_bias_ids[i], rq->logit_bias[i]};
        p->rules.bias = sc->bias;
        p->rules.n_bias = rq->n_logit_bias;
    }
    p->logprobs = rq->logprobs != 0;
    p->top_logprobs = rq->logprobs ? rq->top_logprobs : 0;
    if (rq->logprobs && rq->on_token) {
        p->on_token = on_token;
        p->on_token_ctx = sc;
    }
    if (rq->json) {
        int rc = model_vocab(m, &p->vocab);
        if (!rc)
            rc = g4_json_schema_compile(rq->json_schema,
                                        rq->json_schema ? strlen(rq->json_schema) : 0,
                                        &sc->schema);
        if (rc) return rc;
        p->json = sc->schema;
    }
    return G4_OK;
}

static void extra_free(g4_api_stream *sc) {
    free(sc->bias);
    g4_json_schema_free(sc->schema);
    sc->bias = NULL;
    sc->schema = NULL;
}

// The engine's generation parameters of rq (eos: the caller's buffer of n_eos + 1 ids; sc: the
// streaming context).
void g4_api_gen_params(const g4cu_request *rq, int *eos, g4_api_stream *sc, g4_gen_params *p) {
    g4_gen_params_default(p);
    p->max_new = rq->max_tokens;
    p->sampler.temperature = rq->temperature;
    p->sampler.top_k = rq->top_k;
    p->sampler.top_p = rq->top_p;
    p->seed = rq->seed;
    p->stop = rq->stop;
    p->n_stop = rq->n_stop;
    p->ignore_stop = rq->ignore_stop;
    p->n_ignore_stop = rq->n_ignore_stop;
    p->prefill_chunk = rq->prefill_chunk;
    p->ignore_eos = rq->ignore_eos;
    for (int i = 0; i < rq->n_eos; i++) eos[i] = rq->eos[i];
    p->eos = eos;
    p->n_eos = rq->n_eos;
    *sc = (g4_api_stream){rq->on_text, rq->user, 0, rq->on_token, NULL, NULL};
    if (rq->on_text) {
        p->on_text = on_text;
        p->on_text_ctx = sc;
        p->cancel = &sc->cancel;
    }
}

// The engine's result r moved into out (r is freed).
void g4_api_take_result(g4_gen_result *r, g4cu_result *out) {
    out->text = r->text;
    out->text_len = r->text_len;
    r->text = NULL;
    out->n_prompt_tokens = r->n_prompt;
    out->n_tokens = (int)r->tokens.n;
    out->finish_reason = r->stop == G4_STOP_EOS || r->stop == G4_STOP_STRING ||
                                 r->stop == G4_STOP_JSON
                             ? "stop"
                         : r->stop == G4_STOP_CANCEL                         ? "cancelled"
                                                                             : "length";
    out->prefill_ms = r->prefill_ms;
    out->decode_ms = r->decode_ms;
    out->tokens = g4_malloc(sizeof(int32_t) * (r->tokens.n + 1));
    for (size_t i = 0; i < r->tokens.n; i++) out->tokens[i] = r->tokens.v[i];
    out->stop_token = r->stop == G4_STOP_EOS ? r->stop_id : -1;
    out->stop_string = r->stop_string; // (one of rq->stop: the params borrow them)
    out->stop_reason = g4_stop_reason_name(r->stop);
    out->max_new = r->max_new;
    out->prefill_tok_s = r->prefill_tok_s;
    out->decode_tok_s = r->decode_tok_s;
    if (r->logprobs) {
        out->logprobs = g4_malloc(sizeof(g4cu_token_logprob) * (r->tokens.n + 1));
        for (size_t i = 0; i < r->tokens.n; i++) logprob_out(&r->logprobs[i], &out->logprobs[i]);
    }
    g4_gen_result_free(r);
}

// The request's eos ids in the vocabulary.
int g4_api_check_eos(const g4cu_model *m, const g4cu_request *rq) {
    for (int i = 0; i < rq->n_eos; i++)
        if (rq->eos[i] < 0 || rq->eos[i] >= m->pl->pkg->text.vocab)
            return g4_fail(G4_EUSER, "eos id %d: expected 0 <= id < %d", rq->eos[i],
                           m->pl->pkg->text.vocab);
    return G4_OK;
}

// A request's conversation as the engine's messages (*out: [n_messages], their media counts
// zero: generate fills them in as it orders the media).
static int conversation(const g4cu_request *rq, g4_chat_message **out) {
    *out = NULL;
    if (rq->n_messages < 0 || !rq->messages)
        return g4_fail(G4_EUSER, "n_messages %d: expected >= 0 with the messages given",
                       rq->n_messages);
    if (rq->text)
        return g4_fail(G4_EUSER, "a request with messages carries its text in them (text must "
                                 "be NULL)");
    long media = 0;
    for (int i = 0; i < rq->n_messages; i++) {
        const g4cu_message *mm = &rq->messages[i];
        if (!mm->role || (strcmp(mm->role, "user") && strcmp(mm->role, "assistant") &&
                          strcmp(mm->role, "tool")))
            return g4_fail(G4_EUSER, "message %d: role '%s': expected user, assistant or tool",
                           i + 1, mm->role ? mm->role : "(null)");
        if (mm->n_media < 0 || mm->n_tool_calls < 0 || (mm->n_tool_calls && !mm->tool_calls))
            return g4_fail(G4_EUSER, "message %d: n_media %d, n_tool_calls %d: expected >= 0 "
                                     "(with the calls given)",
                           i + 1, mm->n_media, mm->n_tool_calls);
        media += mm->n_media;
    }
    if (media != rq->n_media)
        return g4_fail(G4_EUSER, "the messages have %ld media items, the request %d", media,
                       rq->n_media);
    g4_chat_message *m = g4_calloc((size_t)rq->n_messages, sizeof *m);
    for (int i = 0; i < rq->n_messages; i++) {
        const g4cu_message *mm = &rq->messages[i];
        m[i].role = mm->role[0] == 'u' ? G4_CHAT_USER
                    : mm->role[0] == 'a' ? G4_CHAT_MODEL
                                         : G4_CHAT_TOOL;
        m[i].text = mm->text;
        m[i].tool_call_id = mm->tool_call_id;
        m[i].name = mm->name;
        m[i].n_tool_calls = mm->n_tool_calls;
        g4_chat_tool_call *tc = g4_calloc((size_t)mm->n_tool_calls + 1, sizeof *tc);
        for (int k = 0; k < mm->n_tool_calls; k++)
            tc[k] = (g4_chat_tool_call){mm->tool_calls[k].id, mm->tool_calls[k].name,
                                        mm->tool_calls[k].arguments};
        m[i].tool_calls = tc;
    }
    *out = m;
    return G4_OK;
}

static void free_conversation(g4_chat_message *m, int n) {
    if (!m) return;
    for (int i = 0; i < n; i++) free((void *)m[i].tool_calls);
    free(m);
}

// --- tools (engine/chat_tools.h) -------------------------------------------------------------
static int tok_id(const g4_tokenizer *t, const char *name) {
    return g4_tokenizer_id(t, name, strlen(name));
}

// The request's tool declarations (*decl, a new string), and the id of <|tool_response> (the
// end of a call turn) in *eos_extra.
static int tools_prepare(const g4cu_model *m, const g4cu_request *rq, char **decl,
                         int *eos_extra) {
    *decl = NULL;
    *eos_extra = -1;
    if (!rq->tools_json) return G4_OK;
    if (rq->on_text)
        return g4_fail(G4_EUSER, "tools: not with on_text (a call's text is not streamed)");
    static const char *const need[] = {"<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
                                       "<|\"|>", "<|tool_response>"};
    for (int i = 0; i < 6; i++)
        if (tok_id(m->pl->tok, need[i]) < 0)
            return g4_fail(G4_EUSER, "tools: the tokenizer has no '%s' token (Gemma-4's tool "
                                     "format needs it)",
                           need[i]);
    *eos_extra = tok_id(m->pl->tok, "<|tool_response>");
    return g4_chat_tools_render(rq->tools_json, strlen(rq->tools_json), decl);
}

// The calls in the result's tokens into out->tool_calls; when any, the text becomes the tokens
// outside them and the finish reason "tool_calls".
static int tools_extract(const g4cu_model *m, g4cu_result *out) {
    g4_tool_call *calls;
    int n;
    char *text;
    size_t len;
    int rc = g4_tool_calls_extract(m->pl->tok, out->tokens, out->n_tokens, &calls, &n, &text,
                                   &len);
    if (rc || !n) return rc;
    out->tool_calls = g4_calloc((size_t)n, sizeof(g4cu_tool_call));
    for (int i = 0; i < n; i++) out->tool_calls[i] = (g4cu_tool_call){NULL, calls[i].name, calls[i].arguments};
    out->n_tool_calls = n;
    free(calls); // (the strings moved)
    free(out->text);
    out->text = text;
    out->text_len = len;
    out->finish_reason = "tool_calls";
    return G4_OK;
}

void g4_api_media_free(g4_api_media *rm) {
    for (int i = 0; i < rm->n; i++) {
        g4_media_input_free(&rm->in[i]);
        free(rm->names[i]);
    }
    free(rm->in);
    free(rm->names);
    free(rm->cuts);
    free_conversation(rm->msgs, rm->n_msgs);
    memset(rm, 0, sizeof *rm);
}

// The checks of a chat request and its media loaded into rm (freed on error).
int g4_api_media_load(g4cu_model *m, const g4cu_request *rq, const char *who, g4_api_media *rm) {
    memset(rm, 0, sizeof *rm);
    if (!m->pl->media)
        return g4_fail(G4_EUSER, "%s: the model was loaded text_only (no chat "
                                 "template, no towers): g4cu_generate_ids or g4cu_logits", who);
    int rc = g4_api_check_request(rq);
    if (!rc && !rq->text && !rq->n_media && !rq->n_messages)
        rc = g4_fail(G4_EUSER, "the request has no text and no media");
    if (!rc && rq->n_messages && !(rc = conversation(rq, &rm->msgs))) rm->n_msgs = rq->n_messages;
    if (rc || (rc = g4_api_check_eos(m, rq))) {
        g4_api_media_free(rm);
        return rc;
    }
    // media, images first (the template's order; in a conversation, each message's images
    // first), each through its front end; a file is named by its path, as the engine's
    // path-taking calls name it
    const int n = rq->n_media;
    rm->n = n;
    rm->in = g4_calloc((size_t)n + 1, sizeof *rm->in);
    rm->names = g4_calloc((size_t)n + 1, sizeof *rm->names);
    const g4cu_media **order = g4_calloc((size_t)n + 1, sizeof *order);
    int k = 0;
    for (int msg = 0, from = 0; msg < (rq->n_messages ? rq->n_messages : 1); msg++) {
        const int to = rq->n_messages ? from + rq->messages[msg].n_media : n;
        for (int pass = 0; pass < 2; pass++)
            for (int i = from; i < to; i++) {
                const g4cu_media *md = &rq->media[i];
                if (is_image(md) != (pass == 0)) continue;
                rm->n_images += pass == 0;
                if (rm->msgs) ++*(pass == 0 ? &rm->msgs[msg].n_images : &rm->msgs[msg].n_audio);
                rm->names[k] = is_file(md) ? g4_strdup(md->path)
                                           : g4_sprintf("%s %d", pass == 0 ? "image" : "audio",
                                                        i + 1);
                order[k++] = md;
            }
        from = to;
    }
    rm->cuts = g4_calloc((size_t)n + 1, sizeof *rm->cuts);
    for (k = 0; k < n && !rc; k++) {
        rc = load_media(m, order[k], rm->names[k], &rm->in[k]);
        if (!rc && rm->in[k].truncated) {
            rm->cut += rm->in[k].src_seconds - rm->in[k].used_seconds;
            rm->cuts[rm->n_cuts++] =
                (g4cu_audio_cut){is_file(order[k]) ? order[k]->path : NULL,
                                 rm->in[k].src_seconds, rm->in[k].used_seconds};
        }
    }
    free(order);
    if (rc) g4_api_media_free(rm);
    return rc;
}

static int generate_held(g4cu_state *s, const g4cu_request *rq, g4cu_result *out) {
    g4cu_model *m = s->m;
    g4_api_media rm;
    int rc = g4_api_media_load(m, rq, "g4cu_generate", &rm);
    if (rc) return rc;
    char *decl = NULL;
    int eos_tool = -1;
    if (!(rc = tools_prepare(m, rq, &decl, &eos_tool))) {
        const g4_prompt_loaded pr = {rq->system,   rq->system_as_parts, rm.in,
                                     (const char *const *)rm.names,    rm.n_images,
                                     rm.n - rm.n_images, rq->text,      rm.msgs,
                                     rm.n_msgs,    decl};
        int *eos = g4_malloc(sizeof(int) * (size_t)(rq->n_eos + 2)); // the engine's id type
        g4_api_stream sc;
        g4_gen_params p;
        g4_api_gen_params(rq, eos, &sc, &p);
        if (eos_tool >= 0) eos[p.n_eos++] = eos_tool; // a call turn ends at <|tool_response>
        g4_gen_result r = {0};
        if (!(rc = extra_params(m, rq, &sc, &p)))
            rc = g4_pipeline_generate_on(m->pl, &s->ts, &pr, &p, model_lock, m, &r);
        if (!rc)
            g4_api_take_result(&r, out);
        else
            g4_gen_result_free(&r);
        extra_free(&sc);
        if (!rc && decl) rc = tools_extract(m, out);
        out->audio_seconds_cut = rm.cut;
        out->cuts = rm.cuts, out->n_cuts = rm.n_cuts;
        rm.cuts = NULL;
        free(eos);
    }
    free(decl);
    g4_api_media_free(&rm);
    if (rc) g4cu_result_free(out);
    return rc;
}

// generate_held with s taken for the call (refused when it is in use).
static int generate(g4cu_state *s, const g4cu_request *rq, g4cu_result *out) {
    int rc = g4_state_enter(s, "g4cu_generate");
    if (rc) return rc;
    rc = generate_held(s, rq, out);
    g4_state_leave(s);
    return rc;
}

int g4cu_generate(g4cu_state *s, const g4cu_request *rq, g4cu_result *out) {
    if (!out) return g4_fail(G4_EUSER, "g4cu_generate: out is NULL");
    memset(out, 0, sizeof *out);
    if (!s || !rq) return g4_fail(G4_EUSER, "g4cu_generate: state or request is NULL");
    return code(generate(s, rq, out));
}

int g4_api_ids_request(const g4cu_model *m, const g4cu_request *opts, const char *who,
                       g4cu_request *rq) {
    if (opts)
        *rq = *opts;
    else
        g4cu_request_default(rq);
    if (rq->text || rq->system || rq->n_media || rq->n_messages || rq->tools_json)
        return g4_fail(G4_EUSER, "%s: the ids are the whole prompt: the options must carry no "
                                 "text, system, messages, media or tools",
                       who);
    int rc = g4_api_check_request(rq);
    return rc ? rc : g4_api_check_eos(m, rq);
}

static int generate_ids_held(g4cu_state *s, const int32_t *ids, int n, const g4cu_request *opts,
                             g4cu_result *out) {
    g4cu_request rq;
    g4_pipeline *pl = s->m->pl;
    int rc = g4_api_ids_request(s->m, opts, "g4cu_generate_ids", &rq);
    if (rc) return code(rc);
    // a state sized for the request (an empty or too long prompt, an id outside the
    // vocabulary: g4_generate says so)
    if (!s->ts) {
        long cap = (long)(n > 0 ? n : 1) + rq.max_tokens;
        if (cap > pl->pkg->text.context_length) cap = pl->pkg->text.context_length;
        const g4_text_state_opts so = {(int)cap, pl->max_tokens, 1, 0};
        if ((rc = g4_text_state_new_opts(pl->model, &so, &s->ts))) return code(rc);
    }
    int *eos = g4_malloc(sizeof(int) * (size_t)(rq.n_eos + 1));
    g4_api_stream sc;
    g4_gen_params p;
    g4_api_gen_params(&rq, eos, &sc, &p);
    g4_gen_result r = {0};
    if (!(rc = extra_params(s->m, &rq, &sc, &p)))
        rc = g4_generate(s->ts, pl->tok, ids, n, NULL, &p, &r);
    if (!rc)
        g4_api_take_result(&r, out);
    else
        g4_gen_result_free(&r);
    extra_free(&sc);
    free(eos);
    return code(rc);
}

int g4cu_generate_ids(g4cu_state *s, const int32_t *ids, int n, const g4cu_request *opts,
                      g4cu_result *out) {
    if (!out) return g4_fail(G4_EUSER, "g4cu_generate_ids: out is NULL");
    memset(out, 0, sizeof *out);
    if (!s || (!ids && n)) return g4_fail(G4_EUSER, "g4cu_generate_ids: a NULL argument");
    if (n < 0) return g4_fail(G4_EUSER, "g4cu_generate_ids: n %d: expected >= 0", n);
    int rc = g4_state_enter(s, "g4cu_generate_ids");
    if (rc) return code(rc);
    rc = generate_ids_held(s, ids, n, opts, out);
    g4_state_leave(s);
    return rc;
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
    if (rq.n_media || rq.n_messages)
        return g4_fail(G4_EUSER, "g4cu_transcribe / g4cu_vqa: the options must carry no media "
                                 "and no messages");
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

// --- long-form speech recognition ----------------------------------------------------------
void g4cu_transcribe_long_params_default(g4cu_transcribe_long_params *p) {
    memset(p, 0, sizeof *p);
}

void g4cu_transcript_free(g4cu_transcript *t) {
    if (!t) return;
    for (int k = 0; k < t->n_segments; k++) {
        free(t->segments[k].text);
        free(t->segments[k].tokens);
    }
    free(t->segments);
    free(t->text);
    memset(t, 0, sizeof *t);
}

// (The tokenizer's ids are int: the same type here.)
_Static_assert(sizeof(int) == sizeof(int32_t), "int is int32_t");

// The windows (engine/asr_window.h's rule), each transcribed alone and stitched into out.
static int transcribe_long(g4cu_state *s, const float *pcm, size_t n_samples,
                           const g4cu_transcribe_long_params *p, g4cu_transcript *out) {
    g4_pipeline *pl = s->m->pl;
    const size_t tower = g4cu_model_audio_window(s->m);
    if (!tower)
        return g4_fail(G4_EUSER, "audio: the package %s has no audio encoder", pl->pkg->dir);
    if (!pcm || !n_samples) return g4_fail(G4_EUSER, "no audio samples given");
    const size_t window = p->window ? p->window : tower;
    const size_t overlap = p->window ? p->overlap : window / 6;
    if (window > tower || overlap >= window)
        return g4_fail(G4_EUSER,
                       "window %zu, overlap %zu samples: expected 0 < window <= %zu "
                       "(the audio window) and overlap < window",
                       window, overlap, tower);
    g4cu_request rq;
    if (p->opts)
        rq = *p->opts;
    else
        g4cu_request_default(&rq);
    rq.on_text = NULL; // the segments are final only once stitched
    const int rate = pl->pkg->audio_fe.sampling_rate;
    g4_asr_window *w;
    const int n = g4_asr_windows((int64_t)n_samples, (int64_t)window, (int64_t)overlap, &w);
    out->segments = g4_calloc((size_t)n, sizeof *out->segments);
    out->n_segments = n;
    out->sample_rate = rate;
    out->n_samples = n_samples;
    out->window = window;
    out->overlap = overlap;
    g4cu_result prev = {0};
    int rc = G4_OK;
    for (int k = 0; k < n && !rc; k++) {
        g4cu_segment *sg = &out->segments[k];
        sg->start = (size_t)w[k].seg_start, sg->end = (size_t)w[k].seg_end;
        sg->window_start = (size_t)w[k].start, sg->window_end = (size_t)w[k].end;
        g4cu_result r;
        rc = g4cu_transcribe(s, pcm + w[k].start, (size_t)(w[k].end - w[k].start), rate, &rq, &r);
        if (rc) break;
        int nt = r.n_tokens;
        if (r.stop_token >= 0 && nt) nt--; // the EOS that ended the window
        sg->window_tokens = nt;
        sg->dropped_tokens = k ? g4_asr_overlap(prev.tokens, prev.n_tokens, r.tokens, nt) : 0;
        sg->n_tokens = nt - sg->dropped_tokens;
        sg->tokens = g4_malloc(sizeof(int32_t) * (size_t)(sg->n_tokens + 1));
        memcpy(sg->tokens, r.tokens + sg->dropped_tokens, sizeof(int32_t) * (size_t)sg->n_tokens);
        sg->prefill_ms = r.prefill_ms, sg->decode_ms = r.decode_ms;
        size_t len;
        rc = g4_tokenizer_decode(pl->tok, sg->tokens, (size_t)sg->n_tokens, 1, &sg->text, &len);
        g4cu_result_free(&prev);
        prev = r;
        prev.n_tokens = nt;
        // segment k is final now (the next window only drops from its own start)
        if (!rc && p->on_segment && p->on_segment(p->user, sg, k, n))
            rc = g4_fail(G4_EUSER, "stopped by on_segment after window %d of %d", k + 1, n);
    }
    g4cu_result_free(&prev);
    free(w);
    // the whole text: every window's kept tokens, decoded together
    int total = 0;
    for (int k = 0; k < n && !rc; k++) total += out->segments[k].n_tokens;
    int32_t *all = g4_malloc(sizeof(int32_t) * (size_t)(total + 1));
    for (int k = 0, at = 0; k < n && !rc; at += out->segments[k].n_tokens, k++)
        memcpy(all + at, out->segments[k].tokens,
               sizeof(int32_t) * (size_t)out->segments[k].n_tokens);
    if (!rc) rc = g4_tokenizer_decode(pl->tok, all, (size_t)total, 1, &out->text, &out->text_len);
    free(all);
    return rc;
}

int g4cu_transcribe_long(g4cu_state *s, const float *pcm, size_t n_samples,
                         const g4cu_transcribe_long_params *p, g4cu_transcript *out) {
    if (!out) return g4_fail(G4_EUSER, "g4cu_transcribe_long: out is NULL");
    memset(out, 0, sizeof *out);
    if (!s) return g4_fail(G4_EUSER, "g4cu_transcribe_long: the state is NULL");
    g4cu_transcribe_long_params defaults;
    g4cu_transcribe_long_params_default(&defaults);
    int rc = transcribe_long(s, pcm, n_samples, p ? p : &defaults, out);
    if (rc) {
        if (p && p->name) g4_error_prefix("%s", p->name);
        g4cu_transcript_free(out);
    }
    return code(rc);
}

// --- tokens and logits -------------------------------------------------------------------------
int g4cu_tokenize(const g4cu_model *m, const char *text, int32_t **ids, int *n) {
    if (!ids || !n) return g4_fail(G4_EUSER, "g4cu_tokenize: ids or n is NULL");
    *ids = NULL;
    *n = 0;
    if (!m) return g4_fail(G4_EUSER, "g4cu_tokenize: the model is NULL");
    if (!text) return g4_fail(G4_EUSER, "g4cu_tokenize: the text is NULL");
    if (!m->pl->tok) return g4_fail(G4_EUSER, "g4cu_tokenize: the model has no tokenizer");
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

static int logits_held(g4cu_state *s, const int32_t *ids, int n, float *logits) {
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

int g4cu_logits(g4cu_state *s, const int32_t *ids, int n, float *logits) {
    if (!s || !ids || !logits) return g4_fail(G4_EUSER, "g4cu_logits: a NULL argument");
    int rc = g4_state_enter(s, "g4cu_logits");
    if (rc) return code(rc);
    rc = logits_held(s, ids, n, logits);
    g4_state_leave(s);
    return rc;
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

int g4cu_tokenizer_n_vocab(const g4cu_tokenizer *t) {
    if (!t) {
        g4_fail(G4_EUSER, "g4cu_tokenizer_n_vocab: the tokenizer is NULL");
        return 0;
    }
    return g4_tokenizer_n_vocab(t->t);
}

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
    if (!len || !t) {
        g4_fail(G4_EUSER, "g4cu_tokenizer_piece: the tokenizer or len is NULL");
        if (len) *len = 0;
        return NULL;
    }
    *len = 0;
    if (id < 0 || id >= g4_tokenizer_n_vocab(t->t)) return NULL;
    const char *p = g4_tokenizer_piece(t->t, id, len);
    if (!p) *len = 0;
    return p;
}
