// sensitivity.c: see sensitivity.h.
//
// The probe (pass 1): the text state calls every op through s->be, so a copy of the backend's
// op table whose `linear` and `linear_gelu_mul` first look at the weight pointer can measure a
// candidate's own output error (x @ Wq vs x @ W on the very input the run gives it) without
// touching the engine. A candidate is recognised by its slot: the address of its g4_linear in
// the g4_text_model, which the decoder passes to the op.
#include "fidelity/sensitivity.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/parallel.h"
#include "base/progress.h"
#include "fidelity/kl.h"
#include "kernels/backend_select.h"
#include "quant/kquant.h"
#include "quant/q4.h"

typedef struct {
    g4_sens_row row;
    g4_linear *slot;   // where the model binds it
    g4_linear f16;     // the slot's own (fp16) binding, restored after each run
    g4_linear host;    // the fp16 weight in the mapped package (host memory), quantizer input
    g4_linear q4_host; // its Q4 form in our host buffers (q, scales, zp below)
    uint8_t *q, *zp;   // [N, kb, 16], [N * ceil(kb/2)]
    uint16_t *scales;  // [N * kb]
    g4_linear q4;      // the Q4 form the backend computes from (while bound)
    void *dev[3];      // backend copies of q, scales, zp while bound (device backends only)
    int prepared;      // c->q4 was placed by the backend's prepare_linear (release_linear frees it)
    double dd, yy;     // pass 1: sum (x Wq - x W)^2, sum (x W)^2
} cand;

typedef struct {
    g4_backend be; // first: ops receive &probe.be and cast back
    g4_backend *real;
    cand *c;
    int n;
    int measure; // 1 during pass 1
    int rc;      // the first bind failure inside a hooked op (reported after the forward)
    // the imatrix run instead (g4_imatrix_run): per candidate, sum x^2 per input channel
    double **imx_sum; // [n][K], or NULL
    double **imx_lin; // [n][K] sum x per input channel (with imx_sum)
    long *imx_rows;   // [n]
    // the Hessian run instead (g4_hessian_run): X^T X of the candidates with hess[i] set
    float **hess; // [n][K * K] ([n][2 K * K] with fold_span), or NULL
    int fold_span; // g4_hessian_opts's (> 0: hess holds fold a's X^T X, then fold b's)
} probe;

static void imx_add(probe *p, int i, const g4_buf *x);
static void hess_add(probe *p, int i, const g4_buf *x);

// Quantizes c's weight once into host buffers (the bytes `g4cu quantize` would write).
static int quantize(cand *c, int n_threads) {
    const int K = c->row.K, N = c->row.N;
    const g4_q4_shape sh = g4_q4_shape_of(K, N, G4_Q4_BLOCK);
    c->q = g4_malloc(sh.q_bytes);
    c->scales = g4_malloc(sizeof(uint16_t) * sh.n_scales);
    c->zp = g4_malloc(sh.zp_bytes);
    int rc = g4_q4_quantize(c->host.w, G4_DT_FLOAT16, K, N, G4_Q4_BLOCK, n_threads, c->q, c->scales,
                            c->zp);
    if (rc) {
        g4_error_prefix("%s", c->row.name);
        return rc;
    }
    c->q4_host = (g4_linear){.kind = G4_W_Q4,
                             .in = K,
                             .out = N,
                             .block = G4_Q4_BLOCK,
                             .w = c->q,
                             .scales = c->scales,
                             .zp = c->zp,
                             .bias = c->f16.bias};
    return G4_OK;
}

// Makes c->q4 usable by the backend: our host buffers as they are on a host-memory backend;
// on a device backend the backend's own placement of them (prepare_linear: the CUDA backend
// computes Q4 only from its repacked layout), else plain copies. The bias stays the model's
// own placement (decoder linears have none), so prepare/release never see it.
static int bind(g4_backend *be, cand *c) {
    c->q4 = c->q4_host;
    if (be->host_memory) return G4_OK;
    if (be->prepare_linear) {
        g4_linear t = c->q4_host;
        t.bias = NULL;
        int rc = be->prepare_linear(be, &t);
        if (rc) {
            g4_error_prefix("sensitivity: %s in Q4", c->row.name);
            memset(&c->q4, 0, sizeof c->q4);
            return rc;
        }
        t.bias = c->f16.bias;
        c->q4 = t;
        c->prepared = 1;
        return G4_OK;
    }
    const g4_q4_shape sh = g4_q4_shape_of(c->row.K, c->row.N, G4_Q4_BLOCK);
    const void *src[3] = {c->q, c->scales, c->zp};
    const size_t bytes[3] = {sh.q_bytes, sizeof(uint16_t) * sh.n_scales, sh.zp_bytes};
    for (int i = 0; i < 3; i++) {
        c->dev[i] = be->alloc(be, bytes[i]);
        be->upload(be, c->dev[i], src[i], bytes[i]);
    }
    c->q4.w = c->dev[0], c->q4.scales = c->dev[1], c->q4.zp = c->dev[2];
    return G4_OK;
}

