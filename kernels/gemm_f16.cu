// gemm_f16.cu: fp16 GEMM (mma.sync) and GEMV (decode), their launchers and the public entries
// of gemm_f16.cuh; the Hopper wgmma path lives in gemm_f16_wgmma.cu.
//
// y[M, N] = x[M, K] @ W[K, N]: x fp16 row-major, W fp16 [K, N] row-major (the package layout),
// fp32 accumulation, epilogue by g4_gemm_epi. Test: tests/test_cuda_gemm.c --op f16;
// bench: g4cu bench --kernels --filter gemm_f16.
#include <cooperative_groups.h>

#include "kernels/gemm_common.cuh"
#include "kernels/gemv_f16_mma.h"
#include "kernels/pdl.cuh"

namespace cg = cooperative_groups;

extern "C" const char *g4_gemm_f16_supported(int N, int K) {
    if (N < 8 || N % 8 || K < 8 || K % 8)
        return "fp16 weights [K, N] with K and N positive multiples of 8 (gemm_f16.cu)";
    return NULL;
}

namespace g4k {

// --- shared host helpers (declared in gemm_common.cuh) ----------------------------------------

bool prefill_mma_forced() {
    static int cache = -1;
    return g4_cuda_env_is(&cache, "G4_GEMM_PREFILL", "mma") != 0;
}

int env_int(const char *name, int dflt, int lo, int hi) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    const int x = atoi(v);
    return x < lo || x > hi ? dflt : x;
}

bool skinny_on() {
    static int cache = -1;
    return g4_cuda_env_is(&cache, "G4_SKINNY", "0") == 0;
}

// The fewest rows the skinny path takes for fp16 weights under AUTO: 4, where it measured faster
// than the fp16 GEMV (H200, full-size E2B, the batch step: 4 rows 4.05 -> 3.75 ms, 8 rows 6.47
// -> 3.78 ms; 2 rows 3.36 -> 3.73 ms, slower: bench/RESULTS.md, eighth session).
// G4_SKINNY_F16_MIN=2..9 in the environment moves it (read once; 9: the GEMV up to 8 rows).
int skinny_f16_min() {
    static const int v = env_int("G4_SKINNY_F16_MIN", 4, 2, 9);
    return v;
}

namespace {
int g_skinny_split = 0; // g4_gemm_skinny_force's (0: automatic)
} // namespace

int skinny_split(long ctas, int KT) {
    if (g_skinny_split) return g_skinny_split;
    int S = 1;
    while (S < 8 && ctas * S * 2 <= 2L * num_sms() && KT / (S * 2) >= 3) S *= 2;
    return S;
}

namespace {
struct tuned_entry {
    int q4, fused, N, K, M;
    g4_gemm_algo algo;
    int bn, split;
};
const tuned_entry TUNED[] = {
#include "kernels/gemm_tuned.inc"
};
} // namespace

prefill_plan plan_prefill(int M, int N, int K, bool fused, bool q4) {
    static int use_table = -1;
    if (use_table < 0) {
        static int off = -1;
        use_table = num_sms() == G4_GEMM_TUNED_SMS && !g4_cuda_env_is(&off, "G4_GEMM_TUNED", "0");
    }
    const prefill_plan model = {G4_GEMM_WGMMA, 0, 0};
    if (!use_table) return model;
    // The entry nearest in log2, if it is within a factor of 2: further out (a 16k-token prompt
    // against the sweep's largest M, 4096) the measured choice need not hold and the model's
    // does better (bench/NOTES.md).
    const tuned_entry *near = nullptr;
    double near_d = 1.0;
    for (const tuned_entry &e : TUNED) {
        if (e.N != N || e.K != K || e.q4 != (int)q4 || e.fused != (int)fused) continue;
        const double d = fabs(log2((double)M / e.M));
        if (d <= near_d) near = &e, near_d = d;
    }
    return near ? prefill_plan{near->algo, near->bn, near->split} : model;
}

int check_common(const char *who, const void *y, const void *x, const void *bias, int M, int N,
                 int K, g4_gemm_epi epi) {
    if (!y || !x) return g4_fail(G4_EUSER, "%s: NULL x or y", who);
    if (M < 1 || M > (1 << 21)) // grid.y = M / 64 must stay within 65535
        return g4_fail(G4_EUSER, "%s: M = %d tokens, expected 1 .. 2097152", who, M);
    const char *why = g4_gemm_f16_supported(N, K);
    if (why) return g4_fail(G4_EUSER, "%s: N = %d, K = %d: the GEMM takes %s", who, N, K, why);
    if ((uintptr_t)x % 16) return g4_fail(G4_EUSER, "%s: x at %p is not 16-byte aligned", who, x);
    if ((int)epi < G4_GEMM_Y_F16 || (int)epi > G4_GEMM_Y_F16_ADD)
        return g4_fail(G4_EUSER, "%s: epilogue %d, expected 0..3 (g4_gemm_epi)", who, (int)epi);
    const int yal = (epi == G4_GEMM_Y_F32 || epi == G4_GEMM_Y_F32_ADD) ? 8 : 4;
    if ((uintptr_t)y % yal)
        return g4_fail(G4_EUSER, "%s: y at %p is not %d-byte aligned", who, y, yal);
    if ((uintptr_t)bias % 2)
        return g4_fail(G4_EUSER, "%s: bias at %p is not 2-byte aligned", who, bias);
    return G4_OK;
}

int norm_operands(const char *who, const g4_gemv_norm *a, const void *y, const void *bias, int M,
                  int N, int K, g4_gemm_epi epi, bool gated, gv_pro *out) {
    const char *why = g4_gemv_add_norm_supported(M, K);
    if (why) return g4_fail(G4_EUSER, "%s: M %d, K %d: takes %s", who, M, K, why);
    auto al16 = [](const void *p) { return ((uintptr_t)p & 15) == 0; };
    if (!a || !a->h_in || !a->h_out || !a->r || !a->x_out || a->h_in == a->h_out ||
        !al16(a->h_in) || !al16(a->h_out) || !al16(a->r) || !al16(a->x_out) ||
        (a->w && !al16(a->w)) || (a->next_w && !al16(a->next_w)))
        return g4_fail(G4_EUSER,
                       "%s: h_in, h_out, r and x_out 16-byte aligned and given, h_out not h_in; "
                       "norm weights 16-byte aligned",
                       who);
    if ((gated || a->mul) && (bias || epi != G4_GEMM_Y_F16 || (gated && a->mul)))
        return g4_fail(G4_EUSER,
                       "%s: an up weight or a multiplier (not both) takes fp16 y and "
                       "no bias",
                       who);
    if (a->mul && (a->ldm < N || (uintptr_t)a->mul % 2))
        return g4_fail(G4_EUSER, "%s: multiplier ldm %d, expected >= N %d, 2-byte aligned", who,
                       a->ldm, N);
    const int rc = check_common(who, y, a->x_out, bias, M, N, K, epi);
    if (rc) return rc;
    *out = gv_pro{(const float *)a->h_in,
                  (float *)a->h_out,
                  (const __half *)a->r,
                  (const __half *)a->w,
                  (const __half *)a->scale,
                  (const __half *)a->next_w,
                  (__half *)a->x_out,
                  a->eps,
                  a->next_norm,
                  (const __half *)a->mul,
                  a->ldm};
    return G4_OK;
}

