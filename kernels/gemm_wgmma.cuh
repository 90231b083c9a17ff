// gemm_wgmma.cuh: the Hopper (sm_90a) GEMM mainloop for prefill, one kernel template for fp16
// and Q4 weights: y[M, N] (epi) x[M, K] @ W (+ bias), or the fused gated-MLP half
// y = gelu_tanh(x @ Wg) * (x @ Wu). Instantiated by gemm_f16_wgmma.cu (B = fp16 [K, N] by TMA)
// and gemm_q4_wgmma.cu (B = the packed Q4 layout, dequantized by the producer). Internal header.
//
// CTA tile 128 x BN x 64 (BN = 128, 192 or 256), 384 threads:
//   warpgroup 0, producer: fills a ring of STAGES stages, each an x tile (128 rows x 64 k,
//     K-major, TMA, 128B swizzle) and a B tile of BN columns x 64 k:
//       fp16: TMA boxes of 64 columns x 64 k rows of W as stored (N-major); thread 0 alone.
//       Q4: all 128 threads load the packed 16 x 64 tiles straight into registers (issued before
//         the wait for the stage; LD = G4_Q4_WG_DEPTH steps in flight, 2 by default: see the
//         producer; LD + 1 steps ahead prefetched into L2), dequantize them (q4_tile.cuh) and
//         store
//         them K-major ([n][64 k], 128B swizzle: a lane's 16 inputs of features g and g + 8 are
//         four 16-byte stores, conflict-free); thread 0 also issues the x tile's TMA.
//     Fused gate/up: columns 0 .. BN/2 - 1 of the B tile are the gate weight's features
//     n0 .. n0 + BN/2 - 1 and columns BN/2 .. BN - 1 the up weight's same features, so an
//     accumulator's gate and up values of one output sit in the same thread (j and j + BN/16);
//     the Q4 producer's warps 0-1 fill the gate half and warps 2-3 the up half.
//   warpgroups 1, 2, consumers: rows 64 c .. 64 c + 63 of the tile, wgmma m64nBNk16 (4 per
//     stage), fp32 accumulators in registers (BN / 2 per thread).
// Registers are moved from the producer to the consumers with setmaxnreg (wg_cfg).
//
// Ring protocol (the step counter `it` runs on across the CTA's tiles, so phases continue):
//   stage s = it % STAGES, round r = it / STAGES.
//   full[s]: fp16 1 arrival (producer thread 0's arrive.expect_tx of the stage's bytes, then the
//     TMA completes them); Q4 129 arrivals (thread 0's expect_tx for the x tile + one arrival of
//     each producer thread after its stores and fence.proxy.async).
//     The consumers wait on parity r & 1.
//   empty[s]: 2 arrivals (one thread per consumer warpgroup, once the wgmma reading the stage
//     has completed: wgmma_wait<1> after the next stage's wgmma are issued, or wait<0> at the
//     end of a tile). The producer waits on parity (r & 1) ^ 1 (round 0 passes at once).
//   Every role walks the same tile list with the same k range, so the counts always match.
//
// Work distribution (host: wg_choose):
//   split == 1: persistent; CTA b takes tiles b, b + grid, b + 2 grid, ...; a tile's epilogue
//     (direct stores from the accumulators) overlaps the producer's loads of the next tile.
//     Tiles are numbered in groups of WG_GROUP_M m-tiles, m fastest inside a group, so the
//     CTAs running at one time share a few B column slices and x row blocks in L2.
//   split > 1: a thread-block cluster of `split` CTAs per tile, CTA rank r takes k steps
//     [KT r / split, KT (r + 1) / split); the fp32 partials go to each CTA's shared memory, and
//     rank r sums rows [128 r / split, 128 (r + 1) / split) of all partials in rank order
//     through distributed shared memory (deterministic, no workspace) and runs the epilogue.
// Edges: TMA zero-fills x rows past M and k past K, W columns past N; the Q4 producer stores
// zeros for feature tiles past N; the epilogue bounds-checks rows and columns.
#pragma once

#include <cooperative_groups.h>

#include "kernels/gemm_common.cuh"
#include "kernels/pdl.cuh"
#include "kernels/q4_tile.cuh"
#include "kernels/wgmma_common.cuh"

