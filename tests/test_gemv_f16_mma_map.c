// test_gemv_f16_mma_map.c: the index algebra of the tensor-core fp16 GEMV (kernels/gemv_f16_mma.h,
// gemm_f16.cu gemv_f16_mma_kernel) on the CPU, no GPU needed. The kernel's whole walk is emulated
// with the header's functions: the launch plan, each CTA (grid x cluster rank) and warp (strip
// slot f, split s), the load cursor's rows and columns (zero past K and N as the kernel's masked
// loads), x staged per CTA with its padded stride, the lanes' registers turned into A and B
// fragments, mma.m16n8k16 simulated from the PTX ISA's fragment layout (a0: row g, k 2t..2t+1;
// a1: row g+8; a2: row g, k 2t+8..; a3: row g+8, k 2t+8..; b0: k 2t..2t+1, col g; b1: k 2t+8..;
// c0, c1: row g, col 2t, 2t+1; c2, c3: row g+8), the pair partials, the in-CTA and cluster
// reductions and the stores. On small-integer W and x every product and sum is exact, so the
// result must equal a plain matmul bit for bit, every output written exactly once and nothing
// past N or M. Shapes: tiny, odd (K % 16 == 8, K not a multiple of 64, N = 8..40 and not a
// multiple of 64, M = 1..8), mid-size; the automatic plan on 132 and on 3 SMs (a persistent grid
// walking groups) and forced plans (every S and CS); the plan's invariants on the E2B shapes.
// The device code itself is checked by tests/test_cuda_gemm.c --op f16 (G4_GEMV_F16=mma).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/gemv_f16_mma.h"
#include "tests/test_util.h"

static float h2f(uint16_t h) {
    return g4_f16_to_f32(h);
}

// One simulated m16n8k16 (fp32 accumulate; exact here): c[lane][4] += A B from the lanes'
// registers, each placed where the PTX ISA's fragment layout says.
static void mma_sim(float c[32][4], const uint32_t a[32][4], const uint32_t b[32][2]) {
    double Am[16][16], Bm[16][8], D[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int e = 0; e < 2; e++) {
            const int sh = 16 * e;
            Am[g][2 * t + e] = h2f((uint16_t)(a[lane][0] >> sh));
            Am[g + 8][2 * t + e] = h2f((uint16_t)(a[lane][1] >> sh));
            Am[g][2 * t + 8 + e] = h2f((uint16_t)(a[lane][2] >> sh));
            Am[g + 8][2 * t + 8 + e] = h2f((uint16_t)(a[lane][3] >> sh));
            Bm[2 * t + e][g] = h2f((uint16_t)(b[lane][0] >> sh));
            Bm[2 * t + 8 + e][g] = h2f((uint16_t)(b[lane][1] >> sh));
        }
    }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            D[r][n] = 0;
            for (int k = 0; k < 16; k++) D[r][n] += Am[r][k] * Bm[k][n];
        }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++) c[lane][i] += (float)D[g + 8 * (i >> 1)][2 * t + (i & 1)];
    }
}

typedef struct {
    float x, y;
} f2;

