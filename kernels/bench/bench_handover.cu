// bench_handover.cu: `g4cu bench --kernels --filter handover`: what ONE on-device hand-over
// between CTAs costs on the GPU (issue 30 stage 2; bench/NOTES.md "What one hand-over costs").
// The step plan (engine/step_plan.h) has 7 dependent hand-overs a layer; a persistent step is
// worth building only if one costs well under a kernel boundary (post_wait_floor: 1.3 us).
// Rows, all graph-replayed like the floor rows (bench_ops.cu), the ms column PER HAND-OVER
// (the shape label says "per hand-over"):
//   handover_chain  one persistent launch of G CTAs, R dependent steps: step r by CTA r % G
//                   waits for flag r-1 (thread 0 spins with ld.acquire.gpu, kernels/spin.cuh),
//                   reads the vector step r-1 wrote (ld.global.cg: through L2), adds one, writes
//                   slot r, publishes flag r. Variants: the publish form, the flag's line, the
//                   vector's size, the spin's back-off, G. The label also counts the hand-overs
//                   that crossed SMs (%smid of each CTA).
//   handover_join   the norm join: P producers each write a 16-half tile of vector r and add
//                   one to counter r; C consumers wait until it reaches P, read the whole vector
//                   and reduce its sum of squares (phase r's consumers are phase r+1's producers).
//   handover_pdl    the same chain as R PDL-chained kernels (1 CTA working, of 1 or 132): the
//                   cost of a kernel boundary in the same run and units.
// Correct inside the bench: buffers poisoned (0xFF: fp16 NaN) first; in the launches add_row makes
// before it captures the graph (`check`: not capturing), every step checks every value it read
// against what it must be in that launch (launches alternate two start copies, 512 apart, so a
// stale read of the launch before also fails) and counts mismatches on the device; the timed graph
// has no check (after the publish it was still on the path where the next wait is the same CTA's:
// the join's last producer, the G=1 chain, the PDL step's grid completion). The host checks that
// count, the final vector (start + R: every stale or poisoned read of the last timed launch
// propagates to it) and the join's sums (exact, host-computed) after the timed replays, and that
// every counter was reset. A failed row says FAIL in its label and on stderr. The spins are bounded
// (a trap, never a hang).
//
// No deadlock under PDL: every kernel here waits (griddepcontrol.wait) before its first spin and
// triggers right after, so (1) launch k+1's CTAs start spinning only after launch k COMPLETED
// (its SMs free), (2) launch k+1 is scheduled only once all of launch k's CTAs have triggered, so
// all of them are resident before any of k+1's takes a slot, and k+2 likewise waits for all of
// k+1's: a spinner never waits on a CTA that an earlier or later launch keeps off the GPU, and
// G <= the occupancy query's count is enough (handover_plan.h). test_pdl_sass checks the wait's
// place on the SASS (no global access and no call before it).
#include <cuda_fp16.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "kernels/bench/attnops_bench.cuh"
#include "kernels/bench/handover_plan.h"
#include "kernels/common.cuh"
#include "kernels/pdl.cuh"
#include "kernels/spin.cuh"

using g4b::NoBase;
using g4b::Pool;

