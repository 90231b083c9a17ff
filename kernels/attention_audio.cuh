// attention_audio.cuh: the audio tower's chunked local attention with relative positions
// (Gemma-4 conformer, spec 5.5). See attention_audio.cu.
#ifndef G4_ATTENTION_AUDIO_CUH
#define G4_ATTENTION_AUDIO_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The op ref_audio_attention defines (kernels/ref/ref.h), on the GPU: q, k, v, out
// [T, n_heads * hd] fp16 (projection outputs, unscaled); rel fp16 [band, n_heads * hd] with
// rel[d] = relative_k_proj(sinusoid(d)) for distance d = 0..band-1 (HF's position_embeddings
// row c is d = 12 - c: the caller reverses it); per_dim_scale fp32 [hd] (the raw parameter:
// softplus is applied here); valid device uint8 [T] frame mask or NULL (all valid).
// E2B: n_heads 8, hd 128, chunk 12, band 12, logit_cap 50, invalid_logit -1e9. fp32 math.
// hd: a multiple of 32, at most 256; chunk + band <= 32.
// NULL when the kernel takes these heads, head_dim, chunk and band, else what it takes.
const char *g4_attn_audio_supported(int n_heads, int hd, int chunk, int band);
void g4_attn_audio(uint16_t *out, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                   const uint16_t *rel, const float *per_dim_scale, const uint8_t *valid, int T,
                   int n_heads, int hd, int chunk, int band, float logit_cap, float invalid_logit,
                   cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
