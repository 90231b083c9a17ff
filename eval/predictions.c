// predictions.c: reading and appending the predictions file (see predictions.h).
#include "eval/predictions.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/generate.h"
#include "eval/pystr.h"
#include "loader/json.h"

static int stop_reason_of(const char *s) {
    for (int r = G4_STOP_EOS; r <= G4_STOP_CONTEXT; r++)
        if (!strcmp(s, g4_stop_reason_name((g4_stop_reason)r))) return r;
    return -1;
}

// An optional number field: -1 when absent; an error when present and not a number >= 0.
static int opt_num(const char *path, int line, const cJSON *o, const char *key, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = -1;
    if (!v) return G4_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0))
        return g4_fail(G4_EUSER, "%s:%d: field '%s': expected a number >= 0, got %s", path, line,
                       key, cJSON_IsNumber(v) ? "a negative number" : g4_json_type_name(v));
    *out = v->valuedouble;
    return G4_OK;
}

static int parse_line(const char *path, int line, const char *text, size_t len, const char *task,
                      g4_eval_pred *p) {
    memset(p, 0, sizeof *p);
    p->line = line;
    if (strlen(text) != len)
        return g4_fail(G4_EUSER, "%s:%d: the line holds a NUL byte (expected one JSON object)",
                       path, line);
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithOpts(text, &end, 1);
    if (!o)
        return g4_fail(G4_EUSER, "%s:%d: not valid JSON (at column %ld); expected one object", path,
                       line, end ? (long)(end - text) + 1 : 1L);
    int rc = G4_OK;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    const cJSON *pred = cJSON_GetObjectItemCaseSensitive(o, "prediction");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "task");
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(o, "stop_reason");
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(o, "fingerprint");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
    if (!cJSON_IsObject(o))
        rc = g4_fail(G4_EUSER, "%s:%d: expected a JSON object, got %s", path, line,
                     g4_json_type_name(o));
    else if (!cJSON_IsString(id) || !*id->valuestring)
        rc = g4_fail(G4_EUSER, "%s:%d: field 'id': expected a non-empty string, got %s", path, line,
                     id ? g4_json_type_name(id) : "nothing (the field is missing)");
    else if (!cJSON_IsString(pred))
        rc = g4_fail(G4_EUSER, "%s:%d: field 'prediction': expected a string, got %s", path, line,
                     pred ? g4_json_type_name(pred) : "nothing (the field is missing)");
    else if (t && !cJSON_IsString(t))
        rc = g4_fail(G4_EUSER, "%s:%d: field 'task': expected a string, got %s", path, line,
                     g4_json_type_name(t));
    else if (t && task && strcmp(t->valuestring, task))
        rc = g4_fail(G4_EUSER,
                     "%s:%d: field 'task': the file holds predictions of task '%s', not '%s'", path,
                     line, t->valuestring, task);
    else if (fp && (!cJSON_IsString(fp) || strlen(fp->valuestring) != 16))
        rc = g4_fail(G4_EUSER, "%s:%d: field 'fingerprint': expected 16 hex digits", path, line);
    else if (err && !cJSON_IsString(err))
        rc = g4_fail(G4_EUSER, "%s:%d: field 'error': expected a string, got %s", path, line,
                     g4_json_type_name(err));
    else if (stop && (!cJSON_IsString(stop) || stop_reason_of(stop->valuestring) < 0))
        rc = g4_fail(G4_EUSER,
                     "%s:%d: field 'stop_reason': expected eos, stop_string, max_new or context",
                     path, line);
    if (!rc) {
        char *what = g4_sprintf("%s:%d: field 'prediction'", path, line);
        rc = g4_py_check_utf8(pred->valuestring, what);
        free(what);
    }
    double prompt = -1, fresh = -1;
    if (!rc) rc = opt_num(path, line, o, "item_ms", &p->item_ms);
    if (!rc) rc = opt_num(path, line, o, "prefill_ms", &p->prefill_ms);
    if (!rc) rc = opt_num(path, line, o, "decode_ms", &p->decode_ms);
    if (!rc) rc = opt_num(path, line, o, "prompt_tokens", &prompt);
    if (!rc) rc = opt_num(path, line, o, "new_tokens", &fresh);
    if (!rc) {
        p->id = g4_strdup(id->valuestring);
        p->prediction = g4_strdup(pred->valuestring);
        p->prompt_tokens = prompt < 0 ? -1 : prompt > 1e9 ? 1000000000 : (int)prompt;
        p->new_tokens = fresh < 0 ? -1 : fresh > 1e9 ? 1000000000 : (int)fresh;
        p->stop_reason = stop ? stop_reason_of(stop->valuestring) : -1;
        p->fingerprint = fp ? g4_strdup(fp->valuestring) : NULL;
        p->error = err ? g4_strdup(err->valuestring) : NULL;
    }
    cJSON_Delete(o);
    return rc;
}