namespace {

constexpr int HO_THREADS = 256;
enum { PUB_FENCE_ATOMIC, PUB_RED_RELEASE, PUB_ST_RELEASE };
const char *const pub_name[] = {"fence+atomic", "red.release", "st.release"};

// err[0]: values that differed from the expected; err[1]: the first step / phase with one;
// err[2]: values checked (the host compares it with the exact count: a check that did not run
// fails the row). Called by every thread of the CTA (a warp reduction).
__device__ __forceinline__ void note_bad(int *err, int bad, int checked, int r) {
    if (bad) atomicAdd(err, bad), atomicMin(err + 1, r);
    checked = __reduce_add_sync(0xffffffffu, checked);
    if ((threadIdx.x & 31) == 0 && checked) atomicAdd(err + 2, checked);
}

__device__ __forceinline__ unsigned sm_id() {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

__device__ __forceinline__ void publish(int *flag, int pub) {
    if (pub == PUB_FENCE_ATOMIC) {
        __threadfence();
        atomicAdd(flag, 1);
    } else if (pub == PUB_RED_RELEASE) {
        g4_red_release_add(flag, 1);
    } else {
        g4_st_release(flag, 1);
    }
}

// The last CTA out (its thread 0's atomic on the exit counter is the G-th) zeroes `count` ints
// at stride `stride` from `base` and the exit counter, so the next launch (which reads them only
// after its griddepcontrol.wait: this grid completed) finds them zero. Every CTA calls it once.
__device__ void reset_if_last(int *exitc, char *base, size_t stride, int count) {
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(exitc, 1) == (int)gridDim.x - 1;
        if (last) __threadfence();
    }
    __syncthreads();
    if (!last) return;
    for (int i = threadIdx.x; i < count; i += blockDim.x) *(int *)(base + (size_t)i * stride) = 0;
    if (threadIdx.x == 0) *exitc = 0;
}

// A vector of up to HO_THREADS * 8 * HO_BATCH = 16,384 halves (handover_plan.h's bound) in
// registers, 16 bytes a load, all loads of a thread in flight together (one L2 round trip):
// element i0 + b * stride + e of the vector is u[b] half e, i0 = 8 threadIdx.x.
constexpr int HO_BATCH = 8;
constexpr int HO_STRIDE = HO_THREADS * 8;
static_assert(HO_STRIDE * HO_BATCH == G4_HO_MAX_HALVES, "one batch holds the largest vector");

__device__ __forceinline__ void load_vec(const __half *in, uint4 (&u)[HO_BATCH], int n) {
#pragma unroll
    for (int b = 0; b < HO_BATCH; b++) {
        const int i = threadIdx.x * 8 + b * HO_STRIDE;
        if (i < n) u[b] = __ldcg((const uint4 *)(in + i)); // through L2: another SM wrote it
    }
}

// out [n] = u + 1.
__device__ __forceinline__ void add_store(const uint4 (&u)[HO_BATCH], __half *out, int n) {
    const __half2 one = __float2half2_rn(1.0f);
#pragma unroll
    for (int b = 0; b < HO_BATCH; b++) {
        const int i = threadIdx.x * 8 + b * HO_STRIDE;
        if (i >= n) break;
        uint4 o = u[b];
        __half2 *h = (__half2 *)&o;
#pragma unroll
        for (int e = 0; e < 4; e++) h[e] = __hadd2(h[e], one);
        *(uint4 *)(out + i) = o;
    }
}

// The values of u that are not start(i, c) + r (chain) or join_value(r, i, c) (join); *checked:
// how many were compared. Only in the untimed launches (see the top).
__device__ __forceinline__ int count_bad(const uint4 (&u)[HO_BATCH], int n, int r, int c, bool join,
                                         int *checked) {
    int bad = 0;
    *checked = 0;
#pragma unroll
    for (int b = 0; b < HO_BATCH; b++) {
        const int i = threadIdx.x * 8 + b * HO_STRIDE;
        if (i >= n) break;
        const __half *h = (const __half *)&u[b];
        *checked += 8;
#pragma unroll
        for (int e = 0; e < 8; e++)
            bad += __half2float(h[e]) !=
                   (join ? g4_ho_join_value(r, i + e, c) : g4_ho_chain_start(i + e, c) + r);
    }
    return bad;
}

struct chain_args {
    const __half *src; // [n] start copy c
    char *slots;       // R slots: step r's output at slots + r slot_bytes + data_off
    size_t slot_bytes, data_off;
    char *flag0; // flag r at flag0 + r flag_stride
    size_t flag_stride;
    int *exitc, *smid, *err;
    int n, R, c, pub, relaxed, check;
    unsigned sleep_ns;
};

__global__ void __launch_bounds__(HO_THREADS) handover_chain_kernel(chain_args a) {
    g4_pdl_wait(); // (nothing above: the counters are reset by the launch before)
    g4_pdl_trigger();
    if (threadIdx.x == 0) a.smid[blockIdx.x] = (int)sm_id();
    for (int r = blockIdx.x; r < a.R; r += gridDim.x) {
        const __half *in = a.src;
        if (r) {
            in = (const __half *)(a.slots + (size_t)(r - 1) * a.slot_bytes + a.data_off);
            if (threadIdx.x == 0)
                g4_spin_geq((const int *)(a.flag0 + (size_t)(r - 1) * a.flag_stride), 1, a.sleep_ns,
                            a.relaxed, "handover_chain");
            __syncthreads(); // thread 0's acquire, then the CTA reads
        }
        uint4 u[HO_BATCH];
        load_vec(in, u, a.n);
        add_store(u, (__half *)(a.slots + (size_t)r * a.slot_bytes + a.data_off), a.n);
        __syncthreads(); // every thread's stores before thread 0's publish
        if (threadIdx.x == 0) publish((int *)(a.flag0 + (size_t)r * a.flag_stride), a.pub);
        if (a.check) {
            int k;
            const int bad = count_bad(u, a.n, r, a.c, false, &k);
            note_bad(a.err, bad, k, r);
        }
    }
    reset_if_last(a.exitc, a.flag0, a.flag_stride, a.R);
}

struct join_args {
    __half *vec; // [R][P * 16]
    int *ctr;    // counter r at ctr + 32 r; the exit counter at ctr + 32 R
    float *sums; // [R][C]
    int *err;
    int P, C, R, c, check;
    unsigned sleep_ns;
};

__global__ void __launch_bounds__(HO_THREADS) handover_join_kernel(join_args a) {
    __shared__ float part[HO_THREADS / 32];
    g4_pdl_wait();
    g4_pdl_trigger();
    const int me = blockIdx.x, K = a.P * 16, L = G4_HO_LINE / 4;
    uint4 u[HO_BATCH]; // the vector consumed last (checked after this CTA's publish)
    for (int r = 0; r <= a.R; r++) {
        if (r > 0) { // consume vector r - 1: all P tiles, then its sum of squares
            const int q = r - 1;
            if (threadIdx.x == 0)
                g4_spin_geq(a.ctr + L * q, a.P, a.sleep_ns, false, "handover_join");
            __syncthreads();
            load_vec(a.vec + (size_t)q * K, u, K);
            float v = 0.0f;
#pragma unroll
            for (int b = 0; b < HO_BATCH; b++) {
                if (threadIdx.x * 8 + b * HO_STRIDE >= K) break;
                const __half2 *h = (const __half2 *)&u[b];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float2 f = __half22float2(h[e]);
                    v += f.x * f.x + f.y * f.y;
                }
            }
            v = g4k::warp_sum(v);
            if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
            __syncthreads();
            if (threadIdx.x == 0) {
                float s = 0.0f;
                for (int w = 0; w < HO_THREADS / 32; w++) s += part[w];
                a.sums[(size_t)q * a.C + me] = s;
            }
        }
        if (r < a.R && me < a.P) { // produce tile `me` of vector r, then count it
            if (threadIdx.x < 2) {
                __align__(16) __half t[8];
                const int k0 = me * 16 + threadIdx.x * 8;
#pragma unroll
                for (int e = 0; e < 8; e++) t[e] = __float2half(g4_ho_join_value(r, k0 + e, a.c));
                *(uint4 *)(a.vec + (size_t)r * K + k0) = *(const uint4 *)t;
            }
            __syncthreads();
            if (threadIdx.x == 0) g4_red_release_add(a.ctr + L * r, 1);
        }
        if (r > 0 && a.check) {
            int k;
            const int bad = count_bad(u, K, r - 1, a.c, true, &k);
            note_bad(a.err, bad, k, r - 1);
        }
    }
    reset_if_last(a.ctr + L * a.R, (char *)a.ctr, G4_HO_LINE, a.R);
}

