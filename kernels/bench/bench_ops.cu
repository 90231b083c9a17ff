// bench_ops.cu: `g4cu bench --kernels` rows for the fused small ops at E2B shapes, decode
// (T = 1: latency-bound, the row shows launch + one pass) and prefill (T = 2048: bandwidth).
// Bytes: each input read once, each output written once (kbench.h). No library has these
// fused ops; the reference point is the copy bandwidth.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "kernels/bench/attnops_bench.cuh"
#include "kernels/common.cuh"
#include "kernels/embed.cuh"
#include "kernels/gelu_mul.cuh"
#include "kernels/logits.cuh"
#include "kernels/pdl.cuh"
#include "kernels/ple.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/vision_pool.cuh"
#include "kernels/vision_posemb.cuh"

using g4b::NoBase;
using g4b::Pool;

namespace {

int bench_rmsnorm(const char *f, int reps, g4_kbench_row *rows, int n, int max, int T) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d cols=1536 x=f32", T);
    if (!g4b::match(f, "rmsnorm", shape)) return n;
    Pool pool;
    const size_t el = (size_t)T * 1536;
    const int copies = g4_kbench_copies(el * 6);
    std::vector<float *> x(copies);
    std::vector<uint16_t *> y(copies);
    for (int c = 0; c < copies; c++)
        x[c] = pool.f32(el, 1 + c, -3, 3), y[c] = (uint16_t *)pool.alloc(2 * el);
    uint16_t *w = pool.f16(1536, 2, 0.5f, 2);
    auto ours = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        g4_rmsnorm_f32(y[c], x[c], w, T, 1536, 1536, 1e-6f, st);
    };
    return g4b::add_row(rows, n, max, "rmsnorm", shape, el * 6.0, 0, reps, copies, ours, NoBase(),
                        nullptr);
}

int bench_add_rmsnorm(const char *f, int reps, g4_kbench_row *rows, int n, int max, int T) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d cols=1536 next=norm scale", T);
    if (!g4b::match(f, "add_rmsnorm", shape)) return n;
    Pool pool;
    const size_t el = (size_t)T * 1536;
    const double bytes = el * (2.0 + 4 + 4 + 2); // x in, h in + out, y2 out
    const int copies = g4_kbench_copies((size_t)bytes);
    std::vector<float *> h(copies);
    std::vector<uint16_t *> x(copies), y2(copies);
    for (int c = 0; c < copies; c++) {
        h[c] = pool.f32(el, 3 + c, -20, 20), x[c] = pool.f16(el, 4 + c, -3, 3);
        y2[c] = (uint16_t *)pool.alloc(2 * el);
    }
    uint16_t *w = pool.f16(1536, 5, 0.5f, 2), *w2 = pool.f16(1536, 6, 0.5f, 2),
             *sc = pool.f16(1, 7, 0.4f, 0.5f);
    auto ours = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        g4_add_rmsnorm(h[c], x[c], w, sc, 1e-6f, G4_NEXT_NORM, y2[c], w2, T, 1536, st);
    };
    return g4b::add_row(rows, n, max, "add_rmsnorm", shape, bytes, 0, reps, copies, ours, NoBase(),
                        nullptr);
}

