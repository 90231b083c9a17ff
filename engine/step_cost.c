// step_cost.c: the skeleton's cost model (engine/step_cost.h).
#include "engine/step_cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/step_queue.h"
#include "engine/step_timeline.h"
#include "kernels/step_skel_math.h"

// The session-30 calibration (H100; bench/runs/2026-12-06-s30-sktl-logs.tar.gz, stepskel_1.txt:
// the rows, and the "stepskel-tl ... q4 pf=2" lines: each op's own segments, the mean over all
// its instructions, with the KB it reads; regions and bytes a region from g4_sq_build's queues):
//   dram_gbs      Q4 3068 / f16 2927: the `stream` baseline rows (the same bytes, one kernel)
//   w_round_bytes 16384: kernels/step_skeleton.cu's stream, SK_UNROLL 4 x SK_THREADS 256 x 16 B
//   w_lat_us      0.7: branch sktl's throwaway model (16 KB a round at ~20 GB/s a CTA). Loaded,
//                 the timeline's w_pre says 1.2-2.0 us a round (gate|up 114 KB, 7 rounds: 9.6 us;
//                 the LM head's 57 rounds: 77 us; down's 4 runs of 4.7 KB: 6.3 us): that comes
//                 out of Little's law with dram_gbs, not from this number
//   queue_us      0.5: the queue segment's mean, 0.43-0.64 over the ops
//   wait_us       0.3: the wait of ple_model_proj / lm_head (none found short): 0.31
//   handover_us   0.53: the path's 120.1 us of hand-overs / 224 hand-overs
//   rd_*          read = 0.1 + 0.55 a region + bytes at 55 GB/s (69 with DRAM not saturated):
//                 1 region: ple_proj 0.5 KB 0.67 us, down 1 KB 0.78, o 39.6 KB 1.26; 2 regions:
//                 q 9.2 KB 1.28, gate|up 12.3 KB 1.41; 3: ple_gate 122 KB 3.83; 4.2: attention
//                 162 KB 5.53; the sample (3 regions, 1 MB, the stream over) 17.0 -> 69 GB/s
//   wr_*          write = 0.75 + 0.05 a region + bytes at 30 GB/s: ple_proj / o / q / gate|up
//                 0.80-0.93 us for 0.1-0.3 KB, attention 1.12 for 10 KB
//   launch_us     4: a single launch is 3-8 us above a graph row (session 30)
//   red_us        0.003: FITTED to down's write, 1.47 us against 0.8-0.9 for the others: its
//                 counter has 288 signalers a layer (the others 4-40); 0.003 gives the model's
//                 down write 1.35 us, the others 0.82-0.87
//   jitter        0.2: FITTED to the Q4 pf=2 row (0: -16%, 0.1: -12%, 0.2: -4%): the path follows
//                 the last of each wide set (150 gate|up tiles a layer), a tail a model of means
//                 lacks (the timeline's max / mean per op is 1.4-2.8 on read and write)
// G4_SK_MATH (per-unit facts from the session-32 H100 rows, bench/runs/2026-12-06-s32-call1-
// stepskel-logs.tar.gz stepskel_{1,2}.txt, G = 528, the mean of the two runs, and the math
// kernel's SASS, cuobjdump -sass of step_skel_math_kernel<false, 1 / 2>; not fitted to the step
// totals, which the report checks it against). A path tile: one instruction's tiles an op, the
// op's largest (each op's math runs after its wait, so the path carries one instruction's an
// op): 1,363.2 a layer on the best plan (64/128/8/128), 585.6 on the baseline (128/32/4/64),
// 340.8 on 64/128/2/64, + the LM head's 3,072 / 1,536 / 1,536: 50,784 / 22,032 / 13,464 a step
// (the values below; the report counts from the queues, with the PLE model projection before the
// layers too, 192 / 96 / 48 more, 0.4%, and prints each plan's per-unit facts of its rows).
//   math_unit_us  Q4 0.249 us a tile a warp: (held - plain) / path tiles = 27.8 (best) / 33.0
//                 (baseline) / 32.7 (2/64) ns a tile a CTA, the mean 31.2 x 8 warps. The held
//                 loop's SASS: 398 instructions a 4 tiles, no local access (0.228 a cycle a warp
//                 at 1.755 GHz); written as the loaded loop's 117 a tile at 0.268 a cycle. f16
//                 0.232: its loaded loop's 109 a step at that rate (its held rows do not measure
//                 it: the held f16 loop spills its hash words, 11 STL + 11 LDL a step of 107)
//   math_ring     1 (both): a warp's units whose loads are in flight at once. SASS: after each Q4
//                 tile's refill (LDG scale, LDG.U8 zero point, LDG.128 codes) ptxas spills the
//                 scale and / or zero-point register at once (6 STL a 4 tiles, one or two a tile),
//                 and a store waits for its register: the warp stalls a full round each tile; the
//                 ring of 4 holds the words but overlaps nothing. f16: one step by construction
//                 (and an STL.128 of a loaded vector right after its LDG). So the re-read adds k x
//                 lat after the issue, not under it
//   math_lat_us   the re-read's round, a unit's loads with nothing else of the warp's in flight
//                 (8 units a CTA: Q4 4.7 KB, f16 16 KB): Q4 0.412 us = 8 warps x (math - held) /
//                 path tiles, the mean of 47.0 (best) / 52.5 (baseline) / 54.9 (2/64) ns a tile a
//                 CTA; it includes the loaded loop's 17.5 instructions a tile more than the held
//                 one's (~0.04 us). Below a DRAM round (f16's, next) and above an L2 hit's (~0.2-
//                 0.3 us): a tile's 592 bytes span 5-6 lines, 1-2 shared with the tiles beside it
//                 that the CTA's other warps refill at the same time, and some of the pre-wait
//                 stream's lines are still in L2 (Q4 flows in at half f16's rate); the rows do
//                 not separate the two. f16 0.7 = w_lat_us, a DRAM round, not fitted: its rows
//                 give 8 x (math - held) / path units = 0.64 / 0.72 / 0.73 us
// The math segment carries no jitter: a loop of fixed instructions (and, re-read, a round a
// unit), not the memory-contended 1-5 us reads and writes the jitter was fitted to. With it (a
// draft of these values: unit 0.242, Q4 round 0.377) the Q4 held rows came out 8-37% slow and the
// math rows 25-46%; without, within 10.1% (the report's session-32 rows).
void g4_sc_params_default(g4_sc_params *p, g4_sq_dtype dt) {
    *p = (g4_sc_params){
        .dram_gbs = dt == G4_SQ_F16 ? 2927.0 : 3068.0,
        .w_round_bytes = 16384.0,
        .w_lat_us = 0.7,
        .queue_us = 0.5,
        .wait_us = 0.3,
        .handover_us = 0.53,
        .rd_fix_us = 0.1,
        .rd_lat_us = 0.55,
        .rd_busy_gbs = 55.0,
        .rd_idle_gbs = 69.0,
        .wr_fix_us = 0.75,
        .wr_lat_us = 0.05,
        .wr_gbs = 30.0,
        .launch_us = 4.0,
        .jitter = 0.2,
        .red_us = 0.003,
        .math_unit_us = (dt == G4_SQ_F16 ? 109.0 : 117.0) / (0.268 * 1755.0),
        .math_ring = 1.0,
        .math_lat_us = dt == G4_SQ_F16 ? 0.7 : 0.412,
    };
}

int g4_sc_params_check(const g4_sc_params *p) {
    if (!p) return g4_fail(G4_EUSER, "step cost: no parameters");
    const struct {
        const char *name;
        double v;
        int rate;
    } f[] = {
        // clang-format off
        {"dram_gbs", p->dram_gbs, 1},       {"w_round_bytes", p->w_round_bytes, 1},
        {"w_lat_us", p->w_lat_us, 0},       {"queue_us", p->queue_us, 0},
        {"wait_us", p->wait_us, 0},         {"handover_us", p->handover_us, 0},
        {"rd_fix_us", p->rd_fix_us, 0},     {"rd_lat_us", p->rd_lat_us, 0},
        {"rd_busy_gbs", p->rd_busy_gbs, 1}, {"rd_idle_gbs", p->rd_idle_gbs, 1},
        {"wr_fix_us", p->wr_fix_us, 0},     {"wr_lat_us", p->wr_lat_us, 0},
        {"wr_gbs", p->wr_gbs, 1},           {"launch_us", p->launch_us, 0},
        {"jitter", p->jitter, 0},           {"red_us", p->red_us, 0},
        {"math_unit_us", p->math_unit_us, 0}, {"math_ring", p->math_ring, 1},
        {"math_lat_us", p->math_lat_us, 0},
        // clang-format on
    };
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
        if (!isfinite(f[k].v) || f[k].v < 0 || (f[k].rate && f[k].v == 0))
            return g4_fail(G4_EUSER, "step cost: %s = %g: expected a finite %s", f[k].name, f[k].v,
                           f[k].rate ? "rate above 0" : "value of 0 or more");
    if (p->jitter > 1)
        return g4_fail(G4_EUSER, "step cost: jitter = %g: expected 0 .. 1", p->jitter);
    if (!(p->math_ring >= 1 && p->math_ring <= 64 && p->math_ring == floor(p->math_ring)))
        return g4_fail(G4_EUSER, "step cost: math_ring = %g: expected a whole 1 .. 64",
                       p->math_ring);
    return G4_OK;
}

