// kquant.c: the k-quant block search and the whole-matrix quantizer (see kquant.h).
//
// Port of onnxruntime/python/tools/quantization/neural_compressor/weight_only.py
// ::quant_tensor_k_quant_cpu (microsoft/onnxruntime), identical to Olive
// olive/passes/onnx/kquant_quantization.py::_kquant_quantize_cpu (microsoft/Olive). Every line
// below names the numpy expression it repeats: float32 arithmetic, one rounding per operation (no
// fused multiply-add: this file must build in ISO C mode, where GCC does not contract), np.round
// = round half to even (rint), np.sum = numpy's pairwise sum. Deviations from llama.cpp's
// make_qkx that the Python code has, and so we keep: the running minimum `rmin` is replaced by
// each accepted candidate's offset and the next candidates are built from it; the codes found by
// the search are thrown away and recomputed by round-to-nearest in float64 from the final scale
// and the rounded zero point; a block whose values are all equal gets scale 1.
#include "quant/kquant.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "loader/onnx_model.h"
#include "quant/q4.h"

// np.sum(a, axis=1) over a contiguous float32 row of n values: numpy's pairwise summation
// (numpy/_core/src/umath/loops_utils.h.src, pairwise_sum: 8 accumulators up to 128 values, then
// halves) added to the reduction's initial value 0. The accumulators start from +0 here instead
// of a[0..7]; that changes nothing but the sign of a zero total, which the final 0 + res
// normalises exactly as numpy's initial value does.
static float np_sum(const float *a, int n) {
    if (n < 8) {
        float r = 0.0f;
        for (int i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        float r[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        int i = 0;
        for (; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return 0.0f + res;
    }
    int n2 = n / 2;
    n2 -= n2 % 8;
    return 0.0f + (np_sum(a, n2) + np_sum(a + n2, n - n2));
}

// np.clip(np.round(v), 0, 15) for float32 (NaN passes through, as in numpy).
static float round_clip_f(float v) {
    v = rintf(v); // np.round: half to even (the default rounding mode)
    return v < 0.0f ? 0.0f : v > 15.0f ? 15.0f : v;
}

// .astype("uint8") of a value already clipped to [0, 15]; NaN becomes 0 (what x86 numpy gives).
static uint8_t to_u8(double v) {
    return isnan(v) ? 0 : (uint8_t)v;
}

// scratch: 4 * n floats owned by the caller (one allocation per thread, not per block).
// imp: NULL, or the importance of each of the block's input channels (the activation-aware
// search multiplies each weight of the least-squares fit by it).
static void kquant_block(const float *x, int n, uint8_t *codes, float *scale_out, uint8_t *zp_out,
                         float *scratch, const float *imp) {
    const float maxq = 15.0f; // 2**num_bits - 1; minq = 0
    float *w = scratch, *t = scratch + n, *qv = scratch + 2 * n, *wq = scratch + 3 * n;
    float cs[21] = {0}, cm[21] = {0}; // the search's candidates (imp only)

    for (int i = 0; i < n; i++) t[i] = x[i] * x[i];
    const float sum_x2 = np_sum(t, n);                     // np.sum(data**2, axis=1)
    const float av_x = sqrtf(sum_x2 / (float)n);           // np.sqrt(sum_x2 / group_size)
    for (int i = 0; i < n; i++) w[i] = av_x + fabsf(x[i]); // weights = av_x + |data|
    if (imp)
        for (int i = 0; i < n; i++) w[i] *= imp[i];
    float rmin = x[0], rmax = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < rmin) rmin = x[i];
        if (x[i] > rmax) rmax = x[i];
    }
    const float sum_w = np_sum(w, n);
    for (int i = 0; i < n; i++) t[i] = w[i] * x[i];
    const float sum_x = np_sum(t, n); // np.sum(weights * data)

    // Start: the min-max scale.
    float iscale = 1.0f;
    if (rmin != rmax) iscale = maxq / (rmax - rmin); // (maxq - minq) / (rmax - rmin)
    float scale = 1.0f / iscale;
    for (int i = 0; i < n; i++) qv[i] = round_clip_f(iscale * (x[i] - rmin));
    for (int i = 0; i < n; i++) {
        const float d = scale * qv[i] + rmin - x[i]; // diff = scale*q + rmin - data
        t[i] = w[i] * (d * d);                       // weights * diff**2
    }
    float best_mad = np_sum(t, n);

    // Search: 20 candidate inverse scales (15 - 1 + 0.1 * is) / (rmax - rmin), each refined by
    // the weighted least-squares fit of scale and offset to its codes.
    for (int is = 0; is < 20; is++) {
        // np.array([rrmin + rdelta * is_ + maxq - minq]).astype(float32): Python doubles, then f32
        const float factor = (float)(((-1.0 + 0.1 * (double)is) + 15.0) - 0.0);
        float iscale_new = 1.0f;
        if (rmin != rmax) iscale_new = factor / (rmax - rmin);
        for (int i = 0; i < n; i++) {
            qv[i] = round_clip_f(iscale_new * (x[i] - rmin));
            wq[i] = w[i] * qv[i]; // mul_weights_quant_data_new
        }
        const float sum_l = np_sum(wq, n);
        for (int i = 0; i < n; i++) t[i] = wq[i] * qv[i];
        const float sum_l2 = np_sum(t, n);
        for (int i = 0; i < n; i++) t[i] = wq[i] * x[i];
        const float sum_xl = np_sum(t, n);
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        const float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        const float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        for (int i = 0; i < n; i++) {
            const float d = this_scale * qv[i] + this_min - x[i];
            t[i] = w[i] * (d * d);
        }
        const float mad = np_sum(t, n);
        if (imp) {
            cs[is + 1] = this_scale;
            cm[is + 1] = this_min;
        }
        if (mad < best_mad) { // NaN (D == 0) never wins
            best_mad = mad;
            scale = this_scale;
            rmin = this_min;
        }
    }
    if (imp) {
        // The activation-aware pick: the candidate (and zero point +-1) whose stored form (fp16
        // scale, integer zero point, rounded codes) has the least importance-weighted error;
        // the plain search's continuous offset is lost to the zero point's rounding otherwise.
        double best = INFINITY;
        float bs = scale, bm = rmin;
        for (int c = 0; c < 21; c++) {
            const float sc = c == 0 ? scale : cs[c], mn = c == 0 ? rmin : cm[c];
            if (!(sc != 0) || !isfinite(sc) || !isfinite(mn)) continue;
            const double s16 = g4_f16_to_f32(g4_f32_to_f16(sc));
            const double z0 = rint((double)(-mn) / sc);
            for (int dz = -1; dz <= 1; dz++) {
                const double z = z0 + dz;
                if (z < 0 || z > 15 || s16 == 0) continue;
                double e = 0;
                for (int i = 0; i < n; i++) {
                    double v = rint((double)x[i] / s16 + z);
                    v = v < 0 ? 0 : v > 15 ? 15 : v;
                    const double d = (v - z) * s16 - x[i];
                    e += (double)w[i] * d * d;
                }
                if (e < best) best = e, bs = (float)s16, bm = (float)(-z * s16);
            }
        }
        scale = bs;
        rmin = bm;
    }

    // zero_point = np.clip(((-rmin) / scale).round(), 0, maxq).astype("uint8")
    const uint8_t zp = to_u8(round_clip_f((-rmin) / scale));
    // q = np.clip(np.round(data / float64(scale) + zp), 0, maxq), in float64
    for (int i = 0; i < n; i++) {
        double v = rint((double)x[i] / (double)scale + (double)zp);
        v = v < 0.0 ? 0.0 : v > 15.0 ? 15.0 : v;
        codes[i] = to_u8(v);
    }
    *scale_out = scale;
    *zp_out = zp;
}

// --- the activation-aware search (imatrix) -----------------------------------------------------

// The directions' stride in a block's mu: mu_j,i at mu[i * imx_stride(nd) + j], one weight's
// directions side by side, padded with zeros to a whole number of IMX_CHUNK (imx_err sums them a
// chunk at a time); one direction (or none): stride nd, the mean's row as it always was.
#define IMX_CHUNK 8 // imx_err's named sums c0 .. c7
static int imx_stride(int nd) {
    return nd > 1 ? (nd + IMX_CHUNK - 1) / IMX_CHUNK * IMX_CHUNK : nd;
}

// E = sum_i w_i d_i^2 (+ sum_j (bias_j + sum_i mu_j,i d_i)^2 over nd directions, the mean
// first), d_i = s (q_i - z) - x_i, of the stored form with scale s (an fp16 value) and zero point
// z, the codes rounded to nearest (for a diagonal weighting the best codes for a given s and z,
// one weight at a time); *num / *den: the least-squares scale for those codes (minimising E over
// s). mu: mu_j,i at mu[i * imx_stride(nd) + j]. With nd = 1 (mxp NULL) every operation is the
// one-direction form's, in its order (G4_IMATRIX_RANK=0 stays bit-identical); with more, mxp[nd]
// holds sum mu x and the loop sums only mu l (a third of the work per direction), after the codes,
// IMX_CHUNK directions at a time over the block (each sum still adds its terms in the order
// i = 0, 1, ..: the same bits as one i at a time, with the chunk's sums held in registers).
static double imx_err(const float *x, const double *w, const double *mu, const double *bias, int nd,
                      const double *mxp, int n, double s, int z, double *num, double *den) {
    double e = 0, a = 0, b = 0, t[G4_IMX_MAX_DIRS], ml[G4_IMX_MAX_DIRS], mx[G4_IMX_MAX_DIRS];
    double lv[G4_KQUANT_MAX_BLOCK];
    for (int j = 0; j < nd; j++) t[j] = ml[j] = mx[j] = 0;
    for (int i = 0; i < n; i++) {
        double v = rint((double)x[i] / s + z); // the final codes' expression (kquant_block's)
        v = v < 0 ? 0 : v > 15 ? 15 : v;
        const double l = v - z, d = l * s - x[i];
        e += w[i] * d * d;
        a += w[i] * l * x[i];
        b += w[i] * l * l;
        if (mxp) // several directions: only sum mu l (below)
            lv[i] = l;
        else
            for (int j = 0; j < nd; j++) {
                const double m = mu[(size_t)i * nd + j];
                t[j] += m * d, ml[j] += m * l, mx[j] += m * x[i];
            }
    }
    if (mxp) {
        const int st = imx_stride(nd);
        int j0 = 0;
        for (; j0 + IMX_CHUNK / 2 < nd; j0 += IMX_CHUNK) { // named sums: held in registers
            double c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0, c7 = 0;
            for (int i = 0; i < n; i++) {
                const double *m = mu + (size_t)i * st + j0, l = lv[i];
                c0 += m[0] * l, c1 += m[1] * l, c2 += m[2] * l, c3 += m[3] * l;
                c4 += m[4] * l, c5 += m[5] * l, c6 += m[6] * l, c7 += m[7] * l;
            }
            const double c[IMX_CHUNK] = {c0, c1, c2, c3, c4, c5, c6, c7};
            for (int k = 0; k < IMX_CHUNK && j0 + k < nd; k++) ml[j0 + k] = c[k];
        }
        // a last chunk of at most 4 directions (1 + 32: one) in sums of 4 (the same terms in
        // the same order per direction: the same bits; 8 wide it summed 7 padding zeros'
        // products for the one)
        if (j0 < nd) {
            double c0 = 0, c1 = 0, c2 = 0, c3 = 0;
            for (int i = 0; i < n; i++) {
                const double *m = mu + (size_t)i * st + j0, l = lv[i];
                c0 += m[0] * l, c1 += m[1] * l, c2 += m[2] * l, c3 += m[3] * l;
            }
            const double c[IMX_CHUNK / 2] = {c0, c1, c2, c3};
            for (int k = 0; k < IMX_CHUNK / 2 && j0 + k < nd; k++) ml[j0 + k] = c[k];
        }
        // sum mu d = s sum mu l - sum mu x, the last one per block (imx_search)
        for (int j = 0; j < nd; j++) t[j] = s * ml[j] - mxp[j], mx[j] = mxp[j];
    }
    double nu = a, de = b;
    for (int j = 0; j < nd; j++) {
        nu = nu + ml[j] * (mx[j] - bias[j]), de = de + ml[j] * ml[j];
        e = e + (bias[j] + t[j]) * (bias[j] + t[j]);
    }
    *num = nu, *den = de;
    return e;
}

// imx_search's results at one stored scale s, by zero point (bit z of have: e / num / den[z] set).
#define IMX_MEMO_MAX 63 // distinct scales at most: 21 starts x 3 steps
typedef struct {
    double s;
    unsigned have;
    double e[16], num[16], den[16];
} imx_memo;

// The imatrix block search: the stored form (fp16 scale, integer zero point, rounded codes) with
// the least importance-weighted error E (imx_err), w_i = imp_i: a weight's error reaches the
// linear's output scaled by its input channel's mean x^2 (the diagonal of X^T X), whatever the
// weight's own size. (Measured, held-out mean KLD vs k-quant on two tiny trained models, 9300
// tokens each: imp alone -25.7% / -21.4%, llama.cpp's imp * sqrt(2 mean(x^2) + x^2) -23.0% /
// -20.9%, the first search's imp * (rms(x) + |x|) -23.8% / -20.7%.) The first search ran plain
// k-quant's fit of a continuous offset and rounded it to a zero point afterwards; here every
// candidate is judged in the form the file stores. Candidates: plain k-quant's own pick (so no
// block does worse than plain under E), then 21 scales R / (15 + d), d = -1 .. +1 in steps of
// 0.1, R = max(x, 0) - min(x, 0) (the range a zero point in 0..15 covers), each with the zero
// points round(-min(x, 0) / s) and +-1, each refined twice by the least-squares scale of its best
// zero point's codes (fp16-rounded before use).
// With mu (the channels' mean input, scaled as imp; imp then holds the variance imp - mu^2), E
// adds (bias + sum mu d)^2: the output error of a column is E[(x . d)^2] = sum var d^2 +
// (sum mean d)^2 + the covariances (left out), and with inputs of nonzero mean the errors of a
// column add up coherently in the second term, over all its blocks: *bias carries
// sum mu (wq - w) of the column's blocks before this one, and comes back with this block's
// added. (Measured as above: -25.7% -> -27.2% and -21.4% -> -30.7%.)
// imx_search lists the candidates in the order judged (k-quant's pick first), each stored scale
// and zero point with its E; g4_imx_block takes the first least E (gptq_imx in methods.c may
// re-judge the best few by GPTQ's own error). Returns the count (<= G4_IMX_MAX_CANDS); codes and
// *s0 / *z0: k-quant's pick.
static int imx_search(const float *x, int n, const double *w, const double *mu, const double *bi,
                      int nd, uint8_t *codes, float *s0, uint8_t *z0, float *scratch,
                      g4_imx_cand *c) {
    int nc = 0;
    double num, den, mxb[G4_IMX_MAX_DIRS], *mxp = NULL;
    if (nd > 1) { // sum mu x once per block (one direction: the sums as they always were)
        const int st = imx_stride(nd);
        for (int j = 0; j < nd; j++) {
            mxb[j] = 0;
            for (int i = 0; i < n; i++) mxb[j] += mu[(size_t)i * st + j] * x[i];
        }
        mxp = mxb;
    }
    kquant_block(x, n, codes, s0, z0, scratch, NULL);
    const double ks = g4_round_f16(*s0);
    c[nc++] = (g4_imx_cand){
        (float)ks, *z0,
        ks > 0 && isfinite(ks) ? imx_err(x, w, mu, bi, nd, mxp, n, ks, *z0, &num, &den) : INFINITY};
    float lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    const double R = (double)hi - lo;
    // imx_err is a function of (s16, z) alone within the block, and the least-squares steps
    // often land on a scale judged before (the 3 steps converge; nearby starts meet): each
    // scale's results are kept and a repeat reads them (the same values, no error recomputed)
    imx_memo memo[IMX_MEMO_MAX];
    int nm = 0;
    for (int is = 0; is <= 20 && R > 0; is++) {
        double s = R / (15.0 + (-1.0 + 0.1 * is));
        for (int it = 0; it < 3; it++) {
            const double s16 = g4_round_f16((float)s);
            if (!(s16 > 0) || !isfinite(s16)) break;
            const int zc = (int)fmin(15, fmax(0, rint(-(double)lo / s16)));
            imx_memo *mm = NULL;
            for (int k = 0; k < nm && !mm; k++)
                if (memo[k].s == s16) mm = &memo[k];
            if (!mm && nm < IMX_MEMO_MAX) mm = &memo[nm++], mm->s = s16, mm->have = 0;
            double cbest = INFINITY, cnum = 0, cden = 0;
            for (int z = zc - 1; z <= zc + 1; z++) {
                if (z < 0 || z > 15) continue;
                double e;
                if (mm && (mm->have >> z & 1u))
                    e = mm->e[z], num = mm->num[z], den = mm->den[z];
                else {
                    e = imx_err(x, w, mu, bi, nd, mxp, n, s16, z, &num, &den);
                    if (mm) mm->have |= 1u << z, mm->e[z] = e, mm->num[z] = num, mm->den[z] = den;
                }
                if (e < cbest) cbest = e, cnum = num, cden = den;
                c[nc++] = (g4_imx_cand){(float)s16, z, e};
            }
            if (!(cden > 0)) break;
            s = cnum / cden; // the least-squares scale of the best codes at this scale
        }
    }
    return nc;
}

_Static_assert(G4_IMX_MAX_CANDS >= 1 + 21 * 3 * 3, "imx_search's candidates: 1 + 21 x 3 x 3");

// A block's mu at most (imx_weights): the directions padded to whole chunks, times the block.
#define IMX_MU_MAX ((G4_IMX_MAX_DIRS + IMX_CHUNK - 1) / IMX_CHUNK * IMX_CHUNK * G4_KQUANT_MAX_BLOCK)

// w[n] from imp; mu (imx_err's layout, the padding 0) from mup's nd rows, row j at
// mup + j * mstride.
static void imx_weights(const float *imp, const float *mup, int nd, size_t mstride, int n,
                        double *w, double *mu) {
    const int st = imx_stride(nd);
    for (int i = 0; i < n; i++) w[i] = imp[i];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < st; j++)
            mu[(size_t)i * st + j] = j < nd ? mup[(size_t)j * mstride + i] : 0;
}

