// serve.c: `g4cu serve PKG`: an OpenAI-compatible HTTP server on libmicrohttpd, written against
// the public C API (include/g4cu.h) only.
//
//   POST /v1/chat/completions      messages: an optional first system turn, then user,
//                                  assistant (tool_calls) and tool messages, through the chat
//                                  template (g4cu_request.messages); content a string or parts:
//                                  text, image_url / audio_url (data: URLs; files under
//                                  --media-dir), input_audio base64 wav/flac, in any user turn;
//                                  max_tokens | max_completion_tokens (clamped to --max-tokens),
//                                  temperature (absent: greedy), top_p, top_k, seed (none or -1
//                                  with a temperature: drawn, reported), stop, stream (server-sent
//                                  events ending in `data: [DONE]`)
//   POST /v1/completions           prompt (a string, [string] or token ids), the same fields
//   POST /v1/audio/transcriptions  multipart/form-data: file (the whole upload, in windows),
//                                  prompt, response_format (json | text | verbose_json | srt |
//                                  vtt), temperature, language; model is accepted and ignored
//   POST /tokenize, /detokenize    llama-server's shapes; POST /v1/embeddings: 501
//   GET  /v1/models, /v1/models/{id}, /props, /slots, /health, /metrics (Prometheus text)
//
// One model; --parallel N slots decoded together: one scheduler thread owns a g4cu_batch of N
// slots, moves queued requests into free slots, steps the batch (a round: one forward over every
// running request's next token and the new requests' prompt rows within
// --batch-prefill-tokens, oldest first: the weights are read once a step for all of them; with
// G4_BATCH_PROMPT_ROWS=0, prompt chunks of their own forwards first, then the decode step:
// engine/batch.h), streams each request's text as its tokens come, and frees a slot as
// soon as its request ends or its client leaves. A request the batch cannot run (logprobs,
// penalties, logit_bias, min_p, response_format json, tools, n > 1, transcriptions:
// g4cu_batch_accepts) runs on one extra state, made on first need, one such request at a time.
// Requests wait in a bounded queue (--queue; 429 with Retry-After when full). Every bad request
// gets a 4xx JSON error {"error": {"message", "type"}} and the server goes on. Limits:
// --max-body bytes, --max-tokens per request (more is clamped), --max-media items per request,
// --max-audio-seconds per clip (a clip past the 30 s window goes in as consecutive windows); a
// request not read in full within --timeout is cut off; a request whose client leaves is
// cancelled (its slot freed).
// SIGTERM / SIGINT: new connections refused, the requests in flight get --drain-timeout s, then
// are cancelled; exit 0. Who may use it and the memory bound (API key, Host / Origin, the log
// line, the request-memory budget, the JSON and image limits): tools/serve_guard.c. Binds
// 127.0.0.1 unless --host says otherwise; --port 0 takes a free port; the port is printed on
// stdout ("g4cu serve: listening on http://HOST:PORT").
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
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tools/serve_guard.h"

#define MAX_STOP 4

// --- options and the server ------------------------------------------------------------------
typedef struct {
    const char *pkg, *host, *backend, *tokenizer, *name, *media_dir;
    int port, parallel, queue, max_tokens, max_media, timeout_s, n_ctx, max_conn, max_audio_s;
    int prefill_tokens; // --batch-prefill-tokens (0: the library's default)
    size_t max_body;
} serve_opts;

typedef struct job job;

enum {
    EP_CHAT,
    EP_TRANSCRIBE,
    EP_MODELS,
    EP_HEALTH,
    EP_METRICS,
    EP_COMPLETIONS,
    EP_TOKENIZE,
    EP_DETOKENIZE,
    EP_MODEL,
    EP_PROPS,
    EP_SLOTS,
    EP_EMBEDDINGS,
    EP_OTHER,
    N_EP
};
static const char *const ep_name[N_EP] = {
    "chat_completions", "audio_transcriptions", "models",     "health", "metrics",
    "completions",      "tokenize",             "detokenize", "model",  "props",
    "slots",            "embeddings",           "other"};
// The routes: path (a trailing '*': a prefix), method, endpoint; a body's content type.
static const struct {
    const char *path, *method;
    int ep;
    const char *body_type; // NULL: no body
} routes[] = {
    {"/v1/chat/completions", "POST", EP_CHAT, "application/json"},
    {"/v1/completions", "POST", EP_COMPLETIONS, "application/json"},
    {"/v1/audio/transcriptions", "POST", EP_TRANSCRIBE, "multipart/form-data"},
    {"/tokenize", "POST", EP_TOKENIZE, "application/json"},
    {"/detokenize", "POST", EP_DETOKENIZE, "application/json"},
    {"/v1/embeddings", "POST", EP_EMBEDDINGS, NULL},
    {"/v1/models", "GET", EP_MODELS, NULL},
    {"/v1/models/*", "GET", EP_MODEL, NULL},
    {"/health", "GET", EP_HEALTH, NULL},
    {"/metrics", "GET", EP_METRICS, NULL},
    {"/props", "GET", EP_PROPS, NULL},
    {"/slots", "GET", EP_SLOTS, NULL},
};
#define N_ROUTES (int)(sizeof routes / sizeof routes[0])
static const int codes[] = {200, 400, 401, 403, 404, 405, 408, 413, 415, 429, 500, 501, 503};
#define N_CODES (int)(sizeof codes / sizeof codes[0])
static const double buckets[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
#define N_BUCKETS (int)(sizeof buckets / sizeof buckets[0])
static const int batch_buckets[] = {1, 2, 4, 8, 16, 32, 64};
#define N_BATCH_BUCKETS (int)(sizeof batch_buckets / sizeof batch_buckets[0])

typedef struct {
    serve_opts o;
    char *media_dir_real; // --media-dir's real path
    int max_tokens;       // --max-tokens, or (0) the model's context
    g4cu_tokenizer *tok;  // /tokenize, /detokenize, /v1/completions (the model's file, again)
    g4cu_model *model;
    g4cu_batch *batch;  // --parallel slots; stepped by the scheduler thread only
    pthread_t sched;
    job **slot_job;     // [parallel] the scheduler's running jobs (its own; not under mu)
    int64_t *slot_rid;  // [parallel] their batch request ids
    g4cu_batch_slot_info *slot_info; // [parallel] the slots after the last step (under mu)
    g4cu_state *single; // the requests the batch cannot run, one at a time (made on first need)
    pthread_t single_worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;   // jobs waiting for a slot
    job *shead, *stail; // jobs waiting for the single state
    int n_waiting, n_running, stop_workers;
    int single_busy; // the single state is generating (under mu)
    int draining;
    int in_flight; // requests between their first call and their completion
    // metrics (under mu)
    unsigned long long requests[N_EP][N_CODES];
    unsigned long long prompt_tokens, completion_tokens, rejected;
    unsigned long long cancelled; // requests whose client left before the answer
    unsigned long long hist[N_BUCKETS + 1];
    double hist_sum;
    unsigned long long hist_count;
    // decode steps by their rows (the batch size), and the rows in all (under mu)
    unsigned long long batch_hist[N_BATCH_BUCKETS + 1];
    unsigned long long batch_steps, batch_rows;
    // where the scheduler's rounds went (under mu): the batch's own split as of its last step
    // (prefill, decode, accept), the submits (batch_start: the template, the tokenizer, the
    // towers) and the rest of the scheduler's work (sched: the queue, cancels, polls,
    // publish_slots, answering ended jobs, waiting for mu), seconds in all
    g4cu_batch_times times;
    double submit_s, sched_s;
    unsigned long long single_requests; // requests run on the single state
    int text_all; // G4_SERVE_TEXT_ALL=1: every job streams into j->out, batched or not (the old
                  // way: an A/B of the batch's per-row host work)
    unsigned long long next_id;
} server;

static server S;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// --- jobs ------------------------------------------------------------------------------------
enum { JOB_CHAT, JOB_TRANSCRIBE, JOB_COMPLETION };

struct job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs; // the connection and the queue / worker
    int kind;
    g4cu_request rq;
    char *system, *text;
    g4cu_message *msgs; // the conversation (after the system turn)
    int n_msgs;
    g4cu_tool_call *calls; // every message's tool calls, one array
    int n_calls;
    char **strs; // strings the messages and calls point into
    int n_strs;
    g4cu_media *media; // [n_media]: the request's items, a long clip split into windows
    void **owned;      // [n_media] the media's buffers
    int n_media, n_items; // n_items: as the client sent them (--max-media counts these)
    char *stops[MAX_STOP];
    int32_t *ids; // completion: the prompt's ids
    int n_ids;
    float *pcm; // transcription: the whole upload, and its answer
    size_t n_pcm;
    g4cu_transcript tr;
    int stream;
    int sampled; // temperature > 0: the response reports rq.seed
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
    int batched; // runs in the batch (else on the single state)
    double t_submit;
    job *next;
};

static job *job_new(int kind) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL; // (answered 503)
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
    for (int i = 0; i < j->n_strs; i++) free(j->strs[i]);
    free(j->strs);
    free(j->msgs);
    free(j->calls);
    for (int i = 0; i < j->n_media; i++) free(j->owned[i]);
    free(j->owned);
    free(j->media);
    for (int i = 0; i < MAX_STOP; i++) free(j->stops[i]);
    free(j->pcm);
    g4cu_free(j->ids);
    g4cu_transcript_free(&j->tr);
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
        char *o = realloc(j->out, (j->out_len + len + 1) * 2);
        if (!o) { // out of memory: the text so far is the answer
            pthread_mutex_unlock(&j->mu);
            return 1;
        }
        j->out = o, j->out_cap = (j->out_len + len + 1) * 2;
    }
    memcpy(j->out + j->out_len, text, len);
    j->out_len += len;
    j->out[j->out_len] = 0;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return j->cancel || serve_guard_cancelling();
}

