// test_eval_runner.c: the eval runner's parts that need no model (eval/eval_task.h,
// manifest.h, predictions.h, eval_scores.h, runner.h's g4_eval_merge):
//   - each task's user text is the lmms-eval YAML's (strings typed from spec eval-metrics.md 0);
//   - bad manifest lines fail with one line naming the file, the line number and the field;
//   - --limit / --shard selection is stable, disjoint and complete;
//   - predictions files: a torn last line is dropped (and the file truncated) on resume and an
//     error otherwise; bad or duplicated lines are errors;
//   - scoring the recorded smoke predictions (tests/fixtures/eval/smoke_predictions.jsonl,
//     hand-written) gives lmms-eval 0.7.2's own numbers (smoke_expected.json, written by
//     tools/python/eval_metrics_reference.py), through g4_eval_score and through eval-merge of
//     the predictions split into shards; ChartQA against the spec's relaxed-accuracy table 7.4.
// Scores are compared exactly: the runner sums in manifest order and divides once, the same
// double operations in the same order as Python's sum(scores) / len(scores) and as lmms-eval's
// (edits / words) * 100.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "eval/eval_scores.h"
#include "eval/manifest.h"
#include "eval/predictions.h"
#include "eval/pystr.h"
#include "eval/runner.h"
#include "tests/spec_chartqa.h"
#include "tests/test_util.h"

static char *tmp;

