// vision_pool.cuh: the vision tower's k x k position pooling to soft tokens (spec 4.5). See
// vision_pool.cu.
#ifndef G4_VISION_POOL_CUH
#define G4_VISION_POOL_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The op ref_vision_pool defines, on the GPU: x fp32 [N, D] (the encoder output), pos_xy device
// I32 [N, 2] (padding patches (-1, -1)), out fp32 [n_bins, D] (every row written; bins without
// a patch are 0), used device uint8 [n_bins] or NULL. Deterministic: each bin sums its patches
// in patch order. Patches whose bin is >= n_bins are skipped (the host that made the positions
// checks them; ref_vision_pool reports them); a bin keeps at most 1024 patches (a grid gives
// it k * k). D % 4 == 0.
// NULL when the kernel takes rows of D columns and k x k bins, else what it takes.
const char *g4_vision_pool_supported(int D, int k);
void g4_vision_pool(float *out, uint8_t *used, const float *x, const int32_t *pos_xy, int N, int D,
                    int k, int n_bins, float scale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