// A CTA's state: in a timed phase (ends at t_end), streaming (rem rounds left, infl bytes in
// flight a round), blocked on its
// waits, or done.
enum { PH_TIMED, PH_STREAM, PH_BLOCKED, PH_DONE };
// Where an instruction is: the phase that ends next and what follows it.
enum { AT_QUEUE, AT_PRE, AT_WAIT, AT_POST, AT_READ, AT_MATH, AT_WRITE, AT_SIGNAL };

typedef struct {
    int ph, at, k; // phase, position in the instruction, queue index (absolute in q->ins)
    double t_end, rem, infl;
} cta_state;

// CTA s starts to stream its instruction's weights, wr rounds of wbytes in all (the phase `at`
// follows: the pre-wait stream's or the post-wait one's): a round's bytes join *inflight.
static void stream_start(cta_state *s, int at, double wr, double wbytes, double *inflight) {
    s->ph = PH_STREAM, s->at = at, s->rem = wr, s->infl = wbytes / wr;
    *inflight += s->infl;
}

// us for `bytes` at `gbs` GB/s
static double at_rate(double bytes, double gbs) {
    return bytes / (gbs * 1e3);
}

// The rounds of an instruction's weight stream (kernels/step_skeleton.cu stream_weights: one
// range when its runs are contiguous, else run by run; each range in rounds of at most
// round_bytes, the loads of a round all in flight, then consumed).
static double rounds_of(const g4_sq_instr *in, double round_bytes) {
    if (in->w_runs <= 0 || in->w_run <= 0) return 0;
    if (in->w_stride == in->w_run) return ceil((double)in->w_runs * in->w_run / round_bytes);
    return in->w_runs * ceil(in->w_run / round_bytes);
}

// (one step: step 0's targets)
static int waits_met(const g4_sq_instr *in, const int *ctr) {
    return g4_sq_first_unmet(ctr, in, 0) == in->n_wait;
}

static double bytes_of(const g4_sq *q, const g4_sq_instr *in, int wr, int *regions) {
    double b = 0;
    const int lo = in->reg0 + (wr ? in->n_rd : 0), n = wr ? in->n_wr : in->n_rd;
    for (int r = lo; r < lo + n; r++) b += q->reg[r].bytes;
    *regions = n;
    return b;
}

// A timed segment of mean `us` with its jitter: (1 - j) us fixed + j us exponential (seeded
// xorshift64*, the same sequence every run; j = 0: exactly us).
static double jit(uint64_t *x, double j, double us) {
    if (j <= 0 || us <= 0) return us;
    *x ^= *x >> 12, *x ^= *x << 25, *x ^= *x >> 27;
    const double u = (double)((*x * 2685821657736338717ull) >> 11) / 9007199254740992.0; // [0, 1)
    return us * (1 - j + j * -log1p(-u));
}

// The math segment of instruction in (engine/step_cost.h): its busiest warp's units (warp 0 of
// kernels/step_skel_math.h's walk) issued at math_unit_us, and (not held) re-read math_ring at a
// time at the round latency lat.
static double math_us(const g4_sq_instr *in, g4_sq_dtype dt, const g4_sc_params *p, int held,
                      double lat) {
    if (in->w_runs <= 0 || in->w_run <= 0) return 0;
    const double k = skm_warp_units(in->w_runs * skm_units_a_run(dt, in->w_run), 0);
    const double issue = k * p->math_unit_us;
    if (held) return issue;
    const double reload = ceil(k / p->math_ring) * lat;
    return p->math_ring > 1 ? fmax(issue, reload) : issue + reload;
}

static void stamp(g4_sq_stamp *st, const g4_sq_instr *in, int at, double t_us) {
    if (st) st[in->id].t[at] = (uint64_t)llround(1000.0 + t_us * 1e3);
}

