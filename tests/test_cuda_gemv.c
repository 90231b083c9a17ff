// test_cuda_gemv.c: the fused epilogues of the decode GEMV (kernels/gemv.cuh) against their CPU
// references (kernels/ref/fused.c), fp16 and Q4 weights, one table of cases:
//   gelu_mul   g4_gemv_gelu_mul      vs ref_linear_gelu_mul_by     (the PLE gate)
//   add_norm   g4_gemv_add_rmsnorm   vs ref_linear_add_rmsnorm_next (o, down, PLE projection)
//   qkv        g4_gemv_qkv           vs ref_linear_qkv_prep         (q [+ k, v into the caches])
// (The plain and GLU epilogues share the table of tests/test_cuda_gemm.c: ops gv_f16, gv_q4.)
//
//   test_cuda_gemv [--op S] [--shape S] [--list] [--emulate]
//     --emulate  no GPU: feed the reference (rounded as the kernel's outputs are) through the
//                comparison, to check the harness and the tolerances themselves
// Without a GPU (and without --emulate) the test exits 77.
//
// Every case: seeded random inputs (never zeros), outputs poisoned with NaN and framed by guard
// bytes, run three times on the same workspace (eager, eager again, then replayed from a CUDA
// graph), each run bit-identical to the first: the counters of the last-block tails reset
// themselves, and no result depends on which block finished last.
//
// Expected values and tolerances. The reference weight of a Q4 case is the CPU dequantizer's
// output rounded once to fp16 (as tests/test_cuda_gemm.c: the kernels' exact dequantization),
// so x @ W differs from the reference only in the fp32 summation order: per output
// e_o <= TOL_ACC * sum_k |x_k w_k| (TOL_ACC of test_cuda_gemm.c). The fused outputs' bounds are
// that error carried through the epilogue to first order, doubled (second-order terms), plus
// the output's own rounding:
//   gelu_mul  |gelu'| <= 1.13:  e = 1.13 |b| e_o.
//   add_norm  inv = (mean(o^2) + eps)^-1/2 moves by at most inv * d, d = sum |o| e_o / (sum o^2
//             + N eps); h' = (h + o inv w) s: e_h = |s w| inv (e_o + |o| d); then next =
//             h' inv' w' in the same way from e_h (or next = h', e_next = e_h).
//   qkv       per head as add_norm's first norm; RoPE rotates a pair (a, b) by (c, s):
//             e_a' <= e_a + e_b, plus (|a| + |b|) TRIG for sin/cos (the reference's sinf/cosf and
//             the kernel's double sincospi rounded to fp32: <= 1.5 ulp of 1 each).
//   fp32 outputs: + F32_SLACK |ref| (a few fp32 roundings in another order); fp16 outputs:
//   + 2^-11 (|ref| + e) + 2^-24 (round to nearest of a value within e of the reference).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemv.cuh"
#include "kernels/ref/fused.h"
#include "tests/attnops_harness.h"
#include "tests/gemm_host.h"

#define TOL_ACC   (1.0 / 8192.0)
#define F32_SLACK 1e-6
#define TRIG      4e-7
#define EPS       1e-6f

static int g_emulate;

typedef enum { K_GELU_MUL, K_ADD_NORM, K_QKV } fkind;

typedef struct {
    fkind kind;
    int q4;
    int M, N, K;             // N: the outputs (QKV: computed from the heads)
    int hd, n_heads, n_kv;   // QKV
    int own;                 // QKV: q, k, v (1) or q only (0)
    int rope;                // QKV: 0 all pairs (theta 1e4), 1 proportional (1/4 rotate, 1e6)
    int p0;                  // QKV: first position (the tokens sit at p0 .. p0 + M - 1)
    int bad_pos;             // QKV: the last token's position is the capacity (never written)
    int next_norm, scale, w; // ADD_NORM: next mode, a layer scalar, norm weights (0: NULL)
    const char *what;
} fcase;

static const char *kind_name(fkind k) {
    return k == K_GELU_MUL ? "gelu_mul" : k == K_ADD_NORM ? "add_norm" : "qkv";
}

// clang-format off
#define GM(q4, M, N, K, what) {K_GELU_MUL, q4, M, N, K, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, what}
#define AN(q4, M, N, K, nn, sc, w, what) {K_ADD_NORM, q4, M, N, K, 0, 0, 0, 0, 0, 0, 0, nn, sc, w, what}
#define QK(q4, M, K, hd, nh, nkv, own, rope, p0, bad, what) \
    {K_QKV, q4, M, 0, K, hd, nh, nkv, own, rope, p0, bad, 0, 0, 0, what}
