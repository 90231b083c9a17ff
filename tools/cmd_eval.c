// g4cu eval MANIFEST.jsonl --task ocrbench|docvqa|chartqa|librispeech PKG [options]
// Runs one lmms-eval task's manifest through the model and scores it as lmms-eval does
// (g4cu_eval_run, include/g4cu_eval.h): predictions appended to
// OUT/predictions[.shard-I-of-N].jsonl as they come, scores in OUT/scores[.shard-I-of-N].json
// and .md, the headline metric on stdout. A progress bar goes to stderr when stderr is a
// terminal.
// On the public C API (include/g4cu_eval.h: g4cu_eval_run).
#include <g4cu_eval.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/shard_env.h"

#define EVAL_USAGE                                                                                 \
    "MANIFEST.jsonl --task ocrbench|docvqa|chartqa|librispeech PKG [--tokenizer F] [--backend "    \
    "cpu|cuda] [--out DIR] [--data-dir D] [--shard I/N|auto] [--resume] [--limit N] [--keep-stop] "\
    "[--max-new N] [--batch N] [--time]"

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

// --time: where the items' time went, one line on stderr.
static void print_time(const g4cu_eval_time *t, int items) {
    char how[48] = "on the stepping thread";
    if (t->prep_threads)
        snprintf(how, sizeof how, "%d thread%s ahead", t->prep_threads,
                 t->prep_threads > 1 ? "s" : "");
    char states[64] = ""; // (the batch's slots; one at a time has the pipeline's one state)
    if (t->batch > 1)
        snprintf(states, sizeof states, " (%d states made, %d grown)", t->states, t->states_grown);
    // what the stepping thread did besides the parts named (the front ends only when it ran them)
    const double other = t->items_s - t->prep_wait_s - t->tower_s - t->prompt_s - t->prefill_s -
                         t->decode_s - t->lines_s - (t->prep_threads ? 0 : t->frontend_s);
    fprintf(stderr,
            "g4cu eval: time: %d items in %.2f s (%.2f items/s, batch %d): front end %.2f s "
            "(%s, waited %.2f s), towers %.2f s, prompts %.2f s%s, "
            "prefill %.2f s, decode %.2f s, lines %.2f s, other %.2f s; scoring %.2f s\n",
            items, t->items_s, t->items_s > 0 ? items / t->items_s : 0.0, t->batch, t->frontend_s,
            how, t->prep_wait_s, t->tower_s, t->prompt_s, states, t->prefill_s, t->decode_s,
            t->lines_s, other, t->score_s);
}

