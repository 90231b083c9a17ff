// attention_decode.cuh: flash-decoding attention for the text decoder's decode step (one or a
// few query tokens over a long KV cache). See attention_decode.cu.
#ifndef G4_ATTENTION_DECODE_CUH
#define G4_ATTENTION_DECODE_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// NULL when the decode kernels take these heads and head_dim, else what they take (host code:
// the launcher asserts it, the CUDA backend's load check refuses a model with it).
const char *g4_attn_decode_supported(int n_heads, int n_kv, int hd);
// Bytes of device workspace g4_attn_decode needs for these sizes (the split partials); allocate
// it once with the run state. Needs a current CUDA device (the split count follows its SMs).
size_t g4_attn_decode_workspace(int T, int n_heads, int n_kv, int hd, int capacity);
// Bytes at the start of a decode attention workspace that must be zero before its first launch.
size_t g4_attn_decode_ws_header(void);
// The merge inside the split kernel: 1 on, 2 on where window == 0 only, 0 off, 3 as 2 for
// launches built for at least g4_attn_decode_long_keys() keys (auto), -1 as G4_ATTN_MERGE says
// (cluster: 1, global: 2, split: 0, unset or auto: 3; tests); and whether the last one-cache
// launch used it (1) or the two launches (0).
void g4_attn_decode_set_merge(int mode);
int g4_attn_decode_last_merge(void);
// The key count from which the auto mode merges inside (G4_ATTN_MERGE_LONG, default 1024).
int g4_attn_decode_long_keys(void);
// The keys the one-cache launches this thread enqueues next are built for (a hint: the grid
// still covers the capacity, and a captured graph keeps the form it was captured with), and the
// form class a launch built for `keys` keys takes (0: as short ranges, 1: the long-range form).
void g4_attn_decode_set_keys(int keys);
int g4_attn_decode_form(int keys);

// The same op as g4_attn_prefill (ops.h `attention`: causal, window > 0 = sliding, GQA) for
// small T (1..64; decode is T = 1): out[T, n_heads * hd] fp16 from q[T, n_heads * hd] fp16 over
// the caches kc, vc [capacity, n_kv * hd] fp16 at positions pos (device I32 [T]); hd 256 or 512.
// The KV range is read from `pos` on the device and the grid is sized for `capacity`, so the
// launch can be captured in a CUDA graph once and replayed at every position: CTAs past the
// range exit at once. Two kernels: the splits (each CTA one slice of the keys for all query
// heads of one KV head) and the log-sum-exp merge; with G4_ATTN_MERGE=cluster (or
// g4_attn_decode_set_merge(1)) one launch: the splits in clusters merge their partials
// themselves (attention_decode.cu dec_cluster_merge). workspace: >= g4_attn_decode_workspace(...)
// bytes of device memory whose first g4_attn_decode_ws_header() bytes are zero before the first
// launch on it (the merge's tickets; every launch leaves them zero); the rest needs no
// initialisation. The same holds for the row-batched op's workspace (the same header), so one
// buffer may serve both.
void g4_attn_decode(uint16_t *out, const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                    const int32_t *pos, int T, int n_heads, int n_kv, int hd, int capacity,
                    int window, float scale, void *workspace, size_t workspace_bytes,
                    cudaStream_t stream);

// The row-batched op (ops.h attention_rows: a batch decode step): out[t] = g4_attn_decode of
// token t alone (T = 1 at pos[t]) over its own caches, k_tab[t] / v_tab[t] (device tables of T
// pointers to fp16 [cap_tab[t], n_kv * hd] caches, 16-byte aligned), pos[t] < cap_tab[t].
// T 1..4096. One launch pair for every token; the grid depends on T only, so a capture per row
// count replays with new tables, positions and lengths. workspace: >=
// g4_attn_decode_rows_workspace(...) bytes.
size_t g4_attn_decode_rows_workspace(int T, int n_heads, int n_kv, int hd);
void g4_attn_decode_rows(uint16_t *out, const uint16_t *q, const uint64_t *k_tab,
                         const uint64_t *v_tab, const int32_t *cap_tab, const int32_t *pos, int T,
                         int n_heads, int n_kv, int hd, int window, float scale, void *workspace,
                         size_t workspace_bytes, cudaStream_t stream);

// The head preparation (ops.h qkv_prep) fused into the decode attention (ops.h qkv_attention):
// what the attention's query rows and the new cache rows are made from.
typedef struct {
    const uint16_t *k, *v;     // [T, n_kv * hd] fp16 raw projections; both NULL: q only
    const uint16_t *q_w, *k_w; // fp16 [hd] RMSNorm weights (NULL: no norm on q / on k)
    const float *inv_freq;     // fp32 [hd / 2], zeros rotate nothing; NULL: no RoPE
    float eps;                 // (v is normalised without a weight, as qkv_prep does)
} g4_attn_prep;

// NULL when the _prep forms take these heads (as g4_attn_decode, and at most 16 query heads a KV
// head: one CTA holds a token's rows), else what they take.
const char *g4_attn_decode_prep_supported(int n_heads, int n_kv, int hd);
// qkv_prep then g4_attn_decode for ONE token (T = 1), in one launch pair: q[1, n_heads * hd] is
// the raw projection (left as it is); every CTA prepares its query rows in its prologue, and the
// CTA whose key slice holds row pos[0] prepares k and v (when prep->k is set) and stores them
// at that row of kc, vc before reading it (pos outside [0, capacity): nothing stored, as
// qkv_prep). The same fp16 values as qkv_prep + g4_attn_decode (kernels/qkv_vec.cuh).
void g4_attn_decode_prep(uint16_t *out, const uint16_t *q, uint16_t *kc, uint16_t *vc,
                         const int32_t *pos, int n_heads, int n_kv, int hd, int capacity,
                         int window, float scale, const g4_attn_prep *prep, void *workspace,
                         size_t workspace_bytes, cudaStream_t stream);
// The row-batched form (qkv_prep_rows then g4_attn_decode_rows; each row is one token of its
// own sequence): k, v of row t go to row pos[t] of its caches (outside [0, cap_tab[t]): none).
void g4_attn_decode_rows_prep(uint16_t *out, const uint16_t *q, const uint64_t *k_tab,
                              const uint64_t *v_tab, const int32_t *cap_tab, const int32_t *pos,
                              int T, int n_heads, int n_kv, int hd, int window, float scale,
                              const g4_attn_prep *prep, void *workspace, size_t workspace_bytes,
                              cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
