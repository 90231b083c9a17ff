// progress.c: the progress bar and plain progress lines (see progress.h).
#include "base/progress.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BAR_WIDTH 24

double g4_progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// "1h02m", "2m46s", "9s".
static void fmt_duration(char *buf, size_t n, double s) {
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ldh%02ldm", t / 3600, t % 3600 / 60);
    else if (t >= 60)
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, n, "%lds", t);
}

void g4_progress_format(char *buf, size_t n, const char *label, int done, int total, int fresh,
                        double elapsed_s) {
    char bar[BAR_WIDTH + 1];
    int fill = total > 0 ? (int)((long long)done * BAR_WIDTH / total) : BAR_WIDTH;
    for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[BAR_WIDTH] = 0;
    char rate[32], eta[32];
    if (fresh > 0 && elapsed_s > 0) {
        double r = fresh / elapsed_s;
        snprintf(rate, sizeof rate, r >= 10 ? "%.1f it/s" : "%.2f it/s", r);
        fmt_duration(eta, sizeof eta, (total - done) / r);
    } else {
        snprintf(rate, sizeof rate, "-- it/s");
        snprintf(eta, sizeof eta, "?");
    }
    snprintf(buf, n, "%s [%s] %d/%d  %s  ETA %s", label, bar, done, total, rate, eta);
}

void g4_progress_format_plain(char *buf, size_t n, const char *label, int done, int total,
                              int fresh, double elapsed_s) {
    char el[32], eta[32];
    fmt_duration(el, sizeof el, elapsed_s);
    int pct = total > 0 ? (int)((long long)done * 100 / total) : 100;
    if (fresh > 0 && elapsed_s > 0) {
        double r = fresh / elapsed_s;
        fmt_duration(eta, sizeof eta, (total - done) / r);
        snprintf(buf, n,
                 r >= 10 ? "%s: %d/%d (%d%%), %.1f it/s, %s elapsed, ETA %s"
                         : "%s: %d/%d (%d%%), %.2f it/s, %s elapsed, ETA %s",
                 label, done, total, pct, r, el, eta);
    } else {
        snprintf(buf, n, "%s: %d/%d (%d%%), %s elapsed", label, done, total, pct, el);
    }
}

static void draw(g4_progress *p, double now) {
    char line[256];
    if (p->tty) {
        g4_progress_format(line, sizeof line, p->label, p->done, p->total, p->fresh, now - p->t0);
        // \r + clear to the end of the line: the bar rewrites itself in place.
        fprintf(p->out, "\r%s%s%s\033[K", line, p->note[0] ? "  " : "", p->note);
    } else {
        g4_progress_format_plain(line, sizeof line, p->label, p->done, p->total, p->fresh,
                                 now - p->t0);
        fprintf(p->out, "%s%s%s\n", line, p->note[0] ? "; " : "", p->note);
    }
    fflush(p->out);
    p->last_draw = now;
}

void g4_progress_start(g4_progress *p, FILE *out, const char *label, int total, int done) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->tty = out && isatty(fileno(out));
    p->interval_s = G4_PROGRESS_INTERVAL_S;
    p->label = label;
    p->total = total;
    p->done = done;
    p->t0 = g4_progress_now();
    if (p->out) draw(p, p->t0);
}

void g4_progress_note(g4_progress *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->note, sizeof p->note, fmt, ap);
    va_end(ap);
}

void g4_progress_step(g4_progress *p) {
    p->done++;
    p->fresh++;
    if (!p->out) return;
    double now = g4_progress_now();
    // The last item's line is g4_progress_end's in plain form (no line twice).
    if (p->tty ? now - p->last_draw >= 0.1 || p->done >= p->total
               : now - p->last_draw >= p->interval_s && p->done < p->total)
        draw(p, now);
}

void g4_progress_end(g4_progress *p) {
    if (!p->out) return;
    draw(p, g4_progress_now());
    if (p->tty) fputc('\n', p->out);
    fflush(p->out);
    p->out = NULL; // ended: a second end draws nothing
}
