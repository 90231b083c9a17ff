// test_ref_ops.c: the tower CPU references of kernels/ref (vision 2-D RoPE, bidirectional
// attention, position embedding, pooling; audio attention, SSCP conv, depthwise conv, GLU,
// SiLU, LayerNorm, clamp), checked two ways:
//   1. against tensors captured from HF transformers' own Gemma-4 modules (tiny random configs,
//      tests/fixtures/attnops, written by tools/python/make_attnops_fixtures.py);
//   2. against independent formulations written here (a different loop order, explicit means,
//      HF's 5-D audio mask instead of our band predicate) and small hand-computed cases.
// CPU only: runs in CI.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/ref/ref.h"
#include "tests/test_util.h"

// --- .g4fx fixture container (see tools/python/make_attnops_fixtures.py) ------------------
enum { FX_F32 = 0, FX_I32 = 1, FX_U8 = 2 };
typedef struct {
    char name[64];
    int dtype, ndim, dims[8];
    size_t count;
    void *data;
} fx_tensor;
typedef struct {
    int n;
    fx_tensor t[32];
} fx_file;

static int fx_load(const char *dir, const char *file, fx_file *out) {
    char *path = g4_path_join(dir, file);
    char *buf = NULL;
    size_t size = 0;
    memset(out, 0, sizeof *out);
    int rc = g4_read_file(path, &buf, &size);
    if (rc) {
        fprintf(stderr, "%s\n", g4_error());
        free(path);
        return rc;
    }
    size_t o = 0;
#define FX_NEED(nb)                                                                                \
    do {                                                                                           \
        if (o + (nb) > size) {                                                                     \
            fprintf(stderr, "%s: truncated at byte %zu\n", path, o);                               \
            rc = G4_EUSER;                                                                         \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
    uint32_t hdr[2];
    FX_NEED(12);
    if (memcmp(buf, "G4FX", 4) != 0) {
        fprintf(stderr, "%s: not a G4FX file\n", path);
        rc = G4_EUSER;
        goto done;
    }
    memcpy(hdr, buf + 4, 8);
    o = 12;
    for (uint32_t i = 0; i < hdr[1] && i < 32; i++) {
        fx_tensor *t = &out->t[out->n];
        uint32_t len, dt, nd;
        FX_NEED(4);
        memcpy(&len, buf + o, 4);
        o += 4;
        FX_NEED(len);
        if (len >= sizeof t->name) len = sizeof t->name - 1;
        memcpy(t->name, buf + o, len);
        o += len;
        FX_NEED(8);
        memcpy(&dt, buf + o, 4);
        memcpy(&nd, buf + o + 4, 4);
        o += 8;
        if (nd > 8 || dt > 2) {
            fprintf(stderr, "%s: tensor %s has dtype %u ndim %u\n", path, t->name, dt, nd);
            rc = G4_EUSER;
            goto done;
        }
        t->dtype = (int)dt;
        t->ndim = (int)nd;
        t->count = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint32_t v;
            FX_NEED(4);
            memcpy(&v, buf + o, 4);
            o += 4;
            t->dims[d] = (int)v;
            t->count *= v;
        }
        const size_t esz = dt == FX_U8 ? 1 : 4, nb = esz * t->count;
        FX_NEED(nb);
        t->data = g4_malloc(nb ? nb : 1);
        memcpy(t->data, buf + o, nb);
        o += nb;
        out->n++;
    }
done:
#undef FX_NEED
    free(buf);
    free(path);
    return rc;
}

static void fx_free(fx_file *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].data);
    f->n = 0;
}

// The named tensor, which must exist with the given dtype (aborts the test otherwise: a broken
// fixture is a setup error, not a check to count).
static fx_tensor *fx_get(fx_file *f, const char *name, int dtype) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) {
            if (f->t[i].dtype != dtype) {
                fprintf(stderr, "fixture tensor %s: dtype %d, expected %d\n", name, f->t[i].dtype,
                        dtype);
                exit(1);
            }
            return &f->t[i];
        }
    fprintf(stderr, "fixture tensor %s missing (rerun tools/python/make_attnops_fixtures.py)\n",
            name);
    exit(1);
}

