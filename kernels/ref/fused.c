// fused.c: the fused decoder ops (kernels/ops.h) as compositions of the reference ops; see
// fused.h. The call sequence of each matches the unfused ops of the CPU backend (its linear,
// qkv_prep, add_rmsnorm_next and gelu_mul), so both give bit-identical results.
#include "kernels/ref/fused.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/ref/ref.h"
#include "base/base.h"

void ref_linear(float *y, const float *x, int T, const g4_linear *w, int accumulate) {
    G4_ASSERT(!w->clipped);
    if (w->kind == G4_W_F16)
        ref_linear_f16(y, x, w->w, w->bias, T, w->in, w->out, accumulate);
    else if (w->kind == G4_W_Q4)
        ref_linear_q4(y, x, w->w, w->scales, w->zp, w->bias, T, w->in, w->out, w->block,
                      accumulate);
    else
        G4_ASSERT(!"ref_linear: unknown weight kind");
}

void ref_linear_qkv_prep(float *q, float *kc, float *vc, int cache_rows, const float *x, int T,
                         const g4_linear *wq, const g4_linear *wk, const g4_linear *wv,
                         const uint16_t *q_w, const uint16_t *k_w, const int32_t *pos,
                         const float *inv_freq, int n_heads, int n_kv, int hd, float eps) {
    G4_ASSERT(wq->out == n_heads * hd && hd % 2 == 0);
    ref_linear(q, x, T, wq, 0);
    if (wk) { // the projections first, as the engine runs them, then the norms and RoPE
        G4_ASSERT(wv && wk->out == n_kv * hd && wv->out == wk->out && wk->in == wq->in &&
                  wv->in == wq->in);
        const size_t kw = (size_t)n_kv * hd;
        float *k = g4_malloc(sizeof(float) * (size_t)T * kw + 1),
              *v = g4_malloc(sizeof(float) * (size_t)T * kw + 1);
        ref_linear(k, x, T, wk, 0);
        ref_linear(v, x, T, wv, 0);
        ref_rmsnorm(q, q, q_w, T, n_heads * hd, hd, eps);
        ref_rope(q, T, n_heads, hd, pos, inv_freq);
        ref_rmsnorm(k, k, k_w, T, (int)kw, hd, eps);
        ref_rope(k, T, n_kv, hd, pos, inv_freq);
        ref_rmsnorm(v, v, NULL, T, (int)kw, hd, eps); // weightless V norm
        for (int t = 0; t < T; t++) {
            G4_ASSERT(pos[t] >= 0 && pos[t] < cache_rows);
            memcpy(kc + (size_t)pos[t] * kw, k + (size_t)t * kw, sizeof(float) * kw);
            memcpy(vc + (size_t)pos[t] * kw, v + (size_t)t * kw, sizeof(float) * kw);
        }
        free(k);
        free(v);
        return;
    }
    ref_rmsnorm(q, q, q_w, T, n_heads * hd, hd, eps);
    ref_rope(q, T, n_heads, hd, pos, inv_freq);
}

void ref_linear_add_rmsnorm_next(float *h, float *next, const float *x, int T, const g4_linear *w,
                                 const uint16_t *norm_w, float eps, float scale, int next_norm,
                                 const uint16_t *next_w) {
    const int N = w->out;
    float *o = g4_malloc(sizeof(float) * (size_t)T * N + 1);
    ref_linear(o, x, T, w, 0);
    ref_add_rmsnorm(h, o, norm_w, T, N, eps, scale);
    if (next_norm)
        ref_rmsnorm(next, h, next_w, T, N, N, eps);
    else
        memcpy(next, h, sizeof(float) * (size_t)T * N);
    free(o);
}

void ref_linear_gelu_mul_by(float *y, const float *x, int T, const g4_linear *w, const float *b,
                            int ldb) {
    const int N = w->out;
    G4_ASSERT(ldb >= N);
    ref_linear(y, x, T, w, 0);
    for (int t = 0; t < T; t++)
        ref_gelu_mul(y + (size_t)t * N, y + (size_t)t * N, b + (size_t)t * ldb, (size_t)N);
}
