// step_skel_math.h: the walk of G4_SK_MATH (kernels/step_skeleton.cu): which units of an
// instruction's weight runs (Q4: 16 x 64 tiles of 592 bytes; f16: 2 KB tensor-core GEMV steps)
// each warp of a CTA takes, in which order, and how many bytes of its run a unit still has.
// Plain C shared by the kernel (__host__ __device__) and the CPU test tests/test_step_skel_math.c,
// which walks every instruction of real queues with it. Internal header.
//
// The units of an instruction are one list: run r's unit c is unit r x units-a-run + c. Warp w
// takes units w, w + SKM_WARPS, w + 2 SKM_WARPS, ... (so the warps share any run shape evenly: a
// run of 24 Q4 tiles or of 4); the cursor (r, c) walks that list without a division. Q4 runs
// are whole tiles (the skeleton refuses G4_SK_MATH otherwise); an f16 run's last unit may pass
// its end: the vectors past it are not loaded (zero), as the f16 GEMV's edge.
#ifndef G4_STEP_SKEL_MATH_H
#define G4_STEP_SKEL_MATH_H

#include <stdint.h>

#include "kernels/step_skel_queues.h"

#ifdef __CUDACC__
#define SKM_HD __host__ __device__ __forceinline__
#else
#define SKM_HD static inline
#endif

enum {
    SKM_WARPS = 8,       // warps a CTA (the skeleton's 256 threads)
    SKM_Q4_TILE = 592,   // a Q4 tile: 512 bytes of codes (32 lanes x 16), 64 of scales, 16 of zps
    SKM_Q4_CODES = 512,  //
    SKM_Q4_SCALES = 64,  //
    SKM_F16_UNIT = 2048, // an f16 step: a lane's four 16-byte vectors at 16 (lane + 32 j)
};

// Bytes a unit of weight type dt (g4_sq_dtype).
SKM_HD int skm_unit_bytes(int dt) {
    return dt == G4_SQ_F16 ? SKM_F16_UNIT : SKM_Q4_TILE;
}

// Units a run of w_run bytes: Q4 whole tiles, f16 rounded up.
SKM_HD int skm_units_a_run(int dt, int w_run) {
    const int u = skm_unit_bytes(dt);
    return dt == G4_SQ_F16 ? (w_run + u - 1) / u : w_run / u;
}

// Units warp w takes of a list of n.
SKM_HD int skm_warp_units(int n, int w) {
    return w < n ? (n - w + SKM_WARPS - 1) / SKM_WARPS : 0;
}

// Warp w's cursor over instruction in's units: run r, unit c of it.
typedef struct {
    int64_t off, stride; // the instruction's first weight byte (arena offset); bytes run to run
    int unit, upr, run;  // bytes a unit; units a run; bytes a run
    int r, c;
} skm_cursor;

SKM_HD skm_cursor skm_start(const g4_sq_instr *in, int dt, int w) {
    skm_cursor k;
    k.off = in->w_off;
    k.stride = in->w_stride;
    k.unit = skm_unit_bytes(dt);
    k.upr = skm_units_a_run(dt, in->w_run);
    k.run = in->w_run;
    k.r = 0;
    k.c = w;
    while (k.upr > 0 && k.c >= k.upr) k.c -= k.upr, k.r++; // (no units: never stepped)
    return k;
}

// The warp's next unit: its arena offset, and (*left) the bytes of its run from there (>= a
// unit but for an f16 run's last); the cursor moves SKM_WARPS units on.
SKM_HD int64_t skm_next(skm_cursor *k, int *left) {
    const int64_t o = k->off + (int64_t)k->r * k->stride + (int64_t)k->c * k->unit;
    *left = k->run - k->c * k->unit;
    k->c += SKM_WARPS;
    while (k->c >= k->upr) k->c -= k->upr, k->r++;
    return o;
}

#endif
