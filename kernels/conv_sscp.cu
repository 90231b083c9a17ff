// conv_sscp.cu: audio subsampling conv 3x3 s2 p1 + LayerNorm(channels, weight only) + ReLU,
// HWC (oracle: ref_sscp_conv with an NCHW <-> HWC transpose in the test; test:
// tests/test_cuda_conv.c --op sscp; bench: --filter sscp, against cudnnConvolutionForward).
//
// Three paths, all in the test table: the tensor-core implicit GEMM below for C_in % 64 == 0
// and C_out == 32 (layer 1, 1.8 GFLOP at 30 s), the CUDA-core direct convolution with the
// weights in registers for C_in = 1 (layer 0: K = 9 taps, too thin for MMA; 0.2 GFLOP), and
// the CUDA-core direct convolution with the weights in shared memory for the rest.
// CUDA-core direct convolution: a persistent grid of CTAs, each with the whole weight in shared
// memory (fp32, transposed to [tap, ci][co] so a lane reads its consecutive output channels as
// float4s), loops over output rows; per row it stages the three input rows (zeros for padding
// and masked rows) and each warp computes whole output pixels: lane l owns channels
// l * C_out/32 .. (l + 1) * C_out/32 - 1, so the LayerNorm over channels is two warp reductions.
// fp32 accumulation of fp16 inputs: an fp32 x is rounded to fp16 when staged, as HF's fp16 model
// casts the conv input to the weight dtype.
#include "kernels/conv_sscp.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"

using namespace g4k;

namespace {

constexpr int SSCP_WARPS = 8, SSCP_THREADS = 32 * SSCP_WARPS;

// A pixel's CPL channels (after LayerNorm and ReLU) as fp16: one 8-byte word per 4 channels when
// y is 8-byte aligned (a warp then writes whole sectors), else one store each.
template <int CPL>
__device__ __forceinline__ void store_pixel(uint16_t *dst, const float (&o)[CPL], bool aligned8) {
    if constexpr (CPL % 4 == 0) {
        if (aligned8) {
#pragma unroll
            for (int j = 0; j < CPL; j += 4)
                *reinterpret_cast<uint2 *>(dst + j) =
                    make_uint2(pack_half2(o[j], o[j + 1]), pack_half2(o[j + 2], o[j + 3]));
            return;
        }
    }
#pragma unroll
    for (int j = 0; j < CPL; j++) dst[j] = f2h(o[j]);
}

template <class X, int CPL> // CPL: output channels per lane (C_out / 32)
__global__ void __launch_bounds__(SSCP_THREADS)
    sscp_kernel(uint16_t *y, const X *x, const uint8_t *valid, const uint16_t *w,
                const uint16_t *ln_w, int H, int W, int C_in, float eps, bool y_aligned8) {
    extern __shared__ __align__(128) uint8_t smem[];
    constexpr int C_out = 32 * CPL;
    const int Ho = (H + 1) / 2, Wo = (W + 1) / 2, K = 9 * C_in;
    float *w_s = reinterpret_cast<float *>(smem);                               // [K][C_out]
    uint16_t *x_s = reinterpret_cast<uint16_t *>(smem + (size_t)K * C_out * 4); // [3][W][C_in]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, c0 = lane * CPL;
    for (int i = tid; i < C_out * K; i += SSCP_THREADS) {
        const int co = i / K, rem = i % K, ci = rem / 9, tap = rem % 9; // OIHW: tap = ky*3 + kx
        w_s[(size_t)(tap * C_in + ci) * C_out + co] = h2f(w[i]);
    }
    float lw[CPL];
#pragma unroll
    for (int j = 0; j < CPL; j++) lw[j] = h2f(ln_w[c0 + j]);
    for (int oh = blockIdx.x; oh < Ho; oh += gridDim.x) {
        __syncthreads(); // weights written / previous row's x_s no longer read
        for (int i = tid; i < 3 * W * C_in; i += SSCP_THREADS) {
            const int ky = i / (W * C_in), rem = i % (W * C_in);
            const int ih = 2 * oh - 1 + ky;
            const bool ok = ih >= 0 && ih < H && (!valid || valid[ih]);
            x_s[i] = ok ? f2h(ld_act(x, (size_t)ih * W * C_in + rem)) : (uint16_t)0;
        }
        __syncthreads();
        for (int ow = warp; ow < Wo; ow += SSCP_WARPS) {
            float acc[CPL];
#pragma unroll
            for (int j = 0; j < CPL; j++) acc[j] = 0.0f;
            for (int ky = 0; ky < 3; ky++)
                for (int kx = 0; kx < 3; kx++) {
                    const int iw = 2 * ow - 1 + kx;
                    if (iw < 0 || iw >= W) continue;
                    const uint16_t *xr = x_s + ((size_t)ky * W + iw) * C_in;
                    const float *wr = w_s + (size_t)(ky * 3 + kx) * C_in * C_out + c0;
                    for (int ci = 0; ci < C_in; ci++) {
                        const float xv = h2f(xr[ci]); // one broadcast read per warp
                        const float *wc = wr + (size_t)ci * C_out;
                        if constexpr (CPL % 4 == 0) {
#pragma unroll
                            for (int j = 0; j < CPL; j += 4) {
                                const float4 wv = *reinterpret_cast<const float4 *>(wc + j);
                                acc[j] += xv * wv.x, acc[j + 1] += xv * wv.y;
                                acc[j + 2] += xv * wv.z, acc[j + 3] += xv * wv.w;
                            }
                        } else {
#pragma unroll
                            for (int j = 0; j < CPL; j++) acc[j] += xv * wc[j];
                        }
                    }
                }
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < CPL; j++) s += acc[j];
            const float mean = warp_sum(s) / (float)C_out;
            float v = 0.0f;
#pragma unroll
            for (int j = 0; j < CPL; j++) v += (acc[j] - mean) * (acc[j] - mean);
            const float inv = rsqrtf(warp_sum(v) / (float)C_out + eps);
            float o[CPL];
#pragma unroll
            for (int j = 0; j < CPL; j++) o[j] = fmaxf((acc[j] - mean) * inv * lw[j], 0.0f);
            store_pixel<CPL>(y + ((size_t)oh * Wo + ow) * C_out + c0, o, y_aligned8);
        }
    }
}

