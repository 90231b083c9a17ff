// test_tokenizer.c: loader/tokenizer against HF `tokenizers`, plus load time and bad input.
//  1. every case of tests/fixtures/tokenizer/{gemma,edge}_bpe_cases.jsonl (made by
//     tools/python/make_tokenizer_fixture.py with HF tokenizers): our ids must equal HF's ids and
//     our decoded bytes HF's decoded bytes, exactly (token ids and text have no tolerance);
//  2. a synthetic tokenizer.json of the real size (262144 pieces, ~520k merges, HF's pretty
//     layout, ~35 MB), written here: it must load in < 1 s of CPU time in an optimised build
//     without sanitizers (timed and printed in every build); its merges are built so that the
//     expected ids of some words are known by construction;
//  3. a long input encodes in near-linear time (no quadratic rescans);
//  4. malformed files and inputs fail with G4_EUSER and a one-line message, and truncated or
//     corrupted copies of the fixture never crash the loader.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "loader/tokenizer.h"
#include "tests/test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define G4T_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define G4T_SANITIZED 1
#endif
#endif
#if defined(__OPTIMIZE__) && !defined(G4T_SANITIZED)
#define G4T_TIME_ASSERT 1 // timing limits hold only for optimised builds without sanitizers
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// CPU time of this process (user + system, so page faults of the mapped file count). Time
// limits are checked on it: the CI machine is shared, and wall time there also measures
// whatever else runs; on an idle machine the two agree (the file is in the page cache).
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int unhex(const char *h, char **out, size_t *n) {
    size_t len = strlen(h);
    if (len % 2) return 0;
    char *b = malloc(len / 2 + 1);
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1) {
            free(b);
            return 0;
        }
        b[i] = (char)v;
    }
    b[len / 2] = 0;
    *out = b;
    *n = len / 2;
    return 1;
}

static int ids_of(const cJSON *arr, g4_ids *out) {
    out->n = 0;
    if (!cJSON_IsArray(arr)) return 0;
    for (const cJSON *v = arr->child; v; v = v->next) {
        if (!cJSON_IsNumber(v)) return 0;
        g4_ids_push(out, v->valueint);
    }
    return 1;
}