static float *fx_f32(fx_file *f, const char *name) {
    return fx_get(f, name, FX_F32)->data;
}

// fp32 fixture weights (fp16 values by construction) as fp16 bits; fails on a value that is
// not exactly representable (a fixture that was not rounded).
static uint16_t *to_f16_exact(const float *x, size_t n) {
    uint16_t *h = g4_malloc(2 * (n ? n : 1));
    int inexact = 0;
    for (size_t i = 0; i < n; i++) {
        h[i] = g4_f32_to_f16(x[i]);
        if (g4_f16_to_f32(h[i]) != x[i]) inexact++;
    }
    CHECK_MSG(inexact == 0, "%d fixture weights are not fp16 values", inexact);
    return h;
}

// |got - want| <= atol + rtol * |want| everywhere, no NaN; prints the worst element.
static void check_close(const char *what, const float *got, const float *want, size_t n,
                        double atol, double rtol) {
    size_t bad = 0, worst = 0;
    double worst_excess = -1;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]), tol = atol + rtol * fabs(want[i]);
        if (isnan(got[i]) || isnan(want[i]) || d > tol) bad++;
        const double ex = isnan(d) ? INFINITY : d - tol;
        if (ex > worst_excess) worst_excess = ex, worst = i;
    }
    CHECK_MSG(bad == 0,
              "%s: %zu of %zu elements off (worst [%zu] got %.9g want %.9g, atol %g rtol %g)", what,
              bad, n, worst, got[worst], want[worst], atol, rtol);
}

// HF runs these modules in fp32; our references sum in double. The differences are fp32
// rounding of HF's sums of at most a few hundred terms: well under 1e-5 of the values' scale.
#define FX_ATOL 2e-5
#define FX_RTOL 2e-5

static const char *fixture_dir(void) {
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s/attnops", g4t_env("G4_FIXTURES"));
    return dir;
}

// --- audio attention -------------------------------------------------------------------------
static void test_audio_attention_hf(void) {
    fx_file f;
    if (fx_load(fixture_dir(), "audio_attention.g4fx", &f)) {
        CHECK_MSG(0, "audio_attention.g4fx unreadable");
        return;
    }
    fx_tensor *q = fx_get(&f, "q", FX_F32);
    const int T = q->dims[0], w = q->dims[1], H = 2, hd = w / H;
    const uint8_t *valid = fx_get(&f, "valid", FX_U8)->data;
    const float *pds = fx_f32(&f, "per_dim_scale"), *rel = fx_f32(&f, "rel");
    float *out = g4_malloc(sizeof(float) * (size_t)T * w);
    ref_audio_attention(out, q->data, fx_f32(&f, "k"), fx_f32(&f, "v"), rel, pds, valid, T, H, hd,
                        12, 12, 50.0f, -1e9f);
    check_close("audio attention vs HF", out, fx_f32(&f, "out"), (size_t)T * w, FX_ATOL, FX_RTOL);

    // Independent: the dense softmax over exactly the keys HF's 5-D blocked mask marks visible
    // (mask5 [blocks, 12, 24]: query 12b + i, context key 12b - 12 + j), for every query that
    // has one. This checks our band predicate (0 <= t - u < 12 and valid) against HF's mask.
    fx_tensor *m5 = fx_get(&f, "mask5", FX_U8);
    const uint8_t *mask5 = m5->data;
    const int ctx = m5->dims[2];
    const float *qf = q->data, *k = fx_f32(&f, "k"), *v = fx_f32(&f, "v");
    const double qsc = pow(hd, -0.5) / log(2.0), ksc = log(1 + exp(1.0)) / log(2.0);
    int rows_checked = 0, bad = 0;
    for (int t = 0; t < T; t++) {
        const int b = t / 12, i = t % 12;
        int any = 0;
        for (int j = 0; j < ctx; j++) any |= mask5[((size_t)b * 12 + i) * ctx + j];
        if (!any) continue;
        rows_checked++;
        for (int h = 0; h < H; h++) {
            double z[32], mx = -INFINITY, sum = 0, o[256] = {0};
            for (int j = 0; j < ctx; j++) {
                const int u = 12 * b - 12 + j;
                if (!mask5[((size_t)b * 12 + i) * ctx + j]) continue;
                double s = 0;
                for (int e = 0; e < hd; e++) {
                    const double qe = qf[(size_t)t * w + h * hd + e];
                    const double sp = log1p(exp((double)pds[e]));
                    s += qe * qsc * sp *
                         (k[(size_t)u * w + h * hd + e] * ksc +
                          rel[(size_t)(t - u) * w + h * hd + e]);
                }
                z[j] = 50 * tanh(s / 50);
                if (z[j] > mx) mx = z[j];
            }
            for (int j = 0; j < ctx; j++) {
                if (!mask5[((size_t)b * 12 + i) * ctx + j]) continue;
                const double p = exp(z[j] - mx);
                sum += p;
                for (int e = 0; e < hd; e++)
                    o[e] += p * v[(size_t)(12 * b - 12 + j) * w + h * hd + e];
            }
            for (int e = 0; e < hd; e++) {
                const double want = o[e] / sum, got = out[(size_t)t * w + h * hd + e];
                if (!(fabs(got - want) <= 1e-5 + 1e-5 * fabs(want))) bad++;
            }
        }
    }
    CHECK_MSG(bad == 0, "audio attention: %d elements differ from the HF-mask dense softmax", bad);
    // The fixture's trailing invalid frames leave some queries with no visible key (HF's uniform
    // fallback, compared above against HF itself); make sure both kinds of row were present.
    CHECK_MSG(rows_checked > 0 && rows_checked < T, "rows with a visible key: %d of %d",
              rows_checked, T);
    free(out);
    fx_free(&f);
}

