// g4cu_eval.c: the public API's measuring part (include/g4cu_eval.h): the logits of a
// teacher-forced prefill with media (`g4cu logits`), the .npy they go to, and the lmms-eval task
// runs (`g4cu eval`, `g4cu eval-merge`, over eval/runner.h). Perplexity: api/g4cu_eval_ppl.c.
//
// Logits: the image / audio front end and tower make the soft tokens that replace the image /
// audio placeholder ids. One placeholder id of a kind, alone (not between <|image> and
// <image|>), stands for the whole block, as the chat template's one <|image|> does: it is
// expanded as HF's processor (and generate) expands it, to <|image> + n x <|image|> + <image|>
// (the same for audio), the begin / end ids from the tokenizer. Ids that already hold the n
// placeholders are used as they are; any other count is an error that gives n.
#include <g4cu_eval.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "engine/chat.h"
#include "engine/multimodal.h"
#include "engine/text_model.h"
#include "engine/generate.h"
#include "eval/runner.h"
#include "fidelity/npy.h"
#include "kernels/backend_select.h"

// --- logits --------------------------------------------------------------------------------
// The soft tokens of the image and audio files (either may be NULL).
static int media_soft_tokens(g4_mm_towers *tw, const char *image, int image_tokens,
                             const char *audio, float **img, int *n_img, float **aud,
                             int *n_aud) {
    const g4_package *p = tw->pkg;
    const int H = p->text.hidden;
    int rc = G4_OK;
    if (image) {
        if (!g4_package_component(p, G4_COMP_VISION) || !p->has_image_proc)
            return g4_fail(G4_EUSER, "%s: the package %s has no vision encoder (or "
                           "image_processor.json)", image, p->dir);
        g4_image_proc_config ic = p->image_proc;
        if (image_tokens > 0) ic.max_soft_tokens = (int)image_tokens;
        g4_image_features f;
        if ((rc = g4_image_features_load(&ic, image, &f))) return rc;
        *n_img = f.n_soft_tokens;
        *img = g4_malloc(sizeof(float) * (size_t)(f.n_soft_tokens + 1) * H);
        if ((rc = g4_mm_image_tower(tw, &f, *img))) g4_error_prefix("%s", image);
        g4_image_features_free(&f);
        if (rc) return rc;
    }
    if (audio) {
        if (!g4_package_component(p, G4_COMP_AUDIO) || !p->has_audio_fe)
            return g4_fail(G4_EUSER, "%s: the package %s has no audio encoder (or "
                           "audio_feature_extraction.json)", audio, p->dir);
        g4_audio_features f;
        if ((rc = g4_audio_features_load(&p->audio_fe, audio, &f))) return rc;
        *n_aud = f.n_soft_tokens;
        *aud = g4_malloc(sizeof(float) * (size_t)(f.n_soft_tokens + 1) * H);
        if ((rc = g4_mm_audio_tower(tw, &f, *aud))) g4_error_prefix("%s", audio);
        g4_audio_features_free(&f);
    }
    return rc;
}

// The index of the one placeholder `ph` in ids[n] when it stands alone (not already between
// `begin` and `end`), else -1.
static int lone_placeholder(const int32_t *ids, int n, int ph, int begin, int end) {
    int at = -1, count = 0;
    for (int t = 0; t < n; t++)
        if (ids[t] == ph) at = t, count++;
    if (count != 1) return -1;
    if (at > 0 && at + 1 < n && ids[at - 1] == begin && ids[at + 1] == end) return -1;
    return at;
}

