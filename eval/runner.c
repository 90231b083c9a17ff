// runner.c: g4_eval_run: manifest -> prompts -> generation -> predictions file -> scores (see
// runner.h).
#include "eval/runner.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "engine/batch.h"
#include "engine/pipeline.h"
#include "eval/eval_scores.h"
#include "eval/manifest.h"
#include "eval/predictions.h"
#include "eval/prep.h"
#include "base/progress.h"
#include "eval/run_file.h"

char *g4_eval_shard_suffix(int shard_i, int shard_n) {
    return shard_n > 1 ? g4_sprintf(".shard-%d-of-%d", shard_i, shard_n) : g4_strdup("");
}

void g4_eval_run_result_free(g4_eval_run_result *r) {
    free(r->scores_path);
    memset(r, 0, sizeof *r);
}

static int make_dir(const char *dir) {
    if (g4_is_dir(dir)) return G4_OK;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return g4_fail(G4_EUSER, "%s: cannot create the output directory: %s", dir,
                       strerror(errno));
    return G4_OK;
}

// The response lmms-eval scores, from a generation (spec eval-metrics.md 2.4): when the model
// opened its thought channel (<|channel>), only what follows the last <channel|> counts, and
// nothing when the channel never closed (the Olive adapter's _decode_generated_tokens). Else the
// generation's text, already cut before an active stop string.
// A NUL byte (from a <0x00> byte piece) becomes U+0001 (*n_nul counts them): the predictions
// file and the scorers hold C strings, and both characters are controls (category Cc) that
// every scorer treats alike (neither is whitespace, a digit, a letter with case, or M/S/P).
static int response_text(const g4_pipeline *pl, const g4_gen_result *r, const char *const *stop,
                         int n_stop, char **out, int *n_nul) {
    const int soc = g4_tokenizer_id(pl->tok, "<|channel>", strlen("<|channel>"));
    const int eoc = g4_tokenizer_id(pl->tok, "<channel|>", strlen("<channel|>"));
    int has_soc = 0, last_eoc = -1;
    for (size_t i = 0; i < r->tokens.n; i++) {
        has_soc |= soc >= 0 && r->tokens.v[i] == soc;
        if (eoc >= 0 && r->tokens.v[i] == eoc) last_eoc = (int)i;
    }
    char *text;
    size_t len;
    if (!has_soc) {
        len = r->text ? r->text_len : 0;
        text = g4_strndup(r->text ? r->text : "", len);
    } else if (last_eoc < 0) {
        len = 0;
        text = g4_strdup("");
    } else {
        int rc = g4_tokenizer_decode(pl->tok, r->tokens.v + last_eoc + 1,
                                     r->tokens.n - (size_t)last_eoc - 1, 1, &text, &len);
        if (rc) return rc;
        int which;
        long cut = g4_find_stop(stop, n_stop, text, len, &which);
        if (cut >= 0) text[len = (size_t)cut] = 0;
    }
    *n_nul = 0;
    for (size_t i = 0; i < len; i++)
        if (!text[i]) text[i] = 1, (*n_nul)++;
    *out = text;
    return G4_OK;
}

// One predictions line (new string). cut: the audio the pipeline cut to the tower's window
// (NULL: none).
static char *pred_line(const g4_eval_task *t, const char *fp, const char *id, const char *text,
                       int n_nul, const g4_gen_result *r, double item_ms, const g4_media_cut *cut) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "task", t->name);
    cJSON_AddStringToObject(o, "fingerprint", fp);
    cJSON_AddStringToObject(o, "prediction", text);
    if (cut) cJSON_AddNumberToObject(o, "audio_truncated_s", cut->seconds);
    if (n_nul) cJSON_AddNumberToObject(o, "nul_bytes", n_nul); // written as U+0001
    cJSON_AddStringToObject(o, "stop_reason", g4_stop_reason_name(r->stop));
    cJSON_AddNumberToObject(o, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(o, "new_tokens", (double)r->tokens.n);
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < r->tokens.n; i++)
        cJSON_AddItemToArray(toks, cJSON_CreateNumber(r->tokens.v[i]));
    cJSON_AddNumberToObject(o, "item_ms", item_ms);
    cJSON_AddNumberToObject(o, "prefill_ms", r->prefill_ms);
    cJSON_AddNumberToObject(o, "decode_ms", r->decode_ms);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

