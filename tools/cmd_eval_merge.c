// g4cu eval-merge DIR --task T [--manifest M] [--limit N]
// Combines the prediction files of an eval output directory (every shard's) into the
// corpus-level score of the task: DIR/scores.json and DIR/scores.md. Every item the run selects
// must be predicted exactly once over the files.
// On the public C API (include/g4cu_eval.h: g4cu_eval_merge).
#include <g4cu_eval.h>
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"

static int cmd_eval_merge(int argc, char **argv) {
    const char *dir = NULL, *task = NULL, *manifest = NULL;
    int limit = -1;
    long long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(a, "--task") || !strcmp(a, "--manifest") || !strcmp(a, "--limit");
        if (takes && !val) return g4_cli_usage_error("eval-merge", "%s needs a value", a);
        if (!strcmp(a, "--task"))
            task = val;
        else if (!strcmp(a, "--manifest"))
            manifest = val;
        else if (!strcmp(a, "--limit")) {
            if (!g4_cli_int("eval-merge", a, val, 0, 0x7fffffff, &v)) return 1;
            limit = (int)v;
        } else if (a[0] == '-' && a[1]) {
            return g4_cli_usage_error("eval-merge", "unknown option '%s'", a);
        } else if (!dir) {
            dir = a;
            continue;
        } else {
            return g4_cli_usage_error("eval-merge", "unexpected argument '%s'", a);
        }
        i++;
    }
    if (!dir) return g4_cli_usage_error("eval-merge", "needs DIR (the --out of g4cu eval)");
    if (!task)
        return g4_cli_usage_error("eval-merge", "needs --task %s", g4cu_eval_task_names());
    g4cu_eval_task t;
    if (!g4cu_eval_task_find(task, &t))
        return g4_cli_usage_error("eval-merge", "--task expects %s, got '%s'",
                                  g4cu_eval_task_names(), task);
    g4cu_eval_result r;
    int rc = g4cu_eval_merge(dir, t.name, manifest, limit, &r);
    if (!rc) {
        printf("%s %s = %.*f over %d items", t.name, t.metric, t.lower_is_better ? 4 : 6, r.value,
               r.count);
        if (r.failed) printf(" (%d failed: scored as empty responses)", r.failed);
        printf(" -> %s\n", r.scores_path);
    }
    g4cu_eval_result_free(&r);
    return rc ? g4_cli_fail(rc) : 0;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt eval_merge_opts[] = {
    {"--task", "T", "ocrbench, docvqa, chartqa or librispeech (required)"},
    {"--manifest", "M", "check the shards cover this manifest (default: not checked)"},
    {"--limit", "N", "the run's --limit (default: none)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_eval_merge = {
    "eval-merge", cmd_eval_merge,
    "DIR --task ocrbench|docvqa|chartqa|librispeech [--manifest M] [--limit N]   merge the "
    "shards' predictions into the corpus-level score (DIR/scores.json, .md)",
    eval_merge_opts, NULL};
