// attnops_bench.cuh: helpers shared by kernels/bench/bench_attention.cu, bench_ops.cu and
// bench_conv.cu (internal; included by those .cu files only).
// defines: device-side random fills (never zeros: METHOD.md), a device buffer list freed at the
// end of a bench, the row filter, and a row filler around g4_kbench_run_graph.
#ifndef G4_ATTNOPS_BENCH_CUH
#define G4_ATTNOPS_BENCH_CUH

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "kernels/attnops_common.cuh"
#include "kernels/bench/kbench.h"
#include "kernels/cuda_util.h"

namespace g4b {

__device__ __forceinline__ float hash_uniform(uint64_t i, uint32_t seed, float lo, float hi) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull + 1;
    x ^= x >> 31, x *= 0x7FB5D329728EA185ull, x ^= x >> 27, x *= 0x81DADEF4BC2DD44Dull,
        x ^= x >> 33;
    const float u = (float)(x >> 40) * (1.0f / 16777216.0f); // [0, 1)
    const float v = lo + (hi - lo) * u;
    return v == 0.0f ? 0.5f * hi : v;
}
static __global__ void fill_f16_kernel(uint16_t *p, size_t n, uint32_t seed, float lo, float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = g4k::f2h(hash_uniform(i, seed, lo, hi));
}
static __global__ void fill_f32_kernel(float *p, size_t n, uint32_t seed, float lo, float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash_uniform(i, seed, lo, hi);
}

// Device allocations of one bench, freed together.
struct Pool {
    std::vector<void *> ptrs;
    void *alloc(size_t bytes) {
        void *p = nullptr;
        G4_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 16));
        ptrs.push_back(p);
        return p;
    }
    uint16_t *f16(size_t n, uint32_t seed, float lo, float hi) {
        uint16_t *p = static_cast<uint16_t *>(alloc(2 * n));
        fill_f16_kernel<<<1024, 256>>>(p, n, seed, lo, hi);
        G4_CUDA_LAUNCH_CHECK();
        return p;
    }
    float *f32(size_t n, uint32_t seed, float lo, float hi) {
        float *p = static_cast<float *>(alloc(4 * n));
        fill_f32_kernel<<<1024, 256>>>(p, n, seed, lo, hi);
        G4_CUDA_LAUNCH_CHECK();
        return p;
    }
    template <class T> T *upload(const T *host, size_t n) {
        T *p = static_cast<T *>(alloc(sizeof(T) * n));
        G4_CUDA_CHECK(cudaMemcpy(p, host, sizeof(T) * n, cudaMemcpyHostToDevice));
        return p;
    }
    ~Pool() {
        cudaDeviceSynchronize();
        for (void *p : ptrs) cudaFree(p);
    }
};

inline bool match(const char *filter, const char *op, const char *shape) {
    return !filter || !*filter || strstr(op, filter) || strstr(shape, filter);
}

// Times `ours` (and `base` when base_name is given) with g4_kbench_run_graph: `per_graph`
// launches (rep = 0 .. per_graph - 1, so the callee rotates through its input copies) captured
// in one CUDA graph, per-launch time of the replays: what a graph-captured step sees, without
// host launch overhead. Appends a row; returns the new row count.
template <class F, class G>
static inline int add_row(g4_kbench_row *rows, int n, int max, const char *op, const char *shape, double bytes,
            double flops, int reps, int per_graph, F ours, G base, const char *base_name) {
    if (n >= max) return n;
    g4_kbench_row r;
    memset(&r, 0, sizeof r);
    snprintf(r.op, sizeof r.op, "%s", op);
    snprintf(r.shape, sizeof r.shape, "%s", shape);
    r.bytes = bytes, r.flops = flops;
    auto call = [](void *ctx, int rep, void *st) {
        (*static_cast<F *>(ctx))(rep, static_cast<cudaStream_t>(st));
    };
    r.ours = g4_kbench_run_graph(call, &ours, per_graph, 3, reps);
    if (base_name) {
        auto callb = [](void *ctx, int rep, void *st) {
            (*static_cast<G *>(ctx))(rep, static_cast<cudaStream_t>(st));
        };
        r.base = g4_kbench_run_graph(callb, &base, per_graph, 3, reps);
        snprintf(r.base_name, sizeof r.base_name, "%s", base_name);
    }
    rows[n] = r;
    return n + 1;
}

struct NoBase {
    void operator()(int, cudaStream_t) const {}
};

} // namespace g4b

#endif
