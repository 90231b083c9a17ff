// test_quant.c: the Q4 (MatMulNBits) format, its binding, the scalar dequantizer and the k-quant
// quantizer, checked against hand-made bytes, a straightforward scalar formula and onnxruntime
// (tests/fixtures/q4, made by tools/python/make_q4_fixture.py with onnxruntime's quantizer and
// MatMulNBits kernel; see its README).
//
// Tolerances (named where used):
//   - dequantization is exact: (q - zp) * scale is one fp32 product of a small integer and an
//     fp16 value, so ours, the reference kernel's and onnxruntime's (chosen exact in fp16) agree
//     bit for bit;
//   - the quantizer is exact: it repeats onnxruntime's float32 numpy code operation by operation,
//     so codes, fp16 scales and zero points must match byte for byte;
//   - round-trip RMSE: per distribution, against the ideal uniform 4-bit error of each block,
//     sqrt(mean_b (range_b / 15)^2 / 12) (a uniform quantizer with the block's min-max grid), see
//     test_round_trip_budgets.
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/parallel.h"
#include "kernels/ref/ref.h"
#include "loader/package.h"
#include "onnx.pb-c.h"
#include "quant/kquant.h"
#include "quant/methods.h"
#include "quant/q4.h"
#include "tests/test_util.h"

static const char *fixtures;

// A g4_component around a standalone model (prefix "": names are used as written).
static g4_component standalone(g4_onnx_model *m) {
    g4_component c = {G4_COMP_DECODER, "decoder", "", m->path, m};
    return c;
}

static uint16_t rd16(const void *p, size_t i) {
    uint16_t h;
    memcpy(&h, (const uint8_t *)p + 2 * i, 2);
    return h;
}

// --- layout: nibble order and zero-point packing, by hand ------------------------------------

static void test_nibble_order(void) {
    // Element 2j is the low nibble of byte j, element 2j+1 the high nibble.
    uint8_t codes[32], blob[16], back[32];
    for (int i = 0; i < 32; i++) codes[i] = (uint8_t)((i * 7 + 3) & 15);
    g4_q4_pack_block(codes, 32, blob);
    for (int j = 0; j < 16; j++) CHECK_INT(blob[j], codes[2 * j] | codes[2 * j + 1] << 4);
    g4_q4_unpack_block(blob, 32, back);
    CHECK(memcmp(codes, back, 32) == 0);
    const uint8_t b2[2] = {0x21, 0x43}; // elements 1, 2, 3, 4
    CHECK_INT(g4_q4_nibble(b2, 0), 1);  // even k: low nibble
    CHECK_INT(g4_q4_nibble(b2, 1), 2);  // odd k: high nibble
    CHECK_INT(g4_q4_nibble(b2, 2), 3);
    CHECK_INT(g4_q4_nibble(b2, 3), 4);
    uint8_t s[2] = {0xff, 0xff};
    g4_q4_set_nibble(s, 2, 5); // byte 1 low nibble only
    CHECK_INT(s[0], 0xff);
    CHECK_INT(s[1], 0xf5);
    g4_q4_set_nibble(s, 1, 0);
    CHECK_INT(s[0], 0x0f);

    // Dequantization at odd/even k in an even and an odd block (K = 64: blocks 0 and 1, N = 1).
    // q codes: k -> k % 16; zero points: block 0 -> 3, block 1 -> 12; scales 0.5 and -0.25.
    uint8_t q[32];
    uint8_t kc[64];
    for (int k = 0; k < 64; k++) kc[k] = (uint8_t)(k % 16);
    g4_q4_pack_block(kc, 32, q);
    g4_q4_pack_block(kc + 32, 32, q + 16);
    uint16_t sc[2] = {g4_f32_to_f16(0.5f), g4_f32_to_f16(-0.25f)};
    uint8_t zp[1] = {0xC3}; // block 0 in the low nibble (3), block 1 in the high nibble (12)
    g4_linear li = {
        .kind = G4_W_Q4, .in = 64, .out = 1, .block = 32, .w = q, .scales = sc, .zp = zp};
    float col[64];
    g4_q4_dequant_col(&li, 0, col);
    CHECK(col[4] == (4 - 3) * 0.5f);           // even k, even block
    CHECK(col[5] == (5 - 3) * 0.5f);           // odd k, even block
    CHECK(col[32 + 6] == (6 - 12) * -0.25f);   // even k, odd block
    CHECK(col[32 + 15] == (15 - 12) * -0.25f); // odd k, odd block
}

static void test_zero_point_packing(void) {
    uint8_t row[2], back[3];
    const uint8_t zp3[3] = {3, 12, 5};
    g4_q4_pack_zp_row(zp3, 3, row); // odd kb: the last high nibble is padding (8)
    CHECK_INT(row[0], 0xC3);
    CHECK_INT(row[1], 0x85);
    g4_q4_unpack_zp_row(row, 3, back);
    CHECK(memcmp(back, zp3, 3) == 0);
    const uint8_t zp2[2] = {15, 0};
    g4_q4_pack_zp_row(zp2, 2, row);
    CHECK_INT(row[0], 0x0F);
    const uint8_t zp1[1] = {9};
    g4_q4_pack_zp_row(zp1, 1, row);
    CHECK_INT(row[0], 0x89);
    CHECK_INT(g4_q4_zp_row_bytes(1), 1);
    CHECK_INT(g4_q4_zp_row_bytes(3), 2);
    CHECK_INT(g4_q4_zp_row_bytes(48), 24);
    g4_q4_shape sh = g4_q4_shape_of(1536, 2048, 32); // E2B q_proj (spec section 5.2)
    CHECK(sh.kb == 48 && sh.q_bytes == 1572864 && sh.n_scales * 2 == 196608 &&
          sh.zp_bytes == 49152);
    sh = g4_q4_shape_of(80, 3, 32); // odd kb: per-column padding, not across columns
    CHECK(sh.kb == 3 && sh.zp_bytes == 6 && sh.q_bytes == 144);
}

// --- dequantization against a straightforward formula on random packed data -------------------

static void test_dequant_random(void) {
    const int Ks[] = {16, 32, 33, 64, 80, 96, 100, 257}, Ns[] = {1, 3, 7};
    unsigned long long rng = 12345;
    int cases = 0, bad = 0;
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (int with_zp = 0; with_zp < 2; with_zp++) {
                const int K = Ks[ki], N = Ns[ni], B = 32;
                const g4_q4_shape sh = g4_q4_shape_of(K, N, B);
                // codes and zero points kept unpacked: the formula reads these, dequant the bytes
                uint8_t *codes = g4_malloc((size_t)N * sh.kb * B),
                        *zc = g4_malloc((size_t)N * sh.kb);
                uint8_t *q = g4_malloc((size_t)sh.q_bytes), *zp = g4_malloc((size_t)sh.zp_bytes);
                uint16_t *sc = g4_malloc((size_t)sh.n_scales * 2);
                for (int i = 0; i < N * sh.kb * B; i++)
                    codes[i] = (uint8_t)(g4t_rand_u64(&rng) & 15);
                for (int i = 0; i < N * sh.kb; i++) {
                    zc[i] = (uint8_t)(g4t_rand_u64(&rng) & 15);
                    sc[i] = g4_f32_to_f16(g4t_rand_uniform(&rng, -0.1f, 0.1f));
                }
                for (int n = 0; n < N; n++) {
                    for (int b = 0; b < sh.kb; b++)
                        for (int i = 0; i < B; i++) // pack by the spec's formula, nibble by nibble
                            g4_q4_set_nibble(q + ((size_t)n * sh.kb + b) * 16, (uint64_t)i,
                                             codes[((size_t)n * sh.kb + b) * B + i]);
                    for (int b = 0; b < sh.kb; b++)
                        g4_q4_set_nibble(zp + (size_t)n * g4_q4_zp_row_bytes(sh.kb), (uint64_t)b,
                                         zc[n * sh.kb + b]);
                }
                g4_linear li = {.kind = G4_W_Q4,
                                .in = K,
                                .out = N,
                                .block = B,
                                .w = q,
                                .scales = sc,
                                .zp = with_zp ? zp : NULL};
                float *W = g4_malloc(sizeof(float) * (size_t)K * N),
                      *col = g4_malloc(sizeof(float) * K);
                float *refc = g4_malloc(sizeof(float) * K), *row = g4_malloc(sizeof(float) * N);
                g4_q4_dequant(&li, W);
                for (int n = 0; n < N; n++) {
                    g4_q4_dequant_col(&li, n, col);
                    ref_q4_dequant_col(refc, q, sc, with_zp ? zp : NULL, K, B, n);
                    for (int k = 0; k < K; k++) {
                        const int b = k / B;
                        const float want = (float)(codes[((size_t)n * sh.kb + b) * B + k % B] -
                                                   (with_zp ? zc[n * sh.kb + b] : 8)) *
                                           g4_f16_to_f32(sc[n * sh.kb + b]);
                        bad += col[k] != want || W[(size_t)k * N + n] != want || refc[k] != want;
                    }
                }
                for (int k = 0; k < K; k++) {
                    g4_q4_dequant_row(&li, k, row);
                    bad += memcmp(row, W + (size_t)k * N, sizeof(float) * N) != 0;
                }
                cases++;
                free(codes), free(zc), free(q), free(zp), free(sc), free(W), free(col), free(refc),
                    free(row);
            }
    CHECK_MSG(bad == 0,
              "%d mismatching values over %d shapes (K in 16..257, N in 1..7, with/without zp)",
              bad, cases);
}

// --- onnxruntime's MatMulNBits kernel on A = identity ------------------------------------------

