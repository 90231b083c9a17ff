// g4cu_dev_quantize.c: `g4cu quantize` (include/g4cu_dev.h g4cu_dev_quantize): k-quant the
// decoder's linears into a Q4 (MatMulNBits) package, the way Olive made the published "Q4_K_M"
// packages (quant/q4_writer.h). keep_auto_bytes also keeps fp16 the linears whose 4 bits cost
// the most KL per byte (fidelity/keep_auto.h), ranked by a sensitivity run (fidelity/
// sensitivity.h) on the first calib_tokens tokens of the calibration text (256 by default; the
// imatrix / X^T X runs' default is 16,384 in windows of 512: CALIB_TOKENS); imatrix weighs each
// block's search by the mean x^2 (and mean x) of the linear's input channels (llama.cpp's
// imatrix: g4_imatrix_run, kquant.h g4_q4_quantize_imx).
#include <g4cu_dev.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "base/parallel.h"
#include "base/progress.h"
#include "engine/text_model.h"
#include "fidelity/keep_auto.h"
#include "fidelity/sensitivity.h"
#include "kernels/backend_select.h"
#include "loader/package.h"
#include "loader/tokenizer.h"
#include "quant/equalize.h"
#include "quant/kquant.h"
#include "quant/methods.h"
#include "quant/q4.h"
#include "quant/q4_writer.h"

int g4_api_calib_ids(const char *path, const char *tok_path, int n_max, int32_t **ids, int *n,
                     size_t *cut) {
    char *text;
    size_t len;
    int rc = g4_read_file(path, &text, &len);
    if (rc) return rc;
    // the first 64 KiB (as before), or 16 bytes a token for a long calibration (16,384 tokens
    // of the proxy's 8k vocabulary need ~70 KB of its corpus)
    const size_t cap = n_max > 4096 ? (size_t)n_max * 16 : 65536;
    if (cut) *cut = 0;
    if (len > cap) {
        len = cap;
        while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80) len--;
        if (cut) *cut = len;
    }
    g4_tokenizer *tok;
    if ((rc = g4_tokenizer_open(tok_path, &tok))) {
        free(text);
        return rc;
    }
    g4_ids v = {0};
    rc = g4_tokenizer_encode(tok, text, len, 1, &v);
    g4_tokenizer_close(tok);
    free(text);
    if (!rc && v.n < 8)
        rc = g4_fail(G4_EUSER, "%s: --calib gives only %zu tokens (at least 8 needed)", path, v.n);
    if (rc) {
        g4_error_prefix("%s", path);
        g4_ids_free(&v);
        return rc;
    }
    *n = v.n < (size_t)n_max ? (int)v.n : n_max;
    *ids = g4_malloc(sizeof(int32_t) * (size_t)*n);
    for (int i = 0; i < *n; i++) (*ids)[i] = v.v[i];
    g4_ids_free(&v);
    return G4_OK;
}

// X^T X floats held at once by the gptq / fit calibration (256 MiB; a larger linear alone).
#define HESSIAN_FLOATS (1u << 26)

// gptq / fit / gptq_imx: each linear quantized from its X^T X as the Hessian run hands it over
// (gptq_imx: its importance is X^T X's diagonal; under G4_GPTQ_IMX=mean the imatrix run's
// mean x^2 and mean x of the same tokens, im).
typedef struct {
    g4_qmethod method;
    int act_order;
    float damp;     // GPTQ's percdamp (G4_GPTQ_DAMP, default 0.01)
    int cv;         // G4_GPTQ_DAMP=cv: the damping per linear by held-out rows (gptq_cv_one)
    int cv_span;    // its folds' alternate spans of rows (cv_span_of)
    int cv_hist[G4_GPTQ_CV_N]; // linears per picked damping
    g4_imatrix *im; // G4_GPTQ_IMX=mean: filled by calibrate; imatrix: its run's (the mean)
    g4_q4_arrays *a;
    int n;
    int n_tokens;  // the calibration's tokens: X^T X has rank <= n_tokens
    int k_max;     // the widest input among the linears quantized
    int n_thin;    // linears of K > n_tokens (a rank-deficient X^T X)
    int rank;      // imatrix: G4_IMATRIX_RANK's r (> 0: the Hessian run feeds its directions)
    int rank_all;  // imatrix: r for every linear (G4_IMATRIX_RANK set), else by the tokens
    int n_dirs;    // imatrix: linears quantized with directions as measured (g4_cov_dirs)
    int shrink;    // imatrix: G4_IMATRIX_SHRINK's mode (SHRINK_OFF / SHRINK_THIN / SHRINK_ALL)
    int n_shrunk;  // imatrix: linears given the directions read against the noise
    long dirs_sum; // imatrix: the directions those kept, over all of them
    int threads;   // imatrix's quantizer threads
    struct eq_state *eq;    // --equalize (below), else NULL
    double t_dirs, t_quant; // seconds in the Hessian run's callback: imatrix's covariance
                            // directions, the method's quantization (the report's "time:" lines)
} prequant;

// G4_GPTQ_IMX (A/B runs): "pick" takes the imatrix search's own pick (no re-judging by GPTQ's
// error), "mean" adds the search's mean term (each channel's mean x from an imatrix run).
static int gptq_imx_mean(void) {
    return g4_env_is("G4_GPTQ_IMX", "mean");
}

// G4_GPTQ_DAMP (A/B runs, issue 33): gptq's and gptq_imx's damping, a fraction of X^T X's mean
// diagonal added to it (default 0.01, GPTQ's). Calibrations short of the widest K (X^T X of
// rank < K) did better with 0.1-1 on the tiny models, long ones with 0.01 (bench/FIDELITY.md "How
// much calibration the X^T X methods need").
// "cv" (*cv = 1): chosen per linear on held-out calibration rows (gptq_cv_one).
static int gptq_damp(float *out, int *cv) {
    const char *v = getenv("G4_GPTQ_DAMP");
    *out = 0.01f, *cv = 0;
    if (!v || !*v) return G4_OK;
    if (!strcmp(v, "cv")) return *cv = 1, G4_OK;
    char *end;
    const double d = strtod(v, &end);
    if (*end || !(d > 0 && d <= 100))
        return g4_fail(G4_EUSER, "G4_GPTQ_DAMP '%s': expected a number in (0, 100] or cv", v);
    *out = (float)d;
    return G4_OK;
}

// G4_GPTQ_DAMP=cv's folds: alternate spans of CV_SPAN rows (fewer where the calibration is
// short: at least two spans a fold). Alternate spans rather than the first and second half:
// each fold then sees the same spread of positions (in one long sequence the second half's
// rows sit at positions the first half's never reach, past the tiny models' training length:
// a shift the final X^T X, of both halves, does not have) and of the calibration text's
// documents, so the held-out error measures how GPTQ's solve carries to unseen rows of the
// same distribution, which is what the damping trades. Spans, not single rows: neighbouring
// tokens' inputs are alike, and a held-out row beside a fitted one would flatter the fit.
#define CV_SPAN 64
static int cv_span_of(int n_tokens) {
    const int s = n_tokens / 4;
    return s < CV_SPAN ? (s > 0 ? s : 1) : CV_SPAN;
}

