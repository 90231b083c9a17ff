// step_skel_queues.h: the per-CTA static queues of a step plan as the persistent step skeleton
// reads them (kernels/step_skeleton.cuh): plain C records, no CUDA, so that engine/step_queue.c
// (which builds them from an engine/step_plan.h plan, and says the rule and why it cannot
// deadlock) and the device code share one layout.
#ifndef G4_STEP_SKEL_QUEUES_H
#define G4_STEP_SKEL_QUEUES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { G4_SQ_MAX_WAIT = 3 }; // = G4_SP_MAX_WAIT (engine/step_queue.c checks it)

enum { G4_SQ_LINE = 32 }; // ints a 128-byte counter line

typedef enum { G4_SQ_Q4 = 0, G4_SQ_F16 = 1 } g4_sq_dtype;

typedef struct {
    int64_t w_off;            // first weight byte (arena offset; a multiple of 16)
    int64_t w_stride;         // bytes from one run to the next (a matrix tile row)
    int32_t w_runs;           // runs (16-feature tile rows); 0: no weight
    int32_t w_run;            // bytes a run (a multiple of 16)
    int32_t reg0, n_rd, n_wr; // regions reg[reg0 ..): n_rd read, then n_wr written
    int32_t n_wait;
    int32_t wait_ctr[G4_SQ_MAX_WAIT];
    int32_t wait_tgt[G4_SQ_MAX_WAIT];  // the plan's target within a step
    int32_t wait_step[G4_SQ_MAX_WAIT]; // the counter's signals a step
    int32_t signal;                    // counter, or -1
    int32_t id;                        // index in the plan (messages)
} g4_sq_instr;

typedef struct {
    int64_t off;   // first byte in the activation arena (a multiple of 16)
    int32_t bytes; // a multiple of 16
    int32_t pad;
} g4_sq_region;

typedef struct {
    int G, n;                   // CTAs, instructions
    int *start;                 // [G + 1]: queue b is ins[start[b] .. start[b + 1])
    g4_sq_instr *ins;           // [n], queue by queue
    int n_reg;                  //
    g4_sq_region *reg;          // [n_reg]
    int n_counters;             //
    int *per_step;              // [n_counters] signals a step
    int64_t w_bytes;            // the weight arena: every byte streamed once a step (tile plan)
    int64_t act_bytes;          // the activation arena
    int64_t rd_bytes, wr_bytes; // bytes read / written a step (the regions as streamed)
    int waits;                  // waits a step
    int n_layers;
} g4_sq;

#ifdef __cplusplus
}
#endif

#endif