// Hand case: one head, hd 2, T 3, chunk 2, band 2: query 2 sees keys 1 and 2 only.
static void test_audio_attention_hand(void) {
    const float q[] = {1, 0, 0.5f, 0.5f, 0, 1}, k[] = {1, 0, 0, 1, 1, 1}, v[] = {1, 2, 3, 4, 5, 6};
    const float rel[] = {0.5f, -0.5f, 0.25f, 0.25f}; // rel[d], d = 0, 1
    const float pds[] = {0, 0};                      // softplus(0) = ln 2
    const uint8_t valid[] = {1, 1, 1};
    float out[6];
    ref_audio_attention(out, q, k, v, rel, pds, valid, 3, 1, 2, 2, 2, 50.0f, -1e9f);
    // q' = q * 2^-0.5 / ln2 * ln2 = q / sqrt(2); k' = k * ln(1+e)/ln2.
    const double ks = log(1 + exp(1.0)) / log(2.0), r2 = 1 / sqrt(2.0);
    // t = 2 (q = [0, 1]): u = 1 (d = 1): q'.(k'+rel1) = r2*(1*ks + 0.25); u = 2 (d = 0): r2*(ks -
    // 0.5)
    double z1 = 50 * tanh(r2 * (ks + 0.25) / 50), z2 = 50 * tanh(r2 * (ks - 0.5) / 50);
    double p1 = 1 / (1 + exp(z2 - z1)), p2 = 1 - p1;
    CHECK(fabs(out[4] - (p1 * 3 + p2 * 5)) < 1e-6 && fabs(out[5] - (p1 * 4 + p2 * 6)) < 1e-6);
    // t = 0: only key 0 visible -> v[0].
    CHECK(fabs(out[0] - 1) < 1e-6 && fabs(out[1] - 2) < 1e-6);
    // All keys of t = 2 invalid -> HF's uniform mean over its 4-entry context (keys 0..3 of block
    // 1's window u = 0..3, of which u = 3 is beyond T and reads as 0): (v0 + v1 + v2) / 4.
    const uint8_t none[] = {1, 0, 0};
    ref_audio_attention(out, q, k, v, rel, pds, none, 3, 1, 2, 2, 2, 50.0f, -1e9f);
    CHECK(fabs(out[4] - (1 + 3 + 5) / 4.0) < 1e-6 && fabs(out[5] - (2 + 4 + 6) / 4.0) < 1e-6);
}

