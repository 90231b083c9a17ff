// gemm_q4.cu: Q4 (MatMulNBits block 32) GEMV and GEMM on the packed tile layout of
// kernels/q4_pack.h, the repack upload, the test dequantizer and the public entries of
// gemm_q4.cuh.
//
// Both kernels run the weights through mma.sync m16n8k16 as the A operand (rows = 16 output
// features of one tile, k = 16 inputs), so the tokens are the MMA's 8 columns: in decode M = 1..8
// costs the same as M = 1. A lane's 16-byte word of a tile dequantizes into its A fragments of
// the tile's four k16 steps (q4_pack.h); x must then be read with the same permutation of k:
// lane (g, t) at step s holds x[token g][16 t + 4 s + 0..3], i.e. x[g][16 t .. 16 t + 15] as two
// 16-byte loads covers all four steps.
// Test: tests/test_cuda_gemm.c --op q4; bench: g4cu bench --kernels --filter q4.
#include <cooperative_groups.h>
#include <stdlib.h>

#include "kernels/gemm_common.cuh"
#include "kernels/gemm_q4.cuh"
#include "kernels/gemv_q4_int.h"
#include "kernels/pdl.cuh"
#include "kernels/q4_dequant.cuh"
#include "kernels/q4_pack.h"
#include "kernels/q4_tile.cuh"

namespace cg = cooperative_groups;

namespace g4k {
namespace {

// =============================================================================================
// Test dequantizer: one warp per tile writes its 16 x 64 values of W[K, N] (fp16), through the
// same accessor (q4_lane_load, q4_lane_rows) as the wgmma GEMM's producer, whose dequantized
// rows it therefore checks bit for bit (tests/test_cuda_gemm.c op q4_dequant).
// =============================================================================================
__global__ void __launch_bounds__(256) q4_dequant_kernel(__half *out, q4w w, int N, int K) {
    const int KT = K / 64;
    const size_t tiles = (size_t)(N / 16) * KT;
    const size_t tile = (size_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (tile >= tiles) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nt = (int)(tile / KT), kt = (int)(tile % KT);
    uint32_t lo[8], hi[8];
    q4_lane_rows(q4_lane_load(w, tile, lane), lo, hi);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int k = 64 * kt + 16 * t + 2 * i, n = 16 * nt + g;
        const __half2 a = u2h(lo[i]), b = u2h(hi[i]);
        out[(size_t)k * N + n] = __low2half(a);
        out[(size_t)(k + 1) * N + n] = __high2half(a);
        out[(size_t)k * N + n + 8] = __low2half(b);
        out[(size_t)(k + 1) * N + n + 8] = __high2half(b);
    }
}

// =============================================================================================
// GEMV (M <= 8). Block = 8 warps on one feature tile (plain) or on the same feature tile of the
// gate and the up weight (fused); the warps take the block's k tiles round-robin, Q4V_U tiles
// in flight each (weights streamed past L1; x re-read from L1/L2). A cluster of cs blocks
// (grid.y) splits K when there are few feature tiles; rank 0 sums the partials in order.
// Launched with programmatic dependent launch (kernels/pdl.cuh): before its wait each warp only
// prefetches into L2 the packed words, scales and zero points of the Q4V_U tiles its first
// loop iteration loads (for every decode shape of E2B that is the block's whole K range: <= 32
// tiles x 592 bytes); x is read and y written after the wait.
// =============================================================================================
constexpr int Q4V_WARPS = 8, Q4V_U = 4;

template <bool FUSED>
__global__ void __launch_bounds__(Q4V_WARPS * 32)
    gemv_q4_kernel(void *y, const __half *__restrict__ x, q4w w0, q4w w1,
                   const __half *__restrict__ bias, int M, int N, int K, int epi) {
    constexpr int F = FUSED ? 2 : 1;
    __shared__ float4 red[Q4V_WARPS][F][32];
    __shared__ float4 part[F][32];
    cg::cluster_group cluster = cg::this_cluster();
    const int cs = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int nt = blockIdx.x;
    const int KT = K / 64;
    const int kb = (int)((long long)KT * rank / cs), ke = (int)((long long)KT * (rank + 1) / cs);
    const size_t tile0 = (size_t)nt * KT;
    const bool tok = g < M; // B-fragment column g is token g
    const __half *xrow = x + (size_t)(tok ? g : 0) * K + 16 * t;
    const int pair = 2 * g + (t >> 1); // the lane's scale / zero-point record entry
    const uint4 zero4 = make_uint4(0, 0, 0, 0);

    // PDL prologue: exactly the weight addresses of the first iteration below (kt0 = kb + warp),
    // under the same bounds; L2 prefetches only (pdl.cuh rule 1). Then the wait, for everyone.
#pragma unroll
    for (int u = 0; u < Q4V_U; u++) {
        const int kt = kb + warp + u * Q4V_WARPS;
        if (kt < ke) {
            const size_t ti = tile0 + kt;
#pragma unroll
            for (int f = 0; f < F; f++) {
                const q4w &w = f ? w1 : w0;
                g4_prefetch_l2(w.q + ti * 32 + lane);
                g4_prefetch_l2(w.s + ti * 16 + pair);
                g4_prefetch_l2(w.z + ti * 16 + pair);
            }
        }
    }
    g4_pdl_wait();
    g4_pdl_trigger();

    float acc[F][4];
#pragma unroll
    for (int f = 0; f < F; f++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[f][i] = 0.0f;

    for (int kt0 = kb + warp; kt0 < ke; kt0 += Q4V_WARPS * Q4V_U) {
        uint4 qv[Q4V_U][F], xa[Q4V_U], xb[Q4V_U];
        uint32_t sv[Q4V_U][F], zv[Q4V_U][F];
#pragma unroll
        for (int u = 0; u < Q4V_U; u++) { // issue every load first
            const int kt = kt0 + u * Q4V_WARPS;
            const bool ok = kt < ke;
            const size_t ti = tile0 + kt;
#pragma unroll
            for (int f = 0; f < F; f++) {
                const q4w &w = f ? w1 : w0;
                qv[u][f] = ok ? ldg_stream(w.q + ti * 32 + lane) : zero4;
                sv[u][f] = ok ? __ldg(w.s + ti * 16 + pair) : 0u;
                zv[u][f] = ok ? (uint32_t)__ldg(w.z + ti * 16 + pair) : 0u;
            }
            xa[u] = ok && tok ? __ldg((const uint4 *)(xrow + (size_t)kt * 64)) : zero4;
            xb[u] = ok && tok ? __ldg((const uint4 *)(xrow + (size_t)kt * 64 + 8)) : zero4;
        }
#pragma unroll
        for (int u = 0; u < Q4V_U; u++) {
            if (kt0 + u * Q4V_WARPS >= ke) continue; // warp-uniform
            const uint32_t xw[8] = {xa[u].x, xa[u].y, xa[u].z, xa[u].w,
                                    xb[u].x, xb[u].y, xb[u].z, xb[u].w};
#pragma unroll
            for (int f = 0; f < F; f++) {
                const q4k kc = q4_consts(sv[u][f], zv[u][f]);
                const uint32_t words[4] = {qv[u][f].x, qv[u][f].y, qv[u][f].z, qv[u][f].w};
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    uint32_t a[4];
                    q4_dequant_word(words[s], kc, a);
                    mma_16816(acc[f], a, xw[2 * s], xw[2 * s + 1]);
                }
            }
        }
    }

#pragma unroll
    for (int f = 0; f < F; f++)
        red[warp][f][lane] = make_float4(acc[f][0], acc[f][1], acc[f][2], acc[f][3]);
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int f = 0; f < F; f++) {
            float4 s = red[0][f][lane];
#pragma unroll
            for (int wp = 1; wp < Q4V_WARPS; wp++) {
                const float4 v = red[wp][f][lane];
                s.x += v.x;
                s.y += v.y;
                s.z += v.z;
                s.w += v.w;
            }
            part[f][lane] = s;
        }
    }
    cluster.sync(); // every block's partial is written and visible to the cluster
    if (rank == 0 && warp == 0) {
        float v[F][4];
#pragma unroll
        for (int f = 0; f < F; f++)
#pragma unroll
            for (int i = 0; i < 4; i++) v[f][i] = 0.0f;
        for (int r = 0; r < cs; r++) {
            const float4 *p = cluster.map_shared_rank(&part[0][0], r);
#pragma unroll
            for (int f = 0; f < F; f++) {
                const float4 q = p[f * 32 + lane];
                v[f][0] += q.x;
                v[f][1] += q.y;
                v[f][2] += q.z;
                v[f][3] += q.w;
            }
        }
        // D fragment: v[.][i] is feature 16 nt + g + 8 (i / 2), token 2 t + i % 2.
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int n = 16 * nt + g + 8 * (i >> 1), m = 2 * t + (i & 1);
            if (m >= M) continue;
            if constexpr (FUSED)
                store_one(y, G4_GEMM_Y_F16, nullptr, (size_t)m * N + n, n,
                          gelu_tanh(v[0][i]) * v[F - 1][i]);
            else
                store_one(y, epi, bias, (size_t)m * N + n, n, v[0][i]);
        }
    }
    cluster.sync(); // keep every block's shared memory alive until the leader has read it
}

template <bool FUSED>
void launch_gemv(void *y, const __half *x, q4w w0, q4w w1, const __half *bias, int M, int N, int K,
                 int epi, cudaStream_t stream) {
    const int NT = N / 16, KT = K / 64;
    // Split K over a cluster until there are two blocks per SM, keeping >= 4 k tiles a block.
    int cs = 1;
    while (cs < 8 && (long)NT * cs < 2L * num_sms() && KT / (cs * 2) >= 4) cs *= 2;
    g4_pdl_launch_cluster(gemv_q4_kernel<FUSED>, dim3(NT, cs, 1), dim3(Q4V_WARPS * 32, 1, 1),
                          (size_t)0, stream, dim3(1, cs, 1), y, x, w0, w1, bias, M, N, K, epi);
}

// =============================================================================================
// GEMV (M <= 8), the streaming design (issue 29). Each warp owns a fixed run of packed tiles: one
// feature tile (16 outputs) and a contiguous k range of it, for one group of feature tiles after
// another (a persistent grid walks the groups; every CTA holds FT feature tiles x S k splits = 8
// warps). A warp keeps U tiles in flight in registers (a ring: tile i is computed while tiles
// i+1 .. i+U-1 load), across group boundaries, so the weight stream of a warp never drains
// between its feature tiles. K may further split over a cluster of CS CTAs (grid.y) when there
// are few feature tiles; then each CTA does one group. Splits are reduced in a fixed order
// (shared memory, then distributed shared memory): deterministic.
//
// Why (bench/NOTES.md, issue 29): the earlier kernel gave each block one feature tile and 3
// loads per warp, then a reduction and exit: a block's life was one DRAM round trip plus its
// tail, and the Q4 lm_head streamed at 41% of copy. Here a warp's stream is long where the
// shape allows (lm_head: ~190 tiles a warp), and where it does not (the 1.8-11 MB decoder
// weights) the whole weight is in flight at once over <= 2 CTAs an SM, all resident; each warp
// loads its first U tiles into registers before the PDL wait (under the previous kernel).
// Plan: gemv_plan below; tests force it with g4_gemm_gemv_force.
// =============================================================================================
constexpr int GV_WARPS = 8;

