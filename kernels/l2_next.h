// l2_next.h: the weights of the NEXT op of the decode chain, which an M <= 8 GEMV prefetches
// into L2 while it runs (issue 30 / 29, G4_L2_NEXT; bench/NOTES.md "The next weight into L2").
// Plain C: the descriptor type shared by the kernels (pdl.cuh g4_prefetch_l2_next, the GEMV
// kernels' last parameter), their entries (gemm_f16.cuh g4_gemv_l2_next) and the CUDA backend.
//
// Why: the decode GEMVs are latency-bound (bench/NOTES.md, "Why the Q4 GEMV streams below the
// bandwidth"): 11-15 warps an SM wait ~1-1.5 us on each DRAM round trip while the DRAM is idle
// most of the step. If op i+1's weights are already in L2 when it starts, its loads return in
// ~0.3-0.6 us and the same bytes in flight move 2-4x the rate. A prefetch returns nothing to the
// program: it cannot change a result, only the time.
#ifndef G4_L2_NEXT_H
#define G4_L2_NEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
    G4_L2N_MAX = 4, // regions a descriptor holds (a Q4 weight is one: q | scales | zp packed)
};

// Up to G4_L2N_MAX device regions [p[i], p[i] + bytes[i]) (16-byte aligned starts, sizes
// multiples of 16; n = 0: nothing). The launched grid splits their concatenation evenly over
// its CTAs (kernels/pdl.cuh g4_prefetch_l2_next).
typedef struct {
    const void *p[G4_L2N_MAX];
    uint32_t bytes[G4_L2N_MAX];
    int n;
} g4_l2n;

#ifdef __CUDACC__
#define G4_L2N_HD __host__ __device__ __forceinline__
#else
#define G4_L2N_HD static inline
#endif

// The chunk of one prefetch request (kernels/pdl.cuh): the SASS of cp.async.bulk.prefetch.L2
// keeps size / 16 in 16 bits, so under 1 MB; 64 KB.
#define G4_L2N_CHUNK (64u << 10)

// CTA b of `ctas`'s run [*lo, *hi) of the regions' concatenation (16-byte units; total < 2^30:
// 4 regions of < 4 GB): runs of per = ceil(total / ctas) units, CTA b taking run b (the last
// CTAs may get less or none), so the runs of all CTAs partition the concatenation once. One
// 32-bit division: a 64-bit one is a called routine in SASS, whose register saves would wait on
// the kernel's loads in flight. Sizes, not the descriptor: the kernels pass register copies (the
// address of a kernel parameter would copy it to the stack).
G4_L2N_HD void g4_l2n_run(const uint32_t *bytes, int n, uint32_t b, uint32_t ctas, uint32_t *lo,
                          uint32_t *hi) {
    uint32_t total = 0;
    for (int i = 0; i < G4_L2N_MAX && i < n; i++) total += bytes[i] >> 4;
    *lo = *hi = 0;
    if (!ctas || !total) return;
    const uint32_t per = (total - 1) / ctas + 1;
    const uint64_t lo64 = (uint64_t)b * per; // (may pass total: then no run)
    *lo = lo64 < total ? (uint32_t)lo64 : total;
    *hi = total - *lo < per ? total : *lo + per;
}

// The part of the run [lo, hi) inside a region of len units that starts at unit base of the
// concatenation: [*off, *off + return value) from the region's start (0: none).
G4_L2N_HD uint32_t g4_l2n_part(uint32_t lo, uint32_t hi, uint32_t base, uint32_t len,
                               uint32_t *off) {
    const uint32_t s = lo > base ? lo : base, e = hi < base + len ? hi : base + len;
    *off = e > s ? s - base : 0;
    return e > s ? e - s : 0;
}