// Expands a lone image / audio placeholder of *ids into begin + count x placeholder + end.
// *mark (an index into *ids; NULL: none) moves with the rows an expansion before it adds.
static int expand_placeholders(const g4_text_config *c, const char *pkg_dir, const char *tok_path,
                               int n_img, int n_aud, int32_t **ids, int *n, int *mark) {
    const int kinds[2][2] = {{c->image_token_id, n_img}, {c->audio_token_id, n_aud}};
    int need = 0;
    for (int k = 0; k < 2; k++)
        need |= kinds[k][1] > 0 && kinds[k][0] >= 0 &&
                lone_placeholder(*ids, *n, kinds[k][0], -2, -2) >= 0;
    if (!need) return G4_OK;
    char *path = tok_path ? g4_strdup(tok_path) : g4_path_join(pkg_dir, "tokenizer.json");
    g4_tokenizer *tok = NULL;
    g4_chat_tokens ct;
    int rc = G4_OK;
    if (!tok_path && !g4_is_file(path))
        rc = g4_fail(G4_EUSER,
                     "%s: the package has no tokenizer.json for the media's begin / end ids; "
                     "pass one with --tokenizer F (or give the expanded placeholder ids)",
                     pkg_dir);
    if (!rc && !(rc = g4_tokenizer_open(path, &tok))) rc = g4_chat_tokens_find(tok, path, &ct);
    for (int k = 0; k < 2 && !rc; k++) {
        const int ph = kinds[k][0], count = kinds[k][1];
        const int tok_ph = k ? ct.audio : ct.image, begin = k ? ct.boa : ct.boi,
                  end = k ? ct.eoa : ct.eoi;
        const char *name = k ? "<|audio|>" : "<|image|>";
        int at = count > 0 && ph >= 0 ? lone_placeholder(*ids, *n, ph, begin, end) : -1;
        if (at < 0) continue;
        if (tok_ph != ph || begin < 0 || end < 0) {
            rc = g4_fail(G4_EUSER,
                         "%s: '%s' is id %d and its begin / end ids %d / %d, but the package's "
                         "placeholder id is %d",
                         path, name, tok_ph, begin, end, ph);
            break;
        }
        // [0, at) + begin + count x ph + end + (at, n)
        const int m = *n - 1 + count + 2;
        int32_t *out = g4_malloc(sizeof(int32_t) * (size_t)m);
        memcpy(out, *ids, sizeof(int32_t) * (size_t)at);
        out[at] = begin;
        for (int i = 0; i < count; i++) out[at + 1 + i] = ph;
        out[at + 1 + count] = end;
        memcpy(out + at + 2 + count, *ids + at + 1, sizeof(int32_t) * (size_t)(*n - at - 1));
        free(*ids);
        *ids = out;
        *n = m;
        if (mark && at < *mark) *mark += count + 1;
    }
    g4_tokenizer_close(tok);
    free(path);
    return rc;
}

void g4cu_eval_logits_params_default(g4cu_eval_logits_params *p) { memset(p, 0, sizeof *p); }

// decode_from (g4cu_eval.h): ids[0, N) as generate's prompt, then ids[N, n) one decode step
// each, every row's logits into out [n, V] (step_row [V]: row N - 1 as the prompt's last step
// computes it, or NULL). The state is made as eval's pipeline makes it (max_tokens =
// G4_GEN_DEFAULT_CHUNK rows a forward, the decode graph captured at its creation unless
// G4_EAGER=1) but for its capacity (n here; the first item's prompt + max_new there, grown for a
// longer one: the decode attention's split count is capped by the capacity's tiles, never below
// the tiles a context of n keys covers, so each split's keys are the same), its logit rows (a
// chunk's here, for the prefill's rows; 1 there) and its history (fresh here; there the cache
// rows past the item's length hold the items before it).
// The prompt goes in as generate's does (g4_gen_seq_prefill_upto): chunks of that size, each
// with its own soft-token rows; every chunk runs as g4_text_forward with all its rows' logits
// (generate asks for none before the last). The last chunk then runs again, rewound, as
// generate's step (g4_text_step: its last row alone through the LM head, the sample op), so
// its KV rows and the step's row N - 1 are generate's exactly (the same kernels on the same
// inputs rewrite the same cache rows). What differs from generate: the earlier chunks' LM head
// (extra work after the layers; it changes nothing the later rows read) and the rows kept.
static int decode_logits(g4_text_model *m, const int32_t *ids, int n, int N,
                         const g4_soft_tokens *soft, float *out, float *step_row,
                         int32_t *sampled) {
    const g4_text_config *c = m->cfg;
    const int V = c->vocab;
    const int chunk = N < G4_GEN_DEFAULT_CHUNK ? N : G4_GEN_DEFAULT_CHUNK;
    const g4_text_state_opts so = {n, G4_GEN_DEFAULT_CHUNK, chunk, 0};
    g4_text_state *s = NULL;
    int rc = g4_text_state_new_opts(m, &so, &s), used = 0;
    for (int a = 0; !rc && a < N; a += chunk) {
        const int T = N - a < chunk ? N - a : chunk;
        int n_ph = 0;
        for (int t = a; t < a + T; t++) n_ph += g4_placeholder_of(c, ids[t]) != G4_PH_NONE;
        g4_soft_tokens part = {{0}, n_ph}; // this chunk's soft rows, as generate cuts them
        if (n_ph) {
            part.rows = soft->rows;
            part.rows.data = (float *)soft->rows.data + (size_t)used * c->hidden;
            part.rows.rows = n_ph;
        }
        used += n_ph;
        const g4_soft_tokens *sp = n_ph ? &part : NULL;
        if ((rc = g4_text_forward(s, ids + a, T, sp, out + (size_t)a * V, 1)) || a + T < N)
            continue;
        int32_t next;
        s->n_past = a; // the last chunk again, as generate's step
        if ((rc = g4_text_step(s, ids + a, T, sp, &next))) break;
        g4_buf row = s->logits;
        row.rows = 1;
        if (step_row) g4_buf_to_host_f32(s->be, &row, step_row);
        if (sampled) sampled[N - 1] = next;
    }
    for (int t = N; !rc && t < n; t++) { // one decode step a row: generate's fed-back token
        int32_t next;
        if ((rc = g4_text_step(s, ids + t, 1, NULL, &next))) break;
        g4_buf row = s->logits; // (capped in place by the sample op)
        row.rows = 1;
        g4_buf_to_host_f32(s->be, &row, out + (size_t)t * V);
        if (sampled) sampled[t] = next;
    }
    g4_text_state_free(s);
    return rc;
}

