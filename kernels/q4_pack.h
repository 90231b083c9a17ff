// q4_pack.h: the packed Q4 layout the CUDA Q4 kernels read (kernels/gemm_q4.cu), and the host
// function that produces it from the package's MatMulNBits tensors (see kernels/ops.h g4_linear
// and quant/q4.h for the package layout). Host C, so the layout is testable without a GPU
// (tests/test_q4_pack.c); g4_q4_repack (kernels/gemm_q4.cuh) uploads its result.
//
// Requirements: block 32, N % 16 == 0, K % 64 == 0 (every E2B linear qualifies).
// The weight W[K][N] (W[k][n] = (q - zp) * scale) is cut into tiles of 16 output features x 64
// inputs. Tile (nt, kt) covers features n = 16 nt + r (r = 0..15) and inputs k = 64 kt + c
// (c = 0..63); tiles are stored nt-major, tile index i = nt * (K / 64) + kt, so the tiles of one
// feature group follow each other along K (one warp streams them in order).
//
// q: 512 bytes per tile (tile i at byte 512 i) = 32 lanes x 16 bytes. Lane L = 4 g + t
//    (g = 0..7, t = 0..3) owns features r = g and r = g + 8 at inputs c = 16 t .. 16 t + 15, as
//    four little-endian 32-bit words w[s] (s = 0..3) at byte 16 L + 4 s; word s holds the codes
//    at c = 16 t + 4 s + j (j = 0..3):
//
//      bit  31..28   27..24   23..20   19..16   15..12   11..8    7..4     3..0
//           (g+8,3)  (g,3)    (g+8,1)  (g,1)    (g+8,2)  (g,2)    (g+8,0)  (g,0)     (r, j)
//
//    Why: `w & 0x000f000f` and `w & 0x00f000f0` (OR'ed with fp16 1024) give the fp16 pairs
//    (g; j=0,1) and (g+8; j=0,1) and, after `w >> 8`, (g; j=2,3) and (g+8; j=2,3): exactly the
//    four A-operand registers of one mma.m16n8k16 with rows = features, when logical k
//    (2t, 2t+1, 2t+8, 2t+9) is mapped to input c = 16 t + 4 s + (0, 1, 2, 3). One 16-byte load
//    feeds a lane's four k16 steps of the tile.
// scales: 64 bytes per tile (tile i at byte 64 i): 16 fp16 pairs; pair p = 2 g + b (b = 0, 1: the
//    32-input block c = 32 b .. 32 b + 31 of the tile) holds (scale of feature g, scale of
//    feature g + 8), low half first. Lane 4 g + t reads pair 2 g + t / 2.
// zp: 16 bytes per tile (tile i at byte 16 i); byte p = 2 g + b holds the zero point of feature g
//    (low nibble) and of feature g + 8 (high nibble) for block b. No zero points: 8 (the op's
//    default).
// The byte counts equal the package's (N K / 2 + N K / 16 + N K / 64): nothing is duplicated.
#ifndef G4_Q4_PACK_H
#define G4_Q4_PACK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define G4_Q4_PACK_TILE_N 16
#define G4_Q4_PACK_TILE_K 64

// Byte sizes of the three packed arrays of an [K, N] weight.
static inline size_t g4_q4_pack_q_bytes(int N, int K) {
    return (size_t)N * (size_t)K / 2;
}
static inline size_t g4_q4_pack_scale_bytes(int N, int K) {
    return (size_t)N * (size_t)K / 16;
}
static inline size_t g4_q4_pack_zp_bytes(int N, int K) {
    return (size_t)N * (size_t)K / 64;
}

// Checks N, K, block (G4_EUSER naming the value otherwise).
int g4_q4_pack_check(int N, int K, int block);

// Packs the package tensors (host memory): q uint8 [N, K/32, 16], scales fp16 [N, K/32], zp uint8
// [N, ceil(K/32/2)] or NULL (zero point 8) into q_out / s_out / z_out (host buffers of the sizes
// above). Returns G4_OK or G4_EUSER.
int g4_q4_pack(uint8_t *q_out, uint8_t *s_out, uint8_t *z_out, const uint8_t *q,
               const uint16_t *scales, const uint8_t *zp, int N, int K, int block);

#ifdef __cplusplus
}
#endif

#endif
