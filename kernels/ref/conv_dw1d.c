// conv_dw1d.c: reference causal depthwise conv1d over time (the conformer's LightConv1d, spec
// 5.4; HF Gemma4AudioCausalConv1d with groups = channels, left pad K - 1, no bias).
#include "kernels/ref/ref.h"

void ref_dwconv1d_causal(float *y, const float *x, const uint16_t *w, int T, int C, int K) {
    g4_ref_init();
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int i = 0; i < K; i++) {
                const int src = t - (K - 1) + i;
                if (src >= 0) s += (double)ref_h2f(w[(size_t)c * K + i]) * x[(size_t)src * C + c];
            }
            y[(size_t)t * C + c] = (float)s;
        }
}
