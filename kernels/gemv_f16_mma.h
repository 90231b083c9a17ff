// gemv_f16_mma.h: the index algebra of the fp16 GEMV on the tensor cores (gemm_f16.cu
// gemv_f16_mma_kernel, G4_GEMV_F16=mma; issue 29): which weight rows and columns a lane loads,
// how its registers become mma.sync m16n8k16 fragments, where each accumulator lands, the K
// split and the launch plan. Plain C shared by the kernel (__host__ __device__) and the CPU
// emulation test tests/test_gemv_f16_mma_map.c, which runs these functions through a simulated
// m16n8k16 against a plain matmul. Internal header.
//
// y[m][n] = sum_k x[m][k] W[k][n] (W fp16 [K][N] row-major, x fp16 [M][K], M <= 8) as
// D[n][m] = sum_k A[n][k] B[k][m] with A = W^T (16 output columns x 16 k) and B = x^T (16 k x
// 8 tokens: M <= 8 fills the n8 side). The mma's logical k and rows may sit on any physical k
// rows and columns as long as A and B agree on k and the epilogue knows the columns:
//   - a warp step covers a strip of 64 output columns x 16 k rows (2 KB of W): lane (g = lane / 4,
//     t = lane % 4) loads four 16-byte vectors W[k0 + r_i][n0 + 8 g .. 8 g + 7] with
//     r_i = 2t, 2t+1, 2t+8, 2t+9 (logical k of the lane's t); the 8 lanes of one t read 128
//     contiguous bytes of a row;
//   - tile j (0..3) puts column 8 g + 2 j on logical row g and 8 g + 2 j + 1 on row g + 8, so its
//     A registers are byte permutes of word j of the row pairs (r_0, r_1) and (r_2, r_3);
//   - B column g is token g (g >= M reads token 0 and is never stored), its k pairs the same
//     physical rows r_0 r_1 and r_2 r_3.
// Fragments (PTX ISA, mma.m16n8k16 .f16, g = groupID, t = threadID_in_group; the lower-indexed
// element in the lower 16 bits): a0 (row g, k 2t..2t+1), a1 (row g+8, same k), a2 (row g,
// k 2t+8..2t+9), a3 (row g+8, k 2t+8..); b0 (k 2t..2t+1, col g), b1 (k 2t+8..2t+9, col g);
// c0, c1 (row g, col 2t, 2t+1), c2, c3 (row g+8, col 2t, 2t+1).
#ifndef G4_GEMV_F16_MMA_H
#define G4_GEMV_F16_MMA_H

#include <stdint.h>

#ifdef __CUDACC__
#define GVM_HD __host__ __device__ __forceinline__
#else
#define GVM_HD static inline
#endif

enum {
    GVM_COLS = 64,  // output columns a warp step (a strip)
    GVM_KSTEP = 16, // k rows a warp step
    GVM_WARPS = 8,  // warps a CTA
    GVM_PAIRS = 8,  // accumulator pairs a lane: p = j + 4 e (tile j, token 2t + e)
    GVM_POS = GVM_PAIRS * 32, // pair positions of a warp's strip (p * 32 + lane)
};

// Physical row (within the step) of the lane's vector i (0..3): logical k 2t, 2t+1, 2t+8, 2t+9.
GVM_HD int gvm_row(int t, int i) {
    return 2 * t + (i & 1) + 8 * (i >> 1);
}

// First of the lane's 8 columns within the strip.
GVM_HD int gvm_col0(int g) {
    return 8 * g;
}

