// fuzz_tokenizer.c: libFuzzer target for loader/tokenizer: the input is loaded as a
// tokenizer.json; when it loads, a few fixed texts and the input itself are encoded and every
// result is decoded (with and without special tokens). Seeds: tests/fixtures/tokenizer/*.json.
// Build (clang, beside the other targets of build.sh):
//   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_tokenizer.c
//     base/base.c loader/json.c loader/tokenizer*.c -lcjson -lutf8proc -lm -o
//     build-fuzz/fuzz_tokenizer
#include <stdlib.h>

#include "loader/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(const g4_tokenizer *t, const char *text, size_t n) {
    g4_ids ids = {0};
    if (g4_tokenizer_encode(t, text, n, 1, &ids) == G4_OK) {
        for (int skip = 0; skip < 2; skip++) {
            char *out = NULL;
            size_t len;
            if (g4_tokenizer_decode(t, ids.v, ids.n, skip, &out, &len) == G4_OK) free(out);
        }
    }
    g4_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_tokenizer *t;
    if (g4_tokenizer_parse((const char *)data, size, "fuzz.json", &t) != G4_OK) return 0;
    static const char *texts[] = {"", " ", "hello world", "<bos><|turn>user\n hi<turn|>\n",
                                  "caf\xc3\xa9 \xf0\x9f\x98\x80 \xe2\x96\x81\xe2\x96\x81 \t\n\n"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        roundtrip(t, texts[i], strlen(texts[i]));
    roundtrip(t, (const char *)data, size < 4096 ? size : 4096); // refused unless valid UTF-8
    // Every id, one at a time, decodes.
    int n = g4_tokenizer_n_vocab(t);
    for (int id = 0; id < n && id < 4096; id++) {
        char *out = NULL;
        size_t len;
        if (g4_tokenizer_decode(t, &id, 1, 0, &out, &len) == G4_OK) free(out);
    }
    g4_tokenizer_close(t);
    return 0;
}
