// methods.c: round-to-nearest, GPTQ and the layer-output fit (see methods.h).
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

static const char *const NAMES[] = {"kquant", "rtn", "imatrix", "gptq", "fit"};

int g4_qmethod_parse(const char *name, g4_qmethod *out) {
    for (int i = 0; i < (int)(sizeof NAMES / sizeof NAMES[0]); i++)
        if (name && !strcmp(name, NAMES[i])) {
            *out = (g4_qmethod)i;
            return G4_OK;
        }
    return g4_fail(G4_EUSER, "quantize method '%s': expected kquant, rtn, imatrix, gptq or fit",
                   name ? name : "(null)");
}

const char *g4_qmethod_name(g4_qmethod m) {
    return (unsigned)m < sizeof NAMES / sizeof NAMES[0] ? NAMES[m] : "?";
}

int g4_qmethod_needs_calib(g4_qmethod m) {
    return m == G4_QM_IMATRIX || m == G4_QM_GPTQ || m == G4_QM_FIT;
}

int g4_qmethod_needs_hessian(g4_qmethod m) {
    return m == G4_QM_GPTQ || m == G4_QM_FIT;
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

// fit, the whole column: the blocks' scales and zero points stay, the codes move by +-1 where
// that lowers the full d^T H d (the cross-block terms the per-block fit leaves out), two sweeps.
static void refine_col(const tile_job *j, const float *x, uint8_t *codes, const float *sc,
                       const uint8_t *zps, double *d, double *g) {
    const int K = j->K, B = j->B;
    const float *H = j->H;
    for (int k = 0; k < K; k++) d[k] = ((double)codes[k] - zps[k / B]) * sc[k / B] - x[k];
    for (int a = 0; a < K; a++) {
        double r = j->ridge * d[a];
        const float *ha = H + (size_t)a * K;
        for (int b = 0; b < K; b++) r += (double)ha[b] * d[b];
        g[a] = r;
    }
    for (int sweep = 0; sweep < 2; sweep++)
        for (int k = 0; k < K; k++) {
            const double hkk = (double)H[(size_t)k * K + k] + j->ridge;
            for (int dir = -1; dir <= 1; dir += 2) {
                const int c2 = codes[k] + dir;
                if (c2 < 0 || c2 > 15) continue;
                const double delta = (double)dir * sc[k / B];
                if (!(2 * delta * g[k] + delta * delta * hkk < 0)) continue;
                codes[k] = (uint8_t)c2;
                d[k] += delta;
                const float *hk = H + (size_t)k * K; // row k = column k (symmetric)
                for (int a = 0; a < K; a++) g[a] += (double)hk[a] * delta;
                g[k] += j->ridge * delta;
                break;
            }
        }
}

static void tile_range(void *ctx, int lo, int hi, int fit) {
    const tile_job *j = ctx;
    const int B = j->B, kb = j->kb, padded = kb * B;
    float *col = g4_malloc(sizeof(float) * (size_t)padded);
    uint8_t *codes = g4_malloc((size_t)padded), *zps = g4_malloc((size_t)kb), tc[G4_KQUANT_MAX_BLOCK];
    float *sc = g4_malloc(sizeof(float) * (size_t)kb);
    double *hb = fit ? g4_malloc(sizeof(double) * (size_t)B * B) : NULL;
    double *d = g4_malloc(sizeof(double) * 2 * (size_t)B);
    double *dk = fit ? g4_malloc(sizeof(double) * (size_t)j->K) : NULL;
    double *gk = fit ? g4_malloc(sizeof(double) * (size_t)j->K) : NULL;
    for (int tile = lo; tile < hi; tile++) {
        const int n0 = tile * TILE, n1 = n0 + TILE < j->N ? n0 + TILE : j->N;
        for (int n = n0; n < n1; n++) {
            for (int k = 0; k < padded; k++)
                col[k] = k < j->K ? load_w(j->w, j->dtype, (uint64_t)k * j->N + n) : 0.0f;
            for (int b = 0; b < kb; b++) {
                const float *x = col + (size_t)b * B;
                uint8_t *c = codes + (size_t)b * B;
                if (!fit) {
                    g4_rtn_block(x, B, c, &sc[b], &zps[b]);
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
                fit_block(x, B, hb, c, &sc[b], &zps[b], d, tc);
            }
            if (fit) refine_col(j, col, codes, sc, zps, dk, gk);
            store_col(n, kb, B, codes, sc, zps, j->q, j->scales, j->zp);
        }
    }
    free(col), free(codes), free(zps), free(sc), free(hb), free(d), free(dk), free(gk);
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
typedef struct {
    float *H;
    int K, j;
    double *row; // inverse: the row being built
} chol_job;

static void ul_range(void *ctx, int lo, int hi) { // rows i in [lo, hi) of column j (i < j)
    const chol_job *c = ctx;
    const int K = c->K, j = c->j;
    float *H = c->H;
    const float *rj = H + (size_t)j * K;
    const double rjj = rj[j];
    for (int i = lo; i < hi; i++) {
        const float *ri = H + (size_t)i * K;
        double s = H[(size_t)j * K + i]; // H[i][j] from the lower triangle
        for (int k = j + 1; k < K; k++) s -= (double)ri[k] * rj[k];
        H[(size_t)i * K + j] = (float)(s / rjj);
    }
}

static void inv_range(void *ctx, int lo, int hi) { // entries j in (i, K) of row i of U
    const chol_job *c = ctx;
    const int K = c->K, i = c->j;
    const float *H = c->H;
    const double rii = H[(size_t)i * K + i]; // still R's (row i is written after)
    for (int jj = lo; jj < hi; jj++) {
        const int j = i + 1 + jj;
        double s = 0;
        for (int k = i + 1; k <= j; k++) s += (double)H[(size_t)i * K + k] * H[(size_t)k * K + j];
        c->row[j] = -s / rii;
    }
}

static int ul_inverse(float *H, int K, const double *diag) {
    chol_job c = {H, K, 0, NULL};
    for (int j = K - 1; j >= 0; j--) {
        const float *rj = H + (size_t)j * K;
        double s = diag[j];
        for (int k = j + 1; k < K; k++) s -= (double)rj[k] * rj[k];
        if (!(s > 0)) return 0;
        H[(size_t)j * K + j] = (float)sqrt(s);
        c.j = j;
        g4_parallel_for(j, K - j, ul_range, &c);
    }
    // U = R^-1, row i from the bottom: U[i][i] = 1 / R[i][i],
    // U[i][j] = -(sum_{k=i+1..j} R[i][k] U[k][j]) / R[i][i] (rows below i already hold U).
    c.row = g4_malloc(sizeof(double) * (size_t)K);
    for (int i = K - 1; i >= 0; i--) {
        c.j = i;
        g4_parallel_for(K - 1 - i, (K - i) / 2 + 1, inv_range, &c);
        for (int j = i + 1; j < K; j++) H[(size_t)i * K + j] = (float)c.row[j];
        H[(size_t)i * K + i] = (float)(1.0 / H[(size_t)i * K + i]);
    }
    free(c.row);
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
    uint8_t *q;
    uint16_t *scales;
    uint8_t *zp;
} gptq_job;

#define GPTQ_BATCH 128 // rows (input channels) per lazy batch

static void block_params(const gptq_job *j, const float *x, int b, float *s, int *z) {
    if (j->minmax)
        rtn_params(x, j->B, s, z);
    else
        grid_params(x, j->hd + (size_t)b * j->B, j->B, s, z);
}

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
    for (int tile = lo; tile < hi; tile++) {
        const int n0 = tile * TILE, nt = j->N - n0 < TILE ? j->N - n0 : TILE;
        for (int i = 0; i < K; i++)
            for (int t = 0; t < nt; t++)
                W[(size_t)i * TILE + t] = load_w(j->w, j->dtype, (uint64_t)j->perm[i] * j->N + n0 + t);
        // Block parameters from the original weights (act-order: the blocks are visited in
        // pieces, so they are fixed before any update).
        if (j->act_order)
            for (int t = 0; t < nt; t++)
                for (int b = 0; b < kb; b++) {
                    for (int r = 0; r < B; r++) {
                        const int k = b * B + r;
                        x[r] = k < K ? load_w(j->w, j->dtype, (uint64_t)k * j->N + n0 + t) : 0.0f;
                    }
                    block_params(j, x, b, &sc[b * TILE + t], &zz[b * TILE + t]);
                }
        for (int i0 = 0; i0 < K; i0 += GPTQ_BATCH) {
            const int i1 = i0 + GPTQ_BATCH < K ? i0 + GPTQ_BATCH : K;
            for (int i = i0; i < i1; i++) {
                const int k = j->perm[i], b = k / B;
                if (!j->act_order && i % B == 0) // block start: its parameters from W as updated
                    for (int t = 0; t < nt; t++) {
                        for (int r = 0; r < B; r++)
                            x[r] = i + r < K ? W[(size_t)(i + r) * TILE + t] : 0.0f;
                        block_params(j, x, b, &sc[b * TILE + t], &zz[b * TILE + t]);
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
                for (int r = i + 1; r < i1; r++) {
                    const float u = U[(size_t)i * K + r];
                    float *wr = W + (size_t)r * TILE;
                    for (int t = 0; t < nt; t++) wr[t] -= u * ei[t];
                }
            }
            for (int r = i1; r < K; r++) { // the batch's errors onto the rows after it
                float *wr = W + (size_t)r * TILE;
                for (int i = i0; i < i1; i++) {
                    const float u = U[(size_t)i * K + r];
                    const float *ei = E + (size_t)(i - i0) * TILE;
                    for (int t = 0; t < nt; t++) wr[t] -= u * ei[t];
                }
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
    free(W), free(E), free(sc), free(zz), free(codes), free(x), free(zps), free(scol);
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
        free(perm), free(hd);
        return g4_fail(G4_EUSER, "gptq: X^T X [%d, %d] is not positive definite after damping "
                                 "%g x its mean diagonal",
                       K, K, damp / 10);
    }
    gptq_job j = {w, w_dtype, K, N, block, kb, H, perm, hd, o && o->minmax, act, q, scales, zp};
    g4_parallel_for((N + TILE - 1) / TILE, (double)TILE * K * K, gptq_range, &j);
    free(perm), free(hd);
    return G4_OK;
}
