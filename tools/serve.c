// serve.c: `g4cu serve PKG`: an OpenAI-compatible HTTP server on libmicrohttpd, written against
// the public C API (include/g4cu.h) only.
//
//   POST /v1/chat/completions      messages (one optional system turn + one user turn; content a
//                                  string or parts: text, image_url with a data: URL, input_audio
//                                  base64 wav/flac), max_tokens | max_completion_tokens,
//                                  temperature (absent: greedy), top_p, top_k, seed, stop,
//                                  stream (server-sent events ending in `data: [DONE]`)
//   POST /v1/audio/transcriptions  multipart/form-data: file (required), prompt, response_format
//                                  (json | text), temperature; model is accepted and ignored
//   GET  /v1/models, /health, /metrics (Prometheus text)
//
// One model; --parallel N states, each with a worker thread; requests wait in a bounded queue
// (--queue; 429 when full). Every bad request gets a 4xx JSON error
// {"error": {"message", "type"}} and the server goes on. Limits: --max-body bytes, --max-tokens
// per request, --max-media items per request, --max-audio-seconds per clip (the model hears the
// first 30 s); connections idle past --timeout are closed (a body cut off mid-way). SIGTERM / SIGINT: no new connections, the requests in flight finish,
// exit 0. Binds 127.0.0.1 unless --host says otherwise; --port 0 takes a free port; the port is
// printed on stdout ("g4cu serve: listening on http://HOST:PORT").
#include "tools/serve.h"
#include "tools/serve_sampling.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef G4_HAVE_MHD

int g4_serve_main(int argc, char **argv) {
    fprintf(stderr, "g4cu serve: this g4cu was built without libmicrohttpd (apt-get install "
                    "libmicrohttpd-dev, then rebuild)\n");
    return 1;
}

#else

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <g4cu.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define MAX_STOP 4

// --- options and the server ------------------------------------------------------------------
typedef struct {
    const char *pkg, *host, *backend, *tokenizer, *name;
    int port, parallel, queue, max_tokens, max_media, timeout_s, n_ctx, max_conn, max_audio_s;
    size_t max_body;
} serve_opts;

typedef struct job job;

enum { EP_CHAT, EP_TRANSCRIBE, EP_MODELS, EP_HEALTH, EP_METRICS, EP_OTHER, N_EP };
static const char *const ep_name[N_EP] = {"chat_completions", "audio_transcriptions", "models",
                                          "health", "metrics", "other"};
static const int codes[] = {200, 400, 404, 405, 408, 413, 415, 429, 500, 503};
#define N_CODES (int)(sizeof codes / sizeof codes[0])
static const double buckets[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
#define N_BUCKETS (int)(sizeof buckets / sizeof buckets[0])

typedef struct {
    serve_opts o;
    g4cu_model *model;
    pthread_t *workers;
    g4cu_state **states;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail; // waiting jobs
    int n_waiting, n_running, stop_workers;
    int draining;
    int in_flight; // requests between their first call and their completion
    // metrics (under mu)
    unsigned long long requests[N_EP][N_CODES];
    unsigned long long prompt_tokens, completion_tokens, rejected;
    unsigned long long hist[N_BUCKETS + 1];
    double hist_sum;
    unsigned long long hist_count;
    unsigned long long next_id;
} server;

static server S;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// --- jobs ------------------------------------------------------------------------------------
enum { JOB_CHAT, JOB_TRANSCRIBE };

struct job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs; // the connection and the queue / worker
    int kind;
    g4cu_request rq;
    char *system, *text;
    g4cu_media media[16];
    void *owned[16]; // the media's buffers
    int n_media;
    char *stops[MAX_STOP];
    float *pcm; // transcription
    size_t n_pcm;
    int stream;
    // progress (under mu)
    char *out;
    size_t out_len, out_cap;
    int done, rc;
    char *err;
    g4cu_result res;
    ss_fields ss;              // the sampling fields' buffers (tools/serve_sampling.h)
    g4cu_result *more;         // choices 2..n (n > 1)
    g4cu_token_logprob *lps;   // streamed logprobs so far (under mu)
    size_t n_lps, cap_lps;
    volatile int cancel;
    double t_submit;
    job *next;
};

static job *job_new(int kind) {
    job *j = calloc(1, sizeof *j);
    if (!j) abort();
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->kind = kind;
    g4cu_request_default(&j->rq);
    return j;
}

