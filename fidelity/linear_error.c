// linear_error.c: see linear_error.h.
//
// The sums: for each column n of a linear, the vectors w_n (the reference's column) and
// d_n = dequant(test)_n - w_n of every test package, each one's v^T H v by quant/quad_form.h
// g4_quad_forms (H's upper triangle, a few vectors per pass over H, in double, on g4_threads()
// threads), then added up per package in column order: the result does not depend on the thread
// count.
#include "fidelity/linear_error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/progress.h"
#include "fidelity/sensitivity.h"
#include "loader/package.h"
#include "quant/q4.h"
#include "quant/quad_form.h"

typedef struct {
    g4_linerr *r;
    g4_package **pk; // [n_pkgs] the test packages, open
    g4_linear **lin; // [n_pkgs][n_rows] each package's binding of each linear
    int next;        // the row the Hessian run should hand over next
} run_ctx;

typedef struct {
    const uint8_t *w;            // fp16 [K, N] (possibly unaligned)
    const g4_linear *const *lin; // [n_pkgs] the linear in each test package
    int K, N;
} quad_src;

static float f16_at(const uint8_t *w, size_t i) {
    uint16_t h;
    memcpy(&h, w + 2 * i, 2);
    return g4_f16_to_f32(h);
}

// Column n of test linear l: col[K] (fp16 or Q4).
static void test_col(const g4_linear *l, int n, int K, int N, float *col) {
    if (l->kind == G4_W_Q4) {
        g4_q4_dequant_col(l, n, col);
        return;
    }
    for (int k = 0; k < K; k++) col[k] = f16_at(l->w, (size_t)k * N + n);
}

// Vector v = p N + n of the sums: p = 0 the reference's column n, p >= 1 test package p - 1's
// d_n (its column less the reference's; fp16 and Q4 values are floats: the difference is exact
// in double).
static void quad_vec(void *ctx, int v, double *x, float *col) {
    const quad_src *s = ctx;
    const int p = v / s->N, n = v % s->N;
    if (p) test_col(s->lin[p - 1], n, s->K, s->N, col);
    for (int k = 0; k < s->K; k++) {
        const double w = f16_at(s->w, (size_t)k * s->N + n);
        x[k] = p ? (double)col[k] - w : w;
    }
}

static int row_of(const g4_linerr *r, int hint, const char *name) {
    if (hint < r->n_rows && !strcmp(r->rows[hint].name, name)) return hint;
    for (int i = 0; i < r->n_rows; i++)
        if (!strcmp(r->rows[i].name, name)) return i;
    return -1;
}

static int on_hessian(void *ctx, const char *name, const void *w, int K, int N, float *H) {
    run_ctx *c = ctx;
    g4_linerr *r = c->r;
    const int i = row_of(r, c->next, name);
    if (i < 0 || r->rows[i].K != K || r->rows[i].N != N)
        return g4_fail(G4_EINTERNAL, "linear error: the Hessian run gave %s [%d, %d], not listed",
                       name, K, N);
    c->next = i + 1;
    const int P = r->n_pkgs;
    const g4_linear **lin = g4_malloc(sizeof(g4_linear *) * (size_t)P);
    for (int p = 0; p < P; p++) lin[p] = &c->lin[p][i];
    quad_src src = {w, lin, K, N};
    // q [1 + P][N]: v^T H v of w_n and of each d_n
    double *q = g4_malloc(sizeof(double) * (size_t)(1 + P) * N);
    int rc = g4_quad_forms(H, K, (1 + P) * N, quad_vec, &src, q);
    if (rc) {
        free(q), free(lin);
        return rc;
    }
    g4_linerr_row *row = &r->rows[i];
    double *s = g4_malloc(sizeof(double) * (size_t)(1 + P));
    for (int p = 0; p <= P; p++) {
        s[p] = 0;
        for (int n = 0; n < N; n++) s[p] += q[(size_t)p * N + n];
    }
    row->ref = s[0];
    for (int p = 0; p < P; p++)
        row->e[p] = s[0] > 0 ? s[1 + p] / s[0] : (s[1 + p] > 0 ? INFINITY : 0);
    free(s), free(q), free(lin);
    return G4_OK;
}

