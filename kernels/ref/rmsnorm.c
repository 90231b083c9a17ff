// rmsnorm.c: reference RMSNorm (Gemma-4: x * (mean(x^2) + eps)^-0.5 * w, no 1 + w offset),
// per row or per head group, and the post-norm residual add.
#include <math.h>

#include "kernels/ref/ref.h"

void ref_rmsnorm(float *y, const float *x, const uint16_t *w, int rows, int cols, int group,
                 float eps) {
    g4_ref_init();
    for (int r = 0; r < rows; r++)
        for (int g0 = 0; g0 < cols; g0 += group) {
            const float *xr = x + (size_t)r * cols + g0;
            float *yr = y + (size_t)r * cols + g0;
            double ss = 0;
            for (int i = 0; i < group; i++) ss += (double)xr[i] * xr[i];
            const float inv = (float)(1.0 / sqrt(ss / group + (double)eps));
            for (int i = 0; i < group; i++) yr[i] = xr[i] * inv * (w ? ref_h2f(w[i]) : 1.0f);
        }
}

void ref_add_rmsnorm(float *h, const float *x, const uint16_t *w, int rows, int cols, float eps,
                     float scale) {
    g4_ref_init();
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * cols;
        float *hr = h + (size_t)r * cols;
        double ss = 0;
        for (int i = 0; i < cols; i++) ss += (double)xr[i] * xr[i];
        const float inv = (float)(1.0 / sqrt(ss / cols + (double)eps));
        for (int i = 0; i < cols; i++)
            hr[i] = (hr[i] + xr[i] * inv * (w ? ref_h2f(w[i]) : 1.0f)) * scale;
    }
}
