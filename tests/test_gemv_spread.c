// test_gemv_spread.c: the balanced split of the Q4 GEMV's third design (kernels/gemv_spread.h,
// G4_GEMV3_SPREAD=1; issue 29), on the CPU. The kernel (kernels/gemm_q4.cu gemv_q4_v3s_kernel)
// calls the same header functions; here a model of its walk runs every warp's share:
//   - every (unit, k tile) item is covered exactly once (an array of counts, not a sum);
//   - warp shares and CTA shares (8 consecutive warps) differ by at most one item;
//   - a piece is a whole unit exactly when g4_gvs_pieces says the unit has one piece, and the
//     direct stores + split units account for every unit once;
//   - each split piece's slot is 2w or 2w + 1, used by one piece only, inside the workspace;
//   - each split unit's counter is in range and used by no other split unit; the tickets drawn
//     equal g4_gvs_pieces;
//   - the last piece's walk (g4_gvs_counter, g4_gvs_next) visits exactly the unit's pieces in
//     k order, contiguous from k tile 0 to KT, each with the slot its writer used;
//   - the pieces a unit of the E2B shapes on 132 SMs x 2 CTAs (counts; gate_up_wide and the
//     fused 12288 derived by hand in bench/NOTES.md, the rest by an independent brute force:
//     per-item owners from the share bounds, counting distinct owners a unit);
//   - the workspace formula (a hand-computed byte count) and the plan's one-line refusals.
// The kernel's values run on the GPU (tests/test_cuda_gemm.c, each third-design case under
// the spread form against the reference).
#include <stdlib.h>
#include <string.h>

#include "kernels/gemv_spread.h"
#include "tests/test_util.h"

typedef struct {
    int hist[64]; // units by piece count (>= 63 in the last bin)
    int split, whole, pieces;
} walk_stats;

typedef struct {
    int w, k0, k1, slot;
} piece;

// The model of the kernel's walk over the whole grid; returns 0 when every check passed.
static int walk(const g4_gvs_plan *p, walk_stats *st, const char *name) {
    const int before = g4t_failures;
    memset(st, 0, sizeof *st);
    unsigned char *cover = calloc(p->items, 1);
    int *slot_used = calloc((size_t)2 * p->warps, sizeof(int));
    int *counter_unit = malloc(sizeof(int) * (size_t)p->warps);
    int *tickets = calloc((size_t)p->warps, sizeof(int));
    int *npieces = calloc((size_t)p->units, sizeof(int));
    int *direct = calloc((size_t)p->units, sizeof(int));
    const int cap = p->kt; // a unit's pieces <= its items
    piece *pc = malloc(sizeof(piece) * p->items);
    for (int i = 0; i < p->warps; i++) counter_unit[i] = -1;
    int smin = 1 << 30, smax = 0, cmin = 1 << 30, cmax = 0;
    for (int w = 0; w < p->warps; w++) {
        const unsigned b = g4_gvs_start(p, w), e = g4_gvs_start(p, w + 1);
        const int share = (int)(e - b);
        smin = share < smin ? share : smin, smax = share > smax ? share : smax;
        if (w % G4_GVS_WARPS == 0) {
            const int cs = (int)(g4_gvs_start(p, w + G4_GVS_WARPS) - b);
            cmin = cs < cmin ? cs : cmin, cmax = cs > cmax ? cs : cmax;
        }
        for (unsigned i = b; i < e; i++)
            CHECK_MSG(g4_gvs_owner(p, i) == w, "%s: item %u owner %d, its share's warp %d", name, i,
                      g4_gvs_owner(p, i), w);
        // the walk: a cursor (unit, k tile) stepped one item at a time; a piece ends at the
        // unit's last k tile or the share's end
        unsigned i = b;
        while (i < e) {
            const int u = (int)(i / (unsigned)p->kt), k0 = (int)(i % (unsigned)p->kt);
            int k1 = k0;
            while (i < e && (int)(i / (unsigned)p->kt) == u) cover[i]++, i++, k1++;
            const int whole = k0 == 0 && k1 == p->kt;
            const int np = g4_gvs_pieces(p, u);
            CHECK_MSG(whole == (np == 1),
                      "%s: unit %d piece [%d, %d) of warp %d: whole %d, pieces %d", name, u, k0, k1,
                      w, whole, np);
            if (whole) {
                direct[u]++;
                continue;
            }
            const int slot = g4_gvs_slot(p, w, u);
            CHECK_MSG(slot == 2 * w || slot == 2 * w + 1, "%s: warp %d unit %d slot %d", name, w, u,
                      slot);
            if (slot < 0 || slot >= 2 * p->warps) continue;
            slot_used[slot]++;
            const int c = g4_gvs_counter(p, u);
            CHECK_MSG(c >= 0 && c < p->warps && (counter_unit[c] < 0 || counter_unit[c] == u),
                      "%s: unit %d counter %d (held by unit %d)", name, u, c,
                      c >= 0 && c < p->warps ? counter_unit[c] : -2);
            if (c < 0 || c >= p->warps) continue;
            counter_unit[c] = u;
            tickets[c]++;
            if (npieces[u] < cap) pc[(size_t)u * cap + npieces[u]] = (piece){w, k0, k1, slot};
            npieces[u]++;
        }
    }
    long bad_cover = 0;
    for (unsigned i = 0; i < p->items; i++) bad_cover += cover[i] != 1;
    CHECK_MSG(bad_cover == 0, "%s: %ld of %u items not covered exactly once", name, bad_cover,
              p->items);
    long bad_slot = 0;
    for (int s = 0; s < 2 * p->warps; s++) bad_slot += slot_used[s] > 1;
    CHECK_MSG(bad_slot == 0, "%s: %ld slots written by two pieces", name, bad_slot);
    CHECK_MSG(smax - smin <= 1, "%s: warp shares %d..%d", name, smin, smax);
    CHECK_MSG(cmax - cmin <= 1, "%s: CTA shares %d..%d", name, cmin, cmax);
    for (int u = 0; u < p->units; u++) {
        const int np = g4_gvs_pieces(p, u);
        st->hist[np < 63 ? np : 63]++;
        st->pieces += np;
        if (np == 1) {
            st->whole++;
            CHECK_MSG(direct[u] == 1 && npieces[u] == 0, "%s: whole unit %d stored %d times", name,
                      u, direct[u]);
            continue;
        }
        st->split++;
        CHECK_MSG(direct[u] == 0 && npieces[u] == np, "%s: unit %d: %d split pieces, %d expected",
                  name, u, npieces[u], np);
        const int c = g4_gvs_counter(p, u);
        CHECK_MSG(tickets[c] == np, "%s: unit %d: %d tickets, %d pieces", name, u, tickets[c], np);
        // the last piece's walk: the pieces in k order, each with its writer's slot
        int w = c, n = 0, k = 0, ok = 1;
        while (w >= 0 && n <= np) {
            const piece *q = n < np && n < cap ? &pc[(size_t)u * cap + n] : NULL;
            if (!q || q->w != w || q->k0 != k || q->slot != g4_gvs_slot(p, w, u)) ok = 0;
            if (q) k = q->k1;
            n++;
            w = g4_gvs_next(p, w, u);
        }
        CHECK_MSG(ok && n == np && k == p->kt,
                  "%s: unit %d: the reader's walk saw %d pieces to k "
                  "%d (%d pieces, %d k tiles)",
                  name, u, n, k, np, p->kt);
    }
    free(cover), free(slot_used), free(counter_unit), free(tickets), free(npieces), free(direct);
    free(pc);
    return g4t_failures != before;
}

