// scatter_rows.c: the reference of scatter_rows.cu: rows of one buffer placed at chosen rows of
// another (soft tokens at their placeholders' embedding rows).
#include <string.h>

#include "base/base.h"
#include "kernels/ref/ref.h"

void ref_scatter_rows(float *dst, int dst_rows, const float *src, int src_rows, int cols,
                      const int32_t *idx) {
    for (int t = 0; t < dst_rows; t++) {
        if (idx[t] < 0) continue;
        G4_ASSERT(idx[t] < src_rows);
        memcpy(dst + (size_t)t * cols, src + (size_t)idx[t] * cols, sizeof(float) * (size_t)cols);
    }
}
