// step_skeleton.cu: the persistent skeleton of the decode step (step_skeleton.cuh).
//
// One launch a step, G CTAs of SK_THREADS threads, G = the occupancy API's co-resident count
// (the launcher refuses more: the queues' deadlock-freedom argument, engine/step_queue.h, needs
// every CTA running). CTA b runs queue b (instructions i with i % G == b, in plan order):
//   1. prefetch 1: the next instruction's weight lines into L2 (prefetch.global.L2);
//      prefetch 2: this instruction's weights streamed now, before its waits;
//      prefetch 3: a two-deep lookahead: the next instruction's weights streamed now (the queue's
//      first instruction's too, at its start), so that before the wait on instruction k both k
//      and k + 1 were streamed. Into registers and discarded, as prefetch 2: an UPPER bound for a
//      design staging the next instruction's weights in shared memory (no capacity limit, no
//      staging cost);
//   2. thread 0 waits on each counter for epoch x wait_step + wait_tgt (ld.acquire.gpu polls,
//      bounded: a trap naming the instruction, kernels/spin.cuh g4_spin_geq_instr); a CTA
//      barrier extends the acquire to the CTA;
//   3. prefetch 0 / 1: the weights streamed now: runs of 16-byte ld.global.nc with an L2
//      evict-first policy and no L1 allocation (read once a step), xor-folded into one word;
//   4. the activation regions (16-byte vectors): reads through L2 (ld.global.cg: other CTAs
//      wrote them), a barrier, then the written regions stored (st.global.cg) with a value that
//      depends on every load above (so no load is dead code);
//   5. CTA barrier, then thread 0's red.release.gpu add on the signal's 128-byte line (the
//      barrier orders the CTA's stores before the release: the PTX model's causality order
//      through bar.sync, as persist_mlp.cu and bench_handover.cu publish).
// Epoch: counters are never reset (engine/step_queue.h); the step number lives in its own
// line, read by every CTA at its start and advanced by the last CTA out (an exit counter
// reaching G), which the next launch reads after this grid completed (stream order, no PDL).
// Short waits: thread 0 counts the waits whose first poll found the counter short into its
// CTA's own line (no shared line, no atomic).
// Ablations (mode, G4_SK_*): no waits, no activation traffic, no weights, 8 activation loads in
// flight. Timeline (the TL instantiation, one stamped step): thread 0 stores %globaltimer at the
// G4_TL_STAMPS points of each instruction into tl[plan index] as it goes (no stamp held in
// registers: the untimed instantiation keeps its registers, and stores are fire-and-forget).
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"
#include "kernels/common.cuh"
#include "kernels/cuda_util.h"
#include "kernels/pdl.cuh"
#include "kernels/spin.cuh"
#include "kernels/step_skeleton.cuh"