// The direct path for one input channel (E2B layer 0: the log-mel frames, 1 -> 128 channels):
// K = 9 taps, so each lane keeps its CPL channels' 9 weights in registers (no shared-memory
// weight reads per pixel) and a warp runs two output pixels at a time, their reductions
// interleaved. Same taps in the same order as sscp_kernel: the same bits.
template <class X, int CPL>
__global__ void __launch_bounds__(SSCP_THREADS)
    sscp_c1_kernel(uint16_t *y, const X *x, const uint8_t *valid, const uint16_t *w,
                   const uint16_t *ln_w, int H, int W, float eps, bool y_aligned8) {
    extern __shared__ __align__(128) uint8_t smem[];
    constexpr int C_out = 32 * CPL, P = 2;
    const int Ho = (H + 1) / 2, Wo = (W + 1) / 2;
    uint16_t *x_s = reinterpret_cast<uint16_t *>(smem); // [3][W]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, c0 = lane * CPL;
    float wr[9][CPL], lw[CPL];
#pragma unroll
    for (int t = 0; t < 9; t++)
#pragma unroll
        for (int j = 0; j < CPL; j++) wr[t][j] = h2f(w[(c0 + j) * 9 + t]); // OIHW, C_in = 1
#pragma unroll
    for (int j = 0; j < CPL; j++) lw[j] = h2f(ln_w[c0 + j]);
    for (int oh = blockIdx.x; oh < Ho; oh += gridDim.x) {
        __syncthreads(); // the previous row's x_s no longer read
        for (int i = tid; i < 3 * W; i += SSCP_THREADS) {
            const int ky = i / W, ih = 2 * oh - 1 + ky;
            const bool ok = ih >= 0 && ih < H && (!valid || valid[ih]);
            x_s[i] = ok ? f2h(ld_act(x, (size_t)ih * W + i % W)) : (uint16_t)0;
        }
        __syncthreads();
        for (int ow0 = warp; ow0 < Wo; ow0 += P * SSCP_WARPS) {
            float acc[P][CPL], mean[P], inv[P];
#pragma unroll
            for (int p = 0; p < P; p++) {
                const int ow = ow0 + p * SSCP_WARPS;
#pragma unroll
                for (int j = 0; j < CPL; j++) acc[p][j] = 0.0f;
#pragma unroll
                for (int ky = 0; ky < 3; ky++)
#pragma unroll
                    for (int kx = 0; kx < 3; kx++) {
                        const int iw = 2 * ow - 1 + kx;
                        if (ow >= Wo || iw < 0 || iw >= W) continue;
                        const float xv = h2f(x_s[ky * W + iw]); // one broadcast read per warp
#pragma unroll
                        for (int j = 0; j < CPL; j++) acc[p][j] += xv * wr[ky * 3 + kx][j];
                    }
            }
#pragma unroll
            for (int p = 0; p < P; p++) {
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < CPL; j++) s += acc[p][j];
                mean[p] = warp_sum(s) / (float)C_out;
            }
#pragma unroll
            for (int p = 0; p < P; p++) {
                float v = 0.0f;
#pragma unroll
                for (int j = 0; j < CPL; j++) v += (acc[p][j] - mean[p]) * (acc[p][j] - mean[p]);
                inv[p] = rsqrtf(warp_sum(v) / (float)C_out + eps);
            }
#pragma unroll
            for (int p = 0; p < P; p++) {
                const int ow = ow0 + p * SSCP_WARPS;
                if (ow >= Wo) continue;
                float o[CPL];
#pragma unroll
                for (int j = 0; j < CPL; j++)
                    o[j] = fmaxf((acc[p][j] - mean[p]) * inv[p] * lw[j], 0.0f);
                store_pixel<CPL>(y + ((size_t)oh * Wo + ow) * C_out + c0, o, y_aligned8);
            }
        }
    }
}

