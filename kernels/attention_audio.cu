// attention_audio.cu: the audio tower's attention (ref_audio_attention on the GPU).
//
// Each (frame t, head h) attends to at most `band` (12) keys, so this is a gather-and-reduce,
// not a matrix product: one warp per (t, h), one CTA per frame (n_heads warps). Lane l holds
// hd/32 consecutive dims of the scaled query; for each of the frame's HF context entries the
// warp forms q'.(k' + rel[t - u]) with a shuffle reduction, then an online softmax and the
// weighted sum of v (all fp32). A frame with no visible key gets HF's uniform mean over its
// block context (see kernels/ref/attention_audio.c). Memory: q, k, v read once from DRAM and
// ~12 times from L1/L2; the op is tiny (T <= 750 frames for 30 s of audio).
// Test: tests/test_cuda_attention.c --op attn_audio; bench: --filter attn_audio.
#include "kernels/attention_audio.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"

using namespace g4k;

namespace {

struct AudParams {
    uint16_t *out;
    const uint16_t *q, *k, *v, *rel;
    const float *pds;
    const uint8_t *valid;
    int T, n_heads, hd, chunk, band;
    float cap, invalid_logit, q_scale, k_scale;
};

template <int DPL> __global__ void aud_kernel(const AudParams p) {
    const int t = blockIdx.x, h = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int w = p.n_heads * p.hd, d0 = h * p.hd + lane * DPL;
    float qs[DPL], acc[DPL];
#pragma unroll
    for (int e = 0; e < DPL; e++) {
        const float s = p.pds[lane * DPL + e];
        const float softplus = s > 20.0f ? s : log1pf(expf(s)); // torch's threshold 20
        qs[e] = h2f(p.q[(size_t)t * w + d0 + e]) * p.q_scale * softplus;
        acc[e] = 0.0f;
    }
    // HF's computation over the block context: masked entries take the logit invalid_logit
    // (-1e9: weight exactly 0 once any entry is visible; all masked: uniform), entries outside
    // [0, T) have zero values.
    const int ctx = p.chunk + p.band, u0 = (t / p.chunk) * p.chunk - p.band;
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j < ctx; j++) {
        const int u = u0 + j, dist = t - u;
        const bool inside = u >= 0 && u < p.T;
        float z = p.invalid_logit;
        if (inside && dist >= 0 && dist < p.band && (!p.valid || p.valid[u])) {
            float ac = 0.0f, bd = 0.0f;
#pragma unroll
            for (int e = 0; e < DPL; e++) {
                ac += qs[e] * (h2f(p.k[(size_t)u * w + d0 + e]) * p.k_scale);
                bd += qs[e] * h2f(p.rel[(size_t)dist * w + d0 + e]);
            }
            ac = warp_sum(ac), bd = warp_sum(bd);
            z = p.cap * tanhf((ac + bd) / p.cap);
        }
        const float m_new = fmaxf(m, z), alpha = expf(m - m_new), pz = expf(z - m_new);
        l = l * alpha + pz;
#pragma unroll
        for (int e = 0; e < DPL; e++)
            acc[e] = acc[e] * alpha + (inside ? pz * h2f(p.v[(size_t)u * w + d0 + e]) : 0.0f);
        m = m_new;
    }
#pragma unroll
    for (int e = 0; e < DPL; e++) p.out[(size_t)t * w + d0 + e] = f2h(acc[e] / l);
}

template <int DPL> void aud_launch(const AudParams &p, cudaStream_t stream) {
    aud_kernel<DPL><<<p.T, 32 * p.n_heads, 0, stream>>>(p);
    G4_CUDA_LAUNCH_CHECK();
}

} // namespace

extern "C" void g4_attn_audio(uint16_t *out, const uint16_t *q, const uint16_t *k,
                              const uint16_t *v, const uint16_t *rel, const float *per_dim_scale,
                              const uint8_t *valid, int T, int n_heads, int hd, int chunk, int band,
                              float logit_cap, float invalid_logit, cudaStream_t stream) {
    const char *op = "g4_attn_audio";
    G4K_REQUIRE(T >= 0 && n_heads >= 1 && n_heads <= 32 && hd % 32 == 0 && hd <= 256, op);
    G4K_REQUIRE(chunk >= 1 && band >= 1 && logit_cap > 0, op);
    if (T == 0) return;
    AudParams p = {};
    p.out = out, p.q = q, p.k = k, p.v = v, p.rel = rel, p.pds = per_dim_scale, p.valid = valid;
    p.T = T, p.n_heads = n_heads, p.hd = hd, p.chunk = chunk, p.band = band;
    p.cap = logit_cap, p.invalid_logit = invalid_logit;
    p.q_scale = (float)(pow((double)hd, -0.5) / log(2.0));
    p.k_scale = (float)(log(1.0 + exp(1.0)) / log(2.0));
    switch (hd / 32) {
    case 1:
        aud_launch<1>(p, stream);
        break;
    case 2:
        aud_launch<2>(p, stream);
        break;
    case 4:
        aud_launch<4>(p, stream);
        break;
    case 8:
        aud_launch<8>(p, stream);
        break;
    default:
        G4K_REQUIRE(!"hd is 32, 64, 128 or 256", op);
    }
}
