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

// Output columns [n0, n1) of every row.
static void linear_f16_cols(void *ctx, int n0, int n1) {
    const linear_f16_job *j = ctx;
    const int K = j->K, N = j->N, w = n1 - n0;
    float *acc = g4_malloc(sizeof(float) * (size_t)w);
    for (int t = 0; t < j->T; t++) {
        const float *xr = j->x + (size_t)t * K;
        for (int n = 0; n < w; n++) acc[n] = j->bias ? ref_h2f(j->bias[n0 + n]) : 0.0f;
        for (int k = 0; k < K; k++) {
            const float xv = xr[k];
            const uint16_t *wr = j->w + (size_t)k * N + n0;
            for (int n = 0; n < w; n++) acc[n] += xv * ref_h2f(wr[n]);
        }
        float *yr = j->y + (size_t)t * N + n0;
        for (int n = 0; n < w; n++) yr[n] = j->accumulate ? yr[n] + acc[n] : acc[n];
    }
    free(acc);
}

void ref_linear_f16(float *y, const float *x, const uint16_t *w, const uint16_t *bias, int T, int K,
                    int N, int accumulate) {
    g4_ref_init();
    linear_f16_job j = {y, x, w, bias, T, K, N, accumulate};
    g4_parallel_for(N, (double)T * K, linear_f16_cols, &j);
}
