// persist_mlp.cu: the decode MLP block of one token as one persistent launch (persist_mlp.cuh).
//
// Why (bench/NOTES.md "Issue 30 stage 2, first step"): in the graph chain each decode GEMV costs
// 2.5-7 us of which its weights at copy rate are a fraction; the rest is its dependent round
// trips (the wait for the previous grid's completion and flush, x, the split reduction, the
// tail), which PDL cannot overlap since a grid's wait releases only at the previous grid's
// completion. Here the gate/up GEMV and the down GEMV are two phases of one grid, handed over
// through counters, and the down weight is in flight (registers, L2) while phase 1 finishes.
//
// Work units, claimed dynamically (thread 0: atomicAdd on the work counter, broadcast through
// shared memory; the next claim is in flight while a unit computes):
//   0 .. U1-1        phase 1: feature tile u (16 features) of gate AND up over all of K = H
//                    (H / 64 <= 32 k tiles: warp w takes tiles w, w + 8, ..., <= 4 each).
//   U1 .. U1+U2-1    phase 2: feature tile nt of down (16 of the H outputs) over K chunk c of
//                    S2 = ceil(F / 2048) balanced chunks (<= 32 k tiles, <= 4 a warp); unit
//                    U1 + nt S2 + c.
// A unit's 8 warp partials (mma.sync m16n8k16, fp32) are summed by warp 0 in warp order.
// Phase 1 stores mlp = fp16(gelu_tanh(g) * u), then publishes it: every storing lane
// __threadfence()s, the warp syncs, lane 0 adds 1 to the phase-1 counter (release). A phase-2
// unit first issues its down tiles' loads into registers, then thread 0 spins (ld.acquire.gpu)
// until the phase-1 counter reaches U1, then the CTA barrier lets its warps read mlp (through L2:
// ld.global.cg, never the non-coherent path). With S2 > 1 each chunk's partials go to the
// workspace (float [S2][H]) and its tile's counter counts the chunks; the chunk that brings it
// to S2 sums the S2 partials in chunk order and stores y: the same sum whichever arrives last
// (deterministic; no float atomics).
//
// No deadlock whatever the residency: a unit is claimed by a CTA that is running; phase-1 units
// wait on nothing; a CTA spins only on a phase-2 unit, claimed after every phase-1 unit was
// claimed, so all of them are held by running CTAs that finish them. The spin is bounded
// (G4_SPIN_MAX_POLLS, then a message and a trap: the launch fails, the host's next CUDA call
// reports it) so a bug can never hang the GPU.
//
// Counters (each in its own 128-byte line: no false sharing between the work counter every CTA
// claims from, the phase-1 counter the spinners poll, and the per-tile chunk counters) reset
// themselves: the chunk that completes a tile resets its counter; the last CTA out (an exit
// counter reaching gridDim.x) resets the work, phase-1 and exit counters. Nothing is memset per
// launch, so the launch replays from a CUDA graph as is; the next launch on the stream reads
// them only after its griddepcontrol.wait, i.e. after this grid completed and its writes are
// visible (kernels/pdl.cuh).
//
// PDL (kernels/pdl.cuh rule 1): before the wait each CTA only loads into registers the gate/up
// tiles of unit blockIdx.x (a guess of its first claim: if the claim differs it reloads, from L2
// since another CTA's guess loaded that unit) and prefetches into L2 its 1/G slice of the down
// weight (pf >= 1) and of gate/up (pf >= 2): immutable weights, ldg_stream and prefetch forms
// only. After the wait: the first claim, and while it is in flight the add-norm prologue of the
// fused GLU GEMV (gv_norm_prologue: x into shared memory; the CTA whose first claim is unit 0
// also writes h_out and x), or x loaded; then the units. Every CTA that computes a phase-1
// unit read h_in, r and x before it publishes that unit, hence before any phase-2 store, so y
// may be r (the engine writes the block's output over the attention output the add reads).
#include <cuda_fp16.h>
#include <stdio.h>

