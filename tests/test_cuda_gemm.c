// test_cuda_gemm.c: the GEMM/GEMV kernels (kernels/gemm_f16.cuh, kernels/gemm_q4.cuh) against the
// CPU reference (kernels/ref/gemm_f16.c, gemm_q4.c), one table of cases per op.
//
//   test_cuda_gemm [--op S] [--shape S] [--list] [--emulate] [--max-work N]
//     --op S     run the cases whose "op/algo" contains S (e.g. q4, f16/wgmma, glu, reject)
//     --shape S  run the cases whose "M=.. N=.. K=.." contains S (e.g. "N=262144", "M=17 ")
//     --list     print the table and exit
//     --emulate  no GPU: feed the CPU expectation (rounded as the epilogue rounds) through the
//                comparison, to check the harness itself and time the CPU side; a case that
//                differs from an earlier one only in its forced GPU configuration is the same
//                emulation and runs once
//     --max-work N  (with --emulate) leave out, each with a printed line, the cases whose CPU
//                reference takes over N multiply-adds (the sanitizer build's run: the larger
//                shapes take the same harness branches as smaller ones, at 10-100x the time)
// Without a GPU the argument-check cases still run (they launch nothing), then the test exits 77.
//
// Every case: seeded random inputs (never zeros), output poisoned with NaN (0xff bytes) and
// framed by 256-byte guards that must stay 0xa5, compared with the reference on every element
// (or, when the CPU work would be large, on 24 rows incl. the first and last, and for
// lm_head-sized weights on 512 random 16-column groups incl. the first and last; every element
// is still checked for NaN/inf), and run a second time to check the result is bit-identical
// (the kernels are deterministic: no atomics; a difference means a race).
//
// Expected values and tolerances (per element |got - exp| <= tol, and NMSE over the case):
//   fp16 weights: exp = ref_linear_f16 on the same fp16 inputs (fp32 accumulate).
//   Q4 weights:   the kernels multiply (q - zp) * scale in fp16 (one rounding) and sum in fp32,
//                 so exp = ref_linear_f16 on W16 = fp16(ref_q4_dequant_col) (the CPU dequantizer
//                 rounded once: independent of the code under test), with the fp16 tolerances;
//                 the NMSE against ref_linear_q4 itself (unrounded weights) must stay < 1e-6.
//                 The fourth GEMV design (G4_GEMV=v4, kernels/gemv_q4_int.h) never rounds a
//                 weight but quantizes x to 14-bit integers a 32-input block: exp = ref_linear_q4
//                 (unrounded), tol = TOL_ACC of sum |x w| plus its named x tolerance,
//                 gqi_tolerance_x of each block (half a step, 2^-14 of the block's max |x|, times
//                 the block's sum |w|); exact cases stay bit-exact (small integers are exact X).
//   TOL_ACC  = 2^-13 of sum_k |x_k w_k|: fp32 accumulation of the same products in another
//              order (tensor cores accumulate with truncation; ~sqrt(K) * 2^-24 in practice).
//              One missing or doubled product (~ sum / K) exceeds it for K < 8192; at any K it
//              moves the NMSE by ~1 / K, far over the budgets below.
//   TOL_OUT16 = 2^-11 |exp| + 2^-24: the final rounding of an fp16 output (half an ulp);
//   TOL_OUT32 = 2^-23 |exp| for fp32 outputs (the residual add's rounding).
//   NMSE budgets: 1e-8 for fp32 outputs, 1e-6 for fp16 outputs (rounding alone ~ 1e-7).
//   glu: the bound propagates through gelu (|gelu'| <= 1.13) and the product.
//   exact cases: small integers (x, w in {-2, -1, 1, 2}; Q4 with power-of-two scales) make every
//   product and partial sum exact in fp32: an fp32 output must match the exact sum bit for bit,
//   an fp16 output the exact sum rounded once to fp16 (the epilogue's one rounding: Q4's scale
//   1/2 makes half-integer sums, not representable in fp16 above 1024), which catches any
//   indexing error regardless of tolerances.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "base/base.h"
#include "kernels/cuda_util.h"
#include "kernels/gemm_f16.cuh"
#include "kernels/gemm_q4.cuh"
#include "kernels/gemv_q4_int.h"
#include "kernels/ref/ref.h"
#include "tests/test_util.h"

#define TOL_ACC              (1.0 / 8192.0)
#define TOL_OUT16            (1.0 / 2048.0)
#define ATOL_OUT16           (1.0 / 16777216.0)
#define TOL_OUT32            (1.0 / 8388608.0)
#define NMSE_F32             1e-8
#define NMSE_F16             1e-6
#define NMSE_Q4_VS_UNROUNDED 1e-6
#define GUARD                256
#define CHECK_ROWS           24

typedef enum { OP_F16, OP_F16_GLU, OP_Q4, OP_Q4_GLU, OP_Q4_DEQUANT } op_kind;

typedef struct {
    op_kind op;
    g4_gemm_algo algo;
    int M, N, K;
    const char *what; // "tiny", "odd", an E2B linear name
    g4_gemm_epi epi;
    int bias;
    int exact;
    int bn, split, ctas; // WGMMA: forced tile width, K split, persistent CTAs (0: auto); GEMV:
                         // forced K split and persistent CTAs (g4_gemm_gemv_force)
    int ver;             // Q4 GEMV design forced by g4_gemm_gemv_version (0: automatic)
    int depth; // WGMMA Q4: the producer's k steps of loads in flight, g4_gemm_wgmma_q4_depth (0:
               // G4_Q4_WG_DEPTH's); left out (0) by every macro but WD
    int f16v;  // fp16 GEMV design forced by g4_gemm_gemv_f16_version (2: the tensor-core one;
               // 0: G4_GEMV_F16's); left out (0) by every macro but VM / EM
} gcase;

static const char *op_name(op_kind o) {
    static const char *n[] = {"f16", "f16_glu", "q4", "q4_glu", "q4_dequant"};
    return n[o];
}

#define F16   G4_GEMM_Y_F16
#define F32   G4_GEMM_Y_F32
#define F32A  G4_GEMM_Y_F32_ADD
#define F16A  G4_GEMM_Y_F16_ADD
#define GEMV  G4_GEMM_GEMV
#define MMA   G4_GEMM_MMA
#define WGMMA G4_GEMM_WGMMA
#define AUTO  G4_GEMM_AUTO
#define SKINNY G4_GEMM_SKINNY

// The E2B linears as "N (out), K (in), name".
#define S_QS  2048, 1536, "q_proj sliding"
#define S_QF  4096, 1536, "q_proj full"
#define S_KVS 256, 1536, "k/v_proj sliding"
#define S_KVF 512, 1536, "k/v_proj full"
#define S_OS  1536, 2048, "o_proj sliding"
#define S_OF  1536, 4096, "o_proj full"
#define S_UP  6144, 1536, "gate/up_proj"
#define S_UP2 12288, 1536, "gate/up_proj wide"
#define S_DN  1536, 6144, "down_proj"
#define S_DN2 1536, 12288, "down_proj wide"
#define S_PG  256, 1536, "ple gate"
#define S_PP  1536, 256, "ple proj"
#define S_LM  262144, 1536, "lm_head"
#define S_PE  8960, 1536, "ple projection (embedding)"
// the towers' (issue 22): vision at M = 2304 patches, audio at M = 750 frames
#define S_VQ  768, 768, "vision q/k/v/o, patch embedding"
#define S_VQKV 2304, 768, "vision q/k/v together"
#define S_VUP 3072, 768, "vision gate/up"
#define S_VDN 768, 3072, "vision down"
#define S_VPJ 1536, 768, "vision projector"
#define S_AQ  1024, 1024, "audio q/k/v/post, relative_k, linear_end"
#define S_AF1 4096, 1024, "audio ffw_layer_1"
#define S_AF2 1024, 4096, "audio ffw_layer_2"
#define S_ALS 2048, 1024, "audio linear_start"
#define S_AOP 1536, 1024, "audio output_proj"
#define S_APJ 1536, 1536, "audio projector"

// C: a case; X: a small-integer exact case; R: fp16 output, no bias, on "N, K, what" (an E2B
// shape macro or explicit values); E for other epilogues.
#define C(op, algo, M, N, K, epi, bias, what)                                                      \
    { op, algo, M, N, K, what, epi, bias, 0, 0, 0, 0, 0, 0, 0 }
#define X(op, algo, M, N, K, epi, what)                                                            \
    { op, algo, M, N, K, what, epi, 0, 1, 0, 0, 0, 0, 0, 0 }
#define R(op, algo, M, ...)                                                                        \
    { op, algo, M, __VA_ARGS__, F16, 0, 0, 0, 0, 0, 0, 0, 0 }
// E: like R with another epilogue and bias: E(op, algo, M, S_xx, epi, bias).
#define E(op, algo, M, ...)                                                                        \
    { op, algo, M, __VA_ARGS__, 0, 0, 0, 0, 0, 0, 0 }
// W: a WGMMA case with a forced configuration (tile width bn, K split, CTAs of the persistent
// grid; 0 = automatic): exact small integers unless epi/bias say otherwise.
#define W(op, M, N, K, epi, bias, exact, bn, split, ctas, what)                                    \
    { op, WGMMA, M, N, K, what, epi, bias, exact, bn, split, ctas, 0, 0, 0 }

// WD: W with the Q4 producer's loads-in-flight depth forced (2, 3: kernels/gemm_wgmma.cuh).
#define WD(op, M, N, K, epi, bias, exact, bn, split, ctas, depth, what)                            \
    { op, WGMMA, M, N, K, what, epi, bias, exact, bn, split, ctas, 0, depth, 0 }

// WE: an E2B shape at the automatic wgmma configuration with the depth forced:
// WE(op, M, epi, bias, depth, S_xx).
#define WE(op, M, epi, bias, depth, ...)                                                           \
    { op, WGMMA, M, __VA_ARGS__, epi, bias, 0, 0, 0, 0, 0, depth, 0 }

// V: a Q4 GEMV case with a forced K split (1..64) and persistent CTA count (0 = automatic).
#define V(op, M, N, K, epi, bias, exact, split, ctas, what)                                        \
    { op, GEMV, M, N, K, what, epi, bias, exact, 0, split, ctas, 0, 0, 0 }
// V3: V with the Q4 GEMV's third design forced (g4_gemm_gemv_version(3))
#define V3(op, M, N, K, epi, bias, exact, split, ctas, what)                                       \
    { op, GEMV, M, N, K, what, epi, bias, exact, 0, split, ctas, 3, 0, 0 }
// V4: V with the fourth design forced (g4_gemm_gemv_version(4); M <= 2); E4: an E2B shape there.
#define V4(op, M, N, K, epi, bias, exact, split, ctas, what)                                       \
    { op, GEMV, M, N, K, what, epi, bias, exact, 0, split, ctas, 4, 0, 0 }
#define E4(op, M, ...)                                                                             \
    { op, GEMV, M, __VA_ARGS__, 0, 0, 0, 0, 4, 0, 0 }
// SK: a skinny-path case (G4_GEMM_SKINNY) with a forced K split over the cluster (1, 2, 4, 8;
// 0 = automatic, g4_gemm_skinny_force).
#define SK(op, M, N, K, epi, bias, exact, split, what)                                             \
    { op, SKINNY, M, N, K, what, epi, bias, exact, 0, split, 0, 0, 0, 0 }
// E3: an E2B shape with the third design: E3(op, M, S_xx, epi, bias).
#define E3(op, M, ...)                                                                             \
    { op, GEMV, M, __VA_ARGS__, 0, 0, 0, 0, 3, 0, 0 }

// VM: an fp16 GEMV case on the tensor-core design (g4_gemm_gemv_f16_version(2)), checked to have
// run it: VM(op, M, N, K, epi, bias, exact, what). EM: an E2B shape there: EM(op, M, S_xx).
#define VM(op, M, N, K, epi, bias, exact, what)                                                    \
    { op, GEMV, M, N, K, what, epi, bias, exact, 0, 0, 0, 0, 0, 2 }
#define EM(op, M, ...)                                                                             \
    { op, GEMV, M, __VA_ARGS__, F16, 0, 0, 0, 0, 0, 0, 0, 2 }

