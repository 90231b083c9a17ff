// gemm_f16_wgmma.cu: the Hopper (sm_90a) fp16 GEMM: TMA + mbarrier pipeline, warp-specialized
// producer / consumer warpgroups, wgmma.mma_async m64n128k16 with fp32 accumulators in registers.
// Reached through g4_gemm_f16 / g4_gemm_f16_gelu_mul with G4_GEMM_WGMMA (gemm_f16.cuh).
//
// Block tile BM x 128 x 64, BM = 64 * NC (NC = 1 or 2 consumer warpgroups); 128 * (NC + 1)
// threads: warpgroup 0 is the producer (one thread issues the TMA loads; with NC = 2 its
// registers are given to the consumers with setmaxnreg), warpgroup 1 + c computes rows
// 64 c .. 64 c + 63. Shared memory: 4 or 5 stages, each an A tile x[m0 .. m0 + BM, k0 .. k0 + 64)
// (K-major, one 128-byte row per token, TMA 128B swizzle) and a B tile of two 64-column chunks of
// W[k0 .. k0 + 64, :] (N-major as stored, one 128-byte row per k, 128B swizzle): columns n0 .. n0 +
// 127 of W, or for the fused gate/up kernel columns n0 .. n0 + 63 of Wg then of Wu, so that
// accumulator column c (gate) and c + 64 (up) of the same output sit in the same thread. Stage s is
// guarded by full[s] (the producer's expect_tx; TMA completes the bytes) and empty[s] (one arrival
// per consumer warpgroup once its wgmma reading the stage has retired). Edges: TMA zero-fills rows
// past M, inputs past K and columns past N; the epilogue bounds-checks.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "kernels/gemm_common.cuh"

namespace g4k {
namespace {

constexpr int WG_BK = 64, WG_BN = 128;

// NC = 2: 384 threads, one block per SM, 5 stages (160 KB); the producer hands its registers to
// the consumers (setmaxnreg 40 / 232). NC = 1 (small M or N): 256 threads, 4 stages (96 KB) so
// two blocks share an SM, registers capped at 128 by the launch bounds (64 accumulators fit).
template <int NC> struct wg_tile {
    static constexpr int BM = 64 * NC;
    static constexpr int STAGES = NC == 2 ? 5 : 4;
    static constexpr int MIN_BLOCKS = NC == 2 ? 1 : 2;
    static constexpr uint32_t A_BYTES = BM * WG_BK * 2;    // 8 or 16 KB
    static constexpr uint32_t B_BYTES = WG_BK * WG_BN * 2; // 16 KB: two 64 x 64 chunks
    static constexpr int SMEM = STAGES * (A_BYTES + B_BYTES) + 2 * STAGES * 8 + 1024;
};

// --- mbarrier, TMA and wgmma PTX ------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint64_t *bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count)
                 : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Waits until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_u32(bar)), "r"(parity)
                     : "memory");
    }
}
// 2-D tile load: box at element coordinates (c0 = innermost, c1) into dst; completes on bar.
__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, int c0, int c1,
                                            uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_u32(dst)),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(smem_u32(bar))
                 : "memory");
}

// Shared-memory matrix descriptor (PTX "matrix descriptor"): start address, leading and stride
// byte offsets (all >> 4), swizzle mode 1 = 128B in bits 62..63, base offset 0 (every tile
// starts on a 1024-byte boundary).
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// d[64] += A(64 x 16, K-major, desc a) * B(16 x 128, N-major, desc b): imm-trans-b = 1.
// Accumulator fragment: warp w of the warpgroup, lane (g = lane / 4, t = lane % 4):
// d[4 j + 2 h + e] is row 16 w + g + 8 h, column 8 j + 2 t + e.
__device__ __forceinline__ void wgmma_m64n128k16(float d[64], uint64_t a, uint64_t b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1, 0, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
                   "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
                   "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b), "r"(1)); // %66 = 1: scale-d on (d += A B)
}

