// transpose.cuh: a 2-D transpose of 2- or 4-byte elements. See transpose.cu.
#ifndef G4_TRANSPOSE_CUH
#define G4_TRANSPOSE_CUH

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

// y[c, r] = x[r, c] for x [rows, cols], y [cols, rows] (row-major, contiguous, not
// overlapping); elem_bytes 2 (fp16, bf16) or 4 (fp32, int32): the bits are copied.
void g4_transpose(void *y, const void *x, int rows, int cols, int elem_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