// clang-format off
static const gcase cases[] = {
    // --- fp16 GEMV (decode) ---
    C(OP_F16, GEMV, 1, 8, 8, F16, 0, "tiny"),
    C(OP_F16, GEMV, 2, 16, 16, F32, 1, "tiny"),
    C(OP_F16, GEMV, 1, 24, 40, F16, 1, "odd"),
    C(OP_F16, GEMV, 3, 40, 1000, F32A, 1, "odd"),
    C(OP_F16, GEMV, 8, 1000, 24, F16A, 0, "odd"),
    C(OP_F16, GEMV, 5, 1000, 1000, F32, 0, "odd"),
    C(OP_F16, GEMV, 7, 1000, 3000, F16, 1, "odd (cluster split-K)"),
    X(OP_F16, GEMV, 5, 40, 256, F32, "exact"),
    X(OP_F16, GEMV, 8, 1000, 248, F16, "exact"),
    R(OP_F16, GEMV, 1, S_QS), R(OP_F16, GEMV, 1, S_QF), R(OP_F16, GEMV, 1, S_KVS),
    R(OP_F16, GEMV, 1, S_KVF), R(OP_F16, GEMV, 1, S_OS), R(OP_F16, GEMV, 1, S_OF),
    R(OP_F16, GEMV, 1, S_UP), R(OP_F16, GEMV, 1, S_UP2), R(OP_F16, GEMV, 1, S_DN),
    R(OP_F16, GEMV, 1, S_DN2), R(OP_F16, GEMV, 1, S_PG), R(OP_F16, GEMV, 1, S_PP),
    R(OP_F16, GEMV, 1, S_LM), R(OP_F16, GEMV, 1, S_PE),
    R(OP_F16, GEMV, 8, S_QS), R(OP_F16, GEMV, 8, S_DN2), R(OP_F16, GEMV, 3, S_UP),
    R(OP_F16, GEMV, 2, S_LM), R(OP_F16, GEMV, 4, S_KVS),
    E(OP_F16, GEMV, 1, S_OS, F32A, 1), E(OP_F16, AUTO, 1, S_DN, F32A, 0),
    // the tensor-core GEMV (G4_GEMV_F16=mma): M = 1..8 (B columns >= M read token 0), N = 8..40
    // and not a multiple of 64 (a lane's 8 columns past N: zero loads, no store), K % 16 == 8
    // (the last step's rows 8..15 zero-filled) and not a multiple of 64 / 256, every epilogue
    // and bias, splits inside a CTA and over clusters of 2..8 (kernels/gemv_f16_mma.h's plan),
    // exact small integers, the E2B shapes incl. the lm_head's persistent grid; fused gate/up
    VM(OP_F16, 1, 8, 8, F16, 0, 0, "mma tiny, half a step"),
    VM(OP_F16, 2, 16, 16, F32, 1, 0, "mma tiny"),
    VM(OP_F16, 1, 24, 40, F16, 1, 0, "mma odd, K % 16 == 8"),
    VM(OP_F16, 3, 40, 1000, F32A, 1, 0, "mma odd, cluster of 4"),
    VM(OP_F16, 8, 1000, 24, F16A, 0, 0, "mma odd, 2 warps a strip"),
    VM(OP_F16, 5, 1000, 1000, F32, 0, 0, "mma odd"),
    VM(OP_F16, 7, 1000, 3000, F16, 1, 0, "mma odd, cluster of 8"),
    VM(OP_F16, 4, 8, 1528, F32, 1, 0, "mma N = 8, K % 16 == 8, cluster of 8"),
    VM(OP_F16, 6, 264, 200, F16A, 1, 0, "mma N = 33 x 8"),
    VM(OP_F16, 8, 1000, 248, F16, 0, 1, "mma exact"),
    VM(OP_F16, 5, 40, 256, F32, 0, 1, "mma exact"),
    VM(OP_F16, 1, 1000, 3000, F32, 0, 1, "mma exact, one token"),
    VM(OP_F16, 8, 1000, 1032, F32, 0, 1, "mma exact, 8 tokens, K % 16 == 8"),
    EM(OP_F16, 1, S_QS), EM(OP_F16, 1, S_QF), EM(OP_F16, 1, S_KVS), EM(OP_F16, 1, S_KVF),
    EM(OP_F16, 1, S_OS), EM(OP_F16, 1, S_OF), EM(OP_F16, 1, S_UP), EM(OP_F16, 1, S_UP2),
    EM(OP_F16, 1, S_DN), EM(OP_F16, 1, S_DN2), EM(OP_F16, 1, S_PG), EM(OP_F16, 1, S_PP),
    EM(OP_F16, 1, S_LM), EM(OP_F16, 1, S_PE),
    EM(OP_F16, 8, S_QS), EM(OP_F16, 8, S_KVS), EM(OP_F16, 8, S_OS), EM(OP_F16, 8, S_UP),
    EM(OP_F16, 8, S_DN), EM(OP_F16, 8, S_DN2), EM(OP_F16, 8, S_PP), EM(OP_F16, 8, S_LM),
    EM(OP_F16, 3, S_UP2), EM(OP_F16, 2, S_PE),
    VM(OP_F16, 1, 1536, 2048, F32A, 1, 0, "mma o_proj, residual add + bias"),
    VM(OP_F16, 8, 1536, 6144, F16A, 0, 0, "mma down_proj, fp16 add"),
    VM(OP_F16_GLU, 1, 24, 40, F16, 0, 0, "mma odd"),
    VM(OP_F16_GLU, 6, 1000, 1000, F16, 0, 0, "mma odd"),
    VM(OP_F16_GLU, 8, 40, 1032, F16, 0, 0, "mma odd, cluster split-K"),
    EM(OP_F16_GLU, 1, S_UP), EM(OP_F16_GLU, 8, S_UP), EM(OP_F16_GLU, 1, S_UP2),
    EM(OP_F16_GLU, 8, S_UP2),

    // --- fp16 GEMM: mma.sync and wgmma, same cases ---
#define GEMM_F16_CASES(A)                                                                         \
    C(OP_F16, A, 2, 16, 16, F16, 0, "tiny"), C(OP_F16, A, 1, 40, 40, F32, 1, "odd"),            \
        C(OP_F16, A, 17, 40, 24, F16, 1, "odd"), C(OP_F16, A, 33, 1000, 40, F32A, 1, "odd"),    \
        C(OP_F16, A, 1000, 24, 1000, F16A, 1, "odd"), C(OP_F16, A, 3, 1000, 1000, F16, 0, "odd"), \
        C(OP_F16, A, 129, 136, 72, F32, 0, "odd (tile edges)"),                                 \
        X(OP_F16, A, 33, 136, 256, F32, "exact"), X(OP_F16, A, 130, 264, 256, F16, "exact"),     \
        X(OP_F16, A, 300, 520, 1024, F32, "exact (many k tiles)"),                                \
        R(OP_F16, A, 128, S_QS), R(OP_F16, A, 128, S_KVS), R(OP_F16, A, 128, S_OF),              \
        R(OP_F16, A, 128, S_UP), R(OP_F16, A, 128, S_DN2), R(OP_F16, A, 128, S_PP),              \
        R(OP_F16, A, 512, S_DN), R(OP_F16, A, 4096, S_QS), R(OP_F16, A, 2048, S_UP2),            \
        R(OP_F16, A, 1000, S_PE), E(OP_F16, A, 512, S_OS, F32A, 1),                            \
        E(OP_F16, A, 777, S_PG, F32, 1)
    GEMM_F16_CASES(MMA),
    GEMM_F16_CASES(WGMMA),
    R(OP_F16, AUTO, 64, S_QS),

    // --- fp16 fused gate/up (y = gelu(x Wg) * (x Wu)) ---
    R(OP_F16_GLU, GEMV, 1, 24, 40, "odd"), R(OP_F16_GLU, GEMV, 6, 1000, 1000, "odd"),
    R(OP_F16_GLU, GEMV, 1, S_UP), R(OP_F16_GLU, GEMV, 8, S_UP2),
    R(OP_F16_GLU, MMA, 17, 40, 24, "odd"), R(OP_F16_GLU, MMA, 200, 1000, 72, "odd"),
    R(OP_F16_GLU, MMA, 128, S_UP), R(OP_F16_GLU, MMA, 1000, S_UP2),
    R(OP_F16_GLU, WGMMA, 17, 40, 24, "odd"), R(OP_F16_GLU, WGMMA, 200, 1000, 72, "odd"),
    R(OP_F16_GLU, WGMMA, 128, S_UP), R(OP_F16_GLU, WGMMA, 1000, S_UP2),
    R(OP_F16_GLU, AUTO, 3, S_UP),

    // --- Q4: repack + the kernels' dequantization, bit-exact against the CPU dequantizer ---
    R(OP_Q4_DEQUANT, AUTO, 0, 16, 64, "tiny"), R(OP_Q4_DEQUANT, AUTO, 0, 48, 192, "odd"),
    R(OP_Q4_DEQUANT, AUTO, 0, 1008, 960, "odd"), R(OP_Q4_DEQUANT, AUTO, 0, S_QS),
    R(OP_Q4_DEQUANT, AUTO, 0, S_DN2), R(OP_Q4_DEQUANT, AUTO, 0, S_PE),

    // --- Q4 GEMV ---
    C(OP_Q4, GEMV, 1, 16, 64, F16, 0, "tiny"), C(OP_Q4, GEMV, 3, 48, 192, F32, 1, "odd"),
    C(OP_Q4, GEMV, 8, 1008, 960, F16A, 1, "odd"), C(OP_Q4, GEMV, 2, 48, 64, F32A, 0, "odd"),
    C(OP_Q4, GEMV, 7, 32, 3008, F16, 1, "odd (cluster split-K)"),
    X(OP_Q4, GEMV, 5, 48, 256, F32, "exact"), X(OP_Q4, GEMV, 8, 1008, 960, F32, "exact"),
    R(OP_Q4, GEMV, 1, S_QS), R(OP_Q4, GEMV, 1, S_QF), R(OP_Q4, GEMV, 1, S_KVS),
    R(OP_Q4, GEMV, 1, S_KVF), R(OP_Q4, GEMV, 1, S_OS), R(OP_Q4, GEMV, 1, S_OF),
    R(OP_Q4, GEMV, 1, S_UP), R(OP_Q4, GEMV, 1, S_UP2), R(OP_Q4, GEMV, 1, S_DN),
    R(OP_Q4, GEMV, 1, S_DN2), R(OP_Q4, GEMV, 1, S_PG), R(OP_Q4, GEMV, 1, S_PP),
    R(OP_Q4, GEMV, 1, S_LM), R(OP_Q4, GEMV, 1, S_PE),
    R(OP_Q4, GEMV, 8, S_QS), R(OP_Q4, GEMV, 8, S_DN2), R(OP_Q4, GEMV, 5, S_UP),
    E(OP_Q4, GEMV, 1, S_OS, F32A, 1),
    E(OP_Q4, AUTO, 1, S_DN, F32A, 0),
    // the streaming GEMV's paths at forced plans: one warp per feature tile's whole K walking
    // many groups (1-3 CTAs: the register ring wraps across feature tiles and groups), splits
    // inside a CTA (2, 4, 8: shared-memory reduction, double-buffered across groups), over a
    // cluster (16, 32, 64), uneven k ranges (K / 64 not a multiple of the split), M = 1..8
    V(OP_Q4, 1, 1008, 960, F32, 0, 1, 1, 1, "exact, 1 CTA walks 8 groups"),
    V(OP_Q4, 8, 1008, 960, F32, 0, 1, 1, 3, "exact, 3 CTAs"),
    V(OP_Q4, 3, 1008, 960, F16A, 1, 0, 2, 2, "odd, split 2, 2 CTAs, residual add"),
    V(OP_Q4, 5, 1008, 960, F32, 0, 1, 4, 3, "exact, split 4 (15 k tiles), 3 CTAs"),
    V(OP_Q4, 2, 1008, 960, F32A, 1, 0, 8, 5, "odd, split 8, 5 CTAs"),
    V(OP_Q4, 1, 48, 3008, F32, 0, 1, 16, 0, "exact, split 16 over a cluster of 2"),
    V(OP_Q4, 7, 32, 3008, F16, 1, 0, 32, 0, "odd, split 32 (47 k tiles)"),
    V(OP_Q4, 1, 16, 4096, F32, 0, 1, 64, 0, "exact, split 64"),
    V(OP_Q4, 4, 48, 192, F32, 0, 1, 64, 0, "exact, split 64 clamped to 2 (3 k tiles)"),
    V(OP_Q4, 1, 16, 64, F16, 0, 0, 8, 0, "tiny, split 8 clamped to 1"),
    V(OP_Q4_GLU, 1, 1008, 960, F16, 0, 0, 1, 2, "1 x 2 CTAs walk the groups"),
    V(OP_Q4_GLU, 8, 1008, 960, F16, 0, 0, 4, 3, "split 4, 3 CTAs"),
    V(OP_Q4_GLU, 2, 48, 3008, F16, 0, 0, 16, 0, "split 16 over a cluster"),
    V(OP_Q4, 1, 8960, 1536, F32, 0, 0, 2, 0, "ple_emb, split 2"),
    V(OP_Q4, 8, 1536, 12288, F16, 0, 0, 32, 0, "down_proj wide, split 32"),
    // the third design (G4_GEMV=v3): plain weights two feature tiles a warp, so odd tile counts
    // (N 16, 48, 1008) leave a unit's second tile past the edge; the last group's missing
    // units; tokens M = 1..8 (B columns >= M read token 0); K not a multiple of 256; the
    // streaming kernel's forced plans (splits in a CTA, over a cluster, few CTAs walking groups)
    V3(OP_Q4, 1, 16, 64, F16, 0, 0, 0, 0, "v3 tiny, 1 tile"),
    V3(OP_Q4, 2, 32, 64, F32, 1, 0, 0, 0, "v3 tiny, 2 tiles"),
    V3(OP_Q4, 3, 48, 192, F32, 1, 0, 0, 0, "v3 odd, 3 tiles"),
    V3(OP_Q4, 4, 16, 960, F16A, 1, 0, 0, 0, "v3 odd, 15 k tiles"),
    V3(OP_Q4, 6, 48, 3008, F16, 1, 0, 0, 0, "v3 odd, 47 k tiles (cluster split-K)"),
    V3(OP_Q4, 7, 32, 3008, F32A, 0, 0, 0, 0, "v3 odd"),
    V3(OP_Q4, 5, 48, 256, F32, 0, 1, 0, 0, "v3 exact"),
    V3(OP_Q4, 8, 1008, 960, F32, 0, 1, 0, 0, "v3 exact, 63 tiles"),
    V3(OP_Q4, 1, 1008, 960, F32, 0, 1, 1, 1, "v3 exact, 1 CTA walks 4 groups"),
    V3(OP_Q4, 8, 1008, 960, F32, 0, 1, 1, 3, "v3 exact, 3 CTAs"),
    V3(OP_Q4, 3, 1008, 960, F16A, 1, 0, 2, 2, "v3 odd, split 2, 2 CTAs, residual add"),
    V3(OP_Q4, 5, 1008, 960, F32, 0, 1, 4, 3, "v3 exact, split 4 (15 k tiles), 3 CTAs"),
    V3(OP_Q4, 2, 1008, 960, F32A, 1, 0, 8, 1, "v3 odd, split 8, 1 CTA"),
    V3(OP_Q4, 1, 48, 3008, F32, 0, 1, 16, 0, "v3 exact, split 16 over a cluster of 2"),
    V3(OP_Q4, 1, 16, 4096, F32, 0, 1, 64, 0, "v3 exact, split 64"),
    V3(OP_Q4, 4, 48, 192, F32, 0, 1, 64, 0, "v3 exact, split 64 clamped to 2 (3 k tiles)"),
    V3(OP_Q4_GLU, 1, 16, 64, F16, 0, 0, 0, 0, "v3 tiny"),
    V3(OP_Q4_GLU, 3, 48, 960, F16, 0, 0, 0, 0, "v3 odd"),
    V3(OP_Q4_GLU, 1, 1008, 960, F16, 0, 0, 1, 2, "v3 1 x 2 CTAs walk the groups"),
    V3(OP_Q4_GLU, 8, 1008, 960, F16, 0, 0, 4, 3, "v3 split 4, 3 CTAs"),
    V3(OP_Q4_GLU, 2, 48, 3008, F16, 0, 0, 16, 0, "v3 split 16 over a cluster"),
    E3(OP_Q4, 1, S_LM, F16, 0), E3(OP_Q4, 8, S_LM, F16, 0), E3(OP_Q4, 1, S_QS, F16, 0),
    E3(OP_Q4, 1, S_KVS, F16, 0), E3(OP_Q4, 1, S_OF, F16, 0), E3(OP_Q4, 1, S_UP, F16, 0),
    E3(OP_Q4, 8, S_DN2, F16, 0), E3(OP_Q4, 1, S_PP, F32A, 1), E3(OP_Q4, 3, S_PE, F16, 0),
    E3(OP_Q4_GLU, 1, S_UP, F16, 0), E3(OP_Q4_GLU, 8, S_UP2, F16, 0),
    // the fourth design (G4_GEMV=v4: integer MMA, x staged as 14-bit integers a CTA): M = 1, 2
    // (B columns of token 1 zero at M = 1), odd tile counts, K not a multiple of 256, the
    // streaming plans (splits in a CTA, over a cluster: each CTA stages its k range only; a few
    // CTAs walking groups), every epilogue, exact small integers; the E2B shapes
    V4(OP_Q4, 1, 16, 64, F16, 0, 0, 0, 0, "v4 tiny, 1 tile"),
    V4(OP_Q4, 2, 32, 64, F32, 1, 0, 0, 0, "v4 tiny, 2 tiles"),
    V4(OP_Q4, 1, 48, 192, F32, 1, 1, 0, 0, "v4 exact, 3 tiles"),
    V4(OP_Q4, 2, 16, 960, F16A, 1, 0, 0, 0, "v4 odd, 15 k tiles"),
    V4(OP_Q4, 2, 48, 3008, F16, 1, 0, 0, 0, "v4 odd, 47 k tiles (cluster split-K)"),
    V4(OP_Q4, 1, 32, 3008, F32A, 0, 0, 0, 0, "v4 odd"),
    V4(OP_Q4, 2, 48, 256, F32, 0, 1, 0, 0, "v4 exact"),
    V4(OP_Q4, 2, 1008, 960, F32, 0, 1, 0, 0, "v4 exact, 63 tiles"),
    V4(OP_Q4, 1, 1008, 960, F32, 0, 1, 1, 1, "v4 exact, 1 CTA walks 4 groups"),
    V4(OP_Q4, 2, 1008, 960, F16A, 1, 0, 2, 2, "v4 odd, split 2, 2 CTAs, residual add"),
    V4(OP_Q4, 1, 1008, 960, F32, 0, 1, 4, 3, "v4 exact, split 4 (15 k tiles), 3 CTAs"),
    V4(OP_Q4, 2, 1008, 960, F32A, 1, 0, 8, 1, "v4 odd, split 8, 1 CTA"),
    V4(OP_Q4, 1, 48, 3008, F32, 0, 1, 16, 0, "v4 exact, split 16 over a cluster of 2"),
    V4(OP_Q4, 2, 16, 4096, F32, 0, 1, 64, 0, "v4 exact, split 64"),
    V4(OP_Q4, 1, 48, 192, F32, 0, 1, 64, 0, "v4 exact, split 64 clamped to 2 (3 k tiles)"),
    V4(OP_Q4_GLU, 1, 16, 64, F16, 0, 0, 0, 0, "v4 tiny"),
    V4(OP_Q4_GLU, 2, 48, 960, F16, 0, 0, 0, 0, "v4 odd"),
    V4(OP_Q4_GLU, 1, 1008, 960, F16, 0, 0, 1, 2, "v4 1 x 2 CTAs walk the groups"),
    V4(OP_Q4_GLU, 2, 1008, 960, F16, 0, 0, 4, 3, "v4 split 4, 3 CTAs"),
    V4(OP_Q4_GLU, 2, 48, 3008, F16, 0, 0, 16, 0, "v4 split 16 over a cluster"),
    E4(OP_Q4, 1, S_LM, F16, 0), E4(OP_Q4, 2, S_LM, F16, 0), E4(OP_Q4, 1, S_QS, F16, 0),
    E4(OP_Q4, 1, S_KVS, F16, 0), E4(OP_Q4, 1, S_OF, F16, 0), E4(OP_Q4, 1, S_UP, F16, 0),
    E4(OP_Q4, 1, S_DN, F16, 0), E4(OP_Q4, 2, S_DN2, F16, 0), E4(OP_Q4, 1, S_PP, F32A, 1),
    E4(OP_Q4, 1, S_PG, F16, 0), E4(OP_Q4, 1, S_PE, F16, 0), E4(OP_Q4_GLU, 1, S_UP, F16, 0),
    E4(OP_Q4_GLU, 2, S_UP2, F16, 0),

    // --- Q4 GEMM (prefill): mma.sync and wgmma, same cases ---
#define GEMM_Q4_CASES(A)                                                                          \
    C(OP_Q4, A, 9, 16, 64, F16, 0, "tiny"), C(OP_Q4, A, 1, 48, 64, F32, 1, "odd"),              \
        C(OP_Q4, A, 17, 48, 192, F16, 1, "odd"), C(OP_Q4, A, 33, 1008, 960, F32A, 1, "odd"),    \
        C(OP_Q4, A, 1000, 16, 64, F16A, 1, "odd"), C(OP_Q4, A, 65, 144, 128, F32, 0, "odd"),    \
        X(OP_Q4, A, 70, 80, 256, F32, "exact"), X(OP_Q4, A, 130, 272, 1024, F32, "exact"),       \
        R(OP_Q4, A, 128, S_QS), R(OP_Q4, A, 128, S_KVS), R(OP_Q4, A, 128, S_OF),                 \
        R(OP_Q4, A, 128, S_UP), R(OP_Q4, A, 128, S_DN2), R(OP_Q4, A, 128, S_PP),                 \
        R(OP_Q4, A, 1000, S_UP), R(OP_Q4, A, 4096, S_QS), E(OP_Q4, A, 512, S_OS, F32A, 1)
    GEMM_Q4_CASES(MMA),
    GEMM_Q4_CASES(WGMMA),
    R(OP_Q4, WGMMA, 2048, S_DN), R(OP_Q4, WGMMA, 2048, S_UP2), R(OP_Q4, WGMMA, 2048, S_KVF),
    R(OP_Q4, AUTO, 64, S_DN),

    // --- Q4 fused gate/up ---
    R(OP_Q4_GLU, GEMV, 3, 48, 192, "odd"), R(OP_Q4_GLU, GEMV, 1, S_UP),
    R(OP_Q4_GLU, GEMV, 8, S_UP), R(OP_Q4_GLU, GEMV, 1, S_UP2),
    R(OP_Q4_GLU, MMA, 17, 48, 192, "odd"), R(OP_Q4_GLU, MMA, 256, S_UP),
    R(OP_Q4_GLU, MMA, 100, S_UP2), R(OP_Q4_GLU, AUTO, 2, S_UP),
    R(OP_Q4_GLU, WGMMA, 17, 48, 192, "odd"), R(OP_Q4_GLU, WGMMA, 256, S_UP),
    R(OP_Q4_GLU, WGMMA, 100, S_UP2), R(OP_Q4_GLU, WGMMA, 2048, S_UP), R(OP_Q4_GLU, AUTO, 300, S_UP),

    // --- the skinny path (batched decode, 8 < M <= 64: mma.sync, K split over a cluster, the
    // partials reduced through distributed shared memory): M = 9..64 across both token tiles
    // (32 rows for M <= 32, else 64) and their edges, every epilogue, each split incl. splits
    // past the k tiles (ranks with an empty K range), uneven ranges (K / 64 not a multiple of
    // the split), K not a multiple of 256 (fp16: not of 64, the zero-filled tail), partial
    // feature groups at the N edge; then the E2B shapes at the automatic split and AUTO ---
    SK(OP_Q4, 9, 16, 64, F16, 0, 0, 0, "tiny"),
    SK(OP_Q4, 15, 48, 192, F32, 1, 0, 0, "odd"),
    SK(OP_Q4, 16, 32, 320, F16A, 1, 0, 2, "odd, split 2 (5 k tiles: 2 + 3)"),
    SK(OP_Q4, 31, 48, 320, F32A, 1, 0, 4, "odd, split 4"),
    SK(OP_Q4, 32, 16, 192, F16, 1, 0, 8, "odd, split 8 over 3 k tiles"),
    SK(OP_Q4, 33, 48, 320, F32, 0, 0, 2, "odd, 64-row tile"),
    SK(OP_Q4, 63, 144, 192, F16A, 1, 0, 4, "odd, 2 feature groups, the second partial"),
    SK(OP_Q4, 64, 48, 256, F32, 0, 1, 8, "exact, split 8"),
    SK(OP_Q4, 17, 272, 1024, F32, 0, 1, 0, "exact, automatic split"),
    SK(OP_Q4, 40, 1008, 960, F16, 1, 1, 2, "exact, fp16 out, split 2"),
    SK(OP_Q4, 24, 48, 320, F32A, 0, 1, 4, "exact, residual add, split 4"),
    SK(OP_Q4_GLU, 9, 16, 64, F16, 0, 0, 0, "tiny"),
    SK(OP_Q4_GLU, 31, 48, 320, F16, 0, 0, 4, "odd, split 4"),
    SK(OP_Q4_GLU, 33, 80, 192, F16, 0, 0, 2, "odd, 2 feature groups, the second partial"),
    SK(OP_Q4_GLU, 64, 1008, 960, F16, 0, 0, 8, "odd, split 8"),
    SK(OP_F16, 9, 16, 64, F16, 0, 0, 0, "tiny"),
    SK(OP_F16, 15, 40, 200, F32, 1, 0, 0, "odd"),
    SK(OP_F16, 16, 24, 320, F16A, 1, 0, 2, "odd, split 2"),
    SK(OP_F16, 31, 136, 264, F32A, 1, 0, 4, "odd, split 4 (5 k tiles, K tail)"),
    SK(OP_F16, 32, 40, 72, F16, 1, 0, 8, "odd, split 8 over 2 k tiles"),
    SK(OP_F16, 33, 264, 320, F32, 0, 0, 2, "odd, 64-row tile"),
    SK(OP_F16, 63, 40, 1000, F16A, 0, 0, 4, "odd"),
    SK(OP_F16, 64, 136, 256, F32, 0, 1, 8, "exact, split 8"),
    SK(OP_F16, 17, 520, 1024, F32, 0, 1, 0, "exact, automatic split"),
    SK(OP_F16, 40, 264, 256, F16, 1, 1, 2, "exact, fp16 out, split 2"),
    SK(OP_F16_GLU, 9, 16, 64, F16, 0, 0, 0, "tiny"),
    SK(OP_F16_GLU, 31, 40, 320, F16, 0, 0, 4, "odd, split 4"),
    SK(OP_F16_GLU, 33, 200, 200, F16, 0, 0, 2, "odd, 64-row tile, K tail"),
    SK(OP_F16_GLU, 64, 1000, 1000, F16, 0, 0, 8, "odd, split 8"),
    // below 9 rows (the bench's M = 8 rows beside the GEMV: the path forced there)
    SK(OP_F16, 1, 40, 200, F32, 1, 0, 0, "one row"),
    SK(OP_F16, 5, 136, 264, F16A, 1, 0, 2, "odd, split 2"),
    SK(OP_F16, 8, 264, 320, F16, 0, 1, 4, "exact, split 4"),
    SK(OP_Q4, 2, 48, 320, F32, 1, 0, 2, "odd, split 2"),
    SK(OP_Q4, 8, 272, 1024, F16, 0, 1, 0, "exact, automatic split"),
    SK(OP_F16_GLU, 8, 40, 320, F16, 0, 0, 4, "odd, split 4"),
    R(OP_Q4, SKINNY, 16, S_QS), R(OP_Q4, SKINNY, 32, S_OS), R(OP_Q4, SKINNY, 32, S_KVS),
    R(OP_Q4, SKINNY, 16, S_DN), R(OP_Q4, SKINNY, 64, S_DN2), R(OP_Q4, SKINNY, 32, S_PG),
    E(OP_Q4, SKINNY, 32, S_PP, F32A, 1), R(OP_Q4, SKINNY, 48, S_UP2),
    R(OP_Q4_GLU, SKINNY, 16, S_UP), R(OP_Q4_GLU, SKINNY, 32, S_UP2), R(OP_Q4_GLU, SKINNY, 64, S_UP),
    R(OP_Q4, AUTO, 32, S_QS), R(OP_Q4_GLU, AUTO, 32, S_UP),
    R(OP_F16, SKINNY, 16, S_QS), R(OP_F16, SKINNY, 32, S_OS), R(OP_F16, SKINNY, 32, S_KVS),
    R(OP_F16, SKINNY, 16, S_DN), R(OP_F16, SKINNY, 64, S_DN2), R(OP_F16, SKINNY, 32, S_PG),
    E(OP_F16, SKINNY, 32, S_PP, F32A, 1), R(OP_F16_GLU, SKINNY, 32, S_UP),
    R(OP_F16_GLU, SKINNY, 16, S_UP2), R(OP_F16, AUTO, 32, S_QS), R(OP_F16_GLU, AUTO, 64, S_UP),

    // --- wgmma with forced configurations (g4_gemm_wgmma_force): every tile width, every K split
    // over a cluster, persistent grids of 1-3 CTAs that walk many tiles (the ring's phases wrap
    // across tiles), partial tiles at both edges; fp16 and Q4, plain and fused ---
#define WG_FORCED(op, bn)                                                                         \
    W(op, 300, 528, 1024, F32, 0, 1, bn, 1, 0, "exact, 3 x 3-5 tiles"),                          \
        W(op, 300, 528, 1024, F32, 0, 1, bn, 2, 0, "exact, split 2"),                            \
        W(op, 300, 528, 1024, F32, 0, 1, bn, 4, 0, "exact, split 4"),                            \
        W(op, 130, 272, 1024, F16, 0, 1, bn, 8, 0, "exact, split 8"),                            \
        W(op, 1000, 1008, 256, F32, 0, 1, bn, 1, 1, "exact, 1 CTA for all tiles"),               \
        W(op, 1000, 1008, 256, F32, 0, 1, bn, 1, 3, "exact, 3 CTAs"),                            \
        W(op, 129, 272, 192, F32A, 1, 0, bn, 1, 2, "odd, residual add + bias"),                  \
        W(op, 129, 272, 192, F16A, 1, 0, bn, 2, 0, "odd, fp16 add + bias, split 2"),             \
        W(op, 777, 1536, 6144, F32, 1, 0, bn, 4, 0, "down_proj, split 4")
    WG_FORCED(OP_F16, 128), WG_FORCED(OP_F16, 192), WG_FORCED(OP_F16, 256),
    WG_FORCED(OP_Q4, 128), WG_FORCED(OP_Q4, 192), WG_FORCED(OP_Q4, 256),
#define WG_FORCED_GLU(op, bn)                                                                     \
    W(op, 300, 528, 1024, F16, 0, 0, bn, 1, 0, "3 x 5-9 tiles"),                                 \
        W(op, 300, 528, 1024, F16, 0, 0, bn, 4, 0, "split 4"),                                   \
        W(op, 130, 272, 1024, F16, 0, 0, bn, 8, 0, "split 8"),                                   \
        W(op, 1000, 1008, 256, F16, 0, 0, bn, 1, 3, "3 CTAs")
    WG_FORCED_GLU(OP_F16_GLU, 128), WG_FORCED_GLU(OP_F16_GLU, 256),
    WG_FORCED_GLU(OP_Q4_GLU, 128), WG_FORCED_GLU(OP_Q4_GLU, 192), WG_FORCED_GLU(OP_Q4_GLU, 256),
    // the automatic choices at the prefill shapes that pick each path (bench/NOTES.md)
    R(OP_F16, WGMMA, 2048, S_DN), R(OP_F16, WGMMA, 2048, S_KVS), R(OP_F16, WGMMA, 128, S_DN2),
    R(OP_F16, WGMMA, 2048, S_QS), R(OP_F16_GLU, WGMMA, 2048, S_UP2), R(OP_F16_GLU, WGMMA, 128, S_UP),

    // --- the towers' linears on the wgmma GEMM (one 768x768 image: 2,304 patches, 256 pooled
    // rows; 30 s of audio: 750 frames), at their automatic configurations, and AUTO reaching it ---
    R(OP_F16, WGMMA, 2304, S_VQ), R(OP_F16, WGMMA, 2304, S_VQKV), R(OP_F16, WGMMA, 2304, S_VDN),
    R(OP_F16_GLU, WGMMA, 2304, S_VUP), R(OP_F16, WGMMA, 256, S_VPJ), R(OP_F16, AUTO, 2304, S_VDN),
    R(OP_F16, WGMMA, 750, S_AQ), R(OP_F16, WGMMA, 750, S_AF1), R(OP_F16, WGMMA, 750, S_AF2),
    R(OP_F16, WGMMA, 750, S_ALS), E(OP_F16, WGMMA, 750, S_AOP, F32, 1), R(OP_F16, WGMMA, 750, S_APJ),
    R(OP_F16, AUTO, 750, S_AF1), R(OP_F16, WGMMA, 751, S_AQ), R(OP_F16, WGMMA, 2303, S_VQKV),
    R(OP_Q4, WGMMA, 2304, S_VQ), R(OP_Q4_GLU, WGMMA, 2304, S_VUP), R(OP_Q4, WGMMA, 750, S_AF2),

    // --- the Q4 wgmma producer with 2 and 3 k steps of loads in flight (G4_Q4_WG_DEPTH; 3 runs
    // as 2 on 192- and 256-wide tiles): every tile width at the forced configurations above
    // (persistent grids of 1-3 CTAs whose load, prefetch and fill cursors cross tiles at
    // different steps; splits whose ranks hold 1-3 k steps, fewer than the depth; partial tiles
    // at both edges), tiny and odd shapes (M not a multiple of 64, N odd multiples of 16, K not
    // a multiple of 256), and the serve shapes (~210 and 512 rows, issue 31) at the automatic
    // tile and split; plain and fused gate/up. Same inputs and reference as the depth-1 runs. ---
#define WG_DEPTH(op, bn, d)                                                                       \
    WD(op, 300, 528, 1024, F32, 0, 1, bn, 1, 0, d, "exact, 3 x 3-5 tiles"),                      \
        WD(op, 1000, 1008, 256, F32, 0, 1, bn, 1, 1, d, "exact, 1 CTA for all tiles"),           \
        WD(op, 1000, 1008, 256, F32, 0, 1, bn, 1, 3, d, "exact, 3 CTAs"),                        \
        WD(op, 130, 272, 1024, F16, 0, 1, bn, 8, 0, d, "exact, split 8"),                        \
        WD(op, 129, 272, 192, F16A, 1, 0, bn, 2, 0, d, "odd, split 2 over 3 k steps"),           \
        WD(op, 129, 272, 192, F32A, 1, 0, bn, 1, 2, d, "odd, residual add + bias, 2 CTAs")
    WG_DEPTH(OP_Q4, 128, 2), WG_DEPTH(OP_Q4, 192, 2), WG_DEPTH(OP_Q4, 256, 2),
    WG_DEPTH(OP_Q4, 128, 3), WG_DEPTH(OP_Q4, 256, 3),
#define WG_DEPTH_GLU(op, bn, d)                                                                   \
    WD(op, 300, 528, 1024, F16, 0, 0, bn, 1, 0, d, "3 x 5-9 tiles"),                             \
        WD(op, 130, 272, 1024, F16, 0, 0, bn, 8, 0, d, "split 8"),                               \
        WD(op, 1000, 1008, 256, F16, 0, 0, bn, 1, 3, d, "3 CTAs")
    WG_DEPTH_GLU(OP_Q4_GLU, 128, 2), WG_DEPTH_GLU(OP_Q4_GLU, 192, 2),
    WG_DEPTH_GLU(OP_Q4_GLU, 256, 2), WG_DEPTH_GLU(OP_Q4_GLU, 128, 3),
#define WG_DEPTH_ODD(d)                                                                           \
    WD(OP_Q4, 9, 16, 64, F16, 0, 0, 0, 0, 0, d, "tiny, one k step"),                             \
        WD(OP_Q4, 1, 48, 64, F32, 1, 0, 0, 0, 0, d, "odd, one row"),                             \
        WD(OP_Q4, 17, 48, 192, F16, 1, 0, 0, 0, 0, d, "odd"),                                    \
        WD(OP_Q4, 65, 144, 128, F32, 0, 0, 0, 0, 0, d, "odd"),                                   \
        WD(OP_Q4, 33, 1008, 960, F32A, 1, 0, 0, 0, 0, d, "odd"),                                 \
        WD(OP_Q4, 191, 80, 320, F16, 0, 0, 128, 1, 1, d, "odd, 1 CTA, 5 k steps a tile"),        \
        WD(OP_Q4, 255, 48, 448, F32, 1, 0, 128, 4, 0, d, "odd, split 4 over 7 k steps"),         \
        WD(OP_Q4, 70, 80, 256, F32, 0, 1, 0, 0, 0, d, "exact"),                                  \
        WD(OP_Q4_GLU, 17, 48, 192, F16, 0, 0, 0, 0, 0, d, "odd"),                                \
        WD(OP_Q4_GLU, 211, 80, 320, F16, 0, 0, 128, 1, 1, d, "odd, 1 CTA")
    WG_DEPTH_ODD(2), WG_DEPTH_ODD(3),
// (the 512-, 256- and 128-row ones repeat cases above: emulated once)
#define WG_DEPTH_E2B(d)                                                                           \
    WE(OP_Q4, 210, F16, 0, d, S_QS), WE(OP_Q4, 210, F16, 0, d, S_KVS),                           \
        WE(OP_Q4, 210, F32A, 1, d, S_OS), WE(OP_Q4, 210, F16, 0, d, S_DN),                       \
        WE(OP_Q4, 512, F32A, 1, d, S_OS), WE(OP_Q4, 128, F16, 0, d, S_DN2),                      \
        WE(OP_Q4_GLU, 256, F16, 0, d, S_UP), WE(OP_Q4_GLU, 100, F16, 0, d, S_UP2)
    WG_DEPTH_E2B(2), WG_DEPTH_E2B(3),
};
// clang-format on

