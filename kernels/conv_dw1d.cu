// conv_dw1d.cu: GLU + causal depthwise conv1d + clip + RMSNorm + SiLU (oracles: ref_glu,
// ref_dwconv1d_causal, ref_clamp, ref_rmsnorm, ref_silu; test: tests/test_cuda_conv.c --op
// dwconv; bench: --filter dwconv, against cudnnConvolutionForward with groups = C).
//
// One CTA per time step t, each thread 8 consecutive channels (16-byte loads): the thread
// recomputes the GLU of the K input rows t-K+1..t for its channels (K x the sigmoids, no
// intermediate buffer), convolves, clips, and the CTA reduces the sum of squares for the norm.
// DRAM traffic: x read once (the K-fold re-reads hit L2), y written once.
#include "kernels/conv_dw1d.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"

using namespace g4k;

namespace {

constexpr int DW_MAX_K = 8, DW_THREADS = 256;

__device__ __forceinline__ void dw_load8(const uint16_t *p, float v[8]) {
    const uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __half22float2(h[i]);
        v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
}

__global__ void __launch_bounds__(DW_THREADS)
    dw_kernel(uint16_t *y, const uint16_t *x, const uint16_t *w, int T, int C, int K, int glu,
              float clip, const uint16_t *norm_w, float eps, int silu) {
    __shared__ float scratch[33];
    const int t = blockIdx.x, c0 = threadIdx.x * 8;
    const bool active = c0 < C;
    const int xw = glu ? 2 * C : C;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (active) {
        for (int i = 0; i < K; i++) {
            const int src = t - (K - 1) + i;
            if (src < 0) continue;
            float a[8];
            dw_load8(x + (size_t)src * xw + c0, a);
            if (glu) {
                float gt[8];
                dw_load8(x + (size_t)src * xw + C + c0, gt);
#pragma unroll
                for (int e = 0; e < 8; e++) a[e] *= 1.0f / (1.0f + expf(-gt[e]));
            }
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] += h2f(w[(size_t)(c0 + e) * K + i]) * a[e];
        }
        if (clip > 0.0f)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] = fminf(fmaxf(acc[e], -clip), clip);
    }
    float inv = 1.0f;
    if (norm_w) {
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) ss += active ? acc[e] * acc[e] : 0.0f;
        inv = rsqrtf(block_sum(ss, scratch) / (float)C + eps);
    }
    if (!active) return;
    uint4 u;
    uint32_t *pu = reinterpret_cast<uint32_t *>(&u);
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
        float v0 = acc[e], v1 = acc[e + 1];
        if (norm_w) v0 *= inv * h2f(norm_w[c0 + e]), v1 *= inv * h2f(norm_w[c0 + e + 1]);
        if (silu) v0 = v0 / (1.0f + expf(-v0)), v1 = v1 / (1.0f + expf(-v1));
        pu[e / 2] = pack_half2(v0, v1);
    }
    *reinterpret_cast<uint4 *>(y + (size_t)t * C + c0) = u;
}

} // namespace

extern "C" const char *g4_dwconv1d_supported(int C, int K) {
    if (C < 8 || C % 8 || C > 8 * DW_THREADS || K < 1 || K > DW_MAX_K)
        return "a multiple of 8 channels up to 2048 and a kernel of 1 .. 8 taps (conv_dw1d.cu)";
    return NULL;
}

extern "C" void g4_dwconv1d(uint16_t *y, const uint16_t *x, const uint16_t *w, int T, int C, int K,
                            int glu, float clip, const uint16_t *norm_w, float eps, int silu,
                            cudaStream_t stream) {
    const char *op = "g4_dwconv1d";
    G4K_SUPPORTED(g4_dwconv1d_supported(C, K), op);
    G4K_REQUIRE(T >= 0, op);
    G4K_REQUIRE((((uintptr_t)y | (uintptr_t)x) & 15) == 0, op);
    if (T == 0) return;
    int threads = (C / 8 + 31) / 32 * 32;
    dw_kernel<<<T, threads, 0, stream>>>(y, x, w, T, C, K, glu, clip, norm_w, eps, silu);
    G4_CUDA_LAUNCH_CHECK();
}
