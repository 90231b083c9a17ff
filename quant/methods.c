// methods.c: round-to-nearest, GPTQ (and gptq_imx) and the layer-output fit (see methods.h).
//
// Orientation: W [K, N] row-major as the fp16 packages store it (y = x @ W), so row k is input
// channel k across all N outputs and GPTQ's "columns" (input channels of torch's [N, K]) are our
// rows. Every output column n is independent given H, so the work is split by column tiles.
#include "quant/methods.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/parallel.h"
#include "loader/onnx_model.h"
#include "quant/kquant.h"
#include "quant/q4.h"
#include "quant/quad_form.h"

static const char *const NAMES[] = {"kquant", "rtn", "imatrix", "gptq", "fit", "gptq_imx"};

int g4_qmethod_parse(const char *name, g4_qmethod *out) {
    for (int i = 0; i < (int)(sizeof NAMES / sizeof NAMES[0]); i++)
        if (name && !strcmp(name, NAMES[i])) {
            *out = (g4_qmethod)i;
            return G4_OK;
        }
    return g4_fail(G4_EUSER,
                   "quantize method '%s': expected kquant, rtn, imatrix, gptq, fit or gptq_imx",
                   name ? name : "(null)");
}

const char *g4_qmethod_name(g4_qmethod m) {
    return (unsigned)m < sizeof NAMES / sizeof NAMES[0] ? NAMES[m] : "?";
}

int g4_qmethod_needs_calib(g4_qmethod m) {
    return m == G4_QM_IMATRIX || g4_qmethod_needs_hessian(m);
}

int g4_qmethod_needs_hessian(g4_qmethod m) {
    return m == G4_QM_GPTQ || m == G4_QM_FIT || m == G4_QM_GPTQ_IMX;
}

// --- shared pieces ------------------------------------------------------------------------------

#define F16_MIN_SUB 5.9604645e-08f // the smallest positive fp16 (2^-24)
#define F16_MAX     65504.0f
#define TILE        64 // output columns per work item

// clip(v, 0, 15) as a code; NaN gives 0.
static uint8_t clip15(double v) {
    return !(v > 0) ? 0 : v > 15 ? 15 : (uint8_t)v;
}

// A scale as the file stores it: fp16, positive and finite.
static float store_scale(float s) {
    if (!(s >= F16_MIN_SUB)) s = F16_MIN_SUB; // also NaN
    if (s > F16_MAX) s = F16_MAX;
    return g4_round_f16(s);
}

static float load_w(const void *w, int dtype, uint64_t i) {
    if (dtype == G4_DT_FLOAT16) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)w + 2 * i, 2);
        return g4_f16_to_f32(h);
    }
    float f;
    memcpy(&f, (const uint8_t *)w + 4 * i, 4);
    return f;
}

static int check_args(const char *what, int w_dtype, int K, int N, int block) {
    if (block < 16 || block > G4_KQUANT_MAX_BLOCK || (block & (block - 1)) != 0)
        return g4_fail(G4_EUSER, "%s: block size %d, expected a power of two in [16, %d]", what,
                       block, G4_KQUANT_MAX_BLOCK);
    if (K <= 0 || N <= 0)
        return g4_fail(G4_EUSER, "%s: weight [%d, %d], expected positive dims", what, K, N);
    if (w_dtype != G4_DT_FLOAT16 && w_dtype != G4_DT_FLOAT)
        return g4_fail(G4_EUSER, "%s: weight dtype %s, expected float16 or float32", what,
                       g4_dtype_name(w_dtype));
    return G4_OK;
}

// The min/max parameters of x[n]: range [min(x, 0), max(x, 0)] over 15 steps.
static void rtn_params(const float *x, int n, float *scale, int *zp) {
    float lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    if (!(hi > lo)) { // all zero (or NaN)
        *scale = 1;
        *zp = 0;
        return;
    }
    const float s = store_scale((hi - lo) / 15.0f);
    *scale = s;
    *zp = clip15(rint((double)-lo / s));
}

static void rtn_codes(const float *x, int n, float s, int z, uint8_t *codes) {
    for (int i = 0; i < n; i++) codes[i] = clip15(rint((double)x[i] / s + z));
}

// GPTQ's block parameters: min/max shrunk by p = 1, 0.98, .. 0.60 (clipping the extremes), the
// one with the least h-weighted squared error of the rounded block (h: each channel's X^T X
// diagonal; GPTQ's "mse" grid). p = 1 is min/max itself, so the pick is never worse than it.
static void grid_params(const float *x, const double *h, int n, float *scale, int *zp) {
    float lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    if (!(hi > lo)) {
        *scale = 1;
        *zp = 0;
        return;
    }
    rtn_params(x, n, scale, zp); // p = 1 (kept when every error is NaN)
    double best = INFINITY;
    for (int g = 0; g <= 20; g++) {
        const float p = 1.0f - 0.02f * (float)g, l = p * lo, u = p * hi;
        const float s = store_scale((u - l) / 15.0f);
        const int z = clip15(rint((double)-l / s));
        double e = 0;
        for (int i = 0; i < n; i++) {
            const double c = clip15(rint((double)x[i] / s + z)), d = (c - z) * s - x[i];
            e += h[i] * d * d;
        }
        if (e < best) best = e, *scale = s, *zp = z;
    }
}

void g4_rtn_block(const float *x, int block, uint8_t *codes, float *scale, uint8_t *zp) {
    int z;
    rtn_params(x, block, scale, &z);
    rtn_codes(x, block, *scale, z, codes);
    *zp = (uint8_t)z;
}

// Column n's codes[kb * B], scales[kb] (fp32, already fp16 values) and zps[kb] into the arrays.
static void store_col(int n, int kb, int B, const uint8_t *codes, const float *sc,
                      const uint8_t *zps, uint8_t *q, uint16_t *scales, uint8_t *zp) {
    for (int b = 0; b < kb; b++) {
        g4_q4_pack_block(codes + (size_t)b * B, B, q + ((size_t)n * kb + b) * (size_t)(B / 2));
        scales[(size_t)n * kb + b] = g4_f32_to_f16(sc[b]);
    }
    g4_q4_pack_zp_row(zps, kb, zp + (size_t)n * g4_q4_zp_row_bytes(kb));
}

// --- per-block methods over column tiles (rtn, fit) ---------------------------------------------

typedef struct {
    const void *w;
    int dtype, K, N, B, kb;
    const float *H; // fit: K x K
    float ridge;    // fit: added to H_bb's diagonal (1e-2 of the mean of diag H)
    uint8_t *q;
    uint16_t *scales;
    uint8_t *zp;
} tile_job;

// fit, one block: x[B] (zero-padded), hb[B x B] (with the ridge) -> codes, scale, zp.
static double block_loss(const float *x, const uint8_t *c, float s, int z, const double *hb, int B,
                         double *d) {
    for (int i = 0; i < B; i++) d[i] = ((double)c[i] - z) * s - x[i];
    double e = 0;
    for (int i = 0; i < B; i++) {
        double r = 0;
        for (int j = 0; j < B; j++) r += hb[i * B + j] * d[j];
        e += d[i] * r;
    }
    return e;
}

#define FIT_STEPS 29 // scale factors 0.50 .. 1.20 of min/max's, step 0.025
#define FIT_KEEP  6  // candidates kept by the diagonal screen for the full loss

typedef struct {
    float s;
    int z;
    double e;
} fit_cand;