namespace g4k {

enum { WG_B_F16 = 0, WG_B_Q4 = 1 };

constexpr int WG_BM = 128, WG_BK = 64, WG_THREADS = 384, WG_GROUP_M = 16;

template <int BSRC, int BN, int LD = 1> struct wg_cfg {
    static_assert(BN == 128 || BN == 192 || BN == 256, "tile width");
    static constexpr uint32_t A_BYTES = WG_BM * WG_BK * 2; // 16 KB
    static constexpr uint32_t B_BYTES = BN * WG_BK * 2;    // BN rows (or 64 k rows) of 128 B
    static constexpr uint32_t STAGE = A_BYTES + B_BYTES;
    static constexpr int STAGES = BN == 256 ? 4 : BN == 192 ? 5 : 6; // 192-200 KB
    static constexpr uint32_t RING = STAGES * STAGE;
    static constexpr uint32_t RED_STRIDE = BN + 8; // floats per partial row (bank-conflict pad)
    static_assert(WG_BM * RED_STRIDE * 4 <= RING, "the split-K partial fits in the ring");
    static constexpr int SMEM = RING + 2 * STAGES * 8 + 1024; // + barriers + alignment slack
    // setmaxnreg moves registers within the CTA's allocation (168 a thread at launch: 65536 / 384
    // rounded down to 8), so 128 x (PRODUCER + 2 CONSUMER) <= 168 x 384. The Q4 producer with
    // LD > 1 steps of words in flight (and its cursors) needs more than 104; its consumers hold
    // BN / 2 accumulators, so they give some back: the splits below are ones ptxas compiles
    // without spills (ptxas -v, cuobjdump: no LDL/STL); 192 wide at LD = 3 spilled at both
    // 168/168 and 136/184, so it runs LD = 2 (wg_launch_ld).
    static constexpr int PRODUCER_REGS = BSRC == WG_B_F16 ? 40
                                         : LD == 1        ? 104
                                         : BN == 128      ? 168
                                         : BN == 192      ? 136
                                                          : 120;
    static constexpr int CONSUMER_REGS = BSRC == WG_B_F16 ? 232
                                         : LD == 1        ? 200
                                         : BN == 128      ? 168
                                         : BN == 192      ? 184
                                                          : 192;
    static_assert(PRODUCER_REGS + 2 * CONSUMER_REGS <= 3 * 168, "registers of the CTA");
    static constexpr int FULL_COUNT = BSRC == WG_B_Q4 ? 129 : 1;
    static constexpr int TPW = BN / 64; // Q4: 16-feature tiles per producer warp and k step
};

struct wg_params {
    void *y;
    const __half *bias;
    q4w w0, w1; // Q4 weights (plain or gate, up); unused for fp16
    int M, N, K, epi;
    int tiles_m, tiles_n; // CTA tiles along M (128 rows) and N (BN or BN / 2 output columns)
    int split;            // cluster size along K; 1: persistent over tiles
};

// Tile t -> (m tile, n tile): groups of WG_GROUP_M m tiles, m fastest within a group.
__device__ __forceinline__ void wg_tile_mn(int t, int tiles_m, int tiles_n, int &mt, int &nt) {
    const int per = WG_GROUP_M * tiles_n, grp = t / per, r = t - grp * per;
    const int gm = min(WG_GROUP_M, tiles_m - grp * WG_GROUP_M);
    mt = grp * WG_GROUP_M + r % gm;
    nt = r / gm;
}

// This CTA's work: tiles first, first + stride, ... (count of them), each over k steps
// [kb, kb + nk). The same for every role of the CTA.
struct wg_work {
    int first, stride, count, kb, nk;
};

__device__ __forceinline__ wg_work wg_my_work(const wg_params &p) {
    const int KT = (p.K + WG_BK - 1) / WG_BK, total = p.tiles_m * p.tiles_n;
    wg_work w;
    if (p.split == 1) {
        w.first = blockIdx.x;
        w.stride = gridDim.x;
        w.count = w.first < total ? (total - 1 - w.first) / w.stride + 1 : 0;
        w.kb = 0;
        w.nk = KT;
    } else {
        const int r = (int)blockIdx.x % p.split; // == cluster block rank (1-D clusters)
        w.first = blockIdx.x / p.split;
        w.stride = 1;
        w.count = 1;
        w.kb = (int)((long long)KT * r / p.split);
        w.nk = (int)((long long)KT * (r + 1) / p.split) - w.kb;
    }
    return w;
}

__device__ __forceinline__ void sts128(uint32_t addr, uint32_t a, uint32_t b, uint32_t c,
                                       uint32_t d) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c),
                 "r"(d)
                 : "memory");
}

