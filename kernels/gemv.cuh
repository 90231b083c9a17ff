// gemv.cuh: the decode GEMV (M = 1..8 tokens) for fp16 and Q4 weights, with the ops that follow
// a decoder projection fused into its epilogue (kernels/ops.h linear_qkv_prep,
// linear_add_rmsnorm_next, linear_gelu_mul_by, and the plain linear / linear_gelu_mul):
//
//   g4_gemv             y (epi) = x @ W (+ bias)                        one launch
//   g4_gemv_glu         y = gelu_tanh(x @ Wg) * (x @ Wu)                 one launch
//   g4_gemv_gelu_mul    y = gelu_tanh(x @ W) * b (the per-layer-input slice)
//   g4_gemv_add_rmsnorm h = (h + rmsnorm(x @ W) * norm_w) * scale, next = rmsnorm(h) * next_w
//                       (or fp16(h)): the post-norm residual add over the whole output row
//   g4_gemv_qkv         q = rope(rmsnorm_hd(x @ Wq) * q_w), and for a layer owning its KV the
//                       k / v rows rope(rmsnorm_hd(x @ Wk) * k_w) / rmsnorm_hd(x @ Wv) stored
//                       in the caches at pos[m]; Wq, Wk, Wv are three weight segments of one
//                       launch (never concatenated in memory)
//
// Inputs: x fp16 [M, K] row-major (16-byte aligned); weights g4_gemv_w: fp16 [K, N] as the
// package stores it ([in, out]) or a Q4 weight repacked by g4_q4_repack (kernels/q4_pack.h:
// the same packed layout the prefill GEMM reads). Products are exact and sums fp32: fp16
// weights as they are; Q4 dequantized to (q - zp) * scale rounded once to fp16 (as
// gemm_q4.cuh), on mma.sync m16n8k16.
//
// The row norm and the head norm need every output of a row (N) or of a head (hd): each block
// writes its fp32 outputs to the workspace and the block that arrives last at the group's
// counter runs the group's tail, then resets the counter. No block waits for another (no
// spinning, so nothing depends on blocks being co-resident) and the result does not depend on
// the order the blocks ran in. Workspace: >= g4_gemv_workspace(M, N) bytes of device memory,
// zeroed once when allocated (cudaMemset); every launch leaves its counters zero again, so
// launches may be replayed from a CUDA graph. One workspace serves consecutive launches on one
// stream (each waits for the previous to complete), not launches on two streams at once.
//
// Every entry returns G4_OK, or G4_EUSER with a one-line message (nothing launched) for a shape,
// alignment or argument it does not take; g4_gemv_supported answers the same question without
// launching (the CUDA backend's choice between the fused kernel and the composition of ops).
// Launched with programmatic dependent launch (kernels/pdl.cuh).
// Test: tests/test_cuda_gemv.c, test_cuda_gemm.c (ops gv_*); bench: g4cu bench --kernels --filter
// gv_.
#ifndef G4_GEMV_CUH
#define G4_GEMV_CUH

#include <stddef.h>
#include <stdint.h>

#include "kernels/gemm_f16.cuh"
#include "kernels/gemm_q4.cuh"

#ifdef __cplusplus
extern "C" {
#endif

// A GEMV weight: exactly one of f16 / q4 is set.
typedef struct {
    const void *f16;        // fp16 [k, n] row-major, 16-byte aligned, or NULL
    const g4_q4_weight *q4; // repacked Q4 weight of n outputs and k inputs, or NULL
    int n, k;               // outputs (N), inputs (K)
} g4_gemv_w;

// The epilogue family, for g4_gemv_supported.
typedef enum {
    G4_GEMV_STORE = 0,    // g4_gemv
    G4_GEMV_GLU = 1,      // g4_gemv_glu
    G4_GEMV_GELU_MUL = 2, // g4_gemv_gelu_mul
    G4_GEMV_ADD_NORM = 3, // g4_gemv_add_rmsnorm (the row is the group)
    G4_GEMV_QKV = 4,      // g4_gemv_qkv (a head of hd outputs is the group)
} g4_gemv_kind;

// G4_OK when a launch of `kind` with M tokens on the n_w weights w is supported (one weight; for
// G4_GEMV_GLU the gate and up weights, n_w = 2; for G4_GEMV_QKV q, or q, k, v with hd the head
// width); else G4_EUSER naming the reason. The entries make the same checks.
int g4_gemv_supported(g4_gemv_kind kind, int M, const g4_gemv_w *w, int n_w, int hd);

// Bytes of workspace g4_gemv_add_rmsnorm / g4_gemv_qkv need for M tokens and N outputs in all.
size_t g4_gemv_workspace(int M, int N);

// y[M, N] (epi, as g4_gemm_f16) = x[M, K] @ W (+ bias fp16 [N]).
int g4_gemv(void *y, const void *x, const g4_gemv_w *w, const void *bias, int M, g4_gemm_epi epi,
            cudaStream_t stream);

// y fp16 [M, N] = gelu_tanh(x @ Wg) * (x @ Wu); both kept in fp32 until the one rounding.
int g4_gemv_glu(void *y, const void *x, const g4_gemv_w *wg, const g4_gemv_w *wu, int M,
                cudaStream_t stream);

// y fp16 [M, N] = gelu_tanh(x @ W) * b[m * ldb + n], b fp16 (ldb >= N, a multiple of 8).
int g4_gemv_gelu_mul(void *y, const void *x, const g4_gemv_w *w, const void *b, int ldb, int M,
                     cudaStream_t stream);

// The arguments of add_rmsnorm_next (kernels/ops.h) after the projection o = x @ W [M, N].
typedef struct {
    float *h;           // fp32 [M, N] residual stream, updated in place
    const void *norm_w; // fp16 [N] post-norm weight, or NULL (no weight)
    const void *scale;  // device fp16 [1] (the layer scalar), or NULL for 1
    float eps;
    void *next; // fp16 [M, N]: rmsnorm(h) * next_w when next_norm, else fp16(h)
    int next_norm;
    const void *next_w; // fp16 [N] or NULL
} g4_gemv_norm;

int g4_gemv_add_rmsnorm(const g4_gemv_norm *a, const void *x, const g4_gemv_w *w, int M,
                        void *workspace, size_t workspace_bytes, cudaStream_t stream);

// The arguments of qkv_prep (kernels/ops.h) after the projections.
typedef struct {
    void *q;               // fp16 [M, n_heads * hd]
    void *kcache, *vcache; // fp16 [capacity, n_kv * hd], or both NULL (KV-shared layer)
    int capacity;
    const void *q_w, *k_w; // fp16 [hd] norm weights, or NULL (normed without a weight)
    const int32_t *pos;    // device I32 [M]: the token positions (RoPE angle, cache row)
    const float *inv_freq; // device fp32 [hd / 2] (a zero frequency leaves its pair), or NULL
    int n_heads, n_kv, hd;
    float eps;
} g4_gemv_qkv_args;

// w: {Wq} (n_w = 1, q only) or {Wq, Wk, Wv} (n_w = 3, caches set) of n_heads * hd, n_kv * hd,
// n_kv * hd outputs. A cache row outside [0, capacity) is never written.
int g4_gemv_qkv(const g4_gemv_qkv_args *a, const void *x, const g4_gemv_w *w, int n_w, int M,
                void *workspace, size_t workspace_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
