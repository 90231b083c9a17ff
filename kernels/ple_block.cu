// ple_block.cu: the decode per-layer-input block of one token as one launch (ple_block.cuh).
//
// Why (bench/NOTES.md, "Issue 30: the PLE block as one launch"): today the block is two GEMVs,
// the gate (its add-norm prologue, the gelu_tanh-multiply epilogue) and the projection, 2.5 +
// 1.9 us (Q4) as kernel rows for ~0.4 MB of weights; each launch pays ~1.3 us of fixed path
// even under PDL. Here both are phases of one grid handed over inside thread-block clusters,
// so the projection needs no launch, no grid-wide wait and no round trip through L2 for pg.
//
// Layout. C clusters of 8 CTAs (portable cluster size), 8 warps a CTA. Packed Q4 tiles (16
// features x 64 inputs, kernels/q4_pack.h), one mma.sync m16n8k16 chain a tile (q4_tile_mma).
//   Gate (every cluster, redundantly): the cluster's 64 warps split the P/16 feature tiles, each
//     over S1 = 64 / (P/16) warps along K = H (warp gw = 8 rank + warp: tile gw / S1, k range
//     gw % S1 of S1); x from the add-norm prologue in every CTA's shared memory (as the add-norm
//     GEMVs, gv_norm_prologue; CTA 0 writes h_out and x for the kernels after this one). Warp
//     partials -> the CTA's partial cpart[P] (its warps in order) -> cluster barrier -> every CTA
//     sums cpart of ranks 0..7 in rank order through distributed shared memory: the same pg
//     in every CTA of every cluster (a fixed order, deterministic), pg = fp16(gelu_tanh(fp16(g))
//     * mul) as the gate GEMV's epilogue (gemm_q4.cu gv_flush), kept in shared memory (CTA 0
//     also stores it for the caller).
//   Projection (K = P <= 512: 8 k tiles at most): warp (f2, s2) = (warp / KT2, warp % KT2)
//     takes k tile s2 of feature tile FT2 grp + f2 (FT2 = 8 / KT2 tiles a pass); CTA b takes
//     groups b, b + 8C, ...; the KT2 warp partials of a tile are summed in k order by its s2 = 0
//     warp, which stores y.
// The gate is recomputed in every cluster from L2 (its weight, Q4 ~0.2 MB at E2B, streams from
// DRAM once): what buys the projection spread over 8C SMs without a grid-wide handover.
//
// PDL (kernels/pdl.cuh rule 1): before the wait each warp loads into registers its first PB_U
// gate tiles and its first projection tile (ldg_stream*), and prefetches the rest of its gate
// tiles into L2; activations (h_in, r, x, mul) only after the wait. y is stored only after the
// cluster barrier, but other clusters may still be reading r, h_in or x then: y must be none
// of them (the engine gives the block an output buffer of its own; the entry checks).
//
// fp16 weights (ple_block_f16_kernel, below): the same cluster scheme and exchange with the fp16
// GEMV's row loads and fmaf dot products in place of the Q4 tiles (4x the bytes: 786 KB each
// weight at E2B); the cluster count is argued at g4_ple_block_plan.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include "kernels/gemm_common.cuh"
#include "kernels/pdl.cuh"
#include "kernels/ple_block.cuh"
#include "kernels/q4_tile.cuh"

namespace cg = cooperative_groups;