#include "kernels/gemm_common.cuh"
#include "kernels/pdl.cuh"
#include "kernels/persist_mlp.cuh"
#include "kernels/q4_tile.cuh"
#include "kernels/spin.cuh"
#include "kernels/wgmma_common.cuh"

namespace g4k {
namespace {

constexpr int PM_WARPS = 8;
constexpr int PM_TPW = 4;                // k tiles a warp holds for one unit
constexpr int PM_KT = PM_WARPS * PM_TPW; // k tiles a unit: 32 (phase 1: K <= 2048)
constexpr int PM_LINE = 32;              // ints a 128-byte line
constexpr int PM_WORK = 0, PM_DONE1 = PM_LINE, PM_EXIT = 2 * PM_LINE, PM_TILES = 3 * PM_LINE;

// The workspace: 3 + H/16 counter lines for the largest hidden taken (PM_KT * 64), then the
// phase-2 partials float [S2][H]. The counters' place does not depend on H: a workspace reused
// by a block of another shape finds its counters where the last one left them zero (with an
// H-sized counter region, a shape whose counters reached into the last shape's partials read
// them as counts: H 2048 after H 1536 left y's tiles 96..127 unwritten on the H200).
constexpr size_t PM_CTR_BYTES = (size_t)(3 + PM_KT * 64 / 16) * PM_LINE * sizeof(int);
int down_chunks(int F) {
    return (F / 64 + PM_KT - 1) / PM_KT;
}

struct pm_args {
    q4w wg, wu, wd;
    void *y;
    const __half *bias;
    __half *mlp;
    const __half *x; // (without the prologue)
    int epi, H, F, U1, S2, U2, pf;
    int *ctr;    // the counters
    float *part; // [S2][H]
};

// Thread 0: until *p >= target (acquire polls, bounded: kernels/spin.cuh), then a full fence
// (kept from the design as measured).
__device__ __forceinline__ void wait_count(const int *p, int target) {
    // (the 32 ns back-off: up to 264 pollers share the line's L2 slice with the publishers)
    g4_spin_geq(p, target, 32, false, "persist_mlp (phase-1 counter)");
    __threadfence();
}

// This CTA's 1/G slice of [p, p + bytes) into L2.
__device__ __forceinline__ void prefetch_slice(const void *p, size_t bytes) {
    const size_t G = gridDim.x, b = blockIdx.x;
    const size_t lo = bytes * b / G, hi = bytes * (b + 1) / G;
    g4_prefetch_l2_bytes((const char *)p + lo, hi - lo);
}

template <bool PRO>
__global__ void __launch_bounds__(PM_WARPS * 32, 2) persist_mlp_kernel(pm_args a, gv_pro pro) {
    __shared__ __align__(16) __half xs[PM_KT * 64]; // x [H]
    __shared__ float4 red[2][PM_WARPS][2][32];      // a unit's warp partials, by parity
    __shared__ int s_unit[2];                       // the claims, by parity
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int pair = 2 * g + (t >> 1); // the lane's scale / zero-point record entry
    const int KT1 = a.H / 64, KT2 = a.F / 64, total = a.U1 + a.U2;

    // The unit's tiles in registers: [i][0] gate (phase 2: down), [i][1] up.
    uint4 rq[PM_TPW][2];
    uint32_t rs[PM_TPW][2], rz[PM_TPW][2];
    const char *gq = (const char *)a.wg.q + 16 * lane, *uq = (const char *)a.wu.q + 16 * lane,
               *dq = (const char *)a.wd.q + 16 * lane;
    const char *gs = (const char *)a.wg.s + 4 * pair, *us = (const char *)a.wu.s + 4 * pair,
               *ds = (const char *)a.wd.s + 4 * pair;
    const char *gz = (const char *)a.wg.z + pair, *uz = (const char *)a.wu.z + pair,
               *dz = (const char *)a.wd.z + pair;
    auto load1 = [&](int u) { // phase-1 unit u: warp's tiles kt = warp + 8 i of feature tile u
#pragma unroll
        for (int i = 0; i < PM_TPW; i++) {
            const int kt = warp + PM_WARPS * i;
            if (kt < KT1) {
                const size_t ti = (size_t)u * KT1 + kt;
                rq[i][0] = ldg_stream(gq + ti * 512);
                rs[i][0] = ldg_stream_u32(gs + ti * 64);
                rz[i][0] = ldg_stream_u8(gz + ti * 16);
                rq[i][1] = ldg_stream(uq + ti * 512);
                rs[i][1] = ldg_stream_u32(us + ti * 64);
                rz[i][1] = ldg_stream_u8(uz + ti * 16);
            }
        }
    };
    auto chunk = [&](int p, int &nt, int &kb, int &ke) { // phase-2 unit p: tile, k range
        nt = p / a.S2;
        const int c = p % a.S2;
        kb = (int)((long long)KT2 * c / a.S2);
        ke = (int)((long long)KT2 * (c + 1) / a.S2);
    };
    auto load2 = [&](int p) { // phase-2 unit p: warp's tiles kb + warp + 8 i < ke
        int nt, kb, ke;
        chunk(p, nt, kb, ke);
#pragma unroll
        for (int i = 0; i < PM_TPW; i++) {
            const int kt = kb + warp + PM_WARPS * i;
            if (kt < ke) {
                const size_t ti = (size_t)nt * KT2 + kt;
                rq[i][0] = ldg_stream(dq + ti * 512);
                rs[i][0] = ldg_stream_u32(ds + ti * 64);
                rz[i][0] = ldg_stream_u8(dz + ti * 16);
            }
        }
    };

    // --- before the wait: immutable weights only (pdl.cuh rule 1) ---
    const int guess = (int)blockIdx.x;
    if (guess < a.U1) load1(guess);
    if (a.pf >= 1) {
        const size_t tiles = (size_t)(a.H / 16) * KT2;
        prefetch_slice(a.wd.q, tiles * 512);
        prefetch_slice(a.wd.s, tiles * 64);
        prefetch_slice(a.wd.z, tiles * 16);
    }
    if (a.pf >= 2) {
        const size_t tiles = (size_t)a.U1 * KT1;
        prefetch_slice(a.wg.q, tiles * 512);
        prefetch_slice(a.wu.q, tiles * 512);
        prefetch_slice(a.wg.s, tiles * 64);
        prefetch_slice(a.wu.s, tiles * 64);
        prefetch_slice(a.wg.z, tiles * 16);
        prefetch_slice(a.wu.z, tiles * 16);
    }
    g4_pdl_wait();
    g4_pdl_trigger();

    if (threadIdx.x == 0) s_unit[1] = atomicAdd(a.ctr + PM_WORK, 1); // the first claim
    // x into shared memory while the claim is in flight. The prologue's h_out and x are written
    // by the CTA whose first claim is unit 0 (s_unit[1], read after the prologue's first barrier):
    // it reads h_in and r before it publishes unit 0, so before any phase-2 store, and y may be
    // r (the engine's o). So does every CTA that computes a phase-1 unit (it publishes that unit
    // after its prologue); a CTA with none may read r after y was stored over it, but then its x
    // is never used and it writes nothing.
    if constexpr (PRO) {
        gv_norm_prologue(pro, xs, 1, a.H, &s_unit[1]); // (ends with a barrier)
    } else {
        for (int i = threadIdx.x * 8; i < a.H; i += blockDim.x * 8)
            *(uint4 *)(xs + i) = __ldg((const uint4 *)(a.x + i));
    }
    __syncthreads();
    // One load site, one compute site and one epilogue site each (the kernel stays small for the
    // instruction cache): iteration j issues the loads of the unit claimed last (`next`), runs
    // warp 0's epilogue of the unit computed before (`cur`, partials in red[cpar]), then computes
    // `next` into red[j & 1] and learns the claim after it.
    int next = s_unit[1], cur = -1, cpar = 0;
    bool have = next == guess && guess < a.U1; // the registers hold next's tiles already
    bool p1_done = false;                      // (CTA-uniform) phase 1 seen complete
    const uint32_t *xw1 = (const uint32_t *)(xs + 16 * t); // B column g reads token 0 (M = 1)
    for (int j = 0;; j++) {
        // the weights of `next` go out first, before cur's reduction and stores
        if (!have && next < a.U1)
            load1(next);
        else if (!have && next < total)
            load2(next - a.U1);
        have = false;
        if (cur >= 0 && warp == 0) {
            const bool ph1 = cur < a.U1;
            float4 v0 = red[cpar][0][0][lane], v1 = red[cpar][0][1][lane];
#pragma unroll
            for (int w = 1; w < PM_WARPS; w++) {
                const float4 p = red[cpar][w][0][lane];
                v0.x += p.x, v0.y += p.y, v0.z += p.z, v0.w += p.w;
                if (ph1) {
                    const float4 q = red[cpar][w][1][lane];
                    v1.x += q.x, v1.y += q.y, v1.z += q.z, v1.w += q.w;
                }
            }
            // D fragment: .x is feature 16 nt + g, token 2 t; .z feature 16 nt + g + 8, token
            // 2 t: token 0 is in lanes t == 0.
            if (ph1) {
                if (t == 0) {
                    const int n = 16 * cur + g;
                    a.mlp[n] = __float2half_rn(gelu_tanh(v0.x) * v1.x);
                    a.mlp[n + 8] = __float2half_rn(gelu_tanh(v0.z) * v1.z);
                }
                __threadfence();
                __syncwarp();
                if (lane == 0) atomicAdd(a.ctr + PM_DONE1, 1); // publish (release)
            } else {
                int nt, kb, ke;
                chunk(cur - a.U1, nt, kb, ke);
                const int n = 16 * nt + g, c = (cur - a.U1) % a.S2;
                if (a.S2 == 1) {
                    if (t == 0) {
                        store_one(a.y, a.epi, a.bias, n, n, v0.x);
                        store_one(a.y, a.epi, a.bias, n + 8, n + 8, v0.z);
                    }
                } else {
                    if (t == 0) {
                        a.part[(size_t)c * a.H + n] = v0.x;
                        a.part[(size_t)c * a.H + n + 8] = v0.z;
                    }
                    __threadfence();
                    __syncwarp();
                    int old = 0;
                    if (lane == 0) old = atomicAdd(a.ctr + PM_TILES + PM_LINE * nt, 1);
                    old = __shfl_sync(0xffffffffu, old, 0);
                    if (old == a.S2 - 1) { // the last chunk of tile nt: sum all in chunk order
                        __threadfence();
                        if (t == 0) {
                            float s0 = 0.0f, s1 = 0.0f;
                            for (int cc = 0; cc < a.S2; cc++) {
                                s0 += __ldcg(a.part + (size_t)cc * a.H + n);
                                s1 += __ldcg(a.part + (size_t)cc * a.H + n + 8);
                            }
                            store_one(a.y, a.epi, a.bias, n, n, s0);
                            store_one(a.y, a.epi, a.bias, n + 8, n + 8, s1);
                        }
                        if (lane == 0) atomicExch(a.ctr + PM_TILES + PM_LINE * nt, 0);
                    }
                }
            }
        }
        if (next >= total) break; // CTA-uniform
        cur = next;
        int claim = 0;
        if (threadIdx.x == 0) claim = atomicAdd(a.ctr + PM_WORK, 1); // in flight meanwhile
        const bool ph1 = cur < a.U1;                                 // CTA-uniform
        float acc[2][4];
#pragma unroll
        for (int f = 0; f < 2; f++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[f][e] = 0.0f;
        if (ph1) {
#pragma unroll
            for (int i = 0; i < PM_TPW; i++) {
                const int kt = warp + PM_WARPS * i;
                if (kt >= KT1) break; // warp-uniform
                const uint4 xa = *(const uint4 *)(xw1 + kt * 32),
                            xb = *(const uint4 *)(xw1 + kt * 32 + 4);
                const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
                for (int f = 0; f < 2; f++) {
                    q4_tile_mma(acc[f], rq[i][f], rs[i][f], rz[i][f], xw);
                }
            }
        } else {
            if (!p1_done) { // the down tiles are in flight: now wait for all of mlp
                if (threadIdx.x == 0) wait_count(a.ctr + PM_DONE1, a.U1);
                __syncthreads();
                p1_done = true;
            }
            int nt, kb, ke;
            chunk(cur - a.U1, nt, kb, ke);
            uint4 xa[PM_TPW], xb[PM_TPW];
#pragma unroll
            for (int i = 0; i < PM_TPW; i++) { // mlp through L2 (written by other CTAs)
                const int kt = kb + warp + PM_WARPS * i;
                if (kt < ke) {
                    const uint4 *px = (const uint4 *)(a.mlp + (size_t)kt * 64 + 16 * t);
                    xa[i] = __ldcg(px);
                    xb[i] = __ldcg(px + 1);
                }
            }
#pragma unroll
            for (int i = 0; i < PM_TPW; i++) {
                if (kb + warp + PM_WARPS * i >= ke) break; // warp-uniform
                const uint32_t xw[8] = {xa[i].x, xa[i].y, xa[i].z, xa[i].w,
                                        xb[i].x, xb[i].y, xb[i].z, xb[i].w};
                q4_tile_mma(acc[0], rq[i][0], rs[i][0], rz[i][0], xw);
            }
        }
        const int par = j & 1;
        red[par][warp][0][lane] = make_float4(acc[0][0], acc[0][1], acc[0][2], acc[0][3]);
        if (ph1) red[par][warp][1][lane] = make_float4(acc[1][0], acc[1][1], acc[1][2], acc[1][3]);
        if (threadIdx.x == 0) s_unit[par] = claim;
        // (warp 0 read red[par] and everyone s_unit[par] before the previous iteration's
        // barrier; the first claim sits in s_unit[1], read before iteration 0's barrier)
        __syncthreads();
        next = s_unit[par];
        cpar = par;
    }

    // The last CTA out resets the claim, phase-1 and exit counters for the next launch.
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(a.ctr + PM_EXIT, 1) == (int)gridDim.x - 1) {
            atomicExch(a.ctr + PM_WORK, 0);
            atomicExch(a.ctr + PM_DONE1, 0);
            atomicExch(a.ctr + PM_EXIT, 0);
        }
    }
}

// CTAs an SM: 2 (the launch bounds hold the kernel to 128 registers, 2 x 21 KB of shared
// memory: 2 fit) or G4_PERSIST_CPS=1 (A/B runs, read once: one CTA an SM leaves room for the next
// kernel's CTAs to become resident early under PDL). No runtime query: the first launch may be
// inside a graph capture. Residency is not needed for correctness (see the top): it only sizes
// the grid.
int ctas_per_sm() {
    static int cps = -1;
    if (cps < 0) cps = env_int("G4_PERSIST_CPS", 2, 1, 2);
    return cps;
}

// G4_PERSIST_PF (0 none, 1 the down weight, 2 gate/up too; default 1): what each CTA prefetches
// into L2 before its wait (A/B runs, read once).
int prefetch_mode() {
    static int pf = -1;
    if (pf < 0) pf = env_int("G4_PERSIST_PF", 1, 0, 2);
    return pf;
}

// The launch (its kernel named at the call, as tests/test_pdl_sass.sh finds PDL kernels).
void launch(const pm_args &p, const gv_pro &pro, bool with_prologue, int grid,
            cudaStream_t stream) {
    if (with_prologue)
        g4_pdl_launch(persist_mlp_kernel<true>, dim3(grid, 1, 1), dim3(PM_WARPS * 32, 1, 1),
                      (size_t)0, stream, p, pro);
    else
        g4_pdl_launch(persist_mlp_kernel<false>, dim3(grid, 1, 1), dim3(PM_WARPS * 32, 1, 1),
                      (size_t)0, stream, p, pro);
}

} // namespace
} // namespace g4k