// A streamed request's token logprobs, kept for its next chunk.
static void on_logprob(void *user, const g4cu_token_logprob *lp) {
    job *j = user;
    pthread_mutex_lock(&j->mu);
    if (j->n_lps == j->cap_lps) {
        const size_t cap = j->cap_lps ? 2 * j->cap_lps : 64;
        g4cu_token_logprob *a = realloc(j->lps, sizeof *j->lps * cap);
        if (!a) { // out of memory: this token's entry is left out of the stream
            pthread_mutex_unlock(&j->mu);
            return;
        }
        j->lps = a, j->cap_lps = cap;
    }
    j->lps[j->n_lps++] = *lp;
    pthread_mutex_unlock(&j->mu);
}

// Choices 2..n of a chat request (n > 1): the same request with seeds seed + 1, ... (greedy
// gives n equal choices).
static int run_more(g4cu_state *st, job *j) {
    int rc = G4CU_OK;
    j->more = calloc((size_t)j->ss.n, sizeof *j->more);
    if (!j->more) return G4CU_EINTERNAL; // (answered as a failed generation)
    g4cu_request rq = j->rq;
    rq.on_text = NULL;
    for (int i = 1; i < j->ss.n && !rc && !j->cancel; i++) {
        rq.seed = j->rq.seed + (uint64_t)i;
        rc = g4cu_generate(st, &rq, &j->more[i - 1]);
    }
    return rc;
}

// The job has ended (rc, its result r moved in; err: the line of a failed rc): the counters
// move, then the waiting connection is woken (a client that reads /metrics once it has its
// answer finds it counted).
static void job_finish(job *j, int rc, const char *err, g4cu_result r) {
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
    pthread_mutex_lock(&j->mu);
    j->rc = rc;
    if (rc) j->err = strdup(err ? err : "the request failed");
    j->res = r;
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

// A job that never ran (its client left, or the server is cancelling everything).
static void job_skip(job *j) {
    pthread_mutex_lock(&j->mu);
    j->done = 1, j->rc = -1, j->err = strdup("cancelled before it ran");
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

// batched: the job runs in the batch, where the scheduler cancels it (a streaming callback is
// needed only to stream; without one the batch neither detokenizes it a token at a time nor
// wakes its connection's thread for every token). On the single state on_piece's return is
// how a job whose client left stops, so every job there streams into j->out.
static void set_callbacks(job *j, int batched) {
    j->rq.on_text = j->rq.tools_json || (batched && !j->stream && !S.text_all) ? NULL : on_piece;
    j->rq.user = j;
    if (j->stream && j->rq.logprobs) j->rq.on_token = on_logprob;
}

static void run_job(g4cu_state *st, job *j) {
    set_callbacks(j, 0);
    g4cu_result r = {0};
    int rc;
    if (j->kind == JOB_CHAT) {
        rc = g4cu_generate(st, &j->rq, &r);
        if (!rc && j->ss.n > 1 && (rc = run_more(st, j))) g4cu_result_free(&r);
    } else if (j->kind == JOB_COMPLETION) {
        rc = g4cu_generate_ids(st, j->ids, j->n_ids, &j->rq, &r);
    } else { // the whole upload, in overlapping windows (as `g4cu asr`)
        g4cu_transcribe_long_params lp;
        g4cu_transcribe_long_params_default(&lp);
        lp.opts = &j->rq;
        lp.name = "file";
        rc = g4cu_transcribe_long(st, j->pcm, j->n_pcm, &lp, &j->tr);
        for (int k = 0; !rc && k < j->tr.n_segments; k++) r.n_tokens += j->tr.segments[k].n_tokens;
    }
    job_finish(j, rc, rc ? g4cu_last_error() : NULL, r);
}

// The single state's worker: the queued jobs the batch cannot run, one at a time. Its state is
// made by the first such job (a server whose requests all batch never holds it).
static void *single_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&S.mu);
    for (;;) {
        while (!S.shead && !S.stop_workers) pthread_cond_wait(&S.cv, &S.mu);
        if (!S.shead) break; // stopping, and nothing left
        job *j = S.shead;
        S.shead = j->next;
        if (!S.shead) S.stail = NULL;
        S.n_waiting--;
        S.n_running++;
        S.single_busy = 1;
        S.single_requests++;
        pthread_mutex_unlock(&S.mu);
        if (j->cancel || serve_guard_cancelling()) {
            job_skip(j);
        } else if (!S.single && g4cu_state_new(S.model, &S.single)) {
            job_finish(j, G4CU_EINTERNAL, g4cu_last_error(), (g4cu_result){0});
        } else {
            run_job(S.single, j);
        }
        job_unref(j);
        pthread_mutex_lock(&S.mu);
        S.single_busy = 0;
        S.n_running--;
        pthread_cond_broadcast(&S.cv);
    }
    pthread_mutex_unlock(&S.mu);
    return NULL;
}

// Starts j in a free slot of the batch (the scheduler thread; S.mu not held): 1 when it runs,
// 0 when it ended here (refused: its error answered; or its client already left).
static int batch_start(job *j, int k) {
    if (j->cancel || serve_guard_cancelling()) {
        job_skip(j);
        return 0;
    }
    set_callbacks(j, 1);
    int64_t id = 0;
    const int rc = j->kind == JOB_COMPLETION
                       ? g4cu_batch_submit_ids(S.batch, j->ids, j->n_ids, &j->rq, &id)
                       : g4cu_batch_submit(S.batch, &j->rq, &id);
    if (rc || !id) { // (no id: no free slot, which the scheduler's count rules out)
        job_finish(j, rc ? rc : G4CU_EINTERNAL,
                   rc ? g4cu_last_error() : "serve: the batch had no free slot", (g4cu_result){0});
        return 0;
    }
    S.slot_job[k] = j;
    S.slot_rid[k] = id;
    return 1;
}

// The slots as the batch has them now, for /slots and /metrics (the batch's lock is held by a
// step; the HTTP threads read this copy instead).
static void publish_slots(void) {
    g4cu_batch_slot_info info[64]; // (--parallel is at most 64)
    const int n = S.o.parallel;
    for (int k = 0; k < n; k++) g4cu_batch_get_slot(S.batch, k, &info[k]);
    pthread_mutex_lock(&S.mu);
    memcpy(S.slot_info, info, sizeof *info * (size_t)n);
    pthread_mutex_unlock(&S.mu);
}

// The scheduler's time of one round (from its wake-up: t0) less the submits' and the batch
// step's, into S.sched_s; the submits' into S.submit_s.
static void sched_account(double t0, double submit_s, double step_s) {
    const double dt = now_s() - t0 - submit_s - step_s;
    pthread_mutex_lock(&S.mu);
    S.submit_s += submit_s;
    S.sched_s += dt > 0 ? dt : 0;
    pthread_mutex_unlock(&S.mu);
}

// The scheduler: queued jobs into free slots, one batch step, the ended jobs answered and
// their slots freed (the same round); a job whose client left is cancelled before the step.
static void *sched_main(void *arg) {
    (void)arg;
    const int n = S.o.parallel;
    int active = 0;
    for (;;) {
        pthread_mutex_lock(&S.mu);
        while (!active && !S.head && !S.stop_workers) pthread_cond_wait(&S.cv, &S.mu);
        if (!active && !S.head) { // stopping, and nothing left
            pthread_mutex_unlock(&S.mu);
            break;
        }
        const double t0 = now_s();
        double submit_s = 0;
        int started = 0;
        while (S.head && active < n) {
            job *j = S.head;
            S.head = j->next;
            if (!S.head) S.tail = NULL;
            S.n_waiting--;
            S.n_running++;
            pthread_mutex_unlock(&S.mu);
            int k = 0;
            while (S.slot_job[k]) k++;
            const double ts = now_s();
            const int ran = batch_start(j, k);
            submit_s += now_s() - ts;
            if (ran) {
                active++, started++;
            } else {
                job_unref(j);
                pthread_mutex_lock(&S.mu);
                S.n_running--;
                pthread_cond_broadcast(&S.cv);
                pthread_mutex_unlock(&S.mu);
            }
            pthread_mutex_lock(&S.mu);
        }
        pthread_mutex_unlock(&S.mu);
        if (!active) {
            if (started) publish_slots();
            sched_account(t0, submit_s, 0);
            continue;
        }
        for (int k = 0; k < n; k++) // clients that left, or the drain's deadline
            if (S.slot_job[k] && (S.slot_job[k]->cancel || serve_guard_cancelling()))
                g4cu_batch_cancel(S.batch, S.slot_rid[k]);
        g4cu_batch_info a, b;
        g4cu_batch_get_info(S.batch, &a);
        const double ts = now_s();
        const int step_rc = g4cu_batch_step(S.batch, NULL);
        const double step_s = now_s() - ts;
        g4cu_batch_get_info(S.batch, &b);
        g4cu_batch_times bt;
        g4cu_batch_get_times(S.batch, &bt);
        if (step_rc) fprintf(stderr, "g4cu serve: a batch step failed: %s\n", g4cu_last_error());
        // The ended jobs are answered after the gauges and /slots have moved (a client that
        // reads them once it has its answer sees its slot free).
        job *fin[64]; // (--parallel is at most 64)
        int fin_rc[64];
        char *fin_err[64];
        g4cu_result fin_res[64];
        int ended = 0;
        for (int k = 0; k < n; k++) {
            job *j = S.slot_job[k];
            if (!j) continue;
            g4cu_result r;
            int done = 0;
            const int rc = g4cu_batch_poll(S.batch, S.slot_rid[k], &r, &done);
            if (!done && !rc) continue;
            fin[ended] = j, fin_rc[ended] = rc;
            fin_err[ended] = rc ? strdup(g4cu_last_error()) : NULL;
            fin_res[ended] = done && !rc ? r : (g4cu_result){0};
            S.slot_job[k] = NULL, S.slot_rid[k] = 0;
            active--, ended++;
        }
        pthread_mutex_lock(&S.mu);
        if (b.steps > a.steps) { // one decode step: its rows are the batch size
            const long rows = b.rows_stepped - a.rows_stepped;
            int i = 0;
            while (i < N_BATCH_BUCKETS && rows > batch_buckets[i]) i++;
            S.batch_hist[i]++;
            S.batch_steps++;
            S.batch_rows += (unsigned long long)rows;
        }
        S.times = bt;
        S.n_running -= ended;
        if (ended) pthread_cond_broadcast(&S.cv);
        pthread_mutex_unlock(&S.mu);
        publish_slots();
        for (int i = 0; i < ended; i++) {
            job_finish(fin[i], fin_rc[i], fin_err[i], fin_res[i]);
            free(fin_err[i]);
            job_unref(fin[i]);
        }
        sched_account(t0, submit_s, step_s);
    }
    return NULL;
}