// The decode_from check on the expanded ids: every placeholder before N (N_given: as the caller
// gave it; its range 1..n_ids is checked before the model loads).
static int check_decode_from(const g4_text_config *c, const int32_t *ids, int n, int N,
                             int N_given) {
    int last = -1;
    for (int t = 0; t < n; t++)
        if (g4_placeholder_of(c, ids[t]) != G4_PH_NONE) last = t;
    char at[64] = ""; // where N is among the rows, when a lone placeholder's expansion moved it
    if (N != N_given) snprintf(at, sizeof at, " (row %d of the %d after the expansion)", N, n);
    if (last >= N)
        return g4_fail(G4_EUSER,
                       "decode_from %d%s: the last media placeholder is at row %d; every "
                       "placeholder must lie before the decode rows (the prefill takes the soft "
                       "tokens)",
                       N_given, at, last);
    return G4_OK;
}

int g4cu_eval_logits(const char *dir, const int32_t *ids_in, int n_ids,
                     const g4cu_eval_logits_params *prm, float **logits, int *n_rows,
                     int *n_vocab) {
    g4cu_eval_logits_params defaults;
    if (!prm) g4cu_eval_logits_params_default(&defaults), prm = &defaults;
    if (!logits || !n_rows || !n_vocab)
        return g4_fail(G4_EUSER, "g4cu_eval_logits: logits, n_rows or n_vocab is NULL");
    *logits = NULL;
    *n_rows = *n_vocab = 0;
    if (!dir || !ids_in || n_ids < 1)
        return g4_fail(G4_EUSER, "g4cu_eval_logits: needs a package and at least one id");
    int n = n_ids, rc, n_img = 0, n_aud = 0, N = prm->decode_from;
    if (prm->step_logits) *prm->step_logits = NULL;
    if (prm->prefill_logits) *prm->prefill_logits = NULL;
    if (prm->sampled) *prm->sampled = NULL;
    if (N && (N < 1 || N > n_ids)) // (before the model loads; the placeholders after expansion)
        return g4_fail(G4_EUSER, "decode_from %d: expected 1..%d (the ids given)", N, n_ids);
    int32_t *ids = g4_malloc(sizeof(int32_t) * (size_t)n); // [n]: grows when media expand
    memcpy(ids, ids_in, sizeof(int32_t) * (size_t)n);
    g4_backend *be;
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_text_state *s = NULL;
    g4_mm_towers tw = {0};
    g4_soft_tokens soft = {0};
    float *out = NULL, *img = NULL, *aud = NULL;
    if ((rc = g4_backend_by_name(prm->backend ? prm->backend : "cpu", &be)) ||
        (rc = g4_package_open(dir, &p)) || (rc = g4_text_model_load(p, be, &m)))
        goto done;
    g4_mm_towers_init(&tw, p, be);
    // The media first: their soft-token counts size the prompt (and so the state).
    if ((rc = media_soft_tokens(&tw, prm->image, prm->image_tokens, prm->audio, &img, &n_img,
                                &aud, &n_aud)) ||
        (rc = expand_placeholders(&p->text, dir, prm->tokenizer, n_img, n_aud, &ids, &n,
                                  N ? &N : NULL)) ||
        (N && (rc = check_decode_from(&p->text, ids, n, N, prm->decode_from))) ||
        (rc = g4_mm_merge(be, &p->text, ids, n, img, n_img, aud, n_aud, &soft)))
        goto done;
    out = g4_malloc(sizeof(float) * (size_t)n * p->text.vocab); // [n, vocab]
    if (N) {
        float *step = prm->step_logits ? g4_malloc(sizeof(float) * (size_t)p->text.vocab) : NULL;
        float *pf = prm->prefill_logits ? g4_malloc(sizeof(float) * (size_t)n * p->text.vocab)
                                        : NULL; // [n, vocab]
        int32_t *smp = prm->sampled ? g4_malloc(sizeof(int32_t) * (size_t)n) : NULL; // [n]
        for (int t = 0; smp && t < n; t++) smp[t] = -1;
        rc = decode_logits(m, ids, n, N, &soft, out, step, smp);
        // the plain prefill on its own state, as decode_from 0 makes it
        if (!rc && pf && !(rc = g4_text_state_new(m, n, n, &s)))
            rc = g4_text_forward(s, ids, n, &soft, pf, 1);
        if (rc) {
            free(step);
            free(pf);
            free(smp);
            goto done;
        }
        if (prm->step_logits) *prm->step_logits = step;
        if (prm->prefill_logits) *prm->prefill_logits = pf;
        if (prm->sampled) *prm->sampled = smp;
    } else if ((rc = g4_text_state_new(m, n, n, &s)) ||
               (rc = g4_text_forward(s, ids, n, &soft, out, 1))) {
        goto done;
    }
    *logits = out, out = NULL;
    *n_rows = n;
    *n_vocab = p->text.vocab;
done:
    free(ids);
    free(out);
    free(img);
    free(aud);
    g4_mm_soft_free(be, &soft);
    g4_mm_towers_free(&tw);
    g4_text_state_free(s);
    g4_text_model_free(m);
    g4_package_close(p);
    return g4_api_code(rc);
}

