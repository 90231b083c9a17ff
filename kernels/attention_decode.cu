// attention_decode.cu: flash-decoding for the text decoder's decode step: out = attention of a
// few query tokens (T = 1 in decode) over a KV cache of up to `capacity` rows (32k+).
//
// What it computes: attention_decode.cuh (oracle: ref_attention in kernels/ref/attention.c).
// Test: tests/test_cuda_attention.c --op attn_decode; bench: g4cu bench --kernels --filter
// attn_decode. Floor: K + V bytes of the visible keys at copy bandwidth.
//
// Scheme:
//  * Rows: the G = n_heads / n_kv query heads sharing a KV head, times the T tokens, are the
//    rows of one m16n8k16 MMA (16 rows per CTA; E2B decode: 8 heads x 1 token), so each K/V
//    tile is read once from memory for all of them (GQA packing).
//  * Splits: the key range [min lo, max pos] (from the device `pos`) is cut into tiles of TILE
//    keys and the tiles into at most `n_splits` contiguous slices, one per CTA; a CTA whose slice
//    is empty returns at once. n_splits = the SM count (for n_kv x row groups = 1), fixed at
//    launch, so the grid suits a CUDA graph while the work follows the current length.
//  * Per CTA (4 warps): K/V tiles of 32 KB each stream through a 3-stage cp.async pipeline (up
//    to 192 KB in flight per SM, far more than the ~32 KB a SM needs to cover DRAM latency at
//    its share of the bandwidth). Warp w computes S over head-dim quarter w (Q fragments in
//    registers), the 4 partials are summed through shared memory in a fixed order (all warps
//    hold identical S), online softmax in the log2 domain, then O[:, quarter w] += P V.
//  * Each split writes its unnormalised O, running max m and sum l (fp32) to the workspace; the
//    merge kernel rescales by exp2(m_s - max m) and divides: the log-sum-exp merge.
// Keys past max(pos) are zero-filled, never read (cache rows beyond the length may hold NaN).
// The row-batched op (g4_attn_decode_rows, a batch decode step) is the same kernels with each
// token a sequence of its own: its caches come from a device table, a CTA's rows are the query
// heads of one token (8 of 16 MMA rows in E2B: the K/V tile is that sequence's alone), and the
// key range and splits follow that token's position only.
// Both kernels are launched with programmatic dependent launch (kernels/pdl.cuh) and have
// nothing above their wait: q, pos and the KV cache come from the kernels just before (the
// current row of the cache from qkv_prep), the merge's partials from the split kernel.
#include "kernels/attention_decode.cuh"

#include <cooperative_groups.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"
#include "kernels/pdl.cuh"
#include "kernels/qkv_vec.cuh"

using namespace g4k;
namespace cg = cooperative_groups;

