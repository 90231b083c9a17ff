// spin.cuh: on-device hand-over between CTAs of one grid through counters in global memory
// (issue 30 stage 2): the waiter's bounded acquire spin and the publisher's release forms.
// Internal: included by kernels/*.cu and kernels/bench/*.cu only. Used by persist_mlp.cu,
// step_skeleton.cu and kernels/bench/bench_handover.cu (which measures what one hand-over costs).
// defines: g4_ld_acquire, g4_ld_relaxed, g4_spin_geq_at, g4_spin_geq, g4_spin_geq_instr,
// g4_red_release_add, g4_st_release, G4_SPIN_MAX_POLLS.
//
// Scope is .gpu everywhere (never .sys: an over-scoped fence or invalidate was 27% of a
// megakernel's latency, ../shared/bench/ANCHORS.md). A counter should sit alone in its 128-byte
// line: pollers hammer that line's L2 slice, and a producer's data stores to the same line
// contend with them (the false-sharing pitfall; bench_handover.cu measures it).
#ifndef G4_SPIN_CUH
#define G4_SPIN_CUH

#include <stdio.h>

// >= ~10 s of polling at one poll per L2 round trip or per 32 ns sleep: a bug, never a wait.
#define G4_SPIN_MAX_POLLS (1u << 25)

__device__ __forceinline__ int g4_ld_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ int g4_ld_relaxed(const int *p) {
    int v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// One thread: until *p >= target, with acquire semantics: what the publishers wrote before
// their release is visible to this thread (a CTA barrier after it extends that to the CTA: the
// PTX model's causality order runs through bar.sync, and the acquire's L1 invalidate is the
// SM's). The data may then be read with plain ld.global or ld.global.cg, never ld.global.nc /
// __ldg: the non-coherent path is only for data no one writes during the kernel. Against a
// counter that several publishers add to, the acquire that reads the final sum synchronizes
// with every one of them (observation order runs through the chain of atomic adds).
// relaxed_polls = false: every poll is an ld.acquire.gpu; true: the polls are ld.relaxed.gpu
// and one fence.acq_rel.gpu follows the poll that saw the target (a strong read then the fence
// in program order: the PTX model's acquire pattern; cheaper polls if the acquire's per-load
// L1 invalidate shows; bench_handover.cu measures it).
// sleep_ns > 0 backs off between polls (many pollers on one line). Bounded: after
// G4_SPIN_MAX_POLLS polls it prints who / which block / the count (and, for a plan's instruction,
// instr >= 0: its plan index and which of its waits) and traps, so the launch fails and the
// host's next CUDA call reports it, instead of hanging the GPU. Returns the value.
static __device__ __noinline__ int g4_spin_geq_at(const int *p, int target, unsigned sleep_ns,
                                                  bool relaxed_polls, const char *who, int instr,
                                                  int wait) {
    unsigned polls = 0;
    int v;
    while ((v = relaxed_polls ? g4_ld_relaxed(p) : g4_ld_acquire(p)) < target) {
        if (sleep_ns) __nanosleep(sleep_ns);
        if (++polls == G4_SPIN_MAX_POLLS) {
            if (instr >= 0)
                printf("%s: CTA %d, instruction #%d, wait %d polled a counter %u times: %d of "
                       "%d; trapping\n",
                       who, (int)blockIdx.x, instr, wait, polls, v, target);
            else
                printf("%s: CTA %d polled a counter %u times: %d of %d; trapping\n", who,
                       (int)blockIdx.x, polls, v, target);
            __trap();
        }
    }
    if (relaxed_polls) asm volatile("fence.acq_rel.gpu;" ::: "memory");
    return v;
}

__device__ __forceinline__ int g4_spin_geq(const int *p, int target, unsigned sleep_ns,
                                           bool relaxed_polls, const char *who) {
    return g4_spin_geq_at(p, target, sleep_ns, relaxed_polls, who, -1, 0);
}

// A plan's instruction waiting (acquire polls, no back-off): the trap names the instruction and
// the wait, so a bad queue or target is found from the log alone (kernels/step_skeleton.cu).
__device__ __forceinline__ int g4_spin_geq_instr(const int *p, int target, const char *who,
                                                 int instr, int wait) {
    return g4_spin_geq_at(p, target, 0, false, who, instr, wait);
}

// *p += v with release semantics at gpu scope, no separate fence and no returned value: the
// stores this thread made, and those it observed (the CTA's, through a barrier before it), are
// visible to whoever acquires the new value.
__device__ __forceinline__ void g4_red_release_add(int *p, int v) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// *p = v with release semantics at gpu scope (a flag only one producer sets).
__device__ __forceinline__ void g4_st_release(int *p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

#endif
