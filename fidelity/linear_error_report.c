// linear_error_report.c: the tables and charts of a linear-error run (linear_error.h). Ratios
// are against the first test package (the baseline, k-quant in the fidelity run); a kept
// (fp16) linear shows "kept" instead of its e (0 when its weight is the reference's).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "fidelity/linear_error.h"
#include "fidelity/svg.h"

#define MAX_KINDS 16

// The kinds in row order (at most MAX_KINDS; the models have 10).
static int kinds_of(const g4_linerr *r, const char *kinds[MAX_KINDS]) {
    int n = 0;
    for (int i = 0; i < r->n_rows; i++) {
        int k = 0;
        while (k < n && strcmp(kinds[k], r->rows[i].kind)) k++;
        if (k == n && n < MAX_KINDS) kinds[n++] = r->rows[i].kind;
    }
    return n;
}

static int has_lm_head(const g4_linerr *r) {
    for (int i = 0; i < r->n_rows; i++)
        if (r->rows[i].layer < 0) return 1;
    return 0;
}

// A summary cell: "0.812 (50/83 below)"; "-" for the baseline's own ratio.
static void sum_cell(FILE *f, const g4_linerr *r, int p, const char *kind, int layer) {
    g4_linerr_sum s;
    g4_linerr_summary(r, p, kind, layer, &s);
    if (p == 0) {
        fprintf(f, " %.3e |", s.mean_e);
        return;
    }
    if (s.n_geo)
        fprintf(f, " %.3e, x %.3f, %d/%d below", s.mean_e, s.geo_ratio, s.below, s.n);
    else
        fprintf(f, " %.3e, -, %d/%d below", s.mean_e, s.below, s.n);
    fprintf(f, s.kept ? ", %d kept |" : " |", s.kept);
}

// A Markdown table's header: LEAD (the leading cells, "| kind |"), one column a package, the
// separator row SEP (the leading cells' alignment) and "---:|" a package.
static void md_pkg_header(FILE *f, const g4_linerr *r, const char *lead, const char *sep) {
    fprintf(f, "%s", lead);
    for (int p = 0; p < r->n_pkgs; p++) fprintf(f, " %s |", r->names[p]);
    fprintf(f, "\n%s", sep);
    for (int p = 0; p < r->n_pkgs; p++) fprintf(f, "---:|");
    fprintf(f, "\n");
}

static void md_summaries(const g4_linerr *r, FILE *f) {
    fprintf(f, "| package | linears | kept fp16 | mean e | geo mean e / e(%s) | below %s |\n",
            r->names[0], r->names[0]);
    fprintf(f, "|---|---:|---:|---:|---:|---:|\n");
    for (int p = 0; p < r->n_pkgs; p++) {
        g4_linerr_sum s;
        g4_linerr_summary(r, p, NULL, G4_LINERR_ANY, &s);
        fprintf(f, "| %s | %d | %d | %.4e | ", r->names[p], s.n, s.kept, s.mean_e);
        s.n_geo ? fprintf(f, "%.4f", s.geo_ratio) : fprintf(f, "-");
        fprintf(f, " | %d |\n", s.below);
    }
    const char *kinds[MAX_KINDS];
    const int nk = kinds_of(r, kinds);
    fprintf(f,
            "\nBy kind (cells: mean e, geometric mean of e / e(%s) over the linears quantized in "
            "both, linears with e below %s's):\n\n",
            r->names[0], r->names[0]);
    md_pkg_header(f, r, "| kind |", "|---|");
    for (int k = 0; k < nk; k++) {
        fprintf(f, "| %s |", kinds[k]);
        for (int p = 0; p < r->n_pkgs; p++) sum_cell(f, r, p, kinds[k], G4_LINERR_ANY);
        fprintf(f, "\n");
    }
    fprintf(f, "\nBy layer (lm_head is layer -1):\n\n");
    md_pkg_header(f, r, "| layer |", "|---:|");
    for (int l = 0; l < r->n_layers + has_lm_head(r); l++) {
        const int layer = l < r->n_layers ? l : -1;
        fprintf(f, "| %d |", layer);
        for (int p = 0; p < r->n_pkgs; p++) sum_cell(f, r, p, NULL, layer);
        fprintf(f, "\n");
    }
}

