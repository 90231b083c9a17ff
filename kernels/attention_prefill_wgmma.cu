// attention_prefill_wgmma.cu: the text decoder's prefill attention on Hopper (sm_90a) for head
// dims 256 and 512: causal or sliding window over the KV cache, grouped query heads. What it
// computes is g4_attn_prefill's contract (attention_prefill.cuh; oracle ref_attention); this is
// its AUTO path for hd 256 / 512 (attention_prefill.cu keeps the HMMA kernel for hd 64 and as
// the reference). Test: tests/test_cuda_attention.c (op attn_prefill: both kernels on every case);
// bench: `g4cu bench --kernels --filter attn_prefill` (rows against the HMMA kernel).
//
// Work item = one block of 64 query rows = TQ = 64 / G tokens x the G query heads of one KV head
// (G = n_heads / n_kv; E2B: 8 tokens x 8 heads), row r = (token q0 + r / G, head kvh G + r % G),
// rows past TQ G or past T are padding. All 64 rows share every K/V tile, and the tokens of a
// block are consecutive, so the union of their visible key ranges [lo_min, hi_max] is one short
// interval: the block walks key tiles of 64 over it only (tiles outside are never loaded), with
// the mask applied on tiles that cross some row's range edge. Persistent grid (one CTA per SM),
// work items in order of decreasing length (latest query blocks first) dealt to the CTAs in
// snake order (fw_item), which balances causal prefill's linearly shrinking blocks.
//
// Warpgroups (128 threads each):
//   0  producer: warp 0 lane 0 loads the K tiles, warp 1 lane 0 the V tiles (TMA boxes of 64 dims
//      x 64 keys, 128B swizzle) into rings of SK and SV stages.
//   1  S: holds Q (QREG dims in registers as wgmma A fragments, the rest of hd 512 in shared
//      memory); per tile S = Q K^T (wgmma m64n64k16, RS then SS, fp32), scale, mask, online
//      softmax in the log2 domain (fp32 running max m and sum l per row), P = exp2(S - m) as
//      fp16 into a P slot (64 x 64, K-major, 128B swizzle) with the row rescale alpha =
//      exp2(m_old - m_new) (and, on the block's last tile, l).
//   2.. PV (one for hd 256, two for hd 512, each owning 256 output dims): O in registers,
//      O = O * alpha + P V (wgmma m64n256k16 SS; V read N-major as stored [key][dim]); at the
//      block's end O / l to the output.
// The S warpgroup can be two tiles ahead of the PV ones (two P slots), so S and P.V work of
// neighbouring tiles overlap on the tensor cores.
//
// Barriers (stage s of a ring of S stages for the CTA's global tile counter gt: s = gt % S,
// round gt / S; full barriers waited on parity round & 1, empty ones on (round & 1) ^ 1):
//   kfull[SK] 1 arrival (expect_tx of the tile's bytes), kempty[SK] 1 (the S warpgroup, after its
//   S wgmma completed); vfull[SV] 1, vempty[SV] NPV (each PV warpgroup after its P.V completed);
//   pfull[2] 128 (every S thread after its P stores and fence.proxy.async), pempty[2] NPV.
// Every role derives the same work items and tile counts from one function (fw_block_at), so
// the arrival counts always match.
//
// Keys past a block's last visible key (hi_max) inside its last tile may hold anything (cache
// rows never written, NaN in the tests): their scores are masked to -inf (a select, so a NaN
// score is replaced), and the PV warpgroups zero those V rows in shared memory before P V
// (0 * NaN would be NaN). Keys at or past the cache capacity are zero-filled by TMA.
#include "kernels/attention_prefill.cuh"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"
#include "kernels/gemm_common.cuh"
#include "kernels/pdl.cuh"
#include "kernels/wgmma_common.cuh"

using namespace g4k;

