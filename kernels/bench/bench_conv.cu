// bench_conv.cu: `g4cu bench --kernels` rows for the audio tower's convolutions at E2B shapes
// (30 s of audio), each with cuDNN's cudnnConvolutionForward on the same shape, fp16 NHWC,
// tensor-op math, the fastest algorithm cudnnFind picks, timed in the same run.
// The cuDNN baseline does the convolution only; ours also does the fused LayerNorm + ReLU
// (SSCP) or GLU + clip + RMSNorm + SiLU (depthwise; a conv-only row compares like with like).
// For the causal depthwise conv cuDNN pads K - 1 on both sides (it has no one-sided padding):
// it computes T + K - 1 outputs, of which the first T are the causal ones.
// cuDNN is loaded on first use (baselines.h); without it the rows have no baseline and the
// table's base column says "cudnn: not loaded" (the reason on stderr, once).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "kernels/bench/attnops_bench.cuh"
#include "kernels/bench/baselines.h"
#include "kernels/conv_dw1d.cuh"
#include "kernels/conv_sscp.cuh"

using g4b::NoBase;
using g4b::Pool;

namespace {

void cudnn_check(const g4_cudnn_api *dn, cudnnStatus_t s, const char *what, int line) {
    if (s != CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "g4cu: cuDNN error %s in %s (bench_conv.cu:%d)\n",
                dn->cudnnGetErrorString(s), what, line);
        abort();
    }
}
#define CUDNN_CHECK(call) cudnn_check(dn, (call), #call, __LINE__)

// cuDNN's functions, or NULL (then the reason is on stderr, once per process).
const g4_cudnn_api *cudnn_or_say() {
    static bool said = false;
    const char *why = "";
    const g4_cudnn_api *dn = g4_cudnn(&why, nullptr);
    if (!dn && !said)
        fprintf(stderr, "bench --kernels: cudnn: %s: the convolution rows have no baseline\n", why);
    said = true;
    return dn;
}

// A row added without a baseline because cuDNN was not loaded says so in its base column.
int mark_not_loaded(const g4_cudnn_api *dn, g4_kbench_row *rows, int before, int after) {
    if (!dn && after > before)
        snprintf(rows[before].base_name, sizeof rows[before].base_name, "cudnn: not loaded");
    return after;
}

// One cuDNN forward convolution, NHWC fp16 in/out, fp32 accumulation.
struct CudnnConv {
    const g4_cudnn_api *dn; // loaded (init and run are called only then)
    cudnnHandle_t h = nullptr;
    cudnnTensorDescriptor_t xd = nullptr, yd = nullptr;
    cudnnFilterDescriptor_t wd = nullptr;
    cudnnConvolutionDescriptor_t cd = nullptr;
    cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    void *ws = nullptr;
    size_t ws_bytes = 0;
    int yn = 0, yc = 0, yh = 0, yw = 0;

    // x [1, C, H, W] (NHWC in memory), filter [K, C / groups, R, S], padding, stride, groups.
    void init(int C, int H, int W, int K, int R, int S, int pad_h, int pad_w, int stride,
              int groups, Pool &pool) {
        CUDNN_CHECK(dn->cudnnCreate(&h));
        CUDNN_CHECK(dn->cudnnSetStream(h, 0));
        CUDNN_CHECK(dn->cudnnCreateTensorDescriptor(&xd));
        CUDNN_CHECK(dn->cudnnCreateTensorDescriptor(&yd));
        CUDNN_CHECK(dn->cudnnCreateFilterDescriptor(&wd));
        CUDNN_CHECK(dn->cudnnCreateConvolutionDescriptor(&cd));
        CUDNN_CHECK(
            dn->cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, 1, C, H, W));
        CUDNN_CHECK(dn->cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, K,
                                                   C / groups, R, S));
        CUDNN_CHECK(dn->cudnnSetConvolution2dDescriptor(cd, pad_h, pad_w, stride, stride, 1, 1,
                                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        CUDNN_CHECK(dn->cudnnSetConvolutionGroupCount(cd, groups));
        CUDNN_CHECK(dn->cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH));
        CUDNN_CHECK(dn->cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &yn, &yc, &yh, &yw));
        CUDNN_CHECK(
            dn->cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, yn, yc, yh, yw));
        cudnnConvolutionFwdAlgoPerf_t perf[8];
        int found = 0;
        CUDNN_CHECK(dn->cudnnFindConvolutionForwardAlgorithm(h, xd, wd, cd, yd, 8, &found, perf));
        algo = perf[0].algo;
        for (int i = 0; i < found; i++)
            if (perf[i].status == CUDNN_STATUS_SUCCESS) {
                algo = perf[i].algo;
                break;
            }
        CUDNN_CHECK(
            dn->cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &ws_bytes));
        ws = pool.alloc(ws_bytes);
    }
    void run(const void *x, const void *w, void *y, cudaStream_t st) {
        const float one = 1.0f, zero = 0.0f;
        CUDNN_CHECK(dn->cudnnSetStream(h, st));
        CUDNN_CHECK(dn->cudnnConvolutionForward(h, &one, xd, x, wd, w, cd, algo, ws, ws_bytes,
                                                &zero, yd, y));
    }
    explicit CudnnConv(const g4_cudnn_api *api) : dn(api) {}
    ~CudnnConv() {
        if (cd) dn->cudnnDestroyConvolutionDescriptor(cd);
        if (wd) dn->cudnnDestroyFilterDescriptor(wd);
        if (yd) dn->cudnnDestroyTensorDescriptor(yd);
        if (xd) dn->cudnnDestroyTensorDescriptor(xd);
        if (h) dn->cudnnDestroy(h);
    }
};

