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
// flight. G4_SK_MATH (issue 30: what the math adds): between 4 and 5, each weight-carrying
// instruction re-reads its weight bytes (the stream's load form: L2 hits where the stream's
// evict-first lines survived the wait, else DRAM again) and runs its real kernel's arithmetic on
// them (Q4: the third design's q4_consts + 4 x (q4_dequant_word + mma_16816) a lane's 16-byte word
// of a tile, 4 tiles a warp in a ring; f16: the tensor-core GEMV's 4 x (4 prmt + mma_16816) a
// lane's four 16-byte vectors), B from the activation words it read, the accumulators folded into
// the value written. Not charged: the GEMVs' x fragment loads (2 16-byte L1 / shared loads a lane
// and tile) and their split-K reductions (the plan's partial regions are written as before).
// G4_SK_MATH_HELD: the same arithmetic on words made from the tile address (no re-read).
// Its own instantiations (step_skel_math_kernel, SK_MATH_PER_SM CTAs an SM: 64 registers; the
// plain kernel keeps its 38 registers and its loads and loops: the stamped form's SASS is the
// same, the other has 8 fewer set-up instructions, ptxas's choice), so G4_SK_MATH runs on queues
// for at most g4_step_skel_max_ctas_math CTAs. In the stamped step the math falls in the write
// segment.
// Timeline (the TL instantiation, one stamped step): thread 0 stores %globaltimer at the
// G4_TL_STAMPS points of each instruction into tl[plan index] as it goes (no stamp held in
// registers: the untimed instantiation keeps its registers, and stores are fire-and-forget).
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"
#include "kernels/common.cuh"
#include "kernels/cuda_util.h"
#include "kernels/gemv_f16_mma.h"
#include "kernels/pdl.cuh"
#include "kernels/q4_dequant.cuh"
#include "kernels/spin.cuh"
#include "kernels/step_skel_math.h"
#include "kernels/step_skeleton.cuh"

namespace {

constexpr int SK_THREADS = 256, SK_WARPS = SK_THREADS / 32;
constexpr int SK_UNROLL = 4; // 16-byte loads a thread has in flight
constexpr int LINE = G4_SQ_LINE;
// G4_SK_MATH's units (engine/step_queue.h's layout): a Q4 tile, 16 features x 64 inputs in 592
// bytes (512 of codes: 32 lanes x 16 bytes as kernels/q4_pack.h packs them, then 16 fp16 scale
// pairs, then 16 zero-point bytes); an f16 step of the tensor-core GEMV, 2 KB (a lane's four
// 16-byte vectors: four m16n8k16 A tiles, kernels/gemv_f16_mma.h).
constexpr int Q4_TILE = SKM_Q4_TILE, Q4_CODES = SKM_Q4_CODES, Q4_SCALES = SKM_Q4_SCALES;
static_assert(SK_WARPS == SKM_WARPS, "kernels/step_skel_math.h walks the CTA's warps");
// Units a warp has in flight in the math: Q4 as the third design (U = 4 steps; its E = 2 items
// a step become 2 accumulators here, so the chains of dependent MMAs are as long), f16 1 step
// (4 16-byte vectors a lane: 2 spilled at 64 registers).
constexpr int MATH_U_Q4 = 4, MATH_U_F16 = 1;
// CTAs an SM the math instantiations are built for: 64 registers a thread (at 5, 48 registers,
// ptxas spilled the f16 ring and the Q4 words inside the loops; at 4 a few spills remain, ~4
// local accesses a Q4 tile of ~117 instructions).
constexpr int SK_MATH_PER_SM = 4;
enum { MATH_NONE = 0, MATH_LOADED = 1, MATH_HELD = 2 }; // the kernel's MATH parameter

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
    int dt;   // g4_sq_dtype: the arithmetic G4_SK_MATH runs
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

__device__ __forceinline__ uint32_t ld_u32_evict_first(const void *p, uint64_t pol) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.u32 %0, [%1], %2;"
                 : "=r"(v)
                 : "l"(p), "l"(pol));
    return v;
}

__device__ __forceinline__ uint32_t ld_u8_evict_first(const void *p, uint64_t pol) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.u8 %0, [%1], %2;"
                 : "=r"(v)
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

