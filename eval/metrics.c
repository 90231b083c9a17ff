// metrics.c: OCRBench, ANLS, ChartQA relaxed accuracy and LibriSpeech corpus WER as lmms-eval
// 0.7.2 computes them (see metrics.h and ../shared/spec/eval-metrics.md sections 3-7).
#include "eval/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/base.h"
#include "eval/pyre.h"
#include "eval/pystr.h"
#include "eval/whisper_norm.h"

// The response as the scorers see it: Task.process_results strips it (None -> "").
static int stripped_response(const char *metric, const char *response, char **out) {
    if (!response) response = "";
    char what[64];
    snprintf(what, sizeof what, "%s: response", metric);
    int rc = g4_py_check_utf8(response, what);
    if (rc != G4_OK) return rc;
    *out = g4_py_strip(response);
    return G4_OK;
}

static int check_answers(const char *metric, const char *const *answers, size_t n) {
    if (n && !answers) return g4_fail(G4_EUSER, "%s: %zu answers expected, got none", metric, n);
    for (size_t i = 0; i < n; i++) {
        if (!answers[i]) return g4_fail(G4_EUSER, "%s: answer %zu is missing (NULL)", metric, i);
        char what[64];
        snprintf(what, sizeof what, "%s: answer %zu", metric, i);
        int rc = g4_py_check_utf8(answers[i], what);
        if (rc != G4_OK) return rc;
    }
    return G4_OK;
}

// --- OCRBench ---------------------------------------------------------------------------------
// HME100k: s.strip().replace("\n", " ").replace(" ", "")
static char *hme_form(const char *s) {
    char *a = g4_py_strip(s), *b = g4_py_replace(a, "\n", " "), *c = g4_py_replace(b, " ", "");
    free(a);
    free(b);
    return c;
}

// others: s.lower().strip().replace("\n", " ")
static char *lower_form(const char *s) {
    char *a = g4_py_lower(s), *b = g4_py_strip(a), *c = g4_py_replace(b, "\n", " ");
    free(a);
    free(b);
    return c;
}

int g4_ocrbench_score(const char *response, const char *const *answers, size_t n_answers,
                      const char *dataset, int *score) {
    char *pred;
    int rc = stripped_response("ocrbench", response, &pred);
    if (rc != G4_OK) return rc;
    if ((rc = check_answers("ocrbench", answers, n_answers)) != G4_OK) {
        free(pred);
        return rc;
    }
    int hme = dataset && strcmp(dataset, "HME100k") == 0;
    // pred = results[0].strip(), then the per-side form; a substring test on valid UTF-8 is
    // the same on bytes as on code points
    char *p = hme ? hme_form(pred) : lower_form(pred);
    int s = 0;
    for (size_t i = 0; i < n_answers && !s; i++) {
        char *a = hme ? hme_form(answers[i]) : lower_form(answers[i]);
        s = strstr(p, a) != NULL;
        free(a);
    }
    free(p);
    free(pred);
    *score = s;
    return G4_OK;
}

// --- ANLS ---------------------------------------------------------------------------------------
size_t g4_levenshtein(const char *a, const char *b) {
    size_t na, nb;
    int32_t *x = g4_py_decode(a, &na), *y = g4_py_decode(b, &nb);
    if (na > nb) { // keep the shorter string in x: one row of len(x) + 1
        int32_t *t = x;
        x = y;
        y = t;
        size_t tn = na;
        na = nb;
        nb = tn;
    }
    size_t *row = g4_malloc((na + 1) * sizeof *row);
    for (size_t i = 0; i <= na; i++) row[i] = i;
    for (size_t j = 0; j < nb; j++) {
        size_t diag = row[0]; // row[i] of the previous line, before it is overwritten
        row[0] = j + 1;
        for (size_t i = 0; i < na; i++) {
            size_t up = row[i + 1], best;
            if (x[i] == y[j]) {
                best = diag;
            } else {
                best = diag < up ? diag : up;
                if (row[i] < best) best = row[i];
                best += 1;
            }
            diag = up;
            row[i + 1] = best;
        }
    }
    size_t d = row[na];
    free(row);
    free(x);
    free(y);
    return d;
}

// " ".join(s.strip().lower().split())
static char *anls_form(const char *s) {
    char *a = g4_py_strip(s), *b = g4_py_lower(a), *c = g4_py_collapse_ws(b);
    free(a);
    free(b);
    return c;
}