#define BOTH(X, ...) X(0, __VA_ARGS__), X(1, __VA_ARGS__)
static const fcase cases[] = {
    // PLE gate: y = gelu(x W) * ple slice
    BOTH(GM, 1, 256, 1536, "ple gate"), BOTH(GM, 3, 256, 1536, "ple gate"),
    BOTH(GM, 8, 256, 1536, "ple gate"), BOTH(GM, 5, 1040, 960, "odd"),
    BOTH(GM, 2, 2048, 1536, "q-sized"), GM(0, 1, 64, 64, "tiny"), GM(1, 1, 16, 64, "tiny"),
    GM(0, 4, 72, 1000, "odd (ragged strip)"),
    // post-norm residual adds with the next op's input
    BOTH(AN, 1, 1536, 2048, 1, 0, 1, "o sliding"), BOTH(AN, 1, 1536, 4096, 1, 0, 1, "o full"),
    BOTH(AN, 1, 1536, 6144, 0, 0, 1, "down (next = copy)"),
    BOTH(AN, 1, 1536, 12288, 0, 0, 1, "down wide (next = copy)"),
    BOTH(AN, 1, 1536, 256, 1, 1, 1, "ple proj (layer scalar)"),
    BOTH(AN, 2, 1536, 2048, 1, 0, 1, "o sliding"), BOTH(AN, 3, 1536, 256, 1, 1, 1, "ple proj"),
    BOTH(AN, 5, 1536, 6144, 0, 0, 1, "down"), BOTH(AN, 8, 1536, 4096, 1, 1, 1, "o full"),
    BOTH(AN, 1, 192, 320, 1, 1, 1, "odd"), BOTH(AN, 7, 1024, 960, 0, 1, 1, "odd"),
    BOTH(AN, 1, 64, 64, 1, 0, 0, "tiny (no norm weights)"),
    BOTH(AN, 2, 1536, 2048, 1, 1, 0, "no norm weights"),
    // q / k / v heads: norms, RoPE, KV store
    BOTH(QK, 1, 1536, 256, 8, 1, 1, 0, 37, 0, "sliding owner"),
    BOTH(QK, 1, 1536, 512, 8, 1, 1, 1, 4000, 0, "full owner (proportional)"),
    BOTH(QK, 1, 1536, 256, 8, 1, 0, 0, 511, 0, "sliding KV-shared (q only)"),
    BOTH(QK, 1, 1536, 512, 8, 1, 0, 1, 77, 0, "full KV-shared (q only)"),
    BOTH(QK, 3, 1536, 256, 8, 1, 1, 0, 100000, 0, "angles > 1e5 rad"),
    BOTH(QK, 8, 1536, 256, 8, 1, 1, 0, 5, 0, "sliding owner"),
    BOTH(QK, 2, 1536, 512, 8, 1, 1, 1, 1000, 1, "a bad position (no cache write)"),
    BOTH(QK, 5, 960, 128, 4, 2, 1, 0, 3, 0, "GQA 2:1"), BOTH(QK, 1, 64, 64, 2, 1, 1, 0, 0, 0, "tiny"),
    BOTH(QK, 4, 2048, 64, 6, 3, 1, 1, 9, 0, "odd heads"),
};
// clang-format on

static int case_n(const fcase *c) {
    return c->kind == K_QKV ? (c->n_heads + (c->own ? 2 * c->n_kv : 0)) * c->hd : c->N;
}

static void print_case(const fcase *c) {
    if (c->kind == K_QKV)
        printf("case op=%s w=%s M=%d K=%d hd=%d heads=%d kv=%d own=%d rope=%d pos0=%d bad=%d  "
               "[%s]\n",
               kind_name(c->kind), c->q4 ? "q4" : "f16", c->M, c->K, c->hd, c->n_heads, c->n_kv,
               c->own, c->rope, c->p0, c->bad_pos, c->what);
    else
        printf("case op=%s w=%s M=%d N=%d K=%d next_norm=%d scale=%d norm_w=%d  [%s]\n",
               kind_name(c->kind), c->q4 ? "q4" : "f16", c->M, c->N, c->K, c->next_norm, c->scale,
               c->w, c->what);
    fflush(stdout);
}

// --- weights: host (the reference's fp16 [K, n]) and device --------------------------------

typedef struct {
    int n, K;
    uint16_t *w16;  // fp16 [K, n]: the weight (fp16) or its reference (Q4)
    q4_host q;      // Q4 package tensors (q4 cases)
    void *dev;      // fp16 device copy
    g4_q4_weight p; // Q4 repacked on the device
    float *mag;     // [M, n] sum_k |x w|
    float *o;       // [M, n] x @ W (reference)
} wseg;