struct gv_item {
    uint4 q[2];
    uint32_t s[2], z[2];
};

// A warp's E accumulator fragments zeroed (the streaming and third designs: at the start
// and after each group's flush).
template <int E> __device__ __forceinline__ void gv_zero(float (&acc)[E][4]) {
#pragma unroll
    for (int e = 0; e < E; e++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[e][i] = 0.0f;
}

// x of a warp's first min(MAX, n) steps (step i: k tile kb + i % L of its token row) into L1
// right after the wait, so x's L2 round trip overlaps the weights' (x is the previous kernel's
// output). MAX is a compile-time bound so the loop unrolls as the kernels' own loops did.
template <int MAX>
__device__ __forceinline__ void gv_prefetch_x_l1(const __half *xrow, int kb, int L, int n) {
    for (int i = 0; i < MAX && i < n; i++) {
        const __half *pxi = xrow + (size_t)(kb + i % L) * 64;
        asm volatile("prefetch.global.L1 [%0];" ::"l"(__cvta_generic_to_global(pxi)));
    }
}

// The outputs of one group (feature tile nt): direct stores (st == 1), or the split partials
// reduced in split order by the s == 0 warp of the feature tile (of cluster rank 0). Out of line:
// inlined at each of the ring's U unrolled steps it made the kernel ~20k instructions, past the
// instruction cache. Every thread of the CTA (of the cluster when CS > 1) calls it once a group.
template <int F, int W = GV_WARPS>
__device__ __noinline__ void gv_flush(float4 a0, float4 a1, void *y, const __half *bias, int epi,
                                      int M, int N, int nt, int warp, int f, int s, int S, int CS,
                                      int parity, float4 *red, const __half *mul, int ldm) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float4 v[2] = {a0, a1};
    if (S * CS > 1) {
        // red: [2 parities][W][F][32]
        float4 *buf = red + (size_t)parity * W * F * 32;
        buf[(warp * F + 0) * 32 + lane] = a0;
        if (F == 2) buf[(warp * F + 1) * 32 + lane] = a1;
        cg::cluster_group cluster = cg::this_cluster();
        if (CS > 1)
            cluster.sync();
        else
            __syncthreads();
        if (s != 0 || (CS > 1 && cluster.block_rank() != 0)) return;
        v[0] = v[1] = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int r = 0; r < CS; r++) {
            const float4 *rb = CS > 1 ? cluster.map_shared_rank(buf, r) : buf;
            for (int ss = 0; ss < S; ss++)
                for (int ff = 0; ff < F; ff++) {
                    const float4 q = rb[((f * S + ss) * F + ff) * 32 + lane];
                    v[ff].x += q.x;
                    v[ff].y += q.y;
                    v[ff].z += q.z;
                    v[ff].w += q.w;
                }
        }
    }
    if (nt * 16 >= N) return;
    // D fragment: element i is feature 16 nt + g + 8 (i / 2), token 2 t + i % 2.
    const float e0[4] = {v[0].x, v[0].y, v[0].z, v[0].w}, e1[4] = {v[1].x, v[1].y, v[1].z, v[1].w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int nn = 16 * nt + g + 8 * (i >> 1), m = 2 * t + (i & 1);
        if (m >= M) continue;
        if (F == 2)
            store_one(y, G4_GEMM_Y_F16, nullptr, (size_t)m * N + nn, nn, gelu_tanh(e0[i]) * e1[i]);
        else if (mul) // the PLE gate: gelu_tanh(y) * mul[m][nn] (fp16 y)
            store_one(y, G4_GEMM_Y_F16, nullptr, (size_t)m * N + nn, nn,
                      gelu_tanh(__half2float(__float2half_rn(e0[i]))) *
                          __half2float(mul[(size_t)m * ldm + nn]));
        else
            store_one(y, epi, bias, (size_t)m * N + nn, nn, e0[i]);
    }
}

// W warps a CTA: 8 (two CTAs an SM), or 16 (gemv_w16: one CTA an SM holding the same warps, so
// a K split of 16 needs no cluster; bench/NOTES.md, eleventh session).
template <bool FUSED, int U, bool PRO, int W = GV_WARPS>
__global__ void __launch_bounds__(W * 32, 2 * GV_WARPS / W)
    gemv_q4_stream_kernel(void *y, const __half *__restrict__ x, q4w w0, q4w w1,
                          const __half *__restrict__ bias, int M, int N, int K, int epi, int S,
                          int CS, int groups, int pf_items, gv_pro pro) {
    constexpr int F = FUSED ? 2 : 1;
    __shared__ float4 red[2][W][F][32]; // split partials, double-buffered by group
    extern __shared__ __align__(16) __half xs[]; // PRO: the prologue's x [M][K]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int NT = N / 16, KT = K / 64;
    const int FT = W / S, f = warp / S, s = warp % S;
    const int rank = blockIdx.y, ST = S * CS, sp = rank * S + s;
    const int kb = (int)((long long)KT * sp / ST), L = (int)((long long)KT * (sp + 1) / ST) - kb;
    const int G = gridDim.x;
    const int nj = (groups - (int)blockIdx.x + G - 1) / G; // groups this CTA walks
    const int n = nj * L;                                   // this warp's tiles
    const int pair = 2 * g + (t >> 1);
    const bool tok = g < M;
    // (PRO: x is the prologue's, in shared memory; set after the wait)
    const __half *xrow = PRO ? nullptr : x + (size_t)(tok ? g : 0) * K + 16 * t;
    const uint4 zero4 = make_uint4(0, 0, 0, 0);
    // feature tile of the warp in its j-th group (>= NT: past the edge, loads off, no output)
    auto tile_nt = [&](int j) { return ((int)blockIdx.x + j * G) * FT + f; };

    // PDL prologue: L2 prefetch of the pf_items tiles after the ring's first U (one instruction
    // per lane and tile: lanes 0-3 the four 128-byte lines of the packed words, 4 the scales, 5
    // the zero points; lanes 8-13 the same for the up weight); then the ring's loads below.
    {
        const int pn = n < U + pf_items ? n : U + pf_items;
        const int sub = lane & 7;
        const bool up = FUSED && lane >= 8; // select pointers, not a reference to a parameter
        const char *wq = (const char *)(up ? w1.q : w0.q), *ws = (const char *)(up ? w1.s : w0.s),
                   *wz = (const char *)(up ? w1.z : w0.z);
        if (lane < 8 * F && sub < 6)
            for (int i = U; i < pn; i++) {
                const int nt = tile_nt(i / L);
                if (nt >= NT) break;
                const size_t ti = (size_t)nt * KT + kb + i % L;
                g4_prefetch_l2(sub < 4 ? wq + ti * 512 + 128 * sub : sub == 4 ? ws + ti * 64 : wz + ti * 16);
            }
    }
    float acc[F][4];
    gv_zero(acc);

    // Load cursor, as byte offsets into the packed arrays (tile ti at q + 512 ti, s + 64 ti,
    // z + 16 ti), stepped by one tile along the warp's k range and, past its end, to the same
    // range of the warp's feature tile in the next group (G * FT feature tiles further).
    const size_t group_jump = (size_t)G * FT * KT - (L - 1);
    size_t lti = (size_t)tile_nt(0) * KT + kb;
    bool lok = tile_nt(0) < NT;
    int lr = 0, lj = 0;
    const char *q0 = (const char *)w0.q + 16 * lane, *q1 = (const char *)w1.q + 16 * lane;
    const char *s0 = (const char *)w0.s + 4 * pair, *s1 = (const char *)w1.s + 4 * pair;
    const char *z0 = (const char *)w0.z + pair, *z1 = (const char *)w1.z + pair;
    auto load_next = [&](gv_item &it) {
        if (lok) {
            it.q[0] = ldg_stream(q0 + lti * 512);
            it.s[0] = ldg_stream_u32(s0 + lti * 64);
            it.z[0] = ldg_stream_u8(z0 + lti * 16);
            if constexpr (FUSED) {
                it.q[1] = ldg_stream(q1 + lti * 512);
                it.s[1] = ldg_stream_u32(s1 + lti * 64);
                it.z[1] = ldg_stream_u8(z1 + lti * 16);
            }
        } else {
#pragma unroll
            for (int ff = 0; ff < F; ff++) it.q[ff] = zero4, it.s[ff] = it.z[ff] = 0u;
        }
        if (++lr == L) {
            lr = 0;
            lti += group_jump;
            lok = tile_nt(++lj) < NT;
        } else {
            lti++;
        }
    };

    // The first U tiles load into the ring before the wait: immutable weights, in the one load
    // form pdl.cuh allows there (ldg_stream*), so a kernel made resident early by PDL holds
    // its first weights in registers when the previous kernel completes.
    gv_item ring[U];
#pragma unroll
    for (int u = 0; u < U; u++)
        if (u < n) load_next(ring[u]);
    g4_pdl_wait();
    g4_pdl_trigger();
    if constexpr (PRO) {
        gv_norm_prologue(pro, xs, M, K);
        xrow = xs + (size_t)(tok ? g : 0) * K + 16 * t;
    }

    // x of the first U tiles into L1 now, so its L2 round trip overlaps the weights' (x is the
    // previous kernel's output: read only after the wait)
    if (!PRO && tok) gv_prefetch_x_l1<U>(xrow, kb, L, n);
    int cj = 0, cr = 0;                                     // compute cursor
    const __half *px = xrow + (size_t)kb * 64, *px0 = px; // x of the tile being computed
    for (int i0 = 0; i0 < n; i0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (i0 + u >= n) break; // warp-uniform
            uint4 xa = zero4, xb = zero4;
            if (PRO && tok) { // shared memory
                xa = *(const uint4 *)px;
                xb = *(const uint4 *)(px + 8);
            } else if (tok) {
                xa = __ldg((const uint4 *)px);
                xb = __ldg((const uint4 *)(px + 8));
            }
            const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
            for (int ff = 0; ff < F; ff++) {
                const q4k kc = q4_consts(ring[u].s[ff], ring[u].z[ff]);
                const uint32_t words[4] = {ring[u].q[ff].x, ring[u].q[ff].y, ring[u].q[ff].z,
                                           ring[u].q[ff].w};
#pragma unroll
                for (int st = 0; st < 4; st++) {
                    uint32_t a[4];
                    q4_dequant_word(words[st], kc, a);
                    mma_16816(acc[ff], a, xw[2 * st], xw[2 * st + 1]);
                }
            }
            if (i0 + u + U < n) load_next(ring[u]); // refill this slot with the tile U ahead
            px += 64;
            if (++cr == L) {
                gv_flush<F, W>(make_float4(acc[0][0], acc[0][1], acc[0][2], acc[0][3]),
                               make_float4(acc[F - 1][0], acc[F - 1][1], acc[F - 1][2],
                                           acc[F - 1][3]),
                               y, bias, epi, M, N, tile_nt(cj), warp, f, s, S, CS, cj & 1,
                               &red[0][0][0][0], PRO ? pro.mul : nullptr, pro.ldm);
                cr = 0;
                cj++;
                px = px0;
                gv_zero(acc);
            }
        }
    }
    if (CS > 1) cg::this_cluster().sync(); // keep every CTA's partials alive until rank 0 read them
}

