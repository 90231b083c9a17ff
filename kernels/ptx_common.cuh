// ptx_common.cuh: the PTX wrappers and device math every tensor-core kernel family uses, one
// copy for kernels/gemm_common.cuh (GEMM/GEMV) and kernels/attnops_common.cuh (attention,
// small ops, conv). Internal: included through those two headers.
// defines: g4k::smem_u32, cp_async16, cp_async_commit, cp_async_wait, mma_16816, gelu_tanh.
#ifndef G4_PTX_COMMON_CUH
#define G4_PTX_COMMON_CUH

#include <cuda_fp16.h>
#include <stdint.h>

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

// HF gelu_pytorch_tanh, as kernels/ref/elementwise.c computes it.
__device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f; // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

} // namespace g4k

#endif