static void unbind(g4_backend *be, cand *c) {
    if (c->prepared) {
        g4_linear t = c->q4;
        t.bias = NULL; // the model's, not ours
        be->release_linear(be, &t);
        c->prepared = 0;
    }
    for (int i = 0; i < 3; i++)
        if (c->dev[i]) be->free(be, c->dev[i]);
    memset(c->dev, 0, sizeof c->dev);
    memset(&c->q4, 0, sizeof c->q4);
}

// ||Wq - W|| / ||W|| over the whole weight, one column at a time (no [K, N] float copy: the
// E2B lm_head would need 1.6 GB).
static double weight_rel(const cand *c) {
    const int K = c->row.K, N = c->row.N;
    float *col = g4_malloc(sizeof(float) * (size_t)K);
    const uint8_t *w = c->host.w; // fp16 [K, N], possibly unaligned
    double dd = 0, ww = 0;
    for (int n = 0; n < N; n++) {
        g4_q4_dequant_col(&c->q4_host, n, col);
        for (int k = 0; k < K; k++) {
            uint16_t h;
            memcpy(&h, w + 2 * ((size_t)k * N + n), 2);
            const double x = g4_f16_to_f32(h), d = (double)col[k] - x;
            dd += d * d;
            ww += x * x;
        }
    }
    free(col);
    return ww > 0 ? sqrt(dd / ww) : (dd > 0 ? INFINITY : 0);
}

// Pass 1: accumulates the candidate at slot w's output error on input x.
static void measure(probe *p, const g4_buf *x, const g4_linear *w) {
    if (!p->measure && !p->imx_sum && !p->hess) return;
    int i = 0;
    while (i < p->n && p->c[i].slot != w) i++;
    if (i == p->n) return;
    if (p->hess) {
        if (p->hess[i]) hess_add(p, i, x);
        return;
    }
    if (p->imx_sum) {
        imx_add(p, i, x);
        return;
    }
    cand *c = &p->c[i];
    g4_backend *be = p->real;
    if (p->rc) return;
    if ((p->rc = bind(be, c))) return;
    g4_buf yf = g4_buf_new(be, be->act_type, x->rows, c->row.N);
    g4_buf yq = g4_buf_new(be, be->act_type, x->rows, c->row.N);
    be->linear(be, &yf, x, &c->f16, 0);
    be->linear(be, &yq, x, &c->q4, 0);
    const size_t n = (size_t)x->rows * c->row.N;
    float *a = g4_malloc(sizeof(float) * n), *b = g4_malloc(sizeof(float) * n);
    g4_buf_to_host_f32(be, &yf, a);
    g4_buf_to_host_f32(be, &yq, b);
    for (size_t k = 0; k < n; k++) {
        const double d = (double)b[k] - a[k];
        c->dd += d * d;
        c->yy += (double)a[k] * a[k];
    }
    free(a), free(b);
    g4_buf_free(be, &yf);
    g4_buf_free(be, &yq);
    unbind(be, c);
}

static void probe_linear(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w,
                         int accumulate) {
    probe *p = (probe *)be;
    measure(p, x, w);
    p->real->linear(p->real, y, x, w, accumulate);
}

static void probe_linear_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *wg,
                                  const g4_linear *wu) {
    probe *p = (probe *)be;
    measure(p, x, wg);
    measure(p, x, wu);
    g4_backend *r = p->real;
    if (wg->kind == wu->kind) return r->linear_gelu_mul(r, y, x, wg, wu);
    // One of the pair bound in Q4, the other fp16 (a pass-3 pick): the fused op takes one
    // weight kind, so the two linears, then gelu_mul (the same math, in two steps).
    g4_buf g = g4_buf_new(r, y->type, y->rows, y->cols), u = g4_buf_new(r, y->type, y->rows, y->cols);
    r->linear(r, &g, x, wg, 0);
    r->linear(r, &u, x, wu, 0);
    r->gelu_mul(r, y, &g, &u, 0);
    g4_buf_free(r, &g);
    g4_buf_free(r, &u);
}