// The launch plan of the streaming GEMV for a shape: the K split st (S warps of a CTA x CS CTAs
// of a cluster), the groups of FT = 8 / S feature tiles and the grid, and U, the tiles a warp keeps
// in flight (U of the plain weight, U / 2 of each of the fused pair: the same bytes). st grows
// until every SM has CPS CTAs (G4_GEMV_CPS, default 1: one CTA of 8 warps an SM, so the next
// kernel's CTAs fit beside it for the PDL overlap; the register count allows 2), never past 2
// CTAs an SM (all resident), K / 64 or 64. Shapes with enough feature tiles keep st = 1 and
// walk their groups with a persistent grid of PCPS CTAs an SM (G4_GEMV_PCPS, default 2: the
// lm_head streams 35% faster with 16 warps an SM than with 8, bench/NOTES.md).
struct gv_plan {
    int S, CS, groups, grid, U;
};

struct gv_force_t {
    int split, ctas;
};
gv_force_t g_gv_force = {0, 0};

gv_plan gemv_plan(int N, int K, bool fused, int W = GV_WARPS) {
    static int cps = -1, pcps = -1, u_env = -1, cap = -1;
    if (cps < 0) {
        cps = env_int("G4_GEMV_CPS", 1, 1, 2);
        cap = env_int("G4_GEMV_CTA_CAP", 2, 1, 3);
        pcps = env_int("G4_GEMV_PCPS", 2, 1, 2);
        u_env = env_int("G4_GEMV_U", 8, 2, 8);
    }
    const int NT = N / 16, KT = K / 64, sms = num_sms();
    const int kmax = KT >= 64 ? 64 : 1 << (31 - __builtin_clz(KT)); // largest power of 2 <= K/64
    auto ctas = [&](int st) {
        const int S = st < W ? st : W, FT = W / S;
        return (long)((NT + FT - 1) / FT) * (st / S);
    };
    // The K split stops at `cap` CTAs an SM (G4_GEMV_CTA_CAP, default 2: all resident; 1, an
    // A/B: room beside every CTA for the next kernel's under PDL, whose weights then load
    // while this one runs: measured 12% slower end to end, bench/NOTES.md; 3: one CTA an SM
    // only where each warp's k range then fits its ring, i.e. the whole weight is still in
    // flight at once).
    // (targets and caps in warps, 8 an SM per CPS; CTAs of W warps)
    const long target = (long)sms * cps * GV_WARPS / W, hw_cap = (long)sms * 2 * GV_WARPS / W,
               one_cap = (long)sms * GV_WARPS / W;
    const int ring = fused ? (u_env / 2 < 1 ? 1 : u_env / 2) : u_env;
    auto split = [&](long cap_ctas) {
        int s = 1;
        while (s < kmax && ctas(s) < target && ctas(s * 2) <= cap_ctas) s *= 2;
        return s;
    };
    int st = 1;
    if (g_gv_force.split) {
        st = g_gv_force.split < kmax ? g_gv_force.split : kmax;
    } else {
        st = split(cap == 1 ? one_cap : hw_cap);
        const int st1 = cap == 3 ? split(one_cap) : st;
        if (st1 < st && (KT + st1 - 1) / st1 <= ring) st = st1;
    }
    gv_plan p{};
    p.S = st < W ? st : W;
    p.CS = st / p.S;
    p.groups = (NT + W / p.S - 1) / (W / p.S);
    const long max_ctas = g_gv_force.ctas   ? g_gv_force.ctas
                          : p.groups <= hw_cap ? p.groups
                                               : (long)sms * pcps * GV_WARPS / W;
    p.grid = p.CS > 1 || p.groups <= max_ctas ? p.groups : (int)max_ctas;
    p.U = ring;
    return p;
}

template <bool FUSED, int U, bool PRO, int W = GV_WARPS>
void launch_stream(void *y, const __half *x, q4w w0, q4w w1, const __half *bias, int M, int N,
                   int K, int epi, const gv_plan &p, const gv_pro &pro, cudaStream_t stream) {
    const int pf = 8; // tiles a warp prefetches into L2 before its wait
    const size_t smem = PRO ? (size_t)M * K * 2 : 0; // <= 32 KB (M <= 8, K <= 2048)
    if constexpr (PRO) { // static + dynamic may pass the 48 KB a launch gets without opting in
        static bool opted = false;
        if (!opted) {
            G4_CUDA_CHECK(cudaFuncSetAttribute(gemv_q4_stream_kernel<FUSED, U, PRO, W>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               8 * 2048 * 2));
            opted = true;
        }
    }
    if (p.CS > 1)
        g4_pdl_launch_cluster(gemv_q4_stream_kernel<FUSED, U, PRO, W>, dim3(p.grid, p.CS, 1),
                              dim3(W * 32, 1, 1), smem, stream, dim3(1, p.CS, 1), y, x, w0, w1,
                              bias, M, N, K, epi, p.S, p.CS, p.groups, pf, pro);
    else
        g4_pdl_launch(gemv_q4_stream_kernel<FUSED, U, PRO, W>, dim3(p.grid, 1, 1),
                      dim3(W * 32, 1, 1), smem, stream, y, x, w0, w1, bias, M, N, K, epi, p.S, p.CS,
                      p.groups, pf, pro);
}

// A plain weight whose 8-warp plan splits K over a cluster runs 16-warp CTAs instead, one an
// SM, the same warps and K split with no cluster (the cluster's two barriers and DSMEM sum out
// of the chain); U 8 plans only. H200 (bench/NOTES.md, eleventh session, twice in one run):
// q_proj 4.0 -> 3.4 us, o_proj 4.0 -> 3.1, down 6.1 -> 5.3, down_wide 9.7 -> 9.2; Q4 decode
// 607.2 -> 614.3 tok/s. G4_GEMV_W16=0 (read once) keeps the cluster of two.
bool gemv_w16(const gv_plan &p8) {
    static const int on = env_int("G4_GEMV_W16", 1, 0, 1);
    return on && p8.CS > 1 && p8.U == 8 && !g_gv_force.split && !g_gv_force.ctas;
}

template <bool FUSED, bool PRO>
void launch_gemv2(void *y, const __half *x, q4w w0, q4w w1, const __half *bias, int M, int N, int K,
                  int epi, const gv_pro &pro, cudaStream_t stream) {
    const gv_plan p = gemv_plan(N, K, FUSED);
    // plain U 2, 4, 8; fused 1, 2, 4 (fused 8 would spill)
    if constexpr (FUSED) {
        if (p.U <= 1)
            launch_stream<true, 1, PRO>(y, x, w0, w1, bias, M, N, K, epi, p, pro, stream);
        else if (p.U == 2)
            launch_stream<true, 2, PRO>(y, x, w0, w1, bias, M, N, K, epi, p, pro, stream);
        else
            launch_stream<true, 4, PRO>(y, x, w0, w1, bias, M, N, K, epi, p, pro, stream);
    } else {
        if (gemv_w16(p))
            launch_stream<false, 8, PRO, 16>(y, x, w0, w1, bias, M, N, K, epi,
                                             gemv_plan(N, K, false, 16), pro, stream);
        else if (p.U <= 2)
            launch_stream<false, 2, PRO>(y, x, w0, w1, bias, M, N, K, epi, p, pro, stream);
        else if (p.U <= 4)
            launch_stream<false, 4, PRO>(y, x, w0, w1, bias, M, N, K, epi, p, pro, stream);
        else
            launch_stream<false, 8, PRO>(y, x, w0, w1, bias, M, N, K, epi, p, pro, stream);
    }
}

// =============================================================================================
// GEMV (M <= 8), the third design (issue 29, G4_GEMV=v3; bench/NOTES.md "The Q4 GEMV, third
// design"). The streaming kernel's plan and ring (groups of feature units walked by a persistent
// grid, K split over the warps of a CTA and a cluster, U steps in flight a warp, the reductions
// of gv_flush), with less issued a tile: its SASS spent ~120 instructions a tile and warp of
// which 56 dequantize and multiply; the rest was the load cursor's 64-bit address arithmetic,
// the zero-filled loads past the edge (branches), and x loaded for every tile.
//   - A warp's unit is T feature tiles (plain: T = 2, 32 features) or the gate and up tiles of
//     one feature tile (fused: F = 2, T = 1): the E = F T items of a step share one x fragment
//     (two 16-byte loads for E tiles).
//   - Load addresses from 32-bit tile indices (one IMAD.WIDE each); past the edge (the last
//     group's missing units, an odd tile count's second tile) a warp reloads the last real tile
//     and never stores it, and B columns of tokens >= M read token 0's x: no zero fills, no
//     branches around loads.
// The arithmetic is the other kernels': every weight is fp16((q - zp) * scale) (q4_dequant_word),
// products summed in fp32 by the tensor cores, splits reduced in a fixed order (deterministic).
// Hoisting the zero point and the scale out of the inner loop (s (sum x q - z sum x)) was not
// taken: it changes each weight's rounding (fp16(q s) or the unrounded weight against
// fp16((q - z) s)), which the Q4 tolerance of tests/test_cuda_gemm.c does not cover at small K.
// =============================================================================================
// p + (64-bit) a * b in one IMAD.WIDE.U32 (the compiler otherwise rebuilt each load address
// from the tile index with 3-4 instructions).
__device__ __forceinline__ const char *mad_wide(uint32_t a, uint32_t b, const char *p) {
    const char *r;
    asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(r) : "r"(a), "r"(b), "l"(p));
    return r;
}

// A lane's x fragment of one step (the third design): x[16 t .. 16 t + 15] of its token row at
// px, from shared memory (SMEM: the add-norm prologue's) or through L1.
template <bool SMEM> __device__ __forceinline__ void gv_x_frag(const __half *px, uint32_t xw[8]) {
    uint4 xa, xb;
    if constexpr (SMEM) {
        xa = *(const uint4 *)px;
        xb = *(const uint4 *)(px + 8);
    } else {
        xa = __ldg((const uint4 *)px);
        xb = __ldg((const uint4 *)(px + 8));
    }
    xw[0] = xa.x, xw[1] = xa.y, xw[2] = xa.z, xw[3] = xa.w;
    xw[4] = xb.x, xw[5] = xb.y, xw[6] = xb.z, xw[7] = xb.w;
}

// The end of a warp's unit in group j (the third design): each of its T feature tiles (from
// nt0) flushed (gv_flush: the F weights' accumulators acc[ff * T + tt]), then the accumulators
// zeroed for the next group.
template <int F, int T>
__device__ __forceinline__ void gv_flush_unit(float (&acc)[F * T][4], void *y, const __half *bias,
                                              int epi, int M, int N, int nt0, int j, int warp,
                                              int f, int s, int S, int CS, float4 *red,
                                              const __half *mul, int ldm) {
#pragma unroll
    for (int tt = 0; tt < T; tt++)
        gv_flush<F>(make_float4(acc[tt][0], acc[tt][1], acc[tt][2], acc[tt][3]),
                    make_float4(acc[(F - 1) * T + tt][0], acc[(F - 1) * T + tt][1],
                                acc[(F - 1) * T + tt][2], acc[(F - 1) * T + tt][3]),
                    y, bias, epi, M, N, nt0 + tt, warp, f, s, S, CS, (j * T + tt) & 1, red, mul,
                    ldm);
    gv_zero(acc);
}

