// qkv_rope.cuh: the attention input stage in one launch: per-head RMSNorms of q, k, v, RoPE on q
// and k, and the KV-cache store. See qkv_rope.cu.
#ifndef G4_QKV_ROPE_CUH
#define G4_QKV_ROPE_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint16_t *q;               // [T, n_heads * hd] fp16, normalised + rotated in place
    uint16_t *k, *v;           // [T, n_kv * hd] fp16, or both NULL (KV-shared layer: q only)
    uint16_t *kcache, *vcache; // [capacity, n_kv * hd] fp16: k, v go to rows pos[t] (and k, v
                               // stay as they were); NULL: k, v are written in place
    const uint16_t *q_w, *k_w; // fp16 [hd] RMSNorm weights (NULL: no norm on q / on k)
    int v_norm;                // 1: v = rmsnorm(v) without scale (Gemma-4), 0: v as is
    const int32_t *pos;        // device I32 [T] (rope_2d: [T, 2] = (x, y))
    const float *inv_freq;     // device fp32 [hd / 2] (rope_2d: [hd / 4]); zeros rotate nothing
                               // (Gemma's proportional RoPE); NULL: no RoPE
    int rope_2d;               // 1: the vision tower's axial 2-D RoPE (ref_rope_2d)
    int T, n_heads, n_kv, hd, capacity;
    float eps;
    // Per-row caches (the row-batched op, ops.h qkv_prep_rows): when kc_tab is set (with k, and
    // kcache NULL), token t's k and v go to row pos[t] of the caches at kc_tab[t] / vc_tab[t]
    // (device tables of T pointers) of cap_tab[t] rows (device I32 [T]); a position outside
    // [0, cap_tab[t]) stores nothing. NULL (zeroed args): the one cache above.
    const uint64_t *kc_tab, *vc_tab;
    const int32_t *cap_tab;
} g4_qkv_args;

// For each token t: q = rope(rmsnorm(q) * q_w); k = rope(rmsnorm(k) * k_w); v = rmsnorm(v);
// k, v stored to the caches at row pos[t] when kcache is set (1-D RoPE only; a position outside
// [0, capacity) stores nothing). fp32 math, one
// fp16 rounding per output. hd: a multiple of 64, <= 512. One CTA per token.
// NULL when the kernel takes these heads and head_dim (text q/k/v and the vision 2-D RoPE),
// else what it takes (the launcher asserts it, the load checks refuse with it).
const char *g4_qkv_rope_supported(int n_heads, int hd);
void g4_qkv_norm_rope(const g4_qkv_args *a, cudaStream_t stream);
// One CTA a head vector in one-token launches (G4_QKV_PREP_CTAS=1's form): 1 on, 0 off (8 warps
// a CTA), -1 as G4_QKV_PREP_CTAS says (tests). The same bits either way.
void g4_qkv_set_prep_ctas(int on);

#ifdef __cplusplus
}
#endif

#endif
