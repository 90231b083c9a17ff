// rmsnorm.cu: RMSNorm (Gemma-4: x * (mean(x^2) + eps)^-0.5 * w, no 1 + w offset, fp32 math) and
// the post-norm residual add with the layer scalar and the next norm fused in.
//
// Oracles: ref_rmsnorm, ref_add_rmsnorm (kernels/ref/rmsnorm.c). Test: tests/test_cuda_ops.c
// --op rmsnorm / add_rmsnorm; bench: --filter rmsnorm. Memory-bound: read x (and h), write y.
// One CTA per normalised group, 16-byte vectors, a block reduction of the sum of squares; a
// second pass re-reads the CTA's own data (3 KB per row for E2B, an L1 hit) instead of holding
// it in registers, so any group size works with one kernel. Groups of at most 256 columns (a
// power-of-two count of 8-element vectors) take a sub-warp path instead (rms_subwarp_kernel),
// and rows of 512, 768 or 1024 columns (the towers' widths) a warp per row (rms_warp_kernel,
// add_rms_warp_kernel); the decoder's 1536-column rows keep the CTA-per-row kernels.
// Both kernels are launched with programmatic dependent launch (kernels/pdl.cuh): above the
// wait only L2 prefetches of the norm weights (and the layer scalar).
#include "kernels/rmsnorm.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"
#include "kernels/pdl.cuh"

using namespace g4k;

