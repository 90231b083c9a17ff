// gemm_q4.c: reference y = x @ W for MatMulNBits Q4 weights (the oracle of gemm_q4.cu): each
// column dequantized to fp32, then accumulated in fp32 in k order.
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
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

void ref_linear_q4(float *y, const float *x, const uint8_t *q, const uint16_t *scales,
                   const uint8_t *zp, const uint16_t *bias, int T, int K, int N, int block,
                   int accumulate) {
    g4_ref_init();
    float *col = g4_malloc(sizeof(float) * (size_t)K);
    for (int n = 0; n < N; n++) {
        ref_q4_dequant_col(col, q, scales, zp, K, block, n);
        for (int t = 0; t < T; t++) {
            const float *xr = x + (size_t)t * K;
            float acc = bias ? ref_h2f(bias[n]) : 0.0f;
            for (int k = 0; k < K; k++) acc += xr[k] * col[k];
            float *yv = y + (size_t)t * N + n;
            *yv = accumulate ? *yv + acc : acc;
        }
    }
    free(col);
}
