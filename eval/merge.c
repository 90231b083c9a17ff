// merge.c: g4_eval_merge: the prediction files of a directory (an unsharded run's, or every
// shard's) -> one corpus-level score (see runner.h). The score is computed from the predictions
// themselves, never from the shards' scores: WER is total edits / total words over the whole
// corpus, not a mean of shard WERs.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "eval/eval_scores.h"
#include "eval/manifest.h"
#include "eval/predictions.h"
#include "eval/run_file.h"
#include "eval/runner.h"

typedef struct {
    char *name;           // file name in the directory
    int shard_i, shard_n; // n 1: unsharded
} found_file;

static int cmp_found(const void *a, const void *b) {
    const found_file *x = a, *y = b;
    if (x->shard_n != y->shard_n) return x->shard_n - y->shard_n;
    return x->shard_i - y->shard_i;
}

// "<stem>.jsonl" / "<stem>.shard-I-of-N.jsonl" (ext: ".jsonl" or ".json"): 1 with *i, *n set.
static int parse_name(const char *name, const char *stem, const char *ext, int *i, int *n) {
    size_t ls = strlen(stem), le = strlen(ext), ln = strlen(name);
    if (ln < ls + le || strncmp(name, stem, ls) || strcmp(name + ln - le, ext)) return 0;
    if (ln == ls + le) {
        *i = 0, *n = 1;
        return 1;
    }
    char tail[64];
    if (ln - ls - le >= sizeof tail) return 0;
    memcpy(tail, name + ls, ln - ls - le);
    tail[ln - ls - le] = 0;
    int a, b, used = 0;
    if (sscanf(tail, ".shard-%d-of-%d%n", &a, &b, &used) != 2 || tail[used] || b < 2 || a < 0 ||
        a >= b)
        return 0;
    *i = a, *n = b;
    return 1;
}

// The files of dir matching stem + ext, sorted (unsharded first, then by shard).
static int list_files(const char *dir, const char *stem, const char *ext, found_file **out,
                      int *n_out) {
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return g4_fail(G4_EUSER, "%s: cannot open the directory", dir);
    struct dirent *e;
    int cap = 0;
    while ((e = readdir(d))) {
        int i, n;
        if (!parse_name(e->d_name, stem, ext, &i, &n)) continue;
        if (*n_out == cap)
            *out = g4_realloc(*out, sizeof **out * (size_t)(cap = cap ? 2 * cap : 8));
        (*out)[(*n_out)++] = (found_file){g4_strdup(e->d_name), i, n};
    }
    closedir(d);
    if (*n_out) qsort(*out, (size_t)*n_out, sizeof **out, cmp_found);
    return G4_OK;
}

static void free_files(found_file *f, int n) {
    for (int i = 0; i < n; i++) free(f[i].name);
    free(f);
}