namespace {

constexpr int DEC_WARPS = 4, DEC_THREADS = 128, DEC_STAGES = 3, DEC_MAX_T = 64;
constexpr int DEC_MAX_ROWS = 4096; // the row-batched op: a batch of up to 4096 sequences
// The workspace's header (both forms, which share the CUDA backend's buffer): the merge-in-split
// tickets, one a (KV head, row group) on its own 128-byte line; the partials follow it.
constexpr int DEC_TICKETS = 256, DEC_TICKET_STRIDE = 32; // (uint32 words)
constexpr size_t DEC_WS_HEADER = (size_t)DEC_TICKETS * DEC_TICKET_STRIDE * 4;
constexpr int DEC_CM_CS = 8, DEC_CM_MAX_CLUSTERS = 32; // cluster size; clusters a merge reads

template <int HD_> struct DecCfg {
    static constexpr int HD = HD_;
    static constexpr int TILE = 16384 / HD; // keys per tile: K tile = 32 KB
    static constexpr int DW = HD / DEC_WARPS;
    static constexpr int KSTEPS = DW / 16, NB_S = TILE / 8, NB_O = DW / 8;
    static constexpr int CHUNKS = HD / 8, ROW_BYTES = HD * 2;
    static constexpr int RED_STRIDE = TILE + 8;
    static constexpr size_t TILE_BYTES = (size_t)TILE * ROW_BYTES;
    static constexpr size_t SMEM_KV = (size_t)DEC_STAGES * 2 * TILE_BYTES;
    static constexpr size_t SMEM = SMEM_KV + (size_t)DEC_WARPS * 16 * RED_STRIDE * 4;
    static_assert(NB_S % 2 == 0 && NB_O % 2 == 0 && KSTEPS >= 1, "tile shape");
};

struct DecParams {
    const uint16_t *q, *k, *v;
    const int32_t *pos;
    float *part_o;  // [T * n_heads][n_splits][HD] unnormalised O of each split
    float *part_ml; // [T * n_heads][n_splits][2]  (m in log2 units, l)
    uint16_t *out;
    int T, n_heads, group, kv_rows, window, n_splits, hd;
    int q_stride, kv_stride, out_stride;
    float scale_log2;
    // The row-batched op (g4_attn_decode_rows): token t is a sequence of its own over the caches
    // at k_tab[t] / v_tab[t] of cap_tab[t] rows (k, v and kv_rows unused); a CTA holds the
    // query heads of one token only (rg_per_t row groups of 16 per token). NULL: one cache.
    const uint64_t *k_tab, *v_tab;
    const int32_t *cap_tab;
    int rg_per_t;
    // The fused head preparation (g4_attn_decode_prep / _rows_prep, the PREP kernels): q above
    // is the raw projection, normalised and rotated into shared memory by every CTA; k_new,
    // v_new [T, n_kv * hd] the raw k, v (NULL: a KV-shared layer, q only), prepared and stored
    // at cache row pos[t] by the one CTA whose key slice holds that row, before it loads it.
    const uint16_t *k_new, *v_new, *q_w, *k_w;
    const float *inv_freq;
    float eps;
    int prep; // 1: the PREP kernels
    // The merge inside the split kernel (CM kernels, G4_ATTN_MERGE=cluster): one ticket counter
    // a (KV head, row group), 128 bytes apart, in the workspace's header (zero between launches).
    unsigned *tickets;
};

struct DecSplit {
    int lo_all, hi_all, n_tiles, tps, n_active;
};

// The tiling of the key range of tokens [t0, t0 + nt) over a cache of kv_rows rows; the split
// kernel and the merge compute it identically.
template <int TILE>
__device__ __forceinline__ DecSplit dec_split(const DecParams &p, int t0, int nt, int kv_rows) {
    int lo_all = 0x7fffffff, hi_all = -1;
    for (int t = t0; t < t0 + nt; t++) {
        const int ps = p.pos[t];
        const int hi = min(ps, kv_rows - 1), lo = p.window > 0 ? max(0, ps - p.window + 1) : 0;
        if (hi >= lo) lo_all = min(lo_all, lo), hi_all = max(hi_all, hi);
    }
    DecSplit s;
    s.lo_all = lo_all, s.hi_all = hi_all;
    s.n_tiles = hi_all >= lo_all ? (hi_all - lo_all) / TILE + 1 : 0;
    s.tps = s.n_tiles > 0 ? (s.n_tiles + p.n_splits - 1) / p.n_splits : 1;
    s.n_active = (s.n_tiles + s.tps - 1) / s.tps;
    return s;
}

// The merge inside the split kernel (CM): the log-sum-exp merge of dec_merge_kernel done by the
// splits themselves, in two levels, so the decode attention is one launch.
//  1. In a cluster of CS splits: each CTA leaves its O [16][HD] and (m, l) [16] in its shared
//     memory; after a cluster barrier CTA rank r merges head dims [r HD / CS, (r + 1) HD / CS)
//     of its 16 rows over the CS splits (rank order) through distributed shared memory. With one
//     active cluster (short context: every visible key in <= CS splits) that is the output.
//  2. Else each cluster writes its merged O (relative to its max M) and (M, den) as one partial
//     (slot = cluster index), fences, and rank 0 draws a ticket; the cluster drawing the last
//     one (the active count follows the device length, as dec_split computes it) merges the
//     n_ca cluster partials (cluster order), each rank its dim slice, and resets the ticket to
//     0 for the next launch. Nothing waits on another cluster (no co-residency assumed).
// Deterministic: fixed orders at both levels whatever the arrival order.
template <class C>
__device__ __forceinline__ void dec_cluster_merge(const DecParams &p, const float (&o)[C::NB_O][4],
                                                  const float (&m)[2], const float (&l)[2], int rg,
                                                  int t_first, int t_count, int kvh, int cid,
                                                  int n_ca, uint8_t *smem) {
    // Every remote (DSMEM) or L2 read below is issued with the others of its step in flight
    // (in the cluster, a thread's CS (m, l) pairs and CS float4s of O at once; over the clusters,
    // one (row, source) pair a thread, then 8 unrolled float4 loads): the first version looped
    // over the sources one dependent load at a time and paid ~200-600 cycles per load, ~5 us.
    constexpr int MAXC = DEC_CM_MAX_CLUSTERS, R = 16;
    cg::cluster_group cluster = cg::this_cluster();
    const int CS = (int)cluster.num_blocks(), crank = (int)cluster.block_rank();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    __syncthreads(); // every warp is done with the last K/V stage: its smem is reused below
    float *so = reinterpret_cast<float *>(smem);  // [R][HD] this split's O
    float *sml = so + R * C::HD;                  // [R][2]  its (m, l)
    float *sm = sml + 2 * R, *sl = sm + R * MAXC; // [R][MAXC] the sources' (m, l), then weights
    float *sden = sl + R * MAXC;                  // [R]
    int *sflag = reinterpret_cast<int *>(sden + R);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float lt = l[r];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        const int row = g + 8 * r;
#pragma unroll
        for (int nb = 0; nb < C::NB_O; nb++)
            *reinterpret_cast<float2 *>(&so[row * C::HD + warp * C::DW + nb * 8 + 2 * c]) =
                make_float2(o[nb][2 * r], o[nb][2 * r + 1]);
        if (warp == 0 && c == 0) sml[2 * row] = m[r], sml[2 * row + 1] = lt;
    }
    // The weights of n sources' (m, l) pairs, gathered into sm / sl by get(row, k): sl becomes
    // each source's weight exp2(m_k - M) (0 where l_k = 0), sden the row's denominator.
    auto weights = [&](int n, auto get) {
        for (int e = tid; e < R * n; e += DEC_THREADS) {
            const float2 v = get(e / n, e % n);
            sm[(e / n) * MAXC + e % n] = v.x, sl[(e / n) * MAXC + e % n] = v.y;
        }
        __syncthreads();
        if (tid < R) {
            float M = -INFINITY, den = 0.0f;
            for (int k = 0; k < n; k++)
                if (sl[tid * MAXC + k] > 0.0f) M = fmaxf(M, sm[tid * MAXC + k]);
            for (int k = 0; k < n; k++) {
                const float lk = sl[tid * MAXC + k],
                            w = lk > 0.0f ? exp2f(sm[tid * MAXC + k] - M) : 0.0f;
                den += w * lk;
                sl[tid * MAXC + k] = w, sm[tid * MAXC + k] = M;
            }
            sden[tid] = den;
        }
        __syncthreads();
    };
    // sum_k w_k src(k)[4 dims] over n sources, 8 loads in flight at a time, in source order
    auto wsum = [&](int row, int n, auto src) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int k0 = 0; k0 < n; k0 += 8) {
            float4 v[8];
            float w[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                w[j] = k0 + j < n ? sl[row * MAXC + k0 + j] : 0.0f;
                v[j] = w[j] > 0.0f ? src(k0 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int j = 0; j < 8; j++)
                if (w[j] > 0.0f)
                    acc.x += w[j] * v[j].x, acc.y += w[j] * v[j].y, acc.z += w[j] * v[j].z,
                        acc.w += w[j] * v[j].w;
        }
        return acc;
    };
    const int DS = C::HD / CS, rows = t_count * p.group, Q = DS / 4; // float4s a row of mine
    auto store_out = [&](int t, int h, int d, float4 num, float den) {
        uint16_t *dst = p.out + (size_t)t * p.out_stride + (size_t)h * C::HD + d;
        // (num / den as the merge kernel; 0 where no key was visible)
        dst[0] = f2h(den > 0.0f ? num.x / den : 0.0f),
        dst[1] = f2h(den > 0.0f ? num.y / den : 0.0f);
        dst[2] = f2h(den > 0.0f ? num.z / den : 0.0f),
        dst[3] = f2h(den > 0.0f ? num.w / den : 0.0f);
    };

    cluster.sync(); // every split's O and (m, l) are in its shared memory
    // Over the cluster's CS <= 8 splits each thread gathers its row's CS (m, l) pairs together
    // with its CS float4s of O (one DSMEM round trip, 2 CS loads in flight) and derives the
    // weights itself: no shared weight table, so no second round trip and no CTA barriers.
    // Every split of an active cluster left an O (zeros where it had no keys), so the loads
    // need no guard; the arithmetic is weights() + wsum()'s, in the same (rank) order.
    for (int e = tid; e < R * Q; e += DEC_THREADS) {
        const int row = e / Q, d = crank * DS + (e % Q) * 4, i = rg * 16 + row;
        if (i >= rows) continue;
        float2 ml[DEC_CM_CS];
        float4 v[DEC_CM_CS];
#pragma unroll
        for (int k = 0; k < DEC_CM_CS; k++)
            if (k < CS) {
                ml[k] =
                    *reinterpret_cast<const float2 *>(cluster.map_shared_rank(sml, k) + 2 * row);
                v[k] = *reinterpret_cast<const float4 *>(cluster.map_shared_rank(so, k) +
                                                         row * C::HD + d);
            }
        float M = -INFINITY, den = 0.0f;
#pragma unroll
        for (int k = 0; k < DEC_CM_CS; k++)
            if (k < CS && ml[k].y > 0.0f) M = fmaxf(M, ml[k].x);
        float4 num = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int k = 0; k < DEC_CM_CS; k++) {
            if (k >= CS) continue;
            const float w = ml[k].y > 0.0f ? exp2f(ml[k].x - M) : 0.0f;
            den += w * ml[k].y;
            if (w > 0.0f)
                num.x += w * v[k].x, num.y += w * v[k].y, num.z += w * v[k].z, num.w += w * v[k].w;
        }
        const int t = t_first + i / p.group, h = kvh * p.group + i % p.group;
        if (n_ca == 1) {
            store_out(t, h, d, num, den);
        } else {
            const size_t prow = ((size_t)t * p.n_heads + h) * p.n_splits + cid;
            *reinterpret_cast<float4 *>(p.part_o + prow * C::HD + d) = num;
            if (d == crank * DS)
                *reinterpret_cast<float2 *>(p.part_ml + prow * 2) = make_float2(M, den);
        }
    }
    if (n_ca == 1) {
        cluster.sync(); // no CTA leaves while another reads its shared memory
        return;
    }
    __threadfence(); // this CTA's partial before the cluster's ticket
    cluster.sync();  // every rank's partial written (and every DSMEM read above done)
    if (crank == 0 && tid == 0) {
        unsigned *tk = p.tickets + (size_t)(kvh * gridDim.z + blockIdx.z) * DEC_TICKET_STRIDE;
        const int last = atomicAdd(tk, 1u) == (unsigned)(n_ca - 1);
        if (last) atomicExch(tk, 0u); // every other cluster of this launch has drawn
        *sflag = last;
    }
    cluster.sync();
    const int last = *cluster.map_shared_rank(sflag, 0);
    if (last) {
        __threadfence(); // the other clusters' partials, seen after their tickets
        weights(n_ca, [&](int row, int k) {
            const int i = rg * 16 + row;
            if (i >= rows) return make_float2(-INFINITY, 0.0f);
            const int t = t_first + i / p.group, h = kvh * p.group + i % p.group;
            return __ldcg(reinterpret_cast<const float2 *>(p.part_ml) +
                          ((size_t)t * p.n_heads + h) * p.n_splits + k);
        });
        for (int e = tid; e < R * Q; e += DEC_THREADS) {
            const int row = e / Q, d = crank * DS + (e % Q) * 4, i = rg * 16 + row;
            if (i >= rows) continue;
            const int t = t_first + i / p.group, h = kvh * p.group + i % p.group;
            const float *po = p.part_o + ((size_t)t * p.n_heads + h) * p.n_splits * C::HD + d;
            const float4 num = wsum(row, n_ca, [&](int k) {
                return __ldcg(reinterpret_cast<const float4 *>(po + (size_t)k * C::HD));
            });
            store_out(t, h, d, num, sden[row]);
        }
    }
    cluster.sync(); // rank 0's flag was read by every rank before it leaves
}

