// backend_cuda.cu: the CUDA backend: the op table of kernels/ops.h on our kernels
// (kernels/*.cu). Activations are fp16, the residual stream and logits fp32, the KV cache fp16.
// Each handle (the root one, and one per text state from exec_new) has its own stream and
// workspaces, so a state's decode step can be captured in a CUDA graph that refers only to its
// own buffers, and two states run side by side; a state's workspaces are allocated when its
// handle is made, never inside a step. What each kernel takes is its supported() predicate
// (kernels/<op>.cuh): the launchers assert them, and the load checks here (check_text,
// check_vision, check_audio, prepare_linear) refuse a model with the same ones, naming the op,
// the shape and what it takes. cuBLAS/cuDNN are not used here: they are baselines in the
// benches only. This file is the glue and the op table; the per-op profiler is
// kernels/profile.cu, the typed elementwise kernels kernels/eltwise.cu, the load checks
// kernels/backend_cuda_checks.cu.
#include <cuda_fp16.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/attention_audio.cuh"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/clamp.cuh"
#include "kernels/conv_dw1d.cuh"
#include "kernels/conv_sscp.cuh"
#include "kernels/cuda_util.h"
#include "kernels/eltwise.cuh"
#include "kernels/embed.cuh"
#include "kernels/gelu_mul.cuh"
#include "kernels/gemm_f16.cuh"
#include "kernels/gemm_q4.cuh"
#include "kernels/glu.cuh"
#include "kernels/logits.cuh"
#include "kernels/ops.h"
#include "kernels/persist_mlp.cuh"
#include "kernels/ple_block.cuh"
#include "kernels/ple.cuh"
#include "kernels/profile.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/scatter_rows.cuh"
#include "kernels/silu.cuh"
#include "kernels/transpose.cuh"
#include "kernels/vision_pool.cuh"
#include "kernels/vision_posemb.cuh"
#include "loader/model_config.h"

// A handle's execution context. A state's (exec_new) has its workspaces sized for its shape
// when it is made; the root handle's grow on first use. Growth never happens inside a capture.
typedef struct {
    cudaStream_t stream;
    void *attn_ws; // decode attention split-K workspace (sized with the state)
    size_t attn_ws_bytes;
    void *sample_ws; // the sample op's counters and histograms (zeroed, self-resetting)
    size_t sample_ws_bytes;
    void *persist_ws; // the persistent MLP's counters and partials (zeroed, self-resetting)
    size_t persist_ws_bytes;
    int keys; // set_keys: the context the one-token forwards enqueued next see
    // Tower scratch (see the towers' section): grown on first use, never inside a capture.
    struct {
        void *p;
        size_t bytes;
    } scratch[4];
} cuda_ctx;

// Device and pinned allocations of every handle (alloc_count).
static uint64_t cu_allocs;

// G4_POISON=1: every new allocation filled with 0xFF bytes (fp16 and fp32 NaN) and the device
// synchronized, so a read of memory no op wrote gives a NaN every run instead of whatever the
// last process left there (a debug aid: tools/gpu/run.sh mm_det's "poison" setting).
static cudaError_t cu_malloc(void **p, size_t n) {
    static int poison = -1;
    g4_cuda_env_is(&poison, "G4_POISON", "1");
    cudaError_t e = cudaMalloc(p, n ? n : 16);
    if (e == cudaSuccess) __atomic_add_fetch(&cu_allocs, 1, __ATOMIC_RELAXED);
    if (e == cudaSuccess && poison) {
        G4_CUDA_CHECK(cudaMemset(*p, 0xFF, n ? n : 16));
        G4_CUDA_CHECK(cudaDeviceSynchronize()); // (the legacy stream does not order ours)
    }
    return e;
}

static uint64_t cu_alloc_count(g4_backend *be) { return __atomic_load_n(&cu_allocs, __ATOMIC_RELAXED); }

static cuda_ctx *CTX(g4_backend *be) { return (cuda_ctx *)be->ctx; }
static cudaStream_t S(g4_backend *be) { return CTX(be)->stream; }

// Preconditions the CUDA ops rely on (G4_REQUIRE): one message listing what is supported.
#define need(cond, op, what) G4_REQUIRE(cond, "cuda %s: %s", op, what)

static void *cu_alloc(g4_backend *be, size_t n) {
    void *p = NULL;
    cudaError_t e = cu_malloc(&p, n);
    if (e != cudaSuccess) { // the caller turns NULL into "GPU out of memory" with the size
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cu_free(g4_backend *be, void *p) { G4_CUDA_CHECK(cudaFree(p)); }

// Mapped pinned host memory: with unified addressing the host pointer is the device pointer
// (checked). Write-combined: the host only writes it once, the GPU reads it over PCIe without
// snooping the CPU caches.
static void *cu_alloc_mapped(g4_backend *be, size_t n) {
    void *p = NULL, *d = NULL;
    cudaError_t e = cudaHostAlloc(&p, n ? n : 16, cudaHostAllocMapped | cudaHostAllocWriteCombined);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    G4_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
    G4_ASSERT(d == p); // unified addressing (every 64-bit Hopper platform)
    __atomic_add_fetch(&cu_allocs, 1, __ATOMIC_RELAXED);
    return p;
}

static void cu_free_mapped(g4_backend *be, void *p) { G4_CUDA_CHECK(cudaFreeHost(p)); }

static void cu_upload(g4_backend *be, void *dst, const void *src, size_t n) {
    G4_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, S(be)));
}

static void cu_download(g4_backend *be, void *dst, const void *src, size_t n) {
    G4_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, S(be)));
    G4_CUDA_CHECK(cudaStreamSynchronize(S(be)));
}

static cuda_ctx cuda_state; // the root handle's

// A state's handle waits for its own stream; the root handle for the whole device (weight
// uploads, tower loads: every stream, the legacy one of cudaMemcpy included, so that any
// state's stream may read what they wrote).
static void cu_sync(g4_backend *be) {
    if (CTX(be) == &cuda_state)
        G4_CUDA_CHECK(cudaDeviceSynchronize());
    else
        G4_CUDA_CHECK(cudaStreamSynchronize(S(be)));
}

#define PROF(name) g4k::ProfScope prof_scope_(name, S(be)) // kernels/profile.cuh

static void cu_convert(g4_backend *be, g4_buf *dst, const g4_buf *src) {
    PROF("convert");
    need(dst->rows == src->rows && dst->cols == src->cols, "convert", "shapes must match");
    need(src->type != G4_I32 && dst->type != G4_I32, "convert", "float types only");
    size_t n = (size_t)src->rows * src->cols;
    g4_convert_typed(dst->data, (int)dst->type, src->data, (int)src->type, n, S(be));
}

static void cu_scale(g4_backend *be, g4_buf *x, float s) {
    PROF("scale");
    size_t n = (size_t)x->rows * x->cols;
    g4_scale_typed(x->data, (int)x->type, n, s, S(be));
    G4_CUDA_LAUNCH_CHECK();
}

static void cu_add(g4_backend *be, g4_buf *y, const g4_buf *x) {
    PROF("add");
    need(y->rows == x->rows && y->cols == x->cols, "add", "shapes must match");
    size_t n = (size_t)x->rows * x->cols;
    g4_add_typed(y->data, (int)y->type, x->data, (int)x->type, n, S(be));
    G4_CUDA_LAUNCH_CHECK();
}

// --- linear algebra -------------------------------------------------------------------------

static g4_gemm_epi epilogue(const g4_buf *y, int accumulate) {
    need(y->type == G4_F16 || y->type == G4_F32, "linear", "y must be f16 or f32");
    if (y->type == G4_F16) return accumulate ? G4_GEMM_Y_F16_ADD : G4_GEMM_Y_F16;
    return accumulate ? G4_GEMM_Y_F32_ADD : G4_GEMM_Y_F32;
}

static void gemm_check(int rc) {
    if (rc != G4_OK) {
        fprintf(stderr, "g4cu: internal error: %s\n", g4_error());
        abort();
    }
}

// ClippableLinear (the towers): clamp, the plain op, clamp; in the towers' section below.
static void cu_linear_clipped(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w,
                              int accumulate);
static void cu_linear_gelu_mul_clipped(g4_backend *be, g4_buf *y, const g4_buf *x,
                                       const g4_linear *wg, const g4_linear *wu);

static void *grow_ws(g4_backend *be, void **p, size_t *have, size_t bytes, int zero,
                     const char *op);

static void cu_linear(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w,
                      int accumulate) {
    if (w->clipped) return cu_linear_clipped(be, y, x, w, accumulate);
    PROF("linear");
    need(x->type == G4_F16, "linear", "x must be f16");
    need(x->cols == w->in && y->cols == w->out && y->rows == x->rows, "linear", "shape mismatch");
    if (w->kind == G4_W_F16)
        gemm_check(g4_gemm_f16(y->data, x->data, w->w, w->bias, x->rows, w->out, w->in,
                               epilogue(y, accumulate), G4_GEMM_AUTO, S(be)));
    else
        gemm_check(g4_gemm_q4(y->data, x->data, (const g4_q4_weight *)w->packed, w->bias,
                              x->rows, epilogue(y, accumulate), G4_GEMM_AUTO, S(be)));
}

