// clamp.c: reference clamp (torch.clamp semantics: NaN stays NaN), used by the towers'
// ClippableLinear bounds and the conformer's gradient clipping.
#include "kernels/ref/ref.h"

void ref_clamp(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
}
