// backend_cpu.c: the CPU reference backend: every op of ops.h on the plain-C reference kernels
// (kernels/ref/), fp32 activations and fp32 KV cache. It is the oracle the CUDA backend is
// compared with, and it runs the whole model on machines without a GPU.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"

#define F32(b) ((float *)(b)->data)
#define CF32(b) ((const float *)(b)->data)
#define I32(b) ((const int32_t *)(b)->data)

// Type and shape preconditions of the CPU ops (one place lists what is supported).
static void need_f32(const g4_buf *b, const char *op) {
    G4_REQUIRE(b->type == G4_F32, "cpu %s supports f32 buffers only, got %s", op,
               g4_type_name(b->type));
}

// Buffers of backend memory made so far (cpu_alloc_count). The reference ops' own temporaries
// are plain host memory (g4_malloc), not backend buffers, and are not counted.
static uint64_t cpu_allocs;

// G4_POISON=1: new buffers hold 0xFF bytes (f32 and f16 NaN) instead of zeros, as cudaMalloc's
// memory holds whatever was there: a read of a row no op wrote then shows as a NaN on the CPU
// too, not as a harmless zero.
static void *cpu_alloc(g4_backend *be, size_t n) { // NULL: out of memory
    static int poison = -1;
    if (poison < 0) poison = g4_env_is("G4_POISON", "1");
    __atomic_add_fetch(&cpu_allocs, 1, __ATOMIC_RELAXED);
    if (!poison) return calloc(1, n ? n : 1);
    void *p = malloc(n ? n : 1);
    if (p) memset(p, 0xFF, n ? n : 1);
    return p;
}
static uint64_t cpu_alloc_count(g4_backend *be) { return __atomic_load_n(&cpu_allocs, __ATOMIC_RELAXED); }
static void cpu_free(g4_backend *be, void *p) { free(p); }
static void cpu_copy(g4_backend *be, void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static void cpu_sync(g4_backend *be) {}

static void cpu_convert(g4_backend *be, g4_buf *dst, const g4_buf *src) {
    G4_ASSERT(dst->rows == src->rows && dst->cols == src->cols);
    size_t n = (size_t)src->rows * src->cols;
    for (size_t i = 0; i < n; i++) {
        float v;
        switch (src->type) {
        case G4_F32: v = CF32(src)[i]; break;
        case G4_F16: v = g4_f16_to_f32(((const uint16_t *)src->data)[i]); break;
        case G4_BF16: v = g4_bf16_to_f32(((const uint16_t *)src->data)[i]); break;
        default: G4_ASSERT(!"convert: unsupported source type");
        }
        switch (dst->type) {
        case G4_F32: F32(dst)[i] = v; break;
        case G4_F16: ((uint16_t *)dst->data)[i] = g4_f32_to_f16(v); break;
        case G4_BF16: ((uint16_t *)dst->data)[i] = g4_bf16_round(v); break;
        default: G4_ASSERT(!"convert: unsupported destination type");
        }
    }
}

static void clip(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
}

static void cpu_linear(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w,
                       int accumulate) {
    need_f32(y, "linear");
    need_f32(x, "linear");
    G4_ASSERT(x->cols == w->in && y->cols == w->out && y->rows == x->rows);
    G4_ASSERT(!(w->clipped && accumulate));
    const float *xin = CF32(x);
    float *xc = NULL;
    if (w->clipped) { // ClippableLinear: clamp the input, then the output
        xc = g4_malloc(g4_buf_bytes(x));
        memcpy(xc, xin, g4_buf_bytes(x));
        clip(xc, (size_t)x->rows * x->cols, w->in_lo, w->in_hi);
        xin = xc;
    }
    if (w->kind == G4_W_F16)
        ref_linear_f16(F32(y), xin, w->w, w->bias, x->rows, w->in, w->out, accumulate);
    else if (w->kind == G4_W_Q4)
        ref_linear_q4(F32(y), xin, w->w, w->scales, w->zp, w->bias, x->rows, w->in, w->out,
                      w->block, accumulate);
    else
        G4_ASSERT(!"linear: unknown weight kind");
    if (w->clipped) clip(F32(y), (size_t)y->rows * y->cols, w->out_lo, w->out_hi);
    free(xc);
}

static void cpu_linear_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *wg,
                                const g4_linear *wu) {
    G4_ASSERT(wg->out == wu->out && y->cols == wg->out);
    g4_buf u = {g4_malloc(g4_buf_bytes(y) + 1), G4_F32, y->rows, y->cols}; // a host temporary
    cpu_linear(be, y, x, wg, 0);
    cpu_linear(be, &u, x, wu, 0);
    ref_gelu_mul(F32(y), CF32(y), CF32(&u), (size_t)y->rows * y->cols);
    free(u.data);
}

