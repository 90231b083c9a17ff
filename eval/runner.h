// runner.h: the eval runner behind `g4cu eval` and `g4cu eval-merge`: a manifest of one lmms-eval
// task (eval_task.h, manifest.h) -> prompts built as the task's YAML builds them -> greedy
// generation on a package (engine/pipeline.h) -> predictions appended as they come
// (predictions.h) -> scores as lmms-eval aggregates them (eval_scores.h).
//
// Files in the output directory (stem S = "" or ".shard-I-of-N" for shard I of N):
//   run<S>.json          the run's settings (task, absolute manifest path, limit, shard,
//                        package, tokenizer, backend, max_new, stop handling); written at start
//   predictions<S>.jsonl one line per item, written and fsync'ed as each item finishes
//   scores<S>.json/.md   the scores of this run's items (a shard's own, for a sharded run)
// eval-merge writes scores.json / scores.md over all the prediction files of the directory.
//
// Resume: the items already in predictions<S>.jsonl are skipped; a torn last line (a crash
// mid-write) is dropped first. Without resume an existing non-empty predictions file is an
// error, so two runs never mix by accident. Generation settings (task, max_new, stop handling)
// must match the run file's on resume, and every line already there must carry this run's
// fingerprint (the package, tokenizer and settings that made it, fingerprint.h).
// An item that is a user error (a prompt longer than the context, a corrupt media file) is
// recorded as failed with its reason and the run goes on (predictions.h); the scores count
// those items.
#ifndef G4_EVAL_RUNNER_H
#define G4_EVAL_RUNNER_H

#include <stdio.h>

#include "eval/eval_scores.h"
#include "eval/eval_task.h"
#include "kernels/ops.h"

typedef struct {
    const g4_eval_task *task;
    const char *manifest;  // path
    const char *package;   // package directory
    const char *tokenizer; // NULL: <package>/tokenizer.json
    g4_backend *be;        // the backend to run on (NULL: the CPU; kernels/backend_select.h
                           // picks one by name)
    const char *backend;   // its name, for the run and scores files ("cpu" when NULL)
    const char *out_dir;   // created when missing (its parent must exist)
    const char *data_dir;  // NULL: media paths relative to the manifest's directory
    int shard_i, shard_n;  // shard_n 0 or 1: no sharding
    int resume;
    int limit;      // 0: every item
    int keep_stop;  // 1: keep lmms-eval's injected "\n\n" stop (default: ignored, as the
                    // benchmark did)
    int max_new;    // 0: the task's max_new_tokens (anything else is not the benchmark's)
    FILE *progress; // progress bar destination (NULL: none)
    FILE *log;      // one-line notices (a torn line dropped, items resumed); NULL: none
    int batch;      // items generated at once (engine/batch.h; 0 or 1: one at a time); the
                    // predictions are written in the manifest's order either way
} g4_eval_run_opts;

typedef struct {
    int selected;    // items this run selects
    int resumed;     // of those, predicted before this process started
    int predicted;   // predicted by this process
    int failed;      // of the selected items, those recorded as failed (their "error" field)
    long torn_bytes; // bytes of a torn last line dropped on resume
    double value;    // the task's headline metric over the selected items
    int count;
    char *scores_path; // <out_dir>/scores<S>.json (new string)
    int has_split;     // 1: items ran in this process, and split says where the time went
    g4_eval_split split; // (also in the scores file's "timings")
} g4_eval_run_result;
void g4_eval_run_result_free(g4_eval_run_result *r);

int g4_eval_run(const g4_eval_run_opts *o, g4_eval_run_result *res);

// Merges every predictions*.jsonl of dir into the corpus-level score of the task
// (dir/scores.json, dir/scores.md). manifest NULL: the one the run files record (they must
// agree); limit < 0: the recorded one (0 when none). Every selected id must be predicted
// exactly once over all the files; a torn line is an error (resume that shard first).
int g4_eval_merge(const char *dir, const g4_eval_task *t, const char *manifest, int limit,
                  g4_eval_run_result *res);

// "" or ".shard-I-of-N" (new string).
char *g4_eval_shard_suffix(int shard_i, int shard_n);

#endif
