// quad_form.c: see quad_form.h.
#include "quant/quad_form.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/parallel.h"

#define L G4_QUAD_LANES

// acc[0..L) += x^T H x for the L vectors of D [K][L] (lane v of row k: vector v's element k).
// Rows a and a + 1 of H go through D together: y (row a) and z (row a + 1) are named sums held
// in registers across the row (8 doubles each: with SSE2's 16 registers, 8 lanes x 2 rows
// measured 1.2x faster than 16 lanes x 1 row and 2x faster than 4 x 4 at K 6144), each load of
// D's row b serving both. Row a's sum also takes its pair's H_a,a+1 x_a+1; an odd K's last row
// has its diagonal only.
static void quad_lanes(const float *H, int K, const double *D, double *acc) {
    int a = 0;
    for (; a + 1 < K; a += 2) {
        const float *h0 = H + (size_t)a * K, *h1 = h0 + K;
        double y0 = 0, y1 = 0, y2 = 0, y3 = 0, y4 = 0, y5 = 0, y6 = 0, y7 = 0;
        double z0 = 0, z1 = 0, z2 = 0, z3 = 0, z4 = 0, z5 = 0, z6 = 0, z7 = 0;
        for (int b = a + 2; b < K; b++) {
            const double t = h0[b], u = h1[b], *d = D + (size_t)b * L;
            y0 += t * d[0], y1 += t * d[1], y2 += t * d[2], y3 += t * d[3];
            y4 += t * d[4], y5 += t * d[5], y6 += t * d[6], y7 += t * d[7];
            z0 += u * d[0], z1 += u * d[1], z2 += u * d[2], z3 += u * d[3];
            z4 += u * d[4], z5 += u * d[5], z6 += u * d[6], z7 += u * d[7];
        }
        const double y[L] = {y0, y1, y2, y3, y4, y5, y6, y7},
                     z[L] = {z0, z1, z2, z3, z4, z5, z6, z7};
        const double *d0 = D + (size_t)a * L, *d1 = d0 + L;
        const double h00 = h0[a], h01 = h0[a + 1], h11 = h1[a + 1];
        for (int v = 0; v < L; v++) {
            acc[v] += d0[v] * (h00 * d0[v] + 2.0 * (h01 * d1[v] + y[v]));
            acc[v] += d1[v] * (h11 * d1[v] + 2.0 * z[v]);
        }
    }
    if (a < K) { // the last row of an odd K: its diagonal (nothing right of it)
        const double *d0 = D + (size_t)a * L, h00 = H[(size_t)a * K + a];
        for (int v = 0; v < L; v++) acc[v] += d0[v] * (h00 * d0[v]);
    }
}

typedef struct {
    const float *H;
    int K, n;
    g4_quad_vec_fn vec;
    void *ctx;
    double *out;
} quad_job;

// Groups [lo, hi) of L vectors: gathered into D [K][L] (the lanes past n stay zero), summed.
static void quad_range(void *ctx, int lo, int hi) {
    const quad_job *j = ctx;
    const int K = j->K;
    double *D = g4_malloc(sizeof(double) * (size_t)K * L), *x = g4_malloc(sizeof(double) * K);
    float *tmp = g4_malloc(sizeof(float) * (size_t)K);
    for (int g = lo; g < hi; g++) {
        const int v0 = g * L, nv = j->n - v0 < L ? j->n - v0 : L;
        memset(D, 0, sizeof(double) * (size_t)K * L);
        for (int v = 0; v < nv; v++) {
            j->vec(j->ctx, v0 + v, x, tmp);
            for (int k = 0; k < K; k++) D[(size_t)k * L + v] = x[k];
        }
        double acc[L] = {0};
        quad_lanes(j->H, K, D, acc);
        for (int v = 0; v < nv; v++) j->out[v0 + v] = acc[v];
    }
    free(D), free(x), free(tmp);
}

int g4_quad_forms(const float *H, int K, int n, g4_quad_vec_fn vec, void *ctx, double *out) {
    if (K < 1 || n < 0 || (n > 0 && (!H || !out || !vec)))
        return g4_fail(G4_EUSER,
                       "quadratic forms: K %d, %d vectors, H %s, out %s, source %s: expected "
                       "K >= 1, n >= 0, all three given",
                       K, n, H ? "given" : "NULL", out ? "given" : "NULL", vec ? "given" : "NULL");
    quad_job j = {H, K, n, vec, ctx, out};
    const int groups = (n + L - 1) / L;
    g4_parallel_for(groups, 0.5 * (double)K * K * L, quad_range, &j);
    return G4_OK;
}
