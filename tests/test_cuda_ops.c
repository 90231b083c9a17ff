// test_cuda_ops.c: the fused small CUDA ops against the CPU references, one table of cases per
// op (harness: tests/attnops_harness.h; `--op`, `--shape` filters):
//   rmsnorm        g4_rmsnorm_f16 / _f32     vs ref_rmsnorm (row and per-head groups)
//   add_rmsnorm    g4_add_rmsnorm            vs ref_add_rmsnorm (+ ref_rmsnorm for the next norm)
//   qkv_rope       g4_qkv_norm_rope          vs ref_rmsnorm + ref_rope / ref_rope_2d (+ cache rows)
//   gelu_mul       g4_gelu_mul               vs ref_gelu_mul (strided b: the PLE slice)
//   ple            g4_ple_inputs             vs ref_embed + ref_rmsnorm composed as spec 2.3
//   sample         g4_logits_sample          vs ref_softcap + ref_sample_row (the same ids)
//   scatter_rows   g4_scatter_rows_f32       vs ref_scatter_rows (exact)
//   embed          g4_embed_f32 / _f16       vs ref_embed
//   vision_pool    g4_vision_pool            vs ref_vision_pool
//   vision_posemb  g4_vision_posemb_add      vs ref_vision_posemb_add
// Skips (exit 77) without a GPU.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/embed.cuh"
#include "kernels/gelu_mul.cuh"
#include "kernels/logits.cuh"
#include "kernels/ple.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/ref/ref.h"
#include "kernels/rmsnorm.cuh"
#include "kernels/scatter_rows.cuh"
#include "kernels/vision_pool.cuh"
#include "kernels/vision_posemb.cuh"
#include "tests/attnops_harness.h"

// Tolerances. Both sides compute in fp32 (the references partly in double) from the same fp16
// inputs; the differences are the fp16 rounding of the outputs plus fp32 reduction order.
//  - fp16 outputs: half an fp16 ulp is 2^-11 relative = 4.9e-4: rtol 1e-3 (2x), atol 1e-4 for
//    values near 0 (fp32 cancellation in sums of <= 1536 terms, ~1e-6, is far below);
//  - fp32 outputs (residual stream, pooling, logits): rtol 1e-5 (fp32 reduction order over
//    <= 1536 terms, a few ulp), atol 1e-5;
//  - RoPE: sincosf on both sides may differ by an ulp at angles up to ~1e5 rad (|err| ~1e-7),
//    covered by the fp16-output tolerance.
#define F16_ATOL 1e-4
#define F16_RTOL 1e-3
#define F32_ATOL 1e-5
#define F32_RTOL 1e-5

static void *dev_out_f16(size_t n) {
    void *d = hx_dev_alloc(2 * n);
    hx_poison_f16(d, n);
    return d;
}
static void *dev_out_f32(size_t n) {
    void *d = hx_dev_alloc(4 * n);
    hx_poison_f32(d, n);
    return d;
}