constexpr int GV3_PROBE_LOADS = 1, GV3_PROBE_MATH = 2, GV3_PROBE_SHELL = 3;

// The weight load walk the third and fourth designs share (issue 29). A warp's units are T
// feature tiles of each of its F weights (unit j in group blockIdx.x + j * G), L steps a unit (k
// tiles kb .. kb + L - 1), U steps in flight in a register ring; a lane loads its 16 bytes of
// each item's packed words and the scale / zero-point record `pair` (each design says which).
// PROBE: gemv_q4_v3_kernel's probe forms (see there; 0 in the fourth design).
//
// Its form keeps the kernels' SASS as it was when each kernel had its own copy (checked
// instruction for instruction when folded; bench/NOTES.md "The third and fourth designs' walk
// folded"), so mind it when changing this:
// - the ring and the cursor are the kernel's locals, held here by reference: as members, the
//   arrays (indexed by loop counters until unrolling) kept the whole object in memory that long
//   and the compiler ordered and allocated the walk differently;
// - lane is threadIdx.x & 31 read where used (the compiler then knows it is < 32), n and
//   pf_items come by reference: as plain values the compiler rewrote the prefetch's tests and
//   operand order differently.
template <int F, int T, int U, int PROBE = 0> struct gv_walk {
    static constexpr int E = F * T; // items a step: weight ff's tile tt is ff * T + tt
    int NT, KT, kb, L, G, FT, f;
    // Load cursor: bt[tt] = the tile index (nt * KT + kb) of the unit's tile tt in load group lj
    // (clamped to the last real tile past the edge), lr the step within the k range.
    uint32_t (&bt)[T];
    int &lr, &lj;
    const char *(&qb)[F], *(&sb)[F], *(&zb)[F]; // the lane's words of tile 0 in w0 / w1
    uint4 (&rq)[U][E];                          // the ring: packed words, scales (an fp16
    uint32_t (&rs)[U][E], (&rz)[U][E];          // pair), zero points (a byte) of U steps

    // first feature tile of the warp's unit in its j-th group (>= NT: past the edge, no output)
    __device__ __forceinline__ int unit_nt(int j) const {
        return (((int)blockIdx.x + j * G) * FT + f) * T;
    }

    // PDL prologue: L2 prefetch of the pf_items steps after the ring's first U (lanes 8 e + 0-3:
    // the four 128-byte lines of item e's packed words, 8 e + 4 its scales, 8 e + 5 its zero
    // points); then the ring's loads (start). None in the probe forms that load no weights.
    __device__ __forceinline__ void prefetch_l2(const q4w &w0, const q4w &w1, const int &n,
                                                const int &pf_items) const {
        const int lane = threadIdx.x & 31;
        const int pn = n < U + pf_items ? n : U + pf_items;
        const int sub = lane & 7, e = lane >> 3, ff = e / T, tt = e % T;
        const char *wq = (const char *)(ff ? w1.q : w0.q), *ws = (const char *)(ff ? w1.s : w0.s),
                   *wz = (const char *)(ff ? w1.z : w0.z);
        if (e < E && sub < 6 && (PROBE == 0 || PROBE == GV3_PROBE_LOADS))
            for (int i = U; i < pn; i++) {
                const int nt = unit_nt(i / L) + tt;
                if (nt >= NT) break;
                const size_t ti = (size_t)nt * KT + kb + i % L;
                g4_prefetch_l2(sub < 4    ? wq + ti * 512 + 128 * sub
                               : sub == 4 ? ws + ti * 64
                                          : wz + ti * 16);
            }
    }

    __device__ __forceinline__ void set_bases(int j) {
#pragma unroll
        for (int tt = 0; tt < T; tt++) {
            const int nt = unit_nt(j) + tt;
            bt[tt] = (uint32_t)(nt < NT ? nt : NT - 1) * (uint32_t)KT + (uint32_t)kb;
        }
    }

    // The next step's words into ring slot u; the cursor moves on (to the next group after the
    // unit's last step).
    __device__ __forceinline__ void load_next(int u) {
#pragma unroll
        for (int tt = 0; tt < T; tt++) {
            const uint32_t ti = bt[tt] + (uint32_t)lr;
#pragma unroll
            for (int ff = 0; ff < F; ff++) {
                if constexpr (PROBE == GV3_PROBE_MATH) { // words from the tile index, no load
                    const uint32_t h = (ti + 0x9e3779b9u * ff) * 0x85ebca6bu + (threadIdx.x & 31);
                    rq[u][ff * T + tt] = make_uint4(h, h ^ 0x5bd1e995u, h * 3u, h + 0x27d4eb2fu);
                    rs[u][ff * T + tt] = (h & 0x03ff03ffu) | 0x20002000u; // fp16 scales ~0.01
                    rz[u][ff * T + tt] = h >> 24;
                } else if constexpr (PROBE != GV3_PROBE_SHELL) {
                    rq[u][ff * T + tt] = ldg_stream(mad_wide(ti, 512, qb[ff]));
                    rs[u][ff * T + tt] = ldg_stream_u32(mad_wide(ti, 64, sb[ff]));
                    rz[u][ff * T + tt] = ldg_stream_u8(mad_wide(ti, 16, zb[ff]));
                }
            }
        }
        if (++lr == L) {
            lr = 0;
            set_bases(++lj);
        }
    }

    // The lane's bases, then the first U steps (of n) into the ring before the wait: immutable
    // weights, in the one load form pdl.cuh allows there (ldg_stream*).
    __device__ __forceinline__ void start(const q4w &w0, const q4w &w1, int pair, int n) {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int ff = 0; ff < F; ff++) {
            qb[ff] = (const char *)(ff ? w1.q : w0.q) + 16 * lane;
            sb[ff] = (const char *)(ff ? w1.s : w0.s) + 4 * pair;
            zb[ff] = (const char *)(ff ? w1.z : w0.z) + pair;
        }
        set_bases(0);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (u < n) load_next(u);
    }
};

// PROBE (kernel bench only, issue 29: where the time goes; outputs meaningless, not checked):
// 0 today's kernel; GV3_PROBE_LOADS every load kept, the dequantize + MMA replaced by an XOR of
// the loaded words into the accumulators' bits; GV3_PROBE_MATH no weight load or L2 prefetch
// (the ring's words made from the tile index), dequantize + MMA as today; GV3_PROBE_SHELL
// neither (launch, wait, x prefetch, the step walk, flush and stores). Same flush in all.
template <int F, int T, int U, bool PRO, int PROBE = 0>
__global__ void __launch_bounds__(GV_WARPS * 32, 2)
    gemv_q4_v3_kernel(void *y, const __half *__restrict__ x, q4w w0, q4w w1,
                      const __half *__restrict__ bias, int M, int N, int K, int epi, int S, int CS,
                      int groups, int pf_items, gv_pro pro) {
    static_assert(PROBE == 0 || !PRO, "probe forms: x given only");
    constexpr int E = F * T;                     // items a step: weight ff's tile tt is ff * T + tt
    __shared__ float4 red[2][GV_WARPS][F][32];   // split partials, double-buffered by flush
    extern __shared__ __align__(16) __half xs[]; // PRO: the prologue's x [M][K]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int NT = N / 16, KT = K / 64;
    const int FT = GV_WARPS / S, f = warp / S, s = warp % S;
    const int rank = blockIdx.y, ST = S * CS, sp = rank * S + s;
    const int kb = (int)((long long)KT * sp / ST), L = (int)((long long)KT * (sp + 1) / ST) - kb;
    const int G = gridDim.x;
    const int nj = (groups - (int)blockIdx.x + G - 1) / G; // groups this CTA walks
    const int n = nj * L;                                  // this warp's steps
    const int pair = 2 * g + (t >> 1); // scale / zero-point record of (g, block t / 2)
    const int xr = g < M ? g : 0; // B column g is token g; columns >= M (never stored) read row 0
    // the ring and the load cursor, walked by gv_walk (which says why they are locals here)
    uint32_t bt[T];
    int lr = 0, lj = 0;
    const char *qb[F], *sb[F], *zb[F];
    uint4 rq[U][E];
    uint32_t rs[U][E], rz[U][E];
    gv_walk<F, T, U, PROBE> walk{NT, KT, kb, L, G, FT, f, bt, lr, lj, qb, sb, zb, rq, rs, rz};
    walk.prefetch_l2(w0, w1, n, pf_items);
    walk.start(w0, w1, pair, n);
    g4_pdl_wait();
    g4_pdl_trigger();
    const __half *xrow;
    if constexpr (PRO) {
        gv_norm_prologue(pro, xs, M, K);
        xrow = xs + (size_t)xr * K + 16 * t;
    } else {
        xrow = x + (size_t)xr * K + 16 * t;
        gv_prefetch_x_l1<U>(xrow, kb, L, n); // x of the first U steps
    }

    float acc[E][4];
    gv_zero(acc);
    int cj = 0, cr = 0;                                   // compute cursor
    const __half *px = xrow + (size_t)kb * 64, *px0 = px; // x of the step being computed
    for (int i0 = 0; i0 < n; i0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (i0 + u >= n) break; // warp-uniform
            if constexpr (PROBE == GV3_PROBE_SHELL) { // the step walk's x address kept live only
                acc[0][0] = __uint_as_float(__float_as_uint(acc[0][0]) ^ (uint32_t)(uintptr_t)px);
            } else if constexpr (PROBE == GV3_PROBE_LOADS) { // the loaded words into acc's bits
                uint32_t xw[8];
                gv_x_frag<PRO>(px, xw);
                const uint32_t xf = xw[0] ^ xw[1] ^ xw[2] ^ xw[3] ^ xw[4] ^ xw[5] ^ xw[6] ^ xw[7];
#pragma unroll
                for (int e = 0; e < E; e++)
                    acc[e][0] =
                        __uint_as_float(__float_as_uint(acc[e][0]) ^ rq[u][e].x ^ rq[u][e].y ^
                                        rq[u][e].z ^ rq[u][e].w ^ rs[u][e] ^ rz[u][e] ^ xf);
            } else {
                uint32_t xw[8];
                gv_x_frag<PRO>(px, xw);
#pragma unroll
                for (int e = 0; e < E; e++) {
                    const q4k kc = q4_consts(rs[u][e], rz[u][e]);
                    const uint32_t words[4] = {rq[u][e].x, rq[u][e].y, rq[u][e].z, rq[u][e].w};
#pragma unroll
                    for (int st = 0; st < 4; st++) {
                        uint32_t a[4];
                        q4_dequant_word(words[st], kc, a);
                        mma_16816(acc[e], a, xw[2 * st], xw[2 * st + 1]);
                    }
                }
            }
            if (i0 + u + U < n) walk.load_next(u); // refill this slot with the step U ahead
            px += 64;
            if (++cr == L) {
                gv_flush_unit<F, T>(acc, y, bias, epi, M, N, walk.unit_nt(cj), cj, warp, f, s, S,
                                    CS, &red[0][0][0][0], PRO ? pro.mul : nullptr, pro.ldm);
                cr = 0;
                cj++;
                px = px0;
            }
        }
    }
    if (CS > 1) cg::this_cluster().sync(); // keep every CTA's partials alive until rank 0 read them
}

