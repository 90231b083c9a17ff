// test_eval_model.c: the eval runner end to end on the CPU with the tiny package
// (mobius-tiny-f16, random weights, the chat fixture's tokenizer) and media committed under
// tests/fixtures/frontends/media, for each of the four tasks:
//   - the predictions file holds one line per item in manifest order, with the task's
//     max_new_tokens (128 / 32 / 16 / 256) respected and recorded in run.json;
//   - scores.json equals eval/metrics applied here, independently, to the same predictions
//     (random weights give random text, so the scores' values say nothing; that the runner pairs
//     and aggregates the predictions as lmms-eval does is what is checked). The metrics
//     themselves are tested against lmms-eval's vectors in test_metrics.c. Because random text
//     scores 0 almost everywhere, each task is scored a second time (eval-merge) against a
//     manifest whose answers are derived from the predictions, so the values are not trivial;
//   - --keep-stop: every prediction is the default run's cut before its first "\n\n" (greedy
//     decoding is deterministic, so the tokens up to there are the same);
//   - --resume after a torn line continues to the same predictions; shards merged give
//     exactly the unsharded score;
//   - --batch N (librispeech): the items decoded together give the one-at-a-time predictions in
//     the same order, and so does a torn file resumed with --batch 2.
// Exact comparisons: the runner and this test add the per-item scores in manifest order and
// divide once, the same double operations.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "eval/metrics.h"
#include "eval/pystr.h"
#include "eval/runner.h"
#include "tests/test_util.h"

#define N_ITEMS 3
// Items per task that run. Under AddressSanitizer the CPU towers and 256-token generations run
// ~10x slower: 2 items still cover resume (a torn second line) and shards, within the timeout.
#if defined(__SANITIZE_ADDRESS__)
static const int n_items = 2;
#else
static const int n_items = N_ITEMS;
#endif

static char *tmp, *fixtures, *tokenizer;
static const char *package;

typedef struct {
    const char *task;
    const char *media[N_ITEMS];    // under tests/fixtures/frontends/media
    const char *question[N_ITEMS]; // image tasks
    const char *answer[N_ITEMS];   // image tasks: one answer each (ChartQA takes one)
    const char *category[N_ITEMS];
    const char *dataset[N_ITEMS];
    const char *transcript[N_ITEMS]; // librispeech
} task_case;

static const task_case cases[] = {
    {"ocrbench",
     {"square_rgb.png", "photo.jpg", "tall_gray.png"},
     {"  What is written here?\n", "Read the text.", "Write the formula."},
     {"e", "", "x^2"}, // "" matches anything
     {"Regular Text Recognition", "Doc-oriented VQA",
      "Handwritten Mathematical Expression Recognition"},
     {"IIIT5K", "docvqa", "HME100k"},
     {0}},
    {"docvqa",
     {"square_rgb.png", "photo.jpg", "square_rgb.png"},
     {"What is the date?", "Who signed it?", "What is the total?"},
     {"1/8/93", "Dr. John Smith", "e"},
     {"date", "person", "number"},
     {0},
     {0}},
    {"chartqa",
     {"photo.jpg", "square_rgb.png", "tall_gray.png"},
     {"How many bars are there?", "Which colour is the largest?", "What is the maximum?"},
     {"12", "Dark Blue", "0"},
     {"human_test", "augmented_test", "human_test"},
     {0},
     {0}},
    {"librispeech",
     {"speech_7.3s_8k.flac", "tone_1s_f32.wav", "silence_1s.wav"},
     {0},
     {0},
     {"speech", "tone", "speech"},
     {0},
     {"he hoped there would be stew for dinner", "ten of clubs", ""}},
};

typedef struct {
    int n;
    char *id[16], *pred[16], *stop[16];
    int new_tokens[16], n_tokens[16];
    char *task[16];
} preds;