int g4_imx_candidates(const float *x, int n, const float *imp, const float *mu, double bias,
                      g4_imx_cand *c, float *scratch) {
    G4_ASSERT(n >= 16 && n <= G4_KQUANT_MAX_BLOCK);
    double w[G4_KQUANT_MAX_BLOCK], mub[G4_KQUANT_MAX_BLOCK];
    uint8_t codes[G4_KQUANT_MAX_BLOCK];
    float s0;
    uint8_t z0;
    const int nd = mu ? 1 : 0;
    const double bi = mu ? bias : 0;
    imx_weights(imp, mu, nd, 0, n, w, mub);
    return imx_search(x, n, w, mub, &bi, nd, codes, &s0, &z0, scratch, c);
}

// The sweeps' step (imx_codes_at, imx_block_n): code i's - 1 and + 1 moves judged from one
// state, t[nd] the shared terms and mi[nd] the code's mu: *dm / *dp (in: the diagonal term's
// change) += the shared terms' change, sum_j (nt_j^2 - t_j^2) with nt_j = t_j + mi_j (-+ s),
// one term after another in j; nt2[2 j] / nt2[2 j + 1]: nt_j of the - 1 / + 1 move. split: each
// term added as + nt^2 then - t^2 (imx_block_n's order) rather than + (nt^2 - t^2). Two
// independent sums in one loop: its time is the chain of adds, now shared by the two moves
// (bench/NOTES.md "`g4cu quantize --imatrix` faster, the same bytes"; SSE2 pairs of the two
// sums measured no faster on a shared 2-core machine: left out).
static inline void imx_two_moves(const double *t, const double *mi, int nd, double s, int split,
                                 double *dm, double *dp, double *nt2) {
    double a = *dm, b = *dp;
    for (int j = 0; j < nd; j++) {
        const double tt = t[j] * t[j], m = t[j] + mi[j] * -s, p = t[j] + mi[j] * s;
        nt2[2 * j] = m, nt2[2 * j + 1] = p;
        if (split)
            a = a + m * m, b = b + p * p, a = a - tt, b = b - tt;
        else
            a += m * m - tt, b += p * p - tt;
    }
    *dm = a, *dp = b;
}