int bench_qkv(const char *f, int reps, g4_kbench_row *rows, int n, int max, int T, int hd,
              int prop) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d h=8 kv=1 hd=%d %s +cache", T, hd,
             prop ? "proportional" : "default");
    if (!g4b::match(f, "qkv_rope", shape)) return n;
    Pool pool;
    const int qw = 8 * hd, kw = hd, cap = T + 16;
    const double bytes = (double)T * (qw + kw * 2) * 2 * 2; // q in/out, k v in, cache out
    const int copies = g4_kbench_copies((size_t)bytes);
    std::vector<uint16_t *> q(copies), k(copies), v(copies), kc(copies), vc(copies);
    for (int c = 0; c < copies; c++) {
        q[c] = pool.f16((size_t)T * qw, 8 + c, -2, 2),
        k[c] = pool.f16((size_t)T * kw, 9 + c, -2, 2);
        v[c] = pool.f16((size_t)T * kw, 10 + c, -2, 2);
        kc[c] = (uint16_t *)pool.alloc(2 * (size_t)cap * kw),
        vc[c] = (uint16_t *)pool.alloc(2 * (size_t)cap * kw);
    }
    std::vector<float> inv(hd / 2);
    for (int j = 0; j < hd / 2; j++)
        inv[j] = !prop || j < hd / 8 ? 1.0f / powf(prop ? 1e6f : 1e4f, 2.0f * j / hd) : 0.0f;
    std::vector<int32_t> pos_h(T);
    for (int t = 0; t < T; t++) pos_h[t] = t;
    float *dinv = pool.upload(inv.data(), inv.size());
    int32_t *pos = pool.upload(pos_h.data(), pos_h.size());
    uint16_t *qn = pool.f16(hd, 12, 0.5f, 1.5f), *kn = pool.f16(hd, 13, 0.05f, 0.2f);
    auto ours = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        g4_qkv_args a = {};
        a.q = q[c], a.k = k[c], a.v = v[c], a.kcache = kc[c], a.vcache = vc[c], a.q_w = qn,
        a.k_w = kn;
        a.v_norm = 1, a.pos = pos, a.inv_freq = dinv, a.T = T, a.n_heads = 8, a.n_kv = 1, a.hd = hd;
        a.capacity = cap, a.eps = 1e-6f;
        g4_qkv_norm_rope(&a, st);
    };
    return g4b::add_row(rows, n, max, "qkv_rope", shape, bytes, 0, reps, copies, ours, NoBase(),
                        nullptr);
}

int bench_gelu_mul(const char *f, int reps, g4_kbench_row *rows, int n, int max, int T, int N) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d n=%d", T, N);
    if (!g4b::match(f, "gelu_mul", shape)) return n;
    Pool pool;
    const size_t el = (size_t)T * N;
    const int copies = g4_kbench_copies(el * 6);
    std::vector<uint16_t *> a(copies), b(copies), y(copies);
    for (int c = 0; c < copies; c++)
        a[c] = pool.f16(el, 14 + c, -4, 4), b[c] = pool.f16(el, 15 + c, -2, 2),
        y[c] = (uint16_t *)pool.alloc(2 * el);
    auto ours = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        g4_gelu_mul(y[c], N, a[c], N, b[c], N, T, N, st);
    };
    return g4b::add_row(rows, n, max, "gelu_mul", shape, el * 6.0, 0, reps, copies, ours, NoBase(),
                        nullptr);
}

int bench_ple(const char *f, int reps, g4_kbench_row *rows, int n, int max, int T) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d layers=35 D=256 table=4096 rows", T);
    if (!g4b::match(f, "ple", shape)) return n;
    Pool pool;
    const int w = 35 * 256;
    // the PLE table (4.7 GB at E2B) is replaced by 4096 distinct rows: only T rows are read
    const int rows_alloc = 4096;
    const double bytes = (double)T * w * 2 * 3;
    const int copies = g4_kbench_copies((size_t)bytes);
    std::vector<uint16_t *> proj(copies), out(copies);
    for (int c = 0; c < copies; c++)
        proj[c] = pool.f16((size_t)T * w, 16 + c, -30, 30),
        out[c] = (uint16_t *)pool.alloc(2 * (size_t)T * w);
    uint16_t *table = pool.f16((size_t)rows_alloc * w, 17, -0.1f, 0.1f),
             *nw = pool.f16(256, 18, 0.5f, 1.5f);
    std::vector<int32_t> ids_h(T);
    for (int t = 0; t < T; t++) ids_h[t] = (t * 7919) % rows_alloc;
    int32_t *ids = pool.upload(ids_h.data(), ids_h.size());
    auto ours = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        g4_ple_inputs(out[c], proj[c], table, rows_alloc, ids, nw, T, 35, 256,
                      1.0f / sqrtf(1536.0f), 16.0f, 1.0f / sqrtf(2.0f), 1e-6f, st);
    };
    return g4b::add_row(rows, n, max, "ple", shape, bytes, 0, reps, copies, ours, NoBase(),
                        nullptr);
}