// Tensor-core path for C_in % 64 == 0 and C_out == 32 (E2B layer 1: 128 -> 32 channels), an
// implicit GEMM: M = output pixels, N = 32 channels, K = 9 taps x C_in. A CTA (4 warps) owns
// two output rows at a time (persistent loop): it stages the 5 input rows they read (plus a
// zero column on each side for the padding; masked / out-of-range rows zero-filled by
// cp.async) and reads the A fragments straight from them with ldmatrix, since the C_in
// channels of one (pixel, tap) are 256 contiguous bytes. The weights stay in shared memory as
// [co][tap, ci] (row = 9 C_in fp16, swizzled by co). Input chunks are XOR-swizzled by
// (column / 2) because a fragment's 8 rows are pixels 2 input columns apart (stride 2);
// C_in % 64 == 0 keeps every XOR inside its row (chunk counts are multiples of 8). Epilogue: the 32
// channels of a pixel sit in the 4 lanes of a quad, so the LayerNorm is two 2-step shuffle
// reductions; ReLU; fp16 store.
constexpr int SSCP_MMA_WARPS = 4, SSCP_MMA_THREADS = 32 * SSCP_MMA_WARPS;

__device__ __forceinline__ int sscp_xoff(int row, int col, int chunk, int cols, int ci_chunks) {
    return ((row * cols + col) * ci_chunks + (chunk ^ ((col >> 1) & 7))) << 4;
}

