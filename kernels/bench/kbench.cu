// kbench.cu: event timing, L2 rotation and the report table (see kbench.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/base.h"
#include "kernels/bench/kbench.h"
#include "kernels/cuda_util.h"

// Median, min, mean and sample standard deviation of per-launch times (ms).
static g4_kbench_time kbench_stats(std::vector<double> ms) {
    const int reps = (int)ms.size();
    g4_kbench_time r{};
    r.reps = reps;
    double sum = 0;
    for (double v : ms) sum += v;
    r.mean_ms = sum / reps;
    double var = 0;
    for (double v : ms) var += (v - r.mean_ms) * (v - r.mean_ms);
    r.stdev_ms = reps > 1 ? std::sqrt(var / (reps - 1)) : 0;
    std::sort(ms.begin(), ms.end());
    r.min_ms = ms[0];
    r.median_ms = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    return r;
}

extern "C" g4_kbench_time g4_kbench_run_graph(g4_kbench_launch_on fn, void *ctx, int per_graph,
                                              int warmup, int reps) {
    G4_ASSERT(reps >= 1 && per_graph >= 1);
    cudaStream_t st;
    G4_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int i = 0; i < per_graph; i++) fn(ctx, i, st);
    G4_CUDA_CHECK(cudaGetLastError());
    G4_CUDA_CHECK(cudaStreamSynchronize(st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    G4_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per_graph; i++) fn(ctx, i, st);
    G4_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    G4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < warmup; i++) G4_CUDA_CHECK(cudaGraphLaunch(exec, st));
    G4_CUDA_CHECK(cudaStreamSynchronize(st));
    std::vector<cudaEvent_t> ev(2 * (size_t)reps);
    for (auto &e : ev) G4_CUDA_CHECK(cudaEventCreate(&e));
    for (int i = 0; i < reps; i++) {
        G4_CUDA_CHECK(cudaEventRecord(ev[2 * i], st));
        G4_CUDA_CHECK(cudaGraphLaunch(exec, st));
        G4_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], st));
    }
    G4_CUDA_CHECK(cudaStreamSynchronize(st));
    std::vector<double> ms(reps);
    for (int i = 0; i < reps; i++) {
        float t;
        G4_CUDA_CHECK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
        ms[i] = t / per_graph;
    }
    for (auto &e : ev) G4_CUDA_CHECK(cudaEventDestroy(e));
    G4_CUDA_CHECK(cudaGraphExecDestroy(exec));
    G4_CUDA_CHECK(cudaGraphDestroy(graph));
    G4_CUDA_CHECK(cudaStreamDestroy(st));
    return kbench_stats(ms);
}

extern "C" int g4_kbench_copies(size_t bytes_per_set) {
    int l2 = 0;
    G4_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    size_t want = 2 * (size_t)l2;
    int n = bytes_per_set ? (int)((want + bytes_per_set - 1) / bytes_per_set) : 1;
    return std::max(1, std::min(64, n));
}

extern "C" void g4_kbench_print(FILE *f, const g4_kbench_row *rows, int n, int header) {
    if (header)
        fprintf(f, "%-16s %-36s %10s %9s %6s %9s %6s | %-8s %10s %7s\n", "op", "shape", "ms",
                "GB/s", "%copy", "TFLOP/s", "%peak", "base", "base ms", "ratio");
    for (int i = 0; i < n; i++) {
        const g4_kbench_row *r = &rows[i];
        double s = r->ours.median_ms * 1e-3;
        double gbs = r->bytes / s / 1e9, tfl = r->flops / s / 1e12;
        fprintf(f, "%-16s %-36s %10.4f %9.1f %5.1f%% %9.2f %5.1f%% | ", r->op, r->shape,
                r->ours.median_ms, gbs, 100 * gbs / G4_H200_COPY_GBPS, tfl,
                100 * tfl / G4_H200_BF16_TFLOPS);
        if (r->base.reps)
            fprintf(f, "%-8s %10.4f %6.2fx\n", r->base_name, r->base.median_ms,
                    r->base.median_ms / r->ours.median_ms);
        else // (a baseline that could not run, e.g. "cublas: not loaded", names itself)
            fprintf(f, "%-8s %10s %7s\n", r->base_name[0] ? r->base_name : "-", "-", "-");
    }
}

extern "C" int g4_kbench_json(const char *path, const g4_kbench_row *rows, int n,
                              const char *device) {
    std::string s = "{\"device\": \"";
    s += device;
    s += "\", \"ceilings\": {\"copy_gbps\": 4250, \"bf16_tflops\": 795}, \"rows\": [\n";
    char buf[1024];
    for (int i = 0; i < n; i++) {
        const g4_kbench_row *r = &rows[i];
        double sec = r->ours.median_ms * 1e-3;
        snprintf(buf, sizeof buf,
                 "  {\"op\": \"%s\", \"shape\": \"%s\", \"bytes\": %.0f, \"flops\": %.0f, "
                 "\"median_ms\": %.6f, \"min_ms\": %.6f, \"stdev_ms\": %.6f, \"reps\": %d, "
                 "\"gbps\": %.2f, \"tflops\": %.3f, \"baseline\": \"%s\", \"baseline_ms\": %.6f}%s\n",
                 r->op, r->shape, r->bytes, r->flops, r->ours.median_ms, r->ours.min_ms,
                 r->ours.stdev_ms, r->ours.reps, r->bytes / sec / 1e9, r->flops / sec / 1e12,
                 r->base_name, r->base.reps ? r->base.median_ms : -1.0, i + 1 < n ? "," : "");
        s += buf;
    }
    s += "]}\n";
    return g4_write_file_atomic(path, s.data(), s.size());
}
