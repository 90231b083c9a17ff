// eltwise.cu: the CUDA backend's small typed kernels (backend_cuda.cu's convert, scale and add
// ops on f32 / f16 / bf16 buffers, and the I32 -> uint8 row masks of the tower ops); everything
// bigger lives in its own kernels/<op>.cu. Oracles: the CPU backend's convert / scale / add
// (tests/test_backend_ops.c --op convert|scale|add).
#include "kernels/eltwise.cuh"

#include <cuda_fp16.h>

#include "kernels/cuda_util.h"
#include "kernels/ops.h"
#include "kernels/pdl.cuh"

namespace {

__device__ __forceinline__ float ld(const void *p, int type, size_t i) {
    switch (type) {
    case G4_F32:
        return ((const float *)p)[i];
    case G4_F16:
        return __half2float(((const __half *)p)[i]);
    default:
        return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16); // bf16
    }
}

__device__ __forceinline__ void st(void *p, int type, size_t i, float v) {
    switch (type) {
    case G4_F32:
        ((float *)p)[i] = v;
        break;
    case G4_F16:
        ((__half *)p)[i] = __float2half_rn(v);
        break;
    default: { // bf16, round to nearest even
        uint32_t u = __float_as_uint(v);
        ((uint16_t *)p)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    }
}

// On the decode path (embedding -> residual stream): launched with programmatic dependent
// launch, so nothing above the wait (kernels/pdl.cuh).
__global__ void convert_kernel(void *y, int ty, const void *x, int tx, size_t n) {
    g4_pdl_wait();
    g4_pdl_trigger();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        st(y, ty, i, ld(x, tx, i));
}

__global__ void scale_kernel(void *x, int tx, size_t n, float s) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        st(x, tx, i, ld(x, tx, i) * s);
}

__global__ void add_kernel(void *y, int ty, const void *x, int tx, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        st(y, ty, i, ld(y, ty, i) + ld(x, tx, i));
}

__global__ void mask_u8_kernel(uint8_t *m, const int32_t *valid, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        m[i] = valid[i] != 0;
}

} // namespace

extern "C" unsigned g4_eltwise_grid(size_t n) {
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

extern "C" void g4_convert_typed(void *y, int ty, const void *x, int tx, size_t n,
                                 cudaStream_t stream) {
    g4_pdl_launch(convert_kernel, dim3(g4_eltwise_grid(n)), dim3(256), 0, stream, y, ty, x, tx, n);
}

extern "C" void g4_scale_typed(void *x, int tx, size_t n, float s, cudaStream_t stream) {
    scale_kernel<<<g4_eltwise_grid(n), 256, 0, stream>>>(x, tx, n, s);
}

extern "C" void g4_add_typed(void *y, int ty, const void *x, int tx, size_t n,
                             cudaStream_t stream) {
    add_kernel<<<g4_eltwise_grid(n), 256, 0, stream>>>(y, ty, x, tx, n);
}

extern "C" void g4_mask_u8(uint8_t *m, const int32_t *valid, int n, cudaStream_t stream) {
    mask_u8_kernel<<<g4_eltwise_grid((size_t)n), 256, 0, stream>>>(m, valid, n);
    G4_CUDA_LAUNCH_CHECK();
}
