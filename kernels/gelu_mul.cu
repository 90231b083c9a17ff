// gelu_mul.cu: y = gelu_tanh(a) * b, elementwise over strided rows (oracle: ref_gelu_mul).
// Memory-bound: 16-byte vectors, grid-stride. Test: tests/test_cuda_ops.c --op gelu_mul.
// Launched with programmatic dependent launch (kernels/pdl.cuh): nothing above the wait.
#include "kernels/gelu_mul.cuh"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"
#include "kernels/pdl.cuh"

using namespace g4k;

namespace {

__global__ void gelu_mul_kernel(uint16_t *y, int ldy, const uint16_t *a, int lda, const uint16_t *b,
                                int ldb, int T, int n) {
    g4_pdl_wait();
    g4_pdl_trigger();
    const int nv = n / 8;
    const long long total = (long long)T * nv;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int t = (int)(i / nv), c = (int)(i % nv) * 8;
        const uint4 ua = *reinterpret_cast<const uint4 *>(a + (size_t)t * lda + c);
        const uint4 ub = *reinterpret_cast<const uint4 *>(b + (size_t)t * ldb + c);
        const __half2 *ha = reinterpret_cast<const __half2 *>(&ua);
        const __half2 *hb = reinterpret_cast<const __half2 *>(&ub);
        uint4 uy;
        uint32_t *py = reinterpret_cast<uint32_t *>(&uy);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float2 fa = __half22float2(ha[e]), fb = __half22float2(hb[e]);
            py[e] = pack_half2(gelu_tanh(fa.x) * fb.x, gelu_tanh(fa.y) * fb.y);
        }
        *reinterpret_cast<uint4 *>(y + (size_t)t * ldy + c) = uy;
    }
}

} // namespace

extern "C" const char *g4_gelu_mul_supported(int n) {
    if (n < 0 || n % 8) return "a multiple of 8 columns (gelu_mul.cu)";
    return NULL;
}

extern "C" void g4_gelu_mul(uint16_t *y, int ldy, const uint16_t *a, int lda, const uint16_t *b,
                            int ldb, int T, int n, cudaStream_t stream) {
    const char *op = "g4_gelu_mul";
    G4K_SUPPORTED(g4_gelu_mul_supported(n), op);
    G4K_REQUIRE(T >= 0, op);
    G4K_REQUIRE(ldy % 8 == 0 && lda % 8 == 0 && ldb % 8 == 0 && ldy >= n && lda >= n && ldb >= n,
                op);
    G4K_REQUIRE((((uintptr_t)y | (uintptr_t)a | (uintptr_t)b) & 15) == 0, op);
    const long long total = (long long)T * (n / 8);
    if (total == 0) return;
    long long blocks = (total + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    g4_pdl_launch(gelu_mul_kernel, dim3((unsigned)blocks), dim3(256), 0, stream, y, ldy, a, lda, b,
                  ldb, T, n);
}