// The line of an item that could not be run (new string): no prediction, the reason.
static char *failed_line(const g4_eval_task *t, const char *fp, const char *id, const char *why,
                         double item_ms) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "task", t->name);
    cJSON_AddStringToObject(o, "fingerprint", fp);
    cJSON_AddStringToObject(o, "prediction", "");
    cJSON_AddStringToObject(o, "error", why);
    cJSON_AddNumberToObject(o, "item_ms", item_ms);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

// The shared settings of a run's items: the greedy parameters, the active stop list.
typedef struct {
    const g4_eval_run_opts *o;
    const char *fp;
    const g4_eval_manifest *m;
    g4_pipeline *pl;
    g4_eval_pred_file *f;
    const char *stop[1], *active_stop[1];
    int n_active;
    g4_gen_params p;
    int *predicted, *failed;
    g4_progress bar;
    g4_eval_split *split; // where the time goes
} items_run;

// The prompt of item it (text: a new string the caller frees; media: [1] of the caller's).
static g4_prompt item_prompt(const g4_eval_task *t, const g4_eval_item *it, char **text,
                             const char **media) {
    *text = g4_eval_task_text(t, it->question);
    media[0] = it->media_path;
    g4_prompt pr = {.system = G4_EVAL_SYSTEM_PROMPT, .system_as_parts = 1, .text = *text};
    if (t->media == G4_MEDIA_IMAGE)
        pr.images = media, pr.n_images = 1;
    else
        pr.audio = media, pr.n_audio = 1;
    return pr;
}

// The predictions line of item it from its generation (rc: its outcome; why: its error line
// when rc is a user error), appended to the file; *line_out the line (new string) instead when
// line_out is given. An item whose request is a user error (a prompt longer than the context,
// a corrupt media file) is recorded as failed with its reason, and the run goes on: otherwise
// every resume would stop at the same item. Internal errors stop the run (returned).
static int item_line(items_run *ir, const g4_eval_item *it, int rc, const char *why,
                     const g4_gen_result *r, double item_ms, const g4_media_cut *cut,
                     char **line_out) {
    const g4_eval_run_opts *o = ir->o;
    const g4_eval_manifest *m = ir->m;
    char *resp = NULL, *line = NULL;
    int n_nul = 0;
    if (!rc) rc = response_text(ir->pl, r, ir->active_stop, ir->n_active, &resp, &n_nul);
    if (!rc && cut && o->log)
        fprintf(o->log,
                "g4cu eval: %s:%d (id '%s'): %s: %.1f s of audio, only the first %.1f s "
                "were used (the audio tower's window; long-form audio is not supported "
                "yet)\n",
                m->path, it->line, it->id, cut->path, cut->seconds, cut->used_seconds);
    if (!rc) {
        line = pred_line(o->task, ir->fp, it->id, resp, n_nul, r, item_ms, cut);
    } else if (rc == G4_EUSER) {
        if (o->log)
            fprintf(o->log, "g4cu eval: %s:%d (id '%s'): %s; recorded as failed\n", m->path,
                    it->line, it->id, why);
        line = failed_line(o->task, ir->fp, it->id, why, item_ms);
        (*ir->failed)++;
        rc = G4_OK;
    } else {
        g4_error_prefix("%s:%d (id '%s')", m->path, it->line, it->id);
    }
    free(resp);
    if (rc) return rc;
    if (line_out) {
        *line_out = line;
        return G4_OK;
    }
    rc = g4_eval_pred_file_append(ir->f, line);
    free(line);
    if (!rc) {
        (*ir->predicted)++;
        g4_progress_step(&ir->bar);
    }
    return rc;
}

