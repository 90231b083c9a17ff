// eval_scores_report.c: a task's scores as JSON (every number unrounded; NaN -> null) and as
// Markdown (see eval_scores.h).
//
//   {"format": "g4cu-eval", "version": 1, "task", "lmms_eval_task", "metric", "value",
//    "lower_is_better", "count", "failed" (items recorded as failed, scored as empty responses),
//    "scores": {<metric name>: value, ...},          every aggregate lmms-eval reports for the
//                                                      task (+ edits / ref_words for WER)
//    "categories": [{"name", "count", "value", "sum" | "edits", "ref_words"}],
//    "groups": [{"name", "count", "sum", "value"}],  ocrbench: upstream's Text Recognition
//    "items": [{"id", "score"} | {"id", "wer", "edits", "ref_words"}],
//    "run": {"manifest", "manifest_items", "limit", "shard", "merged_files", "predictions",
//            "package", "backend"},
//    "generation": {"system_prompt", "max_new_tokens", "greedy", "until", "ignore_stop",
//                   "stop_strings"},
//    "timings": {"items_timed", "wall_s", "item_ms_total", "item_ms_mean", "prompt_tokens",
//                "new_tokens", "prefill_ms", "decode_ms", "prefill_tok_s", "decode_tok_s",
//                "stop_reasons": {"eos", "stop_string", "max_new", "context"},
//                "split": {"batch", "prep_threads", "frontend_s", "prep_wait_s", "tower_s",
//                          "prompt_s", "prefill_s", "decode_s", "lines_s", "items_s",
//                          "states", "states_grown"}}}
//    (split: only from a run, eval_scores.h's g4_eval_split)
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/generate.h"
#include "eval/eval_scores.h"
#include "eval/pystr.h"

