// svg.c: see svg.h. Layout (pixels): the document is W wide; a header of HEAD px holds the
// title and subtitle; each panel is PANEL_H tall: its title, the plot box, x tick labels and
// the x axis title below it, and a legend column right of the plot.
#include "fidelity/svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

enum {
    W = 980,
    HEAD = 60,
    PANEL_H = 430,
    PLOT_L = 96,           // left edge of the plot box (room for y tick labels and title)
    PLOT_R = W - 230,      // right edge (the legend sits right of it)
    PLOT_T = 44,           // plot top, from the panel top (room for the panel title)
    PLOT_B = PANEL_H - 78, // plot bottom, from the panel top
};

// Tableau 10: distinguishable, and still distinct for the common colour-vision deficiencies.
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_PALETTE ((int)(sizeof palette / sizeof palette[0]))
static const char *const font = "DejaVu Sans, Arial, Helvetica, sans-serif";

static void esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&apos;", f);
            break;
        default:
            // Control characters are not allowed in XML 1.0 text: show them as '?'.
            fputc((unsigned char)*s < 0x20 && *s != '\t' && *s != '\n' ? '?' : *s, f);
        }
    }
}

static void text(FILE *f, double x, double y, const char *anchor, int size, const char *extra,
                 const char *s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"%s%s>", x, y, anchor,
            size, extra ? " " : "", extra ? extra : "");
    esc(f, s);
    fputs("</text>\n", f);
}

// A marker of shape k (0 circle, 1 square, 2 diamond, 3 triangle up, 4 triangle down, 5 cross)
// centred at (x, y).
static void marker(FILE *f, int k, double x, double y, double r, const char *color) {
    switch (k % 6) {
    case 0:
        fprintf(f,
                "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\" fill=\"%s\" stroke=\"#000\" "
                "stroke-width=\"0.6\"/>\n",
                x, y, r, color);
        break;
    case 1:
        fprintf(f,
                "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\" "
                "stroke=\"#000\" stroke-width=\"0.6\"/>\n",
                x - r, y - r, 2 * r, 2 * r, color);
        break;
    case 2:
        fprintf(f,
                "<polygon points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f %.2f,%.2f\" fill=\"%s\" "
                "stroke=\"#000\" stroke-width=\"0.6\"/>\n",
                x, y - 1.3 * r, x + 1.3 * r, y, x, y + 1.3 * r, x - 1.3 * r, y, color);
        break;
    case 3:
    case 4: {
        const double s = k % 6 == 3 ? 1 : -1;
        fprintf(f,
                "<polygon points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f\" fill=\"%s\" stroke=\"#000\" "
                "stroke-width=\"0.6\"/>\n",
                x, y - s * 1.3 * r, x + 1.2 * r, y + s * r, x - 1.2 * r, y + s * r, color);
        break;
    }
    default:
        fprintf(f,
                "<path d=\"M%.2f,%.2f L%.2f,%.2f M%.2f,%.2f L%.2f,%.2f\" stroke=\"%s\" "
                "stroke-width=\"2.2\"/>\n",
                x - r, y - r, x + r, y + r, x - r, y + r, x + r, y - r, color);
    }
}

static int drawable(double y, int log_y) {
    return isfinite(y) && (!log_y || y > 0);
}

// "1e-3" style decade labels, plain numbers near 1.
static void decade_label(int k, char *buf, size_t n) {
    if (k >= -4 && k <= 4)
        snprintf(buf, n, "%g", pow(10, k));
    else
        snprintf(buf, n, "1e%d", k);
}