// The items of sel[] that done[] does not mark, one at a time.
static int items_one_by_one(items_run *ir, const int *sel, int n_sel, const unsigned char *done) {
    g4_eval_split *sp = ir->split;
    int rc = G4_OK;
    for (int k = 0; k < n_sel && !rc; k++) {
        if (done[k]) continue;
        const g4_eval_item *it = &ir->m->items[sel[k]];
        char *text;
        const char *media[1];
        const g4_prompt pr = item_prompt(ir->o->task, it, &text, media);
        g4_gen_result r;
        const double fe0 = ir->pl->frontend_s, tw0 = ir->pl->tower_s;
        double t0 = g4_progress_now();
        rc = g4_pipeline_generate(ir->pl, &pr, &ir->p, &r);
        const double t1 = g4_progress_now(), item_ms = (t1 - t0) * 1e3;
        // the item's time: front end, tower, prefill, decode, and the rest of its setup
        const double pf = rc ? 0 : r.prefill_ms * 1e-3, dc = rc ? 0 : r.decode_ms * 1e-3;
        sp->prefill_s += pf;
        sp->decode_s += dc;
        sp->prompt_s += (t1 - t0) - (ir->pl->frontend_s - fe0) - (ir->pl->tower_s - tw0) - pf - dc;
        char *why = rc == G4_EUSER ? g4_strdup(g4_error()) : NULL;
        const g4_media_cut *cut = !rc && ir->pl->n_cuts ? &ir->pl->cuts[0] : NULL;
        rc = item_line(ir, it, rc, why, &r, item_ms, cut, NULL);
        sp->lines_s += g4_progress_now() - t1;
        free(why);
        g4_gen_result_free(&r);
        free(text);
    }
    sp->frontend_s = ir->pl->frontend_s;
    sp->tower_s = ir->pl->tower_s;
    return rc;
}