// --- G4_SK_MATH: the GEMV arithmetic of a weight-carrying instruction ---------------------------
// The walk: kernels/step_skel_math.h (warp w takes units w, w + 8, ... of the instruction's runs
// as one list; tested on the CPU). Loop bounds and the cursor are warp-uniform: every lane reaches
// every mma.sync. The words are re-read with the stream's load form (L2 evict-first, no L1);
// MATH_HELD makes them from the unit's address instead (no load: the arithmetic alone).
// Words of a unit not loaded (MATH_HELD): a hash of its address and the lane.
__device__ __forceinline__ uint32_t held_hash(const char *p) {
    return ((uint32_t)(uintptr_t)p + (threadIdx.x & 31)) * 0x85ebca6bu;
}

// A Q4 tile's lane words: its 16 bytes of codes, its scale pair, its zero-point byte (the
// record `pair` of kernels/q4_pack.h).
template <int MATH>
__device__ __forceinline__ void q4_tile_words(const char *t, int pair, uint64_t pol, uint4 &q,
                                              uint32_t &s, uint32_t &z) {
    if constexpr (MATH == MATH_HELD) {
        const uint32_t h = held_hash(t);
        q = make_uint4(h, h ^ 0x5bd1e995u, h * 3u, h + 0x27d4eb2fu);
        s = (h & 0x03ff03ffu) | 0x20002000u; // (fp16 scales ~0.01)
        z = h >> 24;
    } else {
        q = ld_evict_first(t + 16 * (threadIdx.x & 31), pol);
        s = ld_u32_evict_first(t + Q4_CODES + 4 * pair, pol);
        z = ld_u8_evict_first(t + Q4_CODES + Q4_SCALES + pair, pol);
    }
}

// The third design's arithmetic on one tile (gemv_q4_v3_kernel's step for one item).
__device__ __forceinline__ void q4_tile_math(const uint4 &q, uint32_t s, uint32_t z, uint32_t b0,
                                             uint32_t b1, float acc[4]) {
    const g4k::q4k kc = g4k::q4_consts(s, z);
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int st = 0; st < 4; st++) {
        uint32_t a[4];
        g4k::q4_dequant_word(w[st], kc, a);
        g4k::mma_16816(acc, a, b0, b1);
    }
}

// Both walk a warp's m units as the GEMVs walk theirs: a ring of U units in registers, slot u
// computed, then refilled with the unit U ahead (U - 1 to U loads in flight a lane throughout).
template <int MATH>
__device__ __forceinline__ void math_q4(const char *w, const g4_sq_instr &in, uint64_t pol,
                                        uint32_t b0, uint32_t b1, float (&acc)[4][4]) {
    const int lane = threadIdx.x & 31, pair = 2 * (lane >> 2) + ((lane & 3) >> 1);
    const int warp = (int)(threadIdx.x >> 5);
    const int m = skm_warp_units(in.w_runs * skm_units_a_run(G4_SQ_Q4, in.w_run), warp);
    skm_cursor cur = skm_start(&in, G4_SQ_Q4, warp);
    int left = 0; // (whole tiles: unused)
    uint4 q[MATH_U_Q4];
    uint32_t s[MATH_U_Q4], z[MATH_U_Q4];
#pragma unroll
    for (int u = 0; u < MATH_U_Q4; u++)
        if (u < m) q4_tile_words<MATH>(w + skm_next(&cur, &left), pair, pol, q[u], s[u], z[u]);
    for (int j0 = 0; j0 < m; j0 += MATH_U_Q4) {
#pragma unroll
        for (int u = 0; u < MATH_U_Q4; u++) {
            if (j0 + u >= m) break; // (warp-uniform)
            q4_tile_math(q[u], s[u], z[u], b0, b1, acc[u & 1]);
            if (j0 + u + MATH_U_Q4 < m)
                q4_tile_words<MATH>(w + skm_next(&cur, &left), pair, pol, q[u], s[u], z[u]);
        }
    }
}

// An f16 step's lane vectors (16 (lane + 32 v) bytes into the unit; past the run's end: zero,
// the math still run: the tensor-core GEMV's zero-filled edge).
template <int MATH>
__device__ __forceinline__ void f16_unit_words(const char *t, int left, uint64_t pol,
                                               uint4 (&v)[4]) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int off = 16 * ((int)(threadIdx.x & 31) + 32 * j);
        if constexpr (MATH == MATH_HELD) {
            const uint32_t h = held_hash(t + off);
            v[j] = make_uint4(h, h ^ 0x5bd1e995u, h * 3u, h + 0x27d4eb2fu);
        } else {
            v[j] = off < left ? ld_evict_first(t + off, pol) : make_uint4(0, 0, 0, 0);
        }
    }
}

