// gemv.cu: the decode GEMV of kernels/gemv.cuh (M = 1..8 tokens, fp16 or Q4 weights) and its
// epilogues: store, GLU, GELU times a slice, the residual row norm and the per-head norm + RoPE +
// KV store (the last two finished by the block that arrives last at the group's counter).
//
// Structure of both kernels (256 threads = 8 warps, a cluster of cs blocks along grid.y splits
// K; one output strip per blockIdx.x):
//   prologue   (above griddepcontrol.wait, pdl.cuh rule 1): L2 prefetches of the block's first
//              weight bytes and, in block 0, of the epilogue's norm weights and RoPE table.
//   loads      the first batch of weights is issued into registers before x is staged, so the
//              first DRAM round trip overlaps the x load; then a double-buffered loop: the
//              next batch is in flight while the current one is multiplied.
//   x          the cluster rank's K range of x, staged once in shared memory.
//   reduce     fixed order: warps of the block (shared memory), then the cluster's ranks in rank
//              order through distributed shared memory, into the leader's fp32 outputs
//              outs[f][token][strip column]: deterministic, no atomics on data.
//   epilogue   on the leader block (cluster rank 0): gv_epilogue.
//
// Q4 (weights as the mma.sync A operand, tokens as its 8 columns; packed tiles of 16 features x
// 64 inputs, q4_pack.h): a block owns 8 / S consecutive feature tiles, S warps per tile split the
// cluster rank's K range into contiguous tile runs (S from the shape: 1 for the LM head, where a
// warp streams a whole 24-tile row and needs no reduction, up to 8 for narrow N). Per warp and
// buffer: 4 tiles (2 per weight for the GLU) of 16-byte words, scales and zero points.
// fp16 (CUDA-core FMAs, fp32 accumulation): a block owns 64 columns; thread (tx = tid % 8,
// ty = tid / 8) loads 16 bytes (8 columns) of rows ty, ty + 32, ... of the rank's K range;
// x staged transposed [k][MT] so one load gives a row's value for every token.
//
// Test: tests/test_cuda_gemv.c, test_cuda_gemm.c (ops gv_*); bench: g4cu bench --kernels --filter
// gv_.
#include <cooperative_groups.h>

#include "kernels/attnops_common.cuh"
#include "kernels/gemm_common.cuh"
#include "kernels/gemv.cuh"
#include "kernels/pdl.cuh"
#include "kernels/q4_dequant.cuh"

namespace cg = cooperative_groups;