// The sample op at E2B's vocabulary: greedy, or sampled as `g4cu bench` samples (temperature
// 1, top-k 64, top-p 0.95; the draw index advances per launch).
int bench_logits(const char *f, int reps, g4_kbench_row *rows, int n, int max, int T,
                 int sampled) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d V=262144 cap=30 %s", T,
             sampled ? "T1 k64 p0.95" : "greedy");
    if (!g4b::match(f, "logits", shape)) return n;
    Pool pool;
    const int V = 262144;
    const size_t el = (size_t)T * V;
    const int copies = g4_kbench_copies(el * 8);
    std::vector<float *> x(copies);
    for (int c = 0; c < copies; c++) x[c] = pool.f32(el, 19 + c, -40, 40);
    int32_t *next = (int32_t *)pool.alloc(4 * (size_t)T);
    std::vector<int32_t> cnt_h(T, 0);
    int32_t *cnt = pool.upload(cnt_h.data(), (size_t)T);
    g4_sample_params hp = {};
    hp.temperature = sampled ? 1.0f : 0.0f;
    hp.top_k = sampled ? 64 : 0;
    hp.top_p = sampled ? 0.95f : 1.0f;
    hp.seed_lo = 7;
    g4_sample_params *dp = pool.upload(&hp, 1);
    const size_t wsb = g4_logits_workspace(T, V);
    void *ws = pool.alloc(wsb);
    G4_CUDA_CHECK(cudaMemset(ws, 0, wsb));
    // repeated capping shrinks the values toward a fixed point; the work per launch is the same
    auto ours = [&](int rep, cudaStream_t st) {
        g4_logits_sample(next, x[rep % copies], T, V, 30.0f, dp, cnt, ws, wsb, st);
    };
    return g4b::add_row(rows, n, max, "logits", shape, el * 8.0, 0, reps, copies, ours, NoBase(),
                        nullptr);
}

int bench_embed(const char *f, int reps, g4_kbench_row *rows, int n, int max, int T) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d cols=1536 out=f32", T);
    if (!g4b::match(f, "embed", shape)) return n;
    Pool pool;
    const int trows = 65536; // 192 MB of table: random rows come from HBM
    uint16_t *table = pool.f16((size_t)trows * 1536, 20, -0.2f, 0.2f);
    const int copies = 8;
    std::vector<int32_t *> ids(copies);
    std::vector<int32_t> ids_h(T);
    for (int c = 0; c < copies; c++) {
        for (int t = 0; t < T; t++)
            ids_h[t] = (int)(((uint64_t)(t + 1) * 2654435761u * (c + 1)) % trows);
        ids[c] = pool.upload(ids_h.data(), ids_h.size());
    }
    float *y = (float *)pool.alloc(4 * (size_t)T * 1536);
    auto ours = [&](int rep, cudaStream_t st) {
        g4_embed_f32(y, table, trows, 1536, ids[rep % copies], T, 39.1875f, st);
    };
    return g4b::add_row(rows, n, max, "embed", shape, (double)T * 1536 * 6, 0, reps, copies, ours,
                        NoBase(), nullptr);
}

// The launch floor of a decode step's kernels (issue 30): a kernel that does nothing but the
// PDL wait and trigger (and one store, so it is not empty), replayed 64 to a graph like the
// step's; its time per launch is what each of the step's ~300 launches costs before any work.
__global__ void floor_kernel(int *sink) {
    g4_pdl_wait();
    g4_pdl_trigger();
    if (threadIdx.x == 0) sink[blockIdx.x] = (int)blockIdx.x;
}

