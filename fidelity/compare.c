// compare.c: see compare.h.
#include "fidelity/compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"

// The sums of g4_cmp, in double.
typedef struct {
    double dd, bb, aa, ab;
} cmp_sums;

// Adds n elements of a against b to s and q (one loop for g4_cmp and g4_cmp_rows).
static void cmp_add(g4_cmp_stats *s, cmp_sums *q, const float *a, const float *b, size_t n) {
    double dd = q->dd, bb = q->bb, aa = q->aa, ab = q->ab, max_abs = s->max_abs;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(b[i])) { // a broken reference checks nothing: never "rel err 0"
            s->ref_bad++;
            continue;
        }
        if (!isfinite(a[i])) {
            s->nan++;
            continue;
        }
        double d = (double)a[i] - b[i];
        if (fabs(d) > max_abs) max_abs = fabs(d);
        dd += d * d;
        bb += (double)b[i] * b[i];
        aa += (double)a[i] * a[i];
        ab += (double)a[i] * b[i];
    }
    *q = (cmp_sums){dd, bb, aa, ab};
    s->max_abs = max_abs;
}

static void cmp_finish(g4_cmp_stats *s, const cmp_sums *q) {
    s->rel = q->bb > 0 ? sqrt(q->dd / q->bb) : (q->dd > 0 ? INFINITY : 0);
    s->cosine = q->aa > 0 && q->bb > 0 ? q->ab / sqrt(q->aa * q->bb) : (q->aa == q->bb ? 1 : 0);
    if (s->nan || s->ref_bad) {
        s->rel = s->max_abs = INFINITY;
        s->cosine = NAN;
    }
}

g4_cmp_stats g4_cmp(const float *a, const float *b, size_t n, size_t row_len) {
    g4_cmp_stats s = {0};
    s.n = n;
    s.argmax_agree_rows = -1;
    cmp_sums q = {0};
    cmp_add(&s, &q, a, b, n);
    cmp_finish(&s, &q);
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

g4_cmp_stats g4_cmp_rows(const float *a, const float *b, size_t row_len, const g4_row_range *ranges,
                         int n_ranges) {
    g4_cmp_stats s = {0};
    s.argmax_agree_rows = -1;
    cmp_sums q = {0};
    size_t rows = 0;
    for (int i = 0; i < n_ranges; i++) {
        const size_t at = ranges[i].start * row_len, n = ranges[i].count * row_len;
        cmp_add(&s, &q, a + at, b + at, n);
        s.n += n;
        rows += ranges[i].count;
    }
    cmp_finish(&s, &q);
    s.rows = (int)rows;
    return s;
}

const char *const g4_span_names[G4_SPAN_KINDS] = {"text", "image", "audio"};

int g4_span_ranges(const unsigned char *span, int n, int kind, g4_row_range *out) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (span[i] != kind) continue;
        if (m && out[m - 1].start + out[m - 1].count == (size_t)i)
            out[m - 1].count++;
        else
            out[m++] = (g4_row_range){(size_t)i, 1};
    }
    return m;
}

void g4_cmp_spans(const float *a, const float *b, size_t row_len, const unsigned char *row_kind,
                  int rows, g4_cmp_stats out[G4_SPAN_KINDS]) {
    g4_row_range *r = g4_malloc(sizeof(g4_row_range) * (size_t)(rows > 0 ? rows : 1));
    for (int k = 0; k < G4_SPAN_KINDS; k++)
        out[k] = g4_cmp_rows(a, b, row_len, r, g4_span_ranges(row_kind, rows, k, r));
    free(r);
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

void g4_span_summary(const unsigned char *span, int n, char *buf, size_t size) {
    g4_row_range *r = g4_malloc(sizeof(g4_row_range) * (size_t)(n > 0 ? n : 1));
    size_t k = 0;
    buf[0] = 0;
    for (int kind = 0; kind < G4_SPAN_KINDS && k < size; kind++) {
        const int runs = g4_span_ranges(span, n, kind, r);
        size_t count = 0;
        for (int i = 0; i < runs; i++) count += r[i].count;
        k += (size_t)snprintf(buf + k, size - k, "%s%s %zu%s", kind ? ", " : "",
                              g4_span_names[kind], count, count ? " (" : "");
        for (int i = 0; i < runs && k < size; i++) { // (at most 4 runs a kind, then "...")
            const size_t a = r[i].start, z = r[i].start + r[i].count - 1;
            const char *sep = i ? ", " : "";
            k += (size_t)(i == 4  ? snprintf(buf + k, size - k, ", ...")
                          : z > a ? snprintf(buf + k, size - k, "%s%zu-%zu", sep, a, z)
                                  : snprintf(buf + k, size - k, "%s%zu", sep, a));
            if (i == 4) break;
        }
        if (count && k < size) k += (size_t)snprintf(buf + k, size - k, ")");
    }
    free(r);
}

void g4_cmp_report_print_spans(const g4_cmp_report *r, const unsigned char *span, int n_tokens,
                               FILE *f) {
    int any = 0;
    for (int i = 0; i < r->n; i++) any |= r->rows[i].has_spans;
    if (!any || !span) return;
    char sum[600];
    g4_span_summary(span, n_tokens, sum, sizeof sum);
    fprintf(f, "by span of the %d prompt positions: %s\n", n_tokens, sum);
    fprintf(f, "%-20s", "tensor");
    for (int k = 0; k < G4_SPAN_KINDS; k++) {
        char rows[16];
        snprintf(rows, sizeof rows, "%s rows", g4_span_names[k]);
        fprintf(f, " %11s %10s %11s", rows, "rel err", "cosine");
    }
    fprintf(f, "\n");
    for (int i = 0; i < r->n; i++) {
        const g4_cmp_row *x = &r->rows[i];
        if (!x->has_spans) continue;
        fprintf(f, "%-20s", x->name);
        for (int k = 0; k < G4_SPAN_KINDS; k++) {
            const g4_cmp_stats *s = &x->span[k];
            if (s->rows)
                fprintf(f, " %11d %10.4e %11.8f", s->rows, s->rel, s->cosine);
            else
                fprintf(f, " %11d %10s %11s", 0, "-", "-");
        }
        fprintf(f, "\n");
    }
}