int g4_eval_preds_read(const char *path, const char *task, int missing_ok, int repair,
                       g4_eval_preds *out) {
    memset(out, 0, sizeof *out);
    out->path = g4_strdup(path);
    if (missing_ok && access(path, F_OK) != 0 && errno == ENOENT) return G4_OK;
    char *text = NULL;
    size_t size = 0;
    int rc = g4_read_file_max(path, G4_MAX_LINES_BYTES, &text, &size);
    // A predictions file is the runner's own state, which it appends to (and a resume
    // continues): not an input that an output must not replace.
    g4_forget_input(path);
    if (rc) {
        g4_eval_preds_free(out);
        return rc;
    }
    // A last line without '\n' is a write the process did not finish.
    size_t whole = size;
    while (whole > 0 && text[whole - 1] != '\n') whole--;
    int lines_before = 0;
    for (size_t k = 0; k < whole; k++) lines_before += text[k] == '\n';
    if (whole < size) {
        if (!repair) {
            rc = g4_fail(G4_EUSER,
                         "%s:%d: torn last line (%zu bytes without a newline: the run was "
                         "interrupted); finish it with g4cu eval ... --resume",
                         path, lines_before + 1, size - whole);
            goto done;
        }
        out->torn_bytes = (long)(size - whole);
        if (truncate(path, (off_t)whole) != 0) {
            rc = g4_fail(G4_EUSER, "%s: cannot truncate the torn last line: %s", path,
                         strerror(errno));
            goto done;
        }
    }
    g4_strmap ids;
    g4_strmap_init(&ids, 64);
    int cap = 0, line = 0;
    for (size_t at = 0; at < whole && !rc;) {
        char *s = text + at;
        char *nl = memchr(s, '\n', whole - at);
        size_t len = (size_t)(nl - s);
        at += len + 1;
        line++;
        *nl = 0;
        if (len && s[len - 1] == '\r') s[--len] = 0;
        size_t k = 0;
        while (k < len && (s[k] == ' ' || s[k] == '\t')) k++;
        if (k == len) continue;
        if (out->n == cap)
            out->v = g4_realloc(out->v, sizeof *out->v * (size_t)(cap = cap ? 2 * cap : 64));
        if ((rc = parse_line(path, line, s, len, task, &out->v[out->n]))) break;
        g4_eval_pred *p = &out->v[out->n++];
        if (!g4_strmap_put(&ids, p->id, out->n - 1))
            rc = g4_fail(G4_EUSER, "%s:%d: field 'id': '%s' was already predicted on line %d", path,
                         line, p->id, out->v[g4_strmap_get(&ids, p->id)].line);
    }
    g4_strmap_free(&ids);
done:
    free(text);
    if (rc) g4_eval_preds_free(out);
    return rc;
}

void g4_eval_preds_free(g4_eval_preds *p) {
    for (int i = 0; i < p->n; i++) {
        free(p->v[i].id);
        free(p->v[i].prediction);
        free(p->v[i].fingerprint);
        free(p->v[i].error);
    }
    free(p->v);
    free(p->path);
    memset(p, 0, sizeof *p);
}

int g4_eval_pred_file_open(const char *path, g4_eval_pred_file *f) {
    f->path = NULL;
    int rc = g4_open_output_append(path, &f->fd);
    if (rc) return rc;
    // One writer per file: a second run on the same file (say, a resume while a killed run's
    // process is still alive) would interleave its lines with the first's.
    if (flock(f->fd, LOCK_EX | LOCK_NB) != 0) {
        int busy = errno == EWOULDBLOCK;
        rc = g4_fail(G4_EUSER, "%s: %s", path,
                     busy ? "another process is writing it (a g4cu eval still running?)"
                          : strerror(errno));
        close(f->fd);
        f->fd = -1;
        return rc;
    }
    f->path = g4_strdup(path);
    return G4_OK;
}

int g4_eval_pred_file_append(g4_eval_pred_file *f, const char *json) {
    size_t n = strlen(json);
    char *buf = g4_malloc(n + 1);
    memcpy(buf, json, n);
    buf[n] = '\n';
    // One write of the whole line: a crash leaves either the line or a prefix of it (a torn
    // line, dropped on --resume), never a line merged with the next.
    size_t done = 0;
    while (done < n + 1) {
        ssize_t w = write(f->fd, buf + done, n + 1 - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            free(buf);
            return g4_fail(G4_EUSER, "%s: write failed: %s", f->path,
                           w < 0 ? strerror(errno) : "nothing written");
        }
        done += (size_t)w;
    }
    free(buf);
    if (fsync(f->fd) != 0)
        return g4_fail(G4_EUSER, "%s: fsync failed: %s", f->path, strerror(errno));
    return G4_OK;
}

void g4_eval_pred_file_close(g4_eval_pred_file *f) {
    if (f->path && f->fd >= 0) close(f->fd);
    free(f->path);
    f->path = NULL;
    f->fd = -1;
}
