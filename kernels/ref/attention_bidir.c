// attention_bidir.c: reference bidirectional attention with masked (padding) keys: the vision
// tower's self-attention (spec 4.3). Scores and softmax in double: this is the oracle.
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "kernels/ref/ref.h"

void ref_attention_bidir(float *out, const float *q, int Nq, const float *k, const float *v,
                         const uint8_t *key_valid, int N, int n_heads, int hd, float scale) {
    const size_t w = (size_t)n_heads * hd;
    double *p = g4_malloc(sizeof(double) * (size_t)(N > 0 ? N : 1));
    double *acc = g4_malloc(sizeof(double) * (size_t)hd);
    for (int i = 0; i < Nq; i++)
        for (int h = 0; h < n_heads; h++) {
            const float *qh = q + (size_t)i * w + (size_t)h * hd;
            double mx = -INFINITY;
            for (int j = 0; j < N; j++) {
                if (key_valid && !key_valid[j]) continue;
                const float *kr = k + (size_t)j * w + (size_t)h * hd;
                double d = 0;
                for (int e = 0; e < hd; e++) d += (double)qh[e] * kr[e];
                p[j] = d * scale;
                if (p[j] > mx) mx = p[j];
            }
            double sum = 0;
            for (int e = 0; e < hd; e++) acc[e] = 0;
            for (int j = 0; j < N; j++) {
                if (key_valid && !key_valid[j]) continue;
                const double pj = exp(p[j] - mx);
                sum += pj;
                const float *vr = v + (size_t)j * w + (size_t)h * hd;
                for (int e = 0; e < hd; e++) acc[e] += pj * vr[e];
            }
            float *o = out + (size_t)i * w + (size_t)h * hd;
            for (int e = 0; e < hd; e++) o[e] = sum > 0 ? (float)(acc[e] / sum) : 0.0f;
        }
    free(p);
    free(acc);
}
