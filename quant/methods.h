// methods.h: the 4-bit quantization methods of `g4cu quantize --method` beside the k-quant
// search (kquant.h). Every method writes the same arrays, plain MatMulNBits (q4.h: block 32,
// fp16 scales, uint4 zero points), so the packages differ in their bytes, never in their layout
// or size; they differ in how each block's scale, zero point and codes are chosen:
//
//   kquant   (default) Olive's / onnxruntime's k-quant search, byte-identical to theirs (kquant.h)
//   rtn      plain round-to-nearest: the block's range [min(x, 0), max(x, 0)] over 15 steps
//   imatrix  per block, the stored scale / zero point / codes with the least output error under
//            inputs of each channel's mean x and mean x^2 on calibration text (sum var d^2 +
//            (sum mean d)^2 along the column), plus up to 32 leading directions of the inputs'
//            covariance as more such terms (sum_j (sum v_j d)^2, from X^T X: where the
//            calibration has 4 tokens per input channel the centred covariance's 32 as
//            measured, elsewhere the correlation matrix's that pass the sampling noise,
//            g4_cov_dirs_shrunk; G4_IMATRIX_RANK, 0 for the mean alone; G4_IMATRIX_SHRINK),
//            from a search over scales around min/max
//            (each with its nearby zero points and a least-squares refinement) that includes
//            k-quant's own pick (kquant.h g4_q4_quantize_imx, g4_q4_quantize_imx_dirs)
//   gptq     GPTQ (Frantar et al. 2022): codes chosen one input channel at a time, each one's
//            rounding error pushed onto the channels not yet quantized through the inverse of
//            H = X^T X (X: the linear's calibration inputs); per-block scale and zero point by
//            min/max shrunk by the factor (1 .. 0.6) with the least H[k][k]-weighted error,
//            taken when the block is reached (or from the original weights with act-order,
//            which visits channels by decreasing H[k][k]); the damping added to H's diagonal
//            chosen per linear on held-out calibration rows by `g4cu quantize` (g4_gptq_cv)
//   gptq_imx GPTQ whose block parameters come from the imatrix search (kquant.h
//            g4_imx_candidates: the same code) run on the block's current, already
//            error-compensated weights with each channel's mean x^2 (the diagonal of X^T X over
//            the rows) as importance, when the sweep reaches the block; the search's 12 best
//            candidates are then re-judged by the error GPTQ's own sweep makes on the block with
//            each (the block's exact share of the layer-output loss, given the channels before
//            it). The search's mean term is left out by default: X^T X already holds the mean's
//            coherent sum (its outer product), which GPTQ's updates carry across blocks
//   fit      each block's scale and zero point (then its codes) chosen to minimise the block's
//            share of the layer-output error ||X W - X Wq||^2, d^T H_bb d with H_bb the block's
//            32 x 32 diagonal block of X^T X; candidates: a grid of scales around min/max, the
//            zero points near each, and k-quant's own pick; then, the scales and zero points
//            fixed, two sweeps over the column's codes move each by +-1 where that lowers the
//            whole column's d^T H d (the cross-block terms included)
//
// H arrives as K x K floats (both triangles; g4_hessian_run in fidelity/sensitivity.h builds it),
// one linear at a time.
#ifndef G4_QUANT_METHODS_H
#define G4_QUANT_METHODS_H

#include <stdint.h>

typedef enum {
    G4_QM_KQUANT = 0,
    G4_QM_RTN = 1,
    G4_QM_IMATRIX = 2,
    G4_QM_GPTQ = 3,
    G4_QM_FIT = 4,
    G4_QM_GPTQ_IMX = 5,
} g4_qmethod;

// "kquant" ... "gptq_imx" -> *out; else a one-line error naming the value and the accepted names.
int g4_qmethod_parse(const char *name, g4_qmethod *out);
const char *g4_qmethod_name(g4_qmethod m);
// 1 for the methods that read calibration inputs (imatrix: mean x^2, mean x; gptq, fit: X^T X;
// gptq_imx: all three).
int g4_qmethod_needs_calib(g4_qmethod m);
// 1 for the methods that need the whole X^T X of each linear (gptq, fit, gptq_imx; imatrix
// reads it too unless G4_IMATRIX_RANK=0, api/g4cu_dev_quantize.c).
int g4_qmethod_needs_hessian(g4_qmethod m);

// One block, round-to-nearest: lo = min(x, 0), hi = max(x, 0), scale = fp16((hi - lo) / 15)
// (at least the smallest fp16 subnormal; 1 for an all-zero block), zp = clip(rint(-lo / scale)),
// codes = clip(rint(x / scale + zp)), all against the stored (fp16) scale.
void g4_rtn_block(const float *x, int block, uint8_t *codes, float *scale, uint8_t *zp);

// The whole-matrix quantizers. w: W [K, N] row-major (fp16 or fp32, G4_DT_*; may be unaligned);
// output arrays as kquant.h g4_q4_quantize (block: a power of two in [16, G4_KQUANT_MAX_BLOCK]).
// They run on g4_threads() threads (base/parallel.h); the output does not depend on the count.
int g4_q4_quantize_rtn(const void *w, int w_dtype, int K, int N, int block, uint8_t *q,
                       uint16_t *scales, uint8_t *zp);

