// parallel.h: the CPU backend's threads. g4_parallel_for splits [0, n) into contiguous ranges,
// one per thread; each item is computed by exactly one thread, in the same order as one thread
// computes it, so the results are bit-identical for any thread count (tests/test_threads.c).
#ifndef G4_PARALLEL_H
#define G4_PARALLEL_H

#ifdef __cplusplus
extern "C" {
#endif

// Computes items [lo, hi) of an op; ctx is the op's arguments.
typedef void (*g4_range_fn)(void *ctx, int lo, int hi);

// Runs fn over [0, n): on one thread when the work (n * cost, cost ~ multiply-adds per item) is
// too small to pay for starting threads, or when called from inside another g4_parallel_for;
// otherwise on up to g4_threads() threads, the caller taking the first range.
void g4_parallel_for(int n, double cost, g4_range_fn fn, void *ctx);

// The thread count: g4_set_threads's value, else the online cores (at least 1).
int g4_threads(void);
// n >= 1 sets the count; n == 0 goes back to the default (all online cores).
void g4_set_threads(int n);
// How many threads the calling thread's last g4_parallel_for ran on (for tests).
int g4_parallel_last_split(void);
// The online cores (sysconf), at least 1.
int g4_cores(void);

#ifdef __cplusplus
}
#endif

#endif