// The tensor-core fp16 GEMV's arithmetic on one step (gemv_f16_mma_kernel: tile j's A fragment
// from word j of the four vectors, one mma each into its own accumulator).
__device__ __forceinline__ uint32_t u4_word(const uint4 &v, int j) {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}
__device__ __forceinline__ void f16_unit_math(const uint4 (&v)[4], uint32_t b0, uint32_t b1,
                                              float (&acc)[4][4]) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t a[4];
        gvm_afrag(u4_word(v[0], j), u4_word(v[1], j), u4_word(v[2], j), u4_word(v[3], j), a);
        g4k::mma_16816(acc[j], a, b0, b1);
    }
}

template <int MATH>
__device__ __forceinline__ void math_f16(const char *w, const g4_sq_instr &in, uint64_t pol,
                                         uint32_t b0, uint32_t b1, float (&acc)[4][4]) {
    const int warp = (int)(threadIdx.x >> 5);
    const int m = skm_warp_units(in.w_runs * skm_units_a_run(G4_SQ_F16, in.w_run), warp);
    skm_cursor cur = skm_start(&in, G4_SQ_F16, warp);
    int left = 0; // bytes of the unit's run from its start
    uint4 v[MATH_U_F16][4];
#pragma unroll
    for (int u = 0; u < MATH_U_F16; u++)
        if (u < m) {
            const char *t = w + skm_next(&cur, &left);
            f16_unit_words<MATH>(t, left, pol, v[u]);
        }
    for (int j0 = 0; j0 < m; j0 += MATH_U_F16) {
#pragma unroll
        for (int u = 0; u < MATH_U_F16; u++) {
            if (j0 + u >= m) break; // (warp-uniform)
            f16_unit_math(v[u], b0, b1, acc);
            if (j0 + u + MATH_U_F16 < m) {
                const char *t = w + skm_next(&cur, &left);
                f16_unit_words<MATH>(t, left, pol, v[u]);
            }
        }
    }
}

// The instruction's math (MATH != MATH_NONE, a weight-carrying instruction): B fragments made
// from the activation words the thread read (y; finite fp16 in [0.5, 1)), the accumulators
// folded into one word (x ^= it: the value written, and the sink test, depend on every MMA).
template <int MATH>
__device__ __forceinline__ uint32_t instr_math(const sk_args &a, const g4_sq_instr &in,
                                               uint64_t pol, uint32_t y) {
    const uint32_t b0 = (y & 0x03ff03ffu) | 0x38003800u, b1 = (y >> 5 & 0x03ff03ffu) | 0x38003800u;
    float acc[4][4];
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
    if (a.dt == G4_SQ_Q4)
        math_q4<MATH>(a.w, in, pol, b0, b1, acc);
    else
        math_f16<MATH>(a.w, in, pol, b0, b1, acc);
    uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) m ^= __float_as_uint(acc[j][e]);
    return m;
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

template <bool TL, int MATH> __device__ __forceinline__ void step_skel_body(sk_args a) {
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
        if (MATH != MATH_NONE && weights && in.w_runs > 0) x ^= instr_math<MATH>(a, in, pol, y);
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

// The skeleton without math (its registers as before the math existed: no minimum of CTAs an SM
// asked, which ptxas reads as leave to use more), and with it (at most the registers that keep
// SK_MATH_PER_SM CTAs an SM).
template <bool TL> __global__ void __launch_bounds__(SK_THREADS) step_skel_kernel(sk_args a) {
    step_skel_body<TL, MATH_NONE>(a);
}

template <bool TL, int MATH>
__global__ void __launch_bounds__(SK_THREADS, SK_MATH_PER_SM) step_skel_math_kernel(sk_args a) {
    step_skel_body<TL, MATH>(a);
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
    int dt;      // g4_sq_dtype
    int math_ok; // every weight run whole G4_SK_MATH units (Q4: 592-byte tiles)
    int math_G;  // CTAs the math instantiations fit co-resident
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

// CTAs an SM of instantiation (tl, math).
static int per_sm_of(bool tl, int math, int *per_sm) {
    static void (*const k[2][3])(sk_args) = {
        {step_skel_kernel<false>, step_skel_math_kernel<false, MATH_LOADED>,
         step_skel_math_kernel<false, MATH_HELD>},
        {step_skel_kernel<true>, step_skel_math_kernel<true, MATH_LOADED>,
         step_skel_math_kernel<true, MATH_HELD>}};
    G4_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, k[tl][math], SK_THREADS, 0));
    return G4_OK;
}

