// report_svg.c: the chart of a compare report (see report.h, svg.h). Tensor reports: one panel
// per component, rel err per layer on a log scale, a line per per-layer tensor kind (q, k, v,
// layer output) and markers for the tensors before the layers (embeddings, per-layer inputs)
// and after them (final norm, logits), each at its own named x position; hf-dump reports draw
// the tolerance as a dashed line. Sensitivity reports: KL per layer, a line per linear kind,
// lm_head as a marker after the layers.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "fidelity/report.h"
#include "fidelity/svg.h"

#define MAX_SERIES 24
#define MAX_PANELS 4
#define SLOT_NAME  64 // a tensor kind, as g4_report_classify writes it (kind[64] below)

typedef struct {
    char label[64];
    g4_svg_style style;
    double *x, *y;
    int n;
} series_buf;

typedef struct {
    char comp[16];
    series_buf s[MAX_SERIES];
    int n_s;
    int n_layers; // largest layer index + 1 seen
    char in_names[4][SLOT_NAME], out_names[4][SLOT_NAME]; // a kind: as long as classify's
    int n_in, n_out;
} panel_buf;

static series_buf *series_get(panel_buf *p, const char *label, g4_svg_style style) {
    for (int i = 0; i < p->n_s; i++)
        if (!strcmp(p->s[i].label, label)) return &p->s[i];
    if (p->n_s == MAX_SERIES) return NULL;
    series_buf *s = &p->s[p->n_s++];
    memset(s, 0, sizeof *s);
    snprintf(s->label, sizeof s->label, "%s", label);
    s->style = style;
    return s;
}

static void series_push(series_buf *s, double x, double y) {
    s->x = g4_realloc(s->x, sizeof(double) * (size_t)(s->n + 1));
    s->y = g4_realloc(s->y, sizeof(double) * (size_t)(s->n + 1));
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

static const char *kind_label(const char *kind) {
    if (!strcmp(kind, "q")) return "q (normed, RoPE)";
    if (!strcmp(kind, "k")) return "k (normed, RoPE)";
    if (!strcmp(kind, "v")) return "v (normed)";
    if (!strcmp(kind, "layer")) return "layer output";
    if (!strcmp(kind, "embeds")) return "embeddings";
    if (!strcmp(kind, "per_layer_inputs")) return "per-layer inputs";
    if (!strcmp(kind, "final_norm")) return "final norm";
    return kind;
}

static const char *short_label(const char *kind) {
    if (!strcmp(kind, "embeds")) return "embeds";
    if (!strcmp(kind, "per_layer_inputs")) return "PLE in";
    if (!strcmp(kind, "final_norm")) return "final norm";
    return kind;
}

static const char *comp_title(const char *comp, int sens) {
    if (sens) return "text decoder: each linear quantized alone";
    if (!strcmp(comp, "text")) return "text decoder";
    if (!strcmp(comp, "vision")) return "vision tower";
    if (!strcmp(comp, "audio")) return "audio tower";
    return comp;
}

static panel_buf *panel_get(panel_buf *pb, int *n, const char *comp) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(pb[i].comp, comp)) return &pb[i];
    if (*n == MAX_PANELS) return NULL;
    panel_buf *p = &pb[(*n)++];
    memset(p, 0, sizeof *p);
    snprintf(p->comp, sizeof p->comp, "%s", comp);
    return p;
}

// Index of name in list (appending it when new and there is room), or -1.
static int slot_of(char list[4][SLOT_NAME], int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(list[i], name)) return i;
    if (*n == 4) return -1;
    snprintf(list[*n], SLOT_NAME, "%s", name);
    return (*n)++;
}