// A clipped linear whose four bounds are all infinite (HF's defaults, kept by a package made
// from an untrained model) clamps nothing.
static int clips_nothing(const g4_linear *w);

static void cu_linear_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *wg,
                               const g4_linear *wu) {
    if ((wg->clipped && !clips_nothing(wg)) || (wu->clipped && !clips_nothing(wu)))
        return cu_linear_gelu_mul_clipped(be, y, x, wg, wu);
    PROF("linear_gelu_mul");
    need(x->type == G4_F16 && y->type == G4_F16, "linear_gelu_mul", "x and y must be f16");
    need(wg->kind == wu->kind && wg->out == wu->out && y->cols == wg->out && !wg->bias && !wu->bias,
         "linear_gelu_mul", "gate and up must match, without bias");
    if (wg->kind == G4_W_F16)
        gemm_check(g4_gemm_f16_gelu_mul(y->data, x->data, wg->w, wu->w, x->rows, wg->out, wg->in,
                                        G4_GEMM_AUTO, S(be)));
    else
        gemm_check(g4_gemm_q4_gelu_mul(y->data, x->data, (const g4_q4_weight *)wg->packed,
                                       (const g4_q4_weight *)wu->packed, x->rows, G4_GEMM_AUTO,
                                       S(be)));
}

// Places a linear weight on the device: fp16 uploaded as is, Q4 repacked for the kernels.
static int cu_prepare_linear(g4_backend *be, g4_linear *w) {
    const size_t bias_bytes = (size_t)w->out * 2;
    if (w->kind == G4_W_F16) {
        const char *why = g4_gemm_f16_supported(w->out, w->in);
        if (why) // (the caller names the tensor)
            return g4_fail(G4_EUSER, "cuda backend: linear [%d, %d]: the kernel takes %s (use "
                                     "--backend cpu)",
                           w->in, w->out, why);
        const size_t bytes = (size_t)w->in * w->out * 2;
        void *d = cu_alloc(be, bytes);
        if (!d) return g4_fail(G4_EUSER, "GPU out of memory: %zu bytes for a [%d, %d] weight", bytes,
                               w->in, w->out);
        G4_CUDA_CHECK(cudaMemcpy(d, w->w, bytes, cudaMemcpyHostToDevice));
        w->w = d;
    } else {
        g4_q4_weight *q = (g4_q4_weight *)g4_calloc(1, sizeof *q);
        int rc = g4_q4_repack(q, (const uint8_t *)w->w, (const uint16_t *)w->scales,
                              (const uint8_t *)w->zp, w->out, w->in, w->block);
        if (rc) {
            free(q);
            return rc;
        }
        w->packed = q;
        w->w = w->scales = w->zp = NULL; // only the packed layout lives on the device
    }
    if (w->bias) {
        void *d = cu_alloc(be, bias_bytes);
        if (!d) return g4_fail(G4_EUSER, "GPU out of memory: %zu bytes for a bias", bias_bytes);
        G4_CUDA_CHECK(cudaMemcpy(d, w->bias, bias_bytes, cudaMemcpyHostToDevice));
        w->bias = d;
    }
    // A cudaMemcpy from pageable memory (the mapped package) may return before its DMA has
    // landed, and our streams are non-blocking, so they do not wait for the legacy stream: a
    // load-time kernel on the root stream (the audio tower's rel_k(sinusoid) table) could read a
    // weight still in flight. Prepared means on the device.
    G4_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    return G4_OK;
}

static void cu_release_linear(g4_backend *be, g4_linear *w) {
    if (w->kind == G4_W_F16 && w->w) cu_free(be, (void *)w->w);
    if (w->packed) {
        g4_q4_weight_free((g4_q4_weight *)w->packed);
        free((void *)w->packed);
    }
    if (w->bias) cu_free(be, (void *)w->bias);
    memset(w, 0, sizeof *w);
}

// --- norms, gating, attention ------------------------------------------------------------------

static void cu_rmsnorm(g4_backend *be, g4_buf *y, const g4_buf *x, const void *w, int group,
                       float eps) {
    PROF("rmsnorm");
    need(y->type == G4_F16 && y->rows == x->rows && y->cols == x->cols, "rmsnorm",
         "y f16 with x's shape");
    if (x->type == G4_F16)
        g4_rmsnorm_f16((uint16_t *)y->data, (const uint16_t *)x->data, (const uint16_t *)w,
                       x->rows, x->cols, group, eps, S(be));
    else if (x->type == G4_F32)
        g4_rmsnorm_f32((uint16_t *)y->data, (const float *)x->data, (const uint16_t *)w, x->rows,
                       x->cols, group, eps, S(be));
    else
        need(0, "rmsnorm", "x must be f16 or f32");
}

static void cu_add_rmsnorm(g4_backend *be, g4_buf *h, const g4_buf *x, const void *w, float eps,
                           const void *scale) {
    PROF("add_rmsnorm");
    need(h->type == G4_F32 && x->type == G4_F16 && h->rows == x->rows && h->cols == x->cols,
         "add_rmsnorm", "h f32, x f16, same shape");
    g4_add_rmsnorm((float *)h->data, (const uint16_t *)x->data, (const uint16_t *)w,
                   (const uint16_t *)scale, eps, G4_NEXT_NONE, NULL, NULL, x->rows, x->cols,
                   S(be));
}

static void cu_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *a, const g4_buf *b, int b_col0) {
    PROF("gelu_mul");
    need(y->type == G4_F16 && a->type == G4_F16 && b->type == G4_F16, "gelu_mul", "f16 only");
    need(a->rows == b->rows && y->rows == a->rows && y->cols == a->cols &&
             b_col0 + a->cols <= b->cols,
         "gelu_mul", "shape mismatch");
    g4_gelu_mul((uint16_t *)y->data, y->cols, (const uint16_t *)a->data, a->cols,
                (const uint16_t *)b->data + b_col0, b->cols, a->rows, a->cols, S(be));
}

// The head preparation's launch (qkv_prep and qkv_prep_rows), once a's q, k, v and caches are set.
static void qkv_launch(g4_backend *be, g4_qkv_args *a, const g4_buf *pos, const float *inv_freq,
                       int T, int n_heads, int n_kv, int hd, float eps) {
    a->pos = (const int32_t *)pos->data;
    a->inv_freq = inv_freq;
    a->T = T;
    a->n_heads = n_heads;
    a->n_kv = n_kv;
    a->hd = hd;
    a->eps = eps;
    g4_qkv_norm_rope(a, S(be));
}

static void cu_qkv_prep(g4_backend *be, g4_buf *q, g4_buf *k, g4_buf *v, g4_buf *kc, g4_buf *vc,
                        const void *q_w, const void *k_w, const g4_buf *pos,
                        const float *inv_freq, int n_heads, int n_kv, int hd, float eps) {
    PROF("qkv_prep");
    need(q->type == G4_F16 && pos->type == G4_I32 && q->cols == n_heads * hd, "qkv_prep",
         "q f16 [T, heads * hd], pos i32");
    g4_qkv_args a;
    memset(&a, 0, sizeof a);
    a.q = (uint16_t *)q->data;
    a.q_w = (const uint16_t *)q_w;
    if (k) { // K/V normalised, rotated and stored in the cache rows in the same launch
        need(k->type == G4_F16 && v->type == G4_F16 && kc->type == G4_F16 && vc->type == G4_F16 &&
                 k->cols == n_kv * hd && kc->cols == k->cols && vc->cols == k->cols,
             "qkv_prep", "k, v and caches f16 [.., kv * hd]");
        a.k = (uint16_t *)k->data;
        a.v = (uint16_t *)v->data;
        a.kcache = (uint16_t *)kc->data;
        a.vcache = (uint16_t *)vc->data;
        a.k_w = (const uint16_t *)k_w;
        a.v_norm = 1;
        a.capacity = kc->rows;
    }
    qkv_launch(be, &a, pos, inv_freq, q->rows, n_heads, n_kv, hd, eps);
}

