// test_cuda_conv.c: the audio tower's convolutions on CUDA against the CPU references
// (harness: tests/attnops_harness.h; `--op`, `--shape` filters):
//   sscp    g4_sscp_conv  (HWC) vs ref_sscp_conv (NCHW, transposed here): both E2B layers at
//           30 s of audio, odd sizes, masked rows; both paths (tensor-core for C_in % 64 == 0
//           and C_out == 32, CUDA-core otherwise)
//   dwconv  g4_dwconv1d   vs ref_glu -> ref_dwconv1d_causal -> ref_clamp -> ref_rmsnorm -> ref_silu
// (The vision patch embedding is a GEMM plus g4_vision_posemb_add, tested in test_cuda_ops.)
// Skips (exit 77) without a GPU.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_dw1d.cuh"
#include "kernels/conv_sscp.cuh"
#include "kernels/ref/ref.h"
#include "tests/attnops_harness.h"

// fp16 outputs of fp32 math on the same fp16 inputs: half an fp16 ulp is 2^-11 relative
// (rtol 1e-3 = 2x); atol covers fp32 reduction-order differences over <= 1152 products
// (~1e-6 of the pre-norm scale, which the norms divide by their RMS: well under 1e-4).
#define CONV_ATOL 1e-4
#define CONV_RTOL 1e-3