// --- SSCP conv -----------------------------------------------------------------------------
// The conv + LayerNorm + ReLU by its definition with another loop order (output channel
// innermost, accumulating per input tap) and float LayerNorm: an independent formulation.
static void sscp_direct(float *y, const float *x, const uint8_t *valid, const float *w,
                        const float *lnw, int Ci, int H, int W, int Co) {
    const int Ho = (H + 1) / 2, Wo = (W + 1) / 2;
    double *acc = calloc((size_t)Co * Ho * Wo, sizeof(double));
    for (int ci = 0; ci < Ci; ci++)
        for (int ih = 0; ih < H; ih++)
            for (int iw = 0; iw < W; iw++) {
                const double xv = (valid && !valid[ih]) ? 0 : x[((size_t)ci * H + ih) * W + iw];
                // every output (oh, ow) whose 3x3 window covers (ih, iw): ih = 2 oh + ky - 1
                for (int ky = 0; ky < 3; ky++)
                    for (int kx = 0; kx < 3; kx++) {
                        const int oh2 = ih + 1 - ky, ow2 = iw + 1 - kx;
                        if (oh2 < 0 || ow2 < 0 || oh2 % 2 || ow2 % 2) continue;
                        const int oh = oh2 / 2, ow = ow2 / 2;
                        if (oh >= Ho || ow >= Wo) continue;
                        for (int co = 0; co < Co; co++)
                            acc[((size_t)co * Ho + oh) * Wo + ow] +=
                                xv * w[(((size_t)co * Ci + ci) * 3 + ky) * 3 + kx];
                    }
            }
    for (int p = 0; p < Ho * Wo; p++) {
        double m = 0, var = 0;
        for (int co = 0; co < Co; co++) m += acc[(size_t)co * Ho * Wo + p];
        m /= Co;
        for (int co = 0; co < Co; co++) {
            const double d = acc[(size_t)co * Ho * Wo + p] - m;
            var += d * d;
        }
        var /= Co;
        for (int co = 0; co < Co; co++) {
            const double n = (acc[(size_t)co * Ho * Wo + p] - m) / sqrt(var + 1e-6) * lnw[co];
            y[(size_t)co * Ho * Wo + p] = (float)(n > 0 ? n : 0);
        }
    }
    free(acc);
}

