// test_attn_short_ranges.c: the decode attention's short-form key ranges (kernels/attn_short.h,
// G4_ATTN_SHORT=1) on the CPU, no GPU needed. For every (tile size, window, capacity, split
// count, length) of a sweep the visible tiles are computed as attention_decode.cu dec_split does
// (keys [lo, hi] of the last token at L - 1, a tile every TILE keys from lo), then the split
// CTAs' ranges as the kernel takes them from attn_short.h. Exact checks: n_act in [1, n_splits]
// and == min(n_splits, ceil(tiles / MIN_TILES)) (>= 1); CTAs s >= n_act take nothing; the
// active ranges are non-empty (with any tile), sizes within 1 of each other, and cover every
// visible key exactly once (each key counted over the splits); exactly one split owns the row
// of the new key (the PREP kernels store it there); one split (the merge skipped) exactly when
// tiles <= MIN_TILES or the grid has one split. The device code itself is checked by
// tests/test_cuda_attention.c (its short-form pass).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_short.h"
#include "tests/test_util.h"

static int g_cases = 0;

// One launch: cache of `cap` rows, grid of n_splits splits, the token at L - 1, window (0: none).
static void check_one(int tile, int cap, int n_splits, int L, int window, unsigned char *cover) {
    const int ps = L - 1, hi = ps < cap - 1 ? ps : cap - 1;
    const int lo = window > 0 && ps - window + 1 > 0 ? ps - window + 1 : 0;
    const int n_tiles = hi >= lo ? (hi - lo) / tile + 1 : 0;
    const int n_act = g4_attn_short_active(n_tiles, n_splits);
    int want = (n_tiles + G4_ATTN_SHORT_MIN_TILES - 1) / G4_ATTN_SHORT_MIN_TILES;
    want = want < 1 ? 1 : want > n_splits ? n_splits : want;
    g_cases++;
    CHECK(n_act == want && n_act >= 1 && n_act <= n_splits);
    CHECK((n_act == 1) == (n_tiles <= G4_ATTN_SHORT_MIN_TILES || n_splits == 1));
    const int n_keys = hi >= lo ? hi - lo + 1 : 0;
    memset(cover, 0, (size_t)(n_keys > 0 ? n_keys : 1));
    int min_sz = 1 << 30, max_sz = -1, owners = 0, bad = 0;
    for (int s = 0; s < n_splits; s++) {
        if (s >= n_act) continue; // the kernel's early exit: past the active splits
        int b = -1, e = -1;
        g4_attn_short_range(n_tiles, n_act, s, &b, &e);
        if (b < 0 || e < b || e > n_tiles) {
            bad++;
            continue;
        }
        min_sz = e - b < min_sz ? e - b : min_sz, max_sz = e - b > max_sz ? e - b : max_sz;
        // the kernel's keys: j from lo + b TILE, up to hi (past it zero-filled, masked)
        for (long long j = lo + (long long)b * tile; j < lo + (long long)e * tile && j <= hi; j++)
            cover[j - lo]++;
        const int own_tile = ps >= 0 && ps < cap && n_tiles > 0 ? (ps - lo) / tile : -1;
        owners += own_tile >= b && own_tile < e;
    }
    size_t once = 0;
    for (int j = 0; j < n_keys; j++) once += cover[j] == 1;
    CHECK(bad == 0);
    CHECK(once == (size_t)n_keys);
    CHECK(n_tiles == 0 || min_sz >= 1);
    CHECK(max_sz - min_sz <= 1);
    CHECK(owners == (L - 1 < cap && n_tiles > 0 ? 1 : 0));
    // past one split, each range holds at least 2 tiles unless the grid caps n_act
    CHECK(n_act == 1 || n_act == n_splits || min_sz >= 2);
}

int main(void) {
    const int tiles[] = {64, 32};      // dec_tile: hd 256, hd 512
    const int windows[] = {0, 512, 7}; // E2B's full and sliding layers, a small window
    const int splits[] = {1, 2, 3, 5, 8, 66, 132, 512};
    unsigned char *cover = malloc(1 << 17);
    unsigned long long seed = 77;
    for (int ti = 0; ti < 2; ti++)
        for (int wi = 0; wi < 3; wi++)
            for (int si = 0; si < 8; si++) {
                const int tile = tiles[ti], window = windows[wi], ns = splits[si];
                const int caps[] = {1, 63, 64, 65, 200, 1000, 4096, 32768, 100000};
                for (int ci = 0; ci < 9; ci++) {
                    const int cap = caps[ci], max_tiles = (cap + tile - 1) / tile;
                    const int n_splits = ns < max_tiles ? ns : max_tiles; // dec_n_splits' bound
                    // every length up to 1100 (all the short ranges' edges), then a sample
                    for (int L = 1; L <= cap && L <= 1100; L++)
                        check_one(tile, cap, n_splits, L, window, cover);
                    for (int i = 0; i < 200 && cap > 1100; i++) {
                        const int L = 1101 + (int)(g4t_rand_u64(&seed) % (unsigned)(cap - 1100));
                        check_one(tile, cap, n_splits, L, window, cover);
                    }
                    check_one(tile, cap, n_splits, cap, window, cover);
                }
            }
    // no visible key (a position before the cache): one split, an empty range
    check_one(64, 4096, 132, 0, 0, cover);
    // the E2B decode after 128 / 192 / 256 / 512 on a 32k grid (132 splits): n_act exactly
    CHECK(g4_attn_short_active(2, 132) == 1 && g4_attn_short_active(3, 132) == 1);
    CHECK(g4_attn_short_active(4, 132) == 1 && g4_attn_short_active(5, 132) == 2);
    CHECK(g4_attn_short_active(8, 132) == 2 && g4_attn_short_active(16, 132) == 4);
    CHECK(g4_attn_short_active(0, 132) == 1 && g4_attn_short_active(2048, 132) == 132);
    // mode 2 takes the ranges exactly where they are one split; mode 1 always, 0 never
    for (int t = 0; t <= 40; t++) {
        CHECK(g4_attn_short_applies(2, t) == (t <= G4_ATTN_SHORT_MIN_TILES));
        CHECK(g4_attn_short_applies(2, t) == (g4_attn_short_active(t, 132) == 1));
        CHECK(g4_attn_short_applies(1, t) && !g4_attn_short_applies(0, t));
    }
    free(cover);
    printf("test_attn_short_ranges: %d launches\n", g_cases);
    return g4t_finish("test_attn_short_ranges");
}
