// test_cuda_pdl.c: programmatic dependent launch (kernels/pdl.cuh) on a chain of every
// decode-path kernel, run back to back on one stream with no synchronisation in between:
//   same     the chain's outputs (residual stream, KV-cache row, logits, argmax) are
//            bit-identical with PDL off and on, eager and replayed from a CUDA graph, and over
//            several replays queued without a sync. Every kernel is deterministic (fixed-order
//            reductions), so any difference is a kernel that read or wrote a buffer before its
//            griddepcontrol.wait, i.e. a race PDL opened.
//   edges    the graph captured with PDL on has programmatic edges
//            (cudaGraphDependencyTypeProgrammatic), the one captured with PDL off has none:
//            stream capture keeps the overlap in the graph (CUDA 12.3+ edge data).
//   timing   graph replay time of the chain with PDL off and on (printed, not checked): the
//            per-kernel saving the whole-model prediction in bench/NOTES.md rests on.
// The chain: embed (f16, f32) -> PLE projection GEMV -> ple_inputs -> rmsnorm (f32 in), then 4
// "layers" of q / k (f16) and v (Q4) GEMVs, qkv_prep with the KV store, decode attention (split
// + merge), o GEMV, add_rmsnorm (next norm), fused gate/up GEMV (f16), down GEMV (Q4),
// add_rmsnorm (next copy), fused gate/up (Q4), gelu_mul on the PLE slice, a GEMV adding into
// the fp32 residual (read-modify-write epilogue) and rmsnorm; LM-head GEMV and soft-cap + argmax.
// Buffers are reused across layers, as in the engine, so write-after-read order matters too.
// Skips (exit 77) without a GPU.
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/attention_decode.cuh"
#include "kernels/cuda_util.h"
#include "kernels/embed.cuh"
#include "kernels/gelu_mul.cuh"
#include "kernels/gemm_f16.cuh"
#include "kernels/gemm_q4.cuh"
#include "kernels/logits.cuh"
#include "kernels/ple.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "tests/test_util.h"

// Shapes: E2B's hidden width and head shapes, small vocabularies and FFN.
enum {
    H = 1536,
    NH = 8,
    HD = 256,
    QW = NH * HD,
    FFN = 3072,
    PD = 256,
    PL = 2,
    VOCAB = 64,
    VL = 2048,
    CAP = 64,
    POS = 5,
    LAYERS = 4
};

static void pc(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "CUDA error %s: %s\n", what, cudaGetErrorString(e));
        exit(2);
    }
}
#define PC(call) pc((call), #call)

static void gemm_ok(int rc) {
    if (rc != G4_OK) {
        fprintf(stderr, "gemm: %s\n", g4_error());
        exit(2);
    }
}

static void *dev_zero(size_t bytes) {
    void *d = NULL;
    PC(cudaMalloc(&d, bytes));
    PC(cudaMemset(d, 0, bytes));
    return d;
}

