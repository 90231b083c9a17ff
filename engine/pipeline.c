// pipeline.c: package + tokenizer + media -> chat prompt -> generation (see pipeline.h).
#include "engine/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "base/progress.h"

// A state made for `rows` KV rows (at most the context) when *st is none yet.
static int ensure_state(g4_pipeline *pl, g4_text_state **st, long rows) {
    if (*st) return G4_OK;
    const long ctx = pl->pkg->text.context_length;
    if (rows > ctx) rows = ctx;
    if (rows < 1) rows = 1;
    const g4_text_state_opts so = {(int)rows, pl->max_tokens, 1, 0};
    return g4_text_state_new_opts(pl->model, &so, st);
}

int g4_pipeline_open(const char *pkg_dir, g4_backend *be, const char *tokenizer_path,
                     g4_pipeline **out) {
    g4_pipeline_opts o = {0};
    o.tokenizer_path = tokenizer_path;
    return g4_pipeline_open_opts(pkg_dir, be, &o, out);
}

int g4_pipeline_open_opts(const char *pkg_dir, g4_backend *be, const g4_pipeline_opts *o,
                          g4_pipeline **out) {
    *out = NULL;
    const g4_pipeline_opts defaults = {0};
    if (!o) o = &defaults;
    const char *tokenizer_path = o->tokenizer_path;
    g4_pipeline *pl = g4_calloc(1, sizeof *pl);
    pl->be = be;
    int rc;
    if ((rc = g4_package_open(pkg_dir, &pl->pkg))) goto fail;
    pl->tokenizer_path =
        tokenizer_path ? g4_strdup(tokenizer_path) : g4_path_join(pkg_dir, "tokenizer.json");
    if (o->text_only) { // ids in, ids out: the tokenizer is optional, no template, no towers
        if ((tokenizer_path || g4_is_file(pl->tokenizer_path)) &&
            (rc = g4_tokenizer_open(pl->tokenizer_path, &pl->tok)))
            goto fail;
    } else {
        if (!tokenizer_path && !g4_is_file(pl->tokenizer_path)) {
            rc = g4_fail(G4_EUSER,
                         "%s: the package has no tokenizer.json; pass one with --tokenizer F (the "
                         "tiny test packages use tests/fixtures/chat/chat_bpe.json)",
                         pkg_dir);
            goto fail;
        }
        if ((rc = g4_tokenizer_open(pl->tokenizer_path, &pl->tok))) goto fail;
        if ((rc = g4_chat_tokens_find(pl->tok, pl->tokenizer_path, &pl->ct))) goto fail;
        if (pl->ct.bos != pl->pkg->text.bos_id) {
            rc = g4_fail(G4_EUSER, "%s: '<bos>' is id %d, but the package's bos_token_id is %d",
                         pl->tokenizer_path, pl->ct.bos, pl->pkg->text.bos_id);
            goto fail;
        }
    }
    if ((rc = g4_text_model_load_opts(pl->pkg, pl->be, &o->load, &pl->model))) goto fail;
    if (!o->text_only && (rc = g4_media_encoder_new(pl->pkg, pl->be, &pl->media))) goto fail;
    pl->max_tokens = o->max_tokens > 0 ? o->max_tokens : G4_GEN_DEFAULT_CHUNK;
    if (o->n_ctx > 0 && (rc = ensure_state(pl, &pl->state, o->n_ctx))) goto fail;
    *out = pl;
    return G4_OK;
fail:
    g4_pipeline_close(pl);
    return rc;
}

void g4_pipeline_close(g4_pipeline *pl) {
    if (!pl) return;
    g4_text_state_free(pl->state);
    g4_media_encoder_free(pl->media);
    g4_text_model_free(pl->model);
    g4_tokenizer_close(pl->tok);
    free(pl->tokenizer_path);
    g4_package_close(pl->pkg);
    free(pl->cuts);
    free(pl);
}

// The tokenizer's placeholder must be the id the model replaces with soft tokens.
static int check_placeholder(const g4_pipeline *pl, const char *name, int tok_id, int cfg_id) {
    if (tok_id == cfg_id) return G4_OK;
    return g4_fail(G4_EUSER, "%s: '%s' is id %d, but the package's placeholder id is %d",
                   pl->tokenizer_path, name, tok_id, cfg_id);
}

// The chat ids of a loaded prompt and its media's soft tokens in the state's soft rows, making
// the state (when there is none) for the prompt + max_new rows.
static int prepare_loaded(g4_pipeline *pl, g4_text_state **st, const g4_prompt_loaded *pr,
                          int max_new, g4_ids *ids, g4_soft_tokens *soft) {
    *soft = (g4_soft_tokens){{0}, 0};
    int rc = G4_OK;
    if (pr->n_images &&
        (rc = check_placeholder(pl, "<|image|>", pl->ct.image, pl->pkg->text.image_token_id)))
        return rc;
    if (pr->n_audio &&
        (rc = check_placeholder(pl, "<|audio|>", pl->ct.audio, pl->pkg->text.audio_token_id)))
        return rc;
    // The chat ids (the front ends fixed each item's soft-token count), then the towers, each
    // writing its rows into the state's soft rows at its offset (placeholder order is the
    // media's order in the prompt).
    const int n_media = pr->n_images + pr->n_audio;
    int *counts = g4_calloc((size_t)n_media + 1, sizeof(int));
    int total = 0;
    for (int i = 0; i < n_media; i++) total += counts[i] = pr->media[i].n_tokens;
    g4_chat_request req = {
        .system = pr->system,
        .system_as_parts = pr->system_as_parts,
        .image_tokens = counts,
        .n_images = pr->n_images,
        .audio_tokens = counts + pr->n_images,
        .n_audio = pr->n_audio,
        .text = pr->text,
        .messages = pr->messages,
        .n_messages = pr->n_messages,
        .media_tokens = counts,
        .n_media_tokens = n_media,
        .tools = pr->tools,
    };
    rc = g4_chat_encode(pl->tok, &req, ids);
    free(counts);
    if (!rc) rc = ensure_state(pl, st, (long)ids->n + max_new);
    if (!rc && total) {
        g4_soft_tokens all;
        rc = g4_text_state_soft_rows(*st, total, &all);
        const double t0 = g4_progress_now();
        for (int i = 0, at = 0; i < n_media && !rc; at += pr->media[i].n_tokens, i++) {
            g4_buf rows = all.rows;
            rows.data = (float *)all.rows.data + (size_t)at * all.rows.cols;
            rows.rows = pr->media[i].n_tokens;
            rc = g4_media_encode(pl->media, (*st)->be, &pr->media[i], pr->names[i], &rows);
        }
        pl->tower_s += g4_progress_now() - t0;
        if (!rc) *soft = all;
    }
    return rc;
}

