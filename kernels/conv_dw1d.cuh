// conv_dw1d.cuh: the conformer's light conv core in one launch: GLU, causal depthwise conv1d,
// clip, RMSNorm, SiLU (spec 5.4 LCONV). See conv_dw1d.cu.
#ifndef G4_CONV_DW1D_CUH
#define G4_CONV_DW1D_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// y[t, c] fp16 = act(norm(clip(sum_{i<K} w[c, i] * g[t - (K-1) + i, c]))) for t < T, c < C:
//   g = glu ? x[:, :C] * sigmoid(x[:, C:]) (x fp16 [T, 2C], linear_start's output)
//           : x (x fp16 [T, C]); rows before 0 are zeros (causal, left pad K - 1);
//   w fp16 [C, K] (the package's [C, 1, K]);
//   clip: clamp to [-clip, clip] when clip > 0 (the conformer's gradient clipping: 65504 in
//     fp16, 1e10 = no-op in fp32);
//   norm: RMSNorm over the C channels with weight norm_w fp16 [C] (NULL: no norm);
//   act: SiLU when silu != 0.
// E2B: C 1024, K 5, glu 1, norm conv_norm, silu 1. fp32 math. C % 8 == 0, C <= 2048.
// NULL when the kernel takes C channels and a K-tap kernel, else what it takes.
const char *g4_dwconv1d_supported(int C, int K);
void g4_dwconv1d(uint16_t *y, const uint16_t *x, const uint16_t *w, int T, int C, int K, int glu,
                 float clip, const uint16_t *norm_w, float eps, int silu, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