namespace {

constexpr int SK_THREADS = 256;
constexpr int SK_UNROLL = 4; // 16-byte loads a thread has in flight
constexpr int LINE = G4_SQ_LINE;

struct sk_args {
    const g4_sq_instr *ins;
    const int *start;
    const g4_sq_region *reg;
    const char *w; // weight arena
    char *act;     // activation arena
    int *ctr;      // [n_counters + 2 lines]: the counters, then the exit counter, the epoch
    int n_counters;
    int *stats;      // [G lines]: short waits
    unsigned *sink;  // written only when the folded word is a value it never takes
    g4_sq_stamp *tl; // [plan instructions]: the TL instantiation's stamps
    int prefetch;
    int mode; // G4_SK_*
};

__device__ __forceinline__ uint64_t evict_first_policy() {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

__device__ __forceinline__ uint4 ld_evict_first(const void *p, uint64_t pol) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
    return v;
}

// The CTA streams [p, p + bytes) (bytes a multiple of 16), SK_UNROLL loads in flight a thread.
__device__ __forceinline__ uint32_t stream_range(const char *p, int64_t bytes, uint64_t pol) {
    const int64_t n = bytes / 16;
    uint32_t x = 0;
    int64_t v = threadIdx.x;
    for (; v + (SK_UNROLL - 1) * SK_THREADS < n; v += SK_UNROLL * SK_THREADS) {
        uint4 r[SK_UNROLL];
#pragma unroll
        for (int u = 0; u < SK_UNROLL; u++)
            r[u] = ld_evict_first(p + 16 * (v + u * SK_THREADS), pol);
#pragma unroll
        for (int u = 0; u < SK_UNROLL; u++) x ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
    }
    for (; v < n; v += SK_THREADS) {
        const uint4 r = ld_evict_first(p + 16 * v, pol);
        x ^= r.x ^ r.y ^ r.z ^ r.w;
    }
    return x;
}

// The CTA reads n 16-byte vectors of activations through L2 (ld.global.cg: other CTAs wrote
// them during this launch), U in flight a thread (SK_UNROLL; 8 under G4_SK_ACT8), folded into
// one word.
template <int U> __device__ __forceinline__ uint32_t read_region(const uint4 *p, int n) {
    uint32_t y = 0;
    int v = threadIdx.x;
    for (; v + (U - 1) * SK_THREADS < n; v += U * SK_THREADS) {
        uint4 r[U];
#pragma unroll
        for (int u = 0; u < U; u++) r[u] = __ldcg(p + v + u * SK_THREADS);
#pragma unroll
        for (int u = 0; u < U; u++) y ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
    }
    for (; v < n; v += SK_THREADS) {
        const uint4 r = __ldcg(p + v);
        y ^= r.x ^ r.y ^ r.z ^ r.w;
    }
    return y;
}

__device__ __forceinline__ uint32_t stream_weights(const sk_args &a, const g4_sq_instr &in,
                                                   uint64_t pol) {
    if (in.w_runs <= 0) return 0;
    const char *p = a.w + in.w_off;
    if (in.w_stride == in.w_run) return stream_range(p, (int64_t)in.w_runs * in.w_run, pol);
    uint32_t x = 0;
    for (int r = 0; r < in.w_runs; r++) x ^= stream_range(p + r * in.w_stride, in.w_run, pol);
    return x;
}

__device__ __forceinline__ void prefetch_weights(const sk_args &a, const g4_sq_instr &in) {
    for (int r = 0; r < in.w_runs; r++)
        g4_prefetch_l2_bytes(a.w + in.w_off + r * in.w_stride, (size_t)in.w_run);
}

// %globaltimer (ns) after `dep` is computed (an input of the asm: the read cannot move above
// the loads folded into it).
__device__ __forceinline__ uint64_t globaltimer_after(uint32_t dep) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "r"(dep) : "memory");
    return t;
}

// Thread 0 stamps point `at` of the instruction (TL only).
template <bool TL>
__device__ __forceinline__ void stamp(const sk_args &a, int id, int at, uint32_t dep) {
    if (TL && threadIdx.x == 0) a.tl[id].t[at] = globaltimer_after(dep);
}