// The kernel's walk; y [M][N] doubles, wrote [M][N] counts the stores of each output.
static void emulate(const gvm_plan_t *p, int M, int N, int K, const uint16_t *W, const uint16_t *X,
                    double *y, int *wrote) {
    const int KT = (K + GVM_KSTEP - 1) / GVM_KSTEP, S = p->S, CS = p->CS, ST = S * CS;
    const int FT = GVM_WARPS / S, G = p->grid;
    f2 *red = g4_calloc((size_t)CS * GVM_WARPS * GVM_POS, sizeof(f2)); // [rank][warp][pos]
    f2 *cred = g4_calloc((size_t)CS * GVM_POS, sizeof(f2));             // [rank][pos]
    for (int bx = 0; bx < G; bx++) {
        const int nj = (p->groups - bx + G - 1) / G;
        CHECK_MSG(nj >= 1, "CTA %d of %d walks no group (groups %d)", bx, G, p->groups);
        for (int j = 0; j < nj; j++) {
            for (int rank = 0; rank < CS; rank++) {
                int cb, cl;
                gvm_krange(KT, rank, CS, &cb, &cl);
                // x [M][XS] of the CTA's steps, zero past K (the kernel's staging loop)
                const int XS = gvm_xstride(cl);
                CHECK(XS % 16 == 8); // 8 tokens' B loads in 32 different banks
                uint16_t *xs = g4_calloc((size_t)M * XS, 2);
                for (int m = 0; m < M; m++)
                    for (int c = 0; c < 2 * cl; c++)
                        for (int e = 0; e < 8; e++) {
                            const int k = GVM_KSTEP * cb + 8 * c + e;
                            xs[(size_t)m * XS + 8 * c + e] = k < K ? X[(size_t)m * K + k] : 0;
                        }
                for (int warp = 0; warp < GVM_WARPS; warp++) {
                    const int f = warp / S, s = warp % S;
                    int kb, L;
                    gvm_krange(KT, rank * S + s, ST, &kb, &L);
                    CHECK_MSG(L >= 1, "warp %d of rank %d has no step (KT %d, split %d)", warp,
                              rank, KT, ST);
                    CHECK(kb >= cb && kb + L <= cb + cl);
                    const int strip = gvm_strip(bx, j, G, FT, f);
                    float c[4][32][4];
                    memset(c, 0, sizeof c);
                    for (int step = kb; step < kb + L; step++) {
                        uint32_t v[32][4][4]; // [lane][vector][word]
                        uint32_t b[32][2];
                        for (int lane = 0; lane < 32; lane++) {
                            const int g = lane / 4, t = lane % 4;
                            const int col = strip * GVM_COLS + gvm_col0(g);
                            for (int i = 0; i < 4; i++) {
                                const int row = GVM_KSTEP * step + gvm_row(t, i);
                                const int ok = col < N && (i < 2 || gvm_hi_ok(step, K));
                                // rows < 2 of a step always exist; hi rows as gvm_hi_ok says
                                if (ok) CHECK(row < K);
                                if (col < N && !ok) CHECK(row >= K);
                                for (int wd = 0; wd < 4; wd++)
                                    v[lane][i][wd] =
                                        ok ? W[(size_t)row * N + col + 2 * wd] |
                                                 (uint32_t)W[(size_t)row * N + col + 2 * wd + 1]
                                                     << 16
                                           : 0;
                            }
                            const uint16_t *px = xs + (size_t)gvm_xrow(g, M) * XS +
                                                 GVM_KSTEP * (step - cb);
                            for (int r = 0; r < 2; r++)
                                b[lane][r] = px[gvm_bk(t, r)] | (uint32_t)px[gvm_bk(t, r) + 1] << 16;
                        }
                        for (int tj = 0; tj < 4; tj++) {
                            uint32_t a[32][4];
                            for (int lane = 0; lane < 32; lane++)
                                gvm_afrag(v[lane][0][tj], v[lane][1][tj], v[lane][2][tj],
                                          v[lane][3][tj], a[lane]);
                            mma_sim(c[tj], a, b);
                        }
                    }
                    // the pair partials, as the kernel writes them
                    for (int lane = 0; lane < 32; lane++) {
                        const int t = lane % 4, g = lane / 4;
                        for (int pp = 0; pp < GVM_PAIRS; pp++) {
                            const int pos = pp * 32 + lane, tj = pp & 3, e = pp >> 2;
                            CHECK(gvm_pos_tok(pos) == gvm_dtok(t, e) &&
                                  gvm_pos_col(pos) == gvm_dcol(g, tj, e) &&
                                  gvm_pos_col(pos) + 1 == gvm_dcol(g, tj, 2 + e));
                            if (2 * t + e < M)
                                red[((size_t)rank * GVM_WARPS + warp) * GVM_POS + pos] =
                                    (f2){c[tj][lane][e], c[tj][lane][2 + e]};
                        }
                    }
                }
                free(xs);
            }
            // gvm_flush: phase 1 in every rank (slot f's S warps sum in warp order), phase 2
            // (CS > 1) rank r sums the ranks in order for positions with (pos / 4) % CS == r
            for (int phase = 1; phase <= (CS > 1 ? 2 : 1); phase++)
                for (int rank = 0; rank < CS; rank++)
                    for (int f = 0; f < FT; f++) {
                        const int strip = gvm_strip(bx, j, G, FT, f);
                        for (int pos = 0; pos < GVM_POS; pos++) {
                            const int m = gvm_pos_tok(pos);
                            if (m >= M) continue;
                            f2 v = {0, 0};
                            if (phase == 1) {
                                for (int ss = 0; ss < S; ss++) {
                                    const f2 q =
                                        red[((size_t)rank * GVM_WARPS + f * S + ss) * GVM_POS + pos];
                                    v.x += q.x, v.y += q.y;
                                }
                                if (CS > 1) {
                                    cred[(size_t)rank * GVM_POS + pos] = v;
                                    continue;
                                }
                            } else {
                                if ((pos >> 2) % CS != rank) continue;
                                for (int r = 0; r < CS; r++) {
                                    const f2 q = cred[(size_t)r * GVM_POS + pos];
                                    v.x += q.x, v.y += q.y;
                                }
                            }
                            const int col = strip * GVM_COLS + gvm_pos_col(pos);
                            if (col >= N) continue;
                            y[(size_t)m * N + col] = v.x;
                            y[(size_t)m * N + col + 1] = v.y;
                            wrote[(size_t)m * N + col]++;
                            wrote[(size_t)m * N + col + 1]++;
                        }
                    }
        }
    }
    free(red);
    free(cred);
}

