// qkv_vec.cuh: one head vector's RMSNorm + RoPE by one warp, the body of the head preparation
// (ops.h qkv_prep). Shared by qkv_rope.cu (the qkv_prep launch) and attention_decode.cu (the
// same preparation in the decode attention's prologue, ops.h qkv_attention), so the two produce
// the same fp16 bits. Internal header (device code).
// defines: g4k::qkv_vec.
#pragma once

#include <math.h>
#include <stdint.h>

#include "kernels/common.cuh"

namespace g4k {

// dst[0..hd) = rope(rmsnorm_hd(src) * w) of one head (fp16 in, fp16 out; dst may be src), by
// the 32 lanes of one warp, hd = 64 E. Lane l holds E consecutive rotation pairs: elements a =
// [lE, lE + E) and their partners a + hd/2 (1-D) or, for rope_2d, the pairs of one axis part (a
// and a + hd/4 inside part a / (hd/2)). norm: with weight w (NULL: no weight); rope: when
// inv_freq is set, angle float(pos[part]) * inv_freq[j] (pos[0] for 1-D) in fp32 with precise
// sincosf, as the reference.
template <int E>
__device__ __forceinline__ void qkv_vec(const uint16_t *src, uint16_t *dst, const uint16_t *w,
                                        bool norm, const int32_t *pos, const float *inv_freq,
                                        int rope_2d, int hd, float eps, int lane) {
    const int half = hd / 2, quarter = hd / 4;
    // element offsets of this lane's pairs: off_a + i, off_a + bdist + i
    const int p0 = lane * E;                     // first pair index (of hd/2 pairs)
    const int part = rope_2d ? p0 / quarter : 0; // 2-D: which axis
    const int j0 = rope_2d ? p0 % quarter : p0;  // frequency index of the first pair
    const int off_a = rope_2d ? part * half + j0 : j0;
    const int bdist = rope_2d ? quarter : half;
    float xa[E], xb[E];
#pragma unroll
    for (int i = 0; i < E; i++) xa[i] = h2f(src[off_a + i]), xb[i] = h2f(src[off_a + bdist + i]);
    if (norm) {
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < E; i++) ss += xa[i] * xa[i] + xb[i] * xb[i];
        const float inv = rsqrtf(warp_sum(ss) / (float)hd + eps);
#pragma unroll
        for (int i = 0; i < E; i++) {
            xa[i] *= inv * (w ? h2f(w[off_a + i]) : 1.0f);
            xb[i] *= inv * (w ? h2f(w[off_a + bdist + i]) : 1.0f);
        }
    }
    if (inv_freq) {
        const float p = (float)pos[part];
#pragma unroll
        for (int i = 0; i < E; i++) {
            float s, c;
            sincosf(p * inv_freq[j0 + i], &s, &c);
            const float x0 = xa[i], x1 = xb[i];
            xa[i] = x0 * c - x1 * s;
            xb[i] = x1 * c + x0 * s;
        }
    }
#pragma unroll
    for (int i = 0; i < E; i++) dst[off_a + i] = f2h(xa[i]), dst[off_a + bdist + i] = f2h(xb[i]);
}

} // namespace g4k