char *g4_linerr_md(const g4_linerr *r) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    G4_ASSERT(f);
    fprintf(f, "# Layer-output error of each decoder linear\n\n");
    fprintf(f,
            "Reference `%s`, %d calibration tokens; e = tr(dW^T H dW) / tr(W^T H W), "
            "H = X^T X of the reference's inputs to the linear (the loss gptq and fit "
            "minimise); ratios against `%s`.\n\n",
            r->reference, r->n_ids, r->pkgs[0]);
    for (int p = 0; p < r->n_pkgs; p++) fprintf(f, "- %s: `%s`\n", r->names[p], r->pkgs[p]);
    fprintf(f, "\n");
    md_summaries(r, f);
    fprintf(f, "\nEvery linear (e; e / e(%s) in parentheses):\n\n", r->names[0]);
    md_pkg_header(f, r, "| linear | kind | layer | K | N |", "|---|---|---:|---:|---:|");
    for (int i = 0; i < r->n_rows; i++) {
        const g4_linerr_row *x = &r->rows[i];
        fprintf(f, "| %s | %s | %d | %d | %d |", x->name, x->kind, x->layer, x->K, x->N);
        for (int p = 0; p < r->n_pkgs; p++) {
            if (x->kept[p])
                fprintf(f, " kept (%.3g) |", x->e[p]);
            else if (p == 0 || !(x->e[0] > 0))
                fprintf(f, " %.3e |", x->e[p]);
            else
                fprintf(f, " %.3e (%.3f) |", x->e[p], x->e[p] / x->e[0]);
        }
        fprintf(f, "\n");
    }
    fclose(f);
    return buf;
}

char *g4_linerr_tsv(const g4_linerr *r) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    G4_ASSERT(f);
    fprintf(f, "name\tkind\tlayer\tK\tN");
    for (int p = 0; p < r->n_pkgs; p++) fprintf(f, "\te_%s", r->names[p]);
    for (int p = 1; p < r->n_pkgs; p++) fprintf(f, "\tratio_%s", r->names[p]);
    fprintf(f, "\n");
    for (int i = 0; i < r->n_rows; i++) {
        const g4_linerr_row *x = &r->rows[i];
        fprintf(f, "%s\t%s\t%d\t%d\t%d", x->name, x->kind, x->layer, x->K, x->N);
        for (int p = 0; p < r->n_pkgs; p++)
            x->kept[p] && x->e[p] == 0 ? fprintf(f, "\tkept") : fprintf(f, "\t%.6e", x->e[p]);
        for (int p = 1; p < r->n_pkgs; p++)
            x->e[0] > 0 ? fprintf(f, "\t%.6f", x->e[p] / x->e[0]) : fprintf(f, "\t-");
        fprintf(f, "\n");
    }
    fclose(f);
    return buf;
}

static cJSON *num(double x) {
    return isfinite(x) ? cJSON_CreateNumber(x) : cJSON_CreateNull();
}

static cJSON *sum_json(const g4_linerr *r, int p, const char *kind, int layer) {
    g4_linerr_sum s;
    g4_linerr_summary(r, p, kind, layer, &s);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "linears", s.n);
    cJSON_AddNumberToObject(o, "kept", s.kept);
    cJSON_AddItemToObject(o, "mean_e", num(s.mean_e));
    cJSON_AddItemToObject(o, "geo_ratio", num(s.geo_ratio));
    cJSON_AddNumberToObject(o, "n_geo", s.n_geo);
    cJSON_AddNumberToObject(o, "below", s.below);
    return o;
}

