// fft.h: a radix-2 complex FFT in double precision and the real FFT built on it.
//
// Used by the audio front end (engine/audio_fe.c) for |rfft(frame, n=512)|. It is plain reference
// code written for clarity (iterative Cooley-Tukey, precomputed twiddles and bit reversal); a
// 512-point transform of 3000 frames takes a few milliseconds, so speed is not a concern.
// Test: tests/test_frontends.c (against a direct O(n^2) DFT and, through the log-mel, HF).
#ifndef G4_FFT_H
#define G4_FFT_H

typedef struct {
    int n;         // transform length, a power of two >= 2
    double *cos_t; // [n/2] cos(2 pi k / n)
    double *sin_t; // [n/2] sin(2 pi k / n)
    int *rev;      // [n] bit-reversal permutation of 0..n-1
    double *work;  // [2n] scratch for g4_rfft (re, im)
} g4_fft_plan;

// Prepares a plan for length n (G4_EUSER unless n is a power of two in [2, 2^24]).
int g4_fft_plan_init(g4_fft_plan *p, int n);
void g4_fft_plan_free(g4_fft_plan *p);

// In-place forward DFT of n complex values: X[k] = sum_j x[j] exp(-2 pi i j k / n).
void g4_fft(const g4_fft_plan *p, double *re, double *im);

// Forward DFT of the real sequence x[0..len) zero-padded to n (len <= n), as numpy's
// rfft(x, n): writes the n/2 + 1 non-negative-frequency bins to re[] and im[]. Uses the plan's
// scratch, so one plan serves one thread at a time.
void g4_rfft(const g4_fft_plan *p, const double *x, int len, double *re, double *im);

#endif
