// eval_task.h: the four lmms-eval tasks the eval runner reproduces, as lmms-eval 0.7.2 (commit
// 3e675904, the version Olive pins) defines them in its task YAMLs and utils.py
// (spec eval-metrics.md sections 0, 2-6):
//
//   --task        lmms-eval task            media  user text after the media              max_new
//   ocrbench      ocrbench                  image  question.strip()                           128
//   docvqa        docvqa_val_lite           image  question + "\nAnswer the question using    32
//                                                  a single word or phrase."
//   chartqa       chartqa_lite              image  question + "\nAnswer the question with     16
//                                                  a single word."
//   librispeech   librispeech_test_clean    audio  "Please recognize the speech and only     256
//                                                  output the recognized content:"
//
// Every request: system turn "You are a helpful assistant." sent as text parts (the Olive
// ORT-GenAI adapter and lmms-eval's gemma wrappers), then one user turn with the media first and
// the text after it; greedy. lmms-eval injects until = ["\n\n"] (no task YAML sets `until`);
// the benchmark removed it with ignore_stop_strings ["\n\n"], as lmms-eval's own Gemma wrappers
// do, so by default no stop string is active and generation ends on EOS / <turn|> or max_new.
#ifndef G4_EVAL_TASK_H
#define G4_EVAL_TASK_H

#include "engine/media.h"

typedef enum {
    G4_EVAL_OCRBENCH = 0,
    G4_EVAL_DOCVQA = 1,
    G4_EVAL_CHARTQA = 2,
    G4_EVAL_LIBRISPEECH = 3,
} g4_eval_task_id;

typedef struct {
    g4_eval_task_id id;
    const char *name;        // --task value: "ocrbench"
    const char *lmms_task;   // lmms-eval's task name: "docvqa_val_lite"
    g4_media_kind media;     // one image or one audio clip per item
    const char *metric;      // headline metric key: "ocrbench_accuracy", "anls", ...
    int lower_is_better;     // 1 for WER
    int max_new;             // the task YAML's max_new_tokens
    int strip_question;      // 1: question.strip() (ocrbench's doc_to_text)
    const char *post_prompt; // appended to the question ("" for none)
    const char *fixed_text;  // the whole user text when the task ignores the doc's question
} g4_eval_task;

// The system prompt of every request (sent as [{"type": "text", "text": ...}]).
#define G4_EVAL_SYSTEM_PROMPT "You are a helpful assistant."
// The stop string lmms-eval injects into every request of these tasks.
#define G4_EVAL_INJECTED_STOP "\n\n"

// The task named name ("ocrbench", "docvqa", "chartqa", "librispeech"; the lmms-eval names
// "docvqa_val_lite", "chartqa_lite", "librispeech_test_clean" are accepted too), or NULL.
const g4_eval_task *g4_eval_task_find(const char *name);
// "ocrbench|docvqa|chartqa|librispeech", for messages.
const char *g4_eval_task_names(void);

// The user text for a question (new string): doc_to_text of the task. question is ignored by
// a task with fixed_text (it may be NULL there). question must be valid UTF-8.
char *g4_eval_task_text(const g4_eval_task *t, const char *question);

#endif
