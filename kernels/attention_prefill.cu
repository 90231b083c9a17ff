// attention_prefill.cu: flash attention for the text decoder's prefill (causal or sliding window,
// over the KV cache, GQA) and the vision tower (bidirectional, padding keys masked).
//
// What it computes: attention_prefill.cuh (the CPU oracles are ref_attention and
// ref_attention_bidir in kernels/ref/). Test: tests/test_cuda_attention.c (--op attn_prefill,
// --op attn_bidir); bench: `g4cu bench --kernels --filter attn_prefill`.
//
// Scheme (FlashAttention-2 style, mma.sync m16n8k16, fp16 operands, fp32 accumulators and
// softmax): one CTA per (query tile of BQ = 16 * WM rows, query head). Warps form a WM x WD
// grid: warp (wm, wd) owns query rows 16 wm .. 16 wm + 15 and the head-dim slice
// [wd * HD/WD, (wd + 1) * HD/WD). For each key tile of BK rows (K and V tiles staged in shared
// memory by cp.async, two stages, 16-byte chunks XOR-swizzled against bank conflicts):
//   1. S_partial = Q[rows, slice] K[tile, slice]^T with Q's A fragments held in registers;
//   2. WD > 1: the WD partials of a row group are summed through shared memory in a fixed order
//      (so the WD warps of a row group hold bit-identical S, softmax state and P);
//   3. mask (causal/window by the rows' positions, or the key-valid bytes), online softmax in the
//      log2 domain (exp2f of s * scale * log2 e - m);
//   4. O[rows, slice] = O * alpha + P V[tile, slice], P converted in registers from the S
//      accumulators to fp16 A fragments (no shared-memory round trip).
// HD = 512 cannot keep a 16 x 512 fp32 O per warp in registers, hence the dim split; the price is
// the partial-S exchange, about as much shared-memory traffic as reading the K tile.
// Keys past the block's last visible key are zero-filled, never read: cache rows beyond max(pos)
// may hold anything.
#include "kernels/attention_prefill.cuh"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"

using namespace g4k;

