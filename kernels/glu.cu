// glu.cu: y = x[:, :C] * sigmoid(x[:, C:]) (oracle: ref_glu; test: tests/test_cuda_towers.c
// --op glu). Memory-bound, grid-stride: a thread takes one 16-byte chunk of an output row (its
// value half and gate half are two 16-byte loads) when rows allow it, else one element.
#include "kernels/glu.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/common.cuh"

using namespace g4k;

namespace {

__device__ __forceinline__ float glu1(float a, float g) {
    return a * (1.0f / (1.0f + expf(-g)));
}

// E elements per work item (E = 16 / sizeof(T) for the vector path, 1 for the scalar one).
template <class T, int E> __global__ void glu_kernel(T *y, const T *x, int T_rows, int C) {
    const int per_row = C / E;
    const long long total = (long long)T_rows * per_row;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int t = (int)(i / per_row), c = (int)(i % per_row) * E;
        const T *xa = x + (size_t)t * 2 * C + c, *xg = xa + C;
        T *dst = y + (size_t)t * C + c;
        if constexpr (E == 1) {
            elt_store(*dst, glu1(elt_load(*xa), elt_load(*xg)));
        } else {
            const uint4 ua = *reinterpret_cast<const uint4 *>(xa),
                        ug = *reinterpret_cast<const uint4 *>(xg);
            const T *ea = reinterpret_cast<const T *>(&ua), *eg = reinterpret_cast<const T *>(&ug);
            uint4 uy;
            T *ey = reinterpret_cast<T *>(&uy);
#pragma unroll
            for (int e = 0; e < E; e++) elt_store(ey[e], glu1(elt_load(ea[e]), elt_load(eg[e])));
            *reinterpret_cast<uint4 *>(dst) = uy;
        }
    }
}

template <class T> void glu_launch(T *y, const T *x, int T_rows, int C, cudaStream_t stream) {
    G4K_REQUIRE(T_rows >= 0 && C >= 0, "g4_glu");
    constexpr int V = 16 / sizeof(T);
    const bool vec = C % V == 0 && (((uintptr_t)y | (uintptr_t)x) & 15) == 0;
    const long long total = (long long)T_rows * (vec ? C / V : C);
    if (total == 0) return;
    long long blocks = (total + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    if (vec)
        glu_kernel<T, V><<<(unsigned)blocks, 256, 0, stream>>>(y, x, T_rows, C);
    else
        glu_kernel<T, 1><<<(unsigned)blocks, 256, 0, stream>>>(y, x, T_rows, C);
    G4_CUDA_LAUNCH_CHECK();
}

} // namespace

extern "C" void g4_glu_f16(uint16_t *y, const uint16_t *x, int T, int C, cudaStream_t stream) {
    glu_launch(y, x, T, C, stream);
}

extern "C" void g4_glu_f32(float *y, const float *x, int T, int C, cudaStream_t stream) {
    glu_launch(y, x, T, C, stream);
}
