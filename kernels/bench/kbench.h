// kbench.h: timing and reporting for kernel benchmarks (`g4cu bench --kernels`).
//
// How a number counts (../shared/bench/TARGETS.md): warm up, then time >= 20 repetitions with
// CUDA events, report the median; inputs rotate through enough copies that the working set of
// one pass exceeds the L2 (50 MB on H200), so repeated launches stream from HBM, not L2.
// Each row states the bytes the op must move (each input read once, each output written once)
// and its FLOPs, so GB/s, TFLOP/s and the share of the measured H200 ceilings follow.
#ifndef G4_KBENCH_H
#define G4_KBENCH_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define G4_H200_COPY_GBPS 4250.0  // measured device copy (read + write), GB/s
#define G4_H200_BF16_TFLOPS 795.0 // measured dense bf16 GEMM 8192^3, TFLOP/s

typedef struct {
    double median_ms, min_ms, mean_ms, stdev_ms;
    int reps;
} g4_kbench_time;

// One launch of the op on `stream` (a cudaStream_t); rep counts up from 0 so the callee can
// rotate input copies.
typedef void (*g4_kbench_launch_on)(void *ctx, int rep, void *stream);

// Times fn as a CUDA graph: runs `per_graph` launches (rep = 0 .. per_graph - 1) once eagerly
// (module loading, library workspaces and one-time attributes happen outside the capture),
// captures them into one graph on a private stream, replays it `warmup` times, then times `reps`
// replays each between two events. Returns per-launch statistics (replay time / per_graph).
// For kernels of a few microseconds this measures the GPU time a decode step captured in a graph
// sees, instead of host launch overhead; for long kernels it equals eager launches timed with
// events.
g4_kbench_time g4_kbench_run_graph(g4_kbench_launch_on fn, void *ctx, int per_graph, int warmup,
                                   int reps);

// How many copies of a `bytes_per_set` input set to rotate through so one full rotation moves
// more than 2x the L2 size (at least 1, at most 64).
int g4_kbench_copies(size_t bytes_per_set);

// One result row: our kernel and its library baseline (cuBLAS/cuDNN) from the same run.
typedef struct {
    char op[32];     // "gemm_f16", "gemv_q4", "attn_decode", ...
    char shape[96];  // "M=1 N=2048 K=1536"
    double bytes;    // bytes the op must move
    double flops;    // floating-point operations (0 for pure data movement)
    g4_kbench_time ours;
    g4_kbench_time base; // reps == 0 when there is no baseline (not timed)
    char base_name[32];  // "cublas", "cudnn", "" (none), "cublas: not loaded" (baselines.h)
} g4_kbench_row;

// An area's benchmark: fills up to max rows for cases whose op or shape contains `filter`
// (NULL = all); returns the number of rows.
typedef int (*g4_kbench_area)(const char *filter, int reps, g4_kbench_row *rows, int max);

// Writes a header and rows to f as a fixed-width table: time, GB/s, % of copy, TFLOP/s, % of
// bf16 peak, baseline time and ratio (ours / baseline throughput).
void g4_kbench_print(FILE *f, const g4_kbench_row *rows, int n, int header);
// Writes rows as a JSON array to path (atomically). Returns G4_OK or G4_EUSER.
int g4_kbench_json(const char *path, const g4_kbench_row *rows, int n, const char *device);

#ifdef __cplusplus
}
#endif

#endif
