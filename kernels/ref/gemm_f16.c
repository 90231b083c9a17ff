// gemm_f16.c: reference y = x @ W for fp16 [K, N] weights (the oracle of gemm_f16.cu; the Q4
// form is gemm_q4.c). Accumulates in fp32 in k order (as a plain fp32 matmul does).
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/ref/ref.h"

void ref_linear_f16(float *y, const float *x, const uint16_t *w, const uint16_t *bias, int T,
                    int K, int N, int accumulate) {
    g4_ref_init();
    float *acc = g4_malloc(sizeof(float) * (size_t)N);
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * K;
        for (int n = 0; n < N; n++) acc[n] = bias ? ref_h2f(bias[n]) : 0.0f;
        for (int k = 0; k < K; k++) {
            const float xv = xr[k];
            const uint16_t *wr = w + (size_t)k * N;
            for (int n = 0; n < N; n++) acc[n] += xv * ref_h2f(wr[n]);
        }
        float *yr = y + (size_t)t * N;
        for (int n = 0; n < N; n++) yr[n] = accumulate ? yr[n] + acc[n] : acc[n];
    }
    free(acc);
}