static void test_dequant_vs_onnxruntime(void) {
    char *path = g4_sprintf("%s/q4/dequant_cases.onnx", fixtures);
    g4_onnx_model *m;
    int rc = g4_onnx_open(path, &m);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    free(path);
    if (rc) return;
    g4_component c = standalone(m);
    static const struct {
        const char *name;
        int K, N, zp, bias;
    } cases[] = {{"even_k64_n5", 64, 5, 1, 0}, {"odd_k96_n3", 96, 3, 1, 0},
                 {"pad_k80_n4", 80, 4, 1, 0},  {"one_k16_n6", 16, 6, 1, 0},
                 {"nozp_k64_n3", 64, 3, 0, 0}, {"odd_k33_n2", 33, 2, 1, 0},
                 {"bias_k64_n4", 64, 4, 1, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *wn = g4_sprintf("%s.weight_t", cases[i].name),
             *en = g4_sprintf("%s.expected", cases[i].name);
        g4_linear li;
        rc = g4_q4_linear_get(&c, wn, cases[i].K, cases[i].N, &li);
        CHECK_MSG(rc == G4_OK, "%s: %s", cases[i].name, g4_error());
        const g4_tensor *want = g4_onnx_tensor(m, en);
        CHECK_MSG(want && want->dtype == G4_DT_FLOAT16 &&
                      want->numel == (uint64_t)cases[i].K * cases[i].N,
                  "%s missing or wrong", en);
        if (rc == G4_OK && want) {
            CHECK((li.zp != NULL) == cases[i].zp && (li.bias != NULL) == cases[i].bias);
            float *W = g4_malloc(sizeof(float) * (size_t)cases[i].K * cases[i].N);
            g4_q4_dequant(&li, W);
            int bad = 0;
            for (int k = 0; k < cases[i].K; k++)
                for (int n = 0; n < cases[i].N; n++) {
                    float v = W[(size_t)k * cases[i].N + n];
                    if (li.bias)
                        v = g4_round_f16(
                            v + g4_f16_to_f32(rd16(
                                    li.bias, (size_t)n))); // one rounding, as ORT's fp16 output
                    const float w = g4_f16_to_f32(rd16(want->data, (size_t)k * cases[i].N + n));
                    bad += !(v == w); // exact; NaN fails
                }
            CHECK_MSG(bad == 0, "%s: %d of %d values differ from onnxruntime", cases[i].name, bad,
                      cases[i].K * cases[i].N);
            free(W);
        }
        free(wn);
        free(en);
    }
    g4_onnx_close(m);
}

// --- binding: every check of g4_q4_linear_get on synthetic models ------------------------------

typedef struct {
    const char *what;       // the case
    const char *expect_err; // fragment of the one-line error, or NULL when it must bind
    int64_t K, N, bits, block, prepacked; // attributes (-1: absent)
    int gidx, bias_dtype;                 // g_idx input present; bias dtype (0: none)
    int64_t bias_n;
    int64_t bdims[3]; // B dims
    int scales_dtype, scales_2d, zp_2d, zp_dtype;
    int64_t scales_n, zp_n; // 1-D element counts (2-D: [N, n/N])
    const char *op;         // consumer op type
    int b_slot;             // input index of B in the node
    int expect_K, expect_N; // what the caller expects
} bind_case;

static Onnx__TensorProto *mk_tensor(const char *name, int dtype, int ndim, const int64_t *dims) {
    Onnx__TensorProto *t = g4_malloc(sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = g4_strdup(name);
    t->has_data_type = 1;
    t->data_type = dtype;
    t->n_dims = (size_t)ndim;
    t->dims = g4_malloc(sizeof(int64_t) * (size_t)(ndim ? ndim : 1));
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++) t->dims[d] = dims[d], n *= (uint64_t)dims[d];
    t->has_raw_data = 1;
    t->raw_data.len = (size_t)(n * (uint64_t)g4_dtype_bits(dtype) / 8);
    t->raw_data.data = g4_calloc(t->raw_data.len + 1, 1);
    return t;
}

static Onnx__AttributeProto *mk_attr(const char *name, int64_t v) {
    Onnx__AttributeProto *a = g4_malloc(sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = g4_strdup(name);
    a->has_i = 1;
    a->i = v;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    return a;
}

// One graph: an input A, the weight tensors, one consumer node; parsed by our loader.
static g4_onnx_model *build_bind_model(const bind_case *bc) {
    Onnx__ModelProto *mp = g4_malloc(sizeof *mp);
    onnx__model_proto__init(mp);
    Onnx__GraphProto *g = mp->graph = g4_malloc(sizeof *g);
    onnx__graph_proto__init(g);
    g->initializer = g4_malloc(8 * sizeof *g->initializer);
    const int64_t N = bc->N > 0 ? bc->N : 3;
    g->initializer[g->n_initializer++] = mk_tensor("w.weight_t_Q4", G4_DT_UINT8, 3, bc->bdims);
    if (bc->scales_2d)
        g->initializer[g->n_initializer++] =
            mk_tensor("w.weight_t_scales", bc->scales_dtype, 2, (int64_t[]){N, bc->scales_n / N});
    else
        g->initializer[g->n_initializer++] =
            mk_tensor("w.weight_t_scales", bc->scales_dtype, 1, &bc->scales_n);
    if (bc->zp_2d)
        g->initializer[g->n_initializer++] =
            mk_tensor("w.weight_t_zero_point", bc->zp_dtype, 2, (int64_t[]){N, bc->zp_n / N});
    else
        g->initializer[g->n_initializer++] =
            mk_tensor("w.weight_t_zero_point", bc->zp_dtype, 1, &bc->zp_n);
    if (bc->gidx)
        g->initializer[g->n_initializer++] = mk_tensor("w.g_idx", G4_DT_INT32, 1, (int64_t[]){64});
    if (bc->bias_dtype)
        g->initializer[g->n_initializer++] = mk_tensor("w.bias", bc->bias_dtype, 1, &bc->bias_n);
    Onnx__NodeProto *nd = g4_malloc(sizeof *nd);
    onnx__node_proto__init(nd);
    nd->name = g4_strdup("layer/w/MatMul_Q4");
    nd->op_type = g4_strdup(bc->op);
    nd->domain = g4_strdup("com.microsoft");
    const char *ins[6] = {"a",
                          "w.weight_t_Q4",
                          "w.weight_t_scales",
                          "w.weight_t_zero_point",
                          bc->gidx ? "w.g_idx" : "",
                          bc->bias_dtype ? "w.bias" : ""};
    if (bc->b_slot == 2) ins[1] = "w.weight_t_scales", ins[2] = "w.weight_t_Q4";
    nd->n_input = bc->bias_dtype ? 6 : bc->gidx ? 5 : 4;
    nd->input = g4_malloc(6 * sizeof(char *));
    for (size_t i = 0; i < nd->n_input; i++) nd->input[i] = g4_strdup(ins[i]);
    nd->n_output = 1;
    nd->output = g4_malloc(sizeof(char *));
    nd->output[0] = g4_strdup("y");
    nd->attribute = g4_malloc(5 * sizeof *nd->attribute);
    if (bc->K >= 0) nd->attribute[nd->n_attribute++] = mk_attr("K", bc->K);
    if (bc->N >= 0) nd->attribute[nd->n_attribute++] = mk_attr("N", bc->N);
    if (bc->bits >= 0) nd->attribute[nd->n_attribute++] = mk_attr("bits", bc->bits);
    if (bc->block >= 0) nd->attribute[nd->n_attribute++] = mk_attr("block_size", bc->block);
    if (bc->prepacked >= 0)
        nd->attribute[nd->n_attribute++] = mk_attr("weight_prepacked", bc->prepacked);
    g->node = g4_malloc(sizeof *g->node);
    g->node[g->n_node++] = nd;
    size_t n = onnx__model_proto__get_packed_size(mp);
    uint8_t *buf = g4_malloc(n);
    onnx__model_proto__pack(mp, buf);
    onnx__model_proto__free_unpacked(mp, NULL);
    g4_onnx_model *m = NULL;
    int rc = g4_onnx_parse(buf, n, "synthetic/model.onnx", "/nonexistent", &m);
    free(buf);
    if (rc) fprintf(stderr, "build_bind_model(%s): %s\n", bc->what, g4_error());
    return m;
}

static void test_binding_checks(void) {
    // The valid base: K 64, N 3, block 32 -> B [3, 2, 16], scales [6], zp [3].
    const bind_case base = {"valid 1-D (Olive)",
                            NULL,
                            64,
                            3,
                            4,
                            32,
                            -1,
                            0,
                            0,
                            0,
                            {3, 2, 16},
                            G4_DT_FLOAT16,
                            0,
                            0,
                            G4_DT_UINT8,
                            6,
                            3,
                            "MatMulNBits",
                            1,
                            64,
                            3};
    bind_case cases[32];
    int n = 0;
    cases[n++] = base;
    bind_case c;
#define CASE(desc, err, ...)                                                                       \
    do {                                                                                           \
        c = base;                                                                                  \
        c.what = desc;                                                                             \
        c.expect_err = err;                                                                        \
        __VA_ARGS__;                                                                               \
        cases[n++] = c;                                                                            \
    } while (0)
    CASE("valid 2-D (onnxruntime)", NULL, c.scales_2d = 1, c.zp_2d = 1);
    CASE("valid, bits absent (default 4), prepacked 0, fp16 bias", NULL, c.bits = -1,
         c.prepacked = 0, c.bias_dtype = G4_DT_FLOAT16, c.bias_n = 3);
    CASE("valid, K and N not checked", NULL, c.expect_K = -1, c.expect_N = -1);
    CASE("K differs from the expected", "K = 64, N = 3, expected K = 128, N = 3", c.expect_K = 128);
    CASE("N differs from the expected", "expected K = 64, N = 4", c.expect_N = 4);
    CASE("K missing", "required attribute 'K' is missing", c.K = -1);
    CASE("block_size missing", "required attribute 'block_size' is missing", c.block = -1);
    CASE("bits 8", "bits = 8, g4cu supports 4", c.bits = 8);
    CASE("block 24", "block_size = 24, expected a power of two >= 16", c.block = 24);
    CASE("block 8", "block_size = 8, expected a power of two >= 16", c.block = 8);
    CASE("block 64 (valid op, not our kernels)", "block_size = 64, g4cu kernels support 32",
         c.block = 64, c.bdims[1] = 1, c.bdims[2] = 32, c.scales_n = 3);
    CASE("prepacked", "weight_prepacked = 1, expected 0", c.prepacked = 1);
    CASE("g_idx", "g_idx input 'w.g_idx' is not supported", c.gidx = 1);
    CASE("bias fp32", "bias expected float16 [N] = [3], found float32 [3]",
         c.bias_dtype = G4_DT_FLOAT, c.bias_n = 3);
    CASE("bias length", "bias expected float16 [N] = [3], found float16 [4]",
         c.bias_dtype = G4_DT_FLOAT16, c.bias_n = 4);
    CASE("B blob size", "expected uint8 [N, ceil(K/32), 16] = [3, 2, 16], found uint8 [3, 2, 8]",
         c.bdims[2] = 8);
    CASE("B block count", "expected uint8 [N, ceil(K/32), 16] = [3, 2, 16], found uint8 [3, 3, 16]",
         c.bdims[1] = 3);
    CASE("scales fp32", "expected float16 [N*kb] = [6] (or [N, kb] = [3, 2]), found float32 [6]",
         c.scales_dtype = G4_DT_FLOAT);
    CASE("scales count", "expected float16 [N*kb] = [6] (or [N, kb] = [3, 2]), found float16 [9]",
         c.scales_n = 9);
    CASE("zp count", "expected uint8 [N*ceil(kb/2)] = [3] (or [N, ceil(kb/2)] = [3, 1]), found [6]",
         c.zp_n = 6);
    CASE("zp float", "zero points of dtype float16, expected packed uint8",
         c.zp_dtype = G4_DT_FLOAT16, c.zp_n = 6);
    CASE("consumer is not MatMulNBits", "expected only com.microsoft MatMulNBits nodes",
         c.op = "MatMul");
    CASE("B read as scales", "reads 'w.weight_t_Q4' as input 2+, expected it as B (input 1)",
         c.b_slot = 2);
#undef CASE
    for (int i = 0; i < n; i++) {
        g4_onnx_model *m = build_bind_model(&cases[i]);
        CHECK_MSG(m != NULL, "%s: synthetic model did not parse", cases[i].what);
        if (!m) continue;
        g4_component comp = standalone(m);
        g4_linear li;
        int rc = g4_q4_linear_get(&comp, "w.weight_t", cases[i].expect_K, cases[i].expect_N, &li);
        if (!cases[i].expect_err) {
            CHECK_MSG(rc == G4_OK, "%s: %s", cases[i].what, g4_error());
            CHECK(li.kind == G4_W_Q4 && li.in == 64 && li.out == 3 && li.block == 32 && li.w &&
                  li.scales && li.zp);
            CHECK((li.bias != NULL) == (cases[i].bias_dtype != 0));
        } else {
            const char *e = g4_error();
            CHECK_MSG(rc == G4_EUSER && strstr(e, cases[i].expect_err) &&
                          strstr(e, "synthetic/model.onnx") && !strchr(e, '\n'),
                      "%s: rc %d, error '%s', expected '%s'", cases[i].what, rc, e,
                      cases[i].expect_err);
        }
        g4_onnx_close(m);
    }
    // A missing weight names the tensor it looked for.
    g4_onnx_model *m = build_bind_model(&base);
    if (m) {
        g4_component comp = standalone(m);
        g4_linear li;
        int rc = g4_q4_linear_get(&comp, "other.weight_t", 64, 3, &li);
        CHECK_MSG(rc == G4_EUSER && strstr(g4_error(), "tensor 'other.weight_t_Q4' is missing"),
                  "%s", g4_error());
        // g4_linear_get: no fp16 tensor of that name, so the Q4 form is bound
        rc = g4_linear_get(&comp, "w.weight_t", 64, 3, &li);
        CHECK_MSG(rc == G4_OK && li.kind == G4_W_Q4, "%s", g4_error());
        g4_onnx_close(m);
    }
}

// --- the quantizer
// --------------------------------------------------------------------------------

// The straightforward min-max round-to-nearest quantizer (for comparison, not a reference).
static void rtn_block(const float *x, int B, float *out) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < B; i++) lo = x[i] < lo ? x[i] : lo, hi = x[i] > hi ? x[i] : hi;
    const float s = hi > lo ? (hi - lo) / 15.0f : 1.0f;
    const float z = fminf(15.0f, fmaxf(0.0f, rintf(-lo / s)));
    for (int i = 0; i < B; i++) out[i] = (fminf(15.0f, fmaxf(0.0f, rintf(x[i] / s + z))) - z) * s;
}

