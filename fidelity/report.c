// report.c: see report.h. The table, the classification of hook names and the file writers'
// common part; the formats live in report_md.c, report_json.c and report_svg.c.
#include "fidelity/report.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int g4_report_classify(const char *name, char *component, size_t comp_size, char *kind,
                       size_t kind_size, int *layer) {
    // The towers' names in the reference dumps (tools/python/mm_reference.py) carry a
    // "vision_" / "audio_" prefix: vision_layer_<i>, audio_ffn1_<i>, audio_soft_tokens, ...
    const char *comp = "text";
    if (!strncmp(name, "vision_", 7))
        comp = "vision", name += 7;
    else if (!strncmp(name, "audio_", 6))
        comp = "audio", name += 6;
    else if (!strncmp(name, "pixel_", 6))
        comp = "vision"; // the processors' outputs
    else if (!strncmp(name, "input_features", 14))
        comp = "audio";
    snprintf(component, comp_size, "%s", comp);
    *layer = -1;
    // "<kind>_<digits>" is a per-layer tensor.
    const char *us = strrchr(name, '_');
    if (us && us[1]) {
        const char *d = us + 1;
        while (isdigit((unsigned char)*d)) d++;
        if (*d == 0 && d - (us + 1) < 7) {
            snprintf(kind, kind_size, "%.*s", (int)(us - name), name);
            *layer = atoi(us + 1);
            return G4_REPORT_AT_LAYER;
        }
    }
    snprintf(kind, kind_size, "%s", name);
    static const char *const outs[] = {"final_norm",  "logits",      "logits_argmax", "pooled",
                                       "soft_tokens", "output_proj", "embed_all"};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        if (!strcmp(name, outs[i])) return G4_REPORT_AT_OUT;
    return G4_REPORT_AT_IN;
}

int g4_report_cmp_desc(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(b) - isnan(a);
    return a > b ? -1 : a < b ? 1 : 0;
}

static int sens_cmp(const void *pa, const void *pb) {
    const g4_sens_row *a = pa, *b = pb;
    if (a->evaluated != b->evaluated) return b->evaluated - a->evaluated;
    int r = a->evaluated ? g4_report_cmp_desc(a->kl_mean, b->kl_mean)
                         : g4_report_cmp_desc(a->layer_kl, b->layer_kl);
    if (!r) r = g4_report_cmp_desc(a->out_rel, b->out_rel);
    return r ? r : strcmp(a->name, b->name);
}

void g4_report_sort_sens(g4_sens_row *rows, int n) {
    qsort(rows, (size_t)n, sizeof *rows, sens_cmp);
}

void g4_report_print_kl(const g4_report *r, FILE *f) {
    const g4_kl_stats *k = r->kl;
    if (!k) return;
    fprintf(f,
            "logits KL(p_ref || p_test) over %d positions: mean %.6e, max %.6e (position %d) "
            "nats; top-1 agreement %d/%d (%.3f)",
            k->rows, k->kl_mean, k->kl_max, k->kl_max_row, k->top1_agree, k->rows,
            k->rows ? (double)k->top1_agree / k->rows : 0.0);
    if (k->nonfinite_rows) fprintf(f, "; %d positions with non-finite logits", k->nonfinite_rows);
    fprintf(f, "\n");
}

static void print_sens(const g4_report *r, FILE *f) {
    int n_eval = 0;
    for (int i = 0; i < r->n_sens; i++) n_eval += r->sens[i].evaluated;
    fprintf(f, "%4s  %-48s %5s %11s %11s %11s %7s %11s %11s %11s\n", "rank",
            "linear (one at a time Q4)", "layer", "K x N", "KL mean", "KL max", "top-1", "layer KL",
            "out rel err", "w rel err");
    for (int i = 0; i < r->n_sens; i++) {
        const g4_sens_row *s = &r->sens[i];
        char kn[32];
        snprintf(kn, sizeof kn, "%dx%d", s->K, s->N);
        if (s->evaluated)
            fprintf(f, "%4d  %-48s %5d %11s %11.4e %11.4e %3d/%-3d %11.4e %11.4e %11.4e\n", i + 1,
                    s->name, s->layer, kn, s->kl_mean, s->kl_max, s->top1_agree, r->n_ids,
                    s->layer_kl, s->out_rel, s->w_rel);
        else
            fprintf(f, "%4s  %-48s %5d %11s %11s %11s %7s %11.4e %11.4e %11.4e\n", "-", s->name,
                    s->layer, kn, "not run", "-", "-", s->layer_kl, s->out_rel, s->w_rel);
    }
    fprintf(f,
            "%d of %d linears run with the model; ranked by KL(p_f16 || p_q4) mean (nats); "
            "layer KL: all candidates of the layer quantized together\n",
            n_eval, r->n_sens);
}

void g4_report_print(const g4_report *r, FILE *f) {
    if (r->mode == G4_REPORT_SENSITIVITY) {
        print_sens(r, f);
        return;
    }
    const g4_cmp_report *t = r->tensors;
    fprintf(f, "%-20s %13s %12s %12s %12s  %s\n", "tensor", "shape", "max abs err", "rel err",
            "cosine", "argmax");
    for (int i = 0; t && i < t->n; i++) {
        const g4_cmp_row *x = &t->rows[i];
        if (!x->shape_ok) {
            fprintf(f, "%-20s %13s shapes differ\n", x->name, "-");
            continue;
        }
        char shape[32];
        if (r->shapes)
            snprintf(shape, sizeof shape, "%dx%d", r->shapes[2 * i], r->shapes[2 * i + 1]);
        else
            snprintf(shape, sizeof shape, "%zu", x->s.n);
        fprintf(f, "%-20s %13s %12.4e %12.4e %12.8f", x->name, shape, x->s.max_abs, x->s.rel,
                x->s.cosine);
        if (x->s.argmax_agree_rows >= 0) fprintf(f, "  %d/%d", x->s.argmax_agree_rows, x->s.rows);
        if (x->s.nan) fprintf(f, "  (%zu non-finite)", x->s.nan);
        if (x->s.ref_bad) fprintf(f, "  (%zu non-finite in the reference)", x->s.ref_bad);
        fprintf(f, "\n");
    }
    g4_report_print_kl(r, f);
}

static int write_text(const char *path, char *text) {
    int rc = g4_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

int g4_report_write_md(const g4_report *r, const char *path) {
    return write_text(path, g4_report_md(r));
}

int g4_report_write_json(const g4_report *r, const char *path) {
    char *s = g4_report_json(r);
    if (!s) return g4_fail(G4_EINTERNAL, "%s: cannot format the JSON report", path);
    return write_text(path, s);
}

int g4_report_write_svg(const g4_report *r, const char *path) {
    return write_text(path, g4_report_svg(r));
}