// qkv_prep of each row over its own caches (ops.h qkv_prep_rows): the same launch as qkv_prep
// with the device tables of cache pointers.
static void cu_qkv_prep_rows(g4_backend *be, g4_buf *q, g4_buf *k, g4_buf *v, const g4_kv_rows *kv,
                             const void *q_w, const void *k_w, const g4_buf *pos,
                             const float *inv_freq, int n_heads, int n_kv, int hd, float eps) {
    PROF("qkv_prep_rows");
    need(q->type == G4_F16 && pos->type == G4_I32 && q->cols == n_heads * hd &&
             (size_t)pos->rows * pos->cols == (size_t)q->rows,
         "qkv_prep_rows", "q f16 [T, heads * hd], pos i32 [T]");
    g4_qkv_args a;
    memset(&a, 0, sizeof a);
    a.q = (uint16_t *)q->data;
    a.q_w = (const uint16_t *)q_w;
    if (k) {
        need(k->type == G4_F16 && v->type == G4_F16 && k->cols == n_kv * hd && v->cols == k->cols &&
                 k->rows == q->rows && v->rows == q->rows && kv && kv->k && kv->v && kv->cap &&
                 kv->cap->type == G4_I32,
             "qkv_prep_rows", "k, v f16 [T, kv * hd] and the per-row cache tables");
        a.k = (uint16_t *)k->data;
        a.v = (uint16_t *)v->data;
        a.kc_tab = (const uint64_t *)kv->k;
        a.vc_tab = (const uint64_t *)kv->v;
        a.cap_tab = (const int32_t *)kv->cap->data;
        a.k_w = (const uint16_t *)k_w;
        a.v_norm = 1;
    }
    qkv_launch(be, &a, pos, inv_freq, q->rows, n_heads, n_kv, hd, eps);
}

static void cu_add_rmsnorm_next(g4_backend *be, g4_buf *h, const g4_buf *x, const void *w,
                                float eps, const void *scale, g4_buf *next, int next_norm,
                                const void *next_w) {
    PROF("add_rmsnorm_next");
    need(h->type == G4_F32 && x->type == G4_F16 && next->type == G4_F16 &&
             h->rows == x->rows && h->cols == x->cols && next->rows == h->rows &&
             next->cols == h->cols,
         "add_rmsnorm_next", "h f32, x and next f16, one shape");
    g4_add_rmsnorm((float *)h->data, (const uint16_t *)x->data, (const uint16_t *)w,
                   (const uint16_t *)scale, eps, next_norm ? G4_NEXT_NORM : G4_NEXT_COPY,
                   (uint16_t *)next->data, (const uint16_t *)next_w, x->rows, x->cols, S(be));
}

static void cu_ple_inputs(g4_backend *be, g4_buf *ple, const void *table, int table_rows,
                          const g4_buf *ids, const void *norm_w, int D, float proj_scale,
                          float tok_scale, float out_scale, float eps) {
    PROF("ple_inputs");
    need(ple->type == G4_F16 && ids->type == G4_I32 && ple->cols % D == 0, "ple_inputs",
         "ple f16 [T, L * D], ids i32");
    g4_ple_inputs((uint16_t *)ple->data, (const uint16_t *)ple->data, (const uint16_t *)table,
                  table_rows, (const int32_t *)ids->data, (const uint16_t *)norm_w, ple->rows,
                  ple->cols / D, D, proj_scale, tok_scale, out_scale, eps, S(be));
}

// A workspace of at least `bytes` bytes in *p (zeroed when zero): as it is when large enough;
// else grown, which must not happen inside a graph capture (a state's handle sizes its
// workspaces when it is made, so its captured step never grows one).
static void *grow_ws(g4_backend *be, void **p, size_t *have, size_t bytes, int zero,
                     const char *op) {
    if (bytes <= *have && *p) return *p;
    cudaStreamCaptureStatus st;
    G4_CUDA_CHECK(cudaStreamIsCapturing(S(be), &st));
    need(st == cudaStreamCaptureStatusNone, op,
         "its workspace must be sized before a graph capture (the state's handle sizes it)");
    G4_CUDA_CHECK(cudaStreamSynchronize(S(be))); // queued kernels may still use the old one
    if (*p) G4_CUDA_CHECK(cudaFree(*p));
    G4_CUDA_CHECK(cu_malloc(p, bytes));
    if (zero) G4_CUDA_CHECK(cudaMemsetAsync(*p, 0, bytes, S(be))); // (ordered before its users)
    *have = bytes;
    return *p;
}

// The decode attention workspace of up to T <= 64 rows over kv_rows cache rows.
static size_t attn_ws_need(const g4_text_config *c, int kv_rows, int max_rows) {
    size_t ws = 0;
    const int T_max = max_rows < 64 ? max_rows : 64;
    for (int l = 0; l < c->n_layers; l++)
        for (int T = 1; T <= T_max; T++) {
            const size_t b = g4_attn_decode_workspace(T, c->n_heads, c->n_kv_heads,
                                                      c->layer[l].head_dim, kv_rows);
            if (b > ws) ws = b;
        }
    return ws;
}

// Decode (T <= 64: one query row per step, or a few) splits over the KV length; longer inputs
// (prefill) take the flash kernel.
static void cu_attention(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_buf *kc,
                         const g4_buf *vc, const g4_buf *pos, int n_heads, int n_kv, int head_dim,
                         int window, float scale) {
    PROF("attention");
    need(out->type == G4_F16 && q->type == G4_F16 && kc->type == G4_F16, "attention", "f16 only");
    cuda_ctx *c = CTX(be);
    if (q->rows <= 64) {
        size_t ws = g4_attn_decode_workspace(q->rows, n_heads, n_kv, head_dim, kc->rows);
        grow_ws(be, &c->attn_ws, &c->attn_ws_bytes, ws, 1, "attention");
        g4_attn_decode_set_keys(c->keys);
        g4_attn_decode((uint16_t *)out->data, (const uint16_t *)q->data,
                       (const uint16_t *)kc->data, (const uint16_t *)vc->data,
                       (const int32_t *)pos->data, q->rows, n_heads, n_kv, head_dim, kc->rows,
                       window, scale, c->attn_ws, c->attn_ws_bytes, c->stream);
    } else {
        g4_attn_prefill((uint16_t *)out->data, (const uint16_t *)q->data,
                        (const uint16_t *)kc->data, (const uint16_t *)vc->data,
                        (const int32_t *)pos->data, q->rows, n_heads, n_kv, head_dim, kc->rows,
                        window, scale, c->stream);
    }
}

// Decode attention of each row over its own caches (ops.h attention_rows): one launch pair.
static void cu_attention_rows(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_kv_rows *kv,
                              const g4_buf *pos, int n_heads, int n_kv, int head_dim, int window,
                              float scale) {
    PROF("attention_rows");
    need(out->type == G4_F16 && q->type == G4_F16 && out->rows == q->rows && out->cols == q->cols &&
             pos->type == G4_I32 && (size_t)pos->rows * pos->cols == (size_t)q->rows && kv &&
             kv->k && kv->v && kv->cap && kv->cap->type == G4_I32,
         "attention_rows", "out, q f16 [T, heads * hd], pos i32 [T], the per-row cache tables");
    cuda_ctx *c = CTX(be);
    const size_t ws = g4_attn_decode_rows_workspace(q->rows, n_heads, n_kv, head_dim);
    grow_ws(be, &c->attn_ws, &c->attn_ws_bytes, ws, 1, "attention_rows");
    g4_attn_decode_rows((uint16_t *)out->data, (const uint16_t *)q->data, (const uint64_t *)kv->k,
                        (const uint64_t *)kv->v, (const int32_t *)kv->cap->data,
                        (const int32_t *)pos->data, q->rows, n_heads, n_kv, head_dim, window, scale,
                        c->attn_ws, c->attn_ws_bytes, c->stream);
}

// What the fused forms prepare from: the raw k, v (NULL: a KV-shared layer, q only).
static g4_attn_prep attn_prep(const g4_buf *k, const g4_buf *v, const void *q_w, const void *k_w,
                              const float *inv_freq, float eps) {
    const g4_attn_prep p = {k ? (const uint16_t *)k->data : NULL,
                            k ? (const uint16_t *)v->data : NULL,
                            (const uint16_t *)q_w,
                            k ? (const uint16_t *)k_w : NULL,
                            inv_freq,
                            eps};
    return p;
}

