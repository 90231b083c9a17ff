// q4_pack.c: MatMulNBits (block 32) -> the packed tile layout of q4_pack.h, on the host, once at
// load time.
#include "kernels/q4_pack.h"

#include "base/base.h"

int g4_q4_pack_check(int N, int K, int block) {
    if (block != 32)
        return g4_fail(G4_EUSER, "q4 pack: block size %d, the Q4 kernels implement 32", block);
    if (N <= 0 || N % G4_Q4_PACK_TILE_N)
        return g4_fail(G4_EUSER, "q4 pack: N = %d, expected a positive multiple of 16", N);
    if (K <= 0 || K % G4_Q4_PACK_TILE_K)
        return g4_fail(G4_EUSER, "q4 pack: K = %d, expected a positive multiple of 64", K);
    return G4_OK;
}

// The 4-bit code of W[k][n] in the package layout: q [N][K/32][16], element 2j in the low nibble.
static int pkg_code(const uint8_t *q, int K, int n, int k) {
    const size_t i = (size_t)n * (size_t)K + (size_t)k; // K/32 blocks x 32 codes = K codes a row
    return (q[i >> 1] >> ((i & 1) * 4)) & 15;
}

static int pkg_zp(const uint8_t *zp, int K, int n, int b) {
    if (!zp) return 8;
    const int kb = K / 32, row = (kb + 1) / 2;
    const uint8_t z = zp[(size_t)n * row + b / 2];
    return (b & 1) ? z >> 4 : z & 15;
}

int g4_q4_pack(uint8_t *q_out, uint8_t *s_out, uint8_t *z_out, const uint8_t *q,
               const uint16_t *scales, const uint8_t *zp, int N, int K, int block) {
    int rc = g4_q4_pack_check(N, K, block);
    if (rc) return rc;
    if (!q_out || !s_out || !z_out || !q || !scales)
        return g4_fail(G4_EUSER, "q4 pack: NULL buffer (q, scales and the outputs are required)");
    const int KT = K / G4_Q4_PACK_TILE_K, NT = N / G4_Q4_PACK_TILE_N, kb = K / 32;
    // Bit position of code (r_hi, j) inside word s (see the table in q4_pack.h): j = 0, 1, 2, 3
    // sit at 0, 16, 8, 24; feature g + 8 is 4 bits above feature g.
    static const int jshift[4] = {0, 16, 8, 24};
    for (int nt = 0; nt < NT; nt++) {
        for (int kt = 0; kt < KT; kt++) {
            const size_t tile = (size_t)nt * KT + kt;
            uint8_t *tq = q_out + tile * 512;
            uint16_t sc[32];
            uint8_t zb[16];
            for (int g = 0; g < 8; g++) {
                const int n_lo = 16 * nt + g, n_hi = n_lo + 8;
                for (int t = 0; t < 4; t++) {
                    for (int s = 0; s < 4; s++) {
                        uint32_t w = 0;
                        for (int j = 0; j < 4; j++) {
                            const int k = 64 * kt + 16 * t + 4 * s + j;
                            w |= (uint32_t)pkg_code(q, K, n_lo, k) << jshift[j];
                            w |= (uint32_t)pkg_code(q, K, n_hi, k) << (jshift[j] + 4);
                        }
                        uint8_t *dst = tq + 16 * (4 * g + t) + 4 * s;
                        dst[0] = (uint8_t)w;
                        dst[1] = (uint8_t)(w >> 8);
                        dst[2] = (uint8_t)(w >> 16);
                        dst[3] = (uint8_t)(w >> 24);
                    }
                }
                for (int b = 0; b < 2; b++) {
                    const int blk = 2 * kt + b;
                    sc[2 * (2 * g + b)] = scales[(size_t)n_lo * kb + blk];
                    sc[2 * (2 * g + b) + 1] = scales[(size_t)n_hi * kb + blk];
                    zb[2 * g + b] =
                        (uint8_t)(pkg_zp(zp, K, n_lo, blk) | (pkg_zp(zp, K, n_hi, blk) << 4));
                }
            }
            uint8_t *ts = s_out + tile * 64;
            for (int i = 0; i < 32; i++) { // fp16 values little-endian, as the GPU reads them
                ts[2 * i] = (uint8_t)(sc[i] & 0xff);
                ts[2 * i + 1] = (uint8_t)(sc[i] >> 8);
            }
            memcpy(z_out + tile * 16, zb, 16);
        }
    }
    return G4_OK;
}