// One E2B shape on 132 SMs x 2 CTAs: units, k tiles, the piece-count histogram {pieces, units}
// (up to 2 bins), the warp share min and the CTA share min (max = min + 1 unless equal).
static void e2b(const char *name, int N, int K, int fused, int units, int kt, int p0, int u0,
                int p1, int u1, int wmin, int wmax, int cmin, int cmax) {
    g4_gvs_plan p;
    char err[200];
    const int made = g4_gvs_make(&p, N, K, fused, 132, 2, err, sizeof err) == 0;
    CHECK_MSG(made, "%s: %s", name, err);
    if (!made) return;
    CHECK_INT(p.units, units);
    CHECK_INT(p.kt, kt);
    CHECK_INT(p.warps, 2112);
    walk_stats st;
    walk(&p, &st, name);
    CHECK_MSG(st.hist[p0] == u0 && (p1 == 0 || st.hist[p1] == u1) &&
                  st.hist[p0] + (p1 ? st.hist[p1] : 0) == units,
              "%s: %d units of %d pieces (%d expected), %d of %d (%d expected)", name, st.hist[p0],
              p0, u0, p1 ? st.hist[p1] : 0, p1, u1);
    int smin = 1 << 30, smax = 0, cmn = 1 << 30, cmx = 0;
    for (int w = 0; w < p.warps; w++) {
        const int s = (int)(g4_gvs_start(&p, w + 1) - g4_gvs_start(&p, w));
        smin = s < smin ? s : smin, smax = s > smax ? s : smax;
    }
    for (int c = 0; c < p.ctas; c++) {
        const int s = (int)(g4_gvs_start(&p, 8 * c + 8) - g4_gvs_start(&p, 8 * c));
        cmn = s < cmn ? s : cmn, cmx = s > cmx ? s : cmx;
    }
    CHECK_MSG(smin == wmin && smax == wmax && cmn == cmin && cmx == cmax,
              "%s: warp shares %d..%d (%d..%d expected), CTA shares %d..%d (%d..%d)", name, smin,
              smax, wmin, wmax, cmn, cmx, cmin, cmax);
    printf("  %-13s N %6d K %5d: %4d units x %3d k tiles on %d CTAs: pieces a unit %d x %d%s, warp "
           "share %d..%d, CTA %d..%d\n",
           name, N, K, p.units, p.kt, p.ctas, u0, p0, p1 ? " + more" : "", smin, smax, cmn, cmx);
}

