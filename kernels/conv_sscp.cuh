// conv_sscp.cuh: one audio subsampling (SSCP) layer: conv 3x3 stride 2 pad 1 + LayerNorm over
// channels + ReLU (spec 5.3). See conv_sscp.cu.
#ifndef G4_CONV_SSCP_CUH
#define G4_CONV_SSCP_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The op ref_sscp_conv defines, batch 1, in HWC layout (channels innermost) instead of HF's
// NCHW: the conformer's input_proj_linear reads each output row as (mel, channel) pairs
// (index mel * C + ch), which is HWC, so no transpose is ever needed.
//   x [H, W, C_in]: fp32 (x_f32 = 1: layer 0 on the log-mel features [T, 128], C_in = 1) or
//     fp16 (x_f32 = 0: layer 1 on layer 0's output);
//   valid device uint8 [H] (input rows with 0 read as zeros) or NULL;
//   w fp16 [C_out, C_in, 3, 3] as stored in the package (OIHW); ln_w fp16 [C_out];
//   y fp16 [Ho, Wo, C_out], Ho = (H + 1) / 2, Wo = (W + 1) / 2. The next mask is valid[::2].
// C_out % 32 == 0, C_out <= 256, C_in <= 256. fp16 x with C_in % 64 == 0 and C_out == 32 (E2B
// layer 1) runs on tensor cores, everything else (layer 0) on CUDA cores; an fp32 x is rounded
// to fp16 on the way in, as HF's fp16 model casts the conv input to the weight dtype.
// NULL when the kernel takes C_in -> C_out channels over rows of W pixels (x f32 or f16), else
// what it takes.
const char *g4_sscp_conv_supported(int C_in, int C_out, int W, int x_f32);
void g4_sscp_conv(uint16_t *y, const void *x, int x_f32, const uint8_t *valid, const uint16_t *w,
                  const uint16_t *ln_w, int H, int W, int C_in, int C_out, float eps,
                  cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
