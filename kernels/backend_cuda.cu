// backend_cuda.cu: the CUDA backend: the op table of kernels/ops.h on our kernels
// (kernels/*.cu). Activations are fp16, the residual stream and logits fp32, the KV cache fp16.
// Everything runs on one stream, so a decode step can be captured in a CUDA graph
// (g4_cuda_graph_*); device memory comes from cudaMalloc once, never inside a step.
// cuBLAS/cuDNN are not used here: they are baselines in the benches only.
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/cuda_util.h"
#include "kernels/embed.cuh"
#include "kernels/gelu_mul.cuh"
#include "kernels/gemm_f16.cuh"
#include "kernels/gemm_q4.cuh"
#include "kernels/logits.cuh"
#include "kernels/ops.h"
#include "kernels/ple.cuh"
#include "loader/model_config.h"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "loader/base.h"

typedef struct {
    cudaStream_t stream;
    void *attn_ws; // decode attention split-K workspace (grown before capture, see attention)
    size_t attn_ws_bytes;
    void *logits_ws; // softcap + argmax workspace (zeroed at allocation, self-resetting)
    size_t logits_ws_bytes;
    int32_t *argmax; // device I32 [logits_rows]
    int logits_rows;
} cuda_ctx;

static cuda_ctx *CTX(g4_backend *be) { return (cuda_ctx *)be->ctx; }
static cudaStream_t S(g4_backend *be) { return CTX(be)->stream; }

// Preconditions the CUDA ops rely on: one message listing what is supported.
static void need(int cond, const char *op, const char *what) {
    if (!cond) {
        fprintf(stderr, "g4cu: internal error: cuda %s: %s\n", op, what);
        abort();
    }
}

// --- memory -------------------------------------------------------------------------------

static void *cu_alloc(g4_backend *be, size_t n) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n ? n : 16);
    if (e != cudaSuccess) { // the caller turns NULL into "GPU out of memory" with the size
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cu_free(g4_backend *be, void *p) { G4_CUDA_CHECK(cudaFree(p)); }

static void cu_upload(g4_backend *be, void *dst, const void *src, size_t n) {
    G4_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, S(be)));
}

static void cu_download(g4_backend *be, void *dst, const void *src, size_t n) {
    G4_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, S(be)));
    G4_CUDA_CHECK(cudaStreamSynchronize(S(be)));
}

static void cu_sync(g4_backend *be) { G4_CUDA_CHECK(cudaStreamSynchronize(S(be))); }

// --- small elementwise kernels (everything bigger lives in its own kernels/<op>.cu) --------

__device__ __forceinline__ float ld(const void *p, int type, size_t i) {
    switch (type) {
    case G4_F32: return ((const float *)p)[i];
    case G4_F16: return __half2float(((const __half *)p)[i]);
    default: return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16); // bf16
    }
}

__device__ __forceinline__ void st(void *p, int type, size_t i, float v) {
    switch (type) {
    case G4_F32: ((float *)p)[i] = v; break;
    case G4_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    default: { // bf16, round to nearest even
        uint32_t u = __float_as_uint(v);
        ((uint16_t *)p)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    }
}

static __global__ void convert_kernel(void *y, int ty, const void *x, int tx, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        st(y, ty, i, ld(x, tx, i));
}

static __global__ void scale_kernel(void *x, int tx, size_t n, float s) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        st(x, tx, i, ld(x, tx, i) * s);
}

static __global__ void add_kernel(void *y, int ty, const void *x, int tx, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        st(y, ty, i, ld(y, ty, i) + ld(x, tx, i));
}

