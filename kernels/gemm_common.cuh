// gemm_common.cuh: device helpers shared by the GEMM/GEMV kernels (gemm_f16.cu,
// gemm_f16_wgmma.cu, gemm_q4.cu, gemm_q4_wgmma.cu): ldmatrix on shared addresses, the
// streamed weight load, the epilogue stores, the argument checks of the public entries
// (cp.async, mma.sync, GELU, the SM count and set_smem come from kernels/common.cuh).
// Internal header.
// defines: g4k::ldsm_x4(_t), ldg_stream(_u32, _u8), store_one, store_pair, check_common,
//          env_int, prefill_mma_forced, skinny_on, skinny_split, splitk_emit, wgmma_launch,
//          q4_wgmma_launch.
#pragma once

#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "kernels/common.cuh"
#include "kernels/cuda_util.h"
#include "kernels/gemm_f16.cuh"

namespace g4k {

// Four 8x8 fp16 matrices; lane l gives the row address of matrix l / 8, row l % 8.
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// Read-only 16-byte load that does not allocate in L1: streamed weights, read exactly once, so
// they do not evict the activations every block re-reads from L1.
__device__ __forceinline__ uint4 ldg_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// The same no-allocate non-coherent form for the scale and zero-point records of packed Q4
// weights. kernels/pdl.cuh: the one global load form allowed above griddepcontrol.wait, so
// it must only ever read immutable weights.
__device__ __forceinline__ uint32_t ldg_stream_u32(const void *p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t ldg_stream_u8(const void *p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u8 %0, [%1];\n" : "=r"(v) : "l"(p));
    return v;
}

// One output element: v (+ bias[col]) by the epilogue. idx = row * N + col.
__device__ __forceinline__ void store_one(void *y, int epi, const __half *bias, size_t idx, int col,
                                          float v) {
    if (bias) v += __half2float(bias[col]);
    switch (epi) {
    case G4_GEMM_Y_F16:
        ((__half *)y)[idx] = __float2half_rn(v);
        break;
    case G4_GEMM_Y_F32:
        ((float *)y)[idx] = v;
        break;
    case G4_GEMM_Y_F32_ADD:
        ((float *)y)[idx] += v;
        break;
    default: { // G4_GEMM_Y_F16_ADD
        __half *p = (__half *)y + idx;
        *p = __float2half_rn(__half2float(*p) + v);
    }
    }
}

// Two adjacent outputs (col even, N even, so the pair is 4- or 8-byte aligned).
__device__ __forceinline__ void store_pair(void *y, int epi, const __half *bias, size_t idx,
                                           int col, float v0, float v1) {
    if (bias) {
        v0 += __half2float(bias[col]);
        v1 += __half2float(bias[col + 1]);
    }
    switch (epi) {
    case G4_GEMM_Y_F16:
        *(__half2 *)((__half *)y + idx) = __floats2half2_rn(v0, v1);
        break;
    case G4_GEMM_Y_F32:
        *(float2 *)((float *)y + idx) = make_float2(v0, v1);
        break;
    case G4_GEMM_Y_F32_ADD: {
        float2 *p = (float2 *)((float *)y + idx);
        float2 o = *p;
        *p = make_float2(o.x + v0, o.y + v1);
        break;
    }
    default: { // G4_GEMM_Y_F16_ADD
        __half2 *p = (__half2 *)((__half *)y + idx);
        const float2 o = __half22float2(*p);
        *p = __floats2half2_rn(o.x + v0, o.y + v1);
    }
    }
}

// Host side -----------------------------------------------------------------------------------

// The integer knob `name` of the environment (A/B runs): dflt when unset, empty or outside
// [lo, hi].
int env_int(const char *name, int dflt, int lo, int hi);

// G4_GEMM_PREFILL=mma in the environment: AUTO runs the mma.sync GEMMs for M > 8 (a fallback
// switch for A/B runs; read once).
bool prefill_mma_forced();

// The skinny path (issue 31's batched decode, 8 < M <= 64 rows): the mma.sync GEMMs with K split
// over a thread-block cluster so the whole GPU streams each weight byte once. AUTO takes it for
// 8 < M <= 64 unless G4_SKINNY=0 is in the environment (A/B runs; read once).
bool skinny_on();

// The skinny path's K split S (1, 2, 4, 8: the cluster size, grid.z) for `ctas` CTAs without a
// split and KT k tiles: g4_gemm_skinny_force's when set (tests, benches), else doubled while the
// grid stays within 2 CTAs per SM and every CTA keeps >= 3 k tiles.
int skinny_split(long ctas, int KT);

// The epilogue of a GEMM whose K may be split over a cluster of gridDim.z CTAs (launched with
// cluster (1, 1, gridDim.z)): each thread's NV accumulators, flattened as units of E values
// that one emit(u, v) call stores. gridDim.z == 1: emit straight from the registers. Else each
// CTA writes its partial to its own shared memory buf ([NV][blockDim.x] floats, no longer used
// by the main loop: cp.async drained), and after a cluster barrier rank r reduces units
// r, r + S, ... by summing ranks 0 .. S - 1 in that order (deterministic), then emits them; a
// second barrier keeps every CTA's buf alive until all ranks have read it.
template <int NV, int E, typename Emit>
__device__ __forceinline__ void splitk_emit(const float (&part)[NV], float *buf, Emit emit) {
    static_assert(NV % E == 0, "units of E values");
    if (gridDim.z == 1) {
#pragma unroll
        for (int u = 0; u < NV / E; u++) emit(u, part + u * E);
        return;
    }
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    const int S = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const int T = (int)blockDim.x, tid = (int)threadIdx.x;
    __syncthreads(); // every warp is done with the pipeline's shared memory
#pragma unroll
    for (int j = 0; j < NV; j++) buf[j * T + tid] = part[j];
    cluster.sync(); // every CTA's partial is written and visible to the cluster
    for (int u = rank; u < NV / E; u += S) {
        float v[E];
#pragma unroll
        for (int e = 0; e < E; e++) v[e] = 0.0f;
        for (int r = 0; r < S; r++) {
            const float *p = cluster.map_shared_rank(buf, r);
#pragma unroll
            for (int e = 0; e < E; e++) v[e] += p[(u * E + e) * T + tid];
        }
        emit(u, v);
    }
    cluster.sync();
}

// AUTO's prefill kernel for M > 8: the tuned table (gemm_tuned.inc, the fastest kernel and
// configuration bench's prefill sweep measured for the shape, at the entry whose M is nearest in
// log2 and within a factor of 2) when it holds (N, K, q4, fused) and the GPU has the table's
// SM count; else wgmma with
// bn 0 (wg_choose's modelled configuration). G4_GEMM_TUNED=0 in the environment skips the table
// (A/B runs; read once); G4_GEMM_PREFILL=mma still sends AUTO to mma.sync.
struct prefill_plan {
    g4_gemm_algo algo; // G4_GEMM_MMA or G4_GEMM_WGMMA
    int bn, split;     // wgmma: tile width and split-K (0: the model's)
};
prefill_plan plan_prefill(int M, int N, int K, bool fused, bool q4);

// The add-norm prologue's operands (g4_gemv_norm: the GEMVs' add_norm entries, kernels/ops.h
// add_norm_linear).
struct gv_pro {
    const float *h_in;
    float *h_out;
    const __half *r, *w, *scale, *next_w;
    __half *x_out;
    float eps;
    int next_norm;
    const __half *mul; // the PLE gate's multiplier [M][ldm] (at its column 0), or NULL
    int ldm;
};

__device__ __forceinline__ void ld8h(const __half *p, float v[8]) {
    const uint4 u = *(const uint4 *)p;
    const __half2 *h = (const __half2 *)&u;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float2 f = __half22float2(h[e]);
        v[2 * e] = f.x, v[2 * e + 1] = f.y;
    }
}

__device__ __forceinline__ void st8h(__half *p, const float v[8]) {
    uint4 u;
    u.x = pack_half2(v[0], v[1]), u.y = pack_half2(v[2], v[3]);
    u.z = pack_half2(v[4], v[5]), u.w = pack_half2(v[6], v[7]);
    *(uint4 *)p = u;
}

// The add-norm prologue, after the PDL wait: every CTA computes the M rows of the linear's
// input into shared memory xs [M][K] (the same values in every CTA: each reads h_in and r, a
// few KB in L2), and CTA (0, 0) writes h_out and x_out for the kernels after this one. The
// arithmetic of add_rms_kernel (rmsnorm.cu), one 8-column vector a thread (K <= 8 x 256):
//   h = (h_in + r * rsqrt(mean(r^2) + eps) * w) * scale,  x = h * rsqrt(mean(h^2) + eps) * next_w
// writer_unit (persist_mlp.cu): instead, the CTA in which *writer_unit == 0 writes them; a shared
// int the CTA's threads may still be setting when they enter (it is read after the first barrier).
// ld, k0, k1 (the tensor-core GEMV's x of its k range, padded rows): xs [M][ld] holds only the
// columns [k0, k1) (multiples of 8), column k at k - k0; ld 0 means K.
__device__ __forceinline__ void gv_norm_prologue(const gv_pro &p, __half *xs, int M, int K,
                                                 const volatile int *writer_unit = nullptr,
                                                 int ld = 0, int k0 = 0, int k1 = 1 << 30) {
    __shared__ float scratch[33];
    bool writer = !writer_unit && blockIdx.x == 0 && blockIdx.y == 0;
    const float sc = p.scale ? __half2float(*p.scale) : 1.0f;
    const int i = threadIdx.x * 8;
    const bool on = i < K, mine = on && i >= k0 && i < k1;
    if (!ld) ld = K;
    float wv[8], nw[8];
#pragma unroll
    for (int e = 0; e < 8; e++) wv[e] = nw[e] = 1.0f;
    if (on && p.w) ld8h(p.w + i, wv);
    if (on && p.next_norm && p.next_w) ld8h(p.next_w + i, nw);
    for (int m = 0; m < M; m++) {
        const size_t base = (size_t)m * K + i;
        float v[8], hv[8], ss = 0.0f, ss2 = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = hv[e] = 0.0f;
        if (on) {
            ld8h(p.r + base, v);
            const float4 a = *(const float4 *)(p.h_in + base),
                         b = *(const float4 *)(p.h_in + base + 4);
            hv[0] = a.x, hv[1] = a.y, hv[2] = a.z, hv[3] = a.w;
            hv[4] = b.x, hv[5] = b.y, hv[6] = b.z, hv[7] = b.w;
        }
#pragma unroll
        for (int e = 0; e < 8; e++) ss += v[e] * v[e];
        const float inv = rsqrtf(block_sum(ss, scratch) / (float)K + p.eps);
        if (writer_unit) writer = *writer_unit == 0; // (after block_sum's barriers)
#pragma unroll
        for (int e = 0; e < 8; e++) {
            hv[e] = (hv[e] + v[e] * inv * wv[e]) * sc;
            ss2 += hv[e] * hv[e];
        }
        if (on && writer) {
            *(float4 *)(p.h_out + base) = make_float4(hv[0], hv[1], hv[2], hv[3]);
            *(float4 *)(p.h_out + base + 4) = make_float4(hv[4], hv[5], hv[6], hv[7]);
        }
        if (p.next_norm) {
            const float inv2 = rsqrtf(block_sum(ss2, scratch) / (float)K + p.eps);
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = hv[e] * inv2 * nw[e];
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = hv[e];
        }
        if (mine) st8h(xs + (size_t)m * ld + (i - k0), v);
        if (on && writer) st8h(p.x_out + base, v);
    }
    __syncthreads();
}

// The add-norm entries' checks (aligned, given, h_out not h_in, a multiplier's own rules) and
// their operands for the kernels; G4_OK or a G4_EUSER message naming `who`.
int norm_operands(const char *who, const g4_gemv_norm *a, const void *y, const void *bias, int M,
                  int N, int K, g4_gemm_epi epi, bool gated, gv_pro *out);

// The checks every entry makes; each returns G4_OK or a G4_EUSER message naming `who`.
int check_common(const char *who, const void *y, const void *x, const void *bias, int M, int N,
                 int K, g4_gemm_epi epi);

// The Hopper wgmma GEMMs (gemm_wgmma.cuh; arguments already checked by the entry): fp16 weights
// (gemm_f16_wgmma.cu) and packed Q4 weights (gemm_q4_wgmma.cu, w1 = the up weight when fused).
// fused selects y fp16 = gelu_tanh(x @ w) * (x @ wu) (epi ignored). Return G4_OK, or G4_EUSER
// only for a configuration forced by g4_gemm_wgmma_force that the shape cannot run.
int wgmma_launch(void *y, const __half *x, const __half *w, const __half *wu, const __half *bias,
                 int M, int N, int K, int epi, bool fused, cudaStream_t stream);
struct q4w;
int q4_wgmma_launch(void *y, const __half *x, const q4w &w0, const q4w &w1, const __half *bias,
                    int M, int N, int K, int epi, bool fused, cudaStream_t stream);

} // namespace g4k
