// json.c: see json.h.
#include "loader/json.h"

#include <math.h>
#include <stdlib.h>

int g4_json_parse(const char *text, size_t len, const char *name, g4_json *out) {
    memset(out, 0, sizeof *out);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        return g4_fail(G4_EUSER, "%s: invalid JSON near byte %zu", name, at);
    }
    out->root = root;
    out->path = g4_strdup(name);
    return G4_OK;
}

int g4_json_open(const char *path, g4_json *out) {
    char *text;
    size_t n;
    memset(out, 0, sizeof *out);
    int rc = g4_read_file_max(path, G4_MAX_JSON_BYTES, &text, &n);
    if (rc) return rc;
    rc = g4_json_parse(text, n, path, out);
    free(text);
    return rc;
}

void g4_json_close(g4_json *j) {
    cJSON_Delete(j->root);
    free(j->path);
    memset(j, 0, sizeof *j);
}

const cJSON *g4_json_at(const cJSON *obj, const char *path) {
    const char *p = path;
    const cJSON *cur = obj;
    char key[256];
    while (cur && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n >= sizeof key) return NULL;
        memcpy(key, p, n);
        key[n] = 0;
        if (!cJSON_IsObject(cur)) return NULL;
        cur = cJSON_GetObjectItemCaseSensitive(cur, key);
        p += n;
        if (*p == '.') p++;
    }
    return cur;
}

const char *g4_json_type_name(const cJSON *v) {
    if (!v) return "nothing";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

static int missing(const g4_json *j, const char *path, const char *what) {
    return g4_fail(G4_EUSER, "%s: %s is missing (expected %s)", j->path, path, what);
}

static int wrong(const g4_json *j, const char *path, const char *what, const cJSON *v) {
    return g4_fail(G4_EUSER, "%s: %s: expected %s, found %s", j->path, path, what,
                   g4_json_type_name(v));
}

static int as_int(const cJSON *v, int *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d == floor(d)) || d < -2147483648.0 || d > 2147483647.0) return 0;
    *out = (int)d;
    return 1;
}

int g4_json_int(const g4_json *j, const cJSON *obj, const char *path, int required, int def,
                int *out) {
    const cJSON *v = g4_json_at(obj, path);
    if (!v) {
        if (required) return missing(j, path, "an integer");
        *out = def;
        return G4_OK;
    }
    if (!as_int(v, out)) return wrong(j, path, "an integer", v);
    return G4_OK;
}

int g4_json_num(const g4_json *j, const cJSON *obj, const char *path, int required, double def,
                double *out) {
    const cJSON *v = g4_json_at(obj, path);
    if (!v) {
        if (required) return missing(j, path, "a number");
        *out = def;
        return G4_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return wrong(j, path, "a number", v);
    *out = v->valuedouble;
    return G4_OK;
}

int g4_json_bool(const g4_json *j, const cJSON *obj, const char *path, int required, int def,
                 int *out) {
    const cJSON *v = g4_json_at(obj, path);
    if (!v) {
        if (required) return missing(j, path, "a boolean");
        *out = def;
        return G4_OK;
    }
    if (!cJSON_IsBool(v)) return wrong(j, path, "a boolean", v);
    *out = cJSON_IsTrue(v);
    return G4_OK;
}

int g4_json_str(const g4_json *j, const cJSON *obj, const char *path, int required, char **out) {
    const cJSON *v = g4_json_at(obj, path);
    *out = NULL;
    if (!v) return required ? missing(j, path, "a string") : G4_OK;
    if (!cJSON_IsString(v)) return wrong(j, path, "a string", v);
    *out = g4_strdup(v->valuestring);
    return G4_OK;
}

int g4_json_int_list(const g4_json *j, const cJSON *obj, const char *path, int required,
                     int *vals, int max, int *n) {
    const cJSON *v = g4_json_at(obj, path);
    *n = 0;
    if (!v) return required ? missing(j, path, "an integer or a list of integers") : G4_OK;
    if (cJSON_IsNumber(v)) {
        if (!as_int(v, &vals[0])) return wrong(j, path, "an integer", v);
        *n = 1;
        return G4_OK;
    }
    if (!cJSON_IsArray(v)) return wrong(j, path, "an integer or a list of integers", v);
    for (const cJSON *e = v->child; e; e = e->next) {
        if (*n >= max)
            return g4_fail(G4_EUSER, "%s: %s: more than %d values", j->path, path, max);
        if (!as_int(e, &vals[*n])) return wrong(j, path, "a list of integers", e);
        (*n)++;
    }
    if (*n == 0 && required) return missing(j, path, "at least one integer");
    return G4_OK;
}
