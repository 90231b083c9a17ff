// silu.cuh: SiLU y = x * sigmoid(x), the conformer's activation. See silu.cu.
#ifndef G4_SILU_CUH
#define G4_SILU_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// y[i] = x[i] / (1 + exp(-x[i])) for i < n (ref_silu), fp32 math; y may alias x. Any pointer
// alignment (16-byte aligned pointers take the vector path).
void g4_silu_f16(uint16_t *y, const uint16_t *x, size_t n, cudaStream_t stream);
void g4_silu_f32(float *y, const float *x, size_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