// fp16 values uniform in [lo, hi] (either sign when sym), uploaded.
static void *dev_f16(unsigned long long *s, size_t n, float lo, float hi, int sym) {
    uint16_t *h = g4_malloc(2 * n);
    for (size_t i = 0; i < n; i++) {
        float v = g4t_rand_uniform(s, lo, hi);
        if (sym && (g4t_rand_u64(s) & 1)) v = -v;
        h[i] = g4_f32_to_f16(v);
    }
    void *d = dev_zero(2 * n);
    PC(cudaMemcpy(d, h, 2 * n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

// A random Q4 weight [K, N] (block 32, zero point 8, scales ~1/sqrt(K)).
static void q4_rand(g4_q4_weight *w, unsigned long long *s, int N, int K) {
    const size_t nq = (size_t)N * (K / 32) * 16, ns = (size_t)N * (K / 32);
    uint8_t *q = g4_malloc(nq);
    uint16_t *sc = g4_malloc(2 * ns);
    for (size_t i = 0; i < nq; i++) q[i] = (uint8_t)g4t_rand_u64(s);
    for (size_t i = 0; i < ns; i++)
        sc[i] = g4_f32_to_f16(g4t_rand_uniform(s, 0.5f, 1.5f) / (4.0f * sqrtf((float)K)));
    if (g4_q4_repack(w, q, sc, NULL, N, K, 32) != G4_OK) {
        fprintf(stderr, "q4 repack: %s\n", g4_error());
        exit(2);
    }
    free(q);
    free(sc);
}

typedef struct {
    cudaStream_t st;
    int32_t *ids, *pos, *argmax;
    void *emb, *ple_tab, *ple_norm;                           // tables
    void *w_plp, *w_q, *w_k, *w_o, *w_g, *w_u, *w_pp, *w_lm;  // f16 [K, N]
    g4_q4_weight q_v, q_d, q_pg, q_pu;                        // Q4
    void *n_in, *n_post, *n_pre, *n_post2, *q_norm, *k_norm;  // norm weights [H] or [HD]
    float *inv_freq;                                          // [HD / 2]
    float *h32, *logits;                                      // [H], [VL]
    void *x16, *xn, *ple, *q, *k, *v, *attn, *o16, *mlp, *pg; // f16 activations
    void *kc, *vc;                                            // [CAP, HD]
    void *attn_ws, *lg_ws;
    size_t attn_ws_bytes, lg_ws_bytes;
} chain;

static void chain_init(chain *c) {
    unsigned long long s = 2024;
    memset(c, 0, sizeof *c);
    PC(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking));
    const int32_t ids = 17, pos = POS;
    c->ids = dev_zero(4);
    c->pos = dev_zero(4);
    c->argmax = dev_zero(4);
    PC(cudaMemcpy(c->ids, &ids, 4, cudaMemcpyHostToDevice));
    PC(cudaMemcpy(c->pos, &pos, 4, cudaMemcpyHostToDevice));
    const float wh = 1.0f / sqrtf((float)H);
    c->emb = dev_f16(&s, (size_t)VOCAB * H, 0.2f, 1.0f, 1);
    c->ple_tab = dev_f16(&s, (size_t)VOCAB * PL * PD, 0.2f, 1.0f, 1);
    c->ple_norm = dev_f16(&s, PD, 0.5f, 1.5f, 0);
    c->w_plp = dev_f16(&s, (size_t)H * PL * PD, 0.1f * wh, wh, 1);
    c->w_q = dev_f16(&s, (size_t)H * QW, 0.1f * wh, wh, 1);
    c->w_k = dev_f16(&s, (size_t)H * HD, 0.1f * wh, wh, 1);
    c->w_o = dev_f16(&s, (size_t)QW * H, 0.1f / sqrtf(QW), 1.0f / sqrtf(QW), 1);
    c->w_g = dev_f16(&s, (size_t)H * FFN, 0.1f * wh, wh, 1);
    c->w_u = dev_f16(&s, (size_t)H * FFN, 0.1f * wh, wh, 1);
    c->w_pp = dev_f16(&s, (size_t)PD * H, 0.1f / sqrtf(PD), 1.0f / sqrtf(PD), 1);
    c->w_lm = dev_f16(&s, (size_t)H * VL, 0.1f * wh, wh, 1);
    q4_rand(&c->q_v, &s, HD, H);
    q4_rand(&c->q_d, &s, H, FFN);
    q4_rand(&c->q_pg, &s, PD, H);
    q4_rand(&c->q_pu, &s, PD, H);
    c->n_in = dev_f16(&s, H, 0.5f, 1.5f, 0);
    c->n_post = dev_f16(&s, H, 0.5f, 1.5f, 0);
    c->n_pre = dev_f16(&s, H, 0.5f, 1.5f, 0);
    c->n_post2 = dev_f16(&s, H, 0.5f, 1.5f, 0);
    c->q_norm = dev_f16(&s, HD, 0.5f, 1.5f, 0);
    c->k_norm = dev_f16(&s, HD, 0.5f, 1.5f, 0);
    float f[HD / 2];
    for (int i = 0; i < HD / 2; i++) f[i] = powf(10000.0f, -2.0f * i / HD);
    c->inv_freq = dev_zero(sizeof f);
    PC(cudaMemcpy(c->inv_freq, f, sizeof f, cudaMemcpyHostToDevice));
    c->h32 = dev_zero(4 * H);
    c->logits = dev_zero(4 * VL);
    c->x16 = dev_zero(2 * H);
    c->xn = dev_zero(2 * H);
    c->ple = dev_zero(2 * PL * PD);
    c->q = dev_zero(2 * QW);
    c->k = dev_zero(2 * HD);
    c->v = dev_zero(2 * HD);
    c->attn = dev_zero(2 * QW);
    c->o16 = dev_zero(2 * H);
    c->mlp = dev_zero(2 * FFN);
    c->pg = dev_zero(2 * PD);
    c->kc = dev_f16(&s, (size_t)CAP * HD, 0.2f, 1.0f, 1); // rows < POS: the "history"
    c->vc = dev_f16(&s, (size_t)CAP * HD, 0.2f, 1.0f, 1);
    c->attn_ws_bytes = g4_attn_decode_workspace(1, NH, 1, HD, CAP);
    c->attn_ws = dev_zero(c->attn_ws_bytes);
    c->lg_ws_bytes = g4_logits_workspace(1, VL);
    c->lg_ws = dev_zero(c->lg_ws_bytes); // counters start at zero and stay so
    PC(cudaDeviceSynchronize());
}

static void chain_free(chain *c) {
    void *bufs[] = {
        c->ids,   c->pos,     c->argmax, c->emb,     c->ple_tab,  c->ple_norm, c->w_plp,  c->w_q,
        c->w_k,   c->w_o,     c->w_g,    c->w_u,     c->w_pp,     c->w_lm,     c->n_in,   c->n_post,
        c->n_pre, c->n_post2, c->q_norm, c->k_norm,  c->inv_freq, c->h32,      c->logits, c->x16,
        c->xn,    c->ple,     c->q,      c->k,       c->v,        c->attn,     c->o16,    c->mlp,
        c->pg,    c->kc,      c->vc,     c->attn_ws, c->lg_ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) PC(cudaFree(bufs[i]));
    g4_q4_weight_free(&c->q_v);
    g4_q4_weight_free(&c->q_d);
    g4_q4_weight_free(&c->q_pg);
    g4_q4_weight_free(&c->q_pu);
    PC(cudaStreamDestroy(c->st));
}

// The whole chain on c->st, no synchronisation. Every output is overwritten from the inputs
// (the embeddings restart the residual stream), so any number of runs gives the same result.
static void chain_run(chain *c) {
    const cudaStream_t st = c->st;
    const float eps = 1e-6f;
    g4_embed_f16(c->x16, c->emb, VOCAB, H, c->ids, 1, 2.0f, st);
    gemm_ok(g4_gemm_f16(c->ple, c->x16, c->w_plp, NULL, 1, PL * PD, H, G4_GEMM_Y_F16, G4_GEMM_AUTO,
                        st));
    g4_ple_inputs(c->ple, c->ple, c->ple_tab, VOCAB, c->ids, c->ple_norm, 1, PL, PD, 0.5f, 0.7f,
                  0.9f, eps, st);
    g4_embed_f32(c->h32, c->emb, VOCAB, H, c->ids, 1, 2.0f, st);
    g4_rmsnorm_f32(c->xn, c->h32, c->n_in, 1, H, H, eps, st);
    for (int l = 0; l < LAYERS; l++) {
        gemm_ok(g4_gemm_f16(c->q, c->xn, c->w_q, NULL, 1, QW, H, G4_GEMM_Y_F16, G4_GEMM_AUTO, st));
        gemm_ok(g4_gemm_f16(c->k, c->xn, c->w_k, NULL, 1, HD, H, G4_GEMM_Y_F16, G4_GEMM_AUTO, st));
        gemm_ok(g4_gemm_q4(c->v, c->xn, &c->q_v, NULL, 1, G4_GEMM_Y_F16, G4_GEMM_AUTO, st));
        g4_qkv_args a;
        memset(&a, 0, sizeof a);
        a.q = c->q, a.k = c->k, a.v = c->v, a.kcache = c->kc, a.vcache = c->vc;
        a.q_w = c->q_norm, a.k_w = c->k_norm, a.v_norm = 1, a.pos = c->pos;
        a.inv_freq = c->inv_freq, a.T = 1, a.n_heads = NH, a.n_kv = 1, a.hd = HD;
        a.capacity = CAP, a.eps = eps;
        g4_qkv_norm_rope(&a, st);
        g4_attn_decode(c->attn, c->q, c->kc, c->vc, c->pos, 1, NH, 1, HD, CAP, 0, 1.0f, c->attn_ws,
                       c->attn_ws_bytes, st);
        gemm_ok(
            g4_gemm_f16(c->o16, c->attn, c->w_o, NULL, 1, H, QW, G4_GEMM_Y_F16, G4_GEMM_AUTO, st));
        g4_add_rmsnorm(c->h32, c->o16, c->n_post, NULL, eps, G4_NEXT_NORM, c->xn, c->n_pre, 1, H,
                       st);
        gemm_ok(g4_gemm_f16_gelu_mul(c->mlp, c->xn, c->w_g, c->w_u, 1, FFN, H, G4_GEMM_AUTO, st));
        gemm_ok(g4_gemm_q4(c->o16, c->mlp, &c->q_d, NULL, 1, G4_GEMM_Y_F16, G4_GEMM_AUTO, st));
        g4_add_rmsnorm(c->h32, c->o16, c->n_post2, NULL, eps, G4_NEXT_COPY, c->xn, NULL, 1, H, st);
        gemm_ok(g4_gemm_q4_gelu_mul(c->pg, c->xn, &c->q_pg, &c->q_pu, 1, G4_GEMM_AUTO, st));
        g4_gelu_mul(c->pg, PD, c->pg, PD, (const uint16_t *)c->ple + (l % PL) * PD, PL * PD, 1, PD,
                    st);
        gemm_ok(g4_gemm_f16(c->h32, c->pg, c->w_pp, NULL, 1, H, PD, G4_GEMM_Y_F32_ADD, G4_GEMM_AUTO,
                            st));
        g4_rmsnorm_f32(c->xn, c->h32, c->n_in, 1, H, H, eps, st);
    }
    gemm_ok(
        g4_gemm_f16(c->logits, c->xn, c->w_lm, NULL, 1, VL, H, G4_GEMM_Y_F32, G4_GEMM_AUTO, st));
    g4_logits_softcap_argmax(c->logits, 1, VL, 30.0f, c->argmax, c->lg_ws, c->lg_ws_bytes, st);
}

typedef struct {
    float h[H], logits[VL];
    uint16_t krow[HD], vrow[HD];
    int32_t argmax;
} result;

static void chain_result(chain *c, result *r) {
    PC(cudaStreamSynchronize(c->st));
    PC(cudaMemcpy(r->h, c->h32, sizeof r->h, cudaMemcpyDeviceToHost));
    PC(cudaMemcpy(r->logits, c->logits, sizeof r->logits, cudaMemcpyDeviceToHost));
    PC(cudaMemcpy(r->krow, (uint16_t *)c->kc + (size_t)POS * HD, sizeof r->krow,
                  cudaMemcpyDeviceToHost));
    PC(cudaMemcpy(r->vrow, (uint16_t *)c->vc + (size_t)POS * HD, sizeof r->vrow,
                  cudaMemcpyDeviceToHost));
    PC(cudaMemcpy(&r->argmax, c->argmax, 4, cudaMemcpyDeviceToHost));
}

static void check_same(const char *what, const result *a, const result *b) {
    int same_h = !memcmp(a->h, b->h, sizeof a->h),
        same_l = !memcmp(a->logits, b->logits, sizeof a->logits);
    int same_kv =
        !memcmp(a->krow, b->krow, sizeof a->krow) && !memcmp(a->vrow, b->vrow, sizeof a->vrow);
    printf("  %-34s residual %s, logits %s, KV row %s, argmax %d vs %d\n", what,
           same_h ? "same" : "DIFFERENT", same_l ? "same" : "DIFFERENT",
           same_kv ? "same" : "DIFFERENT", a->argmax, b->argmax);
    CHECK_MSG(same_h && same_l && same_kv && a->argmax == b->argmax,
              "%s: PDL changed a result (a kernel touched a buffer before its wait)", what);
}

// Captures the chain; counts the graph's edges by type.
static cudaGraphExec_t chain_capture(chain *c, int *n_nodes, int *n_edges, int *n_prog) {
    cudaGraph_t g;
    PC(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal));
    chain_run(c);
    PC(cudaStreamEndCapture(c->st, &g));
    size_t nn = 0, ne = 0;
    PC(cudaGraphGetNodes(g, NULL, &nn));
    PC(cudaGraphGetEdges(g, NULL, NULL, NULL, &ne));
    cudaGraphNode_t *from = g4_malloc(sizeof *from * (ne + 1)),
                    *to = g4_malloc(sizeof *to * (ne + 1));
    cudaGraphEdgeData *ed = g4_malloc(sizeof *ed * (ne + 1));
    size_t got = ne;
    PC(cudaGraphGetEdges(g, from, to, ed, &got));
    int prog = 0;
    for (size_t i = 0; i < got; i++) prog += ed[i].type == cudaGraphDependencyTypeProgrammatic;
    *n_nodes = (int)nn, *n_edges = (int)got, *n_prog = prog;
    free(from), free(to), free(ed);
    cudaGraphExec_t exec;
    PC(cudaGraphInstantiate(&exec, g, 0));
    PC(cudaGraphDestroy(g));
    return exec;
}

// Microseconds per replay of the captured chain (median of 7 batches of 20 replays).
static double replay_us(chain *c, cudaGraphExec_t exec) {
    cudaEvent_t a, b;
    PC(cudaEventCreate(&a));
    PC(cudaEventCreate(&b));
    double t[7];
    for (int r = 0; r < 7; r++) {
        PC(cudaEventRecord(a, c->st));
        for (int i = 0; i < 20; i++) PC(cudaGraphLaunch(exec, c->st));
        PC(cudaEventRecord(b, c->st));
        PC(cudaEventSynchronize(b));
        float ms;
        PC(cudaEventElapsedTime(&ms, a, b));
        t[r] = 1e3 * ms / 20;
    }
    for (int i = 0; i < 7; i++) // sort
        for (int j = i + 1; j < 7; j++)
            if (t[j] < t[i]) {
                double x = t[i];
                t[i] = t[j], t[j] = x;
            }
    PC(cudaEventDestroy(a));
    PC(cudaEventDestroy(b));
    return t[3];
}

int main(void) {
    const char *why = NULL;
    if (g4_cuda_device_count(&why) == 0) return g4t_skip("test_cuda_pdl", why);
    int major = 0;
    PC(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    if (major < 9) return g4t_skip("test_cuda_pdl", "programmatic dependent launch needs sm_90+");
    static chain c;
    static result ref, r;
    chain_init(&c);

    g4_cuda_pdl_set(0);
    CHECK_INT(g4_cuda_pdl_enabled(), 0);
    chain_run(&c); // warm-up: one-time kernel attributes, module loading
    chain_result(&c, &ref);
    printf("  reference (PDL off, eager): argmax %d\n", ref.argmax);

    g4_cuda_pdl_set(1);
    CHECK_INT(g4_cuda_pdl_enabled(), 1);
    chain_run(&c);
    chain_result(&c, &r);
    check_same("PDL on, eager", &ref, &r);
    for (int i = 0; i < 8; i++) chain_run(&c); // queued back to back, one sync at the end
    chain_result(&c, &r);
    check_same("PDL on, eager x8 without sync", &ref, &r);

    int nodes, edges, prog;
    cudaGraphExec_t on = chain_capture(&c, &nodes, &edges, &prog);
    printf("  graph, PDL on: %d nodes, %d edges, %d programmatic\n", nodes, edges, prog);
    CHECK_MSG(prog > 0, "stream capture recorded no programmatic edge with PDL on");
    CHECK_MSG(prog == edges, "%d of %d edges programmatic (every node is a PDL kernel)", prog,
              edges);
    PC(cudaGraphLaunch(on, c.st));
    chain_result(&c, &r);
    check_same("PDL on, graph", &ref, &r);
    for (int i = 0; i < 8; i++) PC(cudaGraphLaunch(on, c.st));
    chain_result(&c, &r);
    check_same("PDL on, graph x8 without sync", &ref, &r);

    g4_cuda_pdl_set(0);
    cudaGraphExec_t off = chain_capture(&c, &nodes, &edges, &prog);
    printf("  graph, PDL off: %d nodes, %d edges, %d programmatic\n", nodes, edges, prog);
    CHECK_INT(prog, 0);
    PC(cudaGraphLaunch(off, c.st));
    chain_result(&c, &r);
    check_same("PDL off, graph", &ref, &r);

    const double t_off = replay_us(&c, off), t_on = replay_us(&c, on);
    printf("  graph replay of the chain (%d kernels): PDL off %.1f us, on %.1f us: %.2f us saved "
           "per kernel\n",
           nodes, t_off, t_on, (t_off - t_on) / nodes);
    chain_result(&c, &r); // after 280 more replays of both graphs
    check_same("after the timed replays", &ref, &r);

    PC(cudaGraphExecDestroy(on));
    PC(cudaGraphExecDestroy(off));
    g4_cuda_pdl_set(-1);
    chain_free(&c);
    return g4t_finish("test_cuda_pdl");
}