static void test_sscp(void) {
    fx_file f;
    if (fx_load(fixture_dir(), "sscp.g4fx", &f)) {
        CHECK_MSG(0, "sscp.g4fx unreadable");
        return;
    }
    fx_tensor *x = fx_get(&f, "x", FX_F32), *w0 = fx_get(&f, "w0", FX_F32),
              *w1 = fx_get(&f, "w1", FX_F32);
    const int H = x->dims[1], W = x->dims[2], C0 = w0->dims[0], C1 = w1->dims[0];
    const int H0 = (H + 1) / 2, W0 = (W + 1) / 2, H1 = (H0 + 1) / 2, W1 = (W0 + 1) / 2;
    const uint8_t *valid = fx_get(&f, "valid", FX_U8)->data;
    const uint8_t *valid0 = fx_get(&f, "valid0", FX_U8)->data;
    uint16_t *hw0 = to_f16_exact(w0->data, w0->count), *hw1 = to_f16_exact(w1->data, w1->count);
    uint16_t *hl0 = to_f16_exact(fx_f32(&f, "ln0"), (size_t)C0);
    uint16_t *hl1 = to_f16_exact(fx_f32(&f, "ln1"), (size_t)C1);
    float *y0 = g4_malloc(sizeof(float) * (size_t)C0 * H0 * W0);
    float *y1 = g4_malloc(sizeof(float) * (size_t)C1 * H1 * W1);
    float *d0 = g4_malloc(sizeof(float) * (size_t)C0 * H0 * W0);
    ref_sscp_conv(y0, x->data, valid, hw0, hl0, 1, H, W, C0, 1e-6f);
    check_close("sscp layer0 vs HF", y0, fx_f32(&f, "y0"), (size_t)C0 * H0 * W0, FX_ATOL, FX_RTOL);
    // The next mask is valid[::2] (HF); the fixture holds HF's.
    for (int h = 0; h < H0; h++) CHECK(valid0[h] == valid[2 * h]);
    // Layer 1 on HF's own layer-0 output, so the two layers are checked independently.
    ref_sscp_conv(y1, fx_f32(&f, "y0"), valid0, hw1, hl1, C0, H0, W0, C1, 1e-6f);
    check_close("sscp layer1 vs HF", y1, fx_f32(&f, "y1"), (size_t)C1 * H1 * W1, FX_ATOL, FX_RTOL);
    sscp_direct(d0, x->data, valid, w0->data, fx_f32(&f, "ln0"), 1, H, W, C0);
    check_close("sscp layer0 vs direct loop", y0, d0, (size_t)C0 * H0 * W0, 1e-5, 1e-5);

    // Random case with an even width, several input channels and no mask.
    unsigned long long s = 77;
    const int Ci = 5, Hh = 8, Ww = 10, Co = 6;
    float *xr = g4_malloc(sizeof(float) * Ci * Hh * Ww),
          *wr = g4_malloc(sizeof(float) * Co * Ci * 9);
    float lw[6];
    for (int i = 0; i < Ci * Hh * Ww; i++) xr[i] = g4t_rand_uniform(&s, -2, 2);
    for (int i = 0; i < Co * Ci * 9; i++) wr[i] = g4_round_f16(g4t_rand_uniform(&s, -1, 1));
    for (int i = 0; i < Co; i++) lw[i] = g4_round_f16(g4t_rand_uniform(&s, 0.5f, 1.5f));
    uint16_t *hwr = to_f16_exact(wr, (size_t)Co * Ci * 9), *hlw = to_f16_exact(lw, Co);
    float *ya = g4_malloc(sizeof(float) * Co * 4 * 5), *yb = g4_malloc(sizeof(float) * Co * 4 * 5);
    ref_sscp_conv(ya, xr, NULL, hwr, hlw, Ci, Hh, Ww, Co, 1e-6f);
    sscp_direct(yb, xr, NULL, wr, lw, Ci, Hh, Ww, Co);
    check_close("sscp random vs direct loop", ya, yb, (size_t)Co * 4 * 5, 1e-5, 1e-5);
    int zeros = 0;
    for (int i = 0; i < Co * 20; i++) zeros += ya[i] == 0;
    CHECK_MSG(zeros > 0 && zeros < Co * 20, "ReLU: %d of %d zero (expect some, not all)", zeros,
              Co * 20);
    free(xr), free(wr), free(hwr), free(hlw), free(ya), free(yb);
    free(hw0), free(hw1), free(hl0), free(hl1), free(y0), free(y1), free(d0);
    fx_free(&f);
}

