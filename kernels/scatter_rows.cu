// scatter_rows.cu: dst[t] = src[idx[t]] where idx[t] >= 0 (oracle: ref_scatter_rows; test:
// tests/test_cuda_ops.c --op scatter_rows). One CTA per destination row; a row with idx -1
// returns at once. Not on the decode path (prefill with media, the audio tower's last step).
#include "kernels/scatter_rows.cuh"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"

namespace {

__global__ void scatter_kernel(float *dst, const float *src, int src_rows, int cols,
                               const int32_t *idx) {
    const int t = blockIdx.x, r = idx[t];
    if (r < 0 || r >= src_rows) return; // (the op's caller guarantees r < src_rows)
    const float *s = src + (size_t)r * cols;
    float *d = dst + (size_t)t * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
}

} // namespace

extern "C" void g4_scatter_rows_f32(float *dst, int dst_rows, const float *src, int src_rows,
                                    int cols, const int32_t *idx, cudaStream_t stream) {
    G4K_REQUIRE(dst_rows >= 0 && src_rows >= 0 && cols >= 1 && dst && src && idx,
                "g4_scatter_rows_f32");
    if (dst_rows == 0) return;
    scatter_kernel<<<dst_rows, 256, 0, stream>>>(dst, src, src_rows, cols, idx);
    G4_CUDA_LAUNCH_CHECK();
}