extern "C" const char *g4_persist_mlp_supported(int H, int F) {
    if (H < 64 || H > g4k::PM_KT * 64 || H % 64 || F < 64 || F % 64)
        return "hidden a multiple of 64 up to 2048 (a phase-1 unit holds all of K) and an MLP "
               "width a multiple of 64";
    return NULL;
}

extern "C" size_t g4_persist_mlp_workspace(int H, int F) {
    return g4k::PM_CTR_BYTES +
           (size_t)g4k::down_chunks(F) * H * sizeof(float); // then the partials
}

extern "C" void g4_persist_mlp_plan(int H, int F, int *grid, int *units1, int *units2,
                                    int *chunks) {
    const int S2 = g4k::down_chunks(F), U1 = F / 16, U2 = H / 16 * S2;
    // G4_PERSIST_GRID=N (tests: a few CTAs walk every unit; read once) caps the grid
    static int forced = -1;
    if (forced < 0) forced = g4k::env_int("G4_PERSIST_GRID", 0, 0, 1 << 20);
    const long cap = forced ? forced : (long)g4k::num_sms() * g4k::ctas_per_sm();
    *grid = (int)(cap < U1 + U2 ? cap : U1 + U2);
    *units1 = U1;
    *units2 = U2;
    *chunks = S2;
}