namespace {

// =============================================================================================
// MMA: mma.sync m16n8k16 GEMM. Block tile BM x 128 x 64 (BM = 128: 8 warps as 4 x 2; BM = 64:
// 4 warps as 2 x 2), warp tile 32 x 64, 4-stage cp.async pipeline.
//
// The 128 shared-memory columns of B are, for the plain GEMM, W[:, n0 .. n0 + 127] with
// n0 = 128 * blockIdx.x; for the fused gate/up GEMM, Wg[:, n0 .. n0 + 63] then
// Wu[:, n0 .. n0 + 63] with n0 = 64 * blockIdx.x. Warp column wn owns the n8 tiles
// col(j) = (j / 4) * 64 + wn * 32 + (j % 4) * 8, j = 0..7, so in the fused kernel tile j (gate)
// and tile j + 4 (up) are the same output columns in the same thread.
//
// The skinny path (issue 31's batched decode, 8 < M <= 64): the grid above has N / 128 CTAs
// (12..16 at the decoder's N = 1536..2048 on 132 SMs), too few to stream the weights at
// bandwidth, so K splits over a cluster of S CTAs (grid.z, skinny_split) reduced in rank order
// through distributed shared memory (splitk_emit), BM = 32 for M <= 32, launched with PDL
// (pdl.cuh: the wait is the first statement, no prologue; a no-op for the plain prefill launch).
// =============================================================================================
constexpr int MMA_BK = 64, MMA_BN = 128;

// Both prefill tile shapes use 96 KB of shared memory, so two blocks share an SM (BM = 128: 3
// stages of 32 KB; BM = 64: 4 stages of 24 KB). BM = 32 (the skinny path's, M <= 32: 2 warps as
// 1 x 2) 4 stages of 20 KB.
template <int BM> struct mma_tile {
    static constexpr int STAGES = BM == 128 ? 3 : 4;
    static constexpr int WARPS_M = BM / 32;
    static constexpr int THREADS = WARPS_M * 2 * 32;
    static constexpr int A_HALVES = BM * MMA_BK;     // [BM][64]
    static constexpr int B_HALVES = MMA_BK * MMA_BN; // [64][128]
    static constexpr int SMEM = STAGES * (A_HALVES + B_HALVES) * 2;
    static constexpr int NV = 2 * 8 * 4; // accumulators a thread
    static_assert(NV * THREADS * 4 <= SMEM, "split-K partials fit in the pipeline's memory");
};

// Swizzled offsets (in halves) of 16-byte chunk c of row r. A rows are 8 chunks (128 bytes), B
// rows 16 chunks (256 bytes); chunk c lands at c ^ (r % 8) (B: inside its half row), so the 8
// rows one ldmatrix phase reads at one logical chunk fall in 8 different 16-byte bank groups.
__device__ __forceinline__ int swz_a(int r, int c) {
    return r * 64 + ((c ^ (r & 7)) << 3);
}
__device__ __forceinline__ int swz_b(int r, int c) {
    return r * 128 + (((c & 8) | ((c ^ r) & 7)) << 3);
}

template <int BM, bool FUSED>
__global__ void __launch_bounds__(mma_tile<BM>::THREADS)
    gemm_f16_mma_kernel(void *y, const __half *__restrict__ x, const __half *__restrict__ w,
                        const __half *__restrict__ wu, const __half *__restrict__ bias, int M,
                        int N, int K, int epi) {
    using T = mma_tile<BM>;
    extern __shared__ __align__(128) uint8_t smem[];
    g4_pdl_wait();
    g4_pdl_trigger();
    __half *sA = (__half *)smem;               // [STAGES][BM][64], swizzled
    __half *sB = sA + T::STAGES * T::A_HALVES; // [STAGES][64][128], swizzled
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * (FUSED ? 64 : 128);
    const int KT = (K + MMA_BK - 1) / MMA_BK;
    // This CTA's k tiles: [kb, kb + nk) of split blockIdx.z of gridDim.z (the cluster rank).
    const int S = (int)gridDim.z, z = (int)blockIdx.z;
    const int kb = (int)((long long)KT * z / S), nk = (int)((long long)KT * (z + 1) / S) - kb;

    // Rows past M, inputs past K and columns past N are zero-filled (K, N multiples of 8, so a
    // 16-byte chunk is either all in or all out).
    auto load_stage = [&](int stage, int kt) {
        const int k0 = kt * MMA_BK;
        __half *a = sA + stage * T::A_HALVES;
#pragma unroll
        for (int i = 0; i < BM * 8 / T::THREADS; i++) {
            const int c = tid + i * T::THREADS, r = c >> 3, kc = c & 7;
            const int gm = m0 + r, gk = k0 + kc * 8;
            const bool ok = gm < M && gk < K;
            cp_async16(smem_u32(a + swz_a(r, kc)), ok ? x + (size_t)gm * K + gk : x, ok);
        }
        __half *b = sB + stage * T::B_HALVES;
#pragma unroll
        for (int i = 0; i < MMA_BK * 16 / T::THREADS; i++) {
            const int c = tid + i * T::THREADS, r = c >> 4, nc = c & 15;
            const __half *src = (FUSED && nc >= 8) ? wu : w;
            const int gn = FUSED ? n0 + (nc & 7) * 8 : n0 + nc * 8;
            const int gk = k0 + r;
            const bool ok = gk < K && gn < N;
            cp_async16(smem_u32(b + swz_b(r, nc)), ok ? src + (size_t)gk * N + gn : src, ok);
        }
    };

    float acc[2][8][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mi][j][i] = 0.0f;

#pragma unroll
    for (int s = 0; s < T::STAGES - 1; s++) {
        if (s < nk) load_stage(s, kb + s);
        cp_async_commit();
    }
    for (int it = 0; it < nk; it++) {
        cp_async_wait<T::STAGES - 2>(); // tile it has landed (this thread's copies)
        __syncthreads();                // ... and everyone's; stage it-1 is free again
        const int pf = it + T::STAGES - 1;
        if (pf < nk) load_stage(pf % T::STAGES, kb + pf);
        cp_async_commit();
        const __half *a = sA + (it % T::STAGES) * T::A_HALVES;
        const __half *b = sB + (it % T::STAGES) * T::B_HALVES;
#pragma unroll
        for (int kk = 0; kk < MMA_BK / 16; kk++) {
            uint32_t af[2][4], bf[8][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const int r = wm * 32 + mi * 16 + (lane & 15);
                ldsm_x4(af[mi], smem_u32(a + swz_a(r, kk * 2 + (lane >> 4))));
            }
#pragma unroll
            for (int jp = 0; jp < 4; jp++) { // n8 tiles 2 jp, 2 jp + 1 (16 adjacent columns)
                const int col = (jp >> 1) * 64 + wn * 32 + (jp & 1) * 16;
                const int r = kk * 16 + (lane & 15);
                uint32_t t4[4];
                ldsm_x4_t(t4, smem_u32(b + swz_b(r, (col >> 3) + (lane >> 4))));
                bf[2 * jp][0] = t4[0];
                bf[2 * jp][1] = t4[1];
                bf[2 * jp + 1][0] = t4[2];
                bf[2 * jp + 1][1] = t4[3];
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int j = 0; j < 8; j++) mma_16816(acc[mi][j], af[mi], bf[j][0], bf[j][1]);
        }
    }
    cp_async_wait<0>();

    // Unit u of E values: plain, acc[mi][j][2h + e] (u = (2 mi + h) * 8 + j: a column pair of one
    // row); fused, the gate then the up pair, acc[mi][j + 4 q][2h + e] (u = (2 mi + h) * 4 + j).
    constexpr int E = FUSED ? 4 : 2, JN = FUSED ? 4 : 8;
    float part[T::NV];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int j = 0; j < JN; j++)
#pragma unroll
                for (int q = 0; q < E / 2; q++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        part[((mi * 2 + h) * JN + j) * E + q * 2 + e] =
                            acc[mi][j + 4 * q][2 * h + e];
    const int g = lane >> 2, t = lane & 3;
    splitk_emit<T::NV, E>(part, (float *)smem, [&](int u, const float *v) {
        const int j = u % JN, h = (u / JN) & 1, mi = u / (2 * JN);
        const int row = m0 + wm * 32 + mi * 16 + g + 8 * h;
        if (row >= M) return;
        if constexpr (!FUSED) {
            const int col = n0 + (j >> 2) * 64 + wn * 32 + (j & 3) * 8 + 2 * t;
            if (col < N) store_pair(y, epi, bias, (size_t)row * N + col, col, v[0], v[1]);
        } else {
            const int col = n0 + wn * 32 + j * 8 + 2 * t;
            if (col < N)
                store_pair(y, G4_GEMM_Y_F16, nullptr, (size_t)row * N + col, col,
                           gelu_tanh(v[0]) * v[2], gelu_tanh(v[1]) * v[3]);
        }
    });
}

// Prefill (skinny false): the whole K per CTA, a plain launch, as measured before. Skinny: K
// split over a cluster of skinny_split CTAs, PDL.
template <int BM, bool FUSED>
void launch_mma_t(void *y, const __half *x, const __half *w, const __half *wu, const __half *bias,
                  int M, int N, int K, int epi, bool skinny, cudaStream_t stream) {
    using T = mma_tile<BM>;
    static bool smem_set = false;
    set_smem(gemm_f16_mma_kernel<BM, FUSED>, T::SMEM, &smem_set);
    const dim3 grid((N + (FUSED ? 63 : 127)) / (FUSED ? 64 : 128), (M + BM - 1) / BM);
    if (!skinny) {
        gemm_f16_mma_kernel<BM, FUSED>
            <<<grid, T::THREADS, T::SMEM, stream>>>(y, x, w, wu, bias, M, N, K, epi);
        G4_CUDA_LAUNCH_CHECK();
        return;
    }
    const int S = skinny_split((long)grid.x * grid.y, (K + MMA_BK - 1) / MMA_BK);
    g4_pdl_launch_cluster(gemm_f16_mma_kernel<BM, FUSED>, dim3(grid.x, grid.y, S),
                          dim3(T::THREADS, 1, 1), (size_t)T::SMEM, stream, dim3(1, 1, S), y, x, w,
                          wu, bias, M, N, K, epi);
}

// Prefill: 128-row tiles when they still give at least one block per SM, else 64-row tiles
// (twice the blocks: small prompts and narrow N would otherwise leave most SMs idle). Skinny:
// 32-row tiles for M <= 32, else 64.
void launch_mma(void *y, const __half *x, const __half *w, const __half *wu, const __half *bias,
                int M, int N, int K, int epi, bool fused, bool skinny, cudaStream_t stream) {
    const long cols = (N + (fused ? 63 : 127)) / (fused ? 64 : 128);
    const int bm = skinny                                        ? (M <= 32 ? 32 : 64)
                   : (long)((M + 127) / 128) * cols >= num_sms() ? 128
                                                                 : 64;
    if (fused) {
        if (bm == 128)
            launch_mma_t<128, true>(y, x, w, wu, bias, M, N, K, epi, false, stream);
        else if (bm == 64)
            launch_mma_t<64, true>(y, x, w, wu, bias, M, N, K, epi, skinny, stream);
        else
            launch_mma_t<32, true>(y, x, w, wu, bias, M, N, K, epi, true, stream);
    } else {
        if (bm == 128)
            launch_mma_t<128, false>(y, x, w, wu, bias, M, N, K, epi, false, stream);
        else if (bm == 64)
            launch_mma_t<64, false>(y, x, w, wu, bias, M, N, K, epi, skinny, stream);
        else
            launch_mma_t<32, false>(y, x, w, wu, bias, M, N, K, epi, true, stream);
    }
}

// =============================================================================================
// GEMV (M <= 8): 256 threads own 64 columns; thread (tx = tid % 8, ty = tid / 8) owns columns
// n0 + 8 tx .. + 7 (one 16-byte load of a W row) and rows k = ty, ty + 32, ... of its K range,
// GEMV_U rows in flight. A cluster of cs blocks (grid.y) splits K; each block reduces its 32
// row phases (shuffles, then shared memory), the cluster's rank 0 sums the cs partials in rank
// order through distributed shared memory and runs the epilogue.
// x is staged in shared memory transposed ([k][MT] fp16) in chunks of GEMV_KCH rows, so one
// 2..16-byte load gives a row's value for every token.
// Launched with programmatic dependent launch (kernels/pdl.cuh): before its wait a block only
// prefetches into L2 the W (and Wu) rows its first loop iteration loads, GEMV_U rows per
// thread (GEMV_U * 32 rows x 128 bytes = 16 KB per block, 32 KB fused), so their DRAM latency
// overlaps the previous kernel's tail; x is read and y written after the wait.
// =============================================================================================
constexpr int GEMV_THREADS = 256, GEMV_COLS = 64, GEMV_KCH = 1024, GEMV_U = 4;

template <int MT> __device__ __forceinline__ void load_x(float *xf, const __half *p) {
    if constexpr (MT == 8) {
        const uint4 v = *(const uint4 *)p;
        const __half2 *h = (const __half2 *)&v;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = __half22float2(h[i]);
            xf[2 * i] = f.x;
            xf[2 * i + 1] = f.y;
        }
    } else if constexpr (MT == 4) {
        const uint2 v = *(const uint2 *)p;
        const __half2 *h = (const __half2 *)&v;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float2 f = __half22float2(h[i]);
            xf[2 * i] = f.x;
            xf[2 * i + 1] = f.y;
        }
    } else if constexpr (MT == 2) {
        const float2 f = __half22float2(*(const __half2 *)p);
        xf[0] = f.x;
        xf[1] = f.y;
    } else {
        xf[0] = __half2float(*p);
    }
}