// p: the state's own backend handle (its stream and workspaces: kernels/ops.h exec_new) with
// linear and linear_gelu_mul through the probe (set s->be = &p->be; put `own` back before the
// state is freed: freeing the model's root handle in its place crashes a CUDA run).
static void probe_install(probe *p, g4_backend *own, cand *c, int nc) {
    p->be = *own;
    p->be.linear = probe_linear;
    p->be.linear_gelu_mul = probe_linear_gelu_mul;
    p->be.mlp_block = NULL; // (G4_PERSIST_MLP: the engine then calls the two ops probed here)
    p->real = own;
    p->c = c;
    p->n = nc;
}

static int selected(const g4_sens_opts *o, const char *name, int layer) {
    if (o->n_layers == 0 && o->n_only == 0) return 1;
    for (int i = 0; i < o->n_layers; i++)
        if (layer >= 0 && o->layers[i] == layer) return 1;
    char pre[160];
    snprintf(pre, sizeof pre, "decoder.%s", name);
    for (int i = 0; i < o->n_only; i++)
        if (fnmatch(o->only[i], name, 0) == 0 || fnmatch(o->only[i], pre, 0) == 0) return 1;
    return 0;
}

// Weight names as engine/text_model.c binds them: "model.layers.<l>.<path>.weight_t" and
// "lm_head.weight_t" (a name that drifts from the package fails in g4_linear_get below).
// Adds the linear bound at slot as a candidate when selected and fp16 in the package.
static int add_cand(g4_text_model *m, const g4_sens_opts *o, g4_linear *slot, int layer,
                    const char *path, cand **c, int *n, int *n_q4) {
    char name[112];
    if (layer >= 0)
        snprintf(name, sizeof name, "model.layers.%d.%s.weight_t", layer, path);
    else
        snprintf(name, sizeof name, "%s.weight_t", path);
    const char *kind = strrchr(path, '.') ? strrchr(path, '.') + 1 : path;
    if (!selected(o, name, layer)) return G4_OK;
    if (slot->kind != G4_W_F16) {
        (*n_q4)++;
        return G4_OK;
    }
    const g4_component *dec = g4_package_component(m->pkg, G4_COMP_DECODER);
    g4_linear host;
    int rc = g4_linear_get(dec, name, slot->in, slot->out, &host);
    if (rc) return rc;
    if (host.kind != G4_W_F16)
        return g4_fail(G4_EINTERNAL, "%s: '%s' is bound as fp16 but the package stores it as Q4",
                       dec->onnx_path, name);
    *c = g4_realloc(*c, sizeof(cand) * (size_t)(*n + 1));
    cand *x = &(*c)[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->row.name, sizeof x->row.name, "%s", name);
    snprintf(x->row.kind, sizeof x->row.kind, "%s", kind);
    x->row.layer = layer;
    x->row.K = slot->in;
    x->row.N = slot->out;
    x->row.kl_mean = x->row.kl_max = x->row.layer_kl = NAN;
    x->slot = slot;
    x->f16 = *slot;
    x->host = host;
    return G4_OK;
}

static int enumerate(g4_text_model *m, const g4_sens_opts *o, cand **c, int *n, int *n_q4) {
    int rc;
    for (int l = 0; l < m->cfg->n_layers; l++) {
        g4_text_layer *w = &m->layers[l];
        const int owner = m->cfg->layer[l].kv_source == l;
        struct {
            g4_linear *slot;
            const char *path;
        } t[] = {{&w->q, "self_attn.q_proj"},
                 {owner ? &w->k : NULL, "self_attn.k_proj"}, // KV-shared layers have none
                 {owner ? &w->v : NULL, "self_attn.v_proj"},
                 {&w->o, "self_attn.o_proj"},
                 {&w->gate, "mlp.gate_proj"},
                 {&w->up, "mlp.up_proj"},
                 {&w->down, "mlp.down_proj"},
                 {&w->ple_gate, "per_layer_input_gate"},
                 {&w->ple_proj, "per_layer_projection"}};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            if (t[i].slot && (rc = add_cand(m, o, t[i].slot, l, t[i].path, c, n, n_q4))) return rc;
    }
    return add_cand(m, o, &m->lm_head, -1, "lm_head", c, n, n_q4);
}