int g4_pipeline_prepare_on(g4_pipeline *pl, g4_text_state **state, const g4_prompt_loaded *pr,
                           int max_new, g4_ids *ids, g4_soft_tokens *soft) {
    return prepare_loaded(pl, state, pr, max_new, ids, soft);
}

// prepare on the pipeline's state: the front ends on the prompt's files, then prepare_loaded.
static int prepare(g4_pipeline *pl, const g4_prompt *pr, int max_new, g4_ids *ids,
                   g4_soft_tokens *soft) {
    *soft = (g4_soft_tokens){{0}, 0};
    int rc = G4_OK;
    const int n_media = pr->n_images + pr->n_audio;
    pl->n_cuts = 0;
    pl->cuts = g4_realloc(pl->cuts, sizeof *pl->cuts * (size_t)(pr->n_audio + 1));
    g4_media_input *in = g4_calloc((size_t)n_media + 1, sizeof *in);
    const char **names = g4_calloc((size_t)n_media + 1, sizeof *names);
    const double t0 = g4_progress_now();
    for (int i = 0; i < n_media && !rc; i++) {
        names[i] = i < pr->n_images ? pr->images[i] : pr->audio[i - pr->n_images];
        rc = g4_media_load(pl->media, i < pr->n_images ? G4_MEDIA_IMAGE : G4_MEDIA_AUDIO,
                           names[i], &in[i]);
        if (!rc && in[i].truncated)
            pl->cuts[pl->n_cuts++] =
                (g4_media_cut){names[i], in[i].src_seconds, in[i].used_seconds};
    }
    pl->frontend_s += g4_progress_now() - t0;
    if (!rc) {
        const g4_prompt_loaded lp = {pr->system, pr->system_as_parts, in,       names,
                                     pr->n_images, pr->n_audio,       pr->text, NULL, 0, NULL};
        rc = prepare_loaded(pl, &pl->state, &lp, max_new, ids, soft);
    }
    for (int i = 0; i < n_media; i++) g4_media_input_free(&in[i]);
    free(in);
    free(names);
    return rc;
}

int g4_pipeline_prepare(g4_pipeline *pl, const g4_prompt *pr, g4_ids *ids, g4_soft_tokens *soft) {
    return prepare(pl, pr, 0, ids, soft);
}

// g4_generate on st with the chat template's <turn|> added to the EOS ids.
static int generate_turn(g4_pipeline *pl, g4_text_state *st, const g4_ids *ids,
                         const g4_soft_tokens *soft, const g4_gen_params *p, g4_gen_result *out) {
    g4_gen_params q = *p;
    int *eos = g4_malloc(sizeof(int) * (size_t)(p->n_eos + 1));
    if (p->n_eos) memcpy(eos, p->eos, sizeof(int) * (size_t)p->n_eos);
    eos[p->n_eos] = pl->ct.turn_close;
    q.eos = eos;
    q.n_eos = p->n_eos + 1;
    int rc = g4_generate(st, pl->tok, ids->v, (int)ids->n, soft->n ? soft : NULL, &q, out);
    free(eos);
    return rc;
}

int g4_pipeline_generate(g4_pipeline *pl, const g4_prompt *pr, const g4_gen_params *p,
                         g4_gen_result *out) {
    memset(out, 0, sizeof *out);
    g4_ids ids = {0};
    g4_soft_tokens soft;
    int rc = prepare(pl, pr, p->max_new > 0 ? p->max_new : 0, &ids, &soft);
    if (!rc) rc = generate_turn(pl, pl->state, &ids, &soft, p, out);
    g4_ids_free(&ids);
    return rc;
}

int g4_pipeline_generate_on(g4_pipeline *pl, g4_text_state **state, const g4_prompt_loaded *pr,
                            const g4_gen_params *p, void (*lock)(void *ctx, int on),
                            void *lock_ctx, g4_gen_result *out) {
    memset(out, 0, sizeof *out);
    g4_ids ids = {0};
    g4_soft_tokens soft;
    if (lock) lock(lock_ctx, 1);
    int rc = prepare_loaded(pl, state, pr, p->max_new > 0 ? p->max_new : 0, &ids, &soft);
    if (lock) lock(lock_ctx, 0);
    if (!rc) rc = generate_turn(pl, *state, &ids, &soft, p, out);
    g4_ids_free(&ids);
    return rc;
}