// G4_IMATRIX_RANK=r (issue 33): --method imatrix's search with the inputs' centred covariance's r
// leading directions beside the mean (kquant.h g4_q4_quantize_imx_dirs; the directions from
// each linear's X^T X, so a Hessian run follows the imatrix run; a linear of K < r takes K).
// 0: the mean alone, bit-identical to the search before the directions. Unset: IMATRIX_RANK
// directions for the linears whose K is at most the calibration tokens / IMATRIX_TOKENS_PER_K,
// the rest theirs read against the sampling noise (G4_IMATRIX_SHRINK below; none under
// G4_IMATRIX_SHRINK=0); set (r > 0): r for every linear, unshrunk (A/B runs). Two tiny trained
// models, mean KLD vs k-quant (bench/FIDELITY.md "--imatrix with the inputs' leading
// correlations"), r = 0
// -> 32 on every linear: 128 tokens -28.7 -> -26.7% and -23.3 -> -17.8% (directions from too
// few tokens hurt), 256 -27.2 -> -31.2% and -22.2 -> -26.0%, 1024 -29.2 -> -37.0% and
// -22.9 -> -31.8%.
#define IMATRIX_RANK         32
#define IMATRIX_TOKENS_PER_K 4
static int imatrix_rank(int *out, int *all) {
    const char *v = getenv("G4_IMATRIX_RANK");
    *all = v && *v;
    return g4_env_int("G4_IMATRIX_RANK", IMATRIX_RANK, 0, G4_IMX_MAX_DIRS - 1, out);
}

// G4_IMATRIX_SHRINK (issue 33): where --imatrix's calibration has fewer than IMATRIX_TOKENS_PER_K
// tokens an input channel, the directions are read against the sampling noise
// (methods.h g4_cov_dirs_shrunk: the Marchenko-Pastur edge, spiked-model shrinkage) instead of
// being left out. Two tiny trained models, mean KLD vs k-quant (bench/FIDELITY.md "--imatrix's
// directions read against the sampling noise"): 128 tokens -26.8 -> -31.8% and -26.3 ->
// -32.0%, 256 -31.0 -> -31.2% and -31.2 -> -31.7%, 1024 unchanged (every linear has 4 tokens a
// channel). "0": the directions only where K <= tokens / 4 (the rule before); "all": shrunk on
// every linear (A/B: 128 tokens -34.4 / -32.6%, but 1024 -37.3 / -33.4% against -37.0 / -38.1%).
// Unset or "1": the default. Ignored under G4_IMATRIX_RANK (its r, unshrunk, on every linear).
enum { SHRINK_OFF, SHRINK_THIN, SHRINK_ALL };
static int imatrix_shrink(int *out) {
    const char *v = getenv("G4_IMATRIX_SHRINK");
    *out = SHRINK_THIN;
    if (!v || !*v || !strcmp(v, "1")) return G4_OK;
    if (!strcmp(v, "0")) return *out = SHRINK_OFF, G4_OK;
    if (!strcmp(v, "all")) return *out = SHRINK_ALL, G4_OK;
    return g4_fail(G4_EUSER, "G4_IMATRIX_SHRINK '%s': expected 0, 1 or all", v);
}

// gptq's / gptq_imx's options (gptq_imx: importance X^T X's diagonal, or under G4_GPTQ_IMX=mean
// imp / mean of the imatrix run).
static g4_gptq_opts gptq_opts(const prequant *pq, const float *imp, const float *mean) {
    g4_gptq_opts go = {pq->damp, pq->act_order, 0, NULL, NULL, 0, 0};
    if (pq->method == G4_QM_GPTQ_IMX && gptq_imx_mean())
        go.imp = imp, go.mean = mean;
    else if (pq->method == G4_QM_GPTQ_IMX)
        go.imp_diag = 1;
    go.screen = pq->method == G4_QM_GPTQ_IMX && !g4_env_is("G4_GPTQ_IMX", "pick");
    return go;
}

// One linear by the method: w [K, N] (fp16, or fp32 scaled by --equalize) with its input's X^T X
// H (gptq, gptq_imx: overwritten), importance imp / mean (imatrix; gptq_imx under
// G4_GPTQ_IMX=mean) and r directions V (imatrix).
static int quant_with(const prequant *pq, const void *w, int dtype, int K, int N, float *H,
                      const float *imp, const float *mean, int r, const float *V, uint8_t *q,
                      uint16_t *sc, uint8_t *zp) {
    switch (pq->method) {
    case G4_QM_KQUANT:
        return g4_q4_quantize(w, dtype, K, N, G4_Q4_BLOCK, pq->threads, q, sc, zp);
    case G4_QM_RTN:
        return g4_q4_quantize_rtn(w, dtype, K, N, G4_Q4_BLOCK, q, sc, zp);
    case G4_QM_IMATRIX:
        return g4_q4_quantize_imx_dirs(w, dtype, K, N, G4_Q4_BLOCK, pq->threads, imp, mean, r, V, q,
                                       sc, zp);
    case G4_QM_GPTQ:
    case G4_QM_GPTQ_IMX: {
        const g4_gptq_opts go = gptq_opts(pq, imp, mean);
        return g4_q4_gptq(w, dtype, K, N, G4_Q4_BLOCK, H, &go, q, sc, zp);
    }
    case G4_QM_FIT:
        return g4_q4_fit(w, dtype, K, N, G4_Q4_BLOCK, H, q, sc, zp);
    }
    return g4_fail(G4_EINTERNAL, "quantize: method %d", (int)pq->method);
}

// The equalization's quantizer (quant/equalize.h g4_eq_quant_fn): the method on in's weights.
static int eq_quant(void *ctx, const g4_eq_qin *in, uint8_t *q, uint16_t *sc, uint8_t *zp) {
    const prequant *pq = ctx;
    float *H = NULL; // gptq overwrites its H: a copy
    if (pq->method == G4_QM_GPTQ || pq->method == G4_QM_GPTQ_IMX) {
        H = g4_malloc(sizeof(float) * (size_t)in->K * in->K);
        memcpy(H, in->H, sizeof(float) * (size_t)in->K * in->K);
    }
    const int rc = quant_with(pq, in->w, in->dtype, in->K, in->N, H ? H : (float *)in->H, in->imp,
                              in->mean, in->r, in->V, q, sc, zp);
    free(H);
    return rc;
}

// pq->im's entry for this linear (imatrix; gptq_imx under G4_GPTQ_IMX=mean), else -1.
static int importance_of(prequant *pq, const char *name, int K, int N, int *out) {
    *out = -1;
    if (pq->method != G4_QM_IMATRIX && !(pq->method == G4_QM_GPTQ_IMX && gptq_imx_mean()))
        return G4_OK;
    int i = 0;
    while (i < pq->im->n && strcmp(pq->im->names[i], name)) i++;
    if (i == pq->im->n || pq->im->K[i] != K)
        return g4_fail(G4_EINTERNAL, "%s: %s [%d, %d] has no importance of K %d",
                       g4_qmethod_name(pq->method), name, K, N, K);
    *out = i;
    return G4_OK;
}

