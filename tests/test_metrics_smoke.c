// test_metrics_smoke.c: the real-media smoke set's manifests (tests/fixtures/eval/
// librispeech_smoke.jsonl, ocr_smoke.jsonl; media from tools/fetch_smoke_set.sh) are well formed,
// and scoring the recorded predictions (smoke_predictions.jsonl: hand-written, not model output)
// gives what lmms-eval 0.7.2's own scorers give (smoke_expected.json, written by
// tools/python/eval_metrics_reference.py smoke). Needs only the committed text files.
// Scores are compared exactly: the C code performs the same double operations in the same order
// as Python (per-item WER = edits / words * 100; means summed left to right, then divided).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "eval/metrics.h"
#include "eval/pystr.h"
#include "loader/json.h"
#include "tests/test_util.h"

#define MAX_ROWS 64

typedef struct {
    cJSON *rows[MAX_ROWS];
    int n;
} jsonl;

// Every non-empty line of path/name parsed as one JSON object.
static int read_jsonl(const char *dir, const char *name, jsonl *out) {
    char *path = g4_path_join(dir, name), *text = NULL;
    size_t size;
    out->n = 0;
    int rc = g4_read_file(path, &text, &size);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    int line = 0;
    for (char *p = text, *nl; rc == G4_OK && p && *p; p = nl ? nl + 1 : NULL) {
        nl = strchr(p, '\n');
        if (nl) *nl = 0;
        line++;
        if (!*p) continue;
        cJSON *o = cJSON_Parse(p);
        CHECK_MSG(cJSON_IsObject(o), "%s:%d: not a JSON object", path, line);
        CHECK_MSG(out->n < MAX_ROWS, "%s: more than %d rows", path, MAX_ROWS);
        if (!cJSON_IsObject(o) || out->n >= MAX_ROWS) {
            cJSON_Delete(o);
            continue;
        }
        out->rows[out->n++] = o;
    }
    free(text);
    free(path);
    return out->n;
}

static void free_jsonl(jsonl *j) {
    for (int i = 0; i < j->n; i++) cJSON_Delete(j->rows[i]);
}

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

// A media path must stay inside the data directory.
static int relative_inside(const char *p) {
    return p && *p && p[0] != '/' && strstr(p, "..") == NULL;
}

// Checks the manifest schema {id, audio|image, question, transcript|answers, category}.
static void check_manifest(const jsonl *m, const char *media_key, int audio) {
    for (int i = 0; i < m->n; i++) {
        const cJSON *r = m->rows[i];
        const char *id = jstr(r, "id");
        CHECK_MSG(id && *id, "row %d: no id", i);
        if (!id) continue;
        for (int k = 0; k < i; k++)
            CHECK_MSG(strcmp(id, jstr(m->rows[k], "id")) != 0, "duplicate id %s", id);
        CHECK_MSG(relative_inside(jstr(r, media_key)),
                  "%s: '%s' must be a relative path inside the data dir", id, media_key);
        CHECK_MSG(jstr(r, "question") && *jstr(r, "question"), "%s: no question", id);
        CHECK_MSG(jstr(r, "category") && *jstr(r, "category"), "%s: no category", id);
        if (audio) {
            CHECK_MSG(jstr(r, "transcript") && *jstr(r, "transcript"), "%s: no transcript", id);
        } else {
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(r, "answers");
            CHECK_MSG(cJSON_IsArray(a) && cJSON_GetArraySize(a) > 0,
                      "%s: answers must be a non-empty list", id);
            const cJSON *it;
            cJSON_ArrayForEach(it, a)
                CHECK_MSG(cJSON_IsString(it), "%s: an answer is not a string", id);
        }
    }
}

static const cJSON *find_by_id(const jsonl *j, const char *id) {
    for (int i = 0; i < j->n; i++)
        if (jstr(j->rows[i], "id") && strcmp(jstr(j->rows[i], "id"), id) == 0) return j->rows[i];
    return NULL;
}

static const cJSON *find_item(const cJSON *items, const char *id) {
    const cJSON *it;
    cJSON_ArrayForEach(it, items) if (strcmp(jstr(it, "id"), id) == 0) return it;
    return NULL;
}

static int same_tokens(char **w, size_t n, const cJSON *want) {
    if (!cJSON_IsArray(want) || (size_t)cJSON_GetArraySize(want) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(w[i], cJSON_GetArrayItem(want, (int)i)->valuestring) != 0) return 0;
    return 1;
}

