// media.c: media file -> front end -> tower -> soft tokens (see media.h).
#include "engine/media.h"

#include <stdlib.h>

#include "base/base.h"
#include "engine/multimodal.h"

struct g4_media_encoder {
    const g4_package *pkg;
    g4_backend *be;
    int width;           // text hidden size
    g4_mm_towers towers; // the package's towers, each loaded on first use
    g4_image_tower_fn image_tower;
    g4_audio_tower_fn audio_tower;
    void *image_ctx, *audio_ctx;
};

int g4_media_encoder_new(const g4_package *pkg, g4_backend *be, g4_media_encoder **out) {
    g4_media_encoder *e = g4_calloc(1, sizeof *e);
    e->pkg = pkg;
    e->be = be;
    e->width = pkg->text.hidden;
    g4_mm_towers_init(&e->towers, pkg, be);
    e->image_tower = g4_mm_image_tower;
    e->audio_tower = g4_mm_audio_tower;
    e->image_ctx = e->audio_ctx = &e->towers;
    *out = e;
    return G4_OK;
}

void g4_media_encoder_free(g4_media_encoder *e) {
    if (!e) return;
    g4_mm_towers_free(&e->towers);
    free(e);
}

void g4_media_encoder_set_towers(g4_media_encoder *e, g4_image_tower_fn image,
                                 g4_audio_tower_fn audio, void *ctx) {
    if (image) e->image_tower = image, e->image_ctx = ctx;
    if (audio) e->audio_tower = audio, e->audio_ctx = ctx;
}

void g4_media_embeds_free(g4_media_embeds *m) {
    free(m->rows);
    m->rows = NULL;
    m->n_tokens = 0;
}

int g4_image_soft_tokens(const g4_image_proc_config *cfg, int height, int width, int *n) {
    int th, tw;
    int rc = g4_image_target_size(cfg, height, width, &th, &tw);
    if (rc) return rc;
    int k = cfg->pooling_kernel_size, p = cfg->patch_size;
    *n = (th / p) * (tw / p) / (k * k);
    return G4_OK;
}

// Room for n rows (at least one, so that a clip with no soft tokens still has a buffer).
static float *alloc_rows(int n, int width) {
    return g4_malloc(sizeof(float) * (size_t)(n > 0 ? n : 1) * (size_t)width);
}

int g4_media_encode_file(g4_media_encoder *e, g4_media_kind kind, const char *path,
                         g4_media_embeds *out) {
    const g4_package *pkg = e->pkg;
    *out = (g4_media_embeds){.kind = kind, .width = e->width};
    int rc;
    if (kind == G4_MEDIA_IMAGE) {
        if (!g4_package_component(pkg, G4_COMP_VISION) || !pkg->has_image_proc)
            return g4_fail(G4_EUSER,
                           "%s: the package %s has no vision encoder (or image_processor.json), "
                           "so it cannot take an image",
                           path, pkg->dir);
        g4_image_features f;
        if ((rc = g4_image_features_load(&pkg->image_proc, path, &f))) return rc;
        out->n_tokens = f.n_soft_tokens;
        out->rows = alloc_rows(f.n_soft_tokens, e->width);
        rc = e->image_tower(e->image_ctx, &f, out->rows);
        g4_image_features_free(&f);
    } else {
        if (!g4_package_component(pkg, G4_COMP_AUDIO) || !pkg->has_audio_fe)
            return g4_fail(G4_EUSER,
                           "%s: the package %s has no audio encoder (or "
                           "audio_feature_extraction.json), so it cannot take audio",
                           path, pkg->dir);
        g4_audio_features f;
        if ((rc = g4_audio_features_load(&pkg->audio_fe, path, &f))) return rc;
        out->n_tokens = f.n_soft_tokens;
        out->truncated = f.truncated;
        out->src_seconds = f.src_seconds;
        out->used_seconds = (double)f.n_samples / pkg->audio_fe.sampling_rate;
        out->rows = alloc_rows(f.n_soft_tokens, e->width);
        rc = e->audio_tower(e->audio_ctx, &f, out->rows);
        g4_audio_features_free(&f);
    }
    if (rc) {
        g4_error_prefix("%s", path);
        g4_media_embeds_free(out);
    }
    return rc;
}
