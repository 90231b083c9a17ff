// gemv3_walk.h: the cursor rule of the Q4 GEMV's third design with its group change hoisted out
// of the unrolled steps (kernels/gemm_q4.cu gemv_q4_v3_kernel, G4_GEMV3_LOOP=2; issue 29). Plain
// C shared by the kernel (__host__ __device__) and the CPU test tests/test_gemv3_walk.c, which
// walks every warp of a plan under both loops and checks that they load, compute and flush the
// same tiles in the same order. Internal header.
//
// A warp walks n = nj L steps: nj groups of its k range of L tiles. Its ring holds U steps:
// before step i is computed, step i + U is loaded (the load cursor (lj, lr): group, step in the
// group, runs U ahead of the compute cursor (cj, cr)); the steps run in unrolled blocks of U
// from i0 = 0, U, 2U, ..., step i0 + u in ring slot u. After a step the per-step loop refills
// its slot (if i0 + u + U < n), steps the load cursor (at lr == L: the next group's bases) and
// the compute cursor (at cr == L: the flush). A block may run without those per-step tests when
// its steps and refills all exist (i0 + 2U <= n) and neither cursor reaches the end of its
// group before the block's last step (cr + U <= L, lr + U <= L): then its refills are tiles
// bt + lr + u of one group (one base address a block, an immediate offset a step), and the two
// group events, if any, fall after its last step, where the block takes them. With L a
// multiple of U every block but the last one or two of a walk qualifies; with L < 2U (one
// group, few tiles) none may.
#ifndef G4_GEMV3_WALK_H
#define G4_GEMV3_WALK_H

#ifdef __CUDACC__
#define GV3_HD __host__ __device__ __forceinline__
#else
#define GV3_HD static inline
#endif

// Whether the block of U steps from step i0 (of n), at compute cursor cr and load cursor lr of
// an L-step k range, may run without the per-step tests (see above).
GV3_HD int gv3_block_plain(int i0, int n, int cr, int lr, int L, int U) {
    return i0 + 2 * U <= n && cr + U <= L && lr + U <= L;
}

// Whether any warp of a plan (KT k tiles split ST ways, `groups` groups walked by `grid` CTAs)
// may meet such a block: not when every CTA walks one group (grid >= groups) and every k range
// (at most ceil(KT / ST) tiles) is shorter than 2U, since then n = L < 2U fails i0 + 2U <= n.
// The launch runs LOOP 1 there (the same results).
GV3_HD int gv3_plain_blocks_possible(int KT, int ST, int groups, int grid, int U) {
    return grid < groups || (KT + ST - 1) / ST >= 2 * U;
}

#endif