namespace g4k {
namespace {

constexpr int PB_WARPS = 8;                // warps a CTA
constexpr int PB_CS = 8;                   // CTAs a cluster (the portable maximum)
constexpr int PB_U = 8;                    // gate tiles a warp holds in registers
constexpr int PB_PMAX = 512;               // P: the projection's K tiles fit 8 warps
constexpr int PB_HMAX = PB_WARPS * 32 * 8; // H: gv_norm_prologue, one 8-vector a thread

struct pb_args {
    q4w wg, wp;              // (Q4)
    const __half *wgh, *wph; // (fp16: Wg [H][P], Wp [P][H] row-major, the package layout)
    void *y;
    __half *pg;
    const __half *x;   // (without the prologue)
    const __half *mul; // [P]
    int epi, H, P;
    int S1;     // Q4: warps a gate feature tile is split over (along K); fp16: unused
    int FT2;    // Q4: projection feature tiles a CTA pass; fp16: unused
    int groups; // projection passes (Q4: groups of FT2 feature tiles; fp16: 32-column units)
};

struct pb_tile {
    uint4 q;
    uint32_t s, z;
};

// Lane L = 4 g + t's part of tile ti (q4_lane_load's words and records, in the weight-stream
// form pdl.cuh allows before the wait).
__device__ __forceinline__ void pb_load(pb_tile &r, const q4w &w, size_t ti, int lane, int pair) {
    r.q = ldg_stream((const char *)w.q + ti * 512 + 16 * lane);
    r.s = ldg_stream_u32((const char *)w.s + ti * 64 + 4 * pair);
    r.z = ldg_stream_u8((const char *)w.z + ti * 16 + pair);
}

// The x fragment of k tile kt for lane t (B column g reads token 0: M = 1), x in shared memory.
__device__ __forceinline__ void pb_x(uint32_t xw[8], const __half *xs, int kt, int t) {
    const uint4 xa = *(const uint4 *)(xs + kt * 64 + 16 * t),
                xb = *(const uint4 *)(xs + kt * 64 + 16 * t + 8);
    xw[0] = xa.x, xw[1] = xa.y, xw[2] = xa.z, xw[3] = xa.w;
    xw[4] = xb.x, xw[5] = xb.y, xw[6] = xb.z, xw[7] = xb.w;
}

// x [H] into shared memory after the wait: the add-norm prologue (every CTA; CTA 0 writes h_out
// and x for the kernels after this one) or a copy of the given x. Ends with a barrier.
template <bool PRO>
__device__ __forceinline__ void pb_stage_x(const gv_pro &pro, const pb_args &a, __half *xs) {
    if constexpr (PRO) {
        gv_norm_prologue(pro, xs, 1, a.H); // (ends with a barrier)
    } else {
        for (int i = threadIdx.x * 8; i < a.H; i += blockDim.x * 8)
            *(uint4 *)(xs + i) = __ldg((const uint4 *)(a.x + i));
        __syncthreads();
    }
}

// The gate's exchange: after a cluster barrier (every CTA's partial cpart [P] written), every
// CTA sums cpart of ranks 0..7 in rank order through distributed shared memory (the same pg in
// every CTA of every cluster) and applies the gate GEMVs' epilogue, pg = fp16(gelu_tanh(fp16(g))
// * mul), into ps; CTA 0 also stores pg for the caller. Ends with a barrier.
__device__ __forceinline__ void pb_exchange(cg::cluster_group &cluster, const pb_args &a,
                                            float *cpart, __half *ps) {
    cluster.sync(); // every CTA's partial written and visible to the cluster
    for (int p = threadIdx.x; p < a.P; p += blockDim.x) {
        float v = 0.0f;
        for (int r = 0; r < PB_CS; r++) v += cluster.map_shared_rank(cpart, r)[p];
        const __half h =
            __float2half_rn(gelu_tanh(__half2float(__float2half_rn(v))) * __half2float(a.mul[p]));
        ps[p] = h;
        if (blockIdx.x == 0) a.pg[p] = h;
    }
    __syncthreads();
}

template <bool PRO>
__global__ void __launch_bounds__(PB_WARPS * 32, 1) ple_block_kernel(pb_args a, gv_pro pro) {
    __shared__ __align__(16) __half xs[PB_HMAX]; // x [H]
    __shared__ __align__(16) __half ps[PB_PMAX]; // pg [P]
    __shared__ float wpart[PB_WARPS][16];        // the warps' gate partials
    __shared__ float cpart[PB_PMAX];             // the CTA's gate partial (read by the cluster)
    __shared__ float4 red[PB_WARPS][32];         // the projection's warp partials
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int pair = 2 * g + (t >> 1); // the lane's scale / zero-point record entry
    const int KT1 = a.H / 64, NT1 = a.P / 16, KT2 = a.P / 64, NT2 = a.H / 16;
    // gate: the warp's feature tile nt1 and k tiles kb1 .. kb1 + n1
    const int gw = rank * PB_WARPS + warp, nt1 = gw / a.S1, s1 = gw % a.S1;
    const int kb1 = nt1 < NT1 ? (int)((long)KT1 * s1 / a.S1) : 0;
    const int n1 = nt1 < NT1 ? (int)((long)KT1 * (s1 + 1) / a.S1) - kb1 : 0;
    const size_t t1 = (size_t)nt1 * KT1 + kb1;
    // projection: warp (f2, s2) takes k tile s2 of feature tile grp * FT2 + f2
    const int f2 = warp / KT2, s2 = warp % KT2;
    const bool on2 = f2 < a.FT2;

    // --- before the wait: immutable weights only (pdl.cuh rule 1) ---
    pb_tile ring[PB_U], pt = {make_uint4(0, 0, 0, 0), 0u, 0u};
#pragma unroll
    for (int u = 0; u < PB_U; u++)
        if (u < n1) pb_load(ring[u], a.wg, t1 + u, lane, pair);
    {
        const int nt2 = (int)blockIdx.x * a.FT2 + f2;
        if (on2 && (int)blockIdx.x < a.groups && nt2 < NT2)
            pb_load(pt, a.wp, (size_t)nt2 * KT2 + s2, lane, pair);
    }
    if (lane < 6) // the gate tiles past the ring into L2: 4 lines of words, scales, zero points
        for (int i = PB_U; i < n1; i++) {
            const size_t ti = t1 + i;
            g4_prefetch_l2(lane < 4    ? (const char *)a.wg.q + ti * 512 + 128 * lane
                           : lane == 4 ? (const char *)a.wg.s + ti * 64
                                       : (const char *)a.wg.z + ti * 16);
        }
    g4_pdl_wait();
    g4_pdl_trigger();

    pb_stage_x<PRO>(pro, a, xs);

    // --- gate: the warp's k range of feature tile nt1 ---
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i0 = 0; i0 < n1; i0 += PB_U) {
#pragma unroll
        for (int u = 0; u < PB_U; u++) {
            if (i0 + u >= n1) break; // warp-uniform
            uint32_t xw[8];
            pb_x(xw, xs, kb1 + i0 + u, t);
            q4_tile_mma(acc, ring[u].q, ring[u].s, ring[u].z, xw);
            if (i0 + u + PB_U < n1) pb_load(ring[u], a.wg, t1 + i0 + u + PB_U, lane, pair);
        }
    }
    // D fragment: .x (acc[0]) is feature 16 nt1 + g, .z (acc[2]) feature 16 nt1 + g + 8, token
    // 2 t: token 0 is in lanes t == 0
    if (t == 0) {
        wpart[warp][g] = acc[0];
        wpart[warp][g + 8] = acc[2];
    }
    __syncthreads();
    for (int p = threadIdx.x; p < a.P; p += blockDim.x) { // the CTA's warps of tile p / 16
        float v = 0.0f;
        for (int w = 0; w < PB_WARPS; w++)
            if ((rank * PB_WARPS + w) / a.S1 == p / 16) v += wpart[w][p % 16];
        cpart[p] = v;
    }
    pb_exchange(cluster, a, cpart, ps);