static int g_cases = 0;

static void check_shape(int M, int N, int K, const gvm_plan_t *p, const char *what,
                        unsigned long long *seed) {
    uint16_t *W = g4_malloc((size_t)K * N * 2), *X = g4_malloc((size_t)M * K * 2);
    for (size_t i = 0; i < (size_t)K * N; i++)
        W[i] = g4_f32_to_f16((float)((int)(g4t_rand_u64(seed) % 5) - 2)); // -2..2
    for (size_t i = 0; i < (size_t)M * K; i++)
        X[i] = g4_f32_to_f16((float)((int)(g4t_rand_u64(seed) % 5) - 2));
    double *y = g4_calloc((size_t)M * N, sizeof(double));
    int *wrote = g4_calloc((size_t)M * N, sizeof(int));
    emulate(p, M, N, K, W, X, y, wrote);
    // the plain matmul, k outer (small integers: exact in any order)
    double *want = g4_calloc((size_t)M * N, sizeof(double)), *wrow = g4_malloc((size_t)N * 8);
    for (int k = 0; k < K; k++) {
        for (int n = 0; n < N; n++) wrow[n] = h2f(W[(size_t)k * N + n]);
        for (int m = 0; m < M; m++) {
            const double xv = h2f(X[(size_t)m * K + k]);
            for (int n = 0; n < N; n++) want[(size_t)m * N + n] += xv * wrow[n];
        }
    }
    long bad = 0, miss = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        if (wrote[i] != 1)
            miss++;
        else if (y[i] != want[i])
            bad++;
    }
    free(want);
    free(wrow);
    CHECK_MSG(bad == 0 && miss == 0,
              "M=%d N=%d K=%d S=%d CS=%d grid=%d (%s): %ld outputs differ, %ld not written once", M,
              N, K, p->S, p->CS, p->grid, what, bad, miss);
    printf("  %s: M=%d N=%d K=%d plan S=%d CS=%d FT=%d groups=%d grid=%d [%s]\n",
           bad || miss ? "FAIL" : "ok", M, N, K, p->S, p->CS, p->FT, p->groups, p->grid, what);
    g_cases++;
    free(W);
    free(X);
    free(y);
    free(wrote);
}

// A forced plan (the kernel takes any S, CS with S * CS <= K / 16 steps, grid <= groups).
static gvm_plan_t forced(int N, int S, int CS, int grid) {
    gvm_plan_t p;
    p.S = S;
    p.CS = CS;
    p.FT = GVM_WARPS / S;
    p.groups = ((N + GVM_COLS - 1) / GVM_COLS + p.FT - 1) / p.FT;
    p.grid = grid && grid < p.groups ? grid : p.groups;
    return p;
}

// The CTAs of a split st over NS strips: the groups of 8 / S strips x the cluster (S = min(st, 8)).
static long split_ctas(int NS, int st) {
    const int S = st < GVM_WARPS ? st : GVM_WARPS, FT = GVM_WARPS / S;
    return (long)((NS + FT - 1) / FT) * (st / S);
}