static void collect_tensors(const g4_report *r, panel_buf *pb, int *np) {
    const g4_cmp_report *t = r->tensors;
    // First pass: layers and the in/out slots of each panel.
    for (int i = 0; t && i < t->n; i++) {
        char comp[16], kind[64];
        int layer;
        const int at =
            g4_report_classify(t->rows[i].name, comp, sizeof comp, kind, sizeof kind, &layer);
        panel_buf *p = panel_get(pb, np, comp);
        if (!p) continue;
        if (at == G4_REPORT_AT_LAYER && layer + 1 > p->n_layers) p->n_layers = layer + 1;
        if (at == G4_REPORT_AT_IN) slot_of(p->in_names, &p->n_in, kind);
        if (at == G4_REPORT_AT_OUT) slot_of(p->out_names, &p->n_out, kind);
    }
    for (int i = 0; i < *np; i++)
        if (!strcmp(pb[i].comp, "text") && r->n_layers > pb[i].n_layers)
            pb[i].n_layers = r->n_layers;
    // Second pass: the points. In-slots sit at x = -n_in .. -1, out-slots at L .. L+n_out-1.
    for (int i = 0; t && i < t->n; i++) {
        const g4_cmp_row *x = &t->rows[i];
        char comp[16], kind[64];
        int layer;
        const int at = g4_report_classify(x->name, comp, sizeof comp, kind, sizeof kind, &layer);
        panel_buf *p = panel_get(pb, np, comp);
        if (!p) continue;
        const double y = x->shape_ok ? x->s.rel : NAN;
        series_buf *s = series_get(p, kind_label(kind),
                                   at == G4_REPORT_AT_LAYER ? G4_SVG_LINE : G4_SVG_MARKERS);
        if (!s) continue;
        if (at == G4_REPORT_AT_LAYER) {
            series_push(s, layer, y);
            continue;
        }
        // (a fifth input or output of one component has no slot: left out of the chart)
        const int slot = at == G4_REPORT_AT_IN ? slot_of(p->in_names, &p->n_in, kind)
                                               : slot_of(p->out_names, &p->n_out, kind);
        if (slot >= 0)
            series_push(s, at == G4_REPORT_AT_IN ? slot - p->n_in : p->n_layers + slot, y);
    }
}

static void collect_sens(const g4_report *r, panel_buf *pb, int *np) {
    panel_buf *p = panel_get(pb, np, "text");
    p->n_layers = r->n_layers;
    // A fixed legend order (the order of a layer's linears), whatever the ranking.
    static const char *const kinds[] = {"q_proj",
                                        "k_proj",
                                        "v_proj",
                                        "o_proj",
                                        "gate_proj",
                                        "up_proj",
                                        "down_proj",
                                        "per_layer_input_gate",
                                        "per_layer_projection"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int i = 0; i < r->n_sens; i++)
            if (r->sens[i].evaluated && !strcmp(r->sens[i].kind, kinds[k])) {
                series_get(p, kinds[k], G4_SVG_LINE);
                break;
            }
    // The whole layer quantized (pass 2), drawn when more than one linear kind was ranked.
    series_buf *whole =
        p->n_s > 1 ? series_get(p, "all of the layer together", G4_SVG_LINE_BOLD) : NULL;
    for (int l = 0; whole && l < r->n_layers; l++)
        for (int i = 0; i < r->n_sens; i++)
            if (r->sens[i].layer == l) {
                series_push(whole, l, r->sens[i].layer_kl);
                break;
            }
    // Points in layer order so the lines run left to right.
    for (int l = -1; l < r->n_layers; l++)
        for (int i = 0; i < r->n_sens; i++) {
            const g4_sens_row *s = &r->sens[i];
            if (!s->evaluated || s->layer != l) continue;
            series_buf *sb;
            if (s->layer < 0) {
                const int slot = slot_of(p->out_names, &p->n_out, s->kind);
                sb = series_get(p, s->kind, G4_SVG_MARKERS);
                if (sb && slot >= 0) series_push(sb, r->n_layers + slot, s->kl_mean);
            } else if ((sb = series_get(p, s->kind, G4_SVG_LINE))) {
                series_push(sb, s->layer, s->kl_mean);
            }
        }
}

// The last two components of a path ("mobius-tiny-f16/package"): full paths overflow the title.
static const char *tail2(const char *path) {
    if (!path) return "";
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    int seen = 0;
    for (size_t i = n; i-- > 0;)
        if (path[i] == '/' && ++seen == 2) return path + i + 1;
    return path;
}