// A sweep's start at (s, z): the codes rounded to nearest (nearest 1) or as given, d[n] each
// weight's error (q - z) s - x, t[nd] = bias + sum_i mu_i d_i (imx_codes_at, imx_block_n).
static void imx_sweep_start(const float *x, const double *mu, const double *bias, int nd, int st,
                            int n, double s, int z, int nearest, uint8_t *codes, double *d,
                            double *t) {
    for (int j = 0; j < nd; j++) t[j] = bias[j];
    for (int i = 0; i < n; i++) {
        double v = codes[i];
        if (nearest) {
            v = rint((double)x[i] / s + z);
            v = v < 0.0 ? 0.0 : v > 15.0 ? 15.0 : v;
            codes[i] = to_u8(v);
        }
        d[i] = (v - z) * s - x[i];
        for (int j = 0; j < nd; j++) t[j] += mu[(size_t)i * st + j] * d[i];
    }
}

// The least change of E a sweep's move must make to be taken: below 0 (best NULL: imx_codes_at)
// or below -1e-12 x max(E so far, 1) (imx_block_n's; *best is E so far).
static inline double imx_move_floor(const double *best) {
    return best ? -1e-12 * (*best > 0 ? *best : 1) : 0;
}

// One code's step of a sweep (imx_codes_at's, imx_block_n's): the code - 1, then + 1 (from the
// state the first move left), each taken where E falls past imx_move_floor. Both are judged from
// one state (imx_two_moves); the + 1 move is judged again, alone, where the - 1 move was taken
// (the same expressions and order as one move at a time, so the same bits). d: the weight's
// error (q - z) s - x, t[nd] the shared terms, mi[nd] the weight's mu, wi its importance; split
// as imx_two_moves's (the re-judged + 1 move's sum in the same order); best: NULL, or E so far
// (moved with each move taken). Returns 1 when the code moved.
static inline int imx_move_code(uint8_t *code, double *d, double *t, const double *mi, double wi,
                                int nd, double s, int split, double *best) {
    double nt[G4_IMX_MAX_DIRS], nt2[2 * G4_IMX_MAX_DIRS];
    const double ndm = *d - s, ndp = *d + s, dd2 = *d * *d;
    double dm = wi * (ndm * ndm - dd2), dp = wi * (ndp * ndp - dd2);
    imx_two_moves(t, mi, nd, s, split, &dm, &dp, nt2);
    if (*code > 0 && dm < imx_move_floor(best)) {
        --*code, *d = ndm;
        if (best) *best += dm;
        for (int j = 0; j < nd; j++) t[j] = nt2[2 * j];
        const double nd_ = *d + s; // code + 1 from here (back where it was)
        double delta = wi * (nd_ * nd_ - *d * *d);
        for (int j = 0; j < nd; j++) {
            nt[j] = t[j] + mi[j] * s;
            if (split)
                delta = delta + nt[j] * nt[j], delta = delta - t[j] * t[j];
            else
                delta += nt[j] * nt[j] - t[j] * t[j];
        }
        if (delta < imx_move_floor(best)) {
            ++*code, *d = nd_;
            if (best) *best += delta;
            for (int j = 0; j < nd; j++) t[j] = nt[j];
        }
        return 1;
    }
    if (*code < 15 && dp < imx_move_floor(best)) {
        ++*code, *d = ndp;
        if (best) *best += dp;
        for (int j = 0; j < nd; j++) t[j] = nt2[2 * j + 1];
        return 1;
    }
    return 0;
}

