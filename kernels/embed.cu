// embed.cu: embedding gather x scale (oracle: ref_embed; test: tests/test_cuda_ops.c --op embed).
// One CTA per token, 16-byte vectors; reads one table row, writes one activation row.
// Launched with programmatic dependent launch (kernels/pdl.cuh): nothing above the wait (the
// row to read depends on the ids, which are read after it).
#include "kernels/embed.cuh"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"
#include "kernels/pdl.cuh"

using namespace g4k;

namespace {

template <class Y>
__global__ void embed_kernel(Y *y, const uint16_t *table, int rows, int cols, const int32_t *ids,
                             float scale) {
    g4_pdl_wait();
    g4_pdl_trigger();
    const int t = blockIdx.x, id = ids[t];
    const bool ok = id >= 0 && id < rows;
    const uint16_t *src = table + (size_t)(ok ? id : 0) * cols;
    for (int c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
        const uint4 u = *reinterpret_cast<const uint4 *>(src + c);
        const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float2 f = __half22float2(h[e]);
            const float nan = __int_as_float(0x7fc00000);
            st_act(y, (size_t)t * cols + c + 2 * e, ok ? f.x * scale : nan);
            st_act(y, (size_t)t * cols + c + 2 * e + 1, ok ? f.y * scale : nan);
        }
    }
}

} // namespace

extern "C" const char *g4_embed_supported(int cols) {
    if (cols < 8 || cols % 8) return "rows of a positive multiple of 8 columns (embed.cu)";
    return NULL;
}

namespace {

template <class Y>
void embed_launch(Y *y, const uint16_t *table, int rows, int cols, const int32_t *ids, int T,
                  float scale, cudaStream_t stream, const char *op) {
    G4K_SUPPORTED(g4_embed_supported(cols), op);
    G4K_REQUIRE(T >= 0 && rows > 0 && ((uintptr_t)table & 15) == 0, op);
    if (T == 0) return;
    int threads = (cols / 8 + 31) / 32 * 32;
    threads = threads > 256 ? 256 : threads;
    g4_pdl_launch(embed_kernel<Y>, dim3(T), dim3(threads), 0, stream, y, table, rows, cols, ids,
                  scale);
}

} // namespace

extern "C" void g4_embed_f32(float *y, const uint16_t *table, int rows, int cols,
                             const int32_t *ids, int T, float scale, cudaStream_t stream) {
    embed_launch(y, table, rows, cols, ids, T, scale, stream, "g4_embed_f32");
}

extern "C" void g4_embed_f16(uint16_t *y, const uint16_t *table, int rows, int cols,
                             const int32_t *ids, int T, float scale, cudaStream_t stream) {
    embed_launch(y, table, rows, cols, ids, T, scale, stream, "g4_embed_f16");
}