// The last path component of dir (trailing slashes ignored), a new string.
static char *short_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t s = n;
    while (s > 0 && dir[s - 1] != '/') s--;
    return g4_strndup(dir + s, n - s);
}

int g4_linerr_same_inputs(const g4_component *ref, const g4_component *test, int *n_same,
                          int *n_diff, const char **first) {
    *n_same = *n_diff = 0;
    *first = NULL;
    if (!ref->model || !test->model)
        return g4_fail(G4_EUSER, "linear error: %s: no decoder",
                       !ref->model ? "reference" : "test");
    const g4_onnx_model *a = ref->model, *b = test->model;
    for (int i = 0; i < a->n_tensors; i++) {
        const g4_tensor *x = &a->tensors[i];
        if (x->kind != G4_TENSOR_INITIALIZER) continue;
        const g4_tensor *y = g4_onnx_tensor(b, x->name);
        if (!y || y->kind != G4_TENSOR_INITIALIZER) continue; // a linear's W, dropped by the writer
        const int same = y->dtype == x->dtype && y->nbytes == x->nbytes &&
                         (!x->nbytes || !memcmp(x->data, y->data, x->nbytes));
        if (same) {
            (*n_same)++;
        } else if ((*n_diff)++ == 0) {
            *first = x->name;
        }
    }
    return G4_OK;
}

// Opens test package p and binds every listed linear (fp16 or Q4) at the reference's shape;
// refuses one whose other decoder weights differ from the reference's (g4_linerr_same_inputs).
static int bind_package(const g4_text_model *m, const char *dir, g4_linerr *r, g4_package **pk,
                        g4_linear **lin) {
    int rc = g4_package_open(dir, pk);
    if (rc) return rc;
    const g4_text_config *a = m->cfg, *b = &(*pk)->text;
    if (a->n_layers != b->n_layers || a->hidden != b->hidden || a->vocab != b->vocab)
        return g4_fail(G4_EUSER,
                       "%s and %s are different models (layers %d / %d, hidden %d / %d, vocab "
                       "%d / %d): expected one model in two precisions",
                       r->reference, dir, a->n_layers, b->n_layers, a->hidden, b->hidden, a->vocab,
                       b->vocab);
    const g4_component *dec = g4_package_component(*pk, G4_COMP_DECODER);
    if (!dec) return g4_fail(G4_EUSER, "%s: no decoder component", dir);
    int n_same, n_diff;
    const char *first;
    rc = g4_linerr_same_inputs(g4_package_component(m->pkg, G4_COMP_DECODER), dec, &n_same, &n_diff,
                               &first);
    if (rc) return rc;
    if (n_diff)
        return g4_fail(G4_EUSER,
                       "%s: %d of the %d decoder weights it shares by name with %s differ "
                       "(first %s; a norm: quantize --equalize?): its linears read other inputs "
                       "than the reference's, so e would not be their output error; compare "
                       "packages made without --equalize",
                       dir, n_diff, n_same + n_diff, r->reference, first);
    *lin = g4_calloc((size_t)r->n_rows, sizeof(g4_linear));
    for (int i = 0; i < r->n_rows; i++) {
        const g4_linerr_row *x = &r->rows[i];
        if ((rc = g4_linear_get(dec, x->name, x->K, x->N, &(*lin)[i]))) {
            g4_error_prefix("%s: linear %s [%d, %d] (as in %s)", dir, x->name, x->K, x->N,
                            r->reference);
            return rc;
        }
    }
    return G4_OK;
}