// --- small helpers --------------------------------------------------------------------------

static int g_emulate = 0;
static unsigned long long g_seed = 0x6a09e667f3bcc909ull;

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,                     \
                    cudaGetErrorString(e_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Non-zero random values: uniform in +-[lo, hi] (sign random), or exact small integers.
static float rnd_val(unsigned long long *s, float lo, float hi, int exact) {
    if (exact) {
        const int v = (int)(g4t_rand_u64(s) % 4); // -2, -1, 1, 2
        return (float)(v < 2 ? v - 2 : v - 1);
    }
    const float m = g4t_rand_uniform(s, lo, hi);
    return (g4t_rand_u64(s) & 1) ? m : -m;
}

// n random fp16 values, never zero: exact small integers, or sign * 2^e * (1 + m / 1024) with
// e in [elo, elo + 3] (bits drawn directly: 21 random bits per value, fast for 400M weights).
static uint16_t *rnd_f16(size_t n, int elo, int exact, unsigned long long *s) {
    uint16_t *a = g4_malloc(n * 2);
    if (exact) {
        for (size_t i = 0; i < n; i++) a[i] = g4_f32_to_f16(rnd_val(s, 0, 0, 1));
        return a;
    }
    for (size_t i = 0; i < n; i += 3) {
        unsigned long long r = g4t_rand_u64(s);
        for (size_t j = i; j < i + 3 && j < n; j++, r >>= 21) {
            const unsigned sign = (unsigned)(r >> 20) & 1, e = (unsigned)(r >> 10) & 3;
            a[j] = (uint16_t)((sign << 15) | ((unsigned)(15 + elo) + e) << 10 | (r & 0x3ff));
        }
    }
    return a;
}

static int out_is_f32(g4_gemm_epi e) {
    return e == G4_GEMM_Y_F32 || e == G4_GEMM_Y_F32_ADD;
}
static int out_is_add(g4_gemm_epi e) {
    return e == G4_GEMM_Y_F32_ADD || e == G4_GEMM_Y_F16_ADD;
}

// A device output with guard bytes on both sides.
typedef struct {
    uint8_t *base; // device: [GUARD][bytes][GUARD]
    void *y;
    size_t bytes;
} guarded;

static guarded guarded_new(size_t bytes) {
    guarded g = {0};
    g.bytes = bytes;
    if (g_emulate) {
        g.base = g4_malloc(bytes + 2 * GUARD);
        memset(g.base, 0xa5, bytes + 2 * GUARD);
    } else {
        CK(cudaMalloc((void **)&g.base, bytes + 2 * GUARD));
        CK(cudaMemset(g.base, 0xa5, bytes + 2 * GUARD));
    }
    g.y = g.base + GUARD;
    return g;
}

static int guards_intact(const guarded *g) {
    uint8_t h[2 * GUARD];
    if (g_emulate) return 1;
    CK(cudaMemcpy(h, g->base, GUARD, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h + GUARD, g->base + GUARD + g->bytes, GUARD, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 2 * GUARD; i++)
        if (h[i] != 0xa5) return 0;
    return 1;
}

static void guarded_free(guarded *g) {
    if (g_emulate)
        free(g->base);
    else
        CK(cudaFree(g->base));
}

static void *dev_upload(const void *h, size_t n) {
    if (g_emulate) return NULL;
    void *d;
    CK(cudaMalloc(&d, n));
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

static void dev_free(void *d) {
    if (d) CK(cudaFree(d));
}

// Rows whose reference is computed: all, or CHECK_ROWS (first, last, seeded random others) when
// M * N * K would make the CPU reference slow.
static int all_rows(int M, int N, int K) {
    return (double)M * N * K <= 4e8 || M <= CHECK_ROWS;
}
static int pick_rows(int M, int N, int K, int *rows, unsigned long long *s) {
    if (all_rows(M, N, K)) {
        for (int i = 0; i < M; i++) rows[i] = i;
        return M;
    }
    int n = 0;
    rows[n++] = 0;
    while (n < CHECK_ROWS - 1) {
        int r = 1 + (int)(g4t_rand_u64(s) % (unsigned long long)(M - 2));
        int dup = 0;
        for (int i = 0; i < n; i++) dup |= rows[i] == r;
        if (!dup) rows[n++] = r;
    }
    rows[n++] = M - 1;
    return n;
}

// mag[t][n] = sum_k |x[t][k]| |W[k][n]|: the scale of the accumulation error.
static void abs_linear(float *mag, const float *x, const uint16_t *w, int T, int K, int N) {
    for (int t = 0; t < T; t++) {
        float *m = mag + (size_t)t * N;
        for (int n = 0; n < N; n++) m[n] = 0.0f;
        for (int k = 0; k < K; k++) {
            const float xa = fabsf(x[(size_t)t * K + k]);
            const uint16_t *wr = w + (size_t)k * N;
            for (int n = 0; n < N; n++) m[n] += xa * ref_h2f(wr[n] & 0x7fff);
        }
    }
}

// --- comparison -------------------------------------------------------------------------------

typedef struct {
    double max_err, max_ratio, err2, ref2;
    long bad, nonfinite;
    int first_bad_row, first_bad_col;
    double first_got, first_exp, first_tol;
} cmp_stats;

static void cmp_init(cmp_stats *c) {
    memset(c, 0, sizeof *c);
    c->first_bad_row = -1;
}

// One element: got vs exp with tolerance tol; base = the part of exp produced by the GEMM (exp
// minus the residual) for the NMSE denominator.
static void cmp_one(cmp_stats *c, int row, int col, double got, double exp, double tol, double base,
                    int exact) {
    const double err = fabs(got - exp);
    c->err2 += (got - exp) * (got - exp);
    c->ref2 += base * base;
    if (exact) tol = 0; // the tolerance applied (and printed for the first bad element)
    const int bad = g4t_elem_bad(got, exp, tol); // NaN on either side fails
    if (!isfinite(got)) c->nonfinite++;
    if (err > c->max_err || !isfinite(got)) c->max_err = isfinite(got) ? err : INFINITY;
    if (tol > 0 && err / tol > c->max_ratio) c->max_ratio = err / tol;
    if (bad) {
        if (c->first_bad_row < 0) {
            c->first_bad_row = row;
            c->first_bad_col = col;
            c->first_got = got;
            c->first_exp = exp;
            c->first_tol = tol;
        }
        c->bad++;
    }
}

// --- one case -----------------------------------------------------------------------------------

static float host_out(const void *h, g4_gemm_epi epi, size_t i) {
    return out_is_f32(epi) ? ((const float *)h)[i] : g4_f16_to_f32(((const uint16_t *)h)[i]);
}

// Packs per-column zero points (0..15) into the package layout [N][ceil(kb/2)].
static uint8_t *pack_zp(const uint8_t *z, int N, int kb) {
    const int row = (kb + 1) / 2;
    uint8_t *p = g4_calloc((size_t)N * row, 1);
    for (int n = 0; n < N; n++)
        for (int b = 0; b < kb; b++)
            p[(size_t)n * row + b / 2] |= (uint8_t)((z[(size_t)n * kb + b] & 15) << ((b & 1) * 4));
    return p;
}

// A Q4 weight in the package layout (host).
typedef struct {
    uint8_t *q;       // [N][K/32][16]
    uint16_t *scales; // [N][K/32]
    uint8_t *zp;      // [N][K/64]
} q4_host;

static void q4_host_make(q4_host *h, int N, int K, int exact, unsigned long long *s) {
    const int kb = K / 32;
    h->q = g4_malloc((size_t)N * K / 2);
    for (size_t i = 0; i < (size_t)N * K / 2; i += 8) {
        const unsigned long long r = g4t_rand_u64(s);
        memcpy(h->q + i, &r, 8); // N * K / 2 is a multiple of 512
    }
    h->scales = g4_malloc((size_t)N * kb * 2);
    uint8_t *z = g4_malloc((size_t)N * kb);
    for (size_t i = 0; i < (size_t)N * kb; i++) {
        // Real scales are small positive fp16 values (max |w| / 15); exact mode: 1/2, 1, 2.
        const float sc =
            exact ? (float)(1 << (g4t_rand_u64(s) % 3)) * 0.5f : g4t_rand_uniform(s, 0.002f, 0.05f);
        h->scales[i] = g4_f32_to_f16(sc);
        z[i] = (uint8_t)(g4t_rand_u64(s) & 15);
    }
    h->zp = pack_zp(z, N, kb);
    free(z);
}

static void q4_host_free(q4_host *h) {
    free(h->q);
    free(h->scales);
    free(h->zp);
    memset(h, 0, sizeof *h);
}

// The package tensors of columns cols[0 .. nc) only (their rows are contiguous per column).
static void q4_host_cols(q4_host *sub, const q4_host *h, int K, const int *cols, int nc) {
    const int kb = K / 32, zr = (kb + 1) / 2;
    sub->q = g4_malloc((size_t)nc * K / 2);
    sub->scales = g4_malloc((size_t)nc * kb * 2);
    sub->zp = g4_malloc((size_t)nc * zr);
    for (int j = 0; j < nc; j++) {
        const size_t n = (size_t)cols[j];
        memcpy(sub->q + (size_t)j * K / 2, h->q + n * K / 2, (size_t)K / 2);
        memcpy(sub->scales + (size_t)j * kb, h->scales + n * kb, (size_t)kb * 2);
        memcpy(sub->zp + (size_t)j * zr, h->zp + n * zr, (size_t)zr);
    }
}

// The reference fp16 weight [K][nc] of columns cols: fp16(ref_q4_dequant_col), i.e. the CPU
// dequantizer rounded once. 16 columns at a time, so the writes are runs, not N-strided.
static uint16_t *q4_ref_w16(const q4_host *h, int K, const int *cols, int nc) {
    uint16_t *w16 = g4_malloc((size_t)K * nc * 2);
    float *col = g4_malloc((size_t)16 * K * sizeof(float));
    for (int j0 = 0; j0 < nc; j0 += 16) {
        const int nj = nc - j0 < 16 ? nc - j0 : 16;
        for (int j = 0; j < nj; j++)
            ref_q4_dequant_col(col + (size_t)j * K, h->q, h->scales, h->zp, K, 32, cols[j0 + j]);
        for (int k = 0; k < K; k++)
            for (int j = 0; j < nj; j++)
                w16[(size_t)k * nc + j0 + j] = g4_f32_to_f16(col[(size_t)j * K + k]);
    }
    free(col);
    return w16;
}

// Columns cols of an fp16 [K][N] weight, as [K][nc].
static uint16_t *f16_cols(const uint16_t *w, int K, int N, const int *cols, int nc) {
    uint16_t *o = g4_malloc((size_t)K * nc * 2);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < nc; j++) o[(size_t)k * nc + j] = w[(size_t)k * N + cols[j]];
    return o;
}

// Columns whose reference is computed: all, or (lm_head-sized weights, N K > 3e7) 512 groups
// of 16 (a Q4 tile's features): the first, the last and seeded random others.
static int pick_cols(int N, int K, int *cols, unsigned long long *s) {
    if ((double)N * K <= 3e7 || N < 1024 * 16) {
        for (int i = 0; i < N; i++) cols[i] = i;
        return N;
    }
    const int groups = N / 16, want = 512;
    unsigned char *used = g4_calloc((size_t)groups, 1);
    int n = 0;
    for (int i = 0; i < want; i++) {
        int gi = i == 0 ? 0 : i == 1 ? groups - 1 : (int)(g4t_rand_u64(s) % (unsigned)groups);
        if (used[gi]) {
            i--;
            continue;
        }
        used[gi] = 1;
        for (int j = 0; j < 16; j++) cols[n++] = 16 * gi + j;
    }
    free(used);
    return n;
}

static void print_case(const gcase *c) {
    printf("case op=%s algo=%s M=%d N=%d K=%d epi=%s bias=%d exact=%d", op_name(c->op),
           g4_gemm_algo_name(c->algo), c->M, c->N, c->K, g4_gemm_epi_name(c->epi), c->bias,
           c->exact);
    if (c->bn || c->split || c->ctas) printf(" bn=%d split=%d ctas=%d", c->bn, c->split, c->ctas);
    if (c->ver) printf(" gemv=v%d", c->ver);
    if (c->depth) printf(" depth=%d", c->depth);
    if (c->f16v) printf(" gemv_f16=v%d", c->f16v);
    printf("  [%s]\n", c->what);
}

// The fourth Q4 GEMV design's bounds (kernels/gemv_q4_int.h) on the checked rows and the
// columns of sub (its package tensors, nc columns): mag = sum_k |x_k w_k| with the unrounded
// weights, tolx = sum over 32-input blocks of gqi_tolerance_x(max |x| of the block, sum |w|).
static void q4_xq_tolerance(float *mag, float *tolx, const float *xr, const q4_host *sub, int nr,
                            int K, int nc) {
    float *wc = g4_malloc(sizeof(float) * (size_t)K);
    for (int j = 0; j < nc; j++) {
        ref_q4_dequant_col(wc, sub->q, sub->scales, sub->zp, K, 32, j);
        for (int i = 0; i < nr; i++) {
            const float *x = xr + (size_t)i * K;
            double m = 0.0, t = 0.0;
            for (int b = 0; b < K / 32; b++) {
                double amax = 0.0, sw = 0.0;
                for (int k = 32 * b; k < 32 * b + 32; k++) {
                    amax = fmax(amax, fabs(x[k]));
                    sw += fabs(wc[k]);
                    m += fabs((double)x[k] * wc[k]);
                }
                t += gqi_tolerance_x(amax, sw);
            }
            mag[(size_t)i * nc + j] = (float)m;
            tolx[(size_t)i * nc + j] = (float)t;
        }
    }
    free(wc);
}

// The dequantizer case: device fp16 W must equal fp16(ref_q4_dequant_col) bit for bit.
static void run_dequant(const gcase *c, unsigned long long *s) {
    const int N = c->N, K = c->K;
    q4_host h;
    q4_host_make(&h, N, K, 0, s);
    int *cols = g4_malloc(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) cols[i] = i;
    uint16_t *want = q4_ref_w16(&h, K, cols, N);
    const size_t n = (size_t)K * N;
    uint16_t *got = g4_malloc(n * 2);
    if (g_emulate) {
        memcpy(got, want, n * 2);
    } else {
        g4_q4_weight w;
        int rc = g4_q4_repack(&w, h.q, h.scales, h.zp, N, K, 32);
        CHECK_MSG(rc == G4_OK, "repack: %s", g4_error());
        guarded out = guarded_new(n * 2);
        CK(cudaMemset(out.y, 0xff, n * 2));
        rc = g4_q4_dequant_f16(out.y, &w, 0);
        CHECK_MSG(rc == G4_OK, "dequant: %s", g4_error());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got, out.y, n * 2, cudaMemcpyDeviceToHost));
        CHECK_MSG(guards_intact(&out), "guard bytes around the dequantized weight changed");
        guarded_free(&out);
        g4_q4_weight_free(&w);
    }
    long bad = 0;
    size_t first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i] && !bad++) first = i;
    CHECK_MSG(bad == 0,
              "%ld of %zu dequantized weights differ; first k=%zu n=%zu got %04x want %04x", bad, n,
              first / N, first % N, got[first], want[first]);
    printf("  %s: %zu weights bit-exact\n", bad ? "FAIL" : "ok", n);
    free(got);
    free(want);
    free(cols);
    q4_host_free(&h);
}

