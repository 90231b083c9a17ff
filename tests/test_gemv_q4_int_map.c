// test_gemv_q4_int_map.c: the arithmetic and index algebra of the Q4 GEMV on the integer tensor
// cores (kernels/gemv_q4_int.h, gemm_q4.cu gemv_q4_v4_kernel) on the CPU, no GPU needed.
//   1. The x quantizer (gqi_block_step, gqi_quant, gqi_hi / gqi_lo) on random and edge-case
//      blocks: |X| < 2^14, hi in -64..64, lo in -128..127, 256 hi + lo == X, X sx == x exactly
//      for |x| >= 2^(E - 3), |X sx - x| <= sx / 2 always, a zero block all zeros.
//   2. A feature tile's whole computation emulated lane by lane with the header's functions: x
//      staged as the kernel stages it (gqi_stage_word at byte c of the tile's half), each lane's
//      B register from gqi_b_row, its A registers from the packed words of kernels/q4_pack.h
//      (gqi_a0 / gqi_a1), the zero point in the C operand, mma.m16n8k16 .u8.s8 simulated from
//      the PTX ISA's fragment layout (a0: row g, k 4t..4t+3; a1: row g+8; b0: k 4t..4t+3, col g;
//      c0, c1: row g, col 2t, 2t+1; c2, c3: row g+8), the lane's finish in fp32 for the (token,
//      block) of gqi_d_token / gqi_d_block, and the flush's sums over lanes t, t ^ 1 and token 1
//      from lane t + 2. Against ref_linear_q4 (the unrounded weights): small-integer x and
//      power-of-two scales must give it bit for bit; random data within the design's named
//      tolerance (2^-13 of sum |x w| for the fp32 sums, plus gqi_tolerance_x a block).
// Shapes: N 16..48, K 64..448 (odd tile counts), M 1 and 2, with and without zero points.
// The device code itself is checked by tests/test_cuda_gemm.c --op q4 (the V4 cases).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/gemv_q4_int.h"
#include "kernels/q4_pack.h"
#include "kernels/ref/ref.h"
#include "tests/test_util.h"

#define TOL_ACC (1.0 / 8192.0)

// 1. The quantizer on one block of 32 fp16-valued x.
static void check_block(const float *x, const char *what) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    float sx, inv;
    gqi_block_step(amax, &sx, &inv);
    if (amax == 0.0f) {
        CHECK_MSG(sx == 0.0f && inv == 0.0f, "%s: zero block, sx %g inv %g", what, sx, inv);
        for (int i = 0; i < 32; i++) CHECK_MSG(gqi_quant(x[i], inv) == 0, "%s: X != 0", what);
        return;
    }
    const int E = (int)floor(log2((double)amax));
    CHECK_MSG((double)sx == ldexp(1.0, E - GQI_XBITS) && (double)inv == ldexp(1.0, GQI_XBITS - E),
              "%s: amax %g: sx %g inv %g, want 2^%d and its inverse", what, amax, sx, inv,
              E - GQI_XBITS);
    long bad = 0;
    for (int i = 0; i < 32; i++) {
        const int X = gqi_quant(x[i], inv), hi = gqi_hi(X), lo = gqi_lo(X);
        bad += !(X > -(1 << (GQI_XBITS + 1)) && X < (1 << (GQI_XBITS + 1)));
        bad += !(hi >= -64 && hi <= 64 && lo >= -128 && lo <= 127 && 256 * hi + lo == X);
        const double back = (double)X * sx, err = fabs(back - x[i]);
        bad += !(err <= 0.5 * sx);
        if (x[i] != 0.0f && fabs(x[i]) >= ldexp(1.0, E - 3)) bad += back != (double)x[i];
    }
    CHECK_MSG(bad == 0, "%s: %ld quantizer properties failed (amax %g)", what, bad, amax);
}

static float f16r(float v) {
    return g4_f16_to_f32(g4_f32_to_f16(v));
}