// {"format": "g4cu-linear-error", "version": 1, "reference", "calib_tokens", "n_layers",
//  "seconds", "packages": [{"name", "path", "all": SUM, "by_kind": {kind: SUM}, "by_layer":
//  {"0": SUM, ..., "-1": SUM}}], "linears": [{"name", "kind", "layer", "K", "N", "ref",
//  "e": [..], "kept": [..]}]}, SUM = {"linears", "kept", "mean_e", "geo_ratio", "n_geo",
//  "below"}; NaN / Inf as null.
char *g4_linerr_json(const g4_linerr *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "g4cu-linear-error");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "reference", r->reference);
    cJSON_AddNumberToObject(root, "calib_tokens", r->n_ids);
    cJSON_AddNumberToObject(root, "n_layers", r->n_layers);
    cJSON_AddNumberToObject(root, "seconds", r->seconds);
    const char *kinds[MAX_KINDS];
    const int nk = kinds_of(r, kinds);
    cJSON *pa = cJSON_AddArrayToObject(root, "packages");
    for (int p = 0; p < r->n_pkgs; p++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", r->names[p]);
        cJSON_AddStringToObject(o, "path", r->pkgs[p]);
        cJSON_AddItemToObject(o, "all", sum_json(r, p, NULL, G4_LINERR_ANY));
        cJSON *bk = cJSON_AddObjectToObject(o, "by_kind");
        for (int k = 0; k < nk; k++)
            cJSON_AddItemToObject(bk, kinds[k], sum_json(r, p, kinds[k], G4_LINERR_ANY));
        cJSON *bl = cJSON_AddObjectToObject(o, "by_layer");
        for (int l = 0; l < r->n_layers + has_lm_head(r); l++) {
            char key[16];
            snprintf(key, sizeof key, "%d", l < r->n_layers ? l : -1);
            cJSON_AddItemToObject(bl, key, sum_json(r, p, NULL, l < r->n_layers ? l : -1));
        }
        cJSON_AddItemToArray(pa, o);
    }
    cJSON *la = cJSON_AddArrayToObject(root, "linears");
    for (int i = 0; i < r->n_rows; i++) {
        const g4_linerr_row *x = &r->rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", x->name);
        cJSON_AddStringToObject(o, "kind", x->kind);
        cJSON_AddNumberToObject(o, "layer", x->layer);
        cJSON_AddNumberToObject(o, "K", x->K);
        cJSON_AddNumberToObject(o, "N", x->N);
        cJSON_AddItemToObject(o, "ref", num(x->ref));
        cJSON *e = cJSON_AddArrayToObject(o, "e"), *k = cJSON_AddArrayToObject(o, "kept");
        for (int p = 0; p < r->n_pkgs; p++) {
            cJSON_AddItemToArray(e, num(x->e[p]));
            cJSON_AddItemToArray(k, cJSON_CreateBool(x->kept[p]));
        }
        cJSON_AddItemToArray(la, o);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return NULL;
    char *out = g4_sprintf("%s\n", text); // (cJSON's malloc; ours is freed with free())
    cJSON_free(text);
    return out;
}

void g4_linerr_print(const g4_linerr *r, FILE *f) {
    fprintf(f,
            "linear error: %d decoder linears of %s, %d calibration tokens (%.1f s): e = "
            "tr(dW^T H dW) / tr(W^T H W), ratios against %s\n",
            r->n_rows, r->reference, r->n_ids, r->seconds, r->names[0]);
    fprintf(f, "%-24s %8s %6s %12s %12s %8s\n", "package", "linears", "kept", "mean e", "geo e/e0",
            "below");
    for (int p = 0; p < r->n_pkgs; p++) {
        g4_linerr_sum s;
        g4_linerr_summary(r, p, NULL, G4_LINERR_ANY, &s);
        fprintf(f, "%-24s %8d %6d %12.4e ", r->names[p], s.n, s.kept, s.mean_e);
        s.n_geo ? fprintf(f, "%12.4f", s.geo_ratio) : fprintf(f, "%12s", "-");
        fprintf(f, " %8d\n", s.below);
    }
    const char *kinds[MAX_KINDS];
    const int nk = kinds_of(r, kinds);
    fprintf(f, "geometric mean of e / e(%s) by kind:\n%-22s", r->names[0], "kind");
    for (int p = 1; p < r->n_pkgs; p++) fprintf(f, " %14.14s", r->names[p]);
    fprintf(f, "\n");
    for (int k = 0; k < nk; k++) {
        fprintf(f, "%-22s", kinds[k]);
        for (int p = 1; p < r->n_pkgs; p++) {
            g4_linerr_sum s;
            g4_linerr_summary(r, p, kinds[k], G4_LINERR_ANY, &s);
            s.n_geo ? fprintf(f, " %14.4f", s.geo_ratio) : fprintf(f, " %14s", "-");
        }
        fprintf(f, "\n");
    }
}

