// profile.cu: the CUDA backend's per-op profile (G4_PROFILE=1): events around every op of an
// eager forward (backend_cuda.cu opens a g4k::ProfScope per op); g4_cuda_profile_report
// (kernels/cuda_util.h) prints one decode step's time split by op, launch gaps included (a graph
// replay hides part of the gaps, so this is an upper bound per op). Not recorded while a graph
// is being captured.
#include "kernels/profile.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/cuda_util.h"

// One decode step's time split by op, launch gaps included (a graph replay hides part of the
// gaps, so this is an upper bound per op). Not recorded while a graph is being captured.
struct g4k::ProfEntry {
    const char *name;
    cudaEvent_t a, b;
};
static g4k::ProfEntry *prof_entries;
static int prof_n, prof_cap, prof_on = -1;

g4k::ProfScope::ProfScope(const char *name, cudaStream_t stream) : st(stream) {
    if (prof_on < 0) prof_on = getenv("G4_PROFILE") && strcmp(getenv("G4_PROFILE"), "0");
    if (!prof_on) return;
    cudaStreamCaptureStatus cs;
    G4_CUDA_CHECK(cudaStreamIsCapturing(st, &cs));
    if (cs != cudaStreamCaptureStatusNone) return;
    if (prof_n == prof_cap) {
        prof_cap = prof_cap ? 2 * prof_cap : 4096;
        prof_entries =
            (g4k::ProfEntry *)g4_realloc(prof_entries, sizeof(g4k::ProfEntry) * prof_cap);
        for (int i = prof_n; i < prof_cap; i++) {
            G4_CUDA_CHECK(cudaEventCreate(&prof_entries[i].a));
            G4_CUDA_CHECK(cudaEventCreate(&prof_entries[i].b));
        }
    }
    e = &prof_entries[prof_n++];
    e->name = name;
    G4_CUDA_CHECK(cudaEventRecord(e->a, st));
}

g4k::ProfScope::~ProfScope() {
    if (e) G4_CUDA_CHECK(cudaEventRecord(e->b, st));
}

extern "C" void g4_cuda_profile_reset(void) {
    prof_n = 0;
}

extern "C" void g4_cuda_profile_report(FILE *f, double steps) {
    if (prof_n == 0) return;
    G4_CUDA_CHECK(cudaDeviceSynchronize());
    const char *names[64];
    double ms[64] = {0};
    int count[64] = {0}, n = 0;
    double total = 0;
    for (int i = 0; i < prof_n; i++) {
        float t;
        G4_CUDA_CHECK(cudaEventElapsedTime(&t, prof_entries[i].a, prof_entries[i].b));
        int k = 0;
        while (k < n && strcmp(names[k], prof_entries[i].name)) k++;
        if (k == n && n < 64) names[n++] = prof_entries[i].name;
        if (k < 64) ms[k] += t, count[k]++;
        total += t;
    }
    for (int i = 0; i < n; i++) // sort by time, descending
        for (int j = i + 1; j < n; j++)
            if (ms[j] > ms[i]) {
                double tm = ms[i];
                ms[i] = ms[j];
                ms[j] = tm;
                int tc = count[i];
                count[i] = count[j];
                count[j] = tc;
                const char *tn = names[i];
                names[i] = names[j];
                names[j] = tn;
            }
    fprintf(f, "  %-18s %8s %10s %10s %7s\n", "op", "calls", "ms/step", "us/call", "share");
    for (int i = 0; i < n; i++)
        fprintf(f, "  %-18s %8.0f %10.4f %10.2f %6.1f%%\n", names[i], count[i] / steps,
                ms[i] / steps, 1e3 * ms[i] / count[i], 100 * ms[i] / total);
    fprintf(f, "  %-18s %8.0f %10.4f (sum of op times; launches per step %.0f)\n", "total",
            prof_n / steps, total / steps, prof_n / steps);
    prof_n = 0;
}