// A 1-2-5 step giving about `want` intervals over [lo, hi].
static double nice_step(double lo, double hi, int want) {
    double raw = (hi - lo) / want, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

typedef struct {
    double top, bottom, left, right;
    double x_min, x_max, y_lo, y_hi; // y_lo/y_hi: log10 values when log_y
    int log_y;
} frame;

static double px(const frame *fr, double x) {
    return fr->left + (x - fr->x_min + 0.5) / (fr->x_max - fr->x_min + 1) * (fr->right - fr->left);
}
static double py(const frame *fr, double y) {
    const double v = fr->log_y ? log10(y) : y;
    return fr->bottom - (v - fr->y_lo) / (fr->y_hi - fr->y_lo) * (fr->bottom - fr->top);
}

static void panel(FILE *f, const g4_svg_panel *p, double y0) {
    frame fr = {y0 + PLOT_T, y0 + PLOT_B, PLOT_L, PLOT_R, p->x_min, p->x_max, 0, 1, p->log_y};
    if (fr.x_max < fr.x_min) fr.x_max = fr.x_min;
    // y range over every drawable value
    double lo = INFINITY, hi = -INFINITY;
    int skipped = 0, drawn = 0;
    int *n_skip = g4_calloc((size_t)p->n_series + 1, sizeof(int)); // per series, for the note
    for (int s = 0; s < p->n_series; s++)
        for (int i = 0; i < p->series[s].n; i++) {
            const double y = p->series[s].y[i];
            if (!drawable(y, p->log_y)) {
                n_skip[s]++;
                skipped++;
                continue;
            }
            drawn++;
            if (y < lo) lo = y;
            if (y > hi) hi = y;
        }
    if (p->hline > 0 && isfinite(p->hline)) { // the reference line is always in view
        if (p->hline < lo) lo = p->hline;
        if (p->hline > hi) hi = p->hline;
        drawn++;
    }
    if (p->log_y) {
        if (drawn) {
            // a little room, so a value on a decade (a tolerance line) is not on the frame
            fr.y_lo = floor(log10(lo) - 0.05);
            fr.y_hi = ceil(log10(hi) + 0.05);
            if (fr.y_hi <= fr.y_lo) fr.y_hi = fr.y_lo + 1;
        } else {
            fr.y_lo = -8, fr.y_hi = 0;
        }
    } else {
        if (!drawn) lo = 0, hi = 1;
        if (lo > 0) lo = 0;
        if (hi <= lo) hi = lo + 1;
        const double st = nice_step(lo, hi, 6);
        fr.y_lo = floor(lo / st) * st;
        fr.y_hi = ceil(hi / st) * st;
    }

    text(f, (fr.left + fr.right) / 2, y0 + 26, "middle", 15, "font-weight=\"bold\"", p->title);
    fprintf(f,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fafafa\" "
            "stroke=\"#000\" stroke-width=\"1\"/>\n",
            fr.left, fr.top, fr.right - fr.left, fr.bottom - fr.top);

    // y grid, ticks and labels
    char buf[64];
    if (p->log_y) {
        const int decades = (int)(fr.y_hi - fr.y_lo);
        const int every = decades > 12 ? (decades + 11) / 12 : 1;
        for (int k = (int)fr.y_lo; k <= (int)fr.y_hi; k++) {
            const double y = py(&fr, pow(10, k));
            fprintf(f,
                    "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#d0d0d0\" "
                    "stroke-width=\"0.8\"/>\n",
                    fr.left, y, fr.right, y);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#000\"/>\n",
                    fr.left - 6, y, fr.left, y);
            if ((k - (int)fr.y_lo) % every == 0) {
                decade_label(k, buf, sizeof buf);
                text(f, fr.left - 9, y + 4, "end", 12, NULL, buf);
            }
            if (decades <= 8 && k < (int)fr.y_hi) // minor ticks at 2..9 x 10^k
                for (int m = 2; m <= 9; m++) {
                    const double ym = py(&fr, m * pow(10, k));
                    fprintf(f,
                            "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" "
                            "stroke=\"#000\" stroke-width=\"0.6\"/>\n",
                            fr.left - 3, ym, fr.left, ym);
                }
        }
    } else {
        const double st = nice_step(fr.y_lo, fr.y_hi, 6);
        for (double v = fr.y_lo; v <= fr.y_hi + st * 1e-9; v += st) {
            const double y = py(&fr, v);
            fprintf(f,
                    "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#d0d0d0\" "
                    "stroke-width=\"0.8\"/>\n<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" "
                    "y2=\"%.2f\" stroke=\"#000\"/>\n",
                    fr.left, y, fr.right, y, fr.left - 6, y, fr.left, y);
            snprintf(buf, sizeof buf, "%g", fabs(v) < st * 1e-9 ? 0.0 : v);
            text(f, fr.left - 9, y + 4, "end", 12, NULL, buf);
        }
    }

    // x ticks: every integer; numbers every `every`, named positions always
    const int nx = (int)(fr.x_max - fr.x_min) + 1;
    const int every = nx <= 24 ? 1 : nx <= 48 ? 2 : 5;
    const double slot = (fr.right - fr.left) / nx;
    // Names wider than their slot (about 0.6 em per character at 12 px) are slanted, all of a
    // panel's alike; upright (vertical) when the slots are very narrow.
    int crowded = slot < 56;
    for (int k = 0; k < p->n_named; k++)
        if (strlen(p->named_label[k]) * 7.2 > slot - 4) crowded = 1;
    for (int i = 0; i < nx; i++) {
        const double xv = fr.x_min + i, x = px(&fr, xv);
        const char *name = NULL;
        for (int k = 0; k < p->n_named; k++)
            if (p->named_x[k] == xv) name = p->named_label[k];
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x,
                fr.bottom, x, fr.bottom + (name || (int)xv % every == 0 ? 6 : 3));
        if (name && crowded) {
            char tr[128];
            const int deg = slot < 36 ? 90 : 35;
            const double ty = fr.bottom + (deg == 90 ? 10 : 16);
            snprintf(tr, sizeof tr, "font-style=\"italic\" transform=\"rotate(-%d %.1f %.1f)\"",
                     deg, x + 4, ty);
            text(f, x + 4, ty, "end", 11, tr, name);
        } else if (name) {
            text(f, x, fr.bottom + 20, "middle", 12, "font-style=\"italic\"", name);
        } else if ((int)xv % every == 0) {
            snprintf(buf, sizeof buf, "%d", (int)xv);
            text(f, x, fr.bottom + 20, "middle", 12, NULL, buf);
        }
    }
    text(f, (fr.left + fr.right) / 2, fr.bottom + 42, "middle", 13, NULL, p->x_label);
    {
        char tr[96];
        const double cy = (fr.top + fr.bottom) / 2;
        snprintf(tr, sizeof tr, "transform=\"rotate(-90 %.1f %.1f)\"", fr.left - 62, cy);
        text(f, fr.left - 62, cy, "middle", 13, tr, p->y_label);
    }

    if (p->hline > 0 && isfinite(p->hline))
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#c00\" "
                "stroke-width=\"1.2\" stroke-dasharray=\"6 4\"/>\n",
                fr.left, py(&fr, p->hline), fr.right, py(&fr, p->hline));

    // series, clipped to the plot box
    fprintf(f, "<g clip-path=\"url(#clip%d)\">\n", (int)(y0 + 0.5));
    int n_markers = 0;
    for (int s = 0; s < p->n_series; s++) {
        const g4_svg_series *se = &p->series[s];
        const int bold = se->style == G4_SVG_LINE_BOLD;
        const char *color = bold ? "#000" : palette[s % N_PALETTE];
        if (se->style == G4_SVG_LINE || bold) {
            int open = 0;
            double prev_x = 0;
            for (int i = 0; i < se->n; i++) {
                const int gap = open && (!drawable(se->y[i], p->log_y) || se->x[i] - prev_x > 1);
                if (gap) { // end the polyline: a missing value or a layer without this tensor
                    fputs("\"/>\n", f);
                    open = 0;
                }
                if (!drawable(se->y[i], p->log_y)) continue;
                if (!open) {
                    fprintf(f,
                            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" "
                            "points=\"",
                            color, bold ? "2.8" : "1.8");
                    open = 1;
                }
                fprintf(f, "%.2f,%.2f ", px(&fr, se->x[i]), py(&fr, se->y[i]));
                prev_x = se->x[i];
            }
            if (open) fputs("\"/>\n", f);
            for (int i = 0; i < se->n; i++)
                if (drawable(se->y[i], p->log_y))
                    marker(f, 0, px(&fr, se->x[i]), py(&fr, se->y[i]), bold ? 3.2 : 2.6, color);
        } else {
            for (int i = 0; i < se->n; i++)
                if (drawable(se->y[i], p->log_y))
                    marker(f, 1 + n_markers, px(&fr, se->x[i]), py(&fr, se->y[i]), 5, color);
            n_markers++;
        }
    }
    fputs("</g>\n", f);
    if (!drawn)
        text(f, (fr.left + fr.right) / 2, (fr.top + fr.bottom) / 2, "middle", 14, NULL,
             p->log_y ? "no value above 0 to draw on a log scale" : "no values");

    // legend
    double ly = fr.top + 8;
    const double lx = fr.right + 18;
    n_markers = 0;
    for (int s = 0; s < p->n_series; s++, ly += 21) {
        const g4_svg_series *se = &p->series[s];
        const int bold = se->style == G4_SVG_LINE_BOLD;
        const char *color = bold ? "#000" : palette[s % N_PALETTE];
        if (se->style == G4_SVG_LINE || bold) {
            fprintf(f,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                    "stroke-width=\"%s\"/>\n",
                    lx, ly, lx + 26, ly, color, bold ? "2.8" : "1.8");
            marker(f, 0, lx + 13, ly, bold ? 3.2 : 2.6, color);
        } else {
            marker(f, 1 + n_markers++, lx + 13, ly, 5, color);
        }
        text(f, lx + 34, ly + 4, "start", 12, NULL, se->label);
    }
    if (p->hline > 0 && isfinite(p->hline)) {
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c00\" "
                "stroke-width=\"1.2\" stroke-dasharray=\"6 4\"/>\n",
                lx, ly, lx + 26, ly);
        text(f, lx + 34, ly + 4, "start", 12, NULL, p->hline_label ? p->hline_label : "reference");
        ly += 21;
    }
    // What could not be drawn, under the legend: never dropped silently.
    if (skipped) {
        ly += 4;
        text(f, lx, ly, "start", 11, "fill=\"#555\"",
             p->log_y ? "not drawn (0 or non-finite):" : "not drawn (non-finite):");
        char line[96];
        for (int s = 0; s < p->n_series; s++)
            if (n_skip[s]) {
                ly += 14;
                snprintf(line, sizeof line, "%.60s: %d value%s", p->series[s].label, n_skip[s],
                         n_skip[s] == 1 ? "" : "s");
                text(f, lx + 8, ly, "start", 11, "fill=\"#555\"", line);
            }
    }
    free(n_skip);
}

char *g4_svg_render(const char *title, const char *subtitle, const g4_svg_panel *panels,
                    int n_panels) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    G4_ASSERT(f);
    const int H = HEAD + PANEL_H * (n_panels > 0 ? n_panels : 1);
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"%s\">\n<title>",
            W, H, W, H, font);
    esc(f, title);
    fputs("</title>\n<defs>\n", f);
    for (int i = 0; i < n_panels; i++)
        fprintf(f,
                "<clipPath id=\"clip%d\"><rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>"
                "</clipPath>\n",
                HEAD + i * PANEL_H, PLOT_L, HEAD + i * PANEL_H + PLOT_T - 8, PLOT_R - PLOT_L,
                PLOT_B - PLOT_T + 16);
    fprintf(f, "</defs>\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", W, H);
    text(f, W / 2.0, 26, "middle", 17, "font-weight=\"bold\"", title);
    if (subtitle) text(f, W / 2.0, 47, "middle", 12, "fill=\"#444\"", subtitle);
    for (int i = 0; i < n_panels; i++) panel(f, &panels[i], HEAD + i * PANEL_H);
    fputs("</svg>\n", f);
    fclose(f);
    return buf;
}
