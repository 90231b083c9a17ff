// report_md.c: the Markdown form of a compare report (see report.h): a header naming the
// inputs, the logits' KL summary, the per-tensor (or per-linear) table and KL per position.
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "fidelity/report.h"

static const char *mode_title(g4_report_mode m) {
    switch (m) {
    case G4_REPORT_HF_DUMP:
        return "engine run vs HF reference dump";
    case G4_REPORT_PACKAGES:
        return "test package vs reference package";
    case G4_REPORT_SENSITIVITY:
        return "quantization sensitivity, one decoder linear at a time";
    }
    return "?";
}

static void header(const g4_report *r, FILE *f) {
    fprintf(f, "# g4cu compare: %s\n\n", mode_title(r->mode));
    switch (r->mode) {
    case G4_REPORT_HF_DUMP:
        fprintf(f, "- package: `%s`\n- reference dump: `%s`\n", r->test, r->reference);
        break;
    case G4_REPORT_PACKAGES:
        fprintf(f, "- reference package: `%s`\n- test package: `%s`\n", r->reference, r->test);
        break;
    case G4_REPORT_SENSITIVITY:
        fprintf(f,
                "- package: `%s` (each linear k-quantized to 4 bits, block 32, alone; all "
                "else as loaded)\n",
                r->reference);
        break;
    }
    fprintf(f, "- backend: %s\n- input: %d token ids: ", r->backend, r->n_ids);
    const int show = r->n_ids < 64 ? r->n_ids : 64;
    for (int i = 0; i < show; i++) fprintf(f, "%s%d", i ? "," : "", r->ids[i]);
    if (show < r->n_ids) fprintf(f, ", ... (%d more)", r->n_ids - show);
    fprintf(f, "\n\n");
}

static void kl_section(const g4_report *r, FILE *f) {
    const g4_kl_stats *k = r->kl;
    if (!k) return;
    fprintf(f, "## Logits\n\nKL(p_ref || p_test) of the soft-capped logits, per position, in "
               "nats (double, log-sum-exp).\n\n");
    fprintf(f, "| positions | KL mean | KL max | at position | top-1 agreement |\n");
    fprintf(f, "|---:|---:|---:|---:|---:|\n");
    fprintf(f, "| %d | %.4e | %.4e | %d | %d/%d (%.3f) |\n\n", k->rows, k->kl_mean, k->kl_max,
            k->kl_max_row, k->top1_agree, k->rows, k->rows ? (double)k->top1_agree / k->rows : 0.0);
    if (k->nonfinite_rows)
        fprintf(f, "**%d positions have non-finite logits.**\n\n", k->nonfinite_rows);
}

static void tensor_section(const g4_report *r, FILE *f) {
    const g4_cmp_report *t = r->tensors;
    if (!t) return;
    fprintf(f, "## Per tensor\n\nrel err = ||test - ref|| / ||ref||, cosine = <test, ref> / "
               "(||test|| ||ref||), over the whole tensor [tokens, width].\n\n");
    fprintf(f, "| tensor | shape | max abs err | rel err | cosine |%s\n",
            r->has_tolerance ? " tolerance | verdict |" : "");
    fprintf(f, "|---|---|---:|---:|---:|%s\n", r->has_tolerance ? "---|---|" : "");
    for (int i = 0; i < t->n; i++) {
        const g4_cmp_row *x = &t->rows[i];
        char shape[32] = "?";
        if (r->shapes)
            snprintf(shape, sizeof shape, "%d x %d", r->shapes[2 * i], r->shapes[2 * i + 1]);
        if (!x->shape_ok) {
            fprintf(f, "| `%s` | %s | - | - | - |%s\n", x->name, shape,
                    r->has_tolerance ? " - | FAIL (shape) |" : "");
            continue;
        }
        fprintf(f, "| `%s` | %s | %.4e | %.4e | %.8f |", x->name, shape, x->s.max_abs, x->s.rel,
                x->s.cosine);
        if (r->has_tolerance)
            fprintf(f, " %s %.1e | %s |", x->tol_name, x->tol, x->pass ? "ok" : "**FAIL**");
        fprintf(f, "\n");
    }
    for (int i = 0; i < r->n_missing; i++)
        fprintf(f, "| `%s` | - | - | - | - | - | **FAIL** (not produced) |\n", r->missing[i]);
    fprintf(f, "\n");
}