namespace g4k {
namespace {

constexpr int GV_THREADS = 256, GV_WARPS = 8, GV_MAX_M = 8, GV_MAX_SEG = 3;
constexpr int GV_COUNTERS = 256;           // groups a grid-wide epilogue may have
constexpr size_t GV_CTR_BYTES = 1024;      // the counters, at the workspace's start
constexpr size_t GV_SMEM_MAX = 224 * 1024; // dynamic shared memory (+ ~300 B static)
constexpr int GV_PF_TILES = 8;             // Q4: tiles a warp prefetches (4.7 KB)
constexpr int GV_PF_ROWS = 8;              // fp16: rows a thread row prefetches

enum {
    EPI_STORE = G4_GEMV_STORE,
    EPI_GLU = G4_GEMV_GLU,
    EPI_GELU_MUL = G4_GEMV_GELU_MUL,
    EPI_ADD_NORM = G4_GEMV_ADD_NORM,
    EPI_QKV = G4_GEMV_QKV
};

// One weight segment: output features [n0, n0 + n) of the launch.
struct GvSeg {
    const __half *w; // fp16 [K, n]
    q4w q4;          // or packed Q4 (n / 16 feature tiles)
    int n0, n;
};

// Everything a launch needs, passed by value (kernel parameter space).
struct GvParams {
    const __half *x;
    int M, K, N; // tokens, inputs, outputs of all segments
    int n_seg;
    GvSeg seg[GV_MAX_SEG];
    GvSeg up; // GLU: the up weight (one segment, n0 = 0)
    int S;    // Q4: warps splitting a feature tile's K range (1, 2, 4, 8)
    int epi;
    // store
    void *y;
    int y_epi;
    const __half *bias;
    // gelu_mul
    const uint16_t *b;
    int ldb;
    // add_norm
    float *h;
    const uint16_t *norm_w, *scale, *next_w;
    uint16_t *next;
    int next_norm;
    float eps;
    // qkv
    uint16_t *q, *kc, *vc;
    const uint16_t *q_w, *k_w;
    const int32_t *pos;
    const float *inv_freq;
    int capacity, n_heads, n_kv, hd;
    // grid-wide epilogues: outputs [M, N] fp32, counters, features per group
    float *ws_y;
    unsigned *ctr;
    int group_n;
};

// The segment holding output feature n (segments are contiguous, in order; constant indices
// only, so the parameter struct is read in place, never copied to local memory).
__device__ __forceinline__ GvSeg seg_of(const GvParams &p, int n) {
    if (p.n_seg > 2 && n >= p.seg[2].n0) return p.seg[2];
    if (p.n_seg > 1 && n >= p.seg[1].n0) return p.seg[1];
    return p.seg[0];
}

// The warp prefetches [p, p + bytes) into L2, one instruction per 128-byte line.
__device__ __forceinline__ void prefetch_warp(const void *p, size_t bytes, int lane) {
    const uintptr_t b = (uintptr_t)p, e = b + bytes;
    for (uintptr_t a = (b & ~(uintptr_t)127) + (uintptr_t)lane * 128; a < e; a += 32 * 128)
        g4_prefetch_l2((const void *)(a < b ? b : a));
}

// The epilogue's immutable tables (norm weights, layer scalar, RoPE frequencies), by the whole
// block: only block 0 calls it (any block may be the one running the tail; L2 is shared).
__device__ __forceinline__ void prefetch_tables(const GvParams &p) {
    if (p.epi == EPI_ADD_NORM) {
        g4_prefetch_l2_bytes(p.norm_w, p.norm_w ? (size_t)p.N * 2 : 0);
        g4_prefetch_l2_bytes(p.next_w, p.next_w && p.next_norm ? (size_t)p.N * 2 : 0);
        g4_prefetch_l2_bytes(p.scale, p.scale ? 2 : 0);
    } else if (p.epi == EPI_QKV) {
        g4_prefetch_l2_bytes(p.q_w, p.q_w ? (size_t)p.hd * 2 : 0);
        g4_prefetch_l2_bytes(p.k_w, p.k_w && p.kc ? (size_t)p.hd * 2 : 0);
        g4_prefetch_l2_bytes(p.inv_freq, p.inv_freq ? (size_t)p.hd / 2 * 4 : 0);
    }
}

__device__ __forceinline__ void ldcg8(const float *p, float v[8]) {
    const float4 a = __ldcg(reinterpret_cast<const float4 *>(p));
    const float4 b = __ldcg(reinterpret_cast<const float4 *>(p + 4));
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// --- grid-wide epilogues ----------------------------------------------------------------------

// add_rmsnorm_next over the whole row, for every token (ops.h; the arithmetic of rmsnorm.cu's
// add_rms_kernel with the projection read in fp32 from the workspace instead of fp16).
__device__ void gv_tail_add_norm(const GvParams &p) {
    __shared__ float scratch[33];
    const int N = p.N;
    const float sc = p.scale ? h2f(*p.scale) : 1.0f;
    for (int m = 0; m < p.M; m++) {
        const float *o = p.ws_y + (size_t)m * N;
        float *h = p.h + (size_t)m * N;
        uint16_t *nx = p.next + (size_t)m * N;
        float ss = 0.0f;
        for (int i = threadIdx.x * 8; i < N; i += GV_THREADS * 8) {
            float v[8];
            ldcg8(o + i, v);
#pragma unroll
            for (int e = 0; e < 8; e++) ss += v[e] * v[e];
        }
        const float inv = rsqrtf(block_sum(ss, scratch) / (float)N + p.eps);
        float ss2 = 0.0f;
        for (int i = threadIdx.x * 8; i < N; i += GV_THREADS * 8) {
            float v[8], hv[8], wv[8];
            ldcg8(o + i, v);
            load8(h + i, hv);
            if (p.norm_w) load8(p.norm_w + i, wv);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                hv[e] = (hv[e] + v[e] * inv * (p.norm_w ? wv[e] : 1.0f)) * sc;
                ss2 += hv[e] * hv[e];
            }
            store8(h + i, hv);
            if (!p.next_norm) store8(nx + i, hv);
        }
        if (!p.next_norm) continue;
        const float inv2 = rsqrtf(block_sum(ss2, scratch) / (float)N + p.eps);
        for (int i = threadIdx.x * 8; i < N; i += GV_THREADS * 8) {
            float hv[8], wv[8];
            load8(h + i, hv); // this thread's own stores above
            if (p.next_w) load8(p.next_w + i, wv);
#pragma unroll
            for (int e = 0; e < 8; e++) hv[e] = hv[e] * inv2 * (p.next_w ? wv[e] : 1.0f);
            store8(nx + i, hv);
        }
    }
}

// qkv_prep of head group g (q heads, then k, then v), every token (ops.h; the arithmetic of
// qkv_rope.cu): thread j < hd / 2 owns the rotation pair (j, j + hd / 2).
__device__ void gv_tail_qkv(const GvParams &p, int g) {
    __shared__ float scratch[33];
    const int hd = p.hd, half = hd / 2, j = threadIdx.x;
    const int kind = g < p.n_heads ? 0 : g < p.n_heads + p.n_kv ? 1 : 2; // q, k, v
    const int head = kind == 0 ? g : kind == 1 ? g - p.n_heads : g - p.n_heads - p.n_kv;
    const uint16_t *w = kind == 0 ? p.q_w : kind == 1 ? p.k_w : nullptr;
    for (int m = 0; m < p.M; m++) {
        const float *src = p.ws_y + (size_t)m * p.N + (size_t)g * hd;
        float a = 0.0f, b = 0.0f;
        if (j < half) a = __ldcg(src + j), b = __ldcg(src + j + half);
        const float inv = rsqrtf(block_sum(a * a + b * b, scratch) / (float)hd + p.eps);
        if (j >= half) continue;
        a *= inv * (w ? h2f(w[j]) : 1.0f);
        b *= inv * (w ? h2f(w[j + half]) : 1.0f);
        if (kind != 2 && p.inv_freq) {
            // The angle is the fp32 product, as HF and ref_rope compute it; its sine and cosine
            // come from sincospi in double (exact range reduction: no Payne-Hanek slow path and
            // its local-memory table for the angles of late positions, > 1e5 rad), then fp32.
            const float ang = (float)p.pos[m] * p.inv_freq[j];
            double sd, cd;
            sincospi((double)ang * 0.31830988618379067154, &sd, &cd); // 1 / pi
            const float sn = (float)sd, cs = (float)cd, x0 = a, x1 = b;
            a = x0 * cs - x1 * sn;
            b = x1 * cs + x0 * sn;
        }
        uint16_t *dst;
        if (kind == 0) {
            dst = p.q + (size_t)m * p.n_heads * hd + (size_t)head * hd;
        } else {
            const int row = p.pos[m];
            if (row < 0 || row >= p.capacity) continue; // a bad position never writes outside
            dst = (kind == 1 ? p.kc : p.vc) + (size_t)row * p.n_kv * hd + (size_t)head * hd;
        }
        dst[j] = f2h(a);
        dst[j + half] = f2h(b);
    }
}

// The leader block's outputs outs [F][rows][nb] (features n0 .. n0 + nb - 1, tokens 0 .. M - 1
// used) through the launch's epilogue. All threads of the block call it.
template <int F>
__device__ __forceinline__ void gv_epilogue(const GvParams &p, const float *outs, int rows, int nb,
                                            int n0) {
    const int M = p.M, N = p.N;
    if (p.epi == EPI_STORE || p.epi == EPI_GLU || p.epi == EPI_GELU_MUL) {
        for (int i = threadIdx.x; i < M * nb; i += GV_THREADS) {
            const int m = i / nb, c = i - m * nb, n = n0 + c;
            if (n >= N) continue;
            const float v = outs[m * nb + c];
            const size_t o = (size_t)m * N + n;
            if constexpr (F == 2) {
                store_one(p.y, G4_GEMM_Y_F16, nullptr, o, n,
                          gelu_tanh(v) * outs[((F - 1) * rows + m) * nb + c]);
            } else if (p.epi == EPI_GELU_MUL) {
                store_one(p.y, G4_GEMM_Y_F16, nullptr, o, n,
                          gelu_tanh(v) * h2f(p.b[(size_t)m * p.ldb + n]));
            } else {
                store_one(p.y, p.y_epi, p.bias, o, n, v);
            }
        }
        return;
    }
    // Row norm / head norm: publish this strip, the last strip of the group finishes it.
    for (int i = threadIdx.x; i < M * nb; i += GV_THREADS) {
        const int m = i / nb, c = i - m * nb;
        p.ws_y[(size_t)m * N + n0 + c] = outs[m * nb + c];
    }
    const int group = n0 / p.group_n;
    if (!last_arrival(p.ctr + group, (unsigned)(p.group_n / nb))) return;
    if (p.epi == EPI_ADD_NORM)
        gv_tail_add_norm(p);
    else
        gv_tail_qkv(p, group);
    if (threadIdx.x == 0) p.ctr[group] = 0; // every ticket of this launch is taken: reset
}

// --- Q4 -----------------------------------------------------------------------------------------

// Shared memory of the Q4 kernel: x [M][Kr + 8] fp16 (rows padded by 16 bytes: the lanes of a
// quarter warp read 8 distinct bank groups), red [8 warps][F][32] float4, part [npb][F][32]
// float4, outs [F][8 tokens][16 npb] fp32.
struct Q4Smem {
    size_t x, red, part, outs, total;
};
__host__ __device__ inline Q4Smem q4_smem(int M, int Kr, int S, int F) {
    const int npb = GV_WARPS / S;
    Q4Smem s;
    s.x = 0;
    s.red = (size_t)M * (Kr + 8) * 2;
    s.part = s.red + (size_t)GV_WARPS * F * 32 * 16;
    s.outs = s.part + (size_t)npb * F * 32 * 16;
    s.total = s.outs + (size_t)F * 8 * 16 * npb * 4;
    return s;
}

template <int F> __global__ void __launch_bounds__(GV_THREADS, 2) gv_q4_kernel(const GvParams p) {
    constexpr int U = 4 / F; // tiles per weight per buffer
    extern __shared__ __align__(16) uint8_t smem[];
    cg::cluster_group cluster = cg::this_cluster();
    const int cs = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int S = p.S, npb = GV_WARPS / S, nb = 16 * npb;
    const int jt = warp / S, si = warp - jt * S; // feature tile in the block, K split
    const int KT = p.K / 64, NT = p.N / 16;
    const int nt = blockIdx.x * npb + jt;
    const bool active = nt < NT;
    const int rkb = (int)((long long)KT * rank / cs), rke = (int)((long long)KT * (rank + 1) / cs);
    const int kb = rkb + (rke - rkb) * si / S;
    const int ke = active ? rkb + (rke - rkb) * (si + 1) / S : kb;
    const int ntc = active ? nt : 0;
    const GvSeg sg = seg_of(p, 16 * ntc);
    const size_t tile0 = (size_t)(ntc - sg.n0 / 16) * KT; // the feature tile's first k tile
    q4w w[F];
    w[0] = sg.q4;
    if constexpr (F == 2) w[F - 1] = p.up.q4;
    const int pair = 2 * g + (t >> 1); // the lane's scale / zero-point record entry

    // PDL prologue: the warp's first tiles (q, scales, zero points), block 0 the tables.
    {
        const int npf = min(ke - kb, GV_PF_TILES);
#pragma unroll
        for (int f = 0; f < F; f++) {
            const size_t ti = tile0 + kb;
            prefetch_warp(w[f].q + ti * 32, (size_t)npf * 512, lane);
            prefetch_warp(w[f].s + ti * 16, (size_t)npf * 64, lane);
            prefetch_warp(w[f].z + ti * 16, (size_t)npf * 16, lane);
        }
        if (blockIdx.x == 0 && rank == 0) prefetch_tables(p);
    }
    g4_pdl_wait();
    g4_pdl_trigger();

    uint4 qa[U][F], qb[U][F];
    uint32_t sa[U][F], za[U][F], sb[U][F], zb[U][F];
    auto issue = [&](uint4(&q)[U][F], uint32_t(&sv)[U][F], uint32_t(&zv)[U][F], int kt0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int kt = kt0 + u;
            const bool ok = kt < ke;
            const size_t ti = tile0 + kt;
#pragma unroll
            for (int f = 0; f < F; f++) {
                q[u][f] = ok ? ldg_stream(w[f].q + ti * 32 + lane) : make_uint4(0, 0, 0, 0);
                sv[u][f] = ok ? __ldg(w[f].s + ti * 16 + pair) : 0u;
                zv[u][f] = ok ? (uint32_t)__ldg(w[f].z + ti * 16 + pair) : 0u;
            }
        }
    };
    issue(qa, sa, za, kb);

