// rmsnorm.cuh: RMSNorm and the fused post-norm residual add (ops.h `rmsnorm`, `add_rmsnorm`).
// See rmsnorm.cu.
#ifndef G4_RMSNORM_CUH
#define G4_RMSNORM_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// y[rows, cols] fp16 = x * (mean(x^2) + eps)^-0.5 * w over each group of `group` columns
// (group = cols for a row norm, head_dim for per-head norms); w fp16 [group] or NULL (no
// scale). x fp16 (g4_rmsnorm_f16, y may alias x) or fp32 (g4_rmsnorm_f32: the residual stream
// into a layer's input norm). cols % group == 0, group % 8 == 0, 16-byte aligned rows.
// NULL when the kernels take rows of `cols` normed in groups of `group` (rmsnorm) / rows of
// `cols` (add_rmsnorm), else what they take.
const char *g4_rmsnorm_supported(int cols, int group);
const char *g4_add_rmsnorm_supported(int cols);
void g4_rmsnorm_f16(uint16_t *y, const uint16_t *x, const uint16_t *w, int rows, int cols,
                    int group, float eps, cudaStream_t stream);
void g4_rmsnorm_f32(uint16_t *y, const float *x, const uint16_t *w, int rows, int cols, int group,
                    float eps, cudaStream_t stream);

// What the fused residual add writes next to h (the input of the next op).
typedef enum {
    G4_NEXT_NONE = 0, // only h
    G4_NEXT_NORM = 1, // y2 = rmsnorm(h_new) * w2 (w2 NULL: no scale), fp16: the next pre-norm
    G4_NEXT_COPY = 2, // y2 = fp16(h_new): e.g. the PLE gate's input
} g4_next_mode;

// h[rows, cols] fp32 = (h + rmsnorm(x) * w) * scale[0], x fp16 [rows, cols], w fp16 [cols] or
// NULL, scale: device fp16 scalar (the layer_scalar) or NULL for 1; then y2 fp16 [rows, cols]
// per `next` (eps for both norms). One launch for the post-norm + residual + layer scale + the
// next layer norm. cols % 8 == 0, 16-byte aligned rows.
void g4_add_rmsnorm(float *h, const uint16_t *x, const uint16_t *w, const uint16_t *scale,
                    float eps, g4_next_mode next, uint16_t *y2, const uint16_t *w2, int rows,
                    int cols, cudaStream_t stream);
// The same out of place: h = (h_in + rmsnorm(x) * w) * scale (h may be h_in).
void g4_add_rmsnorm_to(float *h, const float *h_in, const uint16_t *x, const uint16_t *w,
                       const uint16_t *scale, float eps, g4_next_mode next, uint16_t *y2,
                       const uint16_t *w2, int rows, int cols, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