char *g4_report_svg(const g4_report *r) {
    panel_buf pb[MAX_PANELS];
    int np = 0;
    const int sens = r->mode == G4_REPORT_SENSITIVITY;
    if (sens)
        collect_sens(r, pb, &np);
    else
        collect_tensors(r, pb, &np);

    g4_svg_panel panels[MAX_PANELS];
    g4_svg_series series[MAX_PANELS][MAX_SERIES];
    double named_x[MAX_PANELS][8];
    const char *named_label[MAX_PANELS][8];
    for (int i = 0; i < np; i++) {
        panel_buf *p = &pb[i];
        g4_svg_panel *sp = &panels[i];
        memset(sp, 0, sizeof *sp);
        sp->title = comp_title(p->comp, sens);
        sp->x_label = "decoder layer";
        if (strcmp(p->comp, "text")) sp->x_label = "layer";
        sp->y_label = sens ? "KL(p_f16 || p_q4), mean over positions (nats)"
                           : "rel err  ||test - ref|| / ||ref||";
        sp->log_y = 1;
        sp->x_min = -p->n_in;
        sp->x_max = p->n_layers + p->n_out - 1;
        for (int k = 0; k < p->n_in; k++) {
            named_x[i][sp->n_named] = k - p->n_in;
            named_label[i][sp->n_named++] = short_label(p->in_names[k]);
        }
        for (int k = 0; k < p->n_out; k++) {
            named_x[i][sp->n_named] = p->n_layers + k;
            named_label[i][sp->n_named++] = short_label(p->out_names[k]);
        }
        sp->named_x = named_x[i];
        sp->named_label = named_label[i];
        for (int k = 0; k < p->n_s; k++)
            series[i][k] =
                (g4_svg_series){p->s[k].label, p->s[k].style, p->s[k].n, p->s[k].x, p->s[k].y};
        sp->series = series[i];
        sp->n_series = p->n_s;
        if (r->mode == G4_REPORT_HF_DUMP && r->has_tolerance && r->tensors && r->tensors->n) {
            sp->hline = r->tensors->rows[0].tol;
            sp->hline_label = "tolerance";
        }
    }

    char subtitle[512];
    int k = 0;
    if (r->mode == G4_REPORT_PACKAGES)
        k = snprintf(subtitle, sizeof subtitle, "test %s vs reference %s", tail2(r->test),
                     tail2(r->reference));
    else if (r->mode == G4_REPORT_HF_DUMP)
        k = snprintf(subtitle, sizeof subtitle, "%s vs HF dump %s", tail2(r->test),
                     tail2(r->reference));
    else
        k = snprintf(subtitle, sizeof subtitle, "%s, 4-bit k-quant block 32", tail2(r->reference));
    if (k < 0 || k >= (int)sizeof subtitle) k = (int)sizeof subtitle - 1;
    k += snprintf(subtitle + k, sizeof subtitle - (size_t)k, "; %s backend; %d tokens", r->backend,
                  r->n_ids);
    if (r->kl && k < (int)sizeof subtitle)
        snprintf(subtitle + k, sizeof subtitle - (size_t)k,
                 "; logits KL mean %.3g, max %.3g nats; top-1 %d/%d", r->kl->kl_mean, r->kl->kl_max,
                 r->kl->top1_agree, r->kl->rows);
    const char *title = sens ? "g4cu compare --sensitivity: logit KL caused by each Q4 linear"
                        : r->mode == G4_REPORT_PACKAGES
                            ? "g4cu compare: rel err per layer, test vs reference package"
                            : "g4cu compare: rel err per layer vs HF reference";
    char *svg = g4_svg_render(title, subtitle, panels, np);
    for (int i = 0; i < np; i++)
        for (int j = 0; j < pb[i].n_s; j++) {
            free(pb[i].s[j].x);
            free(pb[i].s[j].y);
        }
    return svg;
}
