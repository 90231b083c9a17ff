// bench_gemm.cu: `g4cu bench --kernels` rows for the GEMM/GEMV kernels (gemm_f16.cuh,
// gemm_q4.cuh) at the Gemma-4 E2B shapes, each next to its cuBLAS baseline timed in the same run.
//
// Baselines: cublasGemmEx, fp16 in / fp16 out, fp32 compute, same M, N, K ("cublas"). The fused
// gate/up rows compare with two such GEMMs ("cublas x2", without the GELU-multiply). Q4 has no
// cuBLAS kernel: its rows compare with the fp16 cuBLAS GEMM of the same shape ("cublas16"), and
// their GB/s counts the packed Q4 bytes (weights + scales + zero points, = the package's) plus x
// and y, against the 4.25 TB/s copy ceiling (TARGETS.md: >= 85% at every decode shape).
// Timing: g4_kbench_run_graph (per-launch time of launches replayed from a CUDA graph), inputs
// rotated through enough copies to pass 2x the L2 (up to 1024 copies), filled with random values
// (never zeros). cuBLAS is loaded on first use (baselines.h); without it the rows have no
// baseline and the table's base column says "cublas: not loaded" (the reason on stderr).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "base/base.h"
#include "kernels/bench/baselines.h"
#include "kernels/bench/kbench.h"
#include "kernels/cuda_util.h"
#include "kernels/gemm_f16.cuh"
#include "kernels/gemm_q4.cuh"
#include "kernels/persist_mlp.cuh"
#include "kernels/ple_block.cuh"

namespace {

#define CUBLAS_CHECK(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "g4cu: cuBLAS error %d in %s at %s:%d\n", (int)s_, #call, __FILE__,    \
                    __LINE__);                                                                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

struct e2b_shape {
    const char *name;
    int N, K;
};
// The E2B linears (N = out, K = in). (Unformatted: clang-format's column layout gives up on it.)
// clang-format off
const e2b_shape SHAPES[] = {
    {"q_proj", 2048, 1536},      {"q_proj_full", 4096, 1536},   {"kv_proj", 256, 1536},
    {"kv_proj_full", 512, 1536}, {"o_proj", 1536, 2048},        {"o_proj_full", 1536, 4096},
    {"gate_up", 6144, 1536},     {"gate_up_wide", 12288, 1536}, {"down", 1536, 6144},
    {"down_wide", 1536, 12288},  {"ple_gate", 256, 1536},       {"ple_proj", 1536, 256},
    {"lm_head", 262144, 1536},   {"ple_emb", 8960, 1536},
    // the towers' (issue 22; from N_TEXT_SHAPES on): vision (hidden 768, MLP 3072; q/k/v/o and
    // the patch embedding are 768 x 768, q/k/v together 2304) and audio (hidden 1024, FFN 4096,
    // lconv1d linear_start 2048)
    {"vis_qkvo", 768, 768},      {"vis_qkv", 2304, 768},        {"vis_gate_up", 3072, 768},
    {"vis_down", 768, 3072},     {"aud_qkvo", 1024, 1024},      {"aud_ffw1", 4096, 1024},
    {"aud_ffw2", 1024, 4096},    {"aud_lin_start", 2048, 1024}, {"qkv", 2560, 1536},
    {"qkv_full", 5120, 1536},
};
// clang-format on
const int N_TEXT_SHAPES = 14; // the decoder's (GEMV rows); the towers' follow
// The towers' end; then the one-token q|k|v GEMV of the KV-owning layers (G4_QKV), sliding
// (8 x 256 + 2 x 256) and full (8 x 512 + 2 x 512): the add-norm rows' only.
const int N_TOWER_END = 22;

enum wkind { W_F16, W_Q4 };

struct brow {
    const char *op; // row name
    wkind w;
    bool glu;
    g4_gemm_algo algo;
    int M;
    int shape; // index into SHAPES
    int bn = 0, split = 0; // wgmma configuration forced for the row (g4_gemm_wgmma_force); 0: AUTO
    int depth = 0; // Q4 wgmma producer's loads in flight (g4_gemm_wgmma_q4_depth); 0: G4_Q4_WG_DEPTH
    bool xhot = false; // every launch reads the same x (L2-resident, as a decode step's
                       // activation, written by the kernel just before); weights still rotate
    int f16v = 0;      // fp16 GEMV design forced for the row (g4_gemm_gemv_f16_version); 0:
                       // G4_GEMV_F16's
    int an = 0; // the add-norm GEMV (an_* rows): 1 its plain or gate/up form, 2 the PLE gate's
                // (with the multiplier); its base the same GEMV design on x given
    bool hot = false; // l2hot_* rows: every launch reads copy 0's weights (L2-resident after the
                      // first); base: the same row rotated past the L2 ("rotated")
};

// Deterministic pseudo-random fill (a hash of the index), never zero.
__device__ __forceinline__ uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
__global__ void fill_f16(__half *p, size_t n, uint32_t seed, float lo, float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint32_t h = mix((uint32_t)i * 2654435761u ^ seed);
        const float m = lo + (hi - lo) * (float)(h >> 8) * (1.0f / 16777216.0f);
        p[i] = __float2half((h & 1) ? m : -m);
    }
}
__global__ void fill_u8(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint8_t)mix((uint32_t)i * 2246822519u ^ seed);
}

void *dalloc(size_t n) {
    void *p = nullptr;
    G4_CUDA_CHECK(cudaMalloc(&p, n));
    return p;
}
__half *rand_f16(size_t n, uint32_t seed, float lo, float hi) {
    __half *p = (__half *)dalloc(n * 2);
    fill_f16<<<1024, 256>>>(p, n, seed, lo, hi);
    G4_CUDA_LAUNCH_CHECK();
    return p;
}

// One benchmark problem with `copies` rotated input/output sets.
struct problem {
    brow r;
    int M, N, K, copies;
    std::vector<__half *> x, y, w, wu; // fp16 weights: ours (fp16 rows) and cuBLAS (all rows)
    std::vector<g4_q4_weight> q, qu;
    // the add-norm prologue's inputs and outputs (an rows), one set: L2-resident, as in the
    // decode step where the kernel before wrote them
    float *hi = nullptr, *ho = nullptr;                                  // f32 [K]
    __half *res = nullptr, *nw = nullptr, *nnw = nullptr, *xo = nullptr; // fp16 [K]
    __half *mul = nullptr;   // fp16 [N] (the PLE gate's)
    const g4_cublas_api *bl; // NULL: cuBLAS not loaded, no baseline
    cublasHandle_t blas;
    int rc;
};

g4_q4_weight rand_q4(int N, int K, uint32_t seed) {
    g4_q4_weight w;
    w.n = N;
    w.k = K;
    const size_t qb = (size_t)N * K / 2, sb = (size_t)N * K / 16, zb = (size_t)N * K / 64;
    w.bytes = qb + sb + zb;
    w.q = (uint8_t *)dalloc(w.bytes);
    w.scales = w.q + qb;
    w.zp = w.q + qb + sb;
    fill_u8<<<1024, 256>>>(w.q, qb, seed);
    G4_CUDA_LAUNCH_CHECK();
    // The packed layout is bytes; scales must be real fp16 values (small, positive).
    fill_f16<<<1024, 256>>>((__half *)w.scales, sb / 2, seed ^ 0x5bd1e995u, 0.002f, 0.05f);
    G4_CUDA_LAUNCH_CHECK();
    fill_u8<<<1024, 256>>>(w.zp, zb, seed ^ 0x27d4eb2fu);
    G4_CUDA_LAUNCH_CHECK();
    return w;
}

