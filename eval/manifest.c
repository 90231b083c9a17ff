// manifest.c: eval manifests (see manifest.h).
#include "eval/manifest.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "eval/pystr.h"
#include "loader/json.h"

// Where one line is being read, for messages.
typedef struct {
    const char *path;
    int line;
} loc;

static int field_error(const loc *l, const char *field, const char *expected, const cJSON *got) {
    return g4_fail(G4_EUSER, "%s:%d: field '%s': expected %s, got %s", l->path, l->line, field,
                   expected, got ? g4_json_type_name(got) : "nothing (the field is missing)");
}

// A string that must be valid UTF-8 (cJSON passes raw bytes through unchecked).
static int utf8_ok(const loc *l, const char *field, const char *s) {
    char *what = g4_sprintf("%s:%d: field '%s'", l->path, l->line, field);
    int rc = g4_py_check_utf8(s, what);
    free(what);
    return rc;
}

// obj[field] as a new string: required (an error when absent), or optional (*out NULL when
// absent). nonempty: "" is an error too.
static int get_str(const loc *l, const cJSON *obj, const char *field, int required, int nonempty,
                   char **out) {
    *out = NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
    if (!v && !required) return G4_OK;
    if (!cJSON_IsString(v) || !v->valuestring)
        return field_error(l, field, nonempty ? "a non-empty string" : "a string", v);
    if (nonempty && !*v->valuestring)
        return g4_fail(G4_EUSER, "%s:%d: field '%s': expected a non-empty string, got \"\"",
                       l->path, l->line, field);
    int rc = utf8_ok(l, field, v->valuestring);
    if (rc) return rc;
    *out = g4_strdup(v->valuestring);
    return G4_OK;
}

// "answers" (or "answer"): a string or a list of strings; chartqa takes exactly one.
static int get_answers(const loc *l, const cJSON *obj, const g4_eval_task *t, g4_eval_item *it) {
    const char *field = "answers";
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "answers");
    const cJSON *alt = cJSON_GetObjectItemCaseSensitive(obj, "answer");
    if (v && alt)
        return g4_fail(G4_EUSER, "%s:%d: field 'answer': give 'answers' or 'answer', not both",
                       l->path, l->line);
    if (!v && alt) v = alt, field = "answer";
    const char *expected = t->id == G4_EVAL_CHARTQA
                               ? "one answer (a string, or a list of one string)"
                               : "a string or a non-empty list of strings";
    int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 1) {
        if (cJSON_IsArray(v))
            return g4_fail(G4_EUSER, "%s:%d: field '%s': expected %s, got an empty list", l->path,
                           l->line, field, expected);
        return field_error(l, field, expected, v);
    }
    if (t->id == G4_EVAL_CHARTQA && n != 1)
        return g4_fail(G4_EUSER,
                       "%s:%d: field '%s': expected %s (ChartQA scores one target), got a list "
                       "of %d",
                       l->path, l->line, field, expected, n);
    it->answers = g4_calloc((size_t)n, sizeof(char *));
    for (int k = 0; k < n; k++) {
        const cJSON *a = cJSON_IsString(v) ? v : cJSON_GetArrayItem(v, k);
        if (!cJSON_IsString(a) || !a->valuestring) {
            char *what = g4_sprintf("%s[%d]", field, k);
            int rc = field_error(l, what, "a string", a);
            free(what);
            return rc;
        }
        char *what = g4_sprintf("%s[%d]", field, k);
        int rc = utf8_ok(l, what, a->valuestring);
        free(what);
        if (rc) return rc;
        it->answers[it->n_answers++] = g4_strdup(a->valuestring);
    }
    return G4_OK;
}

static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return g4_strdup(".");
    if (slash == path) return g4_strdup("/");
    return g4_strndup(path, (size_t)(slash - path));
}

static void item_free(g4_eval_item *it) {
    free(it->id);
    free(it->media);
    free(it->media_path);
    free(it->question);
    for (int k = 0; k < it->n_answers; k++) free(it->answers[k]);
    free(it->answers);
    free(it->transcript);
    free(it->category);
    free(it->dataset);
    memset(it, 0, sizeof *it);
}

