// sample_rules.c: penalties, logit_bias, min_p and log-probabilities on a host logits row (see
// sample_rules.h).
#include "engine/sample_rules.h"

#include <math.h>

#include "base/base.h"

int g4_logit_rules_active(const g4_logit_rules *r) {
    return (r->repetition > 0 && r->repetition != 1) || r->presence != 0 || r->frequency != 0 ||
           r->min_p > 0 || r->n_bias > 0;
}

int g4_logit_rules_check(const g4_logit_rules *r, int V) {
    if (!(r->repetition >= 0) || !isfinite(r->repetition))
        return g4_fail(G4_EUSER, "repetition_penalty %g: expected a finite value > 0 (1: off)",
                       (double)r->repetition);
    if (!isfinite(r->presence) || !isfinite(r->frequency))
        return g4_fail(G4_EUSER, "presence_penalty %g / frequency_penalty %g: expected finite "
                                 "values",
                       (double)r->presence, (double)r->frequency);
    if (!(r->min_p >= 0 && r->min_p <= 1))
        return g4_fail(G4_EUSER, "min_p %g: expected in [0, 1] (0: off)", (double)r->min_p);
    if (r->n_bias < 0 || (r->n_bias && !r->bias))
        return g4_fail(G4_EUSER, "logit_bias: %d entries: expected >= 0 with the entries given",
                       r->n_bias);
    for (int i = 0; i < r->n_bias; i++) {
        if (r->bias[i].id < 0 || r->bias[i].id >= V)
            return g4_fail(G4_EUSER, "logit_bias: token id %d: expected 0 <= id < %d",
                           r->bias[i].id, V);
        if (!isfinite(r->bias[i].bias))
            return g4_fail(G4_EUSER, "logit_bias: the bias of token %d is not finite",
                           r->bias[i].id);
    }
    return G4_OK;
}

void g4_logit_rules_apply(const g4_logit_rules *r, float *x, int V, const uint8_t *seen,
                          const int32_t *counts) {
    const float rp = r->repetition;
    if (seen && rp > 0 && rp != 1)
        for (int i = 0; i < V; i++)
            if (seen[i]) x[i] = x[i] > 0 ? x[i] / rp : x[i] * rp;
    if (counts && (r->presence != 0 || r->frequency != 0))
        for (int i = 0; i < V; i++)
            if (counts[i]) x[i] -= r->presence + r->frequency * (float)counts[i];
    for (int i = 0; i < r->n_bias; i++) x[r->bias[i].id] += r->bias[i].bias;
}

void g4_min_p_apply(float min_p, float temperature, float *x, int V) {
    if (!(min_p > 0) || !(temperature > 0) || V < 1) return;
    float mx = x[0];
    for (int i = 1; i < V; i++)
        if (x[i] > mx) mx = x[i];
    if (!isfinite(mx)) return;
    // p_i / p_max = exp((x_i - mx) / T) >= min_p  <=>  x_i - mx >= T * ln(min_p)
    const double cut = (double)temperature * log((double)min_p);
    for (int i = 0; i < V; i++)
        if ((double)x[i] - (double)mx < cut) x[i] = -INFINITY;
}

double g4_logprobs_top(const float *x, int V, float temperature, int n_top, g4_token_logprob *out) {
    const double t = temperature > 0 ? temperature : 1.0;
    double mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (x[i] > mx) mx = x[i];
    double z = 0;
    for (int i = 0; i < V; i++)
        if (x[i] > -INFINITY) z += exp(((double)x[i] - mx) / t);
    const double log_z = mx / t + log(z);
    // the n_top largest by insertion (n_top <= 20): larger first, ties the smaller id first
    if (n_top > G4_MAX_TOP_LOGPROBS) n_top = G4_MAX_TOP_LOGPROBS;
    int n = 0;
    for (int i = 0; i < V && n_top > 0; i++) {
        if (!(x[i] > -INFINITY)) continue;
        if (n == n_top && !(x[i] > x[out->top_id[n - 1]])) continue;
        int k = n < n_top ? n++ : n - 1;
        while (k > 0 && x[i] > x[out->top_id[k - 1]]) {
            out->top_id[k] = out->top_id[k - 1];
            k--;
        }
        out->top_id[k] = i;
    }
    out->n_top = n;
    for (int k = 0; k < n; k++) out->top_logprob[k] = (float)((double)x[out->top_id[k]] / t - log_z);
    return log_z;
}

float g4_logprob_of(const float *x, int V, float temperature, double log_z, int id) {
    const double t = temperature > 0 ? temperature : 1.0;
    if (id < 0 || id >= V || !(x[id] > -INFINITY)) return -INFINITY;
    return (float)((double)x[id] / t - log_z);
}