namespace {

template <int HD_, int WM_, int WD_, int BK_, int MINB_> struct FaCfg {
    static constexpr int HD = HD_, WM = WM_, WD = WD_, BK = BK_, MINB = MINB_;
    static constexpr int BQ = 16 * WM;
    static constexpr int WARPS = WM * WD, THREADS = 32 * WARPS;
    static constexpr int DW = HD / WD;       // head dims per warp
    static constexpr int KSTEPS = DW / 16;   // k-steps of S = Q K^T per warp
    static constexpr int NB_S = BK / 8;      // n-blocks of S (keys)
    static constexpr int NB_O = DW / 8;      // n-blocks of O (dims)
    static constexpr int CHUNKS = HD / 8;    // 16-byte chunks per K/V row
    static constexpr int ROW_BYTES = HD * 2; // K/V tile row
    static constexpr int STAGES = 2;
    static constexpr int RED_STRIDE = BK + 8; // floats per row of the partial-S buffer
    static constexpr size_t TILE_BYTES = (size_t)BK * ROW_BYTES;
    static constexpr size_t SMEM_KV = (size_t)STAGES * 2 * TILE_BYTES;
    static constexpr size_t SMEM_RED = WD > 1 ? (size_t)WARPS * 16 * RED_STRIDE * 4 : 0;
    static constexpr size_t SMEM = SMEM_KV + SMEM_RED + (size_t)STAGES * BK;
    static_assert(HD % (16 * WD) == 0 && NB_O % 2 == 0, "head-dim slice: whole n-block pairs");
    static_assert(BK % 16 == 0 && CHUNKS >= 8, "key tile: whole k-steps; rows >= 128 bytes");
};

struct FaParams {
    uint16_t *out;
    const uint16_t *q, *k, *v;
    const int32_t *pos;                  // [T] positions (causal mode)
    const uint8_t *key_valid;            // [kv_rows] or NULL (bidirectional mode)
    int T, group;                        // query rows; query heads per KV head
    int q_stride, kv_stride, out_stride; // elements per row
    int kv_rows;                         // rows of K/V that exist (cache capacity, or N)
    int window;                          // > 0: sliding window (causal mode)
    int bidir;                           // 1: keys 0..kv_rows-1, no positions
    float scale_log2;                    // scale * log2(e)
};

// Visible key range [lo, hi] of query row i (empty when hi < lo).
__device__ __forceinline__ void fa_row_range(const FaParams &p, int i, int &lo, int &hi) {
    if (p.bidir) {
        lo = 0, hi = p.kv_rows - 1;
        return;
    }
    const int ps = p.pos[i];
    hi = min(ps, p.kv_rows - 1);
    lo = p.window > 0 ? max(0, ps - p.window + 1) : 0;
}

template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB) fa_kernel(const FaParams p) {
    extern __shared__ __align__(128) uint8_t smem[];
    float *red = reinterpret_cast<float *>(smem + C::SMEM_KV); // [WARPS][16][RED_STRIDE]
    uint8_t *kmask = smem + C::SMEM_KV + C::SMEM_RED;          // [STAGES][BK]
    __shared__ int s_lo_min, s_hi_max, s_lo_max, s_hi_min;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / C::WD, wd = warp % C::WD;
    const int g = lane >> 2, c = lane & 3;
    const int n_qt = (p.T + C::BQ - 1) / C::BQ;
    const int q0 = (n_qt - 1 - (int)blockIdx.x) * C::BQ; // latest (longest) query tiles first
    const int h = blockIdx.y, kvh = h / p.group;

    // Key range of the block (union over its rows) and the range every row sees (intersection).
    if (tid == 0) s_lo_min = INT_MAX, s_hi_max = -1, s_lo_max = -1, s_hi_min = INT_MAX;
    __syncthreads();
    if (tid < C::BQ && q0 + tid < p.T) {
        int lo, hi;
        fa_row_range(p, q0 + tid, lo, hi);
        if (hi >= lo) {
            atomicMin(&s_lo_min, lo), atomicMax(&s_hi_max, hi);
            atomicMax(&s_lo_max, lo), atomicMin(&s_hi_min, hi);
        } else {
            atomicMax(&s_lo_max, INT_MAX), atomicMin(&s_hi_min, -1); // forces masking
        }
    }
    __syncthreads();
    const int lo_min = s_lo_min, hi_max = s_hi_max, lo_max = s_lo_max, hi_min = s_hi_min;

    // This thread's two rows (g and g + 8 of the warp's 16) and their visible ranges.
    int row[2], rlo[2], rhi[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        row[r] = q0 + wm * 16 + g + 8 * r;
        rlo[r] = 1, rhi[r] = 0; // padding row: nothing visible
        if (row[r] < p.T) fa_row_range(p, row[r], rlo[r], rhi[r]);
    }

    // Q fragments of this warp's rows and dim slice, straight from global memory.
    uint32_t qa[C::KSTEPS][4];
#pragma unroll
    for (int ks = 0; ks < C::KSTEPS; ks++) {
        const int d = h * C::HD + wd * C::DW + ks * 16 + 2 * c;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const bool ok = row[r] < p.T;
            const uint16_t *src = p.q + (size_t)(ok ? row[r] : 0) * p.q_stride + d;
            qa[ks][r] = ok ? *reinterpret_cast<const uint32_t *>(src) : 0u;
            qa[ks][2 + r] = ok ? *reinterpret_cast<const uint32_t *>(src + 8) : 0u;
        }
    }

    const int n_tiles = hi_max >= lo_min ? (hi_max - lo_min) / C::BK + 1 : 0;
    auto load_tile = [&](int stage, int j0) {
        uint8_t *ks = smem + (size_t)stage * 2 * C::TILE_BYTES, *vs = ks + C::TILE_BYTES;
        for (int idx = tid; idx < C::BK * C::CHUNKS; idx += C::THREADS) {
            const int r = idx / C::CHUNKS, ch = idx % C::CHUNKS, j = j0 + r;
            const bool ok = j <= hi_max;
            const size_t off = ok ? (size_t)j * p.kv_stride + (size_t)kvh * C::HD + ch * 8 : 0;
            cp_async16(ks + swz(r, ch, C::ROW_BYTES), p.k + off, ok);
            cp_async16(vs + swz(r, ch, C::ROW_BYTES), p.v + off, ok);
        }
        if (p.key_valid && tid < C::BK)
            kmask[stage * C::BK + tid] = j0 + tid <= hi_max ? p.key_valid[j0 + tid] : 0;
    };

    float o[C::NB_O][4];