static char *put_file(const char *name, const char *text) {
    char *p = g4_path_join(tmp, name);
    FILE *f = fopen(p, "wb");
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    return p;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

// The last error is one line holding every NULL-terminated needle.
static int error_has(const char *needle, ...) {
    const char *e = g4_error();
    if (strchr(e, '\n')) return 0;
    va_list ap;
    va_start(ap, needle);
    int ok = 1;
    for (const char *n = needle; n; n = va_arg(ap, const char *)) ok &= strstr(e, n) != NULL;
    va_end(ap);
    return ok;
}

static void test_tasks(void) {
    const g4_eval_task *o = g4_eval_task_find("ocrbench"), *d = g4_eval_task_find("docvqa"),
                       *c = g4_eval_task_find("chartqa"), *l = g4_eval_task_find("librispeech");
    CHECK(o && d && c && l);
    if (!(o && d && c && l)) return;
    CHECK(g4_eval_task_find("docvqa_val_lite") == d && g4_eval_task_find("chartqa_lite") == c &&
          g4_eval_task_find("librispeech_test_clean") == l && !g4_eval_task_find("vqav2"));
    // max_new_tokens of the four task YAMLs
    CHECK_INT(o->max_new, 128);
    CHECK_INT(d->max_new, 32);
    CHECK_INT(c->max_new, 16);
    CHECK_INT(l->max_new, 256);
    CHECK(o->media == G4_MEDIA_IMAGE && d->media == G4_MEDIA_IMAGE && c->media == G4_MEDIA_IMAGE &&
          l->media == G4_MEDIA_AUDIO);
    struct {
        const g4_eval_task *t;
        const char *q, *want;
    } cases[] = {
        {o, "  What is written?\n", "What is written?"}, // ocrbench: question.strip()
        {o, "\u3000Name\u00a0", "Name"},                 // Python's Unicode whitespace
        {d, "What is the date? ",
         "What is the date? \nAnswer the question using a single word or phrase."},
        {c, "How many bars?", "How many bars?\nAnswer the question with a single word."},
        {l, NULL, "Please recognize the speech and only output the recognized content:"},
        {l, "ignored", "Please recognize the speech and only output the recognized content:"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *s = g4_eval_task_text(cases[i].t, cases[i].q);
        CHECK_MSG(!strcmp(s, cases[i].want), "case %zu: got '%s'", i, s);
        free(s);
    }
    CHECK(!strcmp(G4_EVAL_SYSTEM_PROMPT, "You are a helpful assistant."));
    CHECK(!strcmp(G4_EVAL_INJECTED_STOP, "\n\n"));
}

static void test_manifest_errors(void) {
    const g4_eval_task *ocr = g4_eval_task_find("ocrbench"), *chart = g4_eval_task_find("chartqa"),
                       *asr = g4_eval_task_find("librispeech");
    const char *good = "{\"id\": \"a\", \"image\": \"x.png\", \"question\": \"q\", \"answers\": "
                       "[\"A\"], \"category\": \"c\"}\n";
    struct {
        const g4_eval_task *t;
        const char *bad_line; // becomes line 3 (after a good line and a blank one)
        const char *field;    // what the message must name ("" for whole-line errors)
        const char *what;
    } cases[] = {
        {ocr, "{\"id\": \"b\", \"image\": ", "", "not valid JSON"},
        {ocr, "[1, 2]", "", "expected a JSON object, got an array"},
        {ocr,
         "{\"image\": \"x.png\", \"question\": \"q\", \"answers\": [\"A\"], \"category\": \"c\"}",
         "field 'id'", "missing"},
        {ocr,
         "{\"id\": 7, \"image\": \"x.png\", \"question\": \"q\", \"answers\": [\"A\"], "
         "\"category\": \"c\"}",
         "field 'id'", "got a number"},
        {ocr,
         "{\"id\": \"a\", \"image\": \"x.png\", \"question\": \"q\", \"answers\": [\"A\"], "
         "\"category\": \"c\"}",
         "field 'id'", "already the id of line 1"},
        {ocr, "{\"id\": \"b\", \"question\": \"q\", \"answers\": [\"A\"], \"category\": \"c\"}",
         "field 'image'", "missing"},
        {ocr,
         "{\"id\": \"b\", \"audio\": \"x.wav\", \"question\": \"q\", \"answers\": [\"A\"], "
         "\"category\": \"c\"}",
         "field 'audio'", "takes image items"},
        {ocr, "{\"id\": \"b\", \"image\": \"x.png\", \"answers\": [\"A\"], \"category\": \"c\"}",
         "field 'question'", "missing"},
        {ocr,
         "{\"id\": \"b\", \"image\": \"x.png\", \"question\": [\"q\"], \"answers\": [\"A\"], "
         "\"category\": \"c\"}",
         "field 'question'", "got an array"},
        {ocr, "{\"id\": \"b\", \"image\": \"x.png\", \"question\": \"q\", \"category\": \"c\"}",
         "field 'answers'", "missing"},
        {ocr,
         "{\"id\": \"b\", \"image\": \"x.png\", \"question\": \"q\", \"answers\": [], "
         "\"category\": \"c\"}",
         "field 'answers'", "empty list"},
        {ocr,
         "{\"id\": \"b\", \"image\": \"x.png\", \"question\": \"q\", \"answers\": [\"A\", 3], "
         "\"category\": \"c\"}",
         "field 'answers[1]'", "got a number"},
        {ocr,
         "{\"id\": \"b\", \"image\": \"x.png\", \"question\": \"q\", \"answers\": [\"A\"], "
         "\"answer\": \"A\", \"category\": \"c\"}",
         "field 'answer'", "not both"},
        {ocr, "{\"id\": \"b\", \"image\": \"x.png\", \"question\": \"q\", \"answers\": [\"A\"]}",
         "field 'category'", "missing"},
        {ocr,
         "{\"id\": \"b\", \"image\": \"x.png\", \"question\": \"q\", \"answers\": [\"A\"], "
         "\"category\": \"\"}",
         "field 'category'", "non-empty"},
        {ocr,
         "{\"id\": \"b\", \"image\": \"x.png\", \"question\": \"q\", \"answers\": [\"A\"], "
         "\"category\": \"c\", \"dataset\": 5}",
         "field 'dataset'", "got a number"},
        {ocr,
         "{\"id\": \"b\", \"image\": \"x.png\", \"question\": \"q\xff\", \"answers\": [\"A\"], "
         "\"category\": \"c\"}",
         "field 'question'", "not valid UTF-8"},
        {chart,
         "{\"id\": \"b\", \"image\": \"x.png\", \"question\": \"q\", \"answers\": [\"1\", "
         "\"2\"], \"category\": \"human_test\"}",
         "field 'answers'", "ChartQA scores one target"},
        {asr, "{\"id\": \"b\", \"audio\": \"x.wav\", \"category\": \"c\"}", "field 'transcript'",
         "missing"},
        {asr,
         "{\"id\": \"b\", \"audio\": \"x.wav\", \"question\": \"Transcribe\", \"transcript\": "
         "\"t\", \"category\": \"c\"}",
         "field 'question'", "always sends"},
        {asr, "{\"id\": \"b\", \"image\": \"x.png\", \"transcript\": \"t\", \"category\": \"c\"}",
         "field 'image'", "takes audio items"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *first = cases[i].t->media == G4_MEDIA_AUDIO
                                ? "{\"id\": \"a\", \"audio\": \"x.wav\", \"transcript\": \"t\", "
                                  "\"category\": \"c\"}\n"
                                : good;
        if (cases[i].t->id == G4_EVAL_CHARTQA) first = good; // one answer: fine for chartqa too
        char *text = g4_sprintf("%s\n%s\n", first, cases[i].bad_line);
        char *path = put_file("bad.jsonl", text);
        g4_eval_manifest m;
        int rc = g4_eval_manifest_read(path, cases[i].t, NULL, &m);
        char *where = g4_sprintf("%s:3: ", path);
        CHECK_MSG(rc == G4_EUSER && error_has(where, cases[i].field, cases[i].what, NULL),
                  "case %zu: rc %d, '%s'", i, rc, g4_error());
        if (!rc) g4_eval_manifest_free(&m);
        free(where);
        free(path);
        free(text);
    }
    // an empty manifest, a missing file
    char *path = put_file("empty.jsonl", "\n  \n");
    g4_eval_manifest m;
    CHECK(g4_eval_manifest_read(path, ocr, NULL, &m) == G4_EUSER &&
          error_has(path, "no items", NULL));
    free(path);
    path = g4_path_join(tmp, "none.jsonl");
    CHECK(g4_eval_manifest_read(path, ocr, NULL, &m) == G4_EUSER && error_has(path, NULL));
    free(path);

    // a good manifest: fields, paths resolved against the manifest's directory or --data-dir,
    // the 'answer' alias, CRLF lines; a missing media file is named with its line
    path = put_file("good.jsonl",
                    "{\"id\": \"a\", \"image\": \"img/x.png\", \"question\": \" q \", \"answers\": "
                    "\"A\", \"category\": \"Doc-oriented VQA\", \"dataset\": \"HME100k\"}\r\n"
                    "\n"
                    "{\"id\": \"b\", \"image\": \"/abs/y.png\", \"question\": \"r\", \"answer\": "
                    "[\"B\", \"C\"], \"category\": \"c\", \"extra\": 1}\n");
    int rc = g4_eval_manifest_read(path, ocr, NULL, &m);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc == G4_OK) {
        CHECK_INT(m.n, 2);
        char *want = g4_sprintf("%s/img/x.png", tmp);
        CHECK(!strcmp(m.items[0].media_path, want));
        free(want);
        CHECK(!strcmp(m.items[0].question, " q ") && m.items[0].n_answers == 1 &&
              !strcmp(m.items[0].answers[0], "A") && !strcmp(m.items[0].dataset, "HME100k"));
        CHECK(m.items[1].line == 3 && !strcmp(m.items[1].media_path, "/abs/y.png") &&
              m.items[1].n_answers == 2 && !strcmp(m.items[1].answers[1], "C") &&
              !m.items[1].dataset);
        CHECK_INT(g4_eval_manifest_find(&m, "b"), 1);
        int sel[2] = {0, 1};
        CHECK(g4_eval_manifest_check_media(&m, sel, 2) == G4_EUSER &&
              error_has(":1: field 'image'", "img/x.png", "--data-dir", NULL));
        g4_eval_manifest_free(&m);
    }
    rc = g4_eval_manifest_read(path, ocr, "/data", &m);
    CHECK(rc == G4_OK && !strcmp(m.items[0].media_path, "/data/img/x.png"));
    if (!rc) g4_eval_manifest_free(&m);
    free(path);
}

static void test_select(void) {
    int *sel, n;
    g4_eval_select(10, 0, 1, 3, &sel, &n);
    CHECK(n == 3 && sel[0] == 1 && sel[1] == 4 && sel[2] == 7);
    free(sel);
    g4_eval_select(10, 5, 0, 2, &sel, &n); // --limit first, then the shard
    CHECK(n == 3 && sel[0] == 0 && sel[1] == 2 && sel[2] == 4);
    free(sel);
    g4_eval_select(2, 0, 2, 3, &sel, &n);
    CHECK(n == 0 && !sel);
    // shards of every split of 0..40 items: disjoint, complete, in order
    for (int items = 0; items <= 40; items++)
        for (int shards = 1; shards <= 7; shards++) {
            int *seen = g4_calloc((size_t)items + 1, sizeof(int)), total = 0, ordered = 1;
            for (int s = 0; s < shards; s++) {
                g4_eval_select(items, 0, s, shards, &sel, &n);
                for (int k = 0; k < n; k++) {
                    seen[sel[k]]++;
                    ordered &= k == 0 || sel[k] > sel[k - 1];
                }
                total += n;
                free(sel);
            }
            int once = 1;
            for (int i = 0; i < items; i++) once &= seen[i] == 1;
            CHECK_MSG(once && ordered && total == items, "%d items in %d shards", items, shards);
            free(seen);
        }
}

static void test_predictions(void) {
    const char *l1 = "{\"id\": \"a\", \"task\": \"ocrbench\", \"prediction\": \"x\", "
                     "\"stop_reason\": \"eos\", \"prompt_tokens\": 10, \"new_tokens\": 3, "
                     "\"item_ms\": 5.5, \"prefill_ms\": 1, \"decode_ms\": 2}\n";
    const char *l2 = "{\"id\": \"b\", \"prediction\": \"  y\\n\"}\n";
    const char *torn = "{\"id\": \"c\", \"predic";
    char *text = g4_sprintf("%s%s%s", l1, l2, torn);
    char *path = put_file("preds.jsonl", text);
    g4_eval_preds p;
    // eval-merge: a torn line is an error that says how to fix it
    CHECK(g4_eval_preds_read(path, "ocrbench", 0, 0, &p) == G4_EUSER &&
          error_has(":3: torn last line", "--resume", NULL));
    CHECK(file_size(path) == (long)strlen(text));
    // --resume: dropped, and the file truncated to its whole lines
    int rc = g4_eval_preds_read(path, "ocrbench", 0, 1, &p);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (!rc) {
        CHECK(p.n == 2 && p.torn_bytes == (long)strlen(torn));
        CHECK(!strcmp(p.v[0].id, "a") && !strcmp(p.v[0].prediction, "x") &&
              p.v[0].stop_reason == 0 && p.v[0].prompt_tokens == 10 && p.v[0].new_tokens == 3 &&
              p.v[0].item_ms == 5.5);
        CHECK(!strcmp(p.v[1].prediction, "  y\n") && p.v[1].item_ms == -1 &&
              p.v[1].stop_reason == -1 && p.v[1].line == 2);
        g4_eval_preds_free(&p);
    }
    CHECK(file_size(path) == (long)(strlen(l1) + strlen(l2)));
    free(path);
    free(text);
    // a missing file: an empty list only when allowed
    path = g4_path_join(tmp, "nothing.jsonl");
    CHECK(g4_eval_preds_read(path, NULL, 1, 1, &p) == G4_OK && p.n == 0);
    g4_eval_preds_free(&p);
    CHECK(g4_eval_preds_read(path, NULL, 0, 0, &p) == G4_EUSER);
    free(path);
    struct {
        const char *text, *what;
    } bad[] = {
        {"{\"id\": \"a\", \"prediction\": \"x\"}\n{\"id\": \"b\"\n{\"id\": \"c\", \"prediction\": "
         "\"\"}\n",
         ":2: not valid JSON"},
        {"{\"id\": \"a\", \"prediction\": \"x\"}\n{\"id\": \"a\", \"prediction\": \"y\"}\n",
         ":2: field 'id': 'a' was already predicted on line 1"},
        {"{\"id\": \"a\"}\n", ":1: field 'prediction'"},
        {"{\"id\": \"a\", \"prediction\": 5}\n", ":1: field 'prediction': expected a string"},
        {"{\"id\": \"a\", \"prediction\": \"x\", \"task\": \"docvqa\"}\n", ":1: field 'task'"},
        {"{\"id\": \"a\", \"prediction\": \"x\", \"new_tokens\": \"3\"}\n",
         ":1: field 'new_tokens'"},
        {"{\"id\": \"a\", \"prediction\": \"x\", \"stop_reason\": \"tired\"}\n",
         ":1: field 'stop_reason'"},
        {"{\"id\": \"a\", \"prediction\": \"\xc3\"}\n", ":1: field 'prediction': not valid UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path = put_file("bad_preds.jsonl", bad[i].text);
        rc = g4_eval_preds_read(path, "ocrbench", 0, 1, &p);
        CHECK_MSG(rc == G4_EUSER && error_has(path, bad[i].what, NULL), "case %zu: '%s'", i,
                  g4_error());
        if (!rc) g4_eval_preds_free(&p);
        free(path);
    }
    // append: whole lines, readable back
    path = g4_path_join(tmp, "appended.jsonl");
    g4_eval_pred_file f;
    CHECK(g4_eval_pred_file_open(path, &f) == G4_OK);
    CHECK(g4_eval_pred_file_append(&f, "{\"id\": \"q\", \"prediction\": \"1\"}") == G4_OK);
    CHECK(g4_eval_pred_file_append(&f, "{\"id\": \"r\", \"prediction\": \"2\"}") == G4_OK);
    g4_eval_pred_file g; // one writer at a time
    CHECK(g4_eval_pred_file_open(path, &g) == G4_EUSER && error_has(path, "another process", NULL));
    g4_eval_pred_file_close(&f);
    CHECK(g4_eval_pred_file_open(path, &g) == G4_OK);
    g4_eval_pred_file_close(&g);
    CHECK(g4_eval_preds_read(path, NULL, 0, 0, &p) == G4_OK && p.n == 2 &&
          !strcmp(p.v[1].prediction, "2"));
    g4_eval_preds_free(&p);
    free(path);
}

// --- the recorded smoke predictions against lmms-eval's numbers --------------------------------
// Lines of smoke_predictions.jsonl for one manifest ("librispeech" / "ocr") as a predictions
// file of our format (id + prediction), split round-robin into `parts` files in dir named as
// shards (or predictions.jsonl when parts is 1). Returns the number of lines.
static int write_recorded(const char *fixtures, const char *which, const char *dir, int parts,
                          int duplicate_first, int drop_last) {
    char *path = g4_sprintf("%s/eval/smoke_predictions.jsonl", fixtures), *text;
    size_t n;
    if (g4_read_file(path, &text, &n)) {
        free(path);
        return 0;
    }
    FILE *out[8] = {0};
    for (int s = 0; s < parts; s++) {
        char *name = parts == 1 ? g4_sprintf("%s/predictions.jsonl", dir)
                                : g4_sprintf("%s/predictions.shard-%d-of-%d.jsonl", dir, s, parts);
        out[s] = fopen(name, "wb");
        free(name);
    }
    int k = 0, lines = 0;
    cJSON *first = NULL;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "manifest");
        if (cJSON_IsString(m) && !strcmp(m->valuestring, which)) lines++;
        cJSON_Delete(o);
    }
    free(text);
    g4_read_file(path, &text, &n);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "manifest");
        if (cJSON_IsString(m) && !strcmp(m->valuestring, which) && !(drop_last && k == lines - 1)) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "id", cJSON_GetObjectItem(o, "id")->valuestring);
            cJSON_AddStringToObject(p, "prediction",
                                    cJSON_GetObjectItem(o, "prediction")->valuestring);
            char *s = cJSON_PrintUnformatted(p);
            fprintf(out[k % parts], "%s\n", s);
            if (!first) first = cJSON_Duplicate(p, 1);
            free(s);
            cJSON_Delete(p);
        }
        if (cJSON_IsString(m) && !strcmp(m->valuestring, which)) k++;
        cJSON_Delete(o);
    }
    if (duplicate_first && first) { // the first item again, in the last file
        char *s = cJSON_PrintUnformatted(first);
        fprintf(out[parts - 1], "%s\n", s);
        free(s);
    }
    cJSON_Delete(first);
    for (int s = 0; s < parts; s++) fclose(out[s]);
    free(text);
    free(path);
    return lines;
}

