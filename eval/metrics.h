// metrics.h: the task metrics of the eval front end, behaving as lmms-eval 0.7.2's scorers do
// (commit 3e675904, the version Olive pins; see ../shared/spec/eval-metrics.md):
//
//   ocrbench                 g4_ocrbench_score     0/1 per sample; accuracy = sum / samples
//   docvqa_val_lite          g4_anls               0..1 per question; the task reports the mean
//   chartqa_lite             g4_chartqa_relaxed    0/1 per sample; relaxed_overall = the mean
//   librispeech_test_clean   g4_wer_add + g4_wer_percent: corpus WER in percent
//
// Every scorer takes the model's decoded response as generated and first applies the
// `.strip()` that lmms-eval's Task.process_results applies (a NULL response counts as "", as
// a None does there). Ground truths are used as the dataset gives them. Strings must be valid
// UTF-8: otherwise G4_EUSER with a line naming the argument and the byte offset. All text
// handling is on Unicode code points with Python 3.11's str semantics (eval/pystr.h).
#ifndef G4_METRICS_H
#define G4_METRICS_H

#include <stddef.h>
#include <stdint.h>

// --- OCRBench (tasks/ocrbench/utils.py ocrbench_process_results) -----------------------------
// *score = 1 when some answer is a substring of the response, else 0. When dataset is
// "HME100k" (the handwritten-maths items): both sides strip()-ed, "\n" -> " ", then every " "
// deleted; case-sensitive. Otherwise both sides lower()-ed and strip()-ed, "\n" -> " " (tabs,
// "\r" and inner runs of spaces stay). An empty answer matches anything. dataset may be NULL
// (not HME100k). n_answers == 0 scores 0, as an empty answer list does in Python.
int g4_ocrbench_score(const char *response, const char *const *answers, size_t n_answers,
                      const char *dataset, int *score);

// --- DocVQA ANLS (api/metrics.py anls, threshold 0.5) ------------------------------------------
// For each answer g: d = Levenshtein(" ".join(g.strip().lower().split()),
// " ".join(pred.lower().split())) over code points, L = max(len(g.upper()), len(pred.upper()))
// on the raw (unnormalised) strings, nl = d / L (0 when L == 0). *score = 1 - min(nl), set to 0
// when below 0.5 (exactly 0.5 is kept). n_answers == 0 is an error (Python's min([]) fails).
int g4_anls(const char *response, const char *const *answers, size_t n_answers, double *score);
// Levenshtein distance (unit costs) between two valid UTF-8 strings, counted in code points.
size_t g4_levenshtein(const char *a, const char *b);

// --- ChartQA relaxed accuracy (tasks/chartqa/utils.py relaxed_correctness) ---------------------
// p = to_float(response), t = to_float(target). When p parsed and t is neither unparsed nor 0:
// correct iff |p - t| / |t| <= 0.05 (double arithmetic; NaN compares false). Otherwise correct
// iff response.lower() == target.lower().
int g4_chartqa_relaxed(const char *response, const char *target, int *correct);
// _to_float(text): with a trailing '%', every trailing '%' is removed and float(rest) / 100;
// else float(text) (Python's float() rules, eval/pystr.h g4_py_float). Returns 1 with *out set,
// 0 for None (ValueError; also for NULL or text that is not valid UTF-8).
int g4_chartqa_to_float(const char *text, double *out);

// --- LibriSpeech WER (tasks/librispeech/utils.py librispeech_wer, tasks/asr_wer_utils.py) ------
// The word tokens lmms-eval compares for one English text: remove_sp (<|...|> tags -> space,
// whitespace runs -> one space, one space before ! , . ? ; : dropped, leading spaces dropped),
// Whisper's EnglishTextNormalizer, then BasicTextNormalizer, then the "none" tokenizer with
// punctuation-only tokens dropped, lowercase, split(). *words is a new array of new strings
// (free with g4_wer_words_free).
int g4_wer_tokens(const char *text, char ***words, size_t *n);
void g4_wer_words_free(char **words, size_t n);
// Word-level Levenshtein distance (unit costs) between two token lists.
size_t g4_word_edit_distance(char *const *a, size_t na, char *const *b, size_t nb);

// A corpus accumulator: WER = 100 * total edits / total reference words (never a mean of
// per-utterance WERs). Start from a zeroed struct.
typedef struct {
    int64_t edits;     // sum of word edit distances
    int64_t ref_words; // sum of reference lengths, in tokens after normalisation
    int64_t utterances;
} g4_wer;

// Adds one utterance: reference transcript and the model's response (stripped first). The
// utterance's own counts go to *edits / *ref_words when those are not NULL.
int g4_wer_add(g4_wer *acc, const char *reference, const char *response, int64_t *edits,
               int64_t *ref_words);
// 100 * edits / ref_words (computed as Python does: (edits / ref_words) * 100). An error when
// the references hold no words (Python divides by zero there).
int g4_wer_percent(const g4_wer *acc, double *percent);

#endif
