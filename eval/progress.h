// progress.h: a one-line progress bar for long runs (items done / total, items per second over
// this process's items, time left). The caller decides whether to draw it: the commands draw it
// on stderr only when stderr is a terminal, so logs and pipes stay clean.
#ifndef G4_PROGRESS_H
#define G4_PROGRESS_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    FILE *out;         // NULL: draw nothing
    const char *label; // (borrowed)
    int total;         // items in the run
    int done;          // items finished, including those done before this process
    int fresh;         // items finished by this process (the rate counts only these)
    double t0;         // start, seconds (monotonic)
    double last_draw;
} g4_progress;

// Starts a bar over total items of which `done` are finished already; draws it on out.
void g4_progress_start(g4_progress *p, FILE *out, const char *label, int total, int done);
// One more item finished; redraws (at most ~10 times a second, and always at the last item).
void g4_progress_step(g4_progress *p);
// Ends the bar's line.
void g4_progress_end(g4_progress *p);

// The bar's text for these counts: "label [######......]  12/100  0.53 it/s  ETA 2m46s"
// ("-- it/s  ETA ?" before the first fresh item). Writes at most n bytes (NUL included).
void g4_progress_format(char *buf, size_t n, const char *label, int done, int total, int fresh,
                        double elapsed_s);
// Monotonic seconds.
double g4_progress_now(void);

#endif