static void quantizer_cases(unsigned long long *s) {
    float x[32];
    memset(x, 0, sizeof x);
    check_block(x, "zeros");
    for (int i = 0; i < 32; i++) x[i] = (float)((int)(i % 5) - 2);
    check_block(x, "small integers");
    for (int i = 0; i < 32; i++) x[i] = i == 7 ? 65504.0f : 0.0f;
    check_block(x, "fp16 max");
    for (int i = 0; i < 32; i++) x[i] = i == 3 ? -ldexp(1.0f, -24) : 0.0f;
    check_block(x, "fp16 smallest subnormal");
    for (int i = 0; i < 32; i++) x[i] = f16r(i == 0 ? 1.999f : ldexp(1.0f, -12) * (float)(i - 16));
    check_block(x, "mantissa near 2 and tiny values");
    for (int rep = 0; rep < 2000; rep++) {
        const int e = (int)(g4t_rand_u64(s) % 30) - 20;
        for (int i = 0; i < 32; i++)
            x[i] = f16r((float)ldexp(g4t_rand_uniform(s, -1.0f, 1.0f), e));
        check_block(x, "random");
    }
    // the largest X: amax just below 2^(E+1) gives X = 2^14 - 8 (11 bits), lo -8, hi 64
    float sx, inv;
    gqi_block_step(f16r(1.999f), &sx, &inv);
    const int X = gqi_quant(f16r(1.999f), inv);
    CHECK_MSG(X == 16376 && gqi_hi(X) == 64 && gqi_lo(X) == -8, "1.999: X %d hi %d lo %d", X,
              gqi_hi(X), gqi_lo(X));
}

// One simulated mma.m16n8k16 .s32.u8.s8.s32: c[lane] += A B, operands from the lanes' registers
// as the PTX ISA's integer fragment layout places them.
static void imma_sim(int32_t c[32][4], const uint32_t a[32][2], const uint32_t b[32]) {
    int A[16][16], B[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++) {
            A[g][4 * t + i] = (int)(uint8_t)(a[lane][0] >> (8 * i));
            A[g + 8][4 * t + i] = (int)(uint8_t)(a[lane][1] >> (8 * i));
            B[4 * t + i][g] = (int)(int8_t)(uint8_t)(b[lane] >> (8 * i));
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++) {
            const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
            int32_t d = 0;
            for (int k = 0; k < 16; k++) d += A[row][k] * B[k][col];
            c[lane][i] += d;
        }
    }
}