static void fit_block(const float *x, int B, const double *hb, uint8_t *codes, float *scale,
                      uint8_t *zp_out, double *d, uint8_t *tc) {
    float lo = 0, hi = 0;
    for (int i = 0; i < B; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    if (!(hi > lo)) { // all zero: any scale, codes at the zero point
        int z;
        rtn_params(x, B, scale, &z);
        rtn_codes(x, B, *scale, z, codes);
        *zp_out = (uint8_t)z;
        return;
    }
    fit_cand cand[FIT_STEPS * 4 + 1];
    int nc = 0;
    {
        float ks;
        uint8_t kz;
        g4_kquant_block(x, B, tc, &ks, &kz); // k-quant's own pick is always a candidate
        cand[nc++] = (fit_cand){store_scale(ks), kz, 0};
    }
    for (int f = 0; f < FIT_STEPS; f++) {
        const float s = store_scale((hi - lo) / 15.0f * (0.5f + 0.025f * (float)f));
        const int z0 = clip15(rint((double)-lo / s)), zc = clip15(rint(7.5 - (lo + hi) / (2.0 * s)));
        const int zs[4] = {z0 - 1, z0, z0 + 1, zc};
        for (int k = 0; k < 4; k++)
            if (zs[k] >= 0 && zs[k] <= 15) cand[nc++] = (fit_cand){s, zs[k], 0};
    }
    // Screen by the diagonal of H_bb (the imatrix's loss), then the full d^T H_bb d.
    for (int c = 0; c < nc; c++) {
        rtn_codes(x, B, cand[c].s, cand[c].z, tc);
        double e = 0;
        for (int i = 0; i < B; i++) {
            const double di = ((double)tc[i] - cand[c].z) * cand[c].s - x[i];
            e += hb[i * B + i] * di * di;
        }
        cand[c].e = e;
    }
    int keep[FIT_KEEP + 1], nk = 0;
    keep[nk++] = 0; // k-quant's
    for (int r = 0; r < FIT_KEEP; r++) {
        int best = -1;
        for (int c = 1; c < nc; c++) {
            int taken = 0;
            for (int k = 0; k < nk; k++) taken |= keep[k] == c;
            if (!taken && (best < 0 || cand[c].e < cand[best].e)) best = c;
        }
        if (best < 0) break;
        keep[nk++] = best;
    }
    double best_e = INFINITY;
    int bi = 0;
    for (int k = 0; k < nk; k++) {
        const fit_cand *c = &cand[keep[k]];
        rtn_codes(x, B, c->s, c->z, tc);
        const double e = block_loss(x, tc, c->s, c->z, hb, B, d);
        if (e < best_e) best_e = e, bi = keep[k];
    }
    const float s = cand[bi].s;
    const int z = cand[bi].z;
    rtn_codes(x, B, s, z, codes);
    // Codes by coordinate descent on d^T H_bb d (rounding is optimal only for a diagonal H_bb):
    // code i moved by +-1 changes the loss by 2 delta g_i + delta^2 H_ii, g = H_bb d.
    for (int i = 0; i < B; i++) d[i] = ((double)codes[i] - z) * s - x[i];
    double *g = d + B;
    for (int i = 0; i < B; i++) {
        double r = 0;
        for (int j = 0; j < B; j++) r += hb[i * B + j] * d[j];
        g[i] = r;
    }
    for (int sweep = 0; sweep < 2; sweep++)
        for (int i = 0; i < B; i++)
            for (int dir = -1; dir <= 1; dir += 2) {
                const int c2 = codes[i] + dir;
                if (c2 < 0 || c2 > 15) continue;
                const double delta = (double)dir * s;
                const double dl = 2 * delta * g[i] + delta * delta * hb[i * B + i];
                if (dl < -1e-12 * (best_e > 0 ? best_e : 1)) {
                    codes[i] = (uint8_t)c2;
                    d[i] += delta;
                    for (int j = 0; j < B; j++) g[j] += hb[j * B + i] * delta;
                    best_e += dl;
                    break;
                }
            }
    *scale = s;
    *zp_out = (uint8_t)z;
}

// acc[0..7] += sum_{k < n} a[k] * b[k * ldb + 0..7] (a floats, b doubles), in double, each sum
// in the order of k. Named accumulators: an array here stayed in memory, a store-to-load chain
// per add.
static void dot8(double *acc, const float *a, const double *b, size_t ldb, int n) {
    double t0 = acc[0], t1 = acc[1], t2 = acc[2], t3 = acc[3], t4 = acc[4], t5 = acc[5],
           t6 = acc[6], t7 = acc[7];
    for (int k = 0; k < n; k++) {
        const double x = a[k];
        const double *bk = b + (size_t)k * ldb;
        t0 += x * bk[0], t1 += x * bk[1], t2 += x * bk[2], t3 += x * bk[3];
        t4 += x * bk[4], t5 += x * bk[5], t6 += x * bk[6], t7 += x * bk[7];
    }
    acc[0] = t0, acc[1] = t1, acc[2] = t2, acc[3] = t3, acc[4] = t4, acc[5] = t5, acc[6] = t6;
    acc[7] = t7;
}

#define FIT_KC 128 // rows of D per pass over G (64 KB)

// fit, the whole column: the blocks' scales and zero points stay, the codes move by +-1 where
// that lowers the full d^T H d (the cross-block terms the per-block fit leaves out), two sweeps.
// A tile of nt columns together (codes [TILE][padded], sc and zps [TILE][kb], col likewise):
// each column's g = (H + ridge) d and its moves are the sums and steps of the column taken
// alone, in the same order (so the same bits), but H is read once per tile rather than once
// per column (issue 33: 151 MB per column at K = 6144). D, G: [K][TILE] doubles; g [TILE][K].
static void refine_tile(const tile_job *j, int nt, const float *col, uint8_t *codes,
                        const float *sc, const uint8_t *zps, double *D, double *G, double *g) {
    const int K = j->K, B = j->B, kb = j->kb, padded = kb * B;
    const float *H = j->H;
    for (int k = 0; k < K; k++)
        for (int t = 0; t < TILE; t++) {
            const int o = t * kb + k / B;
            D[(size_t)k * TILE + t] =
                t < nt ? ((double)codes[(size_t)t * padded + k] - zps[o]) * sc[o] -
                             col[(size_t)t * padded + k]
                       : 0.0;
        }
    for (size_t i = 0; i < (size_t)K * TILE; i++) G[i] = j->ridge * D[i];
    const int nq = (nt + 7) / 8 * 8;
    for (int b0 = 0; b0 < K; b0 += FIT_KC) {
        const int n = K - b0 < FIT_KC ? K - b0 : FIT_KC;
        for (int a = 0; a < K; a++)
            for (int q = 0; q < nq; q += 8)
                dot8(G + (size_t)a * TILE + q, H + (size_t)a * K + b0, D + (size_t)b0 * TILE + q,
                      TILE, n);
    }
    for (int t = 0; t < nt; t++)
        for (int a = 0; a < K; a++) g[(size_t)t * K + a] = G[(size_t)a * TILE + t];
    for (int sweep = 0; sweep < 2; sweep++)
        for (int k = 0; k < K; k++) {
            const double hkk = (double)H[(size_t)k * K + k] + j->ridge;
            const float *hk = H + (size_t)k * K; // row k = column k (symmetric)
            for (int t = 0; t < nt; t++) {
                uint8_t *ct = codes + (size_t)t * padded;
                double *gt = g + (size_t)t * K;
                for (int dir = -1; dir <= 1; dir += 2) {
                    const int c2 = ct[k] + dir;
                    if (c2 < 0 || c2 > 15) continue;
                    const double delta = (double)dir * sc[t * kb + k / B];
                    if (!(2 * delta * gt[k] + delta * delta * hkk < 0)) continue;
                    ct[k] = (uint8_t)c2;
                    int a = 0;
                    for (; a + 4 <= K; a += 4) { // (four at a time: the compiler pairs them)
                        gt[a] += (double)hk[a] * delta, gt[a + 1] += (double)hk[a + 1] * delta;
                        gt[a + 2] += (double)hk[a + 2] * delta;
                        gt[a + 3] += (double)hk[a + 3] * delta;
                    }
                    for (; a < K; a++) gt[a] += (double)hk[a] * delta;
                    gt[k] += j->ridge * delta;
                    break;
                }
            }
        }
}

static void tile_range(void *ctx, int lo, int hi, int fit) {
    const tile_job *j = ctx;
    const int B = j->B, kb = j->kb, padded = kb * B;
    float *col = g4_malloc(sizeof(float) * (size_t)padded * TILE);
    uint8_t *codes = g4_malloc((size_t)padded * TILE), *zps = g4_malloc((size_t)kb * TILE);
    uint8_t tc[G4_KQUANT_MAX_BLOCK];
    float *sc = g4_malloc(sizeof(float) * (size_t)kb * TILE);
    double *hb = fit ? g4_malloc(sizeof(double) * (size_t)B * B) : NULL;
    double *d = g4_malloc(sizeof(double) * 2 * (size_t)B);
    const size_t kt = fit ? (size_t)j->K * TILE : 0;
    double *D = fit ? g4_malloc(sizeof(double) * kt) : NULL;
    double *G = fit ? g4_malloc(sizeof(double) * kt) : NULL;
    double *g = fit ? g4_malloc(sizeof(double) * kt) : NULL;
    for (int tile = lo; tile < hi; tile++) {
        const int n0 = tile * TILE, nt = j->N - n0 < TILE ? j->N - n0 : TILE;
        for (int t = 0; t < nt; t++) {
            const int n = n0 + t;
            float *ct = col + (size_t)t * padded;
            for (int k = 0; k < padded; k++)
                ct[k] = k < j->K ? load_w(j->w, j->dtype, (uint64_t)k * j->N + n) : 0.0f;
            for (int b = 0; b < kb; b++) {
                const float *x = ct + (size_t)b * B;
                uint8_t *c = codes + (size_t)t * padded + (size_t)b * B;
                float *s_b = sc + (size_t)t * kb + b;
                uint8_t *z_b = zps + (size_t)t * kb + b;
                if (!fit) {
                    g4_rtn_block(x, B, c, s_b, z_b);
                    continue;
                }
                for (int r = 0; r < B; r++)
                    for (int s = 0; s < B; s++) {
                        const int kr = b * B + r, ks = b * B + s;
                        hb[r * B + s] = kr < j->K && ks < j->K
                                            ? j->H[(size_t)kr * j->K + ks]
                                            : 0.0;
                        if (r == s) hb[r * B + s] += j->ridge;
                    }
                fit_block(x, B, hb, c, s_b, z_b, d, tc);
            }
        }
        if (fit) refine_tile(j, nt, col, codes, sc, zps, D, G, g);
        for (int t = 0; t < nt; t++)
            store_col(n0 + t, kb, B, codes + (size_t)t * padded, sc + (size_t)t * kb,
                      zps + (size_t)t * kb, j->q, j->scales, j->zp);
    }
    free(col), free(codes), free(zps), free(sc), free(hb), free(d), free(D), free(G), free(g);
}

static void rtn_range(void *ctx, int lo, int hi) {
    tile_range(ctx, lo, hi, 0);
}
static void fit_range(void *ctx, int lo, int hi) {
    tile_range(ctx, lo, hi, 1);
}

int g4_q4_quantize_rtn(const void *w, int w_dtype, int K, int N, int block, uint8_t *q,
                       uint16_t *scales, uint8_t *zp) {
    int rc = check_args("rtn", w_dtype, K, N, block);
    if (rc) return rc;
    tile_job j = {w, w_dtype, K, N, block, g4_q4_kblocks(K, block), NULL, 0, q, scales, zp};
    g4_parallel_for((N + TILE - 1) / TILE, (double)TILE * K * 4, rtn_range, &j);
    return G4_OK;
}

static double mean_diag(const float *H, int K) {
    double m = 0;
    for (int k = 0; k < K; k++) m += H[(size_t)k * K + k] > 0 ? H[(size_t)k * K + k] : 0;
    return m / K;
}

int g4_q4_fit(const void *w, int w_dtype, int K, int N, int block, const float *H, uint8_t *q,
              uint16_t *scales, uint8_t *zp) {
    int rc = check_args("fit", w_dtype, K, N, block);
    if (rc) return rc;
    if (!H) return g4_fail(G4_EUSER, "fit: no X^T X given");
    double md = mean_diag(H, K);
    tile_job j = {w,       w_dtype, K, N, block, g4_q4_kblocks(K, block), H,
                  (float)(1e-2 * (md > 0 ? md : 1)), q, scales, zp};
    g4_parallel_for((N + TILE - 1) / TILE, (double)TILE * K * 4096, fit_range, &j);
    return G4_OK;
}

// --- GPTQ ---------------------------------------------------------------------------------------

// H = R R^T with R upper triangular (the "UL" Cholesky), written into H's upper triangle and
// diagonal; H's strict lower triangle is read as the input (and kept). Then R is inverted in
// place: U = R^-1, upper, and H^-1 = U^T U, so U is the upper Cholesky factor of H^-1 that
// GPTQ's updates use. Returns 0 when H is not positive definite. diag: H's diagonal (input).
//
// Both steps go by panels of CH_NB columns (rows), so that the O(K^3) work reads tiles that stay
// in cache and runs as a few coarse parallel steps per panel (issue 33: the element-by-element
// form took minutes at K = 6144, a column of the inverse read with a stride of K floats, and a
// thread start per column). Every entry is still one sum of its products in double, rounded to
// float once; only the order of those additions differs from the element-by-element form.
#define CH_NB 64  // panel width (columns of R, rows of U)
#define CH_IB 16  // rows of R per work item in a Cholesky panel step
#define CH_KC 256 // products per pass over a cached tile

// dot8 for two rows at once, acc[0..7] from a and acc[ldc..ldc + 7] from a + lda: twice the
// independent sums in flight, b read once. (b in double: converted once when packed, not in
// every product; the products of two floats are exact in double either way.)
static void dot8x2(double *acc, size_t ldc, const float *a, size_t lda, const double *b, size_t ldb,
                   int n) {
    double t0 = acc[0], t1 = acc[1], t2 = acc[2], t3 = acc[3], t4 = acc[4], t5 = acc[5],
           t6 = acc[6], t7 = acc[7];
    double *acc2 = acc + ldc;
    double u0 = acc2[0], u1 = acc2[1], u2 = acc2[2], u3 = acc2[3], u4 = acc2[4], u5 = acc2[5],
           u6 = acc2[6], u7 = acc2[7];
    const float *a2 = a + lda;
    for (int k = 0; k < n; k++) {
        const double x = a[k], y = a2[k];
        const double *bk = b + (size_t)k * ldb;
        const double b0 = bk[0], b1 = bk[1], b2 = bk[2], b3 = bk[3], b4 = bk[4], b5 = bk[5],
                     b6 = bk[6], b7 = bk[7];
        t0 += x * b0, t1 += x * b1, t2 += x * b2, t3 += x * b3;
        t4 += x * b4, t5 += x * b5, t6 += x * b6, t7 += x * b7;
        u0 += y * b0, u1 += y * b1, u2 += y * b2, u3 += y * b3;
        u4 += y * b4, u5 += y * b5, u6 += y * b6, u7 += y * b7;
    }
    acc[0] = t0, acc[1] = t1, acc[2] = t2, acc[3] = t3, acc[4] = t4, acc[5] = t5, acc[6] = t6;
    acc[7] = t7;
    acc2[0] = u0, acc2[1] = u1, acc2[2] = u2, acc2[3] = u3, acc2[4] = u4, acc2[5] = u5;
    acc2[6] = u6, acc2[7] = u7;
}

typedef struct {
    float *H;
    int K, j0, j1;  // Cholesky: the panel's columns [j0, j1); inverse: its rows
    const double *Pc; // Cholesky: [K - j1][CH_NB], Pc[k - j1][c] = R[j0 + c][k] (0 past j1 - j0)
    const float *P;   // inverse: [j1 - j0][K - j0], the panel's rows of R from column j0
    double *S;        // Cholesky: [j1][CH_NB], S[i][c] = sum_{k >= j1} R[i][k] R[j0 + c][k]
    int n_blocks;   // inverse: column blocks of CH_NB right of the panel
} chol_job;

// Cholesky step 1, rows i in [lo * CH_IB, hi * CH_IB) below j1: S[i] = R[i][j1..] . P.
static void chol_dots(void *ctx, int lo, int hi) {
    const chol_job *c = ctx;
    const int K = c->K, nk = K - c->j1, i0 = lo * CH_IB,
              i1 = hi * CH_IB < c->j1 ? hi * CH_IB : c->j1;
    for (int i = i0; i < i1; i++) memset(c->S + (size_t)i * CH_NB, 0, sizeof(double) * CH_NB);
    for (int k0 = 0; k0 < nk; k0 += CH_KC) {
        const int n = nk - k0 < CH_KC ? nk - k0 : CH_KC;
        int i = i0;
        for (; i + 2 <= i1; i += 2)
            for (int q = 0; q < CH_NB; q += 8)
                dot8x2(c->S + (size_t)i * CH_NB + q, CH_NB, c->H + (size_t)i * K + c->j1 + k0,
                       (size_t)K, c->Pc + (size_t)k0 * CH_NB + q, CH_NB, n);
        for (; i < i1; i++)
            for (int q = 0; q < CH_NB; q += 8)
                dot8(c->S + (size_t)i * CH_NB + q, c->H + (size_t)i * K + c->j1 + k0,
                     c->Pc + (size_t)k0 * CH_NB + q, CH_NB, n);
    }
}

// Row i's entries in the panel's columns, right to left, from S[i] and the panel's own rows
// (already R): R[i][j] = (H[j][i] - S[i][j - j0] - sum_{j < k < j1} R[i][k] R[j][k]) / R[j][j].
static void chol_row(const chol_job *c, int i) {
    const int K = c->K;
    float *H = c->H, *ri = H + (size_t)i * K;
    for (int j = c->j1 - 1; j >= c->j0; j--) {
        const float *rj = H + (size_t)j * K;
        double t = c->S[(size_t)i * CH_NB + (j - c->j0)];
        for (int k = j + 1; k < c->j1; k++) t += (double)ri[k] * rj[k];
        ri[j] = (float)((H[(size_t)j * K + i] - t) / (double)rj[j]);
    }
}

// Cholesky step 3, rows i in [lo * CH_IB, hi * CH_IB) above the panel.
static void chol_rows(void *ctx, int lo, int hi) {
    const chol_job *c = ctx;
    const int i1 = hi * CH_IB < c->j0 ? hi * CH_IB : c->j0;
    for (int i = lo * CH_IB; i < i1; i++) chol_row(c, i);
}

// Inverse, column block b of the panel's rows (b = 0: the panel's own columns, then blocks of
// CH_NB columns right of it): U[i][j] = -(sum_{i < k <= j} R[i][k] U[k][j]) / R[i][i], the rows
// below the panel already U, the panel's rows of R read from the packed copy P.
static void inv_block(const chol_job *c, int b, double *T, double *Ub) {
    const int K = c->K, i0 = c->j0, i1 = c->j1, nb = i1 - i0, ldp = K - i0;
    float *H = c->H;
    const float *P = c->P;
    if (b == 0) { // the panel's triangle, bottom up
        for (int i = i1 - 1; i >= i0; i--) {
            const float *pi = P + (size_t)(i - i0) * ldp; // pi[k - i0]: R[i][k]
            const double rii = pi[i - i0];
            for (int j = i + 1; j < i1; j++) {
                double s = 0;
                for (int k = i + 1; k <= j; k++) s += (double)pi[k - i0] * H[(size_t)k * K + j];
                H[(size_t)i * K + j] = (float)(-s / rii);
            }
            H[(size_t)i * K + i] = (float)(1.0 / rii);
        }
        return;
    }
    const int jb0 = i1 + (b - 1) * CH_NB, jb1 = jb0 + CH_NB < K ? jb0 + CH_NB : K, w = jb1 - jb0;
    // T[ii][j - jb0] = sum_{i1 <= k <= j} R[i0 + ii][k] U[k][j]: the rows below the panel.
    memset(T, 0, sizeof(double) * (size_t)nb * CH_NB);
    for (int k0 = i1; k0 < jb0; k0 += CH_KC) { // k < jb0 <= j: whole rows of the block
        const int n = jb0 - k0 < CH_KC ? jb0 - k0 : CH_KC;
        for (int k = 0; k < n; k++) // Ub[k][q] = U[k0 + k][jb0 + q], zero past w
            for (int q = 0; q < CH_NB; q++)
                Ub[(size_t)k * CH_NB + q] = q < w ? H[(size_t)(k0 + k) * K + jb0 + q] : 0.0;
        int ii = 0;
        for (; ii + 2 <= nb; ii += 2)
            for (int q = 0; q < CH_NB; q += 8)
                dot8x2(T + (size_t)ii * CH_NB + q, CH_NB, P + (size_t)ii * ldp + (k0 - i0),
                       (size_t)ldp, Ub + q, CH_NB, n);
        for (; ii < nb; ii++)
            for (int q = 0; q < CH_NB; q += 8)
                dot8(T + (size_t)ii * CH_NB + q, P + (size_t)ii * ldp + (k0 - i0), Ub + q, CH_NB, n);
    }
    for (int k = jb0; k < jb1; k++) { // the block's own triangle: k <= j
        const float *uk = H + (size_t)k * K;
        for (int ii = 0; ii < nb; ii++) {
            const double r = P[(size_t)ii * ldp + (k - i0)];
            double *t = T + (size_t)ii * CH_NB;
            for (int j = k; j < jb1; j++) t[j - jb0] += r * uk[j];
        }
    }
    // The panel's rows bottom up: add the rows of the panel below i (U by now), then write.
    for (int i = i1 - 1; i >= i0; i--) {
        const float *pi = P + (size_t)(i - i0) * ldp; // pi[k - i0]: R[i][k]
        double *t = T + (size_t)(i - i0) * CH_NB;     // t[j - jb0]
        for (int k = i + 1; k < i1; k++) {
            const double r = pi[k - i0];
            const float *uk = H + (size_t)k * K + jb0;
            for (int j = 0; j < w; j++) t[j] += r * uk[j];
        }
        const double rii = pi[i - i0];
        for (int j = 0; j < w; j++) H[(size_t)i * K + jb0 + j] = (float)(-t[j] / rii);
    }
}

// Items m in [lo, hi) of an inverse panel step. The blocks' work grows to the right, so item m
// takes block m / 2 from the left for even m and from the right for odd m: contiguous ranges of
// items then get even shares.
static void inv_blocks(void *ctx, int lo, int hi) {
    const chol_job *c = ctx;
    const int n = c->n_blocks + 1;
    double *T = g4_malloc(sizeof(double) * CH_NB * CH_NB);
    double *Ub = g4_malloc(sizeof(double) * CH_KC * CH_NB);
    for (int m = lo; m < hi; m++) inv_block(c, m % 2 == 0 ? m / 2 : n - 1 - m / 2, T, Ub);
    free(T), free(Ub);
}

static int ul_inverse(float *H, int K, const double *diag) {
    chol_job c = {H, K, 0, 0, NULL, NULL, NULL, 0};
    double *Pc = g4_malloc(sizeof(double) * (size_t)K * CH_NB);
    double *S = g4_malloc(sizeof(double) * (size_t)K * CH_NB);
    c.Pc = Pc, c.S = S;
    // Panels right to left: columns [j0, j1) from the finished columns right of them.
    for (int j1 = K; j1 > 0; j1 -= CH_NB) {
        const int j0 = j1 > CH_NB ? j1 - CH_NB : 0, nb = j1 - j0, nk = K - j1;
        c.j0 = j0, c.j1 = j1;
        for (int k = 0; k < nk; k++)
            for (int q = 0; q < CH_NB; q++)
                Pc[(size_t)k * CH_NB + q] = q < nb ? H[(size_t)(j0 + q) * K + j1 + k] : 0.0;
        g4_parallel_for((j1 + CH_IB - 1) / CH_IB, (double)CH_IB * CH_NB * (nk + 1), chol_dots, &c);
        for (int j = j1 - 1; j >= j0; j--) { // the panel's own triangle, column by column
            const float *rj = H + (size_t)j * K;
            double t = S[(size_t)j * CH_NB + (j - j0)];
            for (int k = j + 1; k < j1; k++) t += (double)rj[k] * rj[k];
            const double s = diag[j] - t;
            if (!(s > 0)) {
                free(Pc), free(S);
                return 0;
            }
            H[(size_t)j * K + j] = (float)sqrt(s);
            for (int i = j0; i < j; i++) {
                float *ri = H + (size_t)i * K;
                double u = S[(size_t)i * CH_NB + (j - j0)];
                for (int k = j + 1; k < j1; k++) u += (double)ri[k] * rj[k];
                ri[j] = (float)((H[(size_t)j * K + i] - u) / (double)rj[j]);
            }
        }
        g4_parallel_for((j0 + CH_IB - 1) / CH_IB, (double)CH_IB * CH_NB * CH_NB, chol_rows, &c);
    }
    free(Pc), free(S);
    // U = R^-1, panels of rows from the bottom (the rows below a panel already U).
    float *P = g4_malloc(sizeof(float) * (size_t)K * CH_NB);
    c.P = P, c.Pc = NULL, c.S = NULL;
    for (int i1 = K; i1 > 0; i1 -= CH_NB) {
        const int i0 = i1 > CH_NB ? i1 - CH_NB : 0, ldp = K - i0;
        c.j0 = i0, c.j1 = i1, c.n_blocks = (K - i1 + CH_NB - 1) / CH_NB;
        for (int ii = 0; ii < i1 - i0; ii++)
            memcpy(P + (size_t)ii * ldp, H + (size_t)(i0 + ii) * K + i0, sizeof(float) * ldp);
        g4_parallel_for(c.n_blocks + 1, (double)CH_NB * CH_NB * (K - i1 + CH_NB) / 2, inv_blocks,
                        &c);
    }
    free(P);
    return 1;
}

// Symmetric permutation in place: H'[i][j] = H[perm[i]][perm[j]] (both triangles).
static void permute_sym(float *H, int K, const int *perm) {
    int *at = g4_malloc(sizeof(int) * (size_t)K);  // at[orig] = current position
    int *who = g4_malloc(sizeof(int) * (size_t)K); // who[pos] = original index there
    for (int i = 0; i < K; i++) at[i] = who[i] = i;
    float *tmp = g4_malloc(sizeof(float) * (size_t)K);
    for (int i = 0; i < K; i++) {
        const int p = at[perm[i]];
        if (p == i) continue;
        // swap rows i and p, then columns i and p
        memcpy(tmp, H + (size_t)i * K, sizeof(float) * K);
        memcpy(H + (size_t)i * K, H + (size_t)p * K, sizeof(float) * K);
        memcpy(H + (size_t)p * K, tmp, sizeof(float) * K);
        for (int r = 0; r < K; r++) {
            const float t = H[(size_t)r * K + i];
            H[(size_t)r * K + i] = H[(size_t)r * K + p];
            H[(size_t)r * K + p] = t;
        }
        const int oi = who[i], op = who[p];
        who[i] = op, who[p] = oi, at[op] = i, at[oi] = p;
    }
    free(tmp), free(at), free(who);
}

typedef struct {
    const void *w;
    int dtype, K, N, B, kb;
    const float *U; // upper triangle: chol(H^-1) in permuted order
    const int *perm;
    const double *hd; // [kb * B] X^T X diagonal by original channel (padding 0)
    int minmax;       // 1: block parameters by min/max alone
    int act_order;
    const float *impp, *mup; // gptq_imx: kquant.h g4_imx_prepare's [kb * B] (mup may be NULL)
    int screen;              // gptq_imx: the best candidates re-judged by GPTQ's block error
    uint8_t *q;
    uint16_t *scales;
    uint8_t *zp;
} gptq_job;

#define GPTQ_BATCH  128 // rows (input channels) per lazy batch
// gptq_imx: candidates re-judged by the block's GPTQ error. Two tiny trained models (bench/
// FIDELITY.md "GPTQ with the imatrix search's blocks"): 6 / 12 / 24 / all of them -38.8% /
// -39.0% / -39.4% / -38.5% mean KLD vs k-quant (the mean of the two), the search's pick alone
// -35.1%: the screen pays, its size is noise past 6; 12 costs ~1/4 of the column work at K = 768.
#define GPTQ_SCREEN 12

// A thread's scratch for the block parameters.
typedef struct {
    float kq[4 * G4_KQUANT_MAX_BLOCK]; // g4_imx_block's
    g4_imx_cand cand[G4_IMX_MAX_CANDS];
    uint8_t codes[G4_KQUANT_MAX_BLOCK];
    double xs[G4_KQUANT_MAX_BLOCK];
} bp_scratch;

// The error GPTQ's sweep makes on the block whose first row is i (in visiting order), given its
// rows' current weights x and the parameters (s, z): row by row, the rounding error e_r (over
// U[r][r]) is added as e_r^2 and pushed onto the block's later rows through U, as gptq_range
// does (the updates in double; the rows after the block change no term). The sum of e_r^2 over all
// rows is ||X (w - wq)||^2 (GPTQ's loss), so this is the block's share given the rows before it.
static double sweep_error(const gptq_job *j, const float *x, int i, float s, int z, double *xs) {
    const int K = j->K, nr = K - i < j->B ? K - i : j->B;
    const float *U = j->U;
    for (int r = 0; r < nr; r++) xs[r] = x[r];
    double loss = 0;
    for (int r = 0; r < nr; r++) {
        const double c = clip15(rint((double)(float)xs[r] / s + z)); // a float, as GPTQ's W
        const double e = (xs[r] - (c - z) * s) / U[(size_t)(i + r) * K + i + r];
        loss += e * e;
        for (int r2 = r + 1; r2 < nr; r2++) xs[r2] -= U[(size_t)(i + r) * K + i + r2] * e;
    }
    return loss;
}

// gptq_imx's screen: the imatrix search's GPTQ_SCREEN candidates of least error (its own pick
// first), each re-judged by sweep_error; the least wins (the search's pick on a tie).
static void screen_params(const gptq_job *j, const float *x, int i, int b, float *s, int *z,
                          bp_scratch *t) {
    const int B = j->B;
    const int nc = g4_imx_candidates(x, B, j->impp + (size_t)b * B,
                                     j->mup ? j->mup + (size_t)b * B : NULL, 0, t->cand, t->kq);
    // top[0 .. nt): the least e first, ties in the search's order, one per (s, z) (a repeated
    // pair has the same e, so its first place holds it)
    g4_imx_cand top[GPTQ_SCREEN];
    int nt = 0;
    for (int c = 0; c < nc; c++) {
        const g4_imx_cand v = t->cand[c];
        if (!(v.e < INFINITY) || (nt == GPTQ_SCREEN && !(v.e < top[nt - 1].e))) continue;
        int dup = 0, at = nt;
        for (int q = 0; q < nt; q++) dup |= top[q].s == v.s && top[q].z == v.z;
        if (dup) continue;
        while (at > 0 && v.e < top[at - 1].e) at--;
        if (nt < GPTQ_SCREEN) nt++;
        for (int q = nt - 1; q > at; q--) top[q] = top[q - 1];
        top[at] = v;
    }
    double best = INFINITY;
    for (int q = 0; q < nt; q++) {
        const double e = sweep_error(j, x, i, top[q].s, top[q].z, t->xs);
        if (e < best) best = e, *s = top[q].s, *z = top[q].z;
    }
    if (nt == 0) { // nothing finite: the search's own fallback (k-quant's pick)
        double bias = 0;
        uint8_t zp;
        g4_imx_block(x, B, j->impp + (size_t)b * B, NULL, &bias, t->codes, s, &zp, t->kq);
        *z = zp;
    }
}

// The parameters of block b (rows i .. i + B - 1 in visiting order; x: their weights of one
// column, the current ones unless act-order).
static void block_params(const gptq_job *j, const float *x, int i, int b, float *s, int *z,
                         bp_scratch *t) {
    if (j->impp && j->screen && !j->act_order) {
        screen_params(j, x, i, b, s, z, t);
    } else if (j->impp) {
        double bias = 0; // GPTQ's updates already carry the earlier blocks' errors
        uint8_t zp;
        g4_imx_block(x, j->B, j->impp + (size_t)b * j->B, j->mup ? j->mup + (size_t)b * j->B : NULL,
                     &bias, t->codes, s, &zp, t->kq);
        *z = zp;
    } else if (j->minmax) {
        rtn_params(x, j->B, s, z);
    } else {
        grid_params(x, j->hd + (size_t)b * j->B, j->B, s, z);
    }
}

// w[0..15] -= u[i] * e[i * TILE + 0..15] for i = 0 .. n - 1 in turn (each product and difference
// rounded to float as it comes, as the element-by-element loop did), held in registers.
static void sub16(float *w, const float *u, const float *e, int n) {
    float t0 = w[0], t1 = w[1], t2 = w[2], t3 = w[3], t4 = w[4], t5 = w[5], t6 = w[6], t7 = w[7];
    float t8 = w[8], t9 = w[9], t10 = w[10], t11 = w[11], t12 = w[12], t13 = w[13], t14 = w[14],
          t15 = w[15];
    for (int i = 0; i < n; i++) {
        const float a = u[i], *v = e + (size_t)i * TILE;
        t0 -= a * v[0], t1 -= a * v[1], t2 -= a * v[2], t3 -= a * v[3];
        t4 -= a * v[4], t5 -= a * v[5], t6 -= a * v[6], t7 -= a * v[7];
        t8 -= a * v[8], t9 -= a * v[9], t10 -= a * v[10], t11 -= a * v[11];
        t12 -= a * v[12], t13 -= a * v[13], t14 -= a * v[14], t15 -= a * v[15];
    }
    w[0] = t0, w[1] = t1, w[2] = t2, w[3] = t3, w[4] = t4, w[5] = t5, w[6] = t6, w[7] = t7;
    w[8] = t8, w[9] = t9, w[10] = t10, w[11] = t11, w[12] = t12, w[13] = t13, w[14] = t14;
    w[15] = t15;
}

_Static_assert(TILE % 16 == 0, "gptq_range's updates go by 16 columns");

// The updates run over all TILE columns (W and E are zero past nt, so the extra columns stay
// zero and are never stored): loops of a fixed length, which the compiler vectorizes.
static void gptq_range(void *ctx, int lo, int hi) {
    const gptq_job *j = ctx;
    const int K = j->K, B = j->B, kb = j->kb, padded = kb * B;
    const float *U = j->U;
    float *W = g4_malloc(sizeof(float) * (size_t)K * TILE);       // [K][TILE], permuted rows
    float *E = g4_malloc(sizeof(float) * (size_t)GPTQ_BATCH * TILE); // scaled errors of a batch
    float *sc = g4_malloc(sizeof(float) * (size_t)kb * TILE);     // [kb][TILE]
    int *zz = g4_malloc(sizeof(int) * (size_t)kb * TILE);
    uint8_t *codes = g4_malloc((size_t)padded * TILE); // [TILE][padded], original order
    float *x = g4_malloc(sizeof(float) * (size_t)B);
    uint8_t *zps = g4_malloc((size_t)kb);
    float *scol = g4_malloc(sizeof(float) * (size_t)kb);
    float *ucol = g4_malloc(sizeof(float) * GPTQ_BATCH);
    bp_scratch *bp = g4_malloc(sizeof *bp);
    for (int tile = lo; tile < hi; tile++) {
        const int n0 = tile * TILE, nt = j->N - n0 < TILE ? j->N - n0 : TILE;
        for (int i = 0; i < K; i++)
            for (int t = 0; t < TILE; t++)
                W[(size_t)i * TILE + t] =
                    t < nt ? load_w(j->w, j->dtype, (uint64_t)j->perm[i] * j->N + n0 + t) : 0.0f;
        // Block parameters from the original weights (act-order: the blocks are visited in
        // pieces, so they are fixed before any update).
        if (j->act_order)
            for (int t = 0; t < nt; t++)
                for (int b = 0; b < kb; b++) {
                    for (int r = 0; r < B; r++) {
                        const int k = b * B + r;
                        x[r] = k < K ? load_w(j->w, j->dtype, (uint64_t)k * j->N + n0 + t) : 0.0f;
                    }
                    block_params(j, x, b * B, b, &sc[b * TILE + t], &zz[b * TILE + t], bp);
                }
        for (int i0 = 0; i0 < K; i0 += GPTQ_BATCH) {
            const int i1 = i0 + GPTQ_BATCH < K ? i0 + GPTQ_BATCH : K;
            for (int i = i0; i < i1; i++) {
                const int k = j->perm[i], b = k / B;
                if (!j->act_order && i % B == 0) // block start: its parameters from W as updated
                    for (int t = 0; t < nt; t++) {
                        for (int r = 0; r < B; r++)
                            x[r] = i + r < K ? W[(size_t)(i + r) * TILE + t] : 0.0f;
                        block_params(j, x, i, b, &sc[b * TILE + t], &zz[b * TILE + t], bp);
                    }
                const double uii = U[(size_t)i * K + i];
                float *wi = W + (size_t)i * TILE, *ei = E + (size_t)(i - i0) * TILE;
                for (int t = 0; t < nt; t++) {
                    const float s = sc[b * TILE + t];
                    const int z = zz[b * TILE + t];
                    const uint8_t c = clip15(rint((double)wi[t] / s + z));
                    codes[(size_t)t * padded + k] = c;
                    ei[t] = (float)((wi[t] - ((double)c - z) * s) / uii);
                }
                for (int t = nt; t < TILE; t++) ei[t] = 0;
                for (int r = i + 1; r < i1; r++) {
                    const float u = U[(size_t)i * K + r];
                    float *wr = W + (size_t)r * TILE;
                    for (int t = 0; t < TILE; t++) wr[t] -= u * ei[t];
                }
            }
            for (int r = i1; r < K; r++) { // the batch's errors onto the rows after it
                for (int i = i0; i < i1; i++) ucol[i - i0] = U[(size_t)i * K + r];
                for (int t = 0; t < TILE; t += 16)
                    sub16(W + (size_t)r * TILE + t, ucol, E + t, i1 - i0);
            }
        }
        for (int t = 0; t < nt; t++) {
            uint8_t *ct = codes + (size_t)t * padded;
            for (int b = 0; b < kb; b++) {
                scol[b] = sc[b * TILE + t];
                zps[b] = (uint8_t)zz[b * TILE + t];
            }
            for (int k = K; k < padded; k++) ct[k] = zps[k / B]; // zero padding: code = zp
            store_col(n0 + t, kb, B, ct, scol, zps, j->q, j->scales, j->zp);
        }
    }
    free(W), free(E), free(sc), free(zz), free(codes), free(x), free(zps), free(scol), free(ucol);
    free(bp);
}

typedef struct {
    double key;
    int k;
} keyed;

static int by_key_desc(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

int g4_q4_gptq(const void *w, int w_dtype, int K, int N, int block, float *H,
               const g4_gptq_opts *o, uint8_t *q, uint16_t *scales, uint8_t *zp) {
    int rc = check_args("gptq", w_dtype, K, N, block);
    if (rc) return rc;
    if (!H) return g4_fail(G4_EUSER, "gptq: no X^T X given");
    const float damp0 = o && o->damp > 0 ? o->damp : 0.01f;
    if (!(damp0 < 1e3f)) return g4_fail(G4_EUSER, "gptq: damping %g, expected (0, 1000)", damp0);
    const int act = o && o->act_order;
    float *imp0 = NULL; // imp_diag: H's diagonal as given (before the dead channels' 1)
    if (o && !o->imp && o->imp_diag) {
        imp0 = g4_malloc(sizeof(float) * (size_t)K);
        for (int k = 0; k < K; k++) imp0[k] = H[(size_t)k * K + k];
    }
    int *perm = g4_malloc(sizeof(int) * (size_t)K);
    const int kb = g4_q4_kblocks(K, block);
    double *hd = g4_calloc((size_t)kb * block, sizeof(double));
    for (int k = 0; k < K; k++) {
        if (!(H[(size_t)k * K + k] > 0)) H[(size_t)k * K + k] = 1; // a dead channel
        hd[k] = H[(size_t)k * K + k];
        perm[k] = k;
    }
    if (act) {
        keyed *kd = g4_malloc(sizeof(keyed) * (size_t)K);
        for (int k = 0; k < K; k++) kd[k] = (keyed){H[(size_t)k * K + k], k};
        qsort(kd, (size_t)K, sizeof *kd, by_key_desc);
        for (int k = 0; k < K; k++) perm[k] = kd[k].k;
        free(kd);
        permute_sym(H, K, perm);
    }
    // Damping, raised tenfold while H is not positive definite (the upper triangle is rebuilt
    // from the lower one, which the factorisation leaves as it found it).
    double *diag = g4_malloc(sizeof(double) * (size_t)K);
    const double md = mean_diag(H, K);
    double damp = damp0;
    int ok = 0;
    for (int attempt = 0; attempt < 5 && !ok; attempt++, damp *= 10) {
        if (attempt)
            for (int i = 0; i < K; i++)
                for (int jj = i + 1; jj < K; jj++) H[(size_t)i * K + jj] = H[(size_t)jj * K + i];
        for (int k = 0; k < K; k++) {
            const double hk = attempt ? diag[k] - (damp / 10) * md : H[(size_t)k * K + k];
            diag[k] = hk + damp * md;
        }
        ok = ul_inverse(H, K, diag);
    }
    free(diag);
    if (!ok) {
        free(perm), free(hd), free(imp0);
        return g4_fail(G4_EUSER, "gptq: X^T X [%d, %d] is not positive definite after damping "
                                 "%g x its mean diagonal",
                       K, K, damp / 10);
    }
    float *impp = NULL, *mup = NULL;
    if (o && o->imp) g4_imx_prepare(o->imp, o->mean, K, block, &impp, &mup);
    else if (o && o->imp_diag) g4_imx_prepare(imp0, NULL, K, block, &impp, &mup);
    free(imp0);
    gptq_job j = {w,   w_dtype,        K, N,      block, kb, H, perm, hd, o && o->minmax, act, impp,
                  mup, o && o->screen, q, scales, zp};
    g4_parallel_for((N + TILE - 1) / TILE, (double)TILE * K * K, gptq_range, &j);
    free(perm), free(hd), free(impp), free(mup);
    return G4_OK;
}

// --- the layer-output error, GPTQ's damping by held-out rows (G4_GPTQ_DAMP=cv) ------------------

typedef struct {
    const void *w;
    int dtype, N;
    g4_linear q4;
} err_src;

// Vector n of the error: column n's dW, dequant(q) - W (the difference of two floats, exact in
// double).
static void err_col(void *ctx, int n, double *x, float *col) {
    const err_src *s = ctx;
    g4_q4_dequant_col(&s->q4, n, col);
    for (int k = 0; k < s->q4.in; k++)
        x[k] = (double)col[k] - load_w(s->w, s->dtype, (uint64_t)k * s->N + n);
}

double g4_q4_out_err(const void *w, int w_dtype, int K, int N, int block, const uint8_t *q,
                     const uint16_t *scales, const uint8_t *zp, const float *H) {
    err_src s = {w, w_dtype, N, {0}};
    s.q4 = (g4_linear){.kind = G4_W_Q4,
                       .in = K,
                       .out = N,
                       .block = block,
                       .w = q,
                       .scales = scales,
                       .zp = zp};
    double *e = g4_malloc(sizeof(double) * (size_t)N);
    if (g4_quad_forms(H, K, N, err_col, &s, e)) {
        free(e);
        return NAN; // K < 1 or H NULL (the message is g4_error()'s)
    }
    double sum = 0;
    for (int n = 0; n < N; n++) sum += e[n]; // in column order: any thread count, the same sum
    free(e);
    return sum;
}

const float g4_gptq_cv_grid[G4_GPTQ_CV_N] = {0.01f, 0.03f, 0.1f, 0.3f, 1.0f};

int g4_gptq_cv(const void *w, int w_dtype, int K, int N, int block, const float *Ha,
               const float *Hb, const g4_gptq_opts *o, int *pick, double *err) {
    int rc = check_args("gptq cv", w_dtype, K, N, block);
    if (rc) return rc;
    if (!Ha || !Hb) return g4_fail(G4_EUSER, "gptq cv: no X^T X of a fold given");
    const g4_q4_shape sh = g4_q4_shape_of(K, N, block);
    float *T = g4_malloc(sizeof(float) * (size_t)K * K);
    uint8_t *q = g4_malloc(sh.q_bytes), *zp = g4_malloc(sh.zp_bytes);
    uint16_t *sc = g4_malloc(sizeof(uint16_t) * sh.n_scales);
    g4_gptq_opts go = o ? *o : (g4_gptq_opts){0};
    double best = INFINITY;
    *pick = 0;
    for (int d = 0; d < G4_GPTQ_CV_N && !rc; d++) {
        go.damp = g4_gptq_cv_grid[d];
        double e = 0;
        for (int f = 0; f < 2 && !rc; f++) { // fit on one fold, score on the other
            const float *Hfit = f ? Hb : Ha, *Hout = f ? Ha : Hb;
            memcpy(T, Hfit, sizeof(float) * (size_t)K * K);
            if (!(rc = g4_q4_gptq(w, w_dtype, K, N, block, T, &go, q, sc, zp)))
                e += g4_q4_out_err(w, w_dtype, K, N, block, q, sc, zp, Hout);
        }
        if (err) err[d] = e;
        if (!rc && e < best) best = e, *pick = d;
    }
    free(T), free(q), free(zp), free(sc);
    return rc;
}

// --- the covariance's leading directions (imatrix, G4_IMATRIX_RANK) ----------------------------

// Subspace iterations: the captured subspace's error shrinks as (lambda_r+1 / lambda_r)^iters,
// each costs r K^2 multiply-adds. 40 are not fully converged where the spectrum is flat, but
// 120 moved the tiny models' mean KLD vs k-quant by 0.5 / 0.2 points only (1024 tokens, r = 32:
// -37.0 -> -36.5%, -31.8 -> -31.6%), within the run-to-run spread of the search.
#define COV_ITERS 40

typedef struct {
    const float *H;
    double inv_rows;
    const float *mean;
    const double *Q, *mq; // Q [K][r]; mq[r] = mean . Q_j
    double *Z;            // [K][r] = C Q, or W C W Q with ws
    int K, r;
    const double *ws; // [K] the whitening W = diag(ws) (g4_cov_dirs_shrunk), or NULL (none)
    double *WQ;       // [K][r] scratch for W Q (with ws)
} cov_job;

// z0[0..7] / z1[0..7] += sum_{l < n} h0[l] / h1[l] times Q [n][r]'s columns 0..7 (Q offset to
// the first), each sum adding its terms in the order l = 0, 1, .. after what z holds (the same
// bits as the one-row loop, which added the same terms in the same order), in named sums held
// in registers: each Q load serves both rows (issue 33: one row at a time streamed all of Q,
// K x r doubles, from L2 / L3 per row of H).
static void cov_dot_2x8(const float *h0, const float *h1, const double *Q, int n, int r,
                        double *z0, double *z1) {
    double a0 = z0[0], a1 = z0[1], a2 = z0[2], a3 = z0[3], a4 = z0[4], a5 = z0[5], a6 = z0[6],
           a7 = z0[7];
    double b0 = z1[0], b1 = z1[1], b2 = z1[2], b3 = z1[3], b4 = z1[4], b5 = z1[5], b6 = z1[6],
           b7 = z1[7];
    for (int l = 0; l < n; l++) {
        const double x = h0[l], y = h1[l], *q = Q + (size_t)l * r;
        a0 += x * q[0], a1 += x * q[1], a2 += x * q[2], a3 += x * q[3];
        a4 += x * q[4], a5 += x * q[5], a6 += x * q[6], a7 += x * q[7];
        b0 += y * q[0], b1 += y * q[1], b2 += y * q[2], b3 += y * q[3];
        b4 += y * q[4], b5 += y * q[5], b6 += y * q[6], b7 += y * q[7];
    }
    z0[0] = a0, z0[1] = a1, z0[2] = a2, z0[3] = a3, z0[4] = a4, z0[5] = a5, z0[6] = a6, z0[7] = a7;
    z1[0] = b0, z1[1] = b1, z1[2] = b2, z1[3] = b3, z1[4] = b4, z1[5] = b5, z1[6] = b6, z1[7] = b7;
}

// cov_range's blocking: COV_BAND rows of H go through Q a tile of COV_LT of its rows at a time
// (128 KB at r = 32: stays in L2 while the band's rows use it; all of Q is 3 MB at K = 12288),
// the band's sums kept between tiles (doubles stored and reloaded: the same bits).
#define COV_BAND 64
#define COV_LT   512

// Rows [lo, hi) of Z: bands of COV_BAND rows, two rows at a time (an odd last row paired with
// itself, its copy summed into a spare row z[COV_BAND] and dropped).
static void cov_range(void *ctx, int lo, int hi) {
    const cov_job *j = ctx;
    const int K = j->K, r = j->r, r8 = r - r % 8;
    const double *Q = j->ws ? j->WQ : j->Q;
    const size_t zbytes = sizeof(double) * (COV_BAND + 1) * G4_IMX_MAX_DIRS;
    double(*z)[G4_IMX_MAX_DIRS] = g4_malloc(zbytes);
    for (int k0 = lo; k0 < hi; k0 += COV_BAND) {
        const int k1 = k0 + COV_BAND < hi ? k0 + COV_BAND : hi;
        memset(z, 0, zbytes);
        for (int l0 = 0; l0 < K; l0 += COV_LT) {
            const int n = K - l0 < COV_LT ? K - l0 : COV_LT;
            const double *Qt = Q + (size_t)l0 * r;
            for (int k = k0; k < k1; k += 2) {
                const int rows = k + 1 < k1 ? 2 : 1;
                const float *h[2] = {j->H + (size_t)k * K + l0,
                                     j->H + (size_t)(k + rows - 1) * K + l0};
                double *zk[2] = {z[k - k0], rows == 2 ? z[k + 1 - k0] : z[COV_BAND]};
                for (int c0 = 0; c0 < r8; c0 += 8)
                    cov_dot_2x8(h[0], h[1], Qt + c0, n, r, zk[0] + c0, zk[1] + c0);
                for (int i = 0; i < rows; i++)
                    for (int c = r8; c < r; c++) { // the columns past the last whole 8
                        double t = zk[i][c];
                        for (int l = 0; l < n; l++) t += (double)h[i][l] * Qt[(size_t)l * r + c];
                        zk[i][c] = t;
                    }
            }
        }
        for (int k = k0; k < k1; k++)
            for (int c = 0; c < r; c++) {
                const double v = z[k - k0][c] * j->inv_rows - (double)j->mean[k] * j->mq[c];
                j->Z[(size_t)k * r + c] = j->ws ? v * j->ws[k] : v;
            }
    }
    free(z);
}

// Z = C Q, or W C W Q with ws (cov_job's fields).
static void cov_mul(cov_job *j, double *mq) {
    const double *Q = j->Q;
    if (j->ws) {
        for (int k = 0; k < j->K; k++)
            for (int c = 0; c < j->r; c++)
                j->WQ[(size_t)k * j->r + c] = j->ws[k] * j->Q[(size_t)k * j->r + c];
        Q = j->WQ;
    }
    for (int c = 0; c < j->r; c++) {
        double t = 0;
        for (int k = 0; k < j->K; k++) t += (double)j->mean[k] * Q[(size_t)k * j->r + c];
        mq[c] = t;
    }
    g4_parallel_for(j->K, (double)j->K * j->r, cov_range, j);
}

// Q [K][r] = Z's columns orthonormalised (modified Gram-Schmidt, twice); a column with nothing
// left beyond the earlier ones (1e-10 of its norm) becomes zero.
static void cov_orth(const double *Z, double *Q, int K, int r) {
    memcpy(Q, Z, sizeof(double) * (size_t)K * r);
    for (int c = 0; c < r; c++) {
        double n0 = 0;
        for (int k = 0; k < K; k++) n0 += Q[(size_t)k * r + c] * Q[(size_t)k * r + c];
        for (int pass = 0; pass < 2; pass++)
            for (int p = 0; p < c; p++) {
                double d = 0;
                for (int k = 0; k < K; k++) d += Q[(size_t)k * r + p] * Q[(size_t)k * r + c];
                for (int k = 0; k < K; k++) Q[(size_t)k * r + c] -= d * Q[(size_t)k * r + p];
            }
        double n = 0;
        for (int k = 0; k < K; k++) n += Q[(size_t)k * r + c] * Q[(size_t)k * r + c];
        const double f = n > 1e-20 * n0 && n > 0 ? 1 / sqrt(n) : 0;
        for (int k = 0; k < K; k++) Q[(size_t)k * r + c] *= f;
    }
}

// Q [K][r]: the leading r-dimensional invariant subspace of j's matrix (C, or W C W), by
// COV_ITERS subspace iterations from a fixed start; on return Z = (that matrix) Q.
static void cov_subspace(cov_job *j, double *Q, double *Z, double *mq) {
    const int K = j->K, r = j->r;
    uint64_t st = 0x9E3779B97F4A7C15ull; // a fixed start: xorshift64 in [-1, 1)
    for (size_t i = 0; i < (size_t)K * r; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        Z[i] = (double)(st >> 11) / 4503599627370496.0 - 1;
    }
    cov_orth(Z, Q, K, r);
    for (int it = 0; it < COV_ITERS; it++) {
        cov_mul(j, mq);
        cov_orth(Z, Q, K, r);
    }
    cov_mul(j, mq);
}

// T = Q^T Z [r, r] symmetrised (Z = M Q: the Rayleigh quotient of M on Q's columns).
static void cov_rayleigh(const double *Q, const double *Z, int K, int r,
                         double T[G4_IMX_MAX_DIRS][G4_IMX_MAX_DIRS]) {
    for (int a = 0; a < r; a++)
        for (int b = 0; b < r; b++) {
            double t = 0;
            for (int k = 0; k < K; k++) t += Q[(size_t)k * r + a] * Z[(size_t)k * r + b];
            T[a][b] = t;
        }
    for (int a = 0; a < r; a++)
        for (int b = 0; b < a; b++) T[a][b] = T[b][a] = 0.5 * (T[a][b] + T[b][a]);
}

static int cov_args(int K, int r, double rows) {
    if (K <= 0 || r < 1 || r >= G4_IMX_MAX_DIRS || !(rows > 0))
        return g4_fail(G4_EUSER,
                       "cov_dirs: K %d, r %d, rows %g: expected K > 0, r in 1..%d, rows > 0", K, r,
                       rows, G4_IMX_MAX_DIRS - 1);
    return G4_OK;
}

int g4_cov_dirs(const float *H, double rows, const float *mean, int K, int r, float *V) {
    int rc;
    if ((rc = cov_args(K, r, rows))) return rc;
    double *Q = g4_malloc(sizeof(double) * (size_t)K * r),
           *Z = g4_malloc(sizeof(double) * (size_t)K * r);
    double mq[G4_IMX_MAX_DIRS];
    cov_job j = {H, 1 / rows, mean, Q, mq, Z, K, r, NULL, NULL};
    cov_subspace(&j, Q, Z, mq);
    // T = Q^T C Q [r, r] (symmetrised), T = L L^T, V = (Q L)^T
    double T[G4_IMX_MAX_DIRS][G4_IMX_MAX_DIRS] = {{0}}, L[G4_IMX_MAX_DIRS][G4_IMX_MAX_DIRS] = {{0}};
    cov_rayleigh(Q, Z, K, r, T);
    double tmax = 0;
    for (int a = 0; a < r; a++)
        if (T[a][a] > tmax) tmax = T[a][a];
    for (int c = 0; c < r; c++) { // Cholesky; a pivot with nothing left: a zero column
        double p = T[c][c];
        for (int k = 0; k < c; k++) p -= L[c][k] * L[c][k];
        if (!(p > 1e-12 * tmax)) continue;
        L[c][c] = sqrt(p);
        for (int a = c + 1; a < r; a++) {
            double t = T[a][c];
            for (int k = 0; k < c; k++) t -= L[a][k] * L[c][k];
            L[a][c] = t / L[c][c];
        }
    }
    for (int c = 0; c < r; c++)
        for (int k = 0; k < K; k++) {
            double v = 0;
            for (int a = c; a < r; a++) v += Q[(size_t)k * r + a] * L[a][c];
            V[(size_t)c * K + k] = (float)v;
        }
    free(Q), free(Z);
    return G4_OK;
}

// Eigen-decomposition of the symmetric T [n, n] by cyclic Jacobi rotations: on return T's
// diagonal holds the eigenvalues and E's columns the eigenvectors (E [n][n], row-major).
static void sym_eigen(double T[G4_IMX_MAX_DIRS][G4_IMX_MAX_DIRS], int n,
                      double E[G4_IMX_MAX_DIRS][G4_IMX_MAX_DIRS]) {
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) E[a][b] = a == b;
    for (int sweep = 0; sweep < 60; sweep++) {
        double off = 0, all = 0;
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++) {
                if (a == b)
                    all += T[a][b] * T[a][b];
                else
                    off += T[a][b] * T[a][b];
            }
        if (off <= 1e-30 * (all + off)) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                if (T[p][q] == 0) continue;
                const double th = (T[q][q] - T[p][p]) / (2 * T[p][q]);
                const double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
                const double c = 1 / sqrt(t * t + 1), sn = t * c;
                for (int k = 0; k < n; k++) { // T = J^T T J, columns then rows
                    const double a = T[k][p], b = T[k][q];
                    T[k][p] = c * a - sn * b, T[k][q] = sn * a + c * b;
                }
                for (int k = 0; k < n; k++) {
                    const double a = T[p][k], b = T[q][k];
                    T[p][k] = c * a - sn * b, T[q][k] = sn * a + c * b;
                }
                for (int k = 0; k < n; k++) {
                    const double a = E[k][p], b = E[k][q];
                    E[k][p] = c * a - sn * b, E[k][q] = sn * a + c * b;
                }
            }
    }
}