static void preds_free(preds *p) {
    for (int i = 0; i < p->n; i++) {
        free(p->id[i]);
        free(p->pred[i]);
        free(p->stop[i]);
        free(p->task[i]);
    }
    p->n = 0;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

// The predictions file parsed here, with cJSON only (not eval/predictions.c).
static int read_preds(const char *path, preds *p) {
    memset(p, 0, sizeof *p);
    char *text;
    size_t n;
    if (g4_read_file(path, &text, &n)) return 0;
    g4_forget_input(path); // the runner appends to it again later in this process
    for (char *line = strtok(text, "\n"); line && p->n < 16; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        int i = p->n++;
        p->id[i] = g4_strdup(jstr(o, "id"));
        p->pred[i] = g4_strdup(jstr(o, "prediction"));
        p->stop[i] = g4_strdup(jstr(o, "stop_reason"));
        p->task[i] = g4_strdup(jstr(o, "task"));
        const cJSON *nt = cJSON_GetObjectItem(o, "new_tokens");
        p->new_tokens[i] = cJSON_IsNumber(nt) ? nt->valueint : -1;
        p->n_tokens[i] = cJSON_GetArraySize(cJSON_GetObjectItem(o, "tokens"));
        cJSON_Delete(o);
    }
    free(text);
    return 1;
}

// Writes a manifest for case c; answers / transcripts from `alt` when given (derived ones).
static char *write_manifest(const task_case *c, const char *name, char *const *alt) {
    char *path = g4_sprintf("%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    int audio = !strcmp(c->task, "librispeech");
    for (int i = 0; i < n_items; i++) {
        cJSON *o = cJSON_CreateObject();
        char *id = g4_sprintf("%s-%d", c->task, i);
        char *media = g4_sprintf("%s/frontends/media/%s", fixtures, c->media[i]);
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, audio ? "audio" : "image", media);
        if (audio) {
            cJSON_AddStringToObject(o, "transcript", alt ? alt[i] : c->transcript[i]);
        } else {
            cJSON_AddStringToObject(o, "question", c->question[i]);
            const char *a[1] = {alt ? alt[i] : c->answer[i]};
            cJSON_AddItemToObject(o, "answers", cJSON_CreateStringArray(a, 1));
        }
        cJSON_AddStringToObject(o, "category", c->category[i]);
        if (c->dataset[i]) cJSON_AddStringToObject(o, "dataset", c->dataset[i]);
        char *s = cJSON_PrintUnformatted(o);
        fprintf(f, "%s\n", s);
        free(s);
        free(id);
        free(media);
        cJSON_Delete(o);
    }
    fclose(f);
    return path;
}

// The task's score of predictions p against answers (or transcripts) ans, computed here with
// eval/metrics only; per-item scores to item[].
static double score_here(const task_case *c, const preds *p, char *const *ans, double *item) {
    double sum = 0;
    g4_wer acc = {0};
    for (int i = 0; i < n_items; i++) {
        const char *a[1] = {ans[i]};
        int s01 = -1;
        double s = NAN;
        if (!strcmp(c->task, "ocrbench")) {
            CHECK(g4_ocrbench_score(p->pred[i], a, 1, c->dataset[i], &s01) == G4_OK);
            s = s01;
        } else if (!strcmp(c->task, "docvqa")) {
            CHECK(g4_anls(p->pred[i], a, 1, &s) == G4_OK);
        } else if (!strcmp(c->task, "chartqa")) {
            CHECK(g4_chartqa_relaxed(p->pred[i], a[0], &s01) == G4_OK);
            s = s01;
        } else {
            int64_t e, w;
            CHECK(g4_wer_add(&acc, a[0], p->pred[i], &e, &w) == G4_OK);
            s = (double)e; // compared with the item's "edits"
        }
        item[i] = s;
        sum += s;
    }
    if (!strcmp(c->task, "librispeech")) {
        double v = NAN;
        CHECK(g4_wer_percent(&acc, &v) == G4_OK);
        return v;
    }
    return sum / n_items;
}

// scores.json's value and per-item scores against ours.
static void check_scores(const task_case *c, const char *scores_path, double want,
                         const double *item, const char *what) {
    cJSON *j = g4t_read_json(scores_path);
    CHECK_MSG(j != NULL, "%s: %s", what, scores_path);
    if (!j) return;
    const cJSON *v = cJSON_GetObjectItem(j, "value");
    CHECK_MSG(cJSON_IsNumber(v) && v->valuedouble == want, "%s %s: scores.json %.17g, here %.17g",
              c->task, what, cJSON_IsNumber(v) ? v->valuedouble : NAN, want);
    CHECK_INT(cJSON_GetObjectItem(j, "count")->valueint, n_items);
    const cJSON *items = cJSON_GetObjectItem(j, "items");
    CHECK_INT(cJSON_GetArraySize(items), n_items);
    int wer = !strcmp(c->task, "librispeech");
    for (int i = 0; i < n_items && i < cJSON_GetArraySize(items); i++) {
        const cJSON *x = cJSON_GetObjectItem(cJSON_GetArrayItem(items, i), wer ? "edits" : "score");
        CHECK_MSG(cJSON_IsNumber(x) && x->valuedouble == item[i], "%s %s item %d: %.17g vs %.17g",
                  c->task, what, i, cJSON_IsNumber(x) ? x->valuedouble : NAN, item[i]);
    }
    cJSON_Delete(j);
}

static int run(const task_case *c, const char *manifest, const char *out, int keep_stop, int resume,
               int shard_i, int shard_n, g4_eval_run_result *res) {
    g4_eval_run_opts o = {
        .task = g4_eval_task_find(c->task),
        .manifest = manifest,
        .package = package,
        .tokenizer = tokenizer,
        .be = g4_backend_cpu(),
        .backend = "cpu",
        .out_dir = out,
        .shard_i = shard_i,
        .shard_n = shard_n,
        .resume = resume,
        .keep_stop = keep_stop,
    };
    int rc = g4_eval_run(&o, res);
    CHECK_MSG(rc == G4_OK, "%s: %s", c->task, g4_error());
    return rc;
}

// The same items, predictions and tokens (timings aside).
static int same_preds(const preds *a, const preds *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->id[i], b->id[i]) || strcmp(a->pred[i], b->pred[i]) ||
            a->new_tokens[i] != b->new_tokens[i] || strcmp(a->stop[i], b->stop[i]))
            return 0;
    return 1;
}

