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

// Ablation switches of the skeleton (a bitmask; 0: the design as built). Signals always run, so
// the counters still end at steps x their signals a step.
enum {
    G4_SK_NO_WAIT = 1,    // counters not waited on: the queue structure's own floor
    G4_SK_NO_ACT = 2,     // no activation region read or written
    G4_SK_NO_WEIGHTS = 4, // no weight byte streamed (nor prefetched)
    G4_SK_ACT8 = 8,       // activation reads with 8 16-byte loads in flight a thread (not 4)
    // The GEMV arithmetic (issue 30: what the math adds to the floor): after its activation
    // reads, each weight-carrying instruction re-reads its weight bytes (L2 hits where the stream
    // left them there) and runs its real kernel's arithmetic on them: Q4 the third design's a
    // tile (q4_consts, 4 x q4_dequant_word + mma_16816 a lane's 16-byte word), f16 the tensor-core
    // GEMV's (4 prmt + mma_16816 a lane's 16-byte vector); the accumulators fold into the value
    // written. Nothing without weights (G4_SK_NO_WEIGHTS: no math either).
    G4_SK_MATH = 16,
    // With G4_SK_MATH: the math on words made from the tile index, no re-read: the arithmetic
    // alone, an upper bound for a design holding the pre-wait stream's words (registers, shared
    // memory) until after the wait (set alone: refused).
    G4_SK_MATH_HELD = 32,
    G4_SK_MODES = 63
};

// The timeline of one stamped step: per instruction (indexed by plan index), %globaltimer (ns)
// read by thread 0 at G4_TL_STAMPS points, the waits its first poll found short, and its CTA.
typedef enum {
    G4_TL_T_BEGIN,  // top of the instruction (after the previous one's signal)
    G4_TL_T_PRE,    // after the weights streamed before the wait (pf 2 / 3; pf 1: the L2 prefetch)
    G4_TL_T_WAITED, // after the waits and the CTA barrier after them
    G4_TL_T_WTS,    // after the weights streamed after the wait (pf 0 / 1; thread 0's share)
    G4_TL_T_READ,   // after the activation reads and the barrier after them
    G4_TL_T_SIGNAL, // after the writes, the barrier and the signal's red.release issued
    G4_TL_STAMPS
} g4_tl_stamp_at;

typedef struct {
    uint64_t t[G4_TL_STAMPS];
    int32_t n_short; // waits whose first poll found the counter short
    int32_t cta;
} g4_sq_stamp;

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
    g4_sq_dtype dt; // the weights' type (G4_SK_MATH runs its arithmetic)
} g4_sq;

#ifdef __cplusplus
}
#endif

#endif