    // --- projection: the CTA's groups of FT2 feature tiles ---
    for (int j = 0;; j++) {
        const int grp = (int)blockIdx.x + j * (int)gridDim.x;
        if (grp >= a.groups) break; // CTA-uniform
        const int nt2 = grp * a.FT2 + f2;
        const bool on = on2 && nt2 < NT2;
        float acc2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (on) {
            if (j) pb_load(pt, a.wp, (size_t)nt2 * KT2 + s2, lane, pair);
            uint32_t xw[8];
            pb_x(xw, ps, s2, t);
            q4_tile_mma(acc2, pt.q, pt.s, pt.z, xw);
        }
        red[warp][lane] = make_float4(acc2[0], acc2[1], acc2[2], acc2[3]);
        __syncthreads();
        if (on && s2 == 0 && t == 0) { // the tile's k partials in k order
            float v0 = 0.0f, v1 = 0.0f;
            for (int s = 0; s < KT2; s++) {
                const float4 q = red[f2 * KT2 + s][lane];
                v0 += q.x, v1 += q.z;
            }
            const int n = 16 * nt2 + g;
            store_one(a.y, a.epi, nullptr, n, n, v0);
            store_one(a.y, a.epi, nullptr, n + 8, n + 8, v1);
        }
        __syncthreads();
    }
    cluster.sync(); // no CTA leaves while its cluster may still read its cpart
}

// ---------------------------------------------------------------------------------------------
// fp16 weights (Wg [H][P], Wp [P][H] row-major, the package layout), the same cluster scheme
// with the fp16 GEMV's loads and dot products (kernels/gemm_f16.cu gemv_f16_kernel): a thread
// owns 8 adjacent output columns (one 16-byte ldg_stream of a weight row) and a run of rows,
// accumulating x[k] * w[k][j] with fmaf in k order in fp32; its weight rows stream one step
// ahead of the arithmetic, the first step loaded into registers before the PDL wait.
//   Gate (every cluster, redundantly): CTA rank r takes rows [r H / 8, (r + 1) H / 8) (H % 64:
//     whole 8-row slices), its threads (tx, ty) = (tid % (P / 8), tid / (P / 8)) columns 8 tx ..
//     8 tx + 7 and rows ty, ty + TY, ... of the slice (TY = 256 / (P / 8) row phases: 8 at E2B,
//     24 rows a thread; P = 192 leaves 16 threads idle); the TY phases are summed in order into
//     the CTA's cpart [P], then the exchange as the Q4 kernel's (pb_exchange).
//   Projection: 32-column units (4 column vectors x 64 row phases, rows k = ty + 64 i, P / 64 <=
//     8 a thread); CTA b takes units b, b + 8C, ...; the 8 row phases of a warp are summed by
//     shuffles (xor 4, 8, 16, as the GEMV's), the 8 warps in warp order.
// Before the wait: the thread's first PF_GU gate rows and its first unit's P / 64 projection rows
// (ldg_stream: immutable weights, pdl.cuh rule 1), and L2 prefetches of its further gate rows,
// those rows split over the clusters (cluster c the rows i with (i - PF_GU) % C == c: every
// cluster reads the whole gate, one pulls each line from DRAM).
constexpr int PF_GU = 8;                   // gate rows a thread loads a step
constexpr int PF_UC = 32;                  // projection columns a unit
constexpr int PF_PR = PB_PMAX / 64;        // projection rows a thread at most
constexpr int PF_GRED = PB_WARPS * 32 * 8; // the gate's row-phase partials: TY x P <= 256 x 8

// Gate step s of a thread: its rows i = s PF_GU + u < n (row stride `stride` halves).
__device__ __forceinline__ void pf_gate_load(uint4 (&v)[PF_GU], const __half *w, size_t stride,
                                             int s, int n) {
#pragma unroll
    for (int u = 0; u < PF_GU; u++) {
        const int i = s * PF_GU + u;
        v[u] = i < n ? ldg_stream(w + (size_t)i * stride) : make_uint4(0, 0, 0, 0);
    }
}

// acc[j] += x * w[j] for the 8 fp16 weights of one 16-byte row load (the fp16 GEMV's step).
__device__ __forceinline__ void pf_fma8(float (&acc)[8], float x, const uint4 &w) {
    float wf[8];
    ld8h((const __half *)&w, wf);
#pragma unroll
    for (int j = 0; j < 8; j++) acc[j] = fmaf(x, wf[j], acc[j]);
}

template <bool PRO>
__global__ void __launch_bounds__(PB_WARPS * 32, 1) ple_block_f16_kernel(pb_args a, gv_pro pro) {
    __shared__ __align__(16) __half xs[PB_HMAX];  // x [H]
    __shared__ __align__(16) __half ps[PB_PMAX];  // pg [P]
    __shared__ __align__(16) float gred[PF_GRED]; // the gate's row-phase partials [TY][P]
    __shared__ float cpart[PB_PMAX];              // the CTA's gate partial (read by the cluster)
    __shared__ float pred[PB_WARPS][PF_UC];       // the projection's warp partials
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // gate: the thread's columns 8 tx .., rows kb + ty + TY i, i < n1
    const int TXc = a.P / 8, TY = PB_WARPS * 32 / TXc;
    const int tx = (int)threadIdx.x % TXc, ty = (int)threadIdx.x / TXc;
    const int kb = a.H / PB_CS * rank, rows = a.H / PB_CS;
    const int n1 = ty < TY && ty < rows ? (rows - ty + TY - 1) / TY : 0;
    const size_t gstride = (size_t)TY * a.P;
    const __half *wg = a.wgh + (size_t)(kb + ty) * a.P + 8 * tx;
    // projection: the thread's columns 32 unit + 8 ptx .., rows pty + 64 i, i < KP
    const int KP = a.P / 64, ptx = (int)threadIdx.x & 3, pty = (int)threadIdx.x >> 2;
    const size_t pstride = (size_t)64 * a.H;
    const __half *wp = a.wph + (size_t)pty * a.H + 8 * ptx;

    // --- before the wait: immutable weights only (pdl.cuh rule 1) ---
    uint4 cur[PF_GU], pw[PF_PR];
    pf_gate_load(cur, wg, gstride, 0, n1);
#pragma unroll
    for (int i = 0; i < PF_PR; i++)
        pw[i] = i < KP && (int)blockIdx.x < a.groups
                    ? ldg_stream(wp + (size_t)i * pstride + (size_t)PF_UC * blockIdx.x)
                    : make_uint4(0, 0, 0, 0);
    if (tx % 8 == 0) { // one thread a 128-byte line (8 column vectors)
        const int C = (int)gridDim.x / PB_CS, cid = (int)blockIdx.x / PB_CS;
        for (int i = PF_GU + cid; i < n1; i += C) g4_prefetch_l2(wg + (size_t)i * gstride);
    }
    g4_pdl_wait();
    g4_pdl_trigger();

    pb_stage_x<PRO>(pro, a, xs);

    // --- gate: the thread's rows of the CTA's slice, one step ahead ---
    float acc[8];
#pragma unroll
    for (int j = 0; j < 8; j++) acc[j] = 0.0f;
    for (int s = 0; s * PF_GU < n1; s++) {
        const bool more = (s + 1) * PF_GU < n1;
        uint4 nxt[PF_GU];
        if (more) pf_gate_load(nxt, wg, gstride, s + 1, n1);
#pragma unroll
        for (int u = 0; u < PF_GU; u++) {
            const int i = s * PF_GU + u;
            if (i < n1) pf_fma8(acc, __half2float(xs[kb + ty + TY * i]), cur[u]);
        }
        if (more) {
#pragma unroll
            for (int u = 0; u < PF_GU; u++) cur[u] = nxt[u];
        }
    }
    if (ty < TY) {
        *(float4 *)(gred + ty * a.P + 8 * tx) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        *(float4 *)(gred + ty * a.P + 8 * tx + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
    __syncthreads();
    for (int p = threadIdx.x; p < a.P; p += blockDim.x) { // the row phases in order
        float v = 0.0f;
        for (int r = 0; r < TY; r++) v += gred[r * a.P + p];
        cpart[p] = v;
    }
    pb_exchange(cluster, a, cpart, ps);

    // --- projection: the CTA's 32-column units ---
    for (int j = 0;; j++) {
        const int unit = (int)blockIdx.x + j * (int)gridDim.x;
        if (unit >= a.groups) break; // CTA-uniform
        if (j) {
#pragma unroll
            for (int i = 0; i < PF_PR; i++)
                if (i < KP) pw[i] = ldg_stream(wp + (size_t)i * pstride + (size_t)PF_UC * unit);
        }
        float acc2[8];
#pragma unroll
        for (int e = 0; e < 8; e++) acc2[e] = 0.0f;
#pragma unroll
        for (int i = 0; i < PF_PR; i++)
            if (i < KP) pf_fma8(acc2, __half2float(ps[pty + 64 * i]), pw[i]);
                // lanes l, l ^ 4, ..., l ^ 28 share ptx (the warp's 8 row phases): sum them
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float v = acc2[e];
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            v += __shfl_xor_sync(0xffffffffu, v, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 16);
            acc2[e] = v;
        }
        if (lane < 4) {
#pragma unroll
            for (int e = 0; e < 8; e++) pred[warp][8 * lane + e] = acc2[e];
        }
        __syncthreads();
        if (threadIdx.x < PF_UC) { // the warps in order
            float v = 0.0f;
            for (int w = 0; w < PB_WARPS; w++) v += pred[w][threadIdx.x];
            const int n = PF_UC * unit + (int)threadIdx.x;
            store_one(a.y, a.epi, nullptr, n, n, v);
        }
        __syncthreads();
    }
    cluster.sync(); // no CTA leaves while its cluster may still read its cpart
}

// The launch (its kernel named at the call, as tests/test_pdl_sass.sh finds PDL kernels).
void launch(const pb_args &p, const gv_pro &pro, bool with_prologue, bool f16, int clusters,
            cudaStream_t stream) {
    const dim3 grid(clusters * PB_CS, 1, 1), block(PB_WARPS * 32, 1, 1), cl(PB_CS, 1, 1);
    if (f16 && with_prologue)
        g4_pdl_launch_cluster(ple_block_f16_kernel<true>, grid, block, (size_t)0, stream, cl, p,
                              pro);
    else if (f16)
        g4_pdl_launch_cluster(ple_block_f16_kernel<false>, grid, block, (size_t)0, stream, cl, p,
                              pro);
    else if (with_prologue)
        g4_pdl_launch_cluster(ple_block_kernel<true>, grid, block, (size_t)0, stream, cl, p, pro);
    else
        g4_pdl_launch_cluster(ple_block_kernel<false>, grid, block, (size_t)0, stream, cl, p, pro);
}

// [p, p + n) and [q, q + m) share a byte (q NULL: no).
bool overlap(const void *p, size_t n, const void *q, size_t m) {
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return q && a < b + m && b < a + n;
}

} // namespace
} // namespace g4k