static void wseg_make(wseg *s, int q4, int n, int K, int M, const float *x, unsigned long long *r) {
    memset(s, 0, sizeof *s);
    s->n = n, s->K = K;
    if (q4) {
        q4_host_make(&s->q, n, K, 0, r);
        int *cols = g4_malloc(sizeof(int) * (size_t)n);
        for (int i = 0; i < n; i++) cols[i] = i;
        s->w16 = q4_ref_w16(&s->q, K, cols, n);
        free(cols);
    } else {
        s->w16 = rnd_f16((size_t)K * n, -6, 0, r); // |w| in [1/64, 1/4)
    }
    s->mag = g4_malloc(sizeof(float) * (size_t)M * n);
    s->o = g4_malloc(sizeof(float) * (size_t)M * n);
    abs_linear(s->mag, x, s->w16, M, K, n);
    ref_linear_f16(s->o, x, s->w16, NULL, M, K, n, 0);
    if (g_emulate) return;
    if (q4) {
        int rc = g4_q4_repack(&s->p, s->q.q, s->q.scales, s->q.zp, n, K, 32);
        CHECK_MSG(rc == G4_OK, "repack: %s", g4_error());
    } else {
        s->dev = hx_upload(s->w16, (size_t)K * n * 2);
    }
}

static g4_gemv_w wseg_gemv(const wseg *s, int q4) {
    g4_gemv_w w = {q4 ? NULL : s->dev, q4 ? &s->p : NULL, s->n, s->K};
    return w;
}

// The reference linear: the fp16 [K, n] weight (for Q4 the rounded dequantization).
static g4_linear wseg_ref(const wseg *s) {
    g4_linear l;
    memset(&l, 0, sizeof l);
    l.kind = G4_W_F16, l.in = s->K, l.out = s->n, l.w = s->w16;
    return l;
}

static void wseg_free(wseg *s) {
    free(s->w16), free(s->mag), free(s->o);
    if (s->q.q) q4_host_free(&s->q);
    if (s->dev) hx_dev_free(s->dev);
    if (s->p.q) g4_q4_weight_free(&s->p);
}

// --- comparison -------------------------------------------------------------------------------

typedef struct {
    long bad, nonfinite;
    double worst; // largest err / tol
    size_t first;
    double first_got, first_want, first_tol;
} fcmp;

static void fcmp_one(fcmp *c, size_t i, double got, double want, double tol) {
    const double err = fabs(got - want);
    const int bad = !isfinite(got) || !(err <= tol);
    if (!isfinite(got)) c->nonfinite++;
    if (isfinite(got) && err / tol > c->worst) c->worst = err / tol;
    if (bad && !c->bad++)
        c->first = i, c->first_got = got, c->first_want = want, c->first_tol = tol;
}

static void fcmp_report(const char *what, const fcmp *c) {
    g4t_checks++;
    if (c->bad) g4t_failures++;
    printf("  %-26s %s  worst err/tol %.3f", what, c->bad ? "FAIL" : "ok  ", c->worst);
    if (c->bad)
        printf("  %ld bad (%ld non-finite); first [%zu] got %.9g want %.9g tol %.3g", c->bad,
               c->nonfinite, c->first, c->first_got, c->first_want, c->first_tol);
    printf("\n");
}

static double tol16(double want, double e) {
    return 2.0 * e + (1.0 / 2048.0) * (fabs(want) + 2.0 * e) + 1.0 / 16777216.0;
}
static double tol32(double want, double e) {
    return 2.0 * e + F32_SLACK * fabs(want) + 1e-7;
}

// Per-element bound of y = rmsnorm(v) * w (w fp16 [n] or NULL) given e_v per element, over one
// group of n values: e_y[i] = |w_i| inv (e_v[i] + |v_i| d), d = sum |v| e_v / (sum v^2 + n eps).
static void norm_bound(float *e_y, const float *v, const float *e_v, const uint16_t *w, int n) {
    double ss = 0, se = 0;
    for (int i = 0; i < n; i++) ss += (double)v[i] * v[i], se += fabs((double)v[i]) * e_v[i];
    const double inv = 1.0 / sqrt(ss / n + EPS), d = se / (ss + n * (double)EPS);
    for (int i = 0; i < n; i++)
        e_y[i] = (float)(fabs(w ? g4_f16_to_f32(w[i]) : 1.0) * inv * (e_v[i] + fabs(v[i]) * d));
}

// --- the launches (three runs each, compared bit for bit) -------------------------------------

typedef struct {
    const fcase *c;
    int q4;
    const void *dx;
    wseg *seg;
    int n_seg;
    // gelu_mul
    void *dy, *db;
    int ldb;
    // add_norm
    g4_gemv_norm an;
    const float *h0;
    // qkv
    g4_gemv_qkv_args qa;
    void *ws;
    size_t ws_bytes;
} launch;

static int do_launch(const launch *L, cudaStream_t st) {
    g4_gemv_w w[3];
    for (int i = 0; i < L->n_seg; i++) w[i] = wseg_gemv(&L->seg[i], L->q4);
    switch (L->c->kind) {
    case K_GELU_MUL:
        return g4_gemv_gelu_mul(L->dy, L->dx, &w[0], L->db, L->ldb, L->c->M, st);
    case K_ADD_NORM:
        return g4_gemv_add_rmsnorm(&L->an, L->dx, &w[0], L->c->M, L->ws, L->ws_bytes, st);
    default:
        return g4_gemv_qkv(&L->qa, L->dx, w, L->n_seg, L->c->M, L->ws, L->ws_bytes, st);
    }
}

