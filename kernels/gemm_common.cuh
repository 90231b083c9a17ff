// gemm_common.cuh: device helpers shared by the GEMM/GEMV kernels (gemm_f16.cu,
// gemm_f16_wgmma.cu, gemm_q4.cu): PTX wrappers for cp.async, ldmatrix and mma.sync, the
// epilogue stores and GELU, the argument checks of the public entries. Internal header.
// defines: g4k::cp_async16, cp_async_commit/wait, ldsm_x4(_t), mma_16816, ldg_stream, gelu_tanh,
//          store_one, store_pair, num_sms, check_common, wgmma_launch, set_smem.
#pragma once

#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda_util.h"
#include "kernels/gemm_f16.cuh"
#include "loader/base.h"

namespace g4k {

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// 16-byte global -> shared copy that bypasses L1; `valid == false` writes 16 zero bytes and reads
// nothing (src must still be a mapped address: callers pass the tensor base then).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

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

// Read-only 16-byte load that does not allocate in L1: streamed weights, read exactly once, so
// they do not evict the activations every block re-reads from L1.
__device__ __forceinline__ uint4 ldg_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// HF gelu_pytorch_tanh, as kernels/ref/elementwise.c computes it.
__device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f; // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
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

// Multiprocessors of the current device (queried once).
int num_sms();

// The checks every entry makes; each returns G4_OK or a G4_EUSER message naming `who`.
int check_common(const char *who, const void *y, const void *x, const void *bias, int M, int N,
                 int K, g4_gemm_epi epi);

// The Hopper wgmma GEMM (gemm_f16_wgmma.cu): arguments already checked by the entry; wu != NULL
// selects the fused gate/up kernel (y fp16 = gelu_tanh(x @ w) * (x @ wu), epi ignored).
void wgmma_launch(void *y, const __half *x, const __half *w, const __half *wu, const __half *bias,
                  int M, int N, int K, int epi, bool fused, cudaStream_t stream);

// Sets a kernel's dynamic shared-memory limit (once per kernel; cheap afterwards).
template <typename K> void set_smem(K *kernel, int bytes, bool *done) {
    if (*done) return;
    G4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    *done = true;
}

} // namespace g4k