// t[nd] += sign x the block's share of the column's shared terms, sum_i mu[i][j] d_i with
// d_i = (q_i - z) s - x_i (the stored form's error); mu in imx_err's layout (stride st).
static void imx_add_share(const float *x, const double *mu, int nd, int st, int n,
                          const uint8_t *codes, double s, int z, double sign, double *t) {
    for (int i = 0; i < n; i++) {
        const double d = sign * (((double)codes[i] - z) * s - x[i]);
        for (int j = 0; j < nd; j++) t[j] += mu[(size_t)i * st + j] * d;
    }
}

// E of the stored form (s, z, codes) exactly (imx_err's terms, the codes as given, not
// re-rounded); mu in imx_err's layout (stride st).
static double imx_err_codes(const float *x, const double *w, const double *mu, const double *bias,
                            int nd, int st, int n, const uint8_t *codes, double s, int z) {
    double e = 0, t[G4_IMX_MAX_DIRS];
    for (int j = 0; j < nd; j++) t[j] = bias[j];
    for (int i = 0; i < n; i++) {
        const double d = ((double)codes[i] - z) * s - x[i];
        e += w[i] * d * d;
        for (int j = 0; j < nd; j++) t[j] += mu[(size_t)i * st + j] * d;
    }
    for (int j = 0; j < nd; j++) e += t[j] * t[j];
    return e;
}