int g4_sc_simulate(const g4_sq *q, const g4_sc_params *p, int pf, int mode, g4_sq_stamp *st,
                   g4_sc_result *r) {
    int rc = g4_sc_params_check(p);
    if (rc) return rc;
    if (pf != 0 && pf != 2) return g4_fail(G4_EUSER, "step cost: pf %d: modelled are 0 and 2", pf);
    if (!q || !r || q->G < 1 || q->n < 0 || !q->start)
        return g4_fail(G4_EUSER, "step cost: no queues or no result");
    for (int k = 0; k < q->n; k++) { // (a hand-made queue too: every index in range)
        const g4_sq_instr *in = &q->ins[k];
        int bad = in->id < 0 || in->id >= q->n || in->signal < -1 || in->signal >= q->n_counters ||
                  in->n_wait < 0 || in->n_wait > G4_SQ_MAX_WAIT || in->reg0 < 0 || in->n_rd < 0 ||
                  in->n_wr < 0 || in->reg0 + in->n_rd + in->n_wr > q->n_reg;
        for (int w = 0; w < in->n_wait && !bad; w++)
            bad = in->wait_ctr[w] < 0 || in->wait_ctr[w] >= q->n_counters;
        if (bad)
            return g4_fail(G4_EUSER,
                           "step cost: queue entry %d (instruction #%d): an index out of "
                           "range",
                           k, in->id);
    }
    if (mode & ~(G4_SK_NO_WAIT | G4_SK_NO_ACT | G4_SK_NO_WEIGHTS | G4_SK_MATH | G4_SK_MATH_HELD))
        return g4_fail(G4_EUSER,
                       "step cost: mode %d: modelled are NO_WAIT, NO_ACT, NO_WEIGHTS, MATH, "
                       "MATH_HELD",
                       mode);
    if ((mode & G4_SK_MATH_HELD) && !(mode & G4_SK_MATH))
        return g4_fail(G4_EUSER, "step cost: mode %d: MATH_HELD without MATH", mode);
    if ((mode & G4_SK_MATH) && q->dt != G4_SQ_Q4 && q->dt != G4_SQ_F16)
        return g4_fail(G4_EUSER, "step cost: queues of weight type %d: expected Q4 or f16",
                       (int)q->dt);
    const int G = q->G, no_wait = mode & G4_SK_NO_WAIT, no_act = mode & G4_SK_NO_ACT,
              no_w = mode & G4_SK_NO_WEIGHTS, math = (mode & G4_SK_MATH) && !no_w,
              held = mode & G4_SK_MATH_HELD;
    cta_state *c = g4_calloc((size_t)G, sizeof *c);
    int *ctr = g4_calloc((size_t)q->n_counters + 1, sizeof(int));
    double *red_free = g4_calloc((size_t)q->n_counters + 1, sizeof(double));
    if (st) memset(st, 0, sizeof *st * (size_t)q->n);
    memset(r, 0, sizeof *r);
    double now = 0, last_signal = 0, share_int = 0;
    const double j = p->jitter;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (2 * (uint64_t)p->seed + 1); // (never 0)
    int left = 0;
    double inflight = 0; // bytes the streaming CTAs have in flight
    for (int b = 0; b < G; b++) {
        c[b].k = q->start[b];
        if (c[b].k < q->start[b + 1]) {
            left++;
            c[b].ph = PH_TIMED, c[b].at = AT_QUEUE, c[b].t_end = 0; // (the first: no queue cost)
            stamp(st, &q->ins[c[b].k], G4_TL_T_BEGIN, 0);
            if (st) st[q->ins[c[b].k].id].cta = b;
        } else {
            c[b].ph = PH_DONE;
        }
    }
    while (left > 0) {
        // the stream's per-CTA rate now, and the next event
        // a round's latency now: the unloaded one, or what DRAM takes to serve every byte in
        // flight (Little's law), whichever is longer; every streaming CTA moves at 1 / lat rounds
        const double lat = fmax(p->w_lat_us, inflight / (p->dram_gbs * 1e3)), rate = 1.0 / lat;
        double t_next = INFINITY;
        for (int b = 0; b < G; b++) {
            if (c[b].ph == PH_TIMED)
                t_next = fmin(t_next, c[b].t_end);
            else if (c[b].ph == PH_STREAM)
                t_next = fmin(t_next, now + c[b].rem * lat);
        }
        if (!isfinite(t_next)) { // every CTA left is blocked: a wait never met
            int at = -1;         // (the earliest in plan order: every one before it ran)
            for (int b = 0; b < G; b++)
                if (c[b].ph == PH_BLOCKED && (at < 0 || q->ins[c[b].k].id < at))
                    at = q->ins[c[b].k].id;
            free(c), free(ctr), free(red_free);
            return g4_fail(G4_EUSER, "step cost: instruction #%d waits on a count never reached",
                           at);
        }
        const double dt = t_next - now;
        share_int += dt * fmin(1.0, inflight / lat / (p->dram_gbs * 1e3));
        const double done = rate * dt; // rounds each streaming CTA got
        now = t_next;
        for (int b = 0; b < G; b++) {
            cta_state *s = &c[b];
            if (s->ph == PH_STREAM) {
                s->rem -= done;
                if (s->rem > 1e-9) continue;
                inflight -= s->infl;
            } else if (s->ph != PH_TIMED || s->t_end > now) {
                continue;
            }
            // the phase ended: the instruction's next one (loop while zero-length ones follow)
            const g4_sq_instr *in = &q->ins[s->k];
            const double wbytes = no_w ? 0 : (double)in->w_runs * in->w_run,
                         wr = no_w ? 0 : rounds_of(in, p->w_round_bytes);
            s->ph = PH_TIMED;
            switch (s->at) {
            case AT_QUEUE:
                if (pf == 2 && wr > 0) {
                    stream_start(s, AT_PRE, wr, wbytes, &inflight);
                    break;
                }
                stamp(st, in, G4_TL_T_PRE, now);
                goto wait;
            case AT_PRE:
                stamp(st, in, G4_TL_T_PRE, now);
            wait:
                s->at = AT_WAIT;
                if (no_wait || in->n_wait == 0 || waits_met(in, ctr)) {
                    s->t_end = now + jit(&rng, j, p->wait_us);
                } else {
                    s->ph = PH_BLOCKED;
                    r->blocked++;
                }
                break;
            case AT_WAIT:
                stamp(st, in, G4_TL_T_WAITED, now);
                if (pf == 0 && wr > 0) {
                    stream_start(s, AT_POST, wr, wbytes, &inflight);
                    break;
                }
                goto read;
            case AT_POST:
            read : {
                stamp(st, in, G4_TL_T_WTS, now);
                int nr = 0;
                const double rb = bytes_of(q, in, 0, &nr);
                // DRAM saturated by the streams now (its own, if any, is over)
                const int saturated = inflight / (p->dram_gbs * 1e3) > p->w_lat_us;
                s->at = AT_READ;
                double us = p->rd_fix_us;
                if (!no_act)
                    us += nr * p->rd_lat_us +
                          at_rate(rb, saturated ? p->rd_busy_gbs : p->rd_idle_gbs);
                s->t_end = now + jit(&rng, j, us);
                break;
            }
            case AT_READ: {
                stamp(st, in, G4_TL_T_READ, now);
                // the math (none: on to the write at once, no pass of the loop more)
                const double mu =
                    math ? math_us(in, q->dt, p, held,
                                   fmax(p->math_lat_us, inflight / (p->dram_gbs * 1e3)))
                         : 0;
                if (mu > 0) {
                    s->at = AT_MATH, s->t_end = now + mu;
                    break;
                }
                goto write;
            }
            case AT_MATH:
            write : {
                int nw = 0;
                const double wb = bytes_of(q, in, 1, &nw);
                s->at = AT_WRITE;
                double us = p->wr_fix_us;
                if (!no_act) us += nw * p->wr_lat_us + at_rate(wb, p->wr_gbs);
                s->t_end = now + jit(&rng, j, us);
                break;
            }
            case AT_WRITE:
                // the signal: one red at a time on a counter's line (red_us each, in the order
                // the CTAs issue them); the CTA goes on once its own is through
                s->at = AT_SIGNAL, s->t_end = now;
                if (in->signal >= 0 && p->red_us > 0) {
                    s->t_end = fmax(now, red_free[in->signal]) + p->red_us;
                    red_free[in->signal] = s->t_end;
                }
                break;
            case AT_SIGNAL:
                stamp(st, in, G4_TL_T_SIGNAL, now);
                last_signal = now;
                if (in->signal >= 0) {
                    ctr[in->signal]++;
                    // the waiters this signal completes see it one hand-over later
                    for (int o = 0; o < G; o++)
                        if (c[o].ph == PH_BLOCKED && waits_met(&q->ins[c[o].k], ctr))
                            c[o].ph = PH_TIMED, c[o].t_end = now + jit(&rng, j, p->handover_us);
                }
                if (++s->k >= q->start[b + 1]) {
                    s->ph = PH_DONE;
                    left--;
                    break;
                }
                s->at = AT_QUEUE, s->t_end = now + jit(&rng, j, p->queue_us);
                stamp(st, &q->ins[s->k], G4_TL_T_BEGIN, s->t_end);
                if (st) st[q->ins[s->k].id].cta = b;
                break;
            }
            // a phase that ends now (zero length) is taken by the next pass of the loop
        }
    }
    r->step_us = last_signal + p->launch_us;
    r->stream_share = last_signal > 0 ? share_int / last_signal : 0;
    free(c), free(ctr), free(red_free);
    return G4_OK;
}

int g4_sc_path_layer(const g4_step_plan *p, const g4_sq *q, const g4_sq_stamp *st, int ignore_waits,
                     double *seg, double *after) {
    g4_tl_node *path = g4_malloc(sizeof *path * (size_t)q->n);
    int *group = g4_malloc(sizeof(int) * (size_t)q->n);
    double *sum = g4_calloc((size_t)(p->n_layers + 2) * G4_TL_N, sizeof(double));
    int n = 0;
    const int rc = g4_tl_path(q, st, ignore_waits, path, &n);
    if (!rc) {
        // groups: layer l -> l, before the layers -> n_layers + 1, after them -> n_layers
        for (int i = 0; i < q->n; i++) {
            const int l = p->ins[i].layer;
            group[i] = l < 0 ? p->n_layers + 1 : l;
        }
        g4_tl_sum_by(path, n, group, p->n_layers + 2, sum);
        *after = 0;
        for (int s = 0; s < G4_TL_N; s++) {
            seg[s] = 0;
            for (int l = 0; l < p->n_layers; l++) seg[s] += sum[l * G4_TL_N + s];
            seg[s] /= 1e3 * p->n_layers;
            *after += sum[p->n_layers * G4_TL_N + s] / 1e3;
        }
    }
    free(path), free(group), free(sum);
    return rc;
}

// The session-30 rows (H100, stepskel_1.txt of the sktl logs; us a step, graph-replayed) the
// model is checked against: G, pf, mode, Q4, f16.
typedef struct {
    const char *name;
    int G, pf, mode;
    double q4, f16;
} measured_row;
static const measured_row measured[] = {
    {"pf=2", 660, 2, 0, 1262.0, 1910.0},
    {"pf=2 nowait", 660, 2, G4_SK_NO_WAIT, 513.7, 1581.8},
    {"pf=2 noact", 660, 2, G4_SK_NO_ACT, 657.3, 1657.2},
    {"pf=2 nowts", 660, 2, G4_SK_NO_WEIGHTS, 938.3, 938.5},
    {"pf=2 nowait+noact+nowts", 660, 2, G4_SK_NO_WAIT | G4_SK_NO_ACT | G4_SK_NO_WEIGHTS, 153.5,
     153.9},
    {"pf=0", 660, 0, 0, 1752.8, 3126.9},
    {"pf=2 G=264", 264, 2, 0, 1309.6, 1948.1},
    {"pf=2 G=792", 792, 2, 0, 1254.5, 1924.7},
    {"pf=0 G=264", 264, 0, 0, 1929.7, 3121.0},
};
// The Q4 timelines' path a layer (us; "path a layer" lines: pf=2 and pf=0, stamped).
static const double tl_pf2[G4_TL_N] = {0.072, 0.265, 5.374, 0.218, 3.422, 0.338, 15.442, 8.892};
static const double tl_pf0[G4_TL_N] = {0.000, 0.000, 0.000, 0.000, 3.537, 21.962, 13.476, 9.634};