template <class C>
__device__ __forceinline__ void dec_store_partials(const DecParams &p, const float (&o)[C::NB_O][4],
                                                   const float (&m)[2], const float (&l)[2],
                                                   const bool (&rvalid)[2], const int (&rt)[2],
                                                   const int (&rh)[2], int split);

template <class C, bool PREP, bool CM>
__global__ void __launch_bounds__(DEC_THREADS, 1) dec_split_kernel(const DecParams p) {
    g4_pdl_wait(); // before pos is read and before the early return below
    g4_pdl_trigger();
    extern __shared__ __align__(128) uint8_t smem[];
    float *red = reinterpret_cast<float *>(smem + C::SMEM_KV); // [4][16][RED_STRIDE]
    const int split = blockIdx.x, kvh = blockIdx.y;
    // The tokens of this CTA: all T over the one cache, or (rows) token rg / rg_per_t alone
    // over its own; rg then counts this CTA's row groups within those tokens.
    int rg = blockIdx.z, t_first = 0, t_count = p.T, kv_rows = p.kv_rows;
    const uint16_t *kbase = p.k, *vbase = p.v;
    if (p.k_tab) {
        t_first = rg / p.rg_per_t, rg = rg % p.rg_per_t, t_count = 1;
        kv_rows = p.cap_tab[t_first];
        kbase = reinterpret_cast<const uint16_t *>(p.k_tab[t_first]);
        vbase = reinterpret_cast<const uint16_t *>(p.v_tab[t_first]);
    }
    const DecSplit sp = dec_split<C::TILE>(p, t_first, t_count, kv_rows);
    // CM: a cluster of CS splits merges in its shared memory; only a whole cluster past the
    // current length leaves at once (its CTAs all take this branch), an empty split of an
    // active cluster runs with no keys (m -inf, l 0) to the cluster barriers.
    const int cs = CM ? (int)cg::this_cluster().num_blocks() : 1;
    const int n_ca = (sp.n_active + cs - 1) / cs;               // active clusters (CM)
    if (CM ? split / cs >= n_ca : split >= sp.n_active) return; // past the current length
    const bool empty = split >= sp.n_active;
    const int t_begin = split * sp.tps, t_end = min(sp.n_tiles, t_begin + sp.tps);
    const int n_tiles = empty ? 0 : t_end - t_begin, j_begin = sp.lo_all + t_begin * C::TILE;
    const int j_last = sp.hi_all; // keys after it are zero-filled, never read

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, c = lane & 3;
    // Rows of this CTA: flattened (token t - t_first, head-in-group gg) indices rg*16 ..
    // rg*16+15.
    int rt[2], rh[2], rlo[2], rhi[2];
    bool rvalid[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = rg * 16 + g + 8 * r;
        rvalid[r] = i < t_count * p.group;
        rt[r] = t_first + (rvalid[r] ? i / p.group : 0);
        rh[r] = kvh * p.group + (rvalid[r] ? i % p.group : 0);
        rlo[r] = 1, rhi[r] = 0;
        if (rvalid[r]) {
            const int ps = p.pos[rt[r]];
            rhi[r] = min(ps, kv_rows - 1);
            rlo[r] = p.window > 0 ? max(0, ps - p.window + 1) : 0;
        }
    }
    // PREP: this CTA's query rows (row i = g + 8 r of the 16) prepared into shared memory
    // (stage 0's K area, [16][HD] fp16, free until the pipeline starts); the new k, v rows of
    // its token prepared and stored in the cache when its slice holds row pos (the last tile),
    // so they are in memory before its own loads below read them back (no other CTA reads
    // them: the other slices end before that row, and PREP runs one token a sequence).
    uint16_t *qs = reinterpret_cast<uint16_t *>(smem);
    if constexpr (PREP) {
        const int n_rows = min(16, t_count * p.group - rg * 16);
        const int ps = p.pos[t_first];
        const bool store = p.k_new && rg == 0 && ps >= 0 && ps < kv_rows &&
                           split == ((ps - sp.lo_all) / C::TILE) / sp.tps;
        const int n_vec = n_rows + (store ? 2 : 0);
        for (int iv = warp; iv < n_vec; iv += DEC_WARPS) {
            if (iv < n_rows) {
                const int i = rg * 16 + iv, t = t_first + i / p.group;
                const int h = kvh * p.group + i % p.group;
                qkv_vec<C::HD / 64>(p.q + (size_t)t * p.q_stride + (size_t)h * C::HD,
                                    qs + (size_t)iv * C::HD, p.q_w, p.q_w != nullptr, p.pos + t,
                                    p.inv_freq, 0, C::HD, p.eps, lane);
            } else { // iv == n_rows: k (weight, RoPE); n_rows + 1: v (norm without weight)
                const bool is_k = iv == n_rows;
                const size_t off = (size_t)kvh * C::HD;
                const uint16_t *src = (is_k ? p.k_new : p.v_new) + (size_t)t_first * p.kv_stride;
                uint16_t *dst =
                    const_cast<uint16_t *>(is_k ? kbase : vbase) + (size_t)ps * p.kv_stride;
                qkv_vec<C::HD / 64>(src + off, dst + off, is_k ? p.k_w : nullptr,
                                    is_k ? p.k_w != nullptr : true, p.pos + t_first,
                                    is_k ? p.inv_freq : nullptr, 0, C::HD, p.eps, lane);
            }
        }
        __syncthreads(); // the q rows and the stored k, v row are visible to the whole CTA
    }
    uint32_t qa[C::KSTEPS][4];
#pragma unroll
    for (int ks = 0; ks < C::KSTEPS; ks++) {
        const int d = warp * C::DW + ks * 16 + 2 * c;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint16_t *src =
                PREP ? qs + (size_t)(g + 8 * r) * C::HD + d
                     : p.q + (size_t)rt[r] * p.q_stride + (size_t)rh[r] * C::HD + d;
            qa[ks][r] = rvalid[r] ? *reinterpret_cast<const uint32_t *>(src) : 0u;
            qa[ks][2 + r] = rvalid[r] ? *reinterpret_cast<const uint32_t *>(src + 8) : 0u;
        }
    }
    if (PREP) __syncthreads(); // every q fragment is in registers before stage 0 is overwritten

    auto load_tile = [&](int stage, int j0) {
        uint8_t *ks = smem + (size_t)stage * 2 * C::TILE_BYTES, *vs = ks + C::TILE_BYTES;
#pragma unroll 4
        for (int idx = tid; idx < C::TILE * C::CHUNKS; idx += DEC_THREADS) {
            const int r = idx / C::CHUNKS, ch = idx % C::CHUNKS, j = j0 + r;
            const bool ok = j <= j_last;
            const size_t off = ok ? (size_t)j * p.kv_stride + (size_t)kvh * C::HD + ch * 8 : 0;
            cp_async16(ks + swz(r, ch, C::ROW_BYTES), kbase + off, ok);
            cp_async16(vs + swz(r, ch, C::ROW_BYTES), vbase + off, ok);
        }
    };

    float o[C::NB_O][4];