// One line (NUL-terminated, len bytes) into *it.
static int parse_item(const loc *l, const char *text, size_t len, const g4_eval_task *t,
                      const char *base_dir, g4_eval_item *it) {
    memset(it, 0, sizeof *it);
    it->line = l->line;
    if (strlen(text) != len)
        return g4_fail(G4_EUSER, "%s:%d: the line holds a NUL byte (expected one JSON object)",
                       l->path, l->line);
    const char *end = NULL;
    cJSON *obj = cJSON_ParseWithOpts(text, &end, 1);
    if (!obj) {
        long col = end ? (long)(end - text) + 1 : 1;
        return g4_fail(G4_EUSER, "%s:%d: not valid JSON (at column %ld); expected one object",
                       l->path, l->line, col);
    }
    int rc = G4_OK;
    if (!cJSON_IsObject(obj)) {
        rc = g4_fail(G4_EUSER, "%s:%d: expected a JSON object, got %s", l->path, l->line,
                     g4_json_type_name(obj));
        goto done;
    }
    if ((rc = get_str(l, obj, "id", 1, 1, &it->id))) goto done;
    const char *media_key = t->media == G4_MEDIA_IMAGE ? "image" : "audio";
    const char *other_key = t->media == G4_MEDIA_IMAGE ? "audio" : "image";
    if (cJSON_GetObjectItemCaseSensitive(obj, other_key)) {
        rc = g4_fail(G4_EUSER, "%s:%d: field '%s': task %s takes %s items (field '%s')", l->path,
                     l->line, other_key, t->name, media_key, media_key);
        goto done;
    }
    if ((rc = get_str(l, obj, media_key, 1, 1, &it->media))) goto done;
    it->media_path = it->media[0] == '/' ? g4_strdup(it->media) : g4_path_join(base_dir, it->media);
    if ((rc = get_str(l, obj, "question", !t->fixed_text, 0, &it->question))) goto done;
    if (t->fixed_text && it->question && strcmp(it->question, t->fixed_text)) {
        rc = g4_fail(G4_EUSER,
                     "%s:%d: field 'question': task %s always sends \"%s\"; leave the field out "
                     "or give that text",
                     l->path, l->line, t->name, t->fixed_text);
        goto done;
    }
    if (t->media == G4_MEDIA_IMAGE) {
        if ((rc = get_answers(l, obj, t, it))) goto done;
    } else if ((rc = get_str(l, obj, "transcript", 1, 0, &it->transcript))) {
        goto done;
    }
    if ((rc = get_str(l, obj, "category", 1, 1, &it->category))) goto done;
    rc = get_str(l, obj, "dataset", 0, 0, &it->dataset);
done:
    cJSON_Delete(obj);
    if (rc) item_free(it);
    return rc;
}

int g4_eval_manifest_read(const char *path, const g4_eval_task *t, const char *data_dir,
                          g4_eval_manifest *out) {
    memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t size = 0;
    int rc = g4_read_file_max(path, G4_MAX_LINES_BYTES, &text, &size);
    if (rc) return rc;
    out->path = g4_strdup(path);
    out->task = t;
    char *base_dir = data_dir ? g4_strdup(data_dir) : dir_of(path);
    g4_strmap ids;
    g4_strmap_init(&ids, 64);
    int cap = 0;
    loc l = {path, 0};
    for (size_t at = 0; at < size && !rc;) {
        char *line = text + at;
        char *nl = memchr(line, '\n', size - at);
        size_t len = nl ? (size_t)(nl - line) : size - at;
        at += len + (nl ? 1 : 0);
        l.line++;
        line[len] = 0;
        if (len && line[len - 1] == '\r') line[--len] = 0; // CRLF files
        size_t k = 0;
        while (k < len && (line[k] == ' ' || line[k] == '\t')) k++;
        if (k == len) continue; // blank line
        if (out->n == cap)
            out->items =
                g4_realloc(out->items, sizeof *out->items * (size_t)(cap = cap ? 2 * cap : 64));
        g4_eval_item *it = &out->items[out->n];
        if ((rc = parse_item(&l, line, len, t, base_dir, it))) break;
        out->n++;
        if (!g4_strmap_put(&ids, it->id, out->n - 1)) {
            rc = g4_fail(G4_EUSER, "%s:%d: field 'id': '%s' is already the id of line %d", path,
                         l.line, it->id, out->items[g4_strmap_get(&ids, it->id)].line);
        }
    }
    if (!rc && out->n == 0)
        rc = g4_fail(G4_EUSER, "%s: the manifest has no items (expected one JSON object per line)",
                     path);
    g4_strmap_free(&ids);
    free(base_dir);
    free(text);
    if (rc) g4_eval_manifest_free(out);
    return rc;
}

void g4_eval_manifest_free(g4_eval_manifest *m) {
    for (int i = 0; i < m->n; i++) item_free(&m->items[i]);
    free(m->items);
    free(m->path);
    memset(m, 0, sizeof *m);
}

int g4_eval_manifest_find(const g4_eval_manifest *m, const char *id) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->items[i].id, id)) return i;
    return -1;
}

int g4_eval_manifest_check_media(const g4_eval_manifest *m, const int *sel, int n_sel) {
    for (int k = 0; k < n_sel; k++) {
        const g4_eval_item *it = &m->items[sel[k]];
        if (!g4_is_file(it->media_path) || access(it->media_path, R_OK) != 0)
            return g4_fail(G4_EUSER,
                           "%s:%d: field '%s': %s is not a readable file (relative paths are "
                           "resolved against --data-dir, else the manifest's directory)",
                           m->path, it->line, m->task->media == G4_MEDIA_IMAGE ? "image" : "audio",
                           it->media_path);
    }
    return G4_OK;
}

void g4_eval_select(int n_items, int limit, int shard_i, int shard_n, int **sel, int *n_sel) {
    int n = limit > 0 && limit < n_items ? limit : n_items;
    if (shard_n < 1) shard_n = 1;
    *n_sel = 0;
    *sel = NULL;
    if (n <= shard_i) return;
    *sel = g4_malloc(sizeof(int) * (size_t)((n - shard_i + shard_n - 1) / shard_n));
    for (int i = shard_i; i < n; i += shard_n) (*sel)[(*n_sel)++] = i;
}