double row_bytes(const problem &p) {
    const double x = 2.0 * p.M * p.K, y = 2.0 * p.M * p.N;
    const double w =
        p.r.w == W_F16 ? 2.0 * p.K * p.N : (double)p.N * p.K * (0.5 + 1.0 / 16 + 1.0 / 64);
    return x + y + (p.r.glu ? 2 : 1) * w;
}

// The row's op on copy c; pro false: an add-norm row's base, the same GEMV on x given.
int run_ours(problem *p, int c, cudaStream_t s, bool pro = true) {
    const __half *x = p->x[p->r.xhot ? 0 : c];
    if (p->r.an && pro) {
        g4_gemv_norm a;
        memset(&a, 0, sizeof a);
        a.h_in = p->hi, a.h_out = p->ho, a.r = p->res, a.w = p->nw, a.next_w = p->nnw;
        a.x_out = p->xo, a.eps = 1e-6f, a.next_norm = 1;
        if (p->r.an == 2) a.mul = p->mul, a.ldm = p->N;
        if (p->r.w == W_F16)
            return g4_gemv_f16_add_norm(p->y[c], &a, p->w[c], p->r.glu ? p->wu[c] : nullptr,
                                        nullptr, p->M, p->N, p->K, G4_GEMM_Y_F16, s);
        return g4_gemv_q4_add_norm(p->y[c], &a, &p->q[c], p->r.glu ? &p->qu[c] : nullptr, nullptr,
                                   p->M, G4_GEMM_Y_F16, s);
    }
    if (p->r.w == W_F16) {
        if (p->r.glu)
            return g4_gemm_f16_gelu_mul(p->y[c], x, p->w[c], p->wu[c], p->M, p->N, p->K, p->r.algo,
                                        s);
        return g4_gemm_f16(p->y[c], x, p->w[c], nullptr, p->M, p->N, p->K, G4_GEMM_Y_F16, p->r.algo,
                           s);
    }
    if (p->r.glu) return g4_gemm_q4_gelu_mul(p->y[c], x, &p->q[c], &p->qu[c], p->M, p->r.algo, s);
    return g4_gemm_q4(p->y[c], x, &p->q[c], nullptr, p->M, G4_GEMM_Y_F16, p->r.algo, s);
}

void launch_ours(void *ctx, int rep, void *stream) {
    problem *p = (problem *)ctx;
    const int rc = run_ours(p, rep % p->copies, (cudaStream_t)stream);
    if (rc) p->rc = rc;
}

void launch_hot(void *ctx, int rep, void *stream) {
    problem *p = (problem *)ctx;
    const int rc = run_ours(p, 0, (cudaStream_t)stream);
    if (rc) p->rc = rc;
}

void launch_plain(void *ctx, int rep, void *stream) {
    problem *p = (problem *)ctx;
    const int rc = run_ours(p, rep % p->copies, (cudaStream_t)stream, false);
    if (rc) p->rc = rc;
}

// The GEMV design the last launch of the row's kind ran (Q4: 1..3, fp16: 1, 2), forcing one
// (-1 restores the environment's) and its name.
int last_design(wkind w) {
    return w == W_Q4 ? g4_gemm_gemv_last_design() : g4_gemm_gemv_f16_last_design();
}
void force_design(wkind w, int d) {
    if (w == W_Q4)
        g4_gemm_gemv_version(d);
    else
        g4_gemm_gemv_f16_version(d);
}
const char *design_name(wkind w, int d) {
    static const char *q4[4] = {"none", "v1", "v2", "v3"}, *f16[3] = {"none", "fma", "mma"};
    return w == W_Q4 ? (d >= 0 && d <= 3 ? q4[d] : "?") : (d >= 0 && d <= 2 ? f16[d] : "?");
}