extern "C" const char *g4_ple_block_supported(int H, int P) {
    if (H < 64 || H > g4k::PB_HMAX || H % 64 || P < 64 || P > g4k::PB_PMAX || P % 64)
        return "hidden a multiple of 64 up to 2048 (the add-norm prologue's x) and a per-layer "
               "input width a multiple of 64 up to 512 (the projection's k tiles over 8 warps)";
    return NULL;
}

extern "C" void g4_ple_block_plan(int H, int P, int f16, int *clusters, int *gate_split,
                                  int *proj_tiles) {
    // Q4: groups of FT2 16-feature tiles (one k tile a warp); fp16: 32-column units.
    const int NT1 = P / 16, KT2 = P / 64, NT2 = H / 16;
    const int FT2 = g4k::PB_WARPS / KT2;
    const int groups = f16 ? H / g4k::PF_UC : (NT2 + FT2 - 1) / FT2;
    // G4_PLE_CLUSTERS=N (A/B runs and tests: fewer clusters walk every group; read once)
    static int forced = -1;
    if (forced < 0) forced = g4k::env_int("G4_PLE_CLUSTERS", 0, 0, 64);
    // One group a CTA. fp16 (4x Q4's bytes) too: a 32-column unit a CTA (6 clusters at E2B) is
    // what lets every CTA hold its whole projection slice in registers before the wait (P / 64
    // rows a thread, 16 KB a CTA at E2B), so the projection after the exchange waits on no memory.
    // Not more clusters: the gate is computed in every cluster, each CTA streaming H / 8 of its
    // rows (98 KB at E2B, from L2 after the first cluster's miss) whatever C is, so each added
    // cluster shrinks only the projection slice (already in registers) and adds the whole gate
    // (786 KB at E2B) to the L2 reads: C x 786 KB, ~0.8 us of the H200's L2 bandwidth at 6, ~1.6 us
    // at 12, against ~0.8 us for one CTA's 98 KB at an SM's share of it. (Fewer: the projection
    // loads of a CTA's further units come after the gate.)
    int c = (groups + g4k::PB_CS - 1) / g4k::PB_CS;
    const int cap = g4k::num_sms() / g4k::PB_CS;
    if (c > cap) c = cap;
    if (forced) c = forced;
    *clusters = c < 1 ? 1 : c;
    *gate_split = f16 ? g4k::PB_WARPS * 32 / (P / 8) : g4k::PB_WARPS * g4k::PB_CS / NT1;
    *proj_tiles = f16 ? (groups + *clusters * g4k::PB_CS - 1) / (*clusters * g4k::PB_CS) : FT2;
}