// Epilogue of one accumulator pair: columns col, col + 1 of row `row` (both < N: N % 8 == 0).
template <bool FUSED>
__device__ __forceinline__ void wg_store(const wg_params &p, int row, int col, float v0, float v1,
                                         float u0, float u1) {
    if (FUSED)
        store_pair(p.y, G4_GEMM_Y_F16, nullptr, (size_t)row * p.N + col, col, gelu_tanh(v0) * u0,
                   gelu_tanh(v1) * u1);
    else
        store_pair(p.y, p.epi, p.bias, (size_t)row * p.N + col, col, v0, v1);
}

// Split-K end of a tile, run by the 256 consumer threads of every CTA of the cluster once their
// partial is in `red` ([128][STRIDE] fp32, this CTA's shared memory): rank r sums rows
// [128 r / split, 128 (r + 1) / split) of the partials of ranks 0, 1, .. in that order and
// stores them. The producer warpgroups take part in the two cluster barriers only.
template <int BN, bool FUSED, int STRIDE>
__device__ __forceinline__ void wg_split_reduce(const wg_params &p, const float *red, int tile) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    constexpr int OUT_COLS = FUSED ? BN / 2 : BN, G4 = OUT_COLS / 4; // 4-column groups a row
    const int rank = (int)cluster.block_rank(), cs = p.split;
    cluster.sync(); // every CTA's partial is written and visible to the cluster
    int mt, nt;
    wg_tile_mn(tile, p.tiles_m, p.tiles_n, mt, nt);
    const int rows = WG_BM / cs, r0 = rank * rows, n0 = nt * OUT_COLS;
    for (int idx = (int)threadIdx.x - 128; idx < rows * G4; idx += 256) {
        const int r = r0 + idx / G4, cc = 4 * (idx % G4);
        const int row = mt * WG_BM + r, col = n0 + cc;
        if (row >= p.M || col >= p.N) continue;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f), u = v;
        for (int q = 0; q < cs; q++) {
            const float *pr = cluster.map_shared_rank(red, q) + r * STRIDE;
            const float4 a = *(const float4 *)(pr + cc);
            v.x += a.x, v.y += a.y, v.z += a.z, v.w += a.w;
            if (FUSED) {
                const float4 b = *(const float4 *)(pr + cc + BN / 2);
                u.x += b.x, u.y += b.y, u.z += b.z, u.w += b.w;
            }
        }
        wg_store<FUSED>(p, row, col, v.x, v.y, u.x, u.y);
        wg_store<FUSED>(p, row, col + 2, v.z, v.w, u.z, u.w);
    }
    cluster.sync(); // keep every CTA's shared memory alive until all ranks have read it
}

