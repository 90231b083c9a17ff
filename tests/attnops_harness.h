// attnops_harness.h: the table-driven GPU-vs-CPU harness of tests/test_cuda_attention.c,
// test_cuda_ops.c and test_cuda_conv.c (static functions; include once per test binary).
//
//  * `--op S` / `--shape S` run only the cases whose op / shape string contains S; every case
//    prints its op and parameters first, so a failure can be rerun alone.
//  * Device outputs live between two guard zones of GUARD bytes filled with a byte pattern that
//    must come back unchanged (out-of-bounds writes), and are poisoned with NaN before the launch
//    (unwritten elements fail).
//  * Inputs are seeded random values rounded to fp16 (never zeros); the CPU reference runs on the
//    same rounded values. Comparisons: |got - want| <= atol + rtol * |want| per element with
//    named tolerances per op; NaN / inf in the output or in the reference always fail
//    (g4t_compare, tests/test_util.h: the one NaN rule of the op harnesses).
//  * No GPU: exit 77 with the reason (ctest counts it as skipped).
//  * `--list` (no GPU needed): prints the cases the filters select ("case OP SHAPE") and runs
//    none; a filter that selects no case fails, as a run does (tools/gpu/sanitize.sh's filters
//    are checked against the table this way: test_gpu_filters.sh).
#ifndef G4_ATTNOPS_HARNESS_H
#define G4_ATTNOPS_HARNESS_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "kernels/cuda_util.h"
#include "tests/test_util.h"

#define HX_GUARD      256
#define HX_GUARD_BYTE 0xA5

static const char *hx_op_filter, *hx_shape_filter;
static int hx_cases_run, hx_cases_failed, hx_list;

static inline void hx_cuda(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "CUDA error %s: %s\n", what, cudaGetErrorString(e));
        exit(2);
    }
}
#define HX_CUDA(call) hx_cuda((call), #call)

// Parses --op / --shape; returns 77 (after printing why) when there is no GPU, else 0.
static inline int hx_init(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--op") && i + 1 < argc)
            hx_op_filter = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            hx_shape_filter = argv[++i];
        else if (!strcmp(argv[i], "--list"))
            hx_list = 1;
        else {
            fprintf(stderr, "usage: %s [--op SUBSTRING] [--shape SUBSTRING] [--list]\n", name);
            exit(1);
        }
    }
    if (hx_list) return 0;
    const char *why = NULL;
    if (g4_cuda_device_count(&why) == 0) return g4t_skip(name, why ? why : "no CUDA device");
    char dev[256];
    g4_cuda_describe(dev, sizeof dev);
    printf("%s on %s\n", name, dev);
    return 0;
}

