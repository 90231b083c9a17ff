// test_equalize.c: --equalize's pieces (quant/equalize.h) on synthetic inputs.
//
// 1. The scales: alpha 0 is all ones and leaves the fold weights' bytes; alpha 1 follows the
//    channels' rms ratios (geometric mean 1 before the clamp), stays within [1/16, 16], keeps 1
//    for a dead channel; with a fold, w'_k * s_k == w_k to fp32 rounding (the fold is exact by
//    construction) and a zero weight keeps s = 1.
// 2. The fold on a group's function: (x o w) W against (x o w') (S W) in double, rows of
//    random inputs: equal to 1e-6 relative (fp32's s; fp16 never rounds S W here).
// 3. The search's error (methods.h g4_q4_out_err on fp32 weights) against the plain double
//    sum_n d_n^T H d_n over the dequantized codes.
// 4. The search on a two-member group whose input has one channel 30x the others: every alpha
//    quantizes every member (11 x 2 calls), err[0] is 2 (each member's own alpha-0 error), every
//    err finite, the pick the least err, above alpha 0 and below 0.9 of its error; the picked
//    scales are g4_eq_scales' of that alpha; member 0 with no scales is the method on the
//    package's bytes, byte for byte; output-column factors of powers of two give rtn's codes and
//    zero points unchanged and its scales times the factors (the up_proj path).
// 5. Bad groups: one-line errors.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "loader/onnx_model.h"
#include "quant/equalize.h"
#include "quant/kquant.h"
#include "quant/linear.h"
#include "quant/methods.h"
#include "quant/q4.h"
#include "tests/test_util.h"

#define KK  64 // inputs
#define N0  48
#define N1  40
#define T   256 // calibration rows
#define HOT 17  // the channel with the large input

static unsigned long long rng = 33;

static float rnd(float lo, float hi) {
    return g4t_rand_uniform(&rng, lo, hi);
}

// --- 1. scales ----------------------------------------------------------------------------------

static void test_scales(void) {
    float H[KK * KK] = {0}, s[KK];
    uint16_t fold[KK], fo[KK];
    for (int k = 0; k < KK; k++) {
        H[k * KK + k] = k == 5 ? 0 : k == HOT ? 1e6f : rnd(0.01f, 4.0f);
        fold[k] = g4_f32_to_f16(k == 9 ? 0.0f : rnd(0.2f, 3.0f));
    }
    g4_eq_scales(H, KK, 0.0, fold, s, fo);
    int ones = 0, same = 0;
    for (int k = 0; k < KK; k++) ones += s[k] == 1.0f, same += fo[k] == fold[k];
    CHECK_INT(ones, KK);
    CHECK_INT(same, KK);

    g4_eq_scales(H, KK, 1.0, NULL, s, NULL);
    CHECK(s[5] == 1.0f);                  // dead channel
    CHECK(fabsf(s[HOT] - 16.0f) < 1e-6f); // clamped
    int in_range = 0;
    for (int k = 0; k < KK; k++) in_range += s[k] >= 1.0f / 16 - 1e-7f && s[k] <= 16 + 1e-6f;
    CHECK_INT(in_range, KK);
    // the ratios of two unclamped channels are their rms ratios
    const double r = (double)s[3] / s[40], want = sqrt((double)H[3 * KK + 3] / H[40 * KK + 40]);
    CHECK_MSG(fabs(r / want - 1) < 1e-6, "s ratio %g, rms ratio %g", r, want);
    // geometric mean 1 over the live channels (none of them clamped but HOT): recompute it
    double lg = 0;
    int live = 0;
    for (int k = 0; k < KK; k++)
        if (H[k * KK + k] > 0) lg += 0.5 * log(H[k * KK + k]), live++;
    const double g = exp(lg / live);
    CHECK_MSG(fabs(s[3] / (sqrt(H[3 * KK + 3]) / g) - 1) < 1e-6, "s[3] %g", s[3]);

    g4_eq_scales(H, KK, 1.0, fold, s, fo);
    int exact = 0;
    for (int k = 0; k < KK; k++) {
        const float w = g4_f16_to_f32(fold[k]), w2 = g4_f16_to_f32(fo[k]);
        exact += fabsf(w2 * s[k] - w) <= 2.4e-7f * fabsf(w);
    }
    CHECK_INT(exact, KK);
    CHECK(s[9] == 1.0f && fo[9] == fold[9]); // a zero norm weight: nothing to fold into
    CHECK(fo[HOT] != fold[HOT]);             // the hot channel's weight did change
}

// --- 2. the fold on a group's function ----------------------------------------------------------