static void job_unref(job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    free(j->system);
    free(j->text);
    for (int i = 0; i < j->n_media; i++) free(j->owned[i]);
    for (int i = 0; i < MAX_STOP; i++) free(j->stops[i]);
    free(j->pcm);
    free(j->out);
    free(j->err);
    g4cu_result_free(&j->res);
    for (int i = 0; j->more && i < j->ss.n - 1; i++) g4cu_result_free(&j->more[i]);
    free(j->more);
    free(j->lps);
    ss_free(&j->ss);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static int on_piece(void *user, const char *text, size_t len) {
    job *j = user;
    pthread_mutex_lock(&j->mu);
    if (j->out_len + len + 1 > j->out_cap) {
        j->out_cap = (j->out_len + len + 1) * 2;
        j->out = realloc(j->out, j->out_cap);
        if (!j->out) abort();
    }
    memcpy(j->out + j->out_len, text, len);
    j->out_len += len;
    j->out[j->out_len] = 0;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return j->cancel;
}

// A streamed request's token logprobs, kept for its next chunk.
static void on_logprob(void *user, const g4cu_token_logprob *lp) {
    job *j = user;
    pthread_mutex_lock(&j->mu);
    if (j->n_lps == j->cap_lps) {
        j->cap_lps = j->cap_lps ? 2 * j->cap_lps : 64;
        j->lps = realloc(j->lps, sizeof *j->lps * j->cap_lps);
        if (!j->lps) abort();
    }
    j->lps[j->n_lps++] = *lp;
    pthread_mutex_unlock(&j->mu);
}

// Choices 2..n of a chat request (n > 1): the same request with seeds seed + 1, ... (greedy
// gives n equal choices).
static int run_more(g4cu_state *st, job *j) {
    int rc = G4CU_OK;
    j->more = calloc((size_t)j->ss.n, sizeof *j->more);
    if (!j->more) abort();
    g4cu_request rq = j->rq;
    rq.on_text = NULL;
    for (int i = 1; i < j->ss.n && !rc && !j->cancel; i++) {
        rq.seed = j->rq.seed + (uint64_t)i;
        rc = g4cu_generate(st, &rq, &j->more[i - 1]);
    }
    return rc;
}

static void run_job(g4cu_state *st, job *j) {
    j->rq.on_text = j->rq.tools_json ? NULL : on_piece; // (a call's text is not streamed)
    j->rq.user = j;
    if (j->stream && j->rq.logprobs) j->rq.on_token = on_logprob;
    g4cu_result r;
    int rc = j->kind == JOB_CHAT ? g4cu_generate(st, &j->rq, &r)
                                 : g4cu_transcribe(st, j->pcm, j->n_pcm,
                                                   g4cu_model_audio_rate(S.model), &j->rq, &r);
    if (!rc && j->kind == JOB_CHAT && j->ss.n > 1 && (rc = run_more(st, j)))
        g4cu_result_free(&r);
    pthread_mutex_lock(&j->mu);
    j->rc = rc;
    if (rc) j->err = strdup(g4cu_last_error());
    j->res = r;
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&S.mu);
    if (!rc) {
        S.prompt_tokens += (unsigned long long)r.n_prompt_tokens;
        S.completion_tokens += (unsigned long long)r.n_tokens;
    }
    const double dt = now_s() - j->t_submit;
    int b = 0;
    while (b < N_BUCKETS && dt > buckets[b]) b++;
    S.hist[b]++;
    S.hist_sum += dt;
    S.hist_count++;
    pthread_mutex_unlock(&S.mu);
}

static void *worker_main(void *arg) {
    g4cu_state *st = arg;
    pthread_mutex_lock(&S.mu);
    for (;;) {
        while (!S.head && !S.stop_workers) pthread_cond_wait(&S.cv, &S.mu);
        if (!S.head) break; // stopping, and nothing left
        job *j = S.head;
        S.head = j->next;
        if (!S.head) S.tail = NULL;
        S.n_waiting--;
        S.n_running++;
        pthread_mutex_unlock(&S.mu);
        if (!j->cancel) {
            run_job(st, j);
        } else {
            pthread_mutex_lock(&j->mu);
            j->done = 1, j->rc = -1, j->err = strdup("cancelled before it ran");
            pthread_cond_broadcast(&j->cv);
            pthread_mutex_unlock(&j->mu);
        }
        job_unref(j);
        pthread_mutex_lock(&S.mu);
        S.n_running--;
        pthread_cond_broadcast(&S.cv);
    }
    pthread_mutex_unlock(&S.mu);
    return NULL;
}

// Queues j (taking a reference for the worker); 0 when the queue is full.
static int submit(job *j) {
    pthread_mutex_lock(&S.mu);
    if (S.n_waiting >= S.o.queue) {
        S.rejected++;
        pthread_mutex_unlock(&S.mu);
        return 0;
    }
    j->refs++; // (no other thread has j yet)
    j->t_submit = now_s();
    j->next = NULL;
    if (S.tail)
        S.tail->next = j;
    else
        S.head = j;
    S.tail = j;
    S.n_waiting++;
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
    return 1;
}

// --- responses -------------------------------------------------------------------------------
typedef struct {
    int ep;
    int is_post;
    char *body;
    size_t len, cap;
    int too_big;
    struct MHD_PostProcessor *pp;
    int form_error;
    // multipart fields
    char *file;
    size_t file_len;
    char *prompt, *format, *temperature;
    job *j; // a streaming request's job (released by the response's free callback)
} conn_ctx;

static void count(int ep, int status) {
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < N_CODES; i++)
        if (codes[i] == status) S.requests[ep][i]++;
    pthread_mutex_unlock(&S.mu);
}

static enum MHD_Result send_buf(struct MHD_Connection *c, conn_ctx *x, int status,
                                const char *type, char *buf, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    count(x ? x->ep : EP_OTHER, status);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, conn_ctx *x, int status, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) abort();
    return send_buf(c, x, status, "application/json", s, strlen(s));
}

static enum MHD_Result send_error(struct MHD_Connection *c, conn_ctx *x, int status,
                                  const char *fmt, ...) G4_SERVE_PRINTF(4, 5);
static enum MHD_Result send_error(struct MHD_Connection *c, conn_ctx *x, int status,
                                  const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = status == 429   ? "rate_limit_error"
                       : status == 404 ? "not_found_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    return send_json(c, x, status, root);
}

// --- request parsing ---------------------------------------------------------------------------
static int b64_val(int ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+' || ch == '-') return 62;
    if (ch == '/' || ch == '_') return 63;
    return -1;
}

