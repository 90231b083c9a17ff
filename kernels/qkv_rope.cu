// qkv_rope.cu: q/k/v per-head RMSNorm + RoPE (1-D split-half, with zero frequencies as identity
// for Gemma's proportional RoPE; or the vision tower's 2-D axial RoPE) + KV-cache store.
//
// Oracles: ref_rmsnorm (group = hd), ref_rope, ref_rope_2d. Test: tests/test_cuda_ops.c --op
// qkv_rope; bench: --filter qkv_rope. One CTA (8 warps) per token; each warp takes one head
// vector at a time (the n_heads q heads, then the n_kv k heads, then the n_kv v heads). Lane l
// holds E = hd/64 consecutive rotation pairs: the 2E elements a = [lE, lE + E) and their
// partners b = a + hd/2 (1-D) or, for 2-D, the pairs of one axis part (a and a + hd/4 inside
// part a / (hd/2)), so each rotation is done in registers after one warp reduction for the
// norm. Angle = float(pos) * inv_freq[j] in fp32 and precise sincosf, as the reference.
// Launched with programmatic dependent launch (kernels/pdl.cuh): above the wait only L2
// prefetches of the norm weights and the RoPE frequencies.
#include "kernels/qkv_rope.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"
#include "kernels/pdl.cuh"

using namespace g4k;

namespace {

constexpr int QKV_WARPS = 8;

template <int E> __global__ void __launch_bounds__(32 * QKV_WARPS) qkv_kernel(const g4_qkv_args a) {
    // Immutable tables, each prefetched only where the body below reads it.
    g4_prefetch_l2_bytes(a.q_w, a.q_w ? (size_t)a.hd * 2 : 0);
    g4_prefetch_l2_bytes(a.k_w, a.k && a.k_w ? (size_t)a.hd * 2 : 0);
    g4_prefetch_l2_bytes(a.inv_freq, a.inv_freq ? (size_t)a.hd / (a.rope_2d ? 4 : 2) * 4 : 0);
    g4_pdl_wait();
    g4_pdl_trigger();
    const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int hd = a.hd, half = hd / 2, quarter = hd / 4;
    // The caches k and v go to: one for every token, or token t's own (the row-batched op).
    uint16_t *kdst = a.kcache, *vdst = a.vcache;
    int cap = a.capacity;
    if (a.kc_tab) {
        kdst = reinterpret_cast<uint16_t *>(a.kc_tab[t]);
        vdst = reinterpret_cast<uint16_t *>(a.vc_tab[t]);
        cap = a.cap_tab[t];
    }
    const int n_vec = a.n_heads + (a.k ? 2 * a.n_kv : 0);
    for (int hv = warp; hv < n_vec; hv += QKV_WARPS) {
        // which vector: 0 = q, 1 = k, 2 = v
        const int kind = hv < a.n_heads ? 0 : hv < a.n_heads + a.n_kv ? 1 : 2;
        const int head = kind == 0 ? hv : kind == 1 ? hv - a.n_heads : hv - a.n_heads - a.n_kv;
        const int width = (kind == 0 ? a.n_heads : a.n_kv) * hd;
        uint16_t *src = (kind == 0   ? a.q
                         : kind == 1 ? a.k
                                     : a.v) +
                        (size_t)t * width + (size_t)head * hd;
        // element offsets of this lane's pairs: a_off[i], a_off[i] + bdist
        const int p0 = lane * E;                       // first pair index (of hd/2 pairs)
        const int part = a.rope_2d ? p0 / quarter : 0; // 2-D: which axis
        const int j0 = a.rope_2d ? p0 % quarter : p0;  // frequency index of the first pair
        const int off_a = a.rope_2d ? part * half + j0 : j0;
        const int bdist = a.rope_2d ? quarter : half;
        float xa[E], xb[E];
#pragma unroll
        for (int i = 0; i < E; i++)
            xa[i] = h2f(src[off_a + i]), xb[i] = h2f(src[off_a + bdist + i]);
        const uint16_t *w = kind == 0 ? a.q_w : kind == 1 ? a.k_w : nullptr;
        const bool norm = kind == 2 ? a.v_norm != 0 : w != nullptr;
        if (norm) {
            float ss = 0.0f;
#pragma unroll
            for (int i = 0; i < E; i++) ss += xa[i] * xa[i] + xb[i] * xb[i];
            const float inv = rsqrtf(warp_sum(ss) / (float)hd + a.eps);
#pragma unroll
            for (int i = 0; i < E; i++) {
                xa[i] *= inv * (w ? h2f(w[off_a + i]) : 1.0f);
                xb[i] *= inv * (w ? h2f(w[off_a + bdist + i]) : 1.0f);
            }
        }
        if (kind != 2 && a.inv_freq) {
            const float p = (float)(a.rope_2d ? a.pos[2 * t + part] : a.pos[t]);
#pragma unroll
            for (int i = 0; i < E; i++) {
                float s, c;
                sincosf(p * a.inv_freq[j0 + i], &s, &c);
                const float x0 = xa[i], x1 = xb[i];
                xa[i] = x0 * c - x1 * s;
                xb[i] = x1 * c + x0 * s;
            }
        }
        uint16_t *dst = src;
        if (kind != 0 && kdst) {
            const int row = a.pos[t];
            if (row < 0 || row >= cap) continue; // a bad position never writes outside
            dst = (kind == 1 ? kdst : vdst) + (size_t)row * a.n_kv * hd + (size_t)head * hd;
        }
#pragma unroll
        for (int i = 0; i < E; i++)
            dst[off_a + i] = f2h(xa[i]), dst[off_a + bdist + i] = f2h(xb[i]);
    }
}

template <int E> void qkv_launch(const g4_qkv_args &a, cudaStream_t stream) {
    g4_pdl_launch(qkv_kernel<E>, dim3(a.T), dim3(32 * QKV_WARPS), 0, stream, a);
}

} // namespace