// Blocks per SM the register allocation must leave room for (0: no constraint). Without it
// the PDL prologue's prefetches cost ptxas 7-12 more registers in two variants, which would
// drop a block per SM: M = 1 fused (64 -> 71: 4 -> 3 blocks) and M = 2 plain (48 -> 60: 5 -> 4).
// PIPE (the pipelined loop, below) holds two steps of weights in registers: 2 blocks an SM.
template <int MT, bool FUSED, bool PIPE = false> constexpr int gemv_min_blocks() {
    return PIPE ? 2 : (MT == 1 && FUSED) ? 4 : (MT == 2 && !FUSED) ? 5 : 0;
}

template <int MT, bool FUSED> constexpr int gemv_smem() {
    return GEMV_KCH * MT * 2 + (8 + 1) * (FUSED ? 2 : 1) * MT * GEMV_COLS * 4;
}

// PRO: the add-norm prologue (gemm_common.cuh gv_norm_prologue) computes x [M][K] into shared
// memory after the wait, in place of reading x; a multiplier (pro.mul) makes the epilogue the
// PLE gate's gelu_tanh(fp16(y)) * mul.
// PIPE (the default where launch_gemv_t says): a thread's weight loads software-pipelined one step
// ahead (step i + 1's GEMV_U rows issued before step i is computed; the first step's issued before
// the PDL wait, into registers: immutable weights, pdl.cuh rule 1), where the plain loop waits
// a full DRAM round trip every step (a down projection block: 6 steps, ~1 us each).
template <int MT, bool FUSED, bool PRO, bool PIPE = false>
__global__ void __launch_bounds__(GEMV_THREADS, gemv_min_blocks<MT, FUSED, PIPE>())
    gemv_f16_kernel(void *y, const __half *__restrict__ x, const __half *__restrict__ w,
                    const __half *__restrict__ wu, const __half *__restrict__ bias, int M, int N,
                    int K, int epi, gv_pro pro) {
    constexpr int F = FUSED ? 2 : 1;
    extern __shared__ __align__(16) uint8_t smem[];
    __half *xs = (__half *)smem;                      // [KCH][MT]
    float *red = (float *)(smem + GEMV_KCH * MT * 2); // [8 warps][F][MT][64]
    float *part = red + 8 * F * MT * GEMV_COLS;       // [F][MT][64], read by the cluster leader
    cg::cluster_group cluster = cg::this_cluster();
    const int cs = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tx = tid & 7, ty = tid >> 3;
    const int n0 = blockIdx.x * GEMV_COLS, col = n0 + tx * 8;
    const bool col_ok = col < N;
    const int kb = (int)((long long)K * rank / cs), ke = (int)((long long)K * (rank + 1) / cs);

    // One step of a thread: GEMV_U rows k0, k0 + 32, ... of chunk kc (kn rows), its 8 columns.
    auto load_step = [&](uint4(&wv)[F][GEMV_U], int kc, int kn, int k0) {
#pragma unroll
        for (int u = 0; u < GEMV_U; u++) {
            const int k = k0 + 32 * u;
            const bool ok = col_ok && k < kn;
            const size_t off = (size_t)(kc + k) * N + col;
            wv[0][u] = ok ? ldg_stream(w + off) : make_uint4(0, 0, 0, 0);
            if constexpr (FUSED) wv[F - 1][u] = ok ? ldg_stream(wu + off) : make_uint4(0, 0, 0, 0);
        }
    };
    uint4 cur[F][GEMV_U];
    if constexpr (PIPE) {
        load_step(cur, kb, min(GEMV_KCH, ke - kb), ty); // before the wait: weights only
    } else if (col_ok) {
        // PDL prologue: exactly the W addresses of the first iteration below (kc = kb, k0 =
        // ty), under the same bounds; L2 prefetches only (pdl.cuh rule 1).
        const int kn0 = min(GEMV_KCH, ke - kb);
#pragma unroll
        for (int u = 0; u < GEMV_U; u++) {
            const int k = ty + 32 * u;
            if (k < kn0) {
                const size_t off = (size_t)(kb + k) * N + col;
                g4_prefetch_l2(w + off);
                if constexpr (FUSED) g4_prefetch_l2(wu + off);
            }
        }
    }
    g4_pdl_wait();
    g4_pdl_trigger();
    const __half *xsrc = x; // [M][K]
    if constexpr (PRO) {
        __half *xfull = (__half *)(smem + gemv_smem<MT, FUSED>());
        gv_norm_prologue(pro, xfull, M, K);
        xsrc = xfull;
    }

    float acc[F][MT][8];
#pragma unroll
    for (int f = 0; f < F; f++)
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int j = 0; j < 8; j++) acc[f][m][j] = 0.0f;

    // acc += x rows k0 + 32 u of the chunk (in xs) times the step's weights
    auto compute_step = [&](const uint4(&wv)[F][GEMV_U], int kn, int k0) {
#pragma unroll
        for (int u = 0; u < GEMV_U; u++) {
            const int k = k0 + 32 * u;
            if (k < kn) {
                float xf[MT];
                load_x<MT>(xf, xs + k * MT);
#pragma unroll
                for (int f = 0; f < F; f++) {
                    const __half2 *h = (const __half2 *)&wv[f][u];
                    float wf[8];
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float2 p = __half22float2(h[i]);
                        wf[2 * i] = p.x;
                        wf[2 * i + 1] = p.y;
                    }
#pragma unroll
                    for (int m = 0; m < MT; m++)
#pragma unroll
                        for (int j = 0; j < 8; j++) acc[f][m][j] = fmaf(xf[m], wf[j], acc[f][m][j]);
                }
            }
        }
    };

    for (int kc = kb; kc < ke; kc += GEMV_KCH) {
        const int kn = min(GEMV_KCH, ke - kc);
        __syncthreads(); // the previous chunk's readers are done with xs
        for (int i = tid; i < MT * kn; i += GEMV_THREADS) {
            const int m = i / kn, k = i - m * kn;
            xs[k * MT + m] = m < M ? xsrc[(size_t)m * K + kc + k] : __float2half(0.0f);
        }
        __syncthreads();
        if constexpr (PIPE) {
            if (kc != kb) load_step(cur, kc, kn, ty); // (the first chunk's: before the wait)
            for (int k0 = ty; k0 < kn; k0 += 32 * GEMV_U) {
                const bool more = k0 + 32 * GEMV_U < kn;
                uint4 nxt[F][GEMV_U];
                if (more) load_step(nxt, kc, kn, k0 + 32 * GEMV_U);
                compute_step(cur, kn, k0);
                if (more) {
#pragma unroll
                    for (int f = 0; f < F; f++)
#pragma unroll
                        for (int u = 0; u < GEMV_U; u++) cur[f][u] = nxt[f][u];
                }
            }
        } else {
            for (int k0 = ty; k0 < kn; k0 += 32 * GEMV_U) {
                load_step(cur, kc, kn, k0);
                compute_step(cur, kn, k0);
            }
        }
    }

    // Lanes l, l ^ 8, l ^ 16, l ^ 24 share tx (the warp's 4 row phases): sum them.