// prmt.b32 / __byte_perm with selector nibbles 0..7 (byte i of the result is byte sel_i of
// the 8-byte value {b, a}).
GVM_HD uint32_t gvm_prmt(uint32_t a, uint32_t b, uint32_t sel) {
#ifdef __CUDA_ARCH__
    return __byte_perm(a, b, sel);
#else
    const uint64_t v = ((uint64_t)b << 32) | a;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)((v >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
#endif
}

// The A fragment of tile j from word j of the lane's vectors 0..3 (w0 = row 2t, w1 = 2t+1,
// w2 = 2t+8, w3 = 2t+9): the low halves (column 8g + 2j) are logical row g, the high halves
// (8g + 2j + 1) row g + 8.
GVM_HD void gvm_afrag(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, uint32_t a[4]) {
    a[0] = gvm_prmt(w0, w1, 0x5410);
    a[1] = gvm_prmt(w0, w1, 0x7632);
    a[2] = gvm_prmt(w2, w3, 0x5410);
    a[3] = gvm_prmt(w2, w3, 0x7632);
}

// B register r (0, 1): x[token][k0 + gvm_bk(t, r)] and the next k (one 32-bit load).
GVM_HD int gvm_bk(int t, int r) {
    return 2 * t + 8 * r;
}

// The token whose x B column g reads: g, or 0 past M (a column never stored).
GVM_HD int gvm_xrow(int g, int M) {
    return g < M ? g : 0;
}

// Accumulator c_i of tile j: column (in the strip) and token.
GVM_HD int gvm_dcol(int g, int j, int i) {
    return 8 * g + 2 * j + (i >> 1);
}
GVM_HD int gvm_dtok(int t, int i) {
    return 2 * t + (i & 1);
}

// Pair position pos = p * 32 + lane (p = j + 4 e) holds (c_e, c_{2+e}) of tile j: token 2t + e,
// columns gvm_pos_col and the next one.
GVM_HD int gvm_pos_tok(int pos) {
    return 2 * ((pos & 31) & 3) + (pos >> 7);
}
GVM_HD int gvm_pos_col(int pos) {
    return 8 * ((pos & 31) >> 2) + 2 * ((pos >> 5) & 3);
}

// Rows 8..15 of a step exist: K is a multiple of 8, so rows 0..7 of every step < KT do.
GVM_HD int gvm_hi_ok(int step, int K) {
    return GVM_KSTEP * step + 8 < K;
}

// Split sp of ST (<= 64) of KT steps: [*kb, *kb + *L). 32-bit (a 64-bit division is a
// subroutine call on the GPU): KT * 64 < 2^32 for K < GVM_K_MAX.
GVM_HD void gvm_krange(int KT, int sp, int ST, int *kb, int *L) {
    *kb = (int)((unsigned)KT * (unsigned)sp / (unsigned)ST);
    *L = (int)((unsigned)KT * (unsigned)(sp + 1) / (unsigned)ST) - *kb;
}

// The strip of slot f of CTA bx's j-th group (a grid of G CTAs walking the groups of FT strips).
GVM_HD int gvm_strip(int bx, int j, int G, int FT, int f) {
    return (bx + j * G) * FT + f;
}

// The launch plan: K split ST = S warps of a CTA x CS CTAs of a cluster (grid.y), groups of
// FT = 8 / S strips, a grid of `grid` CTAs walking them. The split doubles while the grid has
// fewer than `aim` CTAs (the SM count by default) and would stay within cps an SM (the CTAs an
// SM holds: 2 plain, 1 fused, gvm_cps), every warp keeping >= 2 steps (>= 4 where the doubled
// grid passes aim), up to smax (a power of two <= 64: a cluster of 8); a grid past cps CTAs an
// SM (no split) is persistent at cps an SM.
// cps, smax and aim are the knobs G4_GVM_CPS, G4_GVM_SPLIT_MAX and G4_GVM_MIN_CTAS
// (gemm_f16.cu gvm_plan_for reads them; defaults gvm_cps(F), 64, sms).
typedef struct {
    int S, CS, FT, groups, grid;
} gvm_plan_t;

GVM_HD gvm_plan_t gvm_plan(int N, int K, int sms, int cps, int smax, int aim) {
    const int NS = (N + GVM_COLS - 1) / GVM_COLS, KT = (K + GVM_KSTEP - 1) / GVM_KSTEP;
    int kmax = 1;
    while (kmax * 2 <= KT && kmax < smax) kmax *= 2;
    int st = 1;
    for (;;) {
        long c1, c2;
        {
            const int S = st < GVM_WARPS ? st : GVM_WARPS, FT = GVM_WARPS / S;
            c1 = (long)((NS + FT - 1) / FT) * (st / S);
        }
        {
            const int s2 = 2 * st, S = s2 < GVM_WARPS ? s2 : GVM_WARPS, FT = GVM_WARPS / S;
            c2 = (long)((NS + FT - 1) / FT) * (s2 / S);
        }
        if (st >= kmax || c1 >= aim || c2 > (long)cps * sms) break;
        // the doubled split keeps >= 2 k-steps a warp, and >= 4 where it takes the grid past
        // aim (more than a CTA an SM): the H200 sweep (bench/NOTES.md, gvm_sweep) measured a
        // split of 1.5-3 steps a warp over two CTAs an SM 35-55% slower on K = 1536 (q_proj 7.2
        // against 4.6 us, q_proj_full 8.9 against 5.7) and a one-step split over one wave slower
        // too (ple_proj, K 256: 2.6 against 2.0); from 4 steps the second CTA an SM pays
        // (o_proj_full 6.8 against 7.5, down 8.1 against 9.4)
        if ((long)KT < 4L * st || (c2 > aim && (long)KT < 8L * st)) break;
        st *= 2;
    }
    gvm_plan_t p;
    p.S = st < GVM_WARPS ? st : GVM_WARPS;
    p.CS = st / p.S;
    p.FT = GVM_WARPS / p.S;
    p.groups = (NS + p.FT - 1) / p.FT;
    p.grid = p.CS > 1 || p.groups <= cps * sms ? p.groups : cps * sms;
    return p;
}

// Shared memory of a launch (bytes, each part 16-byte aligned): the warps' pair partials
// [2 parities][8 warps][F][GVM_POS] float2, the CTA partials a cluster reduces
// [2][F][GVM_POS] float2 (CS > 1; FT is 1 there), then x [M][16 * steps + 8] fp16 of the CTA's
// k steps (the row padded so the 8 tokens' B loads fall in 32 different banks).
GVM_HD int gvm_red_bytes(int F) {
    return 2 * GVM_WARPS * F * GVM_POS * 8;
}
GVM_HD int gvm_cred_bytes(int F, int CS) {
    return CS > 1 ? 2 * F * GVM_POS * 8 : 0;
}
GVM_HD int gvm_xstride(int steps) {
    return GVM_KSTEP * steps + 8;
}
GVM_HD long gvm_x_bytes(int M, int K, int CS) {
    const int KT = (K + GVM_KSTEP - 1) / GVM_KSTEP;
    return (long)M * gvm_xstride((KT + CS - 1) / CS) * 2;
}

// x staged per CTA at most this many bytes, K below GVM_K_MAX (else the CUDA-core GEMV runs
// the shape).
enum { GVM_X_MAX = 64 * 1024, GVM_K_MAX = 1 << 24 };

// CTAs an SM of the plain (F = 1) and fused (F = 2) kernels (their __launch_bounds__; the plan's
// default cps).
GVM_HD int gvm_cps(int F) {
    return F == 1 ? 2 : 1;
}

#endif
