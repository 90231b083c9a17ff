// chat_fixture.h: reading tests/fixtures/chat/*.jsonl (made by tools/python/make_chat_fixture.py
// and make_generate_fixture.py) for test_chat.c, test_generate.c and test_asr_vqa.c.
#ifndef G4_TESTS_CHAT_FIXTURE_H
#define G4_TESTS_CHAT_FIXTURE_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

// Every line of a .jsonl file as a cJSON object (exits on an unreadable file: a broken
// fixture is not a skip).
typedef struct {
    cJSON **line;
    int n;
} cf_lines;

static inline cf_lines cf_read(const char *path) {
    char *data;
    size_t size;
    if (g4_read_file(path, &data, &size)) {
        fprintf(stderr, "cannot read fixture %s: %s\n", path, g4_error());
        exit(1);
    }
    cf_lines l = {0};
    for (char *s = data, *e; *s; s = e + (*e != 0)) {
        e = strchr(s, '\n');
        if (!e) e = s + strlen(s);
        if (e == s) continue;
        char save = *e;
        *e = 0;
        cJSON *j = cJSON_Parse(s);
        *e = save;
        if (!j) {
            fprintf(stderr, "fixture %s: a line is not JSON\n", path);
            exit(1);
        }
        l.line = g4_realloc(l.line, sizeof(cJSON *) * (size_t)(l.n + 1));
        l.line[l.n++] = j;
    }
    free(data);
    return l;
}

static inline void cf_free(cf_lines *l) {
    for (int i = 0; i < l->n; i++) cJSON_Delete(l->line[i]);
    free(l->line);
}

static inline const char *cf_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static inline int cf_int(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

// An int array member as a new array (*n its length; NULL when absent or empty).
static inline int *cf_ints(const cJSON *o, const char *key, int *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    *n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
    if (!*n) return NULL;
    int *v = g4_malloc(sizeof(int) * (size_t)*n);
    for (int i = 0; i < *n; i++) v[i] = cJSON_GetArrayItem(a, i)->valueint;
    return v;
}

// Index of the first difference of two id lists (-1 when equal).
static inline int cf_first_diff(const int *a, int na, const int *b, int nb) {
    int n = na < nb ? na : nb;
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return na == nb ? -1 : n;
}

#endif
