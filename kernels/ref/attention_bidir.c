// attention_bidir.c: reference bidirectional attention with masked (padding) keys: the vision
// tower's self-attention (spec 4.3). Scores and softmax in double: this is the oracle. The
// (query, head) pairs are split over threads (base/parallel.h), each computed whole by one.
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "base/parallel.h"
#include "kernels/ref/ref.h"

typedef struct {
    float *out;
    const float *q, *k, *v;
    const uint8_t *key_valid;
    int N, n_heads, hd;
    float scale;
} bidir_job;

// Query rows x heads [i0, i1), i = query * n_heads + h.
static void bidir_rows(void *ctx, int i0, int i1) {
    const bidir_job *a = ctx;
    const int N = a->N, hd = a->hd;
    const size_t w = (size_t)a->n_heads * hd;
    double *p = g4_malloc(sizeof(double) * (size_t)(N > 0 ? N : 1));
    double *acc = g4_malloc(sizeof(double) * (size_t)hd);
    for (int r = i0; r < i1; r++) {
        const int i = r / a->n_heads, h = r % a->n_heads;
        const float *qh = a->q + (size_t)i * w + (size_t)h * hd;
        double mx = -INFINITY;
        for (int j = 0; j < N; j++) {
            if (a->key_valid && !a->key_valid[j]) continue;
            const float *kr = a->k + (size_t)j * w + (size_t)h * hd;
            double d = 0;
            for (int e = 0; e < hd; e++) d += (double)qh[e] * kr[e];
            p[j] = d * a->scale;
            if (p[j] > mx) mx = p[j];
        }
        double sum = 0;
        for (int e = 0; e < hd; e++) acc[e] = 0;
        for (int j = 0; j < N; j++) {
            if (a->key_valid && !a->key_valid[j]) continue;
            const double pj = exp(p[j] - mx);
            sum += pj;
            const float *vr = a->v + (size_t)j * w + (size_t)h * hd;
            for (int e = 0; e < hd; e++) acc[e] += pj * vr[e];
        }
        float *o = a->out + (size_t)i * w + (size_t)h * hd;
        for (int e = 0; e < hd; e++) o[e] = sum > 0 ? (float)(acc[e] / sum) : 0.0f;
    }
    free(p);
    free(acc);
}

void ref_attention_bidir(float *out, const float *q, int Nq, const float *k, const float *v,
                         const uint8_t *key_valid, int N, int n_heads, int hd, float scale) {
    bidir_job a = {out, q, k, v, key_valid, N, n_heads, hd, scale};
    g4_parallel_for(Nq * n_heads, 2.0 * N * hd, bidir_rows, &a);
}