// The third design's launch: the streaming kernel's plan (gemv_plan) on units of T feature tiles
// (plain T = 2, fused T = 1), U = 4 steps in flight a warp (plain: 8 tiles, fused: 4 pairs: the
// bytes of the streaming kernel's default U 8 / fused 4).
constexpr int GV3_U = 4;

// The probe form of the next third-design launches on x given (gemv_q4_v3_kernel's PROBE; 0:
// today's): g4_gemm_gemv3_probe's, kernel benches only.
int g_gv3_probe = 0;

template <bool FUSED, bool PRO, int PROBE = 0>
void launch_gemv3(void *y, const __half *x, q4w w0, q4w w1, const __half *bias, int M, int N, int K,
                  int epi, const gv_pro &pro, cudaStream_t stream) {
    if constexpr (!PRO && PROBE == 0) { // a probe form (kernel benches, g4_gemm_gemv3_probe)
        switch (g_gv3_probe) {
        case GV3_PROBE_LOADS:
            return launch_gemv3<FUSED, false, GV3_PROBE_LOADS>(y, x, w0, w1, bias, M, N, K, epi,
                                                               pro, stream);
        case GV3_PROBE_MATH:
            return launch_gemv3<FUSED, false, GV3_PROBE_MATH>(y, x, w0, w1, bias, M, N, K, epi, pro,
                                                              stream);
        case GV3_PROBE_SHELL:
            return launch_gemv3<FUSED, false, GV3_PROBE_SHELL>(y, x, w0, w1, bias, M, N, K, epi,
                                                               pro, stream);
        default:
            break;
        }
    }
    constexpr int F = FUSED ? 2 : 1, T = FUSED ? 1 : 2;
    const int units = (N / 16 + T - 1) / T;
    const gv_plan p = gemv_plan(16 * units, K, FUSED);
    const int pf = 8; // steps a warp prefetches into L2 before its wait
    const size_t smem = PRO ? (size_t)M * K * 2 : 0; // <= 32 KB (M <= 8, K <= 2048)
    auto kern = gemv_q4_v3_kernel<F, T, GV3_U, PRO, PROBE>;
    if constexpr (PRO) { // static + dynamic may pass the 48 KB a launch gets without opting in
        static bool opted = false;
        if (!opted) {
            G4_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               8 * 2048 * 2));
            opted = true;
        }
    }
    // (the kernel named at each launch: tests/test_pdl_sass.sh reads launch sites by name)
    if (p.CS > 1)
        g4_pdl_launch_cluster(gemv_q4_v3_kernel<F, T, GV3_U, PRO, PROBE>, dim3(p.grid, p.CS, 1),
                              dim3(GV_WARPS * 32, 1, 1), smem, stream, dim3(1, p.CS, 1), y, x, w0,
                              w1, bias, M, N, K, epi, p.S, p.CS, p.groups, pf, pro);
    else
        g4_pdl_launch(gemv_q4_v3_kernel<F, T, GV3_U, PRO, PROBE>, dim3(p.grid, 1, 1),
                      dim3(GV_WARPS * 32, 1, 1), smem, stream, y, x, w0, w1, bias, M, N, K, epi,
                      p.S, p.CS, p.groups, pf, pro);
}

// =============================================================================================
// GEMV (M <= 2), the fourth design (issue 29, G4_GEMV=v4): the third design's plan, ring and
// reductions with the codes multiplied as integers (kernels/gemv_q4_int.h: the arithmetic, the
// fragments and the x staging). The third design's probes put its time at the issue of ~22
// instructions a lane-word, 14 of them the fp16 dequantize; here a word costs two masks, a
// shift and one integer MMA, and the scale and zero point apply once a 32-input block and
// lane in fp32 (the zero point through the MMA's C operand). x is quantized once a CTA, after
// the wait, into shared memory (the CTA's k range: 144 bytes a token and k tile). Measured
// (H100, bench/NOTES.md "Thirty-first session outcomes"): 116 instructions a step against
// 174-181 bought 6-11% on the third design's shapes (its loads-only probe floor is 73-79%), and
// its unrounded weights are not the other kernels' fp16((q - zp) * scale): a switch, off.
// =============================================================================================
__device__ __forceinline__ void imma_16816_u8s8(int c[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
        "{%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

// x of M tokens (rows of ld halves, global memory or shared when SMEM) at k tiles [k0, k1) into
// the staging: xq [m][kt - k0] 128 bytes (hi 64, lo 64, input c at gqi_stage_pos(c)), xm
// [m][kt - k0][b] (sx, -sum X as int bits). Four lanes quantize one 32-input block (8 inputs
// each: one 16-byte load); ends with __syncthreads.
template <bool SMEM>
__device__ void gv4_stage_x(const __half *x, int ld, int M, int k0, int k1, uint8_t *xq,
                            float2 *xm) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, q = lane & 3;
    const int LC = k1 - k0, nblk = M * LC * 2;
    for (int blk0 = warp * 8; blk0 < nblk; blk0 += GV_WARPS * 8) { // warp-uniform
        const int blk = blk0 + (lane >> 2);
        const bool on = blk < nblk;
        const int m = on ? blk / (2 * LC) : 0, r = on ? blk % (2 * LC) : 0, kt = r >> 1, b = r & 1;
        const int c0 = 32 * b + 8 * q; // the lane's first input within the k tile
        uint4 raw = make_uint4(0u, 0u, 0u, 0u);
        if (on) {
            const __half *p = x + (size_t)m * ld + (size_t)(k0 + kt) * 64 + c0;
            raw = SMEM ? *(const uint4 *)p : __ldg((const uint4 *)p);
        }
        const uint32_t rw[4] = {raw.x, raw.y, raw.z, raw.w};
        float v[8], am = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float2 f = __half22float2(u2h(rw[e]));
            v[2 * e] = f.x, v[2 * e + 1] = f.y;
            am = fmaxf(am, fmaxf(fabsf(f.x), fabsf(f.y)));
        }
        am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 1));
        am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 2));
        float sx, inv;
        gqi_block_step(am, &sx, &inv);
        int X[8], sum = 0;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            X[e] = gqi_quant(v[e], inv);
            sum += X[e];
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        if (!on) continue;
        // the words of inputs c0 .. c0 + 3 and c0 + 4 .. c0 + 7 (at bytes c0, c0 + 4)
        uint8_t *row = xq + ((size_t)m * LC + kt) * GQI_STAGE_BYTES;
        uint2 hi, lo;
        hi.x = gqi_stage_word(gqi_hi(X[0]), gqi_hi(X[1]), gqi_hi(X[2]), gqi_hi(X[3]));
        hi.y = gqi_stage_word(gqi_hi(X[4]), gqi_hi(X[5]), gqi_hi(X[6]), gqi_hi(X[7]));
        lo.x = gqi_stage_word(gqi_lo(X[0]), gqi_lo(X[1]), gqi_lo(X[2]), gqi_lo(X[3]));
        lo.y = gqi_stage_word(gqi_lo(X[4]), gqi_lo(X[5]), gqi_lo(X[6]), gqi_lo(X[7]));
        *(uint2 *)(row + c0) = hi;
        *(uint2 *)(row + 64 + c0) = lo;
        if (q == 0) xm[((size_t)m * LC + kt) * 2 + b] = make_float2(sx, __int_as_float(-sum));
    }
    __syncthreads();
}

// The k tiles [k0, k1) the CTA of cluster rank `rank` stages: those of its S warps' ranges.
__host__ __device__ __forceinline__ void gv4_cta_range(int KT, int S, int CS, int rank, int *k0,
                                                       int *k1) {
    const int ST = S * CS;
    *k0 = (int)((long long)KT * rank * S / ST);
    *k1 = (int)((long long)KT * (rank * S + S) / ST);
}

// The fourth design's kernel: gemv_q4_v3_kernel's plan and flush, gv_walk's L2 prefetch and ring;
// each step one 16-byte B load (the lane's staged hi or lo bytes, or zeros: gqi_b_row) and the
// (sx, -sum X) of the lane's (token, block), then per item one integer MMA a word and the
// block's finish. acc[e][0 / 1]: features g / g + 8 of token t / 2, block t % 2's share.
template <int F, int T, int U, bool PRO>
__global__ void __launch_bounds__(GV_WARPS * 32, 2)
    gemv_q4_v4_kernel(void *y, const __half *__restrict__ x, q4w w0, q4w w1,
                      const __half *__restrict__ bias, int M, int N, int K, int epi, int S, int CS,
                      int groups, int pf_items, gv_pro pro) {
    constexpr int E = F * T;
    __shared__ float4 red[2][GV_WARPS][F][32];
    __shared__ __align__(16) uint32_t zero16[4]; // the B operand of lanes with no column
    extern __shared__ __align__(16) unsigned char gv4_smem[]; // PRO x [M][K] fp16, staging
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int NT = N / 16, KT = K / 64;
    const int FT = GV_WARPS / S, f = warp / S, s = warp % S;
    const int rank = blockIdx.y, ST = S * CS, sp = rank * S + s;
    const int kb = (int)((long long)KT * sp / ST), L = (int)((long long)KT * (sp + 1) / ST) - kb;
    const int G = gridDim.x;
    const int nj = (groups - (int)blockIdx.x + G - 1) / G;
    const int n = nj * L;
    const int pair = 2 * g + (t & 1); // scale / zero-point record of (g, block t % 2)
    // the ring and the load cursor, walked by gv_walk (which says why they are locals here)
    uint32_t bt[T];
    int lr = 0, lj = 0;
    const char *qb[F], *sb[F], *zb[F];
    uint4 rq[U][E];
    uint32_t rs[U][E], rz[U][E];
    gv_walk<F, T, U> walk{NT, KT, kb, L, G, FT, f, bt, lr, lj, qb, sb, zb, rq, rs, rz};
    walk.prefetch_l2(w0, w1, n, pf_items);
    walk.start(w0, w1, pair, n);
    g4_pdl_wait();
    g4_pdl_trigger();

    int k0, k1;
    gv4_cta_range(KT, S, CS, rank, &k0, &k1);
    const int LC = k1 - k0;
    uint8_t *xq = gv4_smem + (PRO ? (size_t)M * K * 2 : 0);
    float2 *xm = (float2 *)(xq + (size_t)M * LC * GQI_STAGE_BYTES);
    if (threadIdx.x < 4) zero16[threadIdx.x] = 0u;
    if constexpr (PRO) {
        __half *xs = (__half *)gv4_smem;
        gv_norm_prologue(pro, xs, M, K);
        gv4_stage_x<true>(xs, K, M, k0, k1, xq, xm);
    } else {
        gv4_stage_x<false>(x, K, M, k0, k1, xq, xm);
    }
    // this lane's B bytes (16 at byte 16 t of its staged half, a k tile apart) and finish pair
    const int brow = gqi_b_row(g, t, M);
    const int bstep = brow < 0 ? 0 : GQI_STAGE_BYTES;
    const uint8_t *pb0 = brow < 0 ? (const uint8_t *)zero16
                                  : xq + ((size_t)(brow >> 1) * LC + (kb - k0)) * GQI_STAGE_BYTES +
                                        (brow & 1) * 64 + 16 * t;
    const int dm = gqi_d_token(t) < M ? gqi_d_token(t) : 0; // (a token >= M: never stored)
    const float2 *pm0 = xm + ((size_t)dm * LC + (kb - k0)) * 2 + gqi_d_block(t);

    float acc[E][2];
#pragma unroll
    for (int e = 0; e < E; e++) acc[e][0] = acc[e][1] = 0.0f;
    int cj = 0, cr = 0;
    const uint8_t *pb = pb0;
    const float2 *pm = pm0;
    for (int i0 = 0; i0 < n; i0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (i0 + u >= n) break; // warp-uniform
            const uint4 bw = *(const uint4 *)pb;
            const uint32_t b4[4] = {bw.x, bw.y, bw.z, bw.w};
            const float2 mt = *pm;
            const int nsum = __float_as_int(mt.y);
#pragma unroll
            for (int e = 0; e < E; e++) {
                const uint32_t z = rz[u][e];
                int c[4] = {0, (int)(z & 15u) * nsum, 0, (int)(z >> 4 & 15u) * nsum};
                const uint32_t words[4] = {rq[u][e].x, rq[u][e].y, rq[u][e].z, rq[u][e].w};
#pragma unroll
                for (int st = 0; st < 4; st++)
                    imma_16816_u8s8(c, gqi_a0(words[st]), gqi_a1(words[st]), b4[st]);
                const float2 sc = __half22float2(u2h(rs[u][e]));
                acc[e][0] = fmaf((float)(c[0] * 256 + c[1]), sc.x * mt.x, acc[e][0]);
                acc[e][1] = fmaf((float)(c[2] * 256 + c[3]), sc.y * mt.x, acc[e][1]);
            }
            if (i0 + u + U < n) walk.load_next(u);
            pb += bstep;
            pm += 2;
            if (++cr == L) {
                // blocks summed (lanes t, t ^ 1), token 1 from lanes t + 2: the D layout of the
                // third design's flush (lane (g, 0): features g, g + 8 x tokens 0, 1)
                float4 d[E];
#pragma unroll
                for (int e = 0; e < E; e++) {
                    const float a = acc[e][0] + __shfl_xor_sync(0xffffffffu, acc[e][0], 1);
                    const float b = acc[e][1] + __shfl_xor_sync(0xffffffffu, acc[e][1], 1);
                    d[e] = make_float4(a, __shfl_xor_sync(0xffffffffu, a, 2), b,
                                       __shfl_xor_sync(0xffffffffu, b, 2));
                    acc[e][0] = acc[e][1] = 0.0f;
                }
#pragma unroll
                for (int tt = 0; tt < T; tt++)
                    gv_flush<F>(d[tt], d[(F - 1) * T + tt], y, bias, epi, M, N,
                                walk.unit_nt(cj) + tt, warp, f, s, S, CS, (cj * T + tt) & 1,
                                &red[0][0][0][0], PRO ? pro.mul : nullptr, pro.ldm);
                cr = 0;
                cj++;
                pb = pb0;
                pm = pm0;
            }
        }
    }
    if (CS > 1) cg::this_cluster().sync();
}