// Makes the accumulators opaque at this point, so the compiler neither reads them before the
// asynchronous wgmma wrote them (wait_group) nor moves their zero-initialisation past the fence.
__device__ __forceinline__ void fence_regs(float d[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}

template <int NC, bool FUSED>
__global__ void __launch_bounds__(128 * (NC + 1), wg_tile<NC>::MIN_BLOCKS)
    gemm_f16_wgmma_kernel(const __grid_constant__ CUtensorMap tm_x,
                          const __grid_constant__ CUtensorMap tm_w,
                          const __grid_constant__ CUtensorMap tm_wu, void *y,
                          const __half *__restrict__ bias, int M, int N, int K, int epi) {
    using T = wg_tile<NC>;
    extern __shared__ uint8_t smem_raw[];
    // 128B-swizzled TMA destinations and wgmma operands need 1024-byte alignment.
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *sA = smem;                          // [STAGES][BM rows][128 bytes]
    uint8_t *sB = smem + T::STAGES * T::A_BYTES; // [STAGES][2 chunks][64 rows][128 bytes]
    uint64_t *full = (uint64_t *)(sB + T::STAGES * T::B_BYTES);
    uint64_t *empty = full + T::STAGES;
    const int wg = threadIdx.x >> 7;
    const int m0 = blockIdx.y * T::BM;
    const int n0 = blockIdx.x * (FUSED ? 64 : 128);
    const int KT = (K + WG_BK - 1) / WG_BK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < T::STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], NC);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) { // producer
        if constexpr (NC == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 0) {
            for (int kt = 0; kt < KT; kt++) {
                const int s = kt % T::STAGES;
                // Round r = kt / STAGES waits for the consumers' release of round r - 1; the
                // first round waits on parity 1 of a fresh barrier, which passes at once.
                mbar_wait(&empty[s], ((kt / T::STAGES) & 1) ^ 1);
                mbar_expect_tx(&full[s], T::A_BYTES + T::B_BYTES); // full boxes, even at edges
                tma_load_2d(sA + s * T::A_BYTES, &tm_x, kt * WG_BK, m0, &full[s]);
                uint8_t *b = sB + s * T::B_BYTES;
                if (FUSED) {
                    tma_load_2d(b, &tm_w, n0, kt * WG_BK, &full[s]);
                    tma_load_2d(b + T::B_BYTES / 2, &tm_wu, n0, kt * WG_BK, &full[s]);
                } else {
                    tma_load_2d(b, &tm_w, n0, kt * WG_BK, &full[s]);
                    tma_load_2d(b + T::B_BYTES / 2, &tm_w, n0 + 64, kt * WG_BK, &full[s]);
                }
            }
        }
    } else { // consumer c: rows m0 + 64 c .. + 63
        if constexpr (NC == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int c = wg - 1;
        float d[64];
#pragma unroll
        for (int i = 0; i < 64; i++) d[i] = 0.0f;
        fence_regs(d);
        for (int kt = 0; kt < KT; kt++) {
            const int s = kt % T::STAGES;
            mbar_wait(&full[s], (kt / T::STAGES) & 1);
            const uint32_t a = smem_u32(sA + s * T::A_BYTES + c * 64 * 128);
            const uint32_t b = smem_u32(sB + s * T::B_BYTES);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < WG_BK / 16; kk++) {
                // A (K-major, 128B swizzle): 8-row groups 1024 bytes apart (SBO); a k16 step is
                // 32 bytes along the swizzled row; LBO unused (1).
                // B (N-major, 128B swizzle): 64-column chunks 8192 bytes apart (LBO), 8-row
                // (k) groups 1024 bytes apart (SBO); a k16 step is 16 rows = 2048 bytes.
                wgmma_m64n128k16(d, make_desc(a + kk * 32, 16, 1024),
                                 make_desc(b + kk * 2048, 8192, 1024));
            }
            wgmma_commit();
            wgmma_wait<1>(); // the previous k tile's wgmma have retired: release its stage
            if (kt > 0 && (threadIdx.x & 127) == 0) mbar_arrive(&empty[(kt - 1) % T::STAGES]);
        }
        wgmma_wait<0>();
        fence_regs(d);

        const int lane = threadIdx.x & 31, w4 = (threadIdx.x >> 5) & 3;
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = m0 + c * 64 + w4 * 16 + g + 8 * h;
            if (row >= M) continue;
            if (!FUSED) {
#pragma unroll
                for (int j = 0; j < 16; j++) {
                    const int col = n0 + 8 * j + 2 * t;
                    if (col < N)
                        store_pair(y, epi, bias, (size_t)row * N + col, col, d[4 * j + 2 * h],
                                   d[4 * j + 2 * h + 1]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const int col = n0 + 8 * j + 2 * t;
                    if (col < N)
                        store_pair(y, G4_GEMM_Y_F16, nullptr, (size_t)row * N + col, col,
                                   gelu_tanh(d[4 * j + 2 * h]) * d[4 * (j + 8) + 2 * h],
                                   gelu_tanh(d[4 * j + 2 * h + 1]) * d[4 * (j + 8) + 2 * h + 1]);
                }
            }
        }
    }
}

