// step_cost.h: a CPU cost model of the persistent step skeleton (kernels/step_skeleton.cuh,
// issue 30): a discrete-event simulation of the per-CTA queues of engine/step_queue.h (the same
// rule: instruction i on CTA i % G, plan order), each instruction's segments costed as the
// session-30 stamped timeline measured them (bench/NOTES.md "A CPU cost model of the skeleton's
// step"). Host C only; checked by tests/test_step_cost.c on hand-made queues.
//
// One instruction on its CTA, the segments of engine/step_timeline.h:
//   queue   the loop's own bookkeeping before it begins                   queue_us
//   w_pre   (pf 2) its weights in rounds (below)
//   wait    waits met when polled: wait_us; else the last signal it needs + handover_us
//   w_post  (pf 0) its weights as w_pre, after the wait
//   read    rd_fix_us + rd_lat_us a region read + bytes read at rd_busy_gbs (DRAM saturated
//           when the read begins: the bytes the streams have in flight take longer than
//           w_lat_us to serve) or rd_idle_gbs
//   write   wr_fix_us (barrier + signal) + wr_lat_us a region written + bytes at wr_gbs; the
//           signal then waits for its counter's line: one red at a time, red_us each
// The weight streams: rounds of at most w_round_bytes in flight (one range, or run by run when
// the runs are strided, as the kernel streams), each round taking the latency of the moment:
// max(w_lat_us, the bytes all streaming CTAs have in flight / dram_gbs) (Little's law: DRAM
// shared as a fluid). Activation reads and writes take no DRAM share (L2 hits: other CTAs wrote
// them during the step). The step ends at the last signal, + launch_us. Every timed segment
// (not the streams) carries `jitter` (below).
// Ablations (G4_SK_*): NO_WAIT: every wait costs wait_us (the barrier), counters not looked at;
// NO_ACT: reads cost rd_fix_us and writes wr_fix_us; NO_WEIGHTS: no stream, no w_lat_us.
//   math    (G4_SK_MATH, between read and write, as the kernel runs it; stamped inside the write
//           segment, where the kernel's stamps put it) a weight-carrying instruction's busiest
//           warp (kernels/step_skel_math.h's walk: warp 0, skm_warp_units of the instruction's
//           units) issues k units at math_unit_us each; without G4_SK_MATH_HELD it also re-reads
//           its units, math_ring a warp in flight, each ring a round at the re-read's latency of
//           the moment (max(math_lat_us, in flight / dram_gbs); the re-read's own bytes are not
//           added to DRAM's load): ring > 1 (loads ahead of the math) max(k x unit, ceil(k /
//           ring) x lat); ring 1 (each unit waits its load: both kernels' walks as built, the
//           SASS says, step_cost.c) k x (unit + lat). Held: k x unit alone. The math segment
//           carries no jitter (issue-bound: the same instructions every time; step_cost.c).
// Not modelled: pf 1 (the L2 prefetch), pf 3, ACT8 (measured as no change), the stamps' cost,
// the math of the instructions' other warps (fewer units than warp 0's, hidden behind it).
#ifndef G4_STEP_COST_H
#define G4_STEP_COST_H

#include <stdio.h>

#include "engine/step_plan.h"
#include "kernels/step_skel_queues.h"