int bench_launch_floor(const char *f, int reps, g4_kbench_row *rows, int n, int max) {
    struct variant {
        int ctas, cluster, pdl;
    };
    const int sms = g4k::num_sms();
    const variant vs[] = {{1, 0, 1}, {sms, 0, 1}, {2 * sms, 0, 1}, {2 * sms, 2, 1}, {2 * sms, 0, 0}};
    for (const variant &v : vs) {
        char shape[96];
        snprintf(shape, sizeof shape, "CTAs=%d x 256%s %s", v.ctas, v.cluster ? " cluster=2" : "",
                 v.pdl ? "pdl" : "plain");
        if (!g4b::match(f, "launch_floor", shape)) continue;
        Pool pool;
        int *sink = (int *)pool.alloc(sizeof(int) * (size_t)v.ctas);
        auto ours = [&](int, cudaStream_t st) {
            if (!v.pdl) {
                floor_kernel<<<v.ctas, 256, 0, st>>>(sink);
                G4_CUDA_LAUNCH_CHECK();
            } else if (v.cluster) {
                g4_pdl_launch_cluster(floor_kernel, dim3(v.ctas), dim3(256), 0, st,
                                      dim3(v.cluster, 1, 1), sink);
            } else {
                g4_pdl_launch(floor_kernel, dim3(v.ctas), dim3(256), 0, st, sink);
            }
        };
        n = g4b::add_row(rows, n, max, "launch_floor", shape, 0, 0, reps, 64, ours, NoBase(),
                         nullptr);
    }
    return n;
}

// The floor of the path after the wait (issue 29 / 30): what a decode GEMV does once its
// weights are on chip. Each CTA reads the whole previous kernel's output x (K halves: the L2
// round trip a GEMV's activation costs), sums it through shared memory (the split-K
// reduction's barrier), and writes 16 halves of y; the next launch reads y as its x (ping-pong
// buffers, so every read depends on the launch before, as in the step). No weights at all: a
// GEMV's row above this one is what its weights and MMAs add.
__global__ void post_wait_floor_kernel(const __half *x, __half *y, int K) {
    __shared__ float part[256 / 32];
    g4_pdl_wait();
    g4_pdl_trigger();
    float v = 0.0f;
    for (int i = threadIdx.x * 8; i < K; i += blockDim.x * 8) {
        const uint4 u = *(const uint4 *)(x + i);
        const __half2 *h = (const __half2 *)&u;
#pragma unroll
        for (int e = 0; e < 4; e++) v += __low2float(h[e]) + __high2float(h[e]);
    }
    v = g4k::warp_sum(
        v); // (then one barrier, as a GEMV's split-K reduction; not block_sum's three)
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 16) {
        float sum = 0.0f;
        for (int w = 0; w < (int)blockDim.x / 32; w++) sum += part[w];
        // 16 outputs a CTA, like a feature tile; scaled down so the chain stays finite
        y[((size_t)blockIdx.x * 16 + threadIdx.x) % K] = __float2half(sum * (1.0f / 4096.0f));
    }
}

int bench_post_wait_floor(const char *f, int reps, g4_kbench_row *rows, int n, int max) {
    const int sms = g4k::num_sms();
    for (int ctas : {sms, 2 * sms}) {
        char shape[96];
        snprintf(shape, sizeof shape, "CTAs=%d x 256 pdl, x 1536 halves from the launch before",
                 ctas);
        if (!g4b::match(f, "post_wait_floor", shape)) continue;
        Pool pool;
        const int K = 1536;
        __half *buf[2] = {(__half *)pool.f16(K, 7, -1.0f, 1.0f),
                          (__half *)pool.f16(K, 8, -1.0f, 1.0f)};
        auto ours = [&](int rep, cudaStream_t st) {
            g4_pdl_launch(post_wait_floor_kernel, dim3(ctas), dim3(256), 0, st,
                          (const __half *)buf[rep & 1], buf[(rep + 1) & 1], K);
        };
        n = g4b::add_row(rows, n, max, "post_wait_floor", shape, 0, 0, reps, 64, ours, NoBase(),
                         nullptr);
    }
    return n;
}

