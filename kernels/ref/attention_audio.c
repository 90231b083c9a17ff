// attention_audio.c: reference Gemma-4 audio self-attention (spec 5.5; HF Gemma4AudioAttention):
// chunked local attention with relative-position logits, computed in the dense form over each
// query's HF block context. Double precision: this is the oracle.
//
// HF splits the T frames into blocks of `chunk` queries; block b sees the context keys
// u = chunk*b - band + j, j < chunk + band (zeros outside [0, T)). A key is visible to query t
// iff 0 <= t - u < band and frame u is valid; every other context entry gets the logit
// `invalid_logit` (-1e9), and so weight exactly 0 unless *no* entry is visible, in which case
// softmax is uniform over the chunk + band context entries. This loop computes exactly that.
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "kernels/ref/ref.h"

void ref_audio_attention(float *out, const float *q, const float *k, const float *v,
                         const float *rel, const float *per_dim_scale, const uint8_t *valid, int T,
                         int n_heads, int hd, int chunk, int band, float logit_cap,
                         float invalid_logit) {
    const size_t w = (size_t)n_heads * hd;
    const int ctx = chunk + band;
    const double q_scale = pow((double)hd, -0.5) / log(2.0);
    const double k_scale = log(1.0 + exp(1.0)) / log(2.0);
    double *qs = g4_malloc(sizeof(double) * (size_t)hd);
    double *z = g4_malloc(sizeof(double) * (size_t)ctx);
    double *acc = g4_malloc(sizeof(double) * (size_t)hd);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_heads; h++) {
            const float *qh = q + (size_t)t * w + (size_t)h * hd;
            for (int e = 0; e < hd; e++) {
                const double s = per_dim_scale[e];
                const double softplus = s > 20 ? s : log1p(exp(s)); // torch threshold 20
                qs[e] = qh[e] * q_scale * softplus;
            }
            const int u0 = (t / chunk) * chunk - band;
            double mx = -INFINITY;
            for (int j = 0; j < ctx; j++) {
                const int u = u0 + j, d = t - u;
                if (u >= 0 && u < T && d >= 0 && d < band && (!valid || valid[u])) {
                    const float *kr = k + (size_t)u * w + (size_t)h * hd;
                    const float *rr = rel + (size_t)d * w + (size_t)h * hd;
                    double ac = 0, bd = 0;
                    for (int e = 0; e < hd; e++) {
                        ac += qs[e] * (kr[e] * k_scale);
                        bd += qs[e] * rr[e];
                    }
                    z[j] = logit_cap * tanh((ac + bd) / logit_cap);
                } else {
                    z[j] = invalid_logit;
                }
                if (z[j] > mx) mx = z[j];
            }
            double sum = 0;
            for (int e = 0; e < hd; e++) acc[e] = 0;
            for (int j = 0; j < ctx; j++) {
                const double p = exp(z[j] - mx);
                sum += p;
                const int u = u0 + j;
                if (u < 0 || u >= T) continue; // HF pads the context with zero values
                const float *vr = v + (size_t)u * w + (size_t)h * hd;
                for (int e = 0; e < hd; e++) acc[e] += p * vr[e];
            }
            float *o = out + (size_t)t * w + (size_t)h * hd;
            for (int e = 0; e < hd; e++) o[e] = (float)(acc[e] / sum);
        }
    free(qs);
    free(z);
    free(acc);
}
