// progress.h: the progress of long work (eval, quantize, compare --sensitivity, bench): items
// done / total, items per second over this process's items, time left. One helper for every
// command, two forms, picked by where it goes:
//   a terminal: a bar redrawn in place ("\r"), at most ~10 times a second;
//   anything else (a log under nohup, CI, a pipe): a plain line every G4_PROGRESS_INTERVAL_S
//   seconds, one at the start and one at the end, so a multi-hour run says how far it is.
#ifndef G4_PROGRESS_H
#define G4_PROGRESS_H

#include <stddef.h>
#include <stdio.h>

#define G4_PROGRESS_INTERVAL_S 5.0 // seconds between plain lines

typedef struct {
    FILE *out;         // NULL: draw nothing
    int tty;           // out is a terminal: the bar; else plain lines
    double interval_s; // plain lines: at most one per interval (G4_PROGRESS_INTERVAL_S)
    const char *label; // (borrowed)
    int total;         // items in the run
    int done;          // items finished, including those done before this process
    int fresh;         // items finished by this process (the rate counts only these)
    double t0;         // start, seconds (monotonic)
    double last_draw;
    char note[128]; // what the last item was (g4_progress_note), shown after the counts
} g4_progress;

// Starts over total items of which `done` are finished already, on out (stderr; NULL: none);
// the form follows isatty(out).
void g4_progress_start(g4_progress *p, FILE *out, const char *label, int total, int done);
// One more item finished; redraws when it is time (and always at the last item).
void g4_progress_step(g4_progress *p);
// Sets the note shown with the next line (printf-style; "" clears it).
void g4_progress_note(g4_progress *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
// Ends: the bar's line is closed; a plain run gets its final line.
void g4_progress_end(g4_progress *p);

// The bar's text for these counts: "label [######......]  12/100  0.53 it/s  ETA 2m46s"
// ("-- it/s  ETA ?" before the first fresh item). Writes at most n bytes (NUL included).
void g4_progress_format(char *buf, size_t n, const char *label, int done, int total, int fresh,
                        double elapsed_s);
// The plain line's text: "label: 12/100 (12%), 0.53 it/s, 1m02s elapsed, ETA 2m46s".
void g4_progress_format_plain(char *buf, size_t n, const char *label, int done, int total,
                              int fresh, double elapsed_s);
// Monotonic seconds.
double g4_progress_now(void);

#endif