__global__ void __launch_bounds__(SSCP_MMA_THREADS)
    sscp_mma_kernel(uint16_t *y, const uint16_t *x, const uint8_t *valid, const uint16_t *w,
                    const uint16_t *ln_w, int H, int W, int C_in, float eps) {
    extern __shared__ __align__(128) uint8_t smem[];
    constexpr int CO = 32;
    const int Ho = (H + 1) / 2, Wo = (W + 1) / 2, K = 9 * C_in;
    const int cols = W + 2, ci_chunks = C_in / 8, w_row_bytes = K * 2;
    uint8_t *w_s = smem;                            // [32][K] fp16, swizzled rows
    uint8_t *x_s = smem + (size_t)CO * w_row_bytes; // [5][W + 2][C_in] fp16
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    for (int i = tid; i < CO * K; i += SSCP_MMA_THREADS) { // OIHW -> [co][tap * C_in + ci]
        const int co = i / K, rem = i % K, ci = rem / 9, tap = rem % 9, k = tap * C_in + ci;
        *reinterpret_cast<uint16_t *>(w_s + co * w_row_bytes + (((k >> 3) ^ (co & 7)) << 4) +
                                      (k & 7) * 2) = w[i];
    }
    float lw[4][2];
#pragma unroll
    for (int nb = 0; nb < 4; nb++)
        lw[nb][0] = h2f(ln_w[nb * 8 + 2 * c]), lw[nb][1] = h2f(ln_w[nb * 8 + 2 * c + 1]);
    const int n_tiles = (Ho + 1) / 2, pix = 2 * Wo; // a tile: output rows 2 t, 2 t + 1
    for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int oh0 = 2 * tile, ih0 = 2 * oh0 - 1; // input rows ih0 .. ih0 + 4
        __syncthreads(); // weights stored / the previous tile's rows no longer read
        for (int i = tid; i < 5 * cols * ci_chunks; i += SSCP_MMA_THREADS) {
            const int r = i / (cols * ci_chunks), rem = i % (cols * ci_chunks),
                      col = rem / ci_chunks, ch = rem % ci_chunks;
            const int ih = ih0 + r, iw = col - 1;
            const bool ok = ih >= 0 && ih < H && iw >= 0 && iw < W && (!valid || valid[ih]);
            const uint16_t *src = ok ? x + ((size_t)ih * W + iw) * C_in + ch * 8 : x;
            cp_async16(x_s + sscp_xoff(r, col, ch, cols, ci_chunks), src, ok);
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        for (int m0 = warp * 16; m0 < pix; m0 += SSCP_MMA_WARPS * 16) {
            // the 2 rows (g, g + 8) this lane's A fragments address, as (output row, column)
            const int mi = lane >> 3, arow = min(m0 + (mi & 1) * 8 + (lane & 7), pix - 1);
            const int a_r = arow / Wo, a_ow = arow % Wo;
            float acc[4][4];
#pragma unroll
            for (int nb = 0; nb < 4; nb++) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
            for (int tap = 0; tap < 9; tap++) {
                const int ky = tap / 3, kx = tap % 3;
                const int xr = 2 * a_r + ky,
                          xc = 2 * a_ow + kx; // staged row / column (col 0 = iw -1)
                for (int ks = 0; ks < C_in / 16; ks++) {
                    uint32_t a[4], b0[4], b1[4];
                    ldmatrix_x4(a, x_s + sscp_xoff(xr, xc, ks * 2 + (mi >> 1), cols, ci_chunks));
                    const int kch = (tap * C_in + ks * 16) / 8;
                    const int co0 = (mi >> 1) * 8 + (lane & 7), co1 = 16 + co0;
                    ldmatrix_x4(b0,
                                w_s + co0 * w_row_bytes + (((kch + (mi & 1)) ^ (co0 & 7)) << 4));
                    ldmatrix_x4(b1,
                                w_s + co1 * w_row_bytes + (((kch + (mi & 1)) ^ (co1 & 7)) << 4));
                    mma_16816(acc[0], a, b0[0], b0[1]);
                    mma_16816(acc[1], a, b0[2], b0[3]);
                    mma_16816(acc[2], a, b1[0], b1[1]);
                    mma_16816(acc[3], a, b1[2], b1[3]);
                }
            }
            // LayerNorm over the 32 channels of pixels m0 + g (e < 2) and m0 + g + 8 (e >= 2)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float s = 0.0f;
#pragma unroll
                for (int nb = 0; nb < 4; nb++) s += acc[nb][2 * r] + acc[nb][2 * r + 1];
                s += __shfl_xor_sync(0xffffffffu, s, 1);
                s += __shfl_xor_sync(0xffffffffu, s, 2);
                const float mean = s / CO;
                float v = 0.0f;
#pragma unroll
                for (int nb = 0; nb < 4; nb++) {
                    const float d0 = acc[nb][2 * r] - mean, d1 = acc[nb][2 * r + 1] - mean;
                    v += d0 * d0 + d1 * d1;
                }
                v += __shfl_xor_sync(0xffffffffu, v, 1);
                v += __shfl_xor_sync(0xffffffffu, v, 2);
                const float inv = rsqrtf(v / CO + eps);
                const int m = m0 + g + 8 * r, oh = oh0 + m / Wo, ow = m % Wo;
                if (m >= pix || oh >= Ho) continue;
                uint16_t *dst = y + ((size_t)oh * Wo + ow) * CO + 2 * c;
#pragma unroll
                for (int nb = 0; nb < 4; nb++)
                    *reinterpret_cast<uint32_t *>(dst + nb * 8) =
                        pack_half2(fmaxf((acc[nb][2 * r] - mean) * inv * lw[nb][0], 0.0f),
                                   fmaxf((acc[nb][2 * r + 1] - mean) * inv * lw[nb][1], 0.0f));
            }
        }
    }
}