typedef struct {
    double rmse, ideal, rtn; // our RMSE, the ideal uniform 4-bit RMSE, the RTN RMSE
    double wse, wse_rtn;     // the k-quant's own objective, sum (av|x| + |x|) e^2: ours, RTN's
} rt_stats;

// Quantizes W [K, N] with ours, dequantizes, and measures.
static rt_stats round_trip(const float *W, int K, int N, int threads) {
    const int B = 32;
    const g4_q4_shape sh = g4_q4_shape_of(K, N, B);
    uint8_t *q = g4_malloc((size_t)sh.q_bytes), *zp = g4_malloc((size_t)sh.zp_bytes);
    uint16_t *sc = g4_malloc((size_t)sh.n_scales * 2);
    int rc = g4_q4_quantize(W, G4_DT_FLOAT, K, N, B, threads, q, sc, zp);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    g4_linear li = {.kind = G4_W_Q4, .in = K, .out = N, .block = B, .w = q, .scales = sc, .zp = zp};
    float *D = g4_malloc(sizeof(float) * (size_t)K * N), col[32], r[32];
    g4_q4_dequant(&li, D);
    double se = 0, ideal = 0, rtn = 0, wse = 0, wse_rtn = 0;
    for (int n = 0; n < N; n++)
        for (int b = 0; b < sh.kb; b++) {
            float lo = INFINITY, hi = -INFINITY;
            double ss = 0;
            for (int i = 0; i < B; i++) {
                const int k = b * B + i;
                col[i] = k < K ? W[(size_t)k * N + n] : 0.0f; // the padding the quantizers use
                lo = fminf(lo, col[i]), hi = fmaxf(hi, col[i]);
                ss += (double)col[i] * col[i];
            }
            const double av = sqrt(ss / B);
            rtn_block(col, B, r);
            for (int i = 0; i < B && b * B + i < K; i++) {
                const int k = b * B + i;
                const double e = (double)D[(size_t)k * N + n] - col[i], er = (double)r[i] - col[i];
                se += e * e;
                rtn += er * er;
                wse += (av + fabs(col[i])) * e * e;
                wse_rtn += (av + fabs(col[i])) * er * er;
            }
            const double step = ((double)hi - lo) / 15.0;
            ideal += step * step / 12.0 * (double)(K - b * B < B ? K - b * B : B);
        }
    free(q), free(zp), free(sc), free(D);
    const double cnt = (double)K * N;
    return (rt_stats){sqrt(se / cnt), sqrt(ideal / cnt), sqrt(rtn / cnt), wse, wse_rtn};
}