// Dynamic shared memory of a fourth-design launch: PRO's x and the largest CTA's staging.
size_t gv4_smem_bytes(int M, int K, const gv_plan &p, bool pro) {
    int lc = 0;
    for (int r = 0; r < p.CS; r++) {
        int k0, k1;
        gv4_cta_range(K / 64, p.S, p.CS, r, &k0, &k1);
        if (k1 - k0 > lc) lc = k1 - k0;
    }
    return (pro ? (size_t)M * K * 2 : 0) + (size_t)M * lc * (GQI_STAGE_BYTES + 16);
}
constexpr size_t GV4_SMEM_MAX = 96 * 1024; // two CTAs an SM with the static 16 KB

// The fourth design's unit of plain weights: T = 2 feature tiles a warp (the third design's: one
// B load and finish pair a step for two items), or G4_GEMV4_T=1 (read once; an A/B: the
// streaming kernel's plan, twice the units where N is small). Fused pairs: T = 1.
int gv4_plain_T() {
    static const int t = env_int("G4_GEMV4_T", 2, 1, 2);
    return t;
}

template <bool FUSED, bool PRO, int T>
void launch_gemv4_t(void *y, const __half *x, q4w w0, q4w w1, const __half *bias, int M, int N,
                    int K, int epi, const gv_pro &pro, cudaStream_t stream) {
    constexpr int F = FUSED ? 2 : 1;
    const int units = (N / 16 + T - 1) / T;
    const gv_plan p = gemv_plan(16 * units, K, FUSED);
    const int pf = 8;
    const size_t smem = gv4_smem_bytes(M, K, p, PRO);
    static bool opted = false; // (one per instantiation)
    if (!opted) {
        G4_CUDA_CHECK(cudaFuncSetAttribute(gemv_q4_v4_kernel<F, T, GV3_U, PRO>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)GV4_SMEM_MAX));
        opted = true;
    }
    if (p.CS > 1)
        g4_pdl_launch_cluster(gemv_q4_v4_kernel<F, T, GV3_U, PRO>, dim3(p.grid, p.CS, 1),
                              dim3(GV_WARPS * 32, 1, 1), smem, stream, dim3(1, p.CS, 1), y, x, w0,
                              w1, bias, M, N, K, epi, p.S, p.CS, p.groups, pf, pro);
    else
        g4_pdl_launch(gemv_q4_v4_kernel<F, T, GV3_U, PRO>, dim3(p.grid, 1, 1),
                      dim3(GV_WARPS * 32, 1, 1), smem, stream, y, x, w0, w1, bias, M, N, K, epi,
                      p.S, p.CS, p.groups, pf, pro);
}

template <bool FUSED, bool PRO>
void launch_gemv4(void *y, const __half *x, q4w w0, q4w w1, const __half *bias, int M, int N, int K,
                  int epi, const gv_pro &pro, cudaStream_t stream) {
    if (FUSED || gv4_plain_T() == 2)
        launch_gemv4_t<FUSED, PRO, FUSED ? 1 : 2>(y, x, w0, w1, bias, M, N, K, epi, pro, stream);
    else
        launch_gemv4_t<false, PRO, 1>(y, x, w0, w1, bias, M, N, K, epi, pro, stream);
}

// =============================================================================================
// GEMM (prefill, and the skinny path of 8 < M <= 64 rows). Block = 4 warps, BM tokens x 8
// feature tiles (plain: 128 features; fused: the same 4 feature tiles = 64 features of the gate
// and of the up weight). Each stage of the cp.async pipeline holds, for one 64-input k tile:
//   x    [BM tokens][64 inputs] fp16, 128-byte rows, 16-byte chunk c at c ^ (row % 8)  BM * 128 B
//   q    8 slots x 512 bytes (the tiles as packed)                                        4096 B
//   s    8 slots x 64 bytes,  z  8 slots x 16 bytes                                        640 B
// Warp w owns slots (2w, 2w + 1) (plain) or (w, w + 4) (fused: gate, up); per k tile it
// dequantizes its two slots into A fragments (32 registers) and runs them against the BM / 8
// token groups of 8 (two 16-byte shared loads each, conflict-free thanks to the swizzle).
//
// Prefill: BM = 64, grid (feature groups, M / 64), the whole K per CTA, launched plainly.
// Skinny (issue 31's batched decode): the grid above has only N / 128 CTAs (12..16 at the
// decoder's N = 1536..2048 on 132 SMs), too few to stream the weights at bandwidth, so K splits
// over a cluster of S CTAs (grid.z, skinny_split: ~2 CTAs per SM, >= 3 k tiles each) whose
// partials are reduced in rank order through distributed shared memory (splitk_emit), and BM =
// 32 for M <= 32 (half the x traffic and MMAs). Launched with PDL (pdl.cuh): the wait is the
// first statement, no prologue.
// =============================================================================================
constexpr int Q4M_THREADS = 128;
constexpr int Q4M_QB = 4096, Q4M_SB = 512, Q4M_ZB = 128;

template <int BM> struct q4m_tile {
    static constexpr int STAGES = BM == 32 ? 6 : 4; // ~52 KB either way; more k tiles in flight
    static constexpr int XB = BM * 128;
    static constexpr int STAGE = XB + Q4M_QB + Q4M_SB + Q4M_ZB; // a multiple of 128
    static constexpr int SMEM = STAGES * STAGE;
    static constexpr int NV = 2 * (BM / 8) * 4; // accumulators a thread
    static_assert(NV * Q4M_THREADS * 4 <= SMEM, "split-K partials fit in the pipeline's memory");
};