static void print_ids(const char *what, const int *v, size_t n) {
    fprintf(stderr, "  %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 64; i++) fprintf(stderr, " %d", v[i]);
    fprintf(stderr, n > 64 ? " ...\n" : "\n");
}

// Runs every case of one fixture; returns the number of cases run.
static int run_fixture(const char *dir, const char *stem) {
    char json_path[4096], cases_path[4096];
    snprintf(json_path, sizeof json_path, "%s/tokenizer/%s.json", dir, stem);
    snprintf(cases_path, sizeof cases_path, "%s/tokenizer/%s_cases.jsonl", dir, stem);
    g4_tokenizer *t;
    double t0 = now_s();
    int rc = g4_tokenizer_open(json_path, &t);
    double dt = now_s() - t0;
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc) return 0;
    printf("%s: loaded in %.1f ms: %d ids, %d merges, %d added tokens\n", stem, dt * 1e3,
           g4_tokenizer_n_vocab(t), g4_tokenizer_n_merges(t), g4_tokenizer_n_added(t));
    char *text;
    size_t size;
    rc = g4_read_file(cases_path, &text, &size);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc) {
        g4_tokenizer_close(t);
        return 0;
    }
    int n_enc = 0, n_dec = 0, bad_enc = 0, bad_dec = 0, line_no = 0;
    g4_ids want = {0}, got = {0};
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        cJSON *c = cJSON_Parse(line);
        CHECK_MSG(c != NULL, "%s:%d: not JSON", cases_path, line_no);
        if (!c) continue;
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(c, "kind"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
        const char *hex = cJSON_GetStringValue(cJSON_GetObjectItem(c, "hex"));
        if (kind && !strcmp(kind, "meta")) { // the sizes HF reports for this file
            CHECK_INT(g4_tokenizer_n_vocab(t), cJSON_GetObjectItem(c, "n_vocab")->valueint);
            CHECK_INT(g4_tokenizer_n_merges(t), cJSON_GetObjectItem(c, "n_merges")->valueint);
            CHECK_INT(g4_tokenizer_n_added(t), cJSON_GetObjectItem(c, "n_added")->valueint);
            cJSON_Delete(c);
            continue;
        }
        char *bytes = NULL;
        size_t nb = 0;
        int ok = kind && name && hex && unhex(hex, &bytes, &nb) &&
                 ids_of(cJSON_GetObjectItem(c, "ids"), &want);
        CHECK_MSG(ok, "%s:%d: malformed case", cases_path, line_no);
        if (!ok) {
            free(bytes);
            cJSON_Delete(c);
            continue;
        }
        if (!strcmp(kind, "encode")) {
            int add = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_special"));
            got.n = 0;
            rc = g4_tokenizer_encode(t, bytes, nb, add, &got);
            int same = rc == G4_OK && got.n == want.n &&
                       (want.n == 0 || !memcmp(got.v, want.v, want.n * sizeof *want.v));
            n_enc++;
            if (!same) {
                bad_enc++;
                fprintf(stderr, "FAIL %s encode '%s' (add_special %d, line %d)%s%s\n", stem, name,
                        add, line_no, rc ? ": " : "", rc ? g4_error() : "");
                print_ids("HF  ", want.v, want.n);
                print_ids("ours", got.v, got.n);
            }
            CHECK(same);
        } else {
            int skip = cJSON_IsTrue(cJSON_GetObjectItem(c, "skip_special"));
            char *out = NULL;
            size_t n_out = 0;
            rc = g4_tokenizer_decode(t, want.v, want.n, skip, &out, &n_out);
            int same = rc == G4_OK && n_out == nb && !memcmp(out, bytes, nb);
            n_dec++;
            if (!same) {
                bad_dec++;
                fprintf(stderr, "FAIL %s decode '%s' (skip_special %d, line %d)%s%s\n", stem, name,
                        skip, line_no, rc ? ": " : "", rc ? g4_error() : "");
                fprintf(stderr, "  HF  : '%.*s'\n  ours: '%.*s'\n", (int)nb, bytes, (int)n_out,
                        out ? out : "");
            }
            CHECK(same);
            free(out);
        }
        free(bytes);
        cJSON_Delete(c);
    }
    printf("%s: %d encode cases (%d differ from HF), %d decode cases (%d differ)\n", stem, n_enc,
           bad_enc, n_dec, bad_dec);
    g4_ids_free(&want);
    g4_ids_free(&got);
    free(text);
    g4_tokenizer_close(t);
    return n_enc + n_dec;
}

// --- the synthetic full-size tokenizer ---------------------------------------------------------
// 64 four-byte characters (U+1F300..U+1F33F). Pieces: the 4 specials, the 256 byte pieces, the
// 64 characters, all 4096 pairs, then triples in order until 262144 ids. Merges: every pair
// (a, b) (ranks 0..4095 in order), then for each triple (x, yz) and (xy, z). Written the way HF
// saves (indent 2, merges as [a, b] pairs).
#define BIG_ALPHA 64
#define BIG_IDS   262144
static void put_char(FILE *f, int k) {
    unsigned cp = 0x1F300u + (unsigned)k;
    fputc((int)(0xf0 | (cp >> 18)), f);
    fputc((int)(0x80 | ((cp >> 12) & 0x3f)), f);
    fputc((int)(0x80 | ((cp >> 6) & 0x3f)), f);
    fputc((int)(0x80 | (cp & 0x3f)), f);
}

static void put_piece(FILE *f, const int *ks, int n) {
    fputc('"', f);
    for (int i = 0; i < n; i++) put_char(f, ks[i]);
    fputc('"', f);
}