namespace {

constexpr int FW_ROWS = 64, FW_BK = 64;

template <int HD> struct fw_cfg {
    static_assert(HD == 256 || HD == 512, "head dim");
    static constexpr int NPV = HD / 256;               // PV warpgroups
    static constexpr int THREADS = 128 * (2 + NPV);    // 384 or 512
    static constexpr int QREG = HD == 512 ? 384 : 256; // Q dims held in registers
    static constexpr int QS_DIMS = HD - QREG;          // Q dims in shared memory (hd 512: 128)
    static constexpr int SK = HD == 512 ? 2 : 3, SV = HD == 512 ? 1 : 3;
    // P.V instructions per k16 step and PV warpgroup: ptxas needs an instruction's registers
    // within the launch budget (65536 / THREADS: 168 at 384 threads, 128 at 512), so hd 512's
    // 256 dims per warpgroup take two m64n128k16 (64 accumulators each) instead of one m64n256.
    static constexpr int PV_SPLIT = HD == 512 ? 2 : 1, PV_ACC = 128 / PV_SPLIT;
    static constexpr uint32_t TILE = FW_BK * HD * 2; // one K or V tile: 32 or 64 KB
    static constexpr uint32_t CHUNK = FW_BK * 128;   // 64 dims x 64 keys
    static constexpr uint32_t P_BYTES = FW_ROWS * 128;
    static constexpr uint32_t OFF_K = 0, OFF_V = OFF_K + SK * TILE, OFF_Q = OFF_V + SV * TILE;
    static constexpr uint32_t OFF_P = OFF_Q + FW_ROWS * QS_DIMS * 2;
    static constexpr uint32_t OFF_AL = OFF_P + 2 * P_BYTES; // [2 slots][alpha 64, l 64] fp32
    static constexpr uint32_t OFF_BAR = OFF_AL + 2 * 2 * FW_ROWS * 4;
    static constexpr int N_BARS = 2 * SK + 2 * SV + 4;
    static constexpr int SMEM = OFF_BAR + N_BARS * 8 + 1024; // + alignment slack
    // Registers move within the CTA's launch allocation (65536 / THREADS a thread).
    static constexpr int PRODUCER_REGS = HD == 512 ? 32 : 40;
    static constexpr int S_REGS = HD == 512 ? 160 : 232;
    static constexpr int PV_REGS = HD == 512 ? 160 : 232;
    static_assert(PRODUCER_REGS + S_REGS + NPV * PV_REGS <= (65536 / THREADS / 8) * 8 * (2 + NPV),
                  "registers of the CTA");
    static_assert(SMEM <= 232448, "shared memory");
};

struct FwParams {
    uint16_t *out;
    const uint16_t *q;
    const int32_t *pos;   // [T]
    int T, n_heads, n_kv; // query rows (tokens), heads
    int group, tq;        // query heads per KV head; tokens per block (64 / group)
    int q_stride;         // elements per q / out row (n_heads * hd)
    int kv_rows;          // cache rows that exist (capacity)
    int window;           // > 0: sliding window
    int n_blocks, n_work; // query blocks; work items = n_blocks * n_kv
    float scale_log2;     // scale * log2(e)
};

// A work item's block: its tokens, KV head, the union [lo_min, hi_max] and intersection
// [lo_max, hi_min] of its rows' visible key ranges, and its key tiles (>= 1; a block with no
// visible key walks one fully masked tile so every role still exchanges one P slot).
struct FwBlock {
    int q0, kvh, lo_min, hi_max, lo_max, hi_min, n_tiles;
};

// Visible key range [lo, hi] of token t (empty when hi < lo).
__device__ __forceinline__ void fw_row_range(const FwParams &p, int t, int &lo, int &hi) {
    const int ps = p.pos[t];
    hi = min(ps, p.kv_rows - 1);
    lo = p.window > 0 ? max(0, ps - p.window + 1) : 0;
}

// Computed by a whole warp (every lane gets the result): lanes take the block's <= 64 tokens.
__device__ __forceinline__ FwBlock fw_block_at(const FwParams &p, int w) {
    FwBlock b;
    b.kvh = w % p.n_kv;
    b.q0 = (p.n_blocks - 1 - w / p.n_kv) * p.tq; // latest (longest) blocks first
    const int lane = threadIdx.x & 31;
    int lo_min = INT_MAX, hi_max = -1, lo_max = -1, hi_min = INT_MAX;
    for (int i = lane; i < p.tq; i += 32) {
        const int t = b.q0 + i;
        if (t >= p.T) continue;
        int lo, hi;
        fw_row_range(p, t, lo, hi);
        if (hi >= lo) {
            lo_min = min(lo_min, lo), hi_max = max(hi_max, hi);
            lo_max = max(lo_max, lo), hi_min = min(hi_min, hi);
        } else {
            lo_max = INT_MAX, hi_min = -1; // a row that sees nothing: mask every tile
        }
    }
    b.lo_min = __reduce_min_sync(0xffffffffu, lo_min);
    b.hi_max = __reduce_max_sync(0xffffffffu, hi_max);
    b.lo_max = __reduce_max_sync(0xffffffffu, lo_max);
    b.hi_min = __reduce_min_sync(0xffffffffu, hi_min);
    if (b.hi_max < b.lo_min) { // nothing visible at all
        b.lo_min = 0, b.hi_max = -1, b.lo_max = INT_MAX, b.hi_min = -1, b.n_tiles = 1;
    } else {
        b.n_tiles = (b.hi_max - b.lo_min) / FW_BK + 1;
    }
    return b;
}

// The i-th work item of this CTA, or -1 past the last: items go round by round over the grid,
// in snake order (round i even: CTA b takes i * grid + b, odd: i * grid + grid - 1 - b), so with
// items sorted longest first (fw_block_at) every two rounds give each CTA the same total length.
__device__ __forceinline__ int fw_item(const FwParams &p, int i) {
    const int G = (int)gridDim.x, b = (int)blockIdx.x;
    const long long w = (long long)i * G + ((i & 1) ? G - 1 - b : b);
    return w < p.n_work ? (int)w : -1;
}

// Row r of a block -> (token, head), or token -1 for a padding row.
__device__ __forceinline__ int fw_row_token(const FwParams &p, const FwBlock &b, int r, int &head) {
    head = b.kvh * p.group + r % p.group;
    const int i = r / p.group, t = b.q0 + i;
    return (i < p.tq && t < p.T) ? t : -1;
}

template <int HD>
__global__ void __launch_bounds__(fw_cfg<HD>::THREADS, 1)
    fw_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
              const FwParams p) {
    using C = fw_cfg<HD>;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint64_t *bars = (uint64_t *)(smem + C::OFF_BAR);
    uint64_t *kfull = bars, *kempty = kfull + C::SK, *vfull = kempty + C::SK;
    uint64_t *vempty = vfull + C::SV, *pfull = vempty + C::SV, *pempty = pfull + 2;
    float *alpha_l = (float *)(smem + C::OFF_AL); // slot s: alpha at [128 s], l at [128 s + 64]
    const int wg = threadIdx.x >> 7, lane = threadIdx.x & 31, w4 = (threadIdx.x >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;

    if (threadIdx.x == 0) {
        for (int s = 0; s < C::SK; s++) mbar_init(&kfull[s], 1), mbar_init(&kempty[s], 1);
        for (int s = 0; s < C::SV; s++) mbar_init(&vfull[s], 1), mbar_init(&vempty[s], C::NPV);
        for (int s = 0; s < 2; s++) mbar_init(&pfull[s], 128), mbar_init(&pempty[s], C::NPV);
        fence_mbar_init();
    }
    __syncthreads();

    if (wg == 0) {
        // ------------------------------------------------------------------ producer
        reg_dealloc<C::PRODUCER_REGS>();
        const int warp = threadIdx.x >> 5;
        if (warp < 2) { // warp 0: K, warp 1: V
            const CUtensorMap *map = warp == 0 ? &tm_k : &tm_v;
            const int stages = warp == 0 ? C::SK : C::SV;
            uint64_t *full = warp == 0 ? kfull : vfull, *empty = warp == 0 ? kempty : vempty;
            const uint32_t base = warp == 0 ? C::OFF_K : C::OFF_V;
            uint32_t gt = 0;
            for (int i = 0, w; (w = fw_item(p, i)) >= 0; i++) {
                const FwBlock b = fw_block_at(p, w);
                for (int it = 0; it < b.n_tiles; it++, gt++) {
                    if (lane == 0) {
                        const int s = gt % stages;
                        mbar_wait(&empty[s], ((gt / stages) & 1) ^ 1);
                        mbar_expect_tx(&full[s], C::TILE);
                        uint8_t *dst = smem + base + s * C::TILE;
                        const int j0 = b.lo_min + it * FW_BK;
#pragma unroll
                        for (int c = 0; c < HD / 64; c++)
                            tma_load_2d(dst + c * C::CHUNK, map, b.kvh * HD + 64 * c, j0, &full[s]);
                    }
                    __syncwarp();
                }
            }
        }
    } else if (wg == 1) {
        // ------------------------------------------------------------------ S
        reg_alloc<C::S_REGS>();
        const bool leader = (threadIdx.x & 127) == 0;
        uint8_t *qs = smem + C::OFF_Q;
        uint32_t qa[C::QREG / 16][4];
        uint32_t gt = 0;
        for (int i = 0, w; (w = fw_item(p, i)) >= 0; i++) {
            const FwBlock b = fw_block_at(p, w);
            {
                // The next block's Q rows into L2 (its loads below then wait ~half as long).
                const int wn = fw_item(p, i + 1);
                if (wn >= 0) {
                    FwBlock nb;
                    nb.kvh = wn % p.n_kv;
                    nb.q0 = (p.n_blocks - 1 - wn / p.n_kv) * p.tq;
                    constexpr int LINES = HD * 2 / 128; // 128-byte lines per Q row
                    for (int k = threadIdx.x - 128; k < FW_ROWS * LINES; k += 128) {
                        int head;
                        const int tok = fw_row_token(p, nb, k / LINES, head);
                        if (tok >= 0)
                            g4_prefetch_l2(p.q + (size_t)tok * p.q_stride + (size_t)head * HD +
                                           64 * (k % LINES));
                    }
                }
            }
            // This thread's rows 16 w4 + g (+ 8) and their visible ranges; Q fragments.
            int rlo[2], rhi[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int head;
                const int tok = fw_row_token(p, b, 16 * w4 + g + 8 * h, head);
                rlo[h] = 1, rhi[h] = 0; // padding row: nothing visible
                if (tok >= 0) fw_row_range(p, tok, rlo[h], rhi[h]);
                const uint16_t *src =
                    p.q + (size_t)(tok >= 0 ? tok : 0) * p.q_stride + (size_t)head * HD + 2 * t;
#pragma unroll
                for (int ks = 0; ks < C::QREG / 16; ks++) {
                    qa[ks][h] = tok >= 0 ? *(const uint32_t *)(src + 16 * ks) : 0u;
                    qa[ks][2 + h] = tok >= 0 ? *(const uint32_t *)(src + 16 * ks + 8) : 0u;
                }
            }
            if constexpr (C::QS_DIMS > 0) {
                // The rest of Q into shared memory: rows of QS_DIMS dims as 64-dim chunks (K-major,
                // 128B swizzle). The previous block's S wgmma read it; every thread is past them.
                named_bar_sync(1, 128);
                constexpr int CH = C::QS_DIMS / 8; // 16-byte chunks per row (16)
                static_assert(128 % CH == 0, "a thread keeps one chunk column");
                const int ch = (threadIdx.x - 128) % CH, r0 = (threadIdx.x - 128) / CH;
                uint8_t *dst = qs + (ch / 8) * 8192;
#pragma unroll 1
                for (int r = r0; r < FW_ROWS; r += 128 / CH) {
                    int head;
                    const int tok = fw_row_token(p, b, r, head);
                    uint4 v = make_uint4(0, 0, 0, 0);
                    if (tok >= 0)
                        v = *(const uint4 *)(p.q + (size_t)tok * p.q_stride + (size_t)head * HD +
                                             C::QREG + 8 * ch);
                    *(uint4 *)(dst + swz128(r, ch % 8)) = v;
                }
                fence_proxy_async();
                named_bar_sync(1, 128);
            }
            float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
            for (int it = 0; it < b.n_tiles; it++, gt++) {
                const int sk = gt % C::SK, j0 = b.lo_min + it * FW_BK;
                mbar_wait(&kfull[sk], (gt / C::SK) & 1);
                const uint32_t kb = smem_u32(smem + C::OFF_K + sk * C::TILE);
                float s[32];
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < HD / 16; ks++) {
                    // K tile: 64-dim chunk ks / 4, k16 step ks % 4 inside its 128-byte rows.
                    const uint64_t dk =
                        make_desc(kb + (ks / 4) * C::CHUNK + (ks % 4) * 32, 16, 1024);
                    if (ks < C::QREG / 16) {
                        wgmma_rs(s, qa[ks], dk, ks > 0);
                    } else {
                        const int q = ks - C::QREG / 16;
                        const uint32_t qd = smem_u32(qs) + (q / 4) * 8192 + (q % 4) * 32;
                        wgmma_ss<0>(s, make_desc(qd, 16, 1024), dk, 1);
                    }
                }
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(s);
                if (leader) mbar_arrive(&kempty[sk]);

                // Scale, mask, online softmax. s[4 j + 2 h + e]: row 16 w4 + g + 8 h, key
                // j0 + 8 j + 2 t + e.
                const bool need_mask = j0 < b.lo_max || j0 + FW_BK - 1 > b.hi_min;
                float alpha[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float mx = -INFINITY;
#pragma unroll
                    for (int j = 0; j < 8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float v = s[4 * j + 2 * h + e] * p.scale_log2;
                            if (need_mask) {
                                const int key = j0 + 8 * j + 2 * t + e;
                                if (!(key >= rlo[h] && key <= rhi[h])) v = -INFINITY;
                            }
                            s[4 * j + 2 * h + e] = v;
                            mx = fmaxf(mx, v);
                        }
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float m_new = fmaxf(m[h], mx);
                    // A row that has seen no visible key yet keeps alpha 1 and P 0.
                    alpha[h] = m_new == -INFINITY ? 1.0f : exp2f(m[h] - m_new);
                    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
                    float sum = 0.0f;
#pragma unroll
                    for (int j = 0; j < 8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const float pv = exp2f(s[4 * j + 2 * h + e] - m_use);
                            s[4 * j + 2 * h + e] = pv;
                            sum += pv;
                        }
                    l[h] = l[h] * alpha[h] + sum;
                    m[h] = m_new;
                }
                const bool last = it == b.n_tiles - 1;
                float lt[2] = {l[0], l[1]};
                if (last) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        lt[h] += __shfl_xor_sync(0xffffffffu, lt[h], 1);
                        lt[h] += __shfl_xor_sync(0xffffffffu, lt[h], 2);
                    }
                }
                const int ps = gt & 1;
                mbar_wait(&pempty[ps], ((gt >> 1) & 1) ^ 1);
                uint8_t *pt = smem + C::OFF_P + ps * C::P_BYTES;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = 16 * w4 + g + 8 * h;
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        *(uint32_t *)(pt + swz128(r, j) + 4 * t) =
                            pack_half2(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]);
                    if (t == 0) {
                        alpha_l[128 * ps + r] = alpha[h];
                        if (last) alpha_l[128 * ps + 64 + r] = lt[h];
                    }
                }
                fence_proxy_async(); // P is read by wgmma (async proxy)
                mbar_arrive(&pfull[ps]);
            }
        }
    } else {
        // ------------------------------------------------------------------ PV
        reg_alloc<C::PV_REGS>();
        const int v = wg - 2; // output dims 256 v .. 256 v + 255
        const bool leader = (threadIdx.x & 127) == 0;
        // o[x][4 j + 2 h + e]: row 16 w4 + g + 8 h, dim 256 v + (256 / PV_SPLIT) x + 8 j + 2 t + e.
        float o[C::PV_SPLIT][C::PV_ACC];
#pragma unroll
        for (int x = 0; x < C::PV_SPLIT; x++)
#pragma unroll
            for (int i = 0; i < C::PV_ACC; i++) o[x][i] = 0.0f;
        uint32_t gt = 0;
        for (int i = 0, w; (w = fw_item(p, i)) >= 0; i++) {
            const FwBlock b = fw_block_at(p, w);
            for (int it = 0; it < b.n_tiles; it++, gt++) {
                const int ps = gt & 1, sv = gt % C::SV, j0 = b.lo_min + it * FW_BK;
                const bool first = it == 0, last = it == b.n_tiles - 1;
                mbar_wait(&pfull[ps], (gt >> 1) & 1);
                mbar_wait(&vfull[sv], (gt / C::SV) & 1);
                uint8_t *vt = smem + C::OFF_V + sv * C::TILE + 4 * v * C::CHUNK;
                if (j0 + FW_BK - 1 > b.hi_max) {
                    // Keys past hi_max: zero their V rows (this warpgroup's 4 chunks) so that
                    // P = 0 times whatever the cache holds there stays 0.
                    const int k0 = max(b.hi_max + 1 - j0, 0), n = (FW_BK - k0) * 4 * 8;
                    for (int idx = threadIdx.x & 127; idx < n; idx += 128) {
                        const int row = k0 + idx / 32, ch = (idx / 8) % 4, c16 = idx % 8;
                        *(uint4 *)(vt + ch * C::CHUNK + row * 128 + c16 * 16) =
                            make_uint4(0, 0, 0, 0);
                    }
                    fence_proxy_async();
                    named_bar_sync(2 + v, 128);
                }
                if (!first) { // rescale to the new running max (the block's first P starts O)
                    const float a0 = alpha_l[128 * ps + 16 * w4 + g];
                    const float a1 = alpha_l[128 * ps + 16 * w4 + g + 8];
#pragma unroll
                    for (int x = 0; x < C::PV_SPLIT; x++)
#pragma unroll
                        for (int j = 0; j < C::PV_ACC / 4; j++) {
                            o[x][4 * j] *= a0, o[x][4 * j + 1] *= a0;
                            o[x][4 * j + 2] *= a1, o[x][4 * j + 3] *= a1;
                        }
                }
                const uint32_t pb = smem_u32(smem + C::OFF_P + ps * C::P_BYTES);
                const uint32_t vb = smem_u32(vt);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < FW_BK / 16; kk++)
#pragma unroll
                    for (int x = 0; x < C::PV_SPLIT; x++) // dims 256 / PV_SPLIT x .. of the half
                        wgmma_ss<1>(o[x], make_desc(pb + kk * 32, 16, 1024),
                                    make_desc(vb + (4 / C::PV_SPLIT) * x * C::CHUNK + kk * 2048,
                                              C::CHUNK, 1024),
                                    !(first && kk == 0));
                wgmma_commit();
                wgmma_wait<0>();
#pragma unroll
                for (int x = 0; x < C::PV_SPLIT; x++) fence_regs(o[x]);
                float l0 = 0.0f, l1 = 0.0f;
                if (last) {
                    l0 = alpha_l[128 * ps + 64 + 16 * w4 + g];
                    l1 = alpha_l[128 * ps + 64 + 16 * w4 + g + 8];
                }
                if (leader) {
                    mbar_arrive(&pempty[ps]);
                    mbar_arrive(&vempty[sv]);
                }
                if (last) { // O / l to the output rows of this thread
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        int head;
                        const int tok = fw_row_token(p, b, 16 * w4 + g + 8 * h, head);
                        if (tok < 0) continue;
                        const float lv = h ? l1 : l0, inv = lv > 0.0f ? 1.0f / lv : 0.0f;
                        uint16_t *dst =
                            p.out + (size_t)tok * p.q_stride + (size_t)head * HD + 256 * v + 2 * t;
#pragma unroll
                        for (int x = 0; x < C::PV_SPLIT; x++)
#pragma unroll
                            for (int j = 0; j < C::PV_ACC / 4; j++)
                                *(uint32_t *)(dst + (256 / C::PV_SPLIT) * x + 8 * j) = pack_half2(
                                    o[x][4 * j + 2 * h] * inv, o[x][4 * j + 2 * h + 1] * inv);
                    }
                }
            }
        }
    }
}