int g4_decoder_linears(g4_text_model *m, g4_sens_row **rows, int *n, int *n_q4) {
    g4_sens_opts all = {0};
    cand *c = NULL;
    int nc = 0;
    *rows = NULL, *n = *n_q4 = 0;
    int rc = enumerate(m, &all, &c, &nc, n_q4);
    if (!rc) {
        *rows = g4_malloc(sizeof(g4_sens_row) * (size_t)(nc > 0 ? nc : 1));
        for (int i = 0; i < nc; i++) (*rows)[i] = c[i].row;
        *n = nc;
    }
    free(c);
    return rc;
}

// Pass 3's order (g4_report_sort_sens's order for rows not run): the most sensitive layer
// first, then the largest own output error.
static int by_screen(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    int r = g4_report_cmp_desc(a->row.layer_kl, b->row.layer_kl);
    if (!r) r = g4_report_cmp_desc(a->row.out_rel, b->row.out_rel);
    return r ? r : strcmp(a->row.name, b->row.name);
}

static double ratio(double dd, double yy) {
    return yy > 0 ? sqrt(dd / yy) : (dd > 0 ? INFINITY : 0);
}

// One forward with candidates c[i] for which pick[i] is set bound in Q4; KL against base.
static int run_with(g4_text_state *s, g4_text_model *m, cand *c, int nc, const char *pick,
                    const int32_t *ids, int n, const float *base, float *logits, g4_kl_stats *k) {
    int rc = G4_OK;
    for (int i = 0; i < nc && !rc; i++)
        if (pick[i] && !(rc = bind(m->be, &c[i]))) *c[i].slot = c[i].q4;
    g4_text_state_reset(s);
    if (!rc) rc = g4_text_forward(s, ids, n, NULL, logits, 1);
    for (int i = 0; i < nc; i++)
        if (pick[i]) {
            *c[i].slot = c[i].f16;
            unbind(m->be, &c[i]);
        }
    if (!rc) *k = g4_kl_rows(base, logits, n, (size_t)m->cfg->vocab);
    return rc;
}

int g4_sensitivity_run(g4_text_model *m, const int32_t *ids, int n, const g4_sens_opts *o,
                       g4_sens_row **rows, int *n_rows, int *n_skipped_q4) {
    *rows = NULL;
    *n_rows = *n_skipped_q4 = 0;
    cand *c = NULL;
    int nc = 0, rc;
    g4_text_state *s = NULL;
    float *base = NULL, *logits = NULL;
    char *pick = NULL;
    g4_backend *own = NULL; // s's own handle, while the probe stands in for it
    probe p = {0};
    g4_progress bar = {0};
    const int threads = o->n_threads > 0 ? o->n_threads : 1;
    if ((rc = enumerate(m, o, &c, &nc, n_skipped_q4))) goto done;
    if (nc == 0) {
        rc = g4_fail(G4_EUSER,
                     "sensitivity: no fp16 decoder linear to quantize (%d matching linears are "
                     "already Q4; %s)",
                     *n_skipped_q4,
                     o->n_layers || o->n_only ? "check --layers / --only" : "use the f16 package");
        goto done;
    }
    for (int i = 0; i < nc; i++) {
        if ((rc = quantize(&c[i], threads))) goto done;
        c[i].row.w_rel = weight_rel(&c[i]);
    }
    if ((rc = g4_text_state_new(m, n, n, &s))) goto done;
    own = s->be;
    probe_install(&p, own, c, nc);
    s->be = &p.be;

    // Pass 1: the unmodified run, measuring every candidate's own output error.
    const size_t V = (size_t)m->cfg->vocab;
    base = g4_malloc(sizeof(float) * (size_t)n * V);
    logits = g4_malloc(sizeof(float) * (size_t)n * V);
    p.measure = 1;
    rc = g4_text_forward(s, ids, n, NULL, base, 1);
    p.measure = 0;
    if (!rc) rc = p.rc;
    if (rc) goto done;
    for (int i = 0; i < nc; i++) c[i].row.out_rel = ratio(c[i].dd, c[i].yy);

    // Progress over the forwards of passes 2 and 3.
    int n_groups = 0;
    for (int l = -1; l < m->cfg->n_layers; l++) {
        int any = 0;
        for (int i = 0; i < nc; i++) any |= c[i].row.layer == l;
        n_groups += any;
    }
    const int n_run = o->top > 0 && o->top < nc ? o->top : nc;
    g4_progress_start(&bar, o->progress, "sensitivity", n_groups + n_run, 0);

    // Pass 2: each layer's candidates together (lm_head, layer -1, on its own).
    pick = g4_calloc((size_t)nc, 1);
    for (int l = -1; l < m->cfg->n_layers; l++) {
        int any = 0;
        for (int i = 0; i < nc; i++) any |= (pick[i] = c[i].row.layer == l);
        if (!any) continue;
        g4_kl_stats k;
        if ((rc = run_with(s, m, c, nc, pick, ids, n, base, logits, &k))) goto done;
        for (int i = 0; i < nc; i++)
            if (pick[i]) c[i].row.layer_kl = k.kl_mean;
        g4_progress_note(&bar, "layer %s%d quantized: KL %.4e", l < 0 ? "lm_head " : "", l,
                         k.kl_mean);
        g4_progress_step(&bar);
        g4_kl_free(&k);
    }

    // Pass 3: one linear at a time (with a cut: in the screen's order).
    if (n_run < nc) qsort(c, (size_t)nc, sizeof *c, by_screen);
    for (int i = 0; i < n_run; i++) {
        memset(pick, 0, (size_t)nc);
        pick[i] = 1;
        g4_kl_stats k;
        if ((rc = run_with(s, m, c, nc, pick, ids, n, base, logits, &k))) goto done;
        c[i].row.evaluated = 1;
        c[i].row.kl_mean = k.kl_mean;
        c[i].row.kl_max = k.kl_max;
        c[i].row.top1_agree = k.top1_agree;
        g4_kl_free(&k);
        g4_progress_note(&bar, "%s KL %.4e", c[i].row.name, c[i].row.kl_mean);
        g4_progress_step(&bar);
    }
    g4_progress_end(&bar);
    *rows = g4_malloc(sizeof(g4_sens_row) * (size_t)nc);
    for (int i = 0; i < nc; i++) (*rows)[i] = c[i].row;
    *n_rows = nc;
    g4_report_sort_sens(*rows, nc);
done:
    g4_progress_end(&bar);
    if (s) s->be = own;
    g4_text_state_free(s);
    for (int i = 0; i < nc; i++) free(c[i].q), free(c[i].scales), free(c[i].zp);
    free(c);
    free(base);
    free(logits);
    free(pick);
    return rc;
}