// The session-31 rows (H100, bench/runs/2026-12-06-s31-call1-v4-logs.tar.gz logs/stepskel.log):
// the bench's plans (engine/step_queue.h g4_sp_bench_plans) at pf=2 G=660, us a step of each of
// its two runs (the "stepskel E2B ..." lines), and run 1's stamped Q4 step's path a layer and
// after the layers (the "stepskel-tl ... path a layer / path after the layers" lines). Options
// as g4_sp_opts (0: the plan's default: chunk 32, group 4, LM group 64).
typedef struct {
    int split, chunk, group, lm;
    double q4[2], f16[2];      // runs 1 and 2
    double tl[G4_TL_N], after; // Q4 pf=2 path a layer by segment, and after the layers
} measured_plan;
// (a plan's two lines kept together)
// clang-format off
static const measured_plan measured31[] = {
    {128, 0, 0, 0, {1268.1, 1276.4}, {1936.8, 1937.3},
     {0.081, 0.358, 5.545, 0.217, 3.503, 0.315, 15.441, 8.917}, 103.65},
    {64, 0, 0, 0, {1235.4, 1235.6}, {1909.9, 1906.3},
     {0.038, 0.352, 5.583, 0.207, 3.385, 0.330, 14.181, 9.001}, 104.83},
    {32, 0, 0, 0, {1248.5, 1243.5}, {1920.4, 1915.8},
     {0.057, 0.387, 5.575, 0.211, 3.535, 0.343, 14.264, 9.032}, 105.28},
    {128, 128, 0, 0, {1010.3, 1016.5}, {1687.7, 1687.2},
     {0.010, 0.000, 0.392, 0.017, 3.929, 0.334, 13.226, 8.910}, 96.48},
    {128, 128, 8, 128, {972.6, 966.8}, {1717.3, 1716.5},
     {0.017, 0.000, 0.649, 0.008, 3.653, 0.330, 12.554, 7.711}, 124.77},
    {64, 128, 8, 128, {945.6, 944.5}, {1700.8, 1694.9},
     {0.016, 0.000, 0.664, 0.008, 3.612, 0.283, 11.557, 7.792}, 122.91},
};
// clang-format on

// the bench's keys and first G (5 CTAs an SM on 132 SMs)
enum { SC_KEYS = G4_SP_BENCH_KEYS, SC_G = 660 };
// G4_SK_MATH's kernel: 4 CTAs an SM (64 registers; g4_step_skel_max_ctas_math) on 132 SMs
enum { SC_G_MATH = 528 };

// A plan's options on E2B (g4_sp_opts' split keys, down chunk tiles, group tiles, LM group tiles;
// 0: the plan's default), and those of any row or list entry with the four fields.
typedef struct {
    int split, chunk, group, lm;
} sc_opts;
#define SC_OPTS(x) ((sc_opts){(x)->split, (x)->chunk, (x)->group, (x)->lm})

// E2B's tile plan (the bench's flags, SC_KEYS keys) with options o; G4_OK or the builder's error
// (*p then holds nothing).
static int e2b_plan(sc_opts o, g4_step_plan *p) {
    const g4_sp_opts so = g4_sp_bench_opts(&(g4_sp_bench_plan){o.split, o.chunk, o.group, o.lm, 0});
    g4_text_config c;
    g4_sp_shape_config(&g4_sp_shape_e2b, &c);
    g4_sp_flags f;
    g4_sp_flags_owner_qkv(&c, &f);
    const int rc = g4_sp_build(&c, &f, &so, p);
    if (rc) g4_sp_free(p);
    free(f.qkv);
    free(c.layer);
    return rc;
}

// E2B's plan of options o and its queues at G for weights dt: G4_OK (e2b_free frees both) or the
// first error (nothing held).
static int e2b_queues(sc_opts o, int G, g4_sq_dtype dt, g4_step_plan *p, g4_sq *q) {
    int rc = e2b_plan(o, p);
    if (!rc && (rc = g4_sq_build(p, G, dt, q))) g4_sp_free(p);
    return rc;
}
static void e2b_free(g4_step_plan *p, g4_sq *q) {
    g4_sq_free(q);
    g4_sp_free(p);
}

// One step of queues q (their weight type's calibration, jitter sequence `seed`) at pf and mode:
// the stamps into st[q->n] (NULL: not wanted), *r the result. G4_OK or the simulation's error.
static int sim_queues(const g4_sq *q, int pf, int mode, unsigned seed, g4_sq_stamp *st,
                      g4_sc_result *r) {
    g4_sc_params prm;
    g4_sc_params_default(&prm, q->dt);
    prm.seed = seed;
    return g4_sc_simulate(q, &prm, pf, mode, st, r);
}

// One stamped step of queues q (plan p; one jitter sequence: seed 0) at pf and mode: the stamps
// into st[q->n] (NULL: not wanted), *r the result, the path a layer seg[G4_TL_N] and *after the
// layers (g4_sc_path_layer). G4_OK or the first error.
static int stamped_path(const g4_step_plan *p, const g4_sq *q, int pf, int mode, g4_sq_stamp *st,
                        g4_sc_result *r, double *seg, double *after) {
    g4_sq_stamp *own = st ? NULL : g4_malloc(sizeof *own * (size_t)q->n), *s = st ? st : own;
    int rc = sim_queues(q, pf, mode, 0, s, r);
    if (!rc) rc = g4_sc_path_layer(p, q, s, 0, seg, after);
    free(own);
    return rc;
}

enum { SC_SEEDS = 3 }; // a plan's prediction: the mean over this many jitter sequences

typedef struct {
    int split, chunk, group, lm;
    double us[2];     // Q4, f16 at the G, pf and mode predicted: the mean over the seeds
    double spread[2]; // max - min over the seeds
    int n;
} ranked;

// a plan of options o, nothing predicted yet
static ranked unpredicted(sc_opts o) {
    return (ranked){o.split, o.chunk, o.group, o.lm, {0, 0}, {0, 0}, 0};
}

// (qsort's order by weight type dt's us: by_q4, by_f16)
static int by_us(const void *a, const void *b, int dt) {
    const double x = ((const ranked *)a)->us[dt], y = ((const ranked *)b)->us[dt];
    return (x > y) - (x < y);
}
static int by_q4(const void *a, const void *b) {
    return by_us(a, b, 0);
}
static int by_f16(const void *a, const void *b) {
    return by_us(a, b, 1);
}

// Queues q (e's plan) at pf and mode: e->us[q->dt] the mean over `seeds` jitter sequences,
// e->spread[q->dt] max - min, e->n its instructions. The queues are built once by the caller,
// not once a sequence (the sequences differ in the jitter alone). G4_OK or the simulation's error.
static int predict_queues(const g4_sq *q, ranked *e, int pf, int mode, unsigned seeds) {
    double lo = INFINITY, hi = 0, sum = 0;
    int rc = G4_OK;
    for (unsigned s = 0; s < seeds && !rc; s++) {
        g4_sc_result r = {0, 0, 0};
        rc = sim_queues(q, pf, mode, s, NULL, &r);
        sum += r.step_us, lo = fmin(lo, r.step_us), hi = fmax(hi, r.step_us);
    }
    e->n = q->n;
    if (!rc) e->us[q->dt] = sum / seeds, e->spread[q->dt] = hi - lo;
    return rc;
}

// Plan p (e's options) at G, pf, mode, weights dt: predict_queues on its queues. G4_OK or the
// first error.
static int predict_plan(const g4_step_plan *p, ranked *e, int G, int pf, int mode, int dt,
                        unsigned seeds) {
    g4_sq q;
    int rc = g4_sq_build(p, G, (g4_sq_dtype)dt, &q);
    if (rc) return rc;
    rc = predict_queues(&q, e, pf, mode, seeds);
    g4_sq_free(&q);
    return rc;
}

// The plan of e's options at G, pf=2, mode, weights Q4 (n_dt 1) or Q4 and f16 (n_dt 2): us[] and
// spread[] as predict_plan's. G4_OK, or the error; *refused (may be NULL) 1 when the plan builder
// refused the options (the error says why), 0 otherwise (a simulation's error is the model's own:
// not a refusal).
static int predict(ranked *e, int G, int mode, int n_dt, unsigned seeds, int *refused) {
    g4_step_plan p;
    int rc = e2b_plan(SC_OPTS(e), &p);
    if (refused) *refused = rc != G4_OK;
    for (int dt = 0; dt < n_dt && !rc; dt++) rc = predict_plan(&p, e, G, 2, mode, dt, seeds);
    g4_sp_free(&p);
    return rc;
}

static void print_params(FILE *out) {
    for (int dt = 0; dt < 2; dt++) {
        g4_sc_params m;
        g4_sc_params_default(&m, (g4_sq_dtype)dt);
        fprintf(out,
                "step-model params %s: dram %.0f GB/s, weights in rounds of %.0f bytes, %.2f us "
                "each at least, queue "
                "%.2f, wait met %.2f, hand-over %.2f, read %.2f + %.2f a region + bytes at %.0f "
                "(DRAM busy) / %.0f GB/s, write %.2f + %.2f a region + bytes at %.0f GB/s, launch "
                "%.1f us, a counter's red %.3f us, jitter %.2f; math (G4_SK_MATH) %.3f us a unit "
                "a warp, units in flight a warp %.0f, a re-read round %.3f us at least\n",
                dt ? "f16" : "q4", m.dram_gbs, m.w_round_bytes, m.w_lat_us, m.queue_us, m.wait_us,
                m.handover_us, m.rd_fix_us, m.rd_lat_us, m.rd_busy_gbs, m.rd_idle_gbs, m.wr_fix_us,
                m.wr_lat_us, m.wr_gbs, m.launch_us, m.red_us, m.jitter, m.math_unit_us, m.math_ring,
                m.math_lat_us);
    }
}