// imatrix: the directions a linear of K inputs takes (G4_IMATRIX_RANK's r on every linear; by
// default r on every linear too, shrunk where it is thin; under G4_IMATRIX_SHRINK=0 none where
// K > tokens / IMATRIX_TOKENS_PER_K, calibrate's max_k, whose linears are the writer's).
static int imatrix_r(const prequant *pq, int K) {
    if (pq->method != G4_QM_IMATRIX) return 0;
    if (!pq->rank_all && pq->shrink == SHRINK_OFF && K > pq->n_tokens / IMATRIX_TOKENS_PER_K)
        return 0;
    return pq->rank < K ? pq->rank : K; // no more directions than inputs
}

// imatrix: whether a linear of K inputs takes the directions read against the noise.
static int imatrix_shrunk(const prequant *pq, int K) {
    const int thin = (long)K * IMATRIX_TOKENS_PER_K > pq->n_tokens;
    return pq->shrink == SHRINK_ALL || (pq->shrink == SHRINK_THIN && thin);
}

// The rows X^T X H [K, K] summed (windows may add a <bos> each): trace(H) over the sum of the
// importance imp (mean x^2); the calibration tokens where imp sums to 0.
static double calib_rows(const prequant *pq, const float *H, const float *imp, int K) {
    double th = 0, ti = 0;
    for (int k = 0; k < K; k++) th += H[(size_t)k * K + k], ti += imp[k];
    return ti > 0 ? th / ti : pq->n_tokens;
}

// imatrix: the report's counts for one linear of K inputs quantized with used directions.
static void count_dirs(prequant *pq, int K, int used) {
    if (imatrix_shrunk(pq, K))
        pq->n_shrunk++, pq->dirs_sum += used;
    else
        pq->n_dirs++;
}

// imatrix: *V [r][K] from this X^T X and importance entry i (NULL for r = 0), *used of them kept:
// read against the sampling noise (g4_cov_dirs_shrunk) under G4_IMATRIX_SHRINK's rule, else as
// measured (g4_cov_dirs, all r).
static int imatrix_dirs(prequant *pq, int i, const float *H, int K, int r, float **V, int *used) {
    *V = NULL, *used = r;
    if (!r) return G4_OK;
    *V = g4_malloc(sizeof(float) * (size_t)r * (size_t)K);
    const double rows = calib_rows(pq, H, pq->im->imp[i], K);
    const int rc = imatrix_shrunk(pq, K)
                       ? g4_cov_dirs_shrunk(H, rows, pq->im->mean[i], K, r, *V, used)
                       : g4_cov_dirs(H, rows, pq->im->mean[i], K, r, *V);
    count_dirs(pq, K, *used);
    return rc;
}

static void add_arrays(prequant *pq, g4_q4_arrays a) {
    pq->a = g4_realloc(pq->a, sizeof(g4_q4_arrays) * (size_t)(pq->n + 1));
    pq->a[pq->n++] = a;
}

// --- --equalize (quant/equalize.h) -------------------------------------------------------------
// The groups: q|k|v (q alone on the KV-shared layers) folded into input_layernorm, gate|up into
// pre_feedforward_layernorm, down_proj into up_proj's output columns, the lm_head into the final
// norm (the decoder's own lm_head copy; the embedding model is untouched). Not o_proj (v's
// weightless norm is in the way), per_layer_input_gate (its input is the raw residual) nor
// per_layer_projection (its input gelu(gate) * the per-layer embedding: the embedding comes from
// the embedding model, which the Q4 package shares with the f16 one, and the gate's output
// columns could carry 1/s only through gelu, which is not linear). A group is searched when
// its last member's X^T X arrives (the Hessian run hands the linears over in layer order);
// up_proj is quantized once its layer's down_proj has its scales (1/s on up's columns).

typedef enum { EQ_ATTN = 0, EQ_MLP = 1, EQ_DOWN = 2, EQ_LM = 3 } eq_kind;
static const char *const EQ_KIND_NAME[] = {"q|k|v", "gate|up", "down", "lm_head"};

typedef struct {
    eq_kind kind;
    int layer; // -1: the lm_head
    int expected, have;
    g4_eq_group g; // names owned; H owned (H_own) or the callback's while it runs
    float *H_own, *V_own, *E_own;
    uint16_t *fold_own;
    char *fold_name;
    g4_eq_pick pick;
    int up_done; // EQ_MLP: up_proj quantized (after its down_proj)
} eq_grp;

typedef struct eq_state {
    const g4_component *dec;
    FILE *rep;
    int forced; // G4_EQUALIZE_ALPHA=a (A/B runs, tests): alpha a / 10 for every group; else -1
    eq_grp **g;
    int n;
    g4_q4_repl *repl; // the folded norms (data: the groups' pick.fold)
    int n_repl;
    int n_folds; // of them the norms
    int f16; // G4_EQUALIZE_F16=1 (tests): the groups' linears written fp16, scaled, not quantized
    uint16_t **own; // the f16 mode's weight data (repl entries)
    int n_own;
    int hist[G4_EQ_N_ALPHA]; // groups per picked alpha
    int kinds[4];            // groups per kind
    double rel_sum;          // sum over searched groups of err[pick] / err[0]
    int n_searched;
} eq_state;

static void eq_grp_free(eq_grp *G) {
    for (int m = 0; m < G4_EQ_MAX_MEMBERS; m++) free((char *)G->g.name[m]);
    free(G->H_own), free(G->V_own), free(G->E_own), free(G->fold_own), free(G->fold_name);
    g4_eq_pick_free(&G->pick);
    free(G);
}

// G's input statistics freed once its members are quantized.
static void eq_grp_drop_stats(eq_grp *G) {
    free(G->H_own), free(G->V_own), free(G->E_own);
    G->H_own = G->V_own = G->E_own = NULL, G->g.H = G->g.V = G->g.Herr = NULL;
}

static void eq_state_free(eq_state *e) {
    if (!e) return;
    for (int i = 0; i < e->n; i++) eq_grp_free(e->g[i]);
    free(e->g);
    for (int i = 0; i < e->n_repl; i++) free((char *)e->repl[i].name);
    free(e->repl);
    for (int i = 0; i < e->n_own; i++) free(e->own[i]);
    free(e->own);
}

static void eq_add_repl(eq_state *e, const char *name, const uint16_t *data, int n, int fold) {
    e->repl = g4_realloc(e->repl, sizeof(g4_q4_repl) * (size_t)(e->n_repl + 1));
    e->repl[e->n_repl++] = (g4_q4_repl){g4_strdup(name), data, n, fold};
}

// G4_EQUALIZE_ALPHA (A/B runs, tests): a fixed alpha in 0..1 (multiples of 0.1), no search.
static int eq_forced(int *out) {
    const char *v = getenv("G4_EQUALIZE_ALPHA");
    *out = -1;
    if (!v || !*v) return G4_OK;
    char *end;
    const double a = strtod(v, &end);
    const long i = lround(a * 10);
    if (*end || !(a >= 0 && a <= 1) || fabs(a * 10 - (double)i) > 1e-6)
        return g4_fail(G4_EUSER, "G4_EQUALIZE_ALPHA '%s': expected 0, 0.1, .., 1", v);
    *out = (int)i;
    return G4_OK;
}