// --- LightConv1d pieces: GLU, causal depthwise conv, RMSNorm, SiLU ----------------------------
static void test_lconv(void) {
    fx_file f;
    if (fx_load(fixture_dir(), "lconv.g4fx", &f)) {
        CHECK_MSG(0, "lconv.g4fx unreadable");
        return;
    }
    fx_tensor *glu = fx_get(&f, "glu", FX_F32), *cw = fx_get(&f, "conv_w", FX_F32);
    const int T = glu->dims[0], C = glu->dims[1], K = cw->dims[1];
    CHECK_INT(K, 5);
    float *a = g4_malloc(sizeof(float) * T * C), *b = g4_malloc(sizeof(float) * T * C);
    ref_glu(a, fx_f32(&f, "start"), T, C);
    check_close("glu vs HF", a, glu->data, (size_t)T * C, FX_ATOL, FX_RTOL);
    uint16_t *hw = to_f16_exact(cw->data, cw->count);
    ref_dwconv1d_causal(b, glu->data, hw, T, C, K);
    check_close("depthwise conv vs HF", b, fx_f32(&f, "conv"), (size_t)T * C, FX_ATOL, FX_RTOL);
    ref_clamp(b, (size_t)T * C, -1e10f, 1e10f); // HF's fp32 gradient clipping: a no-op here
    uint16_t *nw = to_f16_exact(fx_f32(&f, "norm_w"), (size_t)C);
    ref_rmsnorm(a, fx_f32(&f, "conv"), nw, T, C, C, 1e-6f);
    check_close("conv_norm vs HF", a, fx_f32(&f, "norm"), (size_t)T * C, FX_ATOL, FX_RTOL);
    ref_silu(b, fx_f32(&f, "norm"), (size_t)T * C);
    check_close("silu vs HF", b, fx_f32(&f, "silu"), (size_t)T * C, FX_ATOL, FX_RTOL);
    free(a), free(b), free(hw), free(nw);
    fx_free(&f);

    // Hand case: K = 3, one channel w = [1, 10, 100]: y[t] = x[t-2] + 10 x[t-1] + 100 x[t].
    const float x1[] = {1, 2, 3, 4};
    const uint16_t w3[] = {g4_f32_to_f16(1), g4_f32_to_f16(10), g4_f32_to_f16(100)};
    float y1[4];
    ref_dwconv1d_causal(y1, x1, w3, 4, 1, 3);
    CHECK(y1[0] == 100 && y1[1] == 210 && y1[2] == 321 && y1[3] == 432);
    // GLU: x = [a0 a1 | g0 g1] -> a * sigmoid(g); sigmoid(0) = 0.5.
    const float xg[] = {2, -4, 0, 0};
    float yg[2];
    ref_glu(yg, xg, 1, 2);
    CHECK(yg[0] == 1 && yg[1] == -2);
    float sv[] = {0, 1, -1};
    ref_silu(sv, sv, 3);
    CHECK(sv[0] == 0 && fabs(sv[1] - 0.7310585786) < 1e-7 && fabs(sv[2] + 0.2689414214) < 1e-7);
}

static void test_layernorm_clamp(void) {
    // Row [1, 2, 3, 4]: mean 2.5, biased var 1.25.
    const float x[] = {1, 2, 3, 4};
    const uint16_t w[] = {g4_f32_to_f16(1), g4_f32_to_f16(2), g4_f32_to_f16(1), g4_f32_to_f16(1)};
    const uint16_t b[] = {0, 0, g4_f32_to_f16(1), 0};
    float y[4];
    ref_layernorm(y, x, w, b, 1, 4, 0.0f);
    const double r = 1 / sqrt(1.25);
    CHECK(fabs(y[0] + 1.5 * r) < 1e-6 && fabs(y[1] + 2 * 0.5 * r) < 1e-6 &&
          fabs(y[2] - (0.5 * r + 1)) < 1e-6 && fabs(y[3] - 1.5 * r) < 1e-6);
    ref_layernorm(y, x, NULL, NULL, 1, 4, 0.75f); // eps inside the root: var + eps = 2
    CHECK(fabs(y[3] - 1.5 / sqrt(2.0)) < 1e-6);
    float c[] = {-5, 0.5f, 7, NAN};
    ref_clamp(c, 4, -1, 2);
    CHECK(c[0] == -1 && c[1] == 0.5f && c[2] == 2 && isnan(c[3]));
}

// --- vision: 2-D RoPE + bidirectional attention, position embedding, pooling -----------------
static void vision_inv_freq(float *inv, int hd, float theta) {
    const int spatial = hd / 2; // HF: 1 / theta^(arange(0, spatial, 2) / spatial) in fp32
    for (int j = 0; j < hd / 4; j++) inv[j] = 1.0f / powf(theta, (float)(2 * j) / (float)spatial);
}

