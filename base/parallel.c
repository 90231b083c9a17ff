// parallel.c: g4_parallel_for over pthreads, a thread per range started for each call (the
// heavy reference ops run for milliseconds or more; small ones stay on the caller's thread).
#include "base/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "base/base.h"

// Work (in multiply-adds) below which a range is not worth a thread of its own: starting one
// costs tens of microseconds.
#define G4_MIN_WORK_PER_THREAD 65536.0
#define G4_MAX_THREADS         256

static atomic_int g4_thread_count; // 0: the default (all cores)
static _Thread_local int g4_in_worker, g4_last_split;

int g4_parallel_last_split(void) {
    return g4_last_split;
}

int g4_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > G4_MAX_THREADS ? G4_MAX_THREADS : (int)n;
}

int g4_threads(void) {
    int n = atomic_load(&g4_thread_count);
    return n > 0 ? n : g4_cores();
}

void g4_set_threads(int n) {
    G4_ASSERT(n >= 0);
    atomic_store(&g4_thread_count, n > G4_MAX_THREADS ? G4_MAX_THREADS : n);
}

typedef struct {
    g4_range_fn fn;
    void *ctx;
    int lo, hi;
} range_job;

static void *run_range(void *arg) {
    range_job *j = arg;
    g4_in_worker = 1;
    j->fn(j->ctx, j->lo, j->hi);
    return NULL;
}

void g4_parallel_for(int n, double cost, g4_range_fn fn, void *ctx) {
    if (n <= 0) return;
    int nt = g4_threads();
    const double by_work = (double)n * (cost > 1 ? cost : 1) / G4_MIN_WORK_PER_THREAD;
    if (by_work < nt) nt = by_work < 1 ? 1 : (int)by_work;
    if (nt > n) nt = n;
    if (nt <= 1 || g4_in_worker) {
        if (!g4_in_worker) g4_last_split = 1;
        fn(ctx, 0, n);
        return;
    }
    range_job jobs[G4_MAX_THREADS];
    pthread_t tid[G4_MAX_THREADS];
    int started[G4_MAX_THREADS];
    // Range t is [n*t/nt, n*(t+1)/nt): contiguous, sizes differing by at most one.
    for (int t = 0; t < nt; t++)
        jobs[t] =
            (range_job){fn, ctx, (int)((long long)n * t / nt), (int)((long long)n * (t + 1) / nt)};
    for (int t = 1; t < nt; t++)
        started[t] = pthread_create(&tid[t], NULL, run_range, &jobs[t]) == 0;
    g4_in_worker = 1;
    fn(ctx, jobs[0].lo, jobs[0].hi);
    // A range whose thread could not start runs here: the items and their order do not change.
    for (int t = 1; t < nt; t++)
        if (!started[t]) fn(ctx, jobs[t].lo, jobs[t].hi);
    g4_in_worker = 0;
    g4_last_split = nt;
    for (int t = 1; t < nt; t++)
        if (started[t]) pthread_join(tid[t], NULL);
}
