// test_q4_pack.c: the packed Q4 tile layout (kernels/q4_pack.h) against the package layout, on
// the CPU (no GPU needed). A decoder written from the layout description in q4_pack.h reads every
// weight back from the packed bytes; it must equal the reference dequantizer
// (ref_q4_dequant_col on the package tensors) exactly (both are (q - zp) * scale in fp32, exact).
// The GPU side of the same layout is tests/test_cuda_gemm.c --op q4_dequant.
// A second check walks the layout the way the CUDA kernels consume it (kernels/gemm_q4.cu): the
// packed words decoded by the same magic-number steps (emulated in exact fp16 arithmetic) and
// the x values a lane loads, placed into mma.m16n8k16 A/B fragments as the PTX ISA defines
// them, must reproduce the reference product exactly on small-integer data. This checks the
// layout's contract with the kernels' k permutation before any GPU runs; the GPU test checks
// the device code itself.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/q4_pack.h"
#include "kernels/ref/ref.h"
#include "tests/test_util.h"

// q4_pack.h's bit table, transcribed: nibble position p (bits 4p .. 4p + 3) of word s holds
// feature (g + 8 * hi) at input 16 t + 4 s + j, listed here as {hi, j} for p = 0..7.
static const int nibble_table[8][2] = {{0, 0}, {1, 0}, {0, 2}, {1, 2},
                                       {0, 1}, {1, 1}, {0, 3}, {1, 3}};

static float packed_weight(const uint8_t *q, const uint8_t *sc, const uint8_t *zp, int K, int n,
                           int k) {
    const int KT = K / 64;
    const size_t tile = (size_t)(n / 16) * KT + k / 64;
    const int r = n % 16, c = k % 64;
    const int g = r % 8, hi = r / 8, t = c / 16, s = (c % 16) / 4, j = c % 4, b = c / 32;
    const uint8_t *wb = q + tile * 512 + 16 * (4 * g + t) + 4 * s;
    const uint32_t w = wb[0] | (uint32_t)wb[1] << 8 | (uint32_t)wb[2] << 16 | (uint32_t)wb[3] << 24;
    int pos = -1;
    for (int p = 0; p < 8; p++)
        if (nibble_table[p][0] == hi && nibble_table[p][1] == j) pos = p;
    const int code = (w >> (4 * pos)) & 15;
    const int pair = 2 * g + b;
    const uint8_t *sp = sc + tile * 64 + 4 * pair + 2 * hi;
    const float scale = g4_f16_to_f32((uint16_t)(sp[0] | sp[1] << 8));
    const uint8_t zb = zp[tile * 16 + pair];
    const int z = hi ? zb >> 4 : zb & 15;
    return (float)(code - z) * scale;
}

static void check_shape(int N, int K, int with_zp, unsigned long long *seed) {
    const int kb = K / 32, zrow = (kb + 1) / 2;
    uint8_t *q = g4_malloc((size_t)N * K / 2);
    uint16_t *scales = g4_malloc((size_t)N * kb * 2);
    uint8_t *zp = with_zp ? g4_malloc((size_t)N * zrow) : NULL;
    for (size_t i = 0; i < (size_t)N * K / 2; i++) q[i] = (uint8_t)g4t_rand_u64(seed);
    for (size_t i = 0; i < (size_t)N * kb; i++)
        scales[i] = g4_f32_to_f16(g4t_rand_uniform(seed, 0.001f, 0.1f) *
                                  ((g4t_rand_u64(seed) & 1) ? 1.0f : -1.0f));
    if (zp)
        for (size_t i = 0; i < (size_t)N * zrow; i++) zp[i] = (uint8_t)g4t_rand_u64(seed);
    uint8_t *pq = g4_malloc(g4_q4_pack_q_bytes(N, K));
    uint8_t *ps = g4_malloc(g4_q4_pack_scale_bytes(N, K));
    uint8_t *pz = g4_malloc(g4_q4_pack_zp_bytes(N, K));
    CHECK_INT(g4_q4_pack_q_bytes(N, K) + g4_q4_pack_scale_bytes(N, K) + g4_q4_pack_zp_bytes(N, K),
              (size_t)N * K / 2 + (size_t)N * kb * 2 + (size_t)N * zrow);
    const int rc = g4_q4_pack(pq, ps, pz, q, scales, zp, N, K, 32);
    CHECK_MSG(rc == G4_OK, "pack N=%d K=%d: %s", N, K, g4_error());
    float *col = g4_malloc(sizeof(float) * (size_t)K);
    long bad = 0;
    for (int n = 0; n < N && rc == G4_OK; n++) {
        ref_q4_dequant_col(col, q, scales, zp, K, 32, n);
        for (int k = 0; k < K; k++) {
            const float got = packed_weight(pq, ps, pz, K, n, k);
            if (got != col[k] && bad++ < 3)
                fprintf(stderr, "  N=%d K=%d zp=%d: w[k=%d][n=%d] packed %g, reference %g\n", N, K,
                        with_zp, k, n, got, col[k]);
        }
    }
    CHECK_MSG(bad == 0, "N=%d K=%d zp=%d: %ld weights differ", N, K, with_zp, bad);
    printf("N=%-6d K=%-6d zero points %-7s %ld weights %s\n", N, K, with_zp ? "packed" : "default",
           (long)N * K, bad ? "DIFFER" : "match");
    free(col);
    free(q);
    free(scales);
    free(zp);
    free(pq);
    free(ps);
    free(pz);
}

