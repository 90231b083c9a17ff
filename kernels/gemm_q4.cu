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
// GEMM (prefill). Block = 4 warps, 64 tokens x 8 feature tiles (plain: 128 features; fused: the
// same 4 feature tiles = 64 features of the gate and of the up weight). Each stage of the
// 4-stage cp.async pipeline holds, for one 64-input k tile:
//   x    [64 tokens][64 inputs] fp16, 128-byte rows, 16-byte chunk c at c ^ (row % 8)  8192 B
//   q    8 slots x 512 bytes (the tiles as packed)                                        4096 B
//   s    8 slots x 64 bytes,  z  8 slots x 16 bytes                                        640 B
// Warp w owns slots (2w, 2w + 1) (plain) or (w, w + 4) (fused: gate, up); per k tile it
// dequantizes its two slots into A fragments (32 registers) and runs them against the 8 token
// groups of 8 (two 16-byte shared loads each, conflict-free thanks to the swizzle).
// =============================================================================================
constexpr int Q4M_BM = 64, Q4M_STAGES = 4, Q4M_THREADS = 128;
constexpr int Q4M_XB = 8192, Q4M_QB = 4096, Q4M_SB = 512, Q4M_ZB = 128;
constexpr int Q4M_STAGE = Q4M_XB + Q4M_QB + Q4M_SB + Q4M_ZB;
constexpr int Q4M_SMEM = Q4M_STAGES * Q4M_STAGE;