namespace g4k {
namespace {

// The checks both entries make past their weights' (H, P given and supported), and the
// arguments and prologue operands of the launch.
int pb_prepare(const char *who, int H, int P, void *y, g4_gemm_epi epi, void *pg, const void *x,
               const g4_gemv_norm *a, const void *mul, pb_args *p, gv_pro *pro) {
    if ((x != nullptr) == (a != nullptr))
        return g4_fail(G4_EUSER, "%s: give x or the add-norm operands, exactly one", who);
    if (!pg || ((uintptr_t)pg & 15) || (x && ((uintptr_t)x & 15)) || !mul || ((uintptr_t)mul & 1))
        return g4_fail(G4_EUSER, "%s: pg and x 16-byte aligned, mul given and 2-byte aligned", who);
    // y: the projection's checks (one token, N = H, K = P; its x is pg)
    int rc = check_common(who, y, pg, nullptr, 1, H, P, epi);
    if (rc) return rc;
    *pro = gv_pro{};
    if (a) {
        g4_gemv_norm an = *a;
        an.mul = nullptr, an.ldm = 0; // (the multiplier is the block's own mul)
        if ((rc = norm_operands(who, &an, pg, nullptr, 1, P, H, G4_GEMM_Y_F16, false, pro)))
            return rc;
    }
    const size_t yb = (size_t)H * (epi == G4_GEMM_Y_F16 || epi == G4_GEMM_Y_F16_ADD ? 2 : 4);
    const size_t hb = (size_t)H * 2;
    if (overlap(y, yb, x, hb) || overlap(y, yb, pg, (size_t)P * 2) ||
        (a && (overlap(y, yb, a->r, hb) || overlap(y, yb, a->h_in, (size_t)H * 4) ||
               overlap(y, yb, a->h_out, (size_t)H * 4) || overlap(y, yb, a->x_out, hb))))
        return g4_fail(G4_EUSER,
                       "%s: y overlaps an input or another output (other clusters may still "
                       "read r, h_in and x while y is stored): give the block its own y",
                       who);
    *p = pb_args{};
    p->y = y;
    p->pg = (__half *)pg;
    p->x = (const __half *)x;
    p->mul = (const __half *)mul;
    p->epi = (int)epi;
    p->H = H;
    p->P = P;
    return G4_OK;
}

} // namespace
} // namespace g4k