#pragma unroll
    for (int i = 0; i < C::NB_O; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

#pragma unroll
    for (int s = 0; s < DEC_STAGES - 1; s++) {
        if (s < n_tiles) load_tile(s, j_begin + s * C::TILE);
        cp_async_commit();
    }
    for (int it = 0; it < n_tiles; it++) {
        cp_async_wait<DEC_STAGES - 2>();
        __syncthreads();
        {
            const int nx = it + DEC_STAGES - 1;
            if (nx < n_tiles) load_tile(nx % DEC_STAGES, j_begin + nx * C::TILE);
            cp_async_commit();
        }
        const int stage = it % DEC_STAGES, j0 = j_begin + it * C::TILE;
        const uint8_t *ks = smem + (size_t)stage * 2 * C::TILE_BYTES, *vs = ks + C::TILE_BYTES;

        float s[C::NB_S][4];
#pragma unroll
        for (int i = 0; i < C::NB_S; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < C::KSTEPS; kk++) {
            const int ch0 = (warp * C::DW + kk * 16) / 8;
#pragma unroll
            for (int nb = 0; nb < C::NB_S; nb += 2) {
                const int mi = lane >> 3, key = (nb + (mi >> 1)) * 8 + (lane & 7);
                uint32_t b[4];
                ldmatrix_x4(b, ks + swz(key, ch0 + (mi & 1), C::ROW_BYTES));
                mma_16816(s[nb], qa[kk], b[0], b[1]);
                mma_16816(s[nb + 1], qa[kk], b[2], b[3]);
            }
        }
        float *mine = red + (size_t)warp * 16 * C::RED_STRIDE;
#pragma unroll
        for (int nb = 0; nb < C::NB_S; nb++) {
            *reinterpret_cast<float2 *>(&mine[g * C::RED_STRIDE + nb * 8 + 2 * c]) =
                make_float2(s[nb][0], s[nb][1]);
            *reinterpret_cast<float2 *>(&mine[(g + 8) * C::RED_STRIDE + nb * 8 + 2 * c]) =
                make_float2(s[nb][2], s[nb][3]);
        }
        __syncthreads();
#pragma unroll
        for (int nb = 0; nb < C::NB_S; nb++) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            const float *pr = red + (size_t)w * 16 * C::RED_STRIDE;
#pragma unroll
            for (int nb = 0; nb < C::NB_S; nb++) {
                const float2 a =
                    *reinterpret_cast<const float2 *>(&pr[g * C::RED_STRIDE + nb * 8 + 2 * c]);
                const float2 b = *reinterpret_cast<const float2 *>(
                    &pr[(g + 8) * C::RED_STRIDE + nb * 8 + 2 * c]);
                s[nb][0] += a.x, s[nb][1] += a.y, s[nb][2] += b.x, s[nb][3] += b.y;
            }
        }
#pragma unroll
        for (int nb = 0; nb < C::NB_S; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, j = j0 + nb * 8 + 2 * c + (e & 1);
                const bool ok = j >= rlo[r] && j <= rhi[r];
                s[nb][e] = ok ? s[nb][e] * p.scale_log2 : -INFINITY;
            }
        online_softmax(s, o, m, l);
        pv_accumulate(o, s, vs, warp * C::DW / 8, C::ROW_BYTES, lane);
    }
    cp_async_wait<0>();
    if constexpr (CM) {
        dec_cluster_merge<C>(p, o, m, l, rg, t_first, t_count, kvh, split / cs, n_ca, smem);
    } else {
        dec_store_partials<C>(p, o, m, l, rvalid, rt, rh, split);
    }
}