int bench_vision(const char *f, int reps, g4_kbench_row *rows, int n, int max) {
    const int gw = 42, gh = 57, pad = 126, N = gw * gh + pad, D = 768, bins = N / 9;
    std::vector<int32_t> pos_h(2 * (size_t)N);
    for (int i = 0; i < N; i++) {
        pos_h[2 * i] = i < gw * gh ? i % gw : -1;
        pos_h[2 * i + 1] = i < gw * gh ? i / gw : -1;
    }
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d D=%d k=3 bins=%d", N, D, bins);
    if (g4b::match(f, "vision_pool", shape)) {
        Pool pool;
        const double bytes = (double)N * D * 4 + (double)bins * D * 4 + N * 8.0;
        const int copies = g4_kbench_copies((size_t)bytes);
        std::vector<float *> x(copies), y(copies);
        for (int c = 0; c < copies; c++)
            x[c] = pool.f32((size_t)N * D, 21 + c, -5, 5),
            y[c] = (float *)pool.alloc(4 * (size_t)bins * D);
        int32_t *pos = pool.upload(pos_h.data(), pos_h.size());
        auto ours = [&](int rep, cudaStream_t st) {
            const int c = rep % copies;
            g4_vision_pool(y[c], nullptr, x[c], pos, N, D, 3, bins, sqrtf((float)D), st);
        };
        n = g4b::add_row(rows, n, max, "vision_pool", shape, bytes, 0, reps, copies, ours, NoBase(),
                         nullptr);
    }
    snprintf(shape, sizeof shape, "N=%d D=%d table=10240", N, D);
    if (g4b::match(f, "vision_posemb", shape)) {
        Pool pool;
        const double bytes =
            (double)N * D * 8 + (double)N * D * 4 + N * 8.0; // h in/out, 2 table rows
        const int copies = g4_kbench_copies((size_t)bytes);
        std::vector<float *> h(copies);
        for (int c = 0; c < copies; c++) h[c] = pool.f32((size_t)N * D, 22 + c, -3, 3);
        uint16_t *table = pool.f16((size_t)2 * 10240 * D, 23, -1, 1);
        int32_t *pos = pool.upload(pos_h.data(), pos_h.size());
        auto ours = [&](int rep, cudaStream_t st) {
            g4_vision_posemb_add(h[rep % copies], table, 10240, pos, N, D, st);
        };
        n = g4b::add_row(rows, n, max, "vision_posemb", shape, bytes, 0, reps, copies, ours,
                         NoBase(), nullptr);
    }
    return n;
}

} // namespace

extern "C" int g4_kbench_ops(const char *filter, int reps, g4_kbench_row *rows, int max) {
    int n = 0;
    const int Ts[] = {1, 2048};
    for (int T : Ts) {
        n = bench_rmsnorm(filter, reps, rows, n, max, T);
        n = bench_add_rmsnorm(filter, reps, rows, n, max, T);
        n = bench_qkv(filter, reps, rows, n, max, T, 256, 0);
        n = bench_qkv(filter, reps, rows, n, max, T, 512, 1);
        n = bench_gelu_mul(filter, reps, rows, n, max, T, T == 1 ? 12288 : 6144);
        n = bench_ple(filter, reps, rows, n, max, T);
        n = bench_embed(filter, reps, rows, n, max, T);
    }
    n = bench_gelu_mul(filter, reps, rows, n, max, 1, 256); // PLE gate
    n = bench_logits(filter, reps, rows, n, max, 1, 0);
    n = bench_logits(filter, reps, rows, n, max, 1, 1);
    n = bench_vision(filter, reps, rows, n, max);
    n = bench_launch_floor(filter, reps, rows, n, max);
    n = bench_post_wait_floor(filter, reps, rows, n, max);
    return n;
}