// CTA b's share of region r (g4_l2n_run, then g4_l2n_part): what kernels/pdl.cuh
// g4_prefetch_l2_next requests, region by region; tests/test_l2_next.c checks it on the CPU.
G4_L2N_HD uint32_t g4_l2n_slice(const uint32_t *bytes, int n, uint32_t b, uint32_t ctas, int r,
                                uint32_t *off) {
    uint32_t lo, hi, base = 0;
    *off = 0;
    if (r < 0 || r >= n || r >= G4_L2N_MAX) return 0;
    g4_l2n_run(bytes, n, b, ctas, &lo, &hi);
    for (int i = 0; i < r; i++) base += bytes[i] >> 4;
    return g4_l2n_part(lo, hi, base, bytes[r] >> 4, off);
}

// The bytes a descriptor may hold in all: G4_L2_NEXT_MB (1..1024, default 32) MB. The H200's
// L2 is 50 MB: 32 MB of the next op's weights leave ~18 MB for the running op's own stream, the
// activations and the KV rows it reads.
static inline size_t g4_l2n_cap(void) {
    const char *v = getenv("G4_L2_NEXT_MB");
    const int mb = v && atoi(v) >= 1 && atoi(v) <= 1024 ? atoi(v) : 32;
    return (size_t)mb << 20;
}

// d = the regions [p[i], p[i] + bytes[i]) for i < n (the first G4_L2N_MAX usable ones: non-NULL,
// 16-byte aligned, >= 16 bytes), each cut down to a multiple of 16 and, when they pass `cap`
// bytes in all, each to its share of cap from its start (a weight's first waves read its start:
// the persistent GEMVs walk feature groups from 0).
static inline void g4_l2n_fill(g4_l2n *d, const void *const *p, const size_t *bytes, int n,
                               size_t cap) {
    memset(d, 0, sizeof *d);
    // (b zeroed: gcc -O3 cannot see that only b[i < d->n] is read, -Werror=maybe-uninitialized)
    size_t b[G4_L2N_MAX] = {0}, total = 0;
    for (int i = 0; i < n && d->n < G4_L2N_MAX; i++) {
        if (!p[i] || (uintptr_t)p[i] % 16 || bytes[i] < 16) continue;
        d->p[d->n] = p[i];
        b[d->n] = bytes[i] & ~(size_t)15;
        total += b[d->n++];
    }
    int k = 0;
    for (int i = 0; i < d->n; i++) {
        size_t c = total > cap ? (size_t)((double)b[i] * (double)cap / (double)total) : b[i];
        c &= ~(size_t)15;
        if (c > 0xfffffff0u) c = 0xfffffff0u; // (u32 sizes; only with a cap past 4 GB)
        if (!c) continue;
        d->p[k] = d->p[i];
        d->bytes[k++] = (uint32_t)c;
    }
    d->n = k;
}

// The hints of a step of n weight-bearing ops (the CUDA backend's set_step_order): op i reads
// the regions p[i][k], bytes[i][k] (k < 3, NULL-padded); hint[i] = the regions of ops i+1 ..
// i+depth (depth 1 or 2; wrapping: the op after the last is the first, the next step's),
// through g4_l2n_fill with `cap`. An op whose own bytes reach `l2` (the L2's size: the LM
// head) gets none (n = 0): its own stream would evict them before the next op reads them.
static inline void g4_l2n_plan(const void *const (*p)[3], const size_t (*bytes)[3], int n,
                               int depth, size_t l2, size_t cap, g4_l2n *hint) {
    for (int i = 0; i < n; i++) {
        memset(&hint[i], 0, sizeof hint[i]);
        const size_t own = bytes[i][0] + bytes[i][1] + bytes[i][2];
        if (own >= l2) continue;
        const void *rp[6];
        size_t rb[6];
        int nr = 0;
        for (int d = 1; d <= depth && d <= 2 && d < n; d++)
            for (int k = 0; k < 3; k++)
                if (p[(i + d) % n][k]) {
                    rp[nr] = p[(i + d) % n][k];
                    rb[nr++] = bytes[(i + d) % n][k];
                }
        g4_l2n_fill(&hint[i], rp, rb, nr, cap);
    }
}

#endif
