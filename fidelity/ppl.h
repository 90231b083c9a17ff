// ppl.h: the statistics of `g4cu perplexity`, in llama.cpp's llama-perplexity definitions
// (tools/perplexity/perplexity.cpp): perplexity with its standard error, and the KL-divergence
// statistics of a test model's next-token distributions against a base model's saved ones.
//
// Per scored token (row of logits, the correct next token `tok`), in double:
//   nll      = logsumexp(row) - row[tok]
//   PPL      = exp(mean nll); its uncertainty PPL * sqrt((mean nll^2 - mean^2) / (n - 1))
//   KLD      = sum over i with base log p_i > -16 of p_i (log p_i - log q_i)   (p base, q test)
//   same top = argmax(test row) == argmax(base row)
//   delta-p  = q[tok] - p[tok] (the change in the probability of the correct token);
//              RMS delta-p = sqrt(mean delta-p^2)
//   median   = the middle value (mean of the two middle ones for an even count);
//   percentile(f) = linear interpolation at f * (n - 1) in the sorted values.
// Uncertainties of means are llama.cpp's sqrt((mean x^2 - mean^2) / (n - 1)) (0 for n <= 10).
#ifndef G4_PPL_H
#define G4_PPL_H

#include <stddef.h>
#include <stdint.h>

// log-sum-exp of row [V] (max subtracted first), and its first argmax in *argmax (may be NULL).
double g4_ppl_logsumexp(const float *row, size_t V, int *argmax);

// Mean and the llama.cpp uncertainty of n values given their sum and sum of squares.
void g4_ppl_mean_unc(double sum, double sum2, size_t n, double *mean, double *unc);

// llama.cpp's median and interpolated percentile of sorted[n] (n >= 1).
double g4_ppl_median(const double *sorted, size_t n);
double g4_ppl_percentile(const double *sorted, size_t n, double fraction);

// Sorts v[n] ascending (NaN last).
void g4_ppl_sort(double *v, size_t n);

// A base row in the saved-logits file: the row's log-probabilities over [max-16, max] in
// 16 bits (llama.cpp's scheme: log p_i = scale * q_i + min_log_prob; an entry below the range
// stores 0), plus the exact values the statistics need. Each stored log-probability is within
// scale / 2 <= 16 / 65535 / 2 = 1.2e-4 nats of the true one.
typedef struct {
    int32_t top1;      // argmax of the base row
    float nll;         // exact -log p[tok] of the base row
    float scale;       // (max - min) / 65535 over the kept range
    float min_log_prob;
} g4_ppl_row_head;

// Packs row [V] (logits) into head + q [V]; returns the row's nll of tok.
double g4_ppl_pack_row(const float *row, size_t V, int tok, g4_ppl_row_head *head, uint16_t *q);

// One test row against a packed base row: KLD(base || test), same-top flag, delta-p and the
// test row's nll of tok.
typedef struct {
    double kld, dp, nll;
    int same_top;
} g4_ppl_row_cmp;
g4_ppl_row_cmp g4_ppl_compare_row(const float *row, size_t V, int tok, const g4_ppl_row_head *h,
                                  const uint16_t *q);

// Accumulated statistics of a run (the arrays grow; free with g4_ppl_stats_free).
typedef struct {
    size_t n;           // scored tokens
    double sum_nll, sum_nll2;
    // with a base (kl_rows > 0):
    size_t kl_rows;
    double sum_nll_base, sum_nll_base2;
    double sum_kld, sum_kld2, sum_dp, sum_dp2, sum_dp4;
    size_t same_top;
    double *kld, *dp; // [kl_rows] per row values
    size_t cap;
} g4_ppl_stats;

void g4_ppl_add_nll(g4_ppl_stats *s, double nll);
void g4_ppl_add_cmp(g4_ppl_stats *s, const g4_ppl_row_cmp *c, double nll_base);
void g4_ppl_stats_free(g4_ppl_stats *s);

typedef struct {
    size_t n;
    double ppl, ppl_unc;
    // base comparison (valid when kl_rows > 0):
    size_t kl_rows;
    double ppl_base, ppl_base_unc;
    double kld_mean, kld_unc, kld_median, kld_p99, kld_p999, kld_max;
    double same_top, same_top_unc; // fraction
    double rms_dp, rms_dp_unc;     // probability (not %)
    double dp_mean;
} g4_ppl_summary;

// Sorts s's per-row arrays (once done adding) and computes the summary.
g4_ppl_summary g4_ppl_summarize(g4_ppl_stats *s);

#endif
