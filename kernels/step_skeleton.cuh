// step_skeleton.cuh: the persistent skeleton of the whole decode step (issue 30: the floor of
// "one persistent kernel a step"). One launch runs a step plan's per-CTA static queues
// (engine/step_queue.h, grain G4_SP_TILE) with the real dependency counters and the real bytes:
// each instruction waits on its counters (bounded acquire spin), streams the weight bytes its
// tiles x K range cover in the repacked package layout (evict-first 16-byte loads, folded into a
// value the stores depend on), reads and writes its activation regions, then publishes (CTA
// barrier, red.release.gpu on its counter's line). No arithmetic of the model: what it measures
// is what the design costs before any math; G4_SK_MATH adds the GEMVs' arithmetic
// (kernels/step_skel_queues.h).
// Test: tests/test_cuda_step_skel.c (GPU), the queues on the CPU in tests/test_step_plan.c.
// Bench: `g4cu bench --kernels --filter stepskel` (api/bench_stepskel.c).
#ifndef G4_STEP_SKELETON_CUH
#define G4_STEP_SKELETON_CUH

#include <cuda_runtime_api.h>

#include "kernels/step_skel_queues.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct g4_step_skel g4_step_skel;

// CTAs that fit co-resident (the occupancy API's count a SM x the SMs): the G to build the
// queues for. G4_OK or an internal error.
int g4_step_skel_max_ctas(int *ctas);
// The same for G4_SK_MATH's instantiations (more registers a thread: fewer CTAs an SM); a launch
// with G4_SK_MATH on queues for more is refused (a user error).
int g4_step_skel_max_ctas_math(int *ctas);
// Device copies of queues q (q->G must not exceed g4_step_skel_max_ctas: a user error says so),
// the weight arena (q->w_bytes, filled), the activation arena and the counters (zeroed).
int g4_step_skel_create(const g4_sq *q, g4_step_skel **out);
// One step on stream st. prefetch: 0 wait, then stream the weights; 1 the same with the CTA's
// next instruction's weights prefetched into L2 before each wait; 2 stream the weights before
// the wait (weights never depend on a counter: the design's point); 3 a two-deep lookahead:
// before the wait on instruction k, k + 1's weights streamed too (into registers and discarded:
// an upper bound for staging them in shared memory). mode: G4_SK_* ablation bits (0: none);
// G4_SK_MATH adds the GEMV arithmetic (refused on queues for more than
// g4_step_skel_max_ctas_math's CTAs).
int g4_step_skel_launch(g4_step_skel *s, int prefetch, int mode, cudaStream_t st);
// The same step with every instruction's timeline stamped (a second instantiation of the kernel:
// the unstamped one carries no stamp code); g4_step_skel_timeline copies it back after a sync:
// out[plan instructions], by plan index.
int g4_step_skel_launch_timeline(g4_step_skel *s, int prefetch, int mode, cudaStream_t st);
int g4_step_skel_timeline(g4_step_skel *s, g4_sq_stamp *out);
// The ceiling: the same weight bytes (the whole arena) streamed by one plain kernel of the same
// grid and loads, no waits.
int g4_step_skel_stream(g4_step_skel *s, cudaStream_t st);
// After a device sync (a trap from a wait that never ended is reported here, as an error):
// ctr[n_counters] the counters, *epoch the steps run, *exit_ctr the exit counter (0 between
// launches), *short_waits the waits that found their counter short (summed over CTAs).
int g4_step_skel_read(g4_step_skel *s, int *ctr, int *epoch, int *exit_ctr, long long *short_waits);
void g4_step_skel_free(g4_step_skel *s);

#ifdef __cplusplus
}
#endif

#endif