// qkv_prep then attention for one token (ops.h qkv_attention): the preparation in the decode
// attention's prologue (g4_attn_decode_prep), one launch fewer; where that form does not take
// the heads, the two ops.
static void cu_qkv_attention(g4_backend *be, g4_buf *out, g4_buf *q, g4_buf *k, g4_buf *v,
                             g4_buf *kc, g4_buf *vc, const void *q_w, const void *k_w,
                             const g4_buf *pos, const float *inv_freq, int n_heads, int n_kv,
                             int hd, float eps, int window, float scale) {
    if (q->rows != 1 || g4_attn_decode_prep_supported(n_heads, n_kv, hd)) {
        cu_qkv_prep(be, q, k, v, k ? kc : NULL, k ? vc : NULL, q_w, k_w, pos, inv_freq, n_heads,
                    n_kv, hd, eps);
        cu_attention(be, out, q, kc, vc, pos, n_heads, n_kv, hd, window, scale);
        return;
    }
    PROF("qkv_attention");
    need(out->type == G4_F16 && q->type == G4_F16 && pos->type == G4_I32 &&
             q->cols == n_heads * hd && out->rows == 1 && out->cols == q->cols &&
             kc->type == G4_F16 && vc->type == G4_F16 && kc->cols == n_kv * hd &&
             vc->cols == kc->cols && vc->rows == kc->rows,
         "qkv_attention", "q, out f16 [1, heads * hd], pos i32, caches f16 [.., kv * hd]");
    need(!k || (k->type == G4_F16 && v->type == G4_F16 && k->cols == n_kv * hd &&
                v->cols == k->cols && k->rows == 1 && v->rows == 1),
         "qkv_attention", "k, v f16 [1, kv * hd]");
    cuda_ctx *c = CTX(be);
    const size_t ws = g4_attn_decode_workspace(1, n_heads, n_kv, hd, kc->rows);
    grow_ws(be, &c->attn_ws, &c->attn_ws_bytes, ws, 1, "qkv_attention");
    const g4_attn_prep prep = attn_prep(k, v, q_w, k_w, inv_freq, eps);
    g4_attn_decode_set_keys(c->keys);
    g4_attn_decode_prep((uint16_t *)out->data, (const uint16_t *)q->data, (uint16_t *)kc->data,
                        (uint16_t *)vc->data, (const int32_t *)pos->data, n_heads, n_kv, hd,
                        kc->rows, window, scale, &prep, c->attn_ws, c->attn_ws_bytes, c->stream);
}

// qkv_prep_rows then attention_rows (ops.h qkv_attention_rows), the same fusion.
static void cu_qkv_attention_rows(g4_backend *be, g4_buf *out, g4_buf *q, g4_buf *k, g4_buf *v,
                                  const g4_kv_rows *kv, const void *q_w, const void *k_w,
                                  const g4_buf *pos, const float *inv_freq, int n_heads, int n_kv,
                                  int hd, float eps, int window, float scale) {
    if (g4_attn_decode_prep_supported(n_heads, n_kv, hd)) {
        cu_qkv_prep_rows(be, q, k, v, kv, q_w, k_w, pos, inv_freq, n_heads, n_kv, hd, eps);
        cu_attention_rows(be, out, q, kv, pos, n_heads, n_kv, hd, window, scale);
        return;
    }
    PROF("qkv_attention_rows");
    need(out->type == G4_F16 && q->type == G4_F16 && out->rows == q->rows && out->cols == q->cols &&
             q->cols == n_heads * hd && pos->type == G4_I32 &&
             (size_t)pos->rows * pos->cols == (size_t)q->rows && kv && kv->k && kv->v && kv->cap &&
             kv->cap->type == G4_I32,
         "qkv_attention_rows", "out, q f16 [T, heads * hd], pos i32 [T], the per-row cache tables");
    need(!k || (k->type == G4_F16 && v->type == G4_F16 && k->cols == n_kv * hd &&
                v->cols == k->cols && k->rows == q->rows && v->rows == q->rows),
         "qkv_attention_rows", "k, v f16 [T, kv * hd]");
    cuda_ctx *c = CTX(be);
    const size_t ws = g4_attn_decode_rows_workspace(q->rows, n_heads, n_kv, hd);
    grow_ws(be, &c->attn_ws, &c->attn_ws_bytes, ws, 1, "qkv_attention_rows");
    const g4_attn_prep prep = attn_prep(k, v, q_w, k_w, inv_freq, eps);
    g4_attn_decode_rows_prep(
        (uint16_t *)out->data, (const uint16_t *)q->data, (const uint64_t *)kv->k,
        (const uint64_t *)kv->v, (const int32_t *)kv->cap->data, (const int32_t *)pos->data,
        q->rows, n_heads, n_kv, hd, window, scale, &prep, c->attn_ws, c->attn_ws_bytes, c->stream);
}

static void cu_embed(g4_backend *be, g4_buf *y, const void *table, int table_rows,
                     const g4_buf *ids, float scale) {
    PROF("embed");
    need(ids->type == G4_I32, "embed", "ids i32");
    if (y->type == G4_F16)
        g4_embed_f16((uint16_t *)y->data, (const uint16_t *)table, table_rows, y->cols,
                     (const int32_t *)ids->data, y->rows, scale, S(be));
    else if (y->type == G4_F32)
        g4_embed_f32((float *)y->data, (const uint16_t *)table, table_rows, y->cols,
                     (const int32_t *)ids->data, y->rows, scale, S(be));
    else
        need(0, "embed", "y must be f16 or f32");
}

static void cu_softcap(g4_backend *be, g4_buf *x, float c) {
    PROF("softcap");
    need(x->type == G4_F32, "softcap", "f32 logits");
    g4_logits_softcap((float *)x->data, x->rows, x->cols, c, S(be));
}

// The sample ops' checks (f32 logits, one i32 next id and draw index a row, the sampler(s) in
// device memory) and their workspace, grown for these logits.
static cuda_ctx *sample_prep(g4_backend *be, const g4_buf *next, const g4_buf *logits,
                             const void *params, const g4_buf *counter, const char *op,
                             const char *params_what) {
    need(logits->type == G4_F32 && next->type == G4_I32 && counter->type == G4_I32 && params, op,
         params_what);
    need((size_t)next->rows * next->cols == (size_t)logits->rows &&
             (size_t)counter->rows * counter->cols == (size_t)logits->rows,
         op, "one next id and one draw index per row");
    cuda_ctx *c = CTX(be);
    grow_ws(be, &c->sample_ws, &c->sample_ws_bytes, g4_logits_workspace(logits->rows, logits->cols),
            1, op);
    return c;
}

// Soft-cap + the next token (greedy or sampled) on the device; only next is read back.
static void cu_sample(g4_backend *be, g4_buf *next, g4_buf *logits, float cap, const void *params,
                      const g4_buf *counter) {
    PROF("sample");
    cuda_ctx *c = sample_prep(be, next, logits, params, counter, "sample",
                              "f32 logits, i32 next and counter, the sampler in device memory");
    g4_logits_sample((int32_t *)next->data, (float *)logits->data, logits->rows, logits->cols, cap,
                     (const g4_sample_params *)params, (const int32_t *)counter->data,
                     c->sample_ws, c->sample_ws_bytes, S(be));
}

// The sample op with a sampler per row (ops.h sample_rows): one launch triple for every row.
static void cu_sample_rows(g4_backend *be, g4_buf *next, g4_buf *logits, float cap,
                           const void *params, const g4_buf *counter) {
    PROF("sample_rows");
    cuda_ctx *c = sample_prep(be, next, logits, params, counter, "sample_rows",
                              "f32 logits, i32 next and counter, the samplers' table in device "
                              "memory");
    g4_logits_sample_rows((int32_t *)next->data, (float *)logits->data, logits->rows, logits->cols,
                          cap, (const uint64_t *)params, (const int32_t *)counter->data,
                          c->sample_ws, c->sample_ws_bytes, S(be));
}

static void cu_scatter_rows(g4_backend *be, g4_buf *dst, const g4_buf *src, const g4_buf *idx) {
    PROF("scatter_rows");
    need(dst->type == G4_F32 && src->type == G4_F32 && idx->type == G4_I32 &&
             dst->cols == src->cols && (size_t)idx->rows * idx->cols == (size_t)dst->rows,
         "scatter_rows", "f32 rows of one width and an i32 index per destination row");
    g4_scatter_rows_f32((float *)dst->data, dst->rows, (const float *)src->data, src->rows,
                        dst->cols, (const int32_t *)idx->data, S(be));
}

// --- graphs ---------------------------------------------------------------------------------

static int cu_set_keys(g4_backend *be, int keys) {
    CTX(be)->keys = keys;
    return g4_attn_decode_form(keys);
}

static void cu_graph_begin(g4_backend *be) {
    G4_CUDA_CHECK(cudaStreamBeginCapture(S(be), cudaStreamCaptureModeThreadLocal));
}

static void *cu_graph_end(g4_backend *be) {
    cudaGraph_t g;
    cudaGraphExec_t exec;
    G4_CUDA_CHECK(cudaStreamEndCapture(S(be), &g));
    G4_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    G4_CUDA_CHECK(cudaGraphDestroy(g));
    return (void *)exec;
}

static void cu_graph_launch(g4_backend *be, void *graph) {
    G4_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, S(be)));
}

static void cu_graph_free(g4_backend *be, void *graph) {
    G4_CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}