// LD: the Q4 producer's steps of loads in flight (1, 2, 3; see the producer); 1 for fp16.
template <int BSRC, int BN, bool FUSED, int LD>
__global__ void __launch_bounds__(WG_THREADS, 1)
    gemm_wgmma_kernel(const __grid_constant__ CUtensorMap tm_x,
                      const __grid_constant__ CUtensorMap tm_w,
                      const __grid_constant__ CUtensorMap tm_wu, const wg_params p) {
    using C = wg_cfg<BSRC, BN, LD>;
    static_assert(LD >= 1 && LD <= 3 && (BSRC == WG_B_Q4 || LD == 1), "loads in flight");
    constexpr int OUT_COLS = FUSED ? BN / 2 : BN; // output columns per tile
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint64_t *full = (uint64_t *)(smem + C::RING);
    uint64_t *empty = full + C::STAGES;
    auto stage_a = [&](int s) { return smem + s * C::STAGE; };
    auto stage_b = [&](int s) { return smem + s * C::STAGE + C::A_BYTES; };
    const int wg = threadIdx.x >> 7;
    const wg_work wk = wg_my_work(p);

    if (threadIdx.x == 0) {
        for (int s = 0; s < C::STAGES; s++) {
            mbar_init(&full[s], C::FULL_COUNT);
            mbar_init(&empty[s], 2);
        }
        fence_mbar_init();
    }
    __syncthreads();

    if (wg == 0) {
        // ---------------------------------------------------------------- producer
        reg_dealloc<C::PRODUCER_REGS>();
        const int steps = wk.count * wk.nk;
        // Step u of this CTA -> its tile's origin and its k step.
        auto step_at = [&](int u, int &m0, int &nt, int &kt) {
            const int i = u / wk.nk, t = wk.first + i * wk.stride;
            int mt;
            wg_tile_mn(t, p.tiles_m, p.tiles_n, mt, nt);
            m0 = mt * WG_BM;
            kt = wk.kb + (u - i * wk.nk);
        };
        if constexpr (BSRC == WG_B_F16) {
            if (threadIdx.x == 0) {
                for (int u = 0; u < steps; u++) {
                    int m0, nt, kt;
                    step_at(u, m0, nt, kt);
                    const int s = u % C::STAGES;
                    mbar_wait(&empty[s], ((u / C::STAGES) & 1) ^ 1);
                    mbar_expect_tx(&full[s], C::STAGE); // full boxes, even at the edges
                    tma_load_2d(stage_a(s), &tm_x, kt * WG_BK, m0, &full[s]);
                    const int n0 = nt * OUT_COLS;
#pragma unroll
                    for (int c = 0; c < BN / 64; c++) {
                        uint8_t *dst = stage_b(s) + c * 8192;
                        if (FUSED && c >= BN / 128)
                            tma_load_2d(dst, &tm_wu, n0 + 64 * (c - BN / 128), kt * WG_BK,
                                        &full[s]);
                        else
                            tma_load_2d(dst, &tm_w, n0 + 64 * c, kt * WG_BK, &full[s]);
                    }
                }
            }
        } else {
            const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5; // warp 0..3
            const int g = lane >> 2, t = lane & 3;
            const int KT = p.K / WG_BK, NT16 = p.N / 16;
            // Each warp fills TPW slots of 16 B rows per step. Plain: slot sl = warp + 4 i, B rows
            // 16 sl .., feature tile nt * BN / 16 + sl. Fused: warps 0-1 fill the gate half and
            // warps 2-3 the up half (one weight per warp, chosen once): slot j = (warp & 1) + 2 i
            // of that half, B rows 16 j (+ BN / 2 for up), feature tile nt * BN / 32 + j.
            const q4w wsel = (FUSED && warp >= 2) ? p.w1 : p.w0;
            auto slot_j = [&](int i) { return FUSED ? (warp & 1) + 2 * i : warp + 4 * i; };
            auto slot_row = [&](int i) {
                return (FUSED && warp >= 2 ? BN / 2 : 0) + 16 * slot_j(i);
            };
            // Packed tile index of slot i at (nt, kt), or -1 past N (< N K / 1024: an int).
            auto slot_tile = [&](int nt, int kt, int i) -> int {
                const int ft = nt * (FUSED ? BN / 32 : BN / 16) + slot_j(i);
                return ft < NT16 ? ft * KT + kt : -1;
            };
            auto load = [&](int nt, int kt, q4_raw(&r)[C::TPW]) {
#pragma unroll
                for (int i = 0; i < C::TPW; i++) {
                    const int ti = slot_tile(nt, kt, i);
                    if (ti >= 0) {
                        r[i] = q4_lane_load(wsel, (size_t)ti, lane);
                    } else {
                        r[i].q = make_uint4(0, 0, 0, 0);
                        r[i].s = r[i].z = 0;
                    }
                }
            };
            auto prefetch = [&](int nt, int kt) { // the lines a step's loads will touch, into L2
#pragma unroll
                for (int i = 0; i < C::TPW; i++) {
                    const int ti = slot_tile(nt, kt, i);
                    if (ti < 0) continue;
                    if ((lane & 7) == 0) g4_prefetch_l2(wsel.q + (size_t)ti * 32 + lane);
                    if (lane == 1) g4_prefetch_l2(wsel.s + (size_t)ti * 16);
                    if (lane == 2) g4_prefetch_l2(wsel.z + (size_t)ti * 16);
                }
            };
            // Step u into stage u % STAGES: wait for the stage, thread 0 issues the x tile's TMA,
            // every thread dequantizes and stores its words and arrives.
            auto fill = [&](int u, int m0, int kt, q4_raw(&cur)[C::TPW]) {
                const int s = u % C::STAGES;
                mbar_wait(&empty[s], ((u / C::STAGES) & 1) ^ 1);
                if (threadIdx.x == 0) {
                    mbar_expect_tx(&full[s], C::A_BYTES);
                    tma_load_2d(stage_a(s), &tm_x, kt * WG_BK, m0, &full[s]);
                }
                const uint32_t b = smem_u32(stage_b(s));
#pragma unroll
                for (int i = 0; i < C::TPW; i++) {
                    uint32_t lo[8], hi[8];
                    q4_lane_rows(cur[i], lo, hi);
                    const uint32_t r0 = slot_row(i) + g; // rows r0 and r0 + 8
                    sts128(b + swz128(r0, 2 * t), lo[0], lo[1], lo[2], lo[3]);
                    sts128(b + swz128(r0, 2 * t + 1), lo[4], lo[5], lo[6], lo[7]);
                    sts128(b + swz128(r0 + 8, 2 * t), hi[0], hi[1], hi[2], hi[3]);
                    sts128(b + swz128(r0 + 8, 2 * t + 1), hi[4], hi[5], hi[6], hi[7]);
                    if (i + 1 < C::TPW) { // one tile's dequantization at a time (registers)
                        asm volatile(""
                                     : "+r"(cur[i + 1].q.x), "+r"(cur[i + 1].q.y),
                                       "+r"(cur[i + 1].q.z), "+r"(cur[i + 1].q.w),
                                       "+r"(cur[i + 1].s), "+r"(cur[i + 1].z));
                    }
                }
                fence_proxy_async(); // the stores above are read by wgmma (async proxy)
                mbar_arrive(&full[s]);
            };
            if constexpr (LD == 1) {
                // The earlier producer (G4_Q4_WG_DEPTH=1): a step's words are loaded just
                // before the wait for its stage, which hides their latency
                // only while the producer runs ahead of the consumers; each step's position is
                // computed from u (integer divisions: step_at, wg_tile_mn).
                auto pf_u = [&](int u) {
                    int m0, nt, kt;
                    step_at(u, m0, nt, kt);
                    prefetch(nt, kt);
                };
                if (steps > 0) pf_u(0);
                if (steps > 1) pf_u(1);
                for (int u = 0; u < steps; u++) {
                    q4_raw cur[C::TPW];
                    int m0, nt, kt;
                    step_at(u, m0, nt, kt);
                    load(nt, kt, cur);
                    if (u + 2 < steps) pf_u(u + 2);
                    fill(u, m0, kt, cur);
                }
            } else {
                // LD steps' words live in registers: step u + LD - 1's loads are issued before
                // step u's stage is waited for and filled, so when the consumers wait on the
                // producer (its empty waits return at once) a load's L2 latency overlaps LD - 1
                // steps of dequantization instead of stalling every step; a step then costs
                // max(dequantization, latency / (LD - 1)) rather than their sum. The lines of
                // step u + LD + 1 go to L2 two steps before their loads. The three positions
                // (fill, load, prefetch) walk the steps as cursors, so the per-step index math is
                // an increment (the divisions of wg_tile_mn run once per tile).
                struct cursor {
                    int i, k, m0, nt; // the CTA's tile i, its k step k; the tile's origin
                };
                auto at_tile = [&](cursor &c) {
                    if (c.i >= wk.count) return; // past the CTA's last step: never used
                    int mt;
                    wg_tile_mn(wk.first + c.i * wk.stride, p.tiles_m, p.tiles_n, mt, c.nt);
                    c.m0 = mt * WG_BM;
                };
                auto start = [&](int u) { // the cursor of step u (once, before the loop)
                    cursor c;
                    c.i = wk.nk > 0 ? u / wk.nk : 0;
                    c.k = u - c.i * wk.nk;
                    c.m0 = c.nt = 0;
                    at_tile(c);
                    return c;
                };
                auto next = [&](cursor &c) {
                    if (++c.k == wk.nk) {
                        c.k = 0;
                        c.i++;
                        at_tile(c);
                    }
                };
                constexpr int PF = LD + 1;
                q4_raw buf[LD][C::TPW];
#pragma unroll
                for (int j = 0; j < PF; j++)
                    if (j < steps) {
                        const cursor c = start(j);
                        prefetch(c.nt, wk.kb + c.k);
                    }
#pragma unroll
                for (int j = 0; j + 1 < LD; j++)
                    if (j < steps) {
                        const cursor c = start(j);
                        load(c.nt, wk.kb + c.k, buf[j]);
                    }
                cursor cf = start(0), cl = start(LD - 1), cp = start(PF);
                for (int u0 = 0; u0 < steps; u0 += LD) {
#pragma unroll
                    for (int j = 0; j < LD; j++) { // buffer indices known at compile time
                        const int u = u0 + j;
                        if (u >= steps) break;
                        if (u + LD - 1 < steps) load(cl.nt, wk.kb + cl.k, buf[(j + LD - 1) % LD]);
                        if (u + PF < steps) prefetch(cp.nt, wk.kb + cp.k);
                        fill(u, cf.m0, wk.kb + cf.k, buf[j]);
                        next(cf), next(cl), next(cp);
                    }
                }
            }
        }
        if (p.split > 1) { // the consumers' two cluster barriers (wg_split_reduce)
            namespace cg = cooperative_groups;
            cg::this_cluster().sync();
            cg::this_cluster().sync();
        }
    } else {
        // ---------------------------------------------------------------- consumers
        reg_alloc<C::CONSUMER_REGS>();
        const int c = wg - 1;
        const int lane = threadIdx.x & 31, w4 = (threadIdx.x >> 5) & 3;
        const int g = lane >> 2, t = lane & 3;
        const bool leader = (threadIdx.x & 127) == 0;
        float d[BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;
        uint32_t it = 0;
        for (int i = 0; i < wk.count; i++) {
            for (int k = 0; k < wk.nk; k++, it++) {
                const int s = it % C::STAGES;
                mbar_wait(&full[s], (it / C::STAGES) & 1);
                const uint32_t a = smem_u32(stage_a(s) + c * 64 * 128);
                const uint32_t b = smem_u32(stage_b(s));
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < WG_BK / 16; kk++) {
                    const uint64_t da = make_desc(a + kk * 32, 16, 1024);
                    const int acc = (k | kk) != 0; // the tile's first product overwrites d
                    if constexpr (BSRC == WG_B_F16)
                        wgmma_ss<1>(d, da, make_desc(b + kk * 2048, 8192, 1024), acc);
                    else
                        wgmma_ss<0>(d, da, make_desc(b + kk * 32, 16, 1024), acc);
                }
                wgmma_commit();
                wgmma_wait<1>(); // the previous stage's wgmma have completed: release it
                if (k > 0 && leader) mbar_arrive(&empty[(it - 1) % C::STAGES]);
            }
            wgmma_wait<0>();
            fence_regs(d);
            if (wk.nk > 0 && leader) mbar_arrive(&empty[(it - 1) % C::STAGES]);

            if (p.split == 1) {
                int mt, nt;
                wg_tile_mn(wk.first + i * wk.stride, p.tiles_m, p.tiles_n, mt, nt);
                const int n0 = nt * OUT_COLS;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int row = mt * WG_BM + c * 64 + w4 * 16 + g + 8 * h;
                    if (row >= p.M) continue;
#pragma unroll
                    for (int j = 0; j < OUT_COLS / 8; j++) {
                        const int col = n0 + 8 * j + 2 * t;
                        if (col >= p.N) continue;
                        const int ju = FUSED ? j + BN / 16 : j;
                        wg_store<FUSED>(p, row, col, d[4 * j + 2 * h], d[4 * j + 2 * h + 1],
                                        d[4 * ju + 2 * h], d[4 * ju + 2 * h + 1]);
                    }
                }
            } else {
                // Both consumer warpgroups are past their last wgmma (so no stage is read any
                // more) before the ring's memory takes the partial.
                named_bar_sync(1, 256);
                float *red = (float *)smem;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = c * 64 + w4 * 16 + g + 8 * h;
#pragma unroll
                    for (int j = 0; j < BN / 8; j++)
                        *(float2 *)&red[r * C::RED_STRIDE + 8 * j + 2 * t] =
                            make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
                }
                wg_split_reduce<BN, FUSED, C::RED_STRIDE>(p, red, wk.first);
            }
        }
    }
}

