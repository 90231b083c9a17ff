// kquant.h: the k-quant search that made the packages' "Q4_K_M" decoder, ported to C.
//
// Per block of B weights (B = 32): asymmetric uint4 codes with a float scale and a uint4 zero
// point, chosen by a weighted least-squares search over 20 candidate scales (llama.cpp
// make_qkx-style). It is the rule of Olive olive/passes/onnx/kquant_quantization.py
// (_kquant_quantize_cpu), itself taken from onnxruntime
// onnxruntime/python/tools/quantization/neural_compressor/weight_only.py
// (quant_tensor_k_quant_cpu, reached through matmul_nbits_quantizer.py's
// KQuantWeightOnlyQuantConfig). Both run it in numpy float32; kquant.c repeats every numpy
// operation in the same order and precision (including numpy's pairwise summation), so the bytes
// match onnxruntime's output exactly (tests/test_quant.c checks it on onnxruntime-made fixtures).
// The packed layout is the one q4.h draws.
#ifndef G4_KQUANT_H
#define G4_KQUANT_H

#include <stdint.h>

// Largest block the quantizer accepts (the packages use 32).
#define G4_KQUANT_MAX_BLOCK 256

// One block: x[block] -> codes[block] (0..15), the scale (fp32; the file stores its fp16
// rounding) and the zero point (0..15), so that x[i] ~ (codes[i] - zp) * scale.
// block: a power of two in [16, G4_KQUANT_MAX_BLOCK].
void g4_kquant_block(const float *x, int block, uint8_t *codes, float *scale, uint8_t *zp);

// Quantizes a weight W [K, N] (row-major, the fp16 package's "<name>.weight_t" layout; w_dtype
// G4_DT_FLOAT16 or G4_DT_FLOAT, data may be unaligned) into the MatMulNBits arrays:
//   q [N, kb, block/2], scales fp16 [N * kb], zp [N * ceil(kb/2)]  (kb = ceil(K / block);
// the last block of each column is zero-padded, as the Python quantizers pad W).
// Work is split over n_threads threads by column tiles; the output does not depend on it.
int g4_q4_quantize(const void *w, int w_dtype, int K, int N, int block, int n_threads, uint8_t *q,
                   uint16_t *scales, uint8_t *zp);

// The activation-aware form (llama.cpp's imatrix): imp[K] (mean x^2 of each input channel over
// calibration activations, any positive scale) weighs each weight's squared error by its
// channel's importance, so the error lands where inputs are small: per block, the stored form
// (fp16 scale, integer zero point, codes) with the least sum_k imp[k] (wq[k] - w[k])^2 of a
// search over scales around the min/max scale, with the zero points near each, the scales
// refined by least squares, and plain k-quant's own pick among the candidates (so no block's
// weighted error exceeds plain k-quant's). G4_IMATRIX_SEARCH=v1 runs the first search instead
// (plain k-quant's search with weights imp * (rms + |w|), then its candidates' stored forms), for
// A/B runs. Writes the same arrays (plain MatMulNBits); imp NULL is g4_q4_quantize.
int g4_q4_quantize_imp(const void *w, int w_dtype, int K, int N, int block, int n_threads,
                       const float *imp, uint8_t *q, uint16_t *scales, uint8_t *zp);
// The same with mean[K], each input channel's mean x over the same activations (NULL:
// g4_q4_quantize_imp): the error each block minimises is then sum var d^2 + (c + sum mean d)^2
// (d = wq - w, var = imp - mean^2, c = sum mean d of the column's blocks before it, taken in
// order): the output error under inputs of that mean and variance, the covariances left out;
// plain k-quant's pick is still a candidate, and codes are then moved by +-1 where that lowers
// it. Then each block is refit (kquant.c imx_refit, make_qkx's alternation with the weights and
// the mean's / directions' terms): with the codes held, the least-squares scale (fp16) of every
// integer zero point 0..15, the pair of least error kept if it lowers the error, then the codes
// re-chosen at it (nearest + the +-1 moves), kept if lower, up to 3 rounds: no block's error
// rises. G4_IMATRIX_REFIT=k (0..16) refits the search's k best candidates (default 1; 0: no
// refit, the search before, byte for byte; anything else G4_EUSER). With covariance directions
// (g4_q4_quantize_imx_dirs, r > 0; not with the mean alone), then 3 more passes over each column refit every block against the shared terms of all the
// column's other blocks (those after it too), so the column's error never rises
// (G4_IMATRIX_PASSES=p, 1..8 passes in all, default 4; 1: one pass, each block against those
// before it). G4_IMATRIX_SEARCH=diag
// leaves the mean out (A/B runs).
int g4_q4_quantize_imx(const void *w, int w_dtype, int K, int N, int block, int n_threads,
                       const float *imp, const float *mean, uint8_t *q, uint16_t *scales,
                       uint8_t *zp);

