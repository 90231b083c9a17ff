// manifest.h: an eval manifest (JSONL, one item per line) read and checked for one task, and
// the items a run selects from it (--limit, --shard).
//
// A line is a JSON object:
//   {"id": "...",                       unique, non-empty
//    "image": "PATH" | "audio": "PATH", the task's media kind; relative paths are resolved
//                                       against the data directory (--data-dir), else the
//                                       manifest's own directory
//    "question": "...",                 image tasks; librispeech sends a fixed prompt, so there
//                                       the field may be left out, or must equal that prompt
//    "answers": ["...", ...] | "...",   image tasks (also read from "answer" when "answers" is
//                                       absent, as the datasets name it); chartqa takes exactly
//                                       one, the others at least one
//    "transcript": "...",               librispeech: the reference text
//    "category": "...",                 non-empty: OCRBench's question_type, ChartQA's type
//                                       (human_test / augmented_test), any grouping otherwise
//    "dataset": "..."}                  optional: OCRBench's source dataset (HME100k has its
//                                       own matching rule)
// Other keys are ignored. Blank lines are skipped (line numbers still count them). Text must be
// valid UTF-8. Every error is one line: "<manifest>:<line>: field '<name>': <what was
// expected>, got <what was found>".
#ifndef G4_EVAL_MANIFEST_H
#define G4_EVAL_MANIFEST_H

#include "eval/eval_task.h"

typedef struct {
    char *id;
    char *media;      // the path as the manifest gives it
    char *media_path; // resolved (see above)
    char *question;   // NULL when absent
    char **answers;   // [n_answers] (image tasks)
    int n_answers;
    char *transcript; // librispeech
    char *category;
    char *dataset; // NULL when absent
    int line;      // 1-based line of the manifest
} g4_eval_item;

typedef struct {
    char *path;
    const g4_eval_task *task;
    g4_eval_item *items; // [n] in file order
    int n;
} g4_eval_manifest;

// Reads and checks every line of path for task t. data_dir may be NULL (paths relative to the
// manifest's directory). An empty manifest is an error. Media files are not opened here (see
// g4_eval_manifest_check_media).
int g4_eval_manifest_read(const char *path, const g4_eval_task *t, const char *data_dir,
                          g4_eval_manifest *out);
void g4_eval_manifest_free(g4_eval_manifest *m);
// The index of the item with this id, or -1.
int g4_eval_manifest_find(const g4_eval_manifest *m, const char *id);

// A user error naming the first selected item whose media file is not a readable file (so a
// long run does not stop at item 900 for a typo).
int g4_eval_manifest_check_media(const g4_eval_manifest *m, const int *sel, int n_sel);

// The items a run takes, as indices in manifest order: the first `limit` items (0: all), then
// every n-th of those starting at i (shard i of n, 0 <= i < n): a stable split that does not
// depend on what was predicted before. *sel is a new array (NULL when *n_sel is 0).
void g4_eval_select(int n_items, int limit, int shard_i, int shard_n, int **sel, int *n_sel);

#endif
