// equalize.c: activation-aware equalization's scales, folds and alpha search (equalize.h).
#include "quant/equalize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "loader/onnx_model.h"
#include "quant/linear.h"
#include "quant/methods.h"
#include "quant/q4.h"
#include "quant/q4_writer.h"

void g4_eq_scales(const float *H, int K, double alpha, const uint16_t *fold, float *s,
                  uint16_t *fold_out) {
    double lg = 0;
    int live = 0;
    for (int k = 0; k < K; k++) {
        const double h = H[(size_t)k * K + k];
        if (h > 0 && isfinite(h)) lg += 0.5 * log(h), live++;
    }
    const double g = live ? lg / live : 0; // log of the live channels' geometric mean rms
    for (int k = 0; k < K; k++) {
        const double h = H[(size_t)k * K + k];
        double v = h > 0 && isfinite(h) ? exp(alpha * (0.5 * log(h) - g)) : 1.0;
        if (v > G4_EQ_CLAMP) v = G4_EQ_CLAMP;
        if (v < 1.0 / G4_EQ_CLAMP) v = 1.0 / G4_EQ_CLAMP;
        s[k] = (float)v;
        if (!fold) continue;
        const float w = g4_f16_to_f32(fold[k]);
        const uint16_t h2 = g4_f32_to_f16(w / s[k]);
        const float w2 = g4_f16_to_f32(h2);
        if (w == 0 || w2 == 0 || !isfinite(w) || !isfinite(w2)) {
            s[k] = 1, fold_out[k] = fold[k];
        } else {
            s[k] = w / w2, fold_out[k] = h2; // w2 * s == w before the fp32 product's rounding
        }
    }
}

// --- the scaled input's statistics --------------------------------------------------------------

typedef struct {
    float *H, *imp, *mean, *V;
    float *E; // the search's error matrix (g->Herr scaled), or NULL: H
} xstats;

// M' [K, K] = S^-1 M S^-1.
static float *scaled_sym(const float *M, const float *s, int K) {
    float *o = g4_malloc(sizeof(float) * (size_t)K * K);
    for (int a = 0; a < K; a++)
        for (int b = 0; b < K; b++)
            o[(size_t)a * K + b] = (float)((double)M[(size_t)a * K + b] / ((double)s[a] * s[b]));
    return o;
}

static void xstats_make(const g4_eq_group *g, const float *s, xstats *x) {
    const int K = g->K;
    x->H = scaled_sym(g->H, s, K);
    x->E = g->Herr ? scaled_sym(g->Herr, s, K) : NULL;
    x->imp = g->imp ? g4_malloc(sizeof(float) * (size_t)K) : NULL;
    x->mean = g->mean ? g4_malloc(sizeof(float) * (size_t)K) : NULL;
    for (int k = 0; k < K; k++) {
        if (x->imp) x->imp[k] = (float)((double)g->imp[k] / ((double)s[k] * s[k]));
        if (x->mean) x->mean[k] = g->mean[k] / s[k];
    }
    x->V = g->V && g->r > 0 ? g4_malloc(sizeof(float) * (size_t)g->r * K) : NULL;
    for (int c = 0; x->V && c < g->r; c++)
        for (int k = 0; k < K; k++) x->V[(size_t)c * K + k] = g->V[(size_t)c * K + k] / s[k];
}

static void xstats_free(xstats *x) {
    free(x->H), free(x->imp), free(x->mean), free(x->V), free(x->E);
    memset(x, 0, sizeof *x);
}

float *g4_eq_scaled_w(const void *w, int K, int N, const int *col, int ncol, const float *s,
                      const float *c) {
    float *o = g4_malloc(sizeof(float) * (size_t)K * ncol);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < ncol; j++) {
            const int n = col ? col[j] : j;
            uint16_t h;
            memcpy(&h, (const uint8_t *)w + 2 * ((size_t)k * N + n), 2); // may be unaligned
            const float v = g4_f16_to_f32(h) * (s ? s[k] : 1.0f);
            o[(size_t)k * ncol + j] = c ? v * c[n] : v;
        }
    return o;
}

static int check_group(const g4_eq_group *g) {
    if (g->n < 1 || g->n > G4_EQ_MAX_MEMBERS || g->K <= 0 || !g->H)
        return g4_fail(G4_EUSER, "equalize: %d members of K %d (H %s): expected 1..%d, K > 0, an H",
                       g->n, g->K, g->H ? "given" : "missing", G4_EQ_MAX_MEMBERS);
    for (int i = 0; i < g->n; i++)
        if (!g->w[i] || g->N[i] <= 0)
            return g4_fail(G4_EUSER, "equalize: %s: N %d, expected a weight of N > 0",
                           g->name[i] ? g->name[i] : "?", g->N[i]);
    return G4_OK;
}