// --- the activation importance of every candidate's input channels (imatrix) ------------------
// The same probe as pass 1, with imx_sum set: every candidate's input x adds its x^2 and x.

static void imx_add(probe *p, int i, const g4_buf *x) {
    const size_t K = (size_t)x->cols, n = (size_t)x->rows * K;
    float *a = g4_malloc(sizeof(float) * n);
    g4_buf_to_host_f32(p->real, x, a);
    for (size_t r = 0; r < (size_t)x->rows; r++)
        for (size_t k = 0; k < K; k++) {
            p->imx_sum[i][k] += (double)a[r * K + k] * a[r * K + k];
            p->imx_lin[i][k] += a[r * K + k];
        }
    p->imx_rows[i] += x->rows;
    free(a);
}

// A hook that reads nothing: its presence alone makes the forward run the lm_head.
static void hook_none(void *ctx, const char *name, g4_backend *be, const g4_buf *b) {
    (void)ctx, (void)name, (void)be, (void)b;
}

// One forward of ids[n] in which every row reaches every linear, the lm_head included: the
// forward skips the lm_head when nobody asks for logits (a prefill chunk), so a no-op hook asks
// for them (on the device: no [n, V] download). Without it the lm_head received no input and
// `--imatrix` quantized it plainly (82 of 83 linears with an importance on the tiny fixture).
// win > 0: windows of win tokens, each from a reset state with ids[0] (<bos>) first
// (sensitivity.h).
static int forward_all_rows(g4_text_state *s, const int32_t *ids, int n, int win) {
    const g4_text_hook h = s->hook;
    void *hc = s->hook_ctx;
    s->hook = hook_none;
    s->hook_ctx = NULL;
    int rc = G4_OK;
    if (win <= 0 || win >= n) {
        g4_text_state_reset(s);
        rc = g4_text_forward(s, ids, n, NULL, NULL, 1);
    } else {
        int32_t *w = g4_malloc(sizeof(int32_t) * (size_t)win);
        for (int i0 = 0; i0 < n && !rc; i0 += win) {
            const int len = n - i0 < win ? n - i0 : win;
            memcpy(w, ids + i0, sizeof(int32_t) * (size_t)len);
            w[0] = ids[0];
            g4_text_state_reset(s);
            rc = g4_text_forward(s, w, len, NULL, NULL, 1);
        }
        free(w);
    }
    s->hook = h;
    s->hook_ctx = hc;
    return rc;
}