int g4_anls(const char *response, const char *const *answers, size_t n_answers, double *score) {
    char *pred;
    int rc = stripped_response("anls", response, &pred);
    if (rc != G4_OK) return rc;
    if (n_answers == 0) {
        free(pred);
        return g4_fail(G4_EUSER,
                       "anls: the question has no ground-truth answers (at least 1 expected)");
    }
    if ((rc = check_answers("anls", answers, n_answers)) != G4_OK) {
        free(pred);
        return rc;
    }
    char *pn = anls_form(pred);
    size_t plen = g4_py_upper_len(pred);
    double best = INFINITY;
    for (size_t i = 0; i < n_answers; i++) {
        char *gn = anls_form(answers[i]);
        size_t dist = g4_levenshtein(gn, pn);
        size_t glen = g4_py_upper_len(answers[i]);
        size_t length = glen > plen ? glen : plen;
        double v = length == 0 ? 0.0 : (double)dist / (double)length;
        if (v < best) best = v;
        free(gn);
    }
    free(pn);
    free(pred);
    double q = 1.0 - best;
    *score = q < 0.5 ? 0.0 : q;
    return G4_OK;
}

// --- ChartQA
// --------------------------------------------------------------------------------------
int g4_chartqa_to_float(const char *text, double *out) {
    if (!text || g4_py_check_utf8(text, "chartqa: number") != G4_OK) return 0; // not a str: None
    size_t n = strlen(text);
    if (n && text[n - 1] == '%') {
        while (n && text[n - 1] == '%') n--; // rstrip("%")
        char *rest = g4_strndup(text, n);
        double v;
        int ok = g4_py_float(rest, &v);
        free(rest);
        if (ok) *out = v / 100.0;
        return ok;
    }
    return g4_py_float(text, out);
}

int g4_chartqa_relaxed(const char *response, const char *target, int *correct) {
    char *pred;
    int rc = stripped_response("chartqa", response, &pred);
    if (rc != G4_OK) return rc;
    if (!target) {
        free(pred);
        return g4_fail(G4_EUSER, "chartqa: the target answer is missing (NULL)");
    }
    if ((rc = g4_py_check_utf8(target, "chartqa: target")) != G4_OK) {
        free(pred);
        return rc;
    }
    double p, t;
    int p_ok = g4_chartqa_to_float(pred, &p), t_ok = g4_chartqa_to_float(target, &t);
    if (p_ok && t_ok && t != 0.0) { // `target_float` truthy: parsed and non-zero (NaN is truthy)
        *correct = fabs(p - t) / fabs(t) <= 0.05;
    } else {
        char *a = g4_py_lower(pred), *b = g4_py_lower(target);
        *correct = strcmp(a, b) == 0;
        free(a);
        free(b);
    }
    free(pred);
    return G4_OK;
}

// --- LibriSpeech WER ----------------------------------------------------------------------------
enum { RE_SP_TAG, RE_SP_WS, RE_SP_PUNCT, RE_SP_COUNT };
static g4_re *re_sp[RE_SP_COUNT];
static pthread_once_t sp_once = PTHREAD_ONCE_INIT;

static void sp_init(void) {
    re_sp[RE_SP_TAG] = g4_re_compile("<\\|.*?\\|>");
    re_sp[RE_SP_WS] = g4_re_compile(G4_PY_S "+");
    re_sp[RE_SP_PUNCT] = g4_re_compile(" ?([!,.?;:])");
}

// asr_wer_utils.remove_sp(text, "en") (English is not a no-space language)
static int remove_sp(const char *text, char **out) {
    pthread_once(&sp_once, sp_init);
    char *a = NULL, *b = NULL, *c = NULL;
    int rc = g4_re_sub(re_sp[RE_SP_TAG], text, " ", &a);
    if (rc == G4_OK) rc = g4_re_sub(re_sp[RE_SP_WS], a, " ", &b);
    if (rc == G4_OK) rc = g4_re_sub(re_sp[RE_SP_PUNCT], b, "\\1", &c);
    if (rc == G4_OK) {
        const char *p = c;
        while (*p == ' ') p++; // lstrip(" ")
        *out = g4_strdup(p);
    }
    free(a);
    free(b);
    free(c);
    return rc;
}