// Strict base64 (standard or URL alphabet, '=' padding optional, no whitespace) -> *out.
static int b64_decode(const char *s, size_t n, unsigned char **out, size_t *out_n) {
    while (n && s[n - 1] == '=') n--;
    if (n % 4 == 1) return 0;
    unsigned char *o = malloc(n / 4 * 3 + 3);
    if (!o) abort();
    size_t k = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_val((unsigned char)s[i]);
        if (v < 0) {
            free(o);
            return 0;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (unsigned char)(acc >> bits);
        }
    }
    *out = o;
    *out_n = k;
    return 1;
}

// Parse errors: a message for the 400.
typedef struct {
    char msg[512];
} perr;

static int fail(perr *e, const char *fmt, ...) G4_SERVE_PRINTF(2, 3);
static int fail(perr *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return 0;
}

static char *cat(char *a, const char *b) {
    size_t na = a ? strlen(a) : 0, nb = strlen(b);
    char *r = realloc(a, na + nb + 2);
    if (!r) abort();
    if (na) r[na++] = '\n';
    memcpy(r + na, b, nb + 1);
    return r;
}

// A sound file's bytes -> the model's PCM (*pcm), refused past --max-audio-seconds; `what`
// names it in the message.
static int decode_audio(const char *what, const void *data, size_t n, float **pcm, size_t *n_pcm,
                        perr *e) {
    double sec;
    if (g4cu_decode_audio(S.model, data, n, pcm, n_pcm, &sec))
        return fail(e, "%s: %s", what, g4cu_last_error());
    if (sec > S.o.max_audio_s) {
        free(*pcm);
        *pcm = NULL;
        return fail(e, "%s: %.1f s of audio is over the limit of %d s", what, sec, S.o.max_audio_s);
    }
    return 1;
}

static int add_media(job *j, g4cu_media_kind kind, unsigned char *data, size_t n, perr *e) {
    if (j->n_media >= S.o.max_media || j->n_media >= 16) {
        free(data);
        return fail(e, "more than %d images and audio clips in the request", S.o.max_media);
    }
    j->owned[j->n_media] = data;
    j->media[j->n_media++] = (g4cu_media){.kind = kind, .data = data, .size = n};
    return 1;
}

// A message's content: a string, or an array of parts; media only for the user turn.
static int content(job *j, const cJSON *c, int user, char **text, perr *e) {
    if (cJSON_IsString(c)) {
        *text = cat(*text, c->valuestring);
        return 1;
    }
    if (!cJSON_IsArray(c)) return fail(e, "messages[].content: expected a string or an array of parts");
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        if (!cJSON_IsString(type)) return fail(e, "a content part has no \"type\" string");
        const char *t = type->valuestring;
        if (!strcmp(t, "text")) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "text");
            if (!cJSON_IsString(s)) return fail(e, "a text part has no \"text\" string");
            *text = cat(*text, s->valuestring);
        } else if (!strcmp(t, "image_url") && user) {
            const cJSON *u = cJSON_GetObjectItemCaseSensitive(p, "image_url");
            if (cJSON_IsObject(u)) u = cJSON_GetObjectItemCaseSensitive(u, "url");
            if (!cJSON_IsString(u)) return fail(e, "an image_url part has no url string");
            const char *url = u->valuestring, *comma = strchr(url, ',');
            if (strncmp(url, "data:image/", 11) || !comma || comma - url < 18 ||
                strncmp(comma - 7, ";base64", 7))
                return fail(e, "image_url: expected a data:image/...;base64, URL (remote URLs "
                               "are not fetched)");
            unsigned char *bytes;
            size_t n;
            if (!b64_decode(comma + 1, strlen(comma + 1), &bytes, &n) || !n)
                return fail(e, "image_url: the data: URL is not valid base64");
            if (!add_media(j, G4CU_IMAGE_ENCODED, bytes, n, e)) return 0;
        } else if (!strcmp(t, "input_audio") && user) {
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(p, "input_audio");
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(a, "data");
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(a, "format");
            if (!cJSON_IsString(d)) return fail(e, "an input_audio part has no data string");
            if (f && (!cJSON_IsString(f) ||
                      (strcmp(f->valuestring, "wav") && strcmp(f->valuestring, "flac"))))
                return fail(e, "input_audio.format: expected \"wav\" or \"flac\"");
            unsigned char *bytes;
            size_t n;
            if (!b64_decode(d->valuestring, strlen(d->valuestring), &bytes, &n) || !n)
                return fail(e, "input_audio.data is not valid base64");
            float *pcm;
            size_t n_pcm;
            const int ok = decode_audio("input_audio", bytes, n, &pcm, &n_pcm, e);
            free(bytes);
            if (!ok || !add_media(j, G4CU_AUDIO_PCM, (unsigned char *)pcm, 0, e)) return 0;
            j->media[j->n_media - 1].pcm = pcm;
            j->media[j->n_media - 1].n_samples = n_pcm;
            j->media[j->n_media - 1].sample_rate = g4cu_model_audio_rate(S.model);
        } else {
            return fail(e, "content part type \"%s\" is not taken here (text; image_url and "
                           "input_audio in the user turn)",
                        t);
        }
    }
    return 1;
}

static int num_field(const cJSON *root, const char *key, double lo, double hi, int integer,
                     int *present, double *v, perr *e) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, key);
    *present = x && !cJSON_IsNull(x);
    if (!*present) return 1;
    if (!cJSON_IsNumber(x)) return fail(e, "\"%s\": expected a number", key);
    *v = x->valuedouble;
    if (!(*v >= lo && *v <= hi) || (integer && *v != (double)(long long)*v))
        return fail(e, "\"%s\" %g: expected %s in [%g, %g]", key, *v,
                    integer ? "an integer" : "a number", lo, hi);
    return 1;
}

