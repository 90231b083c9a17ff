// backend_cpu.c: the CPU reference backend: every op of ops.h on the plain-C reference kernels
// (kernels/ref/), fp32 activations and fp32 KV cache. It is the oracle the CUDA backend is
// compared with, and it runs the whole model on machines without a GPU.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/ops.h"
#include "kernels/ref/ref.h"
#include "loader/base.h"

#define F32(b) ((float *)(b)->data)
#define CF32(b) ((const float *)(b)->data)
#define I32(b) ((const int32_t *)(b)->data)

// Type and shape preconditions of the CPU ops (one place lists what is supported).
static void need_f32(const g4_buf *b, const char *op) {
    if (b->type != G4_F32) {
        fprintf(stderr, "g4cu: internal error: cpu %s supports f32 buffers only, got %s\n", op,
                g4_type_name(b->type));
        abort();
    }
}

static void *cpu_alloc(g4_backend *be, size_t n) { return g4_calloc(1, n); }
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
    g4_buf u = g4_buf_new(be, G4_F32, y->rows, y->cols);
    cpu_linear(be, y, x, wg, 0);
    cpu_linear(be, &u, x, wu, 0);
    ref_gelu_mul(F32(y), CF32(y), CF32(&u), (size_t)y->rows * y->cols);
    g4_buf_free(be, &u);
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

static void cpu_rope(g4_backend *be, g4_buf *x, int n_heads, int head_dim, const g4_buf *pos,
                     const float *inv_freq) {
    need_f32(x, "rope");
    G4_ASSERT(pos->type == G4_I32 && pos->rows * pos->cols == x->rows);
    G4_ASSERT(x->cols == n_heads * head_dim && head_dim % 2 == 0);
    ref_rope(F32(x), x->rows, n_heads, head_dim, I32(pos), inv_freq);
}

static void cpu_kv_store(g4_backend *be, g4_buf *kc, g4_buf *vc, const g4_buf *k,
                         const g4_buf *v, const g4_buf *pos) {
    need_f32(kc, "kv_store");
    need_f32(vc, "kv_store");
    G4_ASSERT(k->cols == kc->cols && v->cols == vc->cols && k->rows == v->rows);
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
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .embed = cpu_embed,
    .softcap = cpu_softcap,
};

g4_backend *g4_backend_cpu(void) {
    g4_ref_init();
    return &cpu_backend;
}