// Whether a G4_GVM_* plan knob of the tensor-core fp16 GEMV is set (gemm_f16.cu).
static int gvm_knobs_set(void) {
    static const char *const vars[] = {"G4_GVM_SPLIT_MAX", "G4_GVM_CPS", "G4_GVM_MIN_CTAS"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return 1;
    }
    return 0;
}

static void run_case(const gcase *c) {
    unsigned long long s = g_seed ^ ((unsigned long long)c->M * 0x9e3779b97f4a7c15ull) ^
                           ((unsigned long long)c->N << 20) ^ ((unsigned long long)c->K << 40) ^
                           (unsigned long long)(c->op * 131 + c->algo * 17 + c->epi * 3);
    print_case(c);
    const double t0 = now_s();
    if (c->op == OP_Q4_DEQUANT) {
        run_dequant(c, &s);
        return;
    }
    const int M = c->M, N = c->N, K = c->K;
    const int glu = c->op == OP_F16_GLU || c->op == OP_Q4_GLU;
    const int q4 = c->op == OP_Q4 || c->op == OP_Q4_GLU;
    const g4_gemm_epi epi = glu ? G4_GEMM_Y_F16 : c->epi;
    const int f32out = out_is_f32(epi), add = out_is_add(epi);
    const size_t esz = f32out ? 4 : 2, ybytes = (size_t)M * N * esz;

    // Inputs: x fp16 [M, K]; weights fp16 [K, N] or Q4 (package layout); bias fp16 [N]; the
    // residual y0 for the accumulate epilogues.
    uint16_t *x = rnd_f16((size_t)M * K, -4, c->exact, &s); // |x| in [1/16, 1)
    uint16_t *w[2] = {NULL, NULL};
    q4_host qh[2];
    memset(qh, 0, sizeof qh);
    for (int i = 0; i < 1 + glu; i++) {
        if (q4) {
            q4_host_make(&qh[i], N, K, c->exact, &s);
        } else {
            w[i] = rnd_f16((size_t)K * N, -6, c->exact, &s); // |w| in [1/64, 1/4)
        }
    }
    uint16_t *bias = c->bias ? rnd_f16((size_t)N, -3, c->exact, &s) : NULL;
    void *y0 = NULL;
    if (add) {
        y0 = g4_malloc(ybytes);
        for (size_t i = 0; i < (size_t)M * N; i++) {
            const float v = rnd_val(&s, 0.1f, 2.0f, c->exact);
            if (f32out)
                ((float *)y0)[i] = v;
            else
                ((uint16_t *)y0)[i] = g4_f32_to_f16(v);
        }
    }

    // Device run (twice: the second result must be bit-identical).
    void *got = g4_malloc(ybytes), *got2 = g4_malloc(ybytes);
    int rc = G4_OK, ran4 = 0; // ran4: the fourth Q4 GEMV design ran (its own expectation)
    guarded out = guarded_new(ybytes);
    if (!g_emulate) {
        void *dx = dev_upload(x, (size_t)M * K * 2);
        void *db = bias ? dev_upload(bias, (size_t)N * 2) : NULL;
        void *dw[2] = {NULL, NULL};
        g4_q4_weight qw[2];
        memset(qw, 0, sizeof qw);
        for (int i = 0; i < 1 + glu; i++) {
            if (q4) {
                rc = g4_q4_repack(&qw[i], qh[i].q, qh[i].scales, qh[i].zp, N, K, 32);
                CHECK_MSG(rc == G4_OK, "repack: %s", g4_error());
            } else {
                dw[i] = dev_upload(w[i], (size_t)K * N * 2);
            }
        }
        rc = c->algo == GEMV     ? g4_gemm_gemv_force(c->split, c->ctas)
             : c->algo == SKINNY ? g4_gemm_skinny_force(c->split)
                                 : g4_gemm_wgmma_force(c->bn, c->split, c->ctas);
        if (rc == G4_OK && c->ver) rc = g4_gemm_gemv_version(c->ver);
        if (rc == G4_OK && c->depth) rc = g4_gemm_wgmma_q4_depth(c->depth);
        if (rc == G4_OK && c->f16v) rc = g4_gemm_gemv_f16_version(c->f16v);
        CHECK_MSG(rc == G4_OK, "force: %s", g4_error());
        for (int run = 0; run < 2 && rc == G4_OK; run++) {
            if (add)
                CK(cudaMemcpy(out.y, y0, ybytes, cudaMemcpyHostToDevice));
            else
                CK(cudaMemset(out.y, 0xff, ybytes)); // NaN in fp16 and fp32
            switch (c->op) {
            case OP_F16:
                rc = g4_gemm_f16(out.y, dx, dw[0], db, M, N, K, epi, c->algo, 0);
                break;
            case OP_F16_GLU:
                rc = g4_gemm_f16_gelu_mul(out.y, dx, dw[0], dw[1], M, N, K, c->algo, 0);
                break;
            case OP_Q4:
                rc = g4_gemm_q4(out.y, dx, &qw[0], db, M, epi, c->algo, 0);
                break;
            default:
                rc = g4_gemm_q4_gelu_mul(out.y, dx, &qw[0], &qw[1], M, c->algo, 0);
                break;
            }
            CHECK_MSG(rc == G4_OK, "launch: %s", g4_error());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(run ? got2 : got, out.y, ybytes, cudaMemcpyDeviceToHost));
            if (c->f16v && !q4) {
                // The G4_GVM_* plan knobs may leave a shape to the CUDA-core kernel (x past
                // GVM_X_MAX, e.g. G4_GVM_SPLIT_MAX=1 at M 8, K 6144); without them every forced
                // case runs on the tensor cores.
                int pl[4];
                const int takes = g4_gemm_gemv_f16_mma_plan(M, N, K, glu, pl);
                const int want = c->f16v == 2 && takes ? 2 : 1;
                if (c->f16v == 2 && !gvm_knobs_set())
                    CHECK_MSG(takes, "the tensor-core GEMV does not take M %d N %d K %d", M, N, K);
                CHECK_MSG(g4_gemm_gemv_f16_last_design() == want,
                          "forced fp16 GEMV design %d (%d expected), but design %d ran", c->f16v,
                          want, g4_gemm_gemv_f16_last_design());
            }
            const int gemv_q4 = q4 && (c->algo == GEMV || (c->algo == AUTO && M <= 8));
            if (c->ver && q4 && c->algo == GEMV)
                CHECK_MSG(g4_gemm_gemv_last_design() == c->ver,
                          "forced Q4 GEMV design %d, but design %d ran", c->ver,
                          g4_gemm_gemv_last_design());
            ran4 = gemv_q4 && g4_gemm_gemv_last_design() == 4; // (forced, or G4_GEMV=v4)
        }
        g4_gemm_wgmma_force(0, 0, 0);
        g4_gemm_gemv_force(0, 0);
        g4_gemm_skinny_force(0);
        if (c->ver) g4_gemm_gemv_version(-1); // back to G4_GEMV's choice
        if (c->depth) g4_gemm_wgmma_q4_depth(0); // back to G4_Q4_WG_DEPTH's
        if (c->f16v) g4_gemm_gemv_f16_version(-1); // back to G4_GEMV_F16's
        CHECK_MSG(guards_intact(&out), "guard bytes before/after y changed (out-of-bounds write)");
        dev_free(dx);
        dev_free(db);
        for (int i = 0; i < 2; i++) {
            dev_free(dw[i]);
            if (qw[i].q) g4_q4_weight_free(&qw[i]);
        }
    }
    const double t_gpu = now_s() - t0;

    // Reference on the checked rows x columns (the reference fp16 weight of a Q4 case is the
    // CPU dequantizer's output rounded once to fp16).
    int *rows = g4_malloc(sizeof(int) * (size_t)M), *cols = g4_malloc(sizeof(int) * (size_t)N);
    const int nr = pick_rows(M, N, K, rows, &s), nc = pick_cols(N, K, cols, &s);
    float *xr = g4_malloc(sizeof(float) * (size_t)nr * K);
    for (int i = 0; i < nr; i++)
        for (int k = 0; k < K; k++)
            xr[(size_t)i * K + k] = g4_f16_to_f32(x[(size_t)rows[i] * K + k]);
    uint16_t *bias_c = NULL;
    if (bias && !glu) {
        bias_c = g4_malloc((size_t)nc * 2);
        for (int j = 0; j < nc; j++) bias_c[j] = bias[cols[j]];
    }
    float *ref[2] = {NULL, NULL}, *mag[2] = {NULL, NULL}, *refq[2] = {NULL, NULL};
    float *magq[2] = {NULL, NULL}, *tolx[2] = {NULL, NULL}; // the fourth design's tolerance
    for (int i = 0; i < 1 + glu; i++) {
        uint16_t *wc = q4 ? q4_ref_w16(&qh[i], K, cols, nc)
                          : (nc == N ? w[i] : f16_cols(w[i], K, N, cols, nc));
        ref[i] = g4_malloc(sizeof(float) * (size_t)nr * nc);
        mag[i] = g4_malloc(sizeof(float) * (size_t)nr * nc);
        ref_linear_f16(ref[i], xr, wc, bias_c, nr, K, nc, 0);
        abs_linear(mag[i], xr, wc, nr, K, nc);
        if (q4) { // the unrounded-weight reference, for the NMSE check
            q4_host sub;
            q4_host_cols(&sub, &qh[i], K, cols, nc);
            refq[i] = g4_malloc(sizeof(float) * (size_t)nr * nc);
            ref_linear_q4(refq[i], xr, sub.q, sub.scales, sub.zp, bias_c, nr, K, nc, 32, 0);
            if (ran4) {
                magq[i] = g4_malloc(sizeof(float) * (size_t)nr * nc);
                tolx[i] = g4_malloc(sizeof(float) * (size_t)nr * nc);
                q4_xq_tolerance(magq[i], tolx[i], xr, &sub, nr, K, nc);
            }
            q4_host_free(&sub);
        }
        if (wc != w[i]) free(wc);
    }

    if (g_emulate) { // the expectation, rounded as the epilogue rounds; unchecked rows finite
        for (size_t i = 0; i < (size_t)M * N; i++) {
            if (f32out)
                ((float *)got)[i] = 0.0f;
            else
                ((uint16_t *)got)[i] = 0;
        }
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < nc; j++) {
                const size_t o = (size_t)rows[i] * N + cols[j], r = (size_t)i * nc + j;
                float v = glu ? ref_gelu_tanh(ref[0][r]) * ref[1][r] : ref[0][r];
                if (add) v += host_out(y0, epi, o);
                if (f32out)
                    ((float *)got)[o] = v;
                else
                    ((uint16_t *)got)[o] = g4_f32_to_f16(v);
            }
        memcpy(got2, got, ybytes);
    }

    // Compare.
    cmp_stats cs, cq;
    cmp_init(&cs);
    cmp_init(&cq);
    long nonfinite_all = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) nonfinite_all += !isfinite(host_out(got, epi, i));
    const double out_rel = f32out ? TOL_OUT32 : TOL_OUT16, out_abs = f32out ? 0.0 : ATOL_OUT16;
    for (int i = 0; i < nr; i++) {
        for (int j = 0; j < nc; j++) {
            const int n = cols[j];
            const size_t o = (size_t)rows[i] * N + n, r = (size_t)i * nc + j;
            const double res = add ? host_out(y0, epi, o) : 0.0;
            double exp, tol, base, expq = 0.0;
            // the fourth design: against the unrounded weights, with its x tolerance
            float *const *rf = ran4 ? refq : ref;
            double e1[2] = {0.0, 0.0};
            for (int k = 0; k < 1 + glu; k++)
                e1[k] = ran4 ? TOL_ACC * magq[k][r] + tolx[k][r] : TOL_ACC * mag[k][r];
            if (glu) {
                const double g = rf[0][r], u = rf[1][r];
                const double eg = e1[0], eu = e1[1];
                exp = ref_gelu_tanh((float)g) * (float)u;
                tol = 1.13 * fabs(u) * eg + fabs(ref_gelu_tanh((float)g)) * eu + 1.13 * eg * eu;
                if (q4) expq = ref_gelu_tanh(refq[0][r]) * refq[1][r];
            } else {
                exp = (double)rf[0][r];
                tol = e1[0];
                if (q4) expq = refq[0][r];
            }
            base = exp;
            exp += res;
            expq += res;
            tol = tol * (1.0 + out_rel) + out_rel * fabs(exp) + out_abs;
            // An exact fp16 output: the exact sum rounded once, as the epilogue stores it.
            if (c->exact && !f32out) exp = g4_f16_to_f32(g4_f32_to_f16((float)exp));
            const double gv = host_out(got, epi, o);
            // NMSE denominator: the GEMM's own part for fp32 outputs (so a large residual does
            // not hide accumulation errors); the whole output for fp16 ones, whose error is the
            // rounding of the whole output.
            cmp_one(&cs, rows[i], n, gv, exp, tol, f32out ? base : exp, c->exact);
            if (q4) cmp_one(&cq, rows[i], n, gv, expq, INFINITY, expq - res, 0);
        }
    }
    const double nmse = cs.ref2 > 0 ? cs.err2 / cs.ref2 : cs.err2;
    const double budget = f32out ? NMSE_F32 : NMSE_F16;
    CHECK_MSG(nonfinite_all == 0, "%ld NaN/inf outputs (unwritten or overflowed)", nonfinite_all);
    CHECK_MSG(cs.bad == 0,
              "%ld of %ld elements outside tolerance; first row %d col %d got %.9g want %.9g tol "
              "%.3g",
              cs.bad, (long)nr * nc, cs.first_bad_row, cs.first_bad_col, cs.first_got, cs.first_exp,
              cs.first_tol);
    CHECK_MSG(c->exact || nmse <= budget, "NMSE %.3g over the budget %.1g", nmse, budget);
    double nmse_q = 0.0;
    if (q4) {
        nmse_q = cq.ref2 > 0 ? cq.err2 / cq.ref2 : cq.err2;
        CHECK_MSG(nmse_q <= NMSE_Q4_VS_UNROUNDED,
                  "NMSE vs the unrounded Q4 reference %.3g over %.1g", nmse_q,
                  NMSE_Q4_VS_UNROUNDED);
    }
    const int same = memcmp(got, got2, ybytes) == 0;
    CHECK_MSG(same, "second run differs from the first (race or uninitialised read)");
    printf("  %s: rows %d/%d, cols %d/%d, max err %.3g (%.3f of tol), nmse %.3g, repeat %s, "
           "%.2f s gpu+io, %.2f s total\n",
           (cs.bad || nonfinite_all || !same) ? "FAIL" : "ok", nr, M, nc, N, cs.max_err,
           cs.max_ratio, nmse, same ? "identical" : "DIFFERS", t_gpu, now_s() - t0);
    if (q4) printf("       nmse vs unrounded Q4 weights %.3g\n", nmse_q);

    for (int i = 0; i < 2; i++) {
        free(ref[i]);
        free(mag[i]);
        free(refq[i]);
        free(magq[i]);
        free(tolx[i]);
        if (qh[i].q) q4_host_free(&qh[i]);
        free(w[i]);
    }
    guarded_free(&out);
    free(bias_c);
    free(cols);
    free(rows);
    free(xr);
    free(got);
    free(got2);
    free(y0);
    free(bias);
    free(x);
}