// The fewest CTAs an SM over instantiations tl x [m0, m1], times the SMs.
static int max_ctas_of(int m0, int m1, int *ctas) {
    int per_sm = 1 << 30;
    for (int tl = 0; tl < 2; tl++)
        for (int m = m0; m <= m1; m++) {
            int n = 0;
            const int rc = per_sm_of(tl, m, &n);
            if (rc) return rc;
            if (n < per_sm) per_sm = n;
        }
    if (per_sm < 1) return g4_fail(G4_EINTERNAL, "step skeleton: no CTA fits a SM");
    *ctas = per_sm * g4k::num_sms();
    return G4_OK;
}

extern "C" int g4_step_skel_max_ctas(int *ctas) {
    // (both plain instantiations: the stamped step runs the same queues, so the same G must fit)
    return max_ctas_of(MATH_NONE, MATH_NONE, ctas);
}

extern "C" int g4_step_skel_max_ctas_math(int *ctas) {
    return max_ctas_of(MATH_LOADED, MATH_HELD, ctas);
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
    int math_G = 0;
    if ((rc = g4_step_skel_max_ctas_math(&math_G))) return rc;
    g4_step_skel *s = (g4_step_skel *)g4_calloc(1, sizeof *s);
    s->G = q->G;
    s->math_G = math_G;
    s->dt = q->dt;
    s->math_ok = q->dt == G4_SQ_Q4 || q->dt == G4_SQ_F16;
    for (int k = 0; k < q->n && s->math_ok; k++) // (f16: any run; its last step zero-filled)
        s->math_ok = q->ins[k].w_runs <= 0 ||
                     (q->ins[k].w_run > 0 && (q->dt != G4_SQ_Q4 || q->ins[k].w_run % Q4_TILE == 0));
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
    if ((mode & G4_SK_MATH_HELD) && !(mode & G4_SK_MATH))
        return g4_fail(G4_EUSER, "step skeleton: mode 0x%x: G4_SK_MATH_HELD without G4_SK_MATH",
                       mode);
    if ((mode & G4_SK_MATH) && !s->math_ok)
        return g4_fail(G4_EUSER,
                       "step skeleton: G4_SK_MATH needs weight type Q4 or f16, runs of > 0 bytes "
                       "and Q4 runs of whole %d-byte tiles",
                       Q4_TILE);
    if ((mode & G4_SK_MATH) && s->G > s->math_G)
        return g4_fail(G4_EUSER,
                       "step skeleton: G4_SK_MATH fits %d CTAs co-resident, the queues are for %d "
                       "(a CTA not resident could deadlock the step)",
                       s->math_G, s->G);
    const int math = !(mode & G4_SK_MATH)       ? MATH_NONE
                     : (mode & G4_SK_MATH_HELD) ? MATH_HELD
                                                : MATH_LOADED;
    sk_args a = {s->ins,   s->start, s->reg, s->w,     s->act, s->ctr, s->n_counters,
                 s->stats, s->sink,  s->tl,  prefetch, mode,   s->dt};
    // (the kernel named at each launch: one instantiation a form)
    if (tl) {
        // (zeroed first: a stamp left at 0 is an instruction that did not run)
        G4_CUDA_CHECK(cudaMemsetAsync(s->tl, 0, sizeof(g4_sq_stamp) * (size_t)s->n, st));
        if (math == MATH_NONE)
            step_skel_kernel<true><<<s->G, SK_THREADS, 0, st>>>(a);
        else if (math == MATH_LOADED)
            step_skel_math_kernel<true, MATH_LOADED><<<s->G, SK_THREADS, 0, st>>>(a);
        else
            step_skel_math_kernel<true, MATH_HELD><<<s->G, SK_THREADS, 0, st>>>(a);
    } else if (math == MATH_NONE) {
        step_skel_kernel<false><<<s->G, SK_THREADS, 0, st>>>(a);
    } else if (math == MATH_LOADED) {
        step_skel_math_kernel<false, MATH_LOADED><<<s->G, SK_THREADS, 0, st>>>(a);
    } else {
        step_skel_math_kernel<false, MATH_HELD><<<s->G, SK_THREADS, 0, st>>>(a);
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