static void cpu_rmsnorm(g4_backend *be, g4_buf *y, const g4_buf *x, const void *w, int group,
                        float eps) {
    need_f32(y, "rmsnorm");
    need_f32(x, "rmsnorm");
    G4_ASSERT(y->rows == x->rows && y->cols == x->cols && group > 0 && x->cols % group == 0);
    ref_rmsnorm(F32(y), CF32(x), w, x->rows, x->cols, group, eps);
}

static void cpu_add_rmsnorm(g4_backend *be, g4_buf *h, const g4_buf *x, const void *w, float eps,
                            const void *scale) {
    need_f32(h, "add_rmsnorm");
    need_f32(x, "add_rmsnorm");
    G4_ASSERT(h->rows == x->rows && h->cols == x->cols);
    float s = scale ? g4_f16_to_f32(*(const uint16_t *)scale) : 1.0f;
    ref_add_rmsnorm(F32(h), CF32(x), w, x->rows, x->cols, eps, s);
}

static void cpu_add_rmsnorm_next(g4_backend *be, g4_buf *h, const g4_buf *x, const void *w,
                                 float eps, const void *scale, g4_buf *next, int next_norm,
                                 const void *next_w) {
    cpu_add_rmsnorm(be, h, x, w, eps, scale);
    need_f32(next, "add_rmsnorm_next");
    G4_ASSERT(next->rows == h->rows && next->cols == h->cols);
    if (next_norm)
        ref_rmsnorm(F32(next), CF32(h), next_w, h->rows, h->cols, h->cols, eps);
    else
        memcpy(next->data, h->data, g4_buf_bytes(h));
}

static void cpu_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *a, const g4_buf *b, int b_col0);

// The two ops apart (nothing to fuse on the CPU): h_out may be h_in.
static void cpu_add_norm_linear(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *y,
                                const g4_linear *w, const g4_linear *wu, const g4_buf *mul,
                                int mul_col0) {
    G4_ASSERT(!(wu && mul));
    need_f32(a->h_in, "add_norm_linear");
    G4_ASSERT(a->h_out->rows == a->h_in->rows && a->h_out->cols == a->h_in->cols &&
              a->h_out->type == G4_F32);
    if (a->h_out->data != a->h_in->data)
        memcpy(a->h_out->data, a->h_in->data, g4_buf_bytes(a->h_in));
    cpu_add_rmsnorm_next(be, a->h_out, a->r, a->w, a->eps, a->scale, x, a->next_norm, a->next_w);
    if (wu)
        cpu_linear_gelu_mul(be, y, x, w, wu);
    else
        cpu_linear(be, y, x, w, 0);
    if (mul) cpu_gelu_mul(be, y, y, mul, mul_col0);
}

// The MLP block: the ops apart (the CPU reference of the fused forms is their composition).
static void cpu_mlp_block(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *mlp,
                          g4_buf *y, const g4_linear *wg, const g4_linear *wu,
                          const g4_linear *wd) {
    g4_mlp_block_apart(be, a, x, mlp, y, wg, wu, wd);
}

// The PLE block: the ops apart, in the engine's order (so a forward through it gives the same
// bits as the two-op path).
static void cpu_ple_block(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *pg, g4_buf *y,
                          const g4_linear *wg, const g4_linear *wp, const g4_buf *ple,
                          int ple_col0) {
    G4_ASSERT(
        y->data != x->data && y->data != pg->data &&
        (!a || (y->data != a->r->data && y->data != a->h_in->data && y->data != a->h_out->data)));
    g4_ple_block_apart(be, a, x, pg, y, wg, wp, ple, ple_col0);
}