// Queues j (taking a reference for the scheduler or the single state's worker); 0 when the
// queue is full.
static int submit(job *j) {
    // the batch runs what its device-side sampler can; the rest goes to the single state
    j->batched = j->kind != JOB_TRANSCRIBE && j->ss.n <= 1 && g4cu_batch_accepts(&j->rq);
    pthread_mutex_lock(&S.mu);
    if (S.n_waiting >= S.o.queue) {
        S.rejected++;
        pthread_mutex_unlock(&S.mu);
        return 0;
    }
    j->refs++; // (no other thread has j yet)
    j->t_submit = now_s();
    j->next = NULL;
    job **head = j->batched ? &S.head : &S.shead, **tail = j->batched ? &S.tail : &S.stail;
    if (*tail)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
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
    char *prompt, *format, *temperature, *language;
    job *j;  // a streaming request's job (released by the response's free callback; its usage
             // for the log line)
    int oom; // an allocation failed while reading the body: 503
    const char *nul_field; // a form field holding a NUL (refused rather than cut): 400
    serve_guard_req g;
} conn_ctx;

static void count(int ep, int status) {
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < N_CODES; i++)
        if (codes[i] == status) S.requests[ep][i]++;
    pthread_mutex_unlock(&S.mu);
}

// A header the next send_buf adds to its response on this thread (Retry-After of a 429).
static __thread const char *extra_header[2];

static enum MHD_Result send_buf(struct MHD_Connection *c, conn_ctx *x, int status,
                                const char *type, char *buf, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(buf);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (extra_header[0]) MHD_add_response_header(r, extra_header[0], extra_header[1]);
    extra_header[0] = extra_header[1] = NULL;
    serve_guard_headers(c, r, status);
    if (x) x->g.status = status;
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    count(x ? x->ep : EP_OTHER, status);
    return ok;
}

// Out of memory while answering: a fixed 503 that allocates nothing of ours.
static enum MHD_Result send_oom(struct MHD_Connection *c, conn_ctx *x) {
    static const char msg[] = "{\"error\": {\"message\": \"the server is out of memory; retry "
                              "later\", \"type\": \"server_error\"}}";
    struct MHD_Response *r =
        MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    serve_guard_headers(c, r, 503);
    if (x) x->g.status = 503;
    enum MHD_Result ok = MHD_queue_response(c, 503, r);
    MHD_destroy_response(r);
    count(x ? x->ep : EP_OTHER, 503);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, conn_ctx *x, int status, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) return send_oom(c, x);
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
                       : status == 501 ? "not_implemented_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (status == 401) cJSON_AddStringToObject(e, "code", "invalid_api_key"); // (as OpenAI's)
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

// Strict base64 (standard or URL alphabet, '=' padding optional, no whitespace) -> *out (0,
// nothing allocated, when invalid or empty).
static int b64_decode(const char *s, size_t n, unsigned char **out, size_t *out_n) {
    while (n && s[n - 1] == '=') n--;
    if (n % 4 == 1) return 0;
    unsigned char *o = malloc(n / 4 * 3 + 3);
    if (!o) {
        serve_guard_set_oom(); // (answered 503)
        return 0;
    }
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
    if (!k) {
        free(o);
        return 0;
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

// Appends b to *a on a new line; *len / *cap track *a so that many parts cost linear time
// (*cap 0: *a's length is read once). 0 when out of memory (marked for a 503).
static int cat(char **a, size_t *len, size_t *cap, const char *b) {
    if (!*cap && *a) *len = strlen(*a), *cap = *len + 1;
    const size_t nb = strlen(b);
    if (*len + nb + 2 > *cap) {
        const size_t want = (*len + nb + 2) * 2;
        char *r = realloc(*a, want);
        if (!r) {
            serve_guard_set_oom();
            return 0;
        }
        *a = r, *cap = want;
    }
    if (*len) (*a)[(*len)++] = '\n';
    memcpy(*a + *len, b, nb + 1);
    *len += nb;
    return 1;
}

// A sound file's bytes -> the model's PCM (*pcm), all of it, refused past
// --max-audio-seconds; `what` names it in the message. The bytes go through a memory file to
// g4cu_audio_load, the public call that decodes a whole file.
static int decode_audio_all(const char *what, const void *data, size_t n, float **pcm,
                            size_t *n_pcm, perr *e) {
    double sec;
    float *head;
    size_t n_head;
    // the length first (g4cu_decode_audio reads only the first window's samples)
    if (g4cu_decode_audio(S.model, data, n, &head, &n_head, &sec))
        return fail(e, "%s: %s", what, g4cu_last_error());
    g4cu_free(head);
    if (sec > S.o.max_audio_s)
        return fail(e, "%s: %.1f s of audio is over the limit of %d s", what, sec, S.o.max_audio_s);
    const int fd = memfd_create("g4cu-serve-audio", MFD_CLOEXEC);
    size_t at = 0;
    while (fd >= 0 && at < n) {
        const ssize_t w = write(fd, (const char *)data + at, n - at);
        if (w <= 0) break;
        at += (size_t)w;
    }
    if (fd < 0 || at < n) {
        if (fd >= 0) close(fd);
        return fail(e, "%s: cannot stage the upload for decoding (%s)", what, strerror(errno));
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const int rc = g4cu_audio_load(S.model, path, pcm, n_pcm);
    close(fd);
    if (rc) { // named as g4cu_decode_audio names it: its size, never the memfd's path
        const char *m = g4cu_last_error(), *at = strstr(m, path);
        if (!at) return fail(e, "%s: %s", what, m);
        return fail(e, "%s: %.*saudio (%zu bytes)%s", what, (int)(at - m), m, n,
                    at + strlen(path));
    }
    if (!serve_guard_reserve(*n_pcm * sizeof(float))) { // (answered 503)
        free(*pcm);
        *pcm = NULL;
        serve_guard_set_oom();
        return fail(e,
                    "%s: the server holds as much as --max-request-memory allows; retry "
                    "later",
                    what);
    }
    return 1;
}

// 0 when out of memory (owned freed, marked for a 503).
static int push_media(job *j, g4cu_media md, void *owned) {
    g4cu_media *m = realloc(j->media, sizeof *j->media * (size_t)(j->n_media + 1));
    if (m) j->media = m;
    void **o = m ? realloc(j->owned, sizeof *j->owned * (size_t)(j->n_media + 1)) : NULL;
    if (o) j->owned = o;
    if (!m || !o) {
        free(owned);
        serve_guard_set_oom();
        return 0;
    }
    j->owned[j->n_media] = owned;
    j->media[j->n_media++] = md;
    return 1;
}

static int add_media(job *j, g4cu_media_kind kind, unsigned char *data, size_t n, perr *e) {
    if (j->n_items >= S.o.max_media) {
        free(data);
        return fail(e, "more than %d images and audio clips in the request", S.o.max_media);
    }
    j->n_items++;
    return push_media(j, (g4cu_media){.kind = kind, .data = data, .size = n}, data) ||
           fail(e, "out of memory");
}

// A sound file's bytes (freed here) -> the next media of j, as PCM: all of it, a clip longer
// than the audio window split into consecutive windows (the model hears the whole upload).
static int add_audio(job *j, const char *what, unsigned char *bytes, size_t n, perr *e) {
    if (j->n_items >= S.o.max_media) {
        free(bytes);
        return fail(e, "more than %d images and audio clips in the request", S.o.max_media);
    }
    float *pcm;
    size_t n_pcm;
    const int ok = decode_audio_all(what, bytes, n, &pcm, &n_pcm, e);
    free(bytes);
    if (!ok) return 0;
    j->n_items++;
    const size_t win = g4cu_model_audio_window(S.model);
    const int rate = g4cu_model_audio_rate(S.model);
    if (!win || n_pcm <= win) {
        return push_media(j, (g4cu_media){.kind = G4CU_AUDIO_PCM, .pcm = pcm, .n_samples = n_pcm,
                                          .sample_rate = rate},
                          pcm) ||
               fail(e, "out of memory");
    }
    for (size_t at = 0; at < n_pcm; at += win) {
        const size_t k = n_pcm - at < win ? n_pcm - at : win;
        float *part = malloc(k * sizeof *part);
        if (part) memcpy(part, pcm + at, k * sizeof *part);
        if (!part || !push_media(j, (g4cu_media){.kind = G4CU_AUDIO_PCM, .pcm = part,
                                                 .n_samples = k, .sample_rate = rate},
                                 part)) {
            if (!part) serve_guard_set_oom();
            free(pcm);
            return fail(e, "out of memory");
        }
    }
    free(pcm);
    return 1;
}

// --media-dir: a local file's bytes (a path or file:// URL; the file must be a regular file
// whose real path is under the folder's, at most --max-body bytes).
static int media_file(const char *what, const char *url, unsigned char **out, size_t *n, perr *e) {
    const char *path = !strncmp(url, "file://", 7) ? url + 7 : url;
    char *real = realpath(path, NULL);
    const size_t dn = strlen(S.media_dir_real);
    if (!real || strncmp(real, S.media_dir_real, dn) || real[dn] != '/') {
        free(real);
        return fail(e, "%s: '%.200s' is not a file under --media-dir (remote URLs are not "
                       "fetched)",
                    what, url);
    }
    FILE *f = fopen(real, "rb");
    free(real);
    struct stat st;
    if (!f || fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > S.o.max_body) {
        if (f) fclose(f);
        return fail(e, "%s: '%.200s': expected a readable regular file of 1 to %zu bytes", what,
                    url, S.o.max_body);
    }
    *out = malloc((size_t)st.st_size);
    if (!*out) {
        fclose(f);
        serve_guard_set_oom();
        return fail(e, "out of memory");
    }
    *n = fread(*out, 1, (size_t)st.st_size, f);
    fclose(f);
    if (*n != (size_t)st.st_size) {
        free(*out);
        return fail(e, "%s: '%.200s': a short read", what, url);
    }
    return 1;
}

// A part's {"<key>": {"url": U}} (or {"<key>": U}) -> the file's bytes. U: a data: URL
// (data:<kind>...;base64,... or data:application/octet-stream;base64,...); with --media-dir, a
// path (or file:// URL) of a regular file under that folder. Remote URLs are not fetched.
static int url_bytes(const cJSON *part, const char *key, const char *kind, unsigned char **out,
                     size_t *n, perr *e) {
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(part, key);
    if (cJSON_IsObject(u)) u = cJSON_GetObjectItemCaseSensitive(u, "url");
    if (!cJSON_IsString(u)) return fail(e, "an %s part has no url string", key);
    const char *url = u->valuestring, *comma = strchr(url, ',');
    if (!strncmp(url, "data:", 5)) {
        const size_t kn = strlen(kind);
        if ((strncmp(url + 5, kind, kn) && strncmp(url + 5, "application/octet-stream", 24)) ||
            !comma || strncmp(comma - 7, ";base64", 7) || comma - 7 < url + 5 + kn)
            return fail(e, "%s: expected a data:%s...;base64, URL", key, kind);
        if (!b64_decode(comma + 1, strlen(comma + 1), out, n))
            return fail(e, "%s: the data: URL is not valid base64 (or empty)", key);
        return 1;
    }
    if (S.o.media_dir) return media_file(key, url, out, n, e);
    return fail(e, "%s: expected a data:%s...;base64, URL (remote URLs are not fetched; local "
                   "paths only under --media-dir)",
                key, kind);
}

// A message's content: a string, or an array of parts (text parts joined by newlines; null:
// none); media only in user messages.
static int content(job *j, const cJSON *c, int user, char **text, perr *e) {
    size_t len = 0, cap = 0;
    if (cJSON_IsString(c)) return cat(text, &len, &cap, c->valuestring) || fail(e, "out of memory");
    if (!c || cJSON_IsNull(c)) return 1;
    if (!cJSON_IsArray(c)) return fail(e, "messages[].content: expected a string or an array of parts");
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        if (!cJSON_IsString(type)) return fail(e, "a content part has no \"type\" string");
        const char *t = type->valuestring;
        if (!strcmp(t, "text")) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "text");
            if (!cJSON_IsString(s)) return fail(e, "a text part has no \"text\" string");
            if (!cat(text, &len, &cap, s->valuestring)) return fail(e, "out of memory");
        } else if (!strcmp(t, "image_url") && user) {
            unsigned char *bytes;
            size_t n;
            if (!url_bytes(p, "image_url", "image/", &bytes, &n, e)) return 0;
            if (!serve_guard_image(bytes, n, e->msg, sizeof e->msg)) {
                free(bytes);
                return 0;
            }
            if (!add_media(j, G4CU_IMAGE_ENCODED, bytes, n, e)) return 0;
        } else if (!strcmp(t, "audio_url") && user) {
            unsigned char *bytes;
            size_t n;
            if (!url_bytes(p, "audio_url", "audio/", &bytes, &n, e)) return 0;
            if (!add_audio(j, "audio_url", bytes, n, e)) return 0;
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
            if (!b64_decode(d->valuestring, strlen(d->valuestring), &bytes, &n))
                return fail(e, "input_audio.data is not valid base64 (or empty)");
            if (!add_audio(j, "input_audio", bytes, n, e)) return 0;
        } else {
            return fail(e, "content part type \"%s\" is not taken here (text; image_url, "
                           "input_audio and audio_url in user messages)",
                        t);
        }
    }
    return 1;
}