static float gauss(unsigned long long *s) {
    float u1 = g4t_rand_uniform(s, 1e-7f, 1.0f), u2 = g4t_rand_uniform(s, 0.0f, 1.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

// A [K, N] fp16 weight of 0.05 x a normal-like draw (gauss, or Irwin-Hall(4) when !gaussian),
// about one element in 50 times 4: outliers, as real weights have. rng continues past it.
static uint16_t *outlier_weights(int K, int N, unsigned long long *rng, int gaussian) {
    uint16_t *w = g4_malloc(sizeof(uint16_t) * K * N);
    for (int i = 0; i < K * N; i++) {
        float g = 0;
        if (gaussian)
            g = gauss(rng);
        else
            for (int j = 0; j < 4; j++) g += g4t_rand_uniform(rng, -0.5f, 0.5f);
        if (g4t_rand_u64(rng) % 50 == 0) g *= 4.0f;
        w[i] = g4_f32_to_f16(0.05f * g);
    }
    return w;
}

static void test_round_trip_budgets(void) {
    // Budgets on RMSE / ideal, the ideal being a uniform quantizer's error on each block's min-max
    // grid (step = range/15, error^2 = step^2/12). Measured (seed 777, K 256, N 64, fp16 weights):
    // uniform 1.035, Gaussian(0.02) 1.010, Laplace 1.011, Gaussian with 1 % outliers x20 0.958.
    // The budgets sit ~5 % above; a real defect (a wrong zero point or nibble, a lost scale) costs
    // far more. Second check: ours against plain min-max round-to-nearest with a rounded zero
    // point. Measured RMSE ratios 1.020, 1.013, 1.015, 1.003: this k-quant is not better than RTN
    // in plain MSE (the search fits a continuous offset and weights |x|, then the zero point is
    // rounded and the codes recomputed; its own weighted objective also ends 3-6 % above RTN's
    // except on outliers, where it is 8 % below). Budget 1.04 x RTN.
    static const struct {
        const char *dist;
        double budget;
    } d[] = {{"uniform", 1.09}, {"gaussian", 1.06}, {"laplace", 1.06}, {"outliers", 1.01}};
    const int K = 256, N = 64;
    float *W = g4_malloc(sizeof(float) * K * N);
    for (size_t t = 0; t < sizeof d / sizeof *d; t++) {
        unsigned long long s = 777;
        for (int i = 0; i < K * N; i++) {
            float v;
            if (t == 0)
                v = g4t_rand_uniform(&s, -1.0f, 1.0f);
            else if (t == 1)
                v = 0.02f * gauss(&s);
            else if (t == 2) {
                float u = g4t_rand_uniform(&s, -0.5f, 0.5f);
                v = -0.05f * copysignf(logf(1.0f - 2.0f * fabsf(u) + 1e-7f), u);
            } else {
                v = 0.02f * gauss(&s);
                if (g4t_rand_uniform(&s, 0.0f, 1.0f) < 0.01f) v *= 20.0f;
            }
            W[i] = g4_round_f16(v); // the packages' weights are fp16
        }
        rt_stats r = round_trip(W, K, N, 2);
        const double ratio = r.rmse / r.ideal;
        printf(
            "  round trip %-9s RMSE %.4g, ideal 4-bit %.4g, ratio %.3f (budget %.2f), min-max RTN "
            "ratio %.3f; weighted error vs RTN's %.3f\n",
            d[t].dist, r.rmse, r.ideal, ratio, d[t].budget, r.rtn / r.ideal, r.wse / r.wse_rtn);
        CHECK_MSG(ratio <= d[t].budget, "%s: RMSE/ideal %.4f over budget %.2f", d[t].dist, ratio,
                  d[t].budget);
        CHECK_MSG(r.rmse <= 1.04 * r.rtn,
                  "%s: k-quant RMSE %.4g more than 4 %% over min-max RTN's %.4g", d[t].dist, r.rmse,
                  r.rtn);
    }
    free(W);
}

static void test_quantizer_edge_blocks(void) {
    uint8_t codes[32], zp;
    float x[32], s;
    memset(x, 0, sizeof x);
    g4_kquant_block(x, 32, codes, &s, &zp); // all zeros: dequantizes to exactly 0
    int ok = 1;
    for (int i = 0; i < 32; i++) ok &= (codes[i] - zp) * s == 0.0f;
    CHECK(ok);
    for (int i = 0; i < 32; i++)
        x[i] = (float)(i % 16) * 0.25f - 1.0f; // exactly on a 16-level grid
    g4_kquant_block(x, 32, codes, &s, &zp);
    ok = 1;
    for (int i = 0; i < 32; i++)
        ok &= fabsf((float)(codes[i] - zp) * g4_round_f16(s) - x[i]) < 1e-6f;
    CHECK_MSG(ok, "a block on a 4-bit grid must be reproduced (scale %g, zp %d)", s, zp);
    // Thread count does not change the bytes.
    const int K = 96, N = 70;
    float *W = g4_malloc(sizeof(float) * K * N);
    unsigned long long st = 99;
    for (int i = 0; i < K * N; i++) W[i] = g4t_rand_uniform(&st, -2.0f, 2.0f);
    const g4_q4_shape sh = g4_q4_shape_of(K, N, 32);
    uint8_t *q1 = g4_malloc(sh.q_bytes), *q3 = g4_malloc(sh.q_bytes), *z1 = g4_malloc(sh.zp_bytes),
            *z3 = g4_malloc(sh.zp_bytes);
    uint16_t *s1 = g4_malloc(sh.n_scales * 2), *s3 = g4_malloc(sh.n_scales * 2);
    CHECK(g4_q4_quantize(W, G4_DT_FLOAT, K, N, 32, 1, q1, s1, z1) == G4_OK);
    CHECK(g4_q4_quantize(W, G4_DT_FLOAT, K, N, 32, 3, q3, s3, z3) == G4_OK);
    CHECK(!memcmp(q1, q3, sh.q_bytes) && !memcmp(s1, s3, sh.n_scales * 2) &&
          !memcmp(z1, z3, sh.zp_bytes));
    for (int n = 0; n < N; n++) CHECK_INT(z1[n * 2 + 1] >> 4, 8); // kb = 3: padding nibble 8
    CHECK(g4_q4_quantize(W, G4_DT_FLOAT, K, N, 24, 1, q1, s1, z1) == G4_EUSER);
    CHECK(strstr(g4_error(), "block size 24") != NULL);
    free(W), free(q1), free(q3), free(z1), free(z3), free(s1), free(s3);
}

// Our quantizer on fp16 weight `src` must give onnxruntime's k_quant bytes (linear li).
static int same_as_onnxruntime(const g4_tensor *src, const g4_linear *li, const char *what) {
    const int K = li->in, N = li->out;
    const g4_q4_shape sh = g4_q4_shape_of(K, N, li->block);
    uint8_t *q = g4_malloc(sh.q_bytes), *zp = g4_malloc(sh.zp_bytes);
    uint16_t *sc = g4_malloc(sh.n_scales * 2);
    int rc = g4_q4_quantize(src->data, G4_DT_FLOAT16, K, N, li->block, 2, q, sc, zp);
    int ok = rc == G4_OK && li->zp;
    if (ok) {
        uint64_t dq = 0, ds = 0, dz = 0;
        for (uint64_t i = 0; i < sh.q_bytes; i++) dq += q[i] != ((const uint8_t *)li->w)[i];
        for (uint64_t i = 0; i < sh.n_scales; i++) ds += sc[i] != rd16(li->scales, i);
        for (uint64_t i = 0; i < sh.zp_bytes; i++) dz += zp[i] != ((const uint8_t *)li->zp)[i];
        ok = !dq && !ds && !dz;
        if (!ok)
            fprintf(stderr,
                    "  %s [%d, %d]: %llu/%llu code bytes, %llu/%llu scales, %llu/%llu zero-point "
                    "bytes differ from onnxruntime\n",
                    what, K, N, (unsigned long long)dq, (unsigned long long)sh.q_bytes,
                    (unsigned long long)ds, (unsigned long long)sh.n_scales, (unsigned long long)dz,
                    (unsigned long long)sh.zp_bytes);
    }
    free(q), free(zp), free(sc);
    return ok;
}

static void test_kquant_vs_onnxruntime_cases(void) {
    char *path = g4_sprintf("%s/q4/kquant_cases.onnx", fixtures);
    g4_onnx_model *m;
    int rc = g4_onnx_open(path, &m);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    free(path);
    if (rc) return;
    g4_component c = standalone(m);
    static const char *const cases[] = {"gauss_k256_n16",   "uniform_k64_n8", "outliers_k128_n16",
                                        "laplace_k192_n12", "padded_k100_n7", "special_k256_n9"};
    int matched = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *wn = g4_sprintf("%s.weight_t", cases[i]), *sn = g4_sprintf("%s.src", cases[i]);
        const g4_tensor *src = g4_onnx_tensor(m, sn);
        g4_linear li;
        rc = g4_q4_linear_get(&c, wn, -1, -1, &li);
        CHECK_MSG(rc == G4_OK && src, "%s: %s", cases[i], rc ? g4_error() : "no .src tensor");
        if (rc == G4_OK && src) {
            CHECK(src->dims[0] == li.in && src->dims[1] == li.out);
            const int ok = same_as_onnxruntime(src, &li, cases[i]);
            CHECK_MSG(ok, "%s: not byte for byte onnxruntime's k_quant", cases[i]);
            matched += ok;
        }
        free(wn), free(sn);
    }
    printf("  k-quant cases identical to onnxruntime: %d of %zu\n", matched,
           sizeof cases / sizeof *cases);
    g4_onnx_close(m);
}

// --- the onnxruntime-made Q4 package
// ---------------------------------------------------------------

// A package directory: the tiny f16 package with the fixture's Q4 decoder (symlinks).
static char *assemble_q4_package(const char *tiny) {
    char *dir = g4t_tmpdir();
    int rc = g4t_q4_package(dir, tiny, fixtures);
    CHECK_MSG(rc == 0, "assembling the Q4 package in %s failed", dir);
    return dir;
}

static void test_onnxruntime_q4_package(void) {
    const char *tiny = g4t_env("G4_TINY_PKG");
    char *dir = assemble_q4_package(tiny);
    g4_package *p16 = NULL, *p4 = NULL;
    int rc = g4_package_open(tiny, &p16);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc == G4_OK) {
        rc = g4_package_open(dir, &p4);
        CHECK_MSG(rc == G4_OK, "%s", g4_error());
    }
    if (rc == G4_OK) {
        CHECK(p4->text.weights_q4 == 1);
        const g4_component *c16 = g4_package_component(p16, G4_COMP_DECODER);
        const g4_component *c4 = g4_package_component(p4, G4_COMP_DECODER);
        int n_lin = 0, n_bound = 0, n_kq = 0, n_kq_same = 0, n_rtn = 0, over = 0;
        double worst_step = 0, sum_ratio = 0;
        for (int i = 0; i < c16->model->n_tensors; i++) {
            const g4_tensor *t = &c16->model->tensors[i];
            const size_t L = strlen(t->name);
            if (t->ndim != 2 || L < 9 || strcmp(t->name + L - 9, ".weight_t")) continue;
            n_lin++;
            const char *name = t->name + strlen(c16->prefix); // bind by the prefix-less name
            g4_linear li;
            rc = g4_q4_linear_get(c4, name, (int)t->dims[0], (int)t->dims[1], &li);
            CHECK_MSG(rc == G4_OK, "%s: %s", name, g4_error());
            if (rc) continue;
            n_bound++;
            char *bn = g4_sprintf("%s%s_Q4", c4->prefix, name);
            const g4_tensor *b = g4_onnx_tensor(c4->model, bn);
            free(bn);
            CHECK_MSG(b && b->data == li.w, "%s: bound another tensor than its own _Q4", name);
            if (g4_q4_kblocks(li.in, 32) % 2 == 0) { // k_quant: ours must give the same bytes
                n_kq++;
                n_kq_same += same_as_onnxruntime(t, &li, name);
            } else {
                n_rtn++; // onnxruntime's RTN (odd block count, see the fixture README): bound only
            }
            // 4-bit error bound against the f16 weight: per block, no element off by more than
            // 1.5 steps of the block's min-max grid (RTN: half a step plus up to half a step of
            // zero-point rounding; the k-quant grid is at most 15/14 as coarse and may clip),
            // and per matrix RMSE within 1.25 x the ideal uniform error.
            const int K = li.in, N = li.out, kb = g4_q4_kblocks(K, 32);
            float *D = g4_malloc(sizeof(float) * (size_t)K * N);
            g4_q4_dequant(&li, D);
            double se = 0, ideal = 0;
            for (int n = 0; n < N; n++)
                for (int bb = 0; bb < kb; bb++) {
                    float lo = 0, hi = 0; // the zero padding belongs to the block
                    int first = 1;
                    for (int k = bb * 32; k < (bb + 1) * 32; k++) {
                        float v = k < K ? (float)g4_tensor_get(t, (uint64_t)k * N + n) : 0.0f;
                        if (first || v < lo) lo = v;
                        if (first || v > hi) hi = v;
                        first = 0;
                    }
                    const double step = ((double)hi - lo) / 15.0;
                    for (int k = bb * 32; k < (bb + 1) * 32 && k < K; k++) {
                        const double e =
                            D[(size_t)k * N + n] - g4_tensor_get(t, (uint64_t)k * N + n);
                        se += e * e;
                        ideal += step * step / 12.0;
                        if (step > 0 && fabs(e) / step > worst_step) worst_step = fabs(e) / step;
                        over += !(fabs(e) <= 1.5 * step + 1e-12); // NaN counts
                    }
                }
            const double ratio = sqrt(se / ideal);
            sum_ratio += ratio;
            CHECK_MSG(ratio <= 1.25, "%s: RMSE %.3f x the ideal 4-bit error", name, ratio);
            free(D);
        }
        printf(
            "  onnxruntime Q4 package: %d linears, %d bound (%d k_quant, %d RTN); ours identical "
            "to onnxruntime's k_quant on %d; worst element error %.3f steps, mean RMSE/ideal "
            "%.3f\n",
            n_lin, n_bound, n_kq, n_rtn, n_kq_same, worst_step, n_bound ? sum_ratio / n_bound : 0);
        CHECK_INT(n_lin, 83);
        CHECK_INT(n_bound, n_lin);
        CHECK_INT(n_kq, 73);
        CHECK_INT(n_kq_same, n_kq);
        CHECK_MSG(over == 0, "%d elements off by more than 1.5 steps", over);
    }
    g4_package_close(p4);
    g4_package_close(p16);
    g4t_rmtree(dir);
}

// Squared reconstruction error of W [K, N] (fp16) by the Q4 arrays, over the channels k with
// k % B == ch (ch < 0: all channels).
static double q4_sq_error(const uint16_t *w, int K, int N, int B, const uint8_t *q,
                          const uint16_t *sc, const uint8_t *zp, int ch) {
    g4_linear l = {.kind = G4_W_Q4, .in = K, .out = N, .block = B, .w = q, .scales = sc, .zp = zp};
    float *c = g4_malloc(sizeof(float) * (size_t)K);
    double e = 0;
    for (int n = 0; n < N; n++) {
        g4_q4_dequant_col(&l, n, c);
        for (int k = 0; k < K; k++) {
            if (ch >= 0 && k % B != ch) continue;
            const double d = c[k] - (double)g4_f16_to_f32(w[k * N + n]);
            e += d * d;
        }
    }
    free(c);
    return e;
}

