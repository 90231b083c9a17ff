// logits.cuh: final logit soft-cap and greedy argmax over the vocabulary in one launch. See
// logits.cu.
#ifndef G4_LOGITS_CUH
#define G4_LOGITS_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Bytes of device workspace for T rows of V logits. The workspace holds per-row arrival
// counters that must start at zero: clear it once after allocating (cudaMemset); every launch
// leaves them at zero again.
size_t g4_logits_workspace(int T, int V);

// logits[T, V] fp32, in place: x = cap * tanh(x / cap) (cap <= 0: left as is), and
// argmax[t] = the first index of row t's maximum after capping (device I32 [T]; NaN counts as
// the largest value, as torch.argmax). V % 8 == 0 (E2B: 262144).
void g4_logits_softcap_argmax(float *logits, int T, int V, float cap, int32_t *argmax,
                              void *workspace, size_t workspace_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