namespace {

// 8 consecutive elements as floats.
__device__ __forceinline__ void load8(const uint16_t *p, float v[8]) {
    const uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __half22float2(h[i]);
        v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
}
__device__ __forceinline__ void load8(const float *p, float v[8]) {
    const float4 a = *reinterpret_cast<const float4 *>(p),
                 b = *reinterpret_cast<const float4 *>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void store8(uint16_t *p, const float v[8]) {
    uint4 u;
    u.x = pack_half2(v[0], v[1]), u.y = pack_half2(v[2], v[3]);
    u.z = pack_half2(v[4], v[5]), u.w = pack_half2(v[6], v[7]);
    *reinterpret_cast<uint4 *>(p) = u;
}
__device__ __forceinline__ void store8(float *p, const float v[8]) {
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4 *>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

// 1 / sqrt(mean(x[0 .. n)^2) + eps) of the CTA's n elements, each thread summing its 8-element
// vectors; every thread gets it.
template <class X>
__device__ __forceinline__ float block_inv_rms(const X *x, int n, float eps, float *scratch) {
    float ss = 0.0f;
    for (int i = threadIdx.x * 8; i < n; i += blockDim.x * 8) {
        float v[8];
        load8(x + i, v);
#pragma unroll
        for (int e = 0; e < 8; e++) ss += v[e] * v[e];
    }
    return rsqrtf(block_sum(ss, scratch) / (float)n + eps);
}

// y[i] = x[i] * inv * w[i] (w NULL: no scale) over the CTA's n elements.
template <class X>
__device__ __forceinline__ void store_normed(uint16_t *y, const X *x, float inv,
                                             const uint16_t *w, int n) {
    for (int i = threadIdx.x * 8; i < n; i += blockDim.x * 8) {
        float v[8], wv[8];
        load8(x + i, v);
        if (w) load8(w + i, wv);
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = v[e] * inv * (w ? wv[e] : 1.0f);
        store8(y + i, v);
    }
}

// One CTA per group: blockIdx.x = row * (cols / group) + group index.
template <class X>
__global__ void rms_kernel(uint16_t *y, const X *x, const uint16_t *w, int group, float eps) {
    g4_prefetch_l2_bytes(w, w ? (size_t)group * 2 : 0);
    g4_pdl_wait();
    g4_pdl_trigger();
    __shared__ float scratch[33];
    const size_t base = (size_t)blockIdx.x * group;
    const float inv = block_inv_rms(x + base, group, eps, scratch);
    store_normed(y + base, x + base, inv, w, group);
}

// Groups of 8 L columns with L a power of two <= 32 (group <= 256: the per-head norms, 64 in
// the vision tower): a sub-warp of L lanes per group, one 8-element vector per lane held in
// registers, the sum of squares reduced by xor shuffles inside the sub-warp, 256 / L groups per
// CTA. One CTA of 32 threads per group (rms_kernel) left 3 of 4 lanes idle and made the vision
// tower's 2304 x 12 head norms launch-bound (28 us each on the H200).
template <class X>
__global__ void rms_subwarp_kernel(uint16_t *y, const X *x, const uint16_t *w, int group,
                                   long long n_groups, float eps) {
    const int L = group >> 3, sub = threadIdx.x & (L - 1);
    const long long gi = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / L;
    g4_prefetch_l2_bytes(w, w ? (size_t)group * 2 : 0);
    g4_pdl_wait();
    g4_pdl_trigger();
    const bool active = gi < n_groups; // inactive lanes still take part in the shuffles
    const size_t off = (size_t)gi * group + (size_t)sub * 8;
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (active) load8(x + off, v);
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) ss += v[e] * v[e];
    for (int o = L >> 1; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / (float)group + eps);
    if (!active) return;
    float wv[8];
    if (w) load8(w + (size_t)sub * 8, wv);
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = v[e] * inv * (w ? wv[e] : 1.0f);
    store8(y + off, v);
}

// The warp-per-row kernels' store: y = v * inv * w (w NULL: no scale) for the row's VPL vectors
// that this lane holds (vectors lane + 32 j), the arithmetic of store_normed.
template <int VPL>
__device__ __forceinline__ void warp_store_normed(uint16_t *y, float (&v)[VPL][8], float inv,
                                                  const uint16_t *w, int lane) {
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        const int c = (lane + 32 * j) * 8;
        float wv[8];
        if (w) load8(w + c, wv);
#pragma unroll
        for (int e = 0; e < 8; e++) v[j][e] = v[j][e] * inv * (w ? wv[e] : 1.0f);
        store8(y + c, v[j]);
    }
}

// Rows (groups) of 256 VPL columns, VPL 2..4 (the towers' widths 768 and 1024, and 512): one
// warp per row, VPL 8-element vectors per lane held in registers (lane l owns vectors l + 32 j),
// one warp reduction, 8 rows per CTA. Beside one CTA per row this drops the block reductions'
// two barriers and the second pass: the audio tower's 750-row norms took 7 us a call that way.
template <class X, int VPL>
__global__ void rms_warp_kernel(uint16_t *y, const X *x, const uint16_t *w, long long n_groups,
                                float eps) {
    constexpr int group = 256 * VPL;
    const int lane = threadIdx.x & 31;
    const long long gi = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    g4_prefetch_l2_bytes(w, w ? (size_t)group * 2 : 0);
    g4_pdl_wait();
    g4_pdl_trigger();
    if (gi >= n_groups) return; // whole warps
    const size_t base = (size_t)gi * group;
    float v[VPL][8], ss = 0.0f;
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        load8(x + base + (size_t)(lane + 32 * j) * 8, v[j]);
#pragma unroll
        for (int e = 0; e < 8; e++) ss += v[j][e] * v[j][e];
    }
    warp_store_normed<VPL>(y + base, v, rsqrtf(warp_sum(ss) / (float)group + eps), w, lane);
}

// add_rms_kernel for rows of 256 VPL columns, VPL 2..4: one warp per row, in registers.
template <int VPL>
__global__ void add_rms_warp_kernel(float *h, const float *h_in, const uint16_t *x,
                                    const uint16_t *w, const uint16_t *scale, float eps, int next,
                                    uint16_t *y2, const uint16_t *w2, int rows) {
    constexpr int cols = 256 * VPL;
    g4_prefetch_l2_bytes(w, w ? (size_t)cols * 2 : 0);
    g4_prefetch_l2_bytes(w2, w2 && next == G4_NEXT_NORM ? (size_t)cols * 2 : 0);
    g4_prefetch_l2_bytes(scale, scale ? 2 : 0);
    g4_pdl_wait();
    g4_pdl_trigger();
    const int lane = threadIdx.x & 31;
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= rows) return;
    const size_t base = (size_t)row * cols;
    float v[VPL][8], hv[VPL][8], ss = 0.0f;
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        const size_t c = base + (size_t)(lane + 32 * j) * 8;
        load8(x + c, v[j]);
        load8(h_in + c, hv[j]);