// --- host -----------------------------------------------------------------------------------

// The forced configuration of the tests (g4_gemm_wgmma_force; 0 = automatic).
struct wg_force {
    int bn, split, max_ctas;
};
wg_force wg_forced();

struct wg_choice {
    int bn, split;
};

// Tile width and split for a shape: the smallest modelled time, where a k step of a tile costs
// BN + 48 (the fixed part: per-stage barriers and issue, so 128-wide tiles do ~16% less per
// column than 256-wide ones), a tile 2 extra steps (fill, epilogue), the CTAs run in
// ceil(CTAs / SMs) rounds, and a split pays 4 steps for its reduction and 5% for its extra
// traffic and non-persistent CTAs (so it is taken only where it clearly fills the GPU better).
// Ties keep the wider tile and the smaller split. Choices at the E2B shapes: bench/NOTES.md.
inline wg_choice wg_choose(int M, int N, int K, bool fused, bool allow192) {
    const long P = num_sms(), KT = (K + WG_BK - 1) / WG_BK, MT = (M + WG_BM - 1) / WG_BM;
    wg_choice best = {256, 1};
    double best_cost = 1e300;
    const int bns[3] = {256, 192, 128};
    for (int bn : bns) {
        if (bn == 192 && !allow192) continue;
        const long cols = fused ? bn / 2 : bn;
        const long tiles = MT * ((N + cols - 1) / cols);
        for (int s = 1; s <= 8; s *= 2) {
            if (s > 1 && KT / s < 2) break;
            const long rounds = (tiles * s + P - 1) / P;
            const double cost = ((double)rounds * ((KT + s - 1) / s + 2) + (s > 1 ? 4 : 0)) *
                                (bn + 48) * (s > 1 ? 1.05 : 1.0);
            if (cost < best_cost) best_cost = cost, best = wg_choice{bn, s};
        }
    }
    return best;
}

