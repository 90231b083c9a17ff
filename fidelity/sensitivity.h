// sensitivity.h: which decoder linears does 4-bit quantization hurt most? Quantizes ONE linear
// at a time in memory (quant/kquant.h: the same k-quant search and bytes `g4cu quantize` writes;
// everything else stays as loaded), runs the model on the ids and measures the logits'
// KL(p_base || p_one_q4) against the unmodified run. The ranking is the lever for choosing
// `g4cu quantize --keep` patterns.
//
// No package is written: each linear is quantized once into host buffers we own (on a device
// backend, copied there while bound), bound into the loaded g4_text_model in place of its fp16
// binding for one forward, then the fp16 binding is restored.
//
// Passes (F = one forward of the ids):
//   1. the unmodified run (the baseline logits), through a wrapped op table that also computes
//      x @ Wq beside x @ W at every candidate: each linear's own output error (out_rel) on the
//      inputs the f16 run gives it, for all candidates in one F;
//   2. one F per decoder layer with all its candidates quantized together, and one for lm_head:
//      layer_kl, the layer's sensitivity (the unit of --keep 'model.layers.N.*' patterns);
//   3. one F per linear: kl_mean, kl_max, top-1 agreement.
// Cost: (1 + L + 1 + n) F plus quantizing each candidate once; the quantized candidates stay
// in host memory until the end (the size of the Q4 decoder: ~1.5 GB on E2B). To make large
// models affordable, `top` limits pass 3 to the top linears in the order (layer_kl, out_rel):
// the most sensitive layers first, by their own output error within a layer; the filters
// restrict the candidates by layer or by name.
#ifndef G4_SENSITIVITY_H
#define G4_SENSITIVITY_H

#include <stdint.h>
#include <stdio.h>

#include "engine/text_model.h"
#include "fidelity/report.h"

typedef struct {
    int top;           // > 0: pass 3 only for the first `top` linears (0: all)
    const int *layers; // candidates in these decoder layers ...
    int n_layers;
    const char *const *only; // ... or whose weight name matches one of these globs (fnmatch;
    int n_only;              //     with or without the "decoder." prefix); no filter: all
    int n_threads;           // quantizer threads (>= 1)
    FILE *progress;          // progress of the forwards (base/progress.h); NULL: none
} g4_sens_opts;

// Decoder linears of m, in layer order then lm_head (q, k, v on KV-owning layers only, o,
// gate, up, down, per_layer_input_gate, per_layer_projection), filtered by o; linears the
// package already stores as Q4 are not candidates (*n_skipped_q4 counts them). Runs the
// analysis on ids[n] (prefill) and returns the rows sorted (g4_report_sort_sens) in a new array.
// Errors: no candidate left, ids out of range, a weight the package lacks.
int g4_sensitivity_run(g4_text_model *m, const int32_t *ids, int n, const g4_sens_opts *o,
                       g4_sens_row **rows, int *n_rows, int *n_skipped_q4);

// The fp16 decoder linears of m in the order above (no filter): rows[n] with name, kind,
// layer, K and N set (the rest zero / NaN), a new array; *n_q4: those the package stores as Q4
// (not listed).
int g4_decoder_linears(g4_text_model *m, g4_sens_row **rows, int *n, int *n_q4);

// The calibration forwards of the imatrix and Hessian runs read ids[n] as one sequence (win 0),
// or, win > 0, as windows of win tokens (the last one shorter), each a fresh sequence whose
// first token is ids[0] (<bos>), as g4cu perplexity's chunks: a model trained on short windows
// then sees the positions it was trained on (one 2048-token sequence is 4x the proxy's 512).

// The imatrix (llama.cpp's activation importance): one forward of ids[n] (in windows of win
// tokens, win > 0) through a probe op table that sums x^2 and x over the rows of every fp16
// decoder linear's input; out->imp[i][k] is
// the mean x^2 and out->mean[i][k] the mean x of input channel k of linear out->names[i]
// ("model.layers.3.mlp.down_proj.weight_t", [K = out->K[i]]). Free with g4_imatrix_free.
typedef struct {
    int n;
    char **names;
    float **imp;
    float **mean; // [n][K] the mean x of each input channel
    int *K;
} g4_imatrix;
int g4_imatrix_run(g4_text_model *m, const int32_t *ids, int n, int win, g4_imatrix *out);
void g4_imatrix_free(g4_imatrix *im);

// The layer-output loss of every fp16 decoder linear (GPTQ's Hessian): H = X^T X, K x K floats
// (both triangles), summed over the rows of the linear's input in a forward of ids[n] in which
// every row reaches every linear (the lm_head included). Each H goes to cb with the weight's
// name and its fp16 [K, N] data in the mapped package, then is freed. Linears are gathered into
// forwards of at most max_floats floats of H together, at least one each: memory holds
// max(max_floats, the largest K^2) floats of H at a time. *n_linears: how many reached cb.
// A linear that receives no input, or cb's nonzero return, stops the run with that error.
typedef int (*g4_hessian_cb)(void *ctx, const char *name, const void *w_f16, int K, int N,
                             float *H);
typedef struct {
    uint64_t max_floats; // H floats held at once (above)
    int win;             // calibration windows (above); 0: one sequence
    int max_k;           // > 0: only the linears of K <= max_k (the rest never reach cb and
                         // cost no X^T X); 0: every linear
    int fold_span;       // > 0: two folds of the rows, alternate spans of fold_span rows by the
                         // row's place in the calibration (rows 0 .. span - 1 fold a, the next
                         // span fold b, ...); cb's H then holds 2 K x K floats, fold a's X^T X
                         // then fold b's (their sum is the plain H up to the order of the
                         // additions); 0: one H (as above)
} g4_hessian_opts;
int g4_hessian_run(g4_text_model *m, const int32_t *ids, int n, const g4_hessian_opts *o,
                   g4_hessian_cb cb, void *ctx, int *n_linears);

// H [K, K] += x^T x for x [rows, K] (row-major floats), on g4_threads() threads: the Hessian
// run's accumulation, one block of a linear's input rows at a time.
void g4_xtx_add(float *H, const float *x, int rows, int K);

#endif
