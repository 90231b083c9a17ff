// test_cuda_attention.c: the CUDA attention kernels against the CPU references, one table of
// cases per op (harness: tests/attnops_harness.h; `--op`, `--shape` filters):
//   attn_decode   g4_attn_decode  vs ref_attention  (KV lengths 1 .. 32768, T 1-2, window, GQA,
//                 capacity >> length, NaN-poisoned cache rows past the length, a CUDA graph
//                 replayed at several lengths)
//   attn_prefill  g4_attn_prefill_algo vs ref_attention, the HMMA and the WGMMA kernel on each
//                 case (T 1 .. 16000, causal / sliding 512 / small windows, hd 256 and 512,
//                 chunked prefill after a past, GQA 1, 2, 3, 4, 8, 16, 64 heads per KV head,
//                 persistent grids of 1-3 CTAs, caches ending at the last key; rows sampled
//                 for the big ones; op attn_prefill/hmma or attn_prefill/wgmma)
//   attn_bidir    g4_attn_bidir   vs ref_attention_bidir (vision: 12 x 64, N up to 2520, padding)
//   attn_audio    g4_attn_audio   vs ref_audio_attention (8 x 128, T up to 750, invalid frames)
// Skips (exit 77) without a GPU.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_audio.cuh"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/ref/ref.h"
#include "tests/attnops_harness.h"

// Tolerances for fp16 attention outputs (inputs are the same fp16 values on both sides; the
// reference is fp64):
//  - the kernels round P to fp16 before the P V product: each weight off by <= 2^-11 relative,
//    so the output by <= 2^-11 * max|v| = 4.9e-4 for |v| <= 1 (atol 1e-3 = 2x that);
//  - the fp16 output rounding: 2^-11 relative (rtol 2e-3 = 4x, which also covers the fp32
//    accumulation of the scores, ~1e-6 relative, amplified by |s| <= ~30 in exp).
#define ATTN_ATOL 1e-3
#define ATTN_RTOL 2e-3
// Audio attention is fp32 end to end (no fp16 P): only the fp16 output rounding and fp32 sums.
#define AUDIO_ATOL 2e-4
#define AUDIO_RTOL 1e-3

// Cache of [capacity, width] fp16 with rows [0, valid) random and rows past it NaN: the kernels
// must never read them (a NaN would spread into the output).
static float *make_cache(unsigned long long *s, int capacity, int width, int valid, float span,
                         uint16_t **bits) {
    float *f = hx_rand_f16(s, (size_t)capacity * width, -span, span, bits);
    for (size_t i = (size_t)valid * width; i < (size_t)capacity * width; i++)
        (*bits)[i] = 0x7E00, f[i] = NAN;
    return f;
}

// Rows of the GPU output [T, w] that the reference checks: all for small T, else a sample
// (first/last 16, the window edge, random ones).
static int pick_rows(int T, int window_edge, unsigned long long *s, int *rows) {
    int n = 0;
    if (T <= 80) {
        for (int t = 0; t < T; t++) rows[n++] = t;
        return n;
    }
    for (int t = 0; t < 16; t++) rows[n++] = t;
    for (int t = T - 16; t < T; t++) rows[n++] = t;
    for (int d = -2; d <= 2; d++)
        if (window_edge + d >= 16 && window_edge + d < T - 16) rows[n++] = window_edge + d;
    for (int i = 0; i < 24; i++)
        rows[n++] = 16 + (int)(g4t_rand_u64(s) % (unsigned long long)(T - 32));
    return n;
}

// Every element of a downloaded fp16 output finite (unwritten rows stay NaN).
static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

// --- decode -----------------------------------------------------------------------------------
// The decode cases run four times: the two launches (merge kernel), the merge inside the split
// kernel (g4_attn_decode_set_merge(1), G4_ATTN_MERGE=cluster's path), that merge on the
// windowless cases only (2, G4_ATTN_MERGE=global), and the default (3, auto): as 2 where the
// launch is built for g4_attn_decode_long_keys() keys or more (g4_attn_decode_set_keys: each
// case tells its length, a graph its capacity), else the two launches.
static int g_merge = 0, g_keys = 0;

