// test_gemv3_walk.c: the Q4 GEMV third design's two main loops (kernels/gemm_q4.cu
// gemv_q4_v3_kernel, LOOP 1: every step tests the group events; LOOP 2, G4_GEMV3_LOOP=2: blocks
// without them where kernels/gemv3_walk.h's gv3_block_plain allows) walked on the CPU, no GPU.
// Each warp of a plan is emulated as the kernel runs it (the same cursor variables, tests and
// updates in the same order; the block rule is the header's, called as the kernel calls it): the
// ring's loads (slot, tile), the steps computed (slot, the tile the slot holds, x's k tile) and
// the flushes (group). Checked: both loops give the same event sequence, element for element;
// every step computes the tile of its (group, k step) (clamped past the edge as the kernel
// clamps) against x of its k tile; every refill loads a tile the walk computes later; a flush per
// group; and LOOP 2's blocks without tests cover exactly the steps the header's rule predicts
// (counted: for L a multiple of U all but the walk's last one or two blocks), and none where
// gv3_plain_blocks_possible sends the launch to LOOP 1.
// Shapes: the E2B decode shapes the third design takes (lm_head, ple_emb, fused gate/up 6144
// and 12288, K = 1536) under their automatic plan on 132 SMs (computed here as gemv_plan does),
// and odd ones: units 1..33, K / 64 = 1..40 (K not a multiple of 256), every K split 1..64 (S
// warps x CS CTAs) and persistent grids of 1, 2, 3 CTAs and all groups.
// The device loop itself runs on the GPU in tests/test_cuda_gemm.c (the third design's cases
// under both loops, compared bit for bit).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemv3_walk.h"
#include "tests/test_util.h"

enum { WARPS = 8, U = 4, MAXEV = 1 << 16 };

// One event of a warp's walk: kind 'L' (a load: slot, tile), 'C' (a step: slot, tile held,
// x k tile), 'F' (a flush: group).
typedef struct {
    char kind;
    int a, b, c;
} ev;

typedef struct {
    ev e[MAXEV];
    int n;
    int overflow;
} evlist;

static void push(evlist *l, char kind, int a, int b, int c) {
    if (l->n == MAXEV) {
        l->overflow = 1;
        return;
    }
    l->e[l->n++] = (ev){kind, a, b, c};
}

// The warp's geometry, as gemv_q4_v3_kernel computes it (units of one feature tile: T = 1; the
// T = 2 form clamps each tile the same way, and the walk does not depend on T).
typedef struct {
    int NT, KT, G, FT, f, kb, L, n, bx;
} warp_geo;

static int unit_nt(const warp_geo *w, int j) {
    return (w->bx + j * w->G) * w->FT + w->f;
}
static int base_tile(const warp_geo *w, int j) { // set_bases: clamped to the last real tile
    const int nt = unit_nt(w, j);
    return (nt < w->NT ? nt : w->NT - 1) * w->KT + w->kb;
}

// The walk; loop 1 or 2. ring[u]: the tile slot u holds (-1: none yet).
static void walk(const warp_geo *w, int loop, evlist *out, int *plain_steps) {
    const int n = w->n, L = w->L;
    int ring[U];
    int bt = 0, lr = 0, lj = 0;
    for (int u = 0; u < U; u++) ring[u] = -1;
#define LOAD_NEXT(u)                                                                               \
    do {                                                                                           \
        ring[u] = bt + lr;                                                                         \
        push(out, 'L', (u), bt + lr, 0);                                                           \
        if (++lr == L) {                                                                           \
            lr = 0;                                                                                \
            bt = base_tile(w, ++lj);                                                               \
        }                                                                                          \
    } while (0)
    bt = base_tile(w, 0);
    for (int u = 0; u < U; u++)
        if (u < n) LOAD_NEXT(u);
    int cj = 0, cr = 0, px = w->kb; // px: x's k tile
    *plain_steps = 0;
    for (int i0 = 0; i0 < n; i0 += U) {
        if (loop == 2) {
            while (gv3_block_plain(i0, n, cr, lr, L, U)) {
                const int base = bt + lr; // the block's first refill
                for (int u = 0; u < U; u++) {
                    if (i0 + u < n) {
                        push(out, 'C', u, ring[u], px + u);
                        ring[u] = base + u;
                        push(out, 'L', u, base + u, 0);
                        ++*plain_steps;
                    }
                }
                i0 += U;
                px += U;
                lr += U;
                if (lr == L) {
                    lr = 0;
                    bt = base_tile(w, ++lj);
                }
                cr += U;
                if (cr == L) {
                    push(out, 'F', cj, 0, 0);
                    cr = 0;
                    cj++;
                    px = w->kb;
                }
            }
        }
        for (int u = 0; u < U; u++) {
            if (i0 + u >= n) break;
            push(out, 'C', u, ring[u], px);
            if (i0 + u + U < n) LOAD_NEXT(u);
            px += 1;
            if (++cr == L) {
                push(out, 'F', cj, 0, 0);
                cr = 0;
                cj++;
                px = w->kb;
            }
        }
    }
#undef LOAD_NEXT
}

