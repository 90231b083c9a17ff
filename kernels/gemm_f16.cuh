// gemm_f16.cuh: fp16 linear layers on the GPU: y[M, N] = x[M, K] @ W[K, N] (+ bias), fp16
// inputs, fp32 accumulation, and the fused gated-MLP half y = gelu_tanh(x @ Wg) * (x @ Wu).
//
// Layouts (all row-major, contiguous, device memory):
//   x    fp16 [M, K]   activations (M = tokens: 1..8 in decode, up to thousands in prefill)
//   W    fp16 [K, N]   the package's "<name>.weight_t" layout ([in, out]), used as stored
//   bias fp16 [N]      or NULL
//   y    fp16 or fp32 [M, N], by the epilogue (g4_gemm_epi)
// Requirements checked by every entry (G4_EUSER with a one-line message otherwise, nothing is
// launched): M >= 1; N, K >= 8 and multiples of 8 (16-byte rows for cp.async / TMA / vector loads);
// x, W 16-byte aligned; y 8-byte aligned (4 for fp16); bias 2-byte aligned; M <= 8 for GEMV.
//
// Algorithms (one table; the test and the bench run each explicitly, so a wrong or slow one shows):
//   GEMV   M <= 8, decode: streams W once with 16-byte loads; a thread-block cluster of up to 8
//          blocks splits K when N is small and reduces through distributed shared memory
//          (deterministic, no workspace, graph-capturable). CUDA-core fp32 FMAs; with
//          G4_GEMV_F16=mma in the environment, the tensor-core GEMV (mma.sync fed straight from
//          the weight loads, gemm_f16.cu gemv_f16_mma_kernel; the add-norm form stays CUDA-core).
//   MMA    any M: mma.sync m16n8k16 (fp16 in, fp32 accumulate), ldmatrix, a 4-stage cp.async
//          pipeline, XOR-swizzled shared memory; 128x128 or 64x128 tiles.
//   WGMMA  any M, Hopper (sm_90a), the prefill path (gemm_wgmma.cuh): 128 x BN x 64 tiles
//          (BN 128/192/256 chosen per shape), a TMA + mbarrier ring driven by a producer
//          warpgroup, two consumer warpgroups issuing wgmma.m64nBNk16 (B read N-major straight
//          from the [K, N] layout); a persistent grid over the tiles, or for few-tile shapes a
//          thread-block cluster splitting K and reducing through distributed shared memory.
//   AUTO   GEMV for M <= 8, else what the tuned table (gemm_tuned.inc, measured on the H200 by
//          bench's prefill sweep) found fastest for the shape: WGMMA at a tile width and split,
//          or MMA; WGMMA with the modelled configuration for a shape the table lacks or another
//          GPU. G4_GEMM_TUNED=0: the model only; G4_GEMM_PREFILL=mma: MMA (fp16 and Q4 alike).
//
// Mapping from the op interface (kernels/ops.h), for the CUDA backend:
//   linear(be, y, x, w, accumulate) with w->kind == G4_W_F16, x->type == G4_F16:
//     g4_gemm_f16(y->data, x->data, w->w, w->bias, x->rows, w->out, w->in, epi, G4_GEMM_AUTO, s)
//     epi = y F16: accumulate ? G4_GEMM_Y_F16_ADD : G4_GEMM_Y_F16
//           y F32: accumulate ? G4_GEMM_Y_F32_ADD : G4_GEMM_Y_F32   (F32 + add = residual stream)
//   linear_gelu_mul(be, y, x, wg, wu) with fp16 weights, y F16, no biases:
//     g4_gemm_f16_gelu_mul(y->data, x->data, wg->w, wu->w, x->rows, wg->out, wg->in, AUTO, s)
//   Clipped linears (w->clipped) are not handled here: clamp x before and y after.
//
// Test: tests/test_cuda_gemm.c (ctest -R test_cuda_gemm; ./test_cuda_gemm --op f16 --shape N=2048)
// Bench: g4cu bench --kernels --filter gemm_f16   (kernels/bench/bench_gemm.cu)
#ifndef G4_GEMM_F16_CUH
#define G4_GEMM_F16_CUH

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    G4_GEMM_Y_F16 = 0,     // y fp16 = round(x @ W + bias)
    G4_GEMM_Y_F32 = 1,     // y fp32 = x @ W + bias
    G4_GEMM_Y_F32_ADD = 2, // y fp32 += x @ W + bias (the residual-stream add)
    G4_GEMM_Y_F16_ADD = 3, // y fp16 = round(y + (x @ W + bias))
} g4_gemm_epi;

typedef enum {
    G4_GEMM_AUTO = 0,
    G4_GEMM_GEMV = 1,   // M <= 8 only
    G4_GEMM_MMA = 2,    // mma.sync tensor cores
    G4_GEMM_WGMMA = 3,  // Hopper wgmma + TMA (fp16 and Q4 weights)
    G4_GEMM_SKINNY = 4, // mma.sync with K split over a cluster: AUTO's for 8 < M <= 64 (decode)
} g4_gemm_algo;

const char *g4_gemm_epi_name(g4_gemm_epi e);
const char *g4_gemm_algo_name(g4_gemm_algo a);

// y[M, N] (epi) x[M, K] @ w[K, N] (+ bias). Returns G4_OK, or G4_EUSER for a shape, alignment or
// algorithm the kernels do not support (message in g4_error()). Asynchronous on `stream`.
// NULL when the GEMMs take an fp16 weight [K, N], else what they take (the CUDA backend asks
// it for every linear at load, g4_gemm_f16 checks it per call).
const char *g4_gemm_f16_supported(int N, int K);
int g4_gemm_f16(void *y, const void *x, const void *w, const void *bias, int M, int N, int K,
                g4_gemm_epi epi, g4_gemm_algo algo, cudaStream_t stream);