static void test_fold_function(void) {
    float H[KK * KK] = {0}, s[KK];
    uint16_t fold[KK], fo[KK], W[KK * N0];
    for (int k = 0; k < KK; k++) {
        H[k * KK + k] = k == HOT ? 900.0f : rnd(0.05f, 2.0f);
        fold[k] = g4_f32_to_f16(rnd(0.3f, 2.5f));
    }
    for (int i = 0; i < KK * N0; i++) W[i] = g4_f32_to_f16(rnd(-0.5f, 0.5f));
    g4_eq_scales(H, KK, 0.7, fold, s, fo);
    double worst = 0;
    for (int t = 0; t < 16; t++) {
        double x[KK];
        for (int k = 0; k < KK; k++) x[k] = rnd(-2, 2);
        for (int n = 0; n < N0; n++) {
            double y = 0, y2 = 0, ay = 0;
            for (int k = 0; k < KK; k++) {
                const double w = g4_f16_to_f32(W[k * N0 + n]);
                y += x[k] * g4_f16_to_f32(fold[k]) * w;
                y2 += x[k] * g4_f16_to_f32(fo[k]) * ((double)s[k] * w);
                ay += fabs(x[k] * g4_f16_to_f32(fold[k]) * w);
            }
            const double e = fabs(y - y2) / ay;
            if (e > worst) worst = e;
        }
    }
    CHECK_MSG(worst < 1e-6, "folded group's output differs by %g of sum |terms|", worst);
}

// --- 3. the layer-output error ------------------------------------------------------------------

static void make_inputs(float *X, float *H) { // X [T, KK]: channel HOT 30x the others
    for (int t = 0; t < T; t++)
        for (int k = 0; k < KK; k++) X[t * KK + k] = rnd(-1, 1) * (k == HOT ? 30.0f : 1.0f);
    for (int a = 0; a < KK; a++)
        for (int b = 0; b < KK; b++) {
            double h = 0;
            for (int t = 0; t < T; t++) h += (double)X[t * KK + a] * X[t * KK + b];
            H[a * KK + b] = (float)h;
        }
}

static void test_out_error(const float *H) {
    float w[KK * 8];
    uint16_t wh[KK * 8];
    for (int i = 0; i < KK * 8; i++) wh[i] = g4_f32_to_f16(rnd(-1, 1)), w[i] = g4_f16_to_f32(wh[i]);
    const g4_q4_shape sh = g4_q4_shape_of(KK, 8, 32);
    uint8_t *q = malloc((size_t)sh.q_bytes), *zp = malloc((size_t)sh.zp_bytes);
    uint16_t *sc = malloc(sizeof(uint16_t) * (size_t)sh.n_scales);
    CHECK(g4_q4_quantize(wh, G4_DT_FLOAT16, KK, 8, 32, 1, q, sc, zp) == G4_OK);
    g4_linear li = {0};
    li.kind = G4_W_Q4, li.in = KK, li.out = 8, li.block = 32, li.w = q, li.scales = sc, li.zp = zp;
    float deq[KK * 8];
    g4_q4_dequant(&li, deq);
    double want = 0;
    for (int n = 0; n < 8; n++)
        for (int a = 0; a < KK; a++)
            for (int b = 0; b < KK; b++)
                want += ((double)deq[a * 8 + n] - w[a * 8 + n]) * H[a * KK + b] *
                        ((double)deq[b * 8 + n] - w[b * 8 + n]);
    const double got = g4_q4_out_err(w, G4_DT_FLOAT, KK, 8, 32, q, sc, zp, H);
    CHECK_MSG(want > 0 && fabs(got / want - 1) < 1e-12, "out_error %.17g, direct %.17g", got, want);
    free(q), free(zp), free(sc);
}

// --- 4. the search ------------------------------------------------------------------------------

typedef struct {
    int calls;
    int rtn;
} qctx;

static int quant_cb(void *ctx, const g4_eq_qin *in, uint8_t *q, uint16_t *sc, uint8_t *zp) {
    qctx *c = ctx;
    c->calls++;
    return c->rtn ? g4_q4_quantize_rtn(in->w, in->dtype, in->K, in->N, 32, q, sc, zp)
                  : g4_q4_quantize(in->w, in->dtype, in->K, in->N, 32, 1, q, sc, zp);
}