// The codes at (s, z): rounded to nearest (nearest 1) or as given (codes in), then (with
// directions) sweeps of +-1 moves that lower E, as imx_block_n's (until none moves, at most
// IMX_SWEEPS); returns E exactly.
#define IMX_SWEEPS 4
static double imx_codes_at(const float *x, const double *w, const double *mu, const double *bias,
                           int nd, int st, int n, double s, int z, int nearest, uint8_t *codes) {
    double d[G4_KQUANT_MAX_BLOCK], t[G4_IMX_MAX_DIRS];
    imx_sweep_start(x, mu, bias, nd, st, n, s, z, nearest, codes, d, t);
    for (int sweep = 0, moved = 1; nd > 0 && moved && sweep < IMX_SWEEPS; sweep++) {
        moved = 0;
        for (int i = 0; i < n; i++)
            moved |= imx_move_code(&codes[i], &d[i], t, mu + (size_t)i * st, w[i], nd, s, 0, NULL);
    }
    return imx_err_codes(x, w, mu, bias, nd, st, n, codes, s, z);
}

// The refit after the search (k-quant's make_qkx alternation, with the importance and the
// directions): with the codes held, E is a quadratic in the scale for each integer zero point
// (d_i = s (q_i - z) - x_i): its least-squares scale (fp16-rounded) for every z in 0..15, the
// pair of least E kept if it lowers E; then the codes re-chosen at that pair (rounded to nearest
// and swept, or the held codes swept), kept if that lowers E; at most IMX_REFITS rounds. Every
// step is taken only where E, computed exactly, falls: no block's E rises. *s / *z / codes in
// and out; returns E.
#define IMX_REFITS 3

// imx_refit's sums that do not depend on the codes: sum w, w x, w x^2 and per direction sum mu,
// mu x, each added in the order i = 0, 1, .. as the round's loop added them (the same bits),
// once per block rather than once per round of each refit (the search's and the 3 later
// passes': up to 12 times).
typedef struct {
    double Sw, Swx, Swxx, M1[G4_IMX_MAX_DIRS], Mx[G4_IMX_MAX_DIRS];
} imx_fixed;

static void imx_fixed_sums(const float *x, const double *w, const double *mu, int nd, int st, int n,
                           imx_fixed *f) {
    double Sw = 0, Swx = 0, Swxx = 0;
    for (int j = 0; j < nd; j++) f->M1[j] = f->Mx[j] = 0;
    for (int i = 0; i < n; i++) {
        const double xi = x[i];
        Sw += w[i], Swx += w[i] * xi, Swxx += w[i] * xi * xi;
        for (int j = 0; j < nd; j++) {
            const double m = mu[(size_t)i * st + j];
            f->M1[j] += m, f->Mx[j] += m * xi;
        }
    }
    f->Sw = Sw, f->Swx = Swx, f->Swxx = Swxx;
}

static double imx_refit(const float *x, const double *w, const double *mu, const double *bias,
                        int nd, int st, int n, const imx_fixed *f, double *s, int *z,
                        uint8_t *codes) {
    double cur = imx_err_codes(x, w, mu, bias, nd, st, n, codes, *s, *z);
    // the pairs whose nearest codes were judged in this call: imx_codes_at from nearest is a
    // function of (s, z) alone here, and cur never rises, so a pair judged before cannot win
    // again (it won then and cur is at most its E, or it lost to a cur no lower than now's)
    double seen_s[IMX_REFITS];
    int seen_z[IMX_REFITS], n_seen = 0;
    for (int rd = 0; rd < IMX_REFITS; rd++) {
        const double Sw = f->Sw, Swx = f->Swx, Swxx = f->Swxx, *M1 = f->M1, *Mx = f->Mx;
        double Swq = 0, Swqq = 0, Swqx = 0, Mq[G4_IMX_MAX_DIRS];
        for (int j = 0; j < nd; j++) Mq[j] = 0;
        for (int i = 0; i < n; i++) {
            const double q = codes[i], xi = x[i];
            Swq += w[i] * q, Swqq += w[i] * q * q, Swqx += w[i] * q * xi;
            for (int j = 0; j < nd; j++) Mq[j] += mu[(size_t)i * st + j] * q;
        }
        double be = INFINITY, bs = 0;
        int bz = 0;
        for (int zz = 0; zz <= 15; zz++) {
            const double A = Swqx - zz * Swx, B = Swqq - 2.0 * zz * Swq + (double)zz * zz * Sw;
            double num = A, den = B;
            for (int j = 0; j < nd; j++) {
                const double ml = Mq[j] - zz * M1[j];
                num += ml * (Mx[j] - bias[j]), den += ml * ml;
            }
            if (!(den > 0)) continue;
            const double s16 = g4_round_f16((float)(num / den));
            if (!(s16 > 0) || !isfinite(s16)) continue;
            double e = s16 * s16 * B - 2 * s16 * A + Swxx;
            for (int j = 0; j < nd; j++) {
                const double r = bias[j] + s16 * (Mq[j] - zz * M1[j]) - Mx[j];
                e += r * r;
            }
            if (e < be) be = e, bs = s16, bz = zz;
        }
        int changed = 0;
        if (be < INFINITY && (bs != *s || bz != *z)) {
            const double e = imx_err_codes(x, w, mu, bias, nd, st, n, codes, bs, bz);
            if (e < cur) cur = e, *s = bs, *z = bz, changed = 1;
        }
        // the codes re-chosen at (*s, *z): from nearest, and (directions) from the held codes
        uint8_t c1[G4_KQUANT_MAX_BLOCK];
        int seen = 0;
        for (int k = 0; k < n_seen; k++) seen |= seen_s[k] == *s && seen_z[k] == *z;
        if (!seen) seen_s[n_seen] = *s, seen_z[n_seen++] = *z;
        for (int from = seen; from < (nd > 0 ? 2 : 1); from++) {
            if (from) memcpy(c1, codes, (size_t)n);
            const double e1 = imx_codes_at(x, w, mu, bias, nd, st, n, *s, *z, !from, c1);
            if (e1 < cur) cur = e1, memcpy(codes, c1, (size_t)n), changed = 1;
        }
        if (!changed) break;
    }
    return cur;
}

// How many of the search's best candidates imx_block_n refits (imx_refit): G4_IMATRIX_REFIT=k,
// 0..IMX_REFIT_MAX (A/B runs), default 1 (the best); 0 the search before the refit, byte for
// byte.
#define IMX_REFIT_DEFAULT 1
#define IMX_REFIT_MAX     16

