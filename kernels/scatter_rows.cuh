// scatter_rows.cuh: rows of one buffer placed at chosen rows of another (soft tokens into the
// embedding rows; an audio clip's valid frames). See scatter_rows.cu.
#ifndef G4_SCATTER_ROWS_CUH
#define G4_SCATTER_ROWS_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// dst[t, :] = src[idx[t], :] (fp32 rows of `cols`) for each t < dst_rows with idx[t] >= 0 (idx
// device I32 [dst_rows], each < src_rows); rows with idx[t] < 0 keep their values.
void g4_scatter_rows_f32(float *dst, int dst_rows, const float *src, int src_rows, int cols,
                         const int32_t *idx, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
