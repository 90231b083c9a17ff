// embed.c: reference embedding gather with a scale.
#include "kernels/ref/ref.h"

void ref_embed(float *y, const uint16_t *table, int cols, const int32_t *ids, int T, float scale) {
    g4_ref_init();
    for (int t = 0; t < T; t++) {
        const uint16_t *row = table + (size_t)ids[t] * cols;
        for (int i = 0; i < cols; i++) y[(size_t)t * cols + i] = ref_h2f(row[i]) * scale;
    }
}