    // x: tokens 0 .. M - 1 of the rank's K range; a lane of token column g >= M reads token M - 1
    // (its D column is discarded). The shared-memory layout is sized for the longest rank range,
    // the same in every rank (the leader reads the others' part at its own offsets).
    const int Kr = (rke - rkb) * 64, Kmax = (KT + cs - 1) / cs * 64, XS = Kmax + 8;
    __half *xs = reinterpret_cast<__half *>(smem);
    for (int c = tid; c < p.M * (Kr / 8); c += GV_THREADS) {
        const int m = c / (Kr / 8), k8 = c - m * (Kr / 8);
        *reinterpret_cast<uint4 *>(xs + (size_t)m * XS + 8 * k8) =
            *reinterpret_cast<const uint4 *>(p.x + (size_t)m * p.K + (size_t)rkb * 64 + 8 * k8);
    }
    __syncthreads();
    const __half *xrow = xs + (size_t)min(g, p.M - 1) * XS + 16 * t;

    float acc[F][4];
#pragma unroll
    for (int f = 0; f < F; f++) acc[f][0] = acc[f][1] = acc[f][2] = acc[f][3] = 0.0f;
    auto compute = [&](const uint4(&q)[U][F], const uint32_t(&sv)[U][F], const uint32_t(&zv)[U][F],
                       int kt0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int kt = kt0 + u;
            if (kt >= ke) break; // warp-uniform
            const uint4 xa = *reinterpret_cast<const uint4 *>(xrow + (kt - rkb) * 64);
            const uint4 xb = *reinterpret_cast<const uint4 *>(xrow + (kt - rkb) * 64 + 8);
            const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
            for (int f = 0; f < F; f++) {
                const q4k kc = q4_consts(sv[u][f], zv[u][f]);
                const uint32_t words[4] = {q[u][f].x, q[u][f].y, q[u][f].z, q[u][f].w};
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    uint32_t a[4];
                    q4_dequant_word(words[s], kc, a);
                    mma_16816(acc[f], a, xw[2 * s], xw[2 * s + 1]);
                }
            }
        }
    };
    for (int kt = kb; kt < ke; kt += 2 * U) {
        issue(qb, sb, zb, kt + U);
        compute(qa, sa, za, kt);
        issue(qa, sa, za, kt + 2 * U);
        compute(qb, sb, zb, kt + U);
    }

    // Reduce: the S warps of a feature tile in warp order, then the ranks in rank order.
    const Q4Smem L = q4_smem(p.M, Kmax, S, F);
    float4 *red = reinterpret_cast<float4 *>(smem + L.red);
    float4 *part = reinterpret_cast<float4 *>(smem + L.part);
    float *outs = reinterpret_cast<float *>(smem + L.outs);
    if (S > 1) {
#pragma unroll
        for (int f = 0; f < F; f++)
            red[(warp * F + f) * 32 + lane] =
                make_float4(acc[f][0], acc[f][1], acc[f][2], acc[f][3]);
        __syncthreads();
    }
    if (si == 0) {
#pragma unroll
        for (int f = 0; f < F; f++) {
            float4 v = make_float4(acc[f][0], acc[f][1], acc[f][2], acc[f][3]);
            for (int i = 1; i < S; i++) {
                const float4 o = red[((warp + i) * F + f) * 32 + lane];
                v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
            }
            part[(jt * F + f) * 32 + lane] = v;
        }
    }
    if (cs > 1) {
        cluster.sync(); // every rank's part is written and visible to the cluster
        if (rank == 0 && si == 0) {
#pragma unroll
            for (int f = 0; f < F; f++) {
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                for (int r = 0; r < cs; r++) {
                    const float4 o = cluster.map_shared_rank(part, r)[(jt * F + f) * 32 + lane];
                    v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
                }
                part[(jt * F + f) * 32 + lane] = v; // read by this thread only, below
            }
        }
        cluster.sync(); // the leader has read every rank's part: the others may exit
        if (rank != 0) return;
    }
    // D fragment -> outs: part[.][i] is feature 16 jt + g + 8 (i / 2), token 2 t + i % 2.
    if (si == 0) {
#pragma unroll
        for (int f = 0; f < F; f++) {
            const float4 v = part[(jt * F + f) * 32 + lane];
            const float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
                outs[(f * 8 + 2 * t + (i & 1)) * nb + 16 * jt + g + 8 * (i >> 1)] = vv[i];
        }
    }
    __syncthreads();
    gv_epilogue<F>(p, outs, 8, nb, blockIdx.x * nb);
}

