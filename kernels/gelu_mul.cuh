// gelu_mul.cuh: GELU-tanh gating y = gelu_tanh(a) * b (the MLP's gate, the PLE gate). See
// gelu_mul.cu.
#ifndef G4_GELU_MUL_CUH
#define G4_GELU_MUL_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// y[t, i] = gelu_tanh(a[t, i]) * b[t, i] for t < T, i < n; all fp16 with row strides (in
// elements) ldy, lda, ldb, so b can be a column slice: the PLE gating reads layer l's slice of
// the per-layer inputs as b = ple + l * 256 with ldb = 35 * 256. y may alias a or b.
// n, the strides and the pointers: multiples of 8 elements (16 bytes).
// NULL when the kernel takes rows of n columns, else what it takes.
const char *g4_gelu_mul_supported(int n);
void g4_gelu_mul(uint16_t *y, int ldy, const uint16_t *a, int lda, const uint16_t *b, int ldb,
                 int T, int n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