// --- vision and audio towers ---------------------------------------------------------------
// The tower ops of ops.h (semantics: kernels/ref/ref.h) on kernels/*.cu: f16 activations, the
// towers' residual streams and pooled rows f32 (as the engine allocates them). The I32 0/1 row
// masks of the op interface become the uint8 masks the kernels read, in a scratch buffer.
// Scratch buffers (ctx->scratch) grow on first use outside a graph capture and are reused by
// every later call (the towers run eagerly; a capture that would need a larger one aborts).
// What each op maps to:
//   linear (clipped)   clamp x -> scratch (g4_clamp_copy_f16), the plain GEMM, clamp y
//   linear_gelu_mul    clipped gate/up: two clipped linears -> scratch, g4_gelu_mul
//   clamp, silu, glu   g4_clamp_*, g4_silu_*, g4_glu_* (f16 or f32)
//   transpose          g4_transpose (2- or 4-byte elements)
//   rope_2d            g4_qkv_norm_rope with rope_2d = 1, q only, no norm
//   attention_bidir    g4_attn_bidir (no key mask)
//   vision_posemb      g4_vision_posemb_add;  vision_pool  g4_vision_pool
//   sscp_conv          g4_sscp_conv (channels-last, as the op is)
//   dwconv1d_causal    g4_dwconv1d in its conv-only mode (no GLU, clip, norm or SiLU)
//   audio_attention    g4_attn_audio

enum { SCR_CLIP_X = 0, SCR_GATE = 1, SCR_UP = 2, SCR_MASK = 3 }; // ctx->scratch slots

// A buffer in a message: "f16 [3, 10]".
#define BF    "%s [%d, %d]"
#define BA(b) g4_type_name((b)->type), (b)->rows, (b)->cols

// A precondition of a tower op, with the values in the message (G4_REQUIRE: a caller bug).
#define needf(cond, op, fmt, ...) G4_REQUIRE(cond, "cuda %s: " fmt, op, ##__VA_ARGS__)

static int is_float(const g4_buf *b) {
    return b->type == G4_F16 || b->type == G4_F32;
}
static int same_shape(const g4_buf *a, const g4_buf *b) {
    return a->rows == b->rows && a->cols == b->cols;
}
static int disjoint(const g4_buf *a, const g4_buf *b) {
    const char *pa = (const char *)a->data, *pb = (const char *)b->data;
    return pa + g4_buf_bytes(a) <= pb || pb + g4_buf_bytes(b) <= pa;
}
// An I32 [rows * cols == 2 * n] (x, y) position buffer.
static int is_pos_xy(const g4_buf *p, int n) {
    return p->type == G4_I32 && (size_t)p->rows * p->cols == 2 * (size_t)n;
}

// Scratch slot `slot` with at least `bytes` bytes.
static void *tower_scratch(g4_backend *be, int slot, size_t bytes, const char *op) {
    cuda_ctx *c = CTX(be);
    if (bytes <= c->scratch[slot].bytes) return c->scratch[slot].p;
    cudaStreamCaptureStatus st;
    G4_CUDA_CHECK(cudaStreamIsCapturing(c->stream, &st));
    needf(st == cudaStreamCaptureStatusNone, op,
          "a %zu-byte scratch buffer must be grown before a graph capture (run the op eagerly "
          "once first)",
          bytes);
    G4_CUDA_CHECK(cudaStreamSynchronize(c->stream)); // queued kernels may still read the old one
    if (c->scratch[slot].p) G4_CUDA_CHECK(cudaFree(c->scratch[slot].p));
    const size_t cap = (bytes + bytes / 4 + 255) / 256 * 256; // headroom against regrowth
    G4_CUDA_CHECK(cu_malloc(&c->scratch[slot].p, cap));
    c->scratch[slot].bytes = cap;
    return c->scratch[slot].p;
}

// The kernels' uint8 mask [n] of an I32 0/1 mask buffer (NULL stays NULL: all valid). The one
// mask scratch is reused by the next call: stream order keeps the previous reader before it.
static const uint8_t *mask_u8(g4_backend *be, const g4_buf *valid, int n, const char *op) {
    if (!valid) return NULL;
    needf(valid->type == G4_I32 && (size_t)valid->rows * valid->cols == (size_t)n, op,
          "valid " BF ": expected i32 with %d entries", BA(valid), n);
    if (n == 0) return NULL;
    uint8_t *m = (uint8_t *)tower_scratch(be, SCR_MASK, (size_t)n, op);
    g4_mask_u8(m, (const int32_t *)valid->data, n, S(be));
    return m;
}

static void clamp_buf(g4_backend *be, g4_buf *x, float lo, float hi, const char *op) {
    const size_t n = (size_t)x->rows * x->cols;
    needf(is_float(x), op, "x " BF ": expected f16 or f32", BA(x));
    if (x->type == G4_F16)
        g4_clamp_f16((uint16_t *)x->data, n, lo, hi, S(be));
    else
        g4_clamp_f32((float *)x->data, n, lo, hi, S(be));
}

// Clamping to [-inf, inf] changes nothing (NaN stays NaN): the launch is skipped.
static int no_bounds(float lo, float hi) {
    return lo == -INFINITY && hi == INFINITY;
}

static int clips_nothing(const g4_linear *w) {
    return no_bounds(w->in_lo, w->in_hi) && no_bounds(w->out_lo, w->out_hi);
}

// y = clamp(clamp(x, in) @ W, out): HF Gemma4ClippableLinear. The clamped x goes to a scratch
// (x itself is read by other linears after this one: q, k and v share it).
static void cu_linear_clipped(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w,
                              int accumulate) {
    needf(!accumulate, "linear",
          "a clipped linear cannot accumulate (its output bound applies to x @ W alone)");
    needf(x->type == G4_F16 && x->cols == w->in && y->cols == w->out && y->rows == x->rows,
          "linear",
          "clipped [%d, %d] weight: x " BF ", y " BF ": expected x f16 [T, %d], y [T, %d]", w->in,
          w->out, BA(x), BA(y), w->in, w->out);
    g4_linear plain = *w;
    plain.clipped = 0;
    g4_buf xc = *x;
    if (!no_bounds(w->in_lo, w->in_hi)) {
        xc.data = tower_scratch(be, SCR_CLIP_X, g4_buf_bytes(x), "linear");
        g4_clamp_copy_f16((uint16_t *)xc.data, (const uint16_t *)x->data, (size_t)x->rows * x->cols,
                          w->in_lo, w->in_hi, S(be));
    }
    cu_linear(be, y, &xc, &plain, 0);
    if (!no_bounds(w->out_lo, w->out_hi)) clamp_buf(be, y, w->out_lo, w->out_hi, "linear");
}

// gelu_tanh(clip_g(x @ Wg)) * clip_u(x @ Wu) when the gate or up linear is clipped: the fused
// GEMM has one input, while the two input bounds may differ. Both halves are rounded to fp16,
// as HF's fp16 model rounds each linear's output.
static void cu_linear_gelu_mul_clipped(g4_backend *be, g4_buf *y, const g4_buf *x,
                                       const g4_linear *wg, const g4_linear *wu) {
    needf(wg->out == wu->out && wg->in == wu->in && y->type == G4_F16 && y->rows == x->rows &&
              y->cols == wg->out,
          "linear_gelu_mul",
          "gate [%d, %d], up [%d, %d], y " BF ": expected one weight shape and y f16 [T, %d]",
          wg->in, wg->out, wu->in, wu->out, BA(y), wg->out);
    const size_t bytes = (size_t)x->rows * wg->out * 2;
    g4_buf g = {tower_scratch(be, SCR_GATE, bytes, "linear_gelu_mul"), G4_F16, x->rows, wg->out};
    g4_buf u = {tower_scratch(be, SCR_UP, bytes, "linear_gelu_mul"), G4_F16, x->rows, wu->out};
    cu_linear(be, &g, x, wg, 0);
    cu_linear(be, &u, x, wu, 0);
    cu_gelu_mul(be, y, &g, &u, 0);
}

// The GEMVs' add-norm prologue (g4_gemv_norm) of the op's pending add a, writing x; mul: the
// PLE gate's multiplier from column mul_col0 (NULL: none).
static g4_gemv_norm gemv_norm(const g4_add_norm *a, const g4_buf *x, const g4_buf *mul,
                              int mul_col0) {
    return g4_gemv_norm{(const float *)a->h_in->data,
                        (float *)a->h_out->data,
                        a->r->data,
                        a->w,
                        a->scale,
                        a->next_norm ? a->next_w : NULL,
                        x->data,
                        a->eps,
                        a->next_norm,
                        mul ? (const uint16_t *)mul->data + mul_col0 : NULL,
                        mul ? mul->cols : 0};
}