// The path taken and the workspace's ticket header after the launch(es): the form asked for
// (the cluster merge whenever forced and the window allows: every case here fits its limits),
// tickets back to zero.
static void check_decode_path(const void *dws, int window, const char *what) {
    const int want = g_merge == 1 || (g_merge == 2 && window == 0) ||
                     (g_merge == 3 && window == 0 && g_keys >= g4_attn_decode_long_keys());
    const size_t hb = g4_attn_decode_ws_header();
    uint32_t *h = g4_malloc(hb);
    HX_CUDA(cudaMemcpy(h, dws, hb, cudaMemcpyDeviceToHost));
    size_t nz = 0;
    for (size_t i = 0; i < hb / 4; i++) nz += h[i] != 0;
    free(h);
    const int path = g4_attn_decode_last_merge();
    g4t_checks++;
    if (path != want || nz) {
        g4t_failures++, hx_cases_failed++;
        printf("  %-22s FAIL  merge inside the splits %d (want %d), %zu nonzero ticket words\n",
               what, path, want, nz);
    } else {
        printf("  %-22s ok    merge inside the splits %d, tickets zero\n", what, path);
    }
}

// The launch of a decode case, kept so that it can be made again.
typedef struct {
    void *out, *q, *k, *v, *pos, *ws;
    int T, nh, nkv, hd, capacity, window;
    size_t ws_bytes;
} decode_launch;

static void decode_run(const decode_launch *d) {
    g4_attn_decode(d->out, d->q, d->k, d->v, d->pos, d->T, d->nh, d->nkv, d->hd, d->capacity,
                   d->window, 1.0f, d->ws, d->ws_bytes, 0);
}

// The same launch again into a poisoned output must give the same bits: both merges sum in a
// fixed order whatever order the splits (and, merging inside, the clusters' tickets) arrive in.
static void check_decode_repeat(const decode_launch *d, size_t out_n) {
    uint16_t *a = g4_malloc(2 * out_n), *b = g4_malloc(2 * out_n);
    HX_CUDA(cudaMemcpy(a, d->out, 2 * out_n, cudaMemcpyDeviceToHost));
    hx_poison_f16(d->out, out_n);
    decode_run(d);
    HX_CUDA(cudaDeviceSynchronize());
    HX_CUDA(cudaMemcpy(b, d->out, 2 * out_n, cudaMemcpyDeviceToHost));
    size_t diff = 0;
    for (size_t i = 0; i < out_n; i++) diff += a[i] != b[i];
    g4t_checks++;
    if (diff) {
        g4t_failures++, hx_cases_failed++;
        printf("  %-22s FAIL  %zu of %zu fp16 outputs differ from the first launch's\n", "repeat",
               diff, out_n);
    } else {
        printf("  %-22s ok    the first launch's %zu fp16 outputs, bit for bit\n", "repeat", out_n);
    }
    free(a), free(b);
}

// Poisons a decode workspace (NaN) except its ticket header, which must start at zero.
static void poison_decode_ws(void *dws, size_t bytes) {
    hx_poison_f32(dws, bytes / 4);
    HX_CUDA(cudaMemset(dws, 0, g4_attn_decode_ws_header()));
}