template <bool FUSED>
__global__ void __launch_bounds__(Q4M_THREADS)
    gemm_q4_mma_kernel(void *y, const __half *__restrict__ x, q4w w0, q4w w1,
                       const __half *__restrict__ bias, int M, int N, int K, int epi) {
    extern __shared__ __align__(128) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.y * Q4M_BM;
    const int NT = N / 16, KT = K / 64;
    // Slot i of a stage: feature tile slot_nt(i) of weight (FUSED && i >= 4 ? up : gate/plain).
    auto slot_nt = [&](int i) {
        return FUSED ? (int)blockIdx.x * 4 + (i & 3) : (int)blockIdx.x * 8 + i;
    };

    auto load_stage = [&](int st, int kt) {
        uint8_t *base = smem + st * Q4M_STAGE;
#pragma unroll
        for (int i = 0; i < Q4M_BM * 8 / Q4M_THREADS; i++) { // x: 512 chunks
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
            cp_async16(smem_u32(base + Q4M_XB + sl * 512 + ch * 16),
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
                cp_async16(smem_u32(base + Q4M_XB + Q4M_QB + sl * 64 + ch * 16),
                           ok ? (const void *)(ws + ti * 16 + ch * 4) : (const void *)ws, ok);
            } else {
                const uint8_t *wz = up ? w1.z : w0.z;
                cp_async16(smem_u32(base + Q4M_XB + Q4M_QB + Q4M_SB + sl * 16),
                           ok ? (const void *)(wz + ti * 16) : (const void *)wz, ok);
            }
        }
    };

    float acc[2][8][4];
#pragma unroll
    for (int f = 0; f < 2; f++)
#pragma unroll
        for (int tt = 0; tt < 8; tt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[f][tt][i] = 0.0f;

#pragma unroll
    for (int s = 0; s < Q4M_STAGES - 1; s++) {
        if (s < KT) load_stage(s, s);
        cp_async_commit();
    }
    const int pair = 2 * g + (t >> 1);
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<Q4M_STAGES - 2>();
        __syncthreads();
        const int pf = kt + Q4M_STAGES - 1;
        if (pf < KT) load_stage(pf % Q4M_STAGES, pf);
        cp_async_commit();
        const uint8_t *base = smem + (kt % Q4M_STAGES) * Q4M_STAGE;
        uint32_t a[2][4][4];
#pragma unroll
        for (int f = 0; f < 2; f++) {
            const int sl = FUSED ? warp + 4 * f : 2 * warp + f;
            const uint4 qv = *(const uint4 *)(base + Q4M_XB + sl * 512 + lane * 16);
            const uint32_t sv = *(const uint32_t *)(base + Q4M_XB + Q4M_QB + sl * 64 + pair * 4);
            const uint32_t zv = base[Q4M_XB + Q4M_QB + Q4M_SB + sl * 16 + pair];
            const q4k kc = q4_consts(sv, zv);
            q4_dequant_word(qv.x, kc, a[f][0]);
            q4_dequant_word(qv.y, kc, a[f][1]);
            q4_dequant_word(qv.z, kc, a[f][2]);
            q4_dequant_word(qv.w, kc, a[f][3]);
        }
#pragma unroll
        for (int tt = 0; tt < 8; tt++) {
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
    // % 2.
#pragma unroll
    for (int tt = 0; tt < 8; tt++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int m = m0 + tt * 8 + 2 * t + (i & 1);
            if (m >= M) continue;
            if constexpr (FUSED) {
                const int n = 16 * slot_nt(warp) + g + 8 * (i >> 1);
                if (n < N)
                    store_one(y, G4_GEMM_Y_F16, nullptr, (size_t)m * N + n, n,
                              gelu_tanh(acc[0][tt][i]) * acc[1][tt][i]);
            } else {
#pragma unroll
                for (int f = 0; f < 2; f++) {
                    const int n = 16 * slot_nt(2 * warp + f) + g + 8 * (i >> 1);
                    if (n < N) store_one(y, epi, bias, (size_t)m * N + n, n, acc[f][tt][i]);
                }
            }
        }
    }
}

template <bool FUSED>
void launch_mma(void *y, const __half *x, q4w w0, q4w w1, const __half *bias, int M, int N, int K,
                int epi, cudaStream_t stream) {
    static bool smem_set = false;
    set_smem(gemm_q4_mma_kernel<FUSED>, Q4M_SMEM, &smem_set);
    const int NT = N / 16;
    const dim3 grid(FUSED ? (NT + 3) / 4 : (NT + 7) / 8, (M + Q4M_BM - 1) / Q4M_BM);
    gemm_q4_mma_kernel<FUSED>
        <<<grid, Q4M_THREADS, Q4M_SMEM, stream>>>(y, x, w0, w1, bias, M, N, K, epi);
    G4_CUDA_LAUNCH_CHECK();
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

int dispatch(const char *who, void *y, const void *x, const g4_q4_weight *w, const g4_q4_weight *wu,
             const void *bias, int M, g4_gemm_epi epi, g4_gemm_algo algo, cudaStream_t stream) {
    const int N = w->n, K = w->k;
    // Prefill: the wgmma GEMM (gemm_q4_wgmma.cu) or mma.sync, as plan_prefill measured them.
    if (algo == G4_GEMM_AUTO)
        algo = M <= 8                 ? G4_GEMM_GEMV
               : prefill_mma_forced() ? G4_GEMM_MMA
                                      : plan_prefill(M, N, K, wu != nullptr, true).algo;
    const q4w w0 = view(w), w1 = wu ? view(wu) : w0;
    const __half *hx = (const __half *)x, *hb = (const __half *)bias;
    switch (algo) {
    case G4_GEMM_GEMV:
        if (M > 8) return g4_fail(G4_EUSER, "%s: GEMV takes M <= 8 tokens, got M = %d", who, M);
        if (wu)
            launch_gemv<true>(y, hx, w0, w1, hb, M, N, K, epi, stream);
        else
            launch_gemv<false>(y, hx, w0, w1, hb, M, N, K, epi, stream);
        return G4_OK;
    case G4_GEMM_MMA:
        if (wu)
            launch_mma<true>(y, hx, w0, w1, hb, M, N, K, epi, stream);
        else
            launch_mma<false>(y, hx, w0, w1, hb, M, N, K, epi, stream);
        return G4_OK;
    case G4_GEMM_WGMMA:
        return q4_wgmma_launch(y, hx, w0, w1, hb, M, N, K, epi, wu != nullptr, stream);
    default:
        return g4_fail(G4_EUSER, "%s: algorithm %d, expected 0..3 (g4_gemm_algo)", who, algo);
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