// --- fp16 -----------------------------------------------------------------------------------

constexpr int GV_F16_COLS = 64;
static_assert(GV_THREADS == 256 && GV_F16_COLS == 64, "gemv_f16_block_reduce's shape");

// Rows per buffer (each thread keeps 2 U 16-byte loads per weight in flight): fewer for more
// tokens, whose accumulators take the registers.
template <int MT, int F> constexpr int f16_u() {
    return MT <= 2 ? 8 / F : MT == 4 ? 4 / F : (F == 1 ? 2 : 1);
}
// Blocks per SM the registers must allow (the MT = 8 and MT = 4 GLU variants get one).
template <int MT, int F> constexpr int f16_min_blocks() {
    return (MT == 8 || (MT == 4 && F == 2)) ? 1 : 2;
}

struct F16Smem {
    size_t x, red, part, outs, total;
};
__host__ __device__ inline F16Smem f16_smem(int MT, int Kr, int F) {
    F16Smem s;
    s.x = 0;
    s.red = ((size_t)Kr * MT * 2 + 15) / 16 * 16;
    s.part = s.red + (size_t)GV_WARPS * F * MT * GV_F16_COLS * 4;
    s.outs = s.part + (size_t)F * MT * GV_F16_COLS * 4;
    s.total = s.outs + (size_t)F * MT * GV_F16_COLS * 4;
    return s;
}