// The split's partials for dec_merge_kernel: O over this warp's dim quarter, (m, l) from warp 0.
template <class C>
__device__ __forceinline__ void dec_store_partials(const DecParams &p, const float (&o)[C::NB_O][4],
                                                   const float (&m)[2], const float (&l)[2],
                                                   const bool (&rvalid)[2], const int (&rt)[2],
                                                   const int (&rh)[2], int split) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float lt = l[r];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        if (!rvalid[r]) continue;
        const size_t prow = ((size_t)rt[r] * p.n_heads + rh[r]) * p.n_splits + split;
        float *dst = p.part_o + prow * C::HD + warp * C::DW + 2 * c;
#pragma unroll
        for (int nb = 0; nb < C::NB_O; nb++)
            *reinterpret_cast<float2 *>(dst + nb * 8) = make_float2(o[nb][2 * r], o[nb][2 * r + 1]);
        if (warp == 0 && c == 0)
            *reinterpret_cast<float2 *>(p.part_ml + prow * 2) = make_float2(m[r], lt);
    }
}

// out[t, h, d] = sum_s exp2(m_s - M) O_s[d] / sum_s exp2(m_s - M) l_s over the active splits
// with l_s > 0 (a split where the row saw no key contributes nothing). One CTA per (row,
// 128 dims).
template <class C> __global__ void __launch_bounds__(128) dec_merge_kernel(const DecParams p) {
    g4_pdl_wait();
    g4_pdl_trigger();
    const int row = blockIdx.x, t = row / p.n_heads, h = row % p.n_heads;
    const DecSplit sp = p.k_tab ? dec_split<C::TILE>(p, t, 1, p.cap_tab[t])
                                : dec_split<C::TILE>(p, 0, p.T, p.kv_rows);
    const int d = blockIdx.y * 128 + threadIdx.x;
    const float *ml = p.part_ml + (size_t)row * p.n_splits * 2;
    const float *po = p.part_o + (size_t)row * p.n_splits * C::HD + d;
    float M = -INFINITY;
    for (int s = 0; s < sp.n_active; s++)
        if (ml[2 * s + 1] > 0.0f) M = fmaxf(M, ml[2 * s]);
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < sp.n_active; s++) {
        const float l = ml[2 * s + 1];
        if (!(l > 0.0f)) continue; // unwritten or empty: never read its O
        const float w = exp2f(ml[2 * s] - M);
        den += w * l;
        num += w * po[(size_t)s * C::HD];
    }
    p.out[(size_t)t * p.out_stride + (size_t)h * C::HD + d] = f2h(den > 0.0f ? num / den : 0.0f);
}

