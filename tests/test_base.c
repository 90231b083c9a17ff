// test_base.c: fp16/bf16 conversion, checked against the compiler's own _Float16 (an independent
// implementation), the string map, overflow-checked sizes, and the typed JSON reader's errors.
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "loader/json.h"
#include "tests/test_util.h"

static void test_f16_to_f32_exhaustive(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 ref;
        uint16_t b = (uint16_t)h;
        memcpy(&ref, &b, 2);
        float want = (float)ref, got = g4_f16_to_f32(b);
        if (isnan(want) ? !isnan(got) : memcmp(&want, &got, 4) != 0) bad++;
    }
    CHECK_MSG(bad == 0, "%d of 65536 half values convert wrongly", bad);
}

static void test_f32_to_f16(void) {
    unsigned long long s = 12345;
    int bad = 0;
    // random bit patterns cover normals, subnormals, overflow, NaN and inf
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = (uint32_t)g4t_rand_u64(&s);
        float f;
        memcpy(&f, &bits, 4);
        _Float16 ref = (_Float16)f;
        uint16_t want, got = g4_f32_to_f16(f);
        memcpy(&want, &ref, 2);
        if (isnan(f) ? (got & 0x7c00) != 0x7c00 || (got & 0x3ff) == 0 : want != got) bad++;
    }
    // ties and edges
    const float edge[] = {0.0f,     -0.0f,      65504.0f, 65519.99f, 65520.0f, 6.1035156e-05f,
                          5.96e-08f, 2.98e-08f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1e-10f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        for (int sgn = 0; sgn < 2; sgn++) {
            float f = sgn ? -edge[i] : edge[i];
            _Float16 ref = (_Float16)f;
            uint16_t want;
            memcpy(&want, &ref, 2);
            if (want != g4_f32_to_f16(f)) bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d float values round to fp16 differently from _Float16", bad);
    CHECK(g4_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(g4_bf16_to_f32(0xc040) == -3.0f);
}

static void test_strmap(void) {
    g4_strmap m;
    g4_strmap_init(&m, 2);
    char keys[500][16];
    for (int i = 0; i < 500; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i * 7);
        CHECK(g4_strmap_put(&m, keys[i], i) == 1);
    }
    CHECK(g4_strmap_put(&m, keys[3], 99) == 0); // duplicate keeps the first value
    int bad = 0;
    for (int i = 0; i < 500; i++) bad += g4_strmap_get(&m, keys[i]) != i;
    CHECK_INT(bad, 0);
    CHECK_INT(g4_strmap_get(&m, "absent"), -1);
    g4_strmap_free(&m);
}

static void test_sizes(void) {
    uint64_t r;
    CHECK(g4_mul_u64(1ull << 32, 1ull << 31, &r) && r == 1ull << 63);
    CHECK(!g4_mul_u64(1ull << 32, 1ull << 32, &r));
    CHECK(!g4_add_u64(UINT64_MAX, 1, &r));
}

static void test_json_errors(void) {
    const char *doc = "{\"model\": {\"n\": 3, \"s\": \"x\", \"f\": 1.5, \"l\": [1, 2], \"b\": true}}";
    g4_json j;
    CHECK(g4_json_parse(doc, strlen(doc), "cfg.json", &j) == G4_OK);
    int v, n, vals[4];
    double d;
    char *s;
    CHECK(g4_json_int(&j, j.root, "model.n", 1, 0, &v) == G4_OK && v == 3);
    CHECK(g4_json_int(&j, j.root, "model.s", 1, 0, &v) == G4_EUSER);
    CHECK(strstr(g4_error(), "cfg.json: model.s: expected an integer, found a string") != NULL);
    CHECK(g4_json_int(&j, j.root, "model.f", 1, 0, &v) == G4_EUSER); // 1.5 is not an integer
    CHECK(g4_json_int(&j, j.root, "model.missing", 1, 0, &v) == G4_EUSER);
    CHECK(strstr(g4_error(), "model.missing is missing") != NULL);
    CHECK(g4_json_int(&j, j.root, "model.missing", 0, 42, &v) == G4_OK && v == 42);
    CHECK(g4_json_num(&j, j.root, "model.f", 1, 0, &d) == G4_OK && d == 1.5);
    CHECK(g4_json_str(&j, j.root, "model.n", 1, &s) == G4_EUSER);
    CHECK(g4_json_int_list(&j, j.root, "model.l", 1, vals, 4, &n) == G4_OK && n == 2 &&
          vals[1] == 2);
    CHECK(g4_json_int_list(&j, j.root, "model.n", 1, vals, 4, &n) == G4_OK && n == 1);
    CHECK(g4_json_int_list(&j, j.root, "model.l", 1, vals, 1, &n) == G4_EUSER); // too many
    CHECK(g4_json_bool(&j, j.root, "model.b", 1, 0, &v) == G4_OK && v == 1);
    g4_json_close(&j);
    CHECK(g4_json_parse("{\"a\": ", 6, "bad.json", &j) == G4_EUSER);
    CHECK(strstr(g4_error(), "bad.json: invalid JSON") != NULL);
}

int main(void) {
    test_f16_to_f32_exhaustive();
    test_f32_to_f16();
    test_strmap();
    test_sizes();
    test_json_errors();
    return g4t_finish("test_base");
}