int g4_linerr_run(g4_text_model *m, const char *ref_dir, const char *const *pkgs, int n_pkgs,
                  const int32_t *ids, int n, uint64_t max_floats, g4_linerr *out) {
    memset(out, 0, sizeof *out);
    if (n_pkgs < 1 || n_pkgs > 64)
        return g4_fail(G4_EUSER, "linear error: %d test packages: expected 1 to 64", n_pkgs);
    if (n < 1) return g4_fail(G4_EUSER, "linear error: no calibration tokens");
    const double t0 = g4_progress_now();
    g4_sens_row *lr = NULL;
    int nl = 0, n_q4 = 0;
    int rc = g4_decoder_linears(m, &lr, &nl, &n_q4);
    if (rc) return rc;
    // (the engine binds decoder linears as fp16 or Q4: an fp32 package already failed to load,
    // naming the tensor and its dtype)
    if (n_q4 || !nl) {
        free(lr);
        return g4_fail(G4_EUSER,
                       "%s: %d of %d decoder linears are Q4: the reference must be the f16 package",
                       ref_dir, n_q4, n_q4 + nl);
    }
    out->reference = g4_strdup(ref_dir);
    out->n_pkgs = n_pkgs;
    out->pkgs = g4_malloc(sizeof(char *) * (size_t)n_pkgs);
    out->names = g4_malloc(sizeof(char *) * (size_t)n_pkgs);
    for (int p = 0; p < n_pkgs; p++)
        out->pkgs[p] = g4_strdup(pkgs[p]), out->names[p] = short_name(pkgs[p]);
    out->n_ids = n;
    out->n_layers = m->cfg->n_layers;
    out->n_rows = nl;
    out->rows = g4_calloc((size_t)nl, sizeof(g4_linerr_row));
    for (int i = 0; i < nl; i++) {
        g4_linerr_row *x = &out->rows[i];
        snprintf(x->name, sizeof x->name, "%s", lr[i].name);
        snprintf(x->kind, sizeof x->kind, "%s", lr[i].kind);
        x->layer = lr[i].layer, x->K = lr[i].K, x->N = lr[i].N;
        x->e = g4_calloc((size_t)n_pkgs, sizeof(double));
        x->kept = g4_calloc((size_t)n_pkgs, 1);
    }
    free(lr);
    run_ctx c = {out, g4_calloc((size_t)n_pkgs, sizeof(g4_package *)),
                 g4_calloc((size_t)n_pkgs, sizeof(g4_linear *)), 0};
    for (int p = 0; p < n_pkgs && !rc; p++) rc = bind_package(m, pkgs[p], out, &c.pk[p], &c.lin[p]);
    for (int p = 0; p < n_pkgs && !rc; p++)
        for (int i = 0; i < nl; i++) out->rows[i].kept[p] = c.lin[p][i].kind == G4_W_F16;
    int n_lin = 0;
    const g4_hessian_opts ho = {max_floats, 0, 0, 0};
    if (!rc) rc = g4_hessian_run(m, ids, n, &ho, on_hessian, &c, &n_lin);
    if (!rc && n_lin != nl)
        rc =
            g4_fail(G4_EINTERNAL, "linear error: the Hessian run gave %d of %d linears", n_lin, nl);
    for (int p = 0; p < n_pkgs; p++) {
        free(c.lin[p]);
        if (c.pk[p]) g4_package_close(c.pk[p]);
    }
    free(c.lin), free(c.pk);
    out->seconds = g4_progress_now() - t0;
    if (rc) g4_linerr_free(out);
    return rc;
}

void g4_linerr_free(g4_linerr *r) {
    for (int i = 0; i < r->n_rows; i++) free(r->rows[i].e), free(r->rows[i].kept);
    for (int p = 0; p < r->n_pkgs && r->pkgs; p++) free(r->pkgs[p]), free(r->names[p]);
    free(r->rows), free(r->pkgs), free(r->names), free(r->reference);
    memset(r, 0, sizeof *r);
}

void g4_linerr_summary(const g4_linerr *r, int p, const char *kind, int layer, g4_linerr_sum *s) {
    memset(s, 0, sizeof *s);
    double se = 0, sl = 0;
    for (int i = 0; i < r->n_rows; i++) {
        const g4_linerr_row *x = &r->rows[i];
        if ((kind && strcmp(x->kind, kind)) || (layer != G4_LINERR_ANY && x->layer != layer))
            continue;
        s->n++;
        s->kept += x->kept[p];
        se += x->e[p];
        s->below += x->e[p] < x->e[0];
        if (x->e[p] > 0 && x->e[0] > 0 && isfinite(x->e[p]) && isfinite(x->e[0]))
            sl += log(x->e[p] / x->e[0]), s->n_geo++;
    }
    s->mean_e = s->n ? se / s->n : NAN;
    s->geo_ratio = s->n_geo ? exp(sl / s->n_geo) : NAN;
}