static void case_decode(int hd, int nh, int nkv, int T, int L, int capacity, int window,
                        float kspan, unsigned long long seed) {
    if (capacity < L) capacity = L;
    if (!hx_case("attn_decode", "hd=%d heads=%d kv=%d T=%d L=%d cap=%d window=%d kspan=%g merge=%d",
                 hd, nh, nkv, T, L, capacity, window, kspan, g_merge))
        return;
    unsigned long long s = seed;
    const int qw = nh * hd, kvw = nkv * hd;
    uint16_t *qb, *kb, *vb;
    float *q = hx_rand_f16(&s, (size_t)T * qw, -1, 1, &qb);
    float *k = make_cache(&s, capacity, kvw, L, kspan, &kb);
    float *v = make_cache(&s, capacity, kvw, L, 1.0f, &vb);
    int32_t pos[64];
    for (int t = 0; t < T; t++) pos[t] = L - T + t; // the last token sits at L - 1
    void *dq = hx_upload(qb, 2 * (size_t)T * qw), *dk = hx_upload(kb, 2 * (size_t)capacity * kvw);
    void *dv = hx_upload(vb, 2 * (size_t)capacity * kvw), *dpos = hx_upload(pos, 4 * (size_t)T);
    const size_t out_n = (size_t)T * qw,
                 ws_bytes = g4_attn_decode_workspace(T, nh, nkv, hd, capacity);
    void *dout = hx_dev_alloc(2 * out_n), *dws = hx_dev_alloc(ws_bytes);
    hx_poison_f16(dout, out_n);
    poison_decode_ws(dws, ws_bytes);
    g4_attn_decode_set_merge(g_merge);
    g4_attn_decode_set_keys(g_keys = L);
    cudaEvent_t e0, e1;
    HX_CUDA(cudaEventCreate(&e0));
    HX_CUDA(cudaEventCreate(&e1));
    const decode_launch dl = {dout, dq,  dk, dv,       dpos,   dws,     T,
                              nh,   nkv, hd, capacity, window, ws_bytes};
    HX_CUDA(cudaEventRecord(e0, 0));
    decode_run(&dl);
    HX_CUDA(cudaEventRecord(e1, 0));
    HX_CUDA(cudaDeviceSynchronize());
    float ms = 0;
    HX_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    float *got = hx_download_f16(dout, out_n), *want = g4_malloc(sizeof(float) * out_n);
    ref_attention(want, q, k, v, pos, T, nh, nkv, hd, window, 1.0f);
    const int guards =
        hx_guards_ok(dout, 2 * out_n, "out") && hx_guards_ok(dws, ws_bytes, "workspace");
    hx_report("out vs ref_attention", hx_compare(got, want, out_n, ATTN_ATOL, ATTN_RTOL), got, want,
              ATTN_ATOL, ATTN_RTOL, guards, ms);
    check_decode_path(dws, window, "path");
    check_decode_repeat(&dl, out_n);
    check_decode_path(dws, window, "path (repeat)");
    HX_CUDA(cudaEventDestroy(e0));
    HX_CUDA(cudaEventDestroy(e1));
    hx_dev_free(dq), hx_dev_free(dk), hx_dev_free(dv), hx_dev_free(dpos), hx_dev_free(dout),
        hx_dev_free(dws);
    free(q), free(k), free(v), free(qb), free(kb), free(vb), free(got), free(want);
}

