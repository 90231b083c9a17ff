// ref.h: the CPU reference ops: plain scalar C over fp32 activations, written for clarity.
// They define what every op computes; the CUDA kernels are tested against them and the CPU
// backend (kernels/backend_cpu.c) runs the whole model on them. Weights are read in their stored
// form (fp16 bits, or packed Q4) and converted exactly to fp32.
#ifndef G4_REF_H
#define G4_REF_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ref/sample_math.h"

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

// ref_attention of each row t alone (T = 1 at pos[t]) over its own caches kc[t], vc[t] (the
// batch decode step: row t is a sequence of its own).
void ref_attention_rows(float *out, const float *q, const float *const *kc, const float *const *vc,
                        const int32_t *pos, int T, int n_heads, int n_kv, int hd, int window,
                        float scale);

// y[T, cols] = table[ids[t]] * scale, table fp16 [rows, cols].
void ref_embed(float *y, const uint16_t *table, int cols, const int32_t *ids, int T, float scale);

// x = c * tanh(x / c).
void ref_softcap(float *x, size_t n, float c);

// The next token of logits x[V] (already soft-capped) under sampler p, with draw n
// (kernels/ref/sample_math.h: exact integer weights, so the CUDA kernel picks the same id):
//   - any NaN: -1 (a broken forward pass);
//   - temperature <= 0: the first index of the largest logit (torch.argmax);
//   - else, in HF's order: order the tokens by (logit desc, id asc); top_k > 0 keeps every
//     token whose logit is >= the k-th largest; weights floor(exp((x - max) / T) * 2^40) over
//     what is kept, total Z; top_p < 1 keeps the prefix up to the token holding mass point
//     ceil(top_p * Z) - 1 (HF TopPLogitsWarper: a token stays while the mass above it is below
//     top_p); the draw is the token holding mass point floor(u * Z_kept), u the top 53 bits of
//     SplitMix64 output n of the seed over 2^53.
int32_t ref_sample_row(const float *x, int V, const g4_sample_params *p, uint32_t n);
// The tokens ref_sample_row can draw from x under p (nonzero weight after top-k and top-p), in
// (logit desc, id asc) order, into ids[V]; returns their count (1, the argmax, when greedy; -1
// with a NaN).
int ref_sample_kept(const float *x, int V, const g4_sample_params *p, int32_t *ids);
// For each row r of logits[rows, V]: soft-cap in place when cap > 0, then next[r] =
// ref_sample_row(row, V, p, counter[r]).
void ref_sample(int32_t *next, float *logits, int rows, int V, float cap,
                const g4_sample_params *p, const int32_t *counter);
// ref_sample of each row r alone with its own sampler p[r] and draw index counter[r].
void ref_sample_rows(int32_t *next, float *logits, int rows, int V, float cap,
                     const g4_sample_params *const *p, const int32_t *counter);
// dst[t] = src[idx[t]] for each of the dst_rows rows t with idx[t] >= 0 (< src_rows); rows with
// idx[t] < 0 keep their values. Rows of `cols` floats.
void ref_scatter_rows(float *dst, int dst_rows, const float *src, int src_rows, int cols,
                      const int32_t *idx);

// --- vision and audio towers (spec 4.2-4.5, 5.3-5.5) --------------------------------------
// Vision "padding" patches are the ones at position (-1, -1), as in HF.

// In place on x[T, n_heads * hd]: the vision tower's 2-D RoPE. Each head is two parts of hd/2
// dims: part 0 rotates by the x (column) position, part 1 by the y (row) position, each with
// rotate_half pairs (j, j + hd/4) at angle float(pos) * inv_freq[j], j < hd/4 (an fp32
// product, like HF). pos_xy I32 [T, 2] = (x, y); inv_freq [hd/4] = theta^(-2j / (hd/2)) in fp32
// (theta 100 for E2B).
void ref_rope_2d(float *x, int T, int n_heads, int hd, const int32_t *pos_xy,
                 const float *inv_freq);

// Bidirectional attention (vision): out[i] = softmax_j(q[i] . k[j] * scale) v[j] per head over
// the N keys j with key_valid[j] != 0 (key_valid NULL: every key). q, out [Nq, n_heads * hd]
// (Nq = N for self-attention; fewer rows to check a sample), k, v [N, n_heads * hd] (one KV
// head per query head). A query with no valid key gets 0.
void ref_attention_bidir(float *out, const float *q, int Nq, const float *k, const float *v,
                         const uint8_t *key_valid, int N, int n_heads, int hd, float scale);