// 2. The kernel's computation of y[M][N] emulated tile by tile (qp, sp, zp: q4_pack's layout).
static void emulate(float *y, const float *x, const uint8_t *qp, const uint8_t *spk,
                    const uint8_t *zpk, int M, int N, int K) {
    const int KT = K / 64;
    // staging of every k tile (the kernel stages a CTA's range; the bytes are the same)
    uint8_t *xq = calloc((size_t)M * KT, GQI_STAGE_BYTES);
    float *xsx = calloc((size_t)M * KT * 2, sizeof(float));
    int *xns = calloc((size_t)M * KT * 2, sizeof(int));
    for (int m = 0; m < M; m++)
        for (int kt = 0; kt < KT; kt++)
            for (int b = 0; b < 2; b++) {
                const float *xb = x + (size_t)m * K + 64 * kt + 32 * b;
                float amax = 0.0f, sx, inv;
                for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
                gqi_block_step(amax, &sx, &inv);
                int X[32], sum = 0;
                for (int i = 0; i < 32; i++) sum += X[i] = gqi_quant(xb[i], inv);
                uint8_t *row = xq + ((size_t)m * KT + kt) * GQI_STAGE_BYTES;
                for (int w = 0; w < 8; w++) {
                    const int c = 32 * b + 4 * w, *v = X + 4 * w;
                    const uint32_t hw = gqi_stage_word(gqi_hi(v[0]), gqi_hi(v[1]), gqi_hi(v[2]),
                                                       gqi_hi(v[3])),
                                   lw = gqi_stage_word(gqi_lo(v[0]), gqi_lo(v[1]), gqi_lo(v[2]),
                                                       gqi_lo(v[3]));
                    memcpy(row + c, &hw, 4);
                    memcpy(row + 64 + c, &lw, 4);
                    CHECK_MSG(gqi_stage_pos(c + 1) == c + 2 && gqi_stage_pos(c + 2) == c + 1,
                              "stage_pos(%d..)", c);
                }
                xsx[((size_t)m * KT + kt) * 2 + b] = sx;
                xns[((size_t)m * KT + kt) * 2 + b] = -sum;
            }
    static const uint8_t zero16[16];
    for (int nt = 0; nt < N / 16; nt++) {
        float acc[32][2];
        memset(acc, 0, sizeof acc);
        for (int kt = 0; kt < KT; kt++) {
            const size_t ti = (size_t)nt * KT + kt;
            int32_t c[32][4];
            uint32_t a[4][32][2], bq[4][32];
            float mt_sx[32];
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane / 4, t = lane % 4, pair = 2 * g + gqi_d_block(t);
                const int br = gqi_b_row(g, t, M);
                const uint8_t *pb =
                    br < 0 ? zero16
                           : xq + ((size_t)(br >> 1) * KT + kt) * GQI_STAGE_BYTES + (br & 1) * 64 +
                                 16 * t;
                const int dm = gqi_d_token(t) < M ? gqi_d_token(t) : 0;
                const int nsum = xns[((size_t)dm * KT + kt) * 2 + gqi_d_block(t)];
                mt_sx[lane] = xsx[((size_t)dm * KT + kt) * 2 + gqi_d_block(t)];
                const uint8_t z = zpk[ti * 16 + pair];
                c[lane][0] = 0;
                c[lane][1] = (int)(z & 15) * nsum;
                c[lane][2] = 0;
                c[lane][3] = (int)(z >> 4 & 15) * nsum;
                for (int st = 0; st < 4; st++) {
                    uint32_t w, bw;
                    memcpy(&w, qp + ti * 512 + 16 * lane + 4 * st, 4);
                    memcpy(&bw, pb + 4 * st, 4);
                    a[st][lane][0] = gqi_a0(w);
                    a[st][lane][1] = gqi_a1(w);
                    bq[st][lane] = bw;
                }
            }
            for (int st = 0; st < 4; st++) imma_sim(c, (const uint32_t(*)[2])a[st], bq[st]);
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane / 4, t = lane % 4, pair = 2 * g + gqi_d_block(t);
                uint16_t s2[2];
                memcpy(s2, spk + ti * 64 + 4 * pair, 4);
                const float sg = g4_f16_to_f32(s2[0]) * mt_sx[lane],
                            sg8 = g4_f16_to_f32(s2[1]) * mt_sx[lane];
                acc[lane][0] = fmaf((float)(c[lane][0] * 256 + c[lane][1]), sg, acc[lane][0]);
                acc[lane][1] = fmaf((float)(c[lane][2] * 256 + c[lane][3]), sg8, acc[lane][1]);
            }
        }
        // the flush's D layout: lane (g, 0) holds features g, g + 8 of tokens 0 and 1
        for (int lane = 0; lane < 32; lane++) {
            const int g = lane / 4, t = lane % 4;
            if (t != 0) continue;
            for (int m = 0; m < M; m++) {
                const int l0 = lane + 2 * m; // lanes t = 2m (block 0) and 2m + 1 (block 1)
                y[(size_t)m * N + 16 * nt + g] = acc[l0][0] + acc[l0 + 1][0];
                y[(size_t)m * N + 16 * nt + g + 8] = acc[l0][1] + acc[l0 + 1][1];
            }
        }
    }
    free(xq);
    free(xsx);
    free(xns);
}

