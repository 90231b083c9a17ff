// eval_task.c: the task table (see eval_task.h for where each value comes from).
#include "eval/eval_task.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "eval/pystr.h"

static const g4_eval_task tasks[] = {
    {G4_EVAL_OCRBENCH, "ocrbench", "ocrbench", G4_MEDIA_IMAGE, "ocrbench_accuracy", 0, 128, 1, "",
     NULL},
    {G4_EVAL_DOCVQA, "docvqa", "docvqa_val_lite", G4_MEDIA_IMAGE, "anls", 0, 32, 0,
     "\nAnswer the question using a single word or phrase.", NULL},
    {G4_EVAL_CHARTQA, "chartqa", "chartqa_lite", G4_MEDIA_IMAGE, "relaxed_overall", 0, 16, 0,
     "\nAnswer the question with a single word.", NULL},
    {G4_EVAL_LIBRISPEECH, "librispeech", "librispeech_test_clean", G4_MEDIA_AUDIO, "wer", 1, 256, 0,
     "", "Please recognize the speech and only output the recognized content:"},
};

const g4_eval_task *g4_eval_task_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof tasks / sizeof tasks[0]; i++)
        if (!strcmp(name, tasks[i].name) || !strcmp(name, tasks[i].lmms_task)) return &tasks[i];
    return NULL;
}

const char *g4_eval_task_names(void) {
    return "ocrbench|docvqa|chartqa|librispeech";
}

char *g4_eval_task_text(const g4_eval_task *t, const char *question) {
    if (t->fixed_text) return g4_strdup(t->fixed_text);
    // pre_prompt is "" for every task here (the `default` kwargs block applies to our model).
    char *q = t->strip_question ? g4_py_strip(question) : g4_strdup(question);
    char *text = g4_sprintf("%s%s", q, t->post_prompt);
    free(q);
    return text;
}
