// clamp.cu: x = clamp(x, lo, hi) elementwise with torch.clamp's NaN rule (oracle: ref_clamp;
// test: tests/test_cuda_towers.c --op clamp). Memory-bound: 16-byte vectors, grid-stride
// (common.cuh).
#include "kernels/clamp.cuh"

#include "kernels/common.cuh"

using namespace g4k;

namespace {

// Comparisons, not fminf/fmaxf: those return the other operand for a NaN, torch keeps the NaN.
struct ClampOp {
    float lo, hi;
    __device__ float operator()(float v) const { return v < lo ? lo : v > hi ? hi : v; }
};

} // namespace

extern "C" void g4_clamp_f16(uint16_t *x, size_t n, float lo, float hi, cudaStream_t stream) {
    eltwise_launch(x, (const uint16_t *)x, n, ClampOp{lo, hi}, stream);
}

extern "C" void g4_clamp_f32(float *x, size_t n, float lo, float hi, cudaStream_t stream) {
    eltwise_launch(x, (const float *)x, n, ClampOp{lo, hi}, stream);
}

extern "C" void g4_clamp_copy_f16(uint16_t *y, const uint16_t *x, size_t n, float lo, float hi,
                                  cudaStream_t stream) {
    eltwise_launch(y, x, n, ClampOp{lo, hi}, stream);
}
