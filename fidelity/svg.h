// svg.h: self-contained SVG line charts in plain C (no fonts, scripts or stylesheets beyond
// inline attributes), for the compare reports: one or more panels stacked vertically, each
// with axes, ticks, tick labels, axis titles, a legend and a log-scale or linear y axis.
//
// x is a number (a layer index); a panel may rename some x positions ("in", "out") so values
// before and after the layers sit on the same axis. A y value that cannot be drawn (<= 0 on a
// log axis, NaN, Inf) is skipped and counted in a note under the panel, never dropped silently.
#ifndef G4_SVG_H
#define G4_SVG_H

typedef enum {
    G4_SVG_LINE = 0,      // points joined by a line (broken where consecutive x differ by > 1)
    G4_SVG_MARKERS = 1,   // points only, with a distinct marker shape
    G4_SVG_LINE_BOLD = 2, // a line in black, thicker: a total or summary beside the others
} g4_svg_style;

typedef struct {
    const char *label; // legend text
    g4_svg_style style;
    int n;
    const double *x, *y;
} g4_svg_series;

typedef struct {
    const char *title;   // panel title ("text decoder")
    const char *x_label; // axis titles
    const char *y_label;
    int log_y;           // 1: log10 y axis with a tick per decade
    double x_min, x_max; // x range shown (integers at the ticks)
    int n_named;         // x positions shown by name instead of number
    const double *named_x;
    const char *const *named_label;
    int n_series;
    const g4_svg_series *series;
    double hline;            // a dashed reference line at this y (a tolerance); <= 0: none
    const char *hline_label; // its legend text
} g4_svg_panel;

// The SVG document (a new string): a title line, an optional subtitle, then the panels.
char *g4_svg_render(const char *title, const char *subtitle, const g4_svg_panel *panels,
                    int n_panels);

#endif