static void cpu_ple_inputs(g4_backend *be, g4_buf *ple, const void *table, int table_rows,
                           const g4_buf *ids, const void *norm_w, int D, float proj_scale,
                           float tok_scale, float out_scale, float eps) {
    need_f32(ple, "ple_inputs");
    G4_ASSERT(ids->type == G4_I32 && ids->rows * ids->cols == ple->rows && ple->cols % D == 0);
    const size_t n = (size_t)ple->rows * ple->cols;
    float *x = F32(ple);
    for (size_t i = 0; i < n; i++) x[i] *= proj_scale;
    ref_rmsnorm(x, x, norm_w, ple->rows, ple->cols, D, eps);
    float *tok = g4_malloc(sizeof(float) * n);
    for (int t = 0; t < ple->rows; t++) G4_ASSERT(I32(ids)[t] >= 0 && I32(ids)[t] < table_rows);
    ref_embed(tok, table, ple->cols, I32(ids), ple->rows, tok_scale);
    for (size_t i = 0; i < n; i++) x[i] = (x[i] + tok[i]) * out_scale;
    free(tok);
}

static void cpu_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *a, const g4_buf *b,
                         int b_col0) {
    need_f32(y, "gelu_mul");
    need_f32(a, "gelu_mul");
    need_f32(b, "gelu_mul");
    G4_ASSERT(a->rows == b->rows && b_col0 >= 0 && b_col0 + a->cols <= b->cols);
    G4_ASSERT(y->rows == a->rows && y->cols == a->cols);
    for (int r = 0; r < a->rows; r++)
        ref_gelu_mul(F32(y) + (size_t)r * y->cols, CF32(a) + (size_t)r * a->cols,
                     CF32(b) + (size_t)r * b->cols + b_col0, (size_t)a->cols);
}

static void cpu_scale(g4_backend *be, g4_buf *x, float s) {
    need_f32(x, "scale");
    size_t n = (size_t)x->rows * x->cols;
    for (size_t i = 0; i < n; i++) F32(x)[i] *= s;
}

static void cpu_add(g4_backend *be, g4_buf *y, const g4_buf *x) {
    need_f32(y, "add");
    need_f32(x, "add");
    G4_ASSERT(y->rows == x->rows && y->cols == x->cols);
    size_t n = (size_t)x->rows * x->cols;
    for (size_t i = 0; i < n; i++) F32(y)[i] += CF32(x)[i];
}

static void cpu_qkv_prep(g4_backend *be, g4_buf *q, g4_buf *k, g4_buf *v, g4_buf *kc, g4_buf *vc,
                         const void *q_w, const void *k_w, const g4_buf *pos,
                         const float *inv_freq, int n_heads, int n_kv, int hd, float eps) {
    need_f32(q, "qkv_prep");
    G4_ASSERT(pos->type == G4_I32 && pos->rows * pos->cols == q->rows);
    G4_ASSERT(q->cols == n_heads * hd && hd % 2 == 0);
    ref_rmsnorm(F32(q), CF32(q), q_w, q->rows, q->cols, hd, eps);
    ref_rope(F32(q), q->rows, n_heads, hd, I32(pos), inv_freq);
    if (!k) return;
    need_f32(k, "qkv_prep");
    need_f32(v, "qkv_prep");
    need_f32(kc, "qkv_prep");
    need_f32(vc, "qkv_prep");
    G4_ASSERT(k->cols == n_kv * hd && v->cols == k->cols && kc->cols == k->cols &&
              vc->cols == k->cols && k->rows == q->rows && v->rows == q->rows);
    ref_rmsnorm(F32(k), CF32(k), k_w, k->rows, k->cols, hd, eps);
    ref_rope(F32(k), k->rows, n_kv, hd, I32(pos), inv_freq);
    ref_rmsnorm(F32(v), CF32(v), NULL, v->rows, v->cols, hd, eps); // weightless V norm
    for (int t = 0; t < k->rows; t++) {
        int p = I32(pos)[t];
        G4_ASSERT(p >= 0 && p < kc->rows && p < vc->rows);
        memcpy(F32(kc) + (size_t)p * kc->cols, CF32(k) + (size_t)t * k->cols,
               sizeof(float) * (size_t)k->cols);
        memcpy(F32(vc) + (size_t)p * vc->cols, CF32(v) + (size_t)t * v->cols,
               sizeof(float) * (size_t)v->cols);
    }
}

