// conv_dw1d.c: reference causal depthwise conv1d over time (the conformer's LightConv1d, spec
// 5.4; HF Gemma4AudioCausalConv1d with groups = channels, left pad K - 1, no bias). The frames
// are split over threads (base/parallel.h), each output computed whole by one.
#include "base/parallel.h"
#include "kernels/ref/ref.h"

typedef struct {
    float *y;
    const float *x;
    const uint16_t *w;
    int C, K;
} dwconv_job;

// Frames [t0, t1).
static void dwconv_rows(void *ctx, int t0, int t1) {
    const dwconv_job *a = ctx;
    const int C = a->C, K = a->K;
    for (int t = t0; t < t1; t++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int i = 0; i < K; i++) {
                const int src = t - (K - 1) + i;
                if (src >= 0)
                    s += (double)ref_h2f(a->w[(size_t)c * K + i]) * a->x[(size_t)src * C + c];
            }
            a->y[(size_t)t * C + c] = (float)s;
        }
}

void ref_dwconv1d_causal(float *y, const float *x, const uint16_t *w, int T, int C, int K) {
    g4_ref_init();
    dwconv_job a = {y, x, w, C, K};
    g4_parallel_for(T, (double)C * K, dwconv_rows, &a);
}