// --- SSCP ---------------------------------------------------------------------------------------
// valid_mode: 0 all rows valid, 1 trailing rows invalid, 2 scattered invalid rows.
static void case_sscp(int H, int W, int C_in, int C_out, int x_f32, int valid_mode,
                      unsigned long long seed) {
    if (!hx_case("sscp", "H=%d W=%d C_in=%d C_out=%d x=%s valid=%s", H, W, C_in, C_out,
                 x_f32 ? "f32" : "f16",
                 valid_mode == 0   ? "all"
                 : valid_mode == 1 ? "trailing"
                                   : "scattered"))
        return;
    unsigned long long s = seed;
    const int Ho = (H + 1) / 2, Wo = (W + 1) / 2;
    const size_t nx = (size_t)H * W * C_in, ny = (size_t)Ho * Wo * C_out,
                 nw = (size_t)C_out * C_in * 9;
    uint16_t *xb, *wb, *lb;
    float *x = hx_rand_f16(&s, nx, -4, 4, &xb); // HWC; fp16 values (the kernel stages fp16)
    float *w = hx_rand_f16(&s, nw, -0.5f, 0.5f, &wb),
          *lw = hx_rand_f16(&s, (size_t)C_out, 0.5f, 1.5f, &lb);
    uint8_t *valid = g4_malloc((size_t)H);
    for (int h = 0; h < H; h++)
        valid[h] = valid_mode == 0   ? 1
                   : valid_mode == 1 ? h < H - H / 5
                                     : (g4t_rand_u64(&s) % 4) != 0;
    void *dx = x_f32 ? hx_upload(x, 4 * nx) : hx_upload(xb, 2 * nx);
    void *dw = hx_upload(wb, 2 * nw), *dl = hx_upload(lb, 2 * (size_t)C_out),
         *dv = hx_upload(valid, (size_t)H);
    void *dy = hx_dev_alloc(2 * ny);
    hx_poison_f16(dy, ny);
    const double t0 = hx_now_ms();
    g4_sscp_conv(dy, dx, x_f32, valid_mode ? dv : NULL, dw, dl, H, W, C_in, C_out, 1e-6f, 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    // reference in NCHW
    float *xc = g4_malloc(sizeof(float) * nx), *yc = g4_malloc(sizeof(float) * ny),
          *want = g4_malloc(sizeof(float) * ny);
    for (int h = 0; h < H; h++)
        for (int ww = 0; ww < W; ww++)
            for (int c = 0; c < C_in; c++)
                xc[((size_t)c * H + h) * W + ww] = x[((size_t)h * W + ww) * C_in + c];
    ref_sscp_conv(yc, xc, valid_mode ? valid : NULL, wb, lb, C_in, H, W, C_out, 1e-6f);
    for (int h = 0; h < Ho; h++)
        for (int ww = 0; ww < Wo; ww++)
            for (int c = 0; c < C_out; c++)
                want[((size_t)h * Wo + ww) * C_out + c] = yc[((size_t)c * Ho + h) * Wo + ww];
    float *got = hx_download_f16(dy, ny);
    hx_report("y vs ref_sscp_conv", hx_compare(got, want, ny, CONV_ATOL, CONV_RTOL), got, want,
              CONV_ATOL, CONV_RTOL, hx_guards_ok(dy, 2 * ny, "y"), ms);
    hx_dev_free(dx), hx_dev_free(dw), hx_dev_free(dl), hx_dev_free(dv), hx_dev_free(dy);
    free(x), free(xb), free(w), free(wb), free(lw), free(lb), free(valid), free(xc), free(yc),
        free(want), free(got);
}

// --- depthwise conv (+ GLU, clip, norm, SiLU) --------------------------------------------------
static void case_dwconv(int T, int C, int K, int glu, float clip, int norm, int silu,
                        unsigned long long seed) {
    if (!hx_case("dwconv", "T=%d C=%d K=%d glu=%d clip=%g norm=%d silu=%d", T, C, K, glu, clip,
                 norm, silu))
        return;
    unsigned long long s = seed;
    const int xw = glu ? 2 * C : C;
    const size_t nx = (size_t)T * xw, ny = (size_t)T * C;
    uint16_t *xb, *wb, *nb;
    float *x = hx_rand_f16(&s, nx, -3, 3, &xb), *w = hx_rand_f16(&s, (size_t)C * K, -1, 1, &wb);
    float *nwf = hx_rand_f16(&s, (size_t)C, 0.5f, 1.5f, &nb);
    void *dx = hx_upload(xb, 2 * nx), *dw = hx_upload(wb, 2 * (size_t)C * K),
         *dn = hx_upload(nb, 2 * (size_t)C);
    void *dy = hx_dev_alloc(2 * ny);
    hx_poison_f16(dy, ny);
    const double t0 = hx_now_ms();
    g4_dwconv1d(dy, dx, dw, T, C, K, glu, clip, norm ? dn : NULL, 1e-6f, silu, 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    float *g = g4_malloc(sizeof(float) * ny), *want = g4_malloc(sizeof(float) * ny);
    if (glu)
        ref_glu(g, x, T, C);
    else
        memcpy(g, x, sizeof(float) * ny);
    ref_dwconv1d_causal(want, g, wb, T, C, K);
    if (clip > 0) ref_clamp(want, ny, -clip, clip);
    if (norm) ref_rmsnorm(want, want, nb, T, C, C, 1e-6f);
    if (silu) ref_silu(want, want, ny);
    float *got = hx_download_f16(dy, ny);
    hx_report("y vs ref chain", hx_compare(got, want, ny, CONV_ATOL, CONV_RTOL), got, want,
              CONV_ATOL, CONV_RTOL, hx_guards_ok(dy, 2 * ny, "y"), ms);
    hx_dev_free(dx), hx_dev_free(dw), hx_dev_free(dn), hx_dev_free(dy);
    free(x), free(xb), free(w), free(wb), free(nwf), free(nb), free(g), free(want), free(got);
}

int main(int argc, char **argv) {
    const int skip = hx_init(argc, argv, "test_cuda_conv");
    if (skip) return skip;
    g4_ref_init();
    // SSCP: E2B layer 0 (log-mel [T, 128] -> 128 ch) and layer 1 (128 -> 32 ch) at 30 s
    // (2999 frames), a 1 s clip, odd and tiny sizes
    case_sscp(2999, 128, 1, 128, 1, 1, 1);
    case_sscp(1500, 64, 128, 32, 0, 1, 2);
    case_sscp(99, 128, 1, 128, 1, 0, 3);
    case_sscp(50, 64, 128, 32, 0, 2, 4);
    case_sscp(17, 33, 3, 64, 0, 2, 5);
    case_sscp(1, 1, 1, 32, 1, 0, 6);
    case_sscp(2, 5, 16, 256, 0, 0, 7);
    // the tensor-core path (C_in % 64 == 0, C_out == 32) at odd sizes: odd H (a half tile),
    // odd W (a right zero column), 2 Wo < 16 (clamped fragment rows), masked rows
    case_sscp(9, 7, 64, 32, 0, 2, 8);
    case_sscp(31, 65, 128, 32, 0, 1, 9);
    case_sscp(12, 64, 16, 32, 0, 0, 10);  // C_in % 64 != 0: the CUDA-core path
    case_sscp(12, 64, 128, 32, 1, 0, 11); // fp32 input: the CUDA-core path
    // one input channel (weights in registers, two pixels a warp): fp16 input, odd W (an odd
    // pixel count: the second pixel of the last pair is past the row), 64 and 256 channels
    case_sscp(13, 31, 1, 64, 0, 2, 12);
    case_sscp(6, 17, 1, 256, 1, 1, 13);
    // LightConv1d core: E2B (1024 ch, k 5, GLU, conv_norm, SiLU) at 30 s and 1 s; variants
    case_dwconv(750, 1024, 5, 1, 65504.0f, 1, 1, 10);
    case_dwconv(25, 1024, 5, 1, 0.0f, 1, 1, 11);
    case_dwconv(17, 1024, 5, 0, 0.0f, 0, 0, 12); // the bare conv (what cuDNN is timed on)
    case_dwconv(33, 1024, 5, 1, 0.5f, 1, 1, 13); // a clip that bites
    case_dwconv(3, 40, 3, 1, 0.0f, 1, 0, 14);
    case_dwconv(1, 8, 5, 0, 0.0f, 1, 1, 15);
    return hx_finish("test_cuda_conv");
}