int dec_tile(int hd) {
    return 16384 / hd;
}

// Splits per (KV head, row group): about one CTA per SM in all, at most one per tile.
int dec_n_splits(int T, int n_heads, int n_kv, int hd, int capacity) {
    const int groups = n_kv * ((T * (n_heads / n_kv) + 15) / 16);
    const int max_tiles = (capacity + dec_tile(hd) - 1) / dec_tile(hd);
    int s = (num_sms() + groups - 1) / groups;
    return s < 1 ? 1 : s > max_tiles ? max_tiles : s;
}

// The merge inside the split kernel: forced by tests (g4_attn_decode_set_merge), else
// G4_ATTN_MERGE (read once): "cluster" every one-cache launch, "global" only the layers without
// a window (whose key range grows with the context), "split" never; unset ("auto"): as "global"
// where the launch is built for at least g4_attn_decode_long_keys() keys (the thread's
// g4_attn_decode_set_keys hint), else the two launches, which are ~1 us faster at short range
// while the merge inside is 2x faster from 4k keys (bench/NOTES.md). g_dec_last_cm says which
// form the last launch took.
int g_dec_merge_force = -1, g_dec_last_cm = 0;
thread_local int g_dec_keys = 0;
int dec_cm_mode() {
    if (g_dec_merge_force >= 0) return g_dec_merge_force;
    static const int env = [] {
        const char *e = getenv("G4_ATTN_MERGE");
        return !e || !strcmp(e, "auto") ? 3
               : !strcmp(e, "cluster")  ? 1
               : !strcmp(e, "global")   ? 2
                                        : 0;
    }();
    return env;
}

template <class C, bool PREP>
void dec_launch(const DecParams &p, int n_kv, bool cm, cudaStream_t stream) {
    const int n_rg = p.k_tab ? p.T * p.rg_per_t : (p.T * p.group + 15) / 16;
    if (cm) { // one launch: clusters of cs splits (a power of two <= 8, <= the split count)
        static bool smem_set_cm = false;
        set_smem(dec_split_kernel<C, PREP, true>, (int)C::SMEM, &smem_set_cm);
        // the clusters of cs = 8 that can be resident at once (GPCs hold whole clusters: on an
        // H200 16 of 8 one-CTA-an-SM CTAs, not 132 / 8): a grid past them is a second wave
        static int resident = -1;
        if (resident < 0) {
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(DEC_CM_CS * 64, 1, 1), cfg.blockDim = dim3(DEC_THREADS, 1, 1);
            cfg.dynamicSmemBytes = C::SMEM;
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = DEC_CM_CS, at[0].val.clusterDim.y = 1;
            at[0].val.clusterDim.z = 1;
            cfg.attrs = at, cfg.numAttrs = 1;
            int n = 0;
            G4_CUDA_CHECK(
                cudaOccupancyMaxActiveClusters(&n, dec_split_kernel<C, PREP, true>, &cfg));
            resident = n;
        }
        DecParams q = p;
        int cs = DEC_CM_CS;
        while (cs > q.n_splits) cs /= 2;
        const int per_group = resident / (n_kv * n_rg); // resident clusters a (KV head, rows)
        if (cs == DEC_CM_CS && per_group >= 1 && q.n_splits > per_group * cs)
            q.n_splits = per_group * cs;
        const dim3 grid((q.n_splits + cs - 1) / cs * cs, n_kv, n_rg);
        g4_pdl_launch_cluster(dec_split_kernel<C, PREP, true>, grid, dim3(DEC_THREADS), C::SMEM,
                              stream, dim3(cs, 1, 1), q);
        return;
    }
    static bool smem_set = false;
    set_smem(dec_split_kernel<C, PREP, false>, (int)C::SMEM, &smem_set);
    const dim3 grid(p.n_splits, n_kv, n_rg);
    g4_pdl_launch(dec_split_kernel<C, PREP, false>, grid, dim3(DEC_THREADS), C::SMEM, stream, p);
    g4_pdl_launch(dec_merge_kernel<C>, dim3(p.T * p.n_heads, C::HD / 128), dim3(128), 0, stream, p);
}

} // namespace