// y[M, N] = x[M, K] @ W[K, N], row-major: column-major y^T (N x M) = W^T (N x K) * x^T (K x M).
void blas_gemm(problem *p, const __half *x, const __half *w, __half *y) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(p->bl->cublasGemmEx(p->blas, CUBLAS_OP_N, CUBLAS_OP_N, p->N, p->M, p->K, &one, w,
                                     CUDA_R_16F, p->N, x, CUDA_R_16F, p->K, &zero, y, CUDA_R_16F,
                                     p->N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void launch_blas(void *ctx, int rep, void *stream) {
    problem *p = (problem *)ctx;
    const int c = rep % p->copies;
    const __half *x = p->x[p->r.xhot ? 0 : c];
    CUBLAS_CHECK(p->bl->cublasSetStream_v2(p->blas, (cudaStream_t)stream));
    blas_gemm(p, x, p->w[c], p->y[c]);
    if (p->r.glu) blas_gemm(p, x, p->wu[c], p->y[c]);
}

// The prefill kernel sweep (a filter holding "xover" selects it instead of the table): mma.sync,
// wgmma as AUTO plans it, and wgmma at every tile width and split, at every linear's shape and
// the M the engine runs it at (text prefill chunks and prompts; the towers' 256-2304 patches or
// frames). Row names are xover_KIND_CFG (KIND f16, q4, glu_f16, glu_q4; CFG mma, wgmma or
// wgBNsS), so a filter such as "xover_q4_wg192" runs one slice (tools/gpu/run.sh's xover
// stage). tools/python/gemm_plan.py turns its JSON into the tuned table AUTO follows.
std::vector<brow> sweep() {
    std::vector<brow> t;
    static const char *kinds[4] = {"f16", "q4", "glu_f16", "glu_q4"};
    static char row_names[4][14][24]; // [kind][mma, wgmma, wg128s1 .. wg256s8]
    for (int k = 0; k < 4; k++) {
        snprintf(row_names[k][0], 24, "xover_%s_mma", kinds[k]);
        snprintf(row_names[k][1], 24, "xover_%s_wgmma", kinds[k]);
        int i = 2;
        for (int bn : {128, 192, 256})
            for (int sp : {1, 2, 4, 8})
                snprintf(row_names[k][i++], 24, "xover_%s_wg%ds%d", kinds[k], bn, sp);
    }
    const int text_shapes[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13};
    auto add = [&](int M, int s, bool glu) {
        for (int w = 0; w < 2; w++) {
            const int k = (glu ? 2 : 0) + w;
            const wkind wk = w ? W_Q4 : W_F16;
            t.push_back({row_names[k][0], wk, glu, G4_GEMM_MMA, M, s, 0, 0});
            t.push_back({row_names[k][1], wk, glu, G4_GEMM_WGMMA, M, s, 0, 0});
            int i = 2;
            for (int bn : {128, 192, 256})
                for (int sp : {1, 2, 4, 8}) {
                    if (!(bn == 192 && glu && !w)) // no fused fp16 variant at width 192
                        t.push_back({row_names[k][i], wk, glu, G4_GEMM_WGMMA, M, s, bn, sp});
                    i++;
                }
        }
    };
    for (int M : {16, 32, 64, 128, 256, 512, 1024, 2048, 4096}) {
        for (int s : text_shapes) add(M, s, false);
        for (int s : {6, 7}) add(M, s, true);
    }
    for (int M : {256, 750, 2304}) {
        for (int s = N_TEXT_SHAPES; s < N_TOWER_END; s++) add(M, s, false);
        add(M, 16, true);
    }
    return t;
}

// The table: decode GEMVs at every shape, prefill GEMMs at the shapes that dominate prefill.
std::vector<brow> table() {
    std::vector<brow> t;
    for (int s = 0; s < N_TEXT_SHAPES; s++)
        t.push_back({"gemv_f16", W_F16, false, G4_GEMM_GEMV, 1, s});
    for (int s = 0; s < N_TEXT_SHAPES; s++)
        t.push_back({"gemv_q4", W_Q4, false, G4_GEMM_GEMV, 1, s});
    // M = 8 (batched decode, speculative verification) at every decoder shape: issue 29 wants
    // the Q4 time within 1.15x of M = 1 and fp16 at least cuBLAS's speed
    for (int s = 0; s < N_TEXT_SHAPES; s++) {
        t.push_back({"gemv_f16", W_F16, false, G4_GEMM_GEMV, 8, s});
        t.push_back({"gemv_q4", W_Q4, false, G4_GEMM_GEMV, 8, s});
    }
    // The batched decode's linears past the GEMV (issue 31: 9..64 rows) and the GEMMs at M = 8
    // beside the GEMV rows above: op names "dgemm_*" (--filter dgemm). The skinny path (AUTO's
    // for 8 < M <= 64 unless G4_SKINNY=0) beside the prefill GEMMs it replaces there; the fused
    // gate/up ("dgemm_glu_*") as the decode step runs it.
    for (int M : {8, 16, 32, 64})
        for (int s = 0; s < N_TEXT_SHAPES; s++) {
            t.push_back({"dgemm_f16_wgmma", W_F16, false, G4_GEMM_WGMMA, M, s});
            t.push_back({"dgemm_f16_mma", W_F16, false, G4_GEMM_MMA, M, s});
            t.push_back({"dgemm_f16_skinny", W_F16, false, G4_GEMM_SKINNY, M, s}); // (M = 8:
            // beside gemv_f16 M = 8 above, which runs at 0.4-0.6x cuBLAS: whether the skinny
            // path should take fp16 below 9 rows too)
            t.push_back({"dgemm_q4_wgmma", W_Q4, false, G4_GEMM_WGMMA, M, s});
            t.push_back({"dgemm_q4_mma", W_Q4, false, G4_GEMM_MMA, M, s});
            t.push_back({"dgemm_q4_skinny", W_Q4, false, G4_GEMM_SKINNY, M, s});
        }
    for (int M : {16, 32, 64})
        for (int s : {6, 7}) {
            t.push_back({"dgemm_glu_f16_wgmma", W_F16, true, G4_GEMM_WGMMA, M, s});
            t.push_back({"dgemm_glu_f16_mma", W_F16, true, G4_GEMM_MMA, M, s});
            t.push_back({"dgemm_glu_f16_skinny", W_F16, true, G4_GEMM_SKINNY, M, s});
            t.push_back({"dgemm_glu_q4_wgmma", W_Q4, true, G4_GEMM_WGMMA, M, s});
            t.push_back({"dgemm_glu_q4_mma", W_Q4, true, G4_GEMM_MMA, M, s});
            t.push_back({"dgemm_glu_q4_skinny", W_Q4, true, G4_GEMM_SKINNY, M, s});
        }
    for (int s : {6, 7})
        for (int M : {1, 8}) {
            t.push_back({"glu_f16_gemv", W_F16, true, G4_GEMM_GEMV, M, s});
            t.push_back({"glu_q4_gemv", W_Q4, true, G4_GEMM_GEMV, M, s});
        }
    // The tensor-core fp16 GEMV (G4_GEMV_F16=mma's; issue 29) forced, beside the rows above
    // (which follow the environment): op names gemv_f16mma, glu_f16mma_gemv.
    for (int M : {1, 8})
        for (int s = 0; s < N_TEXT_SHAPES; s++)
            t.push_back({"gemv_f16mma", W_F16, false, G4_GEMM_GEMV, M, s, 0, 0, 0, false, 2});
    for (int s : {6, 7})
        for (int M : {1, 8})
            t.push_back({"glu_f16mma_gemv", W_F16, true, G4_GEMM_GEMV, M, s, 0, 0, 0, false, 2});
    // The same GEMVs at M = 1 with x L2-resident (the decode step's case: x is the output of the
    // kernel just before; the rows above rotate x with the weights, so each launch also pays
    // its x's DRAM round trip): op names *_xl2 (issue 29's rows "as a decode step runs them").
    for (int s = 0; s < N_TEXT_SHAPES; s++) {
        t.push_back({"gemv_f16_xl2", W_F16, false, G4_GEMM_GEMV, 1, s, 0, 0, 0, true});
        t.push_back({"gemv_q4_xl2", W_Q4, false, G4_GEMM_GEMV, 1, s, 0, 0, 0, true});
    }
    for (int s : {6, 7}) {
        t.push_back({"glu_f16_gemv_xl2", W_F16, true, G4_GEMM_GEMV, 1, s, 0, 0, 0, true});
        t.push_back({"glu_q4_gemv_xl2", W_Q4, true, G4_GEMM_GEMV, 1, s, 0, 0, 0, true});
    }
    // The add-norm GEMVs at M = 1 (issue 30: in the graph-replayed step they cost more than
    // their plain rows; bench/NOTES.md "Issue 30: the add-norm prologue's cost"), each beside the
    // same GEMV design on x given (base "plain gemv": same run, same weights; ours - base = the
    // prologue's cost): q|k|v of the KV-owning layers, q alone of the KV-sharing ones, the
    // fused gate/up, the PLE gate with its multiplier (its base has none: gelu of 256 values).
    // Op names an_q4, an_f16, an_glu_q4, an_glu_f16 (--filter an_); activations L2-resident.
    for (int w = 0; w < 2; w++) {
        const wkind wk = w ? W_F16 : W_Q4;
        for (int s : {N_TOWER_END, N_TOWER_END + 1, 0, 1})
            t.push_back(
                {w ? "an_f16" : "an_q4", wk, false, G4_GEMM_GEMV, 1, s, 0, 0, 0, true, 0, 1});
        t.push_back({w ? "an_f16" : "an_q4", wk, false, G4_GEMM_GEMV, 1, 10, 0, 0, 0, true, 0, 2});
        for (int s : {6, 7})
            t.push_back({w ? "an_glu_f16" : "an_glu_q4", wk, true, G4_GEMM_GEMV, 1, s, 0, 0, 0,
                         true, 0, 1});
    }
    // The decode GEMVs with their weights L2-resident (issue 30: what an L2 hit of every weight
    // byte could buy each shape, the upper bound of any weight prefetch; measured on the H200
    // within 0-5% of rotated on every decode shape), each beside the same row rotated past the L2
    // in the same run (base "rotated"; ours / base = the gain): op names l2hot_q4, l2hot_f16 (the
    // fp16 design G4_GEMV_F16 picks), l2hot_glu_q4, l2hot_glu_f16 (the fused gate/up; none of
    // them holds "gemv": the gemv stage's --filter gemv leaves them out). x L2-resident in both.
    // (--filter l2hot; the fp16 fused gate/up of 12288, 75 MB, and the LM head cannot be hot.)
    for (int w = 0; w < 2; w++) {
        const wkind wk = w ? W_F16 : W_Q4;
        for (int s : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, N_TOWER_END, N_TOWER_END + 1})
            t.push_back({w ? "l2hot_f16" : "l2hot_q4", wk, false, G4_GEMM_GEMV, 1, s, 0, 0, 0, true,
                         0, 0, true});
        for (int s : {6, 7})
            if (!(w && s == 7)) // (the fp16 pair of 12288 is 75 MB: it would not stay in L2)
                t.push_back({w ? "l2hot_glu_f16" : "l2hot_glu_q4", wk, true, G4_GEMM_GEMV, 1, s, 0,
                             0, 0, true, 0, 0, true});
    }
    const int prefill_shapes[] = {0, 2, 4, 5, 6, 7, 8, 9, 13};
    for (int M : {128, 512, 2048}) {
        for (int s : prefill_shapes) {
            t.push_back({"gemm_f16_mma", W_F16, false, G4_GEMM_MMA, M, s});
            t.push_back({"gemm_f16_wgmma", W_F16, false, G4_GEMM_WGMMA, M, s});
        }
        for (int s : {0, 2, 4, 6, 8, 9}) {
            t.push_back({"gemm_q4_mma", W_Q4, false, G4_GEMM_MMA, M, s});
            t.push_back({"gemm_q4_wgmma", W_Q4, false, G4_GEMM_WGMMA, M, s});
        }
        for (int s : {6, 7}) {
            t.push_back({"glu_f16_mma", W_F16, true, G4_GEMM_MMA, M, s});
            t.push_back({"glu_f16_wgmma", W_F16, true, G4_GEMM_WGMMA, M, s});
            t.push_back({"glu_q4_mma", W_Q4, true, G4_GEMM_MMA, M, s});
            t.push_back({"glu_q4_wgmma", W_Q4, true, G4_GEMM_WGMMA, M, s});
        }
    }
    // The serve load's rounds (issue 31, --parallel 32: ~30 decode rows + ~180 prompt rows, so
    // M ~210; and 512): the Q4 wgmma GEMM at AUTO's tile and split with its producer's loads in
    // flight forced to 1 (the earlier loop), 2 and 3 (3 runs as 2 on 192- and 256-wide tiles)
    // in one run, beside the fp16 wgmma GEMM and Q4's mma.sync (AUTO's choice at some of these
    // shapes) at the same shapes. --filter srv_ runs these only.
    for (int M : {210, 512}) {
        for (int s : {0, 1, 2, 3, 4, 5, 8, 9}) {
            t.push_back({"srv_f16_wg", W_F16, false, G4_GEMM_WGMMA, M, s});
            t.push_back({"srv_q4_mma", W_Q4, false, G4_GEMM_MMA, M, s});
            t.push_back({"srv_q4_wg_d1", W_Q4, false, G4_GEMM_WGMMA, M, s, 0, 0, 1});
            t.push_back({"srv_q4_wg_d2", W_Q4, false, G4_GEMM_WGMMA, M, s, 0, 0, 2});
            t.push_back({"srv_q4_wg_d3", W_Q4, false, G4_GEMM_WGMMA, M, s, 0, 0, 3});
        }
        for (int s : {6, 7}) {
            t.push_back({"srv_glu_f16_wg", W_F16, true, G4_GEMM_WGMMA, M, s});
            t.push_back({"srv_glu_q4_mma", W_Q4, true, G4_GEMM_MMA, M, s});
            t.push_back({"srv_glu_q4_wg_d1", W_Q4, true, G4_GEMM_WGMMA, M, s, 0, 0, 1});
            t.push_back({"srv_glu_q4_wg_d2", W_Q4, true, G4_GEMM_WGMMA, M, s, 0, 0, 2});
            t.push_back({"srv_glu_q4_wg_d3", W_Q4, true, G4_GEMM_WGMMA, M, s, 0, 0, 3});
        }
    }
    t.push_back({"gemm_f16_wgmma", W_F16, false, G4_GEMM_WGMMA, 4096, 6});
    t.push_back({"gemm_f16_mma", W_F16, false, G4_GEMM_MMA, 4096, 6});
    // the 16k-token prompt (issue 22): the MLP shapes of the wide layers and q/o of the full ones
    for (int s : {1, 5, 9}) {
        t.push_back({"gemm_f16_wgmma", W_F16, false, G4_GEMM_WGMMA, 16000, s});
        t.push_back({"gemm_q4_wgmma", W_Q4, false, G4_GEMM_WGMMA, 16000, s});
    }
    t.push_back({"glu_f16_wgmma", W_F16, true, G4_GEMM_WGMMA, 16000, 7});
    t.push_back({"glu_q4_wgmma", W_Q4, true, G4_GEMM_WGMMA, 16000, 7});
    // the towers: vision at 2,304 patches (one 768x768 image), audio at 750 frames (30 s)
    for (int s : {14, 15, 17}) {
        t.push_back({"gemm_f16_wgmma", W_F16, false, G4_GEMM_WGMMA, 2304, s});
        t.push_back({"gemm_f16_mma", W_F16, false, G4_GEMM_MMA, 2304, s});
    }
    t.push_back({"glu_f16_wgmma", W_F16, true, G4_GEMM_WGMMA, 2304, 16});
    t.push_back({"glu_f16_mma", W_F16, true, G4_GEMM_MMA, 2304, 16});
    for (int s : {18, 19, 20, 21}) {
        t.push_back({"gemm_f16_wgmma", W_F16, false, G4_GEMM_WGMMA, 750, s});
        t.push_back({"gemm_f16_mma", W_F16, false, G4_GEMM_MMA, 750, s});
    }
    return t;
}

// The decode MLP block of one token (issue 30 stage 2, kernels/persist_mlp.cuh) as ONE
// persistent launch ("ours") against the two launches it replaces in the decode step, the fused
// gate/up GEMV then the down GEMV ("base": both through AUTO, PDL in the same graph), E2B's two
// widths. Both read x (the engine's form adds the add-norm prologue to both). Bytes: x, mlp
// written and read, y, the three Q4 weights.
struct pm_problem {
    int H, F, copies, rc;
    std::vector<__half *> x, mlp, y;
    std::vector<g4_q4_weight> g, u, d;
    void *ws;
    size_t ws_bytes;
};

double pm_bytes(int H, int F) {
    return 2.0 * H * 2 + 2.0 * F * 2 + 3.0 * H * F * (0.5 + 1.0 / 16 + 1.0 / 64);
}

void launch_persist(void *ctx, int rep, void *stream) {
    pm_problem *p = (pm_problem *)ctx;
    const int c = rep % p->copies;
    const int rc =
        g4_persist_mlp_q4(p->y[c], G4_GEMM_Y_F16, nullptr, p->mlp[c], p->x[c], nullptr, &p->g[c],
                          &p->u[c], &p->d[c], p->ws, p->ws_bytes, (cudaStream_t)stream);
    if (rc) p->rc = rc;
}

void launch_pair(void *ctx, int rep, void *stream) {
    pm_problem *p = (pm_problem *)ctx;
    const int c = rep % p->copies;
    const cudaStream_t s = (cudaStream_t)stream;
    int rc = g4_gemm_q4_gelu_mul(p->mlp[c], p->x[c], &p->g[c], &p->u[c], 1, G4_GEMM_AUTO, s);
    if (!rc)
        rc = g4_gemm_q4(p->y[c], p->mlp[c], &p->d[c], nullptr, 1, G4_GEMM_Y_F16, G4_GEMM_AUTO, s);
    if (rc) p->rc = rc;
}

// A block op's row: one trial launch (on the legacy stream: errors show here), then the op and
// the same work as separate launches, each graph-replayed over the problem's copies (P: rc,
// copies). 1 with row filled, 0 when the op failed (said on stderr).
template <class P>
int block_row(g4_kbench_row *row, P *p, g4_kbench_launch_on ours, g4_kbench_launch_on apart,
              const char *apart_name, double bytes, double flops, int reps) {
    G4_CUDA_CHECK(cudaDeviceSynchronize());
    ours(p, 0, nullptr);
    G4_CUDA_CHECK(cudaDeviceSynchronize());
    if (p->rc != G4_OK) {
        fprintf(stderr, "bench %s %s: skipped: %s\n", row->op, row->shape, g4_error());
        return 0;
    }
    const int per_graph = p->copies < 8 ? 8 : p->copies;
    row->ours = g4_kbench_run_graph(ours, p, per_graph, 2, reps);
    row->base = g4_kbench_run_graph(apart, p, per_graph, 2, reps);
    snprintf(row->base_name, sizeof row->base_name, "%s", apart_name);
    row->bytes = bytes, row->flops = flops;
    if (p->rc != G4_OK) {
        fprintf(stderr, "bench %s %s: %s\n", row->op, row->shape, g4_error());
        return 0;
    }
    return 1;
}

int bench_persist(const char *filter, int reps, int l2, g4_kbench_row *rows, int max) {
    int n = 0;
    for (int F : {6144, 12288}) {
        const int H = 1536;
        // the persistent launch against the same pair of launches (persist_mlp.cu)
        g4_kbench_row row;
        memset(&row, 0, sizeof row);
        int grid, u1, u2, s2;
        g4_persist_mlp_plan(H, F, &grid, &u1, &u2, &s2);
        snprintf(row.op, sizeof row.op, "persist_mlp_q4");
        snprintf(row.shape, sizeof row.shape, "M=1 H=%d ffn=%d grid %d units %d+%d chunks %d", H, F,
                 grid, u1, u2, s2);
        if (filter && !strstr(row.op, filter) && !strstr(row.shape, filter)) continue;
        if (n >= max) break;
        pm_problem p;
        p.H = H, p.F = F, p.rc = G4_OK;
        p.copies = (int)((2.0 * l2 + pm_bytes(H, F) - 1) / pm_bytes(H, F));
        p.copies = p.copies < 1 ? 1 : p.copies > 64 ? 64 : p.copies;
        for (int c = 0; c < p.copies; c++) {
            const uint32_t seed = 0x9e3779b9u * (uint32_t)(c + 1) + (uint32_t)F;
            p.x.push_back(rand_f16((size_t)H, seed, 0.05f, 1.0f));
            p.mlp.push_back((__half *)dalloc((size_t)F * 2));
            p.y.push_back((__half *)dalloc((size_t)H * 2));
            p.g.push_back(rand_q4(F, H, seed ^ 1u));
            p.u.push_back(rand_q4(F, H, seed ^ 2u));
            p.d.push_back(rand_q4(H, F, seed ^ 3u));
        }
        p.ws_bytes = g4_persist_mlp_workspace(H, F);
        p.ws = dalloc(p.ws_bytes);
        G4_CUDA_CHECK(cudaMemset(p.ws, 0, p.ws_bytes));
        if (block_row(&row, &p, launch_persist, launch_pair, "glu+down (2 launches)",
                      pm_bytes(H, F), 2.0 * 3.0 * H * F, reps))
            rows[n++] = row;
        for (int c = 0; c < p.copies; c++) {
            G4_CUDA_CHECK(cudaFree(p.x[c]));
            G4_CUDA_CHECK(cudaFree(p.mlp[c]));
            G4_CUDA_CHECK(cudaFree(p.y[c]));
            g4_q4_weight_free(&p.g[c]);
            g4_q4_weight_free(&p.u[c]);
            g4_q4_weight_free(&p.d[c]);
        }
        G4_CUDA_CHECK(cudaFree(p.ws));
    }
    return n;
}

// The decode per-layer-input block of one token (issue 30, kernels/ple_block.cuh) as ONE
// launch of thread-block clusters ("ours") against the two launches it replaces in the decode
// step ("base", PDL in the same graph): the gate GEMV with its add-norm prologue and PLE
// multiplier, then the projection GEMV (AUTO). Both in the engine's form (the add-norm: h_in,
// r -> h_out, x). A row for Q4 weights and one for fp16. Bytes: h_in, h_out (f32), r, x, mul, pg
// twice, y, the two weights.
struct pb_problem {
    int H, P, copies, rc;
    bool f16;
    std::vector<float *> hi, ho;
    std::vector<__half *> r, w, nw, x, mul, pg, y, gh, ph; // (gh, ph: fp16 weights)
    std::vector<g4_q4_weight> g, pj;
};

double pb_bytes(int H, int P, bool f16) {
    return 2.0 * H * 4 + 3.0 * H * 2 + 3.0 * P * 2 +
           2.0 * H * P * (f16 ? 2.0 : 0.5 + 1.0 / 16 + 1.0 / 64);
}

g4_gemv_norm pb_norm(pb_problem *p, int c, bool with_mul) {
    g4_gemv_norm a;
    memset(&a, 0, sizeof a);
    a.h_in = p->hi[c], a.h_out = p->ho[c], a.r = p->r[c], a.w = p->w[c], a.next_w = p->nw[c];
    a.x_out = p->x[c], a.eps = 1e-6f, a.next_norm = 1;
    if (with_mul) a.mul = p->mul[c], a.ldm = p->P;
    return a;
}

void launch_ple_block(void *ctx, int rep, void *stream) {
    pb_problem *p = (pb_problem *)ctx;
    const int c = rep % p->copies;
    const g4_gemv_norm a = pb_norm(p, c, false);
    const cudaStream_t s = (cudaStream_t)stream;
    const int rc = p->f16 ? g4_ple_block_f16(p->y[c], G4_GEMM_Y_F16, p->pg[c], nullptr, &a,
                                             p->mul[c], p->gh[c], p->ph[c], p->H, p->P, s)
                          : g4_ple_block_q4(p->y[c], G4_GEMM_Y_F16, p->pg[c], nullptr, &a,
                                            p->mul[c], &p->g[c], &p->pj[c], s);
    if (rc) p->rc = rc;
}

void launch_ple_pair(void *ctx, int rep, void *stream) {
    pb_problem *p = (pb_problem *)ctx;
    const int c = rep % p->copies;
    const cudaStream_t s = (cudaStream_t)stream;
    const g4_gemv_norm a = pb_norm(p, c, true);
    int rc;
    if (p->f16) {
        rc = g4_gemv_f16_add_norm(p->pg[c], &a, p->gh[c], nullptr, nullptr, 1, p->P, p->H,
                                  G4_GEMM_Y_F16, s);
        if (!rc)
            rc = g4_gemm_f16(p->y[c], p->pg[c], p->ph[c], nullptr, 1, p->H, p->P, G4_GEMM_Y_F16,
                             G4_GEMM_AUTO, s);
    } else {
        rc = g4_gemv_q4_add_norm(p->pg[c], &a, &p->g[c], nullptr, nullptr, 1, G4_GEMM_Y_F16, s);
        if (!rc)
            rc = g4_gemm_q4(p->y[c], p->pg[c], &p->pj[c], nullptr, 1, G4_GEMM_Y_F16, G4_GEMM_AUTO,
                            s);
    }
    if (rc) p->rc = rc;
}

int bench_ple_kind(const char *filter, int reps, int l2, g4_kbench_row *rows, int max, bool f16) {
    int n = 0;
    const int H = 1536, P = 256; // E2B
    g4_kbench_row row;
    memset(&row, 0, sizeof row);
    int clusters, s1, ft2;
    g4_ple_block_plan(H, P, f16, &clusters, &s1, &ft2);
    snprintf(row.op, sizeof row.op, f16 ? "ple_block_f16" : "ple_block_q4");
    if (f16)
        snprintf(row.shape, sizeof row.shape,
                 "M=1 H=%d P=%d clusters %d gate row phases %d proj units %d", H, P, clusters, s1,
                 ft2);
    else
        snprintf(row.shape, sizeof row.shape,
                 "M=1 H=%d P=%d clusters %d gate split %d proj tiles %d", H, P, clusters, s1, ft2);
    if (filter && !strstr(row.op, filter) && !strstr(row.shape, filter)) return 0;
    if (max < 1) return 0;
    pb_problem p;
    p.H = H, p.P = P, p.rc = G4_OK, p.f16 = f16;
    const double bytes = pb_bytes(H, P, f16);
    p.copies = (int)((2.0 * l2 + bytes - 1) / bytes);
    p.copies = p.copies < 1 ? 1 : p.copies > 64 ? 64 : p.copies;
    for (int c = 0; c < p.copies; c++) {
        const uint32_t seed = 0x7f4a7c15u * (uint32_t)(c + 1) + (uint32_t)P;
        p.hi.push_back((float *)dalloc((size_t)H * 4));
        G4_CUDA_CHECK(cudaMemset(p.hi[c], 0, (size_t)H * 4));
        p.ho.push_back((float *)dalloc((size_t)H * 4));
        p.r.push_back(rand_f16((size_t)H, seed, -1.0f, 1.0f));
        p.w.push_back(rand_f16((size_t)H, seed ^ 4u, 0.5f, 1.5f));
        p.nw.push_back(rand_f16((size_t)H, seed ^ 5u, 0.05f, 0.5f));
        p.mul.push_back(rand_f16((size_t)P, seed ^ 6u, -2.0f, 2.0f));
        p.x.push_back((__half *)dalloc((size_t)H * 2));
        p.pg.push_back((__half *)dalloc((size_t)P * 2));
        p.y.push_back((__half *)dalloc((size_t)H * 2));
        if (f16) {
            p.gh.push_back(rand_f16((size_t)H * P, seed ^ 1u, -0.05f, 0.05f));
            p.ph.push_back(rand_f16((size_t)P * H, seed ^ 2u, -0.05f, 0.05f));
        } else {
            p.g.push_back(rand_q4(P, H, seed ^ 1u));
            p.pj.push_back(rand_q4(H, P, seed ^ 2u));
        }
    }
    if (block_row(&row, &p, launch_ple_block, launch_ple_pair, "gate+proj (2 launches)", bytes,
                  2.0 * 2.0 * H * P, reps))
        rows[n++] = row;
    for (int c = 0; c < p.copies; c++) {
        for (void *q :
             {(void *)p.hi[c], (void *)p.ho[c], (void *)p.r[c], (void *)p.w[c], (void *)p.nw[c],
              (void *)p.mul[c], (void *)p.x[c], (void *)p.pg[c], (void *)p.y[c]})
            G4_CUDA_CHECK(cudaFree(q));
        if (f16) {
            G4_CUDA_CHECK(cudaFree(p.gh[c]));
            G4_CUDA_CHECK(cudaFree(p.ph[c]));
        } else {
            g4_q4_weight_free(&p.g[c]);
            g4_q4_weight_free(&p.pj[c]);
        }
    }
    return n;
}

// The Q4 row, then the fp16 row beside it.
int bench_ple(const char *filter, int reps, int l2, g4_kbench_row *rows, int max) {
    int n = bench_ple_kind(filter, reps, l2, rows, max, false);
    n += bench_ple_kind(filter, reps, l2, rows + n, max - n, true);
    return n;
}

// Issue 29: where the third-design Q4 GEMV's time goes (gemv_q4_v3_kernel's PROBE forms,
// g4_gemm_gemv3_probe). Each case forced to the third design (q, o and down_wide run the
// streaming kernel by default: the plan walk is the third design's gemv_plan there), timed as
// today's kernel ("full") and as its three probe forms, one after another on the same buffers in
// the same run: "loads" (every load, no dequantize + MMA), "math" (no weight loads, dequantize
// + MMA), "shell" (neither: launch, wait, x prefetch, step walk, flush, stores); the probe forms'
// outputs are meaningless and not checked (their shapes say "unchecked"; the full form is the
// kernel test_cuda_gemm checks). Weights rotated past the L2 ("rotated") and L2-resident
// ("l2hot", copy 0 every launch; not the LM head: 226 MB), x L2-resident in both (as the decode
// step's). Op gemv_q4_probe; a probe row's base is the full form's time in the same run (ratio =
// full / probe). All of them whenever the filter holds "probe" (and only then: the gemv stage's
// --filter gemv leaves them out).
int bench_gemvprobe(int reps, int l2, g4_kbench_row *rows, int max) {
    const struct {
        int shape;
        bool glu;
        int M;
    } cases[] = {{12, false, 1}, {7, false, 1},  {7, false, 8}, {6, true, 1},  {7, true, 1},
                 {7, true, 8},   {13, false, 1}, {0, false, 1}, {4, false, 1}, {9, false, 1}};
    static const char *form[4] = {"full", "loads(unchecked)", "math(unchecked)",
                                  "shell(unchecked)"};
    int n = 0;
    for (const auto &cs : cases) {
        const e2b_shape &sh = SHAPES[cs.shape];
        char base_shape[80];
        snprintf(base_shape, sizeof base_shape, "M=%d N=%d K=%d %s%s v3", cs.M, sh.N, sh.K, sh.name,
                 cs.glu ? " glu" : "");
        if (n + 8 > max) break;
        problem p;
        p.r = brow{"gemv_q4_probe", W_Q4, cs.glu, G4_GEMM_GEMV, cs.M, cs.shape, 0, 0, 0, true};
        p.M = cs.M, p.N = sh.N, p.K = sh.K, p.bl = nullptr, p.blas = nullptr, p.rc = G4_OK;
        p.copies = (int)((2.0 * l2 + row_bytes(p) - 1) / row_bytes(p));
        p.copies = p.copies < 1 ? 1 : p.copies > 1024 ? 1024 : p.copies;
        for (int c = 0; c < p.copies; c++) { // (x: copy 0 only, xhot; y: one a copy)
            const uint32_t seed = 0x9e3779b9u * (uint32_t)(c + 1) + (uint32_t)cs.shape;
            p.x.push_back(c ? nullptr : rand_f16((size_t)p.M * p.K, seed, 0.05f, 1.0f));
            p.y.push_back((__half *)dalloc((size_t)p.M * p.N * 2));
            p.q.push_back(rand_q4(p.N, p.K, seed ^ 3u));
            if (cs.glu) p.qu.push_back(rand_q4(p.N, p.K, seed ^ 4u));
        }
        G4_CUDA_CHECK(cudaDeviceSynchronize());
        force_design(W_Q4, 3);
        int rc = run_ours(&p, 0, 0);
        if (rc == G4_OK && last_design(W_Q4) != 3)
            rc = g4_fail(G4_EUSER, "ran design %d, not the third", last_design(W_Q4));
        if (rc != G4_OK)
            fprintf(stderr, "bench gemv_q4_probe %s: skipped: %s\n", base_shape, g4_error());
        for (int hot = 0; rc == G4_OK && hot < 2; hot++) {
            if (hot && cs.shape == 12) break; // (the LM head's 226 MB cannot stay in L2)
            const int per_graph = p.copies < 8 ? 8 : p.copies;
            g4_kbench_time t[4];
            for (int f = 0; f < 4; f++) { // read at launch (graph capture) time
                G4_CUDA_CHECK(cudaDeviceSynchronize());
                if (g4_gemm_gemv3_probe(f) != G4_OK) abort(); // (f in 0..3: cannot fail)
                t[f] = g4_kbench_run_graph(hot ? launch_hot : launch_ours, &p, per_graph, 2, reps);
            }
            if (g4_gemm_gemv3_probe(0) != G4_OK) abort();
            if (p.rc != G4_OK) {
                fprintf(stderr, "bench gemv_q4_probe %s: %s\n", base_shape, g4_error());
                break;
            }
            for (int f = 0; f < 4; f++) {
                g4_kbench_row &row = rows[n++];
                memset(&row, 0, sizeof row);
                snprintf(row.op, sizeof row.op, "gemv_q4_probe");
                snprintf(row.shape, sizeof row.shape, "%s %s %s", base_shape, form[f],
                         hot ? "l2hot" : "rotated");
                row.ours = t[f];
                if (f) {
                    row.base = t[0];
                    snprintf(row.base_name, sizeof row.base_name, "full");
                }
                // the op's bytes (GB/s as if the full op's bytes moved: meaningful for full and
                // loads) and FLOPs (meaningful for full and math)
                row.bytes = row_bytes(p);
                row.flops = 2.0 * p.M * p.N * p.K * (cs.glu ? 2 : 1);
            }
        }
        force_design(W_Q4, -1);
        for (int c = 0; c < p.copies; c++) {
            if (p.x[c]) G4_CUDA_CHECK(cudaFree(p.x[c]));
            G4_CUDA_CHECK(cudaFree(p.y[c]));
        }
        for (auto &q : p.q) g4_q4_weight_free(&q);
        for (auto &q : p.qu) g4_q4_weight_free(&q);
    }
    return n;
}

} // namespace