extern "C" const char *g4_qkv_rope_supported(int n_heads, int hd) {
    if (n_heads < 1) return "at least one head (qkv_rope.cu)";
    if (hd != 64 && hd != 128 && hd != 256 && hd != 512)
        return "head_dim 64, 128, 256 or 512 (qkv_rope.cu)";
    return NULL;
}

extern "C" void g4_qkv_norm_rope(const g4_qkv_args *a, cudaStream_t stream) {
    const char *op = "g4_qkv_norm_rope";
    G4K_REQUIRE(a && a->q && a->T >= 0, op);
    G4K_SUPPORTED(g4_qkv_rope_supported(a->n_heads, a->hd), op);
    G4K_REQUIRE((a->k == nullptr) == (a->v == nullptr), op);
    G4K_REQUIRE(!a->k || a->n_kv > 0, op);
    G4K_REQUIRE((a->kcache == nullptr) == (a->vcache == nullptr), op);
    G4K_REQUIRE(!a->kcache || (a->k && !a->rope_2d && a->capacity > 0), op);
    G4K_REQUIRE((a->kc_tab == nullptr) == (a->vc_tab == nullptr), op);
    G4K_REQUIRE(!a->kc_tab || (a->k && !a->kcache && !a->rope_2d && a->cap_tab), op);
    G4K_REQUIRE(!a->inv_freq || a->pos, op);
    if (a->T == 0) return;
    switch (a->hd / 64) {
    case 1:
        qkv_launch<1>(*a, stream);
        break;
    case 2:
        qkv_launch<2>(*a, stream);
        break;
    case 4:
        qkv_launch<4>(*a, stream);
        break;
    case 8:
        qkv_launch<8>(*a, stream);
        break;
    default:
        G4K_REQUIRE(!"hd is 64, 128, 256 or 512", op);
    }
}