// name -> group kind, layer and member slot; 0 for a linear no group takes.
static int eq_role(const char *name, eq_kind *kind, int *layer, int *slot) {
    static const struct {
        const char *suffix;
        eq_kind kind;
        int slot;
    } T[] = {{"self_attn.q_proj.weight_t", EQ_ATTN, 0}, {"self_attn.k_proj.weight_t", EQ_ATTN, 1},
             {"self_attn.v_proj.weight_t", EQ_ATTN, 2}, {"mlp.gate_proj.weight_t", EQ_MLP, 0},
             {"mlp.up_proj.weight_t", EQ_MLP, 1},       {"mlp.down_proj.weight_t", EQ_DOWN, 0}};
    if (!strcmp(name, "lm_head.weight_t")) {
        *kind = EQ_LM, *layer = -1, *slot = 0;
        return 1;
    }
    int l, at = -1;
    if (sscanf(name, "model.layers.%d.%n", &l, &at) != 1 || at < 0) return 0;
    for (size_t t = 0; t < sizeof T / sizeof T[0]; t++)
        if (!strcmp(name + at, T[t].suffix)) {
            *kind = T[t].kind, *layer = l, *slot = T[t].slot;
            return 1;
        }
    return 0;
}

static eq_grp *eq_find(eq_state *e, eq_kind kind, int layer) {
    for (int i = 0; i < e->n; i++)
        if (e->g[i]->kind == kind && e->g[i]->layer == layer) return e->g[i];
    return NULL;
}

// A new group for kind / layer of K inputs: its member count and its fold's fp16 weights.
static int eq_new(eq_state *e, eq_kind kind, int layer, int K, eq_grp **out) {
    eq_grp *G = g4_calloc(1, sizeof *G);
    G->kind = kind, G->layer = layer, G->g.K = K;
    G->expected = kind == EQ_MLP ? 2 : 1;
    if (kind == EQ_ATTN) {
        char *kn = g4_sprintf("model.layers.%d.self_attn.k_proj.weight_t", layer);
        if (g4_component_find(e->dec, kn)) G->expected = 3; // a KV-owning layer
        free(kn);
    }
    G->fold_name = kind == EQ_ATTN ? g4_sprintf("model.layers.%d.input_layernorm.weight", layer)
                   : kind == EQ_MLP
                       ? g4_sprintf("model.layers.%d.pre_feedforward_layernorm.weight", layer)
                   : kind == EQ_LM ? g4_strdup("model.norm.weight")
                                   : NULL;
    if (G->fold_name) {
        const g4_tensor *t;
        int rc = g4_get(e->dec, G->fold_name, G4_DT_FLOAT16, &t, K);
        if (rc) {
            eq_grp_free(G);
            return rc;
        }
        G->fold_own = g4_malloc(sizeof(uint16_t) * (size_t)K);
        memcpy(G->fold_own, t->data, sizeof(uint16_t) * (size_t)K);
        G->g.fold = G->fold_own;
    }
    e->g = g4_realloc(e->g, sizeof(eq_grp *) * (size_t)(e->n + 1));
    e->g[e->n++] = G;
    *out = G;
    return G4_OK;
}

// Member m of G quantized with row scales s and column factors c (NULL: none) into pq->a;
// in the f16 mode its fp16 weights fp16(s_k W[k][n] c_n) instead, an fp16 rewrite.
static int eq_final(prequant *pq, eq_grp *G, int m, const float *s, const float *c) {
    eq_state *e = pq->eq;
    if (e->f16) {
        const int K = G->g.K, N = G->g.N[m];
        float *f = g4_eq_scaled_w(G->g.w[m], K, N, NULL, N, s, c);
        uint16_t *d = g4_malloc(sizeof(uint16_t) * (size_t)K * N);
        for (size_t i = 0; i < (size_t)K * N; i++) d[i] = g4_f32_to_f16(f[i]);
        free(f);
        e->own = g4_realloc(e->own, sizeof(uint16_t *) * (size_t)(e->n_own + 1));
        e->own[e->n_own++] = d;
        eq_add_repl(e, G->g.name[m], d, K * N, 0);
        return G4_OK;
    }
    g4_q4_arrays a = g4_q4_arrays_new(G->g.name[m], G->g.K, G->g.N[m]);
    const int rc = g4_eq_quantize(&G->g, m, s, c, eq_quant, pq, a.q, a.scales, a.zp);
    if (rc) {
        g4_error_prefix("%s", G->g.name[m]);
        g4_q4_arrays_free(&a);
        return rc;
    }
    add_arrays(pq, a);
    return G4_OK;
}

static const char *eq_label(const eq_grp *G, char *buf, size_t n) {
    if (G->layer < 0)
        snprintf(buf, n, "%s", EQ_KIND_NAME[G->kind]);
    else
        snprintf(buf, n, "layer %d %s", G->layer, EQ_KIND_NAME[G->kind]);
    return buf;
}

