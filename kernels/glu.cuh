// glu.cuh: GLU over the last dimension (torch.nn.functional.glu, dim=-1), the conformer's light
// conv gate. See glu.cu.
#ifndef G4_GLU_CUH
#define G4_GLU_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// y[t, c] = x[t, c] * sigmoid(x[t, C + c]) for t < T, c < C (ref_glu): x [T, 2C], y [T, C]
// (row-major, contiguous, not overlapping), fp32 math. Any C and alignment (C % (16 / element
// size) == 0 with 16-byte aligned pointers takes the vector path).
void g4_glu_f16(uint16_t *y, const uint16_t *x, int T, int C, cudaStream_t stream);
void g4_glu_f32(float *y, const float *x, int T, int C, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
