// bench_gemv.cu: `g4cu bench --kernels` rows for the fused decode GEMVs of kernels/gemv.cuh at
// the E2B decode shapes (M = 1), each beside the unfused sequence it replaces, timed the same
// way in the same run ("unfused": today's GEMV(s) + the separate kernel):
//   gv_qkv        q|k|v + norms + RoPE + KV store   vs  3 GEMVs + qkv_rope
//   gv_add_norm   o / down / PLE proj + residual norm  vs  GEMV + add_rmsnorm
//   gv_gelu_mul   PLE gate + GELU x input           vs  GEMV + gelu_mul
// Bytes: the weights (Q4: packed q + scales + zero points) + x + the outputs (+ h read and
// written), each once. Weights rotate through enough copies to pass 2x the L2 (up to 1024).
// The plain and GLU decode GEMV rows (gv_f16, gv_q4, gv_glu_*) are in bench_gemm.cu.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "kernels/bench/attnops_bench.cuh"
#include "kernels/gelu_mul.cuh"
#include "kernels/gemm_f16.cuh"
#include "kernels/gemm_q4.cuh"
#include "kernels/gemv.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "base/base.h"

using g4b::Pool;

namespace {

// Bytes of a [K, N] weight: fp16, or Q4 packed (q + scales + zero points).
double weight_bytes(bool q4, int N, int K) {
    return q4 ? (double)N * K * (0.5 + 1.0 / 16 + 1.0 / 64) : 2.0 * N * K;
}

// One weight of [K, N] in `copies` rotated copies: fp16, or Q4 packed bytes (random codes and
// zero points, small positive scales).
struct Weights {
    bool q4;
    int N, K;
    std::vector<uint16_t *> f16;
    std::vector<g4_q4_weight> q;
    Weights(Pool &pool, bool is_q4, int n, int k, int copies, uint32_t seed)
        : q4(is_q4), N(n), K(k) {
        for (int c = 0; c < copies; c++) {
            const uint32_t sd = seed * 977u + (uint32_t)c;
            if (!q4) {
                f16.push_back(pool.f16((size_t)K * N, sd, -0.05f, 0.05f));
                continue;
            }
            g4_q4_weight w;
            w.n = N, w.k = K;
            const size_t qb = (size_t)N * K / 2, sb = (size_t)N * K / 16, zb = (size_t)N * K / 64;
            w.q = (uint8_t *)pool.f16(qb / 2, sd, -1, 1); // any bits are codes
            w.scales = (uint8_t *)pool.f16(sb / 2, sd ^ 7u, 0.002f, 0.05f);
            w.zp = (uint8_t *)pool.f16(zb / 2, sd ^ 11u, -1, 1);
            w.bytes = qb + sb + zb;
            q.push_back(w);
        }
    }
    g4_gemv_w gv(int c) const {
        g4_gemv_w w = {q4 ? nullptr : f16[c], q4 ? &q[c] : nullptr, N, K};
        return w;
    }
    // Today's decode GEMV (the GEMV algorithm of the GEMM entries).
    void old(void *y, const void *x, int c, g4_gemm_epi epi, cudaStream_t st) const {
        const int rc = q4 ? g4_gemm_q4(y, x, &q[c], nullptr, 1, epi, G4_GEMM_GEMV, st)
                          : g4_gemm_f16(y, x, f16[c], nullptr, 1, N, K, epi, G4_GEMM_GEMV, st);
        if (rc) fprintf(stderr, "bench gemv: %s\n", g4_error());
    }
};

int copies_for(double bytes) {
    int l2 = 0;
    G4_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    const int c = (int)((2.0 * l2 + bytes - 1) / bytes);
    return c < 1 ? 1 : c > 1024 ? 1024 : c;
}

void report(int rc) {
    if (rc) fprintf(stderr, "bench gemv: %s\n", g4_error());
}

int bench_add_norm(const char *f, int reps, g4_kbench_row *rows, int n, int max, bool q4, int K,
                   const char *name, int next_norm, bool scaled) {
    const int N = 1536;
    char shape[96], op[32];
    snprintf(op, sizeof op, "gv_add_norm_%s", q4 ? "q4" : "f16");
    snprintf(shape, sizeof shape, "M=1 N=%d K=%d %s", N, K, name);
    if (!g4b::match(f, op, shape)) return n;
    Pool pool;
    const double wbytes = weight_bytes(q4, N, K);
    const int copies = copies_for(wbytes);
    Weights w(pool, q4, N, K, copies, 31u + (uint32_t)K);
    uint16_t *x = pool.f16(K, 1, -1, 1), *o16 = (uint16_t *)pool.alloc(2 * N);
    uint16_t *next = (uint16_t *)pool.alloc(2 * N);
    float *h = pool.f32(N, 2, -3, 3);
    uint16_t *nw = pool.f16(N, 3, 0.5f, 1.5f), *nw2 = pool.f16(N, 4, 0.5f, 1.5f);
    uint16_t *sc = pool.f16(1, 5, 0.4f, 0.5f);
    const size_t wsb = g4_gemv_workspace(1, N);
    void *ws = pool.alloc(wsb);
    G4_CUDA_CHECK(cudaMemset(ws, 0, wsb));
    g4_gemv_norm a = {h, nw, scaled ? sc : nullptr, 1e-6f, next, next_norm, nw2};
    auto ours = [&](int rep, cudaStream_t st) {
        const g4_gemv_w gw = w.gv(rep % copies);
        report(g4_gemv_add_rmsnorm(&a, x, &gw, 1, ws, wsb, st));
    };
    auto base = [&](int rep, cudaStream_t st) {
        w.old(o16, x, rep % copies, G4_GEMM_Y_F16, st);
        g4_add_rmsnorm(h, o16, nw, scaled ? sc : nullptr, 1e-6f,
                       next_norm ? G4_NEXT_NORM : G4_NEXT_COPY, next, nw2, 1, N, st);
    };
    const double bytes = wbytes + 2.0 * K + 8.0 * N + 2.0 * N; // W, x, h in + out, next
    return g4b::add_row(rows, n, max, op, shape, bytes, 2.0 * N * K, reps, copies, ours, base,
                        "unfused");
}

int bench_qkv(const char *f, int reps, g4_kbench_row *rows, int n, int max, bool q4, int hd,
              bool own, const char *name) {
    const int K = 1536, nh = 8, qw = nh * hd, kw = hd, cap = 512;
    char shape[96], op[32];
    snprintf(op, sizeof op, "gv_qkv_%s", q4 ? "q4" : "f16");
    snprintf(shape, sizeof shape, "M=1 K=%d h=8 kv=1 hd=%d %s", K, hd, name);
    if (!g4b::match(f, op, shape)) return n;
    Pool pool;
    const double wbytes = weight_bytes(q4, qw + (own ? 2 * kw : 0), K);
    const int copies = copies_for(wbytes);
    Weights wq(pool, q4, qw, K, copies, 41u + (uint32_t)hd), wk(pool, q4, kw, K, copies, 43u),
        wv(pool, q4, kw, K, copies, 47u);
    uint16_t *x = pool.f16(K, 6, -1, 1), *q = (uint16_t *)pool.alloc(2 * qw);
    uint16_t *k = (uint16_t *)pool.alloc(2 * kw), *v = (uint16_t *)pool.alloc(2 * kw);
    uint16_t *kc = (uint16_t *)pool.alloc(2 * (size_t)cap * kw);
    uint16_t *vc = (uint16_t *)pool.alloc(2 * (size_t)cap * kw);
    uint16_t *qn = pool.f16(hd, 7, 0.5f, 1.5f), *kn = pool.f16(hd, 8, 0.05f, 0.2f);
    std::vector<float> inv(hd / 2);
    for (int j = 0; j < hd / 2; j++) inv[j] = 1.0f / powf(1e4f, 2.0f * j / hd);
    float *dinv = pool.upload(inv.data(), inv.size());
    const int32_t p0 = 300;
    int32_t *pos = pool.upload(&p0, 1);
    const size_t wsb = g4_gemv_workspace(1, qw + 2 * kw);
    void *ws = pool.alloc(wsb);
    G4_CUDA_CHECK(cudaMemset(ws, 0, wsb));
    g4_gemv_qkv_args a = {};
    a.q = q, a.kcache = own ? kc : nullptr, a.vcache = own ? vc : nullptr, a.capacity = cap;
    a.q_w = qn, a.k_w = own ? kn : nullptr, a.pos = pos, a.inv_freq = dinv;
    a.n_heads = nh, a.n_kv = 1, a.hd = hd, a.eps = 1e-6f;
    auto ours = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        const g4_gemv_w w[3] = {wq.gv(c), wk.gv(c), wv.gv(c)};
        report(g4_gemv_qkv(&a, x, w, own ? 3 : 1, 1, ws, wsb, st));
    };
    auto base = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        wq.old(q, x, c, G4_GEMM_Y_F16, st);
        if (own) wk.old(k, x, c, G4_GEMM_Y_F16, st), wv.old(v, x, c, G4_GEMM_Y_F16, st);
        g4_qkv_args b = {};
        b.q = q, b.k = own ? k : nullptr, b.v = own ? v : nullptr;
        b.kcache = own ? kc : nullptr, b.vcache = own ? vc : nullptr, b.q_w = qn;
        b.k_w = own ? kn : nullptr, b.v_norm = 1, b.pos = pos, b.inv_freq = dinv, b.T = 1;
        b.n_heads = nh, b.n_kv = 1, b.hd = hd, b.capacity = cap, b.eps = 1e-6f;
        g4_qkv_norm_rope(&b, st);
    };
    const double bytes = wbytes + 2.0 * K + 2.0 * (qw + (own ? 2 * kw : 0));
    return g4b::add_row(rows, n, max, op, shape, bytes, 2.0 * K * (qw + (own ? 2 * kw : 0)), reps,
                        copies, ours, base, "unfused");
}

