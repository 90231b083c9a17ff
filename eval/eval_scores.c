// eval_scores.c: pairing predictions with manifest items and scoring them (see eval_scores.h).
#include "eval/eval_scores.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/generate.h"
#include "eval/metrics.h"

int g4_eval_match(const g4_eval_manifest *m, const int *sel, int n_sel, const g4_eval_preds *files,
                  int n_files, const g4_eval_pred ***preds) {
    g4_strmap all;
    g4_strmap_init(&all, (size_t)m->n);
    for (int i = 0; i < m->n; i++) g4_strmap_put(&all, m->items[i].id, i);
    int *slot = g4_malloc(sizeof(int) * (size_t)(m->n ? m->n : 1)); // manifest index -> k or -1
    for (int i = 0; i < m->n; i++) slot[i] = -1;
    for (int k = 0; k < n_sel; k++) slot[sel[k]] = k;
    const g4_eval_pred **p = g4_calloc((size_t)(n_sel ? n_sel : 1), sizeof *p);
    const char **where = g4_calloc((size_t)(n_sel ? n_sel : 1), sizeof *where);
    int rc = G4_OK;
    for (int f = 0; f < n_files && !rc; f++)
        for (int j = 0; j < files[f].n && !rc; j++) {
            const g4_eval_pred *x = &files[f].v[j];
            int i = g4_strmap_get(&all, x->id);
            if (i < 0)
                rc = g4_fail(G4_EUSER, "%s:%d: id '%s' is not in the manifest %s", files[f].path,
                             x->line, x->id, m->path);
            else if (slot[i] < 0)
                rc = g4_fail(G4_EUSER,
                             "%s:%d: id '%s' (manifest line %d) is not among the items this run "
                             "selects (another --limit or --shard?)",
                             files[f].path, x->line, x->id, m->items[i].line);
            else if (p[slot[i]])
                rc = g4_fail(G4_EUSER, "%s:%d: id '%s' is predicted twice (also %s:%d)",
                             files[f].path, x->line, x->id, where[slot[i]], p[slot[i]]->line);
            else {
                p[slot[i]] = x;
                where[slot[i]] = files[f].path;
            }
        }
    if (!rc) {
        int missing = 0, first = -1;
        for (int k = 0; k < n_sel; k++)
            if (!p[k]) missing++, first = first < 0 ? k : first;
        if (missing)
            rc = g4_fail(G4_EUSER,
                         "%s: %d of the %d selected items have no prediction (first: id '%s', "
                         "manifest line %d)",
                         m->path, missing, n_sel, m->items[sel[first]].id,
                         m->items[sel[first]].line);
    }
    g4_strmap_free(&all);
    free(slot);
    free(where);
    if (rc) {
        free(p);
        p = NULL;
    }
    *preds = p;
    return rc;
}

// OCRBench's six text-recognition question types, which its results file adds up as
// "Text Recognition" (tasks/ocrbench/utils.py ocrbench_aggregate_accuracy).
static int is_text_recognition(const char *c) {
    static const char *const names[] = {
        "Regular Text Recognition", "Irregular Text Recognition", "Artistic Text Recognition",
        "Handwriting Recognition",  "Digit String Recognition",   "Non-Semantic Text Recognition"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(c, names[i])) return 1;
    return 0;
}

static g4_eval_category *category(g4_eval_scores *s, g4_strmap *map, const char *name) {
    int c = g4_strmap_get(map, name);
    if (c >= 0) return &s->cats[c];
    s->cats = g4_realloc(s->cats, sizeof *s->cats * (size_t)(s->n_cats + 1));
    g4_eval_category *x = &s->cats[s->n_cats];
    memset(x, 0, sizeof *x);
    x->name = g4_strdup(name);
    g4_strmap_put(map, x->name, s->n_cats++);
    return x;
}

// 100 * edits / words as lmms-eval computes it, NaN over no words.
static double wer_of(int64_t edits, int64_t words) {
    if (words == 0) return NAN;
    g4_wer w = {edits, words, 0};
    double v;
    return g4_wer_percent(&w, &v) == G4_OK ? v : NAN;
}