// The activation-aware k-quant (g4_q4_quantize_imp): it picks each block's stored scale and zero
// point by the importance-weighted error of the stored form, so a uniform importance does not
// do worse than the plain search (within 1%), and an importance that singles out one channel per
// block makes that channel's error smaller than the plain search's.
static void test_kquant_importance(void) {
    const int K = 96, N = 24, B = G4_Q4_BLOCK; // 3 blocks per column
    unsigned long long rng = 20261201;
    uint16_t *w = g4_malloc(sizeof(uint16_t) * K * N);
    for (int i = 0; i < K * N; i++) w[i] = g4_f32_to_f16(g4t_rand_uniform(&rng, -0.1f, 0.1f));
    const g4_q4_shape sh = g4_q4_shape_of(K, N, B);
    uint8_t *q0 = g4_malloc(sh.q_bytes), *q1 = g4_malloc(sh.q_bytes), *z0 = g4_malloc(sh.zp_bytes),
            *z1 = g4_malloc(sh.zp_bytes);
    uint16_t *s0 = g4_malloc(2 * sh.n_scales), *s1 = g4_malloc(2 * sh.n_scales);
    float imp[96];
    for (int k = 0; k < K; k++) imp[k] = 3.5f;
    CHECK(g4_q4_quantize(w, G4_DT_FLOAT16, K, N, B, 2, q0, s0, z0) == G4_OK);
    CHECK(g4_q4_quantize_imp(w, G4_DT_FLOAT16, K, N, B, 2, imp, q1, s1, z1) == G4_OK);
    const double e_plain = q4_sq_error(w, K, N, B, q0, s0, z0, -1);
    CHECK(q4_sq_error(w, K, N, B, q1, s1, z1, -1) <= 1.01 * e_plain);
    for (int k = 0; k < K; k++) imp[k] = k % B == 5 ? 1000.0f : 1.0f;
    CHECK(g4_q4_quantize_imp(w, G4_DT_FLOAT16, K, N, B, 2, imp, q1, s1, z1) == G4_OK);
    CHECK(q4_sq_error(w, K, N, B, q1, s1, z1, 5) < q4_sq_error(w, K, N, B, q0, s0, z0, 5));
    free(w), free(q0), free(q1), free(z0), free(z1), free(s0), free(s1);
}

// Three quantizer outputs of shape sh (q, zero points, scales), for side-by-side variants.
// Sets (val non-NULL) or unsets an environment variable; returns the old value to restore with
// env_restore (the quantizer reads its A/B switches, e.g. G4_IMATRIX_REFIT, at each call).
static char *env_swap(const char *name, const char *val) {
    const char *old = getenv(name);
    char *saved = old ? g4_strdup(old) : NULL;
    if (val)
        setenv(name, val, 1);
    else
        unsetenv(name);
    return saved;
}
static void env_restore(const char *name, char *saved) {
    if (saved)
        setenv(name, saved, 1), free(saved);
    else
        unsetenv(name);
}

static void q4_outputs3(const g4_q4_shape *sh, uint8_t **q, uint8_t **z, uint16_t **sc) {
    for (int v = 0; v < 3; v++)
        q[v] = g4_malloc(sh->q_bytes), z[v] = g4_malloc(sh->zp_bytes),
        sc[v] = g4_malloc(2 * sh->n_scales);
}

// The imatrix block search (g4_q4_quantize_imp) against plain k-quant, judged by an independent
// computation: each block's stored form read back through the scalar dequantizer and its error
// sum_k imp[k] (wq[k] - w[k])^2 summed here in double. The search includes k-quant's own pick and
// judges each candidate in the stored form (fp16 scale, integer zero point), so no block may do
// worse than plain k-quant. The first search (G4_IMATRIX_SEARCH=v1) fails that (measured: worse
// on 15 of 192 blocks here) and must lose to the new one in total. Weights: Gaussian with a few
// outliers (a block's range is often set by one weight); importance: log-normal over channels
// (activations' mean x^2 spans orders of magnitude).
//   IMX_REL 1e-6: the quantizer weighs by imp / mean(imp) rounded to float (2^-24 relative per
//                 channel), so two candidates this close may rank either way; the dequantized
//                 values themselves are exact (see the tolerances above)
//   IMX_GAIN 0.9: the total weighted error must be below 0.9x plain k-quant's (measured 0.76x;
//                 the first search 0.81x)
#define IMX_REL  1e-6
#define IMX_GAIN 0.9
static double imx_block_err(const uint16_t *w, const float *imp, int K, int N, int B,
                            const float *deq, int n, int b) {
    double e = 0;
    for (int k = b * B; k < (b + 1) * B && k < K; k++) {
        const double d = (double)deq[k] - g4_f16_to_f32(w[(size_t)k * N + n]);
        e += (double)imp[k] * d * d;
    }
    return e;
}

static void test_imatrix_search_per_block(void) {
    const int K = 128, N = 48, B = G4_Q4_BLOCK, kb = K / B;
    unsigned long long rng = 20261204;
    uint16_t *w = outlier_weights(K, N, &rng, 0);
    float imp[128];
    for (int k = 0; k < K; k++) imp[k] = expf(g4t_rand_uniform(&rng, -3.0f, 3.0f));
    const g4_q4_shape sh = g4_q4_shape_of(K, N, B);
    uint8_t *q[3], *z[3];
    uint16_t *sc[3];
    q4_outputs3(&sh, q, z, sc);
    CHECK(g4_q4_quantize(w, G4_DT_FLOAT16, K, N, B, 2, q[0], sc[0], z[0]) == G4_OK);
    CHECK(g4_q4_quantize_imp(w, G4_DT_FLOAT16, K, N, B, 2, imp, q[1], sc[1], z[1]) == G4_OK);
    const char *old = getenv("G4_IMATRIX_SEARCH");
    char *saved = old ? g4_strdup(old) : NULL;
    setenv("G4_IMATRIX_SEARCH", "v1", 1);
    CHECK(g4_q4_quantize_imp(w, G4_DT_FLOAT16, K, N, B, 2, imp, q[2], sc[2], z[2]) == G4_OK);
    if (saved)
        setenv("G4_IMATRIX_SEARCH", saved, 1), free(saved);
    else
        unsetenv("G4_IMATRIX_SEARCH");
    float *deq = g4_malloc(sizeof(float) * K);
    double tot[3] = {0, 0, 0};
    int worse = 0, v1_worse = 0, better = 0;
    for (int n = 0; n < N; n++) {
        double e[3][4];
        for (int v = 0; v < 3; v++) {
            g4_linear l = {.kind = G4_W_Q4,
                           .in = K,
                           .out = N,
                           .block = B,
                           .w = q[v],
                           .scales = sc[v],
                           .zp = z[v]};
            g4_q4_dequant_col(&l, n, deq);
            for (int b = 0; b < kb; b++)
                tot[v] += e[v][b] = imx_block_err(w, imp, K, N, B, deq, n, b);
        }
        for (int b = 0; b < kb; b++) {
            worse += e[1][b] > e[0][b] * (1 + IMX_REL);
            v1_worse += e[2][b] > e[0][b] * (1 + IMX_REL);
            better += e[1][b] < e[0][b] * (1 - IMX_REL);
        }
    }
    printf("  imatrix search: weighted error %.4g, plain k-quant %.4g (%.3fx), first search %.4g "
           "(%.3fx); blocks worse than plain: %d (first search %d), better %d of %d\n",
           tot[1], tot[0], tot[1] / tot[0], tot[2], tot[2] / tot[0], worse, v1_worse, better,
           N * kb);
    CHECK_MSG(worse == 0,
              "imatrix search: %d of %d blocks with a larger weighted error than plain "
              "k-quant's",
              worse, N * kb);
    CHECK_MSG(tot[1] < IMX_GAIN * tot[0],
              "imatrix search: weighted error %g, plain %g (want < %gx)", tot[1], tot[0], IMX_GAIN);
    CHECK_MSG(tot[1] < tot[2], "imatrix search: weighted error %g, the first search's %g", tot[1],
              tot[2]);
    // measured: 191 of the 192 blocks strictly better, the other the same codes as plain's (the
    // inputs are seeded and the search deterministic, so a search that helps fewer blocks is a
    // regression even where the totals above still pass)
    CHECK_MSG(better >= N * kb - 1,
              "imatrix search: %d of %d blocks better than plain k-quant (measured %d)", better,
              N * kb, N * kb - 1);
    free(deq), free(w);
    for (int v = 0; v < 3; v++) free(q[v]), free(z[v]), free(sc[v]);
}

// The refit after the imatrix search (kquant.c imx_refit, G4_IMATRIX_REFIT=0 without it) never
// raises a block's error, judged by an independent computation of the error the search minimises,
// from the stored form read back through the scalar dequantizer (d = wq - w exact in double):
//   no mean: each block's sum imp d^2 (imp as g4_imx_prepare scales it) on every block;
//   with the mean: sum var d^2 + (sum mu d)^2 (g4_imx_prepare's var and mu) on each column's
//     first block, the one whose carried term is 0 in both runs (later blocks carry different
//     sums, so they are not comparable block by block).
// A block is worse if its error exceeds the search's by more than REFIT_REL (two computations of
// one sum in double, in different orders), better if below by more, else unchanged (the counts
// are printed; measured on these seeded inputs, see the checks). Inputs: test_imatrix_search's
// weights and importance, and a mean per channel of either sign.
#define REFIT_REL              1e-9
#define REFIT_MIN_BETTER_DIAG  14 // measured: 14 of 192 better, 178 unchanged
#define REFIT_MIN_BETTER_MEAN  43 // measured: 43 of 48 better, 5 unchanged
static double refit_err(const uint16_t *w, const float *var, const float *mu, int N, int B,
                        const float *deq, int n, int b) {
    double e = 0, t = 0;
    for (int k = b * B; k < (b + 1) * B; k++) {
        const double d = (double)deq[k] - g4_f16_to_f32(w[(size_t)k * N + n]);
        e += (double)var[k] * d * d;
        if (mu) t += (double)mu[k] * d;
    }
    return e + t * t;
}