template <int MT, int F>
__global__ void __launch_bounds__(GV_THREADS, f16_min_blocks<MT, F>())
    gv_f16_kernel(const GvParams p) {
    constexpr int U = f16_u<MT, F>();
    extern __shared__ __align__(16) uint8_t smem[];
    cg::cluster_group cluster = cg::this_cluster();
    const int cs = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const int tid = threadIdx.x, tx = tid & 7, ty = tid >> 3;
    const int n0 = blockIdx.x * GV_F16_COLS, col = n0 + tx * 8;
    const GvSeg sg = seg_of(p, n0);
    const bool col_ok = col < sg.n0 + sg.n;
    const size_t ldw = (size_t)sg.n;
    const __half *w[F];
    w[0] = sg.w + (col_ok ? col - sg.n0 : 0);
    if constexpr (F == 2) w[F - 1] = p.up.w + (col_ok ? col : 0);
    const int K8 = p.K / 8;
    const int kb = 8 * (int)((long long)K8 * rank / cs),
              ke = 8 * (int)((long long)K8 * (rank + 1) / cs);
    const int Kr = ke - kb, Kmax = (K8 + cs - 1) / cs * 8; // Kmax: the layout, as in every rank
    const int nrows = col_ok && Kr > ty ? (Kr - ty + 31) / 32 : 0; // rows ty, ty + 32, ... < Kr

    // PDL prologue: this thread's first rows, block 0 the tables.
    {
        const int npf = min(nrows, GV_PF_ROWS);
        for (int i = 0; i < npf; i++)
#pragma unroll
            for (int f = 0; f < F; f++) g4_prefetch_l2(w[f] + (size_t)(kb + ty + 32 * i) * ldw);
        if (blockIdx.x == 0 && rank == 0) prefetch_tables(p);
    }
    g4_pdl_wait();
    g4_pdl_trigger();

    uint4 wa[F][U], wb[F][U];
    auto issue = [&](uint4(&v)[F][U], int i0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const bool ok = i0 + u < nrows;
            const size_t off = (size_t)(kb + ty + 32 * (i0 + u)) * ldw;
#pragma unroll
            for (int f = 0; f < F; f++)
                v[f][u] = ok ? ldg_stream(w[f] + off) : make_uint4(0, 0, 0, 0);
        }
    };
    issue(wa, 0);

    // x rows kb .. ke - 1, transposed: xs[k][m] (tokens >= M zero).
    __half *xs = reinterpret_cast<__half *>(smem);
    for (int c = tid; c < MT * (Kr / 8); c += GV_THREADS) {
        const int m = c / (Kr / 8), k8 = c - m * (Kr / 8);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (m < p.M) v = *reinterpret_cast<const uint4 *>(p.x + (size_t)m * p.K + kb + 8 * k8);
        if (MT == 1) {
            *reinterpret_cast<uint4 *>(xs + 8 * k8) = v;
        } else {
            const __half *h = reinterpret_cast<const __half *>(&v);
#pragma unroll
            for (int e = 0; e < 8; e++) xs[(8 * k8 + e) * MT + m] = h[e];
        }
    }
    __syncthreads();

    float acc[F][MT][8];
#pragma unroll
    for (int f = 0; f < F; f++)
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int j = 0; j < 8; j++) acc[f][m][j] = 0.0f;
    auto compute = [&](const uint4(&v)[F][U], int i0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (i0 + u >= nrows) break;
            float xf[MT];
            gemv_load_x<MT>(xf, xs + (size_t)(ty + 32 * (i0 + u)) * MT);
#pragma unroll
            for (int f = 0; f < F; f++) {
                const __half2 *h = reinterpret_cast<const __half2 *>(&v[f][u]);
                float wf[8];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float2 q = __half22float2(h[i]);
                    wf[2 * i] = q.x;
                    wf[2 * i + 1] = q.y;
                }
#pragma unroll
                for (int m = 0; m < MT; m++)
#pragma unroll
                    for (int j = 0; j < 8; j++) acc[f][m][j] = fmaf(xf[m], wf[j], acc[f][m][j]);
            }
        }
    };
    for (int i = 0; i < nrows; i += 2 * U) {
        issue(wb, i + U);
        compute(wa, i);
        issue(wa, i + 2 * U);
        compute(wb, i + U);
    }

    // Reduce: the 4 row phases of a warp (lanes l, l ^ 8, l ^ 16, l ^ 24 share tx), the 8 warps
    // in order, then the ranks in order.
    const F16Smem L = f16_smem(MT, Kmax, F);
    float *red = reinterpret_cast<float *>(smem + L.red);   // [8][F][MT][64]
    float *part = reinterpret_cast<float *>(smem + L.part); // [F][MT][64]
    float *outs = reinterpret_cast<float *>(smem + L.outs); // [F][MT][64]
    gemv_f16_block_reduce<MT, F>(acc, red, part);
    if (cs > 1) {
        cluster.sync(); // every rank's part is written and visible to the cluster
        if (rank == 0)
            for (int i = tid; i < F * MT * GV_F16_COLS; i += GV_THREADS) {
                float s = 0.0f;
                for (int r = 0; r < cs; r++) s += cluster.map_shared_rank(part, r)[i];
                outs[i] = s;
            }
        cluster.sync(); // the leader has read every rank's part: the others may exit
        if (rank != 0) return;
    } else {
        for (int i = tid; i < F * MT * GV_F16_COLS; i += GV_THREADS) outs[i] = part[i];
    }
    __syncthreads();
    gv_epilogue<F>(p, outs, MT, GV_F16_COLS, n0);
}

// --- host
// -----------------------------------------------------------------------------------------

