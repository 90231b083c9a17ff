// handover_plan.h: the host-side plan of the hand-over bench rows (kernels/bench/
// bench_handover.cu, `g4cu bench --kernels --filter handover`): grid, steps, buffer and counter
// layout, byte counts, each size validated with a one-line reason. Plain C, no CUDA: checked on
// the CPU by tests/test_handover_plan.c.
#ifndef G4_HANDOVER_PLAN_H
#define G4_HANDOVER_PLAN_H

#include <math.h>
#include <stddef.h>

#define G4_HO_LINE       128   // bytes a cache line: a counter alone in one, or beside data
#define G4_HO_MAX_STEPS  8192  // join phases a launch
#define G4_HO_MAX_CHAIN  1024  // chain steps: start (< 576) + steps stays an exact fp16 integer
#define G4_HO_MAX_HALVES 16384 // a vector's halves (the MLP's 12,288 fit)
#define G4_HO_MAX_BYTES  (32u << 20) // the working set stays L2-resident (50 MB on the H200)

// The value functions run on both sides (the kernels check what they read; the host the result).
#ifdef __CUDACC__
#define G4_HO_HD __host__ __device__ __forceinline__
#else
#define G4_HO_HD static inline
#endif

// The chain: step r (0 .. R-1) is done by CTA r % G; it waits for step r-1's flag, reads the
// n-half vector step r-1 wrote (step 0: the start vector), adds one, writes slot r, publishes
// flag r. Slot r holds step r's vector at data_off; flag r is at flag_base + r * flag_stride
// bytes, where flag_base is the flag region (flag in its own line: stride 128) or the slots
// (beside: the flag is the first int of the slot, the vector starts 16 bytes later in the
// same line: the false-sharing layout). The exit counter has its own line after the flags.
typedef struct {
    int G, R, n, beside;
    size_t slot_bytes, data_off;   // one step's slot, the vector's offset in it
    size_t flag_stride;            // bytes between flags r and r + 1
    size_t slots_bytes, ctr_bytes; // the slots; the flag lines (none beside) + the exit line
} g4_ho_chain_plan;

// The join: phase r (0 .. R-1): producers i < P each write the 16-half tile i of vector r and
// add one to counter r; consumers i < C wait for counter r to reach P, read all P * 16 halves
// and reduce their sum of squares into sums[r][i]. A consumer of phase r is producer i of
// phase r + 1, so P <= C and the grid is C CTAs. Counter r in line r, the exit counter in line R.
typedef struct {
    int P, C, R;
    size_t vec_bytes; // one phase's vector (P * 16 halves)
    size_t vecs_bytes, ctr_bytes, sums_bytes;
} g4_ho_join_plan;

static inline size_t g4_ho_round(size_t b) {
    return (b + G4_HO_LINE - 1) / G4_HO_LINE * G4_HO_LINE;
}

// `resident`: CTAs of the kernel that can be resident at once (occupancy query x SMs). Returns
// NULL and fills *p, or why the plan is refused.
static inline const char *g4_ho_chain_make(int G, int R, int n, int beside, int resident,
                                           g4_ho_chain_plan *p) {
    if (G < 1 || G > resident)
        return "chain: CTAs outside 1 .. the resident count (every CTA must run at once: a "
               "waiter holds its SM until the step before it is published)";
    if (R < 2 || R < G || R > G4_HO_MAX_CHAIN)
        return "chain: steps outside max(2, CTAs) .. 1024 (every CTA hands over at least once; "
               "start + steps an exact fp16 integer)";
    if (n < 8 || n > G4_HO_MAX_HALVES || n % 8)
        return "chain: vector halves outside 8 .. 16384 or not a multiple of 8 (16-byte loads)";
    p->G = G, p->R = R, p->n = n, p->beside = beside ? 1 : 0;
    p->data_off = beside ? 16 : 0;
    p->slot_bytes = g4_ho_round(p->data_off + (size_t)n * 2);
    p->flag_stride = beside ? p->slot_bytes : G4_HO_LINE;
    p->slots_bytes = p->slot_bytes * (size_t)R;
    p->ctr_bytes = (beside ? 0 : (size_t)R * G4_HO_LINE) + G4_HO_LINE;
    if (p->slots_bytes + p->ctr_bytes > G4_HO_MAX_BYTES)
        return "chain: slots + counters over 32 MB (the chain would stream from HBM, not L2)";
    return NULL;
}

static inline const char *g4_ho_join_make(int P, int C, int R, int resident, g4_ho_join_plan *p) {
    if (C < 1 || C > resident)
        return "join: consumers outside 1 .. the resident count (all must run at once)";
    if (P < 1 || P > C)
        return "join: producers outside 1 .. consumers (each producer consumes the phase before)";
    if (P * 16 > G4_HO_MAX_HALVES) return "join: producers x 16 halves over 16384";
    if (R < 1 || R > G4_HO_MAX_STEPS) return "join: phases outside 1 .. 8192";
    p->P = P, p->C = C, p->R = R;
    p->vec_bytes = (size_t)P * 16 * 2;
    p->vecs_bytes = p->vec_bytes * (size_t)R;
    p->ctr_bytes = (size_t)(R + 1) * G4_HO_LINE;
    p->sums_bytes = (size_t)R * C * sizeof(float);
    if (p->vecs_bytes + p->ctr_bytes + p->sums_bytes > G4_HO_MAX_BYTES)
        return "join: vectors + counters + sums over 32 MB (not L2-resident)";
    return NULL;
}

// The join's values: element k of phase r's vector in launch copy c, a multiple of 0.25: copy 0
// b = ((7k + 3r) % 13) / 4 - 1.5 in [-1.5, 1.5], copy 1 |b| + 0.25 in [0.25, 1.75]. Exact in
// fp16, and every sum of squares of up to 16384 of them (multiples of 1/16 below 2^20) exact
// in fp32 in any order, so the host's sums equal the device's bit for bit. Copy 1's square is
// larger than copy 0's for every element, so a sum that read ANY element of the other launch's
// copy is off: the host's sums check catches a stale read in the timed launches too.
G4_HO_HD float g4_ho_join_value(int r, int k, int c) {
    const float b = (float)((k * 7 + r * 3) % 13) * 0.25f - 1.5f;
    return c ? fabsf(b) + 0.25f : b;
}

// The chain's start vector in launch copy c (c = 0, 1 alternate between launches, so a step
// that read the launch before's slot sees a value off by 512): integers below 576, so start + R
// stays an exact fp16 integer (<= 2048) for R <= G4_HO_MAX_CHAIN.
G4_HO_HD float g4_ho_chain_start(int i, int c) {
    return (float)(i % 64 + 512 * c);
}

#endif