// Resets the in/out buffers: outputs to NaN, h to its input, the caches to NaN.
static void reset_outputs(const launch *L, size_t n_out, size_t cache_n) {
    const fcase *c = L->c;
    if (c->kind == K_GELU_MUL) hx_poison_f16(L->dy, n_out);
    if (c->kind == K_ADD_NORM) {
        HX_CUDA(cudaMemcpy(L->an.h, L->h0, sizeof(float) * n_out, cudaMemcpyHostToDevice));
        hx_poison_f16(L->an.next, n_out);
    }
    if (c->kind == K_QKV) {
        hx_poison_f16(L->qa.q, (size_t)c->M * c->n_heads * c->hd);
        if (L->qa.kcache)
            hx_poison_f16(L->qa.kcache, cache_n), hx_poison_f16(L->qa.vcache, cache_n);
    }
}

// Downloads every output into one host array (fp32 h, then the fp16 bits), for bit comparisons.
static uint8_t *snapshot(const launch *L, size_t n_out, size_t cache_n, size_t *bytes) {
    const fcase *c = L->c;
    size_t b = 0;
    if (c->kind == K_GELU_MUL) b = 2 * n_out;
    if (c->kind == K_ADD_NORM) b = 6 * n_out;
    if (c->kind == K_QKV) b = 2 * (size_t)c->M * c->n_heads * c->hd + 4 * cache_n;
    uint8_t *h = g4_malloc(b + 1);
    if (c->kind == K_GELU_MUL) HX_CUDA(cudaMemcpy(h, L->dy, b, cudaMemcpyDeviceToHost));
    if (c->kind == K_ADD_NORM) {
        HX_CUDA(cudaMemcpy(h, L->an.h, 4 * n_out, cudaMemcpyDeviceToHost));
        HX_CUDA(cudaMemcpy(h + 4 * n_out, L->an.next, 2 * n_out, cudaMemcpyDeviceToHost));
    }
    if (c->kind == K_QKV) {
        const size_t qb = 2 * (size_t)c->M * c->n_heads * c->hd;
        HX_CUDA(cudaMemcpy(h, L->qa.q, qb, cudaMemcpyDeviceToHost));
        if (cache_n) {
            HX_CUDA(cudaMemcpy(h + qb, L->qa.kcache, 2 * cache_n, cudaMemcpyDeviceToHost));
            HX_CUDA(cudaMemcpy(h + qb + 2 * cache_n, L->qa.vcache, 2 * cache_n,
                               cudaMemcpyDeviceToHost));
        } else {
            b = qb;
        }
    }
    *bytes = b;
    return h;
}

// Runs the launch three times: eager, eager, a captured graph replayed twice. Returns the first
// run's snapshot; checks the others are identical to it.
static uint8_t *run3(const launch *L, size_t n_out, size_t cache_n, size_t *bytes, double *ms) {
    cudaStream_t st;
    HX_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    uint8_t *first = NULL;
    int same = 1;
    for (int run = 0; run < 3; run++) {
        reset_outputs(L, n_out, cache_n);
        HX_CUDA(cudaDeviceSynchronize());
        const double t0 = hx_now_ms();
        int rc = G4_OK;
        if (run < 2) {
            rc = do_launch(L, st);
        } else {
            cudaGraph_t g;
            cudaGraphExec_t e;
            HX_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            rc = do_launch(L, st);
            HX_CUDA(cudaStreamEndCapture(st, &g));
            HX_CUDA(cudaGraphInstantiate(&e, g, 0));
            HX_CUDA(cudaGraphLaunch(e, st));
            HX_CUDA(cudaStreamSynchronize(st));
            reset_outputs(L, n_out, cache_n); // the second replay is the one compared
            HX_CUDA(cudaGraphLaunch(e, st));
            HX_CUDA(cudaStreamSynchronize(st));
            HX_CUDA(cudaGraphExecDestroy(e));
            HX_CUDA(cudaGraphDestroy(g));
        }
        CHECK_MSG(rc == G4_OK, "launch: %s", g4_error());
        HX_CUDA(cudaStreamSynchronize(st));
        if (run == 0) *ms = hx_now_ms() - t0;
        size_t b;
        uint8_t *snap = snapshot(L, n_out, cache_n, &b);
        if (!first) {
            first = snap, *bytes = b;
        } else {
            same &= memcmp(first, snap, b) == 0;
            free(snap);
        }
    }
    HX_CUDA(cudaStreamDestroy(st));
    g4t_checks++;
    if (!same) g4t_failures++;
    printf("  %-26s %s\n", "3 runs (eager, eager, graph)",
           same ? "ok    bit-identical" : "FAIL  differ");
    return first;
}

static float f16_at(const uint8_t *p, size_t i) {
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return g4_f16_to_f32(h);
}

