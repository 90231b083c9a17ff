// silu.cu: y = x * sigmoid(x) elementwise (oracle: ref_silu; test: tests/test_cuda_towers.c
// --op silu). Memory-bound: 16-byte vectors, grid-stride (common.cuh).
#include "kernels/silu.cuh"

#include <math.h>

#include "kernels/common.cuh"

using namespace g4k;

namespace {

// The reference's formula, x / (1 + e^-x) with the precise expf, so both sides round alike
// (for x << 0, e^-x overflows to inf and y is -0, as in torch).
struct SiluOp {
    __device__ float operator()(float v) const { return v / (1.0f + expf(-v)); }
};

} // namespace

extern "C" void g4_silu_f16(uint16_t *y, const uint16_t *x, size_t n, cudaStream_t stream) {
    eltwise_launch(y, x, n, SiluOp{}, stream);
}

extern "C" void g4_silu_f32(float *y, const float *x, size_t n, cudaStream_t stream) {
    eltwise_launch(y, x, n, SiluOp{}, stream);
}