#pragma unroll
    for (int i = 0; i < C::NB_O; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

#pragma unroll
    for (int s = 0; s < C::STAGES - 1; s++) {
        if (s < n_tiles) load_tile(s, lo_min + s * C::BK);
        cp_async_commit();
    }

    for (int it = 0; it < n_tiles; it++) {
        cp_async_wait<C::STAGES - 2>();
        __syncthreads(); // tile `it` landed; every warp is done with tile it - 1's buffers
        {
            const int nx = it + C::STAGES - 1;
            if (nx < n_tiles) load_tile(nx % C::STAGES, lo_min + nx * C::BK);
            cp_async_commit();
        }
        const int stage = it % C::STAGES, j0 = lo_min + it * C::BK;
        const uint8_t *ks = smem + (size_t)stage * 2 * C::TILE_BYTES, *vs = ks + C::TILE_BYTES;

        // 1. partial scores over this warp's dim slice
        float s[C::NB_S][4];
#pragma unroll
        for (int i = 0; i < C::NB_S; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < C::KSTEPS; kk++) {
            const int ch0 = (wd * C::DW + kk * 16) / 8;
#pragma unroll
            for (int nb = 0; nb < C::NB_S; nb += 2) {
                const int mi = lane >> 3;
                const int key = (nb + (mi >> 1)) * 8 + (lane & 7);
                uint32_t b[4];
                ldmatrix_x4(b, ks + swz(key, ch0 + (mi & 1), C::ROW_BYTES));
                mma_16816(s[nb], qa[kk], b[0], b[1]);
                mma_16816(s[nb + 1], qa[kk], b[2], b[3]);
            }
        }
        // 2. sum the WD partials of this row group, in warp order
        if constexpr (C::WD > 1) {
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
            for (int d = 0; d < C::WD; d++) {
                const float *pr = red + (size_t)(wm * C::WD + d) * 16 * C::RED_STRIDE;
#pragma unroll
                for (int nb = 0; nb < C::NB_S; nb++) {
                    const float2 a =
                        *reinterpret_cast<const float2 *>(&pr[g * C::RED_STRIDE + nb * 8 + 2 * c]);
                    const float2 b = *reinterpret_cast<const float2 *>(
                        &pr[(g + 8) * C::RED_STRIDE + nb * 8 + 2 * c]);
                    s[nb][0] += a.x, s[nb][1] += a.y, s[nb][2] += b.x, s[nb][3] += b.y;
                }
            }
        }
        // 3. scale, mask, online softmax (log2 domain)
        const bool need_mask = p.key_valid || j0 < lo_max || j0 + C::BK - 1 > hi_min;
        const uint8_t *km = kmask + stage * C::BK;
#pragma unroll
        for (int nb = 0; nb < C::NB_S; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[nb][e] * p.scale_log2;
                if (need_mask) {
                    const int r = e >> 1, jj = nb * 8 + 2 * c + (e & 1), j = j0 + jj;
                    const bool ok = j >= rlo[r] && j <= rhi[r] && (!p.key_valid || km[jj]);
                    if (!ok) v = -INFINITY;
                }
                s[nb][e] = v;
            }
        online_softmax(s, o, m, l);
        // 4. O += P V over this warp's dim slice
        pv_accumulate(o, s, vs, wd * C::DW / 8, C::ROW_BYTES, lane);
    }
    cp_async_wait<0>();

    // Normalise and store this warp's rows x dim slice.
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float lt = l[r];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        if (row[r] >= p.T) continue;
        const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
        uint16_t *dst =
            p.out + (size_t)row[r] * p.out_stride + (size_t)h * C::HD + wd * C::DW + 2 * c;
#pragma unroll
        for (int nb = 0; nb < C::NB_O; nb++)
            *reinterpret_cast<uint32_t *>(dst + nb * 8) =
                pack_half2(o[nb][2 * r] * inv, o[nb][2 * r + 1] * inv);
    }
}