// The items of sel[] that done[] does not mark, up to o->batch at once (engine/batch.h): each
// free slot takes the next item, one round steps them all; the lines are written in the
// manifest's order (a finished item waits for the ones before it), so the file reads as a
// one-at-a-time run's. The items' front ends run ahead on worker threads (prep.h); the towers,
// the prompts and the steps stay on this thread, the batch's one.
static int items_batched(items_run *ir, const int *sel, int n_sel, const unsigned char *done) {
    const g4_eval_run_opts *o = ir->o;
    g4_eval_split *sp = ir->split;
    g4_batch *b;
    const g4_batch_opts bo = {o->batch, 0, 0};
    const int n_threads = g4_prep_threads(o->batch);
    if (n_threads < 0) return G4_EUSER;
    int rc = g4_batch_new(ir->pl, &bo, &b);
    if (rc) return rc;
    sp->prep_threads = n_threads;
    // the front ends of the items to run, in order: job j is item todo[j]
    int *todo = g4_malloc(sizeof(int) * ((size_t)n_sel + 1)), n_todo = 0;
    g4_prep_job *jobs = g4_calloc((size_t)n_sel + 1, sizeof *jobs);
    for (int k = 0; k < n_sel; k++) {
        if (done[k]) continue;
        const g4_eval_item *it = &ir->m->items[sel[k]];
        jobs[n_todo] = (g4_prep_job){
            o->task->media == G4_MEDIA_IMAGE ? G4_MEDIA_IMAGE : G4_MEDIA_AUDIO, it->media_path};
        todo[n_todo++] = k;
    }
    // ahead: the next round's refill of every slot, and one job per worker beyond it
    g4_prep_pool *pool =
        g4_prep_pool_new(ir->pl->media, jobs, n_todo, n_threads, o->batch + n_threads);
    char **lines = g4_calloc((size_t)n_sel + 1, sizeof *lines);
    unsigned char *ready = g4_calloc((size_t)n_sel + 1, 1);
    int *slot_item = g4_malloc(sizeof(int) * (size_t)o->batch);
    double *slot_t0 = g4_malloc(sizeof(double) * (size_t)o->batch);
    g4_media_cut *slot_cut = g4_calloc((size_t)o->batch, sizeof *slot_cut);
    int *slot_has_cut = g4_calloc((size_t)o->batch, sizeof(int));
    for (int i = 0; i < o->batch; i++) slot_item[i] = -1;
    for (int k = 0; k < n_sel; k++) ready[k] = done[k];
    int next = 0, flushed = 0, running = 0, n_free = o->batch;
    for (;;) {
        // fill the free slots with the next items (only while a slot is free: an item's front
        // end is taken once, when it can start)
        while (!rc && next < n_todo && n_free > 0) {
            const int k = todo[next];
            const g4_eval_item *it = &ir->m->items[sel[k]];
            char *text;
            const char *media[1];
            const g4_prompt pr = item_prompt(o->task, it, &text, media);
            const double t0 = g4_progress_now();
            g4_prep_result pre;
            double waited;
            g4_prep_pool_take(pool, next, &pre, &waited);
            // the item's time starts with its front end: the part a worker ran before the take
            double before = pre.seconds - (g4_progress_now() - t0);
            if (before < 0) before = 0;
            sp->frontend_s += pre.seconds;
            sp->prep_wait_s += waited;
            int slot = -1, irc = pre.rc;
            if (irc) g4_fail(irc, "%s", pre.why); // (the worker's error line, on this thread)
            const double t1 = g4_progress_now(), tw0 = ir->pl->tower_s;
            if (!irc) {
                const g4_prompt_loaded lp = {pr.system,   pr.system_as_parts,
                                             &pre.in,     media,
                                             pr.n_images, pr.n_audio,
                                             pr.text,     NULL,
                                             0,           NULL};
                irc = g4_batch_submit(b, &lp, NULL, 0, &ir->p, &slot);
                if (!irc && slot < 0)
                    irc = g4_fail(G4_EINTERNAL, "batch: no free slot for item %d with %d free", k,
                                  n_free);
            }
            sp->prompt_s += g4_progress_now() - t1 - (ir->pl->tower_s - tw0);
            if (!irc) {
                n_free--;
                slot_item[slot] = k;
                slot_t0[slot] = t0 - before;
                slot_has_cut[slot] = pre.in.truncated;
                slot_cut[slot] =
                    (g4_media_cut){it->media_path, pre.in.src_seconds, pre.in.used_seconds};
            }
            g4_media_input_free(&pre.in);
            free(pre.why);
            free(text);
            if (irc) { // the item's own error: its line now (an internal one stops the run)
                const double tl = g4_progress_now();
                char *why = irc == G4_EUSER ? g4_strdup(g4_error()) : NULL;
                g4_gen_result none = {0};
                rc = item_line(ir, it, irc, why, &none, (tl - t0) * 1e3, NULL, &lines[k]);
                free(why);
                ready[k] = 1;
                sp->lines_s += g4_progress_now() - tl;
            }
            next++;
        }
        // write what is ready, in order
        const double tw = g4_progress_now();
        while (!rc && flushed < n_sel && ready[flushed]) {
            if (lines[flushed]) {
                rc = g4_eval_pred_file_append(ir->f, lines[flushed]);
                free(lines[flushed]);
                lines[flushed] = NULL;
                if (!rc) {
                    (*ir->predicted)++;
                    g4_progress_step(&ir->bar);
                }
            }
            flushed++;
        }
        sp->lines_s += g4_progress_now() - tw;
        if (rc || flushed == n_sel) break;
        if ((rc = g4_batch_step(b, &running))) break;
        for (int sl = 0; sl < o->batch && !rc; sl++) { // the items that ended
            g4_gen_result r;
            int irc;
            char *why;
            if (slot_item[sl] < 0 || !g4_batch_take(b, sl, &r, &irc, &why)) continue;
            const double tl = g4_progress_now();
            const int k = slot_item[sl];
            slot_item[sl] = -1;
            n_free++;
            const double item_ms = (tl - slot_t0[sl]) * 1e3;
            if (irc == G4_EINTERNAL) g4_fail(irc, "%s", why);
            rc = item_line(ir, &ir->m->items[sel[k]], irc, why, &r, item_ms,
                           slot_has_cut[sl] ? &slot_cut[sl] : NULL, &lines[k]);
            ready[k] = 1;
            free(why);
            g4_gen_result_free(&r);
            sp->lines_s += g4_progress_now() - tl;
        }
    }
    g4_batch_stats st;
    g4_batch_get_stats(b, &st);
    sp->prefill_s = st.prefill_s;
    sp->decode_s = st.decode_s + st.accept_s; // (the step and its rows' host work, as one alone)
    sp->states = st.states_made;
    sp->states_grown = st.states_grown;
    sp->tower_s = ir->pl->tower_s;
    g4_prep_pool_free(pool); // (before the jobs it reads; an error may leave some untaken)
    for (int k = 0; k < n_sel; k++) free(lines[k]);
    free(lines);
    free(ready);
    free(slot_item);
    free(slot_t0);
    free(slot_cut);
    free(slot_has_cut);
    free(jobs);
    free(todo);
    g4_batch_free(b);
    return rc;
}

