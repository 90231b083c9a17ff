// gemm_q4.cuh: Q4 (MatMulNBits, 4 bit, block 32) linear layers on the GPU:
// y[M, N] = x[M, K] @ W (+ bias), W[k][n] = (q - zp) * scale, and the fused gated-MLP half
// y = gelu_tanh(x @ Wg) * (x @ Wu).
//
// The package layout (kernels/ops.h g4_linear, quant/q4.h) is repacked once at load by
// g4_q4_repack into the tile layout of kernels/q4_pack.h (16 features x 64 inputs per tile, one
// 16-byte load per lane per tile, scales and zero points in per-tile records; same byte count as
// the package). Every kernel dequantizes exactly: (q - zp) in fp16 (exact), times the fp16 scale
// (one fp16 rounding, the only difference from the fp32 reference), products summed in fp32 on
// the tensor cores (mma.sync m16n8k16 with the weights as the A operand, so M = 1..8 tokens are
// the 8 columns of one MMA: no padding waste in decode).
//
//   GEMV4 M <= 2, G4_GEMV=v4 or G4_GEMV_AUTO4=1 only: the third design's plan with the codes
//         multiplied as integers (mma.sync m16n8k16 u8 x s8) against x quantized per 32 inputs
//         to 14-bit integers; weights unrounded (not fp16((q - zp) * scale) as every other
//         kernel and onnxruntime's fp16 path), x within kernels/gemv_q4_int.h's bound.
//   GEMV  M <= 8: streams the packed weight once. The streaming kernel: each warp owns a run of
//         tiles behind a register ring of U tiles (the first loaded before the PDL wait), K split
//         over a CTA's 8 warps and then a cluster when N is small, a persistent grid when it is
//         large; the earlier kernel (one block a feature tile) where it measured faster
//         (gemv_v1 in gemm_q4.cu). Reductions in a fixed order: deterministic.
//   WGMMA any M, the prefill GEMM (gemm_q4_wgmma.cu, on gemm_wgmma.cuh): a producer warpgroup
//         dequantizes the packed tiles (exactly as above) into shared memory in the wgmma B
//         layout while two consumer warpgroups run wgmma m64nBNk16 on them and TMA-loaded x
//         tiles; persistent over tiles, or split K over a cluster for few-tile shapes.
//   MMA   any M: the older prefill GEMM (mma.sync from shared-memory packed tiles), kept as a
//         reference: x tiles and packed weight tiles through a 4-stage cp.async pipeline, each
//         warp dequantizing its feature tiles into MMA fragments.
//   AUTO  GEMV for M <= 8, else WGMMA.
//
// Requirements (G4_EUSER otherwise): N % 16 == 0, K % 64 == 0, block 32 (at repack); M >= 1;
// x 16-byte aligned, y 8-byte aligned (4 for fp16), bias 2-byte aligned.
//
// Mapping from the op interface (kernels/ops.h), for the CUDA backend:
//   at load: g4_q4_weight *p = malloc; g4_q4_repack(p, w->w, w->scales, w->zp, w->out, w->in,
//            w->block); w->packed = p;   (and g4_q4_weight_free(p) at unload)
//   linear(be, y, x, w, acc), w->kind == G4_W_Q4:
//     g4_gemm_q4(y->data, x->data, w->packed, w->bias, x->rows, epi, G4_GEMM_AUTO, s)
//     (epi as in gemm_f16.cuh)
//   linear_gelu_mul with Q4 weights: g4_gemm_q4_gelu_mul(y->data, x->data, wg->packed,
//     wu->packed, x->rows, G4_GEMM_AUTO, s)
//
// Test: tests/test_cuda_gemm.c (--op q4), tests/test_q4_pack.c (layout, CPU only).
// Bench: g4cu bench --kernels --filter q4
#ifndef G4_GEMM_Q4_CUH
#define G4_GEMM_Q4_CUH

#include <stddef.h>
#include <stdint.h>

#include "kernels/gemm_f16.cuh"