// The chat request's generation fields, over their defaults.
static int chat_params(job *j, const cJSON *root, perr *e) {
    int has;
    double v = 0;
    j->rq.max_tokens = S.o.max_tokens < 256 ? S.o.max_tokens : 256;
    if (!num_field(root, "max_tokens", 1, S.o.max_tokens, 1, &has, &v, e)) return 0;
    if (has) j->rq.max_tokens = (int)v;
    if (!num_field(root, "max_completion_tokens", 1, S.o.max_tokens, 1, &has, &v, e)) return 0;
    if (has) j->rq.max_tokens = (int)v;
    if (!num_field(root, "temperature", 0, 2, 0, &has, &v, e)) return 0;
    if (has) j->rq.temperature = (float)v;
    if (!num_field(root, "top_p", 0, 1, 0, &has, &v, e)) return 0;
    if (has) {
        if (v <= 0) return fail(e, "\"top_p\" 0: expected a number in (0, 1]");
        j->rq.top_p = (float)v;
    }
    if (!num_field(root, "top_k", 0, 1 << 30, 1, &has, &v, e)) return 0;
    if (has) j->rq.top_k = (int)v;
    if (!num_field(root, "seed", -9.2e18, 9.2e18, 1, &has, &v, e)) return 0;
    if (has) j->rq.seed = (uint64_t)(int64_t)v;
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (stop && !cJSON_IsNull(stop)) {
        const cJSON *one = stop, *s;
        int n = 0;
        if (cJSON_IsString(one)) {
            if (!one->valuestring[0]) return fail(e, "\"stop\": the string is empty");
            j->stops[n++] = strdup(one->valuestring);
        } else if (cJSON_IsArray(stop)) {
            cJSON_ArrayForEach(s, stop) {
                if (!cJSON_IsString(s) || !s->valuestring[0])
                    return fail(e, "\"stop\": expected non-empty strings");
                if (n == MAX_STOP) return fail(e, "\"stop\": at most %d strings", MAX_STOP);
                j->stops[n++] = strdup(s->valuestring);
            }
        } else {
            return fail(e, "\"stop\": expected a string or an array of strings");
        }
        j->rq.stop = (const char *const *)j->stops;
        j->rq.n_stop = n;
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (st && !cJSON_IsNull(st) && !cJSON_IsBool(st)) return fail(e, "\"stream\": expected a boolean");
    j->stream = cJSON_IsTrue(st);
    return ss_parse(root, &j->rq, &j->ss, j->stream, e->msg, sizeof e->msg);
}

static job *parse_chat(const char *body, size_t len, perr *e) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        fail(e, "the body is not valid JSON (at byte %ld)", end ? (long)(end - body) : 0L);
        return NULL;
    }
    // nothing but whitespace may follow the value
    for (const char *p = end; p && p < body + len; p++)
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
            fail(e, "the body has data after its JSON value (at byte %ld)", (long)(p - body));
            cJSON_Delete(root);
            return NULL;
        }
    job *j = job_new(JOB_CHAT);
    int ok = 1, n_user = 0;
    if (!cJSON_IsObject(root)) ok = fail(e, "the body must be a JSON object");
    const cJSON *msgs = ok ? cJSON_GetObjectItemCaseSensitive(root, "messages") : NULL;
    if (ok && (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs)))
        ok = fail(e, "\"messages\": expected a non-empty array");
    const cJSON *m;
    if (ok)
        cJSON_ArrayForEach(m, msgs) {
            const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (!cJSON_IsString(role)) {
                ok = fail(e, "messages[]: expected a \"role\" string");
                break;
            }
            const char *r = role->valuestring;
            if (!strcmp(r, "system") || !strcmp(r, "developer")) {
                if (n_user || j->system) {
                    ok = fail(e, "messages: one system message, before the user's");
                    break;
                }
                if (!(ok = content(j, c, 0, &j->system, e))) break;
                if (!j->system) j->system = strdup("");
            } else if (!strcmp(r, "user")) {
                if (n_user++) {
                    ok = fail(e, "messages: only one user turn is supported (no multi-turn "
                                 "history yet)");
                    break;
                }
                if (!(ok = content(j, c, 1, &j->text, e))) break;
            } else {
                ok = fail(e, "messages: role \"%s\" is not supported (one optional system "
                             "message and one user message)",
                          r);
                break;
            }
        }
    if (ok && !n_user) ok = fail(e, "messages: no user message");
    if (ok) ok = chat_params(j, root, e);
    cJSON_Delete(root);
    if (!ok) {
        job_unref(j);
        return NULL;
    }
    if (!j->text && !j->n_media) j->text = strdup("");
    j->rq.system = j->system;
    j->rq.text = j->text;
    j->rq.media = j->media;
    j->rq.n_media = j->n_media;
    return j;
}

// --- the chat response -------------------------------------------------------------------------
static const char *finish_reason(const g4cu_result *r) {
    return !strcmp(r->finish_reason, "cancelled") ? "stop" : r->finish_reason;
}

static cJSON *chat_object(const char *object, unsigned long long id) {
    cJSON *o = cJSON_CreateObject();
    char ids[64];
    snprintf(ids, sizeof ids, "chatcmpl-%llu", id);
    cJSON_AddStringToObject(o, "id", ids);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", S.o.name);
    return o;
}

static void add_usage(cJSON *o, const g4cu_result *r) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", r->n_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt_tokens + r->n_tokens);
}