extern "C" int g4_ple_block_q4(void *y, g4_gemm_epi epi, void *pg, const void *x,
                               const g4_gemv_norm *a, const void *mul, const g4_q4_weight *wg,
                               const g4_q4_weight *wp, cudaStream_t stream) {
    const char *who = "ple_block_q4";
    if (!wg || !wp) return g4_fail(G4_EUSER, "%s: NULL weight", who);
    const int H = wg->k, P = wg->n;
    const char *why = g4_ple_block_supported(H, P);
    if (why)
        return g4_fail(G4_EUSER, "%s: hidden %d, per-layer input %d: takes %s", who, H, P, why);
    int rc = g4k::check_q4(who, "gate", wg, P, H);
    if (!rc) rc = g4k::check_q4(who, "proj", wp, H, P);
    if (rc) return rc;
    g4k::pb_args p;
    g4k::gv_pro pro;
    if ((rc = g4k::pb_prepare(who, H, P, y, epi, pg, x, a, mul, &p, &pro))) return rc;
    p.wg = g4k::view(wg);
    p.wp = g4k::view(wp);
    int clusters = 0;
    g4_ple_block_plan(H, P, 0, &clusters, &p.S1, &p.FT2);
    p.groups = (H / 16 + p.FT2 - 1) / p.FT2;
    g4k::launch(p, pro, a != nullptr, false, clusters, stream);
    return G4_OK;
}

extern "C" int g4_ple_block_f16(void *y, g4_gemm_epi epi, void *pg, const void *x,
                                const g4_gemv_norm *a, const void *mul, const void *wg,
                                const void *wp, int H, int P, cudaStream_t stream) {
    const char *who = "ple_block_f16";
    if (!wg || !wp || ((uintptr_t)wg & 15) || ((uintptr_t)wp & 15))
        return g4_fail(G4_EUSER, "%s: weight pointer NULL or not 16-byte aligned", who);
    const char *why = g4_ple_block_supported(H, P);
    if (why)
        return g4_fail(G4_EUSER, "%s: hidden %d, per-layer input %d: takes %s", who, H, P, why);
    g4k::pb_args p;
    g4k::gv_pro pro;
    const int rc = g4k::pb_prepare(who, H, P, y, epi, pg, x, a, mul, &p, &pro);
    if (rc) return rc;
    p.wgh = (const __half *)wg;
    p.wph = (const __half *)wp;
    int clusters = 0, row_phases = 0, units = 0;
    g4_ple_block_plan(H, P, 1, &clusters, &row_phases, &units);
    p.groups = H / g4k::PF_UC;
    g4k::launch(p, pro, a != nullptr, true, clusters, stream);
    return G4_OK;
}