static int n_double_newline = 0;

// The first n bytes of valid UTF-8 s, moved back to a character boundary (new string).
static char *utf8_prefix(const char *s, size_t n) {
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--;
    return g4_strndup(s, n);
}

static void test_task(const task_case *c) {
    const g4_eval_task *t = g4_eval_task_find(c->task);
    char *name = g4_sprintf("%s.jsonl", c->task);
    char *manifest = write_manifest(c, name, NULL);
    char *out = g4_sprintf("%s/out-%s", tmp, c->task);
    g4_eval_run_result res;
    if (run(c, manifest, out, 0, 0, 0, 1, &res)) return;
    CHECK(res.selected == n_items && res.predicted == n_items && res.resumed == 0);
    g4_eval_run_result_free(&res);

    // run.json: the task's max_new_tokens; the predictions: one line per item, in order
    char *p = g4_sprintf("%s/run.json", out);
    cJSON *rj = g4t_read_json(p);
    CHECK(rj && cJSON_GetObjectItem(rj, "max_new")->valueint == t->max_new &&
          !strcmp(jstr(rj, "task"), t->name) && !strcmp(jstr(rj, "backend"), "cpu"));
    cJSON_Delete(rj);
    free(p);
    preds pr;
    p = g4_sprintf("%s/predictions.jsonl", out);
    CHECK(read_preds(p, &pr) && pr.n == n_items);
    for (int i = 0; i < pr.n; i++) {
        char *id = g4_sprintf("%s-%d", c->task, i);
        CHECK_MSG(!strcmp(pr.id[i], id) && !strcmp(pr.task[i], t->name), "%s line %d", c->task, i);
        CHECK_MSG(pr.new_tokens[i] >= 1 && pr.new_tokens[i] <= t->max_new &&
                      pr.n_tokens[i] == pr.new_tokens[i],
                  "%s item %d: %d new tokens (max_new %d)", c->task, i, pr.new_tokens[i],
                  t->max_new);
        CHECK_MSG(!strcmp(pr.stop[i], "eos") ||
                      (!strcmp(pr.stop[i], "max_new") && pr.new_tokens[i] == t->max_new),
                  "%s item %d: stop %s after %d", c->task, i, pr.stop[i], pr.new_tokens[i]);
        n_double_newline += strstr(pr.pred[i], "\n\n") != NULL;
        free(id);
    }
    free(p);

    // scores.json = the metrics applied here to the same predictions
    double item[N_ITEMS];
    char *ans[N_ITEMS];
    for (int i = 0; i < n_items; i++)
        ans[i] = (char *)(t->id == G4_EVAL_LIBRISPEECH ? c->transcript[i] : c->answer[i]);
    double want = score_here(c, &pr, ans, item);
    char *scores = g4_sprintf("%s/scores.json", out);
    check_scores(c, scores, want, item, "run");
    char *md = g4_sprintf("%s/scores.md", out);
    CHECK(g4_is_file(md));
    free(md);

    // the same predictions against answers derived from them: non-trivial values
    char *derived[N_ITEMS];
    for (int i = 0; i < n_items; i++) {
        const char *s = pr.pred[i];
        size_t n = strlen(s);
        switch (t->id) {
        case G4_EVAL_OCRBENCH: // a piece of the response (found), or a string it lacks
            derived[i] = i == 1 ? g4_strdup("\x01 not there \x01") : utf8_prefix(s, n / 2);
            break;
        case G4_EVAL_DOCVQA: // the response with its tail cut: ANLS between 0.5 and 1, or 0
            derived[i] = utf8_prefix(s, n - n / (i + 3));
            break;
        case G4_EVAL_CHARTQA: // the response itself (string match), or a number
            derived[i] = i == 0 ? g4_py_strip(s) : g4_strdup("12"); // targets are not stripped
            break;
        case G4_EVAL_LIBRISPEECH: // the response with its first word changed
            derived[i] = g4_sprintf("zebra %s", s + strcspn(s, " "));
            break;
        }
    }
    char *dname = g4_sprintf("%s_derived.jsonl", c->task);
    char *dman = write_manifest(c, dname, derived);
    // (scored in a directory of its own, so that out/scores.json stays the run's)
    char *ddir = g4_sprintf("%s/derived-%s", tmp, c->task);
    mkdir(ddir, 0755);
    CHECK(g4t_sh("cp '%s/predictions.jsonl' '%s/'", out, ddir) == 0);
    int rc = g4_eval_merge(ddir, t, dman, -1, &res);
    CHECK_MSG(rc == G4_OK, "%s derived: %s", c->task, g4_error());
    g4_eval_run_result_free(&res);
    want = score_here(c, &pr, derived, item);
    char *dscores = g4_sprintf("%s/scores.json", ddir);
    check_scores(c, dscores, want, item, "derived answers");
    free(dscores);
    free(ddir);
    int nontrivial = 0;
    for (int i = 0; i < n_items; i++) nontrivial |= item[i] != 0;
    CHECK_MSG(nontrivial, "%s: every derived score is 0", c->task);
    printf("%s: %d items, max_new %d, derived %s = %.6f\n", c->task, n_items, t->max_new, t->metric,
           want);
    for (int i = 0; i < n_items; i++) free(derived[i]);
    free(dman);
    free(dname);

    // --keep-stop: the default run's predictions cut before their first "\n\n" (on the two
    // tasks with long answers; images cost a vision tower run each on the CPU)
    char *kout = g4_sprintf("%s/keep-%s", tmp, c->task);
    if (t->max_new >= 128 && !run(c, manifest, kout, 1, 0, 0, 1, &res)) {
        preds kp;
        char *kp_path = g4_sprintf("%s/predictions.jsonl", kout);
        CHECK(read_preds(kp_path, &kp) && kp.n == n_items);
        for (int i = 0; i < kp.n && i < pr.n; i++) {
            const char *cut = strstr(pr.pred[i], "\n\n");
            size_t want_len = cut ? (size_t)(cut - pr.pred[i]) : strlen(pr.pred[i]);
            CHECK_MSG(strlen(kp.pred[i]) == want_len && !strncmp(kp.pred[i], pr.pred[i], want_len),
                      "%s item %d: --keep-stop prediction is not the cut default one", c->task, i);
            CHECK_MSG(cut ? !strcmp(kp.stop[i], "stop_string") : !strcmp(kp.stop[i], pr.stop[i]),
                      "%s item %d: stop %s", c->task, i, kp.stop[i]);
        }
        preds_free(&kp);
        free(kp_path);
        g4_eval_run_result_free(&res);
    }
    free(kout);
    preds_free(&pr);
    free(scores);
    free(out);
    free(manifest);
    free(name);
}

