// g4cu_eval.h: measuring the model (libg4cu.so, next to g4cu.h): logits dumps, perplexity and
// task scores, the work behind `g4cu logits`, `g4cu perplexity`, `g4cu eval` and
// `g4cu eval-merge`. Each call opens the package it is given (its own backend, tokenizer and
// options, as the commands take them), does the whole job and closes it again: these are
// developer commands, in the manner of llama.cpp's llama_model_quantize, not a serving API.
//
// Errors follow g4cu.h: G4CU_OK, G4CU_EUSER (bad input, named in the message) or
// G4CU_EINTERNAL, with one line for g4cu_last_error(). The library never prints by itself:
// reports are returned as data for the caller to print; progress goes only where the caller
// says, through a callback (perplexity) or a FILE * it passes in (eval). Files are written
// only where a path is given.
#ifndef G4CU_EVAL_H
#define G4CU_EVAL_H

#include <g4cu.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

// --- logits --------------------------------------------------------------------------------
typedef struct {
    const char *backend;   // "cpu" or "cuda" (NULL: "cpu")
    const char *tokenizer; // where a lone media placeholder's begin / end ids come from (NULL:
                           // <package>/tokenizer.json)
    const char *image;     // an image file (PNG / JPEG) whose soft tokens go at the image
                           // placeholder ids (NULL: none)
    int image_tokens;      // the image's soft-token budget (HF's max_soft_tokens; 0: the
                           // package's image_processor.json)
    const char *audio;     // a sound file whose soft tokens go at the audio placeholder ids
    // Decode vs prefill on one backend (issue 35). 0: every row from one prefill (the default).
    // N >= 1: ids[0, N) go in as the prefill generate gives a prompt (rows 0..N-1 are its
    // logits), then each of ids[N, n) as ONE decode step of generate's (g4_text_step: on CUDA
    // the captured graph and the device sample op, which soft-caps the row in place), whose
    // logits row is read back as row t. N counts the ids as given (a lone placeholder expanded
    // before it moves it with the rows it adds); every media placeholder must lie before it.
    int decode_from;
    // decode_from > 0, not NULL: *step_logits gets row N - 1 as generate's last prompt step
    // computes it (the LM head on that row alone, the sample op's cap; the token generate
    // would pick first is its argmax), [*n_vocab] floats (malloc'ed: g4cu_free). The prefill's
    // own row N - 1 (all rows through the LM head, the softcap op) is row N - 1 of *logits.
    float **step_logits;
    // decode_from > 0, not NULL: *prefill_logits gets the plain prefill's logits of the same ids
    // on the same loaded model and soft tokens (what decode_from 0 returns), [*n_rows, *n_vocab]
    // (malloc'ed: g4cu_free): the package, the towers and the media are read once for both.
    float **prefill_logits;
    // decode_from > 0, not NULL: *sampled gets [*n_rows] ids (malloc'ed: g4cu_free): row t >= N - 1
    // the id generate's step picked after row t (the sample op on the device, greedy: the
    // argmax of the row it capped), -1 before N - 1. The sample op checked on the rows it read.
    int32_t **sampled;
} g4cu_eval_logits_params;
void g4cu_eval_logits_params_default(g4cu_eval_logits_params *p);

// A teacher-forced prefill of ids[n_ids] on the package in dir: *logits gets the soft-capped
// float32 logits of every position, [*n_rows, *n_vocab] row-major (malloc'ed: g4cu_free).
// With media, one placeholder id of a kind standing alone (not between its begin and end ids)
// is expanded as the chat template's one placeholder is (begin + n x placeholder + end, n the
// media's soft tokens, the begin / end ids from the tokenizer), so *n_rows may exceed n_ids;
// ids that already hold the n placeholders are used as they are. p NULL: the defaults.
// Errors: a missing tower or front-end config, a media file that does not decode, an id
// outside the vocabulary, a placeholder count that is not the media's (the message gives n);
// with decode_from: N outside 1..n_ids, a placeholder at or after N (the message gives both).
int g4cu_eval_logits(const char *dir, const int32_t *ids, int n_ids,
                     const g4cu_eval_logits_params *p, float **logits, int *n_rows,
                     int *n_vocab);

