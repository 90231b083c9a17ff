// gelu_mul.c: reference GELU-tanh gating (the oracle of gelu_mul.cu).
#include <math.h>

#include "kernels/ref/ref.h"

float ref_gelu_tanh(float x) {
    const float k = 0.7978845608028654f; // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

void ref_gelu_mul(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = ref_gelu_tanh(a[i]) * b[i];
}