// --resume after a torn line, and shards merged, on one task.
static void test_resume_and_shards(const task_case *c) {
    char *manifest = g4_sprintf("%s/%s.jsonl", tmp, c->task);
    char *ref = g4_sprintf("%s/out-%s", tmp, c->task); // test_task's unsharded run
    char *ref_preds = g4_sprintf("%s/predictions.jsonl", ref);
    preds want;
    CHECK(read_preds(ref_preds, &want) && want.n == n_items);

    // a crash in the middle of writing line 2: line 1 whole, line 2 cut in half
    char *dir = g4_sprintf("%s/resume-%s", tmp, c->task);
    mkdir(dir, 0755);
    char *text;
    size_t n;
    CHECK(g4_read_file(ref_preds, &text, &n) == G4_OK);
    size_t l1 = (size_t)(strchr(text, '\n') - text) + 1;
    size_t l2 = (size_t)(strchr(text + l1, '\n') - text) + 1;
    size_t cut = l1 + (l2 - l1) / 2;
    char *path = g4_sprintf("%s/predictions.jsonl", dir);
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, cut, f);
    fclose(f);
    free(text);
    g4_eval_run_result res;
    g4_eval_run_opts o = {.task = g4_eval_task_find(c->task),
                          .manifest = manifest,
                          .package = package,
                          .tokenizer = tokenizer,
                          .be = g4_backend_cpu(),
                          .out_dir = dir};
    // without --resume: refused, the file left alone
    CHECK(g4_eval_run(&o, &res) == G4_EUSER && strstr(g4_error(), "--resume"));
    o.resume = 1;
    int rc = g4_eval_run(&o, &res);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    CHECK(res.resumed == 1 && res.predicted == n_items - 1 && res.torn_bytes == (long)(cut - l1));
    g4_eval_run_result_free(&res);
    preds got;
    CHECK(read_preds(path, &got) && same_preds(&got, &want));
    preds_free(&got);
    // resuming a finished run predicts nothing and scores the same
    rc = g4_eval_run(&o, &res);
    CHECK_MSG(rc == G4_OK && res.predicted == 0 && res.resumed == n_items, "%s", g4_error());
    g4_eval_run_result_free(&res);
    // another max_new cannot continue this file
    o.max_new = 7;
    CHECK(g4_eval_run(&o, &res) == G4_EUSER && strstr(g4_error(), "max_new"));
    free(path);

    // shards 0/2 and 1/2 into one directory, merged: the unsharded score, bit for bit
    char *sdir = g4_sprintf("%s/shards-%s", tmp, c->task);
    for (int s = 0; s < 2; s++) {
        if (run(c, manifest, sdir, 0, 0, s, 2, &res)) break;
        CHECK_INT(res.selected, (n_items + 1 - s) / 2); // items 0, 2, ... and 1, 3, ...
        g4_eval_run_result_free(&res);
    }
    rc = g4_eval_merge(sdir, g4_eval_task_find(c->task), NULL, -1, &res);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    g4_eval_run_result_free(&res);
    char *a = g4_sprintf("%s/scores.json", ref), *b = g4_sprintf("%s/scores.json", sdir);
    cJSON *ja = g4t_read_json(a), *jb = g4t_read_json(b);
    CHECK(ja && jb &&
          cJSON_GetObjectItem(ja, "value")->valuedouble ==
              cJSON_GetObjectItem(jb, "value")->valuedouble &&
          cJSON_Compare(cJSON_GetObjectItem(ja, "items"), cJSON_GetObjectItem(jb, "items"), 1) &&
          cJSON_Compare(cJSON_GetObjectItem(ja, "categories"),
                        cJSON_GetObjectItem(jb, "categories"), 1));
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(jb, "run"), "merged_files")->valueint == 2);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    free(a);
    free(b);
    free(sdir);
    preds_free(&want);
    free(dir);
    free(ref_preds);
    free(ref);
    free(manifest);
}

