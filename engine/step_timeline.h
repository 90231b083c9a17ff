// step_timeline.h: one stamped step of the persistent skeleton (kernels/step_skeleton.cuh
// g4_step_skel_launch_timeline: per instruction, %globaltimer at the g4_tl_stamp_at points)
// taken apart on the host: where a step's microseconds go. Host C only, pure functions of the
// queues and the stamps, checked on the CPU by tests/test_step_timeline.c on hand-made timelines.
//
// The critical path, walked back from the instruction that finished last (the largest signal
// stamp): at instruction i, let P be the latest signaler (largest signal stamp) of the counters
// i waits on. When P signalled after i was ready to wait (after i's pre-wait stream, T_PRE), the
// wait held i up: the path steps to P through a hand-over. Otherwise it steps to i's predecessor
// in its own queue (or ends: i was its queue's first). Every nanosecond between the step's first
// stamp and its last lies on exactly one of the path's segments:
//   start     the step's first stamp to a queue's first instruction's begin (the path's first)
//   queue     the predecessor's signal stamp to i's begin (the loop's own overhead)
//   w_pre     i's weights streamed before its wait (pf 2 / 3; the L2 prefetch issue under pf 1)
//   wait      the wait that found its counters met (polls + the CTA barrier), when not a hand-over
//   handover  P's signal stamp to i's wait end (red.release, the poll that sees it, the barrier)
//   w_post    i's weights streamed after its wait (pf 0 / 1)
//   read      i's activation reads and the barrier after them
//   write     i's activation writes, the barrier and the signal
// so the path's segments sum to the step's span (the last signal stamp minus the first begin).
#ifndef G4_STEP_TIMELINE_H
#define G4_STEP_TIMELINE_H

#include <stdint.h>
#include <stdio.h>

#include "engine/step_plan.h"
#include "kernels/step_skel_queues.h"

typedef enum {
    G4_TL_START,
    G4_TL_QUEUE,
    G4_TL_W_PRE,
    G4_TL_WAIT,
    G4_TL_HANDOVER,
    G4_TL_W_POST,
    G4_TL_READ,
    G4_TL_WRITE,
    G4_TL_N
} g4_tl_seg;

typedef enum { G4_TL_VIA_START, G4_TL_VIA_QUEUE, G4_TL_VIA_SIGNAL } g4_tl_via;

typedef struct {
    int ins;              // plan index
    int via;              // g4_tl_via: how the path reached it
    int from;             // the queue predecessor or the producer (plan index), -1 for start
    int64_t seg[G4_TL_N]; // ns of each segment charged to this node
} g4_tl_node;

const char *g4_tl_seg_name(int seg);

// Checks the stamps st[q->n] (by plan index): every stamp set (nonzero), each instruction's
// stamps in order, each begin at or after its queue predecessor's signal stamp. G4_OK or a user
// error naming the first instruction that breaks it. *t0 / *t1: the step's first begin and last
// signal stamp; *min_delta: the smallest nonzero difference of consecutive stamps of one
// instruction (the timer's visible resolution), *zero_deltas: how many were 0.
int g4_tl_check(const g4_sq *q, const g4_sq_stamp *st, uint64_t *t0, uint64_t *t1,
                int64_t *min_delta, int *zero_deltas);

// The critical path (rule above), first instruction first, into path[0 .. *n) (room for q->n).
// ignore_waits: the step ran without waits (G4_SK_NO_WAIT): the path follows the queues only.
// Runs g4_tl_check first (its error, if any).
int g4_tl_path(const g4_sq *q, const g4_sq_stamp *st, int ignore_waits, g4_tl_node *path, int *n);

// Each instruction's own segments (no path): w_pre, wait, w_post, read, write from its stamps;
// queue from its predecessor (0 for a queue's first); handover: its wait end minus the latest
// signal of its counters when that signal came after T_PRE (the wait held it up), else 0, and
// *held = 1 then. seg[G4_TL_N]; start is 0.
void g4_tl_own(const g4_sq *q, const g4_sq_stamp *st, int ignore_waits, int ins, int64_t *seg,
               int *held);

// The path's segments summed by group: out[n_groups][G4_TL_N] (ns, zeroed first), node j's into
// out[group[path[j].ins]] (group indexed by plan index; a group outside [0, n_groups) is skipped).
void g4_tl_sum_by(const g4_tl_node *path, int n, const int *group, int n_groups, double *out);

// The whole report (prefix starts every line): the span and the timer's resolution; the
// critical path's segments in total, as a mean over the layers 0 .. n_layers - 1 (us a layer),
// before the layers and after them (the LM head) separately, and by op kind; then per op kind
// over every instruction the mean and max of each own segment, with the waits found short.
// p gives each instruction's op and layer (p->n == q->n). G4_OK or g4_tl_check's error.
int g4_tl_report(const g4_step_plan *p, const g4_sq *q, const g4_sq_stamp *st, int ignore_waits,
                 const char *prefix, FILE *f);

#endif