// --- the cases -------------------------------------------------------------------------------

static void case_gelu_mul(const fcase *c, unsigned long long *s, const float *x, const void *dx,
                          wseg *w) {
    const int M = c->M, N = c->N, ldb = N + 24, col0 = 8; // b: a wider row, a slice from col 8
    uint16_t *bb = rnd_f16((size_t)M * ldb, -2, 0, s);    // |b| in [1/4, 4)
    float *b = g4_malloc(sizeof(float) * (size_t)M * ldb), *want = g4_malloc(sizeof(float) * M * N);
    for (size_t i = 0; i < (size_t)M * ldb; i++) b[i] = g4_f16_to_f32(bb[i]);
    const g4_linear lin = wseg_ref(w);
    ref_linear_gelu_mul_by(want, x, M, &lin, b + col0, ldb);
    const size_t n_out = (size_t)M * N;
    uint8_t *got;
    double ms = 0;
    int guards = 1;
    if (g_emulate) {
        got = g4_malloc(2 * n_out);
        for (size_t i = 0; i < n_out; i++) {
            const uint16_t h = g4_f32_to_f16(want[i]);
            memcpy(got + 2 * i, &h, 2);
        }
    } else {
        launch L;
        memset(&L, 0, sizeof L);
        L.c = c, L.q4 = c->q4, L.dx = dx, L.seg = w, L.n_seg = 1;
        L.dy = hx_dev_alloc(2 * n_out);
        L.db = hx_upload(bb, 2 * (size_t)M * ldb);
        L.ldb = ldb;
        void *db0 = L.db;
        L.db = (uint16_t *)L.db + col0;
        size_t bytes;
        got = run3(&L, n_out, 0, &bytes, &ms);
        guards = hx_guards_ok(L.dy, 2 * n_out, "y");
        hx_dev_free(L.dy), hx_dev_free(db0);
    }
    fcmp cm = {0};
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)m * N + n;
            const double e = 1.13 * fabs(b[(size_t)m * ldb + col0 + n]) * TOL_ACC * w->mag[i];
            fcmp_one(&cm, i, f16_at(got, i), want[i], tol16(want[i], e));
        }
    if (!guards) cm.bad++;
    fcmp_report("y vs ref", &cm);
    printf("       %.2f ms (first launch)\n", ms);
    free(bb), free(b), free(want), free(got);
}

static void case_add_norm(const fcase *c, unsigned long long *s, const float *x, const void *dx,
                          wseg *w) {
    const int M = c->M, N = c->N;
    const size_t n_out = (size_t)M * N;
    float *h0 = g4_malloc(sizeof(float) * n_out), *h = g4_malloc(sizeof(float) * n_out);
    for (size_t i = 0; i < n_out; i++) h0[i] = rnd_val(s, 0.1f, 2.0f, 0);
    memcpy(h, h0, sizeof(float) * n_out);
    uint16_t *nw = c->w ? rnd_f16((size_t)N, -1, 0, s) : NULL; // |w| in [1/2, 8): sign too
    uint16_t *nw2 = c->w ? rnd_f16((size_t)N, -1, 0, s) : NULL;
    const uint16_t sc16 = g4_f32_to_f16(c->scale ? 0.4434f : 1.0f);
    const float sc = g4_f16_to_f32(sc16);
    float *next = g4_malloc(sizeof(float) * n_out);
    const g4_linear lin = wseg_ref(w);
    ref_linear_add_rmsnorm_next(h, next, x, M, &lin, nw, EPS, sc, c->next_norm, nw2);
    uint8_t *got;
    double ms = 0;
    int guards = 1;
    if (g_emulate) {
        got = g4_malloc(6 * n_out);
        memcpy(got, h, 4 * n_out);
        for (size_t i = 0; i < n_out; i++) {
            const uint16_t b = g4_f32_to_f16(next[i]);
            memcpy(got + 4 * n_out + 2 * i, &b, 2);
        }
    } else {
        launch L;
        memset(&L, 0, sizeof L);
        L.c = c, L.q4 = c->q4, L.dx = dx, L.seg = w, L.n_seg = 1, L.h0 = h0;
        L.an.h = hx_dev_alloc(4 * n_out);
        L.an.next = hx_dev_alloc(2 * n_out);
        L.an.norm_w = nw ? hx_upload(nw, 2 * (size_t)N) : NULL;
        L.an.next_w = nw2 ? hx_upload(nw2, 2 * (size_t)N) : NULL;
        L.an.scale = c->scale ? hx_upload(&sc16, 2) : NULL;
        L.an.eps = EPS, L.an.next_norm = c->next_norm;
        L.ws_bytes = g4_gemv_workspace(M, N);
        L.ws = hx_dev_alloc(L.ws_bytes);
        HX_CUDA(cudaMemset(L.ws, 0, L.ws_bytes));
        size_t bytes;
        got = run3(&L, n_out, 0, &bytes, &ms);
        guards = hx_guards_ok(L.an.h, 4 * n_out, "h") &&
                 hx_guards_ok(L.an.next, 2 * n_out, "next") &&
                 hx_guards_ok(L.ws, L.ws_bytes, "workspace");
        hx_dev_free(L.an.h), hx_dev_free(L.an.next), hx_dev_free((void *)L.an.norm_w);
        hx_dev_free((void *)L.an.next_w), hx_dev_free((void *)L.an.scale), hx_dev_free(L.ws);
    }
    // Bounds: e_o -> e_h (the post-norm, times the scale) -> e_next.
    float *eo = g4_malloc(sizeof(float) * N), *eh = g4_malloc(sizeof(float) * N),
          *en = g4_malloc(sizeof(float) * N);
    fcmp ch = {0}, cn = {0};
    for (int m = 0; m < M; m++) {
        const float *o = w->o + (size_t)m * N, *hm = h + (size_t)m * N;
        for (int n = 0; n < N; n++) eo[n] = (float)(TOL_ACC * w->mag[(size_t)m * N + n]);
        norm_bound(eh, o, eo, nw, N);
        for (int n = 0; n < N; n++) eh[n] *= fabsf(sc);
        if (c->next_norm)
            norm_bound(en, hm, eh, nw2, N);
        else
            memcpy(en, eh, sizeof(float) * N);
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)m * N + n;
            float gh;
            memcpy(&gh, got + 4 * i, 4);
            fcmp_one(&ch, i, gh, hm[n], tol32(hm[n], eh[n]));
            fcmp_one(&cn, i, f16_at(got + 4 * n_out, i), next[i], tol16(next[i], en[n]));
        }
    }
    if (!guards) ch.bad++;
    fcmp_report("h vs ref", &ch);
    fcmp_report(c->next_norm ? "next (norm) vs ref" : "next (copy) vs ref", &cn);
    printf("       %.2f ms (first launch)\n", ms);
    free(h0), free(h), free(nw), free(nw2), free(next), free(got), free(eo), free(eh), free(en);
}

