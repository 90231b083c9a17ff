// g4cu_dev_compare.c: `g4cu compare` (include/g4cu_dev.h g4cu_dev_compare): layer-by-layer
// agreement reports (fidelity/report.h) in three modes: a package against an HF dump (every
// intermediate the dump holds, by name, each against a named tolerance), a test package against
// a reference (rel err, cosine, max abs err per tensor, the logits' KL and top-1 agreement),
// the per-linear Q4 sensitivity of an fp16 package (fidelity/sensitivity.h), and the layer-output
// error of every linear of one or more Q4 packages against the fp16 one (fidelity/
// linear_error.h).
#include <g4cu_dev.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "base/parallel.h"
#include "engine/text_model.h"
#include "fidelity/capture.h"
#include "fidelity/compare.h"
#include "fidelity/dump_run.h"
#include "fidelity/kl.h"
#include "fidelity/linear_error.h"
#include "fidelity/npy.h"
#include "fidelity/report.h"
#include "fidelity/sensitivity.h"
#include "fidelity/tolerance.h"
#include "kernels/backend_select.h"
#include "loader/tokenizer.h"

typedef g4cu_dev_compare_params opts;

// The input: the ids, or the prompt through the tokenizer (a tokenizer.json or a directory
// holding one; default PKG/tokenizer.json), with <bos> as HF's add_special_tokens.
static int input_ids(const opts *o, const char *pkg_dir, int32_t **ids, int *n) {
    if (o->ids && o->prompt) return g4_fail(G4_EUSER, "give --ids or --prompt, not both");
    if (o->ids) {
        if (o->n_ids <= 0) return g4_fail(G4_EUSER, "compare: no input ids");
        *n = o->n_ids;
        *ids = g4_malloc(sizeof(int32_t) * (size_t)o->n_ids);
        memcpy(*ids, o->ids, sizeof(int32_t) * (size_t)o->n_ids);
        return G4_OK;
    }
    if (!o->prompt)
        return g4_fail(G4_EUSER, "compare needs the input: --ids 2,5,17 or --prompt TEXT");
    const char *t = o->tokenizer ? o->tokenizer : pkg_dir;
    char *path = g4_is_dir(t) ? g4_path_join(t, "tokenizer.json") : g4_strdup(t);
    g4_tokenizer *tok;
    int rc = g4_tokenizer_open(path, &tok);
    free(path);
    if (rc) return rc;
    g4_ids v = {0};
    rc = g4_tokenizer_encode(tok, o->prompt, strlen(o->prompt), 1, &v);
    g4_tokenizer_close(tok);
    if (!rc && v.n == 0) rc = g4_fail(G4_EUSER, "--prompt: the text gives no tokens");
    if (!rc) {
        *n = (int)v.n;
        *ids = g4_malloc(sizeof(int32_t) * v.n);
        for (size_t i = 0; i < v.n; i++) (*ids)[i] = v.v[i];
    }
    g4_ids_free(&v);
    return rc;
}

static int write_reports(const opts *o, const g4_report *r) {
    int rc = G4_OK;
    if (!rc && o->md) rc = g4_report_write_md(r, o->md);
    if (!rc && o->json) rc = g4_report_write_json(r, o->json);
    if (!rc && o->svg) rc = g4_report_write_svg(r, o->svg);
    return rc;
}

static int logits_kl(const g4_capture *ref, const g4_capture *test, g4_kl_stats *k) {
    const g4_capture_item *a = g4_capture_find(ref, "logits"), *b = g4_capture_find(test, "logits");
    if (!a || !b || a->rows != b->rows || a->cols != b->cols) return 0;
    *k = g4_kl_rows(a->data, b->data, a->rows, (size_t)a->cols);
    return 1;
}