static int cmd_eval(int argc, char **argv) {
    g4cu_eval_params o;
    g4cu_eval_params_default(&o);
    const char *pos[2] = {0}, *task = NULL, *out = NULL;
    int n_pos = 0, shard_auto = 0, show_time = 0;
    long long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(a, "--task") || !strcmp(a, "--tokenizer") || !strcmp(a, "--backend") ||
                    !strcmp(a, "--out") || !strcmp(a, "--data-dir") || !strcmp(a, "--shard") ||
                    !strcmp(a, "--limit") || !strcmp(a, "--max-new") || !strcmp(a, "--batch");
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
        else if (!strcmp(a, "--shard") && !strcmp(val, "auto")) {
            shard_auto = 1;
        } else if (!strcmp(a, "--shard")) {
            if (!parse_shard(val, &o.shard_i, &o.shard_n)) return 1;
        } else if (!strcmp(a, "--limit")) {
            if (!g4_cli_int("eval", a, val, 1, 0x7fffffff, &v)) return 1;
            o.limit = (int)v;
        } else if (!strcmp(a, "--max-new")) {
            if (!g4_cli_int("eval", a, val, 1, 1 << 20, &v)) return 1;
            o.max_new = (int)v;
        } else if (!strcmp(a, "--batch")) {
            if (!g4_cli_int("eval", a, val, 1, 4096, &v)) return 1;
            o.batch = (int)v;
        } else if (!strcmp(a, "--resume")) {
            o.resume = 1;
            continue;
        } else if (!strcmp(a, "--keep-stop")) {
            o.keep_stop = 1;
            continue;
        } else if (!strcmp(a, "--time")) {
            show_time = 1;
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
    if (shard_auto) { // before the backend starts: it may set CUDA_VISIBLE_DEVICES
        char how[512];
        int rc = g4_shard_auto(&o.shard_i, &o.shard_n, how, sizeof how);
        if (rc) return g4_cli_fail(rc);
        fprintf(stderr, "g4cu eval: --shard auto: %s\n", how);
    }
    if (!task) return g4_cli_usage_error("eval", "needs --task %s", g4cu_eval_task_names());
    g4cu_eval_task t;
    if (!g4cu_eval_task_find(task, &t))
        return g4_cli_usage_error("eval", "--task expects %s, got '%s'", g4cu_eval_task_names(),
                                  task);
    o.task = t.name;
    char *def_out = g4_sprintf("eval-%s", t.name);
    o.out_dir = out ? out : def_out;
    o.progress = stderr; // a bar on a terminal, plain lines otherwise (base/progress.h)
    o.log = stderr;
    g4cu_eval_result r;
    int rc = g4cu_eval_run(pos[0], pos[1], &o, &r);
    if (!rc && r.selected == 0) {
        printf("shard %d of %d: 0 items (more shards than items); run g4cu eval-merge %s --task %s "
               "when every shard is done\n", o.shard_i, o.shard_n, o.out_dir, t.name);
    } else if (!rc) {
        printf("%s %s = %.*f over %d items", t.name, t.metric, t.lower_is_better ? 4 : 6, r.value,
               r.count);
        if (r.failed) printf(" (%d failed: scored as empty responses)", r.failed);
        printf(" -> %s\n", r.scores_path);
        if (o.shard_n > 1)
            printf("shard %d of %d: run g4cu eval-merge %s --task %s when every shard is done\n",
                   o.shard_i, o.shard_n, o.out_dir, t.name);
        if (show_time && r.has_time) print_time(&r.time, r.predicted);
    }
    g4cu_eval_result_free(&r);
    free(def_out);
    return rc ? g4_cli_fail(rc) : 0;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt eval_opts[] = {
    {"--task", "T", "ocrbench, docvqa, chartqa or librispeech (required)"},
    {"--tokenizer", "F", "tokenizer.json (default: the package's)"},
    {"--backend", "B", "cpu or cuda (default cpu)"},
    {"--out", "DIR", "results directory (default eval-<task>)"},
    {"--data-dir", "D", "the base of the manifest's media paths (default: its directory)"},
    {"--shard", "I/N|auto", "run shard I of N, counted from 0 (default 0/1: everything); auto: "
                            "from SLURM_ARRAY_TASK_ID/_COUNT, RANK/WORLD_SIZE or "
                            "SLURM_PROCID/SLURM_NTASKS, the GPU from LOCAL_RANK / SLURM_LOCALID"},
    {"--resume", NULL, "keep the predictions already in DIR, run the rest (default off)"},
    {"--limit", "N", "the first N items only (default: all)"},
    {"--keep-stop", NULL, "keep the text after a \"\\n\\n\" stop (default: cut there)"},
    {"--max-new", "N", "new tokens per item (default: the task's max_new_tokens)"},
    {"--batch", "N", "items generated at once, decoded together (default 1); the same "
                     "predictions as one at a time on the CPU; the next items' media front ends "
                     "run ahead on threads ($G4_EVAL_PREP_THREADS, default: the cores less one, "
                     "at most 8; 0: none)"},
    {"--time", NULL, "print where the items' time went on stderr (front end, towers, prompts, "
                     "prefill, decode, lines, scoring; also in scores.json's timings)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_eval = {"eval", cmd_eval,
                            EVAL_USAGE "   run an lmms-eval task's manifest, score it (OUT: "
                                       "eval-<task>)",
    eval_opts, NULL};