static unsigned grid_for(size_t n) {
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

static void cu_convert(g4_backend *be, g4_buf *dst, const g4_buf *src) {
    need(dst->rows == src->rows && dst->cols == src->cols, "convert", "shapes must match");
    need(src->type != G4_I32 && dst->type != G4_I32, "convert", "float types only");
    size_t n = (size_t)src->rows * src->cols;
    convert_kernel<<<grid_for(n), 256, 0, S(be)>>>(dst->data, dst->type, src->data, src->type, n);
    G4_CUDA_LAUNCH_CHECK();
}

static void cu_scale(g4_backend *be, g4_buf *x, float s) {
    size_t n = (size_t)x->rows * x->cols;
    scale_kernel<<<grid_for(n), 256, 0, S(be)>>>(x->data, x->type, n, s);
    G4_CUDA_LAUNCH_CHECK();
}

static void cu_add(g4_backend *be, g4_buf *y, const g4_buf *x) {
    need(y->rows == x->rows && y->cols == x->cols, "add", "shapes must match");
    size_t n = (size_t)x->rows * x->cols;
    add_kernel<<<grid_for(n), 256, 0, S(be)>>>(y->data, y->type, x->data, x->type, n);
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

static void cu_linear(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w,
                      int accumulate) {
    need(x->type == G4_F16, "linear", "x must be f16");
    need(x->cols == w->in && y->cols == w->out && y->rows == x->rows, "linear", "shape mismatch");
    need(!w->clipped, "linear", "clipped linears go through clamp + linear + clamp");
    if (w->kind == G4_W_F16)
        gemm_check(g4_gemm_f16(y->data, x->data, w->w, w->bias, x->rows, w->out, w->in,
                               epilogue(y, accumulate), G4_GEMM_AUTO, S(be)));
    else
        gemm_check(g4_gemm_q4(y->data, x->data, (const g4_q4_weight *)w->packed, w->bias,
                              x->rows, epilogue(y, accumulate), G4_GEMM_AUTO, S(be)));
}

static void cu_linear_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *wg,
                               const g4_linear *wu) {
    need(x->type == G4_F16 && y->type == G4_F16, "linear_gelu_mul", "x and y must be f16");
    need(wg->kind == wu->kind && wg->out == wu->out && y->cols == wg->out && !wg->bias &&
             !wu->bias,
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
    need(h->type == G4_F32 && x->type == G4_F16 && h->rows == x->rows && h->cols == x->cols,
         "add_rmsnorm", "h f32, x f16, same shape");
    g4_add_rmsnorm((float *)h->data, (const uint16_t *)x->data, (const uint16_t *)w,
                   (const uint16_t *)scale, eps, G4_NEXT_NONE, NULL, NULL, x->rows, x->cols,
                   S(be));
}

static void cu_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *a, const g4_buf *b, int b_col0) {
    need(y->type == G4_F16 && a->type == G4_F16 && b->type == G4_F16, "gelu_mul", "f16 only");
    need(a->rows == b->rows && y->rows == a->rows && y->cols == a->cols &&
             b_col0 + a->cols <= b->cols,
         "gelu_mul", "shape mismatch");
    g4_gelu_mul((uint16_t *)y->data, y->cols, (const uint16_t *)a->data, a->cols,
                (const uint16_t *)b->data + b_col0, b->cols, a->rows, a->cols, S(be));
}

static void cu_qkv_prep(g4_backend *be, g4_buf *q, g4_buf *k, g4_buf *v, g4_buf *kc, g4_buf *vc,
                        const void *q_w, const void *k_w, const g4_buf *pos,
                        const float *inv_freq, int n_heads, int n_kv, int hd, float eps) {
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
    a.pos = (const int32_t *)pos->data;
    a.inv_freq = inv_freq;
    a.T = q->rows;
    a.n_heads = n_heads;
    a.n_kv = n_kv;
    a.hd = hd;
    a.eps = eps;
    g4_qkv_norm_rope(&a, S(be));
}

static void cu_add_rmsnorm_next(g4_backend *be, g4_buf *h, const g4_buf *x, const void *w,
                                float eps, const void *scale, g4_buf *next, int next_norm,
                                const void *next_w) {
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
    need(ple->type == G4_F16 && ids->type == G4_I32 && ple->cols % D == 0, "ple_inputs",
         "ple f16 [T, L * D], ids i32");
    g4_ple_inputs((uint16_t *)ple->data, (const uint16_t *)ple->data, (const uint16_t *)table,
                  table_rows, (const int32_t *)ids->data, (const uint16_t *)norm_w, ple->rows,
                  ple->cols / D, D, proj_scale, tok_scale, out_scale, eps, S(be));
}

// The shapes our kernels take (each launcher also asserts them): refuse a model up front with
// a user error instead of aborting in the middle of a forward.
static int cu_check_text(g4_backend *be, const g4_text_config *c) {
    for (int l = 0; l < c->n_layers; l++) {
        const int hd = c->layer[l].head_dim;
        if (hd != 256 && hd != 512)
            return g4_fail(G4_EUSER, "cuda backend: layer %d has head_dim %d; the attention "
                                     "kernels take 256 and 512 (use --backend cpu)",
                           l, hd);
    }
    if (c->ple_dim % 256)
        return g4_fail(G4_EUSER, "cuda backend: per-layer input width %d is not a multiple of 256 "
                                 "(the fused PLE kernel's unit; use --backend cpu)",
                       c->ple_dim);
    if (c->hidden % 64)
        return g4_fail(G4_EUSER, "cuda backend: hidden size %d is not a multiple of 64",
                       c->hidden);
    return G4_OK;
}

// Decode (T <= 64: one query row per step, or a few) splits over the KV length; longer inputs
// (prefill) take the flash kernel. The decode workspace grows on first use; the engine runs an
// eager step before it captures a graph, so a captured step never allocates.
static void cu_attention(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_buf *kc,
                         const g4_buf *vc, const g4_buf *pos, int n_heads, int n_kv, int head_dim,
                         int window, float scale) {
    need(out->type == G4_F16 && q->type == G4_F16 && kc->type == G4_F16, "attention", "f16 only");
    cuda_ctx *c = CTX(be);
    if (q->rows <= 64) {
        size_t ws = g4_attn_decode_workspace(q->rows, n_heads, n_kv, head_dim, kc->rows);
        if (ws > c->attn_ws_bytes) {
            cudaStreamCaptureStatus st;
            G4_CUDA_CHECK(cudaStreamIsCapturing(c->stream, &st));
            need(st == cudaStreamCaptureStatusNone, "attention",
                 "decode workspace must be sized before graph capture");
            if (c->attn_ws) G4_CUDA_CHECK(cudaFree(c->attn_ws));
            G4_CUDA_CHECK(cudaMalloc(&c->attn_ws, ws));
            c->attn_ws_bytes = ws;
        }
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

static void cu_embed(g4_backend *be, g4_buf *y, const void *table, int table_rows,
                     const g4_buf *ids, float scale) {
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

// Soft-cap in place; the same launch leaves each row's argmax in ctx->argmax (greedy decoding
// reads 4 bytes instead of the logits).
static void cu_softcap(g4_backend *be, g4_buf *x, float c) {
    need(x->type == G4_F32, "softcap", "f32 logits");
    cuda_ctx *cx = CTX(be);
    size_t ws = g4_logits_workspace(x->rows, x->cols);
    if (ws > cx->logits_ws_bytes || x->rows > cx->logits_rows) {
        cudaStreamCaptureStatus st;
        G4_CUDA_CHECK(cudaStreamIsCapturing(cx->stream, &st));
        need(st == cudaStreamCaptureStatusNone, "softcap", "workspace must exist before capture");
        if (cx->logits_ws) G4_CUDA_CHECK(cudaFree(cx->logits_ws));
        if (cx->argmax) G4_CUDA_CHECK(cudaFree(cx->argmax));
        G4_CUDA_CHECK(cudaMalloc(&cx->logits_ws, ws));
        G4_CUDA_CHECK(cudaMemset(cx->logits_ws, 0, ws)); // the kernel leaves it zeroed again
        G4_CUDA_CHECK(cudaMalloc(&cx->argmax, sizeof(int32_t) * (size_t)x->rows));
        cx->logits_ws_bytes = ws;
        cx->logits_rows = x->rows;
    }
    g4_logits_softcap_argmax((float *)x->data, x->rows, x->cols, c, cx->argmax, cx->logits_ws,
                             cx->logits_ws_bytes, cx->stream);
}

// --- graphs ---------------------------------------------------------------------------------

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

static const int32_t *cu_argmax(g4_backend *be) { return CTX(be)->argmax; }

static g4_backend cuda_backend;
static cuda_ctx cuda_state;

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
    b->add_rmsnorm_next = cu_add_rmsnorm_next;
    b->ple_inputs = cu_ple_inputs;
    b->check_text = cu_check_text;
    b->attention = cu_attention;
    b->embed = cu_embed;
    b->softcap = cu_softcap;
    b->graph_begin = cu_graph_begin;
    b->graph_end = cu_graph_end;
    b->graph_launch = cu_graph_launch;
    b->graph_free = cu_graph_free;
    b->argmax = cu_argmax;
    b->ctx = &cuda_state;
    b->name = "cuda";
    return b;
}