static void test_imatrix_refit(void) {
    const int K = 128, N = 48, B = G4_Q4_BLOCK, kb = K / B;
    unsigned long long rng = 20261204;
    uint16_t *w = outlier_weights(K, N, &rng, 0);
    float imp[128], mean[128];
    for (int k = 0; k < K; k++) imp[k] = expf(g4t_rand_uniform(&rng, -3.0f, 3.0f));
    for (int k = 0; k < K; k++) // |mean| up to 0.95 of rms: var = imp - mean^2 > 0
        mean[k] = g4t_rand_uniform(&rng, -0.95f, 0.95f) * sqrtf(imp[k]);
    const g4_q4_shape sh = g4_q4_shape_of(K, N, B);
    uint8_t *q[3], *z[3];
    uint16_t *sc[3];
    q4_outputs3(&sh, q, z, sc);
    float *deq = g4_malloc(sizeof(float) * K), *deq2 = g4_malloc(sizeof(float) * K);
    for (int with_mean = 0; with_mean < 2; with_mean++) {
        float *var, *mu;
        g4_imx_prepare(imp, with_mean ? mean : NULL, K, B, &var, &mu);
        CHECK(!with_mean == !mu);
        // one pass over each column (the later passes refit a column's first block against the
        // blocks after it: not comparable block by block; test_imatrix_passes)
        char *saved_p = env_swap("G4_IMATRIX_PASSES", "1");
        char *saved = env_swap("G4_IMATRIX_REFIT", "0");
        CHECK(g4_q4_quantize_imx(w, G4_DT_FLOAT16, K, N, B, 2, imp, with_mean ? mean : NULL, q[0],
                                 sc[0], z[0]) == G4_OK);
        free(env_swap("G4_IMATRIX_REFIT", NULL)); // the default: the refit
        CHECK(g4_q4_quantize_imx(w, G4_DT_FLOAT16, K, N, B, 2, imp, with_mean ? mean : NULL, q[1],
                                 sc[1], z[1]) == G4_OK);
        env_restore("G4_IMATRIX_REFIT", saved);
        env_restore("G4_IMATRIX_PASSES", saved_p);
        int worse = 0, better = 0, same = 0;
        double tot[2] = {0, 0};
        for (int n = 0; n < N; n++) {
            g4_linear l0 = {.kind = G4_W_Q4, .in = K, .out = N, .block = B,
                            .w = q[0], .scales = sc[0], .zp = z[0]};
            g4_linear l1 = l0;
            l1.w = q[1], l1.scales = sc[1], l1.zp = z[1];
            g4_q4_dequant_col(&l0, n, deq);
            g4_q4_dequant_col(&l1, n, deq2);
            for (int b = 0; b < (with_mean ? 1 : kb); b++) {
                const double e0 = refit_err(w, var, mu, N, B, deq, n, b),
                             e1 = refit_err(w, var, mu, N, B, deq2, n, b);
                tot[0] += e0, tot[1] += e1;
                worse += e1 > e0 * (1 + REFIT_REL);
                better += e1 < e0 * (1 - REFIT_REL);
                same += e1 <= e0 * (1 + REFIT_REL) && e1 >= e0 * (1 - REFIT_REL);
            }
        }
        const int nb = with_mean ? N : N * kb;
        printf("  imatrix refit (%s): error %.5g -> %.5g (%.4fx); blocks better %d, unchanged %d, "
               "worse %d of %d\n",
               with_mean ? "mean, first blocks" : "no mean, all blocks", tot[0], tot[1],
               tot[1] / tot[0], better, same, worse, nb);
        CHECK_MSG(worse == 0, "imatrix refit (mean %d): %d of %d blocks with a larger error",
                  with_mean, worse, nb);
        CHECK_MSG(better + same == nb, "imatrix refit: %d + %d blocks of %d", better, same, nb);
        // measured (branch imx25): the counts at REFIT_MIN_BETTER_*; the inputs are seeded and the
        // refit deterministic, so helping fewer blocks is a regression (without the refit both
        // runs are the same search: better 0, and this check fails)
        const int want = with_mean ? REFIT_MIN_BETTER_MEAN : REFIT_MIN_BETTER_DIAG;
        CHECK_MSG(better >= want, "imatrix refit (mean %d): %d of %d blocks better, want >= %d",
                  with_mean, better, nb, want);
        free(var), free(mu);
    }
    // a bad G4_IMATRIX_REFIT: a one-line error (not a silent default)
    static const char *const bad[] = {"x", "-1", "17", "2a"};
    for (int i = 0; i < 4; i++) {
        char *saved = env_swap("G4_IMATRIX_REFIT", bad[i]);
        CHECK_MSG(g4_q4_quantize_imx(w, G4_DT_FLOAT16, K, N, B, 2, imp, mean, q[2], sc[2], z[2]) ==
                      G4_EUSER,
                  "G4_IMATRIX_REFIT=%s accepted", bad[i]);
        env_restore("G4_IMATRIX_REFIT", saved);
    }
    free(deq), free(deq2), free(w);
    for (int v = 0; v < 3; v++) free(q[v]), free(z[v]), free(sc[v]);
}

// The covariance directions of --imatrix (G4_IMATRIX_RANK=r, kquant.h g4_q4_quantize_imx_dirs),
// on synthetic inputs X [T, K] with a known structure: each channel a mean plus two shared
// factors plus its own noise, and channel 70 a near copy of channel 5 (a strongly correlated
// pair in different blocks). Judged independently here: the true output error
// sum_t sum_n (x_t . d_n)^2 (d_n = the dequantized column minus W's) in double.
//   r = 0 must be today's search bit for bit: its outputs' FNV-1a hash (G4_IMATRIX_REFIT=0, the
//     search before the refit) is the one main's g4_q4_quantize_imx (422c1b2, before the
//     directions) gave on the same inputs; with the refit (the default) r = 0 and
//     g4_q4_quantize_imx still give the same bytes;
//   r = 2 must lower the true error (measured 0.218x r = 0's; r = 0 is 0.706x plain k-quant's;
//     with the refit 0.233x and 0.632x; want < IMXR_GAIN x r = 0's);
//   the refit (kquant.c imx_refit) must lower the true error of r = 0 and of r = 2 against the
//     search without it (measured 0.895x and, with the later passes over each column, 0.896x);
//   g4_cov_dirs on inputs of exactly rank-2 covariance (no noise) must give V^T V = C.
#define IMXR_GAIN    0.5
#define IMXR_R0_HASH 0x5832cf02f44c1915ull
typedef struct {
    int T, K;
    float *x; // [T, K]
} imxr_inputs;

static imxr_inputs imxr_make(int T, int K, float noise, unsigned long long seed) {
    imxr_inputs in = {T, K, g4_malloc(sizeof(float) * (size_t)T * K)};
    unsigned long long rng = seed;
    float m[256], a[256], b[256];
    for (int k = 0; k < K; k++)
        m[k] = g4t_rand_uniform(&rng, -0.5f, 0.5f), a[k] = g4t_rand_uniform(&rng, -1, 1),
        b[k] = g4t_rand_uniform(&rng, -1, 1);
    for (int t = 0; t < T; t++) {
        const float f1 = gauss(&rng), f2 = gauss(&rng);
        float *x = in.x + (size_t)t * K;
        for (int k = 0; k < K; k++) x[k] = m[k] + a[k] * f1 + b[k] * f2 + noise * gauss(&rng);
        if (K > 70) x[70] = x[5] + 0.02f * gauss(&rng);
    }
    return in;
}

// imp (mean x^2), mean (mean x) [K] and H = X^T X [K, K] of in.
static void imxr_stats(const imxr_inputs *in, float *imp, float *mean, float *H) {
    const int K = in->K;
    for (int i = 0; i < K; i++) {
        double s = 0, s2 = 0;
        for (int t = 0; t < in->T; t++) {
            const double v = in->x[(size_t)t * K + i];
            s += v, s2 += v * v;
        }
        mean[i] = (float)(s / in->T), imp[i] = (float)(s2 / in->T);
        for (int j = 0; j < K; j++) {
            double h = 0;
            for (int t = 0; t < in->T; t++)
                h += (double)in->x[(size_t)t * K + i] * in->x[(size_t)t * K + j];
            H[(size_t)i * K + j] = (float)h;
        }
    }
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

// sum_t sum_n (x_t . (wq_n - w_n))^2 of the stored form (q, sc, z).
static double imxr_true_error(const imxr_inputs *in, const uint16_t *w, int N, int B,
                              const uint8_t *q, const uint16_t *sc, const uint8_t *z) {
    const int K = in->K;
    float *deq = g4_malloc(sizeof(float) * (size_t)K);
    double e = 0, d[256];
    for (int n = 0; n < N; n++) {
        g4_linear l = {
            .kind = G4_W_Q4, .in = K, .out = N, .block = B, .w = q, .scales = sc, .zp = z};
        g4_q4_dequant_col(&l, n, deq);
        for (int k = 0; k < K; k++) d[k] = (double)deq[k] - g4_f16_to_f32(w[(size_t)k * N + n]);
        for (int t = 0; t < in->T; t++) {
            double y = 0;
            for (int k = 0; k < K; k++) y += in->x[(size_t)t * K + k] * d[k];
            e += y * y;
        }
    }
    free(deq);
    return e;
}

// The directions' fast paths (issue 33, branch covfast: cov_range two rows of H by eight
// columns of Q at a time, in bands of rows over tiles of 512 rows of Q; imx_err the direction
// sums eight at a time over mu laid out weight by weight) against main's code before them
// (6279eda: one row, one weight at a time), byte for byte through FNV-1a hashes of the outputs
// that code gave on these inputs, r = 11 (one whole 8 and a tail of 3):
//   g4_cov_dirs and g4_cov_dirs_shrunk at K = 201 (test_imatrix_rank's kind of inputs) and at
//     K = 600 (two tiles of Q: 512 + 88; 64 rows of a random mix of 3 factors and noise), on 1
//     and 3 threads (the same bytes, base/parallel.h; 3 threads: ranges of 67 rows, each with a
//     last row alone, and of 200: bands of 64, 64, 64, 8);
//   the search with 11 directions (12 terms: a chunk and a padded one) on test_imatrix_rank's
//     inputs.
typedef struct {
    int K;
    uint64_t cov, shrunk;
    int kept;
} pin_case;
#define PIN_SEARCH_HASH 0x1355a11cfca8d2b8ull
enum { PIN_R = 11 };

// One pin_case on H [K, K] from T rows with means mean[K].
static void pin_cov(const pin_case *pc, const float *H, int T, const float *mean) {
    const int K = pc->K;
    float *V = g4_malloc(sizeof(float) * PIN_R * (size_t)K);
    uint64_t hc[2], hs[2];
    int kept[2];
    for (int v = 0; v < 2; v++) {
        g4_set_threads(v ? 3 : 1);
        CHECK(g4_cov_dirs(H, T, mean, K, PIN_R, V) == G4_OK);
        CHECK_MSG(g4_parallel_last_split() == (v ? 3 : 1), "cov_dirs: %d threads, expected %d",
                  g4_parallel_last_split(), v ? 3 : 1);
        hc[v] = fnv1a(0xcbf29ce484222325ull, V, sizeof(float) * PIN_R * (size_t)K);
        CHECK(g4_cov_dirs_shrunk(H, T, mean, K, PIN_R, V, &kept[v]) == G4_OK);
        hs[v] = fnv1a(0xcbf29ce484222325ull, V, sizeof(float) * (size_t)kept[v] * K);
    }
    g4_set_threads(0);
    printf("  pinned K %d: cov_dirs %#llx / %#llx, shrunk %#llx / %#llx (kept %d / %d)\n", K,
           (unsigned long long)hc[0], (unsigned long long)hc[1], (unsigned long long)hs[0],
           (unsigned long long)hs[1], kept[0], kept[1]);
    CHECK_MSG(hc[0] == hc[1] && hs[0] == hs[1] && kept[0] == kept[1],
              "cov_dirs K %d: 1 and 3 threads differ", K);
    CHECK_MSG(hc[0] == pc->cov, "cov_dirs K %d r %d: hash %#llx, main's %#llx", K, PIN_R,
              (unsigned long long)hc[0], (unsigned long long)pc->cov);
    CHECK_MSG(hs[0] == pc->shrunk && kept[0] == pc->kept,
              "cov_dirs_shrunk K %d r %d: hash %#llx kept %d, main's %#llx kept %d", K, PIN_R,
              (unsigned long long)hs[0], kept[0], (unsigned long long)pc->shrunk, pc->kept);
    free(V);
}

static void test_imatrix_rank_pinned(const imxr_inputs *in, const uint16_t *w, int N, float *H,
                                     uint8_t *q, uint16_t *sc, uint8_t *z, const g4_q4_shape *sh) {
    static const pin_case cases[2] = {{201, 0x0ec455c65d7036b0ull, 0xa1e58735f174248aull, 2},
                                      {600, 0xbda0a85d7a51e02full, 0xa39fa49d40e2b887ull, 3}};
    float imp[256], mean[600];
    { // K = 201
        const int K = cases[0].K;
        imxr_inputs odd = imxr_make(in->T, K, 0.3f, 11);
        float *H2 = g4_malloc(sizeof(float) * K * K);
        imxr_stats(&odd, imp, mean, H2);
        pin_cov(&cases[0], H2, odd.T, mean);
        free(odd.x), free(H2);
    }
    { // K = 600, T = 64
        enum { K = 600, T = 64 };
        unsigned long long rng = 600;
        float *x = g4_malloc(sizeof(float) * T * K), *H2 = g4_malloc(sizeof(float) * K * K);
        float load[3][K];
        for (int f = 0; f < 3; f++)
            for (int k = 0; k < K; k++) load[f][k] = g4t_rand_uniform(&rng, -1, 1);
        for (int t = 0; t < T; t++) {
            const float f0 = gauss(&rng), f1 = gauss(&rng), f2 = gauss(&rng);
            for (int k = 0; k < K; k++)
                x[t * K + k] = 0.2f + load[0][k] * f0 + 0.5f * load[1][k] * f1 +
                               0.25f * load[2][k] * f2 + 0.3f * gauss(&rng);
        }
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int t = 0; t < T; t++) s += x[t * K + k];
            mean[k] = (float)(s / T);
            for (int l = 0; l < K; l++) {
                double h = 0;
                for (int t = 0; t < T; t++) h += (double)x[t * K + k] * x[t * K + l];
                H2[(size_t)k * K + l] = (float)h;
            }
        }
        pin_cov(&cases[1], H2, T, mean);
        free(x), free(H2);
    }
    float *V = g4_malloc(sizeof(float) * PIN_R * (size_t)in->K);
    imxr_stats(in, imp, mean, H);
    CHECK(g4_cov_dirs(H, in->T, mean, in->K, PIN_R, V) == G4_OK);
    char *saved = env_swap("G4_IMATRIX_REFIT", "0"); // the pin is the search before the refit
    CHECK(g4_q4_quantize_imx_dirs(w, G4_DT_FLOAT16, in->K, N, G4_Q4_BLOCK, 2, imp, mean, PIN_R, V,
                                  q, sc, z) == G4_OK);
    env_restore("G4_IMATRIX_REFIT", saved);
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv1a(h, q, sh->q_bytes), h = fnv1a(h, sc, 2 * sh->n_scales), h = fnv1a(h, z, sh->zp_bytes);
    printf("  pinned: search with %d directions %#llx\n", PIN_R, (unsigned long long)h);
    CHECK_MSG(h == PIN_SEARCH_HASH, "imatrix r = %d: output hash %#llx, main's %#llx", PIN_R,
              (unsigned long long)h, PIN_SEARCH_HASH);
    free(V);
}