// A launch's shape after the checks: which kernel, grid and shared memory.
struct GvPlan {
    bool q4;
    int F, MT, grid, cs, S;
    size_t smem;
};

int gv_tokens_tile(int M) {
    return M == 1 ? 1 : M == 2 ? 2 : M <= 4 ? 4 : 8;
}

// Q4: S (K splits per feature tile, so 8 / S tiles a block) and the cluster size, so that there
// are about two blocks per SM while each warp keeps at least one k tile; a grid-wide epilogue
// needs strips of 16 (8 / S) features that tile N and its group exactly.
GvPlan plan_q4(int M, int N, int K, int F, int group) {
    const int NT = N / 16, KT = K / 64, target = 2 * num_sms();
    auto fits = [&](int S) {
        const int nb = 16 * (GV_WARPS / S);
        return !group || (N % nb == 0 && group % nb == 0);
    };
    int S = 1, cs = 1;
    while (S < GV_WARPS && !fits(S)) S *= 2;
    auto blocks = [&](int s) { return (NT + GV_WARPS / s - 1) / (GV_WARPS / s); };
    while ((long)blocks(S) * cs < target) {
        if (S < GV_WARPS && KT / (2 * S * cs) >= 1)
            S *= 2;
        else if (cs < 8 && KT / (S * 2 * cs) >= 1)
            cs *= 2;
        else
            break;
    }
    GvPlan pl = {true, F, M, blocks(S), cs, S, 0};
    pl.smem = q4_smem(M, (KT + cs - 1) / cs * 64, S, F).total;
    return pl;
}

// fp16: 64-column strips; a cluster splits K until there are about two blocks per SM, keeping
// >= 128 rows a block (the old GEMV's rule).
GvPlan plan_f16(int M, int N, int K, int F) {
    const int strips = (N + GV_F16_COLS - 1) / GV_F16_COLS;
    int cs = 1;
    while (cs < 8 && (long)strips * cs < 2L * num_sms() && K / (cs * 2) >= 128) cs *= 2;
    GvPlan pl = {false, F, gv_tokens_tile(M), strips, cs, 1, 0};
    pl.smem = f16_smem(pl.MT, (K / 8 + cs - 1) / cs * 8, F).total;
    return pl;
}

// The checks every entry makes on its weights; fills p.seg / p.up, p.M, p.K, p.N, p.epi.
int gv_prepare(const char *who, GvParams &p, int kind, int M, const g4_gemv_w *w, int n_w,
               const g4_gemv_w *wu, int group) {
    if (M < 1 || M > GV_MAX_M) return g4_fail(G4_EUSER, "%s: M = %d tokens, expected 1..8", who, M);
    if (!w || n_w < 1 || n_w > GV_MAX_SEG)
        return g4_fail(G4_EUSER, "%s: weights %s, %d segments: expected 1..3", who,
                       w ? "given" : "NULL", n_w);
    const bool q4 = w[0].q4 != nullptr;
    const int K = w[0].k;
    int N = 0;
    for (int i = 0; i < n_w + (wu ? 1 : 0); i++) {
        const g4_gemv_w &s = i < n_w ? w[i] : *wu;
        if ((s.q4 != nullptr) != q4 || (s.f16 != nullptr) == q4)
            return g4_fail(G4_EUSER,
                           "%s: weight %d: expected exactly one of fp16 / Q4, the same "
                           "kind for every segment",
                           who, i);
        if (s.k != K || s.n <= 0)
            return g4_fail(G4_EUSER, "%s: weight %d is [%d, %d], expected K = %d and N > 0", who, i,
                           s.k, s.n, K);
        if (q4) {
            if (!s.q4->q || !s.q4->scales || !s.q4->zp || s.q4->n != s.n || s.q4->k != s.k)
                return g4_fail(G4_EUSER, "%s: Q4 weight %d not repacked or not [%d, %d]", who, i,
                               s.k, s.n);
            if (s.n % 16 || K % 64)
                return g4_fail(G4_EUSER,
                               "%s: Q4 weight [%d, %d]: expected N %% 16 == 0, K %% 64 "
                               "== 0",
                               who, K, s.n);
        } else {
            if ((uintptr_t)s.f16 % 16 || s.n % 8 || K % 8 || K < 8)
                return g4_fail(G4_EUSER,
                               "%s: fp16 weight [%d, %d] at %p: expected 16-byte "
                               "alignment, N and K multiples of 8",
                               who, K, s.n, s.f16);
            if (i + 1 < n_w && s.n % GV_F16_COLS)
                return g4_fail(G4_EUSER,
                               "%s: fp16 segment %d of %d outputs: every segment but the "
                               "last must be a multiple of 64",
                               who, i, s.n);
        }
        if (i < n_w) {
            GvSeg &g = p.seg[i];
            g.w = (const __half *)s.f16;
            g.q4 = q4 ? view(s.q4) : q4w{nullptr, nullptr, nullptr};
            g.n0 = N;
            g.n = s.n;
            N += s.n;
        } else {
            if (s.n != w[0].n || n_w != 1)
                return g4_fail(G4_EUSER, "%s: gate (N %d) and up (N %d) weights differ", who,
                               w[0].n, s.n);
            p.up.w = (const __half *)s.f16;
            p.up.q4 = q4 ? view(s.q4) : q4w{nullptr, nullptr, nullptr};
            p.up.n0 = 0;
            p.up.n = s.n;
        }
    }
    if (group && (N % group || group % 16 || (!q4 && group % GV_F16_COLS)))
        return g4_fail(G4_EUSER,
                       "%s: %d outputs in groups of %d: expected groups of a multiple of "
                       "%d that tile them",
                       who, N, group, q4 ? 16 : GV_F16_COLS);
    if (group && N / group > GV_COUNTERS)
        return g4_fail(G4_EUSER, "%s: %d groups, at most %d", who, N / group, GV_COUNTERS);
    p.n_seg = n_w;
    p.M = M, p.K = K, p.N = N;
    p.epi = kind;
    p.group_n = group;
    return G4_OK;
}