template <bool TL> __global__ void __launch_bounds__(SK_THREADS) step_skel_kernel(sk_args a) {
    const int b = blockIdx.x, q0 = a.start[b], q1 = a.start[b + 1];
    int *const exitc = a.ctr + (size_t)a.n_counters * LINE, *const epochp = exitc + LINE;
    const int epoch = __ldcg(epochp); // (written by the launch before, which completed)
    const uint64_t pol = evict_first_policy();
    const bool weights = !(a.mode & G4_SK_NO_WEIGHTS), act = !(a.mode & G4_SK_NO_ACT);
    const bool wait = !(a.mode & G4_SK_NO_WAIT);
    uint32_t x = 0;
    int short_waits = 0;
    if (weights && a.prefetch == 1 && q0 < q1) prefetch_weights(a, a.ins[q0]);
    for (int k = q0; k < q1; k++) {
        const g4_sq_instr in = a.ins[k];
        stamp<TL>(a, in.id, G4_TL_T_BEGIN, 0);
        if (weights) {
            if (a.prefetch == 1 && k + 1 < q1) prefetch_weights(a, a.ins[k + 1]);
            if (a.prefetch == 2 || (a.prefetch == 3 && k == q0)) x ^= stream_weights(a, in, pol);
            if (a.prefetch == 3 && k + 1 < q1) x ^= stream_weights(a, a.ins[k + 1], pol);
        }
        stamp<TL>(a, in.id, G4_TL_T_PRE, x);
        int n_short = 0;
        if (threadIdx.x == 0 && wait)
            for (int w = 0; w < in.n_wait; w++) {
                const int *c = a.ctr + (size_t)in.wait_ctr[w] * LINE;
                const int target = epoch * in.wait_step[w] + in.wait_tgt[w];
                if (g4_ld_acquire(c) < target) {
                    n_short++;
                    g4_spin_geq_instr(c, target, "step_skeleton", in.id, w);
                }
            }
        short_waits += n_short;
        __syncthreads();
        stamp<TL>(a, in.id, G4_TL_T_WAITED, 0);
        if (weights && a.prefetch < 2) x ^= stream_weights(a, in, pol);
        stamp<TL>(a, in.id, G4_TL_T_WTS, x);
        uint32_t y = 0;
        if (act)
            for (int r = 0; r < in.n_rd; r++) {
                const g4_sq_region g = a.reg[in.reg0 + r];
                const uint4 *p = (const uint4 *)(a.act + g.off);
                y ^= a.mode & G4_SK_ACT8 ? read_region<8>(p, g.bytes / 16)
                                         : read_region<SK_UNROLL>(p, g.bytes / 16);
            }
        __syncthreads(); // (every read of the instruction before its in-place writes)
        stamp<TL>(a, in.id, G4_TL_T_READ, y);
        const uint4 val = make_uint4(x, y, x ^ y, 0);
        if (act)
            for (int r = 0; r < in.n_wr; r++) {
                const g4_sq_region g = a.reg[in.reg0 + in.n_rd + r];
                uint4 *p = (uint4 *)(a.act + g.off);
                for (int e = threadIdx.x; e < g.bytes / 16; e += SK_THREADS) __stcg(p + e, val);
            }
        __syncthreads();
        if (threadIdx.x == 0 && in.signal >= 0)
            g4_red_release_add(a.ctr + (size_t)in.signal * LINE, 1);
        stamp<TL>(a, in.id, G4_TL_T_SIGNAL, 0);
        if (TL && threadIdx.x == 0) a.tl[in.id].n_short = n_short, a.tl[in.id].cta = b;
    }
    if (x == 0x9e3779b9u) a.sink[b * SK_THREADS + threadIdx.x] = x; // (keeps the loads live)
    __syncthreads();
    if (threadIdx.x == 0) {
        a.stats[(size_t)b * LINE] += short_waits;
        __threadfence();
        if (atomicAdd(exitc, 1) == (int)gridDim.x - 1) { // the last CTA out: every CTA read epoch
            atomicExch(exitc, 0);
            atomicExch(epochp, epoch + 1);
        }
    }
}

// The ceiling: the arena's bytes by the same grid and loads, nothing else.
__global__ void __launch_bounds__(SK_THREADS)
    step_stream_kernel(const char *w, int64_t bytes, unsigned *sink) {
    const uint64_t pol = evict_first_policy();
    const int64_t per = (bytes / 16 + gridDim.x - 1) / gridDim.x * 16;
    const int64_t lo = per * blockIdx.x, hi = lo + per < bytes ? lo + per : bytes;
    const uint32_t x = lo < hi ? stream_range(w + lo, hi - lo, pol) : 0;
    if (x == 0x9e3779b9u) sink[blockIdx.x * SK_THREADS + threadIdx.x] = x;
}

} // namespace

struct g4_step_skel {
    int G, n_counters;
    g4_sq_instr *ins;
    int *start;
    g4_sq_region *reg;
    char *w;
    int64_t w_bytes;
    char *act;
    int *ctr, *stats;
    unsigned *sink;
    g4_sq_stamp *tl; // [n]: the stamped step's timeline
    int n;
};

extern "C" int g4_step_skel_max_ctas(int *ctas) {
    // (both instantiations: the stamped step runs the same queues, so the same G must fit)
    int per_sm = 0, per_sm_tl = 0;
    G4_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, step_skel_kernel<false>,
                                                                SK_THREADS, 0));
    G4_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_tl, step_skel_kernel<true>,
                                                                SK_THREADS, 0));
    if (per_sm_tl < per_sm) per_sm = per_sm_tl;
    if (per_sm < 1) return g4_fail(G4_EINTERNAL, "step skeleton: no CTA fits a SM");
    *ctas = per_sm * g4k::num_sms();
    return G4_OK;
}

