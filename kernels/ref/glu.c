// glu.c: reference GLU over the last dimension (torch.nn.functional.glu, dim=-1): the first
// half gated by the sigmoid of the second half.
#include <math.h>

#include "kernels/ref/ref.h"

void ref_glu(float *y, const float *x, int T, int C) {
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            const float a = x[(size_t)t * 2 * C + c], g = x[(size_t)t * 2 * C + C + c];
            y[(size_t)t * C + c] = a * (1.0f / (1.0f + expf(-g)));
        }
}
