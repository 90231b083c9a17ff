// g4cu bench --kernels [--filter S] [--reps N] [--json F]: kernel benchmarks against the H200
// ceilings and their library baselines. `g4cu bench PKG [PKG2]`: the whole model. On the public
// C API (include/g4cu_dev.h: g4cu_dev_bench_kernels, g4cu_dev_bench_model).
#include <g4cu_dev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

static int bench_kernels(const char *filter, int reps, const char *json) {
    const char *why = NULL;
    if (g4cu_dev_cuda_device_count(&why) == 0) {
        fprintf(stderr, "g4cu bench: no usable CUDA device (%s)\n", why);
        return 2;
    }
    g4cu_dev_bench_kernels_params p;
    g4cu_dev_bench_kernels_params_default(&p);
    p.filter = filter;
    p.reps = reps;
    p.json = json;
    p.progress = stderr;
    const int rc = g4cu_dev_bench_kernels(&p, stdout);
    return rc ? g4_cli_fail(rc) : 0;
}

static int cmd_bench(int argc, char **argv) {
    const char *filter = NULL, *json = NULL, *pkgs[4] = {NULL}, *backend = "cuda";
    const char *hf_dir = NULL, *hf_script = NULL; // NULL: bench_hf.py beside the binary
    const char *format = NULL;                    // -o md|csv|json
    const char *batch_rows = NULL;                // --batch-rows N[,N...]
    int kernels = 0, n_pkgs = 0, ple_host = 0, step_model = 0, grid = 0;
    long long reps = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kernels")) {
            kernels = 1;
        } else if (!strcmp(argv[i], "--step-model")) {
            step_model = 1;
        } else if (!strcmp(argv[i], "--grid")) {
            grid = 1;
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
        } else if (!strcmp(argv[i], "-o")) {
            format = ++i < argc ? argv[i] : "";
            if (strcmp(format, "md") && strcmp(format, "csv") && strcmp(format, "json"))
                return g4_cli_usage_error("bench", "-o expects md, csv or json, got '%s'", format);
        } else if (!strcmp(argv[i], "--batch-rows")) {
            if (++i >= argc) return g4_cli_usage_error("bench", "--batch-rows needs N[,N...]");
            batch_rows = argv[i];
        } else if (!strcmp(argv[i], "--ple-host")) {
            ple_host = 1;
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
    if (grid && !step_model) return g4_cli_usage_error("bench", "--grid goes with --step-model");
    if (step_model) { // (CPU only: the skeleton's cost model)
        if (kernels || n_pkgs)
            return g4_cli_usage_error("bench", "--step-model takes no --kernels or packages");
        const int rc_m = g4cu_dev_step_model(stdout, grid, 5);
        return rc_m ? g4_cli_fail(rc_m) : 0;
    }
    if (kernels && n_pkgs)
        return g4_cli_usage_error("bench", "give either --kernels or packages, not both");
    // The output is checked before the benchmark runs, not found unwritable after it.
    int rc;
    if (json && (rc = g4_check_output(json))) return g4_cli_fail(rc);
    if (kernels && format)
        return g4_cli_usage_error("bench", "-o applies to the model benchmark, not --kernels");
    if (kernels) return bench_kernels(filter, (int)reps, json);
    if (!n_pkgs) return g4_cli_usage_error("bench", "expected --kernels or a package directory");
    g4cu_dev_bench_params p;
    g4cu_dev_bench_params_default(&p);
    p.backend = backend;
    p.ple_host = ple_host;
    p.reps = (int)reps;
    p.json = json;
    p.format = format;
    p.hf_dir = hf_dir;
    p.hf_script = hf_script;
    p.filter = filter;
    p.batch_rows = batch_rows;
    p.progress = stderr; // each row as it is measured
    // The human-readable lines go to stderr when -o puts a table on stdout.
    rc = g4cu_dev_bench_model(pkgs, n_pkgs, &p, format ? stderr : stdout, stdout);
    return rc ? g4_cli_fail(rc) : 0;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt bench_opts[] = {
    {"--backend", "B", "cuda or cpu (default cuda)"},
    {"--ple-host", NULL, "cuda: the per-layer embedding table in pinned host memory (default off)"},
    {"--hf", "HF_DIR", "also time HF transformers on this checkpoint (default: no peer)"},
    {"--hf-script", "F", "the HF peer script (default: bench_hf.py beside the binary)"},
    {"--kernels", NULL, "time the kernels against the H200 ceilings instead of packages"},
    {"--step-model", NULL,
     "no GPU: the step skeleton's cost model, against the session-30 H100 rows, and its "
     "prediction of the bench's plans"},
    {"--grid", NULL, "with --step-model: also rank a grid of plan options (~30 s)"},
    {"--filter", "S",
     "only the kernels, or the rows (pp128, tg128 @ pp128, audio 30 s, ...), whose name "
     "contains S (default: all)"},
    {"--batch-rows", "N[,N...]",
     "instead of the rows above: N sequences (128-token prompts) decoded together for 128 "
     "steps, for each N: step ms, per-stream and total tok/s (default: off)"},
    {"--reps", "N", "repetitions of each measurement (default 20)"},
    {"-o", "md|csv|json",
     "a table on stdout: each measurement's mean and sd over the reps "
     "(default: none)"},
    {"--json", "F", "also write the results as JSON to F (default: none)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_bench = {
    "bench", cmd_bench,
    "PKG [PKG2] [--backend cuda|cpu] [--ple-host] [--batch-rows N[,N...]] [--hf HF_DIR "
    "[--hf-script F]] [-o md|csv|json] [--filter S] | --kernels [--filter S]  "
    "[--reps N] [--json F] | --step-model [--grid]   "
    "model tok/s (decode through g4cu generate's path), or kernels vs the "
    "H200 ceilings",
    bench_opts, NULL};
