// pipeline.c: package + tokenizer + media -> chat prompt -> generation (see pipeline.h).
#include "engine/pipeline.h"

#include <stdlib.h>
#include <string.h>

int g4_pipeline_open(const char *pkg_dir, g4_backend *be, const char *tokenizer_path,
                     g4_pipeline **out) {
    *out = NULL;
    g4_pipeline *pl = g4_calloc(1, sizeof *pl);
    pl->be = be;
    int rc;
    if ((rc = g4_package_open(pkg_dir, &pl->pkg))) goto fail;
    pl->tokenizer_path =
        tokenizer_path ? g4_strdup(tokenizer_path) : g4_path_join(pkg_dir, "tokenizer.json");
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
    if ((rc = g4_text_model_load(pl->pkg, pl->be, &pl->model))) goto fail;
    if ((rc = g4_media_encoder_new(pl->pkg, pl->be, &pl->media))) goto fail;
    *out = pl;
    return G4_OK;
fail:
    g4_pipeline_close(pl);
    return rc;
}

void g4_pipeline_close(g4_pipeline *pl) {
    if (!pl) return;
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

int g4_pipeline_prepare(g4_pipeline *pl, const g4_prompt *pr, g4_ids *ids, g4_soft_tokens *soft) {
    *soft = (g4_soft_tokens){0};
    const int H = pl->pkg->text.hidden;
    int rc = G4_OK;
    if (pr->n_images &&
        (rc = check_placeholder(pl, "<|image|>", pl->ct.image, pl->pkg->text.image_token_id)))
        return rc;
    if (pr->n_audio &&
        (rc = check_placeholder(pl, "<|audio|>", pl->ct.audio, pl->pkg->text.audio_token_id)))
        return rc;
    int n_media = pr->n_images + pr->n_audio;
    pl->n_cuts = 0;
    pl->cuts = g4_realloc(pl->cuts, sizeof *pl->cuts * (size_t)(pr->n_audio + 1));
    g4_media_embeds *me = g4_calloc((size_t)n_media + 1, sizeof *me);
    int *counts = g4_calloc((size_t)n_media + 1, sizeof(int));
    int total = 0;
    for (int i = 0; i < n_media && !rc; i++) {
        int img = i < pr->n_images;
        const char *path = img ? pr->images[i] : pr->audio[i - pr->n_images];
        rc = g4_media_encode_file(pl->media, img ? G4_MEDIA_IMAGE : G4_MEDIA_AUDIO, path, &me[i]);
        if (!rc) total += counts[i] = me[i].n_tokens;
        if (!rc && me[i].truncated)
            pl->cuts[pl->n_cuts++] = (g4_media_cut){path, me[i].src_seconds, me[i].used_seconds};
    }
    if (!rc) {
        g4_chat_request req = {
            .system = pr->system,
            .system_as_parts = pr->system_as_parts,
            .image_tokens = counts,
            .n_images = pr->n_images,
            .audio_tokens = counts + pr->n_images,
            .n_audio = pr->n_audio,
            .text = pr->text,
        };
        rc = g4_chat_encode(pl->tok, &req, ids);
    }
    if (!rc && total) { // rows in placeholder order: the media's order in the prompt
        float *rows = g4_malloc(sizeof(float) * (size_t)total * H);
        for (int i = 0, at = 0; i < n_media; at += me[i].n_tokens, i++)
            memcpy(rows + (size_t)at * H, me[i].rows, sizeof(float) * (size_t)me[i].n_tokens * H);
        *soft = (g4_soft_tokens){rows, total};
    }
    for (int i = 0; i < n_media; i++) g4_media_embeds_free(&me[i]);
    free(me);
    free(counts);
    return rc;
}

int g4_pipeline_generate(g4_pipeline *pl, const g4_prompt *pr, const g4_gen_params *p,
                         g4_gen_result *out) {
    memset(out, 0, sizeof *out);
    g4_ids ids = {0};
    g4_soft_tokens soft;
    int rc = g4_pipeline_prepare(pl, pr, &ids, &soft);
    if (!rc) {
        g4_gen_params q = *p;
        int *eos = g4_malloc(sizeof(int) * (size_t)(p->n_eos + 1));
        if (p->n_eos) memcpy(eos, p->eos, sizeof(int) * (size_t)p->n_eos);
        eos[p->n_eos] = pl->ct.turn_close;
        q.eos = eos;
        q.n_eos = p->n_eos + 1;
        rc = g4_generate(pl->model, pl->tok, ids.v, (int)ids.n, soft.n ? &soft : NULL, &q, out);
        free(eos);
    }
    free((void *)soft.rows);
    g4_ids_free(&ids);
    return rc;
}