#pragma unroll
    for (int f = 0; f < F; f++)
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float v = acc[f][m][j];
                v += __shfl_xor_sync(0xffffffffu, v, 8);
                v += __shfl_xor_sync(0xffffffffu, v, 16);
                acc[f][m][j] = v;
            }
    if (lane < 8) {
#pragma unroll
        for (int f = 0; f < F; f++)
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    red[((warp * F + f) * MT + m) * GEMV_COLS + tx * 8 + j] = acc[f][m][j];
    }
    __syncthreads();
    for (int i = tid; i < F * MT * GEMV_COLS; i += GEMV_THREADS) {
        float s = 0.0f;
#pragma unroll
        for (int wp = 0; wp < 8; wp++) s += red[wp * F * MT * GEMV_COLS + i];
        part[i] = s;
    }
    cluster.sync(); // every block's partial is written and visible to the cluster
    if (rank == 0) {
        for (int i = tid; i < MT * GEMV_COLS; i += GEMV_THREADS) {
            const int m = i / GEMV_COLS, n = n0 + i % GEMV_COLS;
            if (m >= M || n >= N) continue;
            float v[F];
#pragma unroll
            for (int f = 0; f < F; f++) v[f] = 0.0f;
            for (int r = 0; r < cs; r++) {
                const float *p = cluster.map_shared_rank(part, r);
#pragma unroll
                for (int f = 0; f < F; f++) v[f] += p[f * MT * GEMV_COLS + i];
            }
            if constexpr (FUSED)
                store_one(y, G4_GEMM_Y_F16, nullptr, (size_t)m * N + n, n,
                          gelu_tanh(v[0]) * v[F - 1]);
            else if (PRO && pro.mul)
                store_one(y, G4_GEMM_Y_F16, nullptr, (size_t)m * N + n, n,
                          gelu_tanh(__half2float(__float2half_rn(v[0]))) *
                              __half2float(pro.mul[(size_t)m * pro.ldm + n]));
            else
                store_one(y, epi, bias, (size_t)m * N + n, n, v[0]);
        }
    }
    cluster.sync(); // keep every block's shared memory alive until the leader has read it
}