static evlist g_a, g_b;
static long g_warps, g_plain, g_steps;

// Every warp of a plan: S warps a CTA split K (FT = 8 / S feature units a CTA), CS CTAs a
// cluster, grid CTAs walking `groups` groups. Returns 0 when every check passed.
static int check_plan(int units, int KT, int S, int CS, int grid, int expect_plain) {
    const int FT = WARPS / S, groups = (units + FT - 1) / FT, ST = S * CS;
    int bad = 0;
    for (int bx = 0; bx < grid; bx++)
        for (int rank = 0; rank < CS; rank++)
            for (int warp = 0; warp < WARPS; warp++) {
                warp_geo w = {units, KT, grid, FT, warp / S, 0, 0, 0, bx};
                const int s = warp % S, sp = rank * S + s;
                w.kb = (int)((long long)KT * sp / ST);
                w.L = (int)((long long)KT * (sp + 1) / ST) - w.kb;
                const int nj = (groups - bx + grid - 1) / grid;
                w.n = nj * w.L;
                int p1 = 0, p2 = 0;
                g_a.n = g_b.n = 0;
                walk(&w, 1, &g_a, &p1);
                walk(&w, 2, &g_b, &p2);
                g_warps++;
                g_plain += p2;
                g_steps += w.n;
                int ok = !g_a.overflow && !g_b.overflow && g_a.n == g_b.n &&
                         memcmp(g_a.e, g_b.e, sizeof(ev) * (size_t)g_a.n) == 0;
                // every step computes its own tile against x of its k tile; a flush a group
                int step = 0, flushes = 0, loads = 0;
                for (int i = 0; i < g_a.n && ok; i++) {
                    const ev *e = &g_a.e[i];
                    if (e->kind == 'C') {
                        const int j = step / w.L, r = step % w.L;
                        ok = e->b == base_tile(&w, j) + r && e->c == w.kb + r && e->a == step % U;
                        step++;
                    } else if (e->kind == 'F') {
                        ok = e->a == flushes++ && step == flushes * w.L;
                    } else {
                        ok = e->a == loads % U && loads < w.n;
                        if (ok) {
                            const int j = loads / w.L, r = loads % w.L;
                            ok = e->b == base_tile(&w, j) + r;
                        }
                        loads++;
                    }
                }
                ok = ok && step == w.n && flushes == nj && loads == w.n;
                // where the launch runs LOOP 1 instead, LOOP 2 would have had no such block
                if (!gv3_plain_blocks_possible(KT, ST, groups, grid, U)) ok = ok && p2 == 0;
                // the blocks without tests: exactly those gv3_block_plain admits; for L a
                // multiple of U (and L >= U) all the walk's steps but its last block or two
                if (ok && expect_plain && w.L % U == 0 && w.L >= U && w.n >= 2 * U)
                    ok = p2 >= w.n - 2 * U && p2 % U == 0;
                if (!ok && bad++ < 3)
                    fprintf(stderr,
                            "  walk differs: units %d KT %d S %d CS %d grid %d: CTA %d rank %d "
                            "warp %d (L %d, n %d; events %d / %d, plain steps %d)\n",
                            units, KT, S, CS, grid, bx, rank, warp, w.L, w.n, g_a.n, g_b.n, p2);
            }
    return bad;
}