static void inv_freq_for(float *inv, int hd, int rope) {
    const float theta = rope == 0 ? 10000.0f : 1e6f;
    const int rotated = rope == 0 ? hd / 2 : hd / 8; // proportional: a quarter of the pairs
    for (int j = 0; j < hd / 2; j++)
        inv[j] = j < rotated ? 1.0f / powf(theta, (float)(2 * j) / (float)hd) : 0.0f;
}

static void case_qkv(const fcase *c, unsigned long long *s, const float *x, const void *dx, wseg *w,
                     int n_seg) {
    const int M = c->M, hd = c->hd, nh = c->n_heads, nkv = c->n_kv, half = hd / 2;
    const int qw = nh * hd, kw = nkv * hd, cap = c->p0 + M + 3;
    int32_t *pos = g4_malloc(sizeof(int32_t) * M), *pos_ref = g4_malloc(sizeof(int32_t) * M);
    for (int m = 0; m < M; m++) pos[m] = c->p0 + m;
    if (c->bad_pos) pos[M - 1] = cap; // just past the cache: the kernel must not write it
    for (int m = 0; m < M; m++) pos_ref[m] = pos[m] < cap ? pos[m] : cap; // scratch row cap
    float *inv = g4_malloc(sizeof(float) * half);
    inv_freq_for(inv, hd, c->rope);
    uint16_t *qn = rnd_f16((size_t)hd, -1, 0, s), *kn = rnd_f16((size_t)hd, -1, 0, s);
    // Reference: q from the true positions (q only), k / v rows into caches with a scratch row.
    float *q = g4_malloc(sizeof(float) * (size_t)M * qw);
    float *kc = g4_calloc((size_t)(cap + 1) * kw + 1, sizeof(float));
    float *vc = g4_calloc((size_t)(cap + 1) * kw + 1, sizeof(float));
    const g4_linear lq = wseg_ref(&w[0]);
    ref_linear_qkv_prep(q, NULL, NULL, 0, x, M, &lq, NULL, NULL, qn, NULL, pos, inv, nh, nkv, hd,
                        EPS);
    if (c->own) {
        const g4_linear lk = wseg_ref(&w[1]), lv = wseg_ref(&w[2]);
        float *qs = g4_malloc(sizeof(float) * (size_t)M * qw);
        ref_linear_qkv_prep(qs, kc, vc, cap + 1, x, M, &lq, &lk, &lv, qn, kn, pos_ref, inv, nh, nkv,
                            hd, EPS);
        free(qs);
    }
    const size_t cache_n = c->own ? (size_t)cap * kw : 0, qn_out = (size_t)M * qw;
    uint8_t *got;
    double ms = 0;
    int guards = 1;
    if (g_emulate) {
        got = g4_malloc(2 * qn_out + 4 * cache_n + 1);
        for (size_t i = 0; i < qn_out; i++) {
            const uint16_t b = g4_f32_to_f16(q[i]);
            memcpy(got + 2 * i, &b, 2);
        }
        for (size_t i = 0; i < 2 * cache_n; i++) { // written rows as the reference, others NaN
            const size_t r = (i % cache_n) / kw;
            int written = 0;
            for (int m = 0; m < M; m++) written |= pos[m] == (int)r;
            const uint16_t b =
                written ? g4_f32_to_f16((i < cache_n ? kc : vc)[i % cache_n]) : (uint16_t)0x7E00;
            memcpy(got + 2 * qn_out + 2 * i, &b, 2);
        }
    } else {
        launch L;
        memset(&L, 0, sizeof L);
        L.c = c, L.q4 = c->q4, L.dx = dx, L.seg = w, L.n_seg = n_seg;
        L.qa.q = hx_dev_alloc(2 * qn_out);
        L.qa.kcache = c->own ? hx_dev_alloc(2 * cache_n) : NULL;
        L.qa.vcache = c->own ? hx_dev_alloc(2 * cache_n) : NULL;
        L.qa.capacity = c->own ? cap : 0;
        L.qa.q_w = hx_upload(qn, 2 * (size_t)hd);
        L.qa.k_w = c->own ? hx_upload(kn, 2 * (size_t)hd) : NULL;
        L.qa.pos = hx_upload(pos, 4 * (size_t)M);
        L.qa.inv_freq = hx_upload(inv, 4 * (size_t)half);
        L.qa.n_heads = nh, L.qa.n_kv = nkv, L.qa.hd = hd, L.qa.eps = EPS;
        L.ws_bytes = g4_gemv_workspace(M, case_n(c));
        L.ws = hx_dev_alloc(L.ws_bytes);
        HX_CUDA(cudaMemset(L.ws, 0, L.ws_bytes));
        size_t bytes;
        got = run3(&L, 0, cache_n, &bytes, &ms);
        guards = hx_guards_ok(L.qa.q, 2 * qn_out, "q") && hx_guards_ok(L.ws, L.ws_bytes, "ws");
        if (c->own)
            guards = guards && hx_guards_ok(L.qa.kcache, 2 * cache_n, "kcache") &&
                     hx_guards_ok(L.qa.vcache, 2 * cache_n, "vcache");
        hx_dev_free(L.qa.q), hx_dev_free(L.qa.kcache), hx_dev_free(L.qa.vcache);
        hx_dev_free((void *)L.qa.q_w), hx_dev_free((void *)L.qa.k_w);
        hx_dev_free((void *)L.qa.pos), hx_dev_free((void *)L.qa.inv_freq), hx_dev_free(L.ws);
    }
    // Bounds per head: the norm, then the rotation of the pair (j, j + hd / 2).
    float *eq = g4_malloc(sizeof(float) * hd), *en = g4_malloc(sizeof(float) * hd);
    float *vn = g4_malloc(sizeof(float) * hd);
    fcmp cq = {0}, ck = {0};
    long untouched_bad = 0;
    for (int m = 0; m < M; m++)
        for (int hh = 0; hh < (c->own ? nh + 2 * nkv : nh); hh++) {
            const int kind = hh < nh         ? 0
                             : hh < nh + nkv ? 1
                                             : 2,
                      head = kind == 0   ? hh
                             : kind == 1 ? hh - nh
                                         : hh - nh - nkv;
            const wseg *ws = &w[kind];
            const int wn = ws->n;
            const float *o = ws->o + (size_t)m * wn + (size_t)head * hd;
            for (int j = 0; j < hd; j++)
                eq[j] = (float)(TOL_ACC * ws->mag[(size_t)m * wn + (size_t)head * hd + j]);
            const uint16_t *nwt = kind == 0 ? qn : kind == 1 ? kn : NULL;
            norm_bound(en, o, eq, nwt, hd);
            // |normed values| for the trig term: the reference before RoPE
            double ss = 0;
            for (int j = 0; j < hd; j++) ss += (double)o[j] * o[j];
            const double iv = 1.0 / sqrt(ss / hd + EPS);
            for (int j = 0; j < hd; j++)
                vn[j] = (float)(fabs(o[j]) * iv * (nwt ? fabs(g4_f16_to_f32(nwt[j])) : 1.0));
            for (int j = 0; j < hd; j++) {
                const int a = j < half ? j : j - half, b = a + half;
                const double e =
                    kind == 2 ? en[j] : en[a] + en[b] + (vn[a] + vn[b]) * TRIG; // v: no RoPE
                if (kind == 0) {
                    const size_t i = (size_t)m * qw + (size_t)head * hd + j;
                    fcmp_one(&cq, i, f16_at(got, i), q[i], tol16(q[i], e));
                } else if (pos[m] < cap) {
                    const size_t ci = (size_t)pos[m] * kw + (size_t)head * hd + j;
                    const float want = (kind == 1 ? kc : vc)[ci];
                    const size_t gi = qn_out + (kind == 2 ? cache_n : 0) + ci;
                    fcmp_one(&ck, gi, f16_at(got, gi), want, tol16(want, e));
                }
            }
        }
    // Cache rows no token owns (every other row, and the bad position's) keep the poison.
    for (size_t i = 0; i < 2 * cache_n; i++) {
        const size_t r = (i % cache_n) / kw;
        int written = 0;
        for (int m = 0; m < M; m++) written |= pos[m] == (int)r;
        uint16_t b;
        memcpy(&b, got + 2 * qn_out + 2 * i, 2);
        if (!written && b != 0x7E00) untouched_bad++;
    }
    if (!guards) cq.bad++;
    fcmp_report("q vs ref", &cq);
    if (c->own) {
        fcmp_report("k, v cache rows vs ref", &ck);
        g4t_checks++;
        if (untouched_bad) g4t_failures++;
        printf("  %-26s %s  %ld written outside the tokens' rows\n", "other cache rows",
               untouched_bad ? "FAIL" : "ok  ", untouched_bad);
    }
    printf("       %.2f ms (first launch)\n", ms);
    free(pos), free(pos_ref), free(inv), free(qn), free(kn), free(q), free(kc), free(vc), free(got);
    free(eq), free(en), free(vn);
}