extern "C" int g4_step_skel_create(const g4_sq *q, g4_step_skel **out) {
    *out = nullptr;
    int max = 0, rc = g4_step_skel_max_ctas(&max);
    if (rc) return rc;
    if (q->G < 1 || q->G > max)
        return g4_fail(G4_EUSER,
                       "step skeleton: queues for %d CTAs, but %d fit co-resident (a CTA not "
                       "resident could deadlock the step)",
                       q->G, max);
    if (q->w_bytes % 16)
        return g4_fail(G4_EUSER, "step skeleton: weight bytes not a multiple of 16");
    for (int k = 0; k < q->n; k++) // (the timeline is indexed by plan index)
        if (q->ins[k].id < 0 || q->ins[k].id >= q->n)
            return g4_fail(G4_EUSER, "step skeleton: instruction %d has plan index %d (of %d)", k,
                           q->ins[k].id, q->n);
    g4_step_skel *s = (g4_step_skel *)g4_calloc(1, sizeof *s);
    s->G = q->G;
    s->n_counters = q->n_counters;
    s->w_bytes = q->w_bytes;
    s->n = q->n;
    G4_CUDA_CHECK(cudaMalloc(&s->ins, sizeof(g4_sq_instr) * ((size_t)q->n + 1)));
    G4_CUDA_CHECK(cudaMalloc(&s->start, sizeof(int) * ((size_t)q->G + 1)));
    G4_CUDA_CHECK(cudaMalloc(&s->reg, sizeof(g4_sq_region) * ((size_t)q->n_reg + 1)));
    G4_CUDA_CHECK(cudaMalloc(&s->w, (size_t)q->w_bytes + 16));
    G4_CUDA_CHECK(cudaMalloc(&s->act, (size_t)q->act_bytes));
    const size_t ctr_bytes = sizeof(int) * LINE * ((size_t)q->n_counters + 2);
    G4_CUDA_CHECK(cudaMalloc(&s->ctr, ctr_bytes));
    G4_CUDA_CHECK(cudaMalloc(&s->stats, sizeof(int) * LINE * (size_t)q->G));
    G4_CUDA_CHECK(cudaMalloc(&s->sink, sizeof(unsigned) * SK_THREADS * (size_t)q->G));
    G4_CUDA_CHECK(cudaMalloc(&s->tl, sizeof(g4_sq_stamp) * ((size_t)q->n + 1)));
    G4_CUDA_CHECK(
        cudaMemcpy(s->ins, q->ins, sizeof(g4_sq_instr) * (size_t)q->n, cudaMemcpyHostToDevice));
    G4_CUDA_CHECK(
        cudaMemcpy(s->start, q->start, sizeof(int) * ((size_t)q->G + 1), cudaMemcpyHostToDevice));
    G4_CUDA_CHECK(cudaMemcpy(s->reg, q->reg, sizeof(g4_sq_region) * (size_t)q->n_reg,
                             cudaMemcpyHostToDevice));
    G4_CUDA_CHECK(cudaMemset(s->w, 0x5a, (size_t)q->w_bytes + 16));
    G4_CUDA_CHECK(cudaMemset(s->act, 0, (size_t)q->act_bytes));
    G4_CUDA_CHECK(cudaMemset(s->ctr, 0, ctr_bytes));
    G4_CUDA_CHECK(cudaMemset(s->stats, 0, sizeof(int) * LINE * (size_t)q->G));
    G4_CUDA_CHECK(cudaMemset(s->tl, 0, sizeof(g4_sq_stamp) * ((size_t)q->n + 1)));
    G4_CUDA_CHECK(cudaDeviceSynchronize());
    *out = s;
    return G4_OK;
}