// A seed for a request that gave none (or -1): from the kernel's random source, below 2^53 so
// that the number in the response is exact in any JSON reader and can be sent back.
static uint64_t fresh_seed(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) { // (no entropy yet: time and count)
        static unsigned long long k;
        v = (uint64_t)time(NULL) * 6364136223846793005ull + __atomic_add_fetch(&k, 1, __ATOMIC_RELAXED) * 1442695040888963407ull;
    }
    return v & ((1ull << 53) - 1);
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
    // beyond --max-tokens (or the context: the engine stops there): clamped, finish "length"
    j->rq.max_tokens = S.max_tokens < 256 ? S.max_tokens : 256;
    if (!num_field(root, "max_tokens", 1, 9.2e18, 1, &has, &v, e)) return 0;
    if (has) j->rq.max_tokens = v < S.max_tokens ? (int)v : S.max_tokens;
    if (!num_field(root, "max_completion_tokens", 1, 9.2e18, 1, &has, &v, e)) return 0;
    if (has) j->rq.max_tokens = v < S.max_tokens ? (int)v : S.max_tokens;
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
    if (has && v != -1) j->rq.seed = (uint64_t)(int64_t)v;
    if (j->rq.temperature > 0) { // sampling: the seed used goes back in the response
        if (!has || v == -1) j->rq.seed = fresh_seed();
        j->sampled = 1;
    }
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

// j keeps str (freed with j). NULL str, or no memory to keep it: NULL, marked for a 503.
static char *own(job *j, char *str) {
    char **a = str ? realloc(j->strs, sizeof *j->strs * (size_t)(j->n_strs + 1)) : NULL;
    if (!a) {
        free(str);
        serve_guard_set_oom();
        return NULL;
    }
    j->strs = a;
    return j->strs[j->n_strs++] = str;
}

static const char *opt_string(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

// An assistant message's tool_calls ([{id, type: "function", function: {name, arguments}}],
// arguments a JSON object's text, as OpenAI sends it) -> j->calls (m->tool_calls set later:
// the array may move).
static int tool_calls(job *j, const cJSON *tcs, int i, g4cu_message *m, perr *e) {
    if (!tcs || cJSON_IsNull(tcs)) return 1;
    if (!cJSON_IsArray(tcs)) return fail(e, "messages[%d].tool_calls: expected an array", i);
    const cJSON *tc;
    cJSON_ArrayForEach(tc, tcs) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const char *name = opt_string(f, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        if (!name) return fail(e, "messages[%d].tool_calls[]: expected function.name, a string", i);
        if (args && !cJSON_IsString(args) && !cJSON_IsObject(args) && !cJSON_IsNull(args))
            return fail(e, "messages[%d].tool_calls[].function.arguments: expected a JSON "
                           "object's text",
                        i);
        g4cu_tool_call *calls = realloc(j->calls, sizeof *j->calls * (size_t)(j->n_calls + 1));
        if (!calls) {
            serve_guard_set_oom();
            return fail(e, "out of memory");
        }
        j->calls = calls;
        const char *id = opt_string(tc, "id");
        j->calls[j->n_calls++] = (g4cu_tool_call){
            id ? own(j, strdup(id)) : NULL, own(j, strdup(name)),
            cJSON_IsString(args) ? own(j, strdup(args->valuestring))
            : cJSON_IsObject(args) ? own(j, cJSON_PrintUnformatted(args))
                                   : NULL};
        m->n_tool_calls++;
    }
    return 1;
}

// "messages": an optional first system (or developer) message, then user, assistant and tool
// messages in any order, rendered by the model's chat template (g4cu_request's messages).
static int messages(job *j, const cJSON *msgs, perr *e) {
    const int n = cJSON_GetArraySize(msgs);
    j->msgs = calloc((size_t)n, sizeof *j->msgs);
    if (!j->msgs) {
        serve_guard_set_oom();
        return fail(e, "out of memory");
    }
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsString(role)) return fail(e, "messages[%d]: expected a \"role\" string", i);
        const char *r = role->valuestring;
        if (!strcmp(r, "system") || !strcmp(r, "developer")) {
            if (i) return fail(e, "messages[%d]: a system message comes first, once", i);
            if (!content(j, c, 0, &j->system, e)) return 0;
            if (!j->system) j->system = strdup("");
            // parts: the template writes trim(text) + " " (what the eval harness sends)
            j->rq.system_as_parts = cJSON_IsArray(c);
            i++;
            continue;
        }
        g4cu_message *g = &j->msgs[j->n_msgs];
        char *text = NULL;
        const int media0 = j->n_media;
        if (!strcmp(r, "user")) {
            g->role = "user";
        } else if (!strcmp(r, "assistant")) {
            g->role = "assistant";
            if (!tool_calls(j, cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), i, g, e))
                return 0;
        } else if (!strcmp(r, "tool")) {
            g->role = "tool";
            const char *id = opt_string(m, "tool_call_id"), *name = opt_string(m, "name");
            g->tool_call_id = id ? own(j, strdup(id)) : NULL;
            g->name = name ? own(j, strdup(name)) : NULL;
        } else {
            return fail(e, "messages[%d]: role \"%s\": expected system, user, assistant or tool",
                        i, r);
        }
        if (!content(j, c, g->role[0] == 'u', &text, e)) {
            free(text);
            return 0;
        }
        g->text = text ? own(j, text) : NULL;
        g->n_media = j->n_media - media0;
        j->n_msgs++;
        i++;
    }
    if (!j->n_msgs) return fail(e, "messages: no user message");
    for (int k = 0, at = 0; k < j->n_msgs; at += j->msgs[k++].n_tool_calls)
        if (j->msgs[k].n_tool_calls) j->msgs[k].tool_calls = j->calls + at;
    return 1;
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
    if (!j) {
        serve_guard_set_oom();
        cJSON_Delete(root);
        return NULL;
    }
    int ok = 1;
    if (!cJSON_IsObject(root)) ok = fail(e, "the body must be a JSON object");
    const cJSON *msgs = ok ? cJSON_GetObjectItemCaseSensitive(root, "messages") : NULL;
    if (ok && (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs)))
        ok = fail(e, "\"messages\": expected a non-empty array");
    if (ok) ok = messages(j, msgs, e);
    if (ok) ok = chat_params(j, root, e);
    cJSON_Delete(root);
    if (!ok) {
        job_unref(j);
        return NULL;
    }
    j->rq.system = j->system;
    j->rq.messages = j->msgs;
    j->rq.n_messages = j->n_msgs;
    j->rq.media = j->media;
    j->rq.n_media = j->n_media;
    return j;
}

