// gemm_host.h: host-side inputs and references of the GEMM/GEMV kernel tests
// (tests/test_cuda_gemm.c, test_cuda_gemv.c): seeded random fp16 values, Q4 weights in the
// package layout with the CPU dequantizer's fp16 reference weight, and the magnitude sums the
// accumulation tolerances scale with. Static inline functions.
#ifndef G4_TESTS_GEMM_HOST_H
#define G4_TESTS_GEMM_HOST_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ref/ref.h"
#include "base/base.h"
#include "tests/test_util.h"

// Non-zero random values: uniform in +-[lo, hi] (sign random), or exact small integers.
static inline float rnd_val(unsigned long long *s, float lo, float hi, int exact) {
    if (exact) {
        const int v = (int)(g4t_rand_u64(s) % 4); // -2, -1, 1, 2
        return (float)(v < 2 ? v - 2 : v - 1);
    }
    const float m = g4t_rand_uniform(s, lo, hi);
    return (g4t_rand_u64(s) & 1) ? m : -m;
}

// n random fp16 values, never zero: exact small integers, or sign * 2^e * (1 + m / 1024) with
// e in [elo, elo + 3] (bits drawn directly: 21 random bits per value, fast for 400M weights).
static inline uint16_t *rnd_f16(size_t n, int elo, int exact, unsigned long long *s) {
    uint16_t *a = g4_malloc(n * 2);
    if (exact) {
        for (size_t i = 0; i < n; i++) a[i] = g4_f32_to_f16(rnd_val(s, 0, 0, 1));
        return a;
    }
    for (size_t i = 0; i < n; i += 3) {
        unsigned long long r = g4t_rand_u64(s);
        for (size_t j = i; j < i + 3 && j < n; j++, r >>= 21) {
            const unsigned sign = (unsigned)(r >> 20) & 1, e = (unsigned)(r >> 10) & 3;
            a[j] = (uint16_t)((sign << 15) | ((unsigned)(15 + elo) + e) << 10 | (r & 0x3ff));
        }
    }
    return a;
}

// mag[t][n] = sum_k |x[t][k]| |W[k][n]|: the scale of the accumulation error.
static inline void abs_linear(float *mag, const float *x, const uint16_t *w, int T, int K, int N) {
    for (int t = 0; t < T; t++) {
        float *m = mag + (size_t)t * N;
        for (int n = 0; n < N; n++) m[n] = 0.0f;
        for (int k = 0; k < K; k++) {
            const float xa = fabsf(x[(size_t)t * K + k]);
            const uint16_t *wr = w + (size_t)k * N;
            for (int n = 0; n < N; n++) m[n] += xa * ref_h2f(wr[n] & 0x7fff);
        }
    }
}

// Packs per-column zero points (0..15) into the package layout [N][ceil(kb/2)].
static inline uint8_t *pack_zp(const uint8_t *z, int N, int kb) {
    const int row = (kb + 1) / 2;
    uint8_t *p = g4_calloc((size_t)N * row, 1);
    for (int n = 0; n < N; n++)
        for (int b = 0; b < kb; b++)
            p[(size_t)n * row + b / 2] |= (uint8_t)((z[(size_t)n * kb + b] & 15) << ((b & 1) * 4));
    return p;
}

// A Q4 weight in the package layout (host).
typedef struct {
    uint8_t *q;       // [N][K/32][16]
    uint16_t *scales; // [N][K/32]
    uint8_t *zp;      // [N][K/64]
} q4_host;

static inline void q4_host_make(q4_host *h, int N, int K, int exact, unsigned long long *s) {
    const int kb = K / 32;
    h->q = g4_malloc((size_t)N * K / 2);
    for (size_t i = 0; i < (size_t)N * K / 2; i += 8) {
        const unsigned long long r = g4t_rand_u64(s);
        memcpy(h->q + i, &r, 8); // N * K / 2 is a multiple of 512
    }
    h->scales = g4_malloc((size_t)N * kb * 2);
    uint8_t *z = g4_malloc((size_t)N * kb);
    for (size_t i = 0; i < (size_t)N * kb; i++) {
        // Real scales are small positive fp16 values (max |w| / 15); exact mode: 1/2, 1, 2.
        const float sc =
            exact ? (float)(1 << (g4t_rand_u64(s) % 3)) * 0.5f : g4t_rand_uniform(s, 0.002f, 0.05f);
        h->scales[i] = g4_f32_to_f16(sc);
        z[i] = (uint8_t)(g4t_rand_u64(s) & 15);
    }
    h->zp = pack_zp(z, N, kb);
    free(z);
}

static inline void q4_host_free(q4_host *h) {
    free(h->q);
    free(h->scales);
    free(h->zp);
    memset(h, 0, sizeof *h);
}

// The package tensors of columns cols[0 .. nc) only (their rows are contiguous per column).
static inline void q4_host_cols(q4_host *sub, const q4_host *h, int K, const int *cols, int nc) {
    const int kb = K / 32, zr = (kb + 1) / 2;
    sub->q = g4_malloc((size_t)nc * K / 2);
    sub->scales = g4_malloc((size_t)nc * kb * 2);
    sub->zp = g4_malloc((size_t)nc * zr);
    for (int j = 0; j < nc; j++) {
        const size_t n = (size_t)cols[j];
        memcpy(sub->q + (size_t)j * K / 2, h->q + n * K / 2, (size_t)K / 2);
        memcpy(sub->scales + (size_t)j * kb, h->scales + n * kb, (size_t)kb * 2);
        memcpy(sub->zp + (size_t)j * zr, h->zp + n * zr, (size_t)zr);
    }
}

// The reference fp16 weight [K][nc] of columns cols: fp16(ref_q4_dequant_col), i.e. the CPU
// dequantizer rounded once. 16 columns at a time, so the writes are runs, not N-strided.
static inline uint16_t *q4_ref_w16(const q4_host *h, int K, const int *cols, int nc) {
    uint16_t *w16 = g4_malloc((size_t)K * nc * 2);
    float *col = g4_malloc((size_t)16 * K * sizeof(float));
    for (int j0 = 0; j0 < nc; j0 += 16) {
        const int nj = nc - j0 < 16 ? nc - j0 : 16;
        for (int j = 0; j < nj; j++)
            ref_q4_dequant_col(col + (size_t)j * K, h->q, h->scales, h->zp, K, 32, cols[j0 + j]);
        for (int k = 0; k < K; k++)
            for (int j = 0; j < nj; j++)
                w16[(size_t)k * nc + j0 + j] = g4_f32_to_f16(col[(size_t)j * K + k]);
    }
    free(col);
    return w16;
}

#endif