// The grid of a prepared launch (after every argument check: it asks the device its SM count).
int gv_plan(const char *who, GvParams &p, GvPlan &pl) {
    const int M = p.M, N = p.N, K = p.K, F = p.epi == EPI_GLU ? 2 : 1;
    pl = p.seg[0].w ? plan_f16(M, N, K, F) : plan_q4(M, N, K, F, p.group_n);
    p.S = pl.S;
    if (pl.smem > GV_SMEM_MAX)
        return g4_fail(G4_EUSER,
                       "%s: %d tokens x K = %d need %zu bytes of shared memory (at most "
                       "%zu)",
                       who, M, K, pl.smem, GV_SMEM_MAX);
    return G4_OK;
}

int gv_check_ws(const char *who, const GvParams &p, void *ws, size_t bytes) {
    if (!ws || (uintptr_t)ws % 16 || bytes < g4_gemv_workspace(p.M, p.N))
        return g4_fail(G4_EUSER,
                       "%s: workspace %p of %zu bytes, expected 16-byte aligned and >= "
                       "%zu",
                       who, ws, bytes, g4_gemv_workspace(p.M, p.N));
    return G4_OK;
}

void gv_attr(const void *kernel, bool *done) {
    if (*done) return;
    G4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)GV_SMEM_MAX));
    *done = true;
}

// The launch of the planned kernel (each g4_pdl_launch_cluster names its kernel: the SASS test
// finds the launched kernels by these call sites).
void gv_launch(const GvParams &p, const GvPlan &pl, cudaStream_t st) {
    static bool done[10];
    const dim3 grid(pl.grid, pl.cs, 1), block(GV_THREADS, 1, 1), cl(1, pl.cs, 1);
    if (pl.q4) {
        if (pl.F == 1) {
            gv_attr((const void *)gv_q4_kernel<1>, &done[0]);
            g4_pdl_launch_cluster(gv_q4_kernel<1>, grid, block, pl.smem, st, cl, p);
        } else {
            gv_attr((const void *)gv_q4_kernel<2>, &done[1]);
            g4_pdl_launch_cluster(gv_q4_kernel<2>, grid, block, pl.smem, st, cl, p);
        }
        return;
    }
#define GV_F16(MT, F, I)                                                                           \
    do {                                                                                           \
        gv_attr((const void *)gv_f16_kernel<MT, F>, &done[I]);                                     \
        g4_pdl_launch_cluster(gv_f16_kernel<MT, F>, grid, block, pl.smem, st, cl, p);              \
    } while (0)
    switch (pl.MT * 2 + pl.F - 1) {
    case 2:
        GV_F16(1, 1, 2);
        break;
    case 3:
        GV_F16(1, 2, 3);
        break;
    case 4:
        GV_F16(2, 1, 4);
        break;
    case 5:
        GV_F16(2, 2, 5);
        break;
    case 8:
        GV_F16(4, 1, 6);
        break;
    case 9:
        GV_F16(4, 2, 7);
        break;
    case 16:
        GV_F16(8, 1, 8);
        break;
    default:
        GV_F16(8, 2, 9);
        break;
    }
#undef GV_F16
}

} // namespace
} // namespace g4k

using namespace g4k;

extern "C" size_t g4_gemv_workspace(int M, int N) {
    return GV_CTR_BYTES + (size_t)(M > 0 ? M : 0) * (size_t)(N > 0 ? N : 0) * sizeof(float);
}

extern "C" int g4_gemv_supported(g4_gemv_kind kind, int M, const g4_gemv_w *w, int n_w, int hd) {
    GvParams p = {};
    GvPlan pl;
    if (!w) return g4_fail(G4_EUSER, "gemv: NULL weights");
    int rc;
    if (kind == G4_GEMV_GLU) { // w = {gate, up}
        if (n_w != 2) return g4_fail(G4_EUSER, "gemv_glu: expected the gate and up weights");
        rc = gv_prepare("gemv_glu", p, (int)kind, M, w, 1, &w[1], 0);
    } else {
        const int group = kind == G4_GEMV_QKV ? hd : kind == G4_GEMV_ADD_NORM ? w[0].n : 0;
        rc = gv_prepare("gemv", p, (int)kind, M, w, n_w, nullptr, group);
    }
    return rc ? rc : gv_plan("gemv", p, pl);
}

extern "C" int g4_gemv(void *y, const void *x, const g4_gemv_w *w, const void *bias, int M,
                       g4_gemm_epi epi, cudaStream_t stream) {
    GvParams p = {};
    GvPlan pl;
    int rc = gv_prepare("gemv", p, EPI_STORE, M, w, 1, nullptr, 0);
    if (!rc) rc = check_common("gemv", y, x, bias, M, p.N, p.K, epi);
    if (rc) return rc;
    if ((rc = gv_plan("gemv", p, pl))) return rc;
    p.x = (const __half *)x, p.y = y, p.y_epi = (int)epi, p.bias = (const __half *)bias;
    gv_launch(p, pl, stream);
    return G4_OK;
}

extern "C" int g4_gemv_glu(void *y, const void *x, const g4_gemv_w *wg, const g4_gemv_w *wu, int M,
                           cudaStream_t stream) {
    GvParams p = {};
    GvPlan pl;
    if (!wu) return g4_fail(G4_EUSER, "gemv_glu: NULL up weight");
    int rc = gv_prepare("gemv_glu", p, EPI_GLU, M, wg, 1, wu, 0);
    if (!rc) rc = check_common("gemv_glu", y, x, nullptr, M, p.N, p.K, G4_GEMM_Y_F16);
    if (rc) return rc;
    if ((rc = gv_plan("gemv_glu", p, pl))) return rc;
    p.x = (const __half *)x, p.y = y, p.y_epi = G4_GEMM_Y_F16;
    gv_launch(p, pl, stream);
    return G4_OK;
}

