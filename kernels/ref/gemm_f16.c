// gemm_f16.c: reference y = x @ W for fp16 [K, N] weights (the oracle of gemm_f16.cu; the Q4
// form is gemm_q4.c). Accumulates in fp32 in k order (as a plain fp32 matmul does). The columns
// are split over threads (base/parallel.h): each y[t][n] is one thread's, summed in the same
// order, so any thread count gives the same bits.
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/parallel.h"
#include "kernels/ref/ref.h"

typedef struct {
    float *y;
    const float *x;
    const uint16_t *w, *bias;
    int T, K, N, accumulate;
} linear_f16_job;

// Output columns [n0, n1) of every row. Four rows a pass share each weight's conversion; every
// y[t][n] is still its own fp32 sum in k order (bias first), the same bits as one row a pass.
static void linear_f16_cols(void *ctx, int n0, int n1) {
    const linear_f16_job *j = ctx;
    const int K = j->K, N = j->N, w = n1 - n0;
    float *acc = g4_malloc(sizeof(float) * (size_t)w * 4);
    int t = 0;
    for (; t < j->T; t += 4) {
        const int rows = j->T - t < 4 ? j->T - t : 4;
        for (int r = 0; r < rows; r++)
            for (int n = 0; n < w; n++)
                acc[(size_t)r * w + n] = j->bias ? ref_h2f(j->bias[n0 + n]) : 0.0f;
        if (rows == 4) {
            const float *x0 = j->x + (size_t)t * K, *x1 = x0 + K, *x2 = x1 + K, *x3 = x2 + K;
            float *a0 = acc, *a1 = acc + w, *a2 = a1 + w, *a3 = a2 + w;
            for (int k = 0; k < K; k++) {
                const float v0 = x0[k], v1 = x1[k], v2 = x2[k], v3 = x3[k];
                const uint16_t *wr = j->w + (size_t)k * N + n0;
                for (int n = 0; n < w; n++) {
                    const float wv = ref_h2f(wr[n]);
                    a0[n] += v0 * wv;
                    a1[n] += v1 * wv;
                    a2[n] += v2 * wv;
                    a3[n] += v3 * wv;
                }
            }
        } else {
            for (int r = 0; r < rows; r++) {
                const float *xr = j->x + (size_t)(t + r) * K;
                float *ar = acc + (size_t)r * w;
                for (int k = 0; k < K; k++) {
                    const float xv = xr[k];
                    const uint16_t *wr = j->w + (size_t)k * N + n0;
                    for (int n = 0; n < w; n++) ar[n] += xv * ref_h2f(wr[n]);
                }
            }
        }
        for (int r = 0; r < rows; r++) {
            float *yr = j->y + (size_t)(t + r) * N + n0;
            const float *ar = acc + (size_t)r * w;
            for (int n = 0; n < w; n++) yr[n] = j->accumulate ? yr[n] + ar[n] : ar[n];
        }
    }
    free(acc);
}

void ref_linear_f16(float *y, const float *x, const uint16_t *w, const uint16_t *bias, int T, int K,
                    int N, int accumulate) {
    g4_ref_init();
    linear_f16_job j = {y, x, w, bias, T, K, N, accumulate};
    g4_parallel_for(N, (double)T * K, linear_f16_cols, &j);
}