// |model / measured - 1| summed over rows, per weight type (the report's error line)
typedef struct {
    double abs_off[2], off[2];
    int n;
} off_sum;

static void add_off(off_sum *e, const double *model, const double *meas) {
    for (int dt = 0; dt < 2; dt++) {
        const double off = model[dt] / meas[dt] - 1;
        e->abs_off[dt] += fabs(off), e->off[dt] += off;
    }
    e->n++;
}

// "<title>, mean |off| (mean off): <what[0]> (n): Q4 a% (b%), f16 c% (d%); ..." over s[0 .. n)
static void print_offs(FILE *out, const char *title, const char *const *what, const off_sum *s,
                       int n) {
    fprintf(out, "%s, mean |off| (mean off):", title);
    for (int k = 0; k < n; k++)
        fprintf(out, "%s %s (%d): Q4 %.1f%% (%+.1f%%), f16 %.1f%% (%+.1f%%)", k ? ";" : "", what[k],
                s[k].n, 100 * s[k].abs_off[0] / s[k].n, 100 * s[k].off[0] / s[k].n,
                100 * s[k].abs_off[1] / s[k].n, 100 * s[k].off[1] / s[k].n);
    fprintf(out, "\n");
}

// The model-against-measured tables (the rows of sessions 30, 31 and 32): the header, its first
// column `first` w wide, and a row: name, then Q4's and f16's model, measured (us) and off.
static void print_row_head(FILE *out, int w, const char *first) {
    fprintf(out, "%-*s %9s %9s %7s %9s %9s %7s\n", w, first, "Q4 model", "measured", "off",
            "f16 model", "measured", "off");
}
static void print_row(FILE *out, int w, const char *name, const double *model, const double *meas) {
    fprintf(out, "%-*s %9.1f %9.1f %+6.1f%% %9.1f %9.1f %+6.1f%%\n", w, name, model[0], meas[0],
            100 * (model[0] / meas[0] - 1), model[1], meas[1], 100 * (model[1] / meas[1] - 1));
}

// "step-model path a layer, Q4 <what>: M / T: queue m/t ...": the model's path a layer seg
// against a timeline's t (us a segment; M and T their sums). The caller ends the line.
static void print_path_vs(FILE *out, const char *what, const double *seg, const double *t) {
    double sm = 0, stl = 0;
    for (int s = 0; s < G4_TL_N; s++) sm += seg[s], stl += t[s];
    fprintf(out, "step-model path a layer, Q4 %s: %.2f / %.2f:", what, sm, stl);
    for (int s = G4_TL_QUEUE; s < G4_TL_N; s++)
        fprintf(out, " %s %.2f/%.2f", g4_tl_seg_name(s), seg[s], t[s]);
}

// (0 in g4_sp_opts: the plan's default)
static int or_default(int v, int def) {
    return v ? v : def;
}

// The report's name of a plan of options o: "128/32/4/64", its defaults filled in.
typedef struct {
    char s[48];
} opts_name;
static opts_name name_of(sc_opts o) {
    opts_name n;
    snprintf(n.s, sizeof n.s, "%d/%d/%d/%d", o.split, or_default(o.chunk, 32),
             or_default(o.group, 4), or_default(o.lm, 64));
    return n;
}

// Model vs measured rows (their offs added to e), then the pf=2 / pf=0 Q4 path a layer against
// the timelines.
static int validate(FILE *out, off_sum *e) {
    g4_step_plan p;
    g4_sq q; // (the timelines' queues: Q4 at SC_G)
    int rc = e2b_queues((sc_opts){128, 0, 0, 0}, SC_G, G4_SQ_Q4, &p, &q);
    if (rc) return rc;
    fprintf(out,
            "step-model validation (E2B, %d keys, splits of 128; us a step, measured: H100, "
            "session 30):\n",
            SC_KEYS);
    print_row_head(out, 26, "row (G=660 unless said)");
    for (size_t k = 0; k < sizeof measured / sizeof measured[0] && !rc; k++) {
        const measured_row *m = &measured[k];
        ranked one = unpredicted((sc_opts){128, 0, 0, 0}); // (one jitter sequence: seed 0)
        for (int dt = 0; dt < 2 && !rc; dt++)
            rc = predict_plan(&p, &one, m->G, m->pf, m->mode, dt, 1);
        if (rc) break;
        const double meas[2] = {m->q4, m->f16};
        print_row(out, 26, m->name, one.us, meas);
        add_off(e, one.us, meas);
    }
    for (int v = 0; v < 2 && !rc; v++) {
        const int pf = v ? 0 : 2;
        g4_sc_result r;
        double seg[G4_TL_N], after = 0;
        if (!(rc = stamped_path(&p, &q, pf, 0, NULL, &r, seg, &after))) {
            char what[40];
            snprintf(what, sizeof what, "pf=%d (model / timeline, us)", pf);
            print_path_vs(out, what, seg, v ? tl_pf0 : tl_pf2);
            fprintf(out, "; after the layers %.1f us (timeline pf=2: 101.4)\n", after);
        }
    }
    e2b_free(&p, &q);
    return rc;
}

static void print_ranked(FILE *out, const char *tag, const ranked *e) {
    fprintf(out,
            "step-model %s split_keys %d chunk_tiles %d group_tiles %d lm_group_tiles %d: "
            "%d instructions, pf=2 G=%d: Q4 %.1f us (seeds within %.1f), f16 %.1f us (%.1f)\n",
            tag, e->split, or_default(e->chunk, 32), or_default(e->group, 4), or_default(e->lm, 64),
            e->n, SC_G, e->us[0], e->spread[0], e->us[1], e->spread[1]);
}

// (a and b the same plan: a default and its value alike)
static int same_opts(sc_opts a, sc_opts b) {
    return a.split == b.split && or_default(a.chunk, 32) == or_default(b.chunk, 32) &&
           or_default(a.group, 4) == or_default(b.group, 4) &&
           or_default(a.lm, 64) == or_default(b.lm, 64);
}

// The session-31 rows: model (the bench plan's prediction in bp[nb], the mean over SC_SEEDS
// jitter sequences, as its "bench plan" line) vs measured (the mean of the two runs), offs added
// to e; then each plan's Q4 pf=2 path (one sequence, stamped) against its timeline.
static int validate_plans(FILE *out, const ranked *bp, int nb, off_sum *e) {
    fprintf(out,
            "step-model validation, the bench's plans (E2B, %d keys, pf=2 G=%d; us a step; "
            "model: the mean of %d jitter sequences; measured: H100, session 31, the mean of its "
            "2 runs):\n",
            SC_KEYS, SC_G, SC_SEEDS);
    print_row_head(out, 26, "plan (split/chunk/grp/lm)");
    int rc = G4_OK;
    const int n_m = (int)(sizeof measured31 / sizeof measured31[0]);
    for (int k = 0; k < n_m && !rc; k++) {
        const measured_plan *m = &measured31[k];
        ranked r = unpredicted(SC_OPTS(m));
        int found = 0;
        for (int b = 0; b < nb && !found; b++)
            if (same_opts(SC_OPTS(&bp[b]), SC_OPTS(m))) r = bp[b], found = 1;
        // (a plan not in the bench's list: predicted here)
        if (!found && (rc = predict(&r, SC_G, 0, 2, SC_SEEDS, NULL))) break;
        const double meas[2] = {(m->q4[0] + m->q4[1]) / 2, (m->f16[0] + m->f16[1]) / 2};
        char name[64];
        snprintf(name, sizeof name, "plan %s", name_of(SC_OPTS(m)).s);
        print_row(out, 26, name, r.us, meas);
        add_off(e, r.us, meas);
    }
    for (int k = 0; k < n_m && !rc; k++) {
        const measured_plan *m = &measured31[k];
        g4_step_plan p;
        g4_sq q;
        if ((rc = e2b_queues(SC_OPTS(m), SC_G, G4_SQ_Q4, &p, &q))) break;
        g4_sc_result r;
        double seg[G4_TL_N], after = 0;
        if (!(rc = stamped_path(&p, &q, 2, 0, NULL, &r, seg, &after))) {
            char what[96];
            snprintf(what, sizeof what, "pf=2 plan %s (model / timeline, session 31, us)",
                     name_of(SC_OPTS(m)).s);
            print_path_vs(out, what, seg, m->tl);
            fprintf(out, "; after the layers %.1f / %.1f us\n", after, m->after);
        }
        e2b_free(&p, &q);
    }
    return rc;
}

