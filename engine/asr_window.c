// asr_window.c: long-form ASR windows and stitching (engine/asr_window.h).
#include "engine/asr_window.h"

#include "base/base.h"

int g4_asr_windows(int64_t n, int64_t window, int64_t overlap, g4_asr_window **out) {
    G4_ASSERT(n >= 1 && window > overlap && overlap >= 0);
    const int64_t step = window - overlap;
    int count = 1;
    while ((int64_t)(count - 1) * step + window < n) count++;
    g4_asr_window *w = g4_calloc((size_t)count, sizeof *w);
    for (int k = 0; k < count; k++) {
        w[k].start = (int64_t)k * step;
        w[k].end = k + 1 < count ? w[k].start + window : n;
    }
    for (int k = 0; k < count; k++) {
        w[k].seg_start = k ? (w[k].start + w[k - 1].end) / 2 : 0;
        w[k].seg_end = k + 1 < count ? (w[k + 1].start + w[k].end) / 2 : n;
    }
    *out = w;
    return count;
}

int g4_asr_overlap(const int32_t *prev, int n_prev, const int32_t *next, int n_next) {
    for (int m = n_prev < n_next ? n_prev : n_next; m > 0; m--) {
        int same = 1;
        for (int i = 0; i < m && same; i++) same = prev[n_prev - m + i] == next[i];
        if (same) return m;
    }
    return 0;
}