// --- rmsnorm ----------------------------------------------------------------------------------
static void case_rmsnorm(int rows, int cols, int group, int x_f32, int weighted,
                         unsigned long long seed) {
    if (!hx_case("rmsnorm", "rows=%d cols=%d group=%d x=%s w=%d", rows, cols, group,
                 x_f32 ? "f32" : "f16", weighted))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    uint16_t *xb, *wb;
    float *x = hx_rand_f16(&s, n, -3, 3, &xb), *w = hx_rand_f16(&s, (size_t)group, 0.5f, 2.0f, &wb);
    void *dx = x_f32 ? hx_upload(x, 4 * n) : hx_upload(xb, 2 * n);
    void *dw = hx_upload(wb, 2 * (size_t)group), *dy = dev_out_f16(n);
    const double t0 = hx_now_ms();
    if (x_f32)
        g4_rmsnorm_f32(dy, dx, weighted ? dw : NULL, rows, cols, group, 1e-6f, 0);
    else
        g4_rmsnorm_f16(dy, dx, weighted ? dw : NULL, rows, cols, group, 1e-6f, 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    float *got = hx_download_f16(dy, n), *want = g4_malloc(sizeof(float) * n);
    ref_rmsnorm(want, x, weighted ? wb : NULL, rows, cols, group, 1e-6f);
    hx_report("y vs ref_rmsnorm", hx_compare(got, want, n, F16_ATOL, F16_RTOL), got, want, F16_ATOL,
              F16_RTOL, hx_guards_ok(dy, 2 * n, "y"), ms);
    hx_dev_free(dx), hx_dev_free(dw), hx_dev_free(dy);
    free(x), free(xb), free(w), free(wb), free(got), free(want);
}

// In-place variant (y aliases x), f16.
static void case_rmsnorm_inplace(int rows, int cols, int group, unsigned long long seed) {
    if (!hx_case("rmsnorm", "inplace rows=%d cols=%d group=%d", rows, cols, group)) return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    uint16_t *xb, *wb;
    float *x = hx_rand_f16(&s, n, -3, 3, &xb), *w = hx_rand_f16(&s, (size_t)group, 0.5f, 2.0f, &wb);
    void *dx = hx_upload(xb, 2 * n), *dw = hx_upload(wb, 2 * (size_t)group);
    g4_rmsnorm_f16(dx, dx, dw, rows, cols, group, 1e-6f, 0);
    HX_CUDA(cudaDeviceSynchronize());
    float *got = hx_download_f16(dx, n), *want = g4_malloc(sizeof(float) * n);
    ref_rmsnorm(want, x, wb, rows, cols, group, 1e-6f);
    hx_report("x vs ref_rmsnorm", hx_compare(got, want, n, F16_ATOL, F16_RTOL), got, want, F16_ATOL,
              F16_RTOL, hx_guards_ok(dx, 2 * n, "x"), 0);
    hx_dev_free(dx), hx_dev_free(dw);
    free(x), free(xb), free(w), free(wb), free(got), free(want);
}

static void case_add_rmsnorm(int rows, int cols, int next, int with_scale,
                             unsigned long long seed) {
    static const char *names[] = {"none", "norm", "copy"};
    if (!hx_case("add_rmsnorm", "rows=%d cols=%d next=%s scale=%d", rows, cols, names[next],
                 with_scale))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    uint16_t *xb, *wb, *w2b, *hb;
    float *x = hx_rand_f16(&s, n, -3, 3, &xb), *w = hx_rand_f16(&s, (size_t)cols, 0.5f, 2.0f, &wb);
    float *w2 = hx_rand_f16(&s, (size_t)cols, 0.5f, 2.0f, &w2b),
          *h = hx_rand_f16(&s, n, -20, 20, &hb);
    const float scale = with_scale ? g4_round_f16(0.4434f) : 1.0f;
    const uint16_t scale_b = g4_f32_to_f16(scale);
    void *dx = hx_upload(xb, 2 * n), *dw = hx_upload(wb, 2 * (size_t)cols),
         *dw2 = hx_upload(w2b, 2 * (size_t)cols);
    void *dh = hx_upload(h, 4 * n), *dsc = hx_upload(&scale_b, 2), *dy2 = dev_out_f16(n);
    const double t0 = hx_now_ms();
    g4_add_rmsnorm(dh, dx, dw, with_scale ? dsc : NULL, 1e-6f, (g4_next_mode)next,
                   next ? dy2 : NULL, dw2, rows, cols, 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    float *got_h = hx_download_f32(dh, n);
    float *want_h = g4_malloc(sizeof(float) * n);
    memcpy(want_h, h, sizeof(float) * n);
    ref_add_rmsnorm(want_h, x, wb, rows, cols, 1e-6f, scale);
    int guards = hx_guards_ok(dh, 4 * n, "h");
    hx_report("h vs ref_add_rmsnorm", hx_compare(got_h, want_h, n, F32_ATOL, F32_RTOL), got_h,
              want_h, F32_ATOL, F32_RTOL, guards, ms);
    if (next) {
        float *got_y = hx_download_f16(dy2, n), *want_y = g4_malloc(sizeof(float) * n);
        if (next == G4_NEXT_NORM)
            ref_rmsnorm(want_y, want_h, w2b, rows, cols, cols, 1e-6f);
        else
            for (size_t i = 0; i < n; i++) want_y[i] = g4_round_f16(want_h[i]);
        // y2 is the fp16 rounding of a value computed from h_new: fp16 tolerance.
        hx_report("y2 vs ref", hx_compare(got_y, want_y, n, F16_ATOL, F16_RTOL), got_y, want_y,
                  F16_ATOL, F16_RTOL, hx_guards_ok(dy2, 2 * n, "y2"), 0);
        free(got_y), free(want_y);
    }
    hx_dev_free(dx), hx_dev_free(dw), hx_dev_free(dw2), hx_dev_free(dh), hx_dev_free(dsc),
        hx_dev_free(dy2);
    free(x), free(xb), free(w), free(wb), free(w2), free(w2b), free(h), free(hb), free(got_h),
        free(want_h);
}

// --- q/k/v norms + RoPE + cache store -------------------------------------------------------
// rope: 0 default (theta 1e4, all pairs), 1 proportional (theta 1e6, 1/4 of the pairs rotate,
// exponent over the full hd), 2 vision 2-D (theta 100).
static void inv_freq_for(float *inv, int hd, int rope) {
    if (rope == 2) {
        for (int j = 0; j < hd / 4; j++)
            inv[j] = 1.0f / powf(100.0f, (float)(2 * j) / (float)(hd / 2));
        return;
    }
    const float theta = rope == 0 ? 10000.0f : 1e6f;
    const int rotated = rope == 0 ? hd / 2 : hd / 8; // proportional: int(0.25 * hd / 2)
    for (int j = 0; j < hd / 2; j++)
        inv[j] = j < rotated ? 1.0f / powf(theta, (float)(2 * j) / (float)hd) : 0.0f;
}

// ctas: g4_qkv_set_prep_ctas (1: one CTA a head vector where T == 1, G4_QKV_PREP_CTAS=1's form;
// -1: as the variable says)
static void case_qkv_x(int T, int nh, int nkv, int hd, int rope, int with_kv, int to_cache, int p0,
                       int ctas, unsigned long long seed) {
    static const char *rn[] = {"default", "proportional", "2d"};
    if (!hx_case("qkv_rope", "T=%d heads=%d kv=%d hd=%d rope=%s kv_in=%d cache=%d pos0=%d ctas=%d",
                 T, nh, nkv, hd, rn[rope], with_kv, to_cache, p0, ctas))
        return;
    g4_qkv_set_prep_ctas(ctas);
    unsigned long long s = seed;
    const int qw = nh * hd, kw = nkv * hd, capacity = p0 + T + 5;
    uint16_t *qb, *kb, *vb, *qwb, *kwb;
    float *q = hx_rand_f16(&s, (size_t)T * qw, -2, 2, &qb),
          *k = hx_rand_f16(&s, (size_t)T * kw, -2, 2, &kb);
    float *v = hx_rand_f16(&s, (size_t)T * kw, -2, 2, &vb);
    float *qwf = hx_rand_f16(&s, (size_t)hd, 0.5f, 1.5f, &qwb),
          *kwf = hx_rand_f16(&s, (size_t)hd, 0.05f, 0.2f, &kwb);
    float *inv = g4_malloc(sizeof(float) * hd);
    inv_freq_for(inv, hd, rope);
    int32_t *pos = g4_malloc(sizeof(int32_t) * 2 * (size_t)T);
    for (int t = 0; t < T; t++) {
        if (rope == 2)
            pos[2 * t] = t % 37, pos[2 * t + 1] = t / 37; // a 37-wide patch grid
        else
            pos[t] = p0 + t;
    }
    void *dq = hx_upload(qb, 2 * (size_t)T * qw), *dk = hx_upload(kb, 2 * (size_t)T * kw);
    void *dv = hx_upload(vb, 2 * (size_t)T * kw), *dqw = hx_upload(qwb, 2 * (size_t)hd);
    void *dkw = hx_upload(kwb, 2 * (size_t)hd), *dinv = hx_upload(inv, 4 * (size_t)hd);
    void *dpos = hx_upload(pos, 4 * 2 * (size_t)T);
    void *dkc = to_cache ? dev_out_f16((size_t)capacity * kw) : NULL;
    void *dvc = to_cache ? dev_out_f16((size_t)capacity * kw) : NULL;
    g4_qkv_args a = {0};
    a.q = dq, a.k = with_kv ? dk : NULL, a.v = with_kv ? dv : NULL;
    a.kcache = dkc, a.vcache = dvc, a.q_w = dqw, a.k_w = dkw, a.v_norm = 1;
    a.pos = dpos, a.inv_freq = dinv, a.rope_2d = rope == 2;
    a.T = T, a.n_heads = nh, a.n_kv = nkv, a.hd = hd, a.capacity = capacity, a.eps = 1e-6f;
    const double t0 = hx_now_ms();
    g4_qkv_norm_rope(&a, 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    // reference: norm (group = hd), rope
    float *wq = g4_malloc(sizeof(float) * (size_t)T * qw),
          *wk = g4_malloc(sizeof(float) * (size_t)T * kw);
    float *wv = g4_malloc(sizeof(float) * (size_t)T * kw);
    ref_rmsnorm(wq, q, qwb, T, qw, hd, 1e-6f);
    ref_rmsnorm(wk, k, kwb, T, kw, hd, 1e-6f);
    ref_rmsnorm(wv, v, NULL, T, kw, hd, 1e-6f);
    if (rope == 2) {
        ref_rope_2d(wq, T, nh, hd, pos, inv);
        ref_rope_2d(wk, T, nkv, hd, pos, inv);
    } else {
        ref_rope(wq, T, nh, hd, pos, inv);
        ref_rope(wk, T, nkv, hd, pos, inv);
    }
    float *gq = hx_download_f16(dq, (size_t)T * qw);
    hx_report("q", hx_compare(gq, wq, (size_t)T * qw, F16_ATOL, F16_RTOL), gq, wq, F16_ATOL,
              F16_RTOL, hx_guards_ok(dq, 2 * (size_t)T * qw, "q"), ms);
    if (with_kv) {
        // k, v: in place, or in the caches at rows pos[t] with the inputs untouched
        float *gk, *gv;
        int guards =
            hx_guards_ok(dk, 2 * (size_t)T * kw, "k") && hx_guards_ok(dv, 2 * (size_t)T * kw, "v");
        if (to_cache) {
            float *ck = hx_download_f16(dkc, (size_t)capacity * kw),
                  *cv = hx_download_f16(dvc, (size_t)capacity * kw);
            gk = g4_malloc(sizeof(float) * (size_t)T * kw),
            gv = g4_malloc(sizeof(float) * (size_t)T * kw);
            for (int t = 0; t < T; t++) {
                memcpy(gk + (size_t)t * kw, ck + (size_t)pos[t] * kw, sizeof(float) * kw);
                memcpy(gv + (size_t)t * kw, cv + (size_t)pos[t] * kw, sizeof(float) * kw);
            }
            // rows other than pos[t] must stay poisoned (NaN)
            int stray = 0;
            for (int r = 0; r < capacity; r++) {
                if (r >= p0 && r < p0 + T) continue;
                for (int i = 0; i < kw; i++)
                    stray += !isnan(ck[(size_t)r * kw + i]) || !isnan(cv[(size_t)r * kw + i]);
            }
            CHECK_MSG(stray == 0, "qkv_rope: %d cache values written outside rows pos[t]", stray);
            float *ik = hx_download_f16(dk, (size_t)T * kw);
            CHECK_MSG(memcmp(ik, k, sizeof(float) * (size_t)T * kw) == 0,
                      "qkv_rope: k input modified");
            free(ik), free(ck), free(cv);
            guards = guards && hx_guards_ok(dkc, 2 * (size_t)capacity * kw, "kcache") &&
                     hx_guards_ok(dvc, 2 * (size_t)capacity * kw, "vcache");
        } else {
            gk = hx_download_f16(dk, (size_t)T * kw), gv = hx_download_f16(dv, (size_t)T * kw);
        }
        hx_report("k", hx_compare(gk, wk, (size_t)T * kw, F16_ATOL, F16_RTOL), gk, wk, F16_ATOL,
                  F16_RTOL, guards, 0);
        hx_report("v", hx_compare(gv, wv, (size_t)T * kw, F16_ATOL, F16_RTOL), gv, wv, F16_ATOL,
                  F16_RTOL, guards, 0);
        free(gk), free(gv);
    }
    hx_dev_free(dq), hx_dev_free(dk), hx_dev_free(dv), hx_dev_free(dqw), hx_dev_free(dkw),
        hx_dev_free(dinv);
    hx_dev_free(dpos), hx_dev_free(dkc), hx_dev_free(dvc);
    free(q), free(k), free(v), free(qb), free(kb), free(vb), free(qwf), free(kwf), free(qwb),
        free(kwb);
    free(inv), free(pos), free(wq), free(wk), free(wv), free(gq);
    g4_qkv_set_prep_ctas(-1);
}

static void case_qkv(int T, int nh, int nkv, int hd, int rope, int with_kv, int to_cache, int p0,
                     unsigned long long seed) {
    case_qkv_x(T, nh, nkv, hd, rope, with_kv, to_cache, p0, -1, seed); // (as G4_QKV_PREP_CTAS says)
}

// --- gelu_mul -----------------------------------------------------------------------------------
static void case_gelu_mul(int T, int n, int ldb, unsigned long long seed) {
    if (!hx_case("gelu_mul", "T=%d n=%d ldb=%d", T, n, ldb)) return;
    unsigned long long s = seed;
    uint16_t *ab, *bb;
    float *a = hx_rand_f16(&s, (size_t)T * n, -4, 4, &ab),
          *b = hx_rand_f16(&s, (size_t)T * ldb, -2, 2, &bb);
    const int boff = ldb > n ? 256 : 0; // read b at a column offset inside its wider rows
    void *da = hx_upload(ab, 2 * (size_t)T * n), *db = hx_upload(bb, 2 * (size_t)T * ldb);
    void *dy = dev_out_f16((size_t)T * n);
    const double t0 = hx_now_ms();
    g4_gelu_mul(dy, n, da, n, (uint16_t *)db + boff, ldb, T, n, 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    float *bs = g4_malloc(sizeof(float) * (size_t)T * n),
          *want = g4_malloc(sizeof(float) * (size_t)T * n);
    for (int t = 0; t < T; t++)
        memcpy(bs + (size_t)t * n, b + (size_t)t * ldb + boff, sizeof(float) * n);
    ref_gelu_mul(want, a, bs, (size_t)T * n);
    float *got = hx_download_f16(dy, (size_t)T * n);
    hx_report("y vs ref_gelu_mul", hx_compare(got, want, (size_t)T * n, F16_ATOL, F16_RTOL), got,
              want, F16_ATOL, F16_RTOL, hx_guards_ok(dy, 2 * (size_t)T * n, "y"), ms);
    hx_dev_free(da), hx_dev_free(db), hx_dev_free(dy);
    free(a), free(ab), free(b), free(bb), free(bs), free(want), free(got);
}

// --- PLE inputs -------------------------------------------------------------------------------
static void case_ple(int T, int L, int D, int vocab, unsigned long long seed) {
    if (!hx_case("ple", "T=%d layers=%d D=%d vocab=%d", T, L, D, vocab)) return;
    unsigned long long s = seed;
    const int w = L * D;
    uint16_t *pb, *tb, *nb;
    float *proj = hx_rand_f16(&s, (size_t)T * w, -30, 30, &pb);
    float *table = hx_rand_f16(&s, (size_t)vocab * w, -0.1f, 0.1f, &tb);
    float *nw = hx_rand_f16(&s, (size_t)D, 0.5f, 1.5f, &nb);
    int32_t *ids = g4_malloc(sizeof(int32_t) * (size_t)T);
    for (int t = 0; t < T; t++) ids[t] = (int)(g4t_rand_u64(&s) % (unsigned long long)vocab);
    ids[0] = vocab - 1;
    void *dp = hx_upload(pb, 2 * (size_t)T * w), *dt = hx_upload(tb, 2 * (size_t)vocab * w);
    void *dn = hx_upload(nb, 2 * (size_t)D), *di = hx_upload(ids, 4 * (size_t)T),
         *dy = dev_out_f16((size_t)T * w);
    const float ps = 1.0f / sqrtf(1536.0f), ts = 16.0f, os = 1.0f / sqrtf(2.0f);
    const double t0 = hx_now_ms();
    g4_ple_inputs(dy, dp, dt, vocab, di, dn, T, L, D, ps, ts, os, 1e-6f, 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    // reference, composed from the CPU ops as spec 2.3 writes it
    float *ctx = g4_malloc(sizeof(float) * (size_t)T * w),
          *tok = g4_malloc(sizeof(float) * (size_t)T * w);
    for (size_t i = 0; i < (size_t)T * w; i++) ctx[i] = proj[i] * ps;
    ref_rmsnorm(ctx, ctx, nb, T, w, D, 1e-6f);
    ref_embed(tok, tb, w, ids, T, ts);
    for (size_t i = 0; i < (size_t)T * w; i++) ctx[i] = (ctx[i] + tok[i]) * os;
    float *got = hx_download_f16(dy, (size_t)T * w);
    hx_report("ple vs ref", hx_compare(got, ctx, (size_t)T * w, F16_ATOL, F16_RTOL), got, ctx,
              F16_ATOL, F16_RTOL, hx_guards_ok(dy, 2 * (size_t)T * w, "ple"), ms);
    hx_dev_free(dp), hx_dev_free(dt), hx_dev_free(dn), hx_dev_free(di), hx_dev_free(dy);
    free(proj), free(pb), free(table), free(tb), free(nw), free(nb), free(ids), free(ctx),
        free(tok), free(got);
}

// --- sample: soft-cap + the next token ----------------------------------------------------------
// The CUDA op against ref_sample_row (kernels/ref/logits.c) on the SAME capped logits (the GPU's,
// read back): the ids must be equal (the arithmetic is exact: kernels/ref/sample_math.h), for 4 sets
// of draw indices, run twice (the kernels' counters and histograms must have reset); the capped
// logits within the fp32 tolerance of ref_softcap. Optionally row 1 holds a NaN (-1 expected).
static void case_sample(int T, int V, float cap, float temp, int top_k, float top_p, int quantized,
                        int nan_row, unsigned long long seed) {
    if (!hx_case("sample", "T=%d V=%d cap=%g temp=%g top_k=%d top_p=%g quantized=%d nan=%d", T, V,
                 cap, temp, top_k, top_p, quantized, nan_row))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)T * V;
    float *x = g4_malloc(sizeof(float) * n);
    // quantized: multiples of 1/64, so equal values tie often (ties broken by the smaller id)
    for (size_t i = 0; i < n; i++) {
        x[i] = g4t_rand_uniform(&s, -40, 40);
        if (quantized) x[i] = floorf(x[i] * 64.0f) / 64.0f;
    }
    if (nan_row && T > 1) x[(size_t)V + (size_t)V / 3] = NAN;
    const g4_sample_params p = {temp, top_k, top_p, (uint32_t)(seed * 2654435761u), 3, {0}};
    void *dx = hx_upload(x, 4 * n), *dnext = hx_dev_alloc(4 * (size_t)T);
    void *dp = hx_upload(&p, sizeof p), *dcnt = hx_dev_alloc(4 * (size_t)T);
    const size_t ws = g4_logits_workspace(T, V);
    void *dws = hx_dev_alloc(ws);
    HX_CUDA(cudaMemset(dws, 0, ws));
    int32_t *next = g4_malloc(sizeof(int32_t) * (size_t)T), *cnt = g4_malloc(sizeof(int32_t) * (size_t)T);
    float *want = g4_malloc(sizeof(float) * n), *got = NULL;
    memcpy(want, x, sizeof(float) * n);
    if (cap > 0) ref_softcap(want, n, cap);
    double ms = 0;
    int wrong = 0, picks = 0;
    for (int rep = 0; rep < 8; rep++) { // 4 draw sets, each twice
        for (int t = 0; t < T; t++) cnt[t] = (rep / 2) * 1000 + 17 * t + 5;
        HX_CUDA(cudaMemcpy(dx, x, 4 * n, cudaMemcpyHostToDevice));
        HX_CUDA(cudaMemcpy(dcnt, cnt, 4 * (size_t)T, cudaMemcpyHostToDevice));
        HX_CUDA(cudaMemset(dnext, 0x5a, 4 * (size_t)T));
        const double t0 = hx_now_ms();
        g4_logits_sample(dnext, dx, T, V, cap, dp, dcnt, dws, ws, 0);
        HX_CUDA(cudaDeviceSynchronize());
        ms = hx_now_ms() - t0;
        HX_CUDA(cudaMemcpy(next, dnext, 4 * (size_t)T, cudaMemcpyDeviceToHost));
        free(got);
        got = hx_download_f32(dx, n); // the GPU's capped logits: the reference picks from them
        for (int t = 0; t < T; t++) {
            const int32_t ref = ref_sample_row(got + (size_t)t * V, V, &p, (uint32_t)cnt[t]);
            const int32_t exp_id = nan_row && t == 1 ? -1 : ref;
            if (next[t] != exp_id || ref != exp_id) {
                wrong++;
                printf("    run %d row %d: picked %d, the reference %d (expected %d)\n", rep, t,
                       next[t], ref, exp_id);
            }
            picks++;
        }
    }
    g4t_checks++;
    if (wrong) g4t_failures++, hx_cases_failed++;
    printf("  ids vs the reference    %s (%d picks)\n", wrong ? "FAIL" : "ok", picks);
    // NaN rows: the capped comparison skips them (NaN stays NaN on both sides)
    if (nan_row && T > 1) got[(size_t)V + (size_t)V / 3] = want[(size_t)V + (size_t)V / 3] = 0;
    hx_report("capped logits", hx_compare(got, want, n, F32_ATOL, F32_RTOL), got, want, F32_ATOL,
              F32_RTOL,
              hx_guards_ok(dx, 4 * n, "logits") && hx_guards_ok(dnext, 4 * (size_t)T, "next") &&
                  hx_guards_ok(dws, ws, "workspace"),
              ms);
    hx_dev_free(dx), hx_dev_free(dnext), hx_dev_free(dp), hx_dev_free(dcnt), hx_dev_free(dws);
    free(x), free(next), free(cnt), free(want), free(got);
}

// The sample op on ONE workspace (cleared once, sized for the most rows) over launches of
// varying row counts, as a batch step's (its sampled rows change every step): 32, then fewer,
// then more again (29 -> 31, 16 -> 17: rows whose counters lay where the smaller launch had put
// its partials before issue 31's fix), each launch's ids those of the reference on the GPU's
// capped logits, for one sampler each run (greedy; temperature with top-k and top-p).
static void case_sample_rowcounts(float temp, int top_k, float top_p, unsigned long long seed) {
    enum { RMAX = 32, V = 262144 };
    static const int counts[] = {32, 29, 31, 16, 17, 30, 1, 32};
    const int n_launch = (int)(sizeof counts / sizeof counts[0]);
    if (!hx_case("sample",
                 "one workspace, rows 32 29 31 16 17 30 1 32, V=%d temp=%g top_k=%d top_p=%g", V,
                 temp, top_k, top_p))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)RMAX * V;
    float *x = g4_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = g4t_rand_uniform(&s, -40, 40);
    const g4_sample_params p = {temp, top_k, top_p, (uint32_t)(seed * 2654435761u), 5, {0}};
    void *dx = hx_dev_alloc(4 * n), *dnext = hx_dev_alloc(4 * (size_t)RMAX);
    void *dp = hx_upload(&p, sizeof p), *dcnt = hx_dev_alloc(4 * (size_t)RMAX);
    const size_t ws = g4_logits_workspace(RMAX, V);
    void *dws = hx_dev_alloc(ws);
    HX_CUDA(cudaMemset(dws, 0, ws));
    int32_t next[RMAX], cnt[RMAX];
    int wrong = 0, picks = 0;
    for (int k = 0; k < n_launch; k++) {
        const int T = counts[k];
        for (int t = 0; t < T; t++) cnt[t] = 1000 * k + 13 * t + 1;
        HX_CUDA(cudaMemcpy(dx, x, 4 * (size_t)T * V, cudaMemcpyHostToDevice));
        HX_CUDA(cudaMemcpy(dcnt, cnt, 4 * (size_t)T, cudaMemcpyHostToDevice));
        HX_CUDA(cudaMemset(dnext, 0x5a, 4 * (size_t)RMAX));
        g4_logits_sample(dnext, dx, T, V, 30.0f, dp, dcnt, dws, ws, 0);
        HX_CUDA(cudaDeviceSynchronize());
        HX_CUDA(cudaMemcpy(next, dnext, 4 * (size_t)T, cudaMemcpyDeviceToHost));
        float *got = hx_download_f32(dx, (size_t)T * V); // the GPU's capped logits
        for (int t = 0; t < T; t++) {
            const int32_t ref = ref_sample_row(got + (size_t)t * V, V, &p, (uint32_t)cnt[t]);
            if (next[t] != ref && wrong++ < 8)
                printf("    launch %d (%d rows) row %d: picked %d, the reference %d\n", k, T, t,
                       next[t], ref);
            picks++;
        }
        free(got);
    }
    g4t_checks++;
    if (wrong) g4t_failures++, hx_cases_failed++;
    printf("  ids vs the reference    %s (%d picks, %d wrong)\n", wrong ? "FAIL" : "ok", picks,
           wrong);
    CHECK_MSG(hx_guards_ok(dws, ws, "workspace") && hx_guards_ok(dnext, 4 * (size_t)RMAX, "next"),
              "sample over varying row counts: a guard zone was written");
    hx_dev_free(dx), hx_dev_free(dnext), hx_dev_free(dp), hx_dev_free(dcnt), hx_dev_free(dws);
    free(x);
}

// --- scatter_rows ----------------------------------------------------------------------------------
// dst rows with an index take their source row (exact: a copy), the others keep their values.
static void case_scatter(int T, int n_src, int cols, unsigned long long seed) {
    if (!hx_case("scatter_rows", "T=%d src=%d cols=%d", T, n_src, cols)) return;
    unsigned long long s = seed;
    float *dst = g4_malloc(sizeof(float) * (size_t)T * cols + 4);
    float *src = g4_malloc(sizeof(float) * (size_t)n_src * cols + 4);
    int32_t *idx = g4_malloc(sizeof(int32_t) * (size_t)T + 4);
    for (size_t i = 0; i < (size_t)T * cols; i++) dst[i] = g4t_rand_uniform(&s, -1, 1);
    for (size_t i = 0; i < (size_t)n_src * cols; i++) src[i] = g4t_rand_uniform(&s, 2, 3);
    for (int t = 0, k = 0; t < T; t++) // every other row a placeholder, in order
        idx[t] = (t % 2 && k < n_src) ? k++ : -1;
    void *dd = hx_upload(dst, 4 * (size_t)T * cols), *ds = hx_upload(src, 4 * (size_t)n_src * cols);
    void *di = hx_upload(idx, 4 * (size_t)T);
    const double t0 = hx_now_ms();
    g4_scatter_rows_f32(dd, T, ds, n_src, cols, di, 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    ref_scatter_rows(dst, T, src, n_src, cols, idx);
    float *got = hx_download_f32(dd, (size_t)T * cols);
    hx_report("rows", hx_compare(got, dst, (size_t)T * cols, 0, 0), got, dst, 0, 0,
              hx_guards_ok(dd, 4 * (size_t)T * cols, "dst"), ms);
    hx_dev_free(dd), hx_dev_free(ds), hx_dev_free(di);
    free(dst), free(src), free(idx), free(got);
}

// --- embedding ----------------------------------------------------------------------------------
static void case_embed(int T, int rows, int cols, int out_f32, unsigned long long seed) {
    if (!hx_case("embed", "T=%d rows=%d cols=%d out=%s", T, rows, cols, out_f32 ? "f32" : "f16"))
        return;
    unsigned long long s = seed;
    uint16_t *tb;
    float *table = hx_rand_f16(&s, (size_t)rows * cols, -0.2f, 0.2f, &tb);
    int32_t *ids = g4_malloc(sizeof(int32_t) * (size_t)T);
    for (int t = 0; t < T; t++) ids[t] = (int)(g4t_rand_u64(&s) % (unsigned long long)rows);
    ids[T - 1] = rows - 1;
    const float scale = 39.1875f; // sqrt(1536) as fp16 rounds it
    void *dt = hx_upload(tb, 2 * (size_t)rows * cols), *di = hx_upload(ids, 4 * (size_t)T);
    const size_t n = (size_t)T * cols;
    void *dy = out_f32 ? dev_out_f32(n) : dev_out_f16(n);
    if (out_f32)
        g4_embed_f32(dy, dt, rows, cols, di, T, scale, 0);
    else
        g4_embed_f16(dy, dt, rows, cols, di, T, scale, 0);
    HX_CUDA(cudaDeviceSynchronize());
    float *want = g4_malloc(sizeof(float) * n);
    ref_embed(want, tb, cols, ids, T, scale);
    float *got = out_f32 ? hx_download_f32(dy, n) : hx_download_f16(dy, n);
    const double at = out_f32 ? 0 : F16_ATOL, rt = out_f32 ? 0 : F16_RTOL; // f32: exact product
    hx_report("y vs ref_embed", hx_compare(got, want, n, at, rt), got, want, at, rt,
              hx_guards_ok(dy, (out_f32 ? 4 : 2) * n, "y"), 0);
    hx_dev_free(dt), hx_dev_free(di), hx_dev_free(dy);
    free(table), free(tb), free(ids), free(want), free(got);
}

// --- vision pooling and position embedding ------------------------------------------------------
// Patches of a gw x gh grid (multiples of 3) in row-major order, then `pad` padding patches.
static int32_t *grid_pos(int gw, int gh, int pad) {
    int32_t *p = g4_malloc(sizeof(int32_t) * 2 * (size_t)(gw * gh + pad));
    for (int i = 0; i < gw * gh; i++) p[2 * i] = i % gw, p[2 * i + 1] = i / gw;
    for (int i = gw * gh; i < gw * gh + pad; i++) p[2 * i] = p[2 * i + 1] = -1;
    return p;
}

static void case_pool(int gw, int gh, int pad, int D, unsigned long long seed) {
    const int N = gw * gh + pad, n_bins = N / 9;
    if (!hx_case("vision_pool", "grid=%dx%d padding=%d N=%d D=%d bins=%d", gw, gh, pad, N, D,
                 n_bins))
        return;
    unsigned long long s = seed;
    uint16_t *xb;
    float *x = hx_rand_f16(&s, (size_t)N * D, -5, 5, &xb);
    int32_t *pos = grid_pos(gw, gh, pad);
    void *dx = hx_upload(x, 4 * (size_t)N * D), *dp = hx_upload(pos, 8 * (size_t)N);
    void *dy = dev_out_f32((size_t)n_bins * D), *du = hx_dev_alloc((size_t)n_bins);
    HX_CUDA(cudaMemset(du, 0x77, (size_t)n_bins));
    const double t0 = hx_now_ms();
    g4_vision_pool(dy, du, dx, dp, N, D, 3, n_bins, sqrtf((float)D), 0);
    HX_CUDA(cudaDeviceSynchronize());
    const double ms = hx_now_ms() - t0;
    float *want = g4_malloc(sizeof(float) * (size_t)n_bins * D);
    uint8_t *wu = g4_malloc((size_t)n_bins), *gu = g4_malloc((size_t)n_bins);
    CHECK(ref_vision_pool(want, wu, x, pos, N, D, 3, n_bins, sqrtf((float)D)) == G4_OK);
    float *got = hx_download_f32(dy, (size_t)n_bins * D);
    HX_CUDA(cudaMemcpy(gu, du, (size_t)n_bins, cudaMemcpyDeviceToHost));
    hx_report("pooled vs ref", hx_compare(got, want, (size_t)n_bins * D, F32_ATOL, F32_RTOL), got,
              want, F32_ATOL, F32_RTOL,
              hx_guards_ok(dy, 4 * (size_t)n_bins * D, "out") &&
                  hx_guards_ok(du, (size_t)n_bins, "used"),
              ms);
    CHECK_MSG(memcmp(gu, wu, (size_t)n_bins) == 0,
              "vision_pool: used-bin flags differ from the reference");
    hx_dev_free(dx), hx_dev_free(dp), hx_dev_free(dy), hx_dev_free(du);
    free(x), free(xb), free(pos), free(want), free(wu), free(gu), free(got);
}

static void case_posemb(int gw, int gh, int pad, int D, int table_rows, unsigned long long seed) {
    const int N = gw * gh + pad;
    if (!hx_case("vision_posemb", "grid=%dx%d padding=%d D=%d table=%d", gw, gh, pad, D,
                 table_rows))
        return;
    unsigned long long s = seed;
    uint16_t *hb, *tb;
    float *h = hx_rand_f16(&s, (size_t)N * D, -3, 3, &hb);
    float *table = hx_rand_f16(&s, (size_t)2 * table_rows * D, -1, 1, &tb);
    int32_t *pos = grid_pos(gw, gh, pad);
    void *dh = hx_upload(h, 4 * (size_t)N * D), *dt = hx_upload(tb, 4 * (size_t)table_rows * D);
    void *dp = hx_upload(pos, 8 * (size_t)N);
    g4_vision_posemb_add(dh, dt, table_rows, dp, N, D, 0);
    HX_CUDA(cudaDeviceSynchronize());
    float *want = g4_malloc(sizeof(float) * (size_t)N * D);
    memcpy(want, h, sizeof(float) * (size_t)N * D);
    CHECK(ref_vision_posemb_add(want, tb, table_rows, pos, N, D) == G4_OK);
    float *got = hx_download_f32(dh, (size_t)N * D);
    hx_report("h vs ref", hx_compare(got, want, (size_t)N * D, F32_ATOL, F32_RTOL), got, want,
              F32_ATOL, F32_RTOL, hx_guards_ok(dh, 4 * (size_t)N * D, "h"), 0);
    hx_dev_free(dh), hx_dev_free(dt), hx_dev_free(dp);
    free(h), free(hb), free(table), free(tb), free(pos), free(want), free(got);
}

int main(int argc, char **argv) {
    const int skip = hx_init(argc, argv, "test_cuda_ops");
    if (skip) return skip;
    g4_ref_init();
    // rmsnorm: E2B rows (1536), per-head groups (256, 512, vision 64 and 768), odd row counts
    case_rmsnorm(1, 1536, 1536, 1, 1, 1);
    case_rmsnorm(17, 1536, 1536, 1, 1, 2);
    case_rmsnorm(1000, 1536, 1536, 0, 1, 3);
    case_rmsnorm(33, 2048, 256, 0, 1, 4);
    case_rmsnorm(33, 4096, 512, 0, 0, 5);
    case_rmsnorm(2520, 768, 768, 1, 1, 6);
    case_rmsnorm(750, 1024, 1024, 0, 1, 7);
    case_rmsnorm(3, 8960, 256, 0, 1, 8);
    case_rmsnorm(5, 24, 8, 0, 1, 9); // tiny
    case_rmsnorm_inplace(17, 2048, 256, 10);
    for (int next = 0; next < 3; next++) {
        case_add_rmsnorm(1, 1536, next, 1, 20 + next);
        case_add_rmsnorm(33, 1536, next, next == 1, 23 + next);
    }
    case_add_rmsnorm(1000, 768, 1, 0, 26);
    case_add_rmsnorm(7, 40, 1, 1, 27);
    // q/k/v norms + RoPE (+ cache): E2B sliding (256, default), global (512, proportional),
    // shared-KV layers (q only), vision (12 x 64, 2-D)
    case_qkv(1, 8, 1, 256, 0, 1, 1, 4000, 30);
    case_qkv(1, 8, 1, 512, 1, 1, 1, 32767, 31);
    case_qkv(17, 8, 1, 256, 0, 1, 1, 0, 32);
    case_qkv(513, 8, 1, 512, 1, 1, 1, 100, 33);
    case_qkv(33, 8, 1, 256, 0, 0, 0, 7, 34);    // KV-shared layer: q only
    case_qkv(1000, 12, 12, 64, 2, 1, 0, 0, 35); // vision
    case_qkv(5, 4, 2, 128, 0, 1, 0, 3, 36);     // GQA 2:1, hd 128, in place
    // the one-token cases with one CTA a head vector (E2B: 10 CTAs; q only: 8; vision: 36)
    case_qkv_x(1, 8, 1, 256, 0, 1, 1, 4000, 1, 30);
    case_qkv_x(1, 8, 1, 512, 1, 1, 1, 32767, 1, 31);
    case_qkv_x(1, 8, 1, 256, 0, 0, 0, 7, 1, 34);
    case_qkv_x(1, 12, 12, 64, 2, 1, 0, 0, 1, 35);
    case_qkv_x(1, 4, 2, 128, 0, 1, 0, 3, 1, 36);
    // GELU gating: MLP widths, the PLE slice (b strided inside the [T, 35 * 256] inputs)
    case_gelu_mul(1, 6144, 6144, 40);
    case_gelu_mul(17, 12288, 12288, 41);
    case_gelu_mul(1000, 6144, 6144, 42);
    case_gelu_mul(33, 256, 35 * 256, 43);
    case_gelu_mul(3, 24, 24, 44);
    // PLE inputs
    case_ple(1, 35, 256, 1000, 50);
    case_ple(33, 35, 256, 5000, 51);
    case_ple(513, 35, 256, 2000, 52);
    case_ple(3, 2, 512, 17, 53);
    // sample: the E2B vocabulary (greedy; top-k 64 + top-p 0.95 (gather path); top-p alone and
    // plain temperature (radix path); top-k above the gather size (radix with the threshold)),
    // three rows with a NaN row, odd vocabularies below and above the gather size (scalar
    // loads), ties (quantized logits), no cap
    case_sample(1, 262144, 30.0f, 0.0f, 0, 1.0f, 0, 0, 60);
    case_sample(1, 262144, 30.0f, 1.0f, 64, 0.95f, 0, 0, 61);
    case_sample(1, 262144, 30.0f, 1.0f, 0, 0.9f, 0, 0, 62);
    case_sample(1, 262144, 30.0f, 0.7f, 0, 1.0f, 1, 0, 63);
    case_sample(1, 262144, 30.0f, 1.0f, 5000, 0.98f, 1, 0, 64);
    case_sample(3, 262144, 30.0f, 1.0f, 64, 0.95f, 1, 1, 65);
    case_sample(3, 262144, 30.0f, 0.0f, 0, 1.0f, 1, 1, 66);
    case_sample(2, 1001, 0.0f, 1.3f, 0, 0.8f, 1, 0, 67);
    case_sample(2, 3001, 30.0f, 1.0f, 0, 0.9f, 1, 0, 68);
    case_sample(1, 3001, 30.0f, 1.0f, 40, 1.0f, 0, 0, 69);
    case_sample(1, 24, 30.0f, 2.0f, 5, 0.5f, 0, 0, 59);
    // one workspace over varying row counts (a batch step's sampled rows, issue 31)
    case_sample_rowcounts(0.0f, 0, 1.0f, 57);
    case_sample_rowcounts(1.0f, 64, 0.95f, 58);
    // scatter: a prompt chunk with image rows (E2B width), odd sizes
    case_scatter(600, 280, 1536, 95);
    case_scatter(17, 5, 33, 96);
    // embedding gather
    case_embed(1, 4096, 1536, 1, 70);
    case_embed(1000, 4096, 1536, 1, 71);
    case_embed(33, 500, 1536, 0, 72);
    case_embed(3, 17, 40, 1, 73);
    // vision pooling / position embedding: 768 x 768 image (48 x 48 patches), max_patches with
    // padding (42 x 57 = 2394 + 126 = 2520), tiny
    case_pool(48, 48, 0, 768, 80);
    case_pool(42, 57, 126, 768, 81);
    case_pool(6, 3, 9, 40, 82);
    case_posemb(48, 48, 0, 768, 10240, 90);
    case_posemb(42, 57, 126, 768, 10240, 91);
    case_posemb(6, 3, 9, 40, 16, 92);
    return hx_finish("test_cuda_ops");
}