static void cpu_attention(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_buf *kc,
                          const g4_buf *vc, const g4_buf *pos, int n_heads, int n_kv,
                          int head_dim, int window, float scale) {
    need_f32(out, "attention");
    need_f32(q, "attention");
    G4_ASSERT(q->cols == n_heads * head_dim && kc->cols == n_kv * head_dim && n_heads % n_kv == 0);
    for (int t = 0; t < q->rows; t++) G4_ASSERT(I32(pos)[t] < kc->rows);
    ref_attention(F32(out), CF32(q), CF32(kc), CF32(vc), I32(pos), q->rows, n_heads, n_kv,
                  head_dim, window, scale);
}

// Row t of a [T, cols] buffer as a [1, cols] view.
static g4_buf cpu_row(const g4_buf *b, int t) {
    g4_buf r = *b;
    r.data = (char *)b->data + (size_t)t * b->cols * g4_type_size(b->type);
    r.rows = 1;
    return r;
}

// The caches of row t of a row-batched op (host pointers in host tables), [cap[t], cols].
static g4_buf cpu_kv_row(const g4_kv_rows *kv, const void *tab, int t, int cols) {
    G4_ASSERT(kv && tab && kv->cap && kv->cap->type == G4_I32);
    const uint64_t p = ((const uint64_t *)tab)[t];
    G4_ASSERT(p != 0 && I32(kv->cap)[t] > 0);
    g4_buf b = {(void *)(uintptr_t)p, G4_F32, I32(kv->cap)[t], cols};
    return b;
}

// qkv_prep of each row alone, its k and v into its own caches (ops.h).
static void cpu_qkv_prep_rows(g4_backend *be, g4_buf *q, g4_buf *k, g4_buf *v, const g4_kv_rows *kv,
                              const void *q_w, const void *k_w, const g4_buf *pos,
                              const float *inv_freq, int n_heads, int n_kv, int hd, float eps) {
    G4_ASSERT(pos->type == G4_I32 && pos->rows * pos->cols == q->rows);
    G4_ASSERT(!k || (kv && k->rows == q->rows && v->rows == q->rows));
    for (int t = 0; t < q->rows; t++) {
        g4_buf qt = cpu_row(q, t), pt = cpu_row(pos, t);
        if (!k) {
            cpu_qkv_prep(be, &qt, NULL, NULL, NULL, NULL, q_w, NULL, &pt, inv_freq, n_heads, n_kv,
                         hd, eps);
            continue;
        }
        g4_buf kt = cpu_row(k, t), vt = cpu_row(v, t);
        g4_buf kc = cpu_kv_row(kv, kv->k, t, k->cols), vc = cpu_kv_row(kv, kv->v, t, k->cols);
        const int p = I32(pos)[t];
        if (p < 0 || p >= kc.rows) { // stores nothing (as the CUDA kernel): q only
            cpu_qkv_prep(be, &qt, NULL, NULL, NULL, NULL, q_w, NULL, &pt, inv_freq, n_heads, n_kv,
                         hd, eps);
            continue;
        }
        cpu_qkv_prep(be, &qt, &kt, &vt, &kc, &vc, q_w, k_w, &pt, inv_freq, n_heads, n_kv, hd, eps);
    }
}

static void cpu_attention_rows(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_kv_rows *kv,
                               const g4_buf *pos, int n_heads, int n_kv, int head_dim, int window,
                               float scale) {
    need_f32(out, "attention_rows");
    need_f32(q, "attention_rows");
    G4_ASSERT(q->cols == n_heads * head_dim && n_heads % n_kv == 0 && out->rows == q->rows &&
              pos->type == G4_I32 && pos->rows * pos->cols == q->rows);
    const int T = q->rows;
    const float **kc = g4_malloc(sizeof(float *) * (size_t)(T ? T : 1));
    const float **vc = g4_malloc(sizeof(float *) * (size_t)(T ? T : 1));
    for (int t = 0; t < T; t++) {
        const g4_buf k = cpu_kv_row(kv, kv->k, t, n_kv * head_dim),
                     v = cpu_kv_row(kv, kv->v, t, n_kv * head_dim);
        G4_ASSERT(I32(pos)[t] >= 0 && I32(pos)[t] < k.rows);
        kc[t] = CF32(&k), vc[t] = CF32(&v);
    }
    ref_attention_rows(F32(out), CF32(q), kc, vc, I32(pos), T, n_heads, n_kv, head_dim, window,
                       scale);
    free(kc);
    free(vc);
}