// The configuration AUTO runs: the tuned table's when it measured wgmma fastest for the shape
// (plan_prefill), else the model's.
inline wg_choice wg_plan(int M, int N, int K, bool fused, bool q4) {
    const prefill_plan t = plan_prefill(M, N, K, fused, q4);
    if (t.algo == G4_GEMM_WGMMA && t.bn) return wg_choice{t.bn, t.split};
    return wg_choose(M, N, K, fused, q4 || !fused); // fp16 gate/up halves: no 192-wide variant
}

template <int BSRC, int BN, bool FUSED, int LD = 1>
void wg_launch_t(const CUtensorMap &mx, const CUtensorMap &mw, const CUtensorMap &mu, wg_params p,
                 int split, int max_ctas, cudaStream_t stream) {
    using C = wg_cfg<BSRC, BN, LD>;
    static bool smem_set = false;
    set_smem(gemm_wgmma_kernel<BSRC, BN, FUSED, LD>, C::SMEM, &smem_set);
    const int cols = FUSED ? BN / 2 : BN;
    p.tiles_m = (p.M + WG_BM - 1) / WG_BM;
    p.tiles_n = (p.N + cols - 1) / cols;
    p.split = split;
    const long tiles = (long)p.tiles_m * p.tiles_n;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1] = {};
    if (split == 1) {
        long grid = tiles < num_sms() ? tiles : num_sms();
        if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
        cfg.gridDim = dim3((unsigned)grid);
    } else {
        cfg.gridDim = dim3((unsigned)(tiles * split));
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = split;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    cfg.blockDim = dim3(WG_THREADS);
    cfg.dynamicSmemBytes = C::SMEM;
    cfg.stream = stream;
    if (split > 1) {
        // A cluster of `split` CTAs of ~200 KB each needs `split` SMs of one GPC; if the device
        // cannot co-schedule it (asked once per kernel and size), the persistent grid runs.
        static int fits[4] = {-1, -1, -1, -1}; // split 2, 4, 8
        int &f = fits[split == 2 ? 0 : split == 4 ? 1 : 2];
        if (f < 0) {
            int n = 0;
            f = cudaOccupancyMaxActiveClusters(&n, gemm_wgmma_kernel<BSRC, BN, FUSED, LD>, &cfg) ==
                    cudaSuccess &&
                n > 0;
            cudaGetLastError();
            if (!f)
                fprintf(stderr,
                        "g4cu: wgmma GEMM: the device cannot co-schedule clusters of %d CTAs "
                        "with %d KB of shared memory each; split-K shapes run the persistent "
                        "grid instead\n",
                        split, C::SMEM >> 10);
        }
        if (!f) {
            wg_launch_t<BSRC, BN, FUSED, LD>(mx, mw, mu, p, 1, max_ctas, stream);
            return;
        }
    }
    G4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemm_wgmma_kernel<BSRC, BN, FUSED, LD>, mx, mw, mu, p));
    G4_CUDA_LAUNCH_CHECK();
}

