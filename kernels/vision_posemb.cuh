// vision_posemb.cuh: the vision patch embedding's position-embedding add (spec 4.2). See
// vision_posemb.cu.
#ifndef G4_VISION_POSEMB_CUH
#define G4_VISION_POSEMB_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// h[i, :] += table[0, x_i, :] + table[1, y_i, :] for every patch i that is not padding
// ((x, y) = (-1, -1): unchanged, as HF adds 0), after the patch projection GEMM (h = p @ W).
// h fp32 [N, D] (the tower's residual stream); table fp16 [2, table_rows, D]; pos_xy device I32
// [N, 2]. Out-of-range coordinates are clamped into the table (the host checks them, like
// ref_vision_posemb_add). D % 8 == 0.
// NULL when the kernel takes rows of D columns, else what it takes.
const char *g4_vision_posemb_supported(int D);
void g4_vision_posemb_add(float *h, const uint16_t *table, int table_rows, const int32_t *pos_xy,
                          int N, int D, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