void g4_imatrix_free(g4_imatrix *im) {
    for (int i = 0; i < im->n; i++) free(im->names[i]), free(im->imp[i]), free(im->mean[i]);
    free(im->names);
    free(im->imp);
    free(im->mean);
    free(im->K);
    memset(im, 0, sizeof *im);
}

// The imatrix and Hessian runs' start: every fp16 decoder linear a candidate, a state for n
// rows (a window's, win > 0: a 16k-token calibration in windows of 512 needs no 16k KV cache),
// the probe over its own backend handle (*own, to put back) and p->imx_rows [nc].
static int probe_start(g4_text_model *m, int n, int win, cand **c, int *nc, g4_text_state **s,
                       g4_backend **own, probe *p) {
    g4_sens_opts all = {0};
    int n_q4 = 0, rc;
    if (win > 0 && win < n) n = win;
    if ((rc = enumerate(m, &all, c, nc, &n_q4)) || (rc = g4_text_state_new(m, n, n, s))) return rc;
    *own = (*s)->be;
    probe_install(p, *own, *c, *nc);
    p->imx_rows = g4_calloc((size_t)(*nc > 0 ? *nc : 1), sizeof(long));
    return G4_OK;
}

int g4_imatrix_run(g4_text_model *m, const int32_t *ids, int n, int win, g4_imatrix *out) {
    memset(out, 0, sizeof *out);
    cand *c = NULL;
    int nc = 0, rc;
    g4_text_state *s = NULL;
    g4_backend *own = NULL; // s's own handle, while the probe stands in for it
    probe p = {0};
    if ((rc = probe_start(m, n, win, &c, &nc, &s, &own, &p))) goto done;
    p.imx_sum = g4_calloc((size_t)(nc > 0 ? nc : 1), sizeof(double *));
    p.imx_lin = g4_calloc((size_t)(nc > 0 ? nc : 1), sizeof(double *));
    for (int i = 0; i < nc; i++) {
        p.imx_sum[i] = g4_calloc((size_t)c[i].row.K, sizeof(double));
        p.imx_lin[i] = g4_calloc((size_t)c[i].row.K, sizeof(double));
    }
    s->be = &p.be;
    rc = forward_all_rows(s, ids, n, win);
    s->be = own;
    if (rc) goto done;
    out->names = g4_calloc((size_t)(nc > 0 ? nc : 1), sizeof(char *));
    out->imp = g4_calloc((size_t)(nc > 0 ? nc : 1), sizeof(float *));
    out->mean = g4_calloc((size_t)(nc > 0 ? nc : 1), sizeof(float *));
    out->K = g4_calloc((size_t)(nc > 0 ? nc : 1), sizeof(int));
    for (int i = 0; i < nc; i++)
        if (!p.imx_rows[i]) { // every candidate is on the forward's path: a skipped op is a bug
            rc = g4_fail(G4_EINTERNAL, "imatrix: linear %s received no input in the forward",
                         c[i].row.name);
            goto done;
        }
    for (int i = 0; i < nc; i++) {
        const int K = c[i].row.K;
        out->names[out->n] = g4_strdup(c[i].row.name);
        out->K[out->n] = K;
        out->imp[out->n] = g4_malloc(sizeof(float) * (size_t)K);
        out->mean[out->n] = g4_malloc(sizeof(float) * (size_t)K);
        for (int k = 0; k < K; k++) {
            out->imp[out->n][k] = (float)(p.imx_sum[i][k] / (double)p.imx_rows[i]);
            out->mean[out->n][k] = (float)(p.imx_lin[i][k] / (double)p.imx_rows[i]);
        }
        out->n++;
    }
done:
    if (s) s->be = own;
    g4_text_state_free(s);
    for (int i = 0; i < nc && p.imx_sum; i++) free(p.imx_sum[i]), free(p.imx_lin[i]);
    free(p.imx_sum);
    free(p.imx_lin);
    free(p.imx_rows);
    free(c);
    return rc;
}

// --- X^T X of every candidate (GPTQ's Hessian), a group of candidates per forward ------------

