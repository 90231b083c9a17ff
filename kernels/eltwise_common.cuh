// eltwise_common.cuh: the grid-stride skeleton of the towers' elementwise kernels (clamp.cu,
// silu.cu): y[i] = f(x[i]) over n elements of fp16 (uint16_t bits) or fp32, 16-byte vectors
// when both pointers are 16-byte aligned, scalars for the tail or otherwise. Internal: included
// by .cu files only.
// defines: g4k::elt_load / elt_store, g4k::eltwise_launch.
#ifndef G4_ELTWISE_COMMON_CUH
#define G4_ELTWISE_COMMON_CUH

#include <stddef.h>
#include <stdint.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"

namespace g4k {

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

} // namespace g4k

#endif