// One panel: y = e per layer of each package (lm_head at x = L + 1, apart from the line).
// kind NULL: the mean e over each layer's linears.
static void panel_series(const g4_linerr *r, const char *kind, g4_svg_series *s, double *xs,
                         double *ys) {
    const int L = r->n_layers, nx = L + 1;
    for (int p = 0; p < r->n_pkgs; p++) {
        int n = 0;
        for (int t = 0; t <= L; t++) { // the layers, then lm_head (-1)
            const int l = t < L ? t : -1;
            g4_linerr_sum sum;
            g4_linerr_summary(r, p, kind, l, &sum);
            if (!sum.n) continue;
            xs[p * nx + n] = l < 0 ? L + 1 : l;
            ys[p * nx + n] = sum.mean_e;
            n++;
        }
        s[p] = (g4_svg_series){r->names[p], n == 1 ? G4_SVG_MARKERS : G4_SVG_LINE, n, xs + p * nx,
                               ys + p * nx};
    }
}

char *g4_linerr_svg(const g4_linerr *r, int by_kind) {
    const char *kinds[MAX_KINDS];
    const int nk = kinds_of(r, kinds), np = by_kind ? nk : 1, nx = r->n_layers + 1;
    g4_svg_panel *panels = g4_calloc((size_t)np, sizeof(g4_svg_panel));
    g4_svg_series *series = g4_calloc((size_t)np * r->n_pkgs, sizeof(g4_svg_series));
    double *xs = g4_malloc(sizeof(double) * (size_t)np * r->n_pkgs * nx),
           *ys = g4_malloc(sizeof(double) * (size_t)np * r->n_pkgs * nx);
    char **titles = g4_calloc((size_t)np, sizeof(char *));
    static const char *lm_label[] = {"lm_head"};
    const double lm_x[] = {r->n_layers + 1};
    for (int i = 0; i < np; i++) {
        const char *kind = by_kind ? kinds[i] : NULL;
        panel_series(r, kind, series + (size_t)i * r->n_pkgs, xs + (size_t)i * r->n_pkgs * nx,
                     ys + (size_t)i * r->n_pkgs * nx);
        titles[i] = by_kind ? g4_sprintf("%s: e in each layer", kind)
                            : g4_strdup("text decoder: mean e of each layer's linears");
        panels[i] = (g4_svg_panel){.title = titles[i],
                                   .x_label = "decoder layer",
                                   .y_label = by_kind ? "e" : "mean e",
                                   .log_y = 1,
                                   .x_min = 0,
                                   .x_max = r->n_layers + 1,
                                   .n_named = has_lm_head(r),
                                   .named_x = lm_x,
                                   .named_label = lm_label,
                                   .n_series = r->n_pkgs,
                                   .series = series + (size_t)i * r->n_pkgs};
    }
    char *sub = g4_sprintf("e = tr(dW^T H dW) / tr(W^T H W), H = X^T X on %d calibration tokens "
                           "of %s",
                           r->n_ids, r->reference);
    char *svg = g4_svg_render(by_kind ? "g4cu compare --linear-error: e per layer, by kind"
                                      : "g4cu compare --linear-error: mean e per layer",
                              sub, panels, np);
    for (int i = 0; i < np; i++) free(titles[i]);
    free(titles), free(sub), free(panels), free(series), free(xs), free(ys);
    return svg;
}