extern "C" int g4_kbench_gemm(const char *filter, int reps, g4_kbench_row *rows, int max) {
    if (filter && strstr(filter, "probe")) { // (the probe rows alone)
        int l2 = 0;
        G4_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
        return bench_gemvprobe(reps, l2, rows, max);
    }
    const std::vector<brow> t = filter && strstr(filter, "xover") ? sweep() : table();
    const char *why = "";
    const g4_cublas_api *bl = g4_cublas(&why, nullptr);
    if (!bl) fprintf(stderr, "bench --kernels: cublas: %s: the GEMM rows have no baseline\n", why);
    cublasHandle_t blas = nullptr;
    // A fixed workspace, so cuBLAS allocates nothing while a graph is being captured.
    const size_t ws_bytes = 64u << 20;
    void *ws = nullptr;
    if (bl) {
        CUBLAS_CHECK(bl->cublasCreate_v2(&blas));
        ws = dalloc(ws_bytes);
        CUBLAS_CHECK(bl->cublasSetWorkspace_v2(blas, ws, ws_bytes));
    }
    int l2 = 0;
    G4_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    int n = 0;
    for (size_t i = 0; i < t.size() && n < max; i++) {
        const brow &r = t[i];
        const e2b_shape &sh = SHAPES[r.shape];
        g4_kbench_row row;
        memset(&row, 0, sizeof row);
        snprintf(row.op, sizeof row.op, "%s", r.op);
        snprintf(row.shape, sizeof row.shape, "M=%d N=%d K=%d %s", r.M, sh.N, sh.K, sh.name);
        if (r.algo == G4_GEMM_WGMMA) { // the configuration the row ran (forced or AUTO's)
            int bn = r.bn, split = r.split;
            if (!bn) g4_gemm_wgmma_plan(r.M, sh.N, sh.K, r.glu, r.w == W_Q4, &bn, &split);
            const size_t l = strlen(row.shape);
            snprintf(row.shape + l, sizeof row.shape - l, " bn%d%s", bn,
                     split > 1 ? (split == 2 ? " s2" : split == 4 ? " s4" : " s8") : "");
            if (r.depth) { // the depth the kernel runs (3 runs as 2 on 192/256-wide tiles)
                const size_t e = strlen(row.shape);
                snprintf(row.shape + e, sizeof row.shape - e, " d%d",
                         r.depth == 3 && bn != 128 ? 2 : r.depth);
            }
        }
        if (r.algo == G4_GEMM_SKINNY) { // the K split over the cluster
            const size_t l = strlen(row.shape);
            snprintf(row.shape + l, sizeof row.shape - l, " s%d",
                     g4_gemm_skinny_plan(r.M, sh.N, sh.K, r.glu));
        }
        if (filter && !strstr(row.op, filter) && !strstr(row.shape, filter)) continue;

        problem p;
        p.r = r;
        p.M = r.M;
        p.N = sh.N;
        p.K = sh.K;
        p.bl = bl;
        p.blas = blas;
        p.rc = G4_OK;
        // Copies so one rotation of the op's own bytes passes 2x the L2 (a Q4 k/v projection is
        // 0.23 MB: g4_kbench_copies' cap of 64 would leave it in L2, so this allows 1024).
        p.copies = (int)((2.0 * l2 + row_bytes(p) - 1) / row_bytes(p));
        p.copies = p.copies < 1 ? 1 : p.copies > 1024 ? 1024 : p.copies;
        for (int c = 0; c < p.copies; c++) {
            const uint32_t seed = 0x1234567u * (uint32_t)(c + 1) + (uint32_t)i;
            p.x.push_back(rand_f16((size_t)p.M * p.K, seed, 0.05f, 1.0f));
            p.y.push_back((__half *)dalloc((size_t)p.M * p.N * 2));
            p.w.push_back(rand_f16((size_t)p.K * p.N, seed ^ 1u, 0.01f, 0.25f));
            p.wu.push_back(r.glu ? rand_f16((size_t)p.K * p.N, seed ^ 2u, 0.01f, 0.25f) : nullptr);
            if (r.w == W_Q4) {
                p.q.push_back(rand_q4(p.N, p.K, seed ^ 3u));
                if (r.glu) p.qu.push_back(rand_q4(p.N, p.K, seed ^ 4u));
            }
        }
        if (r.an) { // (h_in zero, as in the ple_block rows: the cost does not depend on it)
            const uint32_t seed = 0x2545f491u + (uint32_t)i;
            p.hi = (float *)dalloc((size_t)p.K * 4);
            G4_CUDA_CHECK(cudaMemset(p.hi, 0, (size_t)p.K * 4));
            p.ho = (float *)dalloc((size_t)p.K * 4);
            p.res = rand_f16((size_t)p.K, seed, -1.0f, 1.0f);
            p.nw = rand_f16((size_t)p.K, seed ^ 1u, 0.5f, 1.5f);
            p.nnw = rand_f16((size_t)p.K, seed ^ 2u, 0.05f, 0.5f);
            p.xo = (__half *)dalloc((size_t)p.K * 2);
            p.mul = rand_f16((size_t)p.N, seed ^ 3u, -2.0f, 2.0f);
        }
        G4_CUDA_CHECK(cudaDeviceSynchronize());
        if (r.bn) g4_gemm_wgmma_force(r.bn, r.split, 0); // read at launch (graph capture) time
        if (r.depth) g4_gemm_wgmma_q4_depth(r.depth);
        if (r.f16v) g4_gemm_gemv_f16_version(r.f16v);
        int trial = run_ours(&p, 0, 0);
        if (r.an && trial == G4_OK) { // the base runs the design the add-norm form ran
            const int d = last_design(r.w);
            force_design(r.w, d);
            trial = run_ours(&p, 0, 0, false);
            const int db = last_design(r.w);
            const size_t l = strlen(row.shape);
            snprintf(row.shape + l, sizeof row.shape - l, "%s %s%s%s", r.an == 2 ? " mul" : "",
                     design_name(r.w, d), db != d ? " base " : "",
                     db != d ? design_name(r.w, db) : "");
        }
        if (trial == G4_OK && !r.an && r.w == W_Q4 && r.algo == G4_GEMM_GEMV) {
            // the Q4 GEMV design the row ran (the per-shape choice, or G4_GEMV's)
            const size_t l = strlen(row.shape);
            snprintf(row.shape + l, sizeof row.shape - l, " %s",
                     design_name(r.w, last_design(r.w)));
        }
        if (trial != G4_OK) {
            fprintf(stderr, "bench %s %s: skipped: %s\n", row.op, row.shape, g4_error());
        } else {
            int pl[4];
            if (r.f16v == 2) { // the plan the row ran (G4_GVM_* move it), or the fallback
                const size_t l = strlen(row.shape);
                if (g4_gemm_gemv_f16_mma_plan(r.M, sh.N, sh.K, r.glu, pl))
                    snprintf(row.shape + l, sizeof row.shape - l, " S%d CS%d g%d", pl[0], pl[1],
                             pl[3]);
                else
                    snprintf(row.shape + l, sizeof row.shape - l, " cuda-core");
            }
            // Enough launches per graph replay that a replay lasts well past launch overhead.
            const int per_graph = p.copies < 8 ? 8 : p.copies;
            row.ours =
                g4_kbench_run_graph(r.hot ? launch_hot : launch_ours, &p, per_graph, 2, reps);
            if (r.hot) {
                row.base = g4_kbench_run_graph(launch_ours, &p, per_graph, 2, reps);
                snprintf(row.base_name, sizeof row.base_name, "rotated");
            } else if (r.an) {
                row.base = g4_kbench_run_graph(launch_plain, &p, per_graph, 2, reps);
                snprintf(row.base_name, sizeof row.base_name, "plain gemv");
            } else if (bl) {
                row.base = g4_kbench_run_graph(launch_blas, &p, per_graph, 2, reps);
                snprintf(row.base_name, sizeof row.base_name, "%s",
                         r.glu         ? "cublas x2"
                         : r.w == W_Q4 ? "cublas16"
                                       : "cublas");
            } else { // (base.reps == 0: the table prints the name and no time)
                snprintf(row.base_name, sizeof row.base_name, "cublas: not loaded");
            }
            row.bytes = row_bytes(p);
            row.flops = 2.0 * p.M * p.N * p.K * (r.glu ? 2 : 1);
            if (p.rc != G4_OK)
                fprintf(stderr, "bench %s %s: %s\n", row.op, row.shape, g4_error());
            else
                rows[n++] = row;
        }
        if (r.bn) g4_gemm_wgmma_force(0, 0, 0);
        if (r.depth) g4_gemm_wgmma_q4_depth(0);
        if (r.f16v) g4_gemm_gemv_f16_version(-1);
        if (r.an) force_design(r.w, -1);
        for (void *q : {(void *)p.hi, (void *)p.ho, (void *)p.res, (void *)p.nw, (void *)p.nnw,
                        (void *)p.xo, (void *)p.mul})
            if (q) G4_CUDA_CHECK(cudaFree(q));
        for (int c = 0; c < p.copies; c++) {
            G4_CUDA_CHECK(cudaFree(p.x[c]));
            G4_CUDA_CHECK(cudaFree(p.y[c]));
            G4_CUDA_CHECK(cudaFree(p.w[c]));
            if (p.wu[c]) G4_CUDA_CHECK(cudaFree(p.wu[c]));
        }
        for (auto &q : p.q) g4_q4_weight_free(&q);
        for (auto &q : p.qu) g4_q4_weight_free(&q);
    }
    if (!(filter && strstr(filter, "xover")))
        n += bench_persist(filter, reps, l2, rows + n, max - n);
    if (!(filter && strstr(filter, "xover"))) n += bench_ple(filter, reps, l2, rows + n, max - n);
    if (bl) {
        G4_CUDA_CHECK(cudaFree(ws));
        CUBLAS_CHECK(bl->cublasDestroy_v2(blas));
    }
    return n;
}
