// rope_2d.c: reference 2-D (axial) RoPE of the Gemma-4 vision tower (spec 4.4; HF
// Gemma4VisionRotaryEmbedding + apply_multidimensional_rope).
#include "kernels/ref/ref.h"

#include <math.h>

void ref_rope_2d(float *x, int T, int n_heads, int hd, const int32_t *pos_xy,
                 const float *inv_freq) {
    const int part = hd / 2, quarter = hd / 4; // each axis owns `part` dims, pairs (j, j+quarter)
    for (int t = 0; t < T; t++)
        for (int axis = 0; axis < 2; axis++) {
            const int p = pos_xy[2 * t + axis];
            for (int j = 0; j < quarter; j++) {
                const float ang = (float)p * inv_freq[j]; // fp32 product, like HF
                const float c = cosf(ang), s = sinf(ang);
                for (int h = 0; h < n_heads; h++) {
                    float *v = x + (size_t)t * n_heads * hd + (size_t)h * hd + axis * part;
                    const float a = v[j], b = v[j + quarter];
                    v[j] = a * c - b * s;
                    v[j + quarter] = b * c + a * s;
                }
            }
        }
}
