// vision_pool.c: reference Gemma-4 vision pooling to soft tokens (spec 4.5; HF
// Gemma4VisionPooler._avg_pool_by_positions + the sqrt(hidden) scale). Sums in double.
#include <stdlib.h>

#include "base/base.h"
#include "kernels/ref/ref.h"

int ref_vision_pool(float *out, uint8_t *used, const float *x, const int32_t *pos_xy, int N, int D,
                    int k, int n_bins, float scale) {
    if (k <= 0) return g4_fail(G4_EUSER, "vision pool: kernel size %d, expected > 0", k);
    // HF: padding positions (-1, -1) clamp to 0 for the width and the bin index; their rows are
    // zeroed first, so they add nothing.
    int max_x = 0;
    for (int i = 0; i < N; i++)
        if (pos_xy[2 * i] > max_x) max_x = pos_xy[2 * i];
    const int bins_per_row = (max_x + 1) / k;
    double *acc = g4_calloc((size_t)n_bins * D, sizeof(double));
    if (used) memset(used, 0, (size_t)n_bins);
    int rc = G4_OK;
    for (int i = 0; i < N; i++) {
        const int px = pos_xy[2 * i], py = pos_xy[2 * i + 1];
        const int cx = px < 0 ? 0 : px, cy = py < 0 ? 0 : py;
        const int bin = cx / k + bins_per_row * (cy / k);
        if (bin < 0 || bin >= n_bins) {
            rc = g4_fail(G4_EUSER,
                         "vision pool: patch %d at (%d, %d) falls in bin %d, expected < %d bins", i,
                         px, py, bin, n_bins);
            break;
        }
        if (used) used[bin] = 1;
        if (px == -1 && py == -1) continue; // padding patch: a zero row
        for (int d = 0; d < D; d++) acc[(size_t)bin * D + d] += x[(size_t)i * D + d];
    }
    for (size_t j = 0; j < (size_t)n_bins * D; j++)
        out[j] = (float)(acc[j] / ((double)k * k) * scale);
    free(acc);
    return rc;
}