#ifdef __cplusplus
extern "C" {
#endif

// A repacked Q4 weight in device memory (layout: kernels/q4_pack.h).
typedef struct {
    int n, k;        // N (outputs), K (inputs)
    uint8_t *q;      // [N/16][K/64] tiles of 512 bytes
    uint8_t *scales; // [N/16][K/64] records of 64 bytes (16 fp16 pairs)
    uint8_t *zp;     // [N/16][K/64] records of 16 bytes
    size_t bytes;    // total device bytes (= the package's q + scales + zero points)
} g4_q4_weight;

// Repacks the package tensors (host memory: q uint8 [N, K/32, 16], scales fp16 [N, K/32], zero
// points uint8 [N, K/64] or NULL for 8) into one new device allocation described by *out.
// Synchronous. Returns G4_OK, or G4_EUSER for an unsupported shape / block size.
int g4_q4_repack(g4_q4_weight *out, const uint8_t *q, const uint16_t *scales, const uint8_t *zp,
                 int N, int K, int block);
void g4_q4_weight_free(g4_q4_weight *w);

// y[M, N] (epi) x[M, K] @ W (+ bias), K = w->k, N = w->n. Asynchronous on `stream`.
int g4_gemm_q4(void *y, const void *x, const g4_q4_weight *w, const void *bias, int M,
               g4_gemm_epi epi, g4_gemm_algo algo, cudaStream_t stream);

// y fp16 [M, N] = gelu_tanh(x @ Wg) * (x @ Wu); wg and wu of the same shape.
int g4_gemm_q4_gelu_mul(void *y, const void *x, const g4_q4_weight *wg, const g4_q4_weight *wu,
                        int M, g4_gemm_algo algo, cudaStream_t stream);

// The add-norm GEMV (g4_gemv_norm, gemm_f16.cuh) with Q4 weights.
int g4_gemv_q4_add_norm(void *y, const g4_gemv_norm *a, const g4_q4_weight *w,
                        const g4_q4_weight *wu, const void *bias, int M, g4_gemm_epi epi,
                        cudaStream_t stream);
// Tests and benches only: force the Q4 GEMV's K split (a power of 2, 1..64: 8 warps of a CTA,
// then a cluster; clamped to K / 64) and its persistent grid's CTA count (so a CTA walks many
// feature-tile groups); 0 leaves a choice automatic. Not thread-safe; not for the engine.
int g4_gemm_gemv_force(int split, int max_ctas);
// Tests and benches only: force the Q4 GEMV design of M <= 8 (1 the earlier kernel, 2 the
// streaming one, 3 the third design, 4 the fourth: integer MMA, M <= 2, larger M the automatic
// choice; 0 the automatic choice; -1, the initial state, G4_GEMV's). Not thread-safe; not for
// the engine.
int g4_gemm_gemv_version(int version);
// Kernel benches only (issue 29's probe rows, bench_gemm.cu gemv_q4_probe): the next third-design
// launches of g4_gemm_q4 / g4_gemm_q4_gelu_mul (not the add-norm GEMV) run a probe form of the
// kernel whose output is meaningless: 1 the loads without the dequantize + MMA, 2 the dequantize
// + MMA without the weight loads, 3 neither (launch, wait, walk, flush, stores); 0, the initial
// state, today's kernel. Returns G4_OK or G4_EUSER.
int g4_gemm_gemv3_probe(int probe);
// Tests only: the design (1..4) of the last Q4 GEMV launched by g4_gemm_q4, g4_gemm_q4_gelu_mul
// or g4_gemv_q4_add_norm with M <= 8 (0: none yet), so a test that forces a design can check it
// ran.
int g4_gemm_gemv_last_design(void);

// w_out fp16 [K, N] = the dequantized weight, computed exactly as the kernels compute it (so it
// equals the fp32 reference (q - zp) * scale rounded once to fp16). For tests and debugging.
int g4_q4_dequant_f16(void *w_out, const g4_q4_weight *w, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