// --- argument checks (no launch, no GPU needed) -------------------------------------------------

static void run_reject(void) {
    printf("case op=reject: unsupported shapes, alignments and algorithms return G4_EUSER\n");
    // Fake, never dereferenced, 256-aligned addresses.
    void *X = (void *)(uintptr_t)0x10000, *W = (void *)(uintptr_t)0x20000;
    void *Y = (void *)(uintptr_t)0x30000, *B = (void *)(uintptr_t)0x40000;
    g4_q4_weight qw = {0};
#define REJECT(call, what)                                                                         \
    do {                                                                                           \
        const int rc_ = (call);                                                                    \
        CHECK_MSG(rc_ == G4_EUSER, "%s: rc %d, expected G4_EUSER", what, rc_);                     \
        printf("  %-26s -> %s\n", what, rc_ == G4_EUSER ? g4_error() : "ACCEPTED");                \
    } while (0)
    REJECT(g4_gemm_f16(Y, X, W, NULL, 4, 20, 64, F16, AUTO, 0), "N = 20");
    REJECT(g4_gemm_f16(Y, X, W, NULL, 4, 64, 12, F16, AUTO, 0), "K = 12");
    REJECT(g4_gemm_f16(Y, X, W, NULL, 0, 64, 64, F16, AUTO, 0), "M = 0");
    REJECT(g4_gemm_f16(Y, (char *)X + 8, W, NULL, 4, 64, 64, F16, AUTO, 0), "x 8-byte aligned");
    REJECT(g4_gemm_f16(Y, X, (char *)W + 2, NULL, 4, 64, 64, F16, AUTO, 0), "W 2-byte aligned");
    REJECT(g4_gemm_f16((char *)Y + 4, X, W, NULL, 4, 64, 64, F32, AUTO, 0), "fp32 y 4-aligned");
    REJECT(g4_gemm_f16(Y, X, W, (char *)B + 1, 4, 64, 64, F16, AUTO, 0), "odd bias address");
    REJECT(g4_gemm_f16(Y, X, W, NULL, 9, 64, 64, F16, GEMV, 0), "GEMV with M = 9");
    REJECT(g4_gemm_f16(Y, X, W, NULL, 4, 64, 64, (g4_gemm_epi)7, AUTO, 0), "epilogue 7");
    REJECT(g4_gemm_f16(Y, X, W, NULL, 4, 64, 64, F16, (g4_gemm_algo)9, 0), "algorithm 9");
    REJECT(g4_gemm_f16(NULL, X, W, NULL, 4, 64, 64, F16, AUTO, 0), "NULL y");
    REJECT(g4_gemm_f16_gelu_mul(Y, X, W, NULL, 4, 64, 64, AUTO, 0), "NULL up weight");
    REJECT(g4_gemm_q4(Y, X, NULL, NULL, 4, F16, AUTO, 0), "NULL Q4 weight");
    REJECT(g4_q4_repack(&qw, W, B, NULL, 24, 64, 32), "repack N = 24");
    REJECT(g4_q4_repack(&qw, W, B, NULL, 32, 96, 32), "repack K = 96");
    REJECT(g4_q4_repack(&qw, W, B, NULL, 32, 64, 64), "repack block 64");
    g4_q4_weight fake = {24, 64, (uint8_t *)W, (uint8_t *)W, (uint8_t *)W, 0};
    REJECT(g4_gemm_q4(Y, X, &fake, NULL, 4, F16, AUTO, 0), "Q4 weight N = 24");
    fake.n = 32;
    g4_q4_weight fake2 = fake;
    fake2.k = 128;
    REJECT(g4_gemm_q4_gelu_mul(Y, X, &fake, &fake2, 4, AUTO, 0), "gate/up shapes differ");
    REJECT(g4_gemm_wgmma_force(96, 0, 0), "force tile width 96");
    REJECT(g4_gemm_wgmma_force(0, 3, 0), "force split 3");
    REJECT(g4_gemm_wgmma_force(0, 0, -1), "force -1 CTAs");
    REJECT(g4_gemm_wgmma_q4_depth(4), "q4 depth 4");
    REJECT(g4_gemm_wgmma_q4_depth(-1), "q4 depth -1");
    REJECT(g4_gemm_gemv_force(3, 0), "gemv force split 3");
    REJECT(g4_gemm_gemv_force(128, 0), "gemv force split 128");
    REJECT(g4_gemm_gemv_force(0, -1), "gemv force -1 CTAs");
    REJECT(g4_gemm_skinny_force(3), "skinny force split 3");
    REJECT(g4_gemm_gemv_f16_version(0), "gemv f16 version 0");
    REJECT(g4_gemm_gemv_f16_version(3), "gemv f16 version 3");
    REJECT(g4_gemm_skinny_force(16), "skinny force split 16");
    REJECT(g4_gemm_f16(Y, X, W, NULL, 4, 64, 64, F16, (g4_gemm_algo)5, 0), "algorithm 5");
#undef REJECT
}