// Whether a case runs; prints its header line when it does.
static inline int hx_case(const char *op, const char *fmt, ...) {
    char shape[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(shape, sizeof shape, fmt, ap);
    va_end(ap);
    if (hx_op_filter && !strstr(op, hx_op_filter)) return 0;
    if (hx_shape_filter && !strstr(shape, hx_shape_filter)) return 0;
    printf("case %-14s %s\n", op, shape);
    fflush(stdout);
    hx_cases_run++;
    return !hx_list;
}

// --- guarded device buffers -------------------------------------------------------------------
// Allocates bytes between two guard zones; the data part is left for an upload or a poison.
static inline void *hx_dev_alloc(size_t bytes) {
    uint8_t *p = NULL;
    HX_CUDA(cudaMalloc((void **)&p, bytes + 2 * HX_GUARD));
    HX_CUDA(cudaMemset(p, HX_GUARD_BYTE, HX_GUARD));
    HX_CUDA(cudaMemset(p + HX_GUARD + bytes, HX_GUARD_BYTE, HX_GUARD));
    return p + HX_GUARD;
}
static inline void hx_dev_free(void *p) {
    if (p) HX_CUDA(cudaFree((uint8_t *)p - HX_GUARD));
}
static inline int hx_guards_ok(const void *p, size_t bytes, const char *what) {
    uint8_t g[2 * HX_GUARD];
    HX_CUDA(cudaMemcpy(g, (const uint8_t *)p - HX_GUARD, HX_GUARD, cudaMemcpyDeviceToHost));
    HX_CUDA(cudaMemcpy(g + HX_GUARD, (const uint8_t *)p + bytes, HX_GUARD, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 2 * HX_GUARD; i++)
        if (g[i] != HX_GUARD_BYTE) {
            fprintf(
                stderr, "  %s: guard byte at offset %d from the %s of the buffer was overwritten\n",
                what, i < HX_GUARD ? i - HX_GUARD : i - HX_GUARD, i < HX_GUARD ? "start" : "end");
            return 0;
        }
    return 1;
}
static inline void hx_poison_f16(void *p, size_t n) { // 0x7E00 = fp16 NaN
    uint16_t *h = g4_malloc(2 * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = 0x7E00;
    HX_CUDA(cudaMemcpy(p, h, 2 * n, cudaMemcpyHostToDevice));
    free(h);
}
static inline void hx_poison_f32(void *p, size_t n) {
    float *f = g4_malloc(4 * (n ? n : 1));
    for (size_t i = 0; i < n; i++) f[i] = NAN;
    HX_CUDA(cudaMemcpy(p, f, 4 * n, cudaMemcpyHostToDevice));
    free(f);
}
static inline void *hx_upload(const void *host, size_t bytes) {
    void *d = hx_dev_alloc(bytes);
    if (bytes) HX_CUDA(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

// --- host data --------------------------------------------------------------------------------
// n random values in [lo, hi) rounded to fp16; *bits gets the fp16 encoding (both malloc'd).
static inline float *hx_rand_f16(unsigned long long *s, size_t n, float lo, float hi,
                                 uint16_t **bits) {
    float *f = g4_malloc(sizeof(float) * (n ? n : 1));
    uint16_t *b = g4_malloc(2 * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        float v = g4t_rand_uniform(s, lo, hi);
        if (v == 0.0f) v = 0.5f * hi; // never zeros
        b[i] = g4_f32_to_f16(v);
        f[i] = g4_f16_to_f32(b[i]);
    }
    *bits = b;
    return f;
}
static inline uint16_t *hx_to_f16(const float *x, size_t n) {
    uint16_t *b = g4_malloc(2 * (n ? n : 1));
    for (size_t i = 0; i < n; i++) b[i] = g4_f32_to_f16(x[i]);
    return b;
}
static inline float *hx_download_f16(const void *d, size_t n) {
    uint16_t *b = g4_malloc(2 * (n ? n : 1));
    float *f = g4_malloc(sizeof(float) * (n ? n : 1));
    HX_CUDA(cudaMemcpy(b, d, 2 * n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) f[i] = g4_f16_to_f32(b[i]);
    free(b);
    return f;
}
static inline float *hx_download_f32(const void *d, size_t n) {
    float *f = g4_malloc(sizeof(float) * (n ? n : 1));
    HX_CUDA(cudaMemcpy(f, d, 4 * n, cudaMemcpyDeviceToHost));
    return f;
}

// --- comparison -------------------------------------------------------------------------------
typedef g4t_cmp hx_cmp;

// Compares got with want (n values) under atol + rtol * |want|, with the NaN rule of
// g4t_compare (tests/test_util.h): a non-finite value on either side fails.
static inline hx_cmp hx_compare(const float *got, const float *want, size_t n, double atol,
                                double rtol) {
    return g4t_compare(got, want, n, atol, rtol, 0);
}

// Records the case result: prints one line, counts a failure (and a CHECK).
static inline void hx_report(const char *what, hx_cmp c, const float *got, const float *want,
                             double atol, double rtol, int guards_ok, double ms) {
    const int ok = c.bad == 0 && guards_ok;
    g4t_checks++;
    if (!ok) g4t_failures++, hx_cases_failed++;
    printf("  %-22s %s  max|err| %.3g  worst/tol %.3g  (atol %.1e rtol %.1e)%s%s%s  %.2f ms\n",
           what, ok ? "ok  " : "FAIL", c.max_err, c.max_ratio, atol, rtol,
           guards_ok ? "" : "  GUARD", c.nonfinite ? "  NONFINITE" : "",
           c.ref_nonfinite ? "  REF-NONFINITE" : "", ms);
    if (c.bad)
        printf("    %zu bad elements; worst [%zu] got %.7g want %.7g\n", c.bad, c.worst,
               got[c.worst], want[c.worst]);
    fflush(stdout);
}

static inline double hx_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline int hx_finish(const char *name) {
    printf("%s: %d cases%s, %d failed\n", name, hx_cases_run, hx_list ? " listed" : "",
           hx_cases_failed);
    if (hx_cases_run == 0) {
        printf("%s: no case matched the filters\n", name);
        return 1;
    }
    if (hx_list) return 0;
    return g4t_finish(name);
}

#endif