template <class C> void fa_launch(const FaParams &p, int n_heads, cudaStream_t stream) {
    static bool configured = false; // the >48 KB dynamic shared memory opt-in, once per config
    if (!configured) {
        G4_CUDA_CHECK(cudaFuncSetAttribute(
            fa_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
        configured = true;
    }
    const dim3 grid((p.T + C::BQ - 1) / C::BQ, n_heads);
    fa_kernel<C><<<grid, C::THREADS, C::SMEM, stream>>>(p);
    G4_CUDA_LAUNCH_CHECK();
}

// The configurations (one per head dim): see the header comment for the WM x WD choice.
// vision: 4 warps, 32 KB smem, 4 CTAs per SM, so the 36 x 12 = 432 CTAs of one image fit in one
// wave of 528 slots (with 3 per SM, 396 slots, the last 36 CTAs ran as a second wave; ptxas:
// 32 bytes of spill at 128 registers). The two alternatives stay for the kernel table's A/B.
using Fa64 = FaCfg<64, 4, 1, 64, 4>;
using Fa64Min3 = FaCfg<64, 4, 1, 64, 3>; // the configuration before: 3 CTAs per SM, no spill
using Fa64Bk32 = FaCfg<64, 4, 1, 32, 4>; // key tiles of 32: 4 CTAs per SM without spill
using Fa256 = FaCfg<256, 4, 2, 64, 1>; // sliding layers: 8 warps, 64 query rows
using Fa512 = FaCfg<512, 2, 4, 32, 1>; // global layers: 8 warps, 32 query rows

void fa_dispatch(const FaParams &p, int n_heads, int hd, cudaStream_t stream) {
    switch (hd) {
    case 64:
        fa_launch<Fa64>(p, n_heads, stream);
        break;
    case 256:
        fa_launch<Fa256>(p, n_heads, stream);
        break;
    case 512:
        fa_launch<Fa512>(p, n_heads, stream);
        break;
    default:
        G4K_REQUIRE(!"head_dim is one of 64, 256, 512", "attention");
    }
}

bool aligned16(const void *ptr) {
    return ((uintptr_t)ptr & 15) == 0;
}

// G4_ATTN_PREFILL=hmma: AUTO runs the HMMA kernel everywhere (read once).
bool hmma_forced() {
    static int cache = -1;
    return g4_cuda_env_is(&cache, "G4_ATTN_PREFILL", "hmma") != 0;
}

} // namespace

extern "C" const char *g4_attn_prefill_supported(int n_heads, int n_kv, int hd) {
    if (n_kv < 1 || n_heads < 1 || n_heads % n_kv)
        return "query heads a positive multiple of the KV heads (attention_prefill.cu)";
    if (hd != 64 && hd != 256 && hd != 512)
        return "head_dim 64, 256 or 512 (attention_prefill.cu)";
    return NULL;
}

extern "C" const char *g4_attn_bidir_supported(int n_heads, int hd) {
    if (n_heads < 1) return "at least one head (attention_prefill.cu)";
    if (hd != 64) return "head_dim 64, the shape its bidirectional path is built and tested for "
                         "(attention_prefill.cu)";
    return NULL;
}

// attention_prefill_wgmma.cu
void g4_attn_prefill_wgmma(uint16_t *out, const uint16_t *q, const uint16_t *kc,
                           const uint16_t *vc, const int32_t *pos, int T, int n_heads, int n_kv,
                           int hd, int capacity, int window, float scale, int max_ctas,
                           cudaStream_t stream);

extern "C" void g4_attn_prefill_algo(uint16_t *out, const uint16_t *q, const uint16_t *kc,
                                     const uint16_t *vc, const int32_t *pos, int T, int n_heads,
                                     int n_kv, int hd, int capacity, int window, float scale,
                                     g4_attn_algo algo, int max_ctas, cudaStream_t stream) {
    const char *op = "g4_attn_prefill";
    G4K_SUPPORTED(g4_attn_prefill_supported(n_heads, n_kv, hd), op);
    G4K_REQUIRE(T >= 0, op);
    G4K_REQUIRE(capacity > 0 && window >= 0 && max_ctas >= 0, op);
    G4K_REQUIRE(aligned16(q) && aligned16(kc) && aligned16(vc) && aligned16(out), op);
    if (algo == G4_ATTN_AUTO)
        algo = !hmma_forced() && g4_attn_prefill_wgmma_supported(hd, n_heads, n_kv)
                   ? G4_ATTN_WGMMA
                   : G4_ATTN_HMMA;
    G4K_REQUIRE(algo == G4_ATTN_HMMA || algo == G4_ATTN_WGMMA, op);
    if (T == 0) return;
    if (algo == G4_ATTN_WGMMA) {
        G4K_REQUIRE(g4_attn_prefill_wgmma_supported(hd, n_heads, n_kv), op);
        g4_attn_prefill_wgmma(out, q, kc, vc, pos, T, n_heads, n_kv, hd, capacity, window, scale,
                              max_ctas, stream);
        return;
    }
    FaParams p = {};
    p.out = out, p.q = q, p.k = kc, p.v = vc, p.pos = pos, p.key_valid = nullptr;
    p.T = T, p.group = n_heads / n_kv;
    p.q_stride = p.out_stride = n_heads * hd, p.kv_stride = n_kv * hd;
    p.kv_rows = capacity, p.window = window, p.bidir = 0;
    p.scale_log2 = scale * 1.4426950408889634f;
    fa_dispatch(p, n_heads, hd, stream);
}

extern "C" void g4_attn_prefill(uint16_t *out, const uint16_t *q, const uint16_t *kc,
                                const uint16_t *vc, const int32_t *pos, int T, int n_heads,
                                int n_kv, int hd, int capacity, int window, float scale,
                                cudaStream_t stream) {
    g4_attn_prefill_algo(out, q, kc, vc, pos, T, n_heads, n_kv, hd, capacity, window, scale,
                         G4_ATTN_AUTO, 0, stream);
}

extern "C" void g4_attn_bidir(uint16_t *out, const uint16_t *q, const uint16_t *k,
                              const uint16_t *v, const uint8_t *key_valid, int N, int n_heads,
                              int hd, float scale, cudaStream_t stream) {
    g4_attn_bidir_cfg(out, q, k, v, key_valid, N, n_heads, hd, scale, 0, stream);
}

extern "C" void g4_attn_bidir_cfg(uint16_t *out, const uint16_t *q, const uint16_t *k,
                                  const uint16_t *v, const uint8_t *key_valid, int N,
                                  int n_heads, int hd, float scale, int cfg,
                                  cudaStream_t stream) {
    const char *op = "g4_attn_bidir";
    G4K_REQUIRE(cfg >= 0 && cfg <= 2, op);
    G4K_SUPPORTED(g4_attn_bidir_supported(n_heads, hd), op);
    G4K_REQUIRE(N >= 0, op);
    G4K_REQUIRE(aligned16(q) && aligned16(k) && aligned16(v) && aligned16(out), op);
    if (N == 0) return;
    FaParams p = {};
    p.out = out, p.q = q, p.k = k, p.v = v, p.pos = nullptr, p.key_valid = key_valid;
    p.T = N, p.group = 1;
    p.q_stride = p.out_stride = p.kv_stride = n_heads * hd;
    p.kv_rows = N, p.window = 0, p.bidir = 1;
    p.scale_log2 = scale * 1.4426950408889634f;
    if (cfg == 1)
        fa_launch<Fa64Min3>(p, n_heads, stream);
    else if (cfg == 2)
        fa_launch<Fa64Bk32>(p, n_heads, stream);
    else
        fa_dispatch(p, n_heads, hd, stream);
}