// The baseline: one step as one kernel (CTA 0 works; the others only wait and trigger, as a
// GEMV-wide grid's boundary).
__global__ void __launch_bounds__(HO_THREADS)
    handover_step_kernel(const __half *in, __half *out, int n, int r, int c, int check, int *err) {
    g4_pdl_wait();
    g4_pdl_trigger();
    if (blockIdx.x) return;
    uint4 u[HO_BATCH];
    load_vec(in, u, n);
    add_store(u, out, n);
    if (check) { // (delays this grid's completion: untimed launches only)
        int k;
        const int bad = count_bad(u, n, r, c, false, &k);
        note_bad(err, bad, k, r);
    }
}

// 1 for the launches add_row makes before capturing (the value checks run there), 0 for the
// captured, timed ones.
int checking(cudaStream_t st) {
    cudaStreamCaptureStatus cs;
    G4_CUDA_CHECK(cudaStreamIsCapturing(st, &cs));
    return cs == cudaStreamCaptureStatusNone;
}

int resident(const void *kernel) {
    int per_sm = 0;
    G4_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, HO_THREADS, 0));
    return per_sm * g4k::num_sms();
}

// The two start copies [2][n] (g4_ho_chain_start), uploaded.
__half *chain_src(Pool &pool, int n) {
    std::vector<__half> h(2 * (size_t)n);
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < n; i++) h[(size_t)c * n + i] = __float2half(g4_ho_chain_start(i, c));
    return pool.upload(h.data(), h.size());
}