static void put_merge(FILE *f, const int *a, int na, const int *b, int nb, int first) {
    fprintf(f, "%s\n      [\n        ", first ? "" : ",");
    put_piece(f, a, na);
    fprintf(f, ",\n        ");
    put_piece(f, b, nb);
    fprintf(f, "\n      ]");
}

static int big_triples(void) {
    return BIG_IDS - 4 - 256 - BIG_ALPHA - BIG_ALPHA * BIG_ALPHA;
}

static int write_big(const char *path, long *merges_out) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fprintf(f, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n");
    fprintf(f, "  \"added_tokens\": [\n");
    const char *sp[4] = {"<pad>", "<eos>", "<bos>", "<unk>"};
    for (int i = 0; i < 4; i++)
        fprintf(f,
                "    {\n      \"id\": %d,\n      \"content\": \"%s\",\n      \"single_word\": "
                "false,\n      \"lstrip\": false,\n      \"rstrip\": false,\n      "
                "\"normalized\": false,\n      \"special\": true\n    }%s\n",
                i, sp[i], i < 3 ? "," : "");
    fprintf(f, "  ],\n  \"normalizer\": {\n    \"type\": \"Replace\",\n    \"pattern\": {\n      "
               "\"String\": \" \"\n    },\n    \"content\": \"\u2581\"\n  },\n");
    fprintf(f, "  \"pre_tokenizer\": null,\n  \"post_processor\": null,\n");
    fprintf(f, "  \"decoder\": {\n    \"type\": \"Sequence\",\n    \"decoders\": [\n      {\n  "
               "      \"type\": \"ByteFallback\"\n      },\n      {\n        \"type\": \"Fuse\"\n"
               "      }\n    ]\n  },\n");
    fprintf(f, "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": "
               "\"<unk>\",\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": "
               "null,\n    \"fuse_unk\": true,\n    \"byte_fallback\": true,\n    "
               "\"ignore_merges\": false,\n    \"vocab\": {\n");
    int id = 0;
    for (int i = 0; i < 4; i++) fprintf(f, "      \"%s\": %d,\n", sp[i], id++);
    for (int b = 0; b < 256; b++) fprintf(f, "      \"<0x%02X>\": %d,\n", b, id++);
    int k[3];
    for (k[0] = 0; k[0] < BIG_ALPHA; k[0]++) {
        fprintf(f, "      ");
        put_piece(f, k, 1);
        fprintf(f, ": %d,\n", id++);
    }
    for (k[0] = 0; k[0] < BIG_ALPHA; k[0]++)
        for (k[1] = 0; k[1] < BIG_ALPHA; k[1]++) {
            fprintf(f, "      ");
            put_piece(f, k, 2);
            fprintf(f, ": %d,\n", id++);
        }
    for (int n = 0; n < big_triples(); n++) {
        k[0] = n / (BIG_ALPHA * BIG_ALPHA), k[1] = n / BIG_ALPHA % BIG_ALPHA, k[2] = n % BIG_ALPHA;
        fprintf(f, "      ");
        put_piece(f, k, 3);
        fprintf(f, ": %d%s\n", id++, n + 1 < big_triples() ? "," : "");
    }
    fprintf(f, "    },\n    \"merges\": [");
    long merges = 0;
    for (k[0] = 0; k[0] < BIG_ALPHA; k[0]++)
        for (k[1] = 0; k[1] < BIG_ALPHA; k[1]++) put_merge(f, k, 1, k + 1, 1, merges++ == 0);
    for (int n = 0; n < big_triples(); n++) {
        k[0] = n / (BIG_ALPHA * BIG_ALPHA), k[1] = n / BIG_ALPHA % BIG_ALPHA, k[2] = n % BIG_ALPHA;
        put_merge(f, k, 1, k + 1, 2, 0);
        put_merge(f, k, 2, k + 2, 1, 0);
        merges += 2;
    }
    fprintf(f, "\n    ]\n  }\n}\n");
    *merges_out = merges;
    return fclose(f) == 0;
}