// The fused forms (ops.h qkv_attention, _rows) are their two ops one after the other here.
static void cpu_qkv_attention(g4_backend *be, g4_buf *out, g4_buf *q, g4_buf *k, g4_buf *v,
                              g4_buf *kc, g4_buf *vc, const void *q_w, const void *k_w,
                              const g4_buf *pos, const float *inv_freq, int n_heads, int n_kv,
                              int hd, float eps, int window, float scale) {
    G4_ASSERT(q->rows == 1);
    cpu_qkv_prep(be, q, k, v, k ? kc : NULL, k ? vc : NULL, q_w, k_w, pos, inv_freq, n_heads, n_kv,
                 hd, eps);
    cpu_attention(be, out, q, kc, vc, pos, n_heads, n_kv, hd, window, scale);
}

static void cpu_qkv_attention_rows(g4_backend *be, g4_buf *out, g4_buf *q, g4_buf *k, g4_buf *v,
                                   const g4_kv_rows *kv, const void *q_w, const void *k_w,
                                   const g4_buf *pos, const float *inv_freq, int n_heads, int n_kv,
                                   int hd, float eps, int window, float scale) {
    cpu_qkv_prep_rows(be, q, k, v, kv, q_w, k_w, pos, inv_freq, n_heads, n_kv, hd, eps);
    cpu_attention_rows(be, out, q, kv, pos, n_heads, n_kv, hd, window, scale);
}

static void cpu_embed(g4_backend *be, g4_buf *y, const void *table, int table_rows,
                      const g4_buf *ids, float scale) {
    need_f32(y, "embed");
    for (int t = 0; t < y->rows; t++) G4_ASSERT(I32(ids)[t] >= 0 && I32(ids)[t] < table_rows);
    ref_embed(F32(y), table, y->cols, I32(ids), y->rows, scale);
}

static void cpu_softcap(g4_backend *be, g4_buf *x, float c) {
    need_f32(x, "softcap");
    ref_softcap(F32(x), (size_t)x->rows * x->cols, c);
}

static void cpu_sample(g4_backend *be, g4_buf *next, g4_buf *logits, float cap, const void *params,
                       const g4_buf *counter) {
    need_f32(logits, "sample");
    G4_ASSERT(next->type == G4_I32 && counter->type == G4_I32 && params && logits->cols > 0);
    G4_ASSERT((size_t)next->rows * next->cols == (size_t)logits->rows &&
              (size_t)counter->rows * counter->cols == (size_t)logits->rows);
    ref_sample((int32_t *)next->data, F32(logits), logits->rows, logits->cols, cap, params,
               I32(counter));
}

static void cpu_sample_rows(g4_backend *be, g4_buf *next, g4_buf *logits, float cap,
                            const void *params, const g4_buf *counter) {
    need_f32(logits, "sample_rows");
    G4_ASSERT(next->type == G4_I32 && counter->type == G4_I32 && params && logits->cols > 0);
    G4_ASSERT((size_t)next->rows * next->cols == (size_t)logits->rows &&
              (size_t)counter->rows * counter->cols == (size_t)logits->rows);
    const int rows = logits->rows;
    const g4_sample_params **p = g4_malloc(sizeof *p * (size_t)(rows ? rows : 1));
    for (int r = 0; r < rows; r++) {
        p[r] = (const g4_sample_params *)(uintptr_t)((const uint64_t *)params)[r];
        G4_ASSERT(p[r]);
    }
    ref_sample_rows((int32_t *)next->data, F32(logits), rows, logits->cols, cap, p, I32(counter));
    free(p);
}

static void cpu_scatter_rows(g4_backend *be, g4_buf *dst, const g4_buf *src, const g4_buf *idx) {
    need_f32(dst, "scatter_rows");
    need_f32(src, "scatter_rows");
    G4_ASSERT(idx->type == G4_I32 && (size_t)idx->rows * idx->cols == (size_t)dst->rows &&
              src->cols == dst->cols);
    ref_scatter_rows(F32(dst), dst->rows, CF32(src), src->rows, dst->cols, I32(idx));
}

// --- vision and audio towers -------------------------------------------------------------

// An I32 0/1 row mask as the uint8 array the reference ops take (NULL stays NULL).
static uint8_t *mask_u8(const g4_buf *valid, int n) {
    if (!valid) return NULL;
    G4_ASSERT(valid->type == G4_I32 && (size_t)valid->rows * valid->cols == (size_t)n);
    uint8_t *m = g4_malloc((size_t)n + 1);
    for (int i = 0; i < n; i++) m[i] = I32(valid)[i] != 0;
    return m;
}