template <int MT, bool FUSED, bool PRO>
void launch_gemv_t(void *y, const __half *x, const __half *w, const __half *wu, const __half *bias,
                   int M, int N, int K, int epi, const gv_pro &pro, cudaStream_t stream) {
    // (PRO: x [M][K] after the block's own, K <= 2048)
    const int smem = gemv_smem<MT, FUSED>() + (PRO ? M * K * 2 : 0);
    // The pipelined loop (default; G4_GEMV_F16_PIPE=0 turns it off, read once) for 1-2 rows only
    // (4 and 8 fused would spill) and grids of at most 2 blocks an SM: H200, full-size E2B,
    // f16 decode 372.3 -> 388.5 tok/s with it on every shape; the lm_head's 4,096 blocks ran
    // 193 -> 246 us in the kernel rows at the pipelined kernel's lower occupancy, where its
    // first step before the wait is nothing against its ~16 waves (bench/NOTES.md, eleventh
    // session). At most 2 blocks an SM (q, o, down, k/v and the PLE pair pipelined; the fused
    // gate/up, q|k|v, ple_emb not: their rows were slower pipelined) measured 409.0 tok/s
    // against 394.8-396.5 at 4 and 389.3 on every shape (twelfth session, one run each).
    constexpr bool PIPE_OK = MT <= 2;
    static const int pipe_env = PIPE_OK ? env_int("G4_GEMV_F16_PIPE", 1, 0, 1) : 0;
    static bool smem_set = false, smem_set_pipe = false;
    const int strips = (N + GEMV_COLS - 1) / GEMV_COLS;
    // Split K over a cluster until there are two blocks per SM, keeping >= 128 rows a block.
    // (One block per SM, so that the next kernel's find room beside these under PDL, measured
    // 9% slower end to end: bench/NOTES.md, eleventh session.)
    int cs = 1;
    while (cs < 8 && (long)strips * cs < 2L * num_sms() && K / (cs * 2) >= 128) cs *= 2;
    // (G4_GEMV_F16_PIPE_BPS, read once: that 2, for A/B runs of which shapes gain)
    static const int pipe_bps = env_int("G4_GEMV_F16_PIPE_BPS", 2, 1, 64);
    const bool pipe = pipe_env && (long)strips * cs <= (long)pipe_bps * num_sms();
    // (each branch names its kernel at the launch: tests/test_pdl_sass.sh finds kernels there)
    const int smem_max = gemv_smem<MT, FUSED>() + (PRO ? MT * 2048 * 2 : 0);
    if (pipe) {
        set_smem(gemv_f16_kernel<MT, FUSED, PRO, PIPE_OK>, smem_max, &smem_set_pipe);
        g4_pdl_launch_cluster(gemv_f16_kernel<MT, FUSED, PRO, PIPE_OK>, dim3(strips, cs, 1),
                              dim3(GEMV_THREADS, 1, 1), (size_t)smem, stream, dim3(1, cs, 1), y, x,
                              w, wu, bias, M, N, K, epi, pro);
    } else {
        set_smem(gemv_f16_kernel<MT, FUSED, PRO>, smem_max, &smem_set);
        g4_pdl_launch_cluster(gemv_f16_kernel<MT, FUSED, PRO>, dim3(strips, cs, 1),
                              dim3(GEMV_THREADS, 1, 1), (size_t)smem, stream, dim3(1, cs, 1), y, x,
                              w, wu, bias, M, N, K, epi, pro);
    }
}

template <bool FUSED, bool PRO>
void launch_gemv(void *y, const __half *x, const __half *w, const __half *wu, const __half *bias,
                 int M, int N, int K, int epi, const gv_pro &pro, cudaStream_t stream) {
    if (M == 1)
        launch_gemv_t<1, FUSED, PRO>(y, x, w, wu, bias, M, N, K, epi, pro, stream);
    else if (M == 2)
        launch_gemv_t<2, FUSED, PRO>(y, x, w, wu, bias, M, N, K, epi, pro, stream);
    else if (M <= 4)
        launch_gemv_t<4, FUSED, PRO>(y, x, w, wu, bias, M, N, K, epi, pro, stream);
    else
        launch_gemv_t<8, FUSED, PRO>(y, x, w, wu, bias, M, N, K, epi, pro, stream);
}

// =============================================================================================
// GEMV on the tensor cores (issue 29; the default, G4_GEMV_F16=fma for the CUDA-core kernel;
// bench/NOTES.md "The fp16 GEMV on the tensor cores"). No shared-memory staging of the weights
// and no repack: each lane's four 16-byte loads of W (kernels/gemv_f16_mma.h: rows 2t, 2t+1,
// 2t+8, 2t+9 of a 16-row step, 8 columns) are byte-permuted straight into the A fragments of
// four m16n8k16 tiles (64 output columns), B = x^T from shared memory (M <= 8 tokens fill the
// n8 side; M = 1 wastes 7/8 of an MMA, which costs nothing here), fp32 accumulation.
//   - Plan (gvm_plan): K split over the S warps of a CTA and the CS CTAs of a cluster (grid.y);
//     the other 8 / S warps of a CTA take other strips; a grid past 2 CTAs an SM walks its
//     groups of strips persistently (the lm_head), its weight stream continuing across them.
//   - U steps (2 KB of W each a warp; fused: U / 2 of each weight) in flight a warp in a
//     register ring; the first U loaded before the PDL wait (immutable weights, ldg_stream:
//     pdl.cuh rule 1); x [M][the CTA's k range] staged in shared memory after the wait.
//   - Per strip, deterministic split-K: the warps' pair partials through shared memory, summed
//     in warp order by the strip's own warps, then (CS > 1) the CTA partials summed in rank
//     order through distributed shared memory (gvm_flush), one barrier each, double-buffered.
//   - K a multiple of 8: the last step's rows 8..15 are zero-filled loads when K % 16 == 8;
//     N a multiple of 8: a lane's 8 columns are all in or all out.
// Where it does not take a shape (x of the CTA's k range over GVM_X_MAX) the CUDA-core GEMV
// runs it. The add-norm prologue form (g4_gemv_f16_add_norm: PRO) computes x of the CTA's k
// range in the prologue (gv_norm_prologue: the norms need the whole row, so every CTA reads
// h_in and r whole, K <= 2048), the PLE gate's multiplier in the epilogue.
// Plan knobs (environment, read once; A/B and run.sh's gvm_sweep stage; an invalid value fails
// the fp16 GEMV launches with a line naming it): G4_GVM_SPLIT_MAX (cap on the K split S * CS, a
// power of two 1..64, default 64), G4_GVM_CPS (CTAs an SM the plan assumes, 1..4, plain and
// fused; default 2 plain, 1 fused, the kernels' occupancy: more only queues CTAs),
// G4_GVM_MIN_CTAS (the grid the split doubling aims for, 1..65536, default the SM count). The
// ring depth U stays fixed (one instantiation a form: a deeper plain ring spills at 2 CTAs an
// SM, a shallower one halves the bytes in flight).
// =============================================================================================
constexpr int GVM_THREADS = GVM_WARPS * 32;

// A forced fp16 GEMV design (g4_gemm_gemv_f16_version: tests, benches), else the tensor-core one
// unless G4_GEMV_F16=fma in the environment (read once): 1 the CUDA-core kernel, 2 the
// tensor-core one (the default since the H200 measured it: f16 decode 411.8 -> 431.7 tok/s).
int g_gvf_version = -1; // -1: the environment's
int g_gvf_last = 0;     // the design of the last fp16 GEMV launched
int gvf_version() {
    if (g_gvf_version >= 0) return g_gvf_version;
    static int cache = -1;
    return g4_cuda_env_is(&cache, "G4_GEMV_F16", "fma") ? 1 : 2;
}

// The plan knobs (the comment above), read once: 0 where unset (the default); err names the
// first invalid variable.
struct gvm_knobs {
    int smax, cps, aim;
    char err[160];
};

// One knob: unset or empty leaves *v 0; else a whole number in lo..hi (a power of two if pow2).
void gvm_knob(const char *name, int lo, int hi, bool pow2, int *v, char *err, size_t n) {
    const char *s = getenv(name);
    *v = 0;
    if (!s || !*s) return;
    char *end = nullptr;
    const long x = strtol(s, &end, 10);
    if (*end || x < lo || x > hi || (pow2 && (x & (x - 1)))) {
        if (!*err)
            snprintf(err, n, "%s=%s: expected %s %d..%d", name, s,
                     pow2 ? "a power of two in" : "a whole number in", lo, hi);
        return;
    }
    *v = (int)x;
}