static void test_big(void) {
    char *dir = g4t_tmpdir();
    char *path = g4_path_join(dir, "tokenizer.json");
    long n_merges = 0;
    double t0 = now_s();
    CHECK(write_big(path, &n_merges));
    double t_write = now_s() - t0;
    FILE *f = fopen(path, "rb");
    long bytes = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        bytes = ftell(f);
        fclose(f);
    }
    g4_tokenizer *t = NULL;
    t0 = now_s();
    double c0 = cpu_s();
    int rc = g4_tokenizer_open(path, &t);
    double dt = now_s() - t0, dc = cpu_s() - c0;
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    printf("synthetic tokenizer.json: %.1f MB, %d ids, %ld merges: written in %.2f s, loaded in "
           "%.3f s CPU (%.3f s wall) (limit 1 s CPU, asserted in optimised builds without "
           "sanitizers: %s)\n",
           (double)bytes / 1e6, BIG_IDS, n_merges, t_write, dc, dt,
#ifdef G4T_TIME_ASSERT
           "yes"
#else
           "no"
#endif
    );
#ifdef G4T_TIME_ASSERT
    CHECK_MSG(dc < 1.0, "loading took %.3f s of CPU time", dc);
#endif
    if (t) {
        CHECK_INT(g4_tokenizer_n_vocab(t), BIG_IDS);
        CHECK_INT(g4_tokenizer_n_merges(t), n_merges);
        // By construction: a pair merges first (ranks 0..4095), then (xy, z) gives the triple
        // when it is a piece; the triple id is 4 + 256 + 64 + 4096 + its index.
        unsigned long long seed = 7;
        for (int r = 0; r < 200; r++) {
            int n = (int)(g4t_rand_u64(&seed) % (unsigned long long)big_triples());
            int k[3] = {n / (BIG_ALPHA * BIG_ALPHA), n / BIG_ALPHA % BIG_ALPHA, n % BIG_ALPHA};
            char s[12];
            for (int i = 0; i < 3; i++) {
                unsigned cp = 0x1F300u + (unsigned)k[i];
                s[4 * i] = (char)(0xf0 | (cp >> 18));
                s[4 * i + 1] = (char)(0x80 | ((cp >> 12) & 0x3f));
                s[4 * i + 2] = (char)(0x80 | ((cp >> 6) & 0x3f));
                s[4 * i + 3] = (char)(0x80 | (cp & 0x3f));
            }
            g4_ids ids = {0};
            CHECK(g4_tokenizer_encode(t, s, 12, 0, &ids) == G4_OK);
            CHECK_MSG(ids.n == 1 && ids.v[0] == 4 + 256 + BIG_ALPHA + BIG_ALPHA * BIG_ALPHA + n,
                      "triple %d -> %zu ids, first %d", n, ids.n, ids.n ? ids.v[0] : -1);
            ids.n = 0; // a pair alone: its pair piece
            CHECK(g4_tokenizer_encode(t, s, 8, 0, &ids) == G4_OK);
            CHECK(ids.n == 1 && ids.v[0] == 4 + 256 + BIG_ALPHA + k[0] * BIG_ALPHA + k[1]);
            g4_ids_free(&ids);
        }
        // A space is not a piece and "▁" not either: byte fallback gives E2 96 81.
        g4_ids ids = {0};
        CHECK(g4_tokenizer_encode(t, " ", 1, 0, &ids) == G4_OK);
        CHECK(ids.n == 3 && ids.v[0] == 4 + 0xE2 && ids.v[1] == 4 + 0x96 && ids.v[2] == 4 + 0x81);
        g4_ids_free(&ids);
        g4_tokenizer_close(t);
    }
    free(path);
    g4t_rmtree(dir);
}