static void cpu_clamp(g4_backend *be, g4_buf *x, float lo, float hi) {
    need_f32(x, "clamp");
    ref_clamp(F32(x), (size_t)x->rows * x->cols, lo, hi);
}

static void cpu_silu(g4_backend *be, g4_buf *y, const g4_buf *x) {
    need_f32(y, "silu");
    need_f32(x, "silu");
    G4_ASSERT(y->rows == x->rows && y->cols == x->cols);
    ref_silu(F32(y), CF32(x), (size_t)x->rows * x->cols);
}

static void cpu_glu(g4_backend *be, g4_buf *y, const g4_buf *x) {
    need_f32(y, "glu");
    need_f32(x, "glu");
    G4_ASSERT(x->cols == 2 * y->cols && x->rows == y->rows && x->data != y->data);
    ref_glu(F32(y), CF32(x), x->rows, y->cols);
}

static void cpu_transpose(g4_backend *be, g4_buf *y, const g4_buf *x) {
    G4_ASSERT(y->rows == x->cols && y->cols == x->rows && y->type == x->type && y->data != x->data);
    const size_t es = g4_type_size(x->type);
    for (int r = 0; r < x->rows; r++)
        for (int c = 0; c < x->cols; c++)
            memcpy((char *)y->data + ((size_t)c * y->cols + r) * es,
                   (const char *)x->data + ((size_t)r * x->cols + c) * es, es);
}

static void cpu_rope_2d(g4_backend *be, g4_buf *x, int n_heads, int head_dim, const g4_buf *pos_xy,
                        const float *inv_freq) {
    need_f32(x, "rope_2d");
    G4_ASSERT(pos_xy->type == G4_I32 && (size_t)pos_xy->rows * pos_xy->cols == 2 * (size_t)x->rows);
    G4_ASSERT(x->cols == n_heads * head_dim && head_dim % 4 == 0);
    ref_rope_2d(F32(x), x->rows, n_heads, head_dim, I32(pos_xy), inv_freq);
}

static void cpu_attention_bidir(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_buf *k,
                                const g4_buf *v, int n_heads, int head_dim, float scale) {
    need_f32(out, "attention_bidir");
    need_f32(q, "attention_bidir");
    need_f32(k, "attention_bidir");
    need_f32(v, "attention_bidir");
    const int w = n_heads * head_dim;
    G4_ASSERT(q->cols == w && k->cols == w && v->cols == w && out->cols == w);
    G4_ASSERT(k->rows == v->rows && out->rows == q->rows);
    ref_attention_bidir(F32(out), CF32(q), q->rows, CF32(k), CF32(v), NULL, k->rows, n_heads,
                        head_dim, scale);
}

static void cpu_vision_posemb(g4_backend *be, g4_buf *h, const void *table, int table_rows,
                              const g4_buf *pos_xy) {
    need_f32(h, "vision_posemb");
    G4_ASSERT(pos_xy->type == G4_I32 && (size_t)pos_xy->rows * pos_xy->cols == 2 * (size_t)h->rows);
    int rc = ref_vision_posemb_add(F32(h), table, table_rows, I32(pos_xy), h->rows, h->cols);
    G4_ASSERT(rc == G4_OK); // the caller checked the coordinates
}

static void cpu_vision_pool(g4_backend *be, g4_buf *out, const g4_buf *x, const g4_buf *pos_xy,
                            int k, float scale) {
    need_f32(out, "vision_pool");
    need_f32(x, "vision_pool");
    G4_ASSERT(pos_xy->type == G4_I32 && (size_t)pos_xy->rows * pos_xy->cols == 2 * (size_t)x->rows);
    G4_ASSERT(out->cols == x->cols);
    int rc = ref_vision_pool(F32(out), NULL, CF32(x), I32(pos_xy), x->rows, x->cols, k, out->rows,
                             scale);
    G4_ASSERT(rc == G4_OK); // the caller checked that every patch has a bin
}