int main(void) {
    // E2B on 132 SMs (H100 / H200) x 2 CTAs: 2112 warps
    e2b("q_proj", 2048, 1536, 0, 64, 24, 24, 64, 0, 0, 0, 1, 5, 6);
    e2b("kv_proj", 256, 1536, 0, 8, 24, 24, 8, 0, 0, 0, 1, 0, 1);
    e2b("o_proj", 1536, 2048, 0, 48, 32, 32, 48, 0, 0, 0, 1, 5, 6);
    e2b("gate_up", 6144, 1536, 0, 192, 24, 11, 192, 0, 0, 2, 3, 17, 18);
    e2b("gate_up_wide", 12288, 1536, 0, 384, 24, 6, 384, 0, 0, 4, 5, 34, 35);
    e2b("fused 6144", 6144, 1536, 1, 384, 24, 6, 384, 0, 0, 4, 5, 34, 35);
    e2b("fused 12288", 12288, 1536, 1, 768, 24, 3, 384, 4, 384, 8, 9, 69, 70);
    e2b("down", 1536, 6144, 0, 48, 96, 44, 48, 0, 0, 2, 3, 17, 18);
    e2b("down_wide", 1536, 12288, 0, 48, 192, 44, 48, 0, 0, 4, 5, 34, 35);
    e2b("ple_emb", 8960, 1536, 0, 280, 24, 8, 216, 9, 64, 3, 4, 25, 26);
    e2b("ple_proj", 1536, 256, 0, 48, 4, 4, 48, 0, 0, 0, 1, 0, 1);
    e2b("lm_head", 262144, 1536, 0, 8192, 24, 1, 6208, 2, 1984, 93, 94, 744, 745);

    // Odd shapes: N = 16..33 tiles, K not a multiple of 256, 1 / 114 / 132 SMs, 1 or 2 CTAs an
    // SM, plain and fused: the walk's invariants only.
    const int Ks[] = {64, 192, 960, 1536, 3008, 12288};
    const int smss[] = {1, 114, 132};
    int cases = 0, failed = 0;
    for (int nt = 16; nt <= 33; nt++)
        for (int ki = 0; ki < 6; ki++)
            for (int si = 0; si < 3; si++)
                for (int cps = 1; cps <= 2; cps++)
                    for (int fused = 0; fused <= 1; fused++) {
                        g4_gvs_plan p;
                        char err[200], name[96];
                        snprintf(name, sizeof name, "N %d K %d %s on %d x %d", 16 * nt, Ks[ki],
                                 fused ? "fused" : "plain", smss[si], cps);
                        const int made = g4_gvs_make(&p, 16 * nt, Ks[ki], fused, smss[si], cps, err,
                                                     sizeof err) == 0;
                        CHECK_MSG(made, "%s: %s", name, err);
                        if (!made) continue;
                        CHECK_INT(p.units, fused ? nt : (nt + 1) / 2);
                        walk_stats st;
                        failed += walk(&p, &st, name);
                        cases++;
                    }
    printf("  odd shapes: %d plans walked, %d with a failure\n", cases, failed);
    CHECK_INT(cases, 18 * 6 * 3 * 2 * 2);

    // The workspace: counters (4 B a warp, rounded up to 256) + 2 slots a warp x 1 KB.
    CHECK_INT(G4_GVS_SLOT_BYTES, 1024);
    CHECK_INT(g4_gvs_part_offset(2112), 8448); // 2112 x 4 = 8448 = 33 x 256
    CHECK_INT(g4_gvs_workspace(2112), 8448 + 4325376);
    CHECK_INT(g4_gvs_workspace(8), 256 + 16384);
    CHECK_INT(g4_gvs_workspace(1824), 7424 + 3735552); // 114 SMs: 7296 B of counters -> 7424

    // Refusals: one line naming the shape
    {
        g4_gvs_plan p;
        char err[200];
        CHECK(g4_gvs_make(&p, 1000, 1536, 0, 132, 2, err, sizeof err) == -1 &&
              strstr(err, "N 1000 K 1536") && !strchr(err, '\n'));
        CHECK(g4_gvs_make(&p, 1024, 1000, 0, 132, 2, err, sizeof err) == -1 &&
              strstr(err, "K 1000"));
        CHECK(g4_gvs_make(&p, 1024, 1536, 0, 0, 2, err, sizeof err) == -1 && strstr(err, "0 SMs"));
        // 2^24 tiles x 24 k tiles x 2112 warps: past 32 bits
        CHECK(g4_gvs_make(&p, 1 << 28, 1536, 0, 132, 2, err, sizeof err) == -1 &&
              strstr(err, "past 32 bits") && !strchr(err, '\n'));
    }
    return g4t_finish("test_gemv_spread");
}