// y fp16 [M, N] = gelu_tanh(x @ wg) * (x @ wu), wg and wu fp16 [K, N]; both products are kept
// in fp32 until the one rounding of y. Same requirements as g4_gemm_f16.
int g4_gemm_f16_gelu_mul(void *y, const void *x, const void *wg, const void *wu, int M, int N,
                         int K, g4_gemm_algo algo, cudaStream_t stream);

// The add-norm GEMVs (kernels/ops.h add_norm_linear; issue 30's consumer-side fusion): a GEMV of
// M <= 8 rows whose prologue computes its own input from the residual stream,
//   h_out = (h_in + rmsnorm(r) * w) * scale,  x = next_norm ? rmsnorm(h_out) * next_w : h_out,
// in every CTA (h_out and x_out written once, by one CTA, for the kernels after it), then
// y = x @ W, or gelu_tanh(x @ W) * (x @ Wu) when an up weight is given (y fp16), or
// gelu_tanh(fp16(x @ W)) * mul when mul (the PLE gate: mul fp16 [M, ldm] from its first column,
// y fp16). No norm kernel of its own in the decode chain.
typedef struct {
    const float *h_in;  // f32 [M, K]
    float *h_out;       // f32 [M, K], not h_in (every CTA reads h_in)
    const void *r;      // fp16 [M, K]
    const void *w;      // fp16 [K] or NULL
    const void *scale;  // fp16 scalar or NULL
    const void *next_w; // fp16 [K] or NULL
    void *x_out;        // fp16 [M, K]
    float eps;
    int next_norm;
    const void *mul; // fp16, row m at mul + m * ldm, or NULL
    int ldm;
} g4_gemv_norm;
// NULL when the add-norm GEMVs take M tokens of K inputs, else what they take.
const char *g4_gemv_add_norm_supported(int M, int K);
// fp16 weights [K, N] (wu NULL or the up weight); the Q4 entry is gemm_q4.cuh's.
int g4_gemv_f16_add_norm(void *y, const g4_gemv_norm *a, const void *w, const void *wu,
                         const void *bias, int M, int N, int K, g4_gemm_epi epi,
                         cudaStream_t stream);

// Tests and benches only: force the WGMMA GEMMs' (fp16 and Q4) tile width (128, 192, 256),
// K split over a cluster (1, 2, 4, 8; 1 = the persistent grid) and the persistent grid's CTA
// count (so one CTA walks many tiles); 0 leaves a choice automatic, (0, 0, 0) restores all.
// Launches that cannot run a forced value return G4_EUSER. Not thread-safe; not for the engine.
int g4_gemm_wgmma_force(int bn, int split, int max_ctas);
// Tests and benches only: the Q4 wgmma GEMM's producer keeps `depth` k steps of packed loads in
// flight (1: the load issued just before the stage wait; 2, the default, 3: issued 1-2 steps
// earlier, kernels/gemm_wgmma.cuh); 0 restores the environment's G4_Q4_WG_DEPTH (1, 2, 3;
// default 2). Not thread-safe; not for the engine.
int g4_gemm_wgmma_q4_depth(int depth);
// Tests and benches only: force the skinny path's (G4_GEMM_SKINNY) K split over a cluster
// (1, 2, 4, 8; a split past the k tiles leaves some CTAs an empty range); 0 restores the
// automatic one. Not thread-safe; not for the engine.
int g4_gemm_skinny_force(int split);
// The K split G4_GEMM_SKINNY runs for the shape (forced or automatic; the bench prints it).
// Whether AUTO runs an fp16 linear of M rows on the skinny path (4..64, or from
// G4_SKINNY_F16_MIN rows; not with G4_SKINNY=0): the CUDA backend then leaves the add-norm
// unfused (the GEMV's prologue form) so the linear takes it.
int g4_gemm_f16_skinny_takes(int M);
int g4_gemm_skinny_plan(int M, int N, int K, int fused);
// Tests and benches only: force the fp16 GEMV design of M <= 8 (1 the CUDA-core kernel, 2 the
// tensor-core one, gemm_f16.cu gemv_f16_mma_kernel); -1, the initial state, restores
// G4_GEMV_F16's (mma: 2, else 1). The tensor-core design still leaves a shape it does not take
// to the CUDA-core kernel. Not thread-safe; not for the engine.
int g4_gemm_gemv_f16_version(int version);
// Tests only: the design (1, 2) of the last fp16 GEMV launched by g4_gemm_f16 or
// g4_gemm_f16_gelu_mul with the GEMV or by g4_gemv_f16_add_norm (0: none yet), so a test can
// check which one ran.
int g4_gemm_gemv_f16_last_design(void);
// Benches: whether the fp16 GEMV of the shape (fused: the gate/up form) runs on the tensor-core
// design under the current design choice and the G4_GVM_* plan knobs (1), its plan then in
// plan[4] = {S warps, CS CTAs a cluster, groups, grid}; else 0.
int g4_gemm_gemv_f16_mma_plan(int M, int N, int K, int fused, int plan[4]);
// The automatic WGMMA configuration of a shape (tile width, K split; split 1 = persistent), for
// the bench's row labels. q4: Q4 weights; fused: the gate/up kernel.
void g4_gemm_wgmma_plan(int M, int N, int K, int fused, int q4, int *bn, int *split);

#ifdef __cplusplus
}
#endif

#endif
