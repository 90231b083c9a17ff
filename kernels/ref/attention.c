// attention.c: reference causal (optionally sliding-window) attention over a KV cache with
// grouped query heads. Scores and softmax in double: this is the oracle. The (query, head) pairs
// are split over threads (base/parallel.h), each computed whole by one, so the bits do not depend
// on the thread count.
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "base/parallel.h"
#include "kernels/ref/ref.h"

typedef struct {
    float *out;
    const float *q, *kc, *vc;
    const int32_t *pos;
    int n_heads, n_kv, hd, window, maxlen;
    float scale;
} attention_job;

// Query rows x heads [i0, i1), i = t * n_heads + h.
static void attention_rows(void *ctx, int i0, int i1) {
    const attention_job *a = ctx;
    const int n_heads = a->n_heads, hd = a->hd, group = n_heads / a->n_kv, kvw = a->n_kv * hd;
    double *p = g4_malloc(sizeof(double) * (size_t)(a->maxlen > 0 ? a->maxlen : 1));
    double *acc = g4_malloc(sizeof(double) * (size_t)hd);
    for (int i = i0; i < i1; i++) {
        const int t = i / n_heads, h = i % n_heads;
        const float *qh = a->q + (size_t)t * n_heads * hd + (size_t)h * hd;
        const int kvh = h / group;
        const int hi = a->pos[t],
                  lo = a->window > 0 && hi - a->window + 1 > 0 ? hi - a->window + 1 : 0;
        double mx = -INFINITY;
        for (int j = lo; j <= hi; j++) {
            const float *kr = a->kc + (size_t)j * kvw + (size_t)kvh * hd;
            double d = 0;
            for (int e = 0; e < hd; e++) d += (double)qh[e] * kr[e];
            p[j] = d * a->scale;
            if (p[j] > mx) mx = p[j];
        }
        double sum = 0;
        for (int j = lo; j <= hi; j++) sum += (p[j] = exp(p[j] - mx));
        for (int e = 0; e < hd; e++) acc[e] = 0;
        for (int j = lo; j <= hi; j++) {
            const float *vr = a->vc + (size_t)j * kvw + (size_t)kvh * hd;
            for (int e = 0; e < hd; e++) acc[e] += p[j] * vr[e];
        }
        float *o = a->out + (size_t)t * n_heads * hd + (size_t)h * hd;
        for (int e = 0; e < hd; e++) o[e] = (float)(acc[e] / sum);
    }
    free(p);
    free(acc);
}

void ref_attention(float *out, const float *q, const float *kc, const float *vc, const int32_t *pos,
                   int T, int n_heads, int n_kv, int hd, int window, float scale) {
    int maxlen = 0;
    for (int t = 0; t < T; t++)
        if (pos[t] + 1 > maxlen) maxlen = pos[t] + 1;
    attention_job a = {out, q, kc, vc, pos, n_heads, n_kv, hd, window, maxlen, scale};
    const int span = window > 0 && window < maxlen ? window : maxlen;
    g4_parallel_for(T * n_heads, 2.0 * span * hd, attention_rows, &a);
}

void ref_attention_rows(float *out, const float *q, const float *const *kc, const float *const *vc,
                        const int32_t *pos, int T, int n_heads, int n_kv, int hd, int window,
                        float scale) {
    const size_t w = (size_t)n_heads * hd;
    for (int t = 0; t < T; t++) // each row alone over its own caches: the one-row op
        ref_attention(out + t * w, q + t * w, kc[t], vc[t], pos + t, 1, n_heads, n_kv, hd, window,
                      scale);
}