int g4cu_eval_write_npy(const char *path, const float *data, int rows, int cols) {
    if (!path || !data || rows < 1 || cols < 1)
        return g4_fail(G4_EUSER, "g4cu_eval_write_npy: needs a path and a [rows >= 1, cols >= 1] "
                       "array");
    // What the caller says data holds, in bytes: refused when it cannot be an array in memory.
    uint64_t bytes;
    if (!g4_mul_u64((uint64_t)rows, (uint64_t)cols, &bytes) || !g4_mul_u64(bytes, 4, &bytes) ||
        bytes > G4CU_EVAL_NPY_MAX_BYTES)
        return g4_fail(G4_EUSER, "g4cu_eval_write_npy: [%d, %d] float32 is over the %llu-byte "
                       "limit", rows, cols, (unsigned long long)G4CU_EVAL_NPY_MAX_BYTES);
    const int64_t shape[2] = {rows, cols};
    return g4_api_code(g4_npy_write(path, G4_DT_FLOAT, 2, shape, data));
}

int g4cu_eval_read_npy(const char *path, float **data, int *rows, int *cols) {
    if (!path || !data || !rows || !cols)
        return g4_fail(G4_EUSER, "g4cu_eval_read_npy: needs a path and three outputs");
    *data = NULL;
    *rows = *cols = 0;
    g4_array a;
    int rc = g4_npy_read(path, &a);
    if (rc) return g4_api_code(rc);
    const int is_float =
        a.dtype == G4_DT_FLOAT || a.dtype == G4_DT_FLOAT16 || a.dtype == G4_DT_DOUBLE;
    if (a.ndim != 2 || !is_float || a.shape[0] < 1 || a.shape[1] < 1 || a.shape[0] > INT32_MAX ||
        a.shape[1] > INT32_MAX) {
        char shape[64];
        g4_array_shape_str(&a, shape, sizeof shape);
        g4_array_free(&a);
        return g4_fail(G4_EUSER, "%s: an array %s of %s, expected a non-empty 2-D array of "
                       "floats", path, shape, is_float ? "floats" : "non-floats");
    }
    float *f = g4_malloc(sizeof(float) * (size_t)a.numel);
    g4_array_to_f32(&a, f);
    *rows = (int)a.shape[0], *cols = (int)a.shape[1];
    *data = f;
    g4_array_free(&a);
    return G4CU_OK;
}