extern "C" int g4_persist_mlp_q4(void *y, g4_gemm_epi epi, const void *bias, void *mlp,
                                 const void *x, const g4_gemv_norm *a, const g4_q4_weight *wg,
                                 const g4_q4_weight *wu, const g4_q4_weight *wd, void *ws,
                                 size_t ws_bytes, cudaStream_t stream) {
    const char *who = "persist_mlp_q4";
    if (!wg || !wd) return g4_fail(G4_EUSER, "%s: NULL weight", who);
    const int H = wg->k, F = wg->n;
    const char *why = g4_persist_mlp_supported(H, F);
    if (why) return g4_fail(G4_EUSER, "%s: hidden %d, MLP width %d: takes %s", who, H, F, why);
    int rc = g4k::check_q4(who, "gate", wg, F, H);
    if (!rc) rc = g4k::check_q4(who, "up", wu, F, H);
    if (!rc) rc = g4k::check_q4(who, "down", wd, H, F);
    if (rc) return rc;
    if ((x != nullptr) == (a != nullptr))
        return g4_fail(G4_EUSER, "%s: give x or the add-norm operands, exactly one", who);
    if (!mlp || ((uintptr_t)mlp & 15) || (x && ((uintptr_t)x & 15)))
        return g4_fail(G4_EUSER, "%s: mlp and x must be given and 16-byte aligned", who);
    if (!ws || ((uintptr_t)ws & 15) || ws_bytes < g4_persist_mlp_workspace(H, F))
        return g4_fail(G4_EUSER, "%s: workspace %zu bytes, expected >= %zu, 16-byte aligned", who,
                       ws_bytes, g4_persist_mlp_workspace(H, F));
    // y and bias: the down linear's checks (one token, N = H, K = F; x is mlp)
    rc = g4k::check_common(who, y, mlp, bias, 1, H, F, epi);
    if (rc) return rc;
    g4k::gv_pro pro{};
    if (a && (rc = g4k::norm_operands(who, a, mlp, nullptr, 1, F, H, G4_GEMM_Y_F16, true, &pro)))
        return rc;
    g4k::pm_args p;
    p.wg = g4k::view(wg);
    p.wu = g4k::view(wu);
    p.wd = g4k::view(wd);
    p.y = y;
    p.bias = (const __half *)bias;
    p.mlp = (__half *)mlp;
    p.x = (const __half *)x;
    p.epi = (int)epi;
    p.H = H;
    p.F = F;
    int grid = 0;
    g4_persist_mlp_plan(H, F, &grid, &p.U1, &p.U2, &p.S2);
    p.pf = g4k::prefetch_mode();
    p.ctr = (int *)ws;
    p.part = (float *)((char *)ws + g4k::PM_CTR_BYTES); // (after the counters)
    g4k::launch(p, pro, a != nullptr, grid, stream);
    return G4_OK;
}
