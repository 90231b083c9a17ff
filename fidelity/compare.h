// compare.h: tensor-by-tensor agreement between a run and a reference (an HF dump, another
// backend, an fp16 run vs a Q4 run), with a named tolerance per tensor.
#ifndef G4_COMPARE_H
#define G4_COMPARE_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    double max_abs; // max |a - b|
    double rel;     // ||a - b|| / ||b||  (b = reference)
    double cosine;  // <a, b> / (||a|| ||b||)
    size_t n;       // elements compared
    size_t nan;     // NaN or Inf in a where b is finite (always a failure)
    size_t ref_bad; // NaN or Inf in the reference b (always a failure: nothing is checked there)
    int argmax_agree_rows; // rows (of width row_len) whose argmax agrees; -1 when not computed
    int rows;
} g4_cmp_stats;

// Statistics of a against reference b (n elements, accumulated in double). When row_len > 0,
// also counts rows whose argmax agrees (for logits). A non-finite value on either side makes
// rel and max_abs infinite (cosine NaN), so no tolerance passes it.
g4_cmp_stats g4_cmp(const float *a, const float *b, size_t n, size_t row_len);

// Rows [start, start + count) of a [rows, row_len] tensor.
typedef struct {
    size_t start, count;
} g4_row_range;

// g4_cmp (no argmax) over the rows of ranges[n_ranges] only, accumulated the same way (in
// double, in row order within a range, the ranges in the order given): one range of every row
// gives g4_cmp's numbers bit for bit. Sets rows to the rows compared; with none, n = rows = 0,
// rel 0 and cosine 1 (nothing was compared: callers print no numbers for it).
g4_cmp_stats g4_cmp_rows(const float *a, const float *b, size_t row_len, const g4_row_range *ranges,
                         int n_ranges);

// The kinds of prompt positions a per-token tensor is split by: text (text tokens, the
// markers <|image> <image|> <|audio> <audio|> included: their rows come from the embedding
// table, as any text token's), image and audio (the soft-token rows: the positions of the
// image / audio placeholder id, where the towers' rows are merged).
enum { G4_SPAN_TEXT = 0, G4_SPAN_IMAGE = 1, G4_SPAN_AUDIO = 2, G4_SPAN_KINDS = 3 };
extern const char *const g4_span_names[G4_SPAN_KINDS]; // "text", "image", "audio"

// The runs of consecutive positions of kind in span[n], in order, as row ranges into out (room
// for n); returns how many.
int g4_span_ranges(const unsigned char *span, int n, int kind, g4_row_range *out);

// g4_cmp_rows of a [rows, row_len] tensor once per span kind, row r of kind row_kind[r]
// (each kind's runs of consecutive rows as its ranges): out[k].rows counts the rows of kind k.
void g4_cmp_spans(const float *a, const float *b, size_t row_len, const unsigned char *row_kind,
                  int rows, g4_cmp_stats out[G4_SPAN_KINDS]);

// Token ids compared row by row (logits_argmax), the reference's near ties allowed.
typedef struct {
    int rows;       // rows compared
    int equal;      // rows whose id equals the reference's
    int near_ties;  // rows that differ where the reference itself was undecided (g4_ids_judge)
    int real;       // rows that differ otherwise (a failure)
    int first_real; // the first such row, -1 when none
} g4_ids_stats;

// The reference's own margins, row by row (mm_reference.py's members): its top k ids and
// logits [rows, k] and the RMS of each logit row [rows]. With none (tie.k == 0) every differing
// row is real.
typedef struct {
    const float *top_ids, *top_vals, *row_rms;
    int k;
} g4_ids_ties;

// test and ref: one token id a row (exact in fp32 below 2^24). A differing row is a near tie
// when the reference ranks test's id among its top k with a logit within margin_rel x RMS(row)
// of its best: the multimodal parity's rule (tools/python/mm_parity.py), margin_rel = 2 x the
// backend's rel tolerance. Ids that are not finite are real differences.
g4_ids_stats g4_ids_judge(const float *test, const float *ref, int rows, const g4_ids_ties *tie,
                          double margin_rel);

typedef struct {
    char name[64];
    char tol_name[32]; // which named tolerance applied
    double tol;        // max allowed rel err
    g4_cmp_stats s;
    int shape_ok; // 0 when shapes differed (then s is empty)
    int has_ids;  // 1: a row of token ids, judged by ids (g4_ids_judge), not by rel err
    g4_ids_stats ids;
    int pass;
    // 1: a per-token tensor of a prompt with media (image or audio soft tokens): span[k] holds
    // the statistics of its rows of kind k (G4_SPAN_*; span[k].rows of them). Information only:
    // the verdict is the whole tensor's.
    int has_spans;
    g4_cmp_stats span[G4_SPAN_KINDS];
} g4_cmp_row;

typedef struct {
    g4_cmp_row *rows;
    int n, cap;
} g4_cmp_report;

void g4_cmp_report_add(g4_cmp_report *r, const g4_cmp_row *row);
void g4_cmp_report_free(g4_cmp_report *r);
// 1 when every row passed.
int g4_cmp_report_ok(const g4_cmp_report *r);
// Fixed-width table on f: tensor, max abs err, rel err, cosine, tolerance, verdict.
void g4_cmp_report_print(const g4_cmp_report *r, FILE *f);
// With media (a row with spans): the rows of each span kind, rel err and cosine per kind, one
// line a tensor with spans, after a line naming the prompt's spans (span[n_tokens]: each
// position's kind). Prints nothing when no row has spans.
void g4_cmp_report_print_spans(const g4_cmp_report *r, const unsigned char *span, int n_tokens,
                               FILE *f);
// "text 16 (0-5, 272-277, 315-318), image 266 (6-271), audio 37 (278-314)": each kind's
// positions of span[n] and their runs (at most 4 a kind, then "..."), into buf.
void g4_span_summary(const unsigned char *span, int n, char *buf, size_t size);

#endif