static void test_imatrix_rank(void) {
    const int T = 1024, K = 128, N = 32, B = G4_Q4_BLOCK;
    imxr_inputs in = imxr_make(T, K, 0.3f, 20261205);
    unsigned long long rng = 5;
    uint16_t *w = outlier_weights(K, N, &rng, 1);
    float imp[128], mean[128], *H = g4_malloc(sizeof(float) * K * K), V[2 * 128];
    imxr_stats(&in, imp, mean, H);
    const g4_q4_shape sh = g4_q4_shape_of(K, N, B);
    uint8_t *q[3], *z[3];
    uint16_t *sc[3];
    q4_outputs3(&sh, q, z, sc);
    char *saved = env_swap("G4_IMATRIX_REFIT", "0");
    CHECK(g4_q4_quantize_imx(w, G4_DT_FLOAT16, K, N, B, 2, imp, mean, q[0], sc[0], z[0]) == G4_OK);
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv1a(h, q[0], sh.q_bytes), h = fnv1a(h, sc[0], 2 * sh.n_scales);
    h = fnv1a(h, z[0], sh.zp_bytes);
    CHECK_MSG(h == IMXR_R0_HASH, "imatrix r = 0: output hash %#llx, main's %#llx",
              (unsigned long long)h, IMXR_R0_HASH);
    CHECK(g4_q4_quantize_imx_dirs(w, G4_DT_FLOAT16, K, N, B, 2, imp, mean, 0, NULL, q[1], sc[1],
                                  z[1]) == G4_OK);
    CHECK(!memcmp(q[0], q[1], sh.q_bytes) && !memcmp(sc[0], sc[1], 2 * sh.n_scales) &&
          !memcmp(z[0], z[1], sh.zp_bytes));
    // the search without the refit: r = 0 (q[0]) and r = 2 (q[1]), their true errors
    CHECK(g4_cov_dirs(H, T, mean, K, 2, V) == G4_OK);
    CHECK(g4_q4_quantize_imx_dirs(w, G4_DT_FLOAT16, K, N, B, 2, imp, mean, 2, V, q[1], sc[1],
                                  z[1]) == G4_OK);
    env_restore("G4_IMATRIX_REFIT", saved);
    const double e_off[2] = {imxr_true_error(&in, w, N, B, q[0], sc[0], z[0]),
                             imxr_true_error(&in, w, N, B, q[1], sc[1], z[1])};
    // the default (the refit): r = 0 still g4_q4_quantize_imx's bytes
    CHECK(g4_q4_quantize_imx(w, G4_DT_FLOAT16, K, N, B, 2, imp, mean, q[2], sc[2], z[2]) == G4_OK);
    CHECK(g4_q4_quantize_imx_dirs(w, G4_DT_FLOAT16, K, N, B, 2, imp, mean, 0, NULL, q[0], sc[0],
                                  z[0]) == G4_OK);
    CHECK(!memcmp(q[0], q[2], sh.q_bytes) && !memcmp(sc[0], sc[2], 2 * sh.n_scales) &&
          !memcmp(z[0], z[2], sh.zp_bytes));
    CHECK(g4_q4_quantize_imx_dirs(w, G4_DT_FLOAT16, K, N, B, 2, imp, mean, 2, V, q[1], sc[1],
                                  z[1]) == G4_OK);
    CHECK(g4_q4_quantize(w, G4_DT_FLOAT16, K, N, B, 2, q[2], sc[2], z[2]) == G4_OK);
    double e[3];
    for (int v = 0; v < 3; v++) e[v] = imxr_true_error(&in, w, N, B, q[v], sc[v], z[v]);
    printf("  imatrix refit: true output error r = 0 %.4g -> %.4g (%.3fx), r = 2 %.4g -> %.4g "
           "(%.3fx)\n",
           e_off[0], e[0], e[0] / e_off[0], e_off[1], e[1], e[1] / e_off[1]);
    CHECK_MSG(e[0] < e_off[0] && e[1] < e_off[1],
              "imatrix refit: true error r = 0 %g (without %g), r = 2 %g (without %g)", e[0],
              e_off[0], e[1], e_off[1]);
    printf("  imatrix directions: true output error r = 2 %.4g, r = 0 %.4g (%.3fx), plain "
           "k-quant %.4g\n",
           e[1], e[0], e[1] / e[0], e[2]);
    CHECK_MSG(e[1] < IMXR_GAIN * e[0], "imatrix r = 2: true error %g, r = 0 %g (want < %gx)", e[1],
              e[0], IMXR_GAIN);
    CHECK_MSG(e[0] < e[2], "imatrix r = 0: true error %g, plain k-quant %g", e[0], e[2]);
    // bad r: a one-line error
    CHECK(g4_q4_quantize_imx_dirs(w, G4_DT_FLOAT16, K, N, B, 2, imp, mean, G4_IMX_MAX_DIRS, V, q[1],
                                  sc[1], z[1]) == G4_EUSER);
    // exactly rank 2 (no noise, no copied channel: K = 64): V^T V = C to float rounding
    imxr_inputs ex = imxr_make(T, 64, 0, 7);
    imxr_stats(&ex, imp, mean, H);
    CHECK(g4_cov_dirs(H, T, mean, 64, 2, V) == G4_OK);
    double cmax = 0, dmax = 0;
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++) {
            const double c = H[i * 64 + j] / (double)T - (double)mean[i] * mean[j];
            const double a = (double)V[i] * V[j] + (double)V[64 + i] * V[64 + j];
            cmax = fmax(cmax, fabs(c)), dmax = fmax(dmax, fabs(a - c));
        }
    CHECK_MSG(dmax < 1e-4 * cmax, "cov_dirs: |V^T V - C| %g of |C| %g on a rank-2 covariance", dmax,
              cmax);
    test_imatrix_rank_pinned(&in, w, N, H, q[1], sc[1], z[1], &sh);
    free(ex.x), free(in.x), free(w), free(H);
    for (int v = 0; v < 3; v++) free(q[v]), free(z[v]), free(sc[v]);
}