// Issue 30's consumer-side fusion: a Q4 GEMV of <= 8 rows (the decode step) computes the
// add-norm in its prologue (g4_gemv_q4_add_norm), with no norm kernel of its own; other shapes
// and weights run the add-norm kernel out of place and then the linear.
static void cu_add_norm_linear(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *y,
                               const g4_linear *w, const g4_linear *wu, const g4_buf *mul,
                               int mul_col0) {
    const g4_buf *hi = a->h_in, *ho = a->h_out, *r = a->r;
    needf(hi->type == G4_F32 && ho->type == G4_F32 && r->type == G4_F16 && x->type == G4_F16 &&
              same_shape(hi, ho) && same_shape(hi, r) && same_shape(hi, x) && x->cols == w->in &&
              y->rows == x->rows && y->cols == w->out,
          "add_norm_linear",
          "h_in " BF ", h_out " BF ", r " BF ", x " BF ", y " BF ": expected f32 h, f16 r and x "
          "of one shape [T, %d], y [T, %d]",
          BA(hi), BA(ho), BA(r), BA(x), BA(y), w->in, w->out);
    needf(!mul || (!wu && mul->type == G4_F16 && y->type == G4_F16 && mul->rows == y->rows &&
                   mul_col0 >= 0 && mul_col0 + y->cols <= mul->cols),
          "add_norm_linear",
          "mul " BF " from column %d: expected f16 [T, >= %d + %d], no up weight", BA(mul),
          mul_col0, mul_col0, y->cols);
    const int plain = !w->clipped && (!wu || (wu->kind == w->kind && !wu->clipped)) &&
                      !(w->kind == G4_W_F16 && g4_gemm_f16_skinny_takes(x->rows));
    if (plain && ho->data != hi->data && !g4_gemv_add_norm_supported(x->rows, w->in)) {
        PROF("add_norm_linear");
        const g4_gemv_norm gn = gemv_norm(a, x, mul, mul_col0);
        const g4_gemm_epi epi = wu || mul ? G4_GEMM_Y_F16 : epilogue(y, 0);
        if (w->kind == G4_W_Q4)
            gemm_check(g4_gemv_q4_add_norm(y->data, &gn, (const g4_q4_weight *)w->packed,
                                           wu ? (const g4_q4_weight *)wu->packed : NULL,
                                           wu ? NULL : w->bias, x->rows, epi, S(be)));
        else
            gemm_check(g4_gemv_f16_add_norm(y->data, &gn, w->w, wu ? wu->w : NULL,
                                            wu ? NULL : w->bias, x->rows, w->out, w->in, epi,
                                            S(be)));
        return;
    }
    {
        PROF("add_rmsnorm_next");
        g4_add_rmsnorm_to((float *)ho->data, (const float *)hi->data, (const uint16_t *)r->data,
                          (const uint16_t *)a->w, (const uint16_t *)a->scale, a->eps,
                          a->next_norm ? G4_NEXT_NORM : G4_NEXT_COPY, (uint16_t *)x->data,
                          (const uint16_t *)(a->next_norm ? a->next_w : NULL), x->rows, x->cols,
                          S(be));
    }
    if (wu)
        cu_linear_gelu_mul(be, y, x, w, wu);
    else
        cu_linear(be, y, x, w, 0);
    if (mul) cu_gelu_mul(be, y, y, mul, mul_col0);
}

// A pending add-norm the block kernels can take in their prologue: f32 residual in and out
// (distinct), fp16 r, every buffer x's shape.
static int add_norm_fusable(const g4_add_norm *a, const g4_buf *x) {
    return a->h_out->data != a->h_in->data && a->r->type == G4_F16 && a->h_in->type == G4_F32 &&
           a->h_out->type == G4_F32 && same_shape(a->h_in, x) && same_shape(a->h_out, x) &&
           same_shape(a->r, x);
}

// Issue 30 stage 2: the MLP block of one token with Q4 weights as one persistent launch
// (persist_mlp.cuh), its add-norm in every CTA's prologue as the fused GLU GEMV does; other
// shapes and weights (fp16, several rows, clipped, biased gate/up) run the ops apart.
static void cu_mlp_block(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *mlp, g4_buf *y,
                         const g4_linear *wg, const g4_linear *wu, const g4_linear *wd) {
    needf(x->type == G4_F16 && mlp->type == G4_F16 && mlp->rows == x->rows && y->rows == x->rows &&
              x->cols == wg->in && mlp->cols == wg->out && wu->in == wg->in && wu->out == wg->out &&
              wd->in == wg->out && y->cols == wd->out,
          "mlp_block",
          "x " BF ", mlp " BF ", y " BF ": expected f16 x [T, %d], f16 mlp [T, %d], y [T, %d]",
          BA(x), BA(mlp), BA(y), wg->in, wg->out, wd->out);
    const int q4 = wg->kind == G4_W_Q4 && wu->kind == G4_W_Q4 && wd->kind == G4_W_Q4 &&
                   !wg->clipped && !wu->clipped && !wd->clipped && !wg->bias && !wu->bias;
    const int fused_norm = !a || add_norm_fusable(a, x);
    if (x->rows != 1 || !q4 || !fused_norm || g4_persist_mlp_supported(wg->in, wg->out)) {
        g4_mlp_block_apart(be, a, x, mlp, y, wg, wu, wd);
        return;
    }
    PROF("mlp_block");
    cuda_ctx *c = CTX(be);
    grow_ws(be, &c->persist_ws, &c->persist_ws_bytes, g4_persist_mlp_workspace(wg->in, wg->out), 1,
            "mlp_block");
    const g4_gemv_norm gn = a ? gemv_norm(a, x, NULL, 0) : g4_gemv_norm{};
    gemm_check(g4_persist_mlp_q4(y->data, epilogue(y, 0), wd->bias, mlp->data, a ? NULL : x->data,
                                 a ? &gn : NULL, (const g4_q4_weight *)wg->packed,
                                 (const g4_q4_weight *)wu->packed, (const g4_q4_weight *)wd->packed,
                                 c->persist_ws, c->persist_ws_bytes, S(be)));
}

// Issue 30: the PLE block of one token with Q4 or fp16 weights as one launch of thread-block
// clusters (ple_block.cuh), its add-norm in every CTA's prologue as the add-norm GEMVs do; other
// shapes and weights (several rows, mixed kinds, clipped or biased linears) run the ops apart.
static void cu_ple_block(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *pg, g4_buf *y,
                         const g4_linear *wg, const g4_linear *wp, const g4_buf *ple,
                         int ple_col0) {
    needf(x->type == G4_F16 && pg->type == G4_F16 && ple->type == G4_F16 && pg->rows == x->rows &&
              y->rows == x->rows && ple->rows == x->rows && x->cols == wg->in &&
              pg->cols == wg->out && wp->in == wg->out && y->cols == wp->out && ple_col0 >= 0 &&
              ple_col0 + pg->cols <= ple->cols,
          "ple_block",
          "x " BF ", pg " BF ", y " BF ", ple " BF
          " from column %d: expected f16 x [T, %d], f16 pg "
          "[T, %d], y [T, %d], f16 ple [T, >= %d + %d]",
          BA(x), BA(pg), BA(y), BA(ple), ple_col0, wg->in, wg->out, wp->out, ple_col0, wg->out);
    needf(y->data != x->data && y->data != pg->data &&
              (!a ||
               (y->data != a->r->data && y->data != a->h_in->data && y->data != a->h_out->data)),
          "ple_block", "y must be a buffer of its own (not x, pg, r, h_in or h_out)");
    const int plain = !wg->clipped && !wp->clipped && !wg->bias && !wp->bias && wp->out == wg->in;
    const int q4 = plain && wg->kind == G4_W_Q4 && wp->kind == G4_W_Q4;
    const int f16 = plain && wg->kind == G4_W_F16 && wp->kind == G4_W_F16;
    const int fused_norm = !a || add_norm_fusable(a, x);
    if (x->rows != 1 || !(q4 || f16) || !fused_norm || g4_ple_block_supported(wg->in, wg->out)) {
        g4_ple_block_apart(be, a, x, pg, y, wg, wp, ple, ple_col0);
        return;
    }
    PROF("ple_block");
    const g4_gemv_norm gn = a ? gemv_norm(a, x, NULL, 0) : g4_gemv_norm{};
    const void *mul = (const uint16_t *)ple->data + ple_col0;
    if (f16)
        gemm_check(g4_ple_block_f16(y->data, epilogue(y, 0), pg->data, a ? NULL : x->data,
                                    a ? &gn : NULL, mul, wg->w, wp->w, wg->in, wg->out, S(be)));
    else
        gemm_check(g4_ple_block_q4(y->data, epilogue(y, 0), pg->data, a ? NULL : x->data,
                                   a ? &gn : NULL, mul, (const g4_q4_weight *)wg->packed,
                                   (const g4_q4_weight *)wp->packed, S(be)));
}

static void cu_clamp(g4_backend *be, g4_buf *x, float lo, float hi) {
    PROF("clamp");
    clamp_buf(be, x, lo, hi, "clamp");
}