int g4_eval_merge(const char *dir, const g4_eval_task *t, const char *manifest, int limit,
                  g4_eval_run_result *res) {
    memset(res, 0, sizeof *res);
    found_file *pf = NULL, *rf = NULL;
    int n_pf = 0, n_rf = 0;
    g4_eval_run_info *runs = NULL;
    g4_eval_preds *preds = NULL;
    const g4_eval_pred **paired = NULL;
    char **paths = NULL;
    g4_eval_manifest m = {0};
    g4_eval_scores sc = {0};
    int *sel = NULL, n_sel = 0;
    char *manifest_path = manifest ? g4_strdup(manifest) : NULL;
    int rc = list_files(dir, "predictions", ".jsonl", &pf, &n_pf);
    if (!rc && n_pf == 0)
        rc = g4_fail(G4_EUSER, "%s: no predictions*.jsonl files (expected the --out of g4cu eval)",
                     dir);
    if (rc) goto done;
    for (int i = 1; i < n_pf && !rc; i++)
        if (pf[i].shard_n > 1 && pf[0].shard_n > 1 && pf[i].shard_n != pf[0].shard_n)
            rc = g4_fail(G4_EUSER, "%s: holds shards of two different splits (%s and %s)", dir,
                         pf[0].name, pf[i].name);
    if (rc) goto done;

    // The run files: task, manifest and limit must agree; package and backend are reported
    // when they do.
    if ((rc = list_files(dir, "run", ".json", &rf, &n_rf))) goto done;
    runs = g4_calloc((size_t)n_rf + 1, sizeof *runs);
    const char *package = NULL, *backend = NULL;
    int mixed_pkg = 0, max_new = 0, keep_stop = 0, rec_limit = -1;
    for (int i = 0; i < n_rf && !rc; i++) {
        char *p = g4_path_join(dir, rf[i].name);
        int have;
        rc = g4_eval_run_info_read(p, &runs[i], &have);
        const g4_eval_run_info *r = &runs[i];
        if (!rc && strcmp(r->task, t->name))
            rc = g4_fail(G4_EUSER, "%s: a run of task '%s', not '%s'", p, r->task, t->name);
        if (!rc && i > 0 && strcmp(r->manifest, runs[0].manifest) && !manifest)
            rc = g4_fail(G4_EUSER, "%s: manifest %s differs from %s's %s; pass --manifest", p,
                         r->manifest, rf[0].name, runs[0].manifest);
        if (!rc && i > 0 && r->limit != runs[0].limit && limit < 0)
            rc = g4_fail(G4_EUSER, "%s: --limit %d differs from %s's %d; pass --limit", p, r->limit,
                         rf[0].name, runs[0].limit);
        if (!rc && i > 0 && (r->max_new != max_new || r->keep_stop != keep_stop))
            rc = g4_fail(G4_EUSER,
                         "%s: generated with max_new %d%s, %s with max_new %d%s: the shards are "
                         "not one run",
                         p, r->max_new, r->keep_stop ? " and the \"\\n\\n\" stop" : "", rf[0].name,
                         max_new, keep_stop ? " and the \"\\n\\n\" stop" : "");
        if (!rc && i == 0) {
            max_new = r->max_new, keep_stop = r->keep_stop, rec_limit = r->limit;
            package = r->package, backend = r->backend;
        } else if (!rc) {
            mixed_pkg |= !r->package || !package || strcmp(r->package, package) || !r->backend ||
                         !backend || strcmp(r->backend, backend);
        }
        free(p);
    }
    if (rc) goto done;
    if (!manifest_path) {
        if (n_rf == 0) {
            rc = g4_fail(G4_EUSER, "%s: no run*.json records the manifest; pass --manifest M", dir);
            goto done;
        }
        manifest_path = g4_strdup(runs[0].manifest);
    }
    if (limit < 0) limit = rec_limit > 0 ? rec_limit : 0;

    if ((rc = g4_eval_manifest_read(manifest_path, t, NULL, &m))) goto done;
    g4_eval_select(m.n, limit, 0, 1, &sel, &n_sel);
    res->selected = n_sel;
    preds = g4_calloc((size_t)n_pf, sizeof *preds);
    paths = g4_calloc((size_t)n_pf, sizeof *paths);
    for (int i = 0; i < n_pf && !rc; i++) {
        paths[i] = g4_path_join(dir, pf[i].name);
        rc = g4_eval_preds_read(paths[i], t->name, 0, 0, &preds[i]);
    }
    if (rc) goto done;
    // One model: every line of every file made with one fingerprint (fingerprint.h); a file
    // from another tool has none on any line, and is merged only with its like.
    const g4_eval_pred *first = NULL;
    const char *first_path = NULL;
    for (int i = 0; i < n_pf && !rc; i++)
        for (int j = 0; j < preds[i].n && !rc; j++) {
            const g4_eval_pred *p = &preds[i].v[j];
            if (!first) {
                first = p, first_path = paths[i];
                continue;
            }
            const char *a = first->fingerprint, *b = p->fingerprint;
            if (!a != !b || (a && strcmp(a, b)))
                rc = g4_fail(G4_EUSER,
                             "%s:%d: fingerprint %s, but %s:%d's is %s: these predictions were "
                             "made by different packages, tokenizers or settings",
                             paths[i], p->line, b ? b : "(none)", first_path, first->line,
                             a ? a : "(none)");
        }
    if (rc) goto done;
    if ((rc = g4_eval_match(&m, sel, n_sel, preds, n_pf, &paired))) goto done;
    if ((rc = g4_eval_score(&m, sel, n_sel, paired, &sc))) goto done;
    g4_eval_meta meta = {
        .manifest = manifest_path,
        .pred_files = (const char *const *)paths,
        .n_pred_files = n_pf,
        .manifest_items = m.n,
        .limit = limit,
        .merged_shards = n_pf,
        .max_new = max_new,
        .keep_stop = keep_stop,
        .package = mixed_pkg ? "(differs between the runs)" : package,
        .backend = mixed_pkg ? NULL : backend,
    };
    if ((rc = g4_eval_scores_write(dir, "scores", &sc, &meta))) goto done;
    res->value = sc.value;
    res->count = sc.count;
    res->failed = sc.failed;
    res->resumed = n_sel;
    res->scores_path = g4_sprintf("%s/scores.json", dir);
done:
    g4_eval_scores_free(&sc);
    free(paired);
    for (int i = 0; preds && i < n_pf; i++) g4_eval_preds_free(&preds[i]);
    free(preds);
    for (int i = 0; paths && i < n_pf; i++) free(paths[i]);
    free(paths);
    for (int i = 0; runs && i < n_rf; i++) g4_eval_run_info_free(&runs[i]);
    free(runs);
    free_files(pf, n_pf);
    free_files(rf, n_rf);
    free(sel);
    free(manifest_path);
    g4_eval_manifest_free(&m);
    return rc;
}