// g4_imx_block with nd directions (mup's rows j at mup + j * mstride; bias[nd]); refit: how
// many of the search's best candidates imx_refit refines after the search (0: none); fix: NULL,
// or where the block's imx_fixed sums go (for the later passes' imx_block_again).
static void imx_block_n(const float *x, int n, const float *imp, const float *mup, int nd,
                        size_t mstride, double *bias, uint8_t *codes, float *scale_out,
                        uint8_t *zp_out, float *scratch, int refit, imx_fixed *fix) {
    G4_ASSERT(n >= 16 && n <= G4_KQUANT_MAX_BLOCK && nd >= 0 && nd <= G4_IMX_MAX_DIRS);
    double w[G4_KQUANT_MAX_BLOCK], mu[IMX_MU_MAX];
    imx_weights(imp, mup, nd, mstride, n, w, mu);
    const int st = imx_stride(nd);
    imx_fixed own;
    if (!fix) fix = &own;
    if (refit || fix != &own) imx_fixed_sums(x, w, mu, nd, st, n, fix);
    g4_imx_cand cand[G4_IMX_MAX_CANDS];
    float s0;
    uint8_t z0;
    double best = INFINITY, bs = 0;
    int bz = 0;
    const int nc = imx_search(x, n, w, mu, bias, nd, codes, &s0, &z0, scratch, cand);
    for (int k = 0; k < nc; k++) // the first least E (NaN never)
        if (cand[k].e < best) best = cand[k].e, bs = cand[k].s, bz = cand[k].z;
    if (!(best < INFINITY)) { // nothing finite (an all-zero or non-finite block): plain's pick
        *scale_out = s0, *zp_out = z0;
        imx_add_share(x, mu, nd, st, n, codes, g4_round_f16(s0), z0, 1.0, bias);
        return;
    }
    const double bs0 = bs;
    const int bz0 = bz;
    double d[G4_KQUANT_MAX_BLOCK], t[G4_IMX_MAX_DIRS];
    imx_sweep_start(x, mu, bias, nd, st, n, bs, bz, 1, codes, d, t);
    // With the directions' terms the nearest code is no longer best one weight at a time: two
    // sweeps move codes by +-1 where that lowers E (the diagonal part rises, the shared terms
    // fall).
    for (int sweep = 0; nd > 0 && sweep < 2; sweep++)
        for (int i = 0; i < n; i++)
            imx_move_code(&codes[i], &d[i], t, mu + (size_t)i * st, w[i], nd, bs, 1, &best);
    if (refit) {
        double be = imx_refit(x, w, mu, bias, nd, st, n, fix, &bs, &bz, codes);
        // the next refit - 1 candidates of least E (distinct stored pairs, in the order judged
        // on ties) refit too, from their own codes: the candidates were ranked by nearest codes,
        // which the directions' terms and the refit can reorder
        uint8_t used[G4_IMX_MAX_CANDS] = {0}, c2[G4_KQUANT_MAX_BLOCK];
        for (int k = 0; k < nc; k++) used[k] = cand[k].s == (float)bs0 && cand[k].z == bz0;
        for (int extra = 1; extra < refit; extra++) {
            int kb = -1;
            for (int k = 0; k < nc; k++)
                if (!used[k] && cand[k].e < INFINITY && (kb < 0 || cand[k].e < cand[kb].e)) kb = k;
            if (kb < 0) break;
            for (int k = 0; k < nc; k++)
                used[k] |= cand[k].s == cand[kb].s && cand[k].z == cand[kb].z;
            double s2 = cand[kb].s;
            int z2 = cand[kb].z;
            imx_codes_at(x, w, mu, bias, nd, st, n, s2, z2, 1, c2);
            const double e2 = imx_refit(x, w, mu, bias, nd, st, n, fix, &s2, &z2, c2);
            if (e2 < be) be = e2, bs = s2, bz = z2, memcpy(codes, c2, (size_t)n);
        }
        for (int j = 0; j < nd; j++) t[j] = bias[j];
        imx_add_share(x, mu, nd, st, n, codes, bs, bz, 1.0, t);
    }
    for (int j = 0; j < nd; j++) bias[j] = t[j];
    *scale_out = (float)bs;
    *zp_out = (uint8_t)bz;
}

// A later pass over a column (G4_IMATRIX_PASSES): block x[n] (its codes, *s, *z from the pass
// before) refit (imx_refit) against the other blocks' shared terms, T minus its own: T[nd] (the
// column's sum mu d over all its blocks) in, and out with this block's new share. The error
// minimised is then the column's whole E less the other blocks' diagonal terms, so a pass never
// raises the column's E.
// fix: the block's imx_fixed sums (imx_block_n's).
static void imx_block_again(const float *x, int n, const float *imp, const float *mup, int nd,
                            size_t mstride, const imx_fixed *fix, double *T, uint8_t *codes,
                            float *s_io, uint8_t *z_io) {
    G4_ASSERT(n >= 16 && n <= G4_KQUANT_MAX_BLOCK && nd >= 1 && nd <= G4_IMX_MAX_DIRS);
    double w[G4_KQUANT_MAX_BLOCK], mu[IMX_MU_MAX], other[G4_IMX_MAX_DIRS];
    imx_weights(imp, mup, nd, mstride, n, w, mu);
    const int st = imx_stride(nd);
    double s = *s_io;
    int z = *z_io;
    for (int j = 0; j < nd; j++) other[j] = T[j];
    imx_add_share(x, mu, nd, st, n, codes, s, z, -1.0, other);
    imx_refit(x, w, mu, other, nd, st, n, fix, &s, &z, codes);
    imx_add_share(x, mu, nd, st, n, codes, s, z, 1.0, other);
    for (int j = 0; j < nd; j++) T[j] = other[j];
    *s_io = (float)s, *z_io = (uint8_t)z;
}

void g4_imx_block(const float *x, int n, const float *imp, const float *mup, double *bias,
                  uint8_t *codes, float *scale_out, uint8_t *zp_out, float *scratch) {
    imx_block_n(x, n, imp, mup, mup ? 1 : 0, 0, bias, codes, scale_out, zp_out, scratch, 0, NULL);
}

void g4_kquant_block(const float *x, int block, uint8_t *codes, float *scale, uint8_t *zp) {
    G4_ASSERT(block >= 16 && block <= G4_KQUANT_MAX_BLOCK && (block & (block - 1)) == 0);
    float *scratch = g4_calloc(4 * (size_t)block, sizeof(float));
    kquant_block(x, block, codes, scale, zp, scratch, NULL);
    free(scratch);
}

// --- whole matrix -------------------------------------------------------------------------------

#define TILE 32 // columns gathered per pass: rows of W are read 64 bytes at a time
// The imatrix search's tiles: its ~8 us of CPU a weight (31 directions) make a tile of 32
// columns at K 768 ~200 ms, and the tiles of a linear few (N 768: 24 tiles, 2 rounds on 14
// threads with 10 of them busy in the second); 8 columns a tile, handed out in order to
// whichever thread is free, leave at most one small tile's time of idling (the gather reads
// 16 bytes of a row where it read 64: nothing beside the search)
#define TILE_IMX 8