// The automatic plan's invariants (what the kernel's barriers and shared memory rely on) under
// the knobs cps (G4_GVM_CPS), smax (G4_GVM_SPLIT_MAX) and aim (G4_GVM_MIN_CTAS).
static gvm_plan_t check_plan(int N, int K, int sms, int cps, int smax, int aim, const char *what,
                             int verbose) {
    const gvm_plan_t p = gvm_plan(N, K, sms, cps, smax, aim);
    const int KT = (K + 15) / 16, NS = (N + 63) / 64, st = p.S * p.CS;
    CHECK_MSG(p.S >= 1 && p.S <= 8 && (p.S & (p.S - 1)) == 0 && p.CS >= 1 && p.CS <= 8 &&
                  (p.CS & (p.CS - 1)) == 0 && (p.CS == 1 || p.S == 8),
              "N %d K %d: S %d CS %d", N, K, p.S, p.CS);
    CHECK_MSG(st <= KT && st <= smax, "N %d K %d: split %d over %d steps (max %d)", N, K, st, KT,
              smax);
    CHECK(p.FT * p.S == 8 && p.groups * p.FT >= NS && (p.groups - 1) * p.FT < NS);
    CHECK(p.grid >= 1 && p.grid <= p.groups && (p.CS == 1 || p.grid == p.groups));
    CHECK((long)p.grid * p.CS <= (long)cps * sms);
    // the split stopped doubling at its cap, the steps, the aim, the SMs' capacity, or where the
    // doubled split would leave a warp < 2 steps (< 4 past the aim)
    CHECK_MSG(2 * st > KT || 2 * st > smax || split_ctas(NS, st) >= aim ||
                  split_ctas(NS, 2 * st) > (long)cps * sms || KT < 4 * st ||
                  (split_ctas(NS, 2 * st) > aim && KT < 8 * st),
              "N %d K %d sms %d cps %d max %d aim %d: split %d could double", N, K, sms, cps, smax,
              aim, st);
    if (verbose)
        printf("  plan %-16s N=%-6d K=%-5d sms %3d cps %d: S=%d CS=%d groups=%d grid=%d (%d "
               "CTAs), %d steps a warp, x %ld B at M=8\n",
               what, N, K, sms, cps, p.S, p.CS, p.groups, p.grid, p.grid * p.CS, (KT + st - 1) / st,
               gvm_x_bytes(8, K, p.CS));
    return p;
}

// The E2B shapes (N, K) and a few odd ones.
static const struct {
    int N, K;
    const char *what;
} e2b[] = {{2048, 1536, "q_proj"},
           {4096, 1536, "q_proj full"},
           {256, 1536, "k/v_proj"},
           {512, 1536, "k/v_proj full"},
           {1536, 2048, "o_proj"},
           {1536, 4096, "o_proj full"},
           {6144, 1536, "gate/up"},
           {12288, 1536, "gate/up wide"},
           {1536, 6144, "down"},
           {1536, 12288, "down wide"},
           {256, 1536, "ple gate"},
           {1536, 256, "ple proj"},
           {262144, 1536, "lm_head"},
           {8960, 1536, "ple_emb"},
           {2560, 1536, "q|k|v sliding"},
           {8, 8, "tiny"},
           {40, 1000, "odd"},
           {1000, 24, "odd"}};
enum { N_E2B = sizeof e2b / sizeof e2b[0], N_E2B_REAL = 15 }; // the first 15 are the model's