int bench_gelu_mul(const char *f, int reps, g4_kbench_row *rows, int n, int max, bool q4) {
    const int N = 256, K = 1536, ldb = 35 * 256;
    char shape[96], op[32];
    snprintf(op, sizeof op, "gv_gelu_mul_%s", q4 ? "q4" : "f16");
    snprintf(shape, sizeof shape, "M=1 N=%d K=%d ple_gate", N, K);
    if (!g4b::match(f, op, shape)) return n;
    Pool pool;
    const double wbytes = weight_bytes(q4, N, K);
    const int copies = copies_for(wbytes);
    Weights w(pool, q4, N, K, copies, 53u);
    uint16_t *x = pool.f16(K, 9, -1, 1), *y = (uint16_t *)pool.alloc(2 * N);
    uint16_t *b = pool.f16(ldb, 10, -2, 2);
    auto ours = [&](int rep, cudaStream_t st) {
        const g4_gemv_w gw = w.gv(rep % copies);
        report(g4_gemv_gelu_mul(y, x, &gw, b + 7 * 256, ldb, 1, st));
    };
    auto base = [&](int rep, cudaStream_t st) {
        w.old(y, x, rep % copies, G4_GEMM_Y_F16, st);
        g4_gelu_mul(y, N, y, N, b + 7 * 256, ldb, 1, N, st);
    };
    return g4b::add_row(rows, n, max, op, shape, wbytes + 2.0 * K + 4.0 * N, 2.0 * N * K, reps,
                        copies, ours, base, "unfused");
}

} // namespace

extern "C" int g4_kbench_gemv(const char *filter, int reps, g4_kbench_row *rows, int max) {
    int n = 0;
    for (bool q4 : {false, true}) {
        n = bench_qkv(filter, reps, rows, n, max, q4, 256, true, "sliding owner");
        n = bench_qkv(filter, reps, rows, n, max, q4, 512, true, "full owner");
        n = bench_qkv(filter, reps, rows, n, max, q4, 256, false, "sliding shared (q only)");
        n = bench_add_norm(filter, reps, rows, n, max, q4, 2048, "o_proj", 1, false);
        n = bench_add_norm(filter, reps, rows, n, max, q4, 4096, "o_proj_full", 1, false);
        n = bench_add_norm(filter, reps, rows, n, max, q4, 6144, "down", 0, false);
        n = bench_add_norm(filter, reps, rows, n, max, q4, 12288, "down_wide", 0, false);
        n = bench_add_norm(filter, reps, rows, n, max, q4, 256, "ple_proj", 1, true);
        n = bench_gelu_mul(filter, reps, rows, n, max, q4);
    }
    return n;
}
