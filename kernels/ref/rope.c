// rope.c: reference rotary embedding, split-half pairs (HF rotate_half / NeoX convention).
// Zero frequencies (the non-rotating part of Gemma's proportional RoPE) leave their pair as is.
#include <math.h>

#include "kernels/ref/ref.h"

void ref_rope(float *x, int T, int n_heads, int head_dim, const int32_t *pos,
              const float *inv_freq) {
    const int half = head_dim / 2;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < half; j++) {
            const float ang = (float)pos[t] * inv_freq[j]; // fp32 product, like HF
            const float c = cosf(ang), s = sinf(ang);
            for (int h = 0; h < n_heads; h++) {
                float *v = x + (size_t)t * n_heads * head_dim + (size_t)h * head_dim;
                const float a = v[j], b = v[j + half];
                v[j] = a * c - b * s;
                v[j + half] = b * c + a * s;
            }
        }
}
