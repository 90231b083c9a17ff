// prep.h: the media front ends of eval's next items (decode, resample, log-mel; decode, resize,
// patches: g4_media_load, all on the host) run ahead on a few worker threads while the stepping
// thread runs the batch (towers, prefill, decode), so the device does not wait for the host
// between items.
//
// Threads: a worker only calls g4_media_load, which reads the package's front-end configs and
// the file and touches no backend, text state or batch: the engine's states stay on the one
// stepping thread (engine/batch.h: one thread per batch). Each job's result depends on its file
// alone and is taken in job order, so a run's predictions and their order are those of one
// thread, whatever the thread count or timing.
//
// Memory: at most `ahead` results are prepared and not yet taken (a worker waits for the
// stepping thread to take one before it starts another), each one item's features (an audio
// clip's log-mel, at most 30 s; an image's patches).
#ifndef G4_EVAL_PREP_H
#define G4_EVAL_PREP_H

#include "engine/media.h"

typedef struct {
    g4_media_kind kind;
    const char *path; // borrowed until the pool is freed
} g4_prep_job;

typedef struct {
    g4_media_input in; // moved to the taker (it frees it)
    int rc;            // g4_media_load's return code
    char *why;         // its error line when rc != G4_OK (new string)
    double seconds;    // the front end's wall time, on the thread that ran it
} g4_prep_result;

typedef struct g4_prep_pool g4_prep_pool;

// Prepares jobs[0..n) (the array is borrowed) in that order on n_threads workers (0: none,
// each job runs on the taker's thread when taken, the one-thread path) keeping at most ahead
// (>= 1) results untaken.
g4_prep_pool *g4_prep_pool_new(g4_media_encoder *e, const g4_prep_job *jobs, int n, int n_threads,
                               int ahead);
// Job i's result, moved into *out, waiting for it when it is not ready (*waited: the seconds
// waited; a job no worker has started yet runs on the taker's thread, and with workers that
// counts as waited). Jobs are taken in order: i is 0, then 1, ...
void g4_prep_pool_take(g4_prep_pool *p, int i, g4_prep_result *out, double *waited);
// The most jobs a worker had started and the taker not yet taken at any time (the memory
// bound: at most ahead; for tests).
int g4_prep_pool_most_ahead(g4_prep_pool *p);
// Stops the workers (after the job each is running) and frees the results not taken.
void g4_prep_pool_free(g4_prep_pool *p);

// The workers for a batch of `batch` items: $G4_EVAL_PREP_THREADS when set (0: none, the
// front ends on the stepping thread, for A/B), else one less than g4_threads() (the stepping
// thread keeps a core), at least 1 and at most min(batch, 8). -1 (an error recorded): a
// malformed $G4_EVAL_PREP_THREADS.
int g4_prep_threads(int batch);

#endif