template <bool FUSED, int BM>
__global__ void __launch_bounds__(Q4M_THREADS)
    gemm_q4_mma_kernel(void *y, const __half *__restrict__ x, q4w w0, q4w w1,
                       const __half *__restrict__ bias, int M, int N, int K, int epi) {
    using T = q4m_tile<BM>;
    constexpr int XB = T::XB, TT = BM / 8;
    extern __shared__ __align__(128) uint8_t smem[];
    g4_pdl_wait(); // (no-op for the plain prefill launch)
    g4_pdl_trigger();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.y * BM;
    const int NT = N / 16, KT = K / 64;
    // This CTA's k tiles: [kb, kb + nk) of split blockIdx.z of gridDim.z (the cluster rank).
    const int S = (int)gridDim.z, z = (int)blockIdx.z;
    const int kb = (int)((long long)KT * z / S), nk = (int)((long long)KT * (z + 1) / S) - kb;
    // Slot i of a stage: feature tile slot_nt(i) of weight (FUSED && i >= 4 ? up : gate/plain).
    auto slot_nt = [&](int i) {
        return FUSED ? (int)blockIdx.x * 4 + (i & 3) : (int)blockIdx.x * 8 + i;
    };

    auto load_stage = [&](int st, int kt) {
        uint8_t *base = smem + st * T::STAGE;
#pragma unroll
        for (int i = 0; i < BM * 8 / Q4M_THREADS; i++) { // x: BM * 8 chunks
            const int c = tid + i * Q4M_THREADS, r = c >> 3, kc = c & 7;
            const int gm = m0 + r;
            const bool ok = gm < M;
            cp_async16(smem_u32(base + r * 128 + ((kc ^ (r & 7)) << 4)),
                       ok ? x + (size_t)gm * K + (size_t)kt * 64 + kc * 8 : x, ok);
        }
#pragma unroll
        for (int i = 0; i < 256 / Q4M_THREADS; i++) { // q: 8 slots x 32 chunks
            const int c = tid + i * Q4M_THREADS, sl = c >> 5, ch = c & 31;
            const int nt = slot_nt(sl);
            const uint4 *wq = (FUSED && sl >= 4) ? w1.q : w0.q;
            const bool ok = nt < NT;
            const size_t ti = (size_t)nt * KT + kt;
            cp_async16(smem_u32(base + XB + sl * 512 + ch * 16),
                       ok ? (const void *)(wq + ti * 32 + ch) : (const void *)wq, ok);
        }
        if (tid < 40) { // scales: 8 slots x 4 chunks; zero points: 8 slots x 1 chunk
            const int sl = tid < 32 ? tid >> 2 : tid - 32;
            const int nt = slot_nt(sl);
            const bool up = FUSED && sl >= 4, ok = nt < NT;
            const size_t ti = (size_t)nt * KT + kt;
            if (tid < 32) {
                const uint32_t *ws = up ? w1.s : w0.s;
                const int ch = tid & 3;
                cp_async16(smem_u32(base + XB + Q4M_QB + sl * 64 + ch * 16),
                           ok ? (const void *)(ws + ti * 16 + ch * 4) : (const void *)ws, ok);
            } else {
                const uint8_t *wz = up ? w1.z : w0.z;
                cp_async16(smem_u32(base + XB + Q4M_QB + Q4M_SB + sl * 16),
                           ok ? (const void *)(wz + ti * 16) : (const void *)wz, ok);
            }
        }
    };

    float acc[2][TT][4];
#pragma unroll
    for (int f = 0; f < 2; f++)
#pragma unroll
        for (int tt = 0; tt < TT; tt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[f][tt][i] = 0.0f;

#pragma unroll
    for (int s = 0; s < T::STAGES - 1; s++) {
        if (s < nk) load_stage(s, kb + s);
        cp_async_commit();
    }
    const int pair = 2 * g + (t >> 1);
    for (int it = 0; it < nk; it++) {
        cp_async_wait<T::STAGES - 2>();
        __syncthreads();
        const int pf = it + T::STAGES - 1;
        if (pf < nk) load_stage(pf % T::STAGES, kb + pf);
        cp_async_commit();
        const uint8_t *base = smem + (it % T::STAGES) * T::STAGE;
        uint32_t a[2][4][4];
#pragma unroll
        for (int f = 0; f < 2; f++) {
            const int sl = FUSED ? warp + 4 * f : 2 * warp + f;
            const uint4 qv = *(const uint4 *)(base + XB + sl * 512 + lane * 16);
            const uint32_t sv = *(const uint32_t *)(base + XB + Q4M_QB + sl * 64 + pair * 4);
            const uint32_t zv = base[XB + Q4M_QB + Q4M_SB + sl * 16 + pair];
            const q4k kc = q4_consts(sv, zv);
            q4_dequant_word(qv.x, kc, a[f][0]);
            q4_dequant_word(qv.y, kc, a[f][1]);
            q4_dequant_word(qv.z, kc, a[f][2]);
            q4_dequant_word(qv.w, kc, a[f][3]);
        }
#pragma unroll
        for (int tt = 0; tt < TT; tt++) {
            const int r = tt * 8 + g;
            const uint4 u0 = *(const uint4 *)(base + r * 128 + (((2 * t) ^ (r & 7)) << 4));
            const uint4 u1 = *(const uint4 *)(base + r * 128 + (((2 * t + 1) ^ (r & 7)) << 4));
            const uint32_t xw[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
            for (int s = 0; s < 4; s++)
#pragma unroll
                for (int f = 0; f < 2; f++)
                    mma_16816(acc[f][tt], a[f][s], xw[2 * s], xw[2 * s + 1]);
        }
    }
    cp_async_wait<0>();

    // D fragment: acc[f][tt][i] is feature 16 slot_nt + g + 8 (i / 2), token m0 + 8 tt + 2 t + i
    // % 2. Unit u = 4 tt + i carries (acc[0][tt][i], acc[1][tt][i]): gate and up (fused) or the
    // warp's two slots (plain).
    float part[T::NV];
#pragma unroll
    for (int tt = 0; tt < TT; tt++)
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int f = 0; f < 2; f++) part[(tt * 4 + i) * 2 + f] = acc[f][tt][i];
    splitk_emit<T::NV, 2>(part, (float *)smem, [&](int u, const float *v) {
        const int tt = u >> 2, i = u & 3;
        const int m = m0 + tt * 8 + 2 * t + (i & 1);
        if (m >= M) return;
        if constexpr (FUSED) {
            const int n = 16 * slot_nt(warp) + g + 8 * (i >> 1);
            if (n < N)
                store_one(y, G4_GEMM_Y_F16, nullptr, (size_t)m * N + n, n, gelu_tanh(v[0]) * v[1]);
        } else {
#pragma unroll
            for (int f = 0; f < 2; f++) {
                const int n = 16 * slot_nt(2 * warp + f) + g + 8 * (i >> 1);
                if (n < N) store_one(y, epi, bias, (size_t)m * N + n, n, v[f]);
            }
        }
    });
}

// Prefill (skinny false): BM = 64, the whole K per CTA, a plain launch, as measured before.
// Skinny: BM = 32 for M <= 32, else 64; K split over a cluster of skinny_split CTAs; PDL.
template <bool FUSED, int BM>
void launch_mma_t(void *y, const __half *x, q4w w0, q4w w1, const __half *bias, int M, int N, int K,
                  int epi, bool skinny, cudaStream_t stream) {
    using T = q4m_tile<BM>;
    static bool smem_set = false;
    set_smem(gemm_q4_mma_kernel<FUSED, BM>, T::SMEM, &smem_set);
    const int NT = N / 16;
    const dim3 grid(FUSED ? (NT + 3) / 4 : (NT + 7) / 8, (M + BM - 1) / BM);
    if (!skinny) {
        gemm_q4_mma_kernel<FUSED, BM>
            <<<grid, Q4M_THREADS, T::SMEM, stream>>>(y, x, w0, w1, bias, M, N, K, epi);
        G4_CUDA_LAUNCH_CHECK();
        return;
    }
    const int S = skinny_split((long)grid.x * grid.y, K / 64);
    g4_pdl_launch_cluster(gemm_q4_mma_kernel<FUSED, BM>, dim3(grid.x, grid.y, S),
                          dim3(Q4M_THREADS, 1, 1), (size_t)T::SMEM, stream, dim3(1, 1, S), y, x, w0,
                          w1, bias, M, N, K, epi);
}

template <bool FUSED>
void launch_mma(void *y, const __half *x, q4w w0, q4w w1, const __half *bias, int M, int N, int K,
                int epi, bool skinny, cudaStream_t stream) {
    if (skinny && M <= 32)
        launch_mma_t<FUSED, 32>(y, x, w0, w1, bias, M, N, K, epi, true, stream);
    else
        launch_mma_t<FUSED, 64>(y, x, w0, w1, bias, M, N, K, epi, skinny, stream);
}

int check_weight(const char *who, const g4_q4_weight *w) {
    if (!w || !w->q || !w->scales || !w->zp)
        return g4_fail(G4_EUSER, "%s: Q4 weight is NULL or not repacked (g4_q4_repack)", who);
    if (w->n <= 0 || w->n % 16 || w->k <= 0 || w->k % 64)
        return g4_fail(G4_EUSER,
                       "%s: Q4 weight N = %d, K = %d, expected N %% 16 == 0 and "
                       "K %% 64 == 0",
                       who, w->n, w->k);
    return G4_OK;
}

// A forced Q4 GEMV design: g4_gemm_gemv_version's (tests, benches), else G4_GEMV=v1 .. v4 in
// the environment (read once; A/B runs): 1 the earlier kernel (gemv_q4_kernel), 2 the streaming
// one, 3 the third design (gemv_q4_v3_kernel), 4 the fourth (gemv_q4_v4_kernel, M <= 2; larger
// M take the automatic choice); 0 none (the choice below).
int g_gv_version = -1; // -1: the environment's
int g_gv_last = 0;     // the design of the last Q4 GEMV launched (g4_gemm_gemv_last_design)
int gemv_forced_version() {
    if (g_gv_version >= 0) return g_gv_version;
    static int env = -1;
    if (env < 0) {
        static int v1 = -1, v2 = -1, v3 = -1, v4 = -1;
        env = g4_cuda_env_is(&v1, "G4_GEMV", "v1")   ? 1
              : g4_cuda_env_is(&v2, "G4_GEMV", "v2") ? 2
              : g4_cuda_env_is(&v3, "G4_GEMV", "v3") ? 3
              : g4_cuda_env_is(&v4, "G4_GEMV", "v4") ? 4
                                                     : 0;
    }
    return env;
}

// Whether the third design runs a shape: forced, or where it measured faster than the streaming
// kernel on the H200 (bench/NOTES.md, 2026-12-03, twice in one run): the fused gate/up (2-3%)
// and plain K = 1536 weights of N >= 8960 (lm_head 92 -> 71 us, ple_emb 8.2 -> 6.4 us, where
// the earlier kernel, the default before, took 6.9 us in the same run); on 132-SM GPUs only,
// like the earlier kernel's shapes. Elsewhere its two-tile
// units split K further and cost 1.1-1.6x (q, o, k/v, down, the PLE gate and proj). A forced
// plan (g4_gemm_gemv_force) is the streaming kernel's unless v3 is forced too. The kernel
// indexes tiles in 32 bits.
bool gemv_v3(int N, int K, bool fused) {
    if ((uint64_t)(N / 16) * (uint64_t)(K / 64) >= (1ull << 32)) return false;
    const int force = gemv_forced_version();
    if (force && force != 4) return force == 3;
    if (g_gv_force.split || g_gv_force.ctas) return false;
    if (num_sms() != 132) return false;
    return K == 1536 && (fused || N >= 8960);
}

// Which Q4 GEMV runs a shape where gemv_v3 did not take it. G4_GEMV=v1 / v2 in the environment
// forces the earlier kernel (gemv_q4_kernel) / the streaming one for A/B runs (read once).
// Otherwise the streaming kernel,
// except where the earlier one measured faster on the H200 (bench/NOTES.md, 2026-12-02, both in
// one run, twice): plain K = 1536 weights of N <= 512 (k/v, ple gate: 2.5 against 2.9 us, its
// lighter cluster tail) and of N = 6144-12288 (ple_emb, the unfused gate/up: 6.9 against 7.9 us
// for ple_emb; its 384-768 small CTAs spread better than the stream's 96-140). On a 132-SM GPU
// only, like the prefill table; elsewhere the streaming kernel.
bool gemv_v1(int N, int K, bool fused) {
    const int force = gemv_forced_version();
    if (force && force != 4) return force == 1;
    if (g_gv_force.split || g_gv_force.ctas) return false; // a forced plan is the stream's
    if (num_sms() != 132) return false;
    static const int v1_on = env_int("G4_GEMV_V1", 1, 0, 1); // 0: an A/B, the stream instead
    if (!v1_on) return false;
    return !fused && K == 1536 && (N <= 512 || (N >= 6144 && N <= 12288));
}

// Whether the fourth design runs a shape: forced (G4_GEMV=v4), or with G4_GEMV_AUTO4=1 (read
// once) where the automatic choice takes the third design. Off by default: measured (H100,
// bench/NOTES.md "Thirty-first session outcomes") 6-11% faster than the third design there and
// +2.5% Q4 decode, but it does not round the weights to fp16 as onnxruntime's fp16 MatMulNBits
// does (~0.5% of a typical output apart), which is not a speed-up's to change; M <= 2 (one MMA carries two tokens), tile indices
// in 32 bits and the largest CTA's staging within GV4_SMEM_MAX (K up to ~40k at M = 2).
bool gemv_v4(int M, int N, int K, bool fused, bool pro) {
    if (M > GQI_MAX_M) return false;
    static const int auto4 = env_int("G4_GEMV_AUTO4", 0, 0, 1);
    const int force = gemv_forced_version();
    if (force != 4 && !(auto4 && !force && gemv_v3(N, K, fused))) return false;
    if ((uint64_t)(N / 16) * (uint64_t)(K / 64) >= (1ull << 32)) return false;
    const int T = fused ? 1 : gv4_plain_T();
    const gv_plan p = gemv_plan(16 * ((N / 16 + T - 1) / T), K, fused);
    return gv4_smem_bytes(M, K, p, pro) <= GV4_SMEM_MAX;
}

// The design a GEMV launch of M <= 8 runs (and g4_gemm_gemv_last_design reports): the fourth,
// the third, the earlier kernel (x given only: it has no add-norm prologue), else the stream.
int gemv_design(int M, int N, int K, bool fused, bool pro) {
    return gemv_v4(M, N, K, fused, pro)   ? 4
           : gemv_v3(N, K, fused)         ? 3
           : !pro && gemv_v1(N, K, fused) ? 1
                                          : 2;
}

int dispatch(const char *who, void *y, const void *x, const g4_q4_weight *w, const g4_q4_weight *wu,
             const void *bias, int M, g4_gemm_epi epi, g4_gemm_algo algo, cudaStream_t stream) {
    const int N = w->n, K = w->k;
    // Prefill: the wgmma GEMM (gemm_q4_wgmma.cu) or mma.sync, as plan_prefill measured them.
    // Batched decode (8 < M <= 64): the skinny split-K mma.sync path unless G4_SKINNY=0.
    if (algo == G4_GEMM_AUTO)
        algo = M <= 8                   ? G4_GEMM_GEMV
               : M <= 64 && skinny_on() ? G4_GEMM_SKINNY
               : prefill_mma_forced()   ? G4_GEMM_MMA
                                        : plan_prefill(M, N, K, wu != nullptr, true).algo;
    const q4w w0 = view(w), w1 = wu ? view(wu) : w0;
    const __half *hx = (const __half *)x, *hb = (const __half *)bias;
    switch (algo) {
    case G4_GEMM_GEMV:
        if (M > 8) return g4_fail(G4_EUSER, "%s: GEMV takes M <= 8 tokens, got M = %d", who, M);
        g_gv_last = gemv_design(M, N, K, wu != nullptr, false);
        if (g_gv_last == 4) { // forced (G4_GEMV=v4)
            if (wu)
                launch_gemv4<true, false>(y, hx, w0, w1, hb, M, N, K, epi, gv_pro{}, stream);
            else
                launch_gemv4<false, false>(y, hx, w0, w1, hb, M, N, K, epi, gv_pro{}, stream);
        } else if (g_gv_last == 3) { // where it measured faster
            if (wu)
                launch_gemv3<true, false>(y, hx, w0, w1, hb, M, N, K, epi, gv_pro{}, stream);
            else
                launch_gemv3<false, false>(y, hx, w0, w1, hb, M, N, K, epi, gv_pro{}, stream);
        } else if (g_gv_last == 1) { // the earlier kernel where it measured faster
            if (wu)
                launch_gemv<true>(y, hx, w0, w1, hb, M, N, K, epi, stream);
            else
                launch_gemv<false>(y, hx, w0, w1, hb, M, N, K, epi, stream);
        } else if (wu) {
            launch_gemv2<true, false>(y, hx, w0, w1, hb, M, N, K, epi, gv_pro{}, stream);
        } else {
            launch_gemv2<false, false>(y, hx, w0, w1, hb, M, N, K, epi, gv_pro{}, stream);
        }
        return G4_OK;
    case G4_GEMM_MMA:
    case G4_GEMM_SKINNY:
        if (wu)
            launch_mma<true>(y, hx, w0, w1, hb, M, N, K, epi, algo == G4_GEMM_SKINNY, stream);
        else
            launch_mma<false>(y, hx, w0, w1, hb, M, N, K, epi, algo == G4_GEMM_SKINNY, stream);
        return G4_OK;
    case G4_GEMM_WGMMA:
        return q4_wgmma_launch(y, hx, w0, w1, hb, M, N, K, epi, wu != nullptr, stream);
    default:
        return g4_fail(G4_EUSER, "%s: algorithm %d, expected 0..4 (g4_gemm_algo)", who, algo);
    }
}

} // namespace
} // namespace g4k