// The group complete: its alpha, its fold, and its members quantized (up_proj: see below).
static int eq_run(prequant *pq, eq_grp *G) {
    eq_state *e = pq->eq;
    int rc;
    G->g.n = G->expected;
    // G4_EQUALIZE_GROUPS (A/B runs): a comma list of attn, mlp, down, lm: the others take alpha 0
    const char *only = getenv("G4_EQUALIZE_GROUPS");
    static const char *const KEY[] = {"attn", "mlp", "down", "lm"};
    int off = 0;
    if (only && *only) {
        char *cp = g4_strdup(only), *save = NULL;
        off = 1;
        for (char *t = strtok_r(cp, ",", &save); t; t = strtok_r(NULL, ",", &save))
            if (!strcmp(t, KEY[G->kind])) off = 0;
        free(cp);
    }
    if (off || e->forced >= 0) {
        const int fa = off ? 0 : e->forced;
        G->pick.alpha_i = fa;
        G->pick.s = g4_malloc(sizeof(float) * (size_t)G->g.K);
        G->pick.fold = G->g.fold ? g4_malloc(sizeof(uint16_t) * (size_t)G->g.K) : NULL;
        g4_eq_scales(G->g.H, G->g.K, fa / 10.0, G->g.fold, G->pick.s, G->pick.fold);
    } else if ((rc = g4_eq_search(&G->g, eq_quant, pq, &G->pick))) {
        return rc;
    }
    const int ai = G->pick.alpha_i;
    e->hist[ai]++, e->kinds[G->kind]++;
    char lb[64];
    if (e->forced < 0 && !off) {
        const double rel = G->pick.err[0] > 0 ? G->pick.err[ai] / G->pick.err[0] : 1;
        e->rel_sum += rel, e->n_searched++;
        fprintf(e->rep,
                "equalize: %s (K %d, %d linear%s): alpha %.1f, calibration error %.3f of "
                "alpha 0's (searched on %d columns)\n",
                eq_label(G, lb, sizeof lb), G->g.K, G->g.n, G->g.n > 1 ? "s" : "", ai / 10.0, rel,
                G->pick.cols[0]);
    } else {
        fprintf(e->rep, "equalize: %s (K %d, %d linear%s): alpha %.1f (%s)\n",
                eq_label(G, lb, sizeof lb), G->g.K, G->g.n, G->g.n > 1 ? "s" : "", ai / 10.0,
                off ? "G4_EQUALIZE_GROUPS" : "G4_EQUALIZE_ALPHA");
    }
    const float *s = ai ? G->pick.s : NULL; // alpha 0: the method itself, byte for byte
    if (ai && G->g.fold) {
        eq_add_repl(e, G->fold_name, G->pick.fold, G->g.K, 1);
        e->n_folds++;
    }
    if (G->kind == EQ_MLP) return eq_final(pq, G, 0, s, NULL); // up waits for its down_proj
    for (int m = 0; m < G->g.n; m++)
        if ((rc = eq_final(pq, G, m, s, NULL))) return rc;
    if (G->kind != EQ_DOWN) return G4_OK;
    // up_proj: its rows by gate|up's scales, its output columns by 1 / down's
    eq_grp *U = eq_find(e, EQ_MLP, G->layer);
    if (!U || U->have != U->expected || U->up_done)
        return g4_fail(G4_EINTERNAL, "equalize: layer %d's down_proj before its gate|up", G->layer);
    float *c = NULL;
    if (ai) {
        c = g4_malloc(sizeof(float) * (size_t)U->g.N[1]);
        if (U->g.N[1] != G->g.K)
            rc = g4_fail(G4_EUSER, "equalize: layer %d: up_proj N %d, down_proj K %d", G->layer,
                         U->g.N[1], G->g.K);
        for (int j = 0; j < U->g.N[1] && !rc; j++) c[j] = 1.0f / G->pick.s[j];
    }
    if (!rc) rc = eq_final(pq, U, 1, U->pick.alpha_i ? U->pick.s : NULL, c);
    free(c);
    U->up_done = 1;
    eq_grp_drop_stats(U);
    return rc;
}

// A linear of a group (*taken = 1; else 0 and nothing done): kept until its group is complete.
static int eq_linear(prequant *pq, const char *name, const void *w, int K, int N, const float *H,
                     int imp_i, int *taken) {
    eq_state *e = pq->eq;
    eq_kind kind;
    int layer, slot, rc;
    *taken = 0;
    if (!eq_role(name, &kind, &layer, &slot)) return G4_OK;
    *taken = 1;
    eq_grp *G = eq_find(e, kind, layer);
    if (!G && (rc = eq_new(e, kind, layer, K, &G))) return rc;
    if (G->g.K != K || slot >= G->expected || G->g.name[slot])
        return g4_fail(G4_EINTERNAL,
                       "equalize: %s [%d, %d] does not fit its group (K %d, %d of %d)", name, K, N,
                       G->g.K, G->have, G->expected);
    if (G->have == 0) { // the shared input's statistics, from the first member
        if (G->expected > 1) {
            G->H_own = g4_malloc(sizeof(float) * (size_t)K * K);
            memcpy(G->H_own, H, sizeof(float) * (size_t)K * K);
        }
        G->g.H = G->H_own ? G->H_own : H; // a one-member group runs within this call
        if (imp_i >= 0) G->g.imp = pq->im->imp[imp_i], G->g.mean = pq->im->mean[imp_i];
        // (the group's directions once, from the shared input; counted once in the report)
        if ((rc = imatrix_dirs(pq, imp_i, G->g.H, K, imatrix_r(pq, K), &G->V_own, &G->g.r)))
            return rc;
        G->g.V = G->V_own;
        // G4_EQUALIZE_ERR=centred (A/B runs; imatrix, which has the means): the search judges
        // by the centred covariance's error, H - rows mean mean^T, the tokens' common offset
        // left out
        if (g4_env_is("G4_EQUALIZE_ERR", "centred") && G->g.mean) {
            const double rows = calib_rows(pq, G->g.H, G->g.imp, K);
            G->E_own = g4_malloc(sizeof(float) * (size_t)K * K);
            for (int a = 0; a < K; a++)
                for (int b = 0; b < K; b++)
                    G->E_own[(size_t)a * K + b] =
                        (float)(G->g.H[(size_t)a * K + b] - rows * G->g.mean[a] * G->g.mean[b]);
            G->g.Herr = G->E_own;
        }
    }
    if (G->have > 0 && G->g.r > 0) // the report counts linears: the group's others too
        count_dirs(pq, K, G->g.r);
    G->g.name[slot] = g4_strdup(name);
    G->g.w[slot] = w;
    G->g.N[slot] = N;
    if (++G->have < G->expected) return G4_OK;
    rc = eq_run(pq, G);
    if (!G->H_own) G->g.H = NULL; // the callback's, about to be freed
    if (G->kind != EQ_MLP) eq_grp_drop_stats(G);
    return rc;
}

// After the Hessian run: every group complete, every up_proj quantized; the summary line.
static int eq_finish(eq_state *e) {
    for (int i = 0; i < e->n; i++) {
        const eq_grp *G = e->g[i];
        char lb[64];
        if (G->have != G->expected || (G->kind == EQ_MLP && !G->up_done))
            return g4_fail(G4_EINTERNAL, "equalize: %s has %d of its %d linears%s",
                           eq_label(G, lb, sizeof lb), G->have, G->expected,
                           G->kind == EQ_MLP ? " or no down_proj" : "");
    }
    fprintf(e->rep,
            "equalize: %d groups (q|k|v %d, gate|up %d, down %d, lm_head %d), %d norms rewritten; "
            "alpha 0..1:",
            e->n, e->kinds[EQ_ATTN], e->kinds[EQ_MLP], e->kinds[EQ_DOWN], e->kinds[EQ_LM],
            e->n_folds);
    for (int a = 0; a < G4_EQ_N_ALPHA; a++) fprintf(e->rep, " %d", e->hist[a]);
    if (e->n_searched)
        fprintf(e->rep, "; mean calibration error %.3f of alpha 0's", e->rel_sum / e->n_searched);
    fprintf(e->rep, "\n");
    return G4_OK;
}

// G4_GPTQ_DAMP=cv, one linear: H holds its two folds' X^T X (g4_hessian_opts fold_span); the
// damping of the least held-out error (methods.h g4_gptq_cv), then the linear quantized from
// their sum, the whole calibration's X^T X, with it.
static int gptq_cv_one(prequant *pq, const char *name, const void *w, int K, int N, float *H,
                       int imp_i) {
    const float *imp = imp_i >= 0 ? pq->im->imp[imp_i] : NULL;
    const float *mean = imp_i >= 0 ? pq->im->mean[imp_i] : NULL;
    g4_gptq_opts go = gptq_opts(pq, imp, mean);
    const size_t kk = (size_t)K * K;
    int pick = 0;
    g4_q4_arrays a = g4_q4_arrays_new(name, K, N);
    int rc = g4_gptq_cv(w, G4_DT_FLOAT16, K, N, G4_Q4_BLOCK, H, H + kk, &go, &pick, NULL);
    if (!rc) {
        for (size_t e = 0; e < kk; e++) H[e] += H[kk + e];
        go.damp = g4_gptq_cv_grid[pick];
        rc = g4_q4_gptq(w, G4_DT_FLOAT16, K, N, G4_Q4_BLOCK, H, &go, a.q, a.scales, a.zp);
    }
    if (rc) {
        g4_error_prefix("%s", name);
        g4_q4_arrays_free(&a);
        return rc;
    }
    pq->cv_hist[pick]++;
    add_arrays(pq, a);
    return G4_OK;
}