// The session-32 rows (H100, bench/runs/2026-12-06-s32-call1-stepskel-logs.tar.gz
// logs/stepskel.out/stepskel_{1,2}.txt, the "stepskel E2B ... G=528 ..." lines): the bench's math
// plans (api/bench_stepskel.c, math = 1) at G = 528, pf=2: plain, math, math held; us a step of
// each of the two runs (the model is checked against their mean).
typedef struct {
    int split, chunk, group, lm, mode;
    double q4[2], f16[2]; // runs 1 and 2
} math_row;
enum { MH = G4_SK_MATH | G4_SK_MATH_HELD };
// clang-format off
static const math_row math_rows[] = {
    {128, 0, 0, 0, 0, {1271.3, 1275.5}, {1909.6, 1907.6}},
    {128, 0, 0, 0, G4_SK_MATH, {3151.1, 3161.4}, {5407.0, 5397.3}},
    {128, 0, 0, 0, MH, {1987.2, 2012.4}, {3442.3, 3417.9}},
    {64, 128, 8, 128, 0, {932.3, 939.6}, {1645.2, 1639.8}},
    {64, 128, 8, 128, G4_SK_MATH, {4738.0, 4727.1}, {7691.8, 7701.4}},
    {64, 128, 8, 128, MH, {2347.2, 2347.4}, {3624.4, 3621.3}},
    {64, 128, 2, 64, 0, {1150.9, 1151.2}, {1822.2, 1814.7}},
    {64, 128, 2, 64, G4_SK_MATH, {2330.4, 2330.9}, {4289.6, 4284.1}},
    {64, 128, 2, 64, MH, {1589.8, 1592.8}, {3086.4, 3031.6}},
};
// clang-format on

static const char *mode_name(int mode) {
    return !mode ? "" : (mode & G4_SK_MATH_HELD) ? " math held ub" : " math";
}

// An instruction's op (kind, weight) as an index into a table by op of SC_OPS entries, kind-major
// (a walk in index order goes by kind, then weight; op_kind and op_weight give them back), or -1
// for one outside g4_sp_kind x g4_sp_weight.
enum { SC_OPS = G4_SP_N_KINDS * G4_SW_N };
static int op_index(const g4_sp_instr *pi) {
    return pi->kind < G4_SP_N_KINDS && pi->weight < G4_SW_N ? pi->kind * G4_SW_N + pi->weight : -1;
}
static int op_kind(int op) {
    return op / G4_SW_N;
}
static int op_weight(int op) {
    return op % G4_SW_N;
}

// The path's weight units of queues q (plan p): an op's math runs after its wait, so the path
// carries one instruction's an op: the op's largest (units of its weight runs), summed over the
// ops (layer, kind, weight) of the step. Into *units the step's, *lm the LM head's (after the
// layers).
static void path_units(const g4_step_plan *p, const g4_sq *q, double *units, double *lm) {
    const int n_groups = (p->n_layers + 2) * SC_OPS; // (before the layers, each, after)
    int *top = g4_calloc((size_t)n_groups, sizeof(int));
    for (int k = 0; k < q->n; k++) {
        const g4_sq_instr *in = &q->ins[k];
        const g4_sp_instr *pi = &p->ins[in->id];
        const int op = op_index(pi);
        if (in->w_runs <= 0 || in->w_run <= 0 || op < 0) continue;
        const int u = in->w_runs * skm_units_a_run(q->dt, in->w_run);
        const int g = (pi->layer + 1) * SC_OPS + op;
        if (u > top[g]) top[g] = u;
    }
    *units = 0, *lm = 0;
    for (int g = 0; g < n_groups; g++) {
        *units += top[g];
        if (g / SC_OPS == p->n_layers + 1) *lm += top[g];
    }
    free(top);
}

// The bench's math rows (G4_SK_MATH at G 528) against session 32's, their mean |off| by kind
// (plain, math, held) and over all, then each plan's per-unit facts: (held - plain) and (math -
// held) a path unit and warp (x 8 warps / path units), the model's and the H100's, against
// math_unit_us and math_lat_us.
static int report_math_rows(FILE *out) {
    fprintf(out,
            "step-model math rows (E2B, %d keys, pf=2 G=%d; us a step; model: the mean of %d "
            "jitter sequences; measured: H100, session 32, the mean of its 2 runs):\n",
            SC_KEYS, SC_G_MATH, SC_SEEDS);
    print_row_head(out, 34, "row (split/chunk/grp/lm)");
    enum { NR = sizeof math_rows / sizeof math_rows[0] };
    double model[NR][2], meas[NR][2];
    off_sum e[4]; // plain, math, held (the rows come in that order), all
    memset(e, 0, sizeof e);
    int rc = G4_OK;
    for (int k = 0; k < NR && !rc; k++) {
        const math_row *m = &math_rows[k];
        ranked r = unpredicted(SC_OPTS(m));
        if ((rc = predict(&r, SC_G_MATH, m->mode, 2, SC_SEEDS, NULL))) break;
        char name[80];
        snprintf(name, sizeof name, "s32 plan %s%s", name_of(SC_OPTS(m)).s, mode_name(m->mode));
        for (int dt = 0; dt < 2; dt++) {
            model[k][dt] = r.us[dt];
            meas[k][dt] = dt ? (m->f16[0] + m->f16[1]) / 2 : (m->q4[0] + m->q4[1]) / 2;
        }
        print_row(out, 34, name, model[k], meas[k]);
        add_off(&e[k % 3], model[k], meas[k]);
        add_off(&e[3], model[k], meas[k]);
    }
    if (!rc) {
        static const char *const what[4] = {"plain", "math", "math held ub", "all"};
        print_offs(out, "step-model math rows error", what, e, 4);
    }
    // (the rows come in threes: plain, math, held)
    for (int k = 0; k + 2 < NR && !rc; k += 3) {
        const math_row *m = &math_rows[k];
        g4_step_plan p;
        g4_sq q;
        if ((rc = e2b_queues(SC_OPTS(m), SC_G_MATH, G4_SQ_Q4, &p, &q))) break;
        double u = 0, lm = 0;
        path_units(&p, &q, &u, &lm);
        fprintf(out,
                "step-model math a path unit, plan %s (%.1f units a layer + the LM head's %.0f: "
                "%.0f a step; us a unit a warp, model / H100):",
                name_of(SC_OPTS(m)).s, (u - lm) / p.n_layers, lm, u);
        for (int dt = 0; dt < 2; dt++) {
            g4_sc_params d;
            g4_sc_params_default(&d, (g4_sq_dtype)dt);
            const double f = SKM_WARPS / u;
            fprintf(out,
                    "%s %s arithmetic (held - plain) %.3f / %.3f (unit %.3f), re-read (math - "
                    "held) %.3f / %.3f (round %.3f)",
                    dt ? ";" : "", dt ? "f16" : "Q4", f * (model[k + 2][dt] - model[k][dt]),
                    f * (meas[k + 2][dt] - meas[k][dt]), d.math_unit_us,
                    f * (model[k + 1][dt] - model[k + 2][dt]),
                    f * (meas[k + 1][dt] - meas[k + 2][dt]), d.math_lat_us);
        }
        fprintf(out, "\n");
        e2b_free(&p, &q);
    }
    // the bench's math plans (engine/step_queue.h g4_sp_bench_plans, math = 1) with no row above
    for (int k = 0; k < g4_sp_n_bench_plans && !rc; k++) {
        const g4_sp_bench_plan *b = &g4_sp_bench_plans[k];
        int measured_math = 0;
        for (int i = 0; i < NR && !measured_math; i++)
            measured_math = same_opts(SC_OPTS(b), SC_OPTS(&math_rows[i]));
        if (!b->math || measured_math) continue;
        static const int modes[3] = {0, G4_SK_MATH, MH};
        double u[3][2];
        for (int i = 0; i < 3 && !rc; i++) {
            ranked r = unpredicted(SC_OPTS(b));
            rc = predict(&r, SC_G_MATH, modes[i], 2, SC_SEEDS, NULL);
            u[i][0] = r.us[0], u[i][1] = r.us[1];
        }
        if (!rc)
            fprintf(out,
                    "step-model math plan %s (not measured), pf=2 G=%d, us a step: Q4 %.1f, math "
                    "%.1f, math held ub %.1f; f16 %.1f, math %.1f, math held ub %.1f\n",
                    name_of(SC_OPTS(b)).s, SC_G_MATH, u[0][0], u[1][0], u[2][0], u[0][1], u[1][1],
                    u[2][1]);
    }
    return rc;
}

// A grid's axes: split keys, down chunk tiles, GEMV group tiles, LM group tiles.
typedef struct {
    const int *v[4];
    int n[4];
} grid_axes;

