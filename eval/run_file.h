// run_file.h: the settings of one eval run, kept beside its predictions (run<S>.json, see
// runner.h) so that --resume can refuse to continue a file with other generation settings, and
// eval-merge can find the manifest and the limit the shards were run with.
//
//   {"format": "g4cu-eval-run", "version": 1, "task", "manifest" (absolute), "data_dir",
//    "limit" (0: none), "shard": [i, n] (n = 1 when unsharded), "package" (absolute),
//    "tokenizer", "backend", "max_new", "keep_stop",
//    "fingerprint": {"value", "package", "tokenizer", "options"} (fingerprint.h; absent in
//    files of an older g4cu)}
#ifndef G4_EVAL_RUN_FILE_H
#define G4_EVAL_RUN_FILE_H

#include "eval/fingerprint.h"
#include "eval/runner.h"

typedef struct {
    char *task;
    char *manifest;
    char *data_dir; // NULL: none given
    int limit;
    int shard_i, shard_n;
    char *package;
    char *tokenizer; // NULL: the package's
    char *backend;
    int max_new;
    int keep_stop;
    g4_eval_fingerprint fp; // fp.value[0] == 0: not recorded
} g4_eval_run_info;

// The settings of a run with these options (paths made absolute) and its fingerprint (which
// reads the package's configs and tables and the tokenizer).
int g4_eval_run_info_make(const g4_eval_run_opts *o, g4_eval_run_info *out);
void g4_eval_run_info_free(g4_eval_run_info *r);
int g4_eval_run_info_write(const char *path, const g4_eval_run_info *r);
// Reads path into *out; *have = 0 (and G4_OK) when the file does not exist.
int g4_eval_run_info_read(const char *path, g4_eval_run_info *out, int *have);
// G4_OK when a run with `now` may append to the predictions of `before` (same task, max_new
// and stop handling); else a user error naming path and the setting.
int g4_eval_run_info_compatible(const g4_eval_run_info *before, const g4_eval_run_info *now,
                                const char *path);

#endif
