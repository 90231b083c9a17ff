// gemm_q4.c: reference y = x @ W for MatMulNBits Q4 weights (the oracle of gemm_q4.cu): each
// column dequantized to fp32, then accumulated in fp32 in k order; the columns are split over
// threads (base/parallel.h), each one whole on one thread, so any thread count gives the same bits.
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/parallel.h"
#include "kernels/ref/ref.h"

//  MatMulNBits, 4 bits, block B along K, for output column n:
//    q:      [N][K/B][B/2] bytes; byte j of a block holds element 2j (low nibble) and 2j+1 (high)
//    scales: [N][K/B] fp16
//    zp:     [N][ceil(K/B / 2)] bytes; block 2j in the low nibble, 2j+1 in the high
//    W[k][n] = (q(k, n) - zp(k/B, n)) * scale(k/B, n)
void ref_q4_dequant_col(float *w_col, const uint8_t *q, const uint16_t *scales, const uint8_t *zp,
                        int K, int block, int n) {
    g4_ref_init();
    const int kb = (K + block - 1) / block, blob = block / 2, zrow = (kb + 1) / 2;
    for (int b = 0; b < kb; b++) {
        const uint8_t *blk = q + ((size_t)n * kb + b) * blob;
        const float s = ref_h2f(scales[(size_t)n * kb + b]);
        const uint8_t zb = zp ? zp[(size_t)n * zrow + b / 2] : 0x88; // default zero point 8
        const int z = (b & 1) ? zb >> 4 : zb & 15;
        for (int i = 0; i < block && b * block + i < K; i++) {
            const int v = (i & 1) ? blk[i / 2] >> 4 : blk[i / 2] & 15;
            w_col[b * block + i] = (float)(v - z) * s;
        }
    }
}

typedef struct {
    float *y;
    const float *x;
    const uint8_t *q, *zp;
    const uint16_t *scales, *bias;
    int T, K, N, block, accumulate;
} linear_q4_job;

// Output columns [n0, n1) of every row: each column dequantized once, then dotted in k order.
static void linear_q4_cols(void *ctx, int n0, int n1) {
    const linear_q4_job *j = ctx;
    const int K = j->K, N = j->N;
    float *col = g4_malloc(sizeof(float) * (size_t)K);
    for (int n = n0; n < n1; n++) {
        ref_q4_dequant_col(col, j->q, j->scales, j->zp, K, j->block, n);
        for (int t = 0; t < j->T; t++) {
            const float *xr = j->x + (size_t)t * K;
            float acc = j->bias ? ref_h2f(j->bias[n]) : 0.0f;
            for (int k = 0; k < K; k++) acc += xr[k] * col[k];
            float *yv = j->y + (size_t)t * N + n;
            *yv = j->accumulate ? *yv + acc : acc;
        }
    }
    free(col);
}

void ref_linear_q4(float *y, const float *x, const uint8_t *q, const uint16_t *scales,
                   const uint8_t *zp, const uint16_t *bias, int T, int K, int N, int block,
                   int accumulate) {
    g4_ref_init();
    linear_q4_job j = {y, x, q, zp, scales, bias, T, K, N, block, accumulate};
    g4_parallel_for(N, (double)(T + 1) * K, linear_q4_cols, &j);
}
