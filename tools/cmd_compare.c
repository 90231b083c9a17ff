// g4cu compare: layer-by-layer agreement reports, in three modes (eval/report.h):
//
//   g4cu compare PKG REF.npz [--backend B]
//       runs the package on the dump's input_ids and compares every intermediate the dump holds
//       (embeddings, per-layer inputs, q/k/v, each layer's output, final norm, logits) by name,
//       each against a named tolerance; exit 1 when any tensor is over it or missing.
//   g4cu compare PKG_REF PKG_TEST (--ids 2,5,17 | --prompt TEXT [--tokenizer F]) [--backend B]
//                [--max-kl X]
//       fidelity of a test package (Q4, mixed precision) against a reference (f16): both run on
//       the same ids, one after the other (the reference's intermediates are kept on the host,
//       its model freed before the test package loads); per tensor rel err, cosine, max abs
//       err, and the logits' KL(p_ref || p_test) per position and top-1 agreement. Exit 1 when
//       the test run has non-finite values, or with --max-kl when the mean KL is above X.
//   g4cu compare PKG_F16 --sensitivity (--ids ... | --prompt ...) [--sensitivity-top N]
//                [--layers 0-3,7] [--only GLOB]... [--threads N]
//       each decoder linear quantized alone, in memory (eval/sensitivity.h); ranked by the KL.
//
// Every mode also writes --md F (Markdown), --json F (all numbers) and --svg F (rel err, or KL,
// per layer; log scale).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/text_model.h"
#include "fidelity/capture.h"
#include "fidelity/compare.h"
#include "fidelity/dump_run.h"
#include "fidelity/kl.h"
#include "fidelity/npy.h"
#include "fidelity/report.h"
#include "fidelity/sensitivity.h"
#include "fidelity/tolerance.h"
#include "kernels/backend_select.h"
#include "loader/tokenizer.h"
#include "tools/cli.h"

typedef struct {
    const char *pos[2];
    int n_pos;
    const char *backend, *ids_s, *prompt, *tokenizer, *md, *json, *svg, *tol_from;
    int sensitivity;
    long long top, threads;
    const char **only;
    int n_only;
    int *layers;
    int n_layers;
    double max_kl; // < 0: no gate
} opts;

static const char *cmd = "compare";

// "0-3,7" -> layer indices (appended to o->layers).
static int parse_layers(const char *s, opts *o) {
    const char *p = s;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0 || a > 100000) goto bad;
        if (*end == '-') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q || b < a || b > 100000) goto bad;
        }
        if (*end && *end != ',') goto bad;
        for (long l = a; l <= b; l++) {
            o->layers = g4_realloc(o->layers, sizeof(int) * (size_t)(o->n_layers + 1));
            o->layers[o->n_layers++] = (int)l;
        }
        p = *end ? end + 1 : end;
    }
    if (o->n_layers) return G4_OK;
bad:
    return g4_fail(G4_EUSER, "--layers '%s': expected layers and ranges such as 0-3,7", s);
}

