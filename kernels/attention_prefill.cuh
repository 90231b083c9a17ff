// attention_prefill.cuh: flash attention (online softmax on tensor cores) for the text decoder's
// prefill and for the vision tower. Two kernels, one per regime:
//   WGMMA (attention_prefill_wgmma.cu): text prefill with hd 256 or 512 (the E2B sliding and full
//          layers), query heads per KV head <= 64: GQA-packed 64-row blocks, wgmma, persistent.
//   HMMA  (attention_prefill.cu, mma.sync): the vision tower (hd 64, bidirectional), text prefill
//          of any other head dim, and the reference the tests and the bench run next to WGMMA.
#ifndef G4_ATTENTION_PREFILL_CUH
#define G4_ATTENTION_PREFILL_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Text decoder attention over the KV cache, as ops.h `attention`: for query row t (position
// pos[t], device I32 [T]) and query head h, out[t, h] = softmax(q[t, h] . K^T * scale) V over the
// cache rows lo..pos[t] of KV head h / (n_heads / n_kv), lo = max(0, pos[t] - window + 1) when
// window > 0 (sliding), else 0 (causal). q, out [T, n_heads * hd] fp16; kc, vc [capacity,
// n_kv * hd] fp16 (rows lo..pos[t] must have been stored); fp32 softmax. hd: 256 or 512 (64 too).
// Cache rows beyond max(pos) are never read (they may hold anything, NaN included).
// NULL when the causal (prefill) / bidirectional kernels take these heads and head_dim, else
// what they take (the launchers assert them, the CUDA backend's load checks refuse with them).
const char *g4_attn_prefill_supported(int n_heads, int n_kv, int hd);
const char *g4_attn_bidir_supported(int n_heads, int hd);
// Kernel: WGMMA where g4_attn_prefill_wgmma_supported, else HMMA (G4_ATTN_PREFILL=hmma in the
// environment forces HMMA: a fallback switch for A/B runs, read once).
void g4_attn_prefill(uint16_t *out, const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                     const int32_t *pos, int T, int n_heads, int n_kv, int hd, int capacity,
                     int window, float scale, cudaStream_t stream);

typedef enum {
    G4_ATTN_AUTO = 0,
    G4_ATTN_HMMA = 1,  // mma.sync flash attention (any hd of 64, 256, 512)
    G4_ATTN_WGMMA = 2, // Hopper wgmma (g4_attn_prefill_wgmma_supported shapes)
} g4_attn_algo;

// 1 when the WGMMA kernel runs this shape: hd 256 or 512, n_heads a multiple of n_kv, at most 64
// query heads per KV head; 0 otherwise (the load check and the launcher ask it).
int g4_attn_prefill_wgmma_supported(int hd, int n_heads, int n_kv);

// g4_attn_prefill with the kernel chosen by the caller (tests, benches); for WGMMA, max_ctas > 0
// caps its persistent grid (so one CTA walks many blocks; 0 = one CTA per SM). Same
// preconditions (an unsupported algo/shape pair aborts as a caller bug).
void g4_attn_prefill_algo(uint16_t *out, const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                          const int32_t *pos, int T, int n_heads, int n_kv, int hd, int capacity,
                          int window, float scale, g4_attn_algo algo, int max_ctas,
                          cudaStream_t stream);

// Vision tower attention: bidirectional over N patches, keys j with key_valid[j] == 0 masked
// (key_valid: device uint8 [N], or NULL for all). q, k, v, out [N, n_heads * hd] fp16, one KV
// head per query head; hd 64 (E2B: 12 heads of 64, N <= 2520). A query with no valid key gets 0.
void g4_attn_bidir(uint16_t *out, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                   const uint8_t *key_valid, int N, int n_heads, int hd, float scale,
                   cudaStream_t stream);
// g4_attn_bidir with its tile configuration chosen (tests and the kernel table's A/B): 0 the
// default, 1 three CTAs per SM (the configuration before), 2 key tiles of 32.
void g4_attn_bidir_cfg(uint16_t *out, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                       const uint8_t *key_valid, int N, int n_heads, int hd, float scale, int cfg,
                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