// Every plan of the grid with one jitter sequence into all[0 .. *n): Q4 and f16 at SC_G
// (mode 0), or Q4 alone at G under `mode`. A value the plan builder refuses is skipped and
// counted; the first is named in why.
static int grid_sweep(const grid_axes *ax, int G, int mode, ranked *all, int *n, int *refused,
                      char *why, size_t why_n) {
    int rc = G4_OK;
    for (int a = 0; a < ax->n[0] && !rc; a++)
        for (int b = 0; b < ax->n[1] && !rc; b++)
            for (int g = 0; g < ax->n[2] && !rc; g++)
                for (int l = 0; l < ax->n[3] && !rc; l++) {
                    ranked e =
                        unpredicted((sc_opts){ax->v[0][a], ax->v[1][b], ax->v[2][g], ax->v[3][l]});
                    int ref = 0;
                    rc = predict(&e, G, mode, mode ? 1 : 2, 1, &ref);
                    if (rc && ref) { // (a value the plan builder refuses: skipped, the first said)
                        if (!(*refused)++)
                            snprintf(why, why_n, " (the first: %d/%d/%d/%d: %s)", e.split, e.chunk,
                                     e.group, e.lm, g4_error());
                        rc = G4_OK;
                        continue;
                    }
                    if (!rc) all[(*n)++] = e;
                }
    return rc;
}

// "split_keys 128 64 32, chunk_tiles ..., group_tiles ..., lm_group_tiles ...: N plans
// simulated, R refused by the plan builder[ (the first: ...)]"
static void print_grid(FILE *out, const grid_axes *ax, int n, int refused, const char *why) {
    static const char *name[4] = {"split_keys", "chunk_tiles", "group_tiles", "lm_group_tiles"};
    for (int i = 0; i < 4; i++) {
        fprintf(out, "%s%s", i ? ", " : "", name[i]);
        for (int k = 0; k < ax->n[i]; k++) fprintf(out, " %d", ax->v[i][k]);
    }
    fprintf(out, ": %d plans simulated, %d refused by the plan builder%s\n", n, refused, why);
}

// The best `top` of the grid's all[0 .. n) (one jitter sequence each) by weights dt: all sorted
// by it, the first min(top, n) into best[0 .. *k_n), each rerun with SC_SEEDS (at G under mode,
// Q4 alone under a mode, as grid_sweep's) and ranked again by their mean.
static int rerank(ranked *all, int n, int top, int G, int mode, int dt, ranked *best, int *k_n) {
    int (*by)(const void *, const void *) = dt ? by_f16 : by_q4;
    qsort(all, (size_t)n, sizeof *all, by);
    *k_n = top < n ? top : n;
    int rc = G4_OK;
    for (int k = 0; k < *k_n && !rc; k++) {
        best[k] = all[k];
        rc = predict(&best[k], G, mode, mode ? 1 : 2, SC_SEEDS, NULL);
    }
    if (!rc) qsort(best, (size_t)*k_n, sizeof *best, by);
    return rc;
}

// A held-words design (the pre-wait stream's words kept in shared memory until the math after
// the wait: G4_SK_MATH_HELD's upper bound made real) keeps a CTA's largest instruction's weight
// bytes; a CTA has, at SC_G_MATH / 132 = 4 CTAs an SM, H100 / H200's 228 KB an SM less 1 KB the
// system reserves a CTA, shared: 56 KB (the skeleton itself uses none; a real kernel's x staging
// would come off this).
enum { SC_SMEM_SM = 228 * 1024, SC_SMEM_RESERVED = 1024, SC_SMS = 132 };

typedef struct {
    // the largest instruction's weight bytes, kind and weight; the largest not the LM head's
    double bytes, bytes_nolm;
    int kind, weight, kind_nolm, weight_nolm;
    int per_sm; // CTAs an SM at the queues' G
    double cta; // a CTA's shared memory (bytes)
    int fits;   // 1: the largest fits
} held_need;

// The held-words need of plan p's Q4 queues q (at q->G) against a CTA's shared memory.
static void held_need_of(const g4_step_plan *p, const g4_sq *q, held_need *h) {
    memset(h, 0, sizeof *h);
    for (int k = 0; k < q->n; k++) {
        const g4_sq_instr *in = &q->ins[k];
        const g4_sp_instr *pi = &p->ins[in->id];
        const double b = (double)in->w_runs * in->w_run;
        if (b > h->bytes) h->bytes = b, h->kind = pi->kind, h->weight = pi->weight;
        if (pi->layer < p->n_layers && b > h->bytes_nolm)
            h->bytes_nolm = b, h->kind_nolm = pi->kind, h->weight_nolm = pi->weight;
    }
    h->per_sm = (q->G + SC_SMS - 1) / SC_SMS;
    h->cta = (double)(SC_SMEM_SM - h->per_sm * SC_SMEM_RESERVED) / h->per_sm;
    h->fits = h->bytes <= h->cta;
}

// "held words: ...": the largest instruction of h against a CTA's shared memory.
static void print_held_need(FILE *out, const held_need *h) {
    fprintf(out,
            "  held words: largest instruction %s %s %.0f tiles = %.1f KB, the largest before the "
            "LM head %s %s %.1f KB; shared memory a CTA at %d an SM %.1f KB: %s\n",
            g4_sp_kind_name(h->kind), g4_sp_weight_name(h->weight), h->bytes / SKM_Q4_TILE,
            h->bytes / 1024, g4_sp_kind_name(h->kind_nolm), g4_sp_weight_name(h->weight_nolm),
            h->bytes_nolm / 1024, h->per_sm, h->cta / 1024,
            h->fits                   ? "fits"
            : h->bytes_nolm <= h->cta ? "the LM head does not fit"
                                      : "does not fit");
}

// Where the us of plan p's Q4 held step go (queues q at SC_G_MATH; one jitter sequence, stamped):
// the path a layer by segment, the math on it (the path's instructions' math segments, out of the
// write segment where the stamps put it) and after the layers.
static int print_held_path(FILE *out, const g4_step_plan *p, const g4_sq *q) {
    g4_sq_stamp *st = g4_malloc(sizeof *st * (size_t)q->n);
    g4_tl_node *path = g4_malloc(sizeof *path * (size_t)q->n);
    int *at = g4_malloc(sizeof(int) * (size_t)q->n); // plan index -> queue index
    g4_sc_params prm;
    g4_sc_params_default(&prm, G4_SQ_Q4);
    g4_sc_result r;
    double seg[G4_TL_N], after = 0;
    int n = 0;
    int rc = stamped_path(p, q, 2, MH, st, &r, seg, &after);
    if (!rc) rc = g4_tl_path(q, st, 0, path, &n);
    if (!rc) {
        for (int k = 0; k < q->n; k++) at[q->ins[k].id] = k;
        double m_layers = 0, m_after = 0, sum = 0;
        int n_layer = 0;
        // by op (kind, weight) over the layers: the path's instructions, us of each segment
        // (the write less the math), the math
        double(*by)[G4_TL_N + 2] = g4_calloc(SC_OPS, sizeof *by);
        for (int j = 0; j < n; j++) {
            const g4_sq_instr *in = &q->ins[at[path[j].ins]];
            const g4_sp_instr *pi = &p->ins[path[j].ins];
            const double mu = math_us(in, G4_SQ_Q4, &prm, 1, 0);
            if (pi->layer >= 0 && pi->layer < p->n_layers) {
                m_layers += mu, n_layer++;
                const int op = op_index(pi);
                if (op >= 0) {
                    double *b = by[op];
                    for (int s = 0; s < G4_TL_N; s++) b[s] += path[j].seg[s] / 1e3;
                    b[G4_TL_WRITE] -= mu, b[G4_TL_N] += mu, b[G4_TL_N + 1]++;
                }
            } else if (pi->layer >= p->n_layers) {
                m_after += mu;
            }
        }
        for (int s = 0; s < G4_TL_N; s++) sum += seg[s];
        const double m = m_layers / p->n_layers;
        fprintf(out, "  held path (one sequence: %.1f us): a layer %.2f us (%.1f instructions):",
                r.step_us, sum, (double)n_layer / p->n_layers);
        for (int s = G4_TL_QUEUE; s < G4_TL_N; s++)
            fprintf(out, " %s %.2f", g4_tl_seg_name(s), s == G4_TL_WRITE ? seg[s] - m : seg[s]);
        fprintf(out, " math %.2f; after the layers %.1f us (math %.1f)\n", m, after, m_after);
        fprintf(out, "  held path a layer by op (us; on the path a layer):");
        for (int g = 0; g < SC_OPS; g++) {
            const double *b = by[g];
            if (b[G4_TL_N + 1] == 0) continue;
            double t = b[G4_TL_N];
            for (int s = 0; s < G4_TL_N; s++) t += b[s];
            fprintf(out, " %s %s (%.2f) %.2f: handover %.2f read %.2f write %.2f math %.2f;",
                    g4_sp_kind_name(op_kind(g)), g4_sp_weight_name(op_weight(g)),
                    b[G4_TL_N + 1] / p->n_layers, t / p->n_layers, b[G4_TL_HANDOVER] / p->n_layers,
                    b[G4_TL_READ] / p->n_layers, b[G4_TL_WRITE] / p->n_layers,
                    b[G4_TL_N] / p->n_layers);
        }
        fprintf(out, "\n");
        free(by);
    }
    free(st), free(path), free(at);
    return rc;
}

