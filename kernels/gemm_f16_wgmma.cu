// gemm_f16_wgmma.cu: the fp16-weight instantiation of the Hopper wgmma GEMM (gemm_wgmma.cuh),
// reached through g4_gemm_f16 / g4_gemm_f16_gelu_mul with G4_GEMM_WGMMA (the AUTO path for
// M > 8), and the host pieces both wgmma GEMMs share: TMA maps, the tests' forced configuration.
//
// B is W[K, N] as stored (N-major): per stage BN / 64 TMA boxes of 64 columns x 64 k rows
// (128B swizzle), read by wgmma with tnsp-b = 1 (descriptor LBO 8192 between the 64-column
// chunks, SBO 1024 between 8-row groups, +2048 per k16 step). The fused gate/up kernel loads
// BN / 128 boxes of the gate weight then as many of the up weight at the same columns, so its
// tile widths are 128 and 256 (192 would split a 64-column box).
// Test: tests/test_cuda_gemm.c --op f16/wgmma (every forced tile width, split and small grids);
// bench: g4cu bench --kernels --filter gemm_f16_wgmma.
#include <cudaTypedefs.h>

#include "kernels/gemm_wgmma.cuh"

namespace g4k {
namespace {

wg_force g_force = {0, 0, 0};

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    if (!fn) {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q;
        G4_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                       cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !p) {
            fprintf(stderr,
                    "g4cu: the CUDA driver has no cuTensorMapEncodeTiled (needs >= 12.0)\n");
            abort();
        }
        fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
    }
    return fn;
}

} // namespace

wg_force wg_forced() {
    return g_force;
}

int g_q4_depth = 0; // g4_gemm_wgmma_q4_depth's; 0: the environment's

int wg_q4_depth() {
    if (g_q4_depth) return g_q4_depth;
    static int env = 0;
    if (!env) {
        // 2 by default: H200, the serve load's rows (M 210 / 512), bench/NOTES.md eleventh
        // session: down 29.4 -> 26.5 / 47.2 -> 41.0 us, o_proj_full 23.0 -> 21.6, fused gate/up
        // 37.2 -> 29.2 against depth 1; serve --parallel 32 Q4 5,975 / 6,071 (depth 1) and
        // 6,173 / 6,019 tok/s (depth 2). 3 measured no better than 2.
        static int d1 = -1, d3 = -1;
        env = g4_cuda_env_is(&d1, "G4_Q4_WG_DEPTH", "1")   ? 1
              : g4_cuda_env_is(&d3, "G4_Q4_WG_DEPTH", "3") ? 3
                                                           : 2;
    }
    return env;
}

void tma_map_f16(CUtensorMap *m, const void *base, int inner, int outer, int box_outer) {
    const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
    const cuuint64_t strides[1] = {(cuuint64_t)inner * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_outer};
    const cuuint32_t estr[2] = {1, 1};
    CUresult r = encode_fn()(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)base, dims, strides,
                             box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr,
                "g4cu: internal error: cuTensorMapEncodeTiled failed (%d) for a [%d, %d] fp16 "
                "tensor at %p, box %d x 64\n",
                (int)r, outer, inner, base, box_outer);
        abort();
    }
}

int wgmma_launch(void *y, const __half *x, const __half *w, const __half *wu, const __half *bias,
                 int M, int N, int K, int epi, bool fused, cudaStream_t stream) {
    CUtensorMap mx, mw, mu;
    tma_map_f16(&mx, x, K, M, WG_BM);
    tma_map_f16(&mw, w, N, K, WG_BK);
    tma_map_f16(&mu, fused ? wu : w, N, K, WG_BK);
    wg_params p = {};
    p.y = y;
    p.bias = bias;
    p.M = M, p.N = N, p.K = K, p.epi = epi;
    return wg_launch<WG_B_F16>(mx, mw, mu, p, fused, stream);
}

} // namespace g4k

extern "C" void g4_gemm_wgmma_plan(int M, int N, int K, int fused, int q4, int *bn, int *split) {
    const g4k::wg_choice c = g4k::wg_plan(M, N, K, fused != 0, q4 != 0);
    *bn = c.bn;
    *split = c.split;
}

extern "C" int g4_gemm_wgmma_force(int bn, int split, int max_ctas) {
    if (bn != 0 && bn != 128 && bn != 192 && bn != 256)
        return g4_fail(G4_EUSER, "gemm wgmma force: tile width %d, expected 0, 128, 192, 256", bn);
    if (split != 0 && split != 1 && split != 2 && split != 4 && split != 8)
        return g4_fail(G4_EUSER, "gemm wgmma force: split %d, expected 0, 1, 2, 4, 8", split);
    if (max_ctas < 0)
        return g4_fail(G4_EUSER, "gemm wgmma force: max CTAs %d, expected >= 0", max_ctas);
    g4k::g_force = g4k::wg_force{bn, split, max_ctas};
    return G4_OK;
}

extern "C" int g4_gemm_wgmma_q4_depth(int depth) {
    if (depth < 0 || depth > 3)
        return g4_fail(G4_EUSER, "gemm wgmma q4 depth: %d, expected 0 (the environment's), 1, 2, 3",
                       depth);
    g4k::g_q4_depth = depth;
    return G4_OK;
}
