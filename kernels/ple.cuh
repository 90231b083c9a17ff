// ple.cuh: the per-layer inputs (PLE) of Gemma-4's text decoder, combined in one launch. See
// ple.cu.
#ifndef G4_PLE_CUH
#define G4_PLE_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ple[t, l*D + j] fp16 = (rmsnorm_D(proj[t, l*D ..] * proj_scale)[j] * norm_w[j]
//                         + table[ids[t], l*D + j] * tok_scale) * out_scale
// for t < T, l < n_layers, j < D (spec 2.3; E2B: n_layers 35, D 256, proj_scale 1536^-0.5,
// tok_scale 16, out_scale 2^-0.5, eps 1e-6). proj fp16 [T, n_layers * D] is the output of the
// per_layer_model_projection GEMM on the merged embeddings; table fp16 [vocab, n_layers * D]
// (device memory, or pinned host memory mapped into the device address space: only T rows
// are read); ids device I32 [T] (placeholders already replaced by the pad id); norm_w fp16 [D].
// An id outside [0, vocab) yields NaN rows (the caller validates ids). D % 256 == 0.
// NULL when the fused kernel takes a per-layer input width D, else what it takes.
const char *g4_ple_supported(int D);
void g4_ple_inputs(uint16_t *ple, const uint16_t *proj, const uint16_t *table, int vocab,
                   const int32_t *ids, const uint16_t *norm_w, int T, int n_layers, int D,
                   float proj_scale, float tok_scale, float out_scale, float eps,
                   cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