// Writes data, float32 [rows, cols] row-major, as a .npy file at path (NumPy format 1.0,
// little-endian '<f4'), after the output checks every g4cu output gets (never over an input
// package file, the parent directory must exist). rows x cols x 4 bytes may be at most
// G4CU_EVAL_NPY_MAX_BYTES (the size is the caller's word for what data holds: an overflowing or
// absurd one is refused before a byte is read).
#define G4CU_EVAL_NPY_MAX_BYTES (1ull << 40)
int g4cu_eval_write_npy(const char *path, const float *data, int rows, int cols);

// Reads a 2-D .npy of floats (float32, float16 or float64; NumPy format 1.x / 2.x) at path into
// *data, float32 [*rows, *cols] row-major (malloc'ed: g4cu_free), e.g. another run's logits
// from g4cu_eval_write_npy. Errors name the path: a file that is not .npy, not 2-D or not
// floats, or is empty.
int g4cu_eval_read_npy(const char *path, float **data, int *rows, int *cols);

// --- perplexity ----------------------------------------------------------------------------
// Called once with done 0 when the chunks start (the model is loaded), then after each chunk:
// done of total chunks, the perplexity of the tokens scored so far and the seconds since the
// call began (model loading included).
typedef void (*g4cu_ppl_progress_fn)(void *user, int done, int total, double ppl,
                                     double seconds);

typedef struct {
    const char *text;        // the text file to score (NULL: only with kl_base, whose tokens
                             // are used)
    int ctx;                 // tokens per chunk, >= 4 (required)
    int chunks;              // score at most this many chunks (0: all)
    const char *tokenizer;   // NULL: <package>/tokenizer.json
    const char *backend;     // "cpu" or "cuda" (NULL: "cpu")
    const char *save_logits; // write the scored distributions here, a KL base (NULL: none)
    const char *kl_base;     // compare against this saved base run (NULL: none); not with
                             // save_logits
    g4cu_ppl_progress_fn progress; // NULL: none
    void *user;
} g4cu_perplexity_params;
void g4cu_perplexity_params_default(g4cu_perplexity_params *p);

typedef struct {
    int n_chunks, ctx;
    size_t n_scored;         // tokens scored: n_chunks * (ctx - 1 - ctx / 2)
    double ppl, ppl_stderr;
    int has_kl;              // 1: kl_base was given and the fields below hold
    double ppl_base, ppl_base_stderr;
    double kld_mean, kld_mean_stderr, kld_median, kld_p99, kld_p999, kld_max; // nats
    double same_top, same_top_stderr; // fraction of rows with the base's top-1 token
    double rms_dp, rms_dp_stderr;     // RMS of p - p_base of the scored token (probability)
    double mean_dp;
    double seconds;          // wall time of the call
} g4cu_perplexity_result;

// Perplexity of a text, in llama-perplexity's conventions (llama.cpp tools/perplexity): the
// text is tokenized with <bos> first and cut into floor(n / ctx) chunks of ctx tokens (at most
// p->chunks); each runs from an empty cache with its first token replaced by <bos> and is
// scored on its second half. A text of fewer than 2 * ctx tokens is refused. With save_logits
// the scored distributions are written (16-bit, llama.cpp's scheme; the layout is in
// api/g4cu_eval_ppl.c); with kl_base they are read back and compared (KL divergence, same top
// p, RMS delta-p): a base made with another ctx, vocabulary, tokenizer or text is refused.
int g4cu_perplexity(const char *dir, const g4cu_perplexity_params *p,
                    g4cu_perplexity_result *out);
// Writes the result as a JSON object to path (the package dir and the params name the run).
int g4cu_perplexity_write_json(const char *path, const char *dir,
                               const g4cu_perplexity_params *p,
                               const g4cu_perplexity_result *r);

// --- task scores (lmms-eval tasks) ---------------------------------------------------------
typedef struct {
    const char *name;    // the --task name: "ocrbench"
    const char *metric;  // the headline metric: "ocrbench_accuracy", "anls", "wer", ...
    int lower_is_better; // 1 for WER
} g4cu_eval_task;