// The input: --ids, or --prompt through the tokenizer (--tokenizer F: a tokenizer.json or a
// directory holding one; default PKG/tokenizer.json), with <bos> as HF's add_special_tokens.
static int input_ids(const opts *o, const char *pkg_dir, int32_t **ids, int *n) {
    if (o->ids_s && o->prompt) return g4_fail(G4_EUSER, "give --ids or --prompt, not both");
    if (o->ids_s) return g4_cli_parse_ids(o->ids_s, ids, n);
    if (!o->prompt)
        return g4_fail(G4_EUSER, "%s needs the input: --ids 2,5,17 or --prompt TEXT", cmd);
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

// --- mode 1: against an HF dump -------------------------------------------------------------
static int run_dump(const opts *o, g4_backend *be) {
    const char *pkg_dir = o->pos[0], *ref_path = o->pos[1];
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
    printf("compare %s (%s backend) with %s: %d tokens\n", pkg_dir, be->name, ref_path, n);
    g4_cmp_report_print(&rep);
    missing = g4_calloc((size_t)g4_npz_count(ref) + 1, sizeof(char *));
    for (int i = 0; i < g4_npz_count(ref); i++)
        if (!seen[i] && !g4_dump_member_is_meta(g4_npz_name(ref, i))) {
            printf("%-20s not produced by the engine: FAIL\n", g4_npz_name(ref, i));
            missing[n_missing++] = g4_npz_name(ref, i);
        }
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
                   .kl = have_kl ? &kl : NULL};
    g4_report_print_kl(&r, stdout);
    const int ok = g4_cmp_report_ok(&rep) && n_missing == 0 && rep.n > 0;
    // The verdict names what broke it: the first failing tensor (non-finite values first).
    const g4_cmp_row *first_bad = NULL;
    for (int i = 0; i < rep.n && !first_bad; i++)
        if (rep.rows[i].s.ref_bad || rep.rows[i].s.nan) first_bad = &rep.rows[i];
    for (int i = 0; i < rep.n && !first_bad; i++)
        if (!rep.rows[i].pass) first_bad = &rep.rows[i];
    if (ok)
        printf("%s: %d tensors compared, all within tolerance\n", ref_path, rep.n);
    else if (first_bad && first_bad->s.ref_bad)
        printf("%s: %d tensors compared, FAILED: the reference's '%s' has %zu NaN/Inf values\n",
               ref_path, rep.n, first_bad->name, first_bad->s.ref_bad);
    else if (first_bad && first_bad->s.nan)
        printf("%s: %d tensors compared, FAILED: our '%s' has %zu NaN/Inf values\n", ref_path,
               rep.n, first_bad->name, first_bad->s.nan);
    else if (first_bad)
        printf("%s: %d tensors compared, FAILED: first '%s' (rel err %.3e > %s %.1e)\n", ref_path,
               rep.n, first_bad->name, first_bad->s.rel, first_bad->tol_name, first_bad->tol);
    else
        printf("%s: %d tensors compared, FAILED\n", ref_path, rep.n);
    if ((rc = write_reports(o, &r))) goto done;
    rc = ok ? G4_OK : 1;
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
static int run_packages(const opts *o, g4_backend *be) {
    const char *ref_dir = o->pos[0], *test_dir = o->pos[1];
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
    printf("compare %s (test) with %s (reference), %s backend: %d tokens\n", test_dir, ref_dir,
           be->name, n);
    g4_report_print(&r, stdout);
    if ((rc = write_reports(o, &r))) goto done;
    if (bad) {
        printf("FAILED: %d tensors with non-finite values (in the test or the reference run) or "
               "differing shapes\n",
               bad);
        rc = 1;
    } else if (o->max_kl >= 0 && !(have_kl && kl.kl_mean <= o->max_kl)) {
        printf("FAILED: logits KL mean %.6e is above --max-kl %g\n", have_kl ? kl.kl_mean : NAN,
               o->max_kl);
        rc = 1;
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
static int run_sensitivity(const opts *o, g4_backend *be) {
    const char *pkg_dir = o->pos[0];
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_sens_row *rows = NULL;
    int32_t *ids = NULL;
    int n = 0, n_rows = 0, n_q4 = 0, rc;
    if ((rc = input_ids(o, pkg_dir, &ids, &n)) || (rc = g4_package_open(pkg_dir, &p)) ||
        (rc = g4_text_model_load(p, be, &m)))
        goto done;
    g4_sens_opts so = {(int)o->top, o->layers,       o->n_layers, o->only,
                       o->n_only,   (int)o->threads, stderr};
    if ((rc = g4_sensitivity_run(m, ids, n, &so, &rows, &n_rows, &n_q4))) goto done;
    g4_report r = {.mode = G4_REPORT_SENSITIVITY,
                   .reference = pkg_dir,
                   .backend = be->name,
                   .ids = ids,
                   .n_ids = n,
                   .n_layers = p->text.n_layers,
                   .sens = rows,
                   .n_sens = n_rows};
    printf("sensitivity of %s (%s backend, %d tokens): each decoder linear k-quantized to 4 bits "
           "alone\n",
           pkg_dir, be->name, n);
    g4_report_print(&r, stdout);
    if (n_q4)
        printf("%d matching linears are already Q4 in the package and were not ranked\n", n_q4);
    rc = write_reports(o, &r);
done:
    free(ids), free(rows);
    g4_text_model_free(m);
    g4_package_close(p);
    return rc;
}

static int cmd_compare(int argc, char **argv) {
    opts o = {.backend = "cpu", .max_kl = -1};
    long long threads = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = threads < 1 ? 1 : threads;
    o.only = g4_calloc((size_t)argc, sizeof(char *));
    int rc = 1;
    // Options that take a string.
    struct {
        const char *name;
        const char **dst;
    } str_opts[] = {{"--backend", &o.backend}, {"--ids", &o.ids_s},
                    {"--prompt", &o.prompt},   {"--tokenizer", &o.tokenizer},
                    {"--md", &o.md},           {"--json", &o.json},
                    {"--svg", &o.svg},         {"--tol-from", &o.tol_from}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        size_t k = 0;
        while (k < sizeof str_opts / sizeof str_opts[0] && strcmp(a, str_opts[k].name)) k++;
        if (k < sizeof str_opts / sizeof str_opts[0]) {
            if (!v) {
                g4_cli_usage_error(cmd, "%s needs a value", a);
                goto done;
            }
            *str_opts[k].dst = argv[++i];
        } else if (!strcmp(a, "--sensitivity")) {
            o.sensitivity = 1;
        } else if (!strcmp(a, "--sensitivity-top")) {
            if (!g4_cli_int(cmd, a, v, 1, 1000000, &o.top)) goto done;
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (!g4_cli_int(cmd, a, v, 1, 1024, &o.threads)) goto done;
            i++;
        } else if (!strcmp(a, "--only") && v) {
            o.only[o.n_only++] = argv[++i];
        } else if (!strcmp(a, "--layers") && v) {
            if (parse_layers(argv[++i], &o)) {
                rc = g4_cli_fail(G4_EUSER);
                goto done;
            }
        } else if (!strcmp(a, "--max-kl") && v) {
            char *end;
            o.max_kl = strtod(argv[++i], &end);
            if (*end || !(o.max_kl >= 0)) {
                g4_cli_usage_error(cmd, "--max-kl expects a number >= 0, got '%s'", v);
                goto done;
            }
        } else if (!strcmp(a, "--only") || !strcmp(a, "--layers") || !strcmp(a, "--max-kl")) {
            g4_cli_usage_error(cmd, "%s needs a value", a);
            goto done;
        } else if (a[0] == '-' && a[1]) {
            g4_cli_usage_error(cmd, "unknown option '%s'", a);
            goto done;
        } else if (o.n_pos < 2) {
            o.pos[o.n_pos++] = a;
        } else {
            g4_cli_usage_error(cmd, "unexpected argument '%s'", a);
            goto done;
        }
    }
    const int sens_opts = o.top || o.n_layers || o.n_only;
    if (o.sensitivity ? o.n_pos != 1 : o.n_pos != 2) {
        g4_cli_usage_error(cmd, o.sensitivity ? "--sensitivity takes one package (PKG_F16)"
                                              : "needs PKG REF.npz or PKG_REF PKG_TEST");
        goto done;
    }
    if (!o.sensitivity && sens_opts) {
        g4_cli_usage_error(cmd, "--sensitivity-top, --layers and --only need --sensitivity");
        goto done;
    }
    const int dump = !o.sensitivity && !g4_is_dir(o.pos[1]);
    if (dump && (o.ids_s || o.prompt || o.max_kl >= 0)) {
        g4_cli_usage_error(cmd, "with an HF dump the input is the dump's input_ids (no --ids, "
                                "--prompt or --max-kl)");
        goto done;
    }
    // The reports' targets are checked before the run, not found unwritable after it.
    const char *outs[3] = {o.md, o.json, o.svg};
    for (int k = 0; k < 3; k++)
        if (outs[k] && (rc = g4_check_output(outs[k]))) {
            rc = g4_cli_fail(rc);
            goto done;
        }
    g4_backend *be;
    if ((rc = g4_backend_by_name(o.backend, &be))) {
        rc = g4_cli_fail(rc);
        goto done;
    }
    rc = o.sensitivity ? run_sensitivity(&o, be) : dump ? run_dump(&o, be) : run_packages(&o, be);
    if (rc < 0) rc = g4_cli_fail(rc);
done:
    free(o.only);
    free(o.layers);
    return rc;
}

const g4_cmd g4_cmd_compare = {
    "compare", cmd_compare,
    "PKG REF.npz | PKG_REF PKG_TEST --ids I,.. | PKG_F16 --sensitivity --ids I,.. "
    "[--prompt T [--tokenizer F]] [--sensitivity-top N] [--layers 0-3,7] [--only GLOB] "
    "[--threads N] [--max-kl X] [--backend cpu|cuda] [--tol-from HF_LOWER.npz] [--md F] [--json F] "
    "[--svg F]   "
    "layer-by-layer reports vs an HF dump, f16 vs Q4 fidelity (KL), per-linear Q4 sensitivity"};
