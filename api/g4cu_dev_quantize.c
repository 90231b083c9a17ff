// g4cu_dev_quantize.c: `g4cu quantize` (include/g4cu_dev.h g4cu_dev_quantize): k-quant the
// decoder's linears into a Q4 (MatMulNBits) package, the way Olive made the published "Q4_K_M"
// packages (quant/q4_writer.h). keep_auto_bytes also keeps fp16 the linears whose 4 bits cost
// the most KL per byte (fidelity/keep_auto.h), ranked by a sensitivity run (fidelity/
// sensitivity.h) on the first calib_tokens tokens of the calibration text; imatrix weighs each
// block's search by the mean x^2 (and mean x) of the linear's input channels (llama.cpp's
// imatrix: g4_imatrix_run, kquant.h g4_q4_quantize_imx).
#include <g4cu_dev.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "base/parallel.h"
#include "engine/text_model.h"
#include "fidelity/keep_auto.h"
#include "fidelity/sensitivity.h"
#include "kernels/backend_select.h"
#include "loader/tokenizer.h"
#include "quant/kquant.h"
#include "quant/methods.h"
#include "quant/q4.h"
#include "quant/q4_writer.h"

int g4_api_calib_ids(const char *path, const char *tok_path, int n_max, int32_t **ids, int *n) {
    char *text;
    size_t len;
    int rc = g4_read_file(path, &text, &len);
    if (rc) return rc;
    // the first 64 KiB (as before), or 16 bytes a token for a long calibration (16,384 tokens
    // of the proxy's 8k vocabulary need ~70 KB of its corpus)
    const size_t cap = n_max > 4096 ? (size_t)n_max * 16 : 65536;
    if (len > cap) {
        len = cap;
        while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80) len--;
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
static int gptq_damp(float *out) {
    const char *v = getenv("G4_GPTQ_DAMP");
    *out = 0.01f;
    if (!v || !*v) return G4_OK;
    char *end;
    const double d = strtod(v, &end);
    if (*end || !(d > 0 && d <= 100))
        return g4_fail(G4_EUSER, "G4_GPTQ_DAMP '%s': expected a number in (0, 100]", v);
    *out = (float)d;
    return G4_OK;
}

// G4_IMATRIX_RANK=r (issue 33): --method imatrix's search with the inputs' centred covariance's r
// leading directions beside the mean (kquant.h g4_q4_quantize_imx_dirs; the directions from
// each linear's X^T X, so a Hessian run follows the imatrix run; a linear of K < r takes K).
// 0: the mean alone, bit-identical to the search before the directions. Unset: IMATRIX_RANK
// directions for the linears whose K is at most the calibration tokens / IMATRIX_TOKENS_PER_K,
// the rest theirs read against the sampling noise (G4_IMATRIX_SHRINK below; none under
// G4_IMATRIX_SHRINK=0); set (r > 0): r for every linear, unshrunk (A/B runs). Two tiny trained models, mean
// KLD vs k-quant (bench/FIDELITY.md "--imatrix with the inputs' leading correlations"), r = 0
// -> 32 on every linear: 128 tokens -28.7 -> -26.7% and -23.3 -> -17.8% (directions from too
// few tokens hurt), 256 -27.2 -> -31.2% and -22.2 -> -26.0%, 1024 -29.2 -> -37.0% and
// -22.9 -> -31.8%.
#define IMATRIX_RANK         32
#define IMATRIX_TOKENS_PER_K 4
static int imatrix_rank(int *out, int *all) {
    const char *v = getenv("G4_IMATRIX_RANK");
    *out = IMATRIX_RANK, *all = 0;
    if (!v || !*v) return G4_OK;
    *all = 1;
    char *end;
    const long r = strtol(v, &end, 10);
    if (*end || r < 0 || r >= G4_IMX_MAX_DIRS)
        return g4_fail(G4_EUSER, "G4_IMATRIX_RANK '%s': expected an integer 0 to %d", v,
                       G4_IMX_MAX_DIRS - 1);
    *out = (int)r;
    return G4_OK;
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

static int prequant_one(void *ctx, const char *name, const void *w, int K, int N, float *H) {
    prequant *pq = ctx;
    if (K > pq->k_max) pq->k_max = K;
    if (K > pq->n_tokens) pq->n_thin++;
    // pq->im's entry for this linear: imatrix's, and gptq_imx's under G4_GPTQ_IMX=mean
    int i = -1;
    if (pq->method == G4_QM_IMATRIX || (pq->method == G4_QM_GPTQ_IMX && gptq_imx_mean())) {
        i = 0;
        while (i < pq->im->n && strcmp(pq->im->names[i], name)) i++;
        if (i == pq->im->n || pq->im->K[i] != K)
            return g4_fail(G4_EINTERNAL, "%s: %s [%d, %d] has no importance of K %d",
                           g4_qmethod_name(pq->method), name, K, N, K);
    }
    const g4_q4_shape sh = g4_q4_shape_of(K, N, G4_Q4_BLOCK);
    g4_q4_arrays a = {g4_strdup(name), K, N, g4_malloc((size_t)sh.q_bytes),
                      g4_malloc(sizeof(uint16_t) * (size_t)sh.n_scales), g4_malloc((size_t)sh.zp_bytes)};
    int rc;
    if (pq->method == G4_QM_IMATRIX) {
        // the directions from this X^T X (calibrate's max_k: under SHRINK_OFF only the linears
        // that take them reach here; every linear otherwise)
        const int r = pq->rank < K ? pq->rank : K; // no more directions than inputs
        float *V = r ? g4_malloc(sizeof(float) * (size_t)r * (size_t)K) : NULL;
        // the rows X^T X summed (windows may add a <bos> each): trace(H) over the sum of mean x^2
        double th = 0, ti = 0;
        for (int k = 0; k < K; k++) th += H[(size_t)k * K + k], ti += pq->im->imp[i][k];
        const double rows = ti > 0 ? th / ti : pq->n_tokens;
        const int thin = (long)K * IMATRIX_TOKENS_PER_K > pq->n_tokens;
        int used = r;
        rc = G4_OK;
        if (r && (pq->shrink == SHRINK_ALL || (pq->shrink == SHRINK_THIN && thin))) {
            rc = g4_cov_dirs_shrunk(H, rows, pq->im->mean[i], K, r, V, &used);
            pq->n_shrunk++, pq->dirs_sum += used;
        } else if (r) {
            rc = g4_cov_dirs(H, rows, pq->im->mean[i], K, r, V);
            pq->n_dirs++;
        }
        if (!rc)
            rc = g4_q4_quantize_imx_dirs(w, G4_DT_FLOAT16, K, N, G4_Q4_BLOCK, pq->threads,
                                         pq->im->imp[i], pq->im->mean[i], used, V, a.q, a.scales,
                                         a.zp);
        free(V);
    } else if (pq->method == G4_QM_GPTQ || pq->method == G4_QM_GPTQ_IMX) {
        g4_gptq_opts go = {pq->damp, pq->act_order, 0, NULL, NULL, 0};
        float *diag = NULL;
        if (i >= 0) { // G4_GPTQ_IMX=mean
            go.imp = pq->im->imp[i], go.mean = pq->im->mean[i];
        } else if (pq->method == G4_QM_GPTQ_IMX) { // g4_q4_gptq overwrites H: a copy
            diag = g4_malloc(sizeof(float) * (size_t)K);
            for (int k = 0; k < K; k++) diag[k] = H[(size_t)k * K + k];
            go.imp = diag;
        }
        go.screen = pq->method == G4_QM_GPTQ_IMX && !g4_env_is("G4_GPTQ_IMX", "pick");
        rc = g4_q4_gptq(w, G4_DT_FLOAT16, K, N, G4_Q4_BLOCK, H, &go, a.q, a.scales, a.zp);
        free(diag);
    } else {
        rc = g4_q4_fit(w, G4_DT_FLOAT16, K, N, G4_Q4_BLOCK, H, a.q, a.scales, a.zp);
    }
    if (rc) {
        g4_error_prefix("%s", name);
        g4_q4_arrays_free(&a);
        return rc;
    }
    pq->a = g4_realloc(pq->a, sizeof(g4_q4_arrays) * (size_t)(pq->n + 1));
    pq->a[pq->n++] = a;
    return G4_OK;
}

// Appends to keep[] the names of the linears --keep-auto picks (new strings in *owned).
// The calibration runs: --keep-auto's sensitivity ranking (budget >= 0), --imatrix's
// activation importance (im != NULL) and gptq / fit's X^T X (pq != NULL), on one loaded model.
static int calibrate(const char *pkg_dir, const char *backend, const char *calib,
                     const char *tok_path, int n_tokens, int win, long long budget, int threads,
                     FILE *rep, FILE *progress, const char ***keep, int *n_keep, char ***owned,
                     int *n_owned, g4_imatrix *im, prequant *pq) {
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_sens_row *rows = NULL;
    int32_t *ids = NULL;
    int n = 0, n_rows = 0, n_q4 = 0, rc;
    g4_backend *be = NULL;
    char *tp = tok_path ? g4_strdup(tok_path) : g4_path_join(pkg_dir, "tokenizer.json");
    if ((rc = g4_api_calib_ids(calib, tp, n_tokens, &ids, &n)) ||
        (rc = g4_backend_by_name(backend, &be)) || (rc = g4_package_open(pkg_dir, &p)) ||
        (rc = g4_text_model_load(p, be, &m)))
        goto done;
    char how[64] = "";
    if (win > 0) snprintf(how, sizeof how, " in windows of %d", win);
    if (im) {
        if ((rc = g4_imatrix_run(m, ids, n, win, im))) goto done;
        fprintf(rep, "imatrix: activation importance of %d linears from %d tokens%s of %s\n", im->n,
                n, how, calib);
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
        const int max_k = pq->method == G4_QM_IMATRIX && !pq->rank_all && pq->shrink == SHRINK_OFF
                              ? n / IMATRIX_TOKENS_PER_K
                              : 0;
        const g4_hessian_opts ho = {HESSIAN_FLOATS, win, max_k};
        pq->n_tokens = n;
        if ((rc = g4_hessian_run(m, ids, n, &ho, prequant_one, pq, &n_lin))) goto done;
        char damp[48] = "";
        if (pq->damp != 0.01f) snprintf(damp, sizeof damp, ", damping %g", pq->damp);
        char rk[160] = "";
        if (pq->method == G4_QM_IMATRIX)
            snprintf(rk, sizeof rk,
                     ", %d covariance directions for %d, %ld past the sampling noise for %d "
                     "(G4_IMATRIX_RANK, G4_IMATRIX_SHRINK)",
                     pq->rank, pq->n_dirs, pq->dirs_sum, pq->n_shrunk);
        fprintf(rep, "%s: X^T X of %d linears from %d tokens%s of %s%s%s\n",
                g4_qmethod_name(pq->method), n_lin, n, how, calib, damp, rk);
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
    if ((rc = g4_sensitivity_run(m, ids, n, &so, &rows, &n_rows, &n_q4))) goto done;
    int *picked = g4_calloc((size_t)n_rows, sizeof(int));
    uint64_t used = 0;
    int kept = g4_keep_auto_pick(rows, n_rows, (uint64_t)budget, G4_Q4_BLOCK, picked, &used);
    *owned = g4_malloc(sizeof(char *) * (size_t)(kept > 0 ? kept : 1));
    *keep = g4_realloc(*keep, sizeof(char *) * (size_t)(*n_keep + kept + 1));
    fprintf(rep,
            "keep-auto: %d linears kept fp16 for %llu of %lld extra bytes (sensitivity on %d "
            "tokens of %s):\n",
            kept, (unsigned long long)used, budget, n, calib);
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
    *p = (g4cu_dev_quantize_params){.keep_auto_bytes = -1, .calib_tokens = 256, .backend = "cpu"};
}

static int quantize(const char *in, const char *out, const g4cu_dev_quantize_params *p, FILE *rep) {
    g4_qmethod method = G4_QM_KQUANT;
    int rc = p->method ? g4_qmethod_parse(p->method, &method) : G4_OK;
    if (rc) return rc;
    if (p->imatrix && method != G4_QM_KQUANT && method != G4_QM_IMATRIX)
        return g4_fail(G4_EUSER, "quantize: imatrix with method '%s': imatrix is a method of its "
                                 "own (method imatrix)",
                       p->method);
    if (p->imatrix) method = G4_QM_IMATRIX;
    if (p->gptq_act_order && method != G4_QM_GPTQ && method != G4_QM_GPTQ_IMX)
        return g4_fail(G4_EUSER,
                       "quantize: act-order with method '%s': it is gptq's and gptq_imx's option",
                       g4_qmethod_name(method));
    if ((p->keep_auto_bytes >= 0 || g4_qmethod_needs_calib(method)) != (p->calib != NULL))
        return g4_fail(G4_EUSER, "quantize: keep_auto_bytes and the methods imatrix, gptq, fit "
                                 "and gptq_imx need a calibration text (and the text one of them)");
    if (p->calib && (p->calib_tokens < 8 || p->calib_tokens > (1 << 20)))
        return g4_fail(G4_EUSER, "quantize: calib_tokens %d: expected 8 to %d", p->calib_tokens,
                       1 << 20);
    if (p->calib_ctx != 0 && (p->calib_ctx < 8 || p->calib_ctx > (1 << 20)))
        return g4_fail(G4_EUSER, "quantize: calib_ctx %d: expected 0 (one sequence) or 8 to %d",
                       p->calib_ctx, 1 << 20);
    if (p->calib_ctx && !g4_qmethod_needs_calib(method))
        return g4_fail(G4_EUSER,
                       "quantize: calib_ctx with method '%s': it is the calibrated "
                       "methods' (imatrix, gptq, fit, gptq_imx)",
                       g4_qmethod_name(method));
    float damp = 0.01f;
    if ((method == G4_QM_GPTQ || method == G4_QM_GPTQ_IMX) && (rc = gptq_damp(&damp))) return rc;
    int rank = 0;
    int rank_all = 0;
    int shrink = SHRINK_OFF;
    if (method == G4_QM_IMATRIX &&
        ((rc = imatrix_rank(&rank, &rank_all)) || (rc = imatrix_shrink(&shrink))))
        return rc;
    const int threads = p->n_threads > 0 ? p->n_threads : g4_threads();
    const char **keep = g4_calloc((size_t)p->n_keep + 1, sizeof(char *));
    int n_keep = p->n_keep;
    for (int i = 0; i < n_keep; i++) keep[i] = p->keep[i];
    char **owned = NULL;
    int n_owned = 0;
    g4_imatrix im = {0};
    g4_imatrix pim = {0}; // gptq_imx's means (G4_GPTQ_IMX=mean)
    prequant pq = {.method = method,
                   .act_order = p->gptq_act_order,
                   .damp = damp,
                   .im = method == G4_QM_IMATRIX ? &im : &pim,
                   .rank = rank,
                   .rank_all = rank_all,
                   .shrink = rank_all ? SHRINK_OFF : shrink,
                   .threads = threads};
    if (p->calib)
        rc = calibrate(in, p->backend ? p->backend : "cpu", p->calib, p->tokenizer, p->calib_tokens,
                       p->calib_ctx, p->keep_auto_bytes, threads, rep, p->progress, &keep, &n_keep,
                       &owned, &n_owned, method == G4_QM_IMATRIX ? &im : NULL,
                       g4_qmethod_needs_hessian(method) || rank > 0 ? &pq : NULL);
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
                          pq.n};
    g4_q4_write_stats st;
    if (!rc) rc = g4_q4_write_package(in, out, &o, &st);
    free(keep);
    g4_imatrix_free(&im);
    g4_imatrix_free(&pim);
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
    if (g4_qmethod_needs_calib(method))
        fprintf(rep, "calibrated: %d of %d weights quantized from calibration data (method %s)\n",
                st.n_calibrated, st.n_weights, g4_qmethod_name(method));
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
