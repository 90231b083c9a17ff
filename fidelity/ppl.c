// ppl.c: perplexity and KL-divergence statistics (see ppl.h for the definitions).
#include "fidelity/ppl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

double g4_ppl_logsumexp(const float *row, size_t V, int *argmax) {
    size_t im = 0;
    for (size_t i = 1; i < V; i++)
        if (row[i] > row[im]) im = i;
    const double mx = row[im];
    double sum = 0;
    for (size_t i = 0; i < V; i++) sum += exp((double)row[i] - mx);
    if (argmax) *argmax = (int)im;
    return mx + log(sum);
}

void g4_ppl_mean_unc(double sum, double sum2, size_t n, double *mean, double *unc) {
    *mean = n ? sum / (double)n : 0;
    double var = n ? sum2 / (double)n - *mean * *mean : 0;
    *unc = var > 0 && n > 10 ? sqrt(var / (double)(n - 1)) : 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);
    return (x > y) - (x < y);
}

void g4_ppl_sort(double *v, size_t n) { qsort(v, n, sizeof *v, cmp_double); }

double g4_ppl_median(const double *s, size_t n) {
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2] + s[n / 2 - 1]);
}

double g4_ppl_percentile(const double *s, size_t n, double f) {
    if (f <= 0) return s[0];
    if (f >= 1) return s[n - 1];
    double p = f * (double)(n - 1);
    size_t ip = (size_t)p;
    p -= (double)ip;
    return (1 - p) * s[ip] + p * s[ip + 1 < n ? ip + 1 : n - 1];
}

// llama.cpp keeps log-probabilities in [max - 16, max] (logit space) and stores 16 bits each.
#define G4_PPL_RANGE 16.0

double g4_ppl_pack_row(const float *row, size_t V, int tok, g4_ppl_row_head *h, uint16_t *q) {
    int top;
    const double lse = g4_ppl_logsumexp(row, V, &top);
    const double mx = row[top];
    double mn = mx;
    for (size_t i = 0; i < V; i++)
        if (row[i] < mn) mn = row[i];
    if (mn < mx - G4_PPL_RANGE) mn = mx - G4_PPL_RANGE;
    h->top1 = top;
    h->nll = (float)(lse - row[tok]);
    h->scale = (float)((mx - mn) / 65535.0);
    h->min_log_prob = (float)(mn - lse);
    for (size_t i = 0; i < V; i++) {
        double v = h->scale > 0 && row[i] > mn ? ((double)row[i] - mn) / h->scale : 0;
        q[i] = (uint16_t)(v > 65535 ? 65535 : lrint(v));
    }
    return lse - row[tok];
}

g4_ppl_row_cmp g4_ppl_compare_row(const float *row, size_t V, int tok, const g4_ppl_row_head *h,
                                  const uint16_t *q) {
    g4_ppl_row_cmp c;
    int top;
    const double lse = g4_ppl_logsumexp(row, V, &top);
    double kld = 0;
    for (size_t i = 0; i < V; i++) {
        const double lp = (double)h->scale * q[i] + h->min_log_prob;
        if (lp > -G4_PPL_RANGE) kld += exp(lp) * (lp - ((double)row[i] - lse));
    }
    c.kld = kld;
    c.nll = lse - row[tok];
    c.dp = exp(-c.nll) - exp(-(double)h->nll);
    c.same_top = top == h->top1;
    return c;
}

void g4_ppl_add_nll(g4_ppl_stats *s, double nll) {
    s->n++;
    s->sum_nll += nll;
    s->sum_nll2 += nll * nll;
}

void g4_ppl_add_cmp(g4_ppl_stats *s, const g4_ppl_row_cmp *c, double nll_base) {
    if (s->kl_rows == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->kld = g4_realloc(s->kld, sizeof(double) * s->cap);
        s->dp = g4_realloc(s->dp, sizeof(double) * s->cap);
    }
    s->kld[s->kl_rows] = c->kld;
    s->dp[s->kl_rows] = c->dp;
    s->kl_rows++;
    s->sum_nll_base += nll_base;
    s->sum_nll_base2 += nll_base * nll_base;
    s->sum_kld += c->kld;
    s->sum_kld2 += c->kld * c->kld;
    s->sum_dp += c->dp;
    s->sum_dp2 += c->dp * c->dp;
    s->sum_dp4 += c->dp * c->dp * c->dp * c->dp;
    s->same_top += (size_t)c->same_top;
}

void g4_ppl_stats_free(g4_ppl_stats *s) {
    free(s->kld);
    free(s->dp);
    memset(s, 0, sizeof *s);
}

g4_ppl_summary g4_ppl_summarize(g4_ppl_stats *s) {
    g4_ppl_summary r = {0};
    double m, u;
    r.n = s->n;
    g4_ppl_mean_unc(s->sum_nll, s->sum_nll2, s->n, &m, &u);
    r.ppl = exp(m);
    r.ppl_unc = r.ppl * u;
    r.kl_rows = s->kl_rows;
    if (!s->kl_rows) return r;
    const size_t n = s->kl_rows;
    g4_ppl_mean_unc(s->sum_nll_base, s->sum_nll_base2, n, &m, &u);
    r.ppl_base = exp(m);
    r.ppl_base_unc = r.ppl_base * u;
    g4_ppl_mean_unc(s->sum_kld, s->sum_kld2, n, &r.kld_mean, &r.kld_unc);
    g4_ppl_sort(s->kld, n);
    r.kld_median = g4_ppl_median(s->kld, n);
    r.kld_p99 = g4_ppl_percentile(s->kld, n, 0.99);
    r.kld_p999 = g4_ppl_percentile(s->kld, n, 0.999);
    r.kld_max = s->kld[n - 1];
    r.same_top = (double)s->same_top / (double)n;
    r.same_top_unc = n > 1 ? sqrt(r.same_top * (1 - r.same_top) / (double)(n - 1)) : 0;
    g4_ppl_mean_unc(s->sum_dp, s->sum_dp2, n, &r.dp_mean, &u);
    double mse;
    g4_ppl_mean_unc(s->sum_dp2, s->sum_dp4, n, &mse, &u);
    r.rms_dp = sqrt(mse);
    r.rms_dp_unc = r.rms_dp > 0 ? 0.5 / r.rms_dp * u : 0;
    return r;
}