extern "C" int g4_gemv_gelu_mul(void *y, const void *x, const g4_gemv_w *w, const void *b, int ldb,
                                int M, cudaStream_t stream) {
    GvParams p = {};
    GvPlan pl;
    int rc = gv_prepare("gemv_gelu_mul", p, EPI_GELU_MUL, M, w, 1, nullptr, 0);
    if (!rc) rc = check_common("gemv_gelu_mul", y, x, nullptr, M, p.N, p.K, G4_GEMM_Y_F16);
    if (rc) return rc;
    if (!b || (uintptr_t)b % 2 || ldb < p.N)
        return g4_fail(G4_EUSER,
                       "gemv_gelu_mul: b %p with row stride %d: expected fp16 rows of "
                       ">= %d",
                       b, ldb, p.N);
    if ((rc = gv_plan("gemv_gelu_mul", p, pl))) return rc;
    p.x = (const __half *)x, p.y = y, p.b = (const uint16_t *)b, p.ldb = ldb;
    gv_launch(p, pl, stream);
    return G4_OK;
}

extern "C" int g4_gemv_add_rmsnorm(const g4_gemv_norm *a, const void *x, const g4_gemv_w *w, int M,
                                   void *ws, size_t ws_bytes, cudaStream_t stream) {
    const char *who = "gemv_add_rmsnorm";
    GvParams p = {};
    GvPlan pl;
    if (!a || !w) return g4_fail(G4_EUSER, "%s: NULL arguments", who);
    int rc = gv_prepare(who, p, EPI_ADD_NORM, M, w, 1, nullptr, w->n);
    if (!rc) rc = gv_check_ws(who, p, ws, ws_bytes);
    if (rc) return rc;
    const uintptr_t al = (uintptr_t)x | (uintptr_t)a->h | (uintptr_t)a->next |
                         (uintptr_t)a->norm_w | (uintptr_t)a->next_w;
    if (!x || !a->h || !a->next || al % 16)
        return g4_fail(G4_EUSER, "%s: x, h, next (and the norm weights) must be 16-byte aligned",
                       who);
    if ((rc = gv_plan(who, p, pl))) return rc;
    p.x = (const __half *)x;
    p.h = a->h, p.norm_w = (const uint16_t *)a->norm_w, p.scale = (const uint16_t *)a->scale;
    p.eps = a->eps, p.next = (uint16_t *)a->next, p.next_norm = a->next_norm;
    p.next_w = (const uint16_t *)a->next_w;
    p.ctr = (unsigned *)ws;
    p.ws_y = (float *)((uint8_t *)ws + GV_CTR_BYTES);
    gv_launch(p, pl, stream);
    return G4_OK;
}

extern "C" int g4_gemv_qkv(const g4_gemv_qkv_args *a, const void *x, const g4_gemv_w *w, int n_w,
                           int M, void *ws, size_t ws_bytes, cudaStream_t stream) {
    const char *who = "gemv_qkv";
    GvParams p = {};
    GvPlan pl;
    if (!a || !w) return g4_fail(G4_EUSER, "%s: NULL arguments", who);
    const int hd = a->hd;
    if (hd < 16 || hd > 2 * GV_THREADS || hd % 16 || a->n_heads < 1 || a->n_kv < 0 ||
        (n_w != 1 && n_w != 3) || (n_w == 3) != (a->kcache != nullptr) ||
        (a->kcache == nullptr) != (a->vcache == nullptr) || (n_w == 3 && a->n_kv < 1))
        return g4_fail(G4_EUSER,
                       "%s: %d heads of %d, %d KV heads, %d weights: expected hd a "
                       "multiple of 16 up to 512, q only or q, k, v with both caches",
                       who, a->n_heads, hd, a->n_kv, n_w);
    if (w[0].n != a->n_heads * hd || (n_w == 3 && (w[1].n != a->n_kv * hd || w[2].n != w[1].n)))
        return g4_fail(G4_EUSER,
                       "%s: weights of %d / %d / %d outputs, expected %d heads x %d and "
                       "%d KV heads x %d",
                       who, w[0].n, n_w == 3 ? w[1].n : 0, n_w == 3 ? w[2].n : 0, a->n_heads, hd,
                       a->n_kv, hd);
    int rc = gv_prepare(who, p, EPI_QKV, M, w, n_w, nullptr, hd);
    if (!rc) rc = gv_check_ws(who, p, ws, ws_bytes);
    if (rc) return rc;
    if (!x || !a->q || !a->pos || (uintptr_t)x % 16 || (uintptr_t)a->q % 2 ||
        (a->kcache && (a->capacity < 1 || (uintptr_t)a->kcache % 2 || (uintptr_t)a->vcache % 2)))
        return g4_fail(G4_EUSER, "%s: NULL or misaligned x, q, pos or caches", who);
    if ((rc = gv_plan(who, p, pl))) return rc;
    p.x = (const __half *)x;
    p.q = (uint16_t *)a->q, p.kc = (uint16_t *)a->kcache, p.vc = (uint16_t *)a->vcache;
    p.capacity = a->capacity, p.q_w = (const uint16_t *)a->q_w, p.k_w = (const uint16_t *)a->k_w;
    p.pos = a->pos, p.inv_freq = a->inv_freq, p.n_heads = a->n_heads, p.n_kv = a->n_kv;
    p.hd = hd, p.eps = a->eps;
    p.ctr = (unsigned *)ws;
    p.ws_y = (float *)((uint8_t *)ws + GV_CTR_BYTES);
    gv_launch(p, pl, stream);
    return G4_OK;
}
