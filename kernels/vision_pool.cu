// vision_pool.cu: k x k mean pooling of vision patches by their (x, y) positions, times scale
// (oracle: ref_vision_pool; test: tests/test_cuda_ops.c --op vision_pool).
//
// One CTA per output bin: the CTA scans the N positions (10 KB at N = 2520, from L2) for the row
// width and for the patches of its bin, compacts their indices in patch order (ballots + a warp
// prefix), then sums those rows column by column: deterministic, no atomics.
#include "kernels/vision_pool.cuh"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"

using namespace g4k;

namespace {

constexpr int VP_THREADS = 256, VP_MAX_LIST = 1024;

__global__ void __launch_bounds__(VP_THREADS)
    vp_kernel(float *out, uint8_t *used, const float *x, const int32_t *pos, int N, int D, int k,
              float scale) {
    __shared__ int list[VP_MAX_LIST];
    __shared__ int warp_cnt[VP_THREADS / 32];
    __shared__ int s_max_x, s_count, s_any;
    const int bin = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid == 0) s_max_x = 0, s_count = 0, s_any = 0;
    __syncthreads();
    int mx = 0;
    for (int i = tid; i < N; i += VP_THREADS) mx = max(mx, pos[2 * i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) atomicMax(&s_max_x, mx);
    __syncthreads();
    const int per_row = (s_max_x + 1) / k;
    // Ordered compaction of this bin's patches (padding patches count for `used` only).
    for (int base = 0; base < N; base += VP_THREADS) {
        const int i = base + tid;
        bool mine = false, pad = false;
        if (i < N) {
            const int px = pos[2 * i], py = pos[2 * i + 1];
            const int b = max(px, 0) / k + per_row * (max(py, 0) / k);
            pad = px == -1 && py == -1;
            mine = b == bin;
        }
        if (mine) s_any = 1;
        const bool take = mine && !pad;
        const unsigned bal = __ballot_sync(0xffffffffu, take);
        if (lane == 0) warp_cnt[warp] = __popc(bal);
        __syncthreads();
        int off = s_count;
        for (int w = 0; w < warp; w++) off += warp_cnt[w];
        off += __popc(bal & ((1u << lane) - 1));
        if (take && off < VP_MAX_LIST) list[off] = i;
        __syncthreads();
        if (tid == 0) {
            int tot = 0;
            for (int w = 0; w < VP_THREADS / 32; w++) tot += warp_cnt[w];
            s_count += tot;
        }
        __syncthreads();
    }
    const int n = min(s_count, VP_MAX_LIST);
    const float f = scale / (float)(k * k);
    for (int c = tid * 4; c < D; c += VP_THREADS * 4) {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int j = 0; j < n; j++) {
            const float4 v = *reinterpret_cast<const float4 *>(x + (size_t)list[j] * D + c);
            acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
        }
        *reinterpret_cast<float4 *>(out + (size_t)bin * D + c) =
            make_float4(acc.x * f, acc.y * f, acc.z * f, acc.w * f);
    }
    if (used && tid == 0) used[bin] = (uint8_t)s_any;
}

} // namespace

extern "C" const char *g4_vision_pool_supported(int D, int k) {
    if (D < 4 || D % 4) return "rows of a positive multiple of 4 columns (vision_pool.cu)";
    if (k < 1 || k * k > VP_MAX_LIST) return "a pooling kernel of at most 32 x 32 patches (vision_pool.cu)";
    return NULL;
}

extern "C" void g4_vision_pool(float *out, uint8_t *used, const float *x, const int32_t *pos_xy,
                               int N, int D, int k, int n_bins, float scale, cudaStream_t stream) {
    const char *op = "g4_vision_pool";
    G4K_SUPPORTED(g4_vision_pool_supported(D, k), op); // a bin holds k*k patches
    G4K_REQUIRE(N >= 0 && n_bins >= 0, op);
    G4K_REQUIRE((((uintptr_t)out | (uintptr_t)x) & 15) == 0, op);
    if (n_bins == 0) return;
    vp_kernel<<<n_bins, VP_THREADS, 0, stream>>>(out, used, x, pos_xy, N, D, k, scale);
    G4_CUDA_LAUNCH_CHECK();
}