// The expected number at smoke_expected.json[section][key].
static double expected(const cJSON *exp, const char *section, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(exp, section), key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

// scores.json written by eval-merge: its value and count.
static int merged_value(const char *dir, double *value, int *count) {
    char *p = g4_sprintf("%s/scores.json", dir);
    cJSON *j = g4t_read_json(p);
    free(p);
    const cJSON *v = cJSON_GetObjectItem(j, "value"), *c = cJSON_GetObjectItem(j, "count");
    int ok = cJSON_IsNumber(v) && cJSON_IsNumber(c);
    if (ok) *value = v->valuedouble, *count = c->valueint;
    cJSON_Delete(j);
    return ok;
}

static void test_recorded(const char *fixtures) {
    char *exp_path = g4_sprintf("%s/eval/smoke_expected.json", fixtures);
    cJSON *exp = g4t_read_json(exp_path);
    CHECK_MSG(exp != NULL, "%s", exp_path);
    struct {
        const char *task, *manifest, *which, *section, *key;
        int items;
    } runs[] = {
        {"librispeech", "librispeech_smoke.jsonl", "librispeech", "librispeech", "wer", 10},
        {"ocrbench", "ocr_smoke.jsonl", "ocr", "ocr", "ocrbench_accuracy", 6},
        {"docvqa", "ocr_smoke.jsonl", "ocr", "ocr", "anls", 6},
    };
    for (size_t r = 0; exp && r < sizeof runs / sizeof runs[0]; r++) {
        const g4_eval_task *t = g4_eval_task_find(runs[r].task);
        char *man = g4_sprintf("%s/eval/%s", fixtures, runs[r].manifest);
        double want = expected(exp, runs[r].section, runs[r].key);
        for (int parts = 1; parts <= 3; parts++) {
            char *dir = g4_sprintf("%s/rec-%s-%d", tmp, runs[r].task, parts);
            mkdir(dir, 0755);
            CHECK_INT(write_recorded(fixtures, runs[r].which, dir, parts, 0, 0), runs[r].items);
            g4_eval_run_result res;
            int rc = g4_eval_merge(dir, t, man, -1, &res);
            CHECK_MSG(rc == G4_OK, "%s: %s", runs[r].task, g4_error());
            double v = NAN;
            int count = 0;
            CHECK(rc == G4_OK && merged_value(dir, &v, &count));
            CHECK_MSG(v == want && count == runs[r].items && res.value == want,
                      "%s in %d files: %.17g, lmms-eval %.17g", runs[r].task, parts, v, want);
            g4_eval_run_result_free(&res);
            free(dir);
        }
        // one id twice, one id missing, no manifest known
        char *dir = g4_sprintf("%s/rec-%s-dup", tmp, runs[r].task);
        mkdir(dir, 0755);
        write_recorded(fixtures, runs[r].which, dir, 2, 1, 0);
        g4_eval_run_result res;
        CHECK(g4_eval_merge(dir, t, man, -1, &res) == G4_EUSER &&
              error_has("predicted twice", "shard-0-of-2", NULL));
        free(dir);
        dir = g4_sprintf("%s/rec-%s-missing", tmp, runs[r].task);
        mkdir(dir, 0755);
        write_recorded(fixtures, runs[r].which, dir, 2, 0, 1);
        CHECK(g4_eval_merge(dir, t, man, -1, &res) == G4_EUSER &&
              error_has("1 of the", "have no prediction", NULL));
        // ... fine when --limit leaves the missing last item out
        CHECK(g4_eval_merge(dir, t, man, runs[r].items - 1, &res) == G4_OK &&
              res.count == runs[r].items - 1);
        g4_eval_run_result_free(&res);
        CHECK(g4_eval_merge(dir, t, NULL, -1, &res) == G4_EUSER && error_has("--manifest", NULL));
        free(dir);
        free(man);
    }
    // per-utterance counts and per-item OCRBench / ANLS against lmms-eval's, and the split
    // categories of the LibriSpeech manifest (cards + librivox = the corpus)
    if (exp) {
        char *dir = g4_sprintf("%s/rec-librispeech-1", tmp), *p = g4_sprintf("%s/scores.json", dir);
        cJSON *j = g4t_read_json(p);
        const cJSON *items = cJSON_GetObjectItem(j, "items");
        const cJSON *want = cJSON_GetObjectItem(cJSON_GetObjectItem(exp, "librispeech"), "items");
        CHECK(cJSON_GetArraySize(items) == 10 && cJSON_GetArraySize(want) == 10);
        for (int i = 0; i < cJSON_GetArraySize(want); i++) {
            const cJSON *a = cJSON_GetArrayItem(items, i), *b = cJSON_GetArrayItem(want, i);
            CHECK_MSG(!strcmp(cJSON_GetObjectItem(a, "id")->valuestring,
                              cJSON_GetObjectItem(b, "id")->valuestring) &&
                          cJSON_GetObjectItem(a, "wer")->valuedouble ==
                              cJSON_GetObjectItem(b, "wer")->valuedouble &&
                          cJSON_GetObjectItem(a, "ref_words")->valueint ==
                              cJSON_GetArraySize(cJSON_GetObjectItem(b, "ref_tokens")),
                      "utterance %d", i);
        }
        const cJSON *sc = cJSON_GetObjectItem(j, "scores");
        CHECK(cJSON_GetObjectItem(sc, "edits")->valueint == 6 &&
              cJSON_GetObjectItem(sc, "ref_words")->valueint == 91);
        const cJSON *cats = cJSON_GetObjectItem(j, "categories");
        int e = 0, w = 0;
        for (int c = 0; c < cJSON_GetArraySize(cats); c++) {
            e += cJSON_GetObjectItem(cJSON_GetArrayItem(cats, c), "edits")->valueint;
            w += cJSON_GetObjectItem(cJSON_GetArrayItem(cats, c), "ref_words")->valueint;
        }
        CHECK(cJSON_GetArraySize(cats) == 2 && e == 6 && w == 91);
        cJSON_Delete(j);
        free(p);
        free(dir);
        const char *keys[2] = {"ocrbench", "anls"};
        const char *tasks[2] = {"ocrbench", "docvqa"};
        for (int t = 0; t < 2; t++) {
            dir = g4_sprintf("%s/rec-%s-1", tmp, tasks[t]);
            p = g4_sprintf("%s/scores.json", dir);
            j = g4t_read_json(p);
            items = cJSON_GetObjectItem(j, "items");
            want = cJSON_GetObjectItem(cJSON_GetObjectItem(exp, "ocr"), "items");
            CHECK(cJSON_GetArraySize(items) == 6);
            for (int i = 0; i < cJSON_GetArraySize(want) && i < cJSON_GetArraySize(items); i++)
                CHECK_MSG(
                    cJSON_GetObjectItem(cJSON_GetArrayItem(items, i), "score")->valuedouble ==
                        cJSON_GetObjectItem(cJSON_GetArrayItem(want, i), keys[t])->valuedouble,
                    "%s item %d", tasks[t], i);
            cJSON_Delete(j);
            free(p);
            free(dir);
        }
    }
    cJSON_Delete(exp);
    free(exp_path);
}

// ChartQA: the spec's relaxed_correctness table (7.4, computed with lmms-eval's code), as a
// manifest + predictions, through g4_eval_score; categories human_test / augmented_test give
// the two split means.
static void test_chartqa(void) {
    const g4t_chartqa_case *v = g4t_chartqa_spec;
    const int n = G4T_CHARTQA_SPEC_N;
    g4_sb man = {0}, pred = {0};
    int human = 0, n_human = 0, aug = 0, n_aug = 0, total = 0;
    for (int i = 0; i < n; i++) {
        const char *type = i % 3 ? "human_test" : "augmented_test";
        char *line = g4_sprintf("{\"id\": \"c%d\", \"image\": \"x.png\", \"question\": \"q\", "
                                "\"answer\": \"%s\", \"category\": \"%s\"}\n",
                                i, v[i].target, type);
        g4_sb_puts(&man, line);
        free(line);
        line = g4_sprintf("{\"id\": \"c%d\", \"prediction\": \" %s \"}\n", i, v[i].pred);
        g4_sb_puts(&pred, line);
        free(line);
        total += v[i].want;
        if (i % 3)
            human += v[i].want, n_human++;
        else
            aug += v[i].want, n_aug++;
    }
    char *man_text = g4_sb_take(&man), *pred_text = g4_sb_take(&pred);
    char *mp = put_file("chart.jsonl", man_text), *pp = put_file("chart_preds.jsonl", pred_text);
    g4_eval_manifest m;
    g4_eval_preds p;
    int rc = g4_eval_manifest_read(mp, g4_eval_task_find("chartqa"), NULL, &m);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (!rc && g4_eval_preds_read(pp, "chartqa", 0, 0, &p) == G4_OK) {
        int *sel, n_sel;
        g4_eval_select(m.n, 0, 0, 1, &sel, &n_sel);
        const g4_eval_pred **paired;
        g4_eval_scores s;
        CHECK(g4_eval_match(&m, sel, n_sel, &p, 1, &paired) == G4_OK);
        CHECK(g4_eval_score(&m, sel, n_sel, paired, &s) == G4_OK);
        for (int i = 0; i < n; i++)
            CHECK_MSG(s.items[i].score == v[i].want, "'%s' vs '%s'", v[i].pred, v[i].target);
        CHECK(s.value == (double)total / n && s.human_split == (double)human / n_human &&
              s.augmented_split == (double)aug / n_aug && s.n_human == n_human);
        // Markdown and JSON carry the split metrics
        char *md = g4_eval_scores_md(&s, &(g4_eval_meta){.manifest = mp});
        char *js = g4_eval_scores_json(&s, &(g4_eval_meta){.manifest = mp});
        CHECK(strstr(md, "relaxed_human_split") && strstr(md, "| human_test |") &&
              strstr(js, "\"relaxed_augmented_split\""));
        free(md);
        free(js);
        g4_eval_scores_free(&s);
        free(paired);
        free(sel);
        g4_eval_preds_free(&p);
    }
    if (!rc) g4_eval_manifest_free(&m);
    free(mp);
    free(pp);
    free(man_text);
    free(pred_text);
}

int main(void) {
    const char *fixtures = g4t_env("G4_FIXTURES");
    tmp = g4t_tmpdir();
    test_tasks();
    test_manifest_errors();
    test_select();
    test_predictions();
    test_recorded(fixtures);
    test_chartqa();
    g4t_rmtree(tmp);
    return g4t_finish("test_eval_runner");
}
