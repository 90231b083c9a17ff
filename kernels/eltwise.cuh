// eltwise.cuh: typed elementwise kernels of the CUDA backend's glue ops. See eltwise.cu.
// Types are g4_type values (kernels/ops.h): G4_F32, G4_F16 or G4_BF16 (bf16 stores round to
// nearest even). Asynchronous on `stream`; n elements, any alignment.
#ifndef G4_ELTWISE_CUH
#define G4_ELTWISE_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The grid of these kernels for n elements (256 threads a block, grid-stride beyond 4096 blocks).
unsigned g4_eltwise_grid(size_t n);
// y[i] = x[i] converted from type tx to ty (launched with programmatic dependent launch: it is
// on the decode path, embedding -> residual stream).
void g4_convert_typed(void *y, int ty, const void *x, int tx, size_t n, cudaStream_t stream);
// x[i] *= s in type tx.
void g4_scale_typed(void *x, int tx, size_t n, float s, cudaStream_t stream);
// y[i] += x[i] (y of type ty, x of type tx).
void g4_add_typed(void *y, int ty, const void *x, int tx, size_t n, cudaStream_t stream);
// m[i] = valid[i] != 0 (the kernels' uint8 row mask of an I32 0/1 mask).
void g4_mask_u8(uint8_t *m, const int32_t *valid, int n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