// With media: each tensor's rows of each span kind (text, image, audio).
static void span_section(const g4_report *r, FILE *f) {
    const g4_cmp_report *t = r->tensors;
    int any = 0;
    for (int i = 0; t && i < t->n; i++) any |= t->rows[i].has_spans;
    if (!any || !r->span) return;
    char sum[600];
    g4_span_summary(r->span, r->n_ids, sum, sizeof sum);
    fprintf(f,
            "## Per span\n\nThe prompt's %d positions: %s. Image and audio rows are the "
            "soft-token rows (the placeholder positions); the markers around them count as "
            "text (their rows come from the embedding table, as any text token's). Where the "
            "dump holds a subset of a tensor's rows, those are compared (rows). Information "
            "only: the verdict is the whole tensor's.\n\n",
            r->n_ids, sum);
    fprintf(f, "| tensor |");
    for (int k = 0; k < G4_SPAN_KINDS; k++)
        fprintf(f, " %s rows | %s rel err | %s cosine |", g4_span_names[k], g4_span_names[k],
                g4_span_names[k]);
    fprintf(f, "\n|---|");
    for (int k = 0; k < G4_SPAN_KINDS; k++) fprintf(f, "---:|---:|---:|");
    fprintf(f, "\n");
    for (int i = 0; i < t->n; i++) {
        const g4_cmp_row *x = &t->rows[i];
        if (!x->has_spans) continue;
        fprintf(f, "| `%s` |", x->name);
        for (int k = 0; k < G4_SPAN_KINDS; k++) {
            if (x->span[k].rows)
                fprintf(f, " %d | %.4e | %.8f |", x->span[k].rows, x->span[k].rel,
                        x->span[k].cosine);
            else
                fprintf(f, " 0 | - | - |");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
}

static void per_position(const g4_report *r, FILE *f) {
    const g4_kl_stats *k = r->kl;
    if (!k || !k->rows) return;
    fprintf(f, "## KL per position\n\n| position | token id | KL | top-1 ref | top-1 test |\n");
    fprintf(f, "|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < k->rows; i++)
        fprintf(f, "| %d | %d | %.4e | %d | %d%s |\n", i, i < r->n_ids ? r->ids[i] : -1, k->kl[i],
                k->top1_ref[i], k->top1_test[i],
                k->top1_ref[i] == k->top1_test[i] ? "" : " (differs)");
    fprintf(f, "\n");
}

static void sens_section(const g4_report *r, FILE *f) {
    fprintf(f, "## Linears ranked by the logit KL each one causes alone\n\n");
    fprintf(f, "KL = mean over positions of KL(p_f16 || p_one_q4) in nats; layer KL = the same "
               "with every ranked linear of the layer quantized together (lm_head: alone); out rel "
               "err = ||x Wq - x W|| / ||x W|| of the linear's own output on its f16-run input; "
               "w rel err = ||Wq - W|| / ||W||.\n\n");
    fprintf(f,
            "| rank | linear | layer | K x N | KL mean | KL max | top-1 | layer KL | out rel err | "
            "w rel err |\n|---:|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
    int n_eval = 0;
    for (int i = 0; i < r->n_sens; i++) {
        const g4_sens_row *s = &r->sens[i];
        if (s->evaluated) {
            n_eval++;
            fprintf(f, "| %d | `%s` | %d | %d x %d | %.4e | %.4e | %d/%d | %.4e | %.4e | %.4e |\n",
                    i + 1, s->name, s->layer, s->K, s->N, s->kl_mean, s->kl_max, s->top1_agree,
                    r->n_ids, s->layer_kl, s->out_rel, s->w_rel);
        } else {
            fprintf(f, "| - | `%s` | %d | %d x %d | not run | - | - | %.4e | %.4e | %.4e |\n",
                    s->name, s->layer, s->K, s->N, s->layer_kl, s->out_rel, s->w_rel);
        }
    }
    fprintf(f, "\n%d of %d linears were run with the model", n_eval, r->n_sens);
    if (n_eval < r->n_sens)
        fprintf(f, " (the others fell below the cut of --sensitivity-top, which takes the layers "
                   "by layer KL, and within a layer the linears by out rel err)");
    fprintf(f, ".\n\n");
    const int top = n_eval < 5 ? n_eval : 5;
    if (top > 0) {
        fprintf(f, "Keeping the %d most sensitive in fp16: `g4cu quantize PKG OUT", top);
        for (int i = 0; i < top; i++) fprintf(f, " --keep '%s'", r->sens[i].name);
        fprintf(f, "`\n");
    }
}

char *g4_report_md(const g4_report *r) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    G4_ASSERT(f);
    header(r, f);
    if (r->mode == G4_REPORT_SENSITIVITY) {
        sens_section(r, f);
    } else {
        kl_section(r, f);
        tensor_section(r, f);
        span_section(r, f);
        per_position(r, f);
    }
    fclose(f);
    return buf;
}
