// vision_posemb.cu: h += T[0][x] + T[1][y] per patch (oracle: ref_vision_posemb_add; test:
// tests/test_cuda_ops.c --op vision_posemb). One CTA per patch, 16-byte table loads.
#include "kernels/vision_posemb.cuh"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"

using namespace g4k;

namespace {

__global__ void posemb_kernel(float *h, const uint16_t *table, int rows, const int32_t *pos,
                              int D) {
    const int i = blockIdx.x, px = pos[2 * i], py = pos[2 * i + 1];
    if (px == -1 && py == -1) return;
    const int cx = min(max(px, 0), rows - 1), cy = min(max(py, 0), rows - 1);
    const uint16_t *tx = table + (size_t)cx * D, *ty = table + ((size_t)rows + cy) * D;
    for (int c = threadIdx.x * 8; c < D; c += blockDim.x * 8) {
        const uint4 ux = *reinterpret_cast<const uint4 *>(tx + c),
                    uy = *reinterpret_cast<const uint4 *>(ty + c);
        const __half2 *hx = reinterpret_cast<const __half2 *>(&ux),
                      *hy = reinterpret_cast<const __half2 *>(&uy);
        float *dst = h + (size_t)i * D + c;
        float4 a = *reinterpret_cast<float4 *>(dst), b = *reinterpret_cast<float4 *>(dst + 4);
        const float2 x0 = __half22float2(hx[0]), x1 = __half22float2(hx[1]),
                     x2 = __half22float2(hx[2]), x3 = __half22float2(hx[3]);
        const float2 y0 = __half22float2(hy[0]), y1 = __half22float2(hy[1]),
                     y2 = __half22float2(hy[2]), y3 = __half22float2(hy[3]);
        // HF adds the two embeddings first, then the sum to h.
        a.x += x0.x + y0.x, a.y += x0.y + y0.y, a.z += x1.x + y1.x, a.w += x1.y + y1.y;
        b.x += x2.x + y2.x, b.y += x2.y + y2.y, b.z += x3.x + y3.x, b.w += x3.y + y3.y;
        *reinterpret_cast<float4 *>(dst) = a;
        *reinterpret_cast<float4 *>(dst + 4) = b;
    }
}

} // namespace

extern "C" const char *g4_vision_posemb_supported(int D) {
    if (D < 8 || D % 8) return "rows of a positive multiple of 8 columns (vision_posemb.cu)";
    return NULL;
}

extern "C" void g4_vision_posemb_add(float *h, const uint16_t *table, int table_rows,
                                     const int32_t *pos_xy, int N, int D, cudaStream_t stream) {
    const char *op = "g4_vision_posemb_add";
    G4K_SUPPORTED(g4_vision_posemb_supported(D), op);
    G4K_REQUIRE(N >= 0 && table_rows > 0, op);
    G4K_REQUIRE((((uintptr_t)h | (uintptr_t)table) & 15) == 0, op);
    if (N == 0) return;
    int threads = (D / 8 + 31) / 32 * 32;
    threads = threads > 256 ? 256 : threads;
    posemb_kernel<<<N, threads, 0, stream>>>(h, table, table_rows, pos_xy, D);
    G4_CUDA_LAUNCH_CHECK();
}