static int skel_launch(g4_step_skel *s, int prefetch, int mode, bool tl, cudaStream_t st) {
    if (prefetch < 0 || prefetch > 3)
        return g4_fail(G4_EUSER, "step skeleton: prefetch %d (0, 1, 2 or 3)", prefetch);
    if (mode & ~G4_SK_MODES)
        return g4_fail(G4_EUSER, "step skeleton: mode 0x%x (G4_SK_* bits: 0x%x)", mode,
                       G4_SK_MODES);
    sk_args a = {s->ins,        s->start, s->reg,  s->w,  s->act,   s->ctr,
                 s->n_counters, s->stats, s->sink, s->tl, prefetch, mode};
    if (tl) {
        // (zeroed first: a stamp left at 0 is an instruction that did not run)
        G4_CUDA_CHECK(cudaMemsetAsync(s->tl, 0, sizeof(g4_sq_stamp) * (size_t)s->n, st));
        step_skel_kernel<true><<<s->G, SK_THREADS, 0, st>>>(a);
    } else {
        step_skel_kernel<false><<<s->G, SK_THREADS, 0, st>>>(a);
    }
    G4_CUDA_LAUNCH_CHECK();
    return G4_OK;
}

extern "C" int g4_step_skel_launch(g4_step_skel *s, int prefetch, int mode, cudaStream_t st) {
    return skel_launch(s, prefetch, mode, false, st);
}

extern "C" int g4_step_skel_launch_timeline(g4_step_skel *s, int prefetch, int mode,
                                            cudaStream_t st) {
    return skel_launch(s, prefetch, mode, true, st);
}

extern "C" int g4_step_skel_timeline(g4_step_skel *s, g4_sq_stamp *out) {
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return g4_fail(G4_EINTERNAL, "step skeleton: the stamped step failed: %s",
                       cudaGetErrorString(e));
    G4_CUDA_CHECK(
        cudaMemcpy(out, s->tl, sizeof(g4_sq_stamp) * (size_t)s->n, cudaMemcpyDeviceToHost));
    return G4_OK;
}

extern "C" int g4_step_skel_stream(g4_step_skel *s, cudaStream_t st) {
    step_stream_kernel<<<s->G, SK_THREADS, 0, st>>>(s->w, s->w_bytes, s->sink);
    G4_CUDA_LAUNCH_CHECK();
    return G4_OK;
}

extern "C" int g4_step_skel_read(g4_step_skel *s, int *ctr, int *epoch, int *exit_ctr,
                                 long long *short_waits) {
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return g4_fail(G4_EINTERNAL,
                       "step skeleton: the launches failed: %s (a trap: a wait that never ended, "
                       "see the printed instruction)",
                       cudaGetErrorString(e));
    const size_t nl = (size_t)s->n_counters + 2;
    int *h = (int *)g4_malloc(sizeof(int) * LINE * (nl > (size_t)s->G ? nl : (size_t)s->G));
    G4_CUDA_CHECK(cudaMemcpy(h, s->ctr, sizeof(int) * LINE * nl, cudaMemcpyDeviceToHost));
    for (int c = 0; c < s->n_counters; c++) ctr[c] = h[(size_t)c * LINE];
    *exit_ctr = h[(size_t)s->n_counters * LINE];
    *epoch = h[(size_t)(s->n_counters + 1) * LINE];
    G4_CUDA_CHECK(
        cudaMemcpy(h, s->stats, sizeof(int) * LINE * (size_t)s->G, cudaMemcpyDeviceToHost));
    long long sw = 0;
    for (int b = 0; b < s->G; b++) sw += h[(size_t)b * LINE];
    *short_waits = sw;
    free(h);
    return G4_OK;
}

extern "C" void g4_step_skel_free(g4_step_skel *s) {
    if (!s) return;
    cudaDeviceSynchronize();
    G4_CUDA_CHECK(cudaFree(s->ins));
    G4_CUDA_CHECK(cudaFree(s->start));
    G4_CUDA_CHECK(cudaFree(s->reg));
    G4_CUDA_CHECK(cudaFree(s->w));
    G4_CUDA_CHECK(cudaFree(s->act));
    G4_CUDA_CHECK(cudaFree(s->ctr));
    G4_CUDA_CHECK(cudaFree(s->stats));
    G4_CUDA_CHECK(cudaFree(s->sink));
    G4_CUDA_CHECK(cudaFree(s->tl));
    free(s);
}