int g4_eval_score(const g4_eval_manifest *m, const int *sel, int n_sel,
                  const g4_eval_pred *const *preds, g4_eval_scores *out) {
    memset(out, 0, sizeof *out);
    const g4_eval_task *t = m->task;
    out->task = t;
    out->items = g4_calloc((size_t)(n_sel ? n_sel : 1), sizeof *out->items);
    g4_strmap cmap;
    g4_strmap_init(&cmap, 16);
    g4_wer acc = {0};
    double human = 0, augmented = 0;
    int rc = G4_OK;
    for (int k = 0; k < n_sel && !rc; k++) {
        const g4_eval_item *it = &m->items[sel[k]];
        const char *pred = preds[k]->prediction;
        out->failed += preds[k]->error != NULL;
        const char *const *ans = (const char *const *)it->answers;
        g4_eval_item_score *is = &out->items[k];
        is->id = g4_strdup(it->id);
        double score = 0;
        int i01 = 0;
        int64_t e = 0, w = 0;
        switch (t->id) {
        case G4_EVAL_OCRBENCH:
            rc = g4_ocrbench_score(pred, ans, (size_t)it->n_answers, it->dataset, &i01);
            score = i01;
            break;
        case G4_EVAL_DOCVQA:
            rc = g4_anls(pred, ans, (size_t)it->n_answers, &score);
            break;
        case G4_EVAL_CHARTQA:
            rc = g4_chartqa_relaxed(pred, ans[0], &i01);
            score = i01;
            break;
        case G4_EVAL_LIBRISPEECH:
            rc = g4_wer_add(&acc, it->transcript, pred, &e, &w);
            score = wer_of(e, w);
            break;
        }
        if (rc) {
            g4_error_prefix("%s:%d (id '%s')", m->path, it->line, it->id);
            free(is->id); // only the items counted are freed later
            is->id = NULL;
            break;
        }
        out->count++;
        is->score = score;
        is->edits = e, is->ref_words = w;
        g4_eval_category *c = category(out, &cmap, it->category);
        c->count++;
        if (t->id == G4_EVAL_LIBRISPEECH) {
            c->edits += e, c->ref_words += w;
            continue;
        }
        out->sum += score;
        c->sum += score;
        if (t->id == G4_EVAL_CHARTQA && !strcmp(it->category, "human_test"))
            human += score, out->n_human++;
        if (t->id == G4_EVAL_CHARTQA && !strcmp(it->category, "augmented_test"))
            augmented += score, out->n_augmented++;
        if (t->id == G4_EVAL_OCRBENCH && is_text_recognition(it->category))
            out->text_recognition_sum += score, out->text_recognition_count++;
    }
    g4_strmap_free(&cmap);
    if (!rc && out->count == 0) rc = g4_fail(G4_EUSER, "%s: no items to score", m->path);
    if (!rc && t->id == G4_EVAL_LIBRISPEECH) {
        out->edits = acc.edits, out->ref_words = acc.ref_words;
        if ((rc = g4_wer_percent(&acc, &out->value)))
            g4_error_prefix("%s (%d utterances)", m->path, out->count);
    } else if (!rc) {
        out->value = out->sum / out->count; // Python's sum(scores) / len(scores)
    }
    for (int c = 0; c < out->n_cats; c++) {
        g4_eval_category *x = &out->cats[c];
        x->value =
            t->id == G4_EVAL_LIBRISPEECH ? wer_of(x->edits, x->ref_words) : x->sum / x->count;
    }
    out->human_split = out->n_human ? human / out->n_human : NAN;
    out->augmented_split = out->n_augmented ? augmented / out->n_augmented : NAN;
    for (int k = 0; k < n_sel && !rc; k++) {
        const g4_eval_pred *p = preds[k];
        g4_eval_timing *tm = &out->timing;
        if (p->item_ms < 0) continue;
        tm->n++;
        tm->item_ms += p->item_ms;
        tm->prefill_ms += p->prefill_ms > 0 ? p->prefill_ms : 0;
        tm->decode_ms += p->decode_ms > 0 ? p->decode_ms : 0;
        tm->prompt_tokens += p->prompt_tokens > 0 ? p->prompt_tokens : 0;
        tm->new_tokens += p->new_tokens > 0 ? p->new_tokens : 0;
        tm->decode_tokens += p->new_tokens > 1 ? p->new_tokens - 1 : 0;
        if (p->stop_reason >= 0 && p->stop_reason < 4) tm->stops[p->stop_reason]++;
    }
    if (rc) g4_eval_scores_free(out);
    return rc;
}

void g4_eval_scores_free(g4_eval_scores *s) {
    for (int k = 0; k < s->count; k++) free(s->items[k].id);
    free(s->items);
    for (int c = 0; c < s->n_cats; c++) free(s->cats[c].name);
    free(s->cats);
    memset(s, 0, sizeof *s);
}
