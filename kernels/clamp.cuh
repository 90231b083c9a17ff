// clamp.cuh: elementwise clamp (torch.clamp: NaN stays NaN), for the towers' ClippableLinear
// bounds and the conformer's activation clipping. See clamp.cu.
#ifndef G4_CLAMP_CUH
#define G4_CLAMP_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i] for i < n (ref_clamp), in place; y = x clamped
// into another buffer with g4_clamp_copy_f16 (the clipped linear's input copy). fp16 results
// are the fp16 rounding of the fp32 clamp (exact unless a bound is not an fp16 value). Any
// pointer alignment (16-byte aligned pointers take the vector path).
void g4_clamp_f16(uint16_t *x, size_t n, float lo, float hi, cudaStream_t stream);
void g4_clamp_f32(float *x, size_t n, float lo, float hi, cudaStream_t stream);
void g4_clamp_copy_f16(uint16_t *y, const uint16_t *x, size_t n, float lo, float hi,
                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