typedef struct {
    const uint8_t *w;
    int dtype, K, N, block, kb;
    uint8_t *q;
    uint16_t *scales;
    uint8_t *zp;
    const float *imp; // [kb * block] channel importance (padding: the floor), or NULL
    int imx_v1;       // 1: imp through the first imatrix search (G4_IMATRIX_SEARCH=v1)
    const float *mu;  // [nd][kb * block] the mean, then the covariance's directions (padding 0),
                      // or NULL; imp is then the variance left
    int nd;           // mu's rows (0 without mu)
    int refit;        // the search's best candidates refit per imatrix block (imx_refit), or 0
    int passes;       // imatrix with directions: passes over each column (imx_block_again)
    int tile_w;       // columns per tile (TILE, TILE_IMX)
    atomic_int *next; // the next tile not yet taken (shared by all the threads' jobs)
} kq_job;

static float load_w(const kq_job *j, uint64_t i) {
    if (j->dtype == G4_DT_FLOAT16) {
        uint16_t h;
        memcpy(&h, j->w + 2 * i, 2);
        return g4_f16_to_f32(h);
    }
    float f;
    memcpy(&f, j->w + 4 * i, 4);
    return f;
}

static void *kq_worker(void *arg) {
    const kq_job *j = arg;
    const int B = j->block, kb = j->kb, padded = kb * B, zrow = g4_q4_zp_row_bytes(kb);
    const int tw = j->tile_w;
    float *cols = g4_calloc((size_t)tw * (size_t)padded, sizeof(float)); // [tw][padded]
    float *scratch = g4_calloc(4 * (size_t)B, sizeof(float));
    uint8_t *ccodes = g4_malloc((size_t)padded), *zcodes = g4_malloc((size_t)kb);
    float *cscale = g4_malloc(sizeof(float) * (size_t)kb);
    const int again = j->imp && !j->imx_v1 && j->nd > 1 && j->passes > 1;      // later passes
    imx_fixed *fix = again ? g4_malloc(sizeof(imx_fixed) * (size_t)kb) : NULL; // [kb]
    const int n_tiles = (j->N + tw - 1) / tw;
    // tiles taken in order by whichever thread is free: which thread computes a column does not
    // change its bytes (each column alone, the same operations)
    for (int tile; (tile = atomic_fetch_add(j->next, 1)) < n_tiles;) {
        const int n0 = tile * tw, nt = j->N - n0 < tw ? j->N - n0 : tw;
        for (int k = 0; k < j->K; k++) // gather W[:, n0..n0+nt) as columns; padding stays 0
            for (int t = 0; t < nt; t++)
                cols[(size_t)t * padded + k] = load_w(j, (uint64_t)k * j->N + n0 + t);
        for (int t = 0; t < nt; t++) {
            const size_t n = (size_t)(n0 + t);
            // sum over the column's blocks so far of mu_j[k] (wq[k] - w[k]), one per direction
            double bias[G4_IMX_MAX_DIRS] = {0};
            for (int b = 0; b < kb; b++) {
                const float *xb = cols + (size_t)t * padded + (size_t)b * B;
                uint8_t *codes = ccodes + (size_t)b * B;
                if (j->imp && !j->imx_v1)
                    imx_block_n(xb, B, j->imp + (size_t)b * B, j->mu ? j->mu + (size_t)b * B : NULL,
                                j->nd, (size_t)padded, bias, codes, &cscale[b], &zcodes[b], scratch,
                                j->refit, fix ? fix + b : NULL);
                else
                    kquant_block(xb, B, codes, &cscale[b], &zcodes[b], scratch,
                                 j->imp ? j->imp + (size_t)b * B : NULL);
            }
            // later passes: each block again against all the others' shared terms (bias now
            // holds the whole column's)
            // (covariance directions only: with the mean alone, a model that leaves every
            // covariance out, the later passes raised the true output error on test_quant's
            // inputs, 68.5 -> 76.0, while with 2 directions they lowered it, 15.9 -> 15.0)
            for (int pass = 1; again && pass < j->passes; pass++)
                for (int b = 0; b < kb; b++)
                    imx_block_again(cols + (size_t)t * padded + (size_t)b * B, B,
                                    j->imp + (size_t)b * B, j->mu + (size_t)b * B, j->nd,
                                    (size_t)padded, fix + b, bias, ccodes + (size_t)b * B,
                                    &cscale[b], &zcodes[b]);
            for (int b = 0; b < kb; b++) {
                g4_q4_pack_block(ccodes + (size_t)b * B, B, j->q + (n * kb + b) * (size_t)(B / 2));
                j->scales[n * kb + b] = g4_f32_to_f16(cscale[b]); // scale.astype(float16)
            }
            g4_q4_pack_zp_row(zcodes, kb, j->zp + n * zrow);
        }
    }
    free(fix);
    free(scratch);
    free(zcodes);
    free(ccodes);
    free(cscale);
    free(cols);
    return NULL;
}

// Passes over each column with covariance directions (imx_block_again; not the mean alone):
// G4_IMATRIX_PASSES=p, 1..IMX_PASSES_MAX (A/B runs), default IMX_PASSES_DEFAULT; 1 is one pass,
// the blocks in order, each against the shared terms of the blocks before it only;
// G4_IMATRIX_REFIT=0 implies 1. Measured (bench/NOTES.md "--imatrix: each block refit after its
// search"; mean KLD vs k-quant, two tiny models x two calibration texts, 16,384 tokens): p = 1
// -47.8 / -45.1 / -49.5 / -46.9%, p = 2 -49.7 / -47.9 / -51.4 / -47.2%, p = 4 -49.9 / -48.1 /
// -51.7 / -47.6%; the search's time at K = N = 768 with 31 directions 1.14x / 1.28x / 1.93x the
// search without the refit.
#define IMX_PASSES_DEFAULT 4
#define IMX_PASSES_MAX     8

// G4_IMATRIX_SEARCH (A/B runs on the proxy, bench/NOTES.md "A better --imatrix search"): v1 the
// first search (kquant_block with imp), diag the stored-form search without the mean term.
static int imx_v1_env(void) {
    return g4_env_is("G4_IMATRIX_SEARCH", "v1");
}

void g4_imx_prepare(const float *imp, const float *mean, int K, int block, float **impp,
                    float **mup) {
    g4_imx_prepare_dirs(imp, mean, K, block, 0, NULL, impp, mup);
}