// A number printed with the fewest digits that read back as exactly v (cJSON's own printing
// accepts 15 digits that are only within an epsilon of v, which would make a score read from
// the file differ from the computed one in the last bit); NaN and Inf as null.
static void add_num(cJSON *o, const char *key, double v) {
    if (!isfinite(v)) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    char buf[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    cJSON_AddRawToObject(o, key, buf);
}

static void add_str_or_null(cJSON *o, const char *key, const char *v) {
    if (v)
        cJSON_AddStringToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

static double ratio(double a, double b) {
    return b > 0 ? a / b : NAN;
}

static int is_wer(const g4_eval_scores *s) {
    return s->task->id == G4_EVAL_LIBRISPEECH;
}

static cJSON *scores_obj(const g4_eval_scores *s) {
    cJSON *o = cJSON_CreateObject();
    add_num(o, s->task->metric, s->value);
    switch (s->task->id) {
    case G4_EVAL_OCRBENCH:
        add_num(o, "ocrbench_raw_score", s->sum);
        break;
    case G4_EVAL_CHARTQA:
        add_num(o, "relaxed_human_split", s->human_split);
        add_num(o, "relaxed_augmented_split", s->augmented_split);
        break;
    case G4_EVAL_LIBRISPEECH:
        add_num(o, "edits", (double)s->edits);
        add_num(o, "ref_words", (double)s->ref_words);
        break;
    case G4_EVAL_DOCVQA:
        break;
    }
    return o;
}

static cJSON *generation_obj(const g4_eval_scores *s, const g4_eval_meta *m) {
    cJSON *g = cJSON_CreateObject();
    cJSON_AddStringToObject(g, "system_prompt", G4_EVAL_SYSTEM_PROMPT);
    add_num(g, "max_new_tokens", m->max_new > 0 ? m->max_new : s->task->max_new);
    cJSON_AddBoolToObject(g, "greedy", 1);
    const char *inj[1] = {G4_EVAL_INJECTED_STOP};
    cJSON_AddItemToObject(g, "until", cJSON_CreateStringArray(inj, 1));
    cJSON_AddItemToObject(g, "ignore_stop", cJSON_CreateStringArray(inj, m->keep_stop ? 0 : 1));
    cJSON_AddItemToObject(g, "stop_strings", cJSON_CreateStringArray(inj, m->keep_stop ? 1 : 0));
    return g;
}

static cJSON *timings_obj(const g4_eval_timing *t, double wall_s) {
    cJSON *o = cJSON_CreateObject();
    add_num(o, "items_timed", t->n);
    add_num(o, "wall_s", wall_s > 0 ? wall_s : NAN);
    add_num(o, "item_ms_total", t->item_ms);
    add_num(o, "item_ms_mean", ratio(t->item_ms, t->n));
    add_num(o, "prompt_tokens", (double)t->prompt_tokens);
    add_num(o, "new_tokens", (double)t->new_tokens);
    add_num(o, "prefill_ms", t->prefill_ms);
    add_num(o, "decode_ms", t->decode_ms);
    add_num(o, "prefill_tok_s", ratio((double)t->prompt_tokens, t->prefill_ms / 1e3));
    add_num(o, "decode_tok_s", ratio((double)t->decode_tokens, t->decode_ms / 1e3));
    cJSON *st = cJSON_AddObjectToObject(o, "stop_reasons");
    for (int r = G4_STOP_EOS; r <= G4_STOP_CONTEXT; r++)
        add_num(st, g4_stop_reason_name((g4_stop_reason)r), t->stops[r]);
    return o;
}

char *g4_eval_scores_json(const g4_eval_scores *s, const g4_eval_meta *m) {
    const g4_eval_task *t = s->task;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "g4cu-eval");
    add_num(j, "version", 1);
    cJSON_AddStringToObject(j, "task", t->name);
    cJSON_AddStringToObject(j, "lmms_eval_task", t->lmms_task);
    cJSON_AddStringToObject(j, "metric", t->metric);
    add_num(j, "value", s->value);
    cJSON_AddBoolToObject(j, "lower_is_better", t->lower_is_better);
    add_num(j, "count", s->count);
    add_num(j, "failed", s->failed); // items that could not be run (scored as empty responses)
    cJSON_AddItemToObject(j, "scores", scores_obj(s));

    cJSON *cats = cJSON_AddArrayToObject(j, "categories");
    for (int c = 0; c < s->n_cats; c++) {
        const g4_eval_category *x = &s->cats[c];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", x->name);
        add_num(o, "count", x->count);
        add_num(o, "value", x->value);
        if (is_wer(s)) {
            add_num(o, "edits", (double)x->edits);
            add_num(o, "ref_words", (double)x->ref_words);
        } else {
            add_num(o, "sum", x->sum);
        }
        cJSON_AddItemToArray(cats, o);
    }
    if (t->id == G4_EVAL_OCRBENCH) {
        cJSON *groups = cJSON_AddArrayToObject(j, "groups");
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", "Text Recognition");
        add_num(o, "count", s->text_recognition_count);
        add_num(o, "sum", s->text_recognition_sum);
        add_num(o, "value", ratio(s->text_recognition_sum, s->text_recognition_count));
        cJSON_AddItemToArray(groups, o);
    }
    cJSON *items = cJSON_AddArrayToObject(j, "items");
    for (int k = 0; k < s->count; k++) {
        const g4_eval_item_score *x = &s->items[k];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", x->id);
        if (is_wer(s)) {
            add_num(o, "wer", x->score);
            add_num(o, "edits", (double)x->edits);
            add_num(o, "ref_words", (double)x->ref_words);
        } else {
            add_num(o, "score", x->score);
        }
        cJSON_AddItemToArray(items, o);
    }

    cJSON *run = cJSON_AddObjectToObject(j, "run");
    add_str_or_null(run, "manifest", m->manifest);
    add_num(run, "manifest_items", m->manifest_items);
    if (m->limit > 0)
        add_num(run, "limit", m->limit);
    else
        cJSON_AddNullToObject(run, "limit");
    if (m->shard_n > 0) {
        char sh[32];
        snprintf(sh, sizeof sh, "%d/%d", m->shard_i, m->shard_n);
        cJSON_AddStringToObject(run, "shard", sh);
    } else {
        cJSON_AddNullToObject(run, "shard");
    }
    add_num(run, "merged_files", m->merged_shards);
    cJSON *pf = cJSON_AddArrayToObject(run, "predictions");
    for (int i = 0; i < m->n_pred_files; i++)
        cJSON_AddItemToArray(pf, cJSON_CreateString(m->pred_files[i]));
    add_str_or_null(run, "package", m->package);
    add_str_or_null(run, "backend", m->backend);
    cJSON_AddItemToObject(j, "generation", generation_obj(s, m));
    cJSON *tj = timings_obj(&s->timing, m->wall_s);
    if (m->split) {
        const g4_eval_split *p = m->split;
        cJSON *o = cJSON_AddObjectToObject(tj, "split");
        add_num(o, "batch", p->batch);
        add_num(o, "prep_threads", p->prep_threads);
        add_num(o, "frontend_s", p->frontend_s);
        add_num(o, "prep_wait_s", p->prep_wait_s);
        add_num(o, "tower_s", p->tower_s);
        add_num(o, "prompt_s", p->prompt_s);
        add_num(o, "prefill_s", p->prefill_s);
        add_num(o, "decode_s", p->decode_s);
        add_num(o, "lines_s", p->lines_s);
        add_num(o, "items_s", p->items_s);
        add_num(o, "states", p->states);
        add_num(o, "states_grown", p->states_grown);
    }
    cJSON_AddItemToObject(j, "timings", tj);
    char *out = cJSON_Print(j);
    cJSON_Delete(j);
    char *with_nl = g4_sprintf("%s\n", out);
    free(out);
    return with_nl;
}

// --- Markdown ----------------------------------------------------------------------------------
// A table cell: '|' escaped, newlines as spaces.
static void md_cell(g4_sb *b, const char *s) {
    for (; *s; s++) {
        if (*s == '|')
            g4_sb_puts(b, "\\|");
        else if (*s == '\n' || *s == '\r')
            g4_sb_putc(b, ' ');
        else
            g4_sb_putc(b, *s);
    }
}

G4_PRINTF(2, 3) static void md_printf(g4_sb *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *tmp = g4_malloc((size_t)n + 1);
    vsnprintf(tmp, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    g4_sb_put(b, tmp, (size_t)n);
    free(tmp);
}

// A metric value: WER in percent with 4 decimals, the 0..1 metrics with 6; "n/a" for NaN.
static void md_value(g4_sb *b, const g4_eval_scores *s, double v) {
    if (!isfinite(v))
        g4_sb_puts(b, "n/a");
    else
        md_printf(b, is_wer(s) ? "%.4f" : "%.6f", v);
}

char *g4_eval_scores_md(const g4_eval_scores *s, const g4_eval_meta *m) {
    const g4_eval_task *t = s->task;
    g4_sb b = {0};
    md_printf(&b, "# g4cu eval: %s (lmms-eval `%s`)\n\n", t->name, t->lmms_task);
    md_printf(&b, "**%s = ", t->metric);
    md_value(&b, s, s->value);
    md_printf(&b, "%s** over %d items (%s is better)\n\n", is_wer(s) ? " %" : "", s->count,
              t->lower_is_better ? "lower" : "higher");
    if (s->failed)
        md_printf(&b,
                  "**%d of the %d items failed** (no prediction: scored as empty responses; the "
                  "reasons are the \"error\" fields of the predictions file)\n\n",
                  s->failed, s->count);

    g4_sb_puts(&b, "| metric | value |\n|---|---:|\n");
    md_printf(&b, "| %s | ", t->metric);
    md_value(&b, s, s->value);
    g4_sb_puts(&b, " |\n");
    if (t->id == G4_EVAL_OCRBENCH) md_printf(&b, "| ocrbench_raw_score | %.0f |\n", s->sum);
    if (t->id == G4_EVAL_CHARTQA) {
        md_printf(&b, "| relaxed_human_split (%d items) | ", s->n_human);
        md_value(&b, s, s->human_split);
        md_printf(&b, " |\n| relaxed_augmented_split (%d items) | ", s->n_augmented);
        md_value(&b, s, s->augmented_split);
        g4_sb_puts(&b, " |\n");
    }
    if (is_wer(s))
        md_printf(&b, "| word edits / reference words | %lld / %lld |\n", (long long)s->edits,
                  (long long)s->ref_words);

    g4_sb_puts(&b, "\n## Per category\n\n");
    if (is_wer(s))
        g4_sb_puts(&b,
                   "| category | items | edits | ref words | WER % |\n|---|---:|---:|---:|---:|\n");
    else if (t->id == G4_EVAL_DOCVQA)
        g4_sb_puts(&b, "| category | items | ANLS sum | mean ANLS |\n|---|---:|---:|---:|\n");
    else
        g4_sb_puts(&b, "| category | items | correct | accuracy |\n|---|---:|---:|---:|\n");
    for (int c = 0; c < s->n_cats; c++) {
        const g4_eval_category *x = &s->cats[c];
        g4_sb_puts(&b, "| ");
        md_cell(&b, x->name);
        if (is_wer(s))
            md_printf(&b, " | %d | %lld | %lld | ", x->count, (long long)x->edits,
                      (long long)x->ref_words);
        else
            md_printf(&b, t->id == G4_EVAL_DOCVQA ? " | %d | %.6f | " : " | %d | %.0f | ", x->count,
                      x->sum);
        md_value(&b, s, x->value);
        g4_sb_puts(&b, " |\n");
    }
    if (t->id == G4_EVAL_OCRBENCH && s->text_recognition_count) {
        md_printf(&b, "| *Text Recognition (the six recognition types)* | %d | %.0f | ",
                  s->text_recognition_count, s->text_recognition_sum);
        md_value(&b, s, s->text_recognition_sum / s->text_recognition_count);
        g4_sb_puts(&b, " |\n");
    }

    const g4_eval_timing *tm = &s->timing;
    g4_sb_puts(&b, "\n## Timings\n\n");
    if (tm->n == 0) {
        g4_sb_puts(&b, "The predictions carry no timings (recorded elsewhere).\n");
    } else {
        g4_sb_puts(&b, "| items timed | wall s | ms/item | prompt tokens | new tokens | prefill "
                       "tok/s | decode tok/s | stop reasons |\n"
                       "|---:|---:|---:|---:|---:|---:|---:|---|\n");
        md_printf(&b, "| %d | ", tm->n);
        if (m->wall_s > 0)
            md_printf(&b, "%.1f", m->wall_s);
        else
            g4_sb_puts(&b, "n/a");
        double pf = ratio((double)tm->prompt_tokens, tm->prefill_ms / 1e3);
        double dc = ratio((double)tm->decode_tokens, tm->decode_ms / 1e3);
        md_printf(&b, " | %.1f | %lld | %lld | %.1f | %.1f | ", tm->item_ms / tm->n,
                  (long long)tm->prompt_tokens, (long long)tm->new_tokens, isfinite(pf) ? pf : 0.0,
                  isfinite(dc) ? dc : 0.0);
        for (int r = G4_STOP_EOS, first = 1; r <= G4_STOP_CONTEXT; r++)
            if (tm->stops[r]) {
                md_printf(&b, "%s%s %d", first ? "" : ", ", g4_stop_reason_name((g4_stop_reason)r),
                          tm->stops[r]);
                first = 0;
            }
        g4_sb_puts(&b, " |\n");
    }
    g4_sb_puts(&b, "\n## Run\n\n");
    md_printf(&b, "- manifest: `%s` (%d items", m->manifest ? m->manifest : "?", m->manifest_items);
    if (m->limit > 0) md_printf(&b, ", first %d taken", m->limit);
    if (m->shard_n > 0)
        md_printf(&b, ", shard %d of %d: items %d, %d, %d, ...", m->shard_i, m->shard_n, m->shard_i,
                  m->shard_i + m->shard_n, m->shard_i + 2 * m->shard_n);
    g4_sb_puts(&b, ")\n- predictions:");
    for (int i = 0; i < m->n_pred_files; i++) md_printf(&b, " `%s`", m->pred_files[i]);
    if (m->merged_shards) md_printf(&b, " (%d files merged)", m->merged_shards);
    g4_sb_puts(&b, "\n");
    if (m->package)
        md_printf(&b, "- package: `%s`, backend %s\n", m->package, m->backend ? m->backend : "?");
    md_printf(&b,
              "- generation: greedy, max_new_tokens %d, system prompt \"%s\", user turn = the %s "
              "then the text; stop strings: %s\n",
              m->max_new > 0 ? m->max_new : t->max_new, G4_EVAL_SYSTEM_PROMPT,
              t->media == G4_MEDIA_IMAGE ? "image" : "audio",
              m->keep_stop ? "`\\n\\n` (lmms-eval's injected `until`, kept)"
                           : "none (lmms-eval's injected `\\n\\n` ignored, as the benchmark did)");
    return g4_sb_take(&b);
}

int g4_eval_scores_write(const char *dir, const char *stem, const g4_eval_scores *s,
                         const g4_eval_meta *meta) {
    char *json = g4_eval_scores_json(s, meta);
    char *md = g4_eval_scores_md(s, meta);
    char *name = g4_sprintf("%s/%s.json", dir, stem);
    int rc = g4_write_file_atomic(name, json, strlen(json));
    free(name);
    if (!rc) {
        name = g4_sprintf("%s/%s.md", dir, stem);
        rc = g4_write_file_atomic(name, md, strlen(md));
        free(name);
    }
    free(json);
    free(md);
    return rc;
}
