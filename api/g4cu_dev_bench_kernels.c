// g4cu_dev_bench_kernels.c: `g4cu bench --kernels` (include/g4cu_dev.h g4cu_dev_bench_kernels):
// kernel benchmarks against the H200 ceilings and their library baselines
// (kernels/bench/kbench.h). Each area's table comes from a g4_kbench_* function
// (kernels/bench/bench_*.cu).
#include <g4cu_dev.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "base/progress.h"
#include "kernels/bench/kbench.h"
#include "kernels/cuda_util.h"
#ifndef G4_NO_CUDA
#include <cuda_runtime_api.h>

#include "kernels/bench/baselines.h"
#endif

// (kernels/bench/*.cu: not in a build without CUDA, where bench_kernels stops at the device)
int g4_kbench_gemm(const char *filter, int reps, g4_kbench_row *rows, int max);
int g4_kbench_attention(const char *filter, int reps, g4_kbench_row *rows, int max);
int g4_kbench_ops(const char *filter, int reps, g4_kbench_row *rows, int max);
int g4_kbench_conv(const char *filter, int reps, g4_kbench_row *rows, int max);
int g4_kbench_handover(const char *filter, int reps, g4_kbench_row *rows, int max);
int g4_kbench_stepskel(const char *filter, int reps, g4_kbench_row *rows, int max);

#define MAX_ROWS                                                                                   \
    4096 // (an unfiltered run: ~900 rows in 2026-12; past it a row would be lost, so the run says
         // so)

int g4cu_dev_cuda_device_count(const char **why) {
    const char *w = NULL;
    const int n = g4_cuda_device_count(&w);
    if (why) *why = n ? NULL : w ? w : "unknown";
    return n;
}

int g4cu_dev_gpu_libraries(FILE *out) {
    if (!out) return g4_api_code(g4_fail(G4_EUSER, "g4cu_dev_gpu_libraries: out is NULL"));
#ifdef G4_NO_CUDA
    fprintf(out, "CUDA: none (built without CUDA: --backend cpu only)\n");
#else
    fprintf(out, "CUDA runtime %d.%d (CUDART_VERSION %d)\n", CUDART_VERSION / 1000,
            CUDART_VERSION % 1000 / 10, CUDART_VERSION);
    const char *why = "", *from = "";
    fprintf(out, "cuBLAS %d.%d.%d (headers), ", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR,
            CUBLAS_VER_PATCH);
    const g4_cublas_api *bl = g4_cublas(&why, &from);
    int v[3] = {-1, -1, -1};
    if (bl && bl->cublasGetProperty(MAJOR_VERSION, &v[0]) == CUBLAS_STATUS_SUCCESS &&
        bl->cublasGetProperty(MINOR_VERSION, &v[1]) == CUBLAS_STATUS_SUCCESS &&
        bl->cublasGetProperty(PATCH_LEVEL, &v[2]) == CUBLAS_STATUS_SUCCESS)
        fprintf(out, "loaded %d.%d.%d (%s)\n", v[0], v[1], v[2], from);
    else
        fprintf(out, "%s\n", bl ? "loaded, version unknown (cublasGetProperty failed)" : why);
    fprintf(out, "cuDNN %d.%d.%d (headers), ", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
    const g4_cudnn_api *dn = g4_cudnn(&why, &from);
    if (dn) { // (MAJOR * 10000 + MINOR * 100 + PATCH since cuDNN 9, as CUDNN_VERSION)
        const size_t d = dn->cudnnGetVersion();
        fprintf(out, "loaded %zu.%zu.%zu (%s)\n", d / 10000, d % 10000 / 100, d % 100, from);
    } else {
        fprintf(out, "%s\n", why);
    }
#endif
    return G4CU_OK;
}

void g4cu_dev_bench_kernels_params_default(g4cu_dev_bench_kernels_params *p) {
    *p = (g4cu_dev_bench_kernels_params){.reps = 20};
}

static int bench_kernels(const g4cu_dev_bench_kernels_params *o, FILE *out) {
    const char *filter = o->filter, *json = o->json;
    const int reps = o->reps;
    if (reps < 1 || reps > 100000)
        return g4_fail(G4_EUSER, "bench: reps %d: expected 1 to 100000", reps);
    int rc;
    if (json && (rc = g4_check_output(json))) return rc;
    const char *why = NULL;
    if (g4cu_dev_cuda_device_count(&why) == 0)
        return g4_fail(G4_EINTERNAL, "bench: no usable CUDA device (%s)", why);
#ifdef G4_NO_CUDA
    (void)filter; // (not reached: a build without CUDA has no device, and no kernels to time)
    return G4_EINTERNAL;
#else
    char dev[256];
    g4_cuda_describe(dev, sizeof dev);
    fprintf(out, "device: %s\n", dev);
    fprintf(out,
            "ceilings: copy %.0f GB/s, dense bf16 %.0f TFLOP/s; median of %d timed graph "
            "replays, inputs rotated past 2x L2\n",
            G4_H200_COPY_GBPS, G4_H200_BF16_TFLOPS, reps);
    struct {
        const char *name;
        g4_kbench_area fn;
    } areas[] = {
        {"gemm", g4_kbench_gemm},
        {"attention", g4_kbench_attention},
        {"ops", g4_kbench_ops},
        {"conv", g4_kbench_conv},
        {"handover", g4_kbench_handover},
        {"stepskel", g4_kbench_stepskel},
    };
    g4_kbench_row *rows = g4_calloc(MAX_ROWS, sizeof *rows);
    int n = 0;
    const int n_areas = (int)(sizeof areas / sizeof areas[0]);
    g4_progress bar;
    g4_progress_start(&bar, o->progress, "bench --kernels", n_areas, 0);
    for (int i = 0; i < n_areas; i++) {
        g4_progress_note(&bar, "%s", areas[i].name);
        const int got = areas[i].fn(filter, reps, rows + n, MAX_ROWS - n);
        g4_kbench_print(out, rows + n, got, n == 0);
        fflush(out);
        n += got;
        g4_progress_step(&bar);
    }
    g4_progress_end(&bar);
    if (n == MAX_ROWS)
        fprintf(out,
                "bench --kernels: %d rows, the most one run holds: rows past them were not run "
                "(narrow --filter)\n",
                n);
    if (n == 0) fprintf(out, "no benchmark matched the filter '%s'\n", filter ? filter : "");
    rc = G4_OK;
    if (json && !(rc = g4_kbench_json(json, rows, n, dev)))
        fprintf(out, "wrote %s (%d rows)\n", json, n);
    free(rows);
    return rc;
#endif
}

int g4cu_dev_bench_kernels(const g4cu_dev_bench_kernels_params *p, FILE *out) {
    g4cu_dev_bench_kernels_params d;
    if (!p) g4cu_dev_bench_kernels_params_default(&d), p = &d;
    if (!out) return g4_api_code(g4_fail(G4_EUSER, "g4cu_dev_bench_kernels: out is NULL"));
    return g4_api_code(bench_kernels(p, out));
}