// Forced configurations a shape cannot run are refused before any launch (needs a device: the
// entry builds its TMA maps first).
static void run_reject_forced(void) {
    printf("case op=reject: forced wgmma configurations the shape cannot run return G4_EUSER\n");
    void *x, *w, *y;
    CK(cudaMalloc(&x, 1 << 16));
    CK(cudaMalloc(&w, 1 << 16));
    CK(cudaMalloc(&y, 1 << 16));
    CK(cudaMemset(y, 0, 1 << 16));
    struct {
        int bn, split, fused, K;
        const char *what;
    } r[] = {{192, 1, 1, 64, "fp16 fused with tile width 192"},
             {128, 8, 0, 256, "split 8 over 4 k steps"}};
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(g4_gemm_wgmma_force(r[i].bn, r[i].split, 0) == G4_OK, "force: %s", g4_error());
        const int rc = r[i].fused
                           ? g4_gemm_f16_gelu_mul(y, x, w, w, 16, 64, r[i].K, WGMMA, 0)
                           : g4_gemm_f16(y, x, w, NULL, 16, 64, r[i].K, F16, WGMMA, 0);
        g4_gemm_wgmma_force(0, 0, 0);
        CHECK_MSG(rc == G4_EUSER, "%s: rc %d, expected G4_EUSER", r[i].what, rc);
        printf("  %-32s -> %s\n", r[i].what, rc == G4_EUSER ? g4_error() : "ACCEPTED");
    }
    CK(cudaDeviceSynchronize());
    CK(cudaFree(x));
    CK(cudaFree(w));
    CK(cudaFree(y));
}