// POST /v1/completions: "prompt" a string (its tokens after <bos>, as the tokenizer adds it;
// special tokens written in it count as such), an array of one string, or an array of token
// ids (as they are); no chat template. The generation fields as for chat.
static job *parse_completion(const char *body, size_t len, perr *e) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!cJSON_IsObject(root)) {
        fail(e, "the body is not a JSON object (at byte %ld)", end ? (long)(end - body) : 0L);
        cJSON_Delete(root);
        return NULL;
    }
    job *j = job_new(JOB_COMPLETION);
    if (!j) {
        serve_guard_set_oom();
        cJSON_Delete(root);
        return NULL;
    }
    int ok = 1;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child;
    const int vocab = g4cu_tokenizer_n_vocab(S.tok);
    if (cJSON_IsString(p)) {
        const char *t = p->valuestring;
        if (g4cu_tokenizer_encode(S.tok, t, strlen(t), strncmp(t, "<bos>", 5) != 0, &j->ids,
                                  &j->n_ids))
            ok = fail(e, "prompt: %s", g4cu_last_error());
    } else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0 && cJSON_IsNumber(p->child)) {
        const cJSON *v;
        j->ids = malloc(sizeof *j->ids * (size_t)cJSON_GetArraySize(p));
        if (!j->ids) {
            serve_guard_set_oom();
            ok = fail(e, "out of memory");
        }
        if (j->ids) cJSON_ArrayForEach(v, p) {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= vocab ||
                v->valuedouble != (double)(int)v->valuedouble) {
                ok = fail(e, "prompt: expected token ids in [0, %d)", vocab);
                break;
            }
            j->ids[j->n_ids++] = (int32_t)v->valuedouble;
        }
    } else {
        ok = fail(e, "\"prompt\": expected a string, an array of one string, or an array of "
                     "token ids (one prompt a request)");
    }
    if (ok && !j->n_ids) ok = fail(e, "prompt: no tokens");
    const cJSON *echo = cJSON_GetObjectItemCaseSensitive(root, "echo");
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    if (ok && cJSON_IsTrue(echo)) ok = fail(e, "\"echo\": true is not supported");
    if (ok && suffix && !cJSON_IsNull(suffix)) ok = fail(e, "\"suffix\" is not supported");
    if (ok) ok = chat_params(j, root, e);
    if (ok && (j->ss.n > 1 || j->rq.tools_json || j->rq.logprobs))
        ok = fail(e, "/v1/completions takes no %s (one choice of plain text: use "
                     "/v1/chat/completions)",
                  j->ss.n > 1 ? "\"n\" > 1" : j->rq.tools_json ? "\"tools\"" : "\"logprobs\"");
    cJSON_Delete(root);
    if (!ok) {
        job_unref(j);
        return NULL;
    }
    return j;
}

// --- the chat response -------------------------------------------------------------------------
static const char *finish_reason(const g4cu_result *r) {
    return !strcmp(r->finish_reason, "cancelled") ? "stop" : r->finish_reason;
}

static cJSON *chat_object(const char *object, unsigned long long id) {
    cJSON *o = cJSON_CreateObject();
    char ids[64];
    snprintf(ids, sizeof ids, "%s-%llu", strcmp(object, "text_completion") ? "chatcmpl" : "cmpl",
             id);
    cJSON_AddStringToObject(o, "id", ids);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", S.o.name);
    char fp[96];
    snprintf(fp, sizeof fp, "g4cu-%s-%s", g4cu_version(), g4cu_model_backend(S.model));
    cJSON_AddStringToObject(o, "system_fingerprint", fp);
    return o;
}