static int prequant_linear(prequant *pq, const char *name, const void *w, int K, int N, float *H) {
    if (K > pq->k_max) pq->k_max = K;
    if (K > pq->n_tokens) pq->n_thin++;
    int i, rc;
    if ((rc = importance_of(pq, name, K, N, &i))) return rc;
    if (pq->eq) { // a member of an equalization group is quantized there
        int taken = 0;
        if ((rc = eq_linear(pq, name, w, K, N, H, i, &taken)) || taken) return rc;
    }
    if (pq->cv) return gptq_cv_one(pq, name, w, K, N, H, i);
    const int r = imatrix_r(pq, K);
    // with --equalize every linear reaches here: kquant and rtn, and imatrix without directions
    // (the same bytes as r = 0), are the writer's
    if (pq->method == G4_QM_KQUANT || pq->method == G4_QM_RTN ||
        (pq->method == G4_QM_IMATRIX && !r))
        return G4_OK;
    float *V = NULL;
    int used = 0;
    g4_q4_arrays a = g4_q4_arrays_new(name, K, N);
    const double t0 = g4_progress_now();
    rc = imatrix_dirs(pq, i, H, K, r, &V, &used);
    pq->t_dirs += g4_progress_now() - t0;
    if (!rc)
        rc = quant_with(pq, w, G4_DT_FLOAT16, K, N, H, i >= 0 ? pq->im->imp[i] : NULL,
                        i >= 0 ? pq->im->mean[i] : NULL, used, V, a.q, a.scales, a.zp);
    free(V);
    if (rc) {
        g4_error_prefix("%s", name);
        g4_q4_arrays_free(&a);
        return rc;
    }
    add_arrays(pq, a);
    return G4_OK;
}

// The Hessian run's callback: one linear (prequant_linear), its seconds counted (t_quant: all
// but the covariance directions, which prequant_linear counts in t_dirs).
static int prequant_one(void *ctx, const char *name, const void *w, int K, int N, float *H) {
    prequant *pq = ctx;
    const double t0 = g4_progress_now(), dirs0 = pq->t_dirs;
    const int rc = prequant_linear(pq, name, w, K, N, H);
    pq->t_quant += g4_progress_now() - t0 - (pq->t_dirs - dirs0);
    return rc;
}

// The calibration's defaults where calib_tokens / calib_ctx are 0 (include/g4cu_dev.h): the
// runs that collect the imatrix or X^T X (methods imatrix, gptq, fit, gptq_imx; equalize) take
// CALIB_TOKENS in windows of CALIB_CTX (the proxy, issue 33: gptq_imx -16.7% mean KLD vs k-quant
// from 2048 tokens in one sequence, -39.6% from 16,384 in windows of 512, its training length;
// imatrix -22.5% / -22.9%; 256 tokens, the default before, leave every E2B linear's X^T X
// rank-deficient, K 1536..12288); --keep-auto's sensitivity ranking, one forward a candidate
// linear, keeps SENS_TOKENS (in one sequence, as before) so that it costs what it did.
#define CALIB_TOKENS 16384
#define CALIB_CTX    512
#define SENS_TOKENS  256

// What calibrate reads and runs: n_load tokens of the text (the most any run wants), the
// imatrix / X^T X runs on them in windows of win (0 or >= the tokens: one sequence), the
// sensitivity ranking on the first n_sens; given: calib_tokens came from the caller (the
// report then says "asked", else "the default").
typedef struct {
    int n_load, win, n_sens, given;
} calib_plan;

// The report's note on a text shorter than the tokens asked: "" where it had them all, else
// " (all the text gives: fewer than the default 16384)" (cut: of the bytes read).
static void short_note(char *buf, size_t size, int n, int asked, int given, size_t cut) {
    buf[0] = 0;
    if (n >= asked) return;
    char of[64] = "the text";
    if (cut) snprintf(of, sizeof of, "its first %zu bytes", cut);
    snprintf(buf, size, " (all %s gives: fewer than the %s %d)", of, given ? "asked" : "default",
             asked);
}