// --- main ---------------------------------------------------------------------------------------

// --emulate: a case that differs from an earlier one only in what reaches the GPU alone (the
// forced tile width, K split, CTAs, GEMV design) has the same seed, inputs, reference and
// comparison: the harness's work, done again to the bit. Run once.
static int same_emulation(const gcase *a, const gcase *b) {
    return a->op == b->op && a->algo == b->algo && a->M == b->M && a->N == b->N && a->K == b->K &&
           a->epi == b->epi && a->bias == b->bias && a->exact == b->exact;
}

// The CPU reference's multiply-adds for a case (checked rows x columns x K, per weight): what
// --max-work bounds.
static double case_work(const gcase *c) {
    const int glu = c->op == OP_F16_GLU || c->op == OP_Q4_GLU;
    const double rows = all_rows(c->M, c->N, c->K) ? c->M : CHECK_ROWS;
    return (1 + glu) * rows * c->N * c->K;
}

// The fp16 add-norm GEMV (g4_gemv_f16_add_norm) on each design: forced 1 (CUDA cores) and 2
// (tensor cores, checked to have run it where the plan takes the shape), each against a host
// reference computed from the kernel's own x_out (the prologue is the same code in both designs,
// so h_out and x_out must match design 1's bit for bit), y within the accumulation-order bound.
// kind 0: y = x W (epi, bias), 1: gelu(x Wg) * (x Wu), 2: gelu(fp16(x W)) * mul (the PLE gate).
static void run_add_norm(int M, int N, int K, int kind, int next, int scaled, g4_gemm_epi epi,
                         int bias, unsigned long long seed) {
    printf("case op=f16_add_norm/gemv M=%d N=%d K=%d kind=%s next=%d scale=%d epi=%s bias=%d\n", M,
           N, K,
           kind == 0   ? "plain"
           : kind == 1 ? "gated"
                       : "mul",
           next, scaled, g4_gemm_epi_name(epi), bias);
    unsigned long long s = seed;
    const size_t nx = (size_t)M * K, ny = (size_t)M * N;
    const int ldm = N + 24, f32out = out_is_f32(epi);
    float *hin = g4_malloc(nx * 4);
    for (size_t i = 0; i < nx; i++) hin[i] = rnd_val(&s, -20.0f, 20.0f, 0);
    // (magnitudes: |x| ~ 1-4 after a norm, |W| < 1/4, so |y| and gelu(y) * u stay far from
    // fp16's range)
    uint16_t *r = rnd_f16(nx, 0, 0, &s), *nw = rnd_f16((size_t)K, -2, 0, &s);
    uint16_t *nw2 = rnd_f16((size_t)K, -2, 0, &s), *wg = rnd_f16((size_t)K * N, -6, 0, &s);
    uint16_t *wu = kind == 1 ? rnd_f16((size_t)K * N, -6, 0, &s) : NULL;
    uint16_t *mul = kind == 2 ? rnd_f16((size_t)M * ldm, 0, 0, &s) : NULL;
    uint16_t *hb = bias ? rnd_f16((size_t)N, 0, 0, &s) : NULL;
    const uint16_t sc = g4_f32_to_f16(0.4434f);
    void *d_hin = dev_upload(hin, nx * 4), *d_r = dev_upload(r, nx * 2);
    void *d_nw = dev_upload(nw, (size_t)K * 2), *d_nw2 = dev_upload(nw2, (size_t)K * 2);
    void *d_sc = dev_upload(&sc, 2), *d_wg = dev_upload(wg, (size_t)K * N * 2);
    void *d_wu = wu ? dev_upload(wu, (size_t)K * N * 2) : NULL;
    void *d_mul = mul ? dev_upload(mul, (size_t)M * ldm * 2) : NULL;
    void *d_b = hb ? dev_upload(hb, (size_t)N * 2) : NULL;
    const size_t yb = ny * (f32out ? 4 : 2);
    void *d_hout, *d_x, *d_y;
    CK(cudaMalloc(&d_hout, nx * 4));
    CK(cudaMalloc(&d_x, nx * 2));
    CK(cudaMalloc(&d_y, yb));
    float *hout[2] = {g4_malloc(nx * 4), g4_malloc(nx * 4)};
    uint16_t *xo[2] = {g4_malloc(nx * 2), g4_malloc(nx * 2)};
    void *y[2] = {g4_malloc(yb), g4_malloc(yb)};
    const g4_gemv_norm a = {
        d_hin, d_hout, d_r,   d_nw, scaled ? d_sc : NULL, next ? d_nw2 : NULL, d_x,
        1e-6f, next,   d_mul, ldm};
    for (int v = 0; v < 2; v++) {
        CHECK(g4_gemm_gemv_f16_version(v + 1) == G4_OK);
        CK(cudaMemset(d_hout, 0xff, nx * 4));
        CK(cudaMemset(d_x, 0xff, nx * 2));
        CK(cudaMemset(d_y, 0xff, yb));
        const int rc = g4_gemv_f16_add_norm(d_y, &a, d_wg, d_wu, d_b, M, N, K, epi, 0);
        CHECK_MSG(rc == G4_OK, "design %d: %s", v + 1, g4_error());
        CK(cudaDeviceSynchronize());
        int pl[4];
        const int takes = v == 1 && g4_gemm_gemv_f16_mma_plan(M, N, K, kind == 1, pl);
        if (v == 1 && !gvm_knobs_set())
            CHECK_MSG(takes, "the tensor-core GEMV does not take M %d N %d K %d", M, N, K);
        CHECK_MSG(g4_gemm_gemv_f16_last_design() == (takes ? 2 : 1),
                  "design %d forced (%d expected), design %d ran", v + 1, takes ? 2 : 1,
                  g4_gemm_gemv_f16_last_design());
        if (takes) printf("  design 2 plan S=%d CS=%d grid=%d\n", pl[0], pl[1], pl[3]);
        CK(cudaMemcpy(hout[v], d_hout, nx * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(xo[v], d_x, nx * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(y[v], d_y, yb, cudaMemcpyDeviceToHost));
    }
    g4_gemm_gemv_f16_version(-1);
    CHECK_MSG(memcmp(hout[0], hout[1], nx * 4) == 0, "h_out differs between the designs");
    CHECK_MSG(memcmp(xo[0], xo[1], nx * 2) == 0, "x_out differs between the designs");
    // h_out against the formula (the prologue's fp32 arithmetic: a loose bound)
    long hbad = 0;
    for (int m = 0; m < M; m++) {
        double ss = 0;
        for (int k = 0; k < K; k++)
            ss += (double)g4_f16_to_f32(r[(size_t)m * K + k]) * g4_f16_to_f32(r[(size_t)m * K + k]);
        const double inv = 1.0 / sqrt(ss / K + 1e-6), scv = scaled ? g4_f16_to_f32(sc) : 1.0;
        for (int k = 0; k < K; k++) {
            const size_t i = (size_t)m * K + k;
            const double want = (hin[i] + g4_f16_to_f32(r[i]) * inv * g4_f16_to_f32(nw[k])) * scv;
            if (!(fabs(hout[0][i] - want) <= 1e-5 * (fabs(want) + 1.0))) hbad++;
        }
    }
    CHECK_MSG(hbad == 0, "%ld h_out values off the formula", hbad);
    // y of each design against the reference from x_out
    cmp_stats cs[2];
    cmp_init(&cs[0]);
    cmp_init(&cs[1]);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double g = 0, u = 0, mg = 0, mu = 0;
            for (int k = 0; k < K; k++) {
                const double xv = g4_f16_to_f32(xo[0][(size_t)m * K + k]);
                const double a1 = xv * g4_f16_to_f32(wg[(size_t)k * N + n]);
                g += a1, mg += fabs(a1);
                if (wu) {
                    const double a2 = xv * g4_f16_to_f32(wu[(size_t)k * N + n]);
                    u += a2, mu += fabs(a2);
                }
            }
            const double eg = TOL_ACC * mg, eu = TOL_ACC * mu;
            double exp, tol, base = g;
            if (kind == 1) {
                exp = ref_gelu_tanh((float)g) * u;
                tol = 1.13 * fabs(u) * eg + fabs(ref_gelu_tanh((float)g)) * eu + 1.13 * eg * eu;
            } else if (kind == 2) {
                const double gq = g4_f16_to_f32(g4_f32_to_f16((float)g));
                const double mv = g4_f16_to_f32(mul[(size_t)m * ldm + n]);
                exp = ref_gelu_tanh((float)gq) * mv;
                // fp16(g) may round the other way within eg: up to one fp16 ulp of g more
                tol = 1.13 * fabs(mv) * (eg + TOL_OUT16 * 2.0 * fabs(g) + ATOL_OUT16);
            } else {
                exp = g + (hb ? g4_f16_to_f32(hb[n]) : 0.0);
                tol = eg;
            }
            tol += (f32out ? TOL_OUT32 : TOL_OUT16) * fabs(exp) + (f32out ? 0.0 : ATOL_OUT16);
            for (int v = 0; v < 2; v++)
                cmp_one(&cs[v], m, n, host_out(y[v], epi, (size_t)m * N + n), exp, tol, base, 0);
        }
    for (int v = 0; v < 2; v++) {
        CHECK_MSG(cs[v].bad == 0,
                  "design %d: %ld of %zu outputs off (first row %d col %d: got %g want %g tol %g)",
                  v + 1, cs[v].bad, ny, cs[v].first_bad_row, cs[v].first_bad_col, cs[v].first_got,
                  cs[v].first_exp, cs[v].first_tol);
        printf("  %s: design %d, %zu outputs, max err/tol %.3f\n", cs[v].bad ? "FAIL" : "ok", v + 1,
               ny, cs[v].max_ratio);
    }
    void *dv[] = {d_hin, d_r, d_nw, d_nw2, d_sc, d_wg, d_wu, d_mul, d_b, d_hout, d_x, d_y};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) dev_free(dv[i]);
    void *hv[] = {hin, r, nw, nw2, wg, wu, mul, hb, hout[0], hout[1], xo[0], xo[1], y[0], y[1]};
    for (size_t i = 0; i < sizeof hv / sizeof hv[0]; i++) free(hv[i]);
}