// dst[c][r] = src[r][c] for src [rows, cols].
static void transpose_f32(float *dst, const float *src, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

// The op is channels last; the reference is NCHW as HF: transpose in and out around it.
static void cpu_sscp_conv(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_buf *valid,
                          const void *w, const void *ln_w, int H, int W, float eps) {
    need_f32(y, "sscp_conv");
    need_f32(x, "sscp_conv");
    G4_ASSERT(x->rows == H * W && y->rows == ((H + 1) / 2) * ((W + 1) / 2));
    uint8_t *m = mask_u8(valid, H);
    float *xc = g4_malloc(g4_buf_bytes(x) + 1), *yc = g4_malloc(g4_buf_bytes(y) + 1);
    transpose_f32(xc, CF32(x), x->rows, x->cols); // [C_in, H*W]
    ref_sscp_conv(yc, xc, m, w, ln_w, x->cols, H, W, y->cols, eps);
    transpose_f32(F32(y), yc, y->cols, y->rows); // [C_out, Ho*Wo] -> [Ho*Wo, C_out]
    free(xc), free(yc), free(m);
}

static void cpu_dwconv1d_causal(g4_backend *be, g4_buf *y, const g4_buf *x, const void *w, int K) {
    need_f32(y, "dwconv1d_causal");
    need_f32(x, "dwconv1d_causal");
    G4_ASSERT(y->rows == x->rows && y->cols == x->cols && y->data != x->data && K > 0);
    ref_dwconv1d_causal(F32(y), CF32(x), w, x->rows, x->cols, K);
}

static void cpu_audio_attention(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_buf *k,
                                const g4_buf *v, const g4_buf *rel, const float *per_dim_scale,
                                const g4_buf *valid, int n_heads, int head_dim, int chunk,
                                int band, float logit_cap, float invalid_logit) {
    need_f32(out, "audio_attention");
    need_f32(q, "audio_attention");
    need_f32(k, "audio_attention");
    need_f32(v, "audio_attention");
    need_f32(rel, "audio_attention");
    const int w = n_heads * head_dim;
    G4_ASSERT(q->cols == w && k->cols == w && v->cols == w && out->cols == w && rel->cols == w);
    G4_ASSERT(q->rows == k->rows && q->rows == v->rows && q->rows == out->rows);
    G4_ASSERT(rel->rows >= band && chunk > 0 && band > 0);
    uint8_t *m = mask_u8(valid, q->rows);
    ref_audio_attention(F32(out), CF32(q), CF32(k), CF32(v), CF32(rel), per_dim_scale, m, q->rows,
                        n_heads, head_dim, chunk, band, logit_cap, invalid_logit);
    free(m);
}

static g4_backend cpu_backend = {
    .name = "cpu",
    .host_memory = 1,
    .act_type = G4_F32,
    .kv_type = G4_F32,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .sync = cpu_sync,
    .convert = cpu_convert,
    .linear = cpu_linear,
    .linear_gelu_mul = cpu_linear_gelu_mul,
    .rmsnorm = cpu_rmsnorm,
    .add_rmsnorm = cpu_add_rmsnorm,
    .gelu_mul = cpu_gelu_mul,
    .scale = cpu_scale,
    .add = cpu_add,
    .qkv_prep = cpu_qkv_prep,
    .add_rmsnorm_next = cpu_add_rmsnorm_next,
    .add_norm_linear = cpu_add_norm_linear,
    .mlp_block = cpu_mlp_block,
    .ple_block = cpu_ple_block,
    .ple_inputs = cpu_ple_inputs,
    .attention = cpu_attention,
    .qkv_prep_rows = cpu_qkv_prep_rows,
    .attention_rows = cpu_attention_rows,
    .qkv_attention = cpu_qkv_attention,
    .qkv_attention_rows = cpu_qkv_attention_rows,
    .embed = cpu_embed,
    .softcap = cpu_softcap,
    .sample = cpu_sample,
    .sample_rows = cpu_sample_rows,
    .scatter_rows = cpu_scatter_rows,
    .alloc_count = cpu_alloc_count,
    .clamp = cpu_clamp,
    .silu = cpu_silu,
    .glu = cpu_glu,
    .transpose = cpu_transpose,
    .rope_2d = cpu_rope_2d,
    .attention_bidir = cpu_attention_bidir,
    .vision_posemb = cpu_vision_posemb,
    .vision_pool = cpu_vision_pool,
    .sscp_conv = cpu_sscp_conv,
    .dwconv1d_causal = cpu_dwconv1d_causal,
    .audio_attention = cpu_audio_attention,
};

g4_backend *g4_backend_cpu(void) {
    g4_ref_init();
    return &cpu_backend;
}
