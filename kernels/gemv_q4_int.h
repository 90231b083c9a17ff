// gemv_q4_int.h: the index algebra and the activation quantizer of the Q4 GEMV on the integer
// tensor cores (gemm_q4.cu gemv_q4_v4_kernel, the fourth design, G4_GEMV=v4; issue 29). Plain C
// shared by the kernel (__host__ __device__) and the CPU emulation test
// tests/test_gemv_q4_int_map.c, which runs these functions through a simulated integer
// m16n8k16 against the plain Q4 matmul. Internal header.
//
// Why: the third design (fp16 dequantize + mma.f16) issues ~22 instructions a lane-word of codes,
// 14 of them the dequantize ((q | 0x6400) - (1024 + zp), times the scale, in fp16), and its
// probes put its time at the issue of those instructions (bench/NOTES.md, twenty-second
// session: the math-only form 83-98% of the full one). Here the codes go into the MMA as the
// unsigned 8-bit integers they are (one mask a register: `w & 0x0f0f0f0f` and `(w >> 4) &
// 0x0f0f0f0f` are the A registers), x goes in as 16-bit integers split into two signed bytes,
// and the scale and zero point are applied once a 32-input block, in fp32.
//
// The arithmetic (y = sum_k x_k (q_k - zp_b) s_b, blocks b of 32 inputs):
//   x of one token and block b -> X_k = rint(x_k / sx_b), sx_b = 2^(E_b - 13) with
//     E_b = floor(log2(max_k |x_k|)): |X_k| < 2^14, exact for every |x_k| >= 2^(E_b - 3) (an
//     fp16 x has 11 significant bits); smaller ones off by at most sx_b / 2 = 2^-14 2^E_b <=
//     2^-14 max |x| (gqi_tolerance_x: the named tolerance of this design's x).
//     A block of zeros has sx = 0 and X = 0.
//   X_k = 256 hi_k + lo_k with lo_k = the low byte as signed (-128..127) and hi_k in -64..64.
//   The integer MMA (u8 codes x s8 bytes, s32 accumulators) gives per block and feature
//     D_hi = sum_k q_k hi_k and D_lo = sum_k q_k lo_k + C with C = -zp_b sum_k X_k, so
//     d = 256 D_hi + D_lo = sum_k (q_k - zp_b) X_k exactly (|d| < 32 * 15 * 2^14 < 2^23, also
//     exact as an fp32), and y += (float)d * (s_b * sx_b) in fp32: the weight is never rounded
//     (the third design rounds each (q - zp) s to fp16).
//
// Fragments (PTX ISA, mma.m16n8k16 with .u8 / .s8 operands, g = groupID = lane / 4, t = lane % 4):
//   a0: row g, k 4t .. 4t+3 (byte i = k 4t + i); a1: row g + 8, same k;
//   b0: k 4t .. 4t+3, column g (byte i = k 4t + i);
//   c0, c1: row g, columns 2t, 2t+1; c2, c3: row g + 8, columns 2t, 2t+1.
// The packed tile (q4_pack.h): lane (g, t) word s holds features g (low nibble of each byte) and
// g + 8 (high nibble) at inputs 16 t + 4 s + (0, 2, 1, 3) in byte order, so with rows = the
// tile's 16 features:
//   a0 = w & 0x0f0f0f0f, a1 = (w >> 4) & 0x0f0f0f0f, logical k 4t + i = input 16 t + 4 s + P(i),
//   P = (0, 2, 1, 3). One MMA a word s: the lane's 16 inputs 16 t .. 16 t + 15 over s = 0..3,
//   lanes t = 0, 1 in block 0 of the tile (inputs 0..31) and t = 2, 3 in block 1.
//   B column n = 4 m + 2 b + h holds token m's hi (h = 0) or lo (h = 1) bytes of block b, on the
//   lanes t of that block, 0 elsewhere (so one MMA keeps the two blocks apart): M <= 2 tokens.
//   D columns 2t, 2t + 1 of lane t are then hi and lo of token m = t / 2, block b = t % 2: the
//   lane finishes its (m, b) for features g and g + 8 with that block's scale and zero point
//   (pair 2 g + b of the tile's records).
// x staging (shared memory, per token and k tile: 128 bytes): bytes 0..63 hi, 64..127 lo, input
// c of the tile at byte gqi_stage_pos(c), so the lane reads its four b0 registers of the tile
// (words s = 0..3) as one 16-byte load at byte 16 t (+ 64 for lo); and per token, k tile and
// block b the pair (sx_b, -sum X) the lanes finish with.
#ifndef G4_GEMV_Q4_INT_H
#define G4_GEMV_Q4_INT_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define GQI_HD __host__ __device__ __forceinline__
#else
#define GQI_HD static inline
#endif

