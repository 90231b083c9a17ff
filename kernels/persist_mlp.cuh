// persist_mlp.cuh: the decode MLP block of one token as ONE persistent launch (issue 30 stage 2,
// first step; bench/NOTES.md "Issue 30 stage 2, first step"): with Q4 weights (kernels/q4_pack.h
// layout, gemm_q4.cuh g4_q4_weight)
//   (optional) the add-norm prologue of the add-norm GEMVs (g4_gemv_norm, gemm_f16.cuh):
//              h_out = (h_in + rmsnorm(r) w) * scale, x = rmsnorm(h_out) next_w or h_out
//   phase 1:   mlp fp16 [F] = gelu_tanh(x @ Wg) * (x @ Wu)        (the fused GLU GEMV's math)
//   phase 2:   y [H] = mlp @ Wd (+ bias), stored by the epilogue epi (the down linear's)
// The phases hand over through on-device counters in a workspace instead of a kernel boundary;
// see persist_mlp.cu for the design, the counters' reset and why it cannot deadlock
// (G4_PERSIST_MLP=1: dynamically claimed units). A second design (static units, weights bulk-
// copied into shared memory before the PDL wait) measured slower and raced under load; it was
// removed (bench/NOTES.md "..., second design" and the eleventh session's outcome).
// Test: tests/test_backend_ops.c --op mlp_block; bench: g4cu bench --kernels --filter persist.
#ifndef G4_PERSIST_MLP_CUH
#define G4_PERSIST_MLP_CUH

#include <stddef.h>

#include "kernels/gemm_f16.cuh"
#include "kernels/gemm_q4.cuh"

#ifdef __cplusplus
extern "C" {
#endif

// NULL when the persistent MLP takes hidden H and MLP width F, else what it takes.
const char *g4_persist_mlp_supported(int H, int F);

// Bytes of the workspace a launch of shape (H, F) needs (zeroed once when allocated; every
// launch leaves its counters at zero again). One workspace per stream: two launches in flight
// at once on different streams must not share one.
size_t g4_persist_mlp_workspace(int H, int F);

// One token (M = 1). wg, wu: [H -> F]; wd: [F -> H]. Exactly one of x (fp16 [H], 16-byte
// aligned) and a (the add-norm operands; a->x_out receives x) is given. mlp fp16 [F] (16-byte
// aligned) receives the GLU output, y [H] the down projection by epi (+ bias fp16 [H] or NULL;
// y may be a->r or x: they are read before any y is stored; y, mlp, h_out, x_out distinct).
// ws: g4_persist_mlp_workspace(H, F) bytes, 16-byte aligned, zeroed when allocated.
// Asynchronous on `stream` (PDL as the decode GEMVs). Returns G4_OK or G4_EUSER.
int g4_persist_mlp_q4(void *y, g4_gemm_epi epi, const void *bias, void *mlp, const void *x,
                      const g4_gemv_norm *a, const g4_q4_weight *wg, const g4_q4_weight *wu,
                      const g4_q4_weight *wd, void *ws, size_t ws_bytes, cudaStream_t stream);

// The plan a launch of (H, F) runs (benches print it): grid CTAs, phase-1 and phase-2 units,
// the down weight's K chunks.
void g4_persist_mlp_plan(int H, int F, int *grid, int *units1, int *units2, int *chunks);

#ifdef __cplusplus
}
#endif

#endif
