// pdl.cuh: Programmatic Dependent Launch (PDL, sm_90+) for the decode-path kernels: the device
// half (g4_pdl_wait, g4_pdl_trigger, g4_prefetch_l2*) and the host launcher (g4_pdl_launch,
// g4_pdl_launch_cluster). Internal: included by kernels/*.cu only.
// defines: g4_pdl_wait, g4_pdl_trigger, g4_prefetch_l2, g4_prefetch_l2_bytes, g4_pdl_launch,
//          g4_pdl_launch_cluster. The switch: g4_cuda_pdl_enabled() (cuda_util.h; G4_PDL=0 off).
//
// What it buys. A decode step is ~460 small kernels replayed from one CUDA graph; each pays a
// fixed cost before its first useful byte (grid launch, CTA rampup, the first DRAM round trip).
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may start while
// the kernel before it in the stream is still running, once every CTA of that kernel has run
// griddepcontrol.launch_dependents (or exited): its CTAs become resident, run the prologue
// above their wait (here: L2 prefetches of their first weight tiles) and then block in
// griddepcontrol.wait until the previous grid has completed and its memory is visible.
//
// Semantics relied on (PTX ISA, "griddepcontrol"; CUDA Programming Guide 4.5 "Programmatic
// Dependent Launch and Synchronization"):
//   - .wait "causes the executing thread to wait until all prerequisite grids in flight have
//     completed and all the memory operations from the prerequisite grids are performed and
//     made visible to the current grid". It waits for COMPLETION of the previous grid, not for
//     its trigger: the trigger only lets the dependent be scheduled.
//   - .launch_dependents lets the dependents be scheduled "as soon as all other CTAs in the
//     grid issue the same instruction or have completed"; without it the implicit trigger is
//     the grid's completion (still before its memory flush, so the wait is needed either way).
//   - a kernel launched without the attribute treats both as no-ops (wait returns at once).
//
// THE RULE for every kernel launched through g4_pdl_launch* (tests/test_pdl_sass.sh checks on
// the SASS that each such kernel has the wait and no global load, store or atomic before it):
//   1. Above g4_pdl_wait() there is only index arithmetic, kernel-parameter reads,
//      g4_prefetch_l2* of immutable data (weights, scales, zero points, norm weights, RoPE
//      tables) and loads of immutable weights in the weight-stream form (gemm_common.cuh
//      ldg_stream*: ld.global.nc.L1::no_allocate, SASS LDG.E.NA.*.CONSTANT), a form used for
//      nothing else. An L2 prefetch returns nothing to the program, and L2 is the GPU's point
//      of coherence, so even a prefetched line that a previous kernel then writes is read
//      fresh after the wait; a weight is written once, at load, before any kernel that reads
//      it is launched: the prologue cannot change a result. (The streaming Q4 GEMV loads its
//      first tiles into registers there, so early-resident CTAs hold them at the wait.)
//   2. g4_pdl_wait() is the first statement with a side effect, executed unconditionally by
//      every thread, before any early return: no read of anything another kernel writes
//      (activations, KV cache, positions, ids, workspaces) and no write (write-after-read
//      hazards: the previous kernel may still be reading the buffer) comes before it.
//   3. g4_pdl_trigger() right after the wait. Safe because the dependent's own wait blocks until
//      this grid has COMPLETED (rule 2 on its side); the trigger only decides when its CTAs may
//      become resident. Since a kernel triggers only after its own wait returned, at most two
//      grids overlap: the running one and the next one, the latter held in its prologue.
// Transitivity: a kernel completes only after its wait returned, i.e. after its predecessor
// completed, so a kernel that waits also sees every earlier grid's writes; a plain launch after
// a PDL kernel is fully stream-ordered after it, hence after everything before it too.
//
// Graphs: stream capture records a kernel launched with the attribute as a graph edge of type
// cudaGraphDependencyTypeProgrammatic from the previous kernel node's
// cudaGraphKernelNodePortProgrammatic port (graph edge data, CUDA 12.3+; driver_types.h
// cudaGraphEdgeData; the Programming Guide's PDL section, "use in CUDA Graphs": via stream
// capture or via edge data). tests/test_cuda_pdl.c checks the edge types of a captured chain
// (H200, driver 580.159, CUDA 13.0: 66 of 66 edges programmatic, 0 with G4_PDL=0). Eager
// (non-captured) launches get the same overlap. Measured gains: bench/NOTES.md "PDL on the
// decode path".
#ifndef G4_PDL_CUH
#define G4_PDL_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <utility>

#include "kernels/cuda_util.h"

// --- device ---------------------------------------------------------------------------------

// Blocks until the previous grid in the stream has completed and its writes are visible.
__device__ __forceinline__ void g4_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream be scheduled (it still waits for this grid to complete).
__device__ __forceinline__ void g4_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Pulls the 128-byte line holding p into L2 (no register result, never faults the program's
// view of memory). p must point into a global-memory allocation.
__device__ __forceinline__ void g4_prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(p)));
}

// The whole CTA prefetches [p, p + bytes) into L2, one instruction per 128-byte line (every
// address it touches lies inside the range). p NULL or bytes 0: nothing.
__device__ __forceinline__ void g4_prefetch_l2_bytes(const void *p, size_t bytes) {
    if (!p || !bytes) return;
    const uintptr_t b = (uintptr_t)p, e = b + bytes;
    for (uintptr_t a = (b & ~(uintptr_t)127) + (uintptr_t)threadIdx.x * 128; a < e;
         a += (uintptr_t)blockDim.x * 128)
        g4_prefetch_l2((const void *)(a < b ? b : a));
}

// --- host -----------------------------------------------------------------------------------

// kernel<<<grid, block, smem, stream>>>(args...) through cudaLaunchKernelEx, with a thread-block
// cluster of `*cluster` CTAs when cluster != NULL and, when g4_cuda_pdl_enabled(), programmatic
// stream serialization. Checked like every launch. Only for kernels that follow THE RULE above.
// Launches on the legacy default stream (0, the kernel test tables' single launches) keep plain
// stream order: the engine and the benches run on created streams, and PDL on the legacy
// stream (which synchronises implicitly with other streams) is not something we have measured.
template <typename... KArgs, typename... Args>
inline void g4_pdl_launch_ex(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, const dim3 *cluster, Args &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2] = {};
    unsigned n = 0;
    if (cluster) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster->x;
        attr[n].val.clusterDim.y = cluster->y;
        attr[n].val.clusterDim.z = cluster->z;
        n++;
    }
    if (stream != 0 && stream != cudaStreamLegacy && g4_cuda_pdl_enabled()) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    cfg.attrs = n ? attr : nullptr;
    cfg.numAttrs = n;
    G4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
    G4_CUDA_LAUNCH_CHECK();
}

template <typename... KArgs, typename... Args>
inline void g4_pdl_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args &&...args) {
    g4_pdl_launch_ex(kernel, grid, block, smem, stream, (const dim3 *)nullptr,
                     std::forward<Args>(args)...);
}

template <typename... KArgs, typename... Args>
inline void g4_pdl_launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                  cudaStream_t stream, dim3 cluster, Args &&...args) {
    g4_pdl_launch_ex(kernel, grid, block, smem, stream, &cluster, std::forward<Args>(args)...);
}

#endif
