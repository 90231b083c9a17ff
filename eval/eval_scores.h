// eval_scores.h: a task's score over a set of predictions, as lmms-eval aggregates it, with a
// per-category breakdown and timing totals; written as JSON and Markdown.
//
//   ocrbench     ocrbench_accuracy = sum of 0/1 scores / items (the DelwinKim fork the benchmark
//                used; equals upstream's sum / 1000 on the full 1000-item set) and
//                ocrbench_raw_score = the sum; categories are OCRBench's question types, plus
//                upstream's "Text Recognition" group (the six recognition types together)
//   docvqa       anls = mean of per-question ANLS
//   chartqa      relaxed_overall = mean of 0/1; relaxed_human_split / relaxed_augmented_split
//                over the items whose category is human_test / augmented_test
//   librispeech  wer = 100 * sum of word edits / sum of reference words over the corpus (never a
//                mean of per-utterance or per-shard WERs); per category the same, over that
//                category's utterances
// Sums run over the items in manifest order whatever order the predictions came in, so a merged
// sharded run gives bit for bit the score of the unsharded run.
#ifndef G4_EVAL_SCORES_H
#define G4_EVAL_SCORES_H

#include <stdint.h>

#include "eval/manifest.h"
#include "eval/predictions.h"

typedef struct {
    char *name;
    int count;
    double sum;               // sum of per-item scores (0/1 or ANLS)
    int64_t edits, ref_words; // librispeech
    double value;             // the category's metric (NaN when undefined: WER over no words)
} g4_eval_category;

typedef struct {
    char *id;
    double score;             // 0/1, ANLS, or this utterance's WER % (NaN when it has no words)
    int64_t edits, ref_words; // librispeech
} g4_eval_item_score;

typedef struct {
    int n; // items with a statistic
    double item_ms, prefill_ms, decode_ms;
    int64_t prompt_tokens, new_tokens, decode_tokens; // decode_tokens: new tokens after the first
    int stops[4];                                     // by g4_stop_reason
} g4_eval_timing;

typedef struct {
    const g4_eval_task *task;
    int count;
    int failed;                // items recorded as failed (scored as empty responses)
    double value;              // the headline metric (task->metric)
    double sum;                // sum of per-item scores (not librispeech)
    int64_t edits, ref_words;  // librispeech
    g4_eval_item_score *items; // [count] in manifest order
    g4_eval_category *cats;    // [n_cats] in order of first appearance
    int n_cats;
    // chartqa's split means (NaN when the split has no items)
    double human_split, augmented_split;
    int n_human, n_augmented;
    // ocrbench's "Text Recognition" group (the six recognition question types)
    int text_recognition_count;
    double text_recognition_sum;
    g4_eval_timing timing;
} g4_eval_scores;

// Scores the selected manifest items (sel[0..n_sel), manifest indices) with preds[k] the
// prediction of item sel[k]. Errors: a scorer's (invalid UTF-8, a LibriSpeech corpus whose
// references hold no words).
int g4_eval_score(const g4_eval_manifest *m, const int *sel, int n_sel,
                  const g4_eval_pred *const *preds, g4_eval_scores *out);
void g4_eval_scores_free(g4_eval_scores *s);

// Pairs the selected items with predictions from one or more files: every selected id must be
// predicted exactly once, and every prediction must be of a selected item. *preds is a new
// array [n_sel] of pointers into files. Errors name the file, the line and the id (and, for
// missing ids, how many are missing and the first one).
int g4_eval_match(const g4_eval_manifest *m, const int *sel, int n_sel, const g4_eval_preds *files,
                  int n_files, const g4_eval_pred ***preds);

// Where a run's time went, in seconds of wall time on the stepping thread unless said (an
// asynchronous backend's device work is counted where the host waits for it: a tower's end, a
// prefill's last chunk, a decode step's ids).
typedef struct {
    int batch;          // items at once (1: one at a time)
    int prep_threads;   // front-end workers running ahead (0: the front ends on this thread)
    double frontend_s;  // media decode + features on the host (summed over the workers)
    double prep_wait_s; // this thread waiting for a worker's front end
    double tower_s;     // the image / audio towers
    double prompt_s;    // the rest of an item's setup: chat template, tokenizer, its state
    // prefill and decode; with --batch the batch's g4_batch_stats (decode_s there + accept_s)
    double prefill_s, decode_s;
    double lines_s; // predictions lines: response text, JSON, append + fsync
    double items_s; // all the items, start to end
    double score_s; // reading the predictions back, scoring, writing the scores (known
                    // after the scores file is written: not in it)
    int states, states_grown; // text states made, and grown for a longer item (in prompt_s)
} g4_eval_split;

// What a scores file records about the run besides the scores.
typedef struct {
    const char *manifest;          // path
    const char *const *pred_files; // [n_pred_files]
    int n_pred_files;
    int manifest_items;            // items in the manifest
    int limit;                     // 0: none
    int shard_i, shard_n;          // shard_n 0: not a shard (unsharded run, or a merge)
    int merged_shards;             // eval-merge: the number of prediction files merged
    int max_new;                   // max_new_tokens used
    int keep_stop;                 // 1: lmms-eval's "\n\n" stop was active
    const char *package, *backend; // NULL when not known (eval-merge of foreign predictions)
    double wall_s;                 // this process's wall time for the items (0: not known)
    const g4_eval_split *split;    // where it went (NULL: not known, as in eval-merge)
} g4_eval_meta;

// The scores as one JSON document (new string) and as Markdown (new string).
char *g4_eval_scores_json(const g4_eval_scores *s, const g4_eval_meta *meta);
char *g4_eval_scores_md(const g4_eval_scores *s, const g4_eval_meta *meta);
// Writes <dir>/<stem>.json and <dir>/<stem>.md (each atomically).
int g4_eval_scores_write(const char *dir, const char *stem, const g4_eval_scores *s,
                         const g4_eval_meta *meta);

#endif
