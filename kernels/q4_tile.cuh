// q4_tile.cuh: the per-lane accessor of one packed Q4 tile (kernels/q4_pack.h) for the wgmma
// GEMM's producer (gemm_q4_wgmma.cu) and the test dequantizer (gemm_q4.cu): what a lane loads
// and the dequantized rows it gets, in input order. Built on q4_dequant.cuh (the view and the
// exact per-word dequantization the GEMV and the mma.sync GEMM use). If the packed layout
// changes, q4_pack.c, q4_dequant.cuh and this file change together. Internal header.
// defines: g4k::q4_raw, q4_lane_load, q4_lane_rows, q4_tile_mma (the persistent MLP and the PLE
// block: one tile times one x fragment), check_q4 (their entries' weight check).
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
#include "kernels/q4_dequant.cuh"

namespace g4k {

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

// One packed Q4 tile (16 features x 32 k: the words q, their block's scale pair and zero
// points) times the x fragment xw (the MMA's B halves of those 32 k) into acc: four words
// dequantized, four m16n8k16 MMAs.
__device__ __forceinline__ void q4_tile_mma(float acc[4], const uint4 &q, uint32_t scale,
                                            uint32_t zp, const uint32_t xw[8]) {
    const q4k kc = q4_consts(scale, zp);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int s = 0; s < 4; s++) {
        uint32_t w4[4];
        q4_dequant_word(words[s], kc, w4);
        mma_16816(acc, w4, xw[2 * s], xw[2 * s + 1]);
    }
}

// Host: a repacked weight of N outputs and K inputs, else G4_EUSER naming `who` and `name`.
inline int check_q4(const char *who, const char *name, const g4_q4_weight *w, int N, int K) {
    if (!w || !w->q || !w->scales || !w->zp)
        return g4_fail(G4_EUSER, "%s: %s weight NULL or not repacked", who, name);
    if (w->n != N || w->k != K)
        return g4_fail(G4_EUSER, "%s: %s weight [K %d, N %d], expected [K %d, N %d]", who, name,
                       w->k, w->n, K, N);
    return G4_OK;
}

} // namespace g4k