// One decode launch captured in a CUDA graph, replayed after the device position changes:
// the grid is fixed by the capacity, the work follows the length.
static void case_decode_graph(int hd, int capacity) {
    if (!hx_case("attn_decode", "graph hd=%d heads=8 kv=1 T=1 cap=%d L=1,300,%d,%d merge=%d", hd,
                 capacity, capacity, capacity, g_merge))
        return;
    unsigned long long s = 4242;
    const int nh = 8, qw = nh * hd, kvw = hd;
    uint16_t *qb, *kb, *vb;
    float *q = hx_rand_f16(&s, qw, -1, 1, &qb);
    float *k = hx_rand_f16(&s, (size_t)capacity * kvw, -0.25f, 0.25f, &kb);
    float *v = hx_rand_f16(&s, (size_t)capacity * kvw, -1, 1, &vb);
    void *dq = hx_upload(qb, 2 * (size_t)qw), *dk = hx_upload(kb, 2 * (size_t)capacity * kvw);
    void *dv = hx_upload(vb, 2 * (size_t)capacity * kvw);
    int32_t pos = 0;
    void *dpos = hx_upload(&pos, 4);
    const size_t ws_bytes = g4_attn_decode_workspace(1, nh, 1, hd, capacity);
    void *dout = hx_dev_alloc(2 * (size_t)qw), *dws = hx_dev_alloc(ws_bytes);
    poison_decode_ws(dws, ws_bytes);
    g4_attn_decode_set_merge(g_merge);
    g4_attn_decode_set_keys(g_keys = capacity); // (the engine's long-range graph's hint)
    cudaStream_t st;
    HX_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    // one plain launch first: per-kernel attributes are set outside the capture
    g4_attn_decode(dout, dq, dk, dv, dpos, 1, nh, 1, hd, capacity, 0, 1.0f, dws, ws_bytes, st);
    HX_CUDA(cudaStreamSynchronize(st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    HX_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    g4_attn_decode(dout, dq, dk, dv, dpos, 1, nh, 1, hd, capacity, 0, 1.0f, dws, ws_bytes, st);
    HX_CUDA(cudaStreamEndCapture(st, &graph));
    HX_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    // (the capacity twice: the second replay must repeat the first's bits)
    const int lens[4] = {1, 300, capacity, capacity};
    float *want = g4_malloc(sizeof(float) * qw), *prev = NULL;
    for (int i = 0; i < 4; i++) {
        pos = lens[i] - 1;
        HX_CUDA(cudaMemcpyAsync(dpos, &pos, 4, cudaMemcpyHostToDevice, st));
        hx_poison_f16(dout, qw);
        HX_CUDA(cudaGraphLaunch(exec, st));
        HX_CUDA(cudaStreamSynchronize(st));
        float *got = hx_download_f16(dout, qw);
        ref_attention(want, q, k, v, &pos, 1, nh, 1, hd, 0, 1.0f);
        char what[64];
        snprintf(what, sizeof what, "replay L=%d", lens[i]);
        hx_report(what, hx_compare(got, want, qw, ATTN_ATOL, ATTN_RTOL), got, want, ATTN_ATOL,
                  ATTN_RTOL, hx_guards_ok(dout, 2 * (size_t)qw, "out"), 0);
        check_decode_path(dws, 0, "path");
        if (i == 3) {
            g4t_checks++;
            if (memcmp(got, prev, sizeof(float) * qw)) {
                g4t_failures++, hx_cases_failed++;
                printf("  %-22s FAIL  the replay at L=%d differs from the one before\n", "repeat",
                       lens[i]);
            } else {
                printf("  %-22s ok    the replay at L=%d repeats the one before\n", "repeat",
                       lens[i]);
            }
        }
        free(prev);
        prev = got;
    }
    free(prev);
    HX_CUDA(cudaGraphExecDestroy(exec));
    HX_CUDA(cudaGraphDestroy(graph));
    HX_CUDA(cudaStreamDestroy(st));
    hx_dev_free(dq), hx_dev_free(dk), hx_dev_free(dv), hx_dev_free(dpos), hx_dev_free(dout),
        hx_dev_free(dws);
    free(q), free(k), free(v), free(qb), free(kb), free(vb), free(want);
}

// --- prefill ----------------------------------------------------------------------------------
// algo: the kernel (HMMA or WGMMA, attention_prefill.cuh); max_ctas caps the WGMMA kernel's
// persistent grid (0: one CTA per SM) so one CTA walks many blocks; slack: cache rows past the
// last position (NaN), 0 = the cache ends at the last key (TMA zero-fills past it).
static void case_prefill_x(g4_attn_algo algo, int hd, int nh, int nkv, int T, int p0, int window,
                           float kspan, int max_ctas, int slack, unsigned long long seed) {
    if (!hx_case(algo == G4_ATTN_WGMMA ? "attn_prefill/wgmma" : "attn_prefill/hmma",
                 "hd=%d heads=%d kv=%d T=%d past=%d window=%d kspan=%g ctas=%d slack=%d", hd, nh,
                 nkv, T, p0, window, kspan, max_ctas, slack))
        return;
    unsigned long long s = seed;
    const int qw = nh * hd, kvw = nkv * hd, L = p0 + T, capacity = L + slack;
    uint16_t *qb, *kb, *vb;
    float *q = hx_rand_f16(&s, (size_t)T * qw, -1, 1, &qb);
    float *k = make_cache(&s, capacity, kvw, L, kspan, &kb);
    float *v = make_cache(&s, capacity, kvw, L, 1.0f, &vb);
    int32_t *pos = g4_malloc(sizeof(int32_t) * (size_t)T);
    for (int t = 0; t < T; t++) pos[t] = p0 + t;
    void *dq = hx_upload(qb, 2 * (size_t)T * qw), *dk = hx_upload(kb, 2 * (size_t)capacity * kvw);
    void *dv = hx_upload(vb, 2 * (size_t)capacity * kvw), *dpos = hx_upload(pos, 4 * (size_t)T);
    const size_t out_n = (size_t)T * qw;
    void *dout = hx_dev_alloc(2 * out_n);
    hx_poison_f16(dout, out_n);
    const double t0 = hx_now_ms();
    g4_attn_prefill_algo(dout, dq, dk, dv, dpos, T, nh, nkv, hd, capacity, window, 1.0f, algo,
                         max_ctas, 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    float *got = hx_download_f16(dout, out_n);
    int rows[96];
    const int nr = pick_rows(T, window > 0 ? window - p0 : T / 2, &s, rows);
    float *qs = g4_malloc(sizeof(float) * (size_t)nr * qw),
          *gs = g4_malloc(sizeof(float) * (size_t)nr * qw);
    float *want = g4_malloc(sizeof(float) * (size_t)nr * qw);
    int32_t ps[96];
    for (int i = 0; i < nr; i++) {
        memcpy(qs + (size_t)i * qw, q + (size_t)rows[i] * qw, sizeof(float) * qw);
        memcpy(gs + (size_t)i * qw, got + (size_t)rows[i] * qw, sizeof(float) * qw);
        ps[i] = pos[rows[i]];
    }
    ref_attention(want, qs, k, v, ps, nr, nh, nkv, hd, window, 1.0f);
    int guards = hx_guards_ok(dout, 2 * out_n, "out");
    if (!all_finite(got, out_n)) {
        printf("    non-finite values in the output (unwritten rows?)\n");
        guards = 0;
    }
    char what[64];
    snprintf(what, sizeof what, "%d rows vs ref", nr);
    hx_report(what, hx_compare(gs, want, (size_t)nr * qw, ATTN_ATOL, ATTN_RTOL), gs, want,
              ATTN_ATOL, ATTN_RTOL, guards, ms);
    hx_dev_free(dq), hx_dev_free(dk), hx_dev_free(dv), hx_dev_free(dpos), hx_dev_free(dout);
    free(q), free(k), free(v), free(qb), free(kb), free(vb), free(pos), free(got), free(qs),
        free(gs), free(want);
}

// Both kernels on the same case (WGMMA where it supports the shape).
static void case_prefill(int hd, int nh, int nkv, int T, int p0, int window, float kspan,
                         unsigned long long seed) {
    case_prefill_x(G4_ATTN_HMMA, hd, nh, nkv, T, p0, window, kspan, 0, 29, seed);
    if (g4_attn_prefill_wgmma_supported(hd, nh, nkv))
        case_prefill_x(G4_ATTN_WGMMA, hd, nh, nkv, T, p0, window, kspan, 0, 29, seed);
}

// --- vision (bidirectional) -------------------------------------------------------------------
// cfg: g4_attn_bidir_cfg's tile configuration (0: what g4_attn_bidir runs).
static void case_bidir_cfg(int cfg, int hd, int nh, int N, int n_pad, int n_holes,
                           unsigned long long seed) {
    if (!hx_case("attn_bidir", "hd=%d heads=%d N=%d padding=%d holes=%d cfg=%d", hd, nh, N, n_pad,
                 n_holes, cfg))
        return;
    unsigned long long s = seed;
    const int w = nh * hd;
    uint16_t *qb, *kb, *vb;
    float *q = hx_rand_f16(&s, (size_t)N * w, -1, 1, &qb);
    float *k = hx_rand_f16(&s, (size_t)N * w, -0.5f, 0.5f, &kb);
    float *v = hx_rand_f16(&s, (size_t)N * w, -1, 1, &vb);
    uint8_t *kv = g4_malloc((size_t)N);
    for (int i = 0; i < N; i++) kv[i] = i < N - n_pad;
    for (int i = 0; i < n_holes; i++) kv[g4t_rand_u64(&s) % (unsigned long long)N] = 0;
    const int use_mask = n_pad || n_holes;
    void *dq = hx_upload(qb, 2 * (size_t)N * w), *dk = hx_upload(kb, 2 * (size_t)N * w);
    void *dv = hx_upload(vb, 2 * (size_t)N * w), *dkv = hx_upload(kv, (size_t)N);
    const size_t out_n = (size_t)N * w;
    void *dout = hx_dev_alloc(2 * out_n);
    hx_poison_f16(dout, out_n);
    const double t0 = hx_now_ms();
    if (cfg)
        g4_attn_bidir_cfg(dout, dq, dk, dv, use_mask ? dkv : NULL, N, nh, hd, 1.0f, cfg, 0);
    else
        g4_attn_bidir(dout, dq, dk, dv, use_mask ? dkv : NULL, N, nh, hd, 1.0f, 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    float *got = hx_download_f16(dout, out_n);
    int rows[96];
    const int nr = pick_rows(N, N - n_pad, &s, rows);
    float *qs = g4_malloc(sizeof(float) * (size_t)nr * w),
          *gs = g4_malloc(sizeof(float) * (size_t)nr * w);
    float *want = g4_malloc(sizeof(float) * (size_t)nr * w);
    for (int i = 0; i < nr; i++) {
        memcpy(qs + (size_t)i * w, q + (size_t)rows[i] * w, sizeof(float) * w);
        memcpy(gs + (size_t)i * w, got + (size_t)rows[i] * w, sizeof(float) * w);
    }
    ref_attention_bidir(want, qs, nr, k, v, use_mask ? kv : NULL, N, nh, hd, 1.0f);
    int guards = hx_guards_ok(dout, 2 * out_n, "out");
    if (!all_finite(got, out_n)) {
        printf("    non-finite values in the output (unwritten rows?)\n");
        guards = 0;
    }
    char what[64];
    snprintf(what, sizeof what, "%d rows vs ref", nr);
    hx_report(what, hx_compare(gs, want, (size_t)nr * w, ATTN_ATOL, ATTN_RTOL), gs, want, ATTN_ATOL,
              ATTN_RTOL, guards, ms);
    hx_dev_free(dq), hx_dev_free(dk), hx_dev_free(dv), hx_dev_free(dkv), hx_dev_free(dout);
    free(q), free(k), free(v), free(qb), free(kb), free(vb), free(kv), free(got), free(qs),
        free(gs), free(want);
}

// --- audio ------------------------------------------------------------------------------------
// valid_mode: 0 all frames valid, 1 the last `tail` frames invalid, 2 scattered invalid frames.
static void case_audio(int T, int nh, int hd, int valid_mode, int tail, unsigned long long seed) {
    if (!hx_case("attn_audio", "T=%d heads=%d hd=%d valid=%s tail=%d", T, nh, hd,
                 valid_mode == 0   ? "all"
                 : valid_mode == 1 ? "trailing"
                                   : "scattered",
                 tail))
        return;
    unsigned long long s = seed;
    const int w = nh * hd, band = 12, chunk = 12;
    uint16_t *qb, *kb, *vb, *rb;
    float *q = hx_rand_f16(&s, (size_t)T * w, -1, 1, &qb);
    float *k = hx_rand_f16(&s, (size_t)T * w, -1, 1, &kb);
    float *v = hx_rand_f16(&s, (size_t)T * w, -1, 1, &vb);
    float *rel = hx_rand_f16(&s, (size_t)band * w, -0.5f, 0.5f, &rb);
    float *pds = g4_malloc(sizeof(float) * hd);
    for (int i = 0; i < hd; i++) pds[i] = g4t_rand_uniform(&s, -1.5f, 1.5f);
    uint8_t *valid = g4_malloc((size_t)T);
    for (int t = 0; t < T; t++)
        valid[t] = valid_mode == 0   ? 1
                   : valid_mode == 1 ? t < T - tail
                                     : (g4t_rand_u64(&s) % 5) != 0;
    void *dq = hx_upload(qb, 2 * (size_t)T * w), *dk = hx_upload(kb, 2 * (size_t)T * w);
    void *dv = hx_upload(vb, 2 * (size_t)T * w), *dr = hx_upload(rb, 2 * (size_t)band * w);
    void *dp = hx_upload(pds, 4 * (size_t)hd), *dval = hx_upload(valid, (size_t)T);
    const size_t out_n = (size_t)T * w;
    void *dout = hx_dev_alloc(2 * out_n);
    hx_poison_f16(dout, out_n);
    const double t0 = hx_now_ms();
    g4_attn_audio(dout, dq, dk, dv, dr, dp, valid_mode ? dval : NULL, T, nh, hd, chunk, band, 50.0f,
                  -1e9f, 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    float *got = hx_download_f16(dout, out_n), *want = g4_malloc(sizeof(float) * out_n);
    ref_audio_attention(want, q, k, v, rel, pds, valid_mode ? valid : NULL, T, nh, hd, chunk, band,
                        50.0f, -1e9f);
    hx_report("out vs ref", hx_compare(got, want, out_n, AUDIO_ATOL, AUDIO_RTOL), got, want,
              AUDIO_ATOL, AUDIO_RTOL, hx_guards_ok(dout, 2 * out_n, "out"), ms);
    hx_dev_free(dq), hx_dev_free(dk), hx_dev_free(dv), hx_dev_free(dr), hx_dev_free(dp),
        hx_dev_free(dval), hx_dev_free(dout);
    free(q), free(k), free(v), free(rel), free(qb), free(kb), free(vb), free(rb), free(pds),
        free(valid), free(got), free(want);
}

int main(int argc, char **argv) {
    const int skip = hx_init(argc, argv, "test_cuda_attention");
    if (skip) return skip;
    g4_ref_init();
    // decode: E2B shapes (8 query heads on 1 KV head; 256 sliding with window 512, 512 global)
    // (each three times: merge 0, the merge kernel; 1, the merge inside the splits, where lengths
    // 1 .. 511 leave one cluster active and 4096 / 32768 several, whose last one merges; 2, that
    // merge on the windowless cases only)
    // (63 / 64 / 65: hd 256's first tile edge, hd 512's second; 257: hd 512's first cluster of 8
    // one-tile splits full, a second cluster of one active split and 7 empty ones)
    const int lens[] = {1, 2, 17, 63, 64, 65, 257, 511, 512, 513, 4096, 32768};
    const int n_lens = (int)(sizeof lens / sizeof lens[0]);
    // the auto mode's form classes: forced modes have one, auto splits at the long-keys bound
    const int lk = g4_attn_decode_long_keys();
    int forms[4];
    g4_attn_decode_set_merge(3);
    forms[0] = g4_attn_decode_form(lk - 1), forms[1] = g4_attn_decode_form(lk);
    forms[3] = g4_attn_decode_form(1 << 30);
    g4_attn_decode_set_merge(2);
    forms[2] = g4_attn_decode_form(lk);
    g4t_checks++;
    if (forms[1] != 1 || forms[3] != 1 || forms[0] != 0 || forms[2] != 0) {
        g4t_failures++;
        printf("FAIL  form classes around %d keys: auto %d %d (want 0 1), global %d (want 0), "
               "auto at 2^30 %d (want 1)\n",
               lk, forms[0], forms[1], forms[2], forms[3]);
    }
    for (g_merge = 0; g_merge <= 3; g_merge++) {
        for (int i = 0; i < n_lens; i++) {
            case_decode(512, 8, 1, 1, lens[i], lens[i] + 37, 0, 0.25f, 100 + i);
            case_decode(256, 8, 1, 1, lens[i], lens[i] + 37, 512, 0.25f, 200 + i);
        }
        case_decode(256, 8, 1, 1, 4096, 4096, 0, 1.0f, 300);    // peaky softmax, full causal
        case_decode(512, 8, 1, 2, 513, 600, 0, 0.25f, 301);     // T = 2: 16 MMA rows
        case_decode(256, 8, 1, 3, 1000, 1100, 512, 0.25f, 302); // T = 3: two row groups, window
        case_decode(256, 4, 2, 1, 777, 800, 0, 0.5f, 303);      // GQA 2:1
        case_decode(512, 2, 2, 2, 33, 64, 0, 0.5f, 304);        // MHA
        case_decode(512, 8, 1, 1, 17, 32768, 0, 0.25f, 305);    // grid for 32k, length 17
        case_decode(256, 8, 1, 1, 513, 8192, 512, 0.25f, 306);
        case_decode(256, 8, 2, 1, 3000, 3000, 0, 0.5f, 307); // GQA 4:1, 2 KV heads' tickets
        case_decode(512, 8, 1, 1, 70, 70, 0, 0.25f, 308);    // 3 splits: a cluster of 2 + 2
        // the trained multimodal proxy's layout (issue 35: its CUDA ASR answers leave HF's):
        // 4 query heads on 1 KV head (4 of 16 MMA rows), sliding 256 / window 256 and global
        // 512, at its prompt lengths (72-223 keys); kspan 1: a peaky softmax
        case_decode(256, 4, 1, 1, 73, 300, 256, 1.0f, 309);
        case_decode(256, 4, 1, 1, 223, 300, 256, 1.0f, 310);
        case_decode(512, 4, 1, 1, 73, 300, 0, 1.0f, 311);
        case_decode(512, 4, 1, 1, 223, 300, 0, 1.0f, 312);
        case_decode_graph(512, 4096);
        case_decode_graph(256, 1000);
        case_decode_graph(512, 32768); // replays at 1, 300, 32768: one, then many clusters
    }
    g4_attn_decode_set_merge(-1);
    g4_attn_decode_set_keys(0);
    // prefill
    const int Ts[] = {1, 17, 33, 511, 512, 513, 1000, 4096};
    for (int i = 0; i < 8; i++) {
        case_prefill(256, 8, 1, Ts[i], 0, 512, 0.25f, 400 + i);
        case_prefill(512, 8, 1, Ts[i], 0, 0, 0.25f, 500 + i);
    }
    case_prefill(256, 8, 1, 513, 3000, 512, 0.25f, 600); // chunked prefill after a past of 3000
    case_prefill(512, 8, 1, 100, 2000, 0, 1.0f, 601);    // peaky
    case_prefill(256, 4, 2, 100, 7, 0, 0.5f, 602);       // GQA 2:1
    case_prefill(512, 3, 3, 45, 0, 16, 0.5f, 603);       // MHA, tiny window
    case_prefill(256, 4, 1, 150, 0, 256, 1.0f, 604);     // the mm proxy's layout (above)
    case_prefill(512, 4, 1, 150, 0, 0, 1.0f, 605);
    // WGMMA block edges (64 rows = 8 tokens x 8 heads): T around multiples of 8 and 64
    const int Te[] = {7, 8, 9, 63, 64, 65, 129};
    for (int i = 0; i < 7; i++) {
        case_prefill(256, 8, 1, Te[i], 0, 512, 0.25f, 610 + i);
        case_prefill(512, 8, 1, Te[i], 0, 0, 0.25f, 620 + i);
    }
    case_prefill(256, 6, 2, 200, 0, 0, 0.5f, 630);    // 3 heads per KV head: 63-row blocks
    case_prefill(512, 8, 2, 150, 40, 64, 0.5f, 631);  // 4:1, window 64 after a past of 40
    case_prefill(256, 16, 1, 90, 0, 512, 0.25f, 632); // 16:1: 4 tokens a block
    case_prefill(256, 64, 1, 20, 5, 0, 0.25f, 633);   // 64:1: 1 token a block
    case_prefill(512, 8, 1, 700, 0, 100, 0.5f, 634);  // hd 512 with a sliding window
    case_prefill(256, 8, 1, 16000, 0, 512, 0.25f, 635); // the 16k prompt
    case_prefill(512, 8, 1, 8192, 0, 0, 0.25f, 636);
    // persistent grids of 1 and 3 CTAs walking every block; a cache ending at the last key
    case_prefill_x(G4_ATTN_WGMMA, 256, 8, 1, 1000, 0, 512, 0.25f, 1, 29, 640);
    case_prefill_x(G4_ATTN_WGMMA, 512, 8, 1, 513, 0, 0, 0.25f, 3, 29, 641);
    case_prefill_x(G4_ATTN_WGMMA, 256, 4, 2, 300, 77, 0, 0.5f, 3, 29, 642);
    case_prefill_x(G4_ATTN_WGMMA, 256, 8, 1, 77, 0, 512, 0.25f, 0, 0, 643);
    case_prefill_x(G4_ATTN_WGMMA, 512, 8, 1, 77, 0, 0, 0.25f, 0, 0, 644);
    case_prefill_x(G4_ATTN_HMMA, 512, 8, 1, 77, 0, 0, 0.25f, 0, 0, 645);
    // vision: 12 heads of 64, each tile configuration
    for (int cfg = 0; cfg <= 2; cfg++) {
        case_bidir_cfg(cfg, 64, 12, 17, 0, 0, 700);
        case_bidir_cfg(cfg, 64, 12, 33, 5, 0, 701);
        case_bidir_cfg(cfg, 64, 12, 1000, 0, 3, 702);
        case_bidir_cfg(cfg, 64, 12, 2304, 0, 0, 703);   // 768 x 768 image: 48 x 48 patches
        case_bidir_cfg(cfg, 64, 12, 2520, 216, 0, 704); // max_patches with trailing padding
        case_bidir_cfg(cfg, 64, 2, 65, 0, 64, 705);     // most keys masked
    }
    // audio: 8 heads of 128
    case_audio(17, 8, 128, 0, 0, 800);
    case_audio(33, 8, 128, 1, 14, 801); // >= 12 trailing invalid frames: the uniform fallback
    case_audio(750, 8, 128, 0, 0, 802); // 30 s of audio
    case_audio(750, 8, 128, 2, 0, 803);
    case_audio(100, 2, 64, 1, 3, 804);
    return hx_finish("test_cuda_attention");
}
