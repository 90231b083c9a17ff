// report.h: the reports of `g4cu compare` in its three modes, written as a terminal table,
// Markdown (--md), JSON (--json) and an SVG chart (--svg):
//   hf-dump      a run against an HF reference dump: per tensor max abs / rel err / cosine
//                against a named tolerance, plus the logits' KL;
//   packages     a test package (Q4, mixed precision) against a reference package (f16) on the
//                same ids: per tensor errors of the test run against the reference run, the
//                logits' KL(p_ref || p_test) per position and top-1 agreement;
//   sensitivity  one decoder linear at a time quantized in memory: linears ranked by the
//                logit KL each one causes (fidelity/sensitivity.h).
// The chart plots rel err (sensitivity: KL) per decoder layer on a log scale, one line per
// tensor kind, with the inputs (embeddings) and outputs (final norm, logits) as markers, one
// panel per component.
#ifndef G4_REPORT_H
#define G4_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "fidelity/compare.h"
#include "fidelity/kl.h"

typedef enum {
    G4_REPORT_HF_DUMP = 0,
    G4_REPORT_PACKAGES = 1,
    G4_REPORT_SENSITIVITY = 2,
} g4_report_mode;

// One decoder linear of a sensitivity run.
typedef struct {
    char name[112]; // weight name as the package stores it, "model.layers.3.mlp.down_proj.weight_t"
    char kind[32];  // "q_proj" ... "per_layer_projection", "lm_head"
    int layer;      // decoder layer; -1 for lm_head
    int K, N;       // [in, out]
    int evaluated;  // 1 when the model ran with this linear quantized (else proxy only)
    double kl_mean, kl_max; // KL(p_f16 || p_one_q4) over positions (evaluated only)
    int top1_agree;         // positions whose argmax kept the f16 run's (evaluated only)
    double layer_kl;        // KL mean with every candidate linear of its layer quantized together
                            // (lm_head: alone, so layer_kl == kl_mean)
    double out_rel; // ||x Wq - x W|| / ||x W|| of this linear's own output on its f16-run input
    double w_rel;   // ||Wq - W|| / ||W|| (weight space)
} g4_sens_row;

typedef struct {
    g4_report_mode mode;
    const char *reference; // packages: the reference (f16) package; hf-dump: the dump;
                           // sensitivity: the package
    const char *test;      // packages: the test package; hf-dump: the package; else NULL
    const char *backend;   // "cpu", "cuda"
    const int32_t *ids;    // the input token ids
    int n_ids;
    const unsigned char *span;    // hf-dump with media: [n_ids] each position's G4_SPAN_* kind
                                  // (the rows with has_spans are split by it); else NULL
    int n_layers;                 // decoder layers (chart x axis)
    const g4_cmp_report *tensors; // per-tensor rows in run order (NULL in sensitivity mode)
    const int *shapes;            // [tensors->n][2]: rows, cols of each tensor (or NULL)
    int has_tolerance;            // hf-dump: rows carry a tolerance and a verdict
    const char *const *missing;   // hf-dump: dump members the engine did not produce
    int n_missing;
    const g4_kl_stats *kl;   // the logits' KL and top-1 agreement (NULL when not computed)
    const g4_sens_row *sens; // sensitivity rows, evaluated ones first by KL (descending)
    int n_sens;
} g4_report;

// Where a tensor of the engine's hook sits on the chart: component ("text"; a "vision_" or
// "audio_" prefix names a tower, as in the multimodal reference dumps), kind ("q", "k", "v",
// "layer", "ffn1", ...: a "<kind>_<i>" name; otherwise the name without the prefix) and
// position: G4_REPORT_AT_LAYER with *layer = i, or before the layers (embeddings, patch
// embeddings, subsampling) or after them (final_norm, logits, pooled, soft_tokens,
// output_proj).
enum { G4_REPORT_AT_IN = 0, G4_REPORT_AT_LAYER = 1, G4_REPORT_AT_OUT = 2 };
int g4_report_classify(const char *name, char *component, size_t comp_size, char *kind,
                       size_t kind_size, int *layer);

// Sorts sensitivity rows: evaluated first by KL mean descending, then the rest by layer_kl
// and out_rel descending; ties by name, so the order never depends on the input order.
void g4_report_sort_sens(g4_sens_row *rows, int n);
// qsort-style "descending" comparison of two values where NaN (a broken run) ranks first.
int g4_report_cmp_desc(double a, double b);

// Terminal table (packages and sensitivity modes; hf-dump keeps g4_cmp_report_print) and the
// KL summary lines for every mode.
void g4_report_print(const g4_report *r, FILE *f);
void g4_report_print_kl(const g4_report *r, FILE *f);

// The files. Each is written atomically; errors name the path.
int g4_report_write_md(const g4_report *r, const char *path);
int g4_report_write_json(const g4_report *r, const char *path);
int g4_report_write_svg(const g4_report *r, const char *path);

// Text of the formats (new strings; for tests and the writers).
char *g4_report_md(const g4_report *r);
char *g4_report_json(const g4_report *r);
char *g4_report_svg(const g4_report *r);

#endif