static void test_vision(void) {
    fx_file f;
    if (fx_load(fixture_dir(), "vision.g4fx", &f)) {
        CHECK_MSG(0, "vision.g4fx unreadable");
        return;
    }
    fx_tensor *q = fx_get(&f, "q", FX_F32), *pt = fx_get(&f, "pos_table", FX_F32);
    const int N = q->dims[0], w = q->dims[1], H = 2, hd = 64;
    const int32_t *pos = fx_get(&f, "pos", FX_I32)->data;
    const uint8_t *kv = fx_get(&f, "key_valid", FX_U8)->data;
    float inv[16];
    vision_inv_freq(inv, hd, 100.0f);
    float *qr = g4_malloc(sizeof(float) * N * w), *kr = g4_malloc(sizeof(float) * N * w);
    float *out = g4_malloc(sizeof(float) * N * w);
    memcpy(qr, q->data, sizeof(float) * N * w);
    memcpy(kr, fx_f32(&f, "k"), sizeof(float) * N * w);
    ref_rope_2d(qr, N, H, hd, pos, inv);
    ref_rope_2d(kr, N, H, hd, pos, inv);
    ref_attention_bidir(out, qr, N, kr, fx_f32(&f, "v"), kv, N, H, hd, 1.0f);
    check_close("vision rope+attention vs HF", out, fx_f32(&f, "attn"), (size_t)N * w, FX_ATOL,
                FX_RTOL);

    // Position embedding add.
    const int D = pt->dims[2], rows = pt->dims[1];
    uint16_t *tab = to_f16_exact(pt->data, pt->count);
    float *h = g4_malloc(sizeof(float) * N * D);
    memcpy(h, fx_f32(&f, "proj"), sizeof(float) * N * D);
    CHECK(ref_vision_posemb_add(h, tab, rows, pos, N, D) == G4_OK);
    check_close("vision position embedding vs HF", h, fx_f32(&f, "embed"), (size_t)N * D, FX_ATOL,
                FX_RTOL);
    int32_t badpos[2] = {rows, 0};
    CHECK(ref_vision_posemb_add(h, tab, rows, badpos, 1, D) == G4_EUSER);
    CHECK(strstr(g4_error(), "expected coordinates in [0, 16)") != NULL);

    // Pooling: HF pools the padded set of N = 27 patches to 3 bins (2 used).
    fx_tensor *po = fx_get(&f, "pool_out", FX_F32);
    const int nb = po->dims[0];
    float *pooled = g4_malloc(sizeof(float) * nb * D);
    uint8_t used[8];
    CHECK(ref_vision_pool(pooled, used, fx_f32(&f, "pool_in"), pos, N, D, 3, nb, sqrtf((float)D)) ==
          G4_OK);
    check_close("vision pool vs HF", pooled, po->data, (size_t)nb * D, FX_ATOL, FX_RTOL);
    const uint8_t *pv = fx_get(&f, "pool_valid", FX_U8)->data;
    for (int i = 0; i < nb; i++) CHECK_INT(used[i], pv[i]);
    free(qr), free(kr), free(out), free(tab), free(h), free(pooled);
    fx_free(&f);
}