template <int HD>
void fw_launch(const FwParams &p, const uint16_t *kc, const uint16_t *vc, int max_ctas,
               cudaStream_t stream) {
    using C = fw_cfg<HD>;
    static bool smem_set = false;
    set_smem(fw_kernel<HD>, C::SMEM, &smem_set);
    CUtensorMap mk, mv;
    tma_map_f16(&mk, kc, p.n_kv * HD, p.kv_rows, FW_BK);
    tma_map_f16(&mv, vc, p.n_kv * HD, p.kv_rows, FW_BK);
    int grid = p.n_work < num_sms() ? p.n_work : num_sms();
    if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
    fw_kernel<HD><<<grid, C::THREADS, C::SMEM, stream>>>(mk, mv, p);
    G4_CUDA_LAUNCH_CHECK();
}

} // namespace

extern "C" int g4_attn_prefill_wgmma_supported(int hd, int n_heads, int n_kv) {
    return (hd == 256 || hd == 512) && n_kv > 0 && n_heads > 0 && n_heads % n_kv == 0 &&
           n_heads / n_kv <= FW_ROWS;
}

// The wgmma path of g4_attn_prefill (attention_prefill.cu checks the arguments).
void g4_attn_prefill_wgmma(uint16_t *out, const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                           const int32_t *pos, int T, int n_heads, int n_kv, int hd, int capacity,
                           int window, float scale, int max_ctas, cudaStream_t stream) {
    FwParams p = {};
    p.out = out, p.q = q, p.pos = pos;
    p.T = T, p.n_heads = n_heads, p.n_kv = n_kv;
    p.group = n_heads / n_kv;
    p.tq = FW_ROWS / p.group;
    p.q_stride = n_heads * hd;
    p.kv_rows = capacity, p.window = window;
    p.n_blocks = (T + p.tq - 1) / p.tq;
    p.n_work = p.n_blocks * n_kv;
    p.scale_log2 = scale * 1.4426950408889634f;
    if (hd == 256)
        fw_launch<256>(p, kc, vc, max_ctas, stream);
    else
        fw_launch<512>(p, kc, vc, max_ctas, stream);
}