extern "C" int g4_q4_repack(g4_q4_weight *out, const uint8_t *q, const uint16_t *scales,
                            const uint8_t *zp, int N, int K, int block) {
    if (!out) return g4_fail(G4_EUSER, "q4 repack: NULL output");
    memset(out, 0, sizeof *out);
    int rc = g4_q4_pack_check(N, K, block);
    if (rc) return rc;
    const size_t qb = g4_q4_pack_q_bytes(N, K), sb = g4_q4_pack_scale_bytes(N, K),
                 zb = g4_q4_pack_zp_bytes(N, K);
    uint8_t *host = (uint8_t *)g4_malloc(qb + sb + zb);
    rc = g4_q4_pack(host, host + qb, host + qb + sb, q, scales, zp, N, K, block);
    if (rc) {
        free(host);
        return rc;
    }
    uint8_t *dev = nullptr;
    G4_CUDA_CHECK(cudaMalloc(&dev, qb + sb + zb));
    G4_CUDA_CHECK(cudaMemcpy(dev, host, qb + sb + zb, cudaMemcpyHostToDevice));
    free(host);
    // q is a multiple of 512 bytes and scales of 64, so all three arrays stay 16-byte aligned.
    out->n = N;
    out->k = K;
    out->q = dev;
    out->scales = dev + qb;
    out->zp = dev + qb + sb;
    out->bytes = qb + sb + zb;
    return G4_OK;
}

extern "C" void g4_q4_weight_free(g4_q4_weight *w) {
    if (!w) return;
    if (w->q) G4_CUDA_CHECK(cudaFree(w->q));
    memset(w, 0, sizeof *w);
}

extern "C" int g4_gemm_q4(void *y, const void *x, const g4_q4_weight *w, const void *bias, int M,
                          g4_gemm_epi epi, g4_gemm_algo algo, cudaStream_t stream) {
    int rc = g4k::check_weight("gemm_q4", w);
    if (rc) return rc;
    rc = g4k::check_common("gemm_q4", y, x, bias, M, w->n, w->k, epi);
    if (rc) return rc;
    return g4k::dispatch("gemm_q4", y, x, w, nullptr, bias, M, epi, algo, stream);
}

extern "C" int g4_gemm_q4_gelu_mul(void *y, const void *x, const g4_q4_weight *wg,
                                   const g4_q4_weight *wu, int M, g4_gemm_algo algo,
                                   cudaStream_t stream) {
    int rc = g4k::check_weight("gemm_q4_gelu_mul", wg);
    if (!rc) rc = g4k::check_weight("gemm_q4_gelu_mul", wu);
    if (rc) return rc;
    if (wg->n != wu->n || wg->k != wu->k)
        return g4_fail(G4_EUSER, "gemm_q4_gelu_mul: gate (N %d, K %d) and up (N %d, K %d) differ",
                       wg->n, wg->k, wu->n, wu->k);
    rc = g4k::check_common("gemm_q4_gelu_mul", y, x, nullptr, M, wg->n, wg->k, G4_GEMM_Y_F16);
    if (rc) return rc;
    return g4k::dispatch("gemm_q4_gelu_mul", y, x, wg, wu, nullptr, M, G4_GEMM_Y_F16, algo, stream);
}

extern "C" int g4_gemv_q4_add_norm(void *y, const g4_gemv_norm *a, const g4_q4_weight *w,
                                   const g4_q4_weight *wu, const void *bias, int M, g4_gemm_epi epi,
                                   cudaStream_t stream) {
    const char *who = "gemv_q4_add_norm";
    int rc = g4k::check_weight(who, w);
    if (!rc && wu) rc = g4k::check_weight(who, wu);
    if (rc) return rc;
    if (wu && (wu->n != w->n || wu->k != w->k))
        return g4_fail(G4_EUSER, "%s: gate (N %d, K %d) and up (N %d, K %d) differ", who, w->n,
                       w->k, wu->n, wu->k);
    g4k::gv_pro pro;
    rc = g4k::norm_operands(who, a, y, bias, M, w->n, w->k, epi, wu != nullptr, &pro);
    if (rc) return rc;
    const g4k::q4w w0 = g4k::view(w), w1 = wu ? g4k::view(wu) : w0;
    g4k::g_gv_last = g4k::gemv_design(M, w->n, w->k, wu != nullptr, true);
    if (g4k::g_gv_last == 4) {
        if (wu)
            g4k::launch_gemv4<true, true>(y, nullptr, w0, w1, nullptr, M, w->n, w->k, epi, pro,
                                          stream);
        else
            g4k::launch_gemv4<false, true>(y, nullptr, w0, w1, (const __half *)bias, M, w->n, w->k,
                                           epi, pro, stream);
    } else if (g4k::g_gv_last == 3) {
        if (wu)
            g4k::launch_gemv3<true, true>(y, nullptr, w0, w1, nullptr, M, w->n, w->k, epi, pro,
                                          stream);
        else
            g4k::launch_gemv3<false, true>(y, nullptr, w0, w1, (const __half *)bias, M, w->n, w->k,
                                           epi, pro, stream);
    } else if (wu)
        g4k::launch_gemv2<true, true>(y, nullptr, w0, w1, nullptr, M, w->n, w->k, epi, pro, stream);
    else
        g4k::launch_gemv2<false, true>(y, nullptr, w0, w1, (const __half *)bias, M, w->n, w->k, epi,
                                       pro, stream);
    return G4_OK;
}

extern "C" int g4_q4_dequant_f16(void *w_out, const g4_q4_weight *w, cudaStream_t stream) {
    int rc = g4k::check_weight("q4_dequant_f16", w);
    if (rc) return rc;
    if (!w_out || (uintptr_t)w_out % 2)
        return g4_fail(G4_EUSER, "q4_dequant_f16: output NULL or not 2-byte aligned");
    const size_t tiles = (size_t)(w->n / 16) * (w->k / 64);
    g4k::q4_dequant_kernel<<<(unsigned)((tiles + 7) / 8), 256, 0, stream>>>(
        (__half *)w_out, g4k::view(w), w->n, w->k);
    G4_CUDA_LAUNCH_CHECK();
    return G4_OK;
}

extern "C" int g4_gemm_gemv_force(int split, int max_ctas) {
    if (split != 0 && (split < 1 || split > 64 || (split & (split - 1))))
        return g4_fail(G4_EUSER, "gemv force: split %d, expected 0 or a power of 2 in 1..64", split);
    if (max_ctas < 0)
        return g4_fail(G4_EUSER, "gemv force: max CTAs %d, expected >= 0", max_ctas);
    g4k::g_gv_force = g4k::gv_force_t{split, max_ctas};
    return G4_OK;
}

extern "C" int g4_gemm_gemv_version(int version) {
    if (version < -1 || version > 4)
        return g4_fail(G4_EUSER, "gemv version: %d, expected -1 (environment), 0 (automatic), 1..4",
                       version);
    g4k::g_gv_version = version;
    return G4_OK;
}

extern "C" int g4_gemm_gemv3_probe(int probe) {
    if (probe < 0 || probe > 3)
        return g4_fail(G4_EUSER, "gemv3 probe: %d, expected 0 (today's) .. 3 (shell)", probe);
    g4k::g_gv3_probe = probe;
    return G4_OK;
}

extern "C" int g4_gemm_gemv_last_design(void) {
    return g4k::g_gv_last;
}