// Gemma-4 audio self-attention (HF Gemma4AudioAttention, spec 5.5), per head, query t, key u:
//   q' = q * (hd^-0.5 / ln 2) * softplus(per_dim_scale),  k' = k * ln(1 + e) / ln 2,
//   z(t, u) = logit_cap * tanh((q'.k'[u] + q'.rel[t - u]) / logit_cap),
//   key u visible iff 0 <= t - u < band and valid[u];  out[t] = sum_u softmax(z)[u] v[u].
// Masked logits are invalid_logit (-1e9) over HF's block context (see attention_audio.c), so a
// query with no visible key gets the mean of v over that context, as HF computes it.
// q, k, v, out [T, n_heads * hd] (projection outputs, unscaled); rel [>= band, n_heads * hd]:
// rel[d] = relative_k_proj(sinusoid(d)) for distance d (HF's position_embeddings row c holds
// d = 12 - c: reverse it); per_dim_scale [hd] (the raw parameter); valid [T] frame mask (NULL:
// all valid). E2B: chunk 12, band = context_left - 1 = 12, logit_cap 50, invalid_logit -1e9.
void ref_audio_attention(float *out, const float *q, const float *k, const float *v,
                         const float *rel, const float *per_dim_scale, const uint8_t *valid,
                         int T, int n_heads, int hd, int chunk, int band, float logit_cap,
                         float invalid_logit);

// One audio subsampling (SSCP) layer, batch 1, NCHW as HF: input rows h with valid[h] == 0 are
// zeroed (valid NULL: none), conv 3x3 stride 2 pad 1 without bias (w fp16 [C_out, C_in, 3, 3]),
// LayerNorm over the C_out channels of each output pixel (mean-subtracting, biased variance,
// eps, weight ln_w fp16 [C_out], no bias), ReLU. x [C_in, H, W] -> y [C_out, Ho, Wo] with
// Ho = (H + 1) / 2, Wo = (W + 1) / 2. The next layer's mask is valid[::2].
void ref_sscp_conv(float *y, const float *x, const uint8_t *valid, const uint16_t *w,
                   const uint16_t *ln_w, int C_in, int H, int W, int C_out, float eps);

// Causal depthwise conv1d over time: y[t][c] = sum_{i<K} w[c][i] * x[t - (K-1) + i][c], rows
// before 0 read as zeros (left pad K - 1). x, y [T, C]; w fp16 [C, K] (the weight [C, 1, K]).
void ref_dwconv1d_causal(float *y, const float *x, const uint16_t *w, int T, int C, int K);

// GLU over the last dim: y[T, C] = x[:, :C] * sigmoid(x[:, C:]) for x [T, 2C].
void ref_glu(float *y, const float *x, int T, int C);

// SiLU: y = x * sigmoid(x) over n elements (y may alias x).
void ref_silu(float *y, const float *x, size_t n);

// LayerNorm over each row of x[rows, cols]: (x - mean) / sqrt(var + eps) * w + b with the biased
// variance; w, b fp16 [cols] or NULL (1 and 0). y may alias x.
void ref_layernorm(float *y, const float *x, const uint16_t *w, const uint16_t *b, int rows,
                   int cols, float eps);

// x = min(max(x, lo), hi) over n elements; NaN stays NaN (torch.clamp).
void ref_clamp(float *x, size_t n, float lo, float hi);

// Vision pooling to soft tokens (HF Gemma4VisionPooler): patch i at pos_xy[i] = (x, y) adds
// x[i] / k^2 to bin floor(x/k) + ((max_x + 1) / k) * floor(y/k) (padding patches add nothing
// and count as position (0, 0), as HF clamps them), then out *= scale (sqrt(hidden), 27.71 for
// E2B). x [N, D], out [n_bins, D] (fully written), used [n_bins] (optional): 1 where a patch
// landed (HF's pooler mask). Returns G4_EUSER when a bin index is >= n_bins.
int ref_vision_pool(float *out, uint8_t *used, const float *x, const int32_t *pos_xy, int N,
                    int D, int k, int n_bins, float scale);

// Vision patch position embedding: h[i] += table[0][x_i] + table[1][y_i] for each patch that is
// not padding; table fp16 [2, table_rows, D]. h [N, D]. Returns G4_EUSER for a coordinate
// outside [0, table_rows).
int ref_vision_posemb_add(float *h, const uint16_t *table, int table_rows,
                          const int32_t *pos_xy, int N, int D);

#ifdef __cplusplus
}
#endif

#endif