// Generates the items of sel[] that done[] does not mark, appending each to f.
static int generate_items(const g4_eval_run_opts *o, const char *fp, const g4_eval_manifest *m,
                          const int *sel, int n_sel, const unsigned char *done, int n_done,
                          g4_eval_pred_file *f, int *predicted, int *failed, g4_eval_split *split) {
    const g4_eval_task *t = o->task;
    items_run ir = {
        .o = o, .fp = fp, .m = m, .f = f, .predicted = predicted, .failed = failed, .split = split};
    int rc = g4_pipeline_open(o->package, o->be ? o->be : g4_backend_cpu(), o->tokenizer, &ir.pl);
    if (rc) return rc;
    ir.stop[0] = G4_EVAL_INJECTED_STOP;
    g4_gen_params_default(&ir.p); // greedy
    ir.p.max_new = o->max_new > 0 ? o->max_new : t->max_new;
    ir.p.stop = ir.stop, ir.p.n_stop = 1; // lmms-eval's injected until = ["\n\n"] ...
    if (!o->keep_stop) ir.p.ignore_stop = ir.stop, ir.p.n_ignore_stop = 1; // ... which the benchmark ignored
    ir.active_stop[0] = G4_EVAL_INJECTED_STOP;
    ir.n_active = o->keep_stop ? 1 : 0;

    char *label = o->shard_n > 1 ? g4_sprintf("%s %d/%d", t->name, o->shard_i, o->shard_n)
                                 : g4_strdup(t->name);
    g4_progress_start(&ir.bar, o->progress, label, n_sel, n_done);
    split->batch = o->batch > 1 ? o->batch : 1;
    const double t0 = g4_progress_now();
    rc = o->batch > 1 ? items_batched(&ir, sel, n_sel, done) : items_one_by_one(&ir, sel, n_sel, done);
    split->items_s = g4_progress_now() - t0;
    g4_progress_end(&ir.bar);
    free(label);
    g4_pipeline_close(ir.pl);
    return rc;
}