// The dump's own top ids and logits a row (mm_reference.py), or all zero when it has none.
static int ids_ties(g4_npz *ref, const char *ref_path, int rows, g4_ids_ties *t, float **buf) {
    static const char *const names[] = {"logits_top_ids", "logits_top_vals", "logits_row_rms"};
    const g4_array *m[3];
    int have = 0, rc;
    for (int i = 0; i < 3; i++) have += g4_npz_find(ref, names[i]) >= 0;
    if (have == 0) return G4_OK;
    if (have < 3)
        return g4_fail(G4_EUSER,
                       "%s: has %d of logits_top_ids, logits_top_vals, logits_row_rms: "
                       "expected all three or none",
                       ref_path, have);
    for (int i = 0; i < 3; i++)
        if ((rc = g4_npz_get(ref, names[i], &m[i]))) return rc;
    const size_t k = rows > 0 ? m[0]->numel / (size_t)rows : 0;
    if (rows <= 0 || k < 1 || m[0]->numel != k * (size_t)rows || m[1]->numel != m[0]->numel ||
        m[2]->numel != (size_t)rows || k > 1024)
        return g4_fail(G4_EUSER,
                       "%s: logits_top_ids / logits_top_vals / logits_row_rms hold %zu / "
                       "%zu / %zu values: expected [%d, k] / [%d, k] / [%d]",
                       ref_path, (size_t)m[0]->numel, (size_t)m[1]->numel, (size_t)m[2]->numel,
                       rows, rows, rows);
    *buf = g4_malloc(sizeof(float) * (2 * k + 1) * (size_t)rows);
    float *ids = *buf, *vals = ids + k * rows, *rms = vals + k * rows;
    g4_array_to_f32(m[0], ids);
    g4_array_to_f32(m[1], vals);
    g4_array_to_f32(m[2], rms);
    *t = (g4_ids_ties){ids, vals, rms, (int)k};
    return G4_OK;
}

// logits_argmax: passes when every row equals the dump's id or is one of its near ties
// (margin 2 x the backend's rel tolerance x RMS of the row, mm_parity.py's rule); the rel err
// of ids says nothing.
static int judge_ids(g4_npz *ref, const char *ref_path, const float *test, const float *want,
                     int rows, double tol, g4_cmp_row *row) {
    g4_ids_ties tie = {0};
    float *buf = NULL;
    const int rc = ids_ties(ref, ref_path, rows, &tie, &buf);
    if (rc) return rc;
    row->has_ids = 1;
    row->ids = g4_ids_judge(test, want, rows, &tie, 2.0 * tol);
    row->pass = row->s.ref_bad == 0 && row->ids.real == 0;
    free(buf);
    return G4_OK;
}

// The per-token tensor it (pos set) of a prompt with media: row->span, its rows split by the
// kind of their position (c->span), against the reference's rows ref (the same rows).
static void split_spans(const g4_capture *c, const g4_capture_item *it, const float *ref,
                        g4_cmp_row *row) {
    unsigned char *kind = g4_malloc((size_t)it->rows + 1);
    for (int i = 0; i < it->rows; i++) kind[i] = c->span[it->pos[i]];
    g4_cmp_spans(it->data, ref, (size_t)it->cols, kind, it->rows, row->span);
    row->has_spans = 1;
    free(kind);
}