void g4_imx_prepare_dirs(const float *imp, const float *mean, int K, int block, int r,
                         const float *dirs, float **impp, float **mup) {
    G4_ASSERT(r >= 0 && r < G4_IMX_MAX_DIRS && (r == 0 || (mean && dirs)));
    const size_t padded = (size_t)g4_q4_kblocks(K, block) * (size_t)block;
    double mean_imp = 0;
    for (int k = 0; k < K; k++) mean_imp += imp[k] > 0 ? imp[k] : 0;
    mean_imp = mean_imp > 0 ? mean_imp / K : 1;
    // a channel's weight floor is 1e-6 of the mean, so a dead channel never zeroes a whole
    // block's fit
    float *ip = g4_malloc(sizeof(float) * padded), *mp = NULL;
    for (size_t k = 0; k < padded; k++) {
        const double v = k < (size_t)K && imp[k] > 0 ? imp[k] / mean_imp : 0;
        ip[k] = (float)(v > 1e-6 ? v : 1e-6);
    }
    if (mean && !imx_v1_env() && !g4_env_is("G4_IMATRIX_SEARCH", "diag")) {
        // E[(x . d)^2] = sum var d^2 + (sum mean d)^2 + covariances: the mean of the inputs
        // makes the errors of a column add up coherently, across blocks too; the covariance's
        // r leading directions (dirs, C ~ V V^T) are r more such terms, their share of the
        // diagonal taken out of the variance
        mp = g4_calloc(padded * (size_t)(1 + r), sizeof(float));
        const double sc = 1 / sqrt(mean_imp);
        for (int k = 0; k < K; k++) {
            const double m = mean[k] / sqrt(mean_imp);
            double v = ip[k] - m * m;
            mp[k] = (float)m;
            for (int j = 0; j < r; j++) {
                const double u = dirs[(size_t)j * K + k] * sc;
                mp[(size_t)(1 + j) * padded + k] = (float)u;
                v -= u * u;
            }
            ip[k] = (float)(v > 1e-6 ? v : 1e-6);
        }
    }
    *impp = ip, *mup = mp;
}

int g4_q4_quantize(const void *w, int w_dtype, int K, int N, int block, int n_threads, uint8_t *q,
                   uint16_t *scales, uint8_t *zp) {
    return g4_q4_quantize_imp(w, w_dtype, K, N, block, n_threads, NULL, q, scales, zp);
}

int g4_q4_quantize_imp(const void *w, int w_dtype, int K, int N, int block, int n_threads,
                       const float *imp, uint8_t *q, uint16_t *scales, uint8_t *zp) {
    return g4_q4_quantize_imx(w, w_dtype, K, N, block, n_threads, imp, NULL, q, scales, zp);
}

int g4_q4_quantize_imx(const void *w, int w_dtype, int K, int N, int block, int n_threads,
                       const float *imp, const float *mean, uint8_t *q, uint16_t *scales,
                       uint8_t *zp) {
    return g4_q4_quantize_imx_dirs(w, w_dtype, K, N, block, n_threads, imp, mean, 0, NULL, q,
                                   scales, zp);
}

int g4_q4_quantize_imx_dirs(const void *w, int w_dtype, int K, int N, int block, int n_threads,
                            const float *imp, const float *mean, int r, const float *dirs,
                            uint8_t *q, uint16_t *scales, uint8_t *zp) {
    if (r < 0 || r >= G4_IMX_MAX_DIRS || (r > 0 && (!imp || !mean || !dirs)))
        return g4_fail(G4_EUSER,
                       "k-quant: %d covariance directions, expected 0 to %d (and with "
                       "them the importance and the mean)",
                       r, G4_IMX_MAX_DIRS - 1);
    if (block < 16 || block > G4_KQUANT_MAX_BLOCK || (block & (block - 1)) != 0)
        return g4_fail(G4_EUSER, "k-quant: block size %d, expected a power of two in [16, %d]",
                       block, G4_KQUANT_MAX_BLOCK);
    if (K <= 0 || N <= 0)
        return g4_fail(G4_EUSER, "k-quant: weight [%d, %d], expected positive dims", K, N);
    if (w_dtype != G4_DT_FLOAT16 && w_dtype != G4_DT_FLOAT)
        return g4_fail(G4_EUSER, "k-quant: weight dtype %s, expected float16 or float32",
                       g4_dtype_name(w_dtype));
    int refit = 0, passes = 1;
    if (imp) {
        int rc = g4_env_int("G4_IMATRIX_REFIT", IMX_REFIT_DEFAULT, 0, IMX_REFIT_MAX, &refit);
        if (rc ||
            (rc = g4_env_int("G4_IMATRIX_PASSES", IMX_PASSES_DEFAULT, 1, IMX_PASSES_MAX, &passes)))
            return rc;
    }
    const int tile_w = imp ? TILE_IMX : TILE, n_tiles = (N + tile_w - 1) / tile_w;
    atomic_int next = 0;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > n_tiles) n_threads = n_tiles;
    float *impp = NULL, *mup = NULL;
    if (imp) g4_imx_prepare_dirs(imp, mean, K, block, r, dirs, &impp, &mup);
    const int imx_v1 = imp && imx_v1_env();
    kq_job *jobs = g4_calloc((size_t)n_threads, sizeof *jobs);
    pthread_t *tid = g4_calloc((size_t)n_threads, sizeof *tid);
    int *joinable = g4_calloc((size_t)n_threads, sizeof *joinable);
    for (int i = 0; i < n_threads; i++) {
        jobs[i] = (kq_job){.w = (const uint8_t *)w,
                           .dtype = w_dtype,
                           .K = K,
                           .N = N,
                           .block = block,
                           .kb = g4_q4_kblocks(K, block),
                           .q = q,
                           .scales = scales,
                           .zp = zp,
                           .imp = impp,
                           .imx_v1 = imx_v1,
                           .mu = mup,
                           .nd = mup ? 1 + r : 0,
                           .refit = refit,
                           .passes = refit ? passes : 1, // REFIT=0: the search before
                           .tile_w = tile_w,
                           .next = &next};
        if (i == 0) continue; // the calling thread takes tiles too
        // (a thread that does not start leaves its tiles to the others: the same output)
        joinable[i] = pthread_create(&tid[i], NULL, kq_worker, &jobs[i]) == 0;
    }
    kq_worker(&jobs[0]);
    for (int i = 1; i < n_threads; i++)
        if (joinable[i]) pthread_join(tid[i], NULL);
    free(joinable);
    free(tid);
    free(jobs);
    free(impp);
    free(mup);
    return G4_OK;
}