// The add-norm cases (--op f16_add_norm): the decode step's (q|k|v, q, the gated MLP, the PLE
// gate at 1 and 8 rows), odd N and K, an fp32 output with bias, a multiplier of ldm > N.
static void run_add_norm_cases(void) {
    run_add_norm(1, 2048, 1536, 0, 1, 1, G4_GEMM_Y_F16, 0, 101);
    run_add_norm(1, 2560, 1536, 0, 1, 1, G4_GEMM_Y_F16, 0, 102);
    run_add_norm(1, 6144, 1536, 1, 1, 0, G4_GEMM_Y_F16, 0, 103);
    run_add_norm(8, 6144, 1536, 1, 1, 0, G4_GEMM_Y_F16, 0, 104);
    run_add_norm(1, 256, 1536, 2, 0, 0, G4_GEMM_Y_F16, 0, 105);
    run_add_norm(8, 256, 1536, 2, 0, 0, G4_GEMM_Y_F16, 0, 106);
    run_add_norm(3, 256, 1536, 0, 0, 1, G4_GEMM_Y_F16, 0, 107);
    run_add_norm(5, 40, 640, 0, 1, 1, G4_GEMM_Y_F32, 1, 108);
    run_add_norm(8, 1000, 2048, 0, 0, 0, G4_GEMM_Y_F16, 0, 109);
    run_add_norm(2, 72, 64, 1, 1, 1, G4_GEMM_Y_F16, 0, 110);
    run_add_norm(4, 8, 128, 2, 1, 0, G4_GEMM_Y_F16, 0, 111);
}

static int matches(const gcase *c, const char *op, const char *shape) {
    char a[64], b[96];
    snprintf(a, sizeof a, "%s/%s", op_name(c->op), g4_gemm_algo_name(c->algo));
    snprintf(b, sizeof b, "M=%d N=%d K=%d ", c->M, c->N, c->K);
    return (!op || strstr(a, op)) && (!shape || strstr(b, shape));
}

int main(int argc, char **argv) {
    const char *op = NULL, *shape = NULL;
    int list = 0;
    double max_work = 0; // 0: no bound
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--op") && i + 1 < argc)
            op = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            shape = argv[++i];
        else if (!strcmp(argv[i], "--list"))
            list = 1;
        else if (!strcmp(argv[i], "--emulate"))
            g_emulate = 1;
        else if (!strcmp(argv[i], "--max-work") && i + 1 < argc) {
            char *end;
            max_work = strtod(argv[++i], &end);
            if (*end || !(max_work > 0)) {
                fprintf(stderr, "test_cuda_gemm: --max-work '%s': expected a positive number\n",
                        argv[i]);
                return 1;
            }
        } else {
            fprintf(stderr, "usage: test_cuda_gemm [--op S] [--shape S] [--list] [--emulate] "
                            "[--max-work N]\n");
            return 1;
        }
    }
    if (max_work > 0 && !g_emulate) {
        fprintf(stderr, "test_cuda_gemm: --max-work bounds the emulation only (add --emulate)\n");
        return 1;
    }
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    if (list) {
        for (int i = 0; i < n_cases; i++)
            if (matches(&cases[i], op, shape)) print_case(&cases[i]);
        return 0;
    }
    g4_ref_init();
    if (!op || strstr("reject", op)) run_reject();

    const char *why = NULL;
    if (!g_emulate && g4_cuda_device_count(&why) == 0) {
        if (g4t_failures) return g4t_finish("test_cuda_gemm");
        return g4t_skip("test_cuda_gemm", why ? why : "no CUDA device");
    }
    if (!g_emulate) {
        char dev[256];
        g4_cuda_describe(dev, sizeof dev);
        printf("device: %s\n", dev);
        if (!op || strstr("reject", op)) run_reject_forced();
        if (!op || strstr("f16_add_norm/gemv", op)) run_add_norm_cases();
    }
    const double t0 = now_s();
    int ran = 0, same = 0, over = 0;
    for (int i = 0; i < n_cases; i++) {
        if (!matches(&cases[i], op, shape)) continue;
        int first = -1;
        for (int j = 0; g_emulate && j < i && first < 0; j++)
            if (matches(&cases[j], op, shape) && same_emulation(&cases[j], &cases[i])) first = j;
        if (first >= 0 || (max_work > 0 && case_work(&cases[i]) > max_work)) {
            print_case(&cases[i]);
            if (first >= 0) {
                printf("  emulated above (table entry %d): the same inputs, reference and "
                       "comparison; its forced configuration reaches the GPU only\n",
                       first);
                same++;
            } else {
                printf("  not emulated here: %.3g reference multiply-adds, over --max-work %.3g\n",
                       case_work(&cases[i]), max_work);
                over++;
            }
            continue;
        }
        run_case(&cases[i]);
        ran++;
    }
    printf("%d cases in %.1f s%s\n", ran, now_s() - t0, g_emulate ? " (emulated: no GPU ran)" : "");
    if (same) printf("%d cases emulated once with an earlier one (the same emulation)\n", same);
    if (over) printf("%d cases over --max-work %.3g not emulated in this run\n", over, max_work);
    return g4t_finish("test_cuda_gemm");
}