// The streaming response: SSE events made from the job's text as it grows.
typedef struct {
    job *j;
    unsigned long long id;
    char *pending; // formatted bytes not yet handed to MHD
    size_t p_len, p_at;
    size_t sent; // bytes of j->out sent
    size_t lps_sent; // of j->lps
    int phase;   // 0 role chunk sent, 1 final sent, 2 end
} sse;

static void sse_set(sse *s, cJSON *o, const char *tail) {
    char *js = o ? cJSON_PrintUnformatted(o) : NULL;
    if (o) cJSON_Delete(o);
    free(s->pending);
    size_t n = (js ? strlen(js) + 8 : 0) + (tail ? strlen(tail) : 0) + 1;
    s->pending = malloc(n);
    if (!s->pending) abort();
    s->p_len = (size_t)snprintf(s->pending, n, "%s%s%s%s", js ? "data: " : "", js ? js : "",
                                js ? "\n\n" : "", tail ? tail : "");
    s->p_at = 0;
    free(js);
}

// The logprobs streamed since the last chunk (under j->mu), or NULL.
static cJSON *chunk_logprobs(sse *s) {
    job *j = s->j;
    if (!j->rq.logprobs || s->lps_sent == j->n_lps) return NULL;
    cJSON *o = ss_logprobs(S.model, j->lps + s->lps_sent, j->n_lps - s->lps_sent,
                           j->rq.top_logprobs);
    s->lps_sent = j->n_lps;
    return o;
}

static cJSON *chunk(sse *s, const char *content, const char *finish) {
    cJSON *o = chat_object("chat.completion.chunk", s->id), *ch = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    if (!content && !finish) cJSON_AddStringToObject(d, "role", "assistant");
    if (content) cJSON_AddStringToObject(d, "content", content);
    if (content || finish) {
        cJSON *lp = chunk_logprobs(s);
        if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
    }
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(ch, c);
    return o;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    sse *s = cls;
    for (;;) {
        if (s->p_at < s->p_len) {
            size_t n = s->p_len - s->p_at < max ? s->p_len - s->p_at : max;
            memcpy(buf, s->pending + s->p_at, n);
            s->p_at += n;
            return (ssize_t)n;
        }
        if (s->phase == 2) return MHD_CONTENT_READER_END_OF_STREAM;
        job *j = s->j;
        pthread_mutex_lock(&j->mu);
        while (!j->done && s->sent == j->out_len) pthread_cond_wait(&j->cv, &j->mu);
        if (s->sent < j->out_len) {
            char *piece = strndup(j->out + s->sent, j->out_len - s->sent);
            s->sent = j->out_len;
            cJSON *o = chunk(s, piece, NULL); // (its logprobs read j under mu)
            pthread_mutex_unlock(&j->mu);
            sse_set(s, o, NULL);
            free(piece);
            continue;
        }
        // done: the last chunk (or an error event), then [DONE]
        cJSON *o;
        if (j->rc) {
            o = cJSON_CreateObject();
            cJSON *e = cJSON_AddObjectToObject(o, "error");
            cJSON_AddStringToObject(e, "message", j->err ? j->err : "?");
            cJSON_AddStringToObject(e, "type", j->rc == G4CU_EUSER ? "invalid_request_error"
                                                                   : "server_error");
        } else {
            o = chunk(s, NULL, finish_reason(&j->res));
            add_usage(o, &j->res);
        }
        pthread_mutex_unlock(&j->mu);
        sse_set(s, o, "data: [DONE]\n\n");
        s->phase = 2;
    }
}

static void sse_free(void *cls) {
    sse *s = cls;
    s->j->cancel = 1; // the client left, or the stream ended: nothing more to generate
    job_unref(s->j);
    free(s->pending);
    free(s);
}

// Waits for the job's end (or, streaming, its first text) and answers.
static enum MHD_Result answer_job(struct MHD_Connection *c, conn_ctx *x, job *j, int text_format) {
    if (!submit(j)) {
        job_unref(j);
        return send_error(c, x, 429, "the queue is full (%d requests waiting); retry later",
                          S.o.queue);
    }
    pthread_mutex_lock(&S.mu);
    unsigned long long id = ++S.next_id;
    pthread_mutex_unlock(&S.mu);
    pthread_mutex_lock(&j->mu);
    while (!j->done && !(j->stream && j->out_len)) pthread_cond_wait(&j->cv, &j->mu);
    const int done = j->done, rc = j->rc;
    pthread_mutex_unlock(&j->mu);
    if (done && rc) {
        enum MHD_Result ok = send_error(c, x, rc == G4CU_EUSER ? 400 : 500, "%s", j->err);
        job_unref(j);
        return ok;
    }
    if (j->stream) {
        sse *s = calloc(1, sizeof *s);
        if (!s) abort();
        s->j = j;
        s->id = id;
        sse_set(s, chunk(s, NULL, NULL), NULL);
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, s, sse_free);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ok = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        count(x->ep, 200);
        return ok;
    }
    const g4cu_result *r = &j->res;
    enum MHD_Result ok;
    if (j->kind == JOB_TRANSCRIBE) {
        if (text_format) {
            char *t = strndup(r->text, r->text_len);
            ok = send_buf(c, x, 200, "text/plain; charset=utf-8", t, strlen(t));
        } else {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "text", r->text);
            ok = send_json(c, x, 200, o);
        }
    } else {
        cJSON *o = chat_object("chat.completion", id), *ch = cJSON_AddArrayToObject(o, "choices");
        for (int i = 0; i < j->ss.n; i++) {
            const g4cu_result *ri = i ? &j->more[i - 1] : r;
            cJSON *c0 = cJSON_CreateObject(), *msg = cJSON_AddObjectToObject(c0, "message");
            cJSON_AddNumberToObject(c0, "index", i);
            cJSON_AddStringToObject(msg, "role", "assistant");
            ss_message(msg, ri, id);
            if (j->rq.logprobs)
                cJSON_AddItemToObject(c0, "logprobs", ss_logprobs(S.model, ri->logprobs,
                                                                  (size_t)ri->n_tokens,
                                                                  j->rq.top_logprobs));
            else
                cJSON_AddNullToObject(c0, "logprobs");
            cJSON_AddStringToObject(c0, "finish_reason", finish_reason(ri));
            cJSON_AddItemToArray(ch, c0);
        }
        add_usage(o, r);
        if (j->ss.n > 1) { // usage counts every choice's tokens
            int n_tok = r->n_tokens;
            for (int i = 1; i < j->ss.n; i++) n_tok += j->more[i - 1].n_tokens;
            cJSON *u = cJSON_GetObjectItem(o, "usage");
            cJSON_SetNumberValue(cJSON_GetObjectItem(u, "completion_tokens"), n_tok);
            cJSON_SetNumberValue(cJSON_GetObjectItem(u, "total_tokens"), r->n_prompt_tokens + n_tok);
        }
        ok = send_json(c, x, 200, o);
    }
    job_unref(j);
    return ok;
}