// H += x^T x over the upper triangle by tiles of XTX_TS x XTX_TS entries, each mirrored into the
// lower one when done (issue 33: the row-by-row form read all of x once per row of H, 50 MB for
// each of the 6144 rows of a proxy down_proj, and computed both triangles). Every entry is
// still the same sum in the same order, H[a][b] += x[r][a] x[r][b] for r = 0, 1, ... (skipping
// x[r][a] = 0), so H is unchanged to the bit (for finite inputs both triangles were equal).
#define XTX_TS 64 // a tile of H: 16 KB, in L1 with the rows of x it reads
#define XTX_RB 64 // rows of x per pass over a tile

typedef struct {
    float *H;
    const float *x;
    int K, rows, nt; // nt: tiles per side
} hess_job;

// h[0..15] += sum_{r < n} xa[r * XTX_TS] xb[r * XTX_TS + 0..15] (skipping xa = 0), named
// accumulators (held in registers across the rows).
static void xtx_16(float *h, const float *xa, const float *xb, int n) {
    float t0 = h[0], t1 = h[1], t2 = h[2], t3 = h[3], t4 = h[4], t5 = h[5], t6 = h[6], t7 = h[7];
    float t8 = h[8], t9 = h[9], t10 = h[10], t11 = h[11], t12 = h[12], t13 = h[13], t14 = h[14],
          t15 = h[15];
    for (int r = 0; r < n; r++) {
        const float a = xa[(size_t)r * XTX_TS], *v = xb + (size_t)r * XTX_TS;
        if (a == 0) continue;
        t0 += a * v[0], t1 += a * v[1], t2 += a * v[2], t3 += a * v[3];
        t4 += a * v[4], t5 += a * v[5], t6 += a * v[6], t7 += a * v[7];
        t8 += a * v[8], t9 += a * v[9], t10 += a * v[10], t11 += a * v[11];
        t12 += a * v[12], t13 += a * v[13], t14 += a * v[14], t15 += a * v[15];
    }
    h[0] = t0, h[1] = t1, h[2] = t2, h[3] = t3, h[4] = t4, h[5] = t5, h[6] = t6, h[7] = t7;
    h[8] = t8, h[9] = t9, h[10] = t10, h[11] = t11, h[12] = t12, h[13] = t13, h[14] = t14;
    h[15] = t15;
}

// One tile; xa, xb: [XTX_RB][XTX_TS] scratch for the rows of x it reads, copied out of x (whose
// rows, K floats apart, K a multiple of 256 in the models, would all fall on the same few cache
// sets).
static void hess_tile(const hess_job *j, int ta, int tb, float *xa, float *xb) {
    const size_t K = (size_t)j->K;
    const int a0 = ta * XTX_TS, a1 = a0 + XTX_TS < j->K ? a0 + XTX_TS : j->K;
    const int b0 = tb * XTX_TS, b1 = b0 + XTX_TS < j->K ? b0 + XTX_TS : j->K;
    for (int r0 = 0; r0 < j->rows; r0 += XTX_RB) {
        const int n = j->rows - r0 < XTX_RB ? j->rows - r0 : XTX_RB;
        for (int r = 0; r < n; r++) {
            const float *xr = j->x + (size_t)(r0 + r) * K;
            memcpy(xa + (size_t)r * XTX_TS, xr + a0, sizeof(float) * (size_t)(a1 - a0));
            memcpy(xb + (size_t)r * XTX_TS, xr + b0, sizeof(float) * (size_t)(b1 - b0));
        }
        for (int a = a0; a < a1; a++) {
            float *ha = j->H + (size_t)a * K;
            const float *pa = xa + (a - a0);
            int b = b0 > a ? b0 : a; // the upper triangle, diagonal included
            for (; b + 16 <= b1; b += 16) xtx_16(ha + b, pa, xb + (b - b0), n);
            for (; b < b1; b++) {
                float t = ha[b];
                for (int r = 0; r < n; r++) {
                    const float v = pa[(size_t)r * XTX_TS];
                    if (v != 0) t += v * xb[(size_t)r * XTX_TS + (b - b0)];
                }
                ha[b] = t;
            }
        }
    }
    for (int a = a0; a < a1; a++) // the mirror: H[b][a] = H[a][b] for b > a
        for (int b = b0 > a + 1 ? b0 : a + 1; b < b1; b++)
            j->H[(size_t)b * K + a] = j->H[(size_t)a * K + b];
}

