// fuzz_json.c: libFuzzer target for the typed JSON reader used on genai_config.json and the
// processor configs.
#include <stdlib.h>

#include "loader/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_json j;
    if (g4_json_parse((const char *)data, size, "fuzz.json", &j) != G4_OK) return 0;
    int v, n, vals[16];
    double d;
    char *s = NULL;
    g4_json_int(&j, j.root, "model.decoder.hidden_size", 1, 0, &v);
    g4_json_num(&j, j.root, "search.top_p", 0, 1.0, &d);
    g4_json_str(&j, j.root, "model.type", 1, &s);
    free(s);
    g4_json_int_list(&j, j.root, "model.eos_token_id", 1, vals, 16, &n);
    g4_json_close(&j);
    return 0;
}