static void run_shape(int M, int N, int K, int exact, int with_zp, unsigned long long *s) {
    const int kb = K / 32, zr = (kb + 1) / 2;
    uint8_t *q = malloc((size_t)N * K / 2), *zp = calloc((size_t)N * zr, 1);
    uint16_t *sc = malloc((size_t)N * kb * 2);
    for (size_t i = 0; i < (size_t)N * K / 2; i++) q[i] = (uint8_t)g4t_rand_u64(s);
    for (size_t i = 0; i < (size_t)N * kb; i++)
        sc[i] = g4_f32_to_f16(exact ? (float)(1 << (g4t_rand_u64(s) % 3)) * 0.5f
                                    : g4t_rand_uniform(s, 0.002f, 0.05f));
    for (size_t i = 0; i < (size_t)N * zr; i++) zp[i] = (uint8_t)g4t_rand_u64(s);
    float *x = malloc(sizeof(float) * (size_t)M * K);
    for (size_t i = 0; i < (size_t)M * K; i++) {
        // exact: small integers; random: fp16 values over 2^-8 .. 1 with some zeros
        const unsigned long long r = g4t_rand_u64(s);
        x[i] = exact ? (float)((int)(r % 5) - 2)
                     : (r % 17 == 0 ? 0.0f
                                    : f16r((float)ldexp(g4t_rand_uniform(s, -1.0f, 1.0f),
                                                        -(int)(r % 8))));
    }
    uint8_t *qp = malloc(g4_q4_pack_q_bytes(N, K)), *sp = malloc(g4_q4_pack_scale_bytes(N, K)),
            *zpk = malloc(g4_q4_pack_zp_bytes(N, K));
    const uint8_t *zuse = with_zp ? zp : NULL;
    CHECK(g4_q4_pack(qp, sp, zpk, q, sc, zuse, N, K, 32) == G4_OK);
    float *y = malloc(sizeof(float) * (size_t)M * N), *ref = malloc(sizeof(float) * (size_t)M * N);
    for (size_t i = 0; i < (size_t)M * N; i++) y[i] = NAN;
    emulate(y, x, qp, sp, zpk, M, N, K);
    ref_linear_q4(ref, x, q, sc, zuse, NULL, M, K, N, 32, 0);
    float *wc = malloc(sizeof(float) * (size_t)K);
    long bad = 0, nan = 0;
    double worst = 0.0;
    for (int n = 0; n < N; n++) {
        ref_q4_dequant_col(wc, q, sc, zuse, K, 32, n);
        for (int m = 0; m < M; m++) {
            const float got = y[(size_t)m * N + n], want = ref[(size_t)m * N + n];
            if (!isfinite(got)) {
                nan++;
                continue;
            }
            double tol = 0.0;
            if (!exact) {
                double mag = 0.0;
                for (int b = 0; b < kb; b++) {
                    double amax = 0.0, sw = 0.0;
                    for (int k = 32 * b; k < 32 * b + 32; k++) {
                        amax = fmax(amax, fabs(x[(size_t)m * K + k]));
                        sw += fabs(wc[k]);
                        mag += fabs(x[(size_t)m * K + k] * wc[k]);
                    }
                    tol += gqi_tolerance_x(amax, sw);
                }
                tol += TOL_ACC * mag;
            }
            const double err = fabs((double)got - want);
            if (tol > 0 && err / tol > worst) worst = err / tol;
            bad += !(err <= tol);
        }
    }
    CHECK_MSG(nan == 0, "M %d N %d K %d: %ld outputs not written", M, N, K, nan);
    CHECK_MSG(bad == 0, "M %d N %d K %d %s%s: %ld outputs off the unrounded reference", M, N, K,
              exact ? "exact" : "random", with_zp ? "" : " (zp 8)", bad);
    printf("  M %d N %3d K %3d %-6s %-7s %s\n", M, N, K, exact ? "exact" : "random",
           with_zp ? "zp" : "zp 8", bad || nan ? "FAIL" : "ok");
    if (!exact) printf("    worst err / tol %.3f\n", worst);
    free(q), free(zp), free(sc), free(x), free(qp), free(sp), free(zpk), free(y), free(ref),
        free(wc);
}

int main(void) {
    unsigned long long s = 0x51e5d00dull;
    quantizer_cases(&s);
    static const int shapes[][2] = {{16, 64}, {32, 128}, {48, 192}, {16, 448}, {48, 320}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int M = 1; M <= GQI_MAX_M; M++)
            for (int exact = 0; exact < 2; exact++)
                run_shape(M, shapes[i][0], shapes[i][1], exact, (int)(i % 2 == 0 || exact), &s);
    run_shape(2, 32, 256, 0, 0, &s);
    return g4t_finish("test_gemv_q4_int_map");
}