// The seed a sampled answer used (beside OpenAI's fields: send it back to repeat the sample).
static void add_seed(cJSON *o, const job *j) {
    if (j->sampled) { // an integer always (cJSON would write a seed ending in 0 as 6.8e+15)
        char num[24];
        snprintf(num, sizeof num, "%llu", (unsigned long long)j->rq.seed);
        cJSON_AddRawToObject(o, "seed", num);
    }
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
    if (!s->pending) { // out of memory: the stream ends here
        s->p_len = s->p_at = 0;
        s->phase = 2;
        free(js);
        return;
    }
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
    const int cmpl = s->j->kind == JOB_COMPLETION;
    cJSON *o = chat_object(cmpl ? "text_completion" : "chat.completion.chunk", s->id);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (cmpl) { // /v1/completions: the text piece itself
        cJSON_AddStringToObject(c, "text", content ? content : "");
        cJSON_AddNullToObject(c, "logprobs");
    } else {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (!content && !finish) cJSON_AddStringToObject(d, "role", "assistant");
        if (content) cJSON_AddStringToObject(d, "content", content);
        if (content || finish) {
            cJSON *lp = chunk_logprobs(s);
            if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
        }
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
            add_seed(o, j);
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

// --- the transcription response ---------------------------------------------------------------
enum { FMT_JSON, FMT_TEXT, FMT_VERBOSE_JSON, FMT_SRT, FMT_VTT, N_FMT };
static const char *const fmt_name[N_FMT] = {"json", "text", "verbose_json", "srt", "vtt"};

// "HH:MM:SS<sep>mmm"
static void timestamp(char *buf, size_t n, double s, char sep) {
    long long ms = (long long)(s * 1000.0 + 0.5);
    snprintf(buf, n, "%02lld:%02lld:%02lld%c%03lld", ms / 3600000, ms / 60000 % 60,
             ms / 1000 % 60, sep, ms % 1000);
}

// The transcript in a response_format: json {text}; text; verbose_json (OpenAI's: task,
// language, duration, text, segments with id, seek, start, end, text, tokens, temperature);
// srt and vtt (a cue a segment).
static enum MHD_Result transcript_answer(struct MHD_Connection *c, conn_ctx *x,
                                         const g4cu_transcript *t, int fmt, float temperature) {
    const double rate = t->sample_rate > 0 ? t->sample_rate : 16000;
    if (fmt == FMT_TEXT) {
        char *s = strndup(t->text, t->text_len);
        if (!s) return send_error(c, x, 503, "out of memory writing the transcript; retry later");
        return send_buf(c, x, 200, "text/plain; charset=utf-8", s, strlen(s));
    }
    if (fmt == FMT_JSON || fmt == FMT_VERBOSE_JSON) {
        cJSON *o = cJSON_CreateObject();
        if (fmt == FMT_VERBOSE_JSON) {
            cJSON_AddStringToObject(o, "task", "transcribe");
            cJSON_AddStringToObject(o, "language", x->language ? x->language : "unknown");
            cJSON_AddNumberToObject(o, "duration", (double)t->n_samples / rate);
        }
        cJSON_AddStringToObject(o, "text", t->text);
        if (fmt == FMT_VERBOSE_JSON) {
            cJSON *segs = cJSON_AddArrayToObject(o, "segments");
            for (int k = 0; k < t->n_segments; k++) {
                const g4cu_segment *g = &t->segments[k];
                cJSON *sj = cJSON_CreateObject(), *toks;
                cJSON_AddNumberToObject(sj, "id", k);
                cJSON_AddNumberToObject(sj, "seek", (double)g->window_start);
                cJSON_AddNumberToObject(sj, "start", (double)g->start / rate);
                cJSON_AddNumberToObject(sj, "end", (double)g->end / rate);
                cJSON_AddStringToObject(sj, "text", g->text);
                toks = cJSON_AddArrayToObject(sj, "tokens");
                for (int i = 0; i < g->n_tokens; i++)
                    cJSON_AddItemToArray(toks, cJSON_CreateNumber(g->tokens[i]));
                cJSON_AddNumberToObject(sj, "temperature", temperature);
                cJSON_AddItemToArray(segs, sj);
            }
        }
        return send_json(c, x, 200, o);
    }
    const int vtt = fmt == FMT_VTT;
    size_t cap = 64 + t->text_len * 2, n = 0;
    for (int k = 0; k < t->n_segments; k++) cap += 64 + strlen(t->segments[k].text);
    char *b = malloc(cap);
    if (!b) return send_error(c, x, 503, "out of memory writing the transcript; retry later");
    if (vtt) n += (size_t)snprintf(b + n, cap - n, "WEBVTT\n\n");
    for (int k = 0; k < t->n_segments; k++) {
        char t0[32], t1[32];
        timestamp(t0, sizeof t0, (double)t->segments[k].start / rate, vtt ? '.' : ',');
        timestamp(t1, sizeof t1, (double)t->segments[k].end / rate, vtt ? '.' : ',');
        if (!vtt) n += (size_t)snprintf(b + n, cap - n, "%d\n", k + 1);
        n += (size_t)snprintf(b + n, cap - n, "%s --> %s\n%s\n\n", t0, t1, t->segments[k].text);
    }
    return send_buf(c, x, 200, vtt ? "text/vtt; charset=utf-8" : "application/x-subrip; charset=utf-8",
                    b, n);
}

// Has the client closed its side of the connection? (MHD calls no one while this thread waits
// in the request handler, so the socket is looked at directly: a hang-up, or a read of 0 bytes.
// Bytes of a pipelined next request are left in place.)
static int client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return 1;
    char b;
    return (p.revents & POLLIN) && recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// Waits for the job's end (or, streaming, its first text); a client that leaves meanwhile
// cancels it (its generation stops at the next token, or it never runs).
static void wait_job(struct MHD_Connection *c, job *j) {
    pthread_mutex_lock(&j->mu);
    while (!j->done && !(j->stream && j->out_len)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L; // look at the socket every 100 ms
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (!j->done && !j->cancel && client_gone(c)) {
            j->cancel = 1;
            pthread_mutex_lock(&S.mu);
            S.cancelled++;
            pthread_mutex_unlock(&S.mu);
        }
    }
    pthread_mutex_unlock(&j->mu);
}

// Waits for the job's end (or, streaming, its first text) and answers.
static enum MHD_Result answer_job(struct MHD_Connection *c, conn_ctx *x, job *j, int text_format) {
    if (!submit(j)) {
        job_unref(j);
        extra_header[0] = "Retry-After", extra_header[1] = "1";
        return send_error(c, x, 429, "the queue is full (%d requests waiting); retry later",
                          S.o.queue);
    }
    pthread_mutex_lock(&S.mu);
    unsigned long long id = ++S.next_id;
    pthread_mutex_unlock(&S.mu);
    wait_job(c, j);
    pthread_mutex_lock(&j->mu);
    const int done = j->done, rc = j->rc;
    pthread_mutex_unlock(&j->mu);
    if (done && rc) {
        enum MHD_Result ok = send_error(c, x, rc == G4CU_EUSER ? 400 : 500, "%s", j->err);
        job_unref(j);
        return ok;
    }
    if (j->stream) {
        sse *s = calloc(1, sizeof *s);
        if (!s) {
            j->cancel = 1;
            job_unref(j);
            return send_oom(c, x);
        }
        s->j = j;
        s->id = id;
        if (j->kind == JOB_CHAT) sse_set(s, chunk(s, NULL, NULL), NULL); // the role chunk
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, s, sse_free);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        serve_guard_headers(c, r, 200);
        x->g.status = 200;
        pthread_mutex_lock(&j->mu);
        j->refs++; // x->j: the usage for the log line
        pthread_mutex_unlock(&j->mu);
        x->j = j;
        enum MHD_Result ok = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        count(x->ep, 200);
        return ok;
    }
    const g4cu_result *r = &j->res;
    enum MHD_Result ok;
    if (j->kind == JOB_TRANSCRIBE) {
        ok = transcript_answer(c, x, &j->tr, text_format, j->rq.temperature);
    } else {
        const int cmpl = j->kind == JOB_COMPLETION;
        cJSON *o = chat_object(cmpl ? "text_completion" : "chat.completion", id);
        cJSON *ch = cJSON_AddArrayToObject(o, "choices");
        for (int i = 0; i < j->ss.n; i++) {
            const g4cu_result *ri = i ? &j->more[i - 1] : r;
            cJSON *c0 = cJSON_CreateObject();
            cJSON_AddNumberToObject(c0, "index", i);
            if (cmpl) {
                cJSON_AddStringToObject(c0, "text", ri->text);
            } else {
                cJSON *msg = cJSON_AddObjectToObject(c0, "message");
                cJSON_AddStringToObject(msg, "role", "assistant");
                ss_message(msg, ri, id, S.tok, j->rq.stop, j->rq.n_stop);
            }
            if (j->rq.logprobs && !cmpl)
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
        add_seed(o, j);
        ok = send_json(c, x, 200, o);
    }
    x->g.prompt_tokens = r->n_prompt_tokens, x->g.completion_tokens = r->n_tokens;
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
                 : !strcmp(key, "language")        ? &x->language
                                                   : NULL;
    if (!strcmp(key, "file")) {
        char *f = realloc(x->file, x->file_len + size + 1);
        if (!f) {
            x->oom = 1; // (answered 503)
            return MHD_NO;
        }
        memcpy(f + x->file_len, data, size);
        x->file = f;
        x->file_len += size;
        return MHD_YES;
    }
    if (dst) {
        if (memchr(data, 0, size)) {
            x->nul_field = dst == &x->prompt   ? "prompt"
                           : dst == &x->format ? "response_format"
                                               : "temperature";
            return MHD_NO;
        }
        size_t have = *dst ? strlen(*dst) : 0;
        if (have + size > 65536) return MHD_NO;
        char *v = realloc(*dst, have + size + 1);
        if (!v) {
            x->oom = 1; // (answered 503)
            return MHD_NO;
        }
        memcpy(v + have, data, size);
        v[have + size] = 0;
        *dst = v;
    }
    return MHD_YES; // model, language and the rest: accepted, not used
}

static enum MHD_Result transcribe(struct MHD_Connection *c, conn_ctx *x) {
    if (x->nul_field)
        return send_error(c, x, 400,
                          "the form field \"%s\" holds a NUL byte; refused rather "
                          "than cut there",
                          x->nul_field);
    if (x->form_error || !x->pp)
        return send_error(c, x, 400, "the multipart/form-data body is malformed");
    if (!x->file || !x->file_len)
        return send_error(c, x, 400, "the form has no \"file\" field (the audio to transcribe)");
    if (!g4cu_model_has_audio(S.model))
        return send_error(c, x, 400, "the model %s has no audio encoder", S.o.name);
    int text_format = FMT_JSON;
    if (x->format) {
        for (text_format = 0; text_format < N_FMT; text_format++)
            if (!strcmp(x->format, fmt_name[text_format])) break;
        if (text_format == N_FMT)
            return send_error(c, x, 400,
                              "response_format \"%.64s\": expected json, text, verbose_json, srt "
                              "or vtt",
                              x->format);
    }
    job *j = job_new(JOB_TRANSCRIBE);
    if (!j) return send_oom(c, x);
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
    j->rq.max_tokens = S.max_tokens < 448 ? S.max_tokens : 448;
    perr e;
    if (!decode_audio_all("file", x->file, x->file_len, &j->pcm, &j->n_pcm, &e)) {
        job_unref(j);
        return send_error(c, x, serve_guard_oom() ? 503 : 400, "%s", e.msg);
    }
    return answer_job(c, x, j, text_format);
}

// --- GET endpoints -----------------------------------------------------------------------------
static enum MHD_Result metrics(struct MHD_Connection *c, conn_ctx *x) {
    size_t cap = 32768, n = 0;
    char *b = malloc(cap);
    if (!b) return send_oom(c, x);
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
    OUT("# HELP g4cu_cancelled_total Requests stopped because their client left.\n"
        "# TYPE g4cu_cancelled_total counter\ng4cu_cancelled_total %llu\n", S.cancelled);
    OUT("# HELP g4cu_prompt_tokens_total Prompt tokens of the answered requests.\n"
        "# TYPE g4cu_prompt_tokens_total counter\ng4cu_prompt_tokens_total %llu\n",
        S.prompt_tokens);
    OUT("# HELP g4cu_completion_tokens_total Tokens generated.\n"
        "# TYPE g4cu_completion_tokens_total counter\ng4cu_completion_tokens_total %llu\n",
        S.completion_tokens);
    OUT("# HELP g4cu_queue_waiting Requests waiting for a slot (or the single state).\n"
        "# TYPE g4cu_queue_waiting gauge\ng4cu_queue_waiting %d\n", S.n_waiting);
    OUT("# HELP g4cu_running Requests being generated.\n"
        "# TYPE g4cu_running gauge\ng4cu_running %d\n", S.n_running);
    int prefill = 0, decode = 0;
    long kv_rows = 0;
    for (int k = 0; k < S.o.parallel; k++) {
        prefill += S.slot_info[k].phase == G4CU_SLOT_PREFILL;
        decode += S.slot_info[k].phase == G4CU_SLOT_DECODE;
        kv_rows += S.slot_info[k].n_ctx;
    }
    OUT("# HELP g4cu_batch_slots Slots decoded together (--parallel).\n"
        "# TYPE g4cu_batch_slots gauge\ng4cu_batch_slots %d\n", S.o.parallel);
    OUT("# HELP g4cu_batch_running Slots prefilling or decoding after the last step.\n"
        "# TYPE g4cu_batch_running gauge\ng4cu_batch_running %d\n", prefill + decode);
    OUT("# HELP g4cu_batch_decoding Slots decoding after the last step (the next step's "
        "batch size).\n"
        "# TYPE g4cu_batch_decoding gauge\ng4cu_batch_decoding %d\n", decode);
    OUT("# HELP g4cu_batch_kv_rows KV rows the slots' caches hold (at most --n-ctx x slots).\n"
        "# TYPE g4cu_batch_kv_rows gauge\ng4cu_batch_kv_rows %ld\n", kv_rows);
    OUT("# HELP g4cu_batch_size Decode steps by their decode rows (running requests decoded "
        "together; a step of prompt rows only counts 0); _sum / _count is the mean batch "
        "size.\n"
        "# TYPE g4cu_batch_size histogram\n");
    unsigned long long bacc = 0;
    for (int i = 0; i < N_BATCH_BUCKETS; i++) {
        bacc += S.batch_hist[i];
        OUT("g4cu_batch_size_bucket{le=\"%d\"} %llu\n", batch_buckets[i], bacc);
    }
    OUT("g4cu_batch_size_bucket{le=\"+Inf\"} %llu\n", bacc + S.batch_hist[N_BATCH_BUCKETS]);
    OUT("g4cu_batch_size_sum %llu\ng4cu_batch_size_count %llu\n", S.batch_rows, S.batch_steps);
    OUT("# HELP g4cu_batch_seconds_total Where the scheduler's rounds spent their time: "
        "prefill (prompt chunks in their own forwards: media prompts, or every prompt with "
        "G4_BATCH_PROMPT_ROWS=0), decode (the decode step: the forward over every row, prompt "
        "rows included, the sampler, the ids back), accept (the host work per row after a "
        "step: stop checks, detokenizing, streaming callbacks, ending requests), submit "
        "(starting requests: the template, the tokenizer, the towers), sched (the scheduler's "
        "other work: the queue, cancels, polls, /slots, answering ended requests, waiting for "
        "locks).\n"
        "# TYPE g4cu_batch_seconds_total counter\n");
    const struct { const char *phase; double s; } split[] = {
        {"prefill", S.times.prefill_s}, {"decode", S.times.decode_s},
        {"accept", S.times.accept_s},   {"submit", S.submit_s},
        {"sched", S.sched_s}};
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
        OUT("g4cu_batch_seconds_total{phase=\"%s\"} %.6f\n", split[i].phase, split[i].s);
    OUT("# HELP g4cu_batch_rounds_total Scheduler rounds (batch steps: one decode step with the "
        "prompt rows; or prefill chunks, then decode).\n"
        "# TYPE g4cu_batch_rounds_total counter\ng4cu_batch_rounds_total %ld\n", S.times.rounds);
    OUT("# HELP g4cu_batch_prefill_chunks_total Prompt chunks prefilled in the batch's rounds "
        "(own forwards or rows of a decode step).\n"
        "# TYPE g4cu_batch_prefill_chunks_total counter\ng4cu_batch_prefill_chunks_total %ld\n",
        S.times.prefill_chunks);
    OUT("# HELP g4cu_batch_prefill_tokens_total Prompt tokens prefilled in the batch's rounds.\n"
        "# TYPE g4cu_batch_prefill_tokens_total counter\ng4cu_batch_prefill_tokens_total %ld\n",
        S.times.prefill_tokens);
    OUT("# HELP g4cu_single_running Requests on the single state (what the batch cannot run).\n"
        "# TYPE g4cu_single_running gauge\ng4cu_single_running %d\n", S.single_busy);
    OUT("# HELP g4cu_single_requests_total Requests run on the single state.\n"
        "# TYPE g4cu_single_requests_total counter\ng4cu_single_requests_total %llu\n",
        S.single_requests);
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

static cJSON *model_object(void) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", S.o.name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "g4cu");
    return m;
}

static enum MHD_Result models(struct MHD_Connection *c, conn_ctx *x) {
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data");
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(d, model_object());
    return send_json(c, x, 200, o);
}

// GET /props (llama-server's shape, the parts that apply): the defaults a request gets, the
// slots, the context, what media the model takes.
static enum MHD_Result props(struct MHD_Connection *c, conn_ctx *x) {
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON *p = cJSON_AddObjectToObject(d, "params"), *m = cJSON_AddObjectToObject(o, "modalities");
    cJSON_AddNumberToObject(d, "n_ctx", g4cu_model_n_ctx(S.model));
    cJSON_AddNumberToObject(p, "n_predict", S.max_tokens < 256 ? S.max_tokens : 256);
    cJSON_AddNumberToObject(p, "max_tokens_limit", S.max_tokens);
    cJSON_AddNumberToObject(p, "temperature", 0);
    cJSON_AddNumberToObject(p, "top_k", 0);
    cJSON_AddNumberToObject(p, "top_p", 1);
    cJSON_AddNumberToObject(o, "total_slots", S.o.parallel);
    cJSON_AddNumberToObject(o, "queue", S.o.queue);
    cJSON_AddStringToObject(o, "model_alias", S.o.name);
    cJSON_AddStringToObject(o, "model_path", S.o.pkg);
    cJSON_AddStringToObject(o, "backend", g4cu_model_backend(S.model));
    cJSON_AddBoolToObject(m, "vision", g4cu_model_has_vision(S.model));
    cJSON_AddBoolToObject(m, "audio", g4cu_model_has_audio(S.model));
    cJSON_AddStringToObject(o, "build_info", g4cu_version());
    return send_json(c, x, 200, o);
}

// GET /slots: one object a slot of the batch, as of its last step (llama-server's id, n_ctx,
// is_processing; ours: state, the request's id in the batch, its prompt tokens, those
// prefilled, the tokens generated, the KV rows the slot's cache holds).
static enum MHD_Result slots(struct MHD_Connection *c, conn_ctx *x) {
    static const char *const phase[] = {"idle", "prefill", "decode", "done"};
    cJSON *a = cJSON_CreateArray();
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < S.o.parallel; i++) {
        const g4cu_batch_slot_info *si = &S.slot_info[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", i);
        cJSON_AddNumberToObject(o, "n_ctx", S.o.n_ctx ? S.o.n_ctx : g4cu_model_n_ctx(S.model));
        cJSON_AddBoolToObject(o, "is_processing",
                              si->phase == G4CU_SLOT_PREFILL || si->phase == G4CU_SLOT_DECODE);
        cJSON_AddStringToObject(o, "state", phase[si->phase >= 0 && si->phase <= 3 ? si->phase : 0]);
        cJSON_AddNumberToObject(o, "id_task", (double)si->id);
        cJSON_AddNumberToObject(o, "n_prompt_tokens", si->n_prompt);
        cJSON_AddNumberToObject(o, "n_prompt_tokens_processed", si->n_prefilled);
        cJSON_AddNumberToObject(o, "n_decoded", si->n_generated);
        cJSON_AddNumberToObject(o, "kv_rows", si->n_ctx);
        cJSON_AddItemToArray(a, o);
    }
    pthread_mutex_unlock(&S.mu);
    return send_json(c, x, 200, a);
}

// POST /tokenize {"content": S, "add_special": false, "with_pieces": false} -> {"tokens": [...]}
// (with_pieces: [{"id", "piece"}]); POST /detokenize {"tokens": [...]} -> {"content": S}
// (llama-server's shapes; special tokens are kept in the text).
static enum MHD_Result tokenize(struct MHD_Connection *c, conn_ctx *x) {
    if (!S.tok) return send_error(c, x, 501, "the server has no tokenizer of its own loaded");
    cJSON *root = x->len ? cJSON_ParseWithLength(x->body, x->len) : NULL;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return send_error(c, x, 400, "the body is not a JSON object");
    }
    enum MHD_Result ok;
    if (x->ep == EP_TOKENIZE) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "content");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(root, "add_special");
        const cJSON *wp = cJSON_GetObjectItemCaseSensitive(root, "with_pieces");
        int32_t *ids = NULL;
        int n = 0;
        if (!cJSON_IsString(t)) {
            ok = send_error(c, x, 400, "\"content\": expected a string");
        } else if (g4cu_tokenizer_encode(S.tok, t->valuestring, strlen(t->valuestring),
                                         cJSON_IsTrue(sp), &ids, &n)) {
            ok = send_error(c, x, 400, "content: %s", g4cu_last_error());
        } else {
            cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tokens");
            for (int i = 0; i < n; i++) {
                if (!cJSON_IsTrue(wp)) {
                    cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
                    continue;
                }
                char *piece = NULL;
                size_t len;
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "id", ids[i]);
                if (!g4cu_tokenizer_decode(S.tok, &ids[i], 1, 0, &piece, &len))
                    cJSON_AddStringToObject(e, "piece", piece);
                g4cu_free(piece);
                cJSON_AddItemToArray(a, e);
            }
            ok = send_json(c, x, 200, o);
        }
        g4cu_free(ids);
    } else {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens"), *v;
        const int n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
        const int vocab = g4cu_tokenizer_n_vocab(S.tok);
        int32_t *ids = malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
        if (!ids) {
            cJSON_Delete(root);
            return send_error(c, x, 503, "out of memory; retry later");
        }
        int k = 0, bad = n < 0;
        cJSON_ArrayForEach(v, t) {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= vocab ||
                v->valuedouble != (double)(int)v->valuedouble) {
                bad = 1;
                break;
            }
            ids[k++] = (int32_t)v->valuedouble;
        }
        char *text = NULL;
        size_t len = 0;
        if (bad)
            ok = send_error(c, x, 400, "\"tokens\": expected an array of ids in [0, %d)", vocab);
        else if (g4cu_tokenizer_decode(S.tok, ids, k, 0, &text, &len))
            ok = send_error(c, x, 400, "tokens: %s", g4cu_last_error());
        else {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "content", text);
            ok = send_json(c, x, 200, o);
        }
        g4cu_free(text);
        free(ids);
    }
    cJSON_Delete(root);
    return ok;
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
        if (!x) return MHD_NO; // (out of memory: the connection is closed)
        *con_cls = x;
        pthread_mutex_lock(&S.mu);
        S.in_flight++;
        const int draining = S.draining;
        pthread_mutex_unlock(&S.mu);
        int route = -1;
        for (int k = 0; k < N_ROUTES && route < 0; k++) {
            const char *p = routes[k].path;
            const size_t n = strlen(p);
            if (p[n - 1] == '*' ? !strncmp(url, p, n - 1) && url[n - 1] : !strcmp(url, p))
                route = k;
        }
        x->ep = route < 0 ? EP_OTHER : routes[route].ep;
        x->is_post = !strcmp(method, "POST");
        char why[320];
        const int refuse = serve_guard_check(c, method, url, &x->g, why, sizeof why);
        if (refuse == 204) return serve_guard_preflight(c, &x->g);
        if (refuse) return send_error(c, x, refuse, "%s", why);
        if (x->ep == EP_OTHER) return send_error(c, x, 404, "no endpoint %s %s", method, url);
        const int want_post = !strcmp(routes[route].method, "POST");
        if (want_post != x->is_post || (!x->is_post && strcmp(method, "GET")))
            return send_error(c, x, 405, "%s takes %s, not %s", url, want_post ? "POST" : "GET",
                              method);
        if (draining && want_post) return send_error(c, x, 503, "the server is shutting down");
        if (!x->is_post) return MHD_YES;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > S.o.max_body)
            return send_error(c, x, 413, "the body of %s bytes is over the limit of %zu", cl,
                              S.o.max_body);
        if (!serve_guard_admit(&x->g, cl ? (long long)strtoull(cl, NULL, 10) : -1)) {
            pthread_mutex_lock(&S.mu);
            S.rejected++;
            pthread_mutex_unlock(&S.mu);
            return send_error(c, x, 503,
                              "the server holds as many request bodies as "
                              "--max-request-memory allows; retry later");
        }
        const char *bt = routes[route].body_type;
        if (bt && !content_type_is(c, bt))
            return send_error(c, x, 415, "%s takes Content-Type %s", url, bt);
        if (x->ep == EP_TRANSCRIBE) {
            x->pp = MHD_create_post_processor(c, 65536, form_field, x);
            if (!x->pp) return send_error(c, x, 400, "the multipart/form-data header has no boundary");
        }
        return MHD_YES;
    }
    if (*upload_size) { // a piece of the body
        if (x->len + *upload_size > S.o.max_body) x->too_big = 1;
        if (!x->too_big && !x->oom) {
            if (x->pp) {
                if (MHD_post_process(x->pp, upload, *upload_size) != MHD_YES) x->form_error = 1;
                x->len += *upload_size;
            } else {
                if (x->len + *upload_size + 1 > x->cap) {
                    // the declared length at once; else doubling, never past the limit
                    const char *cl =
                        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
                    size_t cap = cl ? (size_t)strtoull(cl, NULL, 10) + 1 : 0;
                    if (cap < x->len + *upload_size + 1) cap = (x->len + *upload_size + 1) * 2;
                    if (cap > S.o.max_body + 1) cap = S.o.max_body + 1;
                    char *b = realloc(x->body, cap);
                    if (b)
                        x->body = b, x->cap = cap;
                    else
                        x->oom = 1;
                }
                if (!x->oom) {
                    memcpy(x->body + x->len, upload, *upload_size);
                    x->len += *upload_size;
                    x->body[x->len] = 0;
                }
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    // the whole request is in
    serve_guard_read_done(c);
    if (x->too_big) return send_error(c, x, 413, "the body is over the limit of %zu bytes", S.o.max_body);
    if (x->oom || serve_guard_oom())
        return send_error(c, x, 503, "out of memory reading the body; retry later");
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
    case EP_CHAT:
    case EP_COMPLETIONS: {
        if (!x->len) return send_error(c, x, 400, "the body is empty: expected a JSON object");
        perr e;
        if (!serve_guard_json(x->body, x->len, e.msg, sizeof e.msg))
            return send_error(c, x, 400, "%s", e.msg);
        job *j = x->ep == EP_CHAT ? parse_chat(x->body, x->len, &e)
                                  : parse_completion(x->body, x->len, &e);
        if (serve_guard_oom()) {
            job_unref(j);
            return send_error(c, x, 503, "out of memory parsing the request; retry later");
        }
        if (!j) return send_error(c, x, 400, "%s", e.msg);
        return answer_job(c, x, j, 0);
    }
    case EP_TOKENIZE:
    case EP_DETOKENIZE:
        return tokenize(c, x);
    case EP_MODEL:
        if (strcmp(url + strlen("/v1/models/"), S.o.name))
            return send_error(c, x, 404, "no model '%s' (this server has '%s')",
                              url + strlen("/v1/models/"), S.o.name);
        return send_json(c, x, 200, model_object());
    case EP_PROPS:
        return props(c, x);
    case EP_SLOTS:
        return slots(c, x);
    case EP_EMBEDDINGS:
        return send_error(c, x, 501, "embeddings are not served: %s is a generative model with no "
                                     "embedding (pooling) head",
                          S.o.name);
    }
    return send_error(c, x, 404, "no endpoint %s", url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    conn_ctx *x = *con_cls;
    if (!x) return;
    if (x->j) { // a stream: its usage, if it got that far
        pthread_mutex_lock(&x->j->mu);
        if (x->j->done && !x->j->rc)
            x->g.prompt_tokens = x->j->res.n_prompt_tokens,
            x->g.completion_tokens = x->j->res.n_tokens;
        pthread_mutex_unlock(&x->j->mu);
        job_unref(x->j);
    }
    serve_guard_end(c, &x->g);
    if (x->pp) MHD_destroy_post_processor(x->pp);
    free(x->body);
    free(x->file);
    free(x->prompt);
    free(x->format);
    free(x->temperature);
    free(x->language);
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
    serve_opts o = {.host = "127.0.0.1", .port = 8080, .parallel = 1, .queue = 64,
                    .max_tokens = 0, .max_media = 8, .timeout_s = 30, .max_conn = 256,
                    .max_audio_s = 600,
                    .max_body = 32u << 20};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int v = i + 1 < argc;
        long n;
        struct { const char *name; int *dst; long lo, hi; } ints[] = {
            {"--port", &o.port, 0, 65535},         {"--parallel", &o.parallel, 1, 64},
            {"--queue", &o.queue, 1, 100000},      {"--max-tokens", &o.max_tokens, 0, 1 << 20},
            {"--max-media", &o.max_media, 0, 16},  {"--timeout", &o.timeout_s, 1, 3600},
            {"--n-ctx", &o.n_ctx, 0, 1 << 20},     {"--max-connections", &o.max_conn, 1, 65536},
            {"--max-audio-seconds", &o.max_audio_s, 1, 86400},
            {"--batch-prefill-tokens", &o.prefill_tokens, 0, 1 << 20},
        };
        int done = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0] && !done; k++)
            if (!strcmp(a, ints[k].name) && v) {
                if (!int_opt(a, argv[++i], ints[k].lo, ints[k].hi, &n)) return 1;
                *ints[k].dst = (int)n;
                done = 1;
            }
        if (done) continue;
        const int guard = serve_guard_option(argc, argv, &i);
        if (guard < 0) return 1;
        if (guard) continue;
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
        else if (!strcmp(a, "--media-dir") && v)
            o.media_dir = argv[++i];
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
    if (serve_guard_start(o.host, o.timeout_s, o.max_body)) return 1;
    serve_guard_install_alloc_hooks();
    S.o = o;
    S.text_all = getenv("G4_SERVE_TEXT_ALL") && !strcmp(getenv("G4_SERVE_TEXT_ALL"), "1");
    if (o.media_dir && !(S.media_dir_real = realpath(o.media_dir, NULL)))
        return usage_error("--media-dir '%s': not an existing folder", o.media_dir);
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
    S.max_tokens = o.max_tokens ? o.max_tokens : g4cu_model_n_ctx(S.model);
    S.slot_job = calloc((size_t)o.parallel, sizeof *S.slot_job);
    S.slot_rid = calloc((size_t)o.parallel, sizeof *S.slot_rid);
    S.slot_info = calloc((size_t)o.parallel, sizeof *S.slot_info);
    if (!S.slot_job || !S.slot_rid || !S.slot_info) {
        fprintf(stderr, "g4cu: serve: out of memory for %d slots\n", o.parallel);
        return 2;
    }
    { // the tokenizer again, for the routes that take or give ids
        char *tp = o.tokenizer ? strdup(o.tokenizer) : malloc(strlen(o.pkg) + 32);
        if (!tp) {
            fprintf(stderr, "g4cu: serve: out of memory\n");
            return 2;
        }
        if (!o.tokenizer) sprintf(tp, "%s/tokenizer.json", o.pkg);
        if (g4cu_tokenizer_load(tp, &S.tok)) {
            fprintf(stderr, "g4cu: %s\n", g4cu_last_error());
            free(tp);
            return 1;
        }
        free(tp);
    }
    { // the slots: KV caches of --n-ctx rows made now, else per slot by its first request
        g4cu_batch_params bp;
        g4cu_batch_params_default(&bp);
        bp.slots = o.parallel;
        bp.n_ctx = o.n_ctx;
        // (with --n-ctx every slot's cache is made here, not by the first requests: they would
        // wait for 32 caches and graph captures in a row on the scheduler thread)
        if ((rc = g4cu_batch_new(S.model, &bp, &S.batch)) ||
            (rc = g4cu_batch_set_prefill_tokens(S.batch, o.prefill_tokens)) ||
            (o.n_ctx > 0 && (rc = g4cu_batch_reserve(S.batch)))) {
            fprintf(stderr, "g4cu: %s\n", g4cu_last_error());
            return rc == G4CU_EUSER ? 1 : 2;
        }
    }
    // SIGTERM / SIGINT are taken by sigwait below: blocked in every thread made from here on
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    publish_slots();
    pthread_create(&S.sched, NULL, sched_main, NULL);
    pthread_create(&S.single_worker, NULL, single_main, NULL);

    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
            MHD_USE_ITC,
        (uint16_t)o.port, NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR, &addr,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o.timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)o.max_conn, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, serve_guard_notify, NULL, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "g4cu serve: cannot listen on %s:%d (%s)\n", o.host, o.port,
                strerror(errno));
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (serve_guard_listening()) {
        MHD_stop_daemon(d);
        return 2;
    }
    printf("g4cu serve: listening on http://%s:%u (model %s, backend %s, %d slots, queue %d)\n",
           o.host, di ? (unsigned)di->port : (unsigned)o.port, o.name,
           g4cu_model_backend(S.model), o.parallel, o.queue);
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    // Drain: no new connections (the listening socket closed at once, so a connect is refused
    // rather than left in the backlog), refuse new work, give the requests in flight
    // --drain-timeout seconds, then cancel them (and cut connections still sending).
    const int drain_s = serve_guard_drain_timeout();
    fprintf(stderr, "g4cu serve: %s: finishing the requests in flight (at most %d s)\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT", drain_s);
    MHD_socket ls = MHD_quiesce_daemon(d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    ls = MHD_INVALID_SOCKET;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += drain_s;
    pthread_mutex_lock(&S.mu);
    S.draining = 1;
    while (S.in_flight > 0 || S.n_waiting > 0 || S.n_running > 0) {
        if (!serve_guard_cancelling() &&
            pthread_cond_timedwait(&S.cv, &S.mu, &until) == ETIMEDOUT) {
            fprintf(stderr, "g4cu serve: the drain deadline passed: cancelling %d requests\n",
                    S.in_flight + S.n_waiting);
            serve_guard_cancel_all();
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 5; // the cancelled ones end at their next token
        } else if (serve_guard_cancelling() &&
                   pthread_cond_timedwait(&S.cv, &S.mu, &until) == ETIMEDOUT) {
            break; // (a client that reads nothing: MHD_stop_daemon closes its socket)
        }
    }
    S.stop_workers = 1;
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
    pthread_join(S.sched, NULL);
    pthread_join(S.single_worker, NULL);
    MHD_stop_daemon(d);
    serve_guard_stop();
    g4cu_batch_free(S.batch);
    g4cu_state_free(S.single);
    free(S.slot_job);
    free(S.slot_rid);
    free(S.slot_info);
    free(S.media_dir_real);
    g4cu_tokenizer_free(S.tok);
    g4cu_model_free(S.model);
    fprintf(stderr, "g4cu serve: stopped\n");
    return 0;
}

#endif