// "ocrbench|docvqa|chartqa|librispeech", for messages.
const char *g4cu_eval_task_names(void);
// The task named name (its lmms-eval name is accepted too): 1 and *out filled, or 0.
int g4cu_eval_task_find(const char *name, g4cu_eval_task *out);

typedef struct {
    const char *task;      // a task name (required)
    const char *tokenizer; // NULL: <package>/tokenizer.json
    const char *backend;   // "cpu" or "cuda" (NULL: "cpu")
    const char *out_dir;   // results directory, created when missing (required)
    const char *data_dir;  // the base of the manifest's media paths (NULL: its directory)
    int shard_i, shard_n;  // run shard i of n (n 0 or 1: everything)
    int resume;            // 1: keep the predictions already in out_dir, run the rest
    int limit;             // the first limit items only (0: all)
    int keep_stop;         // 1: keep the text after lmms-eval's injected "\n\n" stop
    int max_new;           // new tokens per item (0: the task's max_new_tokens)
    FILE *progress;        // a progress bar on a terminal, plain lines otherwise (NULL: none)
    FILE *log;             // one-line notices: a torn line dropped, items resumed (NULL: none)
    int batch;             // items generated at once, decoded together (g4cu_batch; 0 or 1:
                           // one at a time, the default); the same predictions either way on
                           // the CPU, written in the manifest's order
} g4cu_eval_params;
void g4cu_eval_params_default(g4cu_eval_params *p);

// Where a run's time went, in seconds of wall time on the thread that steps the model unless
// said (an asynchronous backend's device work is counted where the host waits for it: a
// tower's end, a prefill's last chunk, a decode step's ids).
typedef struct {
    int batch;          // items at once (1: one at a time)
    int prep_threads;   // threads running the next items' front ends ahead (0: none)
    double frontend_s;  // media decode + features on the host (summed over those threads)
    double prep_wait_s; // the stepping thread waiting for a front end from them
    double tower_s;     // the image / audio towers
    double prompt_s;    // the rest of an item's setup: chat template, tokenizer, its state
    // prefill and decode; with --batch the batch's g4cu_batch_get_times (decode_s + accept_s;
    // text prompts go in as rows of the decode step by default: their prefill is in decode_s)
    double prefill_s, decode_s;
    double lines_s; // predictions lines: response text, JSON, append + fsync
    double items_s; // all the items, start to end
    double score_s; // reading the predictions back, scoring, writing the scores
    int states, states_grown; // --batch: the slots' text states made, and grown for a longer
                              // item (their time is in prompt_s); 0 one at a time
} g4cu_eval_time;

typedef struct {
    int selected;      // items this run selects
    int resumed;       // of those, predicted before the call
    int predicted;     // predicted by the call
    int failed;        // of the selected items, those recorded as failed (scored as empty)
    double value;      // the task's headline metric over the scored items
    int count;         // items scored
    char *scores_path; // <out_dir>/scores[.shard-I-of-N].json (malloc'ed: g4cu_eval_result_free)
    int has_time;      // 1 (g4cu_eval_run, when items ran): time holds where it went
    g4cu_eval_time time;
} g4cu_eval_result;
void g4cu_eval_result_free(g4cu_eval_result *r);

// Runs one lmms-eval task's manifest (JSON lines) through the package in dir and scores it as
// lmms-eval does: predictions appended to out_dir/predictions[.shard-I-of-N].jsonl as they
// come, scores in out_dir/scores[...].json and .md. An item that is a user error is recorded
// as failed and the run goes on. *out is filled on success (zeroed on error).
int g4cu_eval_run(const char *manifest, const char *dir, const g4cu_eval_params *p,
                  g4cu_eval_result *out);
// Merges every prediction file of an eval output directory (every shard's) into the task's
// corpus-level score: dir/scores.json and dir/scores.md. manifest NULL: the one the run files
// record; limit < 0: the recorded one. Every selected item must be predicted exactly once.
int g4cu_eval_merge(const char *dir, const char *task, const char *manifest, int limit,
                    g4cu_eval_result *out);

#ifdef __cplusplus
}
#endif

#endif
