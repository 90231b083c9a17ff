// kl.h: how far one model's next-token distributions are from another's, position by position:
// KL(p_ref || p_test) of the softmaxed logits and top-1 (argmax) agreement. This is the
// quantization-quality measure llama.cpp's `perplexity --kl-divergence` reports (DESIGN.md,
// STYLE.md 9): unlike a logit tolerance it weighs each logit by the probability the reference
// gives it, so it tracks what sampling and greedy decoding see.
#ifndef G4_KL_H
#define G4_KL_H

#include <stddef.h>

typedef struct {
    int rows;           // positions compared
    double *kl;         // [rows] KL(p_ref || p_test) in nats (NaN where a row is non-finite)
    int *top1_ref;      // [rows] argmax of the reference row (the first on ties)
    int *top1_test;     // [rows] argmax of the test row
    double kl_mean;     // mean over rows (NaN when any row is)
    double kl_max;      // max over rows
    int kl_max_row;     // the row of kl_max
    int top1_agree;     // rows whose argmaxes are equal
    int nonfinite_rows; // rows with a NaN or Inf logit in either input
} g4_kl_stats;

// Compares the soft-capped logits test [rows, V] with ref [rows, V] (row-major float32).
// Per row, in double: log p = ref - logsumexp(ref), log q = test - logsumexp(test),
// KL = sum_i exp(log p_i) (log p_i - log q_i). Each logsumexp subtracts the row max first, so
// no exp overflows and a probability that underflows contributes its exact limit 0. A row that
// is mathematically equal gives exactly 0; the tiny negative values rounding can produce on
// nearly equal rows (|KL| < 1e-15) are clamped to 0, because KL >= 0.
// Returns stats the caller frees with g4_kl_free.
g4_kl_stats g4_kl_rows(const float *ref, const float *test, int rows, size_t V);
void g4_kl_free(g4_kl_stats *s);

#endif
