// silu.c: reference SiLU (x * sigmoid(x)), the audio tower's activation.
#include <math.h>

#include "kernels/ref/ref.h"

void ref_silu(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}