const gvm_knobs &gvm_knobs_env() {
    static gvm_knobs k;
    static bool read = false;
    if (!read) {
        k.err[0] = 0;
        gvm_knob("G4_GVM_SPLIT_MAX", 1, 64, true, &k.smax, k.err, sizeof k.err);
        gvm_knob("G4_GVM_CPS", 1, 4, false, &k.cps, k.err, sizeof k.err);
        gvm_knob("G4_GVM_MIN_CTAS", 1, 65536, false, &k.aim, k.err, sizeof k.err);
        read = true;
    }
    return k;
}

// The launch plan of a shape under the knobs: the one function gvm_takes (the x bytes), the
// launcher's shared memory and its grid all use.
gvm_plan_t gvm_plan_for(int N, int K, bool fused) {
    const gvm_knobs &k = gvm_knobs_env();
    const int sms = num_sms();
    return gvm_plan(N, K, sms, k.cps ? k.cps : gvm_cps(fused ? 2 : 1), k.smax ? k.smax : 64,
                    k.aim ? k.aim : sms);
}

// Whether the tensor-core GEMV runs an M <= 8 shape (the design forced or chosen, and the x of a
// CTA's k range within GVM_X_MAX).
bool gvm_takes(int M, int N, int K, bool fused) {
    if (gvf_version() != 2 || K >= GVM_K_MAX) return false;
    const gvm_plan_t p = gvm_plan_for(N, K, fused);
    return gvm_x_bytes(M, K, p.CS) <= GVM_X_MAX;
}

