// gemv_spread.h: the balanced ("stream-K") split of the Q4 GEMV's third design (issue 29,
// G4_GEMV3_SPREAD=1; kernels/gemm_q4.cu gemv_q4_v3s_kernel; bench/NOTES.md "spread evenly over
// the SMs"). Plain C shared by the kernel (the same functions, __host__ __device__ there) and
// the CPU test tests/test_gemv_spread.c. Internal header.
//
// The work of a launch is the list of items (unit u, k tile k), unit-major: item i = u KT + k,
// a unit being T feature tiles (plain T = 2, fused T = 1: the gate and up tiles of one feature
// tile; E = 2 weight tiles a step either way). The grid is CTAS = SMs x CTAs-an-SM CTAs of 8
// warps, all resident; global warp w = 8 cta + warp takes the contiguous share
//     [start(w), start(w + 1)),   start(w) = floor(items w / WARPS),
// so warp shares (and CTA shares, the union of 8 consecutive warps') differ by at most one item.
// A warp walks its share; the run of it inside one unit is a piece. A piece that is the whole
// unit stores the outputs at once (the epilogue as today). Otherwise the unit is split: each of
// its pieces writes its fp32 partial to slot(w, u) of the workspace, fences, and draws a ticket
// from the unit's counter (counter index = owner of the unit's first item, unique among split
// units: a warp holding the starts of two units holds the first of them whole); the piece that
// draws the last ticket (pieces(u) - 1) resets the counter, fences, sums every piece's partial
// in piece order (k order, fixed: the result does not depend on arrival order) and runs the
// epilogue. No piece waits for another (no spin): any residency finishes.
//
// Workspace: WARPS counters (uint32, zero between launches: the last piece resets its unit's),
// then 2 WARPS partial slots (a warp's first piece, slot 2w, and its last one, 2w + 1; at most
// two of a warp's pieces are split: the ones in between are whole units), each E x 32 lanes x
// float4 = 1 KB. Sized by the grid only (not by the shape): g4_gvs_workspace.
#ifndef G4_GEMV_SPREAD_H
#define G4_GEMV_SPREAD_H

#include <stddef.h>
#include <stdio.h>

#ifdef __CUDACC__
#define G4_GVS_HD __host__ __device__ __forceinline__
#else
#define G4_GVS_HD static inline
#endif

enum { G4_GVS_WARPS = 8, G4_GVS_E = 2, G4_GVS_SLOT_BYTES = G4_GVS_E * 32 * 16 };

typedef struct {
    int nt, kt;      // feature tiles N / 16, k tiles K / 64
    int t;           // feature tiles a unit: 2 plain, 1 fused (gate + up)
    int units;       // ceil(nt / t)
    unsigned items;  // units x kt
    int ctas, warps; // the grid: SMs x CTAs an SM, x 8 warps
} g4_gvs_plan;

// The plan of N x K (fused: the gate/up pair) on sms SMs x cps CTAs an SM. 0, or -1 and one
// line in err (n bytes): N not a positive multiple of 16, K of 64, sms or cps < 1, or items x
// warps past 32 bits (the kernel's share arithmetic is 32-bit unsigned).
static inline int g4_gvs_make(g4_gvs_plan *p, int N, int K, int fused, int sms, int cps, char *err,
                              size_t n) {
    p->nt = p->kt = p->t = p->units = p->ctas = p->warps = 0, p->items = 0;
    if (N <= 0 || N % 16 || K <= 0 || K % 64 || sms < 1 || cps < 1) {
        snprintf(err, n,
                 "gemv spread plan: N %d K %d on %d SMs x %d CTAs: expected N a multiple "
                 "of 16, K of 64, >= 1 SM and CTA",
                 N, K, sms, cps);
        return -1;
    }
    p->nt = N / 16;
    p->kt = K / 64;
    p->t = fused ? 1 : 2;
    p->units = (p->nt + p->t - 1) / p->t;
    p->ctas = sms * cps;
    p->warps = p->ctas * G4_GVS_WARPS;
    const unsigned long long items = (unsigned long long)p->units * (unsigned long long)p->kt;
    if (items * (unsigned long long)p->warps > 0xffffffffull) {
        snprintf(err, n, "gemv spread plan: N %d K %d: %llu items x %d warps past 32 bits", N, K,
                 items, p->warps);
        return -1;
    }
    p->items = (unsigned)items;
    if (n) err[0] = 0;
    return 0;
}

// The first item of warp w's share (w = warps: items, the end of the last share).
G4_GVS_HD unsigned g4_gvs_start(const g4_gvs_plan *p, int w) {
    return p->items * (unsigned)w / (unsigned)p->warps;
}

// The warp whose share holds item i (< items): the largest w with start(w) <= i.
G4_GVS_HD int g4_gvs_owner(const g4_gvs_plan *p, unsigned i) {
    return (int)(((i + 1u) * (unsigned)p->warps - 1u) / p->items);
}

// The pieces of unit u: the warps whose shares meet its items (every share >= 1 item when items
// >= warps, so the owners of its first and last item and all between; else shares of 0 or 1
// item, one owner an item).
G4_GVS_HD int g4_gvs_pieces(const g4_gvs_plan *p, int u) {
    if (p->items < (unsigned)p->warps) return p->kt;
    const unsigned i0 = (unsigned)u * (unsigned)p->kt;
    return g4_gvs_owner(p, i0 + (unsigned)p->kt - 1u) - g4_gvs_owner(p, i0) + 1;
}

// The partial slot of warp w's piece in unit u: 2w for the warp's first unit, 2w + 1 for its
// last (a split piece is one of those two).
G4_GVS_HD int g4_gvs_slot(const g4_gvs_plan *p, int w, int u) {
    return 2 * w + (g4_gvs_start(p, w) / (unsigned)p->kt == (unsigned)u ? 0 : 1);
}

// The counter of split unit u: the owner of its first item.
G4_GVS_HD int g4_gvs_counter(const g4_gvs_plan *p, int u) {
    return g4_gvs_owner(p, (unsigned)u * (unsigned)p->kt);
}

// The warp of the piece after warp w's in unit u (the owner of the item after w's share), or -1
// when w's piece ends the unit: the last piece walks the pieces w0 = counter(u), next(w0), ...
G4_GVS_HD int g4_gvs_next(const g4_gvs_plan *p, int w, int u) {
    const unsigned e = g4_gvs_start(p, w + 1);
    return e >= (unsigned)(u + 1) * (unsigned)p->kt ? -1 : g4_gvs_owner(p, e);
}

// Byte offset of the partial slots in the workspace (after the counters, 256-aligned).
G4_GVS_HD size_t g4_gvs_part_offset(int warps) {
    return ((size_t)warps * 4 + 255) / 256 * 256;
}

// The workspace a grid of `warps` warps needs: the counters, then 2 slots a warp.
G4_GVS_HD size_t g4_gvs_workspace(int warps) {
    return g4_gvs_part_offset(warps) + (size_t)2 * warps * G4_GVS_SLOT_BYTES;
}

#endif
