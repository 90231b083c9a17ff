// step_queue.h: a step plan (engine/step_plan.h) dealt out as per-CTA static queues of compact
// records, the form a persistent kernel reads (kernels/step_skeleton.cu, issue 30's "floor of the
// design"); host code only, checked on the CPU by tests/test_step_plan.c.
//
// The rule: instruction i of the plan goes to CTA i % G (round robin), and each queue keeps the
// plan's order. Why this cannot deadlock when all G CTAs are co-resident: g4_sq_build refuses a
// plan in which a wait's counter has a signaler at or after the waiter in the list, so every
// wait points backwards. Take the first instruction i* (in plan order) not yet finished: all the
// signalers of its counters come before it, so they finished and its waits are met; every
// instruction before it in its CTA's queue comes before it in the plan, so finished too, so that
// CTA is at i* and runs it. Some instruction always progresses: the step ends. (With a CTA not
// resident, its queue's first instruction may never start while others spin on it: hence the
// kernel launches exactly the occupancy API's count, no more.)
//
// Steps: one launch a step; counters are never reset. A counter's value after s whole steps is
// s x its signals a step, so a wait of step s (the launch's epoch, in device memory) is for
// s x wait_step + wait_tgt: the plan's targets, grown by one step's count each step.
//
// Weights: each (layer, weight) matrix of the plan laid out as the GEMV kernels' repacked tiles
// (16 output features a tile row, its K contiguous in the row): Q4 592 bytes a 16 x 64 tile
// (512 of 4-bit codes, 64 of fp16 scales, 16 of zero points: the package's `_Q4` [N, K/32, 16],
// `_scales` [N K/32] and `_zero_point` [N K/64] bytes), f16 32 bytes a 16 x 1 column. A GEMV
// instruction streams its tile rows' K range: w_runs runs of w_run bytes, w_stride apart (gate|up
// has two matrices: a tile row holds both). Activations: one arena holding every plan buffer
// (each from a 128-byte line; fp32 or fp16 elements as the engine keeps that buffer), the
// instruction's regions read and written as the plan gives, rounded out to 16 bytes.
#ifndef G4_STEP_QUEUE_H
#define G4_STEP_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/step_plan.h"
#include "kernels/step_skel_queues.h"
#include "loader/model_config.h"

// Queues of plan p for G CTAs, weights as dt. G4_OK, or a user error naming the instruction
// whose wait does not point backwards (or the bad G). Instructions without a feature and K range
// (non-GEMVs, and the kernel plan's whole-op instructions) stream no weight. g4_sq_free frees.
int g4_sq_build(const g4_step_plan *p, int G, g4_sq_dtype dt, g4_sq *q);
void g4_sq_free(g4_sq *q);
// Bytes of a matrix tile row's K range [k0, k1) in the layout above (k0 rounded down, k1 up to
// a 64-wide Q4 block).
int64_t g4_sq_row_bytes(g4_sq_dtype dt, int k0, int k1);

// The first wait of instruction in not met in step s (in->n_wait: all met): a wait is met when
// its counter reached s x its signals a step + the plan's target (the kernel's test,
// step_skeleton.cu). ctr: the counters' values.
int g4_sq_first_unmet(const int *ctr, const g4_sq_instr *in, int s);

// Runs the queues on the CPU for `steps` steps (one after the other, as launches), CTAs taken
// round robin, an instruction run only when each wait's counter reached s x wait_step +
// wait_tgt. ctr[n_counters]: zeroed first, the values at the end. Returns the instructions run;
// when a step stops with some left, returns early and writes the stuck CTAs' head instructions'
// plan indices to stuck[0 .. *n_stuck) (at most max_stuck), the earliest in plan order first:
// every instruction before it ran, so it is the one whose waits cannot be met; why says it.
int g4_sq_simulate(const g4_sq *q, int steps, int *ctr, int *stuck, int max_stuck, int *n_stuck,
                   char *why, size_t why_n);

// A config of a shape made in code (layers l % period == period - 1 full, the rest sliding; the
// last `shared` layers read the last owner of their type's cache). c->layer is allocated: free it.
typedef struct {
    const char *name;
    int hidden, n_layers, heads, kv, hd_local, hd_global, period; // a full layer every period
    int shared;                                                   // last `shared` layers share
    int ffn, ffn_shared, ple, vocab, window;
} g4_sp_shape;
extern const g4_sp_shape g4_sp_shape_e2b; // Gemma-4 E2B's text decoder
void g4_sp_shape_config(const g4_sp_shape *sh, g4_text_config *c);

// The plans of the step skeleton's bench on E2B (`g4cu bench --kernels --filter stepskel`,
// api/bench_stepskel.c, at G4_SP_BENCH_KEYS keys): the one list the bench runs and the cost model
// (engine/step_cost.c) predicts, checks against its measured rows and marks "not measured" where
// it has none. g4_sp_opts' fields, 0: the plan's default. The first is the baseline.
enum { G4_SP_BENCH_KEYS = 512 }; // keys the step's attention sees
typedef struct {
    int split; // keys an attention split at most
    int chunk; // the down GEMV's K chunk in 16-feature tiles (0: 32, 512 features)
    int group; // tiles a GEMV instruction (0: 4)
    int lm;    // tiles an LM-head instruction (0: 64)
    int math;  // 1: also the GEMV-math rows
} g4_sp_bench_plan;
extern const g4_sp_bench_plan g4_sp_bench_plans[];
extern const int g4_sp_n_bench_plans;
// The plan options of b: the tile plan of one step at G4_SP_BENCH_KEYS keys.
g4_sp_opts g4_sp_bench_opts(const g4_sp_bench_plan *b);

#endif