// --- multipart (transcriptions) ----------------------------------------------------------------
static enum MHD_Result form_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *filename, const char *content_type,
                                  const char *transfer_encoding, const char *data, uint64_t off,
                                  size_t size) {
    conn_ctx *x = cls;
    char **dst = !strcmp(key, "prompt")            ? &x->prompt
                 : !strcmp(key, "response_format") ? &x->format
                 : !strcmp(key, "temperature")     ? &x->temperature
                                                   : NULL;
    if (!strcmp(key, "file")) {
        char *f = realloc(x->file, x->file_len + size + 1);
        if (!f) abort();
        memcpy(f + x->file_len, data, size);
        x->file = f;
        x->file_len += size;
        return MHD_YES;
    }
    if (dst) {
        size_t have = *dst ? strlen(*dst) : 0;
        if (have + size > 65536) return MHD_NO;
        char *v = realloc(*dst, have + size + 1);
        if (!v) abort();
        memcpy(v + have, data, size);
        v[have + size] = 0;
        *dst = v;
    }
    return MHD_YES; // model, language and the rest: accepted, not used
}

static enum MHD_Result transcribe(struct MHD_Connection *c, conn_ctx *x) {
    if (x->form_error || !x->pp)
        return send_error(c, x, 400, "the multipart/form-data body is malformed");
    if (!x->file || !x->file_len)
        return send_error(c, x, 400, "the form has no \"file\" field (the audio to transcribe)");
    if (!g4cu_model_has_audio(S.model))
        return send_error(c, x, 400, "the model %s has no audio encoder", S.o.name);
    int text_format = 0;
    if (x->format) {
        if (!strcmp(x->format, "text"))
            text_format = 1;
        else if (strcmp(x->format, "json"))
            return send_error(c, x, 400, "response_format \"%s\": expected json or text",
                              x->format);
    }
    job *j = job_new(JOB_TRANSCRIBE);
    if (x->temperature) {
        char *end;
        double t = strtod(x->temperature, &end);
        if (end == x->temperature || *end || !(t >= 0 && t <= 2)) {
            job_unref(j);
            return send_error(c, x, 400, "temperature \"%s\": expected a number in [0, 2]",
                              x->temperature);
        }
        j->rq.temperature = (float)t;
    }
    if (x->prompt && x->prompt[0]) j->text = strdup(x->prompt), j->rq.text = j->text;
    j->rq.max_tokens = S.o.max_tokens < 448 ? S.o.max_tokens : 448;
    perr e;
    if (!decode_audio("file", x->file, x->file_len, &j->pcm, &j->n_pcm, &e)) {
        job_unref(j);
        return send_error(c, x, 400, "%s", e.msg);
    }
    return answer_job(c, x, j, text_format);
}

// --- GET endpoints -----------------------------------------------------------------------------
static enum MHD_Result metrics(struct MHD_Connection *c, conn_ctx *x) {
    size_t cap = 16384, n = 0;
    char *b = malloc(cap);
    if (!b) abort();
#define OUT(...) n += (size_t)snprintf(b + n, n < cap ? cap - n : 0, __VA_ARGS__)
    pthread_mutex_lock(&S.mu);
    OUT("# HELP g4cu_requests_total HTTP requests answered, by endpoint and status code.\n"
        "# TYPE g4cu_requests_total counter\n");
    for (int e = 0; e < N_EP; e++)
        for (int k = 0; k < N_CODES; k++)
            if (S.requests[e][k])
                OUT("g4cu_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n", ep_name[e],
                    codes[k], S.requests[e][k]);
    OUT("# HELP g4cu_rejected_total Requests refused because the queue was full (429).\n"
        "# TYPE g4cu_rejected_total counter\ng4cu_rejected_total %llu\n", S.rejected);
    OUT("# HELP g4cu_prompt_tokens_total Prompt tokens of the answered requests.\n"
        "# TYPE g4cu_prompt_tokens_total counter\ng4cu_prompt_tokens_total %llu\n",
        S.prompt_tokens);
    OUT("# HELP g4cu_completion_tokens_total Tokens generated.\n"
        "# TYPE g4cu_completion_tokens_total counter\ng4cu_completion_tokens_total %llu\n",
        S.completion_tokens);
    OUT("# HELP g4cu_queue_waiting Requests waiting for a state.\n"
        "# TYPE g4cu_queue_waiting gauge\ng4cu_queue_waiting %d\n", S.n_waiting);
    OUT("# HELP g4cu_running Requests being generated.\n"
        "# TYPE g4cu_running gauge\ng4cu_running %d\n", S.n_running);
    OUT("# HELP g4cu_request_seconds Time from queueing to the end of generation.\n"
        "# TYPE g4cu_request_seconds histogram\n");
    unsigned long long acc = 0;
    for (int i = 0; i < N_BUCKETS; i++) {
        acc += S.hist[i];
        OUT("g4cu_request_seconds_bucket{le=\"%g\"} %llu\n", buckets[i], acc);
    }
    OUT("g4cu_request_seconds_bucket{le=\"+Inf\"} %llu\n", acc + S.hist[N_BUCKETS]);
    OUT("g4cu_request_seconds_sum %.6f\ng4cu_request_seconds_count %llu\n", S.hist_sum,
        S.hist_count);
    pthread_mutex_unlock(&S.mu);
#undef OUT
    if (n >= cap) n = cap - 1;
    return send_buf(c, x, 200, "text/plain; version=0.0.4", b, n);
}