extern "C" const char *g4_attn_decode_supported(int n_heads, int n_kv, int hd) {
    if (n_kv < 1 || n_heads < 1 || n_heads % n_kv)
        return "query heads a positive multiple of the KV heads (attention_decode.cu)";
    if (hd != 256 && hd != 512) return "head_dim 256 or 512 (attention_decode.cu)";
    return NULL;
}

// Splits per (KV head, token) of the row-batched op: about one CTA per SM in all (no cache
// length bound: the rows' lengths live on the device; CTAs past a row's length exit at once).
static int dec_rows_n_splits(int T, int n_heads, int n_kv) {
    const int groups = n_kv * T * ((n_heads / n_kv + 15) / 16);
    const int s = (num_sms() + groups - 1) / groups;
    return s < 1 ? 1 : s;
}

extern "C" size_t g4_attn_decode_rows_workspace(int T, int n_heads, int n_kv, int hd) {
    const int S = dec_rows_n_splits(T, n_heads, n_kv);
    return DEC_WS_HEADER + (size_t)T * n_heads * S * ((size_t)hd + 2) * sizeof(float);
}

// The rest of the decode attention's parameters (the one-cache and the per-row forms share
// them: kv_rows 0 in the per-row form, whose rows' lengths come from its tables) and the launch.
static void dec_run(DecParams &p, int T, int n_heads, int n_kv, int hd, int kv_rows, int n_splits,
                    int window, float scale, void *workspace, cudaStream_t stream) {
    p.T = T, p.n_heads = n_heads, p.group = n_heads / n_kv, p.kv_rows = kv_rows;
    p.window = window, p.hd = hd;
    p.n_splits = n_splits;
    p.q_stride = p.out_stride = n_heads * hd, p.kv_stride = n_kv * hd;
    p.scale_log2 = scale * 1.4426950408889634f;
    p.tickets = static_cast<unsigned *>(workspace);
    p.part_o = reinterpret_cast<float *>(static_cast<uint8_t *>(workspace) + DEC_WS_HEADER);
    p.part_ml = p.part_o + (size_t)T * n_heads * p.n_splits * hd;
    // the merge inside the splits: the one-cache form, a ticket for every (KV head, row group),
    // at most DEC_CM_MAX_CLUSTERS cluster partials for the last cluster to read
    const int n_rg = (T * p.group + 15) / 16;
    int mode = dec_cm_mode();
    if (mode == 3) mode = g_dec_keys >= g4_attn_decode_long_keys() ? 2 : 0;
    const bool cm = !p.k_tab && (mode == 1 || (mode == 2 && window == 0)) &&
                    n_kv * n_rg <= DEC_TICKETS &&
                    (n_splits + DEC_CM_CS - 1) / DEC_CM_CS <= DEC_CM_MAX_CLUSTERS;
    g_dec_last_cm = cm;
    const bool prep = p.prep != 0;
    if (hd == 256)
        prep ? dec_launch<DecCfg<256>, true>(p, n_kv, cm, stream)
             : dec_launch<DecCfg<256>, false>(p, n_kv, cm, stream);
    else
        prep ? dec_launch<DecCfg<512>, true>(p, n_kv, cm, stream)
             : dec_launch<DecCfg<512>, false>(p, n_kv, cm, stream);
}

static void dec_set_prep(DecParams &p, const g4_attn_prep *prep);

// The row-batched launch, with the head preparation when prep is set.
static void dec_rows(uint16_t *out, const uint16_t *q, const uint64_t *k_tab, const uint64_t *v_tab,
                     const int32_t *cap_tab, const int32_t *pos, int T, int n_heads, int n_kv,
                     int hd, int window, float scale, const g4_attn_prep *prep, void *workspace,
                     size_t workspace_bytes, cudaStream_t stream, const char *op) {
    G4K_REQUIRE(T >= 1 && T <= DEC_MAX_ROWS, op);
    G4K_SUPPORTED(prep ? g4_attn_decode_prep_supported(n_heads, n_kv, hd)
                       : g4_attn_decode_supported(n_heads, n_kv, hd),
                  op);
    G4K_REQUIRE(!prep || (prep->k == nullptr) == (prep->v == nullptr), op);
    G4K_REQUIRE(window >= 0 && k_tab && v_tab && cap_tab && pos, op);
    G4K_REQUIRE((((uintptr_t)q | (uintptr_t)out) & 15) == 0, op);
    G4K_REQUIRE(workspace && ((uintptr_t)workspace & 15) == 0, op);
    G4K_REQUIRE(workspace_bytes >= g4_attn_decode_rows_workspace(T, n_heads, n_kv, hd), op);
    DecParams p = {};
    p.q = q, p.pos = pos, p.out = out;
    p.k_tab = k_tab, p.v_tab = v_tab, p.cap_tab = cap_tab;
    p.rg_per_t = ((n_heads / n_kv) + 15) / 16;
    if (prep) dec_set_prep(p, prep);
    dec_run(p, T, n_heads, n_kv, hd, 0, dec_rows_n_splits(T, n_heads, n_kv), window, scale,
            workspace, stream);
}

extern "C" void g4_attn_decode_rows(uint16_t *out, const uint16_t *q, const uint64_t *k_tab,
                                    const uint64_t *v_tab, const int32_t *cap_tab,
                                    const int32_t *pos, int T, int n_heads, int n_kv, int hd,
                                    int window, float scale, void *workspace,
                                    size_t workspace_bytes, cudaStream_t stream) {
    dec_rows(out, q, k_tab, v_tab, cap_tab, pos, T, n_heads, n_kv, hd, window, scale, nullptr,
             workspace, workspace_bytes, stream, "g4_attn_decode_rows");
}

