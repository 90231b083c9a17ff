// wgmma_common.cuh: the Hopper (sm_90a) building blocks of the wgmma kernels (the GEMM mainloop
// kernels/gemm_wgmma.cuh behind gemm_f16_wgmma.cu and gemm_q4_wgmma.cu, and the prefill
// attention attention_prefill_wgmma.cu): mbarriers, TMA tile loads, the fence between the
// generic and the async proxy, named barriers, register reallocation between warpgroups,
// shared-memory matrix descriptors and the wgmma instructions. Internal header.
// defines: g4k::mbar_*, tma_load_2d, fence_proxy_async, named_bar_sync, reg_alloc,
//          reg_dealloc, make_desc, swz128, wgmma_fence/commit/wait, fence_regs, wgmma_ss,
//          wgmma_rs, tma_map_f16 (host).
//
// Conventions every user relies on (PTX ISA 8.x: "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate", "Tensor Memory Accelerator", "mbarrier"):
//  - Shared-memory operands use the 128-byte swizzle: a tile is rows of 128 bytes, 8 rows make a
//    1024-byte atom, and 16-byte chunk c of row r sits at chunk c ^ (r % 8) of that row
//    (swz128). TMA with CU_TENSOR_MAP_SWIZZLE_128B writes exactly this pattern (it depends on
//    the shared address bits only, so every tile starts 1024-byte aligned).
//  - K-major operand (a row = 64 consecutive k of one m or n): descriptor (start + 32 kk, LBO 16
//    (unused), SBO 1024) for the k16 step kk of a 64-k tile; 8-row groups 1024 bytes apart.
//    Used for A (x tiles, P tiles, Q) and for B when it is stored [n][k] (Q4 dequantized tiles,
//    K tiles of attention), tnsp-b = 0.
//  - N-major B (a row = 64 consecutive n of one k, as W[K, N] and V[key][dim] are stored):
//    chunks of 64 n x R k rows, chunk stride LBO = 128 R bytes, 8-row (k) groups SBO = 1024;
//    the k16 step kk starts at +2048 kk; tnsp-b = 1. (The old fp16 kernel ran this layout with
//    R = 64 through the whole GPU test table: bench/NOTES.md, 2026-11-29 outcomes.)
//  - Accumulator fragment of m64nN (f32): warp w of the warpgroup, lane (g = lane / 4,
//    t = lane % 4): d[4 j + 2 h + e] is row 16 w + g + 8 h, column 8 j + 2 t + e.
//  - A from registers (RS, m64nNk16, f16): the mma.sync m16n8k16 A fragment per warp (warp w =
//    rows 16 w .. 16 w + 15): a[0] = (row g; k 2t, 2t+1), a[1] = (g + 8; 2t, 2t+1),
//    a[2] = (g; 2t+8, 2t+9), a[3] = (g + 8; 2t+8, 2t+9) (CUTLASS ALayout_64x16).
//  - Shared memory written with ordinary stores and then read by wgmma (the async proxy) needs
//    fence_proxy_async() by the writing threads before the barrier that publishes it.
#pragma once

#include <cuda.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/common.cuh"

namespace g4k {

// --- mbarriers ------------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint64_t *bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count)
                 : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA) and the other threads.
__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects `bytes` of TMA transactions on the current phase.
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}
// One arrival (release semantics: this thread's earlier writes are visible to the waiters).
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Waits until the phase with the given parity has completed (acquire). A fresh barrier is in
// phase 0, so waiting on parity 1 returns at once: round r of a ring waits on parity
// (r & 1) ^ 1 for the release of round r - 1.
// Watchdog: after 2^28 unsuccessful polls (each try_wait suspends up to a hardware time limit:
// seconds in all, against microseconds for any legitimate wait here) the thread traps, so a
// protocol bug ends the launch with cudaErrorLaunchFailure ("unspecified launch failure")
// instead of hanging the GPU.
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    uint32_t done = 0;
    for (uint32_t n = 0; !done; n++) {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_u32(bar)), "r"(parity)
                     : "memory");
        if (n == (1u << 28)) __trap();
    }
}

// --- TMA, proxies, barriers, registers ------------------------------------------------------

// 2-D tile load: the map's box at element coordinates (c0 = innermost, c1) into dst (1024-byte
// aligned for the 128B swizzle); completes its bytes on bar. Out-of-range elements read as 0.
__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, int c0, int c1,
                                            uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_u32(dst)),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(smem_u32(bar))
                 : "memory");
}

// Orders this thread's earlier generic-proxy shared-memory writes before later async-proxy
// accesses (wgmma operand reads, TMA writes) of the same memory.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Barrier `id` (1..15; 0 is __syncthreads) over `count` threads (a multiple of 32).
__device__ __forceinline__ void named_bar_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Register reallocation between warpgroups (every thread of the warpgroup executes it).
template <int R> __device__ __forceinline__ void reg_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R> __device__ __forceinline__ void reg_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

