// conv_sscp.c: reference audio subsampling layer (SSCP, spec 5.3; HF
// Gemma4AudioSubSampleConvProjectionLayer): mask, conv 3x3 stride 2 pad 1, LayerNorm over the
// channels (weight only), ReLU. Batch 1, NCHW as HF. Sums in double.
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "kernels/ref/ref.h"

void ref_sscp_conv(float *y, const float *x, const uint8_t *valid, const uint16_t *w,
                   const uint16_t *ln_w, int C_in, int H, int W, int C_out, float eps) {
    g4_ref_init();
    const int Ho = (H + 1) / 2, Wo = (W + 1) / 2;
    double *acc = g4_malloc(sizeof(double) * (size_t)C_out);
    for (int oh = 0; oh < Ho; oh++)
        for (int ow = 0; ow < Wo; ow++) {
            for (int co = 0; co < C_out; co++) {
                double s = 0;
                for (int ci = 0; ci < C_in; ci++)
                    for (int ky = 0; ky < 3; ky++) {
                        const int ih = 2 * oh + ky - 1;
                        if (ih < 0 || ih >= H || (valid && !valid[ih])) continue; // pad / masked
                        for (int kx = 0; kx < 3; kx++) {
                            const int iw = 2 * ow + kx - 1;
                            if (iw < 0 || iw >= W) continue;
                            const float xv = x[((size_t)ci * H + ih) * W + iw];
                            const float wv =
                                ref_h2f(w[(((size_t)co * C_in + ci) * 3 + ky) * 3 + kx]);
                            s += (double)xv * wv;
                        }
                    }
                acc[co] = s;
            }
            // LayerNorm over channels: mean-subtracting, biased variance, no bias.
            double mean = 0, var = 0;
            for (int co = 0; co < C_out; co++) mean += acc[co];
            mean /= C_out;
            for (int co = 0; co < C_out; co++) var += (acc[co] - mean) * (acc[co] - mean);
            var /= C_out;
            const double inv = 1.0 / sqrt(var + (double)eps);
            for (int co = 0; co < C_out; co++) {
                const double n = (acc[co] - mean) * inv * ref_h2f(ln_w[co]);
                y[((size_t)co * Ho + oh) * Wo + ow] = n > 0 ? (float)n : 0.0f; // ReLU
            }
        }
    free(acc);
}