__device__ __forceinline__ uint32_t gvm_word(const uint4 &v, int j) {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// The strip's outputs after each warp wrote its pair partials (red, this CTA's, parity par):
// the S warps of slot f sum the S warps' partials in warp order; CS == 1: they store; else they
// write the CTA partial (cred) and, after a cluster barrier, rank r sums the ranks' partials in
// rank order for the positions whose (pos / 4) % CS == r and stores. Out of line: inlined at
// each of the ring's unrolled steps the kernel would pass the instruction cache.
template <int F, bool MUL>
__device__ __noinline__ void gvm_flush(float2 *red, float2 *cred, int par, void *y,
                                       const __half *bias, int epi, int M, int N, int strip, int f,
                                       int s, int S, int CS, const __half *mul, int ldm) {
    __syncthreads(); // every warp's partials are written
    const int lane = threadIdx.x & 31, id = s * 32 + lane;
    const float2 *rb = red + (size_t)par * GVM_WARPS * F * GVM_POS;
    float2 *cb = cred + (size_t)par * F * GVM_POS;
    const int col0 = strip * GVM_COLS;
    auto store = [&](int pos, const float2(&v)[F]) {
        const int m = gvm_pos_tok(pos), col = col0 + gvm_pos_col(pos);
        if (col >= N) return;
        const size_t idx = (size_t)m * N + col;
        if constexpr (F == 2) {
            store_pair(y, G4_GEMM_Y_F16, nullptr, idx, col, gelu_tanh(v[0].x) * v[1].x,
                       gelu_tanh(v[0].y) * v[1].y);
        } else if (MUL && mul) { // the PLE gate: gelu_tanh(fp16(y)) * mul (the CUDA-core kernel's)
            const __half *mr = mul + (size_t)m * ldm + col;
            store_pair(y, G4_GEMM_Y_F16, nullptr, idx, col,
                       gelu_tanh(__half2float(__float2half_rn(v[0].x))) * __half2float(mr[0]),
                       gelu_tanh(__half2float(__float2half_rn(v[0].y))) * __half2float(mr[1]));
        } else {
            store_pair(y, epi, bias, idx, col, v[0].x, v[0].y);
        }
    };
    for (int pos = id; pos < GVM_POS; pos += 32 * S) {
        if (gvm_pos_tok(pos) >= M) continue;
        float2 v[F];
#pragma unroll
        for (int ff = 0; ff < F; ff++) {
            float2 a = make_float2(0.0f, 0.0f);
            for (int ss = 0; ss < S; ss++) {
                const float2 q = rb[((f * S + ss) * F + ff) * GVM_POS + pos];
                a.x += q.x;
                a.y += q.y;
            }
            v[ff] = a;
        }
        if (CS == 1) {
            store(pos, v);
        } else {
#pragma unroll
            for (int ff = 0; ff < F; ff++) cb[ff * GVM_POS + pos] = v[ff];
        }
    }
    if (CS == 1) return;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync(); // every CTA partial is written and visible to the cluster
    const int rank = (int)cluster.block_rank();
    for (int pos = id; pos < GVM_POS; pos += 32 * S) {
        if (gvm_pos_tok(pos) >= M || (pos >> 2) % CS != rank) continue;
        float2 q[8][F]; // the ranks' loads in flight together, then summed in rank order
#pragma unroll
        for (int r = 0; r < 8; r++)
            if (r < CS) {
                const float2 *p = cluster.map_shared_rank(cb, r);
#pragma unroll
                for (int ff = 0; ff < F; ff++) q[r][ff] = p[ff * GVM_POS + pos];
            }
        float2 v[F];
#pragma unroll
        for (int ff = 0; ff < F; ff++) {
            v[ff] = make_float2(0.0f, 0.0f);
#pragma unroll
            for (int r = 0; r < 8; r++)
                if (r < CS) {
                    v[ff].x += q[r][ff].x;
                    v[ff].y += q[r][ff].y;
                }
        }
        store(pos, v);
    }
}

// F = 1 (plain) or 2 (fused gate/up: y fp16 = gelu_tanh(x Wg) * (x Wu)); U steps in flight.
// Plain: 2 CTAs an SM (128 registers: the ring's 64 + 16 accumulators). Fused: one (its 32
// accumulators spilled inside the loop at 128; 8 warps x 2 steps x 4 KB = 64 KB an SM in flight).
// PRO: x is the add-norm prologue's (gv_norm_prologue, the CTA's k range; every CTA computes the
// norms over the whole row, CTA (0, 0) writes h_out and x_out), and pro.mul (plain only) the PLE
// gate's multiplier.
template <int F, int U, bool PRO>
__global__ void __launch_bounds__(GVM_THREADS, F == 1 ? 2 : 1) // (gvm_cps)
    gemv_f16_mma_kernel(void *y, const __half *__restrict__ x, const __half *__restrict__ w,
                        const __half *__restrict__ wu, const __half *__restrict__ bias, int M,
                        int N, int K, int epi, int S, int CS, int groups, const gv_pro pro) {
    extern __shared__ __align__(16) uint8_t smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int KT = (K + GVM_KSTEP - 1) / GVM_KSTEP, ST = S * CS, FT = GVM_WARPS / S;
    const int f = warp / S, s = warp % S, rank = (int)blockIdx.y, G = (int)gridDim.x;
    int kb, L, cb, cl; // this warp's steps [kb, kb + L); the CTA's [cb, cb + cl)
    gvm_krange(KT, rank * S + s, ST, &kb, &L);
    gvm_krange(KT, rank, CS, &cb, &cl);
    const int nj = (groups - (int)blockIdx.x + G - 1) / G; // groups this CTA walks (>= 1)
    const int n = nj * L;                                  // this warp's steps (>= 1)
    const size_t N1 = (size_t)N;

    // Load cursor: lp[ff] = the lane's first row (gvm_row(t, 0)) of step lr of group lj, 8
    // columns; rows 1, 8, 9 (gvm_row(t, 1..3) - gvm_row(t, 0)) follow at N, 8 N, 9 N.
    const __half *lp[F];
    int lr = 0, lj = 0;
    bool lcol = false;
    auto set_col = [&](int j) {
        const int col = gvm_strip((int)blockIdx.x, j, G, FT, f) * GVM_COLS + gvm_col0(g);
        lcol = col < N;
        const size_t off = (size_t)(GVM_KSTEP * kb + gvm_row(t, 0)) * N1 + (lcol ? col : 0);
#pragma unroll
        for (int ff = 0; ff < F; ff++) lp[ff] = (ff ? wu : w) + off;
    };
    uint4 rw[U][F][4];
    auto load_next = [&](int u) {
        const uint4 z = make_uint4(0, 0, 0, 0);
        const bool hi = lcol && gvm_hi_ok(kb + lr, K);
#pragma unroll
        for (int ff = 0; ff < F; ff++) {
            const __half *b = lp[ff];
            rw[u][ff][0] = lcol ? ldg_stream(b) : z;
            rw[u][ff][1] = lcol ? ldg_stream(b + N1) : z;
            rw[u][ff][2] = hi ? ldg_stream(b + 8 * N1) : z;
            rw[u][ff][3] = hi ? ldg_stream(b + 9 * N1) : z;
            lp[ff] = b + GVM_KSTEP * N1;
        }
        if (++lr == L) {
            lr = 0;
            set_col(++lj);
        }
    };

    // The ring's first U steps before the wait: immutable weights, ldg_stream only.
    set_col(0);
#pragma unroll
    for (int u = 0; u < U; u++)
        if (u < n) load_next(u);
    g4_pdl_wait();
    g4_pdl_trigger();

    float2 *red = (float2 *)smem;                                             // gvm_red_bytes
    float2 *cred = (float2 *)(smem + gvm_red_bytes(F));                       // gvm_cred_bytes
    __half *xs = (__half *)(smem + gvm_red_bytes(F) + gvm_cred_bytes(F, CS)); // [M][XS]
    const int XS = gvm_xstride(cl);
    if constexpr (PRO) { // (K a multiple of 64: the range is whole steps, no tail to zero)
        gv_norm_prologue(pro, xs, M, K, nullptr, XS, GVM_KSTEP * cb, GVM_KSTEP * (cb + cl));
    } else {
        for (int i = (int)threadIdx.x; i < M * 2 * cl; i += GVM_THREADS) {
            const int m = i / (2 * cl), c = i - m * 2 * cl, k = GVM_KSTEP * cb + 8 * c;
            const uint4 v =
                k < K ? *(const uint4 *)(x + (size_t)m * K + k) : make_uint4(0, 0, 0, 0);
            *(uint4 *)(xs + m * XS + 8 * c) = v;
        }
        __syncthreads();
    }

    float acc[F][4][4];
    auto zero_acc = [&]() {
#pragma unroll
        for (int ff = 0; ff < F; ff++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[ff][j][i] = 0.0f;
    };
    zero_acc();
    int cj = 0, cr = 0; // compute cursor
    const __half *px0 = xs + gvm_xrow(g, M) * XS + GVM_KSTEP * (kb - cb), *px = px0;
    for (int i0 = 0; i0 < n; i0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (i0 + u >= n) break; // warp-uniform
            const uint32_t b0 = *(const uint32_t *)(px + gvm_bk(t, 0));
            const uint32_t b1 = *(const uint32_t *)(px + gvm_bk(t, 1));
#pragma unroll
            for (int ff = 0; ff < F; ff++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    uint32_t a[4];
                    gvm_afrag(gvm_word(rw[u][ff][0], j), gvm_word(rw[u][ff][1], j),
                              gvm_word(rw[u][ff][2], j), gvm_word(rw[u][ff][3], j), a);
                    mma_16816(acc[ff][j], a, b0, b1);
                }
            if (i0 + u + U < n) load_next(u); // refill this slot with the step U ahead
            px += GVM_KSTEP;
            if (++cr == L) {
                // pair p = j + 4 e: (c_e, c_{2+e}) of tile j, token 2t + e
                float2 *wb = red + ((size_t)(cj & 1) * GVM_WARPS + warp) * F * GVM_POS;
#pragma unroll
                for (int p = 0; p < GVM_PAIRS; p++)
                    if (2 * t + (p >> 2) < M)
#pragma unroll
                        for (int ff = 0; ff < F; ff++)
                            wb[ff * GVM_POS + p * 32 + lane] =
                                make_float2(acc[ff][p & 3][p >> 2], acc[ff][p & 3][2 + (p >> 2)]);
                gvm_flush<F, PRO>(red, cred, cj & 1, y, bias, epi, M, N,
                                  gvm_strip((int)blockIdx.x, cj, G, FT, f), f, s, S, CS,
                                  PRO ? pro.mul : nullptr, PRO ? pro.ldm : 0);
                cr = 0;
                cj++;
                px = px0;
                zero_acc();
            }
        }
    }
    if (CS > 1) cg::this_cluster().sync(); // keep the CTA partials alive until every rank read
}

template <bool FUSED, bool PRO>
void launch_gemv_mma(void *y, const __half *x, const __half *w, const __half *wu,
                     const __half *bias, int M, int N, int K, int epi, const gv_pro &pro,
                     cudaStream_t stream) {
    constexpr int F = FUSED ? 2 : 1, U = FUSED ? 2 : 4; // the same 8 KB of W in flight a warp
    const gvm_plan_t p = gvm_plan_for(N, K, FUSED);
    const size_t smem =
        (size_t)gvm_red_bytes(F) + gvm_cred_bytes(F, p.CS) + gvm_x_bytes(M, K, p.CS);
    static bool smem_set = false;
    set_smem(gemv_f16_mma_kernel<F, U, PRO>, gvm_red_bytes(F) + gvm_cred_bytes(F, 2) + GVM_X_MAX,
             &smem_set);
    if (p.CS > 1)
        g4_pdl_launch_cluster(gemv_f16_mma_kernel<F, U, PRO>, dim3(p.grid, p.CS, 1),
                              dim3(GVM_THREADS, 1, 1), smem, stream, dim3(1, p.CS, 1), y, x, w, wu,
                              bias, M, N, K, epi, p.S, p.CS, p.groups, pro);
    else
        g4_pdl_launch(gemv_f16_mma_kernel<F, U, PRO>, dim3(p.grid, 1, 1), dim3(GVM_THREADS, 1, 1),
                      smem, stream, y, x, w, wu, bias, M, N, K, epi, p.S, p.CS, p.groups, pro);
}

int dispatch(const char *who, void *y, const void *x, const void *w, const void *wu,
             const void *bias, int M, int N, int K, g4_gemm_epi epi, g4_gemm_algo algo,
             cudaStream_t stream) {
    const bool fused = wu != nullptr;
    if (!w || (uintptr_t)w % 16 || (fused && (uintptr_t)wu % 16))
        return g4_fail(G4_EUSER, "%s: weight pointer NULL or not 16-byte aligned", who);
    // Prefill: the wgmma GEMM (gemm_f16_wgmma.cu) or mma.sync, as plan_prefill measured them.
    // Batched decode (8 < M <= 64): the skinny split-K mma.sync path unless G4_SKINNY=0.
    if (algo == G4_GEMM_AUTO)
        algo = g4_gemm_f16_skinny_takes(M) ? G4_GEMM_SKINNY
               : M <= 8                    ? G4_GEMM_GEMV
               : prefill_mma_forced()      ? G4_GEMM_MMA
                                           : plan_prefill(M, N, K, fused, false).algo;
    const __half *hx = (const __half *)x, *hw = (const __half *)w, *hu = (const __half *)wu;
    const __half *hb = (const __half *)bias;
    switch (algo) {
    case G4_GEMM_GEMV:
        if (M > 8) return g4_fail(G4_EUSER, "%s: GEMV takes M <= 8 tokens, got M = %d", who, M);
        if (gvf_version() == 2 && gvm_knobs_env().err[0])
            return g4_fail(G4_EUSER, "%s: %s", who, gvm_knobs_env().err);
        g_gvf_last = gvm_takes(M, N, K, fused) ? 2 : 1;
        if (g_gvf_last == 2 && fused)
            launch_gemv_mma<true, false>(y, hx, hw, hu, hb, M, N, K, epi, gv_pro{}, stream);
        else if (g_gvf_last == 2)
            launch_gemv_mma<false, false>(y, hx, hw, hu, hb, M, N, K, epi, gv_pro{}, stream);
        else if (fused)
            launch_gemv<true, false>(y, hx, hw, hu, hb, M, N, K, epi, gv_pro{}, stream);
        else
            launch_gemv<false, false>(y, hx, hw, hu, hb, M, N, K, epi, gv_pro{}, stream);
        return G4_OK;
    case G4_GEMM_MMA:
    case G4_GEMM_SKINNY:
        launch_mma(y, hx, hw, hu, hb, M, N, K, epi, fused, algo == G4_GEMM_SKINNY, stream);
        return G4_OK;
    case G4_GEMM_WGMMA:
        return wgmma_launch(y, hx, hw, hu, hb, M, N, K, epi, fused, stream);
    default:
        return g4_fail(G4_EUSER, "%s: algorithm %d, expected 0..4 (g4_gemm_algo)", who, algo);
    }
}

} // namespace
} // namespace g4k

