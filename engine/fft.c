// fft.c: see fft.h.
#include "engine/fft.h"

#include <math.h>
#include <stdlib.h>

#include "base/base.h"

int g4_fft_plan_init(g4_fft_plan *p, int n) {
    memset(p, 0, sizeof *p);
    if (n < 2 || n > (1 << 24) || (n & (n - 1)))
        return g4_fail(G4_EUSER, "FFT length %d: expected a power of two in [2, 2^24]", n);
    int log2n = 0;
    while ((1 << log2n) < n) log2n++;
    p->n = n;
    p->cos_t = g4_malloc(sizeof(double) * (size_t)(n / 2));
    p->sin_t = g4_malloc(sizeof(double) * (size_t)(n / 2));
    p->rev = g4_malloc(sizeof(int) * (size_t)n);
    p->work = g4_malloc(sizeof(double) * 2 * (size_t)n);
    const double two_pi = 6.283185307179586476925286766559;
    for (int k = 0; k < n / 2; k++) {
        p->cos_t[k] = cos(two_pi * k / n);
        p->sin_t[k] = sin(two_pi * k / n);
    }
    for (int i = 0; i < n; i++) {
        int r = 0;
        for (int b = 0; b < log2n; b++) r |= ((i >> b) & 1) << (log2n - 1 - b);
        p->rev[i] = r;
    }
    return G4_OK;
}

void g4_fft_plan_free(g4_fft_plan *p) {
    free(p->cos_t);
    free(p->sin_t);
    free(p->rev);
    free(p->work);
    memset(p, 0, sizeof *p);
}

void g4_fft(const g4_fft_plan *p, double *re, double *im) {
    const int n = p->n;
    for (int i = 0; i < n; i++) { // bit-reversed order, so the butterflies can run in place
        int j = p->rev[i];
        if (j > i) {
            double t = re[i];
            re[i] = re[j];
            re[j] = t;
            t = im[i];
            im[i] = im[j];
            im[j] = t;
        }
    }
    for (int size = 2; size <= n; size *= 2) {
        int half = size / 2, step = n / size;
        for (int start = 0; start < n; start += size) {
            for (int j = 0; j < half; j++) {
                // w = exp(-2 pi i j / size) = cos - i sin at table index j * n / size
                double wr = p->cos_t[j * step], wi = -p->sin_t[j * step];
                int a = start + j, b = a + half;
                double tr = wr * re[b] - wi * im[b];
                double ti = wr * im[b] + wi * re[b];
                re[b] = re[a] - tr;
                im[b] = im[a] - ti;
                re[a] += tr;
                im[a] += ti;
            }
        }
    }
}

void g4_rfft(const g4_fft_plan *p, const double *x, int len, double *re, double *im) {
    const int n = p->n;
    G4_ASSERT(len >= 0 && len <= n);
    double *wr = p->work, *wi = p->work + n;
    for (int i = 0; i < n; i++) {
        wr[i] = i < len ? x[i] : 0.0;
        wi[i] = 0.0;
    }
    g4_fft(p, wr, wi);
    for (int k = 0; k <= n / 2; k++) {
        re[k] = wr[k];
        im[k] = wi[k];
    }
}
