// common.cuh: the device helpers every kernel family shares (one copy for the GEMM/GEMV
// kernels, gemm_common.cuh, and the attention / small-op / conv kernels, attnops_common.cuh):
// PTX wrappers (cp.async, mma.sync m16n8k16), GELU, fp16 <-> float, warp and block reductions,
// the grid-stride elementwise skeleton, and the host side's SM count, shared-memory opt-in and
// launch precondition. Internal: included by kernels/*.cu (directly or through those headers).
// defines: g4k::smem_u32, cp_async16, cp_async_commit, cp_async_wait, mma_16816, gelu_tanh,
//          pack_half2, warp_sum, warp_max, block_sum, h2f, f2h, ld_act, st_act, elt_load,
//          elt_store, eltwise_kernel, eltwise_launch, num_sms, set_smem; G4K_REQUIRE.
#ifndef G4_COMMON_CUH
#define G4_COMMON_CUH

#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda_util.h"

namespace g4k {

// Shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// 16-byte global -> shared copy that bypasses L1; when !valid it reads nothing and writes 16
// zero bytes (src must still be a mapped address: callers pass the tensor base then).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    cp_async16(smem_u32(dst), src, valid);
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// c[4] += A(16x16, fp16, row) * B(16x8, fp16, col), fp32 accumulate. Fragments (g = lane / 4,
// t = lane % 4): a0 (row g, k 2t..2t+1), a1 (row g+8, same k), a2 (row g, k 2t+8..2t+9),
// a3 (row g+8, k 2t+8..); b0 (k 2t..2t+1, col g), b1 (k 2t+8..2t+9, col g);
// c0, c1 (row g, col 2t, 2t+1), c2, c3 (row g+8, col 2t, 2t+1).
__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0,
                                          uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// HF gelu_pytorch_tanh, as kernels/ref/gelu_mul.c computes it.
__device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f; // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}


__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `scratch` holds >= 33 floats of shared memory; the call ends with the scratch reusable.
__device__ __forceinline__ float block_sum(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < nw ? scratch[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) scratch[32] = t;
    }
    __syncthreads();
    const float r = scratch[32];
    __syncthreads();
    return r;
}

__device__ __forceinline__ float h2f(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ uint16_t f2h(float f) {
    return __half_as_ushort(__float2half_rn(f));
}

// Loads of an activation element as float: fp16 bits or fp32.
__device__ __forceinline__ float ld_act(const uint16_t *p, size_t i) {
    return h2f(p[i]);
}
__device__ __forceinline__ float ld_act(const float *p, size_t i) {
    return p[i];
}
__device__ __forceinline__ void st_act(uint16_t *p, size_t i, float v) {
    p[i] = f2h(v);
}
__device__ __forceinline__ void st_act(float *p, size_t i, float v) {
    p[i] = v;
}

// --- elementwise: y[i] = f(x[i]) over n elements of fp16 (uint16_t bits) or fp32, 16-byte
// vectors when both pointers are 16-byte aligned, scalars for the tail or otherwise (clamp.cu,
// silu.cu) -----------------------------------------------------------------------------------

__device__ __forceinline__ float elt_load(uint16_t v) {
    return h2f(v);
}
__device__ __forceinline__ float elt_load(float v) {
    return v;
}
__device__ __forceinline__ void elt_store(uint16_t &d, float v) {
    d = f2h(v);
}
__device__ __forceinline__ void elt_store(float &d, float v) {
    d = v;
}

// y[i] = F()(x[i]); y may equal x. n_vec: the number of leading 16-byte chunks to take as
// vectors (0 when a pointer is unaligned).
template <class T, class F>
__global__ void eltwise_kernel(T *y, const T *x, size_t n, size_t n_vec, F f) {
    constexpr int E = 16 / sizeof(T);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t i = tid; i < n_vec; i += stride) {
        uint4 u = reinterpret_cast<const uint4 *>(x)[i];
        T *e = reinterpret_cast<T *>(&u);
#pragma unroll
        for (int j = 0; j < E; j++) elt_store(e[j], f(elt_load(e[j])));
        reinterpret_cast<uint4 *>(y)[i] = u;
    }
    for (size_t i = n_vec * E + tid; i < n; i += stride) elt_store(y[i], f(elt_load(x[i])));
}

template <class T, class F>
void eltwise_launch(T *y, const T *x, size_t n, F f, cudaStream_t stream) {
    if (n == 0) return;
    constexpr size_t E = 16 / sizeof(T);
    const bool aligned = (((uintptr_t)y | (uintptr_t)x) & 15) == 0;
    const size_t n_vec = aligned ? n / E : 0, work = n_vec + (n - n_vec * E);
    size_t blocks = (work + 255) / 256;
    blocks = blocks < 1 ? 1 : blocks > 4096 ? 4096 : blocks;
    eltwise_kernel<T, F><<<(unsigned)blocks, 256, 0, stream>>>(y, x, n, n_vec, f);
    G4_CUDA_LAUNCH_CHECK();
}

// --- host side -------------------------------------------------------------------------------

// Multiprocessors of the current device (queried once; cuda_util.cu).
int num_sms();

// Sets a kernel's dynamic shared-memory limit (once per kernel; cheap afterwards).
template <typename K> void set_smem(K *kernel, int bytes, bool *done) {
    if (*done) return;
    G4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    *done = true;
}

} // namespace g4k

// Launch-time precondition: aborts with the condition and the op's name (a caller bug).
#define G4K_REQUIRE(cond, op)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "g4cu: internal error: %s: precondition failed: %s (%s:%d)\n", op,     \
                    #cond, __FILE__, __LINE__);                                                    \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