static double jnum(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

int main(void) {
    const char *dir = g4t_env("G4_FIXTURES");
    char *eval_dir = g4_path_join(dir, "eval");
    jsonl ls, ocr, preds;
    read_jsonl(eval_dir, "librispeech_smoke.jsonl", &ls);
    read_jsonl(eval_dir, "ocr_smoke.jsonl", &ocr);
    read_jsonl(eval_dir, "smoke_predictions.jsonl", &preds);
    CHECK_MSG(ls.n == 10 && ocr.n == 6 && preds.n == 16, "rows: %d speech, %d ocr, %d predictions",
              ls.n, ocr.n, preds.n);
    check_manifest(&ls, "audio", 1);
    check_manifest(&ocr, "image", 0);
    for (int i = 0; i < preds.n; i++) {
        const char *note = jstr(preds.rows[i], "note");
        CHECK_MSG(note && strstr(note, "hand-written"),
                  "prediction %d is not labelled hand-written", i);
    }
    char *exp_path = g4_path_join(eval_dir, "smoke_expected.json");
    g4_json ex;
    int rc = g4_json_open(exp_path, &ex);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    free(exp_path);
    if (rc != G4_OK) return g4t_finish("test_metrics_smoke");

    // LibriSpeech: per utterance and corpus WER
    const cJSON *ls_exp = cJSON_GetObjectItem(ex.root, "librispeech");
    g4_wer corpus = {0};
    for (int i = 0; i < ls.n; i++) {
        const char *id = jstr(ls.rows[i], "id");
        const cJSON *p = find_by_id(&preds, id),
                    *e = find_item(cJSON_GetObjectItem(ls_exp, "items"), id);
        CHECK_MSG(p && e, "%s: no prediction or no expected score", id);
        if (!p || !e) continue;
        const char *ref = jstr(ls.rows[i], "transcript"), *hyp = jstr(p, "prediction");
        int64_t d = -1, n = -1;
        rc = g4_wer_add(&corpus, ref, hyp, &d, &n);
        CHECK_MSG(rc == G4_OK, "%s: %s", id, g4_error());
        double wer = ((double)d / (double)n) * 100.0;
        CHECK_MSG(!isnan(jnum(e, "wer")) && wer == jnum(e, "wer"), "%s: WER %.17g, lmms-eval %.17g",
                  id, wer, jnum(e, "wer"));
        char **w;
        size_t nw;
        char *stripped = g4_py_strip(hyp);
        CHECK(g4_wer_tokens(ref, &w, &nw) == G4_OK);
        CHECK_MSG(same_tokens(w, nw, cJSON_GetObjectItem(e, "ref_tokens")),
                  "%s: reference tokens differ", id);
        g4_wer_words_free(w, nw);
        CHECK(g4_wer_tokens(stripped, &w, &nw) == G4_OK);
        CHECK_MSG(same_tokens(w, nw, cJSON_GetObjectItem(e, "hyp_tokens")),
                  "%s: prediction tokens differ", id);
        g4_wer_words_free(w, nw);
        free(stripped);
    }
    double pct = NAN;
    CHECK(g4_wer_percent(&corpus, &pct) == G4_OK);
    CHECK_MSG(!isnan(pct) && pct == jnum(ls_exp, "wer"), "corpus WER %.17g, lmms-eval %.17g", pct,
              jnum(ls_exp, "wer"));
    printf("librispeech smoke: %lld utterances, %lld edits / %lld words, WER %.4f%%\n",
           (long long)corpus.utterances, (long long)corpus.edits, (long long)corpus.ref_words, pct);

    // OCR: OCRBench substring score and ANLS per item, and their means
    const cJSON *ocr_exp = cJSON_GetObjectItem(ex.root, "ocr");
    double sum_ocr = 0, sum_anls = 0;
    for (int i = 0; i < ocr.n; i++) {
        const char *id = jstr(ocr.rows[i], "id");
        const cJSON *p = find_by_id(&preds, id),
                    *e = find_item(cJSON_GetObjectItem(ocr_exp, "items"), id);
        CHECK_MSG(p && e, "%s: no prediction or no expected score", id);
        if (!p || !e) continue;
        const char *answers[8];
        size_t n = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(ocr.rows[i], "answers")) if (n < 8)
            answers[n++] = it->valuestring;
        const char *ds = jstr(ocr.rows[i], "dataset");
        int score = -1;
        double anls = NAN;
        CHECK(g4_ocrbench_score(jstr(p, "prediction"), answers, n, ds ? ds : "", &score) == G4_OK);
        CHECK(g4_anls(jstr(p, "prediction"), answers, n, &anls) == G4_OK);
        CHECK_MSG(score == (int)jnum(e, "ocrbench"), "%s: OCRBench %d, lmms-eval %g", id, score,
                  jnum(e, "ocrbench"));
        CHECK_MSG(!isnan(anls) && anls == jnum(e, "anls"), "%s: ANLS %.17g, lmms-eval %.17g", id,
                  anls, jnum(e, "anls"));
        sum_ocr += score;
        sum_anls += anls;
    }
    double acc = sum_ocr / ocr.n, mean_anls = sum_anls / ocr.n;
    CHECK_MSG(acc == jnum(ocr_exp, "ocrbench_accuracy"), "OCRBench accuracy %.17g, lmms-eval %.17g",
              acc, jnum(ocr_exp, "ocrbench_accuracy"));
    CHECK_MSG(mean_anls == jnum(ocr_exp, "anls"), "mean ANLS %.17g, lmms-eval %.17g", mean_anls,
              jnum(ocr_exp, "anls"));
    printf("ocr smoke: %d items, OCRBench accuracy %.4f, mean ANLS %.4f\n", ocr.n, acc, mean_anls);

    g4_json_close(&ex);
    free_jsonl(&ls);
    free_jsonl(&ocr);
    free_jsonl(&preds);
    free(eval_dir);
    return g4t_finish("test_metrics_smoke");
}