// --- mode 1: against an HF dump -------------------------------------------------------------
static int run_dump(const char *pkg_dir, const char *ref_path, const opts *o, g4_backend *be,
                    FILE *rf, int *pass) {
    g4_npz *ref = NULL,
           *tol_ref = NULL; // tol_ref: a lower-precision HF dump, per-tensor tolerances
    const g4_tol_rule *rule = NULL;
    g4_capture cap = {0};
    g4_cmp_report rep = {0};
    int32_t *ids = NULL;
    int *shapes = NULL, *seen = NULL, n = 0, n_missing = 0, have_kl = 0, rc;
    const char **missing = NULL;
    float *logits_ref = NULL;
    g4_kl_stats kl = {0};
    const g4_array *a;
    if ((rc = g4_npz_open(ref_path, &ref)) || (rc = g4_dump_input_ids(ref, ref_path, &ids, &n)))
        goto done;
    if (o->tol_from && (rc = g4_tol_dump_open(o->tol_from, ref_path, ref, ids, n, &tol_ref, &rule)))
        goto done;
    // Text dumps and multimodal ones (media, processor outputs, towers; eval/dump_run.h).
    if ((rc = g4_capture_dump(pkg_dir, be, ref, ref_path, &cap))) goto done;
    const g4_tol *tol = g4_tol_for_backend(be); // fidelity/tolerance.h
    seen = g4_calloc((size_t)g4_npz_count(ref) + 1, sizeof(int));
    shapes = g4_malloc(sizeof(int) * 2 * (size_t)(cap.n + 1));
    for (int i = 0; i < cap.n; i++) {
        const g4_capture_item *it = &cap.items[i];
        const int idx = g4_npz_find(ref, it->name);
        if (idx < 0) continue; // not in this dump
        seen[idx] = 1;
        g4_cmp_row row = {0};
        snprintf(row.name, sizeof row.name, "%s", it->name);
        snprintf(row.tol_name, sizeof row.tol_name, "%s", tol->name);
        row.tol = tol->rel;
        shapes[2 * rep.n] = it->rows;
        shapes[2 * rep.n + 1] = it->cols;
        if ((rc = g4_npz_get(ref, it->name, &a))) goto done;
        const size_t ne = (size_t)it->rows * it->cols;
        row.shape_ok = a->numel == ne;
        if (row.shape_ok) {
            float *r = g4_malloc(sizeof(float) * ne + 1);
            g4_array_to_f32(a, r);
            if (tol_ref) {
                g4_tol t;
                if ((rc = g4_tol_derived(tol_ref, o->tol_from, rule, it->name, a, r, &t))) {
                    free(r);
                    goto done;
                }
                row.tol = t.rel;
                snprintf(row.tol_name, sizeof row.tol_name, "%s", t.name);
            }
            const int is_logits = !strcmp(it->name, "logits");
            row.s = g4_cmp(it->data, r, ne, is_logits ? (size_t)cap.vocab : 0);
            row.pass = row.s.nan == 0 && row.s.ref_bad == 0 && row.s.rel <= row.tol;
            if (cap.span && it->pos) split_spans(&cap, it, r, &row); // (information only)
            if (!strcmp(it->name, "logits_argmax")) { // ids: equal, or the reference's near ties
                if ((rc = judge_ids(ref, ref_path, it->data, r, (int)ne, row.tol, &row))) {
                    free(r);
                    goto done;
                }
            }
            if (is_logits && !have_kl) {
                kl = g4_kl_rows(r, it->data, it->rows, (size_t)it->cols);
                have_kl = 1;
                logits_ref = r;
                r = NULL;
            }
            free(r);
        }
        g4_cmp_report_add(&rep, &row);
    }
    fprintf(rf, "compare %s (%s backend) with %s: %d tokens\n", pkg_dir, be->name, ref_path, n);
    g4_cmp_report_print(&rep, rf);
    missing = g4_calloc((size_t)g4_npz_count(ref) + 1, sizeof(char *));
    for (int i = 0; i < g4_npz_count(ref); i++)
        if (!seen[i] && !g4_dump_member_is_meta(g4_npz_name(ref, i))) {
            fprintf(rf, "%-20s not produced by the engine: FAIL\n", g4_npz_name(ref, i));
            missing[n_missing++] = g4_npz_name(ref, i);
        }
    g4_cmp_report_print_spans(&rep, cap.span, cap.n_tokens, rf); // (nothing without media)
    g4_report r = {.mode = G4_REPORT_HF_DUMP,
                   .reference = ref_path,
                   .test = pkg_dir,
                   .backend = be->name,
                   .ids = ids,
                   .n_ids = n,
                   .n_layers = cap.n_layers,
                   .tensors = &rep,
                   .shapes = shapes,
                   .has_tolerance = 1,
                   .missing = missing,
                   .n_missing = n_missing,
                   .span = cap.n_tokens == n ? cap.span : NULL,
                   .kl = have_kl ? &kl : NULL};
    g4_report_print_kl(&r, rf);
    const int ok = g4_cmp_report_ok(&rep) && n_missing == 0 && rep.n > 0;
    // The verdict names what broke it: the first failing tensor (non-finite values first).
    const g4_cmp_row *first_bad = NULL;
    for (int i = 0; i < rep.n && !first_bad; i++)
        if (rep.rows[i].s.ref_bad || rep.rows[i].s.nan) first_bad = &rep.rows[i];
    for (int i = 0; i < rep.n && !first_bad; i++)
        if (!rep.rows[i].pass) first_bad = &rep.rows[i];
    if (ok)
        fprintf(rf, "%s: %d tensors compared, all within tolerance\n", ref_path, rep.n);
    else if (first_bad && first_bad->s.ref_bad)
        fprintf(rf,
                "%s: %d tensors compared, FAILED: the reference's '%s' has %zu NaN/Inf values\n",
                ref_path, rep.n, first_bad->name, first_bad->s.ref_bad);
    else if (first_bad && first_bad->s.nan)
        fprintf(rf, "%s: %d tensors compared, FAILED: our '%s' has %zu NaN/Inf values\n", ref_path,
                rep.n, first_bad->name, first_bad->s.nan);
    else if (first_bad && first_bad->has_ids)
        fprintf(rf,
                "%s: %d tensors compared, FAILED: first '%s' (%d of %d rows differ from the "
                "reference, row %d first, and are not its near ties)\n",
                ref_path, rep.n, first_bad->name, first_bad->ids.real, first_bad->ids.rows,
                first_bad->ids.first_real);
    else if (first_bad)
        fprintf(rf, "%s: %d tensors compared, FAILED: first '%s' (rel err %.3e > %s %.1e)\n",
                ref_path, rep.n, first_bad->name, first_bad->s.rel, first_bad->tol_name,
                first_bad->tol);
    else
        fprintf(rf, "%s: %d tensors compared, FAILED\n", ref_path, rep.n);
    if ((rc = write_reports(o, &r))) goto done;
    *pass = ok;
done:
    free(ids), free(seen), free(shapes), free(missing), free(logits_ref);
    if (have_kl) g4_kl_free(&kl);
    g4_cmp_report_free(&rep);
    g4_capture_free(&cap);
    if (ref) g4_npz_close(ref);
    if (tol_ref) g4_npz_close(tol_ref);
    return rc;
}

