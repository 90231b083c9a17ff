// kl.c: see kl.h.
#include "fidelity/kl.h"

#include <math.h>
#include <stdlib.h>

#include "base/base.h"

// log(sum_i exp(x_i)) in double, max-shifted; -INFINITY for an empty row is not needed (V >= 1).
static double logsumexp(const float *x, size_t V) {
    double mx = x[0];
    for (size_t i = 1; i < V; i++)
        if (x[i] > mx) mx = x[i];
    double s = 0;
    for (size_t i = 0; i < V; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

static size_t argmax(const float *x, size_t V) {
    size_t a = 0;
    for (size_t i = 1; i < V; i++)
        if (x[i] > x[a]) a = i;
    return a;
}

static int all_finite(const float *x, size_t V) {
    for (size_t i = 0; i < V; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

g4_kl_stats g4_kl_rows(const float *ref, const float *test, int rows, size_t V) {
    G4_ASSERT(rows >= 0 && V >= 1);
    g4_kl_stats s = {0};
    s.rows = rows;
    s.kl = g4_calloc((size_t)rows + 1, sizeof(double));
    s.top1_ref = g4_calloc((size_t)rows + 1, sizeof(int));
    s.top1_test = g4_calloc((size_t)rows + 1, sizeof(int));
    s.kl_max_row = -1;
    double sum = 0;
    for (int r = 0; r < rows; r++) {
        const float *a = ref + (size_t)r * V, *b = test + (size_t)r * V;
        s.top1_ref[r] = (int)argmax(a, V);
        s.top1_test[r] = (int)argmax(b, V);
        s.top1_agree += s.top1_ref[r] == s.top1_test[r];
        if (!all_finite(a, V) || !all_finite(b, V)) {
            s.nonfinite_rows++;
            s.kl[r] = NAN;
            sum = NAN;
            continue;
        }
        const double la = logsumexp(a, V), lb = logsumexp(b, V);
        double kl = 0;
        for (size_t i = 0; i < V; i++) {
            const double lp = (double)a[i] - la, lq = (double)b[i] - lb;
            kl += exp(lp) * (lp - lq);
        }
        if (kl < 0 && kl > -1e-15) kl = 0; // rounding on (nearly) equal rows; KL >= 0
        s.kl[r] = kl;
        sum += kl;
        if (s.kl_max_row < 0 || kl > s.kl_max) {
            s.kl_max = kl;
            s.kl_max_row = r;
        }
    }
    s.kl_mean = rows ? sum / rows : 0;
    if (s.nonfinite_rows) s.kl_max = NAN;
    return s;
}

void g4_kl_free(g4_kl_stats *s) {
    free(s->kl);
    free(s->top1_ref);
    free(s->top1_test);
    s->kl = NULL;
    s->top1_ref = s->top1_test = NULL;
}
