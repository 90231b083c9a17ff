// ple_block.cuh: the decode per-layer-input block of one token as ONE launch (issue 30, "the
// decode step at the speed of its weights"; kernels/ops.h ple_block):
//   (a given) h_out = (h_in + rmsnorm(r) * w) * scale, x = rmsnorm(h_out) * next_w (or h_out)
//   pg = gelu_tanh(fp16(x @ Wg)) * mul[0 .. P)      (Wg: [H -> P], the PLE gate)
//   y  = pg @ Wp                                    (Wp: [P -> H], the PLE projection)
// with packed Q4 weights (kernels/q4_pack.h) or fp16 weights ([K, N] row-major, the fp16 GEMV's
// loads and dot products), thread-block clusters of 8 CTAs: every cluster
// computes the whole gate (the add-norm prologue in every CTA, as the add-norm GEMVs do),
// exchanges its partial sums through distributed shared memory, then each CTA computes its
// slice of the projection. Design and numbers: kernels/ple_block.cu, bench/NOTES.md.
// Test: tests/test_backend_ops.c --op ple_block; bench: g4cu bench --kernels --filter ple_block.
#ifndef G4_PLE_BLOCK_CUH
#define G4_PLE_BLOCK_CUH

#include "kernels/gemm_f16.cuh"
#include "kernels/gemm_q4.cuh"

#ifdef __cplusplus
extern "C" {
#endif

// NULL when the one-launch PLE block takes hidden H and per-layer-input width P, else what it
// takes.
const char *g4_ple_block_supported(int H, int P);

// One token (M = 1). wg: [H -> P], wp: [P -> H]. Exactly one of x (fp16 [H], 16-byte aligned)
// and a (the add-norm operands; a->x_out receives x, a->mul and a->ldm are ignored) is given.
// mul: fp16 [P] (the layer's slice of the per-layer inputs), 2-byte aligned. pg fp16 [P]
// (16-byte aligned) receives the gate's output, y [H] the projection by epi (no bias). y must
// not be a->r, a->h_in or x: CTAs of other clusters may still read them while y is stored.
// Asynchronous on `stream` (PDL as the decode GEMVs). Returns G4_OK or G4_EUSER.
int g4_ple_block_q4(void *y, g4_gemm_epi epi, void *pg, const void *x, const g4_gemv_norm *a,
                    const void *mul, const g4_q4_weight *wg, const g4_q4_weight *wp,
                    cudaStream_t stream);

// The same with fp16 weights: wg fp16 [H][P], wp fp16 [P][H] (row-major, 16-byte aligned).
int g4_ple_block_f16(void *y, g4_gemm_epi epi, void *pg, const void *x, const g4_gemv_norm *a,
                     const void *mul, const void *wg, const void *wp, int H, int P,
                     cudaStream_t stream);

// The plan a launch of (H, P) runs (benches print it; f16: the fp16 kernel's): clusters (of 8
// CTAs); Q4: warps a gate feature tile is split over, feature tiles a CTA's projection pass
// takes; fp16: row phases a CTA's gate rows are split over, 32-column projection units a CTA
// takes (at most).
void g4_ple_block_plan(int H, int P, int f16, int *clusters, int *gate_split, int *proj_tiles);

#ifdef __cplusplus
}
#endif

#endif
