// backend_cuda.cu: the CUDA backend: the op table of kernels/ops.h on our kernels
// (kernels/*.cu). Activations are fp16, the residual stream and logits fp32, the KV cache fp16.
// Everything runs on one stream, so a decode step can be captured in a CUDA graph
// (g4_cuda_graph_*); device memory comes from cudaMalloc once, never inside a step.
// cuBLAS/cuDNN are not used here: they are baselines in the benches only.
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
#include "kernels/embed.cuh"
#include "kernels/gelu_mul.cuh"
#include "kernels/gemm_f16.cuh"
#include "kernels/gemm_q4.cuh"
#include "kernels/glu.cuh"
#include "kernels/logits.cuh"
#include "kernels/ops.h"
#include "kernels/pdl.cuh"
#include "kernels/ple.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/silu.cuh"
#include "kernels/transpose.cuh"
#include "kernels/vision_pool.cuh"
#include "kernels/vision_posemb.cuh"
#include "loader/model_config.h"

typedef struct {
    cudaStream_t stream;
    void *attn_ws; // decode attention split-K workspace (grown before capture, see attention)
    size_t attn_ws_bytes;
    void *logits_ws; // softcap + argmax workspace (zeroed at allocation, self-resetting)
    size_t logits_ws_bytes;
    int32_t *argmax; // device I32 [logits_rows]
    int logits_rows;
    // Tower scratch (see the towers' section): grown on first use, never inside a capture.
    struct {
        void *p;
        size_t bytes;
    } scratch[4];
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

static void cu_sync(g4_backend *be) { G4_CUDA_CHECK(cudaStreamSynchronize(S(be))); }

// --- per-op profile (G4_PROFILE=1): events around every op of an eager forward -------------
// One decode step's time split by op, launch gaps included (a graph replay hides part of the
// gaps, so this is an upper bound per op). Not recorded while a graph is being captured.
struct ProfEntry {
    const char *name;
    cudaEvent_t a, b;
};
static ProfEntry *prof_entries;
static int prof_n, prof_cap, prof_on = -1;

struct ProfScope {
    ProfEntry *e = nullptr;
    cudaStream_t st;
    ProfScope(const char *name, cudaStream_t stream) : st(stream) {
        if (prof_on < 0) prof_on = getenv("G4_PROFILE") && strcmp(getenv("G4_PROFILE"), "0");
        if (!prof_on) return;
        cudaStreamCaptureStatus cs;
        G4_CUDA_CHECK(cudaStreamIsCapturing(st, &cs));
        if (cs != cudaStreamCaptureStatusNone) return;
        if (prof_n == prof_cap) {
            prof_cap = prof_cap ? 2 * prof_cap : 4096;
            prof_entries = (ProfEntry *)g4_realloc(prof_entries, sizeof(ProfEntry) * prof_cap);
            for (int i = prof_n; i < prof_cap; i++) {
                G4_CUDA_CHECK(cudaEventCreate(&prof_entries[i].a));
                G4_CUDA_CHECK(cudaEventCreate(&prof_entries[i].b));
            }
        }
        e = &prof_entries[prof_n++];
        e->name = name;
        G4_CUDA_CHECK(cudaEventRecord(e->a, st));
    }
    ~ProfScope() {
        if (e) G4_CUDA_CHECK(cudaEventRecord(e->b, st));
    }
};
#define PROF(name) ProfScope prof_scope_(name, S(be))

extern "C" void g4_cuda_profile_reset(void) { prof_n = 0; }

extern "C" void g4_cuda_profile_report(FILE *f, double steps) {
    if (prof_n == 0) return;
    G4_CUDA_CHECK(cudaDeviceSynchronize());
    const char *names[64];
    double ms[64] = {0};
    int count[64] = {0}, n = 0;
    double total = 0;
    for (int i = 0; i < prof_n; i++) {
        float t;
        G4_CUDA_CHECK(cudaEventElapsedTime(&t, prof_entries[i].a, prof_entries[i].b));
        int k = 0;
        while (k < n && strcmp(names[k], prof_entries[i].name)) k++;
        if (k == n && n < 64) names[n++] = prof_entries[i].name;
        if (k < 64) ms[k] += t, count[k]++;
        total += t;
    }
    for (int i = 0; i < n; i++) // sort by time, descending
        for (int j = i + 1; j < n; j++)
            if (ms[j] > ms[i]) {
                double tm = ms[i]; ms[i] = ms[j]; ms[j] = tm;
                int tc = count[i]; count[i] = count[j]; count[j] = tc;
                const char *tn = names[i]; names[i] = names[j]; names[j] = tn;
            }
    fprintf(f, "  %-18s %8s %10s %10s %7s\n", "op", "calls", "ms/step", "us/call", "share");
    for (int i = 0; i < n; i++)
        fprintf(f, "  %-18s %8.0f %10.4f %10.2f %6.1f%%\n", names[i], count[i] / steps,
                ms[i] / steps, 1e3 * ms[i] / count[i], 100 * ms[i] / total);
    fprintf(f, "  %-18s %8.0f %10.4f (sum of op times; launches per step %.0f)\n", "total",
            prof_n / steps, total / steps, prof_n / steps);
    prof_n = 0;
}

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

// On the decode path (embedding -> residual stream): launched with programmatic dependent
// launch, so nothing above the wait (kernels/pdl.cuh).
static __global__ void convert_kernel(void *y, int ty, const void *x, int tx, size_t n) {
    g4_pdl_wait();
    g4_pdl_trigger();
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
    PROF("convert");
    need(dst->rows == src->rows && dst->cols == src->cols, "convert", "shapes must match");
    need(src->type != G4_I32 && dst->type != G4_I32, "convert", "float types only");
    size_t n = (size_t)src->rows * src->cols;
    g4_pdl_launch(convert_kernel, dim3(grid_for(n)), dim3(256), 0, S(be), dst->data, (int)dst->type,
                  (const void *)src->data, (int)src->type, n);
}

static void cu_scale(g4_backend *be, g4_buf *x, float s) {
    PROF("scale");
    size_t n = (size_t)x->rows * x->cols;
    scale_kernel<<<grid_for(n), 256, 0, S(be)>>>(x->data, x->type, n, s);
    G4_CUDA_LAUNCH_CHECK();
}

static void cu_add(g4_backend *be, g4_buf *y, const g4_buf *x) {
    PROF("add");
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

// ClippableLinear (the towers): clamp, the plain op, clamp; in the towers' section below.
static void cu_linear_clipped(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w,
                              int accumulate);
static void cu_linear_gelu_mul_clipped(g4_backend *be, g4_buf *y, const g4_buf *x,
                                       const g4_linear *wg, const g4_linear *wu);

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

static void cu_linear_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *wg,
                               const g4_linear *wu) {
    if (wg->clipped || wu->clipped) return cu_linear_gelu_mul_clipped(be, y, x, wg, wu);
    PROF("linear_gelu_mul");
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
    PROF("attention");
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

// Soft-cap in place; the same launch leaves each row's argmax in ctx->argmax (greedy decoding
// reads 4 bytes instead of the logits).
static void cu_softcap(g4_backend *be, g4_buf *x, float c) {
    PROF("softcap_argmax");
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

// A precondition of a tower op, with the values in the message (a caller bug: abort).
static void needf(int cond, const char *op, const char *fmt, ...) {
    if (cond) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "g4cu: internal error: cuda %s: ", op);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

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
    G4_CUDA_CHECK(cudaMalloc(&c->scratch[slot].p, cap));
    c->scratch[slot].bytes = cap;
    return c->scratch[slot].p;
}

static __global__ void mask_u8_kernel(uint8_t *m, const int32_t *valid, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        m[i] = valid[i] != 0;
}

// The kernels' uint8 mask [n] of an I32 0/1 mask buffer (NULL stays NULL: all valid). The one
// mask scratch is reused by the next call: stream order keeps the previous reader before it.
static const uint8_t *mask_u8(g4_backend *be, const g4_buf *valid, int n, const char *op) {
    if (!valid) return NULL;
    needf(valid->type == G4_I32 && (size_t)valid->rows * valid->cols == (size_t)n, op,
          "valid " BF ": expected i32 with %d entries", BA(valid), n);
    if (n == 0) return NULL;
    uint8_t *m = (uint8_t *)tower_scratch(be, SCR_MASK, (size_t)n, op);
    mask_u8_kernel<<<grid_for((size_t)n), 256, 0, S(be)>>>(m, (const int32_t *)valid->data, n);
    G4_CUDA_LAUNCH_CHECK();
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
    needf(head_dim % 64 == 0 && head_dim <= 512, "rope_2d",
          "head_dim %d: the kernel (qkv_rope.cu) takes multiples of 64 up to 512", head_dim);
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
    needf(head_dim == 64, "attention_bidir",
          "head_dim %d: the bidirectional kernel (attention_prefill.cu) is built and tested for 64",
          head_dim);
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
    needf(out->type == G4_F32 && x->type == G4_F32 && out->cols == x->cols && x->cols % 4 == 0,
          "vision_pool",
          "out " BF ", x " BF ": expected f32 [bins, D] and [N, D], D a multiple of 4", BA(out),
          BA(x));
    needf(is_pos_xy(pos_xy, x->rows), "vision_pool", "pos_xy " BF ": expected i32 [%d, 2]",
          BA(pos_xy), x->rows);
    needf(k >= 1 && k * k <= 1024, "vision_pool",
          "kernel %d: the pooling kernel (vision_pool.cu) keeps at most 1024 patches a bin", k);
    g4_vision_pool((float *)out->data, NULL, (const float *)x->data, (const int32_t *)pos_xy->data,
                   x->rows, x->cols, k, out->rows, scale, S(be));
}

// Shared memory of g4_sscp_conv's two paths (conv_sscp.cu): the CUDA-core path holds the fp32
// weights and three fp16 input rows; the tensor-core path (fp16 x, C_in % 64 == 0, C_out == 32)
// the fp16 weights and five input rows with their padding.
static int sscp_fits(int x_f16, int W, int C_in, int C_out) {
    const size_t limit = 227 * 1024;
    const size_t direct = (size_t)9 * C_in * C_out * 4 + (size_t)3 * W * C_in * 2;
    const size_t mma = (size_t)32 * 9 * C_in * 2 + (size_t)5 * (W + 2) * C_in * 2;
    if (x_f16 && C_out == 32 && C_in % 64 == 0 && mma <= limit) return 1;
    return direct <= limit;
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
    needf(C_in >= 1 && C_in <= 256 && C_out % 32 == 0 && C_out >= 32 && C_out <= 256 &&
              sscp_fits(x->type == G4_F16, W, C_in, C_out),
          "sscp_conv",
          "C_in %d, C_out %d, W %d: the kernel (conv_sscp.cu) takes C_in <= 256, C_out a "
          "multiple of 32 up to 256, and its weights and input rows in shared memory",
          C_in, C_out, W);
    const uint8_t *m = mask_u8(be, valid, H, "sscp_conv");
    g4_sscp_conv((uint16_t *)y->data, x->data, x->type == G4_F32, m, (const uint16_t *)w,
                 (const uint16_t *)ln_w, H, W, C_in, C_out, eps, S(be));
}

static void cu_dwconv1d_causal(g4_backend *be, g4_buf *y, const g4_buf *x, const void *w, int K) {
    PROF("dwconv1d_causal");
    needf(x->type == G4_F16 && y->type == G4_F16 && same_shape(y, x) && disjoint(y, x),
          "dwconv1d_causal", "y " BF ", x " BF ": expected a separate f16 y of x's shape", BA(y),
          BA(x));
    needf(x->cols % 8 == 0 && x->cols <= 2048 && K >= 1 && K <= 8, "dwconv1d_causal",
          "C %d, K %d: the kernel (conv_dw1d.cu) takes C a multiple of 8 up to 2048, K 1..8",
          x->cols, K);
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
    needf(n_heads >= 1 && n_heads <= 32 && head_dim % 32 == 0 && head_dim <= 256 && chunk >= 1 &&
              band >= 1 && chunk + band <= 32 && logit_cap > 0 && per_dim_scale,
          "audio_attention",
          "%d heads of %d, chunk %d, band %d, cap %g: the kernel (attention_audio.cu) takes <= 32 "
          "heads, head_dim a multiple of 32 up to 256, chunk + band <= 32, cap > 0",
          n_heads, head_dim, chunk, band, logit_cap);
    const uint8_t *m = mask_u8(be, valid, q->rows, "audio_attention");
    g4_attn_audio((uint16_t *)out->data, (const uint16_t *)q->data, (const uint16_t *)k->data,
                  (const uint16_t *)v->data, (const uint16_t *)rel->data, per_dim_scale, m, q->rows,
                  n_heads, head_dim, chunk, band, logit_cap, invalid_logit, S(be));
}

// The shapes the tower kernels take, checked once at tower load (each op checks its own call).
// Every linear's in/out width must suit the GEMM (multiples of 8).
static int cu_check_vision(g4_backend *be, const g4_vision_config *c) {
    const char *no = "cuda backend: vision tower";
    if (c->head_dim != 64)
        return g4_fail(G4_EUSER,
                       "%s head_dim %d: the attention kernel takes 64 (use --backend "
                       "cpu)",
                       no, c->head_dim);
    if (c->hidden % 8 || c->ffn % 8 || c->patch_dim % 8 || c->out_dim % 8)
        return g4_fail(G4_EUSER,
                       "%s widths hidden %d, ffn %d, patch %d, projection %d: the "
                       "kernels take multiples of 8 (use --backend cpu)",
                       no, c->hidden, c->ffn, c->patch_dim, c->out_dim);
    return G4_OK;
}

static int cu_check_audio(g4_backend *be, const g4_audio_config *c) {
    const char *no = "cuda backend: audio tower";
    if (c->n_heads < 1 || c->n_heads > 32 || c->head_dim % 32 || c->head_dim > 256 ||
        c->chunk + c->band > 32)
        return g4_fail(G4_EUSER,
                       "%s attention of %d heads of %d, chunk %d + band %d: the kernel "
                       "takes <= 32 heads of a multiple of 32 up to 256 and chunk + "
                       "band <= 32 (use --backend cpu)",
                       no, c->n_heads, c->head_dim, c->chunk, c->band);
    const int m1 = (c->n_mel + 1) / 2, m2 = (m1 + 1) / 2;
    if (c->conv0_ch % 32 || c->conv0_ch > 256 || c->conv1_ch % 32 || c->conv1_ch > 256 ||
        !sscp_fits(0, c->n_mel, 1, c->conv0_ch) || !sscp_fits(1, m1, c->conv0_ch, c->conv1_ch))
        return g4_fail(G4_EUSER,
                       "%s subsampling channels %d, %d over %d mel bins: the conv "
                       "kernel takes multiples of 32 up to 256 that fit its shared "
                       "memory (use --backend cpu)",
                       no, c->conv0_ch, c->conv1_ch, c->n_mel);
    if (c->hidden % 8 || c->hidden > 2048 || c->conv_kernel < 1 || c->conv_kernel > 8)
        return g4_fail(G4_EUSER,
                       "%s width %d, light conv kernel %d: the depthwise conv takes "
                       "widths of multiples of 8 up to 2048 and kernels of 1..8 (use "
                       "--backend cpu)",
                       no, c->hidden, c->conv_kernel);
    if (c->ffn % 8 || c->out_hidden % 8 || c->out_dim % 8 || (m2 * c->conv1_ch) % 8)
        return g4_fail(G4_EUSER,
                       "%s widths ffn %d, output %d, projection %d, subsampled %d: "
                       "the GEMM takes multiples of 8 (use --backend cpu)",
                       no, c->ffn, c->out_hidden, c->out_dim, m2 * c->conv1_ch);
    return G4_OK;
}

#undef BF
#undef BA

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
