// transpose.cu: y = x^T for 2- or 4-byte elements (oracle: the CPU backend's element copy; test:
// tests/test_cuda_towers.c --op transpose).
//
// The classic shared-memory tile: a CTA of 32 x 8 threads moves a 32 x 32 tile; it reads the
// tile's rows (coalesced along x's columns), and writes the tile's columns as rows of y
// (coalesced along y's columns). The +1 column of padding keeps the column reads of the tile
// free of bank conflicts. Grid-stride over tiles in both directions (any size).
#include "kernels/transpose.cuh"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"

namespace {

constexpr int TILE = 32, ROWS_PER_PASS = 8;

template <class E> __global__ void transpose_kernel(E *y, const E *x, int rows, int cols) {
    __shared__ E tile[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int r0 = blockIdx.y * TILE; r0 < rows; r0 += gridDim.y * TILE)
        for (int c0 = blockIdx.x * TILE; c0 < cols; c0 += gridDim.x * TILE) {
            for (int i = ty; i < TILE; i += ROWS_PER_PASS) {
                const int r = r0 + i, c = c0 + tx;
                if (r < rows && c < cols) tile[i][tx] = x[(size_t)r * cols + c];
            }
            __syncthreads();
            for (int i = ty; i < TILE; i += ROWS_PER_PASS) {
                const int c = c0 + i, r = r0 + tx; // y row c, column r
                if (c < cols && r < rows) y[(size_t)c * rows + r] = tile[tx][i];
            }
            __syncthreads(); // the tile is reused by the next iteration
        }
}

template <class E> void transpose_launch(E *y, const E *x, int rows, int cols, cudaStream_t s) {
    const int gx = (cols + TILE - 1) / TILE, gy = (rows + TILE - 1) / TILE;
    const dim3 grid(gx < 1024 ? gx : 1024, gy < 1024 ? gy : 1024), block(TILE, ROWS_PER_PASS);
    transpose_kernel<E><<<grid, block, 0, s>>>(y, x, rows, cols);
    G4_CUDA_LAUNCH_CHECK();
}

} // namespace

extern "C" void g4_transpose(void *y, const void *x, int rows, int cols, int elem_bytes,
                             cudaStream_t stream) {
    const char *op = "g4_transpose";
    G4K_REQUIRE(rows >= 0 && cols >= 0 && (elem_bytes == 2 || elem_bytes == 4), op);
    G4K_REQUIRE(y != x, op);
    if (rows == 0 || cols == 0) return;
    if (elem_bytes == 2)
        transpose_launch(static_cast<uint16_t *>(y), static_cast<const uint16_t *>(x), rows, cols,
                         stream);
    else
        transpose_launch(static_cast<uint32_t *>(y), static_cast<const uint32_t *>(x), rows, cols,
                         stream);
}
