// logits.cuh: the sample op (soft-cap + the next token, greedy or sampled, on the device) and
// the plain soft-cap. See logits.cu.
#ifndef G4_LOGITS_CUH
#define G4_LOGITS_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/ref/sample_math.h"

#ifdef __cplusplus
extern "C" {
#endif

// NULL when the kernels take a vocabulary of V tokens, else what they take (host code: the
// load check and the launcher both ask it).
const char *g4_logits_supported(int V);

// Bytes of device workspace for rows x V logits. It holds counters and histograms that must
// start at zero: clear it once after allocating (cudaMemset); every g4_logits_sample leaves
// them at zero again. A workspace for R rows serves any later launch of 1..R rows, in any
// order (row r's part lies at the same place whatever the launch's row count).
size_t g4_logits_workspace(int rows, int V);

// logits[rows, V] fp32 in place: x = cap * tanh(x / cap) (cap <= 0: as is); next[r] (device I32
// [rows]) = ref_sample_row(row r, *params, counter[r]) (kernels/ref/ref.h): the same id the CPU
// reference picks from the same capped logits; -1 for a row with a NaN. params (a
// g4_sample_params) and counter (I32 [rows]) in device memory, read by the kernels, so the
// launches can be captured in a graph once and replayed for any sampler.
void g4_logits_sample(int32_t *next, float *logits, int rows, int V, float cap,
                      const g4_sample_params *params, const int32_t *counter, void *workspace,
                      size_t workspace_bytes, cudaStream_t stream);

// g4_logits_sample with a sampler per row: row r is drawn with *params_tab[r] (a device table
// of rows pointers, each to a g4_sample_params in device memory), the same id as
// g4_logits_sample of that row alone with that sampler. One launch triple for every row.
void g4_logits_sample_rows(int32_t *next, float *logits, int rows, int V, float cap,
                           const uint64_t *params_tab, const int32_t *counter, void *workspace,
                           size_t workspace_bytes, cudaStream_t stream);

// logits[rows, V] fp32 in place: x = cap * tanh(x / cap) (cap <= 0: nothing).
void g4_logits_softcap(float *logits, int rows, int V, float cap, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