size_t sscp_mma_smem(int W, int C_in) {
    return (size_t)32 * 9 * C_in * 2 + (size_t)5 * (W + 2) * C_in * 2;
}

// The persistent grid of a direct kernel over Ho output rows: as many resident CTAs per SM as
// its shared memory allows (layer 0 needs a few KB and does little per row: one CTA of 8 warps
// per SM left it latency-bound at 0.37x cuDNN), at most one per row.
template <typename K> int resident_grid(K *kernel, size_t smem, int Ho) {
    int per_sm = 0;
    G4_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, SSCP_THREADS, smem));
    const int slots = num_sms() * (per_sm > 0 ? per_sm : 1);
    return Ho < slots ? Ho : slots;
}

template <class X, int CPL>
void sscp_c1_launch(uint16_t *y, const X *x, const uint8_t *valid, const uint16_t *w,
                    const uint16_t *ln_w, int H, int W, float eps, cudaStream_t stream) {
    const size_t smem = (size_t)3 * W * 2;
    G4K_REQUIRE(smem <= 227 * 1024, "g4_sscp_conv: 3 fp16 input rows fit in shared memory");
    static bool smem_set = false;
    set_smem(sscp_c1_kernel<X, CPL>, 227 * 1024, &smem_set);
    const int grid = resident_grid(sscp_c1_kernel<X, CPL>, smem, (H + 1) / 2);
    sscp_c1_kernel<X, CPL><<<grid, SSCP_THREADS, smem, stream>>>(y, x, valid, w, ln_w, H, W, eps,
                                                                  ((uintptr_t)y & 7) == 0);
    G4_CUDA_LAUNCH_CHECK();
}

template <class X, int CPL>
void sscp_launch(uint16_t *y, const X *x, const uint8_t *valid, const uint16_t *w,
                 const uint16_t *ln_w, int H, int W, int C_in, float eps, cudaStream_t stream) {
    if (C_in == 1) return sscp_c1_launch<X, CPL>(y, x, valid, w, ln_w, H, W, eps, stream);
    const size_t smem = (size_t)9 * C_in * 32 * CPL * 4 + (size_t)3 * W * C_in * 2;
    G4K_REQUIRE(smem <= 227 * 1024,
                "g4_sscp_conv: fp32 weights + 3 fp16 input rows fit in shared memory");
    static bool smem_set = false; // opt in to the largest dynamic shared memory, once
    set_smem(sscp_kernel<X, CPL>, 227 * 1024, &smem_set);
    const int grid = resident_grid(sscp_kernel<X, CPL>, smem, (H + 1) / 2);
    sscp_kernel<X, CPL>
        <<<grid, SSCP_THREADS, smem, stream>>>(y, x, valid, w, ln_w, H, W, C_in, eps,
                                               ((uintptr_t)y & 7) == 0);
    G4_CUDA_LAUNCH_CHECK();
}

