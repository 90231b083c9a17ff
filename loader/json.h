// json.h: typed, path-addressed reads from a cJSON document with one-line errors.
//
// Paths are dotted object keys ("model.decoder.hidden_size"). A missing optional key leaves the
// default; a missing required key, or a value of the wrong JSON type, is an error that names the
// file, the path, what was expected and what was found.
#ifndef G4_JSON_H
#define G4_JSON_H

#include <cjson/cJSON.h>

#include "base/base.h"

typedef struct {
    char *path; // file name for messages
    cJSON *root;
} g4_json;

int g4_json_open(const char *path, g4_json *out);
// Parses text (for tests and the fuzzer); name is used in messages.
int g4_json_parse(const char *text, size_t len, const char *name, g4_json *out);
void g4_json_close(g4_json *j);

// The value at path under obj, or NULL.
const cJSON *g4_json_at(const cJSON *obj, const char *path);
// "number", "string", "object", ... for messages.
const char *g4_json_type_name(const cJSON *v);

int g4_json_int(const g4_json *j, const cJSON *obj, const char *path, int required, int def,
                int *out);
int g4_json_num(const g4_json *j, const cJSON *obj, const char *path, int required, double def,
                double *out);
int g4_json_bool(const g4_json *j, const cJSON *obj, const char *path, int required, int def,
                 int *out);
// *out is a new string (NULL when absent and optional).
int g4_json_str(const g4_json *j, const cJSON *obj, const char *path, int required, char **out);
// An integer or a list of integers; at most max values.
int g4_json_int_list(const g4_json *j, const cJSON *obj, const char *path, int required,
                     int *vals, int max, int *n);

#endif