// --- mode 2: two packages ---------------------------------------------------------------------
static int run_packages(const char *ref_dir, const char *test_dir, const opts *o, g4_backend *be,
                        FILE *rf, int *pass) {
    g4_capture ref = {0}, test = {0};
    g4_cmp_report rep = {0};
    int32_t *ids = NULL;
    int *shapes = NULL, n = 0, have_kl = 0, rc, bad = 0;
    g4_kl_stats kl = {0};
    if ((rc = input_ids(o, ref_dir, &ids, &n))) goto done;
    // One model at a time: the reference's intermediates stay, its weights go.
    if ((rc = g4_capture_run(ref_dir, be, ids, n, &ref)) ||
        (rc = g4_capture_run(test_dir, be, ids, n, &test)))
        goto done;
    if (ref.vocab != test.vocab || ref.n_layers != test.n_layers || ref.hidden != test.hidden) {
        rc = g4_fail(G4_EUSER,
                     "%s and %s are different models (vocab %d / %d, layers %d / %d, hidden "
                     "%d / %d): expected one model in two precisions",
                     ref_dir, test_dir, ref.vocab, test.vocab, ref.n_layers, test.n_layers,
                     ref.hidden, test.hidden);
        goto done;
    }
    shapes = g4_malloc(sizeof(int) * 2 * (size_t)(test.n + 1));
    for (int i = 0; i < test.n; i++) {
        const g4_capture_item *t = &test.items[i], *r = g4_capture_find(&ref, t->name);
        g4_cmp_row row = {0};
        snprintf(row.name, sizeof row.name, "%s", t->name);
        snprintf(row.tol_name, sizeof row.tol_name, "-");
        shapes[2 * rep.n] = t->rows;
        shapes[2 * rep.n + 1] = t->cols;
        row.shape_ok = r && r->rows == t->rows && r->cols == t->cols;
        if (row.shape_ok)
            row.s = g4_cmp(t->data, r->data, (size_t)t->rows * t->cols,
                           strcmp(t->name, "logits") ? 0 : (size_t)t->cols);
        row.pass = row.shape_ok && row.s.nan == 0 && row.s.ref_bad == 0;
        bad += !row.pass;
        g4_cmp_report_add(&rep, &row);
    }
    have_kl = logits_kl(&ref, &test, &kl);
    g4_report r = {.mode = G4_REPORT_PACKAGES,
                   .reference = ref_dir,
                   .test = test_dir,
                   .backend = be->name,
                   .ids = ids,
                   .n_ids = n,
                   .n_layers = ref.n_layers,
                   .tensors = &rep,
                   .shapes = shapes,
                   .kl = have_kl ? &kl : NULL};
    fprintf(rf, "compare %s (test) with %s (reference), %s backend: %d tokens\n", test_dir, ref_dir,
            be->name, n);
    g4_report_print(&r, rf);
    if ((rc = write_reports(o, &r))) goto done;
    *pass = 0;
    if (bad) {
        fprintf(rf,
                "FAILED: %d tensors with non-finite values (in the test or the reference run) or "
                "differing shapes\n",
                bad);
    } else if (o->max_kl >= 0 && !(have_kl && kl.kl_mean <= o->max_kl)) {
        fprintf(rf, "FAILED: logits KL mean %.6e is above --max-kl %g\n",
                have_kl ? kl.kl_mean : NAN, o->max_kl);
    } else {
        *pass = 1;
    }
done:
    free(ids), free(shapes);
    if (have_kl) g4_kl_free(&kl);
    g4_cmp_report_free(&rep);
    g4_capture_free(&ref);
    g4_capture_free(&test);
    return rc;
}

