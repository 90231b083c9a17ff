// q4_dequant.cuh: the device view of a packed Q4 weight (kernels/q4_pack.h) and its exact
// dequantization into mma.sync m16n8k16 A fragments, shared by the prefill GEMM
// (kernels/gemm_q4.cu) and the decode GEMV (kernels/gemv.cu). Internal: included by .cu files.
// defines: g4k::q4w, view, q4k, q4_consts, u2h, h2u, lop3_and_or, q4_dequant_word.
#ifndef G4_Q4_DEQUANT_CUH
#define G4_Q4_DEQUANT_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/gemm_q4.cuh"

namespace g4k {

// Device view of a packed weight.
struct q4w {
    const uint4 *q;    // [tiles][32 lanes] 16-byte words
    const uint32_t *s; // [tiles][16] fp16 pairs
    const uint8_t *z;  // [tiles][16] zero-point pairs
};

inline q4w view(const g4_q4_weight *w) {
    return q4w{(const uint4 *)w->q, (const uint32_t *)w->scales, (const uint8_t *)w->zp};
}

// --- dequantization ---------------------------------------------------------------------------

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

// One packed word -> the four A registers of one k16 step:
// a[0] = (g; j 0,1), a[1] = (g+8; j 0,1), a[2] = (g; j 2,3), a[3] = (g+8; j 2,3), each
// (q - zp) * scale. OR-ing a nibble into the mantissa of fp16 1024 gives 1024 + q exactly
// (1024 + 16 q for the upper nibble of a byte); subtracting 1024 + zp (or scaling by 1/16 and
// adding -(64 + zp) in one fma) gives q - zp exactly; the product with the scale is the one
// rounding (round to nearest, the _rn forms so it is never fused into an fma).
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

} // namespace g4k

#endif
