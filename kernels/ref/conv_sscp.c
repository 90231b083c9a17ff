// conv_sscp.c: reference audio subsampling layer (SSCP, spec 5.3; HF
// Gemma4AudioSubSampleConvProjectionLayer): mask, conv 3x3 stride 2 pad 1, LayerNorm over the
// channels (weight only), ReLU. Batch 1, NCHW as HF. Sums in double. The output rows are split
// over threads (base/parallel.h), each pixel computed whole by one.
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "base/parallel.h"
#include "kernels/ref/ref.h"

typedef struct {
    float *y;
    const float *x;
    const uint8_t *valid;
    const float *w; // the fp16 weights, converted once: [C_out][C_in][3][3]
    const uint16_t *ln_w;
    int C_in, H, W, C_out;
    float eps;
} sscp_job;

// Output rows oh in [o0, o1), every column and channel. Per pixel the taps inside the image and
// not masked are gathered once (ci, ky, kx ascending, as the sum runs), then each channel's sum
// walks them: the same products in the same order as a loop over every tap that skips the
// padded and masked ones.
static void sscp_rows(void *ctx, int o0, int o1) {
    const sscp_job *a = ctx;
    const int C_in = a->C_in, H = a->H, W = a->W, C_out = a->C_out;
    const int Ho = (H + 1) / 2, Wo = (W + 1) / 2;
    const float *x = a->x;
    double *acc = g4_malloc(sizeof(double) * (size_t)C_out);
    float *patch = g4_malloc(sizeof(float) * (size_t)C_in * 9);
    int *tap = g4_malloc(sizeof(int) * (size_t)C_in * 9);
    for (int oh = o0; oh < o1; oh++)
        for (int ow = 0; ow < Wo; ow++) {
            int n = 0;
            for (int ci = 0; ci < C_in; ci++)
                for (int ky = 0; ky < 3; ky++) {
                    const int ih = 2 * oh + ky - 1;
                    if (ih < 0 || ih >= H || (a->valid && !a->valid[ih])) continue; // pad / masked
                    for (int kx = 0; kx < 3; kx++) {
                        const int iw = 2 * ow + kx - 1;
                        if (iw < 0 || iw >= W) continue;
                        patch[n] = x[((size_t)ci * H + ih) * W + iw];
                        tap[n++] = (ci * 3 + ky) * 3 + kx;
                    }
                }
            // four channels a pass: four independent sums, each still in tap order
            int co = 0;
            for (; co + 4 <= C_out; co += 4) {
                const float *w0 = a->w + (size_t)co * C_in * 9, *w1 = w0 + (size_t)C_in * 9,
                            *w2 = w1 + (size_t)C_in * 9, *w3 = w2 + (size_t)C_in * 9;
                double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                for (int i = 0; i < n; i++) {
                    const double p = patch[i];
                    const int t = tap[i];
                    s0 += p * w0[t];
                    s1 += p * w1[t];
                    s2 += p * w2[t];
                    s3 += p * w3[t];
                }
                acc[co] = s0, acc[co + 1] = s1, acc[co + 2] = s2, acc[co + 3] = s3;
            }
            for (; co < C_out; co++) {
                const float *wc = a->w + (size_t)co * C_in * 9;
                double s = 0;
                for (int i = 0; i < n; i++) s += (double)patch[i] * wc[tap[i]];
                acc[co] = s;
            }
            // LayerNorm over channels: mean-subtracting, biased variance, no bias.
            double mean = 0, var = 0;
            for (int co = 0; co < C_out; co++) mean += acc[co];
            mean /= C_out;
            for (int co = 0; co < C_out; co++) var += (acc[co] - mean) * (acc[co] - mean);
            var /= C_out;
            const double inv = 1.0 / sqrt(var + (double)a->eps);
            for (int co = 0; co < C_out; co++) {
                const double v = (acc[co] - mean) * inv * ref_h2f(a->ln_w[co]);
                a->y[((size_t)co * Ho + oh) * Wo + ow] = v > 0 ? (float)v : 0.0f; // ReLU
            }
        }
    free(tap);
    free(patch);
    free(acc);
}

void ref_sscp_conv(float *y, const float *x, const uint8_t *valid, const uint16_t *w,
                   const uint16_t *ln_w, int C_in, int H, int W, int C_out, float eps) {
    g4_ref_init();
    const size_t nw = (size_t)C_out * C_in * 9;
    float *wf = g4_malloc(sizeof(float) * nw);
    for (size_t i = 0; i < nw; i++) wf[i] = ref_h2f(w[i]);
    sscp_job a = {y, x, valid, wf, ln_w, C_in, H, W, C_out, eps};
    g4_parallel_for((H + 1) / 2, 9.0 * ((W + 1) / 2) * C_in * C_out, sscp_rows, &a);
    free(wf);
}
