// prep.c: eval's front ends ahead of the batch on worker threads (see prep.h).
#include "eval/prep.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/parallel.h"
#include "base/progress.h"

struct g4_prep_pool {
    g4_media_encoder *e;
    const g4_prep_job *jobs;
    int n, ahead, n_threads;
    g4_prep_result *res;  // [n]
    unsigned char *ready; // [n]
    int claimed, taken;   // the next job a worker starts / the taker takes
    int most_ahead;       // the most jobs started and not yet taken at once (<= ahead)
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t done, room; // a result is ready / a result was taken (or stop)
    pthread_t *th;             // [n_threads]
};

// Job i's front end (on any thread: its error line is copied off this thread's buffer).
static void run_job(g4_prep_pool *p, int i, g4_prep_result *r) {
    memset(r, 0, sizeof *r);
    const double t0 = g4_progress_now();
    r->rc = g4_media_load(p->e, p->jobs[i].kind, p->jobs[i].path, &r->in);
    r->seconds = g4_progress_now() - t0;
    if (r->rc) r->why = g4_strdup(g4_error());
}

static void *worker(void *arg) {
    g4_prep_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop && p->claimed < p->n) {
        if (p->claimed >= p->taken + p->ahead) { // enough prepared: wait for the taker
            pthread_cond_wait(&p->room, &p->mu);
            continue;
        }
        const int i = p->claimed++;
        if (p->claimed - p->taken > p->most_ahead) p->most_ahead = p->claimed - p->taken;
        pthread_mutex_unlock(&p->mu);
        g4_prep_result r;
        run_job(p, i, &r);
        pthread_mutex_lock(&p->mu);
        p->res[i] = r;
        p->ready[i] = 1;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

g4_prep_pool *g4_prep_pool_new(g4_media_encoder *e, const g4_prep_job *jobs, int n, int n_threads,
                               int ahead) {
    G4_ASSERT(n >= 0 && n_threads >= 0 && ahead >= 1);
    g4_prep_pool *p = g4_calloc(1, sizeof *p);
    p->e = e;
    p->jobs = jobs;
    p->n = n;
    p->ahead = ahead;
    p->res = g4_calloc((size_t)n + 1, sizeof *p->res);
    p->ready = g4_calloc((size_t)n + 1, 1);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->done, NULL);
    pthread_cond_init(&p->room, NULL);
    if (n_threads > n) n_threads = n;
    p->th = g4_calloc((size_t)n_threads + 1, sizeof *p->th);
    for (int t = 0; t < n_threads; t++) {
        if (pthread_create(&p->th[t], NULL, worker, p) != 0) break; // fewer workers, or none:
        p->n_threads++;                                             // the taker runs the rest
    }
    return p;
}

void g4_prep_pool_take(g4_prep_pool *p, int i, g4_prep_result *out, double *waited) {
    G4_ASSERT(i == p->taken && i < p->n);
    *waited = 0;
    pthread_mutex_lock(&p->mu);
    if (!p->n_threads || (!p->ready[i] && p->claimed == i)) {
        // no workers, or none has started it yet: run it here (it is the one the taker needs)
        p->claimed = i + 1;
        pthread_mutex_unlock(&p->mu);
        run_job(p, i, out);
        if (p->n_threads) *waited = out->seconds; // (the taker waited for it by running it)
        pthread_mutex_lock(&p->mu);
    } else {
        const double t0 = g4_progress_now();
        while (!p->ready[i]) pthread_cond_wait(&p->done, &p->mu);
        *waited = g4_progress_now() - t0;
        *out = p->res[i];
        memset(&p->res[i], 0, sizeof p->res[i]);
        p->ready[i] = 0;
    }
    p->taken = i + 1;
    pthread_cond_broadcast(&p->room);
    pthread_mutex_unlock(&p->mu);
}

int g4_prep_pool_most_ahead(g4_prep_pool *p) {
    pthread_mutex_lock(&p->mu);
    const int n = p->most_ahead;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void g4_prep_pool_free(g4_prep_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->room);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->n_threads; t++) pthread_join(p->th[t], NULL);
    for (int i = 0; i < p->n; i++)
        if (p->ready[i]) {
            g4_media_input_free(&p->res[i].in);
            free(p->res[i].why);
        }
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->room);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p->res);
    free(p->ready);
    free(p);
}

int g4_prep_threads(int batch) {
    const char *s = getenv("G4_EVAL_PREP_THREADS");
    if (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (*end || v < 0 || v > 64)
            return g4_fail(G4_EUSER, "G4_EVAL_PREP_THREADS='%s': expected 0..64 threads", s), -1;
        return (int)v;
    }
    int n = g4_threads() - 1, cap = batch < 8 ? batch : 8;
    if (n > cap) n = cap;
    return n < 1 ? 1 : n;
}
