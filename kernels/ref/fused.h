// fused.h: CPU references of the fused decoder ops of kernels/ops.h (linear_qkv_prep,
// linear_add_rmsnorm_next, linear_gelu_mul_by). Each is written as the composition of the
// reference ops it fuses (ref.h), called in the order the unfused engine calls them, so it
// computes the very same floats: the CPU backend runs these, and the CUDA kernels of
// kernels/gemv.cuh are tested against them (tests/test_cuda_gemv.c).
// Activations fp32 row-major; weights g4_linear in their stored form (fp16 [in, out] or the
// package's Q4), in host memory, no bias, no clipping.
#ifndef G4_REF_FUSED_H
#define G4_REF_FUSED_H

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// y[T, w->out] (+)= x[T, w->in] @ W: ref_linear_f16 or ref_linear_q4 by w->kind.
void ref_linear(float *y, const float *x, int T, const g4_linear *w, int accumulate);

// q[T, n_heads * hd] = rope(rmsnorm_hd(x @ Wq) * q_w); when wk != NULL:
// kc[pos[t]] = rope(rmsnorm_hd(x @ Wk) * k_w) and vc[pos[t]] = rmsnorm_hd(x @ Wv) (no weight),
// the caches fp32 [cache_rows, n_kv * hd] (pos[t] in [0, cache_rows), checked). inv_freq
// [hd / 2] as ref_rope. x [T, K].
void ref_linear_qkv_prep(float *q, float *kc, float *vc, int cache_rows, const float *x, int T,
                         const g4_linear *wq, const g4_linear *wk, const g4_linear *wv,
                         const uint16_t *q_w, const uint16_t *k_w, const int32_t *pos,
                         const float *inv_freq, int n_heads, int n_kv, int hd, float eps);

// o = x @ W [T, N]; h[T, N] = (h + rmsnorm(o) * norm_w) * scale (ref_add_rmsnorm); then
// next[T, N] = rmsnorm(h) * next_w when next_norm (next_w NULL: no weight), else a copy of h.
void ref_linear_add_rmsnorm_next(float *h, float *next, const float *x, int T, const g4_linear *w,
                                 const uint16_t *norm_w, float eps, float scale, int next_norm,
                                 const uint16_t *next_w);

// y[T, N] = gelu_tanh(x @ W) * b[t * ldb + n] (b the per-layer-input slice, row stride ldb).
void ref_linear_gelu_mul_by(float *y, const float *x, int T, const g4_linear *w, const float *b,
                            int ldb);

#ifdef __cplusplus
}
#endif

#endif
