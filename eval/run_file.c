// run_file.c: run<S>.json (see run_file.h).
#include "eval/run_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "loader/json.h"

// An absolute form of path (realpath when it exists, else cwd + path), new string.
static char *absolute(const char *path) {
    if (!path) return NULL;
    char buf[PATH_MAX];
    if (realpath(path, buf)) return g4_strdup(buf);
    if (path[0] == '/' || !getcwd(buf, sizeof buf)) return g4_strdup(path);
    return g4_path_join(buf, path);
}

int g4_eval_run_info_make(const g4_eval_run_opts *o, g4_eval_run_info *out) {
    memset(out, 0, sizeof *out);
    out->task = g4_strdup(o->task->name);
    out->manifest = absolute(o->manifest);
    out->data_dir = absolute(o->data_dir);
    out->limit = o->limit > 0 ? o->limit : 0;
    out->shard_i = o->shard_n > 1 ? o->shard_i : 0;
    out->shard_n = o->shard_n > 1 ? o->shard_n : 1;
    out->package = absolute(o->package);
    out->tokenizer = absolute(o->tokenizer);
    out->backend = g4_strdup(o->backend ? o->backend : "cpu");
    out->max_new = o->max_new > 0 ? o->max_new : o->task->max_new;
    out->keep_stop = o->keep_stop ? 1 : 0;
    int rc = g4_eval_fingerprint_make(o, &out->fp);
    if (rc) g4_eval_run_info_free(out);
    return rc;
}

void g4_eval_run_info_free(g4_eval_run_info *r) {
    free(r->task);
    free(r->manifest);
    free(r->data_dir);
    free(r->package);
    free(r->tokenizer);
    free(r->backend);
    g4_eval_fingerprint_free(&r->fp);
    memset(r, 0, sizeof *r);
}

static void add_str(cJSON *o, const char *k, const char *v) {
    if (v)
        cJSON_AddStringToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

int g4_eval_run_info_write(const char *path, const g4_eval_run_info *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "g4cu-eval-run");
    cJSON_AddNumberToObject(o, "version", 1);
    add_str(o, "task", r->task);
    add_str(o, "manifest", r->manifest);
    add_str(o, "data_dir", r->data_dir);
    cJSON_AddNumberToObject(o, "limit", r->limit);
    cJSON *sh = cJSON_AddArrayToObject(o, "shard");
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(r->shard_i));
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(r->shard_n));
    add_str(o, "package", r->package);
    add_str(o, "tokenizer", r->tokenizer);
    add_str(o, "backend", r->backend);
    cJSON_AddNumberToObject(o, "max_new", r->max_new);
    cJSON_AddBoolToObject(o, "keep_stop", r->keep_stop);
    if (r->fp.value[0]) {
        cJSON *f = cJSON_AddObjectToObject(o, "fingerprint");
        cJSON_AddStringToObject(f, "value", r->fp.value);
        cJSON_AddStringToObject(f, "package", r->fp.package);
        cJSON_AddStringToObject(f, "tokenizer", r->fp.tokenizer);
        add_str(f, "options", r->fp.options);
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    char *text = g4_sprintf("%s\n", s);
    free(s);
    int rc = g4_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

int g4_eval_run_info_read(const char *path, g4_eval_run_info *out, int *have) {
    memset(out, 0, sizeof *out);
    *have = 0;
    if (access(path, F_OK) != 0 && errno == ENOENT) return G4_OK;
    g4_json j;
    int rc = g4_json_open(path, &j);
    g4_forget_input(path); // the run's own settings, rewritten by the run that reads them
    if (rc) return rc;
    const cJSON *root = j.root;
    char *fmt = NULL;
    int shard[2] = {0, 1}, n_shard = 0;
    if (!(rc = g4_json_str(&j, root, "format", 1, &fmt)) && strcmp(fmt, "g4cu-eval-run"))
        rc = g4_fail(G4_EUSER, "%s: format '%s', expected 'g4cu-eval-run'", path, fmt);
    free(fmt);
    if (!rc) rc = g4_json_str(&j, root, "task", 1, &out->task);
    if (!rc) rc = g4_json_str(&j, root, "manifest", 1, &out->manifest);
    if (!rc && cJSON_IsString(g4_json_at(root, "data_dir")))
        rc = g4_json_str(&j, root, "data_dir", 0, &out->data_dir);
    if (!rc) rc = g4_json_int(&j, root, "limit", 1, 0, &out->limit);
    if (!rc) rc = g4_json_int_list(&j, root, "shard", 1, shard, 2, &n_shard);
    if (!rc && (n_shard != 2 || shard[1] < 1 || shard[0] < 0 || shard[0] >= shard[1]))
        rc = g4_fail(G4_EUSER, "%s: shard: expected [i, n] with 0 <= i < n", path);
    out->shard_i = shard[0], out->shard_n = shard[1];
    if (!rc && cJSON_IsString(g4_json_at(root, "package")))
        rc = g4_json_str(&j, root, "package", 0, &out->package);
    if (!rc && cJSON_IsString(g4_json_at(root, "tokenizer")))
        rc = g4_json_str(&j, root, "tokenizer", 0, &out->tokenizer);
    if (!rc && cJSON_IsString(g4_json_at(root, "backend")))
        rc = g4_json_str(&j, root, "backend", 0, &out->backend);
    if (!rc) rc = g4_json_int(&j, root, "max_new", 1, 0, &out->max_new);
    if (!rc) rc = g4_json_bool(&j, root, "keep_stop", 1, 0, &out->keep_stop);
    if (!rc && g4_json_at(root, "fingerprint")) {
        char *v[4] = {0};
        static const char *const keys[4] = {"fingerprint.value", "fingerprint.package",
                                            "fingerprint.tokenizer", "fingerprint.options"};
        for (int k = 0; k < 4 && !rc; k++) rc = g4_json_str(&j, root, keys[k], 1, &v[k]);
        for (int k = 0; k < 3 && !rc; k++)
            if (strlen(v[k]) != 16)
                rc = g4_fail(G4_EUSER, "%s: %s: expected 16 hex digits", path, keys[k]);
        if (!rc) {
            memcpy(out->fp.value, v[0], 17);
            memcpy(out->fp.package, v[1], 17);
            memcpy(out->fp.tokenizer, v[2], 17);
            out->fp.options = v[3];
            v[3] = NULL;
        }
        for (int k = 0; k < 4; k++) free(v[k]);
    }
    g4_json_close(&j);
    if (rc)
        g4_eval_run_info_free(out);
    else
        *have = 1;
    return rc;
}

int g4_eval_run_info_compatible(const g4_eval_run_info *before, const g4_eval_run_info *now,
                                const char *path) {
    if (strcmp(before->task, now->task))
        return g4_fail(G4_EUSER, "%s: the predictions are of task '%s', not '%s'", path,
                       before->task, now->task);
    if (before->max_new != now->max_new)
        return g4_fail(G4_EUSER,
                       "%s: the earlier run used max_new %d, this one %d; resume with the same "
                       "setting or start a new --out",
                       path, before->max_new, now->max_new);
    if (before->keep_stop != now->keep_stop)
        return g4_fail(G4_EUSER,
                       "%s: the earlier run %s the \"\\n\\n\" stop, this one %s; resume with the "
                       "same setting or start a new --out",
                       path, before->keep_stop ? "kept" : "ignored",
                       now->keep_stop ? "keeps it" : "ignores it");
    return G4_OK;
}
