// fingerprint.h: what produced an eval's predictions, so that `g4cu eval --resume` and
// `g4cu eval-merge` never mix predictions of different models. Three parts, each a 64-bit
// FNV-1a hash written as 16 hex digits:
//   package    genai_config.json, image_processor.json and audio_feature_extraction.json (their
//              bytes), every component's tensor table (name, dtype, dims, data file, offset,
//              length) and the sizes of the data files it names. Not the weights themselves
//              (10 GB would take minutes to hash): another export, quantization or model changes
//              the table or the configs; an in-place edit of weight bytes is not caught.
//   tokenizer  the tokenizer file's bytes.
//   options    what else changes the outputs: task, max_new, the "\n\n" stop handling, backend.
// The fingerprint itself (value) hashes the three; every predictions line records it and the
// run file records the parts, so a mismatch can say which part differs.
#ifndef G4_EVAL_FINGERPRINT_H
#define G4_EVAL_FINGERPRINT_H

#include "eval/runner.h"

typedef struct {
    char value[17];
    char package[17];
    char tokenizer[17];
    char *options; // "task=librispeech max_new=128 keep_stop=0 backend=cpu"
} g4_eval_fingerprint;

// The fingerprint of a run with these options (opens the package's configs and tensor tables;
// reads the tokenizer file). Errors name the file.
int g4_eval_fingerprint_make(const g4_eval_run_opts *o, g4_eval_fingerprint *out);
void g4_eval_fingerprint_free(g4_eval_fingerprint *f);

// G4_OK when a prediction's recorded fingerprint (NULL: none) is `want`'s value; else a user
// error naming where (what_line: "F:3") and, when `recorded` (the run file's parts; may be
// NULL) is known, which part differs.
int g4_eval_fingerprint_check(const char *what_line, const char *got,
                              const g4_eval_fingerprint *want, const g4_eval_fingerprint *recorded);

#endif