// --- long inputs --------------------------------------------------------------------------------
static void test_long_input(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/gemma_bpe.json", dir);
    g4_tokenizer *t;
    if (g4_tokenizer_open(path, &t)) {
        CHECK_MSG(0, "%s", g4_error());
        return;
    }
    // ~1 MB of mixed text with no added tokens: one BPE word (Gemma has no pre-tokenizer split),
    // so a quadratic merge loop would take minutes here.
    const char *parts[] = {"the ", "people ", "café ", "我们的", "😀", "  ", "\n", "123 ", "Ж"};
    size_t cap = 1 << 20, n = 0;
    char *text = malloc(cap + 64);
    unsigned long long seed = 11;
    while (n < cap) {
        const char *p = parts[g4t_rand_u64(&seed) % 9];
        memcpy(text + n, p, strlen(p));
        n += strlen(p);
    }
    g4_ids small = {0}, big = {0};
    double t0 = cpu_s();
    CHECK(g4_tokenizer_encode(t, text, n / 16, 0, &small) == G4_OK);
    double t_small = cpu_s() - t0;
    t0 = cpu_s();
    CHECK(g4_tokenizer_encode(t, text, n, 0, &big) == G4_OK);
    double t_big = cpu_s() - t0;
    printf("encode: %zu bytes -> %zu ids in %.3f s CPU (%.1f MB/s); 1/16 of it in %.4f s\n", n,
           big.n, t_big, (double)n / 1e6 / t_big, t_small);
    CHECK(big.n > n / 8);
#ifdef G4T_TIME_ASSERT
    CHECK_MSG(t_big < 5.0, "1 MB took %.2f s to encode", t_big);
#endif
    // Round trip: this text has no special tokens, only pieces, bytes and spaces.
    char *back;
    size_t nb;
    CHECK(g4_tokenizer_decode(t, big.v, big.n, 1, &back, &nb) == G4_OK);
    CHECK(nb == n && !memcmp(back, text, n));
    free(back);
    g4_ids_free(&small);
    g4_ids_free(&big);
    free(text);
    g4_tokenizer_close(t);
}

// --- API details with independent expectations ---------------------------------------------------
static void test_api(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/gemma_bpe.json", dir);
    g4_tokenizer *t;
    if (g4_tokenizer_open(path, &t)) {
        CHECK_MSG(0, "%s", g4_error());
        return;
    }
    // The fixture script gives the specials ids 0..4 and the Gemma-style added tokens 5.. .
    CHECK_INT(g4_tokenizer_id(t, "<bos>", 5), 2);
    CHECK_INT(g4_tokenizer_id(t, "<|turn>", 7), 5);
    CHECK_INT(g4_tokenizer_id(t, "<nope>", 6), -1);
    size_t len = 0;
    const char *p = g4_tokenizer_piece(t, 1, &len);
    CHECK(p && len == 5 && !memcmp(p, "<eos>", 5));
    CHECK(g4_tokenizer_piece(t, -1, &len) == NULL);
    CHECK(g4_tokenizer_piece(t, g4_tokenizer_n_vocab(t), &len) == NULL);
    CHECK(g4_tokenizer_is_special(t, 2));
    CHECK(!g4_tokenizer_is_special(t, g4_tokenizer_id(t, "[multimodal]", 12)));
    CHECK(!g4_tokenizer_is_special(t, g4_tokenizer_id(t, "<0x41>", 6)));
    // Encode appends.
    g4_ids ids = {0};
    g4_ids_push(&ids, 99);
    CHECK(g4_tokenizer_encode(t, "<bos>", 5, 0, &ids) == G4_OK);
    CHECK(ids.n == 2 && ids.v[0] == 99 && ids.v[1] == 2);
    // Invalid UTF-8 is refused with the offset, and the list is left as it was.
    int rc = g4_tokenizer_encode(t, "ab\xc3(", 4, 1, &ids);
    CHECK_INT(rc, G4_EUSER);
    CHECK(strstr(g4_error(), "invalid UTF-8 at byte 2") != NULL);
    CHECK(ids.n == 2);
    CHECK_INT(g4_tokenizer_encode(t, "\xed\xa0\x80", 3, 0, &ids), G4_EUSER); // surrogate
    CHECK_INT(g4_tokenizer_encode(t, "\xc0\xaf", 2, 0, &ids), G4_EUSER);     // overlong
    // Decode: ids outside the vocabulary are an error naming the position.
    char *text = NULL;
    int bad[2] = {2, 1 << 20};
    rc = g4_tokenizer_decode(t, bad, 2, 0, &text, &len);
    CHECK_INT(rc, G4_EUSER);
    CHECK(text == NULL && strstr(g4_error(), "position 1") != NULL);
    bad[1] = -3;
    CHECK_INT(g4_tokenizer_decode(t, bad, 2, 0, &text, &len), G4_EUSER);
    CHECK_INT(g4_tokenizer_decode(t, NULL, 0, 0, &text, &len), G4_OK);
    CHECK(text && len == 0 && text[0] == 0);
    free(text);
    g4_ids_free(&ids);
    g4_tokenizer_close(t);
}