static void test_search(const float *H) {
    uint16_t *W0 = malloc(sizeof(uint16_t) * KK * N0), *W1 = malloc(sizeof(uint16_t) * KK * N1);
    uint16_t fold[KK];
    for (int i = 0; i < KK * N0; i++) W0[i] = g4_f32_to_f16(rnd(-0.3f, 0.3f));
    for (int i = 0; i < KK * N1; i++) W1[i] = g4_f32_to_f16(rnd(-0.3f, 0.3f));
    for (int k = 0; k < KK; k++) fold[k] = g4_f32_to_f16(rnd(0.5f, 2.0f));
    g4_eq_group g = {0};
    g.n = 2, g.K = KK, g.H = H, g.fold = fold;
    g.name[0] = "m0", g.name[1] = "m1";
    g.w[0] = W0, g.w[1] = W1, g.N[0] = N0, g.N[1] = N1;
    qctx c = {0, 0};
    g4_eq_pick pk;
    int rc = g4_eq_search(&g, quant_cb, &c, &pk);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc) return;
    CHECK_INT(c.calls, G4_EQ_N_ALPHA * 2);
    CHECK(pk.err[0] == 2.0);
    int finite = 0, least = 0;
    for (int a = 0; a < G4_EQ_N_ALPHA; a++) {
        finite += isfinite(pk.err[a]) && pk.err[a] > 0;
        least += pk.err[pk.alpha_i] <= pk.err[a];
    }
    CHECK_INT(finite, G4_EQ_N_ALPHA);
    CHECK_INT(least, G4_EQ_N_ALPHA);
    CHECK_MSG(pk.alpha_i > 0 && pk.err[pk.alpha_i] < 0.9 * pk.err[0],
              "alpha %d, error %.3f of alpha 0's", pk.alpha_i, pk.err[pk.alpha_i] / pk.err[0]);
    printf("search: alpha %.1f, calibration error %.3f of alpha 0's\n", pk.alpha_i / 10.0,
           pk.err[pk.alpha_i] / pk.err[0]);
    float s[KK];
    uint16_t fo[KK];
    g4_eq_scales(H, KK, pk.alpha_i / 10.0, fold, s, fo);
    CHECK(pk.fold && !memcmp(s, pk.s, sizeof s) && !memcmp(fo, pk.fold, sizeof fo));

    // member 0 without scales: the method on the package's bytes
    const g4_q4_shape sh = g4_q4_shape_of(KK, N0, 32);
    uint8_t *q = malloc((size_t)sh.q_bytes), *zp = malloc((size_t)sh.zp_bytes);
    uint8_t *q2 = malloc((size_t)sh.q_bytes), *zp2 = malloc((size_t)sh.zp_bytes);
    uint16_t *sc = malloc(2 * (size_t)sh.n_scales), *sc2 = malloc(2 * (size_t)sh.n_scales);
    CHECK(g4_eq_quantize(&g, 0, NULL, NULL, quant_cb, &c, q, sc, zp) == G4_OK);
    CHECK(g4_q4_quantize(W0, G4_DT_FLOAT16, KK, N0, 32, 1, q2, sc2, zp2) == G4_OK);
    CHECK(!memcmp(q, q2, (size_t)sh.q_bytes) && !memcmp(sc, sc2, 2 * (size_t)sh.n_scales) &&
          !memcmp(zp, zp2, (size_t)sh.zp_bytes));

    // column factors of powers of two (rtn): the same codes and zero points, scales times c
    c.rtn = 1;
    float cf[N0];
    for (int n = 0; n < N0; n++) cf[n] = ldexpf(1.0f, n % 3 - 1);
    CHECK(g4_eq_quantize(&g, 0, NULL, NULL, quant_cb, &c, q, sc, zp) == G4_OK);
    CHECK(g4_eq_quantize(&g, 0, NULL, cf, quant_cb, &c, q2, sc2, zp2) == G4_OK);
    const int kb = g4_q4_kblocks(KK, 32);
    int scaled = 0;
    for (int n = 0; n < N0; n++)
        for (int b = 0; b < kb; b++)
            scaled += g4_f16_to_f32(sc2[n * kb + b]) == g4_f16_to_f32(sc[n * kb + b]) * cf[n];
    CHECK_INT(scaled, N0 * kb);
    CHECK(!memcmp(q, q2, (size_t)sh.q_bytes) && !memcmp(zp, zp2, (size_t)sh.zp_bytes));
    free(q), free(zp), free(sc), free(q2), free(zp2), free(sc2);
    g4_eq_pick_free(&pk);
    free(W0), free(W1);
}

// --- 5. bad groups ------------------------------------------------------------------------------

static void test_bad(const float *H) {
    g4_eq_group g = {0};
    g4_eq_pick pk;
    qctx c = {0, 0};
    g.n = 0, g.K = KK, g.H = H;
    CHECK(g4_eq_search(&g, quant_cb, &c, &pk) == G4_EUSER);
    CHECK(strstr(g4_error(), "expected 1..3") != NULL && !strchr(g4_error(), '\n'));
    g.n = 1, g.name[0] = "x", g.w[0] = H, g.N[0] = 0;
    CHECK(g4_eq_search(&g, quant_cb, &c, &pk) == G4_EUSER);
    CHECK(strstr(g4_error(), "x: N 0") != NULL);
    CHECK_INT(c.calls, 0);
}

int main(void) {
    test_scales();
    test_fold_function();
    float *X = malloc(sizeof(float) * T * KK), *H = malloc(sizeof(float) * KK * KK);
    make_inputs(X, H);
    test_out_error(H);
    test_search(H);
    test_bad(H);
    free(X), free(H);
    return g4t_finish("test_equalize");
}
