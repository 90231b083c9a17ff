// attn_short.h: the key ranges of the decode attention's short form (G4_ATTN_SHORT=1,
// attention_decode.cu): plain C shared by the split and merge kernels (__host__ __device__) and
// the CPU test tests/test_attn_short_ranges.c, so the ranges the GPU walks are the ones tested.
//
// The launch's grid is fixed (n_splits CTAs a KV head, sized for the cache capacity: a graph is
// captured once and replayed at every position), the visible key tiles n_tiles follow the
// device position. The short form spreads them over n_act = min(n_splits, ceil(n_tiles /
// MIN_TILES)) splits (at least 1), split s taking tiles [s n_tiles / n_act, (s + 1) n_tiles /
// n_act): equal ranges (sizes differ by at most 1) that tile [0, n_tiles) exactly once, none
// empty when n_tiles > 0. With n_act == 1 the one split writes the output itself and the merge
// kernel does nothing. Mode 2 (G4_ATTN_SHORT=2) takes the short form only where it is that one
// split (n_tiles <= MIN_TILES) and keeps the static slicing (a tile a split) past it: the merge
// removed at short range without putting several tiles on one CTA at longer range.
//
// MIN_TILES = 4: a tile is 32 KB of K and 32 KB of V at both head dims (dec_tile: 64 keys at hd
// 256, 32 at hd 512), and the same MMA work (16 rows x 16384 products), so a count of tiles is a
// fixed cost whatever hd. One CTA streams 4 tiles (256 KB) through its 3-stage cp.async
// pipeline in ~2 us at one SM's ~120 GB/s of L2 fill, about what the merge launch it saves cost
// in situ (2.9 us, bench/NOTES.md issue 30 step trace) and what a second split saves: below 4
// tiles (hd 256: <= 256 keys, hd 512: <= 128) one split and no merge; past them at least ~2
// tiles a split, so the merge reads a quarter of the partials the one-tile-a-split form writes.
#ifndef G4_ATTN_SHORT_H
#define G4_ATTN_SHORT_H

#ifdef __CUDACC__
#define ASR_HD __host__ __device__ __forceinline__
#else
#define ASR_HD static inline
#endif

enum { G4_ATTN_SHORT_MIN_TILES = 4 };

// Active splits for n_tiles visible tiles (0 when no key is visible: still 1, whose empty range
// writes the zero output the merge would) on a grid of n_splits >= 1.
ASR_HD int g4_attn_short_active(int n_tiles, int n_splits) {
    const int a = (n_tiles + G4_ATTN_SHORT_MIN_TILES - 1) / G4_ATTN_SHORT_MIN_TILES;
    return a < 1 ? 1 : a > n_splits ? n_splits : a;
}

// Whether a launch in mode (0 off, 1 always, 2 only as one split) takes the short ranges.
ASR_HD int g4_attn_short_applies(int mode, int n_tiles) {
    return mode == 1 || (mode == 2 && n_tiles <= G4_ATTN_SHORT_MIN_TILES);
}

// Split s's tiles [*begin, *end) of n_tiles over n_act splits (0 <= s < n_act); 64-bit products:
// n_tiles * n_act may pass 2^31 for huge caches.
ASR_HD void g4_attn_short_range(int n_tiles, int n_act, int s, int *begin, int *end) {
    *begin = (int)((long long)s * n_tiles / n_act);
    *end = (int)((long long)(s + 1) * n_tiles / n_act);
}

#endif
