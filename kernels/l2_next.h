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

// CTA b of `ctas`'s share of region r of d, in 16-byte units from the region's start:
// [*off, *off + return value) (0: none). The regions' concatenation is cut evenly over the CTAs
// (b * total / ctas .. (b + 1) * total / ctas), so the shares of all CTAs partition every region
// once. (tests/test_l2_next.c checks it on the CPU.)
G4_L2N_HD uint64_t g4_l2n_slice(const g4_l2n *d, uint64_t b, uint64_t ctas, int r, uint64_t *off) {
    uint64_t total = 0, base = 0; // (< 2^30 units: 4 regions of < 4 GB)
    for (int i = 0; i < G4_L2N_MAX && i < d->n; i++) {
        if (i < r) base += d->bytes[i] >> 4;
        total += d->bytes[i] >> 4;
    }
    *off = 0;
    if (r < 0 || r >= d->n || r >= G4_L2N_MAX || !ctas) return 0;
    const uint64_t lo = total * b / ctas, hi = total * (b + 1) / ctas, len = d->bytes[r] >> 4;
    const uint64_t s = lo > base ? lo : base, e = hi < base + len ? hi : base + len;
    if (e <= s) return 0;
    *off = s - base;
    return e - s;
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
    size_t b[G4_L2N_MAX], total = 0;
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

#endif