// Appends to keep[] the names of the linears --keep-auto picks (new strings in *owned).
// The calibration runs: --keep-auto's sensitivity ranking (budget >= 0), --imatrix's
// activation importance (im != NULL) and gptq / fit's X^T X (pq != NULL), on one loaded model.
static int calibrate(const char *pkg_dir, const char *backend, const char *calib,
                     const char *tok_path, const calib_plan *cp, long long budget, int threads,
                     FILE *rep, FILE *progress, const char ***keep, int *n_keep, char ***owned,
                     int *n_owned, g4_imatrix *im, prequant *pq) {
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_sens_row *rows = NULL;
    int32_t *ids = NULL;
    int n = 0, n_rows = 0, n_q4 = 0, rc;
    size_t cut = 0;
    const int win = cp->win;
    g4_backend *be = NULL;
    char *tp = tok_path ? g4_strdup(tok_path) : g4_path_join(pkg_dir, "tokenizer.json");
    if ((rc = g4_api_calib_ids(calib, tp, cp->n_load, &ids, &n, &cut)) ||
        (rc = g4_backend_by_name(backend, &be)) || (rc = g4_package_open(pkg_dir, &p)) ||
        (rc = g4_text_model_load(p, be, &m)))
        goto done;
    if (pq && pq->eq) pq->eq->dec = g4_package_component(p, G4_COMP_DECODER);
    // the tokens and windows the imatrix / X^T X runs use: "16384 tokens in windows of 512",
    // "256 tokens in one sequence" (a window as long as the tokens is one sequence)
    char how[192], note[128];
    short_note(note, sizeof note, n, cp->n_load, cp->given, cut);
    if (win > 0 && win < n)
        snprintf(how, sizeof how, "%d tokens%s in windows of %d", n, note, win);
    else
        snprintf(how, sizeof how, "%d tokens%s in one sequence", n, note);
    if (im) {
        const double t0 = g4_progress_now();
        if ((rc = g4_imatrix_run(m, ids, n, win, im))) goto done;
        fprintf(rep, "imatrix: activation importance of %d linears from %s of %s\n", im->n, how,
                calib);
        fprintf(rep, "time: importance run %.1f s\n", g4_progress_now() - t0);
    }
    if (pq && pq->method == G4_QM_GPTQ_IMX && gptq_imx_mean()) { // the same tokens' means
        if ((rc = g4_imatrix_run(m, ids, n, win, pq->im))) goto done;
    }
    if (pq) {
        int n_lin = 0;
        // imatrix by the tokens (G4_IMATRIX_RANK unset): X^T X only where its directions are
        // used (K <= tokens / IMATRIX_TOKENS_PER_K); the rest keep the writer's search with the
        // mean alone (the same bytes as r = 0), without a K x K matrix each (E2B: K to 12288)
        // (n >= 8 tokens: max_k >= 2, never 0's "every linear")
        // (--equalize: every linear, its groups' error model is X^T X)
        const int max_k =
            pq->method == G4_QM_IMATRIX && !pq->rank_all && pq->shrink == SHRINK_OFF && !pq->eq
                ? n / IMATRIX_TOKENS_PER_K
                : 0;
        pq->cv_span = pq->cv ? cv_span_of(n) : 0;
        const g4_hessian_opts ho = {HESSIAN_FLOATS, win, max_k, pq->cv_span};
        pq->n_tokens = n;
        const double t0 = g4_progress_now();
        if ((rc = g4_hessian_run(m, ids, n, &ho, prequant_one, pq, &n_lin))) goto done;
        if (pq->eq && (rc = eq_finish(pq->eq))) goto done;
        const double t_run = g4_progress_now() - t0;
        char damp[48] = "";
        if (pq->damp != 0.01f) snprintf(damp, sizeof damp, ", damping %g", pq->damp);
        char rk[160] = "";
        if (pq->method == G4_QM_IMATRIX)
            snprintf(rk, sizeof rk,
                     ", %d covariance directions for %d, %ld past the sampling noise for %d "
                     "(G4_IMATRIX_RANK, G4_IMATRIX_SHRINK)",
                     pq->rank, pq->n_dirs, pq->dirs_sum, pq->n_shrunk);
        fprintf(rep, "%s: X^T X of %d linears from %s of %s%s%s\n", g4_qmethod_name(pq->method),
                n_lin, how, calib, damp, rk);
        // where the run's time went (issue 33: --imatrix on the proxy took 285 s to gptq's 89):
        // the forwards with their X^T X sums, then, as each linear's X^T X arrived, the
        // covariance directions (imatrix) and the method's quantization
        fprintf(rep,
                "time: X^T X run %.1f s: forwards and X^T X %.1f s, covariance directions %.1f s, "
                "%s quantization %.1f s\n",
                t_run, t_run - pq->t_dirs - pq->t_quant, pq->t_dirs, g4_qmethod_name(pq->method),
                pq->t_quant);
        if (pq->cv) {
            fprintf(rep,
                    "%s: damping by held-out rows (G4_GPTQ_DAMP=cv, two folds of alternate spans "
                    "of %d rows), linears per damping:",
                    g4_qmethod_name(pq->method), pq->cv_span);
            for (int d = 0; d < G4_GPTQ_CV_N; d++)
                fprintf(rep, " %g x%d", g4_gptq_cv_grid[d], pq->cv_hist[d]);
            fprintf(rep, "\n");
        }
        // Fewer tokens than a linear's K leave its X^T X rank-deficient: on the tiny trained
        // models gptq then lost to plain k-quant (bench/FIDELITY.md "How much calibration the
        // X^T X methods need"); say so rather than hand back a silently worse package.
        if (pq->n_thin > 0 && pq->method != G4_QM_IMATRIX)
            fprintf(rep,
                    "warning: %s: %d of %d linears have more inputs (K up to %d) than the %d "
                    "calibration tokens, so their X^T X is rank-deficient; give --calib-tokens "
                    "of a few times %d\n",
                    g4_qmethod_name(pq->method), pq->n_thin, n_lin, pq->k_max, n, pq->k_max);
    }
    if (budget < 0) goto done;
    g4_sens_opts so = {0};
    so.n_threads = threads;
    so.progress = progress;
    // its own first n_sens tokens (the default 256 where an X^T X method loaded 16,384), in
    // one sequence, so at most one window: a given --calib-tokens 16384 with --calib-ctx 512
    // ranks on the first 512 (it asked for one sequence of 16,384 before, past the model's
    // context, and failed after the X^T X run)
    int n_s = n < cp->n_sens ? n : cp->n_sens;
    const int win_cut = win > 0 && n_s > win;
    if (win_cut) n_s = win;
    char s_note[128];
    short_note(s_note, sizeof s_note, n_s, cp->n_sens, cp->given, cut);
    if (win_cut) snprintf(s_note, sizeof s_note, ", the first window");
    const double t_sens = g4_progress_now();
    if ((rc = g4_sensitivity_run(m, ids, n_s, &so, &rows, &n_rows, &n_q4))) goto done;
    fprintf(rep, "time: sensitivity ranking %.1f s\n", g4_progress_now() - t_sens);
    int *picked = g4_calloc((size_t)n_rows, sizeof(int));
    uint64_t used = 0;
    int kept = g4_keep_auto_pick(rows, n_rows, (uint64_t)budget, G4_Q4_BLOCK, picked, &used);
    *owned = g4_malloc(sizeof(char *) * (size_t)(kept > 0 ? kept : 1));
    *keep = g4_realloc(*keep, sizeof(char *) * (size_t)(*n_keep + kept + 1));
    fprintf(rep,
            "keep-auto: %d linears kept fp16 for %llu of %lld extra bytes (sensitivity on %d "
            "tokens%s of %s):\n",
            kept, (unsigned long long)used, budget, n_s, s_note, calib);
    for (int i = 0; i < n_rows; i++) {
        if (!picked[i]) continue;
        fprintf(rep, "  %-52s KL %.4e  +%llu bytes\n", rows[i].name, rows[i].kl_mean,
                (unsigned long long)g4_keep_auto_extra_bytes(rows[i].K, rows[i].N, G4_Q4_BLOCK));
        (*owned)[(*n_owned)++] = g4_strdup(rows[i].name);
        (*keep)[(*n_keep)++] = (*owned)[*n_owned - 1];
    }
    free(picked);
done:
    free(tp);
    free(ids);
    free(rows);
    g4_text_model_free(m);
    g4_package_close(p);
    return rc;
}

void g4cu_dev_quantize_params_default(g4cu_dev_quantize_params *p) {
    *p = (g4cu_dev_quantize_params){.keep_auto_bytes = -1, .backend = "cpu"};
}