// --- task scores ---------------------------------------------------------------------------
const char *g4cu_eval_task_names(void) { return g4_eval_task_names(); }

int g4cu_eval_task_find(const char *name, g4cu_eval_task *out) {
    const g4_eval_task *t = name ? g4_eval_task_find(name) : NULL;
    if (!t || !out) return 0;
    *out = (g4cu_eval_task){t->name, t->metric, t->lower_is_better};
    return 1;
}

void g4cu_eval_params_default(g4cu_eval_params *p) { memset(p, 0, sizeof *p); }

void g4cu_eval_result_free(g4cu_eval_result *r) {
    if (!r) return;
    free(r->scores_path);
    memset(r, 0, sizeof *r);
}

static void result_from_run(g4_eval_run_result *r, g4cu_eval_result *out) {
    const g4_eval_split *t = &r->split;
    *out = (g4cu_eval_result){.selected = r->selected,
                              .resumed = r->resumed,
                              .predicted = r->predicted,
                              .failed = r->failed,
                              .value = r->value,
                              .count = r->count,
                              .scores_path = r->scores_path,
                              .has_time = r->has_split};
    r->scores_path = NULL; // (moved)
    out->time =
        (g4cu_eval_time){t->batch,    t->prep_threads, t->frontend_s,  t->prep_wait_s, t->tower_s,
                         t->prompt_s, t->prefill_s,    t->decode_s,    t->lines_s,     t->items_s,
                         t->score_s,  t->states,       t->states_grown};
}

static const g4_eval_task *task_or_fail(const char *name, int *rc) {
    const g4_eval_task *t = name ? g4_eval_task_find(name) : NULL;
    if (!t)
        *rc = g4_fail(G4_EUSER, "task '%s': expected %s", name ? name : "(none)",
                      g4_eval_task_names());
    return t;
}

int g4cu_eval_run(const char *manifest, const char *dir, const g4cu_eval_params *p,
                  g4cu_eval_result *out) {
    if (!out) return g4_fail(G4_EUSER, "g4cu_eval_run: out is NULL");
    memset(out, 0, sizeof *out);
    int rc = G4_OK;
    if (!manifest || !dir || !p || !p->out_dir)
        return g4_fail(G4_EUSER, "g4cu_eval_run: needs a manifest, a package and an out_dir");
    const g4_eval_task *t = task_or_fail(p->task, &rc);
    if (!t) return g4_api_code(rc);
    g4_eval_run_opts o = {.task = t,
                          .manifest = manifest,
                          .package = dir,
                          .tokenizer = p->tokenizer,
                          .backend = p->backend,
                          .out_dir = p->out_dir,
                          .data_dir = p->data_dir,
                          .shard_i = p->shard_i,
                          .shard_n = p->shard_n,
                          .resume = p->resume,
                          .limit = p->limit,
                          .keep_stop = p->keep_stop,
                          .max_new = p->max_new,
                          .progress = p->progress,
                          .log = p->log,
                          .batch = p->batch};
    if (p->batch < 0 || p->batch > 4096)
        return g4_fail(G4_EUSER, "batch %d: expected 1..4096 items at once (0: one)", p->batch);
    g4_eval_run_result r = {0};
    rc = g4_backend_by_name(o.backend, &o.be);
    if (!rc) rc = g4_eval_run(&o, &r);
    if (!rc) result_from_run(&r, out);
    g4_eval_run_result_free(&r);
    return g4_api_code(rc);
}

int g4cu_eval_merge(const char *dir, const char *task, const char *manifest, int limit,
                    g4cu_eval_result *out) {
    if (!out) return g4_fail(G4_EUSER, "g4cu_eval_merge: out is NULL");
    memset(out, 0, sizeof *out);
    int rc = G4_OK;
    if (!dir) return g4_fail(G4_EUSER, "g4cu_eval_merge: needs a directory");
    const g4_eval_task *t = task_or_fail(task, &rc);
    if (!t) return g4_api_code(rc);
    g4_eval_run_result r = {0};
    rc = g4_eval_merge(dir, t, manifest, limit, &r);
    if (!rc) result_from_run(&r, out);
    g4_eval_run_result_free(&r);
    return g4_api_code(rc);
}