typedef struct {
    double dram_gbs;      // DRAM bandwidth the weight streams share (GB/s)
    double w_round_bytes; // a CTA's weight bytes in flight a round (the kernel's loads)
    double w_lat_us;      // a round's latency with DRAM not saturated
    double queue_us;      // the loop's own cost before an instruction begins
    double wait_us;       // a wait found met (polls + CTA barrier)
    double handover_us;   // a needed signal to the waiter's wait end
    double rd_fix_us;     // the read segment's barrier (also with no activation traffic)
    double rd_lat_us;     // a region read's latency
    double rd_busy_gbs;   // one CTA's activation read rate while DRAM is saturated (GB/s)
    double rd_idle_gbs;   // ... while it is not (GB/s)
    double wr_fix_us;     // the write segment's barrier and signal (also with no traffic)
    double wr_lat_us;     // a region written's latency
    double wr_gbs;        // one CTA's write rate (GB/s)
    double launch_us;     // the launch's own, added to the last signal
    double red_us;        // a counter's line takes one red at a time, for this long: the
                          // signalers of one counter queue (the down's 288 a layer)
    double jitter;        // 0 .. 1: the share of each timed segment (not the streams) drawn from
                          // an exponential of the same mean (seeded: the same every run), so
                          // that the last of a wide set, which the path follows, has a tail
    unsigned seed;        // the jitter's sequence (0 in the calibration)
    double math_unit_us;  // G4_SK_MATH: a warp's issue of one unit (a Q4 tile, an f16 2 KB step)
    double math_ring;     // G4_SK_MATH: units a warp has in flight (its re-read's round)
    double math_lat_us;   // G4_SK_MATH: a re-read round's latency with DRAM not saturated
} g4_sc_params;

// The session-30 calibration for weights as dt (G4_SQ_Q4 / G4_SQ_F16: only dram_gbs differs, the
// stream row of each); where each value comes from is in step_cost.c.
void g4_sc_params_default(g4_sc_params *p, g4_sq_dtype dt);
// G4_OK, or a user error naming the first field that is not finite, negative, or (rates) zero.
int g4_sc_params_check(const g4_sc_params *p);

typedef struct {
    double step_us;      // the last signal + launch_us
    double stream_share; // the time-mean of streaming CTAs x their rate / dram_gbs (0 .. 1)
    int blocked;         // waits that found a counter short
} g4_sc_result;

// Simulates one step of the queues q (counters from 0; targets of step 0) with prefetch form pf
// (0: weights after the wait, 2: before it) and ablation mode (G4_SK_NO_WAIT | NO_ACT |
// NO_WEIGHTS | MATH | MATH_HELD; HELD only with MATH; the units of q->dt). The caller builds q
// for the G the kernel runs: G4_SK_MATH's kernel fits 4 CTAs an SM (G 528 on 132 SMs). st (NULL:
// not wanted): [q->n] the stamps a stamped step would have (ns from 1 us, by plan index, cta set)
// for engine/step_timeline.h. G4_OK, or a user error: bad parameters, pf or mode, or a wait never
// met (the instruction named).
int g4_sc_simulate(const g4_sq *q, const g4_sc_params *p, int pf, int mode, g4_sq_stamp *st,
                   g4_sc_result *r);

// The critical path a layer (mean over layers 0 .. n_layers - 1) of stamps st: seg[G4_TL_N] us
// (engine/step_timeline.h's segments) and *after the path after the layers (us). G4_OK or
// g4_tl_path's error.
int g4_sc_path_layer(const g4_step_plan *p, const g4_sq *q, const g4_sq_stamp *st, int ignore_waits,
                     double *seg, double *after);

// The model's report (bench/NOTES.md quotes it): the calibration, model vs measured for the
// session-30 rows on E2B (Q4 and f16), the pf=2 path a layer against the timeline's; the
// session-31 rows (the bench's plans as measured) and each one's path against its timeline; the
// mean error of each set; then the bench's plans and a grid of g4_sp_opts (split_keys,
// chunk_tiles, group_tiles, lm_group_tiles) ranked by the predicted pf=2 step, the best `top` of
// each weight type; the bench's math rows (G4_SK_MATH at G 528: plain, math, math held, Q4 and
// f16) against session 32's H100 rows, each plan's per-unit facts, the rows of the bench's math
// plans with none measured (g4_sp_bench_plans, math 1); and (grid) a Q4 MATH | MATH_HELD ranking
// of finer grain (split keys 128 / 64, down chunks of 32-128 tiles, groups of 1-4, LM groups of
// 2-64), its best `top` with the shared memory a held-words design needs, and the paths of the
// best and of each that fits. grid 0: the bench's plans only (~45 s; the grids: 72 held plans,
// then 162, ~2 min on 2 cores; a value the plan builder refuses is skipped and counted). G4_OK or
// the first error.
int g4_sc_report(FILE *out, int grid, int top);

#endif