// g4_cov_dirs_shrunk (G4_IMATRIX_SHRINK): inputs x_tk = sig_k (g_tk + sqrt(s1) u_k f1 +
// sqrt(s2) v_k f2), K = 64, T = 512 (K / T = 0.125: the noise edge of the correlation matrix's
// eigenvalues (1 + sqrt(0.125))^2 = 1.83), channel scales sig 0.5..2, u, v orthonormal.
//   noise only (s1 = s2 = 0): at most SHRINK_NOISE_KEPT directions kept, holding under
//     SHRINK_NOISE_SHARE of the trace (g4_cov_dirs at r = 32 puts the top 32 sample eigenvalues,
//     ~half the trace, into its directions: printed beside);
//   spikes s1 = 20, s2 = 6: at least 2 directions and at most 2 + SHRINK_NOISE_KEPT; the first
//     two span sig*u and sig*v (each true direction's norm inside the span of V's first two rows
//     >= 0.95); their weight is the spikes' population variance s1 |sig u|^2 + s2 |sig v|^2
//     without the sample's excess: between 0.5x (the noise floor under the diagonal's spike share)
//     and 1.1x, where g4_cov_dirs's two unshrunk directions carry the excess;
//   r out of range: G4_EUSER.
#define SHRINK_NOISE_KEPT  3
#define SHRINK_NOISE_SHARE 0.02
static void shrink_inputs(int T, int K, float s1, float s2, float *sig, float *u, float *v,
                          float *imp, float *mean, float *H) {
    unsigned long long rng = 20261205;
    float *x = g4_malloc(sizeof(float) * (size_t)T * K);
    double nu = 0, nv = 0, uv = 0;
    for (int k = 0; k < K; k++) {
        sig[k] = 0.5f + 1.5f * (float)k / (K - 1), u[k] = gauss(&rng), v[k] = gauss(&rng);
        nu += (double)u[k] * u[k];
    }
    for (int k = 0; k < K; k++) u[k] /= (float)sqrt(nu), uv += (double)u[k] * v[k];
    for (int k = 0; k < K; k++) v[k] -= (float)uv * u[k], nv += (double)v[k] * v[k];
    for (int k = 0; k < K; k++) v[k] /= (float)sqrt(nv);
    for (int t = 0; t < T; t++) {
        const float f1 = sqrtf(s1) * gauss(&rng), f2 = sqrtf(s2) * gauss(&rng);
        for (int k = 0; k < K; k++) x[(size_t)t * K + k] = sig[k] * (gauss(&rng) + u[k] * f1 + v[k] * f2);
    }
    imxr_inputs in = {T, K, x};
    imxr_stats(&in, imp, mean, H);
    free(x);
}

// G4_IMATRIX_PASSES=2 (kquant.c imx_block_again): the second pass refits each block against the
// shared terms of all the column's other blocks, so the column's whole error never rises. Judged
// independently on test_imatrix_rank's inputs with its 2 directions: each column's
//   E = sum_k var_k d_k^2 + sum_j (sum_k mu_j,k d_k)^2
// (var, mu: g4_imx_prepare_dirs's, the mean's row and the 2 directions'; d = wq - w exact in
// double from the dequantized stored form), one pass against two. A column is worse if its E
// exceeds one pass's by more than REFIT_REL, better if below by more; measured on these seeded
// inputs: PASSES_MIN_BETTER columns of 32 better, none worse. A bad G4_IMATRIX_PASSES is a
// one-line error.
#define PASSES_MIN_BETTER 32 // measured: 32 of 32
static void test_imatrix_passes(void) {
    const int T = 1024, K = 128, N = 32, B = G4_Q4_BLOCK, r = 2;
    imxr_inputs in = imxr_make(T, K, 0.3f, 20261205);
    unsigned long long rng = 5;
    uint16_t *w = outlier_weights(K, N, &rng, 1);
    float imp[128], mean[128], *H = g4_malloc(sizeof(float) * K * K), V[2 * 128];
    imxr_stats(&in, imp, mean, H);
    CHECK(g4_cov_dirs(H, T, mean, K, r, V) == G4_OK);
    float *var, *mu;
    g4_imx_prepare_dirs(imp, mean, K, B, r, V, &var, &mu);
    CHECK(mu != NULL);
    const g4_q4_shape sh = g4_q4_shape_of(K, N, B);
    uint8_t *q[3], *z[3];
    uint16_t *sc[3];
    q4_outputs3(&sh, q, z, sc);
    static const char *const pv[2] = {"1", "2"};
    for (int v = 0; v < 2; v++) {
        char *saved = env_swap("G4_IMATRIX_PASSES", pv[v]);
        CHECK(g4_q4_quantize_imx_dirs(w, G4_DT_FLOAT16, K, N, B, 2, imp, mean, r, V, q[v], sc[v],
                                      z[v]) == G4_OK);
        env_restore("G4_IMATRIX_PASSES", saved);
    }
    float *deq = g4_malloc(sizeof(float) * K);
    int better = 0, worse = 0;
    double tot[2] = {0, 0};
    for (int n = 0; n < N; n++) {
        double e[2];
        for (int v = 0; v < 2; v++) {
            g4_linear l = {.kind = G4_W_Q4, .in = K, .out = N, .block = B,
                           .w = q[v], .scales = sc[v], .zp = z[v]};
            g4_q4_dequant_col(&l, n, deq);
            double t[3] = {0, 0, 0};
            e[v] = 0;
            for (int k = 0; k < K; k++) {
                const double d = (double)deq[k] - g4_f16_to_f32(w[(size_t)k * N + n]);
                e[v] += (double)var[k] * d * d;
                for (int j = 0; j <= r; j++) t[j] += (double)mu[(size_t)j * K + k] * d;
            }
            for (int j = 0; j <= r; j++) e[v] += t[j] * t[j];
            tot[v] += e[v];
        }
        better += e[1] < e[0] * (1 - REFIT_REL);
        worse += e[1] > e[0] * (1 + REFIT_REL);
    }
    printf("  imatrix passes: column error one pass %.5g, two %.5g (%.4fx); columns better %d, "
           "worse %d of %d\n",
           tot[0], tot[1], tot[1] / tot[0], better, worse, N);
    CHECK_MSG(worse == 0, "imatrix passes: %d of %d columns with a larger error", worse, N);
    CHECK_MSG(better >= PASSES_MIN_BETTER, "imatrix passes: %d of %d columns better, want >= %d",
              better, N, PASSES_MIN_BETTER);
    static const char *const bad[] = {"0", "9", "x"};
    for (int i = 0; i < 3; i++) {
        char *saved = env_swap("G4_IMATRIX_PASSES", bad[i]);
        CHECK_MSG(g4_q4_quantize_imx_dirs(w, G4_DT_FLOAT16, K, N, B, 2, imp, mean, r, V, q[2],
                                          sc[2], z[2]) == G4_EUSER,
                  "G4_IMATRIX_PASSES=%s accepted", bad[i]);
        env_restore("G4_IMATRIX_PASSES", saved);
    }
    free(deq), free(var), free(mu), free(H), free(w), free(in.x);
    for (int v = 0; v < 3; v++) free(q[v]), free(z[v]), free(sc[v]);
}

static void test_imatrix_shrink(void) {
    enum { T = 512, K = 64, R = 32 };
    float sig[K], u[K], v[K], imp[K], mean[K], *H = g4_malloc(sizeof(float) * K * K),
          *V = g4_malloc(sizeof(float) * R * K);
    int kept = -1;
    // noise only
    shrink_inputs(T, K, 0, 0, sig, u, v, imp, mean, H);
    double tr = 0;
    for (int k = 0; k < K; k++) tr += imp[k] - (double)mean[k] * mean[k];
    CHECK(g4_cov_dirs_shrunk(H, T, mean, K, R, V, &kept) == G4_OK);
    double w = 0;
    for (int i = 0; i < kept * K; i++) w += (double)V[i] * V[i];
    CHECK(g4_cov_dirs(H, T, mean, K, R, V) == G4_OK);
    double w32 = 0;
    for (int i = 0; i < R * K; i++) w32 += (double)V[i] * V[i];
    printf("  shrunk directions, noise only: %d kept, %.4f of the trace (unshrunk r = %d: %.3f)\n",
           kept, w / tr, R, w32 / tr);
    CHECK_MSG(kept >= 0 && kept <= SHRINK_NOISE_KEPT, "shrunk dirs on noise: %d kept (want <= %d)",
              kept, SHRINK_NOISE_KEPT);
    CHECK_MSG(w < SHRINK_NOISE_SHARE * tr, "shrunk dirs on noise: %.4f of the trace (want < %g)",
              w / tr, SHRINK_NOISE_SHARE);
    // two spikes
    const float s1 = 20, s2 = 6;
    shrink_inputs(T, K, s1, s2, sig, u, v, imp, mean, H);
    CHECK(g4_cov_dirs_shrunk(H, T, mean, K, R, V, &kept) == G4_OK);
    CHECK_MSG(kept >= 2 && kept <= 2 + SHRINK_NOISE_KEPT, "shrunk dirs, two spikes: %d kept",
              kept);
    if (kept >= 2) {
        // an orthonormal basis of V's first two rows, then each true direction's norm in it
        double b[2][K], n0 = 0, d = 0, n1 = 0;
        for (int k = 0; k < K; k++) n0 += (double)V[k] * V[k];
        for (int k = 0; k < K; k++) b[0][k] = V[k] / sqrt(n0), d += b[0][k] * V[K + k];
        for (int k = 0; k < K; k++) b[1][k] = V[K + k] - d * b[0][k], n1 += b[1][k] * b[1][k];
        for (int k = 0; k < K; k++) b[1][k] /= sqrt(n1);
        double pop = 0, got = 0;
        for (int f = 0; f < 2; f++) {
            const float *dir = f ? v : u;
            double nn = 0, p0 = 0, p1 = 0;
            for (int k = 0; k < K; k++) {
                const double t = (double)sig[k] * dir[k];
                nn += t * t, p0 += t * b[0][k], p1 += t * b[1][k];
            }
            const double in_span = sqrt((p0 * p0 + p1 * p1) / nn);
            pop += (f ? s2 : s1) * nn;
            CHECK_MSG(in_span >= 0.95, "shrunk dirs: spike %d's direction %.3f inside V's span", f,
                      in_span);
        }
        for (int i = 0; i < 2 * K; i++) got += (double)V[i] * V[i];
        CHECK(g4_cov_dirs(H, T, mean, K, 2, V) == G4_OK);
        double raw = 0;
        for (int i = 0; i < 2 * K; i++) raw += (double)V[i] * V[i];
        printf("  shrunk directions, two spikes: %d kept, weight %.3f of the population's "
               "(unshrunk %.3f)\n",
               kept, got / pop, raw / pop);
        CHECK_MSG(got >= 0.5 * pop && got <= 1.1 * pop,
                  "shrunk dirs: weight %.3f of the spikes' population variance (want 0.5-1.1)",
                  got / pop);
    }
    CHECK(g4_cov_dirs_shrunk(H, T, mean, K, 0, V, &kept) == G4_EUSER && kept == 0);
    CHECK(g4_cov_dirs_shrunk(H, T, mean, K, G4_IMX_MAX_DIRS, V, &kept) == G4_EUSER);
    free(H), free(V);
}

int main(void) {
    fixtures = g4t_env("G4_FIXTURES");
    test_nibble_order();
    test_zero_point_packing();
    test_dequant_random();
    test_dequant_vs_onnxruntime();
    test_binding_checks();
    test_round_trip_budgets();
    test_quantizer_edge_blocks();
    test_kquant_vs_onnxruntime_cases();
    test_onnxruntime_q4_package();
    test_kquant_importance();
    test_imatrix_search_per_block();
    test_imatrix_refit();
    test_imatrix_rank();
    test_imatrix_passes();
    test_imatrix_shrink();
    return g4t_finish("test_quant");
}