// The Q4 + G4_SK_MATH | MATH_HELD ranking (pf=2, G = 528): the held-words design's upper bound
// (the arithmetic after the wait, no re-read) over finer path grain than the no-math grid's:
// GEMV groups of 1-4 tiles, down K chunks of 512-2,048 features (32-128 tiles), LM groups of
// 2-64 rows (4: the largest whose held words, 96 tiles, fit 56 KB), splits of 128 / 64 keys. The
// best `top`, each rerun with SC_SEEDS, with each one's shared-memory need (print_held_need); the
// best that fits if none of them does; the paths (print_held_path) of the best and of each that
// fits. (The loaded math's ranking, branch skmodelmath's, is gone: session 32 measured that design
// past the skmath rule's stop.)
static int report_held_grid(FILE *out, int top) {
    static const int splits[] = {128, 64}, chunks[] = {32, 64, 128}, groups[] = {1, 2, 4},
                     lms[] = {2, 4, 16, 64};
    enum { NS = sizeof splits / sizeof splits[0], NC = sizeof chunks / sizeof chunks[0] };
    enum { NG = sizeof groups / sizeof groups[0], NL = sizeof lms / sizeof lms[0] };
    ranked *all = g4_calloc(NS * NC * NG * NL, sizeof *all);
    ranked *best = g4_calloc((size_t)top, sizeof *best);
    int n = 0, refused = 0, k_n = 0;
    char why[256] = "";
    const grid_axes ax = {{splits, chunks, groups, lms}, {NS, NC, NG, NL}};
    int rc = grid_sweep(&ax, SC_G_MATH, MH, all, &n, &refused, why, sizeof why);
    if (!rc) {
        fprintf(out, "step-model held grid (Q4, pf=2 math held ub, G=%d): ", SC_G_MATH);
        print_grid(out, &ax, n, refused, why);
        rc = rerank(all, n, top, SC_G_MATH, MH, 0, best, &k_n);
    }
    // the best k_n (rerun); past them, while none of those fits, all[k] by one sequence: the
    // first that fits, rerun with SC_SEEDS and printed the same way (with its place)
    int any_fits = 0;
    for (int k = 0; k < n && (k < k_n || !any_fits) && !rc; k++) {
        const int rerun = k < k_n;
        ranked e = rerun ? best[k] : all[k];
        g4_step_plan p;
        g4_sq q;
        if ((rc = e2b_queues(SC_OPTS(&e), SC_G_MATH, G4_SQ_Q4, &p, &q))) break;
        held_need h;
        held_need_of(&p, &q, &h);
        const int shown = rerun || h.fits; // (past the best: the first that fits alone)
        if (shown && !rerun) rc = predict_queues(&q, &e, 2, MH, SC_SEEDS);
        if (shown && !rc) {
            char place[64] = "";
            if (!rerun) snprintf(place, sizeof place, "; %d of %d by one sequence", k + 1, n);
            fprintf(out,
                    "step-model best q4 held%s split_keys %d chunk_tiles %d group_tiles %d "
                    "lm_group_tiles %d: %d instructions, pf=2 math held ub G=%d: Q4 %.1f us "
                    "(seeds within %.1f%s)\n",
                    rerun ? "" : " that fits", e.split, e.chunk, e.group, e.lm, e.n, SC_G_MATH,
                    e.us[0], e.spread[0], place);
            print_held_need(out, &h);
            // (the path of the best, and of each that fits)
            if (k == 0 || h.fits) rc = print_held_path(out, &p, &q);
            any_fits |= h.fits;
        }
        e2b_free(&p, &q);
    }
    free(all), free(best);
    return rc;
}

// The grid's axes (split keys, chunk tiles, group tiles, LM group tiles). Past the session-30
// grid's edge (chunk 128, group 8, LM 128 were its largest and its best): down K chunks up to the
// whole K of the down GEMV (half, all of the narrow layers' ffn, all of the wide layers'; from
// the shape, in 16-feature tiles), GEMV groups of 16 and 32 tiles (a sliding / a full layer's
// head: the builder cuts q|k|v groups at a head, so past 32 only o, gate|up, down and the PLE
// GEMVs would grow) and LM groups of 256. Pruned, dominated on the full 288-plan grid (one
// sequence, branch skgrid, bench/NOTES.md "The cost model past its grid's edge"): GEMV groups
// of 4 (its best 1,031 us Q4, 76th; and the slowest to simulate, up to 25,000 instructions) and
// LM groups of 512 (its best 1,035 us, 90th; f16 +50%): 162 plans, ~30 s on 2 cores.
enum { GRID_CHUNKS = 6 };
static void grid_chunks(int *chunks) {
    const g4_sp_shape *sh = &g4_sp_shape_e2b;
    const int base[3] = {32, 64, 128};
    for (int k = 0; k < 3; k++) chunks[k] = base[k];
    chunks[3] = sh->ffn / 16 / 2, chunks[4] = sh->ffn / 16, chunks[5] = sh->ffn_shared / 16;
}

int g4_sc_report(FILE *out, int grid, int top) {
    if (!out) return g4_fail(G4_EUSER, "step model: no output");
    if (top < 1) return g4_fail(G4_EUSER, "step model: top %d: expected 1 or more", top);
    print_params(out);
    off_sum e30 = {{0, 0}, {0, 0}, 0}, e31 = {{0, 0}, {0, 0}, 0};
    int rc = validate(out, &e30);
    if (rc) return rc;
    // the bench's plans (engine/step_queue.h g4_sp_bench_plans: the list it runs)
    const int nb = g4_sp_n_bench_plans;
    ranked *bp = g4_calloc((size_t)nb, sizeof *bp);
    for (int k = 0; k < nb && !rc; k++) {
        const g4_sp_bench_plan *b = &g4_sp_bench_plans[k];
        bp[k] = unpredicted(SC_OPTS(b));
        rc = predict(&bp[k], SC_G, 0, 2, SC_SEEDS, NULL);
    }
    if (!rc) rc = validate_plans(out, bp, nb, &e31);
    if (!rc) {
        const off_sum s[3] = {e30,
                              e31,
                              {{e30.abs_off[0] + e31.abs_off[0], e30.abs_off[1] + e31.abs_off[1]},
                               {e30.off[0] + e31.off[0], e30.off[1] + e31.off[1]},
                               e30.n + e31.n}};
        static const char *const what[3] = {"session 30's rows", "session 31's plans", "all rows"};
        print_offs(out, "step-model validation error", what, s, 3);
    }
    for (int k = 0; k < nb && !rc; k++) print_ranked(out, "bench plan", &bp[k]);
    free(bp);
    if (rc || (rc = report_math_rows(out))) return rc;
    if (!grid) return G4_OK;
    if ((rc = report_held_grid(out, top))) return rc;
    // (one jitter sequence a plan; the best are rerun with SC_SEEDS)
    static const int splits[] = {128, 64, 32}, groups[] = {8, 16, 32}, lms[] = {64, 128, 256};
    int chunks[GRID_CHUNKS];
    grid_chunks(chunks);
    enum { NS = sizeof splits / sizeof splits[0], NG = sizeof groups / sizeof groups[0] };
    enum { NL = sizeof lms / sizeof lms[0] };
    const int n_max = NS * GRID_CHUNKS * NG * NL;
    ranked *all = g4_calloc(n_max, sizeof *all);
    int n = 0, refused = 0;
    char why[256] = "";
    const grid_axes ax = {{splits, chunks, groups, lms}, {NS, GRID_CHUNKS, NG, NL}};
    rc = grid_sweep(&ax, SC_G, 0, all, &n, &refused, why, sizeof why);
    if (rc) {
        free(all);
        return rc;
    }
    fprintf(out, "step-model grid: ");
    print_grid(out, &ax, n, refused, why);
    ranked *best = g4_calloc((size_t)top, sizeof *best);
    for (int dt = 0; dt < 2 && !rc; dt++) {
        int k_n = 0;
        rc = rerank(all, n, top, SC_G, 0, dt, best, &k_n);
        for (int k = 0; k < k_n && !rc; k++)
            print_ranked(out, dt ? "best f16" : "best q4", &best[k]);
    }
    free(all), free(best);
    return rc;
}
