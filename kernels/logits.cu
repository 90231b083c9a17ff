// logits.cu: soft-cap + argmax over the vocabulary (oracle: ref_softcap and a first-index argmax;
// test: tests/test_cuda_ops.c --op logits; bench: --filter logits).
//
// Two-pass block reduction in one launch: CTA b of row t caps its slice of the logits in place
// and reduces it to (max, first index); the CTA that arrives last at the row's counter (atomic
// ticket after a __threadfence, the CUDA threadFenceReduction pattern) reduces the partials,
// writes argmax[t] and resets the counter, so the launch can be replayed in a CUDA graph.
// Memory-bound: V x 4 bytes read and written (1 MB each at V = 262144).
// Launched with programmatic dependent launch (kernels/pdl.cuh): nothing above the wait.
#include "kernels/logits.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"
#include "kernels/pdl.cuh"

using namespace g4k;

namespace {

constexpr int LG_THREADS = 256, LG_PER_THREAD = 8, LG_BLOCKS_MAX = 128;

// (v, i) beats (bv, bi): larger value, NaN above everything, ties to the smaller index.
__device__ __forceinline__ bool lg_better(float v, int i, float bv, int bi) {
    const bool nv = isnan(v), nb = isnan(bv);
    if (nv || nb) return nv && (!nb || i < bi);
    return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void lg_block_best(float &v, int &i, float *sv, int *si) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (lg_better(ov, oi, v, i)) v = ov, i = oi;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) sv[warp] = v, si[warp] = i;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? sv[lane] : -INFINITY;
        i = lane < (int)(blockDim.x >> 5) ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, v, o);
            const int oi = __shfl_xor_sync(0xffffffffu, i, o);
            if (lg_better(ov, oi, v, i)) v = ov, i = oi;
        }
    }
}

__global__ void __launch_bounds__(LG_THREADS)
    lg_kernel(float *logits, int V, float cap, int32_t *argmax, float *part_v, int *part_i,
              unsigned *counter) {
    g4_pdl_wait();
    g4_pdl_trigger();
    __shared__ float sv[32];
    __shared__ int si[32];
    __shared__ bool last;
    const int t = blockIdx.y, nb = gridDim.x;
    float *row = logits + (size_t)t * V;
    const int per_block = (V / 8 + nb - 1) / nb * 8; // multiple of 8: whole float4 pairs
    const int begin = blockIdx.x * per_block, end = min(V, begin + per_block);
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = begin + threadIdx.x * 8; i < end; i += LG_THREADS * 8) {
        float4 a = *reinterpret_cast<float4 *>(row + i),
               b = *reinterpret_cast<float4 *>(row + i + 4);
        float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int e = 0; e < 8; e++) {
            if (cap > 0.0f) x[e] = cap * tanhf(x[e] / cap);
            if (lg_better(x[e], i + e, bv, bi)) bv = x[e], bi = i + e;
        }
        if (cap > 0.0f) {
            *reinterpret_cast<float4 *>(row + i) = make_float4(x[0], x[1], x[2], x[3]);
            *reinterpret_cast<float4 *>(row + i + 4) = make_float4(x[4], x[5], x[6], x[7]);
        }
    }
    lg_block_best(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        part_v[(size_t)t * nb + blockIdx.x] = bv;
        part_i[(size_t)t * nb + blockIdx.x] = bi;
        __threadfence(); // partials visible device-wide before the ticket
        last = atomicAdd(&counter[t], 1u) == (unsigned)nb - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    bv = -INFINITY, bi = 0x7fffffff;
    for (int b = threadIdx.x; b < nb; b += LG_THREADS) {
        const float v = *((volatile float *)&part_v[(size_t)t * nb + b]);
        const int i = *((volatile int *)&part_i[(size_t)t * nb + b]);
        if (lg_better(v, i, bv, bi)) bv = v, bi = i;
    }
    __syncthreads(); // sv/si reuse
    lg_block_best(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        argmax[t] = bi;
        counter[t] = 0; // ready for the next launch (graph replay)
    }
}

int lg_blocks(int V) {
    int b = (V + LG_THREADS * LG_PER_THREAD - 1) / (LG_THREADS * LG_PER_THREAD);
    return b < 1 ? 1 : b > LG_BLOCKS_MAX ? LG_BLOCKS_MAX : b;
}

size_t lg_align(size_t n) {
    return (n + 255) & ~(size_t)255;
}

} // namespace

extern "C" size_t g4_logits_workspace(int T, int V) {
    const size_t nb = (size_t)lg_blocks(V);
    return lg_align(T * nb * sizeof(float)) + lg_align(T * nb * sizeof(int)) +
           lg_align((size_t)T * sizeof(unsigned));
}

extern "C" void g4_logits_softcap_argmax(float *logits, int T, int V, float cap, int32_t *argmax,
                                         void *workspace, size_t workspace_bytes,
                                         cudaStream_t stream) {
    const char *op = "g4_logits_softcap_argmax";
    G4K_REQUIRE(T >= 0 && V > 0 && V % 8 == 0 && ((uintptr_t)logits & 15) == 0, op);
    G4K_REQUIRE(workspace && workspace_bytes >= g4_logits_workspace(T, V), op);
    if (T == 0) return;
    const int nb = lg_blocks(V);
    uint8_t *ws = static_cast<uint8_t *>(workspace);
    float *part_v = reinterpret_cast<float *>(ws);
    int *part_i = reinterpret_cast<int *>(ws + lg_align((size_t)T * nb * sizeof(float)));
    unsigned *counter = reinterpret_cast<unsigned *>(ws + lg_align((size_t)T * nb * sizeof(float)) +
                                                     lg_align((size_t)T * nb * sizeof(int)));
    g4_pdl_launch(lg_kernel, dim3(nb, T), dim3(LG_THREADS), 0, stream, logits, V, cap, argmax,
                  part_v, part_i, counter);
}