// --- mode 3: sensitivity ----------------------------------------------------------------------
static int run_sensitivity(const char *pkg_dir, const opts *o, g4_backend *be, FILE *rf,
                           int *pass) {
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_sens_row *rows = NULL;
    int32_t *ids = NULL;
    int n = 0, n_rows = 0, n_q4 = 0, rc;
    if ((rc = input_ids(o, pkg_dir, &ids, &n)) || (rc = g4_package_open(pkg_dir, &p)) ||
        (rc = g4_text_model_load(p, be, &m)))
        goto done;
    g4_sens_opts so = {o->top,    o->layers,    o->n_layers, o->only,
                       o->n_only, o->n_threads, o->progress};
    if ((rc = g4_sensitivity_run(m, ids, n, &so, &rows, &n_rows, &n_q4))) goto done;
    g4_report r = {.mode = G4_REPORT_SENSITIVITY,
                   .reference = pkg_dir,
                   .backend = be->name,
                   .ids = ids,
                   .n_ids = n,
                   .n_layers = p->text.n_layers,
                   .sens = rows,
                   .n_sens = n_rows};
    fprintf(rf,
            "sensitivity of %s (%s backend, %d tokens): each decoder linear k-quantized to 4 bits "
            "alone\n",
            pkg_dir, be->name, n);
    g4_report_print(&r, rf);
    if (n_q4)
        fprintf(rf, "%d matching linears are already Q4 in the package and were not ranked\n",
                n_q4);
    rc = write_reports(o, &r);
    *pass = 1;
done:
    free(ids), free(rows);
    g4_text_model_free(m);
    g4_package_close(p);
    return rc;
}

// --- mode 4: the layer-output error of each linear in each test package ---------------------

// X^T X floats held at once (as `g4cu quantize` holds: 256 MiB; a larger linear alone).
#define LINERR_HESSIAN_FLOATS (1u << 26)

