// qkv_rope.cu: q/k/v per-head RMSNorm + RoPE (1-D split-half, with zero frequencies as identity
// for Gemma's proportional RoPE; or the vision tower's 2-D axial RoPE) + KV-cache store.
//
// Oracles: ref_rmsnorm (group = hd), ref_rope, ref_rope_2d. Test: tests/test_cuda_ops.c --op
// qkv_rope; bench: --filter qkv_rope. A token's head vectors (the n_heads q heads, then the n_kv k
// heads, then the n_kv v heads) one warp each, 8 warps a CTA, grid (token, vector group)
// (qkv_vec.cuh); with G4_QKV_PREP_CTAS=1 a one-token launch (the decode step) puts each vector
// in a CTA of its own (E2B: 10 CTAs of one warp instead of 2 of 8: each on its own SM, so no
// warp shares an SM's issue slots and L1 with another's norm and RoPE; the same warp code, so
// the same bits). Lane l holds E = hd/64 consecutive rotation pairs: the 2E elements a = [lE, lE +
// E) and their partners b = a + hd/2 (1-D) or, for 2-D, the pairs of one axis part (a and a + hd/4
// inside part a / (hd/2)), so each rotation is done in registers after one warp reduction for the
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
#include "kernels/qkv_vec.cuh"

using namespace g4k;

namespace {

constexpr int QKV_WARPS = 8;

// wpc: the vectors (warps) a CTA, QKV_WARPS or 1 (G4_QKV_PREP_CTAS)
template <int E>
__global__ void __launch_bounds__(32 * QKV_WARPS) qkv_kernel(const g4_qkv_args a, int wpc) {
    // Immutable tables, each prefetched only where the body below reads it.
    g4_prefetch_l2_bytes(a.q_w, a.q_w ? (size_t)a.hd * 2 : 0);
    g4_prefetch_l2_bytes(a.k_w, a.k && a.k_w ? (size_t)a.hd * 2 : 0);
    g4_prefetch_l2_bytes(a.inv_freq, a.inv_freq ? (size_t)a.hd / (a.rope_2d ? 4 : 2) * 4 : 0);
    g4_pdl_wait();
    g4_pdl_trigger();
    const int t = blockIdx.x, lane = threadIdx.x & 31, hd = a.hd;
    // The caches k and v go to: one for every token, or token t's own (the row-batched op).
    uint16_t *kdst = a.kcache, *vdst = a.vcache;
    int cap = a.capacity;
    if (a.kc_tab) {
        kdst = reinterpret_cast<uint16_t *>(a.kc_tab[t]);
        vdst = reinterpret_cast<uint16_t *>(a.vc_tab[t]);
        cap = a.cap_tab[t];
    }
    const int n_vec = a.n_heads + (a.k ? 2 * a.n_kv : 0);
    // each vector its own warp (grid.y spreads them over CTAs): one pass, no warp does two
    const int hv = blockIdx.y * wpc + (threadIdx.x >> 5);
    if (hv >= n_vec) return;
    // which vector: 0 = q, 1 = k, 2 = v
    const int kind = hv < a.n_heads ? 0 : hv < a.n_heads + a.n_kv ? 1 : 2;
    const int head = kind == 0 ? hv : kind == 1 ? hv - a.n_heads : hv - a.n_heads - a.n_kv;
    const int width = (kind == 0 ? a.n_heads : a.n_kv) * hd;
    uint16_t *src = (kind == 0   ? a.q
                     : kind == 1 ? a.k
                                 : a.v) +
                    (size_t)t * width + (size_t)head * hd;
    uint16_t *dst = src;
    if (kind != 0 && kdst) {
        const int row = a.pos[t];
        if (row < 0 || row >= cap) return; // a bad position never writes outside
        dst = (kind == 1 ? kdst : vdst) + (size_t)row * a.n_kv * hd + (size_t)head * hd;
    }
    const uint16_t *w = kind == 0 ? a.q_w : kind == 1 ? a.k_w : nullptr;
    const bool norm = kind == 2 ? a.v_norm != 0 : w != nullptr;
    qkv_vec<E>(src, dst, w, norm, a.pos + (a.rope_2d ? 2 * t : t), kind != 2 ? a.inv_freq : nullptr,
               a.rope_2d, hd, a.eps, lane);
}

// One CTA a head vector for one-token launches: forced by tests (g4_qkv_set_prep_ctas), else
// G4_QKV_PREP_CTAS=1 (read once; default off until measured). Longer launches (prefill, the
// row-batched step) keep 8 warps a CTA: thousands of one-warp CTAs would cap an SM at 32 warps.
int g_qkv_ctas_force = -1;
int qkv_prep_ctas() {
    if (g_qkv_ctas_force >= 0) return g_qkv_ctas_force;
    static int cache = -1;
    return g4_cuda_env_is(&cache, "G4_QKV_PREP_CTAS", "1");
}

template <int E> void qkv_launch(const g4_qkv_args &a, cudaStream_t stream) {
    const int n_vec = a.n_heads + (a.k ? 2 * a.n_kv : 0);
    const int wpc = a.T == 1 && qkv_prep_ctas() ? 1 : QKV_WARPS;
    g4_pdl_launch(qkv_kernel<E>, dim3(a.T, (n_vec + wpc - 1) / wpc), dim3(32 * wpc), 0, stream, a,
                  wpc);
}

} // namespace

extern "C" void g4_qkv_set_prep_ctas(int on) {
    g_qkv_ctas_force = on < 0 ? -1 : on ? 1 : 0;
}

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