// CTAs of a K split st (S = min(st, 8) warps a CTA, st / S CTAs a cluster) over `units`.
static long plan_ctas(int units, int st) {
    const int S = st < WARPS ? st : WARPS, FT = WARPS / S;
    return (long)((units + FT - 1) / FT) * (st / S);
}

// gemv_plan's automatic K split and grid on `sms` SMs (defaults: G4_GEMV_CPS 1, PCPS 2, CTA cap
// 2; U 8, fused 4), for units of 16 features.
static void auto_plan(int units, int KT, int sms, int *S, int *CS, int *grid) {
    const int kmax = KT >= 64 ? 64 : 1 << (31 - __builtin_clz((unsigned)KT));
    const long target = sms, hw_cap = 2L * sms;
    int st = 1;
    while (st < kmax && plan_ctas(units, st) < target && plan_ctas(units, st * 2) <= hw_cap)
        st *= 2;
    *S = st < WARPS ? st : WARPS;
    *CS = st / *S;
    const int groups = (units + WARPS / *S - 1) / (WARPS / *S);
    const long max_ctas = groups <= hw_cap ? groups : 2L * sms;
    *grid = *CS > 1 || groups <= max_ctas ? groups : (int)max_ctas;
}

int main(void) {
    // The E2B decode shapes of the third design (K = 1536: 24 k tiles): plain units are two
    // feature tiles, fused ones one.
    static const struct {
        const char *name;
        int units;
    } e2b[] = {{"lm_head (262144, plain)", 262144 / 32},
               {"ple_emb (8960, plain)", 8960 / 32},
               {"gate/up fused 6144", 6144 / 16},
               {"gate/up fused 12288", 12288 / 16}};
    for (size_t i = 0; i < sizeof e2b / sizeof e2b[0]; i++) {
        int S, CS, grid;
        auto_plan(e2b[i].units, 24, 132, &S, &CS, &grid);
        g_plain = g_steps = 0;
        CHECK_MSG(check_plan(e2b[i].units, 24, S, CS, grid, 1) == 0, "%s", e2b[i].name);
        const int groups = (e2b[i].units + WARPS / S - 1) / (WARPS / S);
        const int l2 = gv3_plain_blocks_possible(24, S * CS, groups, grid, U);
        printf("%s: S %d CS %d grid %d: %ld of %ld steps in blocks without tests; %s\n",
               e2b[i].name, S, CS, grid, g_plain, g_steps,
               l2 ? "G4_GEMV3_LOOP=2 runs LOOP 2" : "LOOP 1 runs either way");
        CHECK_MSG(l2 == (g_plain > 0), "%s: blocks possible %d, plain steps %ld", e2b[i].name, l2,
                  g_plain);
    }
    // lm_head: L = 24, about 4 groups a warp: every block but the walk's last
    {
        int S, CS, grid;
        auto_plan(262144 / 32, 24, 132, &S, &CS, &grid);
        g_plain = g_steps = g_warps = 0;
        check_plan(262144 / 32, 24, S, CS, grid, 1);
        CHECK_INT(g_steps - g_plain, g_warps * U);
    }
    // Odd shapes: every K split (S warps x CS CTAs), persistent grids.
    long plans = 0;
    g_plain = g_steps = g_warps = 0;
    for (int units = 1; units <= 33; units++)
        for (int KT = 1; KT <= 40; KT++)
            for (int st = 1; st <= 64 && st <= KT; st *= 2) {
                const int S = st < WARPS ? st : WARPS, CS = st / S;
                const int groups = (units + WARPS / S - 1) / (WARPS / S);
                const int grids[4] = {groups, 1, 2, 3};
                for (int gi = 0; gi < 4; gi++) {
                    if (grids[gi] > groups || (gi && CS > 1)) continue; // clusters: one group
                    if (gi && grids[gi] == groups) continue;
                    plans++;
                    CHECK_MSG(check_plan(units, KT, S, CS, grids[gi], 1) == 0,
                              "units %d KT %d st %d grid %d", units, KT, st, grids[gi]);
                }
            }
    printf("odd shapes: %ld plans, %ld warps, %ld of %ld steps in blocks without tests\n", plans,
           g_warps, g_plain, g_steps);
    CHECK(g_plain > 0 && g_plain < g_steps);
    return g4t_finish("test_gemv3_walk");
}