int g4_eval_run(const g4_eval_run_opts *o, g4_eval_run_result *res) {
    memset(res, 0, sizeof *res);
    const g4_eval_task *t = o->task;
    const int shard_n = o->shard_n > 1 ? o->shard_n : 1;
    if (o->shard_i < 0 || o->shard_i >= shard_n)
        return g4_fail(G4_EUSER, "--shard %d/%d: expected 0 <= i < n", o->shard_i, shard_n);
    const double t_start = g4_progress_now();
    g4_eval_manifest m;
    int rc = g4_eval_manifest_read(o->manifest, t, o->data_dir, &m);
    if (rc) return rc;
    char *sfx = g4_eval_shard_suffix(o->shard_i, shard_n);
    char *pred_path = g4_sprintf("%s/predictions%s.jsonl", o->out_dir, sfx);
    char *run_path = g4_sprintf("%s/run%s.json", o->out_dir, sfx);
    char *scores_stem = g4_sprintf("scores%s", sfx);
    int *sel = NULL, n_sel = 0;
    unsigned char *done = NULL;
    g4_eval_preds old = {0}, now = {0};
    g4_eval_run_info before = {0};
    int have_before = 0;
    const g4_eval_pred **paired = NULL;
    g4_eval_scores sc = {0};
    g4_eval_run_info info = {0};
    g4_eval_pred_file f = {.fd = -1};

    g4_eval_select(m.n, o->limit, o->shard_i, shard_n, &sel, &n_sel);
    res->selected = n_sel;
    // More shards than items: this shard's share is empty. That is a success with 0 items (an
    // empty predictions file and the run file, no scores), so a launcher that waits for every
    // shard to succeed goes on to eval-merge.
    if (n_sel == 0 && o->log)
        fprintf(o->log, "g4cu eval: %s: shard %d of %d selects no items (the manifest has %d%s): "
                "nothing to predict\n", o->manifest, o->shard_i, shard_n, m.n,
                o->limit > 0 ? " before --limit" : "");
    if ((rc = g4_eval_manifest_check_media(&m, sel, n_sel))) goto done;
    // What this run's settings are (its fingerprint opens the package), and where it writes:
    // not inside the package.
    if ((rc = g4_eval_run_info_make(o, &info)) || (rc = g4_check_output_dir(o->out_dir)) ||
        (rc = make_dir(o->out_dir)))
        goto done;

    // What an earlier run of the same file used.
    if (o->resume) {
        rc = g4_eval_run_info_read(run_path, &before, &have_before);
        if (!rc && have_before) rc = g4_eval_run_info_compatible(&before, &info, run_path);
        if (rc) goto done;
    }
    if (!o->resume) { // a run never appends to an earlier run's file by accident
        if ((rc = g4_eval_preds_read(pred_path, t->name, 1, 0, &old))) goto done; // torn: say so
        if (old.n > 0) {
            rc = g4_fail(G4_EUSER,
                         "%s already holds %d predictions; pass --resume to continue that run, or "
                         "remove the file",
                         pred_path, old.n);
            goto done;
        }
        g4_eval_preds_free(&old);
    }
    // Lock the file before reading it: what was predicted cannot change under us.
    if ((rc = g4_eval_pred_file_open(pred_path, &f))) goto done;
    if ((rc = g4_eval_preds_read(pred_path, t->name, 1, 1, &old))) goto done;
    res->torn_bytes = old.torn_bytes;
    if (old.torn_bytes && o->log)
        fprintf(o->log,
                "g4cu eval: %s: dropped a torn last line (%ld bytes) left by an interrupted run\n",
                pred_path, old.torn_bytes);
    // Items predicted before: each must be one this run selects.
    done = g4_calloc((size_t)n_sel, 1);
    {
        g4_strmap at;
        g4_strmap_init(&at, (size_t)n_sel);
        for (int k = 0; k < n_sel; k++) g4_strmap_put(&at, m.items[sel[k]].id, k);
        for (int j = 0; j < old.n && !rc; j++) {
            int k = g4_strmap_get(&at, old.v[j].id);
            char *where = g4_sprintf("%s:%d", pred_path, old.v[j].line);
            if (k < 0)
                rc = g4_fail(G4_EUSER,
                             "%s: id '%s' is not among the items this run selects from %s "
                             "(another manifest, --limit or --shard?)",
                             where, old.v[j].id, o->manifest);
            else // made by this package, tokenizer and settings, or the run would mix models
                rc = g4_eval_fingerprint_check(where, old.v[j].fingerprint, &info.fp,
                                               have_before && before.fp.value[0] ? &before.fp
                                                                                 : NULL);
            if (!rc) done[k] = 1, res->resumed++;
            free(where);
        }
        g4_strmap_free(&at);
        if (rc) goto done;
    }
    if (res->resumed && o->log)
        fprintf(o->log, "g4cu eval: resuming %s: %d of %d items already predicted\n", pred_path,
                res->resumed, n_sel);
    if ((rc = g4_eval_run_info_write(run_path, &info)) || n_sel == 0) goto done;

    g4_eval_split split = {0};
    const int ran = res->resumed < n_sel;
    if (ran && (rc = generate_items(o, info.fp.value, &m, sel, n_sel, done, res->resumed, &f,
                                    &res->predicted, &res->failed, &split)))
        goto done;
    const double t_score = g4_progress_now();
    g4_eval_pred_file_close(&f);

    // Score what the file now holds (read back, so the scores are those of the file on disk).
    if ((rc = g4_eval_preds_read(pred_path, t->name, 0, 0, &now))) goto done;
    if ((rc = g4_eval_match(&m, sel, n_sel, &now, 1, &paired))) goto done;
    if ((rc = g4_eval_score(&m, sel, n_sel, paired, &sc))) goto done;
    const char *files[1] = {pred_path};
    g4_eval_meta meta = {
        .manifest = info.manifest,
        .pred_files = files,
        .n_pred_files = 1,
        .manifest_items = m.n,
        .limit = o->limit,
        .shard_i = o->shard_i,
        .shard_n = shard_n > 1 ? shard_n : 0,
        .max_new = info.max_new,
        .keep_stop = o->keep_stop,
        .package = info.package,
        .backend = info.backend,
        .wall_s = g4_progress_now() - t_start,
        .split = ran ? &split : NULL,
    };
    if ((rc = g4_eval_scores_write(o->out_dir, scores_stem, &sc, &meta))) goto done;
    if (ran) {
        split.score_s = g4_progress_now() - t_score;
        res->split = split;
        res->has_split = 1;
    }
    res->value = sc.value;
    res->count = sc.count;
    res->failed = sc.failed; // over the whole file, resumed items too
    res->scores_path = g4_sprintf("%s/%s.json", o->out_dir, scores_stem);
done:
    g4_eval_pred_file_close(&f);
    g4_eval_scores_free(&sc);
    free(paired);
    g4_eval_preds_free(&old);
    g4_eval_preds_free(&now);
    g4_eval_run_info_free(&info);
    g4_eval_run_info_free(&before);
    free(done);
    free(sel);
    free(scores_stem);
    free(run_path);
    free(pred_path);
    free(sfx);
    g4_eval_manifest_free(&m);
    return rc;
}