int g4_cov_dirs_shrunk(const float *H, double rows, const float *mean, int K, int r, float *V,
                       int *kept) {
    int rc;
    *kept = 0;
    if ((rc = cov_args(K, r, rows))) return rc;
    // W = diag(C)^-1/2: the correlation matrix W C W, whose noise floor is 1 whatever the
    // channels' scales (a dead channel: weight 0, out of every direction)
    double *ws = g4_malloc(sizeof(double) * (size_t)K), *sd = g4_malloc(sizeof(double) * (size_t)K);
    double dmax = 0;
    for (int k = 0; k < K; k++) {
        sd[k] = (double)H[(size_t)k * K + k] / rows - (double)mean[k] * mean[k];
        if (sd[k] > dmax) dmax = sd[k];
    }
    for (int k = 0; k < K; k++) {
        const int live = sd[k] > 1e-12 * dmax && dmax > 0;
        sd[k] = live ? sqrt(sd[k]) : 0, ws[k] = live ? 1 / sd[k] : 0;
    }
    double *Q = g4_malloc(sizeof(double) * (size_t)K * r),
           *Z = g4_malloc(sizeof(double) * (size_t)K * r),
           *WQ = g4_malloc(sizeof(double) * (size_t)K * r);
    double mq[G4_IMX_MAX_DIRS];
    cov_job j = {H, 1 / rows, mean, Q, mq, Z, K, r, ws, WQ};
    cov_subspace(&j, Q, Z, mq);
    double T[G4_IMX_MAX_DIRS][G4_IMX_MAX_DIRS], E[G4_IMX_MAX_DIRS][G4_IMX_MAX_DIRS];
    cov_rayleigh(Q, Z, K, r, T);
    sym_eigen(T, r, E);
    // largest first
    int ord[G4_IMX_MAX_DIRS];
    for (int a = 0; a < r; a++) ord[a] = a;
    for (int a = 1; a < r; a++)
        for (int b = a; b > 0 && T[ord[b]][ord[b]] > T[ord[b - 1]][ord[b - 1]]; b--) {
            const int t = ord[b];
            ord[b] = ord[b - 1], ord[b - 1] = t;
        }
    // The spiked model: a population eigenvalue l > 1 + sqrt(g) of the correlation matrix (g =
    // K / rows) shows in the sample as lam = l + g l / (l - 1), beyond the noise's edge
    // (1 + sqrt(g))^2, with its eigenvector's squared overlap with the true one
    // c2 = (1 - g / (l - 1)^2) / (1 + g / (l - 1)). A sample eigenvalue inside the edge is noise:
    // dropped. A kept one gives the direction of weight (l - 1) c2, the spike's part over the
    // noise floor that its eigenvector carries (what it does not carry stays on the diagonal).
    const double g = (double)K / rows, edge = (1 + sqrt(g)) * (1 + sqrt(g));
    for (int o = 0; o < r; o++) {
        const int a = ord[o];
        const double lam = T[a][a];
        if (!(lam > edge)) break;
        const double b = lam + 1 - g, l = 0.5 * (b + sqrt(fmax(b * b - 4 * lam, 0)));
        double c2 = (1 - g / ((l - 1) * (l - 1))) / (1 + g / (l - 1));
        c2 = c2 < 0 ? 0 : c2 > 1 ? 1 : c2;
        const double f = sqrt((l - 1) * c2);
        if (!(f > 0)) break;
        float *v = V + (size_t)*kept * K;
        for (int k = 0; k < K; k++) {
            double u = 0;
            for (int c = 0; c < r; c++) u += Q[(size_t)k * r + c] * E[c][a];
            v[k] = (float)(f * sd[k] * u);
        }
        (*kept)++;
    }
    free(Q), free(Z), free(WQ), free(ws), free(sd);
    return G4_OK;
}
