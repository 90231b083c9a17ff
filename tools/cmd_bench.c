// g4cu bench --kernels [--filter S] [--reps N] [--json F]: kernel benchmarks against the H200
// ceilings and their library baselines (kernels/bench/kbench.h). `g4cu bench PKG [PKG2]`: the
// whole model (tools/bench_model.c).
//
// Each area's table comes from a g4_kbench_* function (kernels/bench/bench_*.cu).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "kernels/bench/kbench.h"
#include "kernels/cuda_util.h"
#include "tools/bench_model.h"
#include "tools/bench_peer.h"
#include "tools/cli.h"

int g4_kbench_gemm(const char *filter, int reps, g4_kbench_row *rows, int max);
int g4_kbench_attention(const char *filter, int reps, g4_kbench_row *rows, int max);
int g4_kbench_ops(const char *filter, int reps, g4_kbench_row *rows, int max);
int g4_kbench_conv(const char *filter, int reps, g4_kbench_row *rows, int max);

#define MAX_ROWS 1024

static int bench_kernels(const char *filter, int reps, const char *json) {
    const char *why = NULL;
    if (g4_cuda_device_count(&why) == 0) {
        fprintf(stderr, "g4cu bench: no usable CUDA device (%s)\n", why ? why : "unknown");
        return 2;
    }
    char dev[256];
    g4_cuda_describe(dev, sizeof dev);
    printf("device: %s\n", dev);
    printf("ceilings: copy %.0f GB/s, dense bf16 %.0f TFLOP/s; median of %d timed graph replays, "
           "inputs rotated past 2x L2\n",
           G4_H200_COPY_GBPS, G4_H200_BF16_TFLOPS, reps);
    struct {
        const char *name;
        g4_kbench_area fn;
    } areas[] = {
        {"gemm", g4_kbench_gemm},
        {"attention", g4_kbench_attention},
        {"ops", g4_kbench_ops},
        {"conv", g4_kbench_conv},
    };
    g4_kbench_row *rows = g4_calloc(MAX_ROWS, sizeof *rows);
    int n = 0;
    const int n_areas = (int)(sizeof areas / sizeof areas[0]);
    g4_progress bar;
    g4_progress_start(&bar, stderr, "bench --kernels", n_areas, 0);
    for (int i = 0; i < n_areas; i++) {
        g4_progress_note(&bar, "%s", areas[i].name);
        const int got = areas[i].fn(filter, reps, rows + n, MAX_ROWS - n);
        g4_kbench_print(rows + n, got, n == 0);
        fflush(stdout);
        n += got;
        g4_progress_step(&bar);
    }
    g4_progress_end(&bar);
    if (n == 0) printf("no benchmark matched the filter '%s'\n", filter ? filter : "");
    int rc = 0;
    if (json) {
        rc = g4_kbench_json(json, rows, n, dev);
        if (rc)
            rc = g4_cli_fail(rc);
        else
            printf("wrote %s (%d rows)\n", json, n);
    }
    free(rows);
    return rc;
}

static int cmd_bench(int argc, char **argv) {
    const char *filter = NULL, *json = NULL, *pkgs[4] = {NULL}, *backend = "cuda";
    const char *hf_dir = NULL, *hf_script = NULL; // NULL: bench_hf.py beside the binary
    int kernels = 0, n_pkgs = 0;
    long long reps = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kernels")) {
            kernels = 1;
        } else if (!strcmp(argv[i], "--filter")) {
            if (++i >= argc) return g4_cli_usage_error("bench", "--filter needs a value");
            filter = argv[i];
        } else if (!strcmp(argv[i], "--reps")) {
            if (++i >= argc) return g4_cli_usage_error("bench", "--reps needs a value");
            if (!g4_cli_int("bench", "--reps", argv[i], 1, 100000, &reps)) return 1;
        } else if (!strcmp(argv[i], "--json")) {
            if (++i >= argc) return g4_cli_usage_error("bench", "--json needs a file name");
            json = argv[i];
        } else if (!strcmp(argv[i], "--hf") && i + 1 < argc) {
            hf_dir = argv[++i];
        } else if (!strcmp(argv[i], "--hf-script") && i + 1 < argc) {
            hf_script = argv[++i];
        } else if (!strcmp(argv[i], "--backend")) {
            if (++i >= argc) return g4_cli_usage_error("bench", "--backend needs cpu or cuda");
            backend = argv[i];
        } else if (argv[i][0] == '-') {
            return g4_cli_usage_error("bench", "unknown option '%s'", argv[i]);
        } else if (n_pkgs < 4) {
            pkgs[n_pkgs++] = argv[i];
        } else {
            return g4_cli_usage_error("bench", "unexpected argument '%s'", argv[i]);
        }
    }
    if (kernels && n_pkgs)
        return g4_cli_usage_error("bench", "give either --kernels or packages, not both");
    // The output is checked before the benchmark runs, not found unwritable after it.
    int rc;
    if (json && (rc = g4_check_output(json))) return g4_cli_fail(rc);
    if (kernels) return bench_kernels(filter, (int)reps, json);
    if (!n_pkgs) return g4_cli_usage_error("bench", "expected --kernels or a package directory");
    if (!hf_dir) return g4_bench_model(pkgs, n_pkgs, backend, (int)reps, json, NULL, NULL);
    // The HF peer: found from the binary, and able to start, before the long benchmark.
    char *script = NULL;
    if ((rc = g4_bench_peer_find(hf_script, &script)) ||
        (rc = g4_bench_peer_check(script, hf_dir))) {
        free(script);
        return g4_cli_fail(rc);
    }
    int code = g4_bench_model(pkgs, n_pkgs, backend, (int)reps, json, hf_dir, script);
    free(script);
    return code;
}

const g4_cmd g4_cmd_bench = {"bench", cmd_bench,
                             "PKG [PKG2] [--backend cuda|cpu] [--hf HF_DIR [--hf-script F]] | "
                             "--kernels [--filter S]  [--reps N] "
                             "[--json F]   model tok/s, or kernels vs the H200 ceilings"};