// Pooling vs explicit 3x3 block means on a 6 x 9 grid (2 x 3 bins) of random patches in
// shuffled order, plus a padding patch that must add nothing, and the out-of-range error.
static void test_pool_explicit(void) {
    const int gw = 9, gh = 6, N = gw * gh + 1, D = 5, nb = 6;
    int32_t pos[2 * 55];
    float x[55 * 5], out[6 * 5];
    unsigned long long s = 99;
    int order[54];
    for (int i = 0; i < 54; i++) order[i] = i;
    for (int i = 53; i > 0; i--) { // Fisher-Yates: patch order must not matter
        int j = (int)(g4t_rand_u64(&s) % (unsigned long long)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (int i = 0; i < 54; i++) {
        pos[2 * i] = order[i] % gw, pos[2 * i + 1] = order[i] / gw;
        for (int d = 0; d < D; d++) x[i * D + d] = g4t_rand_uniform(&s, -1, 1);
    }
    pos[2 * 54] = pos[2 * 54 + 1] = -1;
    for (int d = 0; d < D; d++) x[54 * D + d] = 1000; // padding row with large values: ignored
    CHECK(ref_vision_pool(out, NULL, x, pos, N, D, 3, nb, 2.0f) == G4_OK);
    int bad = 0;
    for (int by = 0; by < 2; by++)
        for (int bx = 0; bx < 3; bx++)
            for (int d = 0; d < D; d++) {
                double sum = 0;
                for (int i = 0; i < 54; i++)
                    if (pos[2 * i] / 3 == bx && pos[2 * i + 1] / 3 == by) sum += x[i * D + d];
                if (fabs(out[(by * 3 + bx) * D + d] - sum / 9 * 2) > 1e-6) bad++;
            }
    CHECK_MSG(bad == 0, "%d pooled values differ from the explicit 3x3 means", bad);
    CHECK(ref_vision_pool(out, NULL, x, pos, N, D, 3, 5, 1.0f) == G4_EUSER);
    CHECK(strstr(g4_error(), "expected < 5 bins") != NULL);
}

// 2-D RoPE vs rotating each axis as a 1-D RoPE (ref_rope) on the matching half-head: an
// independent check of the part / pair layout, and that rope on position 0 is the identity.
static void test_rope_2d_vs_1d(void) {
    const int T = 7, H = 3, hd = 64;
    float x[7 * 3 * 64], a[7 * 3 * 64], part[7 * 3 * 32], inv[16];
    int32_t pos[14], px[7], py[7];
    unsigned long long s = 5;
    for (int i = 0; i < T * H * hd; i++) x[i] = g4t_rand_uniform(&s, -1, 1);
    for (int t = 0; t < T; t++) pos[2 * t] = px[t] = t * 3, pos[2 * t + 1] = py[t] = 40 - t;
    pos[0] = px[0] = 0, pos[1] = py[0] = 0;
    vision_inv_freq(inv, hd, 100.0f);
    memcpy(a, x, sizeof x);
    ref_rope_2d(a, T, H, hd, pos, inv);
    int bad = 0;
    for (int axis = 0; axis < 2; axis++) {
        // gather this axis' half of every head as [T, H, 32] heads of 32 dims
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                memcpy(&part[(t * H + h) * 32], &x[(t * H + h) * hd + axis * 32],
                       32 * sizeof(float));
        ref_rope(part, T, H, 32, axis ? py : px, inv);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int e = 0; e < 32; e++)
                    if (part[(t * H + h) * 32 + e] != a[(t * H + h) * hd + axis * 32 + e]) bad++;
    }
    CHECK_MSG(bad == 0, "%d values differ between 2-D RoPE and per-axis 1-D RoPE", bad);
    CHECK(memcmp(a, x, hd * H * sizeof(float)) == 0); // token 0 at (0, 0): unchanged
}

// Bidirectional attention: masked keys must not matter (changing them changes nothing), and a
// single valid key returns its value.
static void test_bidir_mask(void) {
    const int N = 6, H = 2, hd = 4, w = 8;
    float q[48], k[48], v[48], o1[48], o2[48];
    const uint8_t kv[] = {1, 0, 1, 1, 0, 0};
    unsigned long long s = 11;
    for (int i = 0; i < 48; i++)
        q[i] = g4t_rand_uniform(&s, -1, 1), k[i] = g4t_rand_uniform(&s, -1, 1),
        v[i] = g4t_rand_uniform(&s, -1, 1);
    ref_attention_bidir(o1, q, N, k, v, kv, N, H, hd, 0.7f);
    for (int e = 0; e < w; e++) k[1 * w + e] = 1e6f, v[4 * w + e] = 1e6f;
    ref_attention_bidir(o2, q, N, k, v, kv, N, H, hd, 0.7f);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    const uint8_t one[] = {0, 0, 0, 1, 0, 0};
    ref_attention_bidir(o1, q, N, k, v, one, N, H, hd, 0.7f);
    int bad = 0;
    for (int i = 0; i < N; i++)
        for (int e = 0; e < w; e++) bad += fabsf(o1[i * w + e] - v[3 * w + e]) > 1e-6f;
    CHECK_INT(bad, 0);
}

int main(void) {
    g4_ref_init();
    test_audio_attention_hf();
    test_audio_attention_hand();
    test_sscp();
    test_lconv();
    test_layernorm_clamp();
    test_vision();
    test_pool_explicit();
    test_rope_2d_vs_1d();
    test_bidir_mask();
    return g4t_finish("test_ref_ops");
}