#pragma unroll
        for (int e = 0; e < 8; e++) ss += v[j][e] * v[j][e];
    }
    const float inv = rsqrtf(warp_sum(ss) / (float)cols + eps);
    const float sc = scale ? h2f(*scale) : 1.0f;
    float ss2 = 0.0f;
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        const int c = (lane + 32 * j) * 8;
        float wv[8];
        if (w) load8(w + c, wv);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            hv[j][e] = (hv[j][e] + v[j][e] * inv * (w ? wv[e] : 1.0f)) * sc;
            ss2 += hv[j][e] * hv[j][e];
        }
        store8(h + base + c, hv[j]);
        if (next == G4_NEXT_COPY) store8(y2 + base + c, hv[j]);
    }
    if (next != G4_NEXT_NORM) return;
    warp_store_normed<VPL>(y2 + base, hv, rsqrtf(warp_sum(ss2) / (float)cols + eps), w2, lane);
}

__global__ void add_rms_kernel(float *h, const float *h_in, const uint16_t *x, const uint16_t *w,
                               const uint16_t *scale, float eps, int next, uint16_t *y2,
                               const uint16_t *w2, int cols) {
    g4_prefetch_l2_bytes(w, w ? (size_t)cols * 2 : 0);
    g4_prefetch_l2_bytes(w2, w2 && next == G4_NEXT_NORM ? (size_t)cols * 2 : 0); // read only then
    g4_prefetch_l2_bytes(scale, scale ? 2 : 0);
    g4_pdl_wait();
    g4_pdl_trigger();
    __shared__ float scratch[33];
    const size_t base = (size_t)blockIdx.x * cols;
    const float inv = block_inv_rms(x + base, cols, eps, scratch);
    const float sc = scale ? h2f(*scale) : 1.0f;
    float ss2 = 0.0f;
    for (int i = threadIdx.x * 8; i < cols; i += blockDim.x * 8) {
        float v[8], wv[8], hv[8];
        load8(x + base + i, v);
        load8(h_in + base + i, hv);
        if (w) load8(w + i, wv);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            hv[e] = (hv[e] + v[e] * inv * (w ? wv[e] : 1.0f)) * sc;
            ss2 += hv[e] * hv[e];
        }
        store8(h + base + i, hv);
        if (next == G4_NEXT_COPY) store8(y2 + base + i, hv);
    }
    if (next != G4_NEXT_NORM) return;
    const float inv2 = rsqrtf(block_sum(ss2, scratch) / (float)cols + eps);
    store_normed(y2 + base, h + base, inv2, w2, cols); // reads this thread's own stores above
}

// Threads per CTA: one 8-element vector each, a multiple of 32, at most 256.
int rms_threads(int n) {
    int t = (n / 8 + 31) / 32 * 32;
    return t < 32 ? 32 : t > 256 ? 256 : t;
}

bool al16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

} // namespace

extern "C" const char *g4_rmsnorm_supported(int cols, int group) {
    if (group < 8 || group % 8 || cols < 1 || cols % group)
        return "groups of a positive multiple of 8 columns that divide the row (rmsnorm.cu)";
    return NULL;
}

extern "C" const char *g4_add_rmsnorm_supported(int cols) {
    if (cols < 8 || cols % 8) return "rows of a positive multiple of 8 columns (rmsnorm.cu)";
    return NULL;
}