// --- the fragment walk ---------------------------------------------------------------------------

static float h2f(uint16_t h) {
    return g4_f16_to_f32(h);
}
// fp16 sub / mul / fma with one round-to-nearest (the float result of two fp16 operands is exact
// for these values, so rounding it once is what the GPU's fp16 unit does).
static uint16_t hsub(uint16_t a, uint16_t b) {
    return g4_f32_to_f16(h2f(a) - h2f(b));
}
static uint16_t hmul(uint16_t a, uint16_t b) {
    return g4_f32_to_f16(h2f(a) * h2f(b));
}
static uint16_t hfma(uint16_t a, uint16_t b, uint16_t c) {
    return g4_f32_to_f16(h2f(a) * h2f(b) + h2f(c));
}

// The kernels' q4_dequant_word, lane constants z_g, z_g8 (0..15) and scales s_g, s_g8 (fp16).
static void dequant_word(uint32_t w, int zg, int zg8, uint16_t sg, uint16_t sg8, uint32_t a[4]) {
    const uint32_t MAGIC = 0x64006400u, w8 = w >> 8;
    const uint32_t in[4] = {(w & 0x000f000fu) | MAGIC, (w & 0x00f000f0u) | MAGIC,
                            (w8 & 0x000f000fu) | MAGIC, (w8 & 0x00f000f0u) | MAGIC};
    // As the kernel builds them from bits; they must be the fp16 values 1024 + zg, -(64 + zg8).
    const uint16_t zlo = (uint16_t)(0x6400u | zg), zhi = (uint16_t)(0xd400u | (zg8 << 4));
    CHECK(h2f(zlo) == 1024.0f + zg && h2f(zhi) == -64.0f - zg8);
    const uint16_t sixteenth = g4_f32_to_f16(0.0625f);
    for (int v = 0; v < 4; v++) {
        uint16_t h[2];
        for (int e = 0; e < 2; e++) {
            const uint16_t x = (uint16_t)(in[v] >> (16 * e));
            const uint16_t d = (v & 1) ? hfma(x, sixteenth, zhi) : hsub(x, zlo);
            h[e] = hmul(d, (v & 1) ? sg8 : sg);
        }
        a[v] = h[0] | (uint32_t)h[1] << 16;
    }
}

// y[8 tokens][N] over the packed weight, one 16-feature tile at a time, as the GEMV warp does.
static void fragment_walk(float *y, const uint16_t *x, const uint8_t *pq, const uint8_t *ps,
                          const uint8_t *pz, int N, int K) {
    const int KT = K / 64;
    for (int nt = 0; nt < N / 16; nt++) {
        float D[16][8] = {{0}};
        for (int kt = 0; kt < KT; kt++) {
            const size_t tile = (size_t)nt * KT + kt;
            uint32_t A[32][4][4], B[32][8]; // [lane][step][reg], [lane][x word]
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane / 4, t = lane % 4, pair = 2 * g + t / 2;
                const uint8_t *sp = ps + tile * 64 + 4 * pair;
                const uint16_t sg = (uint16_t)(sp[0] | sp[1] << 8);
                const uint16_t sg8 = (uint16_t)(sp[2] | sp[3] << 8);
                const uint8_t zb = pz[tile * 16 + pair];
                for (int s = 0; s < 4; s++) {
                    const uint8_t *wb = pq + tile * 512 + 16 * lane + 4 * s;
                    const uint32_t w = wb[0] | (uint32_t)wb[1] << 8 | (uint32_t)wb[2] << 16 |
                                       (uint32_t)wb[3] << 24;
                    dequant_word(w, zb & 15, zb >> 4, sg, sg8, A[lane][s]);
                }
                // x[token g][64 kt + 16 t .. + 15] as 8 words (two 16-byte loads)
                for (int i = 0; i < 8; i++) {
                    const uint16_t *xp = x + (size_t)g * K + 64 * kt + 16 * t + 2 * i;
                    B[lane][i] = xp[0] | (uint32_t)xp[1] << 16;
                }
            }
            for (int s = 0; s < 4; s++) { // mma.m16n8k16: D[row][col] += sum_k A[row][k] B[k][col]
                float Am[16][16], Bm[16][8];
                for (int lane = 0; lane < 32; lane++) {
                    const int g = lane / 4, t = lane % 4;
                    for (int e = 0; e < 2; e++) {
                        const int sh = 16 * e;
                        Am[g][2 * t + e] = h2f((uint16_t)(A[lane][s][0] >> sh));
                        Am[g + 8][2 * t + e] = h2f((uint16_t)(A[lane][s][1] >> sh));
                        Am[g][2 * t + 8 + e] = h2f((uint16_t)(A[lane][s][2] >> sh));
                        Am[g + 8][2 * t + 8 + e] = h2f((uint16_t)(A[lane][s][3] >> sh));
                        Bm[2 * t + e][g] = h2f((uint16_t)(B[lane][2 * s] >> sh));
                        Bm[2 * t + 8 + e][g] = h2f((uint16_t)(B[lane][2 * s + 1] >> sh));
                    }
                }
                for (int r = 0; r < 16; r++)
                    for (int c = 0; c < 8; c++)
                        for (int k = 0; k < 16; k++) D[r][c] += Am[r][k] * Bm[k][c];
            }
        }
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 8; c++) y[(size_t)c * N + 16 * nt + r] = D[r][c];
    }
}