// --- host: tensor maps and launch -------------------------------------------------------------

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

// Row-major fp16 [outer, inner] tensor, boxes of box_outer rows x 64 columns, 128B swizzle,
// zero fill outside the tensor.
void make_map(CUtensorMap *m, const void *base, int inner, int outer, int box_outer) {
    const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
    const cuuint64_t strides[1] = {(cuuint64_t)inner * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_outer};
    const cuuint32_t estr[2] = {1, 1};
    CUresult r = encode_fn()(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)base, dims, strides,
                             box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr,
                "g4cu: cuTensorMapEncodeTiled failed (%d) for a [%d, %d] fp16 tensor at %p, box "
                "%d x 64\n",
                (int)r, outer, inner, base, box_outer);
        abort();
    }
}

template <int NC, bool FUSED>
void launch_t(void *y, const __half *x, const __half *w, const __half *wu, const __half *bias,
              int M, int N, int K, int epi, cudaStream_t stream) {
    using T = wg_tile<NC>;
    static bool smem_set = false;
    set_smem(gemm_f16_wgmma_kernel<NC, FUSED>, T::SMEM, &smem_set);
    CUtensorMap mx, mw, mu;
    make_map(&mx, x, K, M, T::BM);
    make_map(&mw, w, N, K, WG_BK);
    make_map(&mu, FUSED ? wu : w, N, K, WG_BK);
    const dim3 grid((N + (FUSED ? 63 : 127)) / (FUSED ? 64 : 128), (M + T::BM - 1) / T::BM);
    gemm_f16_wgmma_kernel<NC, FUSED>
        <<<grid, 128 * (NC + 1), T::SMEM, stream>>>(mx, mw, mu, y, bias, M, N, K, epi);
    G4_CUDA_LAUNCH_CHECK();
}

} // namespace

// Two consumer warpgroups (128-row tiles) when that still gives a block per SM, else one.
void wgmma_launch(void *y, const __half *x, const __half *w, const __half *wu, const __half *bias,
                  int M, int N, int K, int epi, bool fused, cudaStream_t stream) {
    const long cols = (N + (fused ? 63 : 127)) / (fused ? 64 : 128);
    const bool two = (long)((M + 127) / 128) * cols >= num_sms();
    if (fused) {
        if (two)
            launch_t<2, true>(y, x, w, wu, bias, M, N, K, epi, stream);
        else
            launch_t<1, true>(y, x, w, wu, bias, M, N, K, epi, stream);
    } else {
        if (two)
            launch_t<2, false>(y, x, w, wu, bias, M, N, K, epi, stream);
        else
            launch_t<1, false>(y, x, w, wu, bias, M, N, K, epi, stream);
    }
}

// The TMA map the wgmma prefill attention loads K and V through (wgmma_common.cuh): this
// file's own make_map.
void tma_map_f16(CUtensorMap *m, const void *base, int inner, int outer, int box_outer) {
    make_map(m, base, inner, outer, box_outer);
}

} // namespace g4k