// SSCP layer: H x W x C_in -> Ho x Wo x C_out. Bytes: x, w, y once; FLOPs: 2 * outputs * 9 C_in.
int bench_sscp(const char *f, int reps, g4_kbench_row *rows, int n, int max, int H, int W, int Ci,
               int Co) {
    char shape[96];
    snprintf(shape, sizeof shape, "H=%d W=%d %d->%d ch 3x3 s2", H, W, Ci, Co);
    if (!g4b::match(f, "sscp", shape)) return n;
    Pool pool;
    const int Ho = (H + 1) / 2, Wo = (W + 1) / 2;
    const size_t nx = (size_t)H * W * Ci, ny = (size_t)Ho * Wo * Co;
    const double bytes = nx * 2.0 + ny * 2.0 + (double)Co * Ci * 9 * 2;
    const double flops = 2.0 * ny * 9 * Ci;
    const int copies = g4_kbench_copies((size_t)bytes);
    std::vector<uint16_t *> x(copies), y(copies);
    for (int c = 0; c < copies; c++)
        x[c] = pool.f16(nx, 30 + c, -4, 4), y[c] = (uint16_t *)pool.alloc(2 * ny);
    uint16_t *w = pool.f16((size_t)Co * Ci * 9, 40, -0.5f, 0.5f),
             *lw = pool.f16(Co, 41, 0.5f, 1.5f);
    // cuDNN wants its NHWC filter as [K][R][S][C]; ours reads OIHW. Same bytes, layouts differ.
    uint16_t *w_nhwc = pool.f16((size_t)Co * Ci * 9, 42, -0.5f, 0.5f);
    const g4_cudnn_api *dn = cudnn_or_say();
    CudnnConv cv(dn);
    std::vector<uint16_t *> yb(copies);
    if (dn) {
        cv.init(Ci, H, W, Co, 3, 3, 1, 1, 2, 1, pool);
        for (int c = 0; c < copies; c++)
            yb[c] = (uint16_t *)pool.alloc(2 * (size_t)cv.yh * cv.yw * cv.yc);
    }
    auto ours = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        g4_sscp_conv(y[c], x[c], 0, nullptr, w, lw, H, W, Ci, Co, 1e-6f, st);
    };
    auto base = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        cv.run(x[c], w_nhwc, yb[c], st);
    };
    return mark_not_loaded(dn, rows, n,
                           g4b::add_row(rows, n, max, "sscp", shape, bytes, flops, reps, copies,
                                        ours, base, dn ? "cudnn" : nullptr));
}

int bench_dwconv(const char *f, int reps, g4_kbench_row *rows, int n, int max, int T, int C,
                 int fused) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d C=%d k=5 %s", T, C, fused ? "glu+norm+silu" : "conv only");
    if (!g4b::match(f, "dwconv", shape)) return n;
    Pool pool;
    const int K = 5, xw = fused ? 2 * C : C;
    const double bytes = (double)T * xw * 2 + (double)T * C * 2 + (double)C * K * 2;
    const double flops = 2.0 * T * C * K;
    const int copies = g4_kbench_copies((size_t)bytes);
    std::vector<uint16_t *> x(copies), y(copies), xb(copies), yb(copies);
    const g4_cudnn_api *dn = cudnn_or_say();
    CudnnConv cv(dn);
    if (dn) cv.init(C, 1, T, C, 1, K, 0, K - 1, 1, C, pool);
    for (int c = 0; c < copies; c++) {
        x[c] = pool.f16((size_t)T * xw, 50 + c, -3, 3),
        y[c] = (uint16_t *)pool.alloc(2 * (size_t)T * C);
        if (dn) {
            xb[c] = pool.f16((size_t)T * C, 60 + c, -3, 3);
            yb[c] = (uint16_t *)pool.alloc(2 * (size_t)cv.yh * cv.yw * cv.yc);
        }
    }
    uint16_t *w = pool.f16((size_t)C * K, 70, -1, 1), *nw = pool.f16(C, 71, 0.5f, 1.5f);
    auto ours = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        g4_dwconv1d(y[c], x[c], w, T, C, K, fused, fused ? 65504.0f : 0.0f, fused ? nw : nullptr,
                    1e-6f, fused, st);
    };
    auto base = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        cv.run(xb[c], w, yb[c], st);
    };
    return mark_not_loaded(dn, rows, n,
                           g4b::add_row(rows, n, max, "dwconv", shape, bytes, flops, reps, copies,
                                        ours, base, dn ? "cudnn" : nullptr));
}

} // namespace

extern "C" int g4_kbench_conv(const char *filter, int reps, g4_kbench_row *rows, int max) {
    int n = 0;
    n = bench_sscp(filter, reps, rows, n, max, 2999, 128, 1, 128); // layer 0, 30 s
    n = bench_sscp(filter, reps, rows, n, max, 1500, 64, 128, 32); // layer 1
    n = bench_dwconv(filter, reps, rows, n, max, 750, 1024, 1);
    n = bench_dwconv(filter, reps, rows, n, max, 750, 1024, 0);
    return n;
}
