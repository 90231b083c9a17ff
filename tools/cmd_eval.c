// g4cu eval MANIFEST.jsonl --task ocrbench|docvqa|chartqa|librispeech PKG [options]
// Runs one lmms-eval task's manifest through the model and scores it as lmms-eval does
// (eval/runner.h): predictions appended to OUT/predictions[.shard-I-of-N].jsonl as they come,
// scores in OUT/scores[.shard-I-of-N].json and .md, the headline metric on stdout. A progress
// bar goes to stderr when stderr is a terminal.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/runner.h"
#include "kernels/backend_select.h"
#include "tools/cli.h"

#define EVAL_USAGE                                                                                 \
    "MANIFEST.jsonl --task ocrbench|docvqa|chartqa|librispeech PKG [--tokenizer F] [--backend "    \
    "cpu|cuda] [--out DIR] [--data-dir D] [--shard I/N] [--resume] [--limit N] [--keep-stop] "     \
    "[--max-new N]"

// "I/N" with 0 <= I < N.
static int parse_shard(const char *s, int *i, int *n) {
    int a, b, used = 0;
    if (!s || sscanf(s, "%d/%d%n", &a, &b, &used) != 2 || s[used] || b < 1 || b > 1 << 20 ||
        a < 0 || a >= b) {
        g4_cli_usage_error("eval",
                           "--shard expects I/N with 0 <= I < N (shard I of N, counted "
                           "from 0), got '%s'",
                           s ? s : "");
        return 0;
    }
    *i = a, *n = b;
    return 1;
}

static int cmd_eval(int argc, char **argv) {
    g4_eval_run_opts o = {0};
    const char *pos[2] = {0}, *task = NULL, *out = NULL;
    int n_pos = 0;
    long long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(a, "--task") || !strcmp(a, "--tokenizer") || !strcmp(a, "--backend") ||
                    !strcmp(a, "--out") || !strcmp(a, "--data-dir") || !strcmp(a, "--shard") ||
                    !strcmp(a, "--limit") || !strcmp(a, "--max-new");
        if (takes && !val) return g4_cli_usage_error("eval", "%s needs a value", a);
        if (!strcmp(a, "--task"))
            task = val;
        else if (!strcmp(a, "--tokenizer"))
            o.tokenizer = val;
        else if (!strcmp(a, "--backend"))
            o.backend = val;
        else if (!strcmp(a, "--out"))
            out = val;
        else if (!strcmp(a, "--data-dir"))
            o.data_dir = val;
        else if (!strcmp(a, "--shard")) {
            if (!parse_shard(val, &o.shard_i, &o.shard_n)) return 1;
        } else if (!strcmp(a, "--limit")) {
            if (!g4_cli_int("eval", a, val, 1, 0x7fffffff, &v)) return 1;
            o.limit = (int)v;
        } else if (!strcmp(a, "--max-new")) {
            if (!g4_cli_int("eval", a, val, 1, 1 << 20, &v)) return 1;
            o.max_new = (int)v;
        } else if (!strcmp(a, "--resume")) {
            o.resume = 1;
            continue;
        } else if (!strcmp(a, "--keep-stop")) {
            o.keep_stop = 1;
            continue;
        } else if (a[0] == '-' && a[1]) {
            return g4_cli_usage_error("eval", "unknown option '%s'", a);
        } else if (n_pos < 2) {
            pos[n_pos++] = a;
            continue;
        } else {
            return g4_cli_usage_error("eval", "unexpected argument '%s'", a);
        }
        i++; // the option's value
    }
    if (n_pos < 2) return g4_cli_usage_error("eval", "needs MANIFEST.jsonl and PKG");
    if (!task) return g4_cli_usage_error("eval", "needs --task %s", g4_eval_task_names());
    o.task = g4_eval_task_find(task);
    if (!o.task)
        return g4_cli_usage_error("eval", "--task expects %s, got '%s'", g4_eval_task_names(),
                                  task);
    o.manifest = pos[0];
    o.package = pos[1];
    char *def_out = g4_sprintf("eval-%s", o.task->name);
    o.out_dir = out ? out : def_out;
    o.progress = stderr; // a bar on a terminal, plain lines otherwise (base/progress.h)
    o.log = stderr;
    g4_eval_run_result r = {0};
    int rc = g4_backend_by_name(o.backend, &o.be);
    if (!rc) rc = g4_eval_run(&o, &r);
    if (!rc) {
        printf("%s %s = %.*f over %d items", o.task->name, o.task->metric,
               o.task->lower_is_better ? 4 : 6, r.value, r.count);
        if (r.failed) printf(" (%d failed: scored as empty responses)", r.failed);
        printf(" -> %s\n", r.scores_path);
        if (o.shard_n > 1)
            printf("shard %d of %d: run g4cu eval-merge %s --task %s when every shard is done\n",
                   o.shard_i, o.shard_n, o.out_dir, o.task->name);
    }
    g4_eval_run_result_free(&r);
    free(def_out);
    return rc ? g4_cli_fail(rc) : 0;
}

const g4_cmd g4_cmd_eval = {"eval", cmd_eval,
                            EVAL_USAGE "   run an lmms-eval task's manifest, score it (OUT: "
                                       "eval-<task>)"};