int *err_buf(Pool &pool) { // [32]: the bad count, the first bad step, the checked count (own line)
    int *e = (int *)pool.alloc(G4_HO_LINE);
    const int h[3] = {0, 0x7fffffff, 0};
    G4_CUDA_CHECK(cudaMemcpy(e, h, sizeof h, cudaMemcpyHostToDevice));
    return e;
}

// The row's label, cut to its field.
void set_shape(g4_kbench_row *row, const char *s) {
    const size_t n = strnlen(s, sizeof row->shape - 1);
    memcpy(row->shape, s, n);
    row->shape[n] = 0;
}

// A row's times per hand-over; FAIL (label and stderr) when `why` is set.
void finish_row(g4_kbench_row *row, double per, const char *why) {
    row->ours.median_ms /= per, row->ours.min_ms /= per, row->ours.mean_ms /= per;
    row->ours.stdev_ms /= per;
    if (!why) return;
    fprintf(stderr, "handover: FAIL %s [%s]: %s\n", row->op, row->shape, why);
    char s[200];
    snprintf(s, sizeof s, "FAIL %s", row->shape);
    set_shape(row, s);
}

// Device error count and checked count (want_checked: exact), the final vector (fin: n halves,
// or NULL) against start(c_last) + R, the counters (nctr at byte stride ctr_stride from ctr) and
// the exit counter back at zero.
const char *check_run(const int *err, long long want_checked, const __half *fin, int n, int R,
                      int c_last, const char *ctr, size_t ctr_stride, int nctr, const int *exitc,
                      char *why, size_t wn) {
    int e[3];
    G4_CUDA_CHECK(cudaDeviceSynchronize());
    G4_CUDA_CHECK(cudaMemcpy(e, err, sizeof e, cudaMemcpyDeviceToHost));
    if (e[0]) {
        snprintf(why, wn, "%d values read were not the expected ones (first at step %d)", e[0],
                 e[1]);
        return why;
    }
    if (e[2] != want_checked) {
        snprintf(why, wn, "%d values checked on the device, expected %lld", e[2], want_checked);
        return why;
    }
    if (fin) {
        std::vector<__half> h(n);
        G4_CUDA_CHECK(cudaMemcpy(h.data(), fin, 2 * (size_t)n, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++)
            if (__half2float(h[i]) != g4_ho_chain_start(i, c_last) + R) {
                snprintf(why, wn, "final [%d] = %g, expected %g", i, __half2float(h[i]),
                         g4_ho_chain_start(i, c_last) + R);
                return why;
            }
    }
    for (int k = 0; k <= nctr; k++) { // (k == nctr: the exit counter)
        const void *at = k < nctr ? (const void *)(ctr + k * ctr_stride) : (const void *)exitc;
        int v;
        if (!at) continue;
        G4_CUDA_CHECK(cudaMemcpy(&v, at, 4, cudaMemcpyDeviceToHost));
        if (v) {
            snprintf(why, wn, "counter %d of %d left at %d (not reset)", k, nctr, v);
            return why;
        }
    }
    return nullptr;
}

constexpr int PER_GRAPH = 4; // persistent launches a graph (PDL-chained, as the floor rows)

struct chain_variant {
    int G, n, pub, beside;
    unsigned sleep_ns;
    int relaxed;
};

int bench_chain(const char *f, int reps, g4_kbench_row *rows, int n, int max) {
    const int sms = g4k::num_sms(), R = 512;
    const chain_variant vs[] = {
        {sms, 1536, PUB_RED_RELEASE, 0, 0, 0},  {2 * sms, 1536, PUB_RED_RELEASE, 0, 0, 0},
        {sms, 1536, PUB_FENCE_ATOMIC, 0, 0, 0}, {sms, 1536, PUB_ST_RELEASE, 0, 0, 0},
        {sms, 1536, PUB_RED_RELEASE, 1, 0, 0},  {sms, 1536, PUB_FENCE_ATOMIC, 1, 0, 0},
        {sms, 12288, PUB_RED_RELEASE, 0, 0, 0}, {sms, 1536, PUB_RED_RELEASE, 0, 32, 0},
        {sms, 1536, PUB_RED_RELEASE, 0, 0, 1}, // relaxed polls + one fence
        {1, 1536, PUB_RED_RELEASE, 0, 0, 0},   // one CTA: the flag round trip without crossing SMs
    };
    const int res = resident((const void *)handover_chain_kernel);
    for (const chain_variant &v : vs) {
        char shape[96];
        snprintf(shape, sizeof shape, "G=%d R=%d n=%d %s %s %s sleep=%u", v.G, R, v.n,
                 pub_name[v.pub], v.beside ? "beside" : "own-line",
                 v.relaxed ? "relaxed+fence" : "acquire", v.sleep_ns);
        if (!g4b::match(f, "handover_chain", shape)) continue;
        g4_ho_chain_plan p;
        const char *why = g4_ho_chain_make(v.G, R, v.n, v.beside, res, &p);
        if (why) {
            fprintf(stderr, "handover_chain %s: refused: %s (resident %d)\n", shape, why, res);
            continue;
        }
        Pool pool;
        __half *src = chain_src(pool, v.n);
        char *slots = (char *)pool.alloc(p.slots_bytes), *ctr = (char *)pool.alloc(p.ctr_bytes);
        G4_CUDA_CHECK(cudaMemset(slots, 0xFF, p.slots_bytes)); // poison: fp16 NaN
        G4_CUDA_CHECK(cudaMemset(ctr, 0, p.ctr_bytes));
        if (v.beside) // the flags inside the slots start at zero; the data stays poisoned
            for (int r = 0; r < R; r++)
                G4_CUDA_CHECK(cudaMemset(slots + (size_t)r * p.slot_bytes, 0, 4));
        chain_args a = {};
        a.slots = slots, a.slot_bytes = p.slot_bytes, a.data_off = p.data_off;
        a.flag0 = v.beside ? slots : ctr, a.flag_stride = p.flag_stride;
        a.exitc = (int *)(ctr + p.ctr_bytes - G4_HO_LINE);
        a.smid = (int *)pool.alloc(sizeof(int) * (size_t)v.G);
        a.err = err_buf(pool);
        a.n = v.n, a.R = R, a.pub = v.pub, a.relaxed = v.relaxed, a.sleep_ns = v.sleep_ns;
        auto ours = [&](int rep, cudaStream_t st) {
            chain_args b = a;
            b.c = rep & 1, b.src = src + (size_t)b.c * v.n, b.check = checking(st);
            g4_pdl_launch(handover_chain_kernel, dim3(v.G), dim3(HO_THREADS), 0, st, b);
        };
        G4_CUDA_CHECK(
            cudaDeviceSynchronize()); // (memsets: legacy stream; the row's is non-blocking)
        const int got = g4b::add_row(rows, n, max, "handover_chain", shape, 0, 0, reps, PER_GRAPH,
                                     ours, NoBase(), nullptr);
        if (got == n) return n;
        char msg[160];
        const __half *fin = (const __half *)(slots + (size_t)(R - 1) * p.slot_bytes + p.data_off);
        // (the untimed launches: PER_GRAPH of R steps, n values each)
        why = check_run(a.err, (long long)PER_GRAPH * R * v.n, fin, v.n, R, (PER_GRAPH - 1) & 1,
                        a.flag0, p.flag_stride, R, a.exitc, msg, sizeof msg);
        std::vector<int> sm(v.G);
        G4_CUDA_CHECK(
            cudaMemcpy(sm.data(), a.smid, sizeof(int) * sm.size(), cudaMemcpyDeviceToHost));
        int cross = 0;
        for (int r = 1; r < R; r++) cross += sm[(r - 1) % v.G] != sm[r % v.G];
        char lab[200];
        snprintf(lab, sizeof lab, "%s; ms/hand-over, %d/%d x-SM", shape, cross, R - 1);
        set_shape(&rows[n], lab);
        finish_row(&rows[n], R, why);
        n = got;
    }
    return n;
}

int bench_join(const char *f, int reps, g4_kbench_row *rows, int n, int max) {
    struct variant {
        int P, C;
        unsigned sleep_ns;
    };
    const variant vs[] = {{96, 96, 0}, {96, 192, 0}, {192, 192, 0}, {192, 192, 32}};
    const int R = 256, res = resident((const void *)handover_join_kernel);
    for (const variant &v : vs) {
        char shape[96];
        snprintf(shape, sizeof shape, "P=%d -> C=%d R=%d red.release sleep=%u; ms/join", v.P, v.C,
                 R, v.sleep_ns);
        if (!g4b::match(f, "handover_join", shape)) continue;
        g4_ho_join_plan p;
        const char *why = g4_ho_join_make(v.P, v.C, R, res, &p);
        if (why) {
            fprintf(stderr, "handover_join %s: refused: %s (resident %d)\n", shape, why, res);
            continue;
        }
        Pool pool;
        join_args a = {};
        a.vec = (__half *)pool.alloc(p.vecs_bytes);
        a.ctr = (int *)pool.alloc(p.ctr_bytes);
        a.sums = (float *)pool.alloc(p.sums_bytes);
        G4_CUDA_CHECK(cudaMemset(a.vec, 0xFF, p.vecs_bytes));
        G4_CUDA_CHECK(cudaMemset(a.sums, 0xFF, p.sums_bytes));
        G4_CUDA_CHECK(cudaMemset(a.ctr, 0, p.ctr_bytes));
        a.err = err_buf(pool);
        a.P = v.P, a.C = v.C, a.R = R, a.sleep_ns = v.sleep_ns;
        auto ours = [&](int rep, cudaStream_t st) {
            join_args b = a;
            b.c = rep & 1, b.check = checking(st);
            g4_pdl_launch(handover_join_kernel, dim3(v.C), dim3(HO_THREADS), 0, st, b);
        };
        G4_CUDA_CHECK(
            cudaDeviceSynchronize()); // (memsets: legacy stream; the row's is non-blocking)
        const int got = g4b::add_row(rows, n, max, "handover_join", shape, 0, 0, reps, PER_GRAPH,
                                     ours, NoBase(), nullptr);
        if (got == n) return n;
        char msg[160];
        // (PER_GRAPH untimed launches of R phases, C consumers reading P * 16 values each)
        why = check_run(a.err, (long long)PER_GRAPH * R * v.C * v.P * 16, nullptr, 0, R, 0,
                        (const char *)a.ctr, G4_HO_LINE, R, a.ctr + G4_HO_LINE / 4 * R, msg,
                        sizeof msg);
        if (!why) { // the last launch's sums against the host's (exact: handover_plan.h)
            const int c = (PER_GRAPH - 1) & 1;
            std::vector<float> s((size_t)R * v.C);
            G4_CUDA_CHECK(cudaMemcpy(s.data(), a.sums, p.sums_bytes, cudaMemcpyDeviceToHost));
            for (int r = 0; r < R && !why; r++) {
                float want = 0.0f;
                for (int k = 0; k < v.P * 16; k++) {
                    const float x = __half2float(__float2half(g4_ho_join_value(r, k, c)));
                    want += x * x;
                }
                for (int i = 0; i < v.C && !why; i++)
                    if (s[(size_t)r * v.C + i] != want) {
                        snprintf(msg, sizeof msg, "sum [phase %d][consumer %d] = %g, expected %g",
                                 r, i, s[(size_t)r * v.C + i], want);
                        why = msg;
                    }
            }
        }
        finish_row(&rows[n], R, why);
        n = got;
    }
    return n;
}

int bench_pdl_chain(const char *f, int reps, g4_kbench_row *rows, int n, int max) {
    struct variant {
        int ctas, n;
    };
    const int sms = g4k::num_sms(), R = 512;
    const variant vs[] = {{1, 1536}, {sms, 1536}, {1, 12288}};
    for (const variant &v : vs) {
        char shape[96];
        snprintf(shape, sizeof shape, "CTAs=%d (1 working) R=%d n=%d pdl kernels; ms/hand-over",
                 v.ctas, R, v.n);
        if (!g4b::match(f, "handover_pdl", shape)) continue;
        Pool pool;
        __half *src = chain_src(pool, v.n);
        __half *buf[2] = {(__half *)pool.alloc(2 * (size_t)v.n),
                          (__half *)pool.alloc(2 * (size_t)v.n)};
        G4_CUDA_CHECK(cudaMemset(buf[0], 0xFF, 2 * (size_t)v.n));
        G4_CUDA_CHECK(cudaMemset(buf[1], 0xFF, 2 * (size_t)v.n));
        int *err = err_buf(pool);
        // launch rep is step rep: one graph of R launches is one chain from copy 0 (a stale
        // read is off by 2 or more, or is the replay before's end: the device check counts it)
        auto ours = [&](int rep, cudaStream_t st) {
            const __half *in = rep ? buf[(rep - 1) & 1] : src;
            g4_pdl_launch(handover_step_kernel, dim3(v.ctas), dim3(HO_THREADS), 0, st, in,
                          buf[rep & 1], v.n, rep, 0, checking(st), err);
        };
        G4_CUDA_CHECK(
            cudaDeviceSynchronize()); // (memsets: legacy stream; the row's is non-blocking)
        const int got = g4b::add_row(rows, n, max, "handover_pdl", shape, 0, 0, reps, R, ours,
                                     NoBase(), nullptr);
        if (got == n) return n;
        char msg[160];
        const char *why =
            check_run(err, (long long)R * v.n, buf[(R - 1) & 1], v.n, R, 0, // R untimed launches
                      nullptr, 0, 0, nullptr, msg, sizeof msg);
        // (add_row's time is per launch already: one launch, one hand-over)
        finish_row(&rows[n], 1, why);
        n = got;
    }
    return n;
}

} // namespace

extern "C" int g4_kbench_handover(const char *filter, int reps, g4_kbench_row *rows, int max) {
    int n = bench_chain(filter, reps, rows, 0, max);
    n = bench_join(filter, reps, rows, n, max);
    return bench_pdl_chain(filter, reps, rows, n, max);
}
