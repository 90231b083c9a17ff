// logits.c: reference logit soft-cap (the oracle of logits.cu, with a first-index argmax).
#include <math.h>

#include "kernels/ref/ref.h"

void ref_softcap(float *x, size_t n, float c) {
    for (size_t i = 0; i < n; i++) x[i] = c * tanhf(x[i] / c);
}
