// compare.c: see compare.h.
#include "fidelity/compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"

g4_cmp_stats g4_cmp(const float *a, const float *b, size_t n, size_t row_len) {
    g4_cmp_stats s = {0};
    s.n = n;
    s.argmax_agree_rows = -1;
    double dd = 0, bb = 0, aa = 0, ab = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(b[i])) { // a broken reference checks nothing: never "rel err 0"
            s.ref_bad++;
            continue;
        }
        if (!isfinite(a[i])) {
            s.nan++;
            continue;
        }
        double d = (double)a[i] - b[i];
        if (fabs(d) > s.max_abs) s.max_abs = fabs(d);
        dd += d * d;
        bb += (double)b[i] * b[i];
        aa += (double)a[i] * a[i];
        ab += (double)a[i] * b[i];
    }
    s.rel = bb > 0 ? sqrt(dd / bb) : (dd > 0 ? INFINITY : 0);
    s.cosine = aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1 : 0);
    if (s.nan || s.ref_bad) {
        s.rel = s.max_abs = INFINITY;
        s.cosine = NAN;
    }
    if (row_len > 0 && n % row_len == 0) {
        s.rows = (int)(n / row_len);
        s.argmax_agree_rows = 0;
        for (int r = 0; r < s.rows; r++) {
            const float *ar = a + (size_t)r * row_len, *br = b + (size_t)r * row_len;
            size_t ia = 0, ib = 0;
            for (size_t i = 1; i < row_len; i++) {
                if (ar[i] > ar[ia]) ia = i;
                if (br[i] > br[ib]) ib = i;
            }
            s.argmax_agree_rows += ia == ib;
        }
    }
    return s;
}

g4_ids_stats g4_ids_judge(const float *test, const float *ref, int rows, const g4_ids_ties *tie,
                          double margin_rel) {
    g4_ids_stats s = {.rows = rows, .first_real = -1};
    for (int r = 0; r < rows; r++) {
        if (isfinite(test[r]) && test[r] == ref[r]) {
            s.equal++;
            continue;
        }
        int tie_row = 0;
        for (int j = 0; j < tie->k && isfinite(test[r]); j++) {
            const size_t at = (size_t)r * tie->k + j;
            if (tie->top_ids[at] != test[r]) continue;
            const double best = tie->top_vals[(size_t)r * tie->k],
                         margin = margin_rel * tie->row_rms[r];
            tie_row = isfinite(best) && isfinite(margin) && best - tie->top_vals[at] <= margin;
            break;
        }
        if (tie_row) {
            s.near_ties++;
        } else {
            if (s.first_real < 0) s.first_real = r;
            s.real++;
        }
    }
    return s;
}

void g4_cmp_report_add(g4_cmp_report *r, const g4_cmp_row *row) {
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 32;
        r->rows = g4_realloc(r->rows, sizeof(g4_cmp_row) * (size_t)r->cap);
    }
    r->rows[r->n++] = *row;
}

void g4_cmp_report_free(g4_cmp_report *r) {
    free(r->rows);
    r->rows = NULL;
    r->n = r->cap = 0;
}

int g4_cmp_report_ok(const g4_cmp_report *r) {
    for (int i = 0; i < r->n; i++)
        if (!r->rows[i].pass) return 0;
    return 1;
}

void g4_cmp_report_print(const g4_cmp_report *r, FILE *f) {
    fprintf(f, "%-20s %12s %12s %12s %-14s %9s %s\n", "tensor", "max abs err", "rel err", "cosine",
            "tolerance", "tol", "verdict");
    for (int i = 0; i < r->n; i++) {
        const g4_cmp_row *x = &r->rows[i];
        if (!x->shape_ok) {
            fprintf(f, "%-20s %12s %12s %12s %-14s %9.1e %s\n", x->name, "-", "-", "-", x->tol_name,
                    x->tol, "FAIL (shape)");
            continue;
        }
        fprintf(f, "%-20s %12.4e %12.4e %12.8f %-14s %9.1e %s", x->name, x->s.max_abs, x->s.rel,
                x->s.cosine, x->tol_name, x->tol, x->pass ? "ok" : "FAIL");
        if (x->s.nan) fprintf(f, " (%zu non-finite)", x->s.nan);
        if (x->s.ref_bad) fprintf(f, " (%zu non-finite in the reference)", x->s.ref_bad);
        if (x->s.argmax_agree_rows >= 0)
            fprintf(f, "  argmax %d/%d", x->s.argmax_agree_rows, x->s.rows);
        if (x->has_ids)
            fprintf(f, "  ids equal %d/%d, near ties %d, real %d", x->ids.equal, x->ids.rows,
                    x->ids.near_ties, x->ids.real);
        fprintf(f, "\n");
    }
}