// The columns member i is searched on: all when K^2 N is within the work, else every N/ncol-th.
static int search_cols(int K, int N, int **col) {
    double want = G4_EQ_SEARCH_WORK / ((double)K * K);
    if (want < G4_EQ_MIN_COLS) want = G4_EQ_MIN_COLS;
    if (want >= N) {
        *col = NULL;
        return N;
    }
    const int nc = (int)want;
    *col = g4_malloc(sizeof(int) * (size_t)nc);
    for (int j = 0; j < nc; j++) (*col)[j] = (int)((long long)j * N / nc);
    return nc;
}

int g4_eq_search(const g4_eq_group *g, g4_eq_quant_fn fn, void *ctx, g4_eq_pick *pk) {
    memset(pk, 0, sizeof *pk);
    int rc = check_group(g);
    if (rc) return rc;
    const int K = g->K;
    float *s = g4_malloc(sizeof(float) * (size_t)K);
    uint16_t *fo = g4_malloc(sizeof(uint16_t) * (size_t)K);
    int *col[G4_EQ_MAX_MEMBERS] = {0};
    double e[G4_EQ_N_ALPHA][G4_EQ_MAX_MEMBERS] = {{0}};
    for (int m = 0; m < g->n; m++) pk->cols[m] = search_cols(K, g->N[m], &col[m]);
    for (int a = 0; a < G4_EQ_N_ALPHA && !rc; a++) {
        g4_eq_scales(g->H, K, a / 10.0, g->fold, s, fo);
        xstats x;
        xstats_make(g, s, &x);
        for (int m = 0; m < g->n && !rc; m++) {
            const int nc = pk->cols[m];
            float *w = g4_eq_scaled_w(g->w[m], K, g->N[m], col[m], nc, s, NULL);
            g4_q4_arrays ar = g4_q4_arrays_new(NULL, K, nc);
            const g4_eq_qin in = {g->name[m], w, G4_DT_FLOAT, K, nc, x.H, x.imp, x.mean, x.V, g->r};
            rc = fn(ctx, &in, ar.q, ar.scales, ar.zp);
            if (!rc) {
                const double v = g4_q4_out_err(w, G4_DT_FLOAT, K, nc, G4_Q4_BLOCK, ar.q, ar.scales,
                                               ar.zp, x.E ? x.E : x.H);
                e[a][m] = isfinite(v) ? v : INFINITY;
            }
            g4_q4_arrays_free(&ar);
            free(w);
        }
        xstats_free(&x);
    }
    int best = 0;
    for (int a = 0; a < G4_EQ_N_ALPHA && !rc; a++) {
        double t = 0;
        for (int m = 0; m < g->n; m++) t += e[0][m] > 0 ? e[a][m] / e[0][m] : 1.0;
        pk->err[a] = t;
        if (t < pk->err[best]) best = a; // ties: the smaller alpha
    }
    for (int m = 0; m < g->n; m++) free(col[m]);
    if (!rc) {
        pk->alpha_i = best;
        pk->s = s;
        if (g->fold) {
            pk->fold = fo, fo = NULL;
        }
        g4_eq_scales(g->H, K, best / 10.0, g->fold, pk->s, pk->fold);
        s = NULL;
    }
    free(s), free(fo);
    if (rc) g4_error_prefix("equalize %s", g->name[0] ? g->name[0] : "?");
    return rc;
}

void g4_eq_pick_free(g4_eq_pick *pk) {
    free(pk->s), free(pk->fold);
    memset(pk, 0, sizeof *pk);
}

int g4_eq_quantize(const g4_eq_group *g, int i, const float *s, const float *c, g4_eq_quant_fn fn,
                   void *ctx, uint8_t *q, uint16_t *scales, uint8_t *zp) {
    int rc = check_group(g);
    if (rc) return rc;
    if (i < 0 || i >= g->n) return g4_fail(G4_EINTERNAL, "equalize: member %d of %d", i, g->n);
    const int K = g->K, N = g->N[i];
    if (!s && !c) { // the method itself, on the package's bytes
        const g4_eq_qin in = {g->name[i], g->w[i], G4_DT_FLOAT16, K,    N,
                              g->H,       g->imp,  g->mean,       g->V, g->r};
        return fn(ctx, &in, q, scales, zp);
    }
    float *ones = NULL;
    if (!s) {
        ones = g4_malloc(sizeof(float) * (size_t)K);
        for (int k = 0; k < K; k++) ones[k] = 1;
        s = ones;
    }
    xstats x;
    xstats_make(g, s, &x);
    float *w = g4_eq_scaled_w(g->w[i], K, N, NULL, N, s, c);
    const g4_eq_qin in = {g->name[i], w, G4_DT_FLOAT, K, N, x.H, x.imp, x.mean, x.V, g->r};
    rc = fn(ctx, &in, q, scales, zp);
    free(w), free(ones);
    xstats_free(&x);
    return rc;
}