extern "C" size_t g4_attn_decode_workspace(int T, int n_heads, int n_kv, int hd, int capacity) {
    const int S = dec_n_splits(T, n_heads, n_kv, hd, capacity);
    return DEC_WS_HEADER + (size_t)T * n_heads * S * ((size_t)hd + 2) * sizeof(float);
}

// The one-cache launch (T tokens over one cache), with the head preparation when prep is set
// (then T = 1).
static void dec_one(uint16_t *out, const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                    const int32_t *pos, int T, int n_heads, int n_kv, int hd, int capacity,
                    int window, float scale, const g4_attn_prep *prep, void *workspace,
                    size_t workspace_bytes, cudaStream_t stream, const char *op) {
    G4K_REQUIRE(T >= 1 && T <= (prep ? 1 : DEC_MAX_T), op);
    G4K_SUPPORTED(prep ? g4_attn_decode_prep_supported(n_heads, n_kv, hd)
                       : g4_attn_decode_supported(n_heads, n_kv, hd),
                  op);
    G4K_REQUIRE(!prep || (prep->k == nullptr) == (prep->v == nullptr), op);
    G4K_REQUIRE(capacity > 0 && window >= 0, op);
    G4K_REQUIRE((((uintptr_t)q | (uintptr_t)kc | (uintptr_t)vc | (uintptr_t)out) & 15) == 0, op);
    G4K_REQUIRE(workspace && ((uintptr_t)workspace & 15) == 0, op);
    G4K_REQUIRE(workspace_bytes >= g4_attn_decode_workspace(T, n_heads, n_kv, hd, capacity), op);
    DecParams p = {};
    p.q = q, p.k = kc, p.v = vc, p.pos = pos, p.out = out;
    if (prep) dec_set_prep(p, prep);
    dec_run(p, T, n_heads, n_kv, hd, capacity, dec_n_splits(T, n_heads, n_kv, hd, capacity), window,
            scale, workspace, stream);
}

extern "C" void g4_attn_decode(uint16_t *out, const uint16_t *q, const uint16_t *kc,
                               const uint16_t *vc, const int32_t *pos, int T, int n_heads, int n_kv,
                               int hd, int capacity, int window, float scale, void *workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
    dec_one(out, q, kc, vc, pos, T, n_heads, n_kv, hd, capacity, window, scale, nullptr, workspace,
            workspace_bytes, stream, "g4_attn_decode");
}

// The head preparation of the rows (ops.h qkv_prep) into the decode attention's parameters.
static void dec_set_prep(DecParams &p, const g4_attn_prep *prep) {
    p.prep = 1;
    p.k_new = prep->k, p.v_new = prep->v;
    p.q_w = prep->q_w, p.k_w = prep->k_w;
    p.inv_freq = prep->inv_freq;
    p.eps = prep->eps;
}

extern "C" void g4_attn_decode_set_merge(int mode) {
    g_dec_merge_force = mode < 0 ? -1 : mode > 3 ? 1 : mode;
}

extern "C" int g4_attn_decode_long_keys(void) {
    static const int v = [] {
        const char *e = getenv("G4_ATTN_MERGE_LONG");
        char *end = nullptr;
        const long n = e ? strtol(e, &end, 10) : 0;
        return e && *e && !*end && n >= 1 && n <= (1L << 30) ? (int)n : 1024;
    }();
    return v;
}

extern "C" void g4_attn_decode_set_keys(int keys) {
    g_dec_keys = keys;
}

extern "C" int g4_attn_decode_form(int keys) {
    return dec_cm_mode() == 3 && keys >= g4_attn_decode_long_keys();
}

extern "C" int g4_attn_decode_last_merge(void) {
    return g_dec_last_cm;
}

extern "C" size_t g4_attn_decode_ws_header(void) {
    return DEC_WS_HEADER;
}

extern "C" const char *g4_attn_decode_prep_supported(int n_heads, int n_kv, int hd) {
    const char *why = g4_attn_decode_supported(n_heads, n_kv, hd);
    if (why) return why;
    if (n_heads / n_kv > 16) return "at most 16 query heads a KV head (attention_decode.cu prep)";
    return NULL;
}

extern "C" void g4_attn_decode_prep(uint16_t *out, const uint16_t *q, uint16_t *kc, uint16_t *vc,
                                    const int32_t *pos, int n_heads, int n_kv, int hd, int capacity,
                                    int window, float scale, const g4_attn_prep *prep,
                                    void *workspace, size_t workspace_bytes, cudaStream_t stream) {
    G4K_REQUIRE(prep, "g4_attn_decode_prep");
    dec_one(out, q, kc, vc, pos, 1, n_heads, n_kv, hd, capacity, window, scale, prep, workspace,
            workspace_bytes, stream, "g4_attn_decode_prep");
}

extern "C" void g4_attn_decode_rows_prep(uint16_t *out, const uint16_t *q, const uint64_t *k_tab,
                                         const uint64_t *v_tab, const int32_t *cap_tab,
                                         const int32_t *pos, int T, int n_heads, int n_kv, int hd,
                                         int window, float scale, const g4_attn_prep *prep,
                                         void *workspace, size_t workspace_bytes,
                                         cudaStream_t stream) {
    G4K_REQUIRE(prep, "g4_attn_decode_rows_prep");
    dec_rows(out, q, k_tab, v_tab, cap_tab, pos, T, n_heads, n_kv, hd, window, scale, prep,
             workspace, workspace_bytes, stream, "g4_attn_decode_rows_prep");
}