// --batch: the items decoded together give the one-at-a-time run's predictions, in its order;
// a torn file resumed with --batch too.
static void test_batched(const task_case *c) {
    char *manifest = g4_sprintf("%s/%s.jsonl", tmp, c->task);
    char *ref_preds = g4_sprintf("%s/out-%s/predictions.jsonl", tmp, c->task);
    preds want, got;
    CHECK(read_preds(ref_preds, &want) && want.n == n_items);
    char *dir = g4_sprintf("%s/batch-%s", tmp, c->task);
    g4_eval_run_opts o = {.task = g4_eval_task_find(c->task),
                          .manifest = manifest,
                          .package = package,
                          .tokenizer = tokenizer,
                          .be = g4_backend_cpu(),
                          .out_dir = dir,
                          .batch = n_items};
    g4_eval_run_result res;
    int rc = g4_eval_run(&o, &res);
    CHECK_MSG(rc == G4_OK, "%s --batch %d: %s", c->task, n_items, g4_error());
    CHECK(!rc && res.predicted == n_items && res.failed == 0);
    g4_eval_run_result_free(&res);
    char *path = g4_sprintf("%s/predictions.jsonl", dir);
    CHECK_MSG(read_preds(path, &got) && same_preds(&got, &want),
              "%s: --batch %d predictions differ from one at a time", c->task, n_items);
    preds_free(&got);
    // the first line only, then resumed two at a time
    char *text;
    size_t n;
    CHECK(g4_read_file(path, &text, &n) == G4_OK);
    g4_forget_input(path); // the runner appends to it again
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, (size_t)(strchr(text, '\n') - text) + 1, f);
    fclose(f);
    free(text);
    o.resume = 1, o.batch = 2;
    rc = g4_eval_run(&o, &res);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    CHECK(!rc && res.resumed == 1 && res.predicted == n_items - 1);
    g4_eval_run_result_free(&res);
    CHECK_MSG(read_preds(path, &got) && same_preds(&got, &want),
              "%s: resumed --batch 2 predictions differ from one at a time", c->task);
    preds_free(&got);
    preds_free(&want);
    free(path);
    free(dir);
    free(ref_preds);
    free(manifest);
}

int main(void) {
    fixtures = g4_strdup(g4t_env("G4_FIXTURES"));
    package = g4t_env("G4_TINY_PKG");
    tokenizer = g4_sprintf("%s/chat/chat_bpe.json", fixtures);
    tmp = g4t_tmpdir();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_task(&cases[i]);
    // "\n\n" in some default prediction, so the --keep-stop checks cut something
    CHECK_MSG(n_double_newline > 0, "no default prediction holds \"\\n\\n\"");
    test_resume_and_shards(&cases[3]); // librispeech: no vision tower, the quickest
    test_batched(&cases[3]);
    g4t_rmtree(tmp);
    free(tokenizer);
    free(fixtures);
    return g4t_finish("test_eval_model");
}