// Most directions the search's shared terms take: the mean and up to G4_IMX_MAX_DIRS - 1 of the
// covariance's (64: a block's search holds them in doubles on the stack, padded to 72, 8 x 72 x
// block bytes, 147 KB at block 256).
#define G4_IMX_MAX_DIRS 65
// g4_q4_quantize_imx with r more directions (G4_IMATRIX_RANK=r, api/g4cu_dev_quantize.c):
// dirs [r][K], a factor of the inputs' centred covariance's leading part, C ~ V^T V (V's
// rows the top r eigenvectors times sqrt of their eigenvalues, or any rotation of them:
// methods.h g4_cov_dirs), in the units of imp. Each block then minimises
//   sum var_resid d^2 + (c_0 + sum mean d)^2 + sum_j (c_j + sum v_j d)^2
// (var_resid = imp - mean^2 - sum_j v_j^2, floored at 1e-6 of the mean importance; c_j = sum
// v_j d of the column's blocks before it, carried as the mean's c_0 is): the output error
// E[(x . d)^2] with the covariance's rank-r part kept beside the diagonal. r = 0 is
// g4_q4_quantize_imx, bit for bit (the mean alone: a rank-1 term that is the mean's, not the
// covariance's top direction); r > 0 needs imp, mean and dirs. The search's cost grows with r
// (one multiply-add per weight, candidate and direction: r = 32 ~4.6x r = 0's at K = N = 768).
int g4_q4_quantize_imx_dirs(const void *w, int w_dtype, int K, int N, int block, int n_threads,
                            const float *imp, const float *mean, int r, const float *dirs,
                            uint8_t *q, uint16_t *scales, uint8_t *zp);

// The imatrix search's pieces, shared with gptq_imx (quant/methods.c: the same search on GPTQ's
// compensated weights). g4_imx_prepare: imp[K] (mean x^2) and mean[K] (mean x, or NULL) ->
// *impp [kb * block] (imp over its mean, at least 1e-6; the padding 1e-6; with the mean: the
// variance imp - mean^2) and *mup [kb * block] (the mean over sqrt(mean imp), the padding 0; NULL
// without a mean or under G4_IMATRIX_SEARCH=v1 / diag); free both.
void g4_imx_prepare(const float *imp, const float *mean, int K, int block, float **impp,
                    float **mup);
// The same with r directions dirs [r][K] (g4_q4_quantize_imx_dirs): *mup [(1 + r) * kb * block],
// the mean's row then each direction's (over sqrt(mean imp), the padding 0), *impp the variance
// left after them; r = 0 is g4_imx_prepare.
void g4_imx_prepare_dirs(const float *imp, const float *mean, int K, int block, int r,
                         const float *dirs, float **impp, float **mup);
// One block x[n] (16 <= n <= G4_KQUANT_MAX_BLOCK) searched with imp[n] / mu[n] (mu NULL: no mean
// term) from g4_imx_prepare: codes, scale and zero point as g4_q4_quantize_imx picks them;
// *bias: sum mu d of the column's blocks before (in) and with this one (out); scratch: 4n floats.
void g4_imx_block(const float *x, int n, const float *imp, const float *mu, double *bias,
                  uint8_t *codes, float *scale, uint8_t *zp, float *scratch);
// Every (stored scale, zero point) g4_imx_block judges, in its order (k-quant's pick first,
// e = INFINITY when its scale is not a positive finite fp16), with its error e (kquant.c
// imx_err, the codes rounded to nearest); g4_imx_block takes the first least e. Returns the
// count.
#define G4_IMX_MAX_CANDS 192
typedef struct {
    float s; // an fp16 value
    int z;
    double e;
} g4_imx_cand;
int g4_imx_candidates(const float *x, int n, const float *imp, const float *mu, double bias,
                      g4_imx_cand *c, float *scratch);

#endif