// --- malformed files ---------------------------------------------------------------------------
typedef struct {
    const char *name, *json, *expect; // expect: a substring of the one-line message
} bad_case;

static void test_bad_files(void) {
#define HEAD "{\"added_tokens\":[],\"normalizer\":null,\"decoder\":null,"
    const bad_case cases[] = {
        {"not json", "{\"model\": ", "byte"},
        {"no model", "{}", "model.vocab is missing"},
        {"no merges", "{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}", "model.merges is missing"},
        {"unigram", HEAD "\"model\":{\"type\":\"Unigram\",\"vocab\":{},\"merges\":[]}}",
         "only BPE"},
        {"negative id", HEAD "\"model\":{\"vocab\":{\"a\":-1},\"merges\":[]}}", "negative id"},
        {"fraction id", HEAD "\"model\":{\"vocab\":{\"a\":1.5},\"merges\":[]}}", "integer id"},
        {"huge id", HEAD "\"model\":{\"vocab\":{\"a\":99999999999},\"merges\":[]}}", "too large"},
        {"same id twice", HEAD "\"model\":{\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}",
         "id 0 is given to two pieces"},
        {"same piece twice", HEAD "\"model\":{\"vocab\":{\"a\":0,\"a\":1},\"merges\":[]}}",
         "appears twice"},
        {"merge out of vocab", HEAD "\"model\":{\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}",
         "piece 'ab' is not in model.vocab"},
        {"merge with two spaces",
         HEAD "\"model\":{\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b c\"]}}", "one space"},
        {"merge not a pair", HEAD "\"model\":{\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}}",
         "expected a pair"},
        {"lone surrogate", HEAD "\"model\":{\"vocab\":{\"\\ud800\":0},\"merges\":[]}}",
         "surrogate"},
        {"invalid utf-8 piece", HEAD "\"model\":{\"vocab\":{\"\xff\":0},\"merges\":[]}}",
         "invalid UTF-8"},
        {"regex normalizer",
         "{\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" \"},\"content\":\"x\"},"
         "\"model\":{\"vocab\":{},\"merges\":[]}}",
         "Regex patterns are not supported"},
        {"nfkc", "{\"normalizer\":{\"type\":\"NFKC\"},\"model\":{\"vocab\":{},\"merges\":[]}}",
         "normalizer type 'NFKC' is not supported"},
        {"byte level pre-tokenizer",
         "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"vocab\":{},\"merges\":[]}}",
         "pre-tokenizer type 'ByteLevel'"},
        {"metaspace decoder",
         "{\"decoder\":{\"type\":\"Metaspace\"},\"model\":{\"vocab\":{},\"merges\":[]}}",
         "decoder type 'Metaspace'"},
        {"dropout", "{\"model\":{\"dropout\":0.1,\"vocab\":{},\"merges\":[]}}", "dropout"},
        {"truncation", "{\"truncation\":{\"max_length\":8},\"model\":{\"vocab\":{},\"merges\":[]}}",
         "truncation"},
        {"fixed padding",
         "{\"padding\":{\"strategy\":{\"Fixed\":8}},\"model\":{\"vocab\":{},\"merges\":[]}}",
         "padding"},
        {"added id mismatch",
         "{\"added_tokens\":[{\"id\":1,\"content\":\"a\",\"special\":true}],"
         "\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}",
         "'a' has id 1 but model.vocab gives it id 0"},
        {"added id taken",
         "{\"added_tokens\":[{\"id\":0,\"content\":\"<x>\",\"special\":true}],"
         "\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}",
         "already the piece 'a'"},
        {"added twice",
         "{\"added_tokens\":[{\"id\":1,\"content\":\"<x>\"},{\"id\":2,\"content\":\"<x>\"}],"
         "\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}",
         "appears twice"},
        {"post-processor unknown special",
         "{\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
         "{\"id\":\"<s>\",\"type_id\":0}}],\"special_tokens\":{}},"
         "\"model\":{\"vocab\":{},\"merges\":[]}}",
         "no ids for '<s>'"},
        {"vocab not an object", "{\"model\":{\"vocab\":[],\"merges\":[]}}", "expected an object"},
        {"deep nesting", "{\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "end of file"},
    };
#undef HEAD
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        g4_tokenizer *t = NULL;
        int rc = g4_tokenizer_parse(cases[i].json, strlen(cases[i].json), "bad.json", &t);
        const char *msg = g4_error();
        int ok = rc == G4_EUSER && t == NULL && strstr(msg, cases[i].expect) &&
                 !strchr(msg, '\n') && !strncmp(msg, "bad.json", 8);
        CHECK_MSG(ok, "bad file '%s': rc %d, message '%s' (expected to contain '%s')",
                  cases[i].name, rc, msg, cases[i].expect);
        g4_tokenizer_close(t);
    }
    // Merges may come before the vocabulary, in either format, after a byte order mark.
    const char *orders[] = {
        "{\"model\":{\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}}",
        "{\"model\":{\"merges\":[[\"a\",\"b\"]],\"vocab\":{\"a\":0,\"b\":1,\"ab\":2}}}",
        "\xef\xbb\xbf{\"model\":{\"merges\":[\"a b\"],\"vocab\":{\"ab\":2,\"b\":1,\"a\":0}}}",
    };
    for (int i = 0; i < 3; i++) {
        g4_tokenizer *to = NULL;
        CHECK_MSG(g4_tokenizer_parse(orders[i], strlen(orders[i]), "order.json", &to) == G4_OK,
                  "order %d: %s", i, g4_error());
        if (!to) continue;
        g4_ids ids = {0};
        CHECK(g4_tokenizer_encode(to, "abab", 4, 0, &ids) == G4_OK);
        CHECK_MSG(ids.n == 2 && ids.v[0] == 2 && ids.v[1] == 2, "order %d", i);
        g4_ids_free(&ids);
        g4_tokenizer_close(to);
    }
    // Padding to the longest of a batch changes nothing for one text: accepted.
    const char *pad = "{\"padding\":{\"strategy\":\"BatchLongest\",\"pad_to_multiple_of\":null},"
                      "\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}";
    g4_tokenizer *tp = NULL;
    CHECK_INT(g4_tokenizer_parse(pad, strlen(pad), "pad.json", &tp), G4_OK);
    g4_tokenizer_close(tp);
    // The unk_token is looked up only when a character needs it (as HF); then it is an error.
    const char *no_unk = "{\"model\":{\"unk_token\":\"<unk>\",\"vocab\":{\"a\":0},\"merges\":[]}}";
    g4_tokenizer *t = NULL;
    CHECK_INT(g4_tokenizer_parse(no_unk, strlen(no_unk), "nounk.json", &t), G4_OK);
    if (t) {
        g4_ids ids = {0};
        CHECK_INT(g4_tokenizer_encode(t, "aa", 2, 0, &ids), G4_OK);
        CHECK(ids.n == 2 && ids.v[0] == 0 && ids.v[1] == 0);
        CHECK_INT(g4_tokenizer_encode(t, "ab", 2, 0, &ids), G4_EUSER);
        CHECK(strstr(g4_error(), "U+0062") != NULL);
        g4_ids_free(&ids);
        g4_tokenizer_close(t);
    }
}