// Tiles m in [lo, hi) of the upper triangle, numbered row by row: (0, 0), (0, 1), .. (1, 1), ..
static void hess_range(void *ctx, int lo, int hi) {
    const hess_job *j = ctx;
    int ta = 0, m = 0;
    while (m + (j->nt - ta) <= lo) m += j->nt - ta, ta++;
    int tb = ta + (lo - m);
    float *xa = g4_malloc(sizeof(float) * XTX_RB * XTX_TS),
          *xb = g4_malloc(sizeof(float) * XTX_RB * XTX_TS);
    for (int t = lo; t < hi; t++) {
        hess_tile(j, ta, tb, xa, xb);
        if (++tb == j->nt) ta++, tb = ta;
    }
    free(xa), free(xb);
}

void g4_xtx_add(float *H, const float *x, int rows, int K) {
    const int nt = (K + XTX_TS - 1) / XTX_TS;
    hess_job j = {H, x, K, rows, nt};
    g4_parallel_for(nt * (nt + 1) / 2, (double)XTX_TS * XTX_TS * rows, hess_range, &j);
}

static void hess_add(probe *p, int i, const g4_buf *x) {
    const size_t K = (size_t)x->cols, n = (size_t)x->rows * K;
    float *a = g4_malloc(sizeof(float) * n);
    g4_buf_to_host_f32(p->real, x, a);
    if (p->fold_span > 0) { // runs of rows of one fold, by their place among all rows so far
        const long span = p->fold_span;
        for (int r0 = 0; r0 < x->rows;) {
            const long g = p->imx_rows[i] + r0; // the row's place in the calibration
            const int run = (int)(span - g % span), nr = x->rows - r0 < run ? x->rows - r0 : run;
            g4_xtx_add(p->hess[i] + (g / span % 2 ? K * K : 0), a + (size_t)r0 * K, nr, (int)K);
            r0 += nr;
        }
    } else {
        g4_xtx_add(p->hess[i], a, x->rows, (int)K);
    }
    p->imx_rows[i] += x->rows;
    free(a);
}

// The floats of a candidate's H; 0 for one wider than max_k (> 0): no H, no forward for it.
// With folds (fold_span > 0) two of them.
static uint64_t h_floats(const cand *c, int max_k, int fold_span) {
    return max_k > 0 && c->row.K > max_k
               ? 0
               : (uint64_t)c->row.K * (uint64_t)c->row.K * (fold_span > 0 ? 2 : 1);
}

int g4_hessian_run(g4_text_model *m, const int32_t *ids, int n, const g4_hessian_opts *o,
                   g4_hessian_cb cb, void *ctx, int *n_linears) {
    *n_linears = 0;
    cand *c = NULL;
    int nc = 0, rc;
    g4_text_state *s = NULL;
    g4_backend *own = NULL;
    probe p = {0};
    if ((rc = probe_start(m, n, o->win, &c, &nc, &s, &own, &p))) goto done;
    p.hess = g4_calloc((size_t)(nc > 0 ? nc : 1), sizeof(float *));
    p.fold_span = o->fold_span;
    for (int i0 = 0; i0 < nc && !rc;) {
        if (!h_floats(&c[i0], o->max_k, o->fold_span)) {
            i0++;
            continue;
        }
        int i1 = i0;
        uint64_t used = 0;
        do { // at least one; then while the group's H fit in max_floats
            const uint64_t f = h_floats(&c[i1], o->max_k, o->fold_span);
            used += f;
            if (f) p.hess[i1] = g4_calloc((size_t)f, sizeof(float));
            i1++;
        } while (i1 < nc && used + h_floats(&c[i1], o->max_k, o->fold_span) <= o->max_floats);
        s->be = &p.be;
        rc = forward_all_rows(s, ids, n, o->win);
        s->be = own;
        for (int i = i0; i < i1 && !rc; i++) {
            if (!p.hess[i]) continue; // wider than max_k
            if (!p.imx_rows[i]) {
                rc = g4_fail(G4_EINTERNAL, "hessian: linear %s received no input in the forward",
                             c[i].row.name);
                break;
            }
            rc = cb(ctx, c[i].row.name, c[i].host.w, c[i].row.K, c[i].row.N, p.hess[i]);
            if (!rc) (*n_linears)++;
        }
        for (int i = i0; i < i1; i++) free(p.hess[i]), p.hess[i] = NULL;
        i0 = i1;
    }
done:
    if (s) s->be = own;
    g4_text_state_free(s);
    free(p.hess);
    free(p.imx_rows);
    free(c);
    return rc;
}
