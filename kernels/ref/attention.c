// attention.c: reference causal (optionally sliding-window) attention over a KV cache with
// grouped query heads. Scores and softmax in double: this is the oracle.
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "kernels/ref/ref.h"

void ref_attention(float *out, const float *q, const float *kc, const float *vc,
                   const int32_t *pos, int T, int n_heads, int n_kv, int hd, int window,
                   float scale) {
    const int group = n_heads / n_kv, kvw = n_kv * hd;
    int maxlen = 0;
    for (int t = 0; t < T; t++)
        if (pos[t] + 1 > maxlen) maxlen = pos[t] + 1;
    double *p = g4_malloc(sizeof(double) * (size_t)(maxlen > 0 ? maxlen : 1));
    double *acc = g4_malloc(sizeof(double) * (size_t)hd);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_heads; h++) {
            const float *qh = q + (size_t)t * n_heads * hd + (size_t)h * hd;
            const int kvh = h / group;
            const int hi = pos[t], lo = window > 0 && hi - window + 1 > 0 ? hi - window + 1 : 0;
            double mx = -INFINITY;
            for (int j = lo; j <= hi; j++) {
                const float *kr = kc + (size_t)j * kvw + (size_t)kvh * hd;
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)qh[i] * kr[i];
                p[j] = d * scale;
                if (p[j] > mx) mx = p[j];
            }
            double sum = 0;
            for (int j = lo; j <= hi; j++) sum += (p[j] = exp(p[j] - mx));
            for (int i = 0; i < hd; i++) acc[i] = 0;
            for (int j = lo; j <= hi; j++) {
                const float *vr = vc + (size_t)j * kvw + (size_t)kvh * hd;
                for (int i = 0; i < hd; i++) acc[i] += p[j] * vr[i];
            }
            float *o = out + (size_t)t * n_heads * hd + (size_t)h * hd;
            for (int i = 0; i < hd; i++) o[i] = (float)(acc[i] / sum);
        }
    free(p);
    free(acc);
}