static void run_case(const fcase *c) {
    print_case(c);
    unsigned long long s = 0x9e3779b97f4a7c15ull ^ ((unsigned long long)c->M << 8) ^
                           ((unsigned long long)case_n(c) << 20) ^
                           ((unsigned long long)c->K << 40) ^
                           (unsigned long long)(c->kind * 7 + c->q4 * 131 + c->p0);
    const int M = c->M, K = c->K;
    uint16_t *xb = rnd_f16((size_t)M * K, -4, 0, &s); // |x| in [1/16, 1)
    float *x = g4_malloc(sizeof(float) * (size_t)M * K);
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = g4_f16_to_f32(xb[i]);
    void *dx = g_emulate ? NULL : hx_upload(xb, 2 * (size_t)M * K);
    wseg w[3];
    int n_seg = 1;
    if (c->kind == K_QKV) {
        wseg_make(&w[0], c->q4, c->n_heads * c->hd, K, M, x, &s);
        if (c->own) {
            wseg_make(&w[1], c->q4, c->n_kv * c->hd, K, M, x, &s);
            wseg_make(&w[2], c->q4, c->n_kv * c->hd, K, M, x, &s);
            n_seg = 3;
        }
    } else {
        wseg_make(&w[0], c->q4, c->N, K, M, x, &s);
    }
    if (c->kind == K_GELU_MUL) case_gelu_mul(c, &s, x, dx, &w[0]);
    if (c->kind == K_ADD_NORM) case_add_norm(c, &s, x, dx, &w[0]);
    if (c->kind == K_QKV) case_qkv(c, &s, x, dx, w, n_seg);
    for (int i = 0; i < n_seg; i++) wseg_free(&w[i]);
    if (dx) hx_dev_free(dx);
    free(xb), free(x);
}