static int write_text(const char *path, char *text) {
    if (!text) return g4_fail(G4_EINTERNAL, "%s: could not render the report", path);
    int rc = g4_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

static int run_linear_error(const char *pkg_dir, const opts *o, g4_backend *be, FILE *rf,
                            int *pass) {
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_linerr r = {0};
    int32_t *ids = NULL;
    int n = 0, rc;
    char *tp = o->tokenizer
                   ? (g4_is_dir(o->tokenizer) ? g4_path_join(o->tokenizer, "tokenizer.json")
                                              : g4_strdup(o->tokenizer))
                   : g4_path_join(pkg_dir, "tokenizer.json");
    if ((rc = g4_api_calib_ids(o->calib, tp, o->calib_tokens, &ids, &n, NULL)) ||
        (rc = g4_package_open(pkg_dir, &p)) || (rc = g4_text_model_load(p, be, &m)) ||
        (rc = g4_linerr_run(m, pkg_dir, o->tests, o->n_tests, ids, n, LINERR_HESSIAN_FLOATS, &r)))
        goto done;
    g4_linerr_print(&r, rf);
    if (!rc && o->md) rc = write_text(o->md, g4_linerr_md(&r));
    if (!rc && o->json) rc = write_text(o->json, g4_linerr_json(&r));
    if (!rc && o->tsv) rc = write_text(o->tsv, g4_linerr_tsv(&r));
    if (!rc && o->svg) rc = write_text(o->svg, g4_linerr_svg(&r, 0));
    if (!rc && o->svg_kind) rc = write_text(o->svg_kind, g4_linerr_svg(&r, 1));
    *pass = 1;
done:
    free(tp), free(ids);
    g4_linerr_free(&r);
    g4_text_model_free(m);
    g4_package_close(p);
    return rc;
}

void g4cu_dev_compare_params_default(g4cu_dev_compare_params *p) {
    *p = (g4cu_dev_compare_params){.backend = "cpu", .max_kl = -1, .calib_tokens = 256};
}

static int compare(const char *a, const char *b, const opts *o, FILE *rf, int *pass) {
    const int mode = o->mode;
    if (mode != G4CU_DEV_COMPARE_DUMP && mode != G4CU_DEV_COMPARE_PACKAGES &&
        mode != G4CU_DEV_COMPARE_SENSITIVITY && mode != G4CU_DEV_COMPARE_LINEAR_ERROR)
        return g4_fail(G4_EUSER, "compare: mode %d: expected a g4cu_dev_compare_mode", mode);
    const int one = mode == G4CU_DEV_COMPARE_SENSITIVITY || mode == G4CU_DEV_COMPARE_LINEAR_ERROR;
    if (!a || one != !b)
        return g4_fail(G4_EUSER, "compare: %s",
                       mode == G4CU_DEV_COMPARE_SENSITIVITY    ? "the sensitivity takes one package"
                       : mode == G4CU_DEV_COMPARE_LINEAR_ERROR ? "the linear error takes the "
                                                                 "reference and tests"
                                                               : "needs a package and a dump or a "
                                                                 "package");
    const int le = mode == G4CU_DEV_COMPARE_LINEAR_ERROR;
    if (le != (o->n_tests > 0 || o->calib || o->tsv || o->svg_kind))
        return g4_fail(G4_EUSER, "compare: %s",
                       le ? "the linear error needs tests (1 to 64) and a calibration text"
                          : "tests, calib, tsv and svg_kind apply to the linear error");
    if (le && (!o->tests || o->n_tests < 1 || o->n_tests > 64 || !o->calib))
        return g4_fail(G4_EUSER,
                       "compare: the linear error needs tests (1 to 64, got %d) and a "
                       "calibration text",
                       o->n_tests);
    if (le && (o->calib_tokens < 8 || o->calib_tokens > (1 << 20)))
        return g4_fail(G4_EUSER, "compare: calib_tokens %d: expected 8 to %d", o->calib_tokens,
                       1 << 20);
    if (le && (o->ids || o->prompt || o->max_kl >= 0 || o->tol_from))
        return g4_fail(G4_EUSER, "compare: the linear error's input is the calibration text (no "
                                 "ids, prompt, max_kl or tol_from)");
    for (int i = 0; le && i < o->n_tests; i++)
        if (!o->tests[i]) return g4_fail(G4_EUSER, "compare: tests[%d] is NULL", i);
    if (mode != G4CU_DEV_COMPARE_SENSITIVITY && (o->top || o->n_layers || o->n_only))
        return g4_fail(G4_EUSER, "compare: top, layers and only apply to the sensitivity");
    if (mode == G4CU_DEV_COMPARE_DUMP && (o->ids || o->prompt || o->max_kl >= 0))
        return g4_fail(G4_EUSER, "compare: with an HF dump the input is the dump's input_ids "
                                 "(no ids, prompt or max_kl)");
    // The reports' targets are checked before the run, not found unwritable after it.
    const char *outs[5] = {o->md, o->json, o->svg, o->tsv, o->svg_kind};
    int rc;
    for (int k = 0; k < 5; k++)
        if (outs[k] && (rc = g4_check_output(outs[k]))) return rc;
    g4_backend *be;
    if ((rc = g4_backend_by_name(o->backend ? o->backend : "cpu", &be))) return rc;
    opts d = *o;
    if (d.n_threads <= 0) d.n_threads = g4_threads();
    if (le) return run_linear_error(a, &d, be, rf, pass);
    return mode == G4CU_DEV_COMPARE_SENSITIVITY ? run_sensitivity(a, &d, be, rf, pass)
           : mode == G4CU_DEV_COMPARE_DUMP      ? run_dump(a, b, &d, be, rf, pass)
                                                : run_packages(a, b, &d, be, rf, pass);
}

int g4cu_dev_compare(const char *a, const char *b, const g4cu_dev_compare_params *p, FILE *report,
                     int *pass) {
    int unused;
    if (!pass) pass = &unused;
    *pass = 0;
    if (!p) return g4_api_code(g4_fail(G4_EUSER, "compare: no params (the mode is needed)"));
    if (!report) return g4_api_code(g4_fail(G4_EUSER, "g4cu_dev_compare: report is NULL"));
    return g4_api_code(compare(a, b, p, report, pass));
}
