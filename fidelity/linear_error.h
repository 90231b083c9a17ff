// linear_error.h: which decoder linears each quantization method helps (issue 33). For a
// reference package (f16) and one or more packages of the same model (Q4 by some method, some
// linears perhaps kept fp16), each linear's relative layer-output error on calibration text:
//
//   e = tr(dW^T H dW) / tr(W^T H W) = ||X dW||^2 / ||X W||^2
//   W  [K, N]  the reference's weight; dW = dequant(test) - W
//   H  [K, K]  X^T X of the reference model's inputs to that linear (g4_hessian_run: the
//              matrix gptq / fit quantize against), X [rows, K]
//
// the loss gptq and fit minimise, per linear, so a method's e below k-quant's on a linear is
// that method helping there. A linear the test package keeps fp16 is "kept" (e = 0 when its
// weight is the reference's, as `quantize --keep` / --keep-auto copy it).
//
// Memory: the test packages are mapped, never copied; H comes from the Hessian run a group of
// linears at a time (at most max(max_floats, the largest K^2) floats of H, as `g4cu quantize`
// holds), and every package's e of a linear is computed from the one H before it is freed.
#ifndef G4_LINEAR_ERROR_H
#define G4_LINEAR_ERROR_H

#include <stdint.h>
#include <stdio.h>

#include "engine/text_model.h"
#include "loader/package.h"

typedef struct {
    char name[112]; // "model.layers.3.mlp.down_proj.weight_t", "lm_head.weight_t"
    char kind[32];  // "q_proj" ... "per_layer_projection", "lm_head"
    int layer;      // decoder layer; -1 for lm_head
    int K, N;       // [in, out]
    double ref;     // tr(W^T H W)
    double *e;      // [n_pkgs] the relative layer-output error in each test package
    uint8_t *kept;  // [n_pkgs] 1: that package stores this linear fp16
} g4_linerr_row;

typedef struct {
    char *reference; // the f16 package
    int n_pkgs;
    char **pkgs;  // the test packages; pkgs[0] is the baseline of the ratios (k-quant)
    char **names; // [n_pkgs] short names: each package's directory's last component
    int n_ids;    // calibration tokens (rows of X)
    int n_layers; // decoder layers
    int n_rows;
    g4_linerr_row *rows; // the Hessian run's order: layer by layer, then lm_head
    double seconds;      // the Hessian run and the error sums
} g4_linerr;

// Runs the reference model m (loaded from ref_dir, every decoder linear fp16) on ids[n] and
// fills out. Errors (one line, G4_EUSER): a reference holding Q4 linears, a test package that
// does not open, is another model (layers, hidden, vocab) or lacks a linear or holds it at
// another shape (the first one, named), or holds other bytes in a weight it shares by name with
// the reference (g4_linerr_same_inputs: quantize --equalize's norms).
int g4_linerr_run(g4_text_model *m, const char *ref_dir, const char *const *pkgs, int n_pkgs,
                  const int32_t *ids, int n, uint64_t max_floats, g4_linerr *out);
void g4_linerr_free(g4_linerr *r);

// Whether test's linears read the reference's inputs: the reference decoder's initializers that
// test holds under the same name (the linears' W the Q4 writer replaced are absent there), each
// the same dtype and bytes (n_same) or not (n_diff; first: the first such, by the reference's
// name). A package made with `quantize --equalize` differs in the norms the 1/s is folded into:
// its linears take x / s and hold s W, so tr(dW^T H dW) against the reference's W and H measures
// the scaling, not the quantization (e up to ~8 on the tiny fixture), and g4_linerr_run refuses
// it.
// Not seen here: an equalization whose only non-zero alpha is down_proj's (its 1/s goes into
// up_proj's Q4 columns, no norm; G4_EQUALIZE_GROUPS=down): the package records no scales.
int g4_linerr_same_inputs(const g4_component *ref, const g4_component *test, int *n_same,
                          int *n_diff, const char **first);

// Package p's figures over the rows of one kind (NULL: any) and one layer (G4_LINERR_ANY: any):
// n linears, kept (stored fp16), mean e, the geometric mean of e / e(pkgs[0]) over the linears
// quantized in both (n_geo; 0: none), below: linears with e < e(pkgs[0]).
#define G4_LINERR_ANY (-2)
typedef struct {
    int n, kept, n_geo, below;
    double mean_e, geo_ratio;
} g4_linerr_sum;
void g4_linerr_summary(const g4_linerr *r, int p, const char *kind, int layer, g4_linerr_sum *s);

// The terminal summary (by package, by kind, by layer), and the files as new strings:
// Markdown (the summaries and the table of every linear), TSV (one row per linear: name, kind,
// layer, K, N, then e and e / e0 per package, "kept" for a kept linear's e), JSON (every
// number, unrounded) and SVG (the per-layer mean e of each package, lm_head after the layers;
// by_kind: one panel per kind, e per layer).
void g4_linerr_print(const g4_linerr *r, FILE *f);
char *g4_linerr_md(const g4_linerr *r);
char *g4_linerr_tsv(const g4_linerr *r);
char *g4_linerr_json(const g4_linerr *r);
char *g4_linerr_svg(const g4_linerr *r, int by_kind);

#endif
