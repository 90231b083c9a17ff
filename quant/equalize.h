// equalize.h: activation-aware equalization (AWQ-style; issue 33, `g4cu quantize --equalize`).
//
// The linears of a group share one input x [K] (q|k|v after input_layernorm, gate|up after
// pre_feedforward_layernorm, the lm_head after the final norm, down_proj alone). Each input
// channel k gets a scale s_k: the weights' row k (our W [K, N] layout: input channel k) is
// multiplied by s_k and the input divided by s_k, the 1/s_k folded into whatever makes the
// input (a norm's fp16 weight; for down_proj, up_proj's output column k, since
// gelu(gate) * up is linear in up's column). In exact arithmetic the function is unchanged;
// the 4-bit grid (block 32 along K) then gives the channels with large inputs finer steps.
//
//   s_k = (rms_k / g)^alpha, rms_k = sqrt(X^T X[k][k]) (any scale), g the geometric mean of the
//   live channels' rms (so the s have geometric mean 1 before the clamp), clamped to
//   [1 / G4_EQ_CLAMP, G4_EQ_CLAMP]; a channel with no input (rms 0) keeps s = 1.
//   A fold into fp16 weights w (a norm): w'_k = fp16(w_k / s_k), and s_k becomes w_k / w'_k
//   (so w'_k s_k = w_k exactly before the fp32 product; w_k = 0 or w'_k = 0: s_k = 1, w'_k = w_k).
//
// alpha is searched on 0, 0.1, .., 1 per group: each member quantized by the caller's method
// (g4_eq_quant_fn) on the scaled weights, with the statistics of the scaled input (H ->
// S^-1 H S^-1, mean x^2 -> / s^2, mean x -> / s, covariance directions -> / s), and its
// layer-output error on the calibration inputs e = sum_n d_n^T H' d_n (d = dequantized codes
// minus the scaled weights: the exact squared output error of the calibration rows, methods.h
// g4_q4_out_err) divided by the same method's error at alpha = 0; the alpha of the least sum
// over the members wins (ties: the smaller). alpha = 0 is the method itself, so no group's
// calibration error rises.
// Wide linears are searched on a subset of their output columns (every N / cols-th; all of
// them when K^2 N <= G4_EQ_SEARCH_WORK), the final quantization is of all columns.
#ifndef G4_QUANT_EQUALIZE_H
#define G4_QUANT_EQUALIZE_H

#include <stdint.h>

#define G4_EQ_MAX_MEMBERS 3
#define G4_EQ_N_ALPHA     11   // alpha = i / 10, i = 0 .. 10
#define G4_EQ_CLAMP       16.0 // s within [1/16, 16]: a norm weight grows by at most 16x
#define G4_EQ_SEARCH_WORK 4e9  // multiply-adds of one member's error per alpha (K^2 x columns)
#define G4_EQ_MIN_COLS    256  // ... but at least this many columns (or all)

// One quantization the search (or the final write) asks of the method.
typedef struct {
    const char *name; // the weight's name (for messages)
    const void *w;    // W [K, N] row-major: the package's fp16 (s = 1) or the scaled fp32
    int dtype;        // G4_DT_FLOAT16 or G4_DT_FLOAT
    int K, N;
    const float *H;    // [K, K] X^T X of the (scaled) input, read only
    const float *imp;  // [K] the group's importance (mean x^2) of the scaled input, or NULL
    const float *mean; // [K] its mean x, or NULL
    const float *V;    // [r][K] its covariance directions (methods.h g4_cov_dirs), or NULL
    int r;
} g4_eq_qin;

// Quantizes in->w into the MatMulNBits arrays (q4.h layout, block 32) by the user's method.
typedef int (*g4_eq_quant_fn)(void *ctx, const g4_eq_qin *in, uint8_t *q, uint16_t *scales,
                              uint8_t *zp);

typedef struct {
    int n; // members, 1 .. G4_EQ_MAX_MEMBERS
    const char *name[G4_EQ_MAX_MEMBERS];
    const void *w[G4_EQ_MAX_MEMBERS]; // fp16 [K, N[i]] as the package stores it
    int N[G4_EQ_MAX_MEMBERS];
    int K;
    const float *H;          // [K, K] X^T X of the shared input (read only)
    const float *imp, *mean; // [K] what the method reads beside H (imatrix), or NULL
    const float *V;          // [r][K] (imatrix's directions), or NULL
    int r;
    const uint16_t *fold; // [K] the fp16 weights the 1/s go into (a norm), or NULL (fp32, exact)
    const float *Herr;    // [K, K] the matrix the search's error is judged with, or NULL: H
                          // (G4_EQUALIZE_ERR=centred, A/B runs: H less the mean's part)
} g4_eq_group;

typedef struct {
    int alpha_i;               // the pick: alpha = alpha_i / 10
    double err[G4_EQ_N_ALPHA]; // sum over members of e(alpha) / e(0) (err[0] = members with e > 0)
    int cols[G4_EQ_MAX_MEMBERS]; // the columns each member was searched on
    float *s;                    // [K] the picked alpha's scales (all 1 for alpha 0)
    uint16_t *fold;              // [K] the picked fold weights (g->fold given), else NULL
} g4_eq_pick;

// The scales of alpha from X^T X's diagonal h (row stride ld: h[k * ld + k]), with the fold into
// fold[K] (NULL: none; else fold_out[K] gets the new fp16 weights). See the top of the file.
void g4_eq_scales(const float *H, int K, double alpha, const uint16_t *fold, float *s,
                  uint16_t *fold_out);

// The search above; pk's arrays are new (g4_eq_pick_free).
int g4_eq_search(const g4_eq_group *g, g4_eq_quant_fn fn, void *ctx, g4_eq_pick *pk);
void g4_eq_pick_free(g4_eq_pick *pk);

// Member i quantized with row scales s[K] (NULL: none, the method on the package's weights and
// the group's statistics as given, byte for byte) and output-column factors c[N[i]] (NULL:
// none; up_proj: 1 / s of down_proj's equalization).
int g4_eq_quantize(const g4_eq_group *g, int i, const float *s, const float *c, g4_eq_quant_fn fn,
                   void *ctx, uint8_t *q, uint16_t *scales, uint8_t *zp);

// W' [K, ncol] in fp32: s[k] W[k][col[j]] c[col[j]] (s, c NULL: 1; col NULL: j itself) from the
// fp16 w [K, N] (read bytewise: may be unaligned); new memory.
float *g4_eq_scaled_w(const void *w, int K, int N, const int *col, int ncol, const float *s,
                      const float *c);

#endif