namespace {

template <class X>
void rms_launch(uint16_t *y, const X *x, const uint16_t *w, int rows, int cols, int group,
                float eps, cudaStream_t stream, const char *op) {
    G4K_SUPPORTED(g4_rmsnorm_supported(cols, group), op);
    G4K_REQUIRE(rows >= 0, op);
    G4K_REQUIRE(al16(y) && al16(x) && (!w || al16(w)), op);
    const long long blocks = (long long)rows * (cols / group);
    if (blocks == 0) return;
    const int L = group / 8;
    if (L <= 32 && (L & (L - 1)) == 0) { // the sub-warp path
        const long long ctas = (blocks * L + 255) / 256;
        G4K_REQUIRE(ctas <= 0x7fffffffLL, op);
        g4_pdl_launch(rms_subwarp_kernel<X>, dim3((unsigned)ctas), dim3(256), 0, stream, y, x, w,
                      group, blocks, eps);
        return;
    }
    if (group == 512 || group == 768 || group == 1024) { // the warp-per-row path
        const long long ctas = (blocks + 7) / 8;
        G4K_REQUIRE(ctas <= 0x7fffffffLL, op);
        const dim3 grid((unsigned)ctas), block(256); // (one launch site per kernel: the SASS test)
        if (group == 512)
            g4_pdl_launch(rms_warp_kernel<X, 2>, grid, block, 0, stream, y, x, w, blocks, eps);
        else if (group == 768)
            g4_pdl_launch(rms_warp_kernel<X, 3>, grid, block, 0, stream, y, x, w, blocks, eps);
        else
            g4_pdl_launch(rms_warp_kernel<X, 4>, grid, block, 0, stream, y, x, w, blocks, eps);
        return;
    }
    G4K_REQUIRE(blocks <= 0x7fffffffLL, op);
    g4_pdl_launch(rms_kernel<X>, dim3((unsigned)blocks), dim3(rms_threads(group)), 0, stream, y, x,
                  w, group, eps);
}

} // namespace

extern "C" void g4_rmsnorm_f16(uint16_t *y, const uint16_t *x, const uint16_t *w, int rows,
                               int cols, int group, float eps, cudaStream_t stream) {
    rms_launch(y, x, w, rows, cols, group, eps, stream, "g4_rmsnorm_f16");
}

extern "C" void g4_rmsnorm_f32(uint16_t *y, const float *x, const uint16_t *w, int rows, int cols,
                               int group, float eps, cudaStream_t stream) {
    rms_launch(y, x, w, rows, cols, group, eps, stream, "g4_rmsnorm_f32");
}

extern "C" void g4_add_rmsnorm(float *h, const uint16_t *x, const uint16_t *w,
                               const uint16_t *scale, float eps, g4_next_mode next, uint16_t *y2,
                               const uint16_t *w2, int rows, int cols, cudaStream_t stream) {
    g4_add_rmsnorm_to(h, h, x, w, scale, eps, next, y2, w2, rows, cols, stream);
}

extern "C" void g4_add_rmsnorm_to(float *h, const float *h_in, const uint16_t *x, const uint16_t *w,
                                  const uint16_t *scale, float eps, g4_next_mode next, uint16_t *y2,
                                  const uint16_t *w2, int rows, int cols, cudaStream_t stream) {
    const char *op = "g4_add_rmsnorm";
    G4K_SUPPORTED(g4_add_rmsnorm_supported(cols), op);
    G4K_REQUIRE(rows >= 0, op);
    G4K_REQUIRE(next == G4_NEXT_NONE || next == G4_NEXT_NORM || next == G4_NEXT_COPY, op);
    G4K_REQUIRE(next == G4_NEXT_NONE || (y2 && al16(y2)), op);
    G4K_REQUIRE(al16(h) && al16(h_in) && al16(x) && (!w || al16(w)) && (!w2 || al16(w2)), op);
    if (rows == 0) return;
    if (cols == 512 || cols == 768 || cols == 1024) { // the warp-per-row path
        const dim3 grid((unsigned)((rows + 7) / 8)), block(256);
        if (cols == 512)
            g4_pdl_launch(add_rms_warp_kernel<2>, grid, block, 0, stream, h, h_in, x, w, scale, eps,
                          (int)next, y2, w2, rows);
        else if (cols == 768)
            g4_pdl_launch(add_rms_warp_kernel<3>, grid, block, 0, stream, h, h_in, x, w, scale, eps,
                          (int)next, y2, w2, rows);
        else
            g4_pdl_launch(add_rms_warp_kernel<4>, grid, block, 0, stream, h, h_in, x, w, scale, eps,
                          (int)next, y2, w2, rows);
        return;
    }
    g4_pdl_launch(add_rms_kernel, dim3(rows), dim3(rms_threads(cols)), 0, stream, h, h_in, x, w,
                  scale, eps, (int)next, y2, w2, cols);
}