int main(void) {
    unsigned long long seed = 0x243f6a8885a308d3ull;
    printf("case: byte permutes\n");
    // gvm_prmt against its definition; the A fragment's halves
    CHECK(gvm_prmt(0x33221100u, 0x77665544u, 0x5410) == 0x55441100u);
    CHECK(gvm_prmt(0x33221100u, 0x77665544u, 0x7632) == 0x77663322u);
    printf("case: the plan's invariants\n");
    for (int i = 0; i < N_E2B; i++) {
        for (int cps = 1; cps <= 2; cps++) {
            check_plan(e2b[i].N, e2b[i].K, 132, cps, 64, 132, e2b[i].what, 1);
            check_plan(e2b[i].N, e2b[i].K, 3, cps, 64, 3, e2b[i].what, 1);
        }
    }
    // every knob value the environment takes (G4_GVM_CPS 1..4, G4_GVM_SPLIT_MAX 1..64, a few
    // G4_GVM_MIN_CTAS), quietly
    int nplans = 0;
    for (int i = 0; i < N_E2B; i++)
        for (int cps = 1; cps <= 4; cps++)
            for (int smax = 1; smax <= 64; smax *= 2)
                for (int a = 0; a < 5; a++) {
                    static const int aims[] = {1, 66, 132, 264, 65536};
                    check_plan(e2b[i].N, e2b[i].K, 132, cps, smax, aims[a], e2b[i].what, 0);
                    check_plan(e2b[i].N, e2b[i].K, 3, cps, smax, aims[a] < 3 ? aims[a] : 3,
                               e2b[i].what, 0);
                    nplans += 2;
                }
    CHECK(nplans == N_E2B * 4 * 7 * 5 * 2);
    printf("  %d plans under the knobs\n", nplans);

    // (the plans the H200 sweep measured fastest among the knobs' at K = 1536 and N >= 2048, the
    // PLE projection and the k/v shapes; bench/NOTES.md, the gvm_sweep outcome)
    printf("case: the default plans at 132 SMs\n");
    {
        static const int want[][7] = {
            // N, K, cps, S, CS, groups, grid
            {2048, 1536, 1, 8, 4, 32, 32},     {2048, 1536, 2, 8, 4, 32, 32},
            {4096, 1536, 1, 8, 2, 64, 64},     {4096, 1536, 2, 8, 2, 64, 64},
            {256, 1536, 1, 8, 4, 4, 4},        {256, 1536, 2, 8, 4, 4, 4},
            {512, 1536, 1, 8, 4, 8, 8},        {512, 1536, 2, 8, 4, 8, 8},
            {1536, 2048, 1, 8, 4, 24, 24},     {1536, 2048, 2, 8, 4, 24, 24},
            {1536, 4096, 1, 8, 4, 24, 24},     {1536, 4096, 2, 8, 8, 24, 24},
            {6144, 1536, 1, 8, 1, 96, 96},     {6144, 1536, 2, 8, 2, 96, 96},
            {12288, 1536, 1, 4, 1, 96, 96},    {12288, 1536, 2, 8, 1, 192, 192},
            {1536, 6144, 1, 8, 4, 24, 24},     {1536, 6144, 2, 8, 8, 24, 24},
            {1536, 12288, 1, 8, 4, 24, 24},    {1536, 12288, 2, 8, 8, 24, 24},
            {1536, 256, 1, 8, 1, 24, 24},      {1536, 256, 2, 8, 1, 24, 24},
            {262144, 1536, 1, 1, 1, 512, 132}, {262144, 1536, 2, 1, 1, 512, 264},
            {8960, 1536, 1, 4, 1, 70, 70},     {8960, 1536, 2, 8, 1, 140, 140},
            {2560, 1536, 1, 8, 2, 40, 40},     {2560, 1536, 2, 8, 2, 40, 40},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const int *w = want[i];
            const gvm_plan_t p = gvm_plan(w[0], w[1], 132, w[2], 64, 132);
            CHECK_MSG(p.S == w[3] && p.CS == w[4] && p.groups == w[5] && p.grid == w[6],
                      "N %d K %d cps %d: S %d CS %d groups %d grid %d, want %d %d %d %d", w[0],
                      w[1], w[2], p.S, p.CS, p.groups, p.grid, w[3], w[4], w[5], w[6]);
        }
    }

    printf("case: emulated walks (exact small integers)\n");
    static const struct {
        int M, N, K;
        const char *what;
    } shapes[] = {{1, 8, 8, "tiny, half a step"},
                  {2, 16, 16, "tiny, one step"},
                  {1, 24, 40, "odd, K % 16 == 8"},
                  {3, 40, 1000, "odd"},
                  {8, 1000, 24, "odd, N not a multiple of 64"},
                  {5, 1000, 1000, "odd"},
                  {7, 1000, 3000, "odd (cluster split-K)"},
                  {8, 1000, 248, "odd"},
                  {4, 8, 1528, "N = 8, K % 16 == 8"},
                  {6, 33 * 8, 200, "N = 264"},
                  {1, 1536, 256, "ple proj"},
                  {8, 256, 1536, "k/v"},
                  {2, 64, 136, "one strip"}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int M = shapes[i].M, N = shapes[i].N, K = shapes[i].K;
        gvm_plan_t p = gvm_plan(N, K, 132, 2, 64, 132);
        check_shape(M, N, K, &p, shapes[i].what, &seed);
        p = gvm_plan(N, K, 3, 2, 64, 3);
        check_shape(M, N, K, &p, "3 SMs", &seed);
        p = gvm_plan(N, K, 5, 1, 64, 5); // the fused kernel's plan (one CTA an SM)
        check_shape(M, N, K, &p, "5 SMs, 1 CTA each", &seed);
    }
    // every S and CS, and few CTAs walking many groups
    for (int S = 1; S <= 8; S *= 2)
        for (int CS = 1; CS <= (S == 8 ? 8 : 1); CS *= 2) {
            gvm_plan_t p = forced(1000, S, CS, 0);
            check_shape(3, 1000, 1032, &p, "forced (K % 16 == 8)", &seed);
            p = forced(1000, S, CS, S == 8 ? 0 : 1);
            check_shape(8, 1000, 1040, &p, "forced, 1 CTA walks the groups", &seed);
        }
    {
        gvm_plan_t p = forced(1000, 2, 1, 3);
        check_shape(1, 1000, 72, &p, "forced, 3 CTAs", &seed);
        p = forced(40, 8, 8, 0);
        check_shape(5, 40, 1032, &p, "forced, split 64 (K % 16 == 8)", &seed);
    }
    // The model's shapes (not the lm_head: 0.4 GB of W to emulate) under knob settings as
    // run.sh's gvm_sweep runs them (132 SMs), each distinct plan of a shape once, M 1 or 8 in
    // turn; a plan whose x passes GVM_X_MAX at that M is the CUDA-core kernel's (gvm_takes), not
    // emulated, and counted.
    printf("case: emulated walks of the E2B shapes under the plan knobs\n");
    {
        static const struct {
            int cps, smax, aim;
        } knobs[] = {{2, 64, 132}, {1, 64, 132}, {2, 1, 132}, {1, 4, 132},
                     {2, 16, 132}, {4, 64, 264}, {2, 64, 66}, {1, 32, 264}};
        enum { NK = sizeof knobs / sizeof knobs[0] };
        gvm_plan_t seen[NK * N_E2B_REAL];
        int nseen = 0, cc = 0, dup = 0, n = 0;
        const int before = g_cases;
        for (int k = 0; k < NK; k++)
            for (int i = 0; i < N_E2B_REAL; i++) {
                const int N = e2b[i].N, K = e2b[i].K;
                if (N > 100000) continue; // the lm_head
                const gvm_plan_t p = gvm_plan(N, K, 132, knobs[k].cps, knobs[k].smax, knobs[k].aim);
                int again = 0;
                for (int j = 0; j < nseen; j++)
                    again |= seen[j].S == p.S && seen[j].CS == p.CS && seen[j].grid == p.grid &&
                             seen[j].groups == p.groups && seen[j].FT == (N << 8 | K % 251);
                if (again) {
                    dup++;
                    continue;
                }
                seen[nseen] = p;
                seen[nseen++].FT = N << 8 | K % 251; // (the key: the shape; K % 251 tells them
                                                     // apart here)
                const int M = (n++ & 1) ? 8 : 1;
                if (gvm_x_bytes(M, K, p.CS) > GVM_X_MAX) {
                    cc++;
                    continue;
                }
                char what[64];
                snprintf(what, sizeof what, "%s, cps %d max %d aim %d", e2b[i].what, knobs[k].cps,
                         knobs[k].smax, knobs[k].aim);
                check_shape(M, N, K, &p, what, &seed);
            }
        printf("  %d emulated, %d repeated plans, %d left to the CUDA-core kernel\n",
               g_cases - before, dup, cc);
        CHECK(g_cases - before + cc + dup == NK * (N_E2B_REAL - 1));
    }
    printf("%d emulated cases\n", g_cases);
    return g4t_finish("test_gemv_f16_mma_map");
}
