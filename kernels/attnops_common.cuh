// attnops_common.cuh: device helpers shared by the attention, small-op and conv kernels
// (kernels/attention_*.cu, rmsnorm.cu, qkv_rope.cu, ...). Internal: included by .cu files only.
// defines: ldmatrix on generic shared pointers, the flash-attention tile step (online softmax,
// P.V), the 16-byte-chunk XOR swizzle (cp.async, mma.sync m16n8k16, GELU, reductions and
// fp16 <-> float helpers come from kernels/common.cuh).
//
// Fragment layouts of mma.sync.m16n8k16 (PTX ISA "Matrix Fragments for mma.m16n8k16"), lane l,
// g = l / 4 (group), c = l % 4 (thread in group):
//   A 16x16 row-major: a0 = A[g][2c..2c+1], a1 = A[g+8][2c..], a2 = A[g][2c+8..], a3 =
//   A[g+8][2c+8..] B 16x8 ("col"):    b0 = B[2c..2c+1][g],   b1 = B[2c+8..2c+9][g] C 16x8 fp32: c0,
//   c1 = C[g][2c], C[g][2c+1];  c2, c3 = C[g+8][2c], C[g+8][2c+1]
// ldmatrix (non-trans) of an 8x8 fp16 block whose rows are r gives lane l the pair
// M[l/4][2(l%4)..]; .trans gives M[2(l%4)..][l/4]. So for S = Q K^T a K tile stored
// [key][dim] loads B with plain ldmatrix, and for O = P V a V tile [key][dim] loads B with .trans.
#ifndef G4_ATTNOPS_COMMON_CUH
#define G4_ATTNOPS_COMMON_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/common.cuh"

namespace g4k {

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of rows of `row_bytes` bytes
// (a multiple of 128), XOR-swizzled so the 8 rows an ldmatrix reads hit 8 different bank groups.
__device__ __forceinline__ int swz(int row, int chunk, int row_bytes) {
    return row * row_bytes + ((chunk ^ (row & 7)) << 4);
}

// Flash-attention tile step, shared by the prefill and decode kernels. One warp holds the 16
// query rows of an MMA tile (rows g and g + 8 in fragment r = 0, 1) over NB_S x 8 keys:
// s[nb] = S fragments already scaled to log2 units and masked (-inf), o[nb] = the warp's
// O accumulator (NB_O x 8 dims), m / l the running max (log2 units) and sum per row.
// online_softmax turns s into P = exp2(s - m_new) and rescales o and l by exp2(m - m_new);
// a row that has seen no visible key yet (m_new = -inf) keeps its state (alpha 1, P 0).
template <int NB_S, int NB_O>
__device__ __forceinline__ void online_softmax(float (&s)[NB_S][4], float (&o)[NB_O][4],
                                               float (&m)[2], float (&l)[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nb = 0; nb < NB_S; nb++) mx = fmaxf(mx, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx);
        const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m[r] - m_new);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        float sum = 0.0f;
#pragma unroll
        for (int nb = 0; nb < NB_S; nb++) {
            s[nb][2 * r] = exp2f(s[nb][2 * r] - m_use);
            s[nb][2 * r + 1] = exp2f(s[nb][2 * r + 1] - m_use);
            sum += s[nb][2 * r] + s[nb][2 * r + 1];
        }
        l[r] = l[r] * alpha + sum;
        m[r] = m_new;
#pragma unroll
        for (int nb = 0; nb < NB_O; nb++) o[nb][2 * r] *= alpha, o[nb][2 * r + 1] *= alpha;
    }
}

// o += P V for the tile: P from online_softmax (fp32 S fragments, packed to fp16 A operands),
// V a swizzled shared tile [key][dim] of row_bytes per key; the warp's dims start at 16-byte
// chunk ch0 (its NB_O x 8 dims).
template <int NB_S, int NB_O>
__device__ __forceinline__ void pv_accumulate(float (&o)[NB_O][4], const float (&s)[NB_S][4],
                                              const uint8_t *vs, int ch0, int row_bytes,
                                              int lane) {
#pragma unroll
    for (int kk = 0; kk < NB_S / 2; kk++) {
        uint32_t a[4];
        a[0] = pack_half2(s[2 * kk][0], s[2 * kk][1]);
        a[1] = pack_half2(s[2 * kk][2], s[2 * kk][3]);
        a[2] = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int nb = 0; nb < NB_O; nb += 2) {
            const int mi = lane >> 3;
            const int key = kk * 16 + (mi & 1) * 8 + (lane & 7);
            uint32_t b[4];
            ldmatrix_x4_trans(b, vs + swz(key, ch0 + nb + (mi >> 1), row_bytes));
            mma_16816(o[nb], a, b[0], b[1]);
            mma_16816(o[nb + 1], a, b[2], b[3]);
        }
    }
}

} // namespace g4k

#endif
