// ref.h: the CPU reference ops: plain scalar C over fp32 activations, written for clarity.
// They define what every op computes; the CUDA kernels are tested against them and the CPU
// backend (kernels/backend_cpu.c) runs the whole model on them. Weights are read in their stored
// form (fp16 bits, or packed Q4) and converted exactly to fp32.
#ifndef G4_REF_H
#define G4_REF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// fp16 bits -> float through a 64K-entry table (exact; built on first use, thread-safe).
extern const float *g4_f16_table;
void g4_ref_init(void);
static inline float ref_h2f(uint16_t h) { return g4_f16_table[h]; }

// y[T, N] (+)= x[T, K] @ W, W fp16 [K, N] row-major; bias fp16 [N] or NULL.
void ref_linear_f16(float *y, const float *x, const uint16_t *w, const uint16_t *bias, int T,
                    int K, int N, int accumulate);
// The same with W in MatMulNBits Q4 (see g4_linear in kernels/ops.h): block along K.
void ref_linear_q4(float *y, const float *x, const uint8_t *q, const uint16_t *scales,
                   const uint8_t *zp, const uint16_t *bias, int T, int K, int N, int block,
                   int accumulate);
// Dequantizes output column n of a Q4 weight into w_col[K] (w = (q - zp) * scale).
void ref_q4_dequant_col(float *w_col, const uint8_t *q, const uint16_t *scales, const uint8_t *zp,
                        int K, int block, int n);

// Root-mean-square norm over each group of `group` columns of x[rows, cols] (cols % group == 0):
// y = x * (mean(x^2) + eps)^-0.5 * w, w fp16 [group] or NULL. y may alias x.
void ref_rmsnorm(float *y, const float *x, const uint16_t *w, int rows, int cols, int group,
                 float eps);
// h = (h + rmsnorm(x) * w) * scale over rows of width cols.
void ref_add_rmsnorm(float *h, const float *x, const uint16_t *w, int rows, int cols, float eps,
                     float scale);

// gelu with the tanh approximation (HF gelu_pytorch_tanh).
float ref_gelu_tanh(float x);
// y = gelu_tanh(a) * b over n elements (y may alias a or b).
void ref_gelu_mul(float *y, const float *a, const float *b, size_t n);

// In place on x[T, n_heads * head_dim]: for each head, pair (j, j + head_dim/2) rotates by
// angle = float(pos[t]) * inv_freq[j] (an fp32 product, as HF computes it).
void ref_rope(float *x, int T, int n_heads, int head_dim, const int32_t *pos,
              const float *inv_freq);

// Causal attention over a cache: out[T, n_heads * hd] for query rows q[T, n_heads * hd] at
// positions pos[t], keys/values kc/vc [capacity, n_kv * hd] rows 0..pos[t] (the last `window`
// rows only when window > 0). Query head h uses KV head h / (n_heads / n_kv).
void ref_attention(float *out, const float *q, const float *kc, const float *vc,
                   const int32_t *pos, int T, int n_heads, int n_kv, int hd, int window,
                   float scale);

// y[T, cols] = table[ids[t]] * scale, table fp16 [rows, cols].
void ref_embed(float *y, const uint16_t *table, int cols, const int32_t *ids, int T, float scale);

// x = c * tanh(x / c).
void ref_softcap(float *x, size_t n, float c);

#ifdef __cplusplus
}
#endif

#endif
