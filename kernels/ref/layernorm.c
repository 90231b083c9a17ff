// layernorm.c: reference LayerNorm over rows (torch.nn.LayerNorm: mean-subtracting, biased
// variance, eps inside the square root), optional weight and bias. Sums in double.
#include <math.h>

#include "kernels/ref/ref.h"

void ref_layernorm(float *y, const float *x, const uint16_t *w, const uint16_t *b, int rows,
                   int cols, float eps) {
    g4_ref_init();
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * cols;
        float *yr = y + (size_t)r * cols;
        double mean = 0, var = 0;
        for (int i = 0; i < cols; i++) mean += xr[i];
        mean /= cols;
        for (int i = 0; i < cols; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= cols;
        const double inv = 1.0 / sqrt(var + (double)eps);
        for (int i = 0; i < cols; i++)
            yr[i] = (float)((xr[i] - mean) * inv * (w ? ref_h2f(w[i]) : 1.0f) +
                            (b ? ref_h2f(b[i]) : 0.0f));
    }
}