static int quantize(const char *in, const char *out, const g4cu_dev_quantize_params *p, FILE *rep) {
    g4_qmethod method = G4_QM_KQUANT;
    int rc = p->method ? g4_qmethod_parse(p->method, &method) : G4_OK;
    if (rc) return rc;
    if (p->imatrix && method != G4_QM_KQUANT && method != G4_QM_IMATRIX)
        return g4_fail(G4_EUSER,
                       "quantize: imatrix with method '%s': imatrix is a method of its "
                       "own (method imatrix)",
                       p->method);
    if (p->imatrix) method = G4_QM_IMATRIX;
    if (p->gptq_act_order && method != G4_QM_GPTQ && method != G4_QM_GPTQ_IMX)
        return g4_fail(G4_EUSER,
                       "quantize: act-order with method '%s': it is gptq's and gptq_imx's option",
                       g4_qmethod_name(method));
    if ((p->keep_auto_bytes >= 0 || g4_qmethod_needs_calib(method) || p->equalize) !=
        (p->calib != NULL))
        return g4_fail(G4_EUSER, "quantize: keep_auto_bytes, equalize and the methods imatrix, "
                                 "gptq, fit and gptq_imx need a calibration text (and the text "
                                 "one of them)");
    // A kept fp16 linear in a folded group would need its own rows rescaled: not done yet.
    if (p->equalize && (p->n_keep > 0 || p->keep_auto_bytes >= 0))
        return g4_fail(G4_EUSER, "quantize: equalize with keep or keep_auto_bytes: not supported "
                                 "(a kept fp16 linear would miss its group's scales)");
    if (p->calib_tokens != 0 && (p->calib_tokens < 8 || p->calib_tokens > (1 << 20)))
        return g4_fail(G4_EUSER, "quantize: calib_tokens %d: expected 0 (the default) or 8 to %d",
                       p->calib_tokens, 1 << 20);
    if (p->calib_ctx != 0 && (p->calib_ctx < 8 || p->calib_ctx > (1 << 20)))
        return g4_fail(G4_EUSER, "quantize: calib_ctx %d: expected 0 (the default) or 8 to %d",
                       p->calib_ctx, 1 << 20);
    if (p->calib_ctx && !g4_qmethod_needs_calib(method) && !p->equalize)
        return g4_fail(G4_EUSER,
                       "quantize: calib_ctx with method '%s': it is the calibrated "
                       "methods' (imatrix, gptq, fit, gptq_imx)",
                       g4_qmethod_name(method));
    float damp = 0.01f;
    int cv = 0;
    if ((method == G4_QM_GPTQ || method == G4_QM_GPTQ_IMX) && (rc = gptq_damp(&damp, &cv)))
        return rc;
    // (the equalization's groups quantize from one X^T X each: no folds there)
    if (cv && p->equalize)
        return g4_fail(G4_EUSER, "quantize: G4_GPTQ_DAMP=cv with equalize: not supported");
    int rank = 0;
    int rank_all = 0;
    int shrink = SHRINK_OFF;
    if (method == G4_QM_IMATRIX &&
        ((rc = imatrix_rank(&rank, &rank_all)) || (rc = imatrix_shrink(&shrink))))
        return rc;
    eq_state eq = {0};
    if (p->equalize && (rc = eq_forced(&eq.forced))) return rc;
    eq.rep = rep;
    eq.f16 = p->equalize && g4_env_is("G4_EQUALIZE_F16", "1");
    const int threads = p->n_threads > 0 ? p->n_threads : g4_threads();
    const char **keep = g4_calloc((size_t)p->n_keep + 1, sizeof(char *));
    int n_keep = p->n_keep;
    for (int i = 0; i < n_keep; i++) keep[i] = p->keep[i];
    if (eq.f16) keep[n_keep++] = "*"; // (equalize has no keep of its own: p->n_keep is 0)
    char **owned = NULL;
    int n_owned = 0;
    g4_imatrix im = {0};
    g4_imatrix pim = {0}; // gptq_imx's means (G4_GPTQ_IMX=mean)
    prequant pq = {.method = method,
                   .act_order = p->gptq_act_order,
                   .damp = damp,
                   .cv = cv,
                   .im = method == G4_QM_IMATRIX ? &im : &pim,
                   .rank = rank,
                   .rank_all = rank_all,
                   .shrink = rank_all ? SHRINK_OFF : shrink,
                   .threads = threads,
                   .eq = p->equalize ? &eq : NULL};
    // Each run's default where the caller gave none (CALIB_TOKENS above); a given calib_tokens
    // / calib_ctx is every run's (the sensitivity ranking reads one sequence: at most a window).
    const int stats = g4_qmethod_needs_calib(method) || p->equalize;
    const int n_stats = p->calib_tokens ? p->calib_tokens : CALIB_TOKENS;
    calib_plan cp = {.n_sens = p->calib_tokens ? p->calib_tokens : SENS_TOKENS,
                     .win = p->calib_ctx,
                     .given = p->calib_tokens != 0};
    if (!cp.win && stats) cp.win = CALIB_CTX;
    cp.n_load = stats ? n_stats : 0;
    if (p->keep_auto_bytes >= 0 && cp.n_sens > cp.n_load) cp.n_load = cp.n_sens;
    if (p->calib)
        rc = calibrate(in, p->backend ? p->backend : "cpu", p->calib, p->tokenizer, &cp,
                       p->keep_auto_bytes, threads, rep, p->progress, &keep, &n_keep, &owned,
                       &n_owned, method == G4_QM_IMATRIX ? &im : NULL,
                       g4_qmethod_needs_hessian(method) || rank > 0 || p->equalize ? &pq : NULL);
    g4_q4_write_opts o = {keep,
                          n_keep,
                          G4_Q4_BLOCK,
                          threads,
                          p->progress,
                          p->progress,
                          (const char *const *)im.names,
                          (const float *const *)im.imp,
                          (const float *const *)im.mean,
                          im.n,
                          method == G4_QM_RTN ? G4_QM_RTN : G4_QM_KQUANT,
                          pq.a,
                          pq.n,
                          eq.repl,
                          eq.n_repl};
    g4_q4_write_stats st;
    const double t_write = g4_progress_now();
    if (!rc) rc = g4_q4_write_package(in, out, &o, &st);
    const double t_written = g4_progress_now() - t_write;
    free(keep);
    g4_imatrix_free(&im);
    g4_imatrix_free(&pim);
    eq_state_free(&eq);
    for (int i = 0; i < pq.n; i++) g4_q4_arrays_free(&pq.a[i]);
    free(pq.a);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    if (rc) return rc;
    fprintf(rep,
            "%s: %d linears quantized to 4 bits (block %d, %d weights), %d kept fp16; decoder data "
            "%llu bytes\n",
            out, st.n_quantized, G4_Q4_BLOCK, st.n_weights, st.n_kept,
            (unsigned long long)st.data_bytes);
    if (g4_qmethod_needs_calib(method) || p->equalize)
        fprintf(rep, "calibrated: %d of %d weights quantized from calibration data (method %s%s)\n",
                st.n_calibrated, st.n_weights, g4_qmethod_name(method),
                p->equalize ? ", equalized" : "");
    if (p->calib) // (the writer quantizes what no calibration run did: kquant / rtn, r = 0)
        fprintf(rep, "time: package written %.1f s\n", t_written);
    g4_q4_write_stats_free(&st);
    return G4_OK;
}

int g4cu_dev_quantize(const char *in, const char *out, const g4cu_dev_quantize_params *p,
                      FILE *report) {
    g4cu_dev_quantize_params d;
    if (!p) g4cu_dev_quantize_params_default(&d), p = &d;
    if (!in || !out || !report)
        return g4_api_code(g4_fail(G4_EUSER, "g4cu_dev_quantize: in, out or report is NULL"));
    return g4_api_code(quantize(in, out, p, report));
}