// A token made only of punctuation (categories P*), or empty: all() of nothing is true.
static int all_punctuation(const char *t) {
    size_t n;
    int32_t *cp = g4_py_decode(t, &n);
    int all = 1;
    for (size_t i = 0; i < n && all; i++) all = utf8proc_category_string(cp[i])[0] == 'P';
    free(cp);
    return all;
}

// EvaluationTokenizer("none", lowercase=True, punctuation_removal=True).tokenize(s).split():
// split on single ' ', drop punctuation-only (and empty) tokens, re-join, lower(), split().
static char *tokenize(const char *s) {
    g4_sb b = {0};
    g4_sb_put(&b, "", 0);
    size_t kept = 0;
    const char *p = s;
    for (;;) {
        const char *q = strchr(p, ' ');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        char *tok = g4_strndup(p, len);
        if (!all_punctuation(tok)) {
            if (kept++) g4_sb_putc(&b, ' ');
            g4_sb_puts(&b, tok);
        }
        free(tok);
        if (!q) break;
        p = q + 1;
    }
    char *joined = g4_sb_take(&b), *lowered = g4_py_lower(joined);
    free(joined);
    return lowered;
}

int g4_wer_tokens(const char *text, char ***words, size_t *n) {
    int rc = g4_py_check_utf8(text, "wer: text");
    if (rc != G4_OK) return rc;
    char *a = NULL, *b = NULL, *c = NULL;
    rc = remove_sp(text, &a);
    if (rc == G4_OK) rc = g4_whisper_english(a, &b);
    if (rc == G4_OK) rc = g4_whisper_basic(b, &c);
    if (rc == G4_OK) {
        char *t = tokenize(c);
        *n = g4_py_split(t, words);
        free(t);
    }
    free(a);
    free(b);
    free(c);
    return rc;
}

void g4_wer_words_free(char **words, size_t n) {
    g4_py_words_free(words, n);
}

size_t g4_word_edit_distance(char *const *a, size_t na, char *const *b, size_t nb) {
    size_t *row = g4_malloc((na + 1) * sizeof *row);
    for (size_t i = 0; i <= na; i++) row[i] = i;
    for (size_t j = 0; j < nb; j++) {
        size_t diag = row[0];
        row[0] = j + 1;
        for (size_t i = 0; i < na; i++) {
            size_t up = row[i + 1], best = diag + (strcmp(a[i], b[j]) != 0);
            if (up + 1 < best) best = up + 1;
            if (row[i] + 1 < best) best = row[i] + 1;
            diag = up;
            row[i + 1] = best;
        }
    }
    size_t d = row[na];
    free(row);
    return d;
}

int g4_wer_add(g4_wer *acc, const char *reference, const char *response, int64_t *edits,
               int64_t *ref_words) {
    if (!reference) return g4_fail(G4_EUSER, "wer: the reference transcript is missing (NULL)");
    char *pred;
    int rc = stripped_response("wer", response, &pred);
    if (rc != G4_OK) return rc;
    rc = g4_py_check_utf8(reference, "wer: reference");
    char **rw = NULL, **hw = NULL;
    size_t nr = 0, nh = 0;
    if (rc == G4_OK) rc = g4_wer_tokens(reference, &rw, &nr);
    if (rc == G4_OK) {
        rc = g4_wer_tokens(pred, &hw, &nh);
        if (rc != G4_OK) {
            g4_wer_words_free(rw, nr);
            rw = NULL;
        }
    }
    free(pred);
    if (rc != G4_OK) return rc;
    int64_t d = (int64_t)g4_word_edit_distance(rw, nr, hw, nh);
    acc->edits += d;
    acc->ref_words += (int64_t)nr;
    acc->utterances++;
    if (edits) *edits = d;
    if (ref_words) *ref_words = (int64_t)nr;
    g4_wer_words_free(rw, nr);
    g4_wer_words_free(hw, nh);
    return G4_OK;
}

int g4_wer_percent(const g4_wer *acc, double *percent) {
    if (acc->ref_words <= 0)
        return g4_fail(G4_EUSER,
                       "wer: the %lld reference transcripts hold no words after normalisation "
                       "(WER is undefined)",
                       (long long)acc->utterances);
    *percent = ((double)acc->edits / (double)acc->ref_words) * 100.0;
    return G4_OK;
}