static void check_fragments(int N, int K, unsigned long long *seed) {
    const int kb = K / 32, zrow = kb / 2;
    uint8_t *q = g4_malloc((size_t)N * K / 2), *zp = g4_malloc((size_t)N * zrow);
    uint16_t *scales = g4_malloc((size_t)N * kb * 2), *x = g4_malloc((size_t)8 * K * 2);
    for (size_t i = 0; i < (size_t)N * K / 2; i++) q[i] = (uint8_t)g4t_rand_u64(seed);
    for (size_t i = 0; i < (size_t)N * zrow; i++) zp[i] = (uint8_t)g4t_rand_u64(seed);
    for (size_t i = 0; i < (size_t)N * kb; i++) // powers of two: every product and sum exact
        scales[i] = g4_f32_to_f16((float)(1 << (g4t_rand_u64(seed) % 3)) * 0.5f);
    float *xf = g4_malloc(sizeof(float) * 8 * (size_t)K);
    for (int i = 0; i < 8 * K; i++) {
        const int v = (int)(g4t_rand_u64(seed) % 4);
        xf[i] = (float)(v < 2 ? v - 2 : v - 1);
        x[i] = g4_f32_to_f16(xf[i]);
    }
    uint8_t *pq = g4_malloc(g4_q4_pack_q_bytes(N, K)),
            *ps = g4_malloc(g4_q4_pack_scale_bytes(N, K));
    uint8_t *pz = g4_malloc(g4_q4_pack_zp_bytes(N, K));
    CHECK(g4_q4_pack(pq, ps, pz, q, scales, zp, N, K, 32) == G4_OK);
    float *got = g4_malloc(sizeof(float) * 8 * (size_t)N),
          *want = g4_malloc(sizeof(float) * 8 * (size_t)N);
    fragment_walk(got, x, pq, ps, pz, N, K);
    ref_linear_q4(want, xf, q, scales, zp, NULL, 8, K, N, 32, 0);
    long bad = 0;
    for (int i = 0; i < 8 * N; i++) bad += got[i] != want[i];
    CHECK_MSG(bad == 0, "fragment walk N=%d K=%d: %ld of %d outputs differ (first: %g vs %g)", N, K,
              bad, 8 * N, got[0], want[0]);
    printf("fragment walk N=%d K=%d, 8 tokens: %s\n", N, K, bad ? "DIFFERS" : "exact");
    free(q);
    free(zp);
    free(scales);
    free(x);
    free(xf);
    free(pq);
    free(ps);
    free(pz);
    free(got);
    free(want);
}

int main(void) {
    g4_ref_init();
    unsigned long long seed = 0x51ed270b27e1ce3dull;
    check_shape(16, 64, 1, &seed);
    check_shape(48, 192, 1, &seed);
    check_shape(32, 128, 0, &seed);
    check_shape(256, 1536, 1, &seed);  // k/v_proj
    check_shape(1536, 256, 1, &seed);  // PLE proj
    check_shape(2048, 1536, 1, &seed); // q_proj
    check_shape(1536, 6144, 1, &seed); // down_proj

    check_fragments(16, 64, &seed);
    check_fragments(48, 320, &seed);

    uint8_t b[512];
    uint16_t sc[32] = {0};
    CHECK(g4_q4_pack(b, b, b, b, sc, NULL, 24, 64, 32) == G4_EUSER);
    CHECK(strstr(g4_error(), "N = 24") != NULL);
    CHECK(g4_q4_pack(b, b, b, b, sc, NULL, 16, 96, 32) == G4_EUSER);
    CHECK(strstr(g4_error(), "K = 96") != NULL);
    CHECK(g4_q4_pack(b, b, b, b, sc, NULL, 16, 64, 16) == G4_EUSER);
    CHECK(strstr(g4_error(), "block size 16") != NULL);
    CHECK(g4_q4_pack(b, b, b, NULL, sc, NULL, 16, 64, 32) == G4_EUSER);
    CHECK(g4_q4_pack(b, b, b, b, sc, NULL, 0, 64, 32) == G4_EUSER);
    return g4t_finish("test_q4_pack");
}