// --- shared-memory matrix descriptors -------------------------------------------------------

// Start address, leading and stride byte offsets (all >> 4), 128B swizzle (mode 1 in bits
// 62..63), base offset 0 (tiles start on 1024-byte boundaries).
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// Byte offset of 16-byte chunk c of row r in a 128B-swizzled tile of 128-byte rows.
__device__ __forceinline__ uint32_t swz128(uint32_t r, uint32_t c) {
    return r * 128 + ((c ^ (r & 7)) << 4);
}

// --- wgmma ----------------------------------------------------------------------------------

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Makes registers opaque at this point, so the compiler neither reads accumulators before the
// asynchronous wgmma wrote them (use after wgmma_wait) nor moves their writes (zeroing, scaling)
// past the next wgmma_fence, nor reuses A-operand registers while a wgmma may still read them.
template <int N> __device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N> __device__ __forceinline__ void fence_regs(uint32_t (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(d[i])::"memory");
}

// clang-format off
// Accumulator operand lists: "%0" .. and "+f"(d[0]) .., in groups of 16 (mechanical).
#define G4_WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define G4_WG_R1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define G4_WG_R2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define G4_WG_R3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define G4_WG_R4 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define G4_WG_R5 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define G4_WG_R6 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define G4_WG_R7 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define G4_WG_O0(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define G4_WG_O1(d) "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define G4_WG_O2(d) "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define G4_WG_O3(d) "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define G4_WG_O4(d) "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define G4_WG_O5(d) "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define G4_WG_O6(d) "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define G4_WG_O7(d) "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// d (+)= A B, both operands in shared memory (descriptors a, b), m64nNk16, f16 in, f32
// accumulate; N = 2 x the array size (64, 128, 192, 256); acc = 0: d = A B (the accumulators'
// old values are ignored); TB: tnsp-b (1: B N-major, 0: K-major).
template <int TB> __device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" G4_WG_R0 ", " G4_WG_R1 "}, "
                 "%32, %33, p, 1, 1, 0, %35;\n}\n"
                 : G4_WG_O0(d), G4_WG_O1(d)
                 : "l"(a), "l"(b), "r"(acc), "n"(TB));
}
template <int TB> __device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" G4_WG_R0 ", " G4_WG_R1 ", "
                 G4_WG_R2 ", " G4_WG_R3 "}, %64, %65, p, 1, 1, 0, %67;\n}\n"
                 : G4_WG_O0(d), G4_WG_O1(d), G4_WG_O2(d), G4_WG_O3(d)
                 : "l"(a), "l"(b), "r"(acc), "n"(TB));
}
template <int TB> __device__ __forceinline__ void wgmma_ss(float (&d)[96], uint64_t a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {" G4_WG_R0 ", " G4_WG_R1 ", "
                 G4_WG_R2 ", " G4_WG_R3 ", " G4_WG_R4 ", " G4_WG_R5 "}, %96, %97, p, 1, 1, 0, %99;\n}\n"
                 : G4_WG_O0(d), G4_WG_O1(d), G4_WG_O2(d), G4_WG_O3(d), G4_WG_O4(d), G4_WG_O5(d)
                 : "l"(a), "l"(b), "r"(acc), "n"(TB));
}
template <int TB> __device__ __forceinline__ void wgmma_ss(float (&d)[128], uint64_t a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" G4_WG_R0 ", " G4_WG_R1 ", "
                 G4_WG_R2 ", " G4_WG_R3 ", " G4_WG_R4 ", " G4_WG_R5 ", " G4_WG_R6 ", " G4_WG_R7 "}, "
                 "%128, %129, p, 1, 1, 0, %131;\n}\n"
                 : G4_WG_O0(d), G4_WG_O1(d), G4_WG_O2(d), G4_WG_O3(d), G4_WG_O4(d), G4_WG_O5(d),
                   G4_WG_O6(d), G4_WG_O7(d)
                 : "l"(a), "l"(b), "r"(acc), "n"(TB));
}
// d (+)= A B with A (64 x 16) from registers (fragment above), B K-major from shared memory,
// m64n64k16.
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" G4_WG_R0 ", " G4_WG_R1 "}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : G4_WG_O0(d), G4_WG_O1(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));
}
// clang-format on

// --- host -----------------------------------------------------------------------------------

// TMA map of a row-major fp16 [outer, inner] tensor (rows contiguous, inner % 8 == 0, base
// 16-byte aligned): boxes of box_outer rows x 64 columns (128 bytes), 128B swizzle, zero fill
// outside the tensor. Aborts naming the tensor when the driver rejects it (a caller bug: every
// public entry checks shapes and alignment first).
void tma_map_f16(CUtensorMap *m, const void *base, int inner, int outer, int box_outer);

} // namespace g4k
