// embed.cuh: token embedding gather with a scale (ops.h `embed`). See embed.cu.
#ifndef G4_EMBED_CUH
#define G4_EMBED_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// y[t, :] = table[ids[t], :] * scale for t < T: table fp16 [rows, cols] in device memory or
// pinned host memory mapped into the device address space; ids device I32 [T]; y fp32
// (g4_embed_f32: the residual stream) or fp16 (g4_embed_f16). An id outside [0, rows) yields a
// NaN row (ids are validated by the caller; NaN makes a miss visible). cols % 8 == 0.
// NULL when the kernel takes table rows of `cols` columns, else what it takes.
const char *g4_embed_supported(int cols);
void g4_embed_f32(float *y, const uint16_t *table, int rows, int cols, const int32_t *ids, int T,
                  float scale, cudaStream_t stream);
void g4_embed_f16(uint16_t *y, const uint16_t *table, int rows, int cols, const int32_t *ids, int T,
                  float scale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
