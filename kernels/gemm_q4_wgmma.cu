// gemm_q4_wgmma.cu: the Q4-weight instantiation of the Hopper wgmma GEMM (gemm_wgmma.cuh), the
// prefill path of g4_gemm_q4 / g4_gemm_q4_gelu_mul (G4_GEMM_WGMMA, the AUTO path for M > 8).
//
// The producer warpgroup reads the packed 16 x 64 tiles of kernels/q4_pack.h through
// q4_tile.cuh (one 16-byte word, a scale pair and a zero-point pair per lane), dequantizes them
// exactly as the GEMV and the test dequantizer do, and stores the fp16 weights K-major into the
// stage's B tile: B row n = feature n0 + n, 64 inputs in 128 bytes, 128B swizzle; wgmma reads it
// with tnsp-b = 0 (descriptor SBO 1024, +32 bytes per k16 step), the layout of the x tile.
// So the products are the fp16 GEMM's on W16 = fp16((q - zp) * scale).
// The producer's loads in flight: G4_Q4_WG_DEPTH (1, 2, the default, 3; bench/NOTES.md, "The Q4
// wgmma GEMM at the serve load's rows").
// Test: tests/test_cuda_gemm.c --op q4/wgmma; bench: g4cu bench --kernels --filter q4_wgmma, and
// --filter srv_ (M = 210, 512 at each depth).
#include "kernels/gemm_wgmma.cuh"

namespace g4k {

int q4_wgmma_launch(void *y, const __half *x, const q4w &w0, const q4w &w1, const __half *bias,
                    int M, int N, int K, int epi, bool fused, cudaStream_t stream) {
    CUtensorMap mx;
    tma_map_f16(&mx, x, K, M, WG_BM);
    wg_params p = {};
    p.y = y;
    p.bias = bias;
    p.w0 = w0;
    p.w1 = w1;
    p.M = M, p.N = N, p.K = K, p.epi = epi;
    return wg_launch<WG_B_Q4>(mx, mx, mx, p, fused, stream); // no B maps: the producer reads it
}

} // namespace g4k