enum {
    GQI_MAX_M = 2,        // tokens one MMA carries (4 B columns each)
    GQI_STAGE_BYTES = 128, // staging bytes a token and k tile (hi 64 + lo 64)
    GQI_XBITS = 13,       // sx = 2^(E - GQI_XBITS): |X| < 2^(GQI_XBITS + 1)
};

// Byte of the 64-byte staging half (hi or lo) that holds input c (0..63) of the k tile: word
// s = c % 16 / 4 of lane-chunk t = c / 16, byte position P^-1(c % 4) (P = 0, 2, 1, 3 is its own
// inverse).
GQI_HD int gqi_stage_pos(int c) {
    const int i = c & 3;
    return (c & ~3) | ((i & 1) << 1) | (i >> 1);
}

// The staged word of inputs c .. c + 3 (c % 4 == 0) from their X (the bytes hi or lo of each
// as given: v0 .. v3 of inputs c .. c + 3), in gqi_stage_pos's order: bytes (v0, v2, v1, v3).
GQI_HD uint32_t gqi_stage_word(int v0, int v1, int v2, int v3) {
    return (uint32_t)(v0 & 0xff) | (uint32_t)(v2 & 0xff) << 8 | (uint32_t)(v1 & 0xff) << 16 |
           (uint32_t)(v3 & 0xff) << 24;
}

// The block's step sx = 2^(E - 13) and its inverse from max |x| (amax >= 0, finite): amax in
// [2^E, 2^(E+1)). amax == 0: both 0 (every X is 0). An fp16 amax (<= 65504, >= 2^-24) keeps
// both normal fp32 values.
GQI_HD void gqi_block_step(float amax, float *sx, float *inv) {
    if (amax == 0.0f) {
        *sx = *inv = 0.0f;
        return;
    }
    const int e = ilogbf(amax);
    *sx = ldexpf(1.0f, e - GQI_XBITS);
    *inv = ldexpf(1.0f, GQI_XBITS - e);
}

// X = rint(x * inv) (the product is exact: inv is a power of 2), then its bytes: lo the low byte
// as signed, hi = (X - lo) / 256.
GQI_HD int gqi_quant(float x, float inv) {
#ifdef __CUDA_ARCH__
    return __float2int_rn(x * inv);
#else
    return (int)rintf(x * inv); // round half to even (the default mode), as cvt.rni
#endif
}
GQI_HD int gqi_lo(int X) {
    return (int)(int8_t)(uint8_t)(X & 0xff);
}
GQI_HD int gqi_hi(int X) {
    return (X - gqi_lo(X)) / 256;
}

// The bound on |y - y_exact| a block contributes from x's quantization alone: half a step times
// the block's sum of |w|, with half a step <= 2^-(GQI_XBITS + 1) amax.
GQI_HD double gqi_tolerance_x(double amax, double sum_abs_w) {
    return amax * sum_abs_w / (double)(1 << (GQI_XBITS + 1));
}

// The B operand a lane (g, t) loads (M tokens): the staging row it reads, or -1 for zeros.
// Row r = 2 m + h is token m's hi (h 0) or lo (h 1) half; its bytes 16 t .. 16 t + 15 are the
// b0 registers of words s = 0..3.
GQI_HD int gqi_b_row(int g, int t, int M) {
    const int m = g >> 2, b = (g >> 1) & 1, h = g & 1;
    if (m >= M || b != (t >> 1)) return -1;
    return 2 * m + h;
}

// The (token, block) whose hi and lo the lane's D columns 2t, 2t+1 hold.
GQI_HD int gqi_d_token(int t) {
    return t >> 1;
}
GQI_HD int gqi_d_block(int t) {
    return t & 1;
}

// The A registers of a packed word: features g (a0) and g + 8 (a1) as unsigned bytes.
GQI_HD uint32_t gqi_a0(uint32_t w) {
    return w & 0x0f0f0f0fu;
}
GQI_HD uint32_t gqi_a1(uint32_t w) {
    return (w >> 4) & 0x0f0f0f0fu;
}

#endif