typedef struct {
    float damp;    // added to H's diagonal: damp x mean(diag H) (GPTQ's percdamp; default 0.01)
    int act_order; // 1: channels by decreasing H[k][k], block parameters from the original W
    int minmax;    // 1: block parameters by min/max alone (the paper's); 0 (default): min/max
                   //    shrunk by 1 .. 0.6, the least H[k][k]-weighted error of the rounded block
    // gptq_imx: imp [K], each channel's mean x^2 (X^T X's diagonal; any positive scale), and
    // mean [K], each one's mean x on the same scale (NULL, gptq_imx's default: no mean term):
    // the block parameters by the imatrix search instead of the grid (minmax ignored)
    const float *imp, *mean;
    int screen; // with imp and without act_order: the search's GPTQ_SCREEN best candidates
                // re-judged by GPTQ's own error on the block (gptq_imx's default: 1)
    int imp_diag; // 1 (gptq_imx's default, imp NULL): imp is H's diagonal as given
} g4_gptq_opts;

// H: K x K floats (symmetric), overwritten (its lower triangle and diagonal are kept as the
// input until the end, the upper triangle becomes the Cholesky factor of H^-1). A dead channel
// (H[k][k] = 0) gets H[k][k] = 1. Not positive definite after damping: the damping is raised
// tenfold, up to four times, then an error.
int g4_q4_gptq(const void *w, int w_dtype, int K, int N, int block, float *H,
               const g4_gptq_opts *o, uint8_t *q, uint16_t *scales, uint8_t *zp);

// The layer-output error of quantized arrays (q, scales, zp as g4_q4_gptq writes them) on rows
// whose X^T X is H [K, K] (symmetric floats, read only): tr(dW^T H dW) = ||X (Wq - W)||^2,
// dW = dequant(q) - W (w: G4_DT_FLOAT16 or G4_DT_FLOAT). Each column's d^T H d by
// quad_form.h g4_quad_forms (double), added in column order: any thread count gives the same
// value. NaN with g4_error() set for K < 1 or no H.
double g4_q4_out_err(const void *w, int w_dtype, int K, int N, int block, const uint8_t *q,
                     const uint16_t *scales, const uint8_t *zp, const float *H);

// GPTQ's damping chosen on held-out rows (G4_GPTQ_DAMP=cv, issue 33): Ha, Hb [K, K] (read
// only) the X^T X of two folds of the calibration rows; for each damping of g4_gptq_cv_grid,
// g4_q4_gptq with o (its damp replaced) on Ha scored by g4_q4_out_err on Hb, and on Hb scored
// on Ha; *pick: the grid index of the least sum (the smaller damping on a tie); err (NULL or
// [G4_GPTQ_CV_N]): the sums. 2 G4_GPTQ_CV_N solves and as many error sums; K x K floats and
// one set of Q4 arrays of scratch. Deterministic, any thread count.
#define G4_GPTQ_CV_N 5
extern const float g4_gptq_cv_grid[G4_GPTQ_CV_N]; // 0.01, 0.03, 0.1, 0.3, 1
int g4_gptq_cv(const void *w, int w_dtype, int K, int N, int block, const float *Ha,
               const float *Hb, const g4_gptq_opts *o, int *pick, double *err);

// --imatrix's covariance directions (G4_IMATRIX_RANK=r, kquant.h g4_q4_quantize_imx_dirs): from
// H = X^T X [K, K] (symmetric floats, read only) over rows input rows of mean x mean[K], the
// centred covariance C = H / rows - mean mean^T and its leading rank-r part as V [r][K] with
// C ~ V^T V (V's rows: the top r eigenvectors times sqrt of their eigenvalues, up to a rotation
// among them, which the search's error does not see): a fixed number of subspace (block power)
// iterations in double from a fixed start, then V = Q L with L the Cholesky factor of Q^T C Q
// (a direction with no variance left gets a zero row). Deterministic, any thread count.
int g4_cov_dirs(const float *H, double rows, const float *mean, int K, int r, float *V);
// The same directions from too few rows, shrunk (G4_IMATRIX_SHRINK): the leading r eigenpairs
// of the correlation matrix W C W (W = diag(C)^-1/2), read against the noise a sample of rows
// rows leaves in K channels (the Marchenko-Pastur edge (1 + sqrt(K / rows))^2): the eigenvalues
// inside the edge are dropped, each one beyond it gives its direction the weight its population
// spike would have times the eigenvector's expected overlap with the true one (spiked model).
// V [*kept][K], largest first, C ~ diag + V^T V as g4_cov_dirs's; *kept in 0..r.
int g4_cov_dirs_shrunk(const float *H, double rows, const float *mean, int K, int r, float *V,
                       int *kept);

// H: K x K floats (symmetric), read only.
int g4_q4_fit(const void *w, int w_dtype, int K, int N, int block, const float *H, uint8_t *q,
              uint16_t *scales, uint8_t *zp);

#endif