static enum MHD_Result models(struct MHD_Connection *c, conn_ctx *x) {
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", S.o.name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "g4cu");
    cJSON_AddItemToArray(d, m);
    return send_json(c, x, 200, o);
}

// --- the request handler -----------------------------------------------------------------------
static int content_type_is(struct MHD_Connection *c, const char *want) {
    const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    size_t n = strlen(want);
    return t && !strncasecmp(t, want, n) && (t[n] == 0 || t[n] == ';' || t[n] == ' ');
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    conn_ctx *x = *con_cls;
    if (!x) { // the first call: the headers
        x = calloc(1, sizeof *x);
        if (!x) abort();
        *con_cls = x;
        pthread_mutex_lock(&S.mu);
        S.in_flight++;
        const int draining = S.draining;
        pthread_mutex_unlock(&S.mu);
        x->ep = !strcmp(url, "/v1/chat/completions")       ? EP_CHAT
                : !strcmp(url, "/v1/audio/transcriptions") ? EP_TRANSCRIBE
                : !strcmp(url, "/v1/models")               ? EP_MODELS
                : !strcmp(url, "/health")                  ? EP_HEALTH
                : !strcmp(url, "/metrics")                 ? EP_METRICS
                                                           : EP_OTHER;
        x->is_post = !strcmp(method, "POST");
        if (x->ep == EP_OTHER) return send_error(c, x, 404, "no endpoint %s %s", method, url);
        const int want_post = x->ep == EP_CHAT || x->ep == EP_TRANSCRIBE;
        if (want_post != x->is_post || (!x->is_post && strcmp(method, "GET")))
            return send_error(c, x, 405, "%s takes %s, not %s", url, want_post ? "POST" : "GET",
                              method);
        if (draining && want_post) return send_error(c, x, 503, "the server is shutting down");
        if (!x->is_post) return MHD_YES;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > S.o.max_body)
            return send_error(c, x, 413, "the body of %s bytes is over the limit of %zu", cl,
                              S.o.max_body);
        if (x->ep == EP_CHAT && !content_type_is(c, "application/json"))
            return send_error(c, x, 415, "%s takes Content-Type application/json", url);
        if (x->ep == EP_TRANSCRIBE) {
            if (!content_type_is(c, "multipart/form-data"))
                return send_error(c, x, 415, "%s takes Content-Type multipart/form-data", url);
            x->pp = MHD_create_post_processor(c, 65536, form_field, x);
            if (!x->pp) return send_error(c, x, 400, "the multipart/form-data header has no boundary");
        }
        return MHD_YES;
    }
    if (*upload_size) { // a piece of the body
        if (x->len + *upload_size > S.o.max_body) x->too_big = 1;
        if (!x->too_big) {
            if (x->pp) {
                if (MHD_post_process(x->pp, upload, *upload_size) != MHD_YES) x->form_error = 1;
                x->len += *upload_size;
            } else {
                if (x->len + *upload_size + 1 > x->cap) {
                    x->cap = (x->len + *upload_size + 1) * 2;
                    x->body = realloc(x->body, x->cap);
                    if (!x->body) abort();
                }
                memcpy(x->body + x->len, upload, *upload_size);
                x->len += *upload_size;
                x->body[x->len] = 0;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    // the whole request is in
    if (x->too_big) return send_error(c, x, 413, "the body is over the limit of %zu bytes", S.o.max_body);
    switch (x->ep) {
    case EP_HEALTH: {
        cJSON *o = cJSON_CreateObject();
        pthread_mutex_lock(&S.mu);
        const int draining = S.draining;
        pthread_mutex_unlock(&S.mu);
        cJSON_AddStringToObject(o, "status", draining ? "draining" : "ok");
        return send_json(c, x, draining ? 503 : 200, o);
    }
    case EP_MODELS:
        return models(c, x);
    case EP_METRICS:
        return metrics(c, x);
    case EP_TRANSCRIBE:
        return transcribe(c, x);
    case EP_CHAT: {
        if (!x->len) return send_error(c, x, 400, "the body is empty: expected a JSON object");
        perr e;
        job *j = parse_chat(x->body, x->len, &e);
        if (!j) return send_error(c, x, 400, "%s", e.msg);
        return answer_job(c, x, j, 0);
    }
    }
    return send_error(c, x, 404, "no endpoint %s", url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    conn_ctx *x = *con_cls;
    if (!x) return;
    if (x->pp) MHD_destroy_post_processor(x->pp);
    free(x->body);
    free(x->file);
    free(x->prompt);
    free(x->format);
    free(x->temperature);
    free(x);
    *con_cls = NULL;
    pthread_mutex_lock(&S.mu);
    S.in_flight--;
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
}

// --- main --------------------------------------------------------------------------------------
static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "g4cu serve: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see g4cu help)\n");
    return 1;
}

static int int_opt(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "g4cu serve: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo,
                hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

int g4_serve_main(int argc, char **argv) {
    serve_opts o = {.host = "127.0.0.1", .port = 8080, .parallel = 1, .queue = 16,
                    .max_tokens = 2048, .max_media = 8, .timeout_s = 30, .max_conn = 256,
                    .max_audio_s = 600,
                    .max_body = 32u << 20};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int v = i + 1 < argc;
        long n;
        struct { const char *name; int *dst; long lo, hi; } ints[] = {
            {"--port", &o.port, 0, 65535},         {"--parallel", &o.parallel, 1, 64},
            {"--queue", &o.queue, 0, 100000},      {"--max-tokens", &o.max_tokens, 1, 1 << 20},
            {"--max-media", &o.max_media, 0, 16},  {"--timeout", &o.timeout_s, 1, 3600},
            {"--n-ctx", &o.n_ctx, 0, 1 << 20},     {"--max-connections", &o.max_conn, 1, 65536},
            {"--max-audio-seconds", &o.max_audio_s, 1, 86400},
        };
        int done = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0] && !done; k++)
            if (!strcmp(a, ints[k].name) && v) {
                if (!int_opt(a, argv[++i], ints[k].lo, ints[k].hi, &n)) return 1;
                *ints[k].dst = (int)n;
                done = 1;
            }
        if (done) continue;
        if (!strcmp(a, "--max-body") && v) {
            if (!int_opt(a, argv[++i], 1024, 1L << 32, &n)) return 1;
            o.max_body = (size_t)n;
        } else if (!strcmp(a, "--host") && v)
            o.host = argv[++i];
        else if (!strcmp(a, "--backend") && v)
            o.backend = argv[++i];
        else if (!strcmp(a, "--tokenizer") && v)
            o.tokenizer = argv[++i];
        else if (!strcmp(a, "--name") && v)
            o.name = argv[++i];
        else if (a[0] == '-')
            return usage_error("unknown option '%s' (or it needs a value)", a);
        else if (!o.pkg)
            o.pkg = a;
        else
            return usage_error("unexpected argument '%s'", a);
    }
    if (!o.pkg) return usage_error("%s", "missing package directory");
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o.port)};
    if (inet_pton(AF_INET, o.host, &addr.sin_addr) != 1)
        return usage_error("--host '%s': expected an IPv4 address (127.0.0.1, 0.0.0.0)", o.host);
    if (!o.name) {
        const char *p = o.pkg + strlen(o.pkg);
        while (p > o.pkg && p[-1] == '/') p--;
        const char *b = p;
        while (b > o.pkg && b[-1] != '/') b--;
        static char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(p - b), b);
        o.name = name[0] ? name : "g4cu";
    }
    S.o = o;
    pthread_mutex_init(&S.mu, NULL);
    pthread_cond_init(&S.cv, NULL);

    g4cu_model_params mp;
    g4cu_model_params_default(&mp);
    mp.backend = o.backend;
    mp.tokenizer_path = o.tokenizer;
    mp.n_ctx = o.n_ctx;
    int rc = g4cu_model_load(o.pkg, &mp, &S.model);
    if (rc) {
        fprintf(stderr, "g4cu: %s\n", g4cu_last_error());
        return rc == G4CU_EUSER ? 1 : 2;
    }
    S.states = calloc((size_t)o.parallel, sizeof *S.states);
    S.workers = calloc((size_t)o.parallel, sizeof *S.workers);
    for (int i = 0; i < o.parallel; i++)
        if ((rc = g4cu_state_new(S.model, &S.states[i]))) {
            fprintf(stderr, "g4cu: %s\n", g4cu_last_error());
            return rc == G4CU_EUSER ? 1 : 2;
        }
    // SIGTERM / SIGINT are taken by sigwait below: blocked in every thread made from here on
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < o.parallel; i++) pthread_create(&S.workers[i], NULL, worker_main, S.states[i]);

    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
            MHD_USE_ITC,
        (uint16_t)o.port, NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR, &addr,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o.timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)o.max_conn, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "g4cu serve: cannot listen on %s:%d (%s)\n", o.host, o.port,
                strerror(errno));
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("g4cu serve: listening on http://%s:%u (model %s, backend %s, %d states, queue %d)\n",
           o.host, di ? (unsigned)di->port : (unsigned)o.port, o.name,
           g4cu_model_backend(S.model), o.parallel, o.queue);
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    // Drain: no new connections, refuse new work, let the requests in flight finish.
    fprintf(stderr, "g4cu serve: %s: finishing the requests in flight\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    MHD_socket ls = MHD_quiesce_daemon(d);
    pthread_mutex_lock(&S.mu);
    S.draining = 1;
    while (S.in_flight > 0 || S.n_waiting > 0 || S.n_running > 0) pthread_cond_wait(&S.cv, &S.mu);
    S.stop_workers = 1;
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
    for (int i = 0; i < o.parallel; i++) pthread_join(S.workers[i], NULL);
    MHD_stop_daemon(d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    for (int i = 0; i < o.parallel; i++) g4cu_state_free(S.states[i]);
    free(S.states);
    free(S.workers);
    g4cu_model_free(S.model);
    fprintf(stderr, "g4cu serve: stopped\n");
    return 0;
}

#endif