extern "C" const char *g4_gemm_epi_name(g4_gemm_epi e) {
    switch (e) {
    case G4_GEMM_Y_F16:
        return "f16";
    case G4_GEMM_Y_F32:
        return "f32";
    case G4_GEMM_Y_F32_ADD:
        return "f32+=";
    case G4_GEMM_Y_F16_ADD:
        return "f16+=";
    }
    return "?";
}

extern "C" const char *g4_gemm_algo_name(g4_gemm_algo a) {
    switch (a) {
    case G4_GEMM_AUTO:
        return "auto";
    case G4_GEMM_GEMV:
        return "gemv";
    case G4_GEMM_MMA:
        return "mma";
    case G4_GEMM_WGMMA:
        return "wgmma";
    case G4_GEMM_SKINNY:
        return "skinny";
    }
    return "?";
}

extern "C" int g4_gemm_f16(void *y, const void *x, const void *w, const void *bias, int M, int N,
                           int K, g4_gemm_epi epi, g4_gemm_algo algo, cudaStream_t stream) {
    int rc = g4k::check_common("gemm_f16", y, x, bias, M, N, K, epi);
    if (rc) return rc;
    return g4k::dispatch("gemm_f16", y, x, w, nullptr, bias, M, N, K, epi, algo, stream);
}

extern "C" int g4_gemm_skinny_force(int split) {
    if (split != 0 && split != 1 && split != 2 && split != 4 && split != 8)
        return g4_fail(G4_EUSER, "skinny force: split %d, expected 0 (automatic), 1, 2, 4 or 8",
                       split);
    g4k::g_skinny_split = split;
    return G4_OK;
}

extern "C" int g4_gemm_f16_skinny_takes(int M) {
    return M <= 64 && M >= g4k::skinny_f16_min() && g4k::skinny_on();
}

extern "C" int g4_gemm_skinny_plan(int M, int N, int K, int fused) {
    // the launchers' grid: 128 features a CTA (fused: 64 of each weight), 32 or 64 rows
    const long cols = (N + (fused ? 63 : 127)) / (fused ? 64 : 128);
    const int bm = M <= 32 ? 32 : 64;
    return g4k::skinny_split(cols * ((M + bm - 1) / bm), (K + 63) / 64);
}

extern "C" int g4_gemm_gemv_f16_version(int version) {
    if (version != -1 && version != 1 && version != 2)
        return g4_fail(G4_EUSER,
                       "gemv f16 version: %d, expected -1 (environment), 1 (CUDA cores) or 2 "
                       "(tensor cores)",
                       version);
    g4k::g_gvf_version = version;
    return G4_OK;
}

extern "C" int g4_gemm_gemv_f16_last_design(void) {
    return g4k::g_gvf_last;
}

extern "C" int g4_gemm_gemv_f16_mma_plan(int M, int N, int K, int fused, int plan[4]) {
    if (!g4k::gvm_takes(M, N, K, fused != 0)) return 0;
    const gvm_plan_t p = g4k::gvm_plan_for(N, K, fused != 0);
    plan[0] = p.S;
    plan[1] = p.CS;
    plan[2] = p.groups;
    plan[3] = p.grid;
    return 1;
}

extern "C" const char *g4_gemv_add_norm_supported(int M, int K) {
    if (M < 1 || M > 8 || K < 64 || K > 2048 || K % 64)
        return "M 1..8 tokens and K a multiple of 64 up to 2048 (one 8-column vector a thread "
               "in the prologue: gemm_common.cuh gv_norm_prologue)";
    return NULL;
}

extern "C" int g4_gemv_f16_add_norm(void *y, const g4_gemv_norm *a, const void *w, const void *wu,
                                    const void *bias, int M, int N, int K, g4_gemm_epi epi,
                                    cudaStream_t stream) {
    const char *who = "gemv_f16_add_norm";
    if (!w || (uintptr_t)w % 16 || (wu && (uintptr_t)wu % 16))
        return g4_fail(G4_EUSER, "%s: weight pointer NULL or not 16-byte aligned", who);
    g4k::gv_pro pro;
    const int rc = g4k::norm_operands(who, a, y, bias, M, N, K, epi, wu != nullptr, &pro);
    if (rc) return rc;
    // the tensor-core design where chosen and it takes the shape (as g4k::dispatch)
    if (g4k::gvf_version() == 2 && g4k::gvm_knobs_env().err[0])
        return g4_fail(G4_EUSER, "%s: %s", who, g4k::gvm_knobs_env().err);
    // This form stays on the CUDA-core kernel unless G4_GEMV_F16_NORM=mma (read once) or a test
    // forces a design: on the tensor cores it measured slower end to end (H200, f16 decode
    // 431.5 -> 417.2 tok/s: its prologue reduces the whole row in every CTA of a plan that
    // splits K over up to 64 warps, so the norm is paid 64 times a strip)
    static int norm_mma_cache = -1;
    const bool norm_fma = g4k::g_gvf_version < 0 &&
                          !g4_cuda_env_is(&norm_mma_cache, "G4_GEMV_F16_NORM", "mma");
    g4k::g_gvf_last = !norm_fma && g4k::gvm_takes(M, N, K, wu != nullptr) ? 2 : 1;
    if (g4k::g_gvf_last == 2 && wu)
        g4k::launch_gemv_mma<true, true>(y, nullptr, (const __half *)w, (const __half *)wu, nullptr,
                                         M, N, K, epi, pro, stream);
    else if (g4k::g_gvf_last == 2)
        g4k::launch_gemv_mma<false, true>(y, nullptr, (const __half *)w, nullptr,
                                          (const __half *)bias, M, N, K, epi, pro, stream);
    else if (wu)
        g4k::launch_gemv<true, true>(y, nullptr, (const __half *)w, (const __half *)wu, nullptr, M,
                                     N, K, epi, pro, stream);
    else
        g4k::launch_gemv<false, true>(y, nullptr, (const __half *)w, nullptr, (const __half *)bias,
                                      M, N, K, epi, pro, stream);
    return G4_OK;
}

extern "C" int g4_gemm_f16_gelu_mul(void *y, const void *x, const void *wg, const void *wu, int M,
                                    int N, int K, g4_gemm_algo algo, cudaStream_t stream) {
    int rc = g4k::check_common("gemm_f16_gelu_mul", y, x, nullptr, M, N, K, G4_GEMM_Y_F16);
    if (rc) return rc;
    if (!wu) return g4_fail(G4_EUSER, "gemm_f16_gelu_mul: NULL up-projection weight");
    return g4k::dispatch("gemm_f16_gelu_mul", y, x, wg, wu, nullptr, M, N, K, G4_GEMM_Y_F16, algo,
                         stream);
}