template <class X>
void sscp_dispatch(uint16_t *y, const X *x, const uint8_t *valid, const uint16_t *w,
                   const uint16_t *ln_w, int H, int W, int C_in, int C_out, float eps,
                   cudaStream_t stream) {
    switch (C_out / 32) {
    case 1:
        sscp_launch<X, 1>(y, x, valid, w, ln_w, H, W, C_in, eps, stream);
        break;
    case 2:
        sscp_launch<X, 2>(y, x, valid, w, ln_w, H, W, C_in, eps, stream);
        break;
    case 4:
        sscp_launch<X, 4>(y, x, valid, w, ln_w, H, W, C_in, eps, stream);
        break;
    case 8:
        sscp_launch<X, 8>(y, x, valid, w, ln_w, H, W, C_in, eps, stream);
        break;
    default:
        G4K_REQUIRE(!"C_out is 32, 64, 128 or 256", "g4_sscp_conv");
    }
}

} // namespace

// The tensor-core path: fp16 input, 32 output channels, C_in a multiple of 64, fits.
static bool sscp_mma_ok(int x_f32, int W, int C_in, int C_out) {
    return !x_f32 && C_out == 32 && C_in % 64 == 0 && sscp_mma_smem(W, C_in) <= 227 * 1024;
}

extern "C" const char *g4_sscp_conv_supported(int C_in, int C_out, int W, int x_f32) {
    if (C_in < 1 || C_in > 256 || (C_out != 32 && C_out != 64 && C_out != 128 && C_out != 256) ||
        W < 1)
        return "1 .. 256 input channels and 32, 64, 128 or 256 output channels (conv_sscp.cu)";
    const size_t direct = (size_t)9 * C_in * C_out * 4 + (size_t)3 * W * C_in * 2;
    if (direct > 227 * 1024 && !sscp_mma_ok(x_f32, W, C_in, C_out))
        return "its weights and three input rows (or, on its tensor-core path, five) in 227 KB "
               "of shared memory (conv_sscp.cu)";
    return NULL;
}

extern "C" void g4_sscp_conv(uint16_t *y, const void *x, int x_f32, const uint8_t *valid,
                             const uint16_t *w, const uint16_t *ln_w, int H, int W, int C_in,
                             int C_out, float eps, cudaStream_t stream) {
    const char *op = "g4_sscp_conv";
    G4K_SUPPORTED(g4_sscp_conv_supported(C_in, C_out, W, x_f32), op);
    G4K_REQUIRE(H >= 0, op);
    if (H == 0) return;
    if (sscp_mma_ok(x_f32, W, C_in, C_out) && (((uintptr_t)x | (uintptr_t)y) & 15) == 0) {
        static bool smem_set = false;
        set_smem(sscp_mma_kernel, 227 * 1024, &smem_set);
        const int tiles = ((H + 1) / 2 + 1) / 2, sms = num_sms();
        const int grid = tiles < sms ? tiles : sms;
        const size_t smem = sscp_mma_smem(W, C_in);
        sscp_mma_kernel<<<grid, SSCP_MMA_THREADS, smem, stream>>>(
            y, static_cast<const uint16_t *>(x), valid, w, ln_w, H, W, C_in, eps);
        G4_CUDA_LAUNCH_CHECK();
        return;
    }
    if (x_f32)
        sscp_dispatch(y, static_cast<const float *>(x), valid, w, ln_w, H, W, C_in, C_out, eps,
                      stream);
    else
        sscp_dispatch(y, static_cast<const uint16_t *>(x), valid, w, ln_w, H, W, C_in, C_out, eps,
                      stream);
}