// The Q4 producer's steps of loads in flight (LD), 1-3: the tests' and bench's
// g4_gemm_wgmma_q4_depth, else G4_Q4_WG_DEPTH from the environment (read once), else 2.
// 192- and 256-wide tiles run 3 as 2 (wg_launch_ld).
int wg_q4_depth();

template <int BSRC, int BN, bool FUSED>
void wg_launch_ld(const CUtensorMap &mx, const CUtensorMap &mw, const CUtensorMap &mu,
                  const wg_params &p, int split, int max_ctas, int ld, cudaStream_t stream) {
    if constexpr (BSRC == WG_B_Q4) {
        // Only 128-wide tiles hold 3 steps: at 192 and 256 (54, 72 registers of words) ptxas
        // spills at every register split tried, so those run 2.
        if (ld == 3 && BN == 128)
            return wg_launch_t<BSRC, 128, FUSED, 3>(mx, mw, mu, p, split, max_ctas, stream);
        if (ld >= 2) return wg_launch_t<BSRC, BN, FUSED, 2>(mx, mw, mu, p, split, max_ctas, stream);
    }
    wg_launch_t<BSRC, BN, FUSED, 1>(mx, mw, mu, p, split, max_ctas, stream);
}

// Picks (or takes the forced) configuration and launches. Returns G4_OK, or G4_EUSER for a
// forced configuration this shape cannot run (the tests' knob only).
template <int BSRC>
int wg_launch(const CUtensorMap &mx, const CUtensorMap &mw, const CUtensorMap &mu,
              const wg_params &p, bool fused, cudaStream_t stream) {
    const bool allow192 = !(BSRC == WG_B_F16 && fused); // fp16 gate/up halves: 64-column boxes
    wg_choice ch = wg_plan(p.M, p.N, p.K, fused, BSRC == WG_B_Q4);
    const wg_force f = wg_forced();
    if (f.bn) ch.bn = f.bn;
    if (f.split) ch.split = f.split;
    const int KT = (p.K + WG_BK - 1) / WG_BK;
    if (ch.bn == 192 && !allow192)
        return g4_fail(G4_EUSER, "wgmma GEMM: tile width 192 has no fused fp16 variant");
    if (ch.split > KT)
        return g4_fail(G4_EUSER, "wgmma GEMM: split %d over %d k steps", ch.split, KT);
    const int ld = BSRC == WG_B_Q4 ? wg_q4_depth() : 1;
#define G4_WG_CASE(BNV)                                                                            \
    if (ch.bn == BNV) {                                                                            \
        if (fused)                                                                                 \
            wg_launch_ld<BSRC, BNV, true>(mx, mw, mu, p, ch.split, f.max_ctas, ld, stream);        \
        else                                                                                       \
            wg_launch_ld<BSRC, BNV, false>(mx, mw, mu, p, ch.split, f.max_ctas, ld, stream);       \
        return G4_OK;                                                                              \
    }
    G4_WG_CASE(256)
    G4_WG_CASE(128)
    if constexpr (BSRC == WG_B_Q4) {
        G4_WG_CASE(192)
    } else if (ch.bn == 192) {
        wg_launch_t<BSRC, 192, false>(mx, mw, mu, p, ch.split, f.max_ctas, stream);
        return G4_OK;
    }
#undef G4_WG_CASE
    return g4_fail(G4_EUSER, "wgmma GEMM: tile width %d, expected 128, 192 or 256", ch.bn);
}

} // namespace g4k
