// q4_tile.cuh: the one device-side reader of the packed Q4 layout (kernels/q4_pack.h): the view of
// a repacked weight, the per-lane loads of one 16 x 64 tile and its exact dequantization, for the
// GEMV/mma.sync kernels (gemm_q4.cu) and the wgmma GEMM's producer (gemm_q4_wgmma.cu). If the
// packed layout changes, this file (and q4_pack.c) is what changes. Internal header.
// defines: g4k::q4w, q4_view, q4_raw, q4_lane_load, q4k, q4_consts, q4_dequant_word,
//          q4_lane_rows, u2h, h2u.
//
// Dequantization is exact up to one rounding: (q - zp) is formed exactly in fp16 (the magic-
// number trick below), then multiplied by the fp16 scale with round-to-nearest. So every kernel
// produces fp16(w) with w = (q - zp) * scale computed in real arithmetic, which is what the CPU
// reference rounded once to fp16 gives (tests/test_cuda_gemm.c, op q4_dequant: bit-exact).
#pragma once

#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/gemm_common.cuh"
#include "kernels/gemm_q4.cuh"

namespace g4k {

// Device view of a packed weight.
struct q4w {
    const uint4 *q;    // [tiles][32 lanes] 16-byte words
    const uint32_t *s; // [tiles][16] fp16 pairs
    const uint8_t *z;  // [tiles][16] zero-point pairs
};

inline q4w q4_view(const g4_q4_weight *w) {
    return q4w{(const uint4 *)w->q, (const uint32_t *)w->scales, (const uint8_t *)w->zp};
}

// What lane L = 4 g + t of a warp reads of tile i (= nt * K/64 + kt): its 16-byte word of codes
// (features g and g + 8 at inputs 16 t .. 16 t + 15 of the tile), the scale pair and the
// zero-point pair of its 32-input block (record entry 2 g + t / 2).
struct q4_raw {
    uint4 q;
    uint32_t s, z;
};

__device__ __forceinline__ q4_raw q4_lane_load(const q4w &w, size_t tile, int lane) {
    const int pair = 2 * (lane >> 2) + ((lane & 3) >> 1);
    q4_raw r;
    r.q = ldg_stream(w.q + tile * 32 + lane);
    r.s = __ldg(w.s + tile * 16 + pair);
    r.z = (uint32_t)__ldg(w.z + tile * 16 + pair);
    return r;
}

// Per lane and tile: zero points and scales of features g (lo) and g + 8 (hi) for the lane's
// 32-input block.
struct q4k {
    __half2 zlo; // 1024 + zp(g), both halves
    __half2 zhi; // -(64 + zp(g + 8)), both halves
    __half2 slo; // scale(g), both halves
    __half2 shi; // scale(g + 8), both halves
};

__device__ __forceinline__ __half2 u2h(uint32_t u) {
    return *(const __half2 *)&u;
}
__device__ __forceinline__ uint32_t h2u(__half2 h) {
    return *(const uint32_t *)&h;
}

// The fp16 constants are built from bits: 1024 + z is 0x6400 | z, and -(64 + z) is
// 0xd400 | (z << 4) (exponent 6, so the ulp is 1/16), both exact for z = 0..15.
__device__ __forceinline__ q4k q4_consts(uint32_t s2, uint32_t zb) {
    q4k k;
    k.zlo = u2h((0x6400u | (zb & 15)) * 0x10001u);
    k.zhi = u2h((0xd400u | ((zb >> 4 & 15) << 4)) * 0x10001u);
    const __half2 s = u2h(s2);
    k.slo = __low2half2(s);
    k.shi = __high2half2(s);
    return k;
}

__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d; // (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// One packed word s of a lane (inputs c = 16 t + 4 s + j, j = 0..3) -> the four A registers of
// one mma.m16n8k16 k step: a[0] = (g; j 0,1), a[1] = (g+8; j 0,1), a[2] = (g; j 2,3),
// a[3] = (g+8; j 2,3), each (q - zp) * scale, low half = the lower j. OR-ing a nibble into the
// mantissa of fp16 1024 gives 1024 + q exactly (1024 + 16 q for the upper nibble of a byte);
// subtracting 1024 + zp (or scaling by 1/16 and adding -(64 + zp) in one fma) gives q - zp
// exactly; the product with the scale is the one rounding (round to nearest, the _rn forms so
// it is never fused into an fma).
__device__ __forceinline__ void q4_dequant_word(uint32_t w, const q4k &k, uint32_t a[4]) {
    const uint32_t MAGIC = 0x64006400u; // fp16 pair (1024, 1024)
    const __half2 SIXTEENTH = __float2half2_rn(0.0625f);
    const uint32_t w8 = w >> 8;
    const __half2 lo = __hsub2_rn(u2h(lop3_and_or(w, 0x000f000fu, MAGIC)), k.zlo);
    const __half2 hi = __hfma2(u2h(lop3_and_or(w, 0x00f000f0u, MAGIC)), SIXTEENTH, k.zhi);
    const __half2 lo2 = __hsub2_rn(u2h(lop3_and_or(w8, 0x000f000fu, MAGIC)), k.zlo);
    const __half2 hi2 = __hfma2(u2h(lop3_and_or(w8, 0x00f000f0u, MAGIC)), SIXTEENTH, k.zhi);
    a[0] = h2u(__hmul2_rn(lo, k.slo));
    a[1] = h2u(__hmul2_rn(hi, k.shi));
    a[2] = h2u(__hmul2_rn(lo2, k.slo));
    a[3] = h2u(__hmul2_rn(hi2, k.shi));
}

// The lane's two feature rows in input order: lo[i] = fp16 pair (w[g][16 t + 2 i],
// w[g][16 t + 2 i + 1]) (low half first), hi[i] the same for feature g + 8; lo[0..3] and
// lo[4..7] are the 16-byte runs of inputs 16 t .. + 7 and 16 t + 8 .. + 15.
__device__ __forceinline__ void q4_lane_rows(const q4_raw &r, uint32_t lo[8], uint32_t hi[8]) {
    const q4k kc = q4_consts(r.s, r.z);
    const uint32_t words[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
    for (int s = 0; s < 4; s++) {
        uint32_t a[4];
        q4_dequant_word(words[s], kc, a);
        lo[2 * s] = a[0];
        lo[2 * s + 1] = a[2];
        hi[2 * s] = a[1];
        hi[2 * s + 1] = a[3];
    }
}

} // namespace g4k