static void cu_silu(g4_backend *be, g4_buf *y, const g4_buf *x) {
    PROF("silu");
    needf(is_float(x) && y->type == x->type && same_shape(y, x), "silu",
          "y " BF ", x " BF ": expected one shape and type, f16 or f32", BA(y), BA(x));
    const size_t n = (size_t)x->rows * x->cols;
    if (x->type == G4_F16)
        g4_silu_f16((uint16_t *)y->data, (const uint16_t *)x->data, n, S(be));
    else
        g4_silu_f32((float *)y->data, (const float *)x->data, n, S(be));
}

static void cu_glu(g4_backend *be, g4_buf *y, const g4_buf *x) {
    PROF("glu");
    needf(is_float(x) && y->type == x->type && x->rows == y->rows && x->cols == 2 * y->cols &&
              disjoint(y, x),
          "glu", "y " BF ", x " BF ": expected x [T, 2C] and a separate y [T, C], f16 or f32",
          BA(y), BA(x));
    if (x->type == G4_F16)
        g4_glu_f16((uint16_t *)y->data, (const uint16_t *)x->data, y->rows, y->cols, S(be));
    else
        g4_glu_f32((float *)y->data, (const float *)x->data, y->rows, y->cols, S(be));
}

static void cu_transpose(g4_backend *be, g4_buf *y, const g4_buf *x) {
    PROF("transpose");
    needf(y->type == x->type && y->rows == x->cols && y->cols == x->rows && disjoint(y, x),
          "transpose", "y " BF ", x " BF ": expected a separate y [cols, rows] of x's type", BA(y),
          BA(x));
    g4_transpose(y->data, x->data, x->rows, x->cols, (int)g4_type_size(x->type), S(be));
}

static void cu_rope_2d(g4_backend *be, g4_buf *x, int n_heads, int head_dim, const g4_buf *pos_xy,
                       const float *inv_freq) {
    PROF("rope_2d");
    needf(x->type == G4_F16 && n_heads > 0 && x->cols == n_heads * head_dim, "rope_2d",
          "x " BF ": expected f16 [T, %d heads x %d]", BA(x), n_heads, head_dim);
    const char *why = g4_qkv_rope_supported(n_heads, head_dim);
    needf(!why, "rope_2d", "%d heads of %d: the kernel takes %s", n_heads, head_dim, why);
    needf(is_pos_xy(pos_xy, x->rows) && inv_freq, "rope_2d",
          "pos_xy " BF ": expected i32 [%d, 2] and device frequencies", BA(pos_xy), x->rows);
    g4_qkv_args a;
    memset(&a, 0, sizeof a);
    a.q = (uint16_t *)x->data; // q only, q_w NULL: no norm, a plain rotation
    a.pos = (const int32_t *)pos_xy->data;
    a.inv_freq = inv_freq;
    a.rope_2d = 1;
    a.T = x->rows;
    a.n_heads = n_heads;
    a.n_kv = 1;
    a.hd = head_dim;
    g4_qkv_norm_rope(&a, S(be));
}

static void cu_attention_bidir(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_buf *k,
                               const g4_buf *v, int n_heads, int head_dim, float scale) {
    PROF("attention_bidir");
    const int w = n_heads * head_dim;
    needf(out->type == G4_F16 && q->type == G4_F16 && k->type == G4_F16 && v->type == G4_F16,
          "attention_bidir", "out %s, q %s, k %s, v %s: expected f16", g4_type_name(out->type),
          g4_type_name(q->type), g4_type_name(k->type), g4_type_name(v->type));
    needf(q->cols == w && k->cols == w && v->cols == w && out->cols == w && k->rows == q->rows &&
              v->rows == q->rows && out->rows == q->rows,
          "attention_bidir",
          "out " BF ", q " BF ", k " BF ", v " BF ": expected all [N, %d heads x %d] (the kernel "
          "attends N queries over the same N rows)",
          BA(out), BA(q), BA(k), BA(v), n_heads, head_dim);
    const char *why = g4_attn_bidir_supported(n_heads, head_dim);
    needf(!why, "attention_bidir", "%d heads of %d: the kernel takes %s", n_heads, head_dim, why);
    g4_attn_bidir((uint16_t *)out->data, (const uint16_t *)q->data, (const uint16_t *)k->data,
                  (const uint16_t *)v->data, NULL, q->rows, n_heads, head_dim, scale, S(be));
}

static void cu_vision_posemb(g4_backend *be, g4_buf *h, const void *table, int table_rows,
                             const g4_buf *pos_xy) {
    PROF("vision_posemb");
    needf(h->type == G4_F32 && h->cols % 8 == 0 && table && table_rows > 0, "vision_posemb",
          "h " BF ", table of %d rows: expected h f32 [N, D], D a multiple of 8", BA(h),
          table_rows);
    needf(is_pos_xy(pos_xy, h->rows), "vision_posemb", "pos_xy " BF ": expected i32 [%d, 2]",
          BA(pos_xy), h->rows);
    g4_vision_posemb_add((float *)h->data, (const uint16_t *)table, table_rows,
                         (const int32_t *)pos_xy->data, h->rows, h->cols, S(be));
}

static void cu_vision_pool(g4_backend *be, g4_buf *out, const g4_buf *x, const g4_buf *pos_xy,
                           int k, float scale) {
    PROF("vision_pool");
    needf(out->type == G4_F32 && x->type == G4_F32 && out->cols == x->cols, "vision_pool",
          "out " BF ", x " BF ": expected f32 [bins, D] and [N, D]", BA(out), BA(x));
    const char *why = g4_vision_pool_supported(x->cols, k);
    needf(!why, "vision_pool", "D %d, kernel %d: the kernel takes %s", x->cols, k, why);
    needf(is_pos_xy(pos_xy, x->rows), "vision_pool", "pos_xy " BF ": expected i32 [%d, 2]",
          BA(pos_xy), x->rows);
    g4_vision_pool((float *)out->data, NULL, (const float *)x->data, (const int32_t *)pos_xy->data,
                   x->rows, x->cols, k, out->rows, scale, S(be));
}

static void cu_sscp_conv(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_buf *valid,
                         const void *w, const void *ln_w, int H, int W, float eps) {
    PROF("sscp_conv");
    const int C_in = x->cols, C_out = y->cols;
    const long long Ho = (H + 1) / 2, Wo = (W + 1) / 2;
    needf(H >= 1 && W >= 1 && (long long)x->rows == (long long)H * W && y->rows == Ho * Wo,
          "sscp_conv", "x " BF ", y " BF ", H %d, W %d: expected x [H*W, C_in], y [%lld, C_out]",
          BA(x), BA(y), H, W, Ho * Wo);
    needf(is_float(x) && y->type == G4_F16, "sscp_conv", "x %s, y %s: expected x f16 or f32, y f16",
          g4_type_name(x->type), g4_type_name(y->type));
    const char *why = g4_sscp_conv_supported(C_in, C_out, W, x->type == G4_F32);
    needf(!why, "sscp_conv", "C_in %d, C_out %d, W %d: the kernel takes %s", C_in, C_out, W, why);
    const uint8_t *m = mask_u8(be, valid, H, "sscp_conv");
    g4_sscp_conv((uint16_t *)y->data, x->data, x->type == G4_F32, m, (const uint16_t *)w,
                 (const uint16_t *)ln_w, H, W, C_in, C_out, eps, S(be));
}

static void cu_dwconv1d_causal(g4_backend *be, g4_buf *y, const g4_buf *x, const void *w, int K) {
    PROF("dwconv1d_causal");
    needf(x->type == G4_F16 && y->type == G4_F16 && same_shape(y, x) && disjoint(y, x),
          "dwconv1d_causal", "y " BF ", x " BF ": expected a separate f16 y of x's shape", BA(y),
          BA(x));
    const char *why = g4_dwconv1d_supported(x->cols, K);
    needf(!why, "dwconv1d_causal", "C %d, K %d: the kernel takes %s", x->cols, K, why);
    g4_dwconv1d((uint16_t *)y->data, (const uint16_t *)x->data, (const uint16_t *)w, x->rows,
                x->cols, K, /*glu*/ 0, /*clip*/ 0.0f, /*norm_w*/ NULL, 0.0f, /*silu*/ 0, S(be));
}