// Truncated and byte-flipped copies of the fixture: each either loads or fails cleanly (the
// sanitizer build turns any out-of-bounds access into a failure). A third kind flips flags of the
// added tokens ("false" -> "true "), which loads, so encode and decode run on odd settings.
static void test_corrupt(const char *dir) {
    char path[4096], *js;
    size_t n;
    snprintf(path, sizeof path, "%s/tokenizer/edge_bpe.json", dir);
    if (g4_read_file(path, &js, &n)) {
        CHECK_MSG(0, "%s", g4_error());
        return;
    }
    // Offsets of the "false" values before the model section (flags of added tokens).
    size_t flags[256], n_flags = 0;
    const char *model = strstr(js, "\"model\"");
    for (const char *p = js; (p = strstr(p, ": false")) && p < model && n_flags < 256; p++)
        flags[n_flags++] = (size_t)(p - js) + 2;
    CHECK(n_flags > 20);
    unsigned long long seed = 3;
    int loaded = 0, refused = 0;
    char *copy = malloc(n + 1);
    for (int r = 0; r < 300; r++) {
        memcpy(copy, js, n);
        size_t len = n;
        if (r % 3 == 0) {
            len = (size_t)(g4t_rand_u64(&seed) % n);
        } else if (r % 3 == 1) {
            for (int k = 0; k < 4; k++)
                copy[g4t_rand_u64(&seed) % n] = "\"{}[],:\\\x80\xff 0a"[g4t_rand_u64(&seed) % 14];
        } else {
            for (int k = 0; k < 6; k++)
                memcpy(copy + flags[g4t_rand_u64(&seed) % n_flags], "true ", 5);
        }
        g4_tokenizer *t = NULL;
        int rc = g4_tokenizer_parse(copy, len, "corrupt.json", &t);
        if (rc == G4_OK) {
            loaded++;
            const char *text = "a   <L>b <R>  cat hello world <bos>x<S>  \xf0\x9f\xa6\x80 ok\t\n";
            g4_ids ids = {0};
            CHECK(g4_tokenizer_encode(t, text, strlen(text), 1, &ids) == G4_OK);
            char *back = NULL;
            size_t nb;
            CHECK(g4_tokenizer_decode(t, ids.v, ids.n, 1, &back, &nb) == G4_OK);
            free(back);
            g4_ids_free(&ids);
            g4_tokenizer_close(t);
        } else {
            refused++;
            CHECK_MSG(rc == G4_EUSER && !strchr(g4_error(), '\n'), "rc %d: %s", rc, g4_error());
        }
    }
    printf("corrupted copies: %d loaded, %d refused\n", loaded, refused);
    CHECK(refused > 0 && loaded > 0);
    free(copy);
    free(js);
}

int main(void) {
    const char *dir = g4t_env("G4_FIXTURES");
    int n = run_fixture(dir, "gemma_bpe");
    CHECK_MSG(n >= 700, "only %d gemma_bpe cases ran", n);
    n = run_fixture(dir, "edge_bpe");
    CHECK_MSG(n >= 400, "only %d edge_bpe cases ran", n);
    test_api(dir);
    test_bad_files();
    test_corrupt(dir);
    test_long_input(dir);
    test_big();
    return g4t_finish("test_tokenizer");
}