static int matches(const fcase *c, const char *op, const char *shape) {
    char a[64], b[160];
    snprintf(a, sizeof a, "%s/%s", kind_name(c->kind), c->q4 ? "q4" : "f16");
    snprintf(b, sizeof b, "M=%d N=%d K=%d hd=%d ", c->M, case_n(c), c->K, c->hd);
    return (!op || strstr(a, op)) && (!shape || strstr(b, shape));
}

int main(int argc, char **argv) {
    const char *op = NULL, *shape = NULL;
    int list = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--op") && i + 1 < argc)
            op = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            shape = argv[++i];
        else if (!strcmp(argv[i], "--list"))
            list = 1;
        else if (!strcmp(argv[i], "--emulate"))
            g_emulate = 1;
        else {
            fprintf(stderr, "usage: test_cuda_gemv [--op S] [--shape S] [--list] [--emulate]\n");
            return 1;
        }
    }
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    if (list) {
        for (int i = 0; i < n_cases; i++)
            if (matches(&cases[i], op, shape)) print_case(&cases[i]);
        return 0;
    }
    g4_ref_init();
    const char *why = NULL;
    if (!g_emulate && g4_cuda_device_count(&why) == 0)
        return g4t_skip("test_cuda_gemv", why ? why : "no CUDA device");
    if (!g_emulate) {
        char dev[256];
        g4_cuda_describe(dev, sizeof dev);
        printf("device: %s\n", dev);
    }
    int ran = 0;
    const double t0 = hx_now_ms();
    for (int i = 0; i < n_cases; i++)
        if (matches(&cases[i], op, shape)) run_case(&cases[i]), ran++;
    printf("%d cases in %.1f s%s\n", ran, (hx_now_ms() - t0) / 1e3,
           g_emulate ? " (emulated: no GPU ran)" : "");
    if (!ran) return 1;
    return g4t_finish("test_cuda_gemv");
}