static void cu_audio_attention(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_buf *k,
                               const g4_buf *v, const g4_buf *rel, const float *per_dim_scale,
                               const g4_buf *valid, int n_heads, int head_dim, int chunk, int band,
                               float logit_cap, float invalid_logit) {
    PROF("audio_attention");
    const int w = n_heads * head_dim;
    needf(out->type == G4_F16 && q->type == G4_F16 && k->type == G4_F16 && v->type == G4_F16 &&
              rel->type == G4_F16,
          "audio_attention", "out %s, q %s, k %s, v %s, rel %s: expected f16",
          g4_type_name(out->type), g4_type_name(q->type), g4_type_name(k->type),
          g4_type_name(v->type), g4_type_name(rel->type));
    needf(q->cols == w && k->cols == w && v->cols == w && out->cols == w && rel->cols == w &&
              k->rows == q->rows && v->rows == q->rows && out->rows == q->rows && rel->rows >= band,
          "audio_attention",
          "out " BF ", q " BF ", k " BF ", v " BF ", rel " BF ": expected [T, %d heads x %d] and "
          "rel with >= %d rows",
          BA(out), BA(q), BA(k), BA(v), BA(rel), n_heads, head_dim, band);
    const char *why = g4_attn_audio_supported(n_heads, head_dim, chunk, band);
    needf(!why, "audio_attention", "%d heads of %d, chunk %d, band %d: the kernel takes %s",
          n_heads, head_dim, chunk, band, why);
    needf(logit_cap > 0 && per_dim_scale, "audio_attention",
          "cap %g: expected a positive cap and per-dim scales", logit_cap);
    const uint8_t *m = mask_u8(be, valid, q->rows, "audio_attention");
    g4_attn_audio((uint16_t *)out->data, (const uint16_t *)q->data, (const uint16_t *)k->data,
                  (const uint16_t *)v->data, (const uint16_t *)rel->data, per_dim_scale, m, q->rows,
                  n_heads, head_dim, chunk, band, logit_cap, invalid_logit, S(be));
}

// --- load checks: kernels/backend_cuda_checks.cu (g4_cuda_check_text, _vision, _audio) ----

static int cu_check_text(g4_backend *be, const g4_text_config *c) { return g4_cuda_check_text(c); }
static int cu_check_vision(g4_backend *be, const g4_vision_config *c, int pool_k) {
    return g4_cuda_check_vision(c, pool_k);
}
static int cu_check_audio(g4_backend *be, const g4_audio_config *c) { return g4_cuda_check_audio(c); }

#undef BF
#undef BA

static g4_backend cuda_backend;

// A state's handle: the op table, a stream of its own, its decode workspaces sized for a
// cache of kv_rows rows and up to max_rows rows per forward (zeroed where the kernels need it).
static g4_backend *cu_exec_new(g4_backend *be, const g4_text_config *c, int kv_rows,
                               int max_rows) {
    g4_backend *ex = (g4_backend *)g4_calloc(1, sizeof *ex);
    cuda_ctx *cx = (cuda_ctx *)g4_calloc(1, sizeof *cx);
    *ex = cuda_backend;
    ex->ctx = cx;
    G4_CUDA_CHECK(cudaStreamCreateWithFlags(&cx->stream, cudaStreamNonBlocking));
    cx->attn_ws_bytes = attn_ws_need(c, kv_rows, max_rows);
    cx->sample_ws_bytes = g4_logits_workspace(1, c->vocab);
    for (int l = 0; l < c->n_layers; l++) {
        const size_t b = g4_persist_mlp_workspace(c->hidden, c->layer[l].ffn);
        if (b > cx->persist_ws_bytes) cx->persist_ws_bytes = b;
    }
    if (cu_malloc(&cx->attn_ws, cx->attn_ws_bytes) != cudaSuccess ||
        cu_malloc(&cx->sample_ws, cx->sample_ws_bytes) != cudaSuccess ||
        cu_malloc(&cx->persist_ws, cx->persist_ws_bytes) != cudaSuccess) {
        cudaGetLastError();
        be->exec_free(ex);
        return NULL;
    }
    G4_CUDA_CHECK(cudaMemsetAsync(cx->attn_ws, 0, cx->attn_ws_bytes, cx->stream));
    G4_CUDA_CHECK(cudaMemsetAsync(cx->sample_ws, 0, cx->sample_ws_bytes, cx->stream));
    G4_CUDA_CHECK(cudaMemsetAsync(cx->persist_ws, 0, cx->persist_ws_bytes, cx->stream));
    // Everything queued before (weight uploads on any stream) is done before this stream runs.
    G4_CUDA_CHECK(cudaDeviceSynchronize());
    return ex;
}

// The row-batched ops' workspaces of ex for up to `rows` rows (ops.h exec_reserve_rows): the
// largest any row count up to it asks (the split count per row falls as the rows grow).
static void cu_exec_reserve_rows(g4_backend *ex, const g4_text_config *c, int rows) {
    cuda_ctx *cx = CTX(ex);
    size_t ws = 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int T = 1; T <= rows; T++) {
            const size_t b =
                g4_attn_decode_rows_workspace(T, c->n_heads, c->n_kv_heads, c->layer[l].head_dim);
            if (b > ws) ws = b;
        }
    grow_ws(ex, &cx->attn_ws, &cx->attn_ws_bytes, ws, 1, "exec_reserve_rows");
    grow_ws(ex, &cx->sample_ws, &cx->sample_ws_bytes, g4_logits_workspace(rows, c->vocab), 1,
            "exec_reserve_rows");
}

static void cu_exec_free(g4_backend *ex) {
    cuda_ctx *cx = CTX(ex);
    G4_CUDA_CHECK(cudaStreamSynchronize(cx->stream));
    if (cx->attn_ws) G4_CUDA_CHECK(cudaFree(cx->attn_ws));
    if (cx->sample_ws) G4_CUDA_CHECK(cudaFree(cx->sample_ws));
    if (cx->persist_ws) G4_CUDA_CHECK(cudaFree(cx->persist_ws));
    for (int i = 0; i < 4; i++)
        if (cx->scratch[i].p) G4_CUDA_CHECK(cudaFree(cx->scratch[i].p));
    G4_CUDA_CHECK(cudaStreamDestroy(cx->stream));
    free(cx);
    free(ex);
}

extern "C" g4_backend *g4_backend_cuda(const char **why) {
    if (cuda_backend.name) return &cuda_backend;
    if (g4_cuda_device_count(why) == 0) return NULL;
    int major = 0;
    G4_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    if (major < 9) {
        if (why) *why = "the kernels are built for Hopper (sm_90a); this GPU is older";
        return NULL;
    }
    G4_CUDA_CHECK(cudaStreamCreateWithFlags(&cuda_state.stream, cudaStreamNonBlocking));
    g4_backend *b = &cuda_backend;
    b->host_memory = 0;
    b->act_type = G4_F16;
    b->kv_type = G4_F16;
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->alloc_mapped = cu_alloc_mapped;
    b->free_mapped = cu_free_mapped;
    b->upload = cu_upload;
    b->download = cu_download;
    b->sync = cu_sync;
    b->convert = cu_convert;
    b->linear = cu_linear;
    b->linear_gelu_mul = cu_linear_gelu_mul;
    b->prepare_linear = cu_prepare_linear;
    b->release_linear = cu_release_linear;
    b->rmsnorm = cu_rmsnorm;
    b->add_rmsnorm = cu_add_rmsnorm;
    b->gelu_mul = cu_gelu_mul;
    b->scale = cu_scale;
    b->add = cu_add;
    b->qkv_prep = cu_qkv_prep;
    b->qkv_prep_rows = cu_qkv_prep_rows;
    b->add_rmsnorm_next = cu_add_rmsnorm_next;
    b->add_norm_linear = cu_add_norm_linear;
    b->mlp_block = cu_mlp_block;
    b->ple_block = cu_ple_block;
    b->ple_inputs = cu_ple_inputs;
    b->check_text = cu_check_text;
    b->attention = cu_attention;
    b->attention_rows = cu_attention_rows;
    b->qkv_attention = cu_qkv_attention;
    b->qkv_attention_rows = cu_qkv_attention_rows;
    b->embed = cu_embed;
    b->softcap = cu_softcap;
    b->sample = cu_sample;
    b->sample_rows = cu_sample_rows;
    b->scatter_rows = cu_scatter_rows;
    b->graph_begin = cu_graph_begin;
    b->graph_end = cu_graph_end;
    b->graph_launch = cu_graph_launch;
    b->graph_free = cu_graph_free;
    b->set_keys = cu_set_keys;
    b->exec_new = cu_exec_new;
    b->exec_reserve_rows = cu_exec_reserve_rows;
    b->exec_free = cu_exec_free;
    b->alloc_count = cu_alloc_count;
    b->ctx = &cuda_state;
    // vision and audio towers
    b->clamp = cu_clamp;
    b->silu = cu_silu;
    b->glu = cu_glu;
    b->transpose = cu_transpose;
    b->rope_2d = cu_rope_2d;
    b->attention_bidir = cu_attention_bidir;
    b->vision_posemb = cu_vision_posemb;
    b->vision_pool = cu_vision_pool;
    b->sscp_conv = cu_sscp_conv;
    b->dwconv1d_causal = cu_dwconv1d_causal;
    b->audio_attention = cu_audio_attention;
    b->check_vision = cu_check_vision;
    b->check_audio = cu_check_audio;
    b->name = "cuda";
    return b;
}
