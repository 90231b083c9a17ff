// media.c: media file -> front end -> tower -> soft tokens (see media.h).
#include "engine/media.h"

#include <math.h>
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
    e->image_tower = g4_mm_image_tower_run;
    e->audio_tower = g4_mm_audio_tower_run;
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

void g4_media_input_free(g4_media_input *in) {
    if (in->kind == G4_MEDIA_IMAGE)
        g4_image_features_free(&in->image);
    else
        g4_audio_features_free(&in->audio);
    memset(in, 0, sizeof *in);
}

int g4_image_soft_tokens(const g4_image_proc_config *cfg, int height, int width, int *n) {
    int th, tw;
    int rc = g4_image_target_size(cfg, height, width, &th, &tw);
    if (rc) return rc;
    int k = cfg->pooling_kernel_size, p = cfg->patch_size;
    *n = (th / p) * (tw / p) / (k * k);
    return G4_OK;
}

// The package must have the kind's tower and front-end config.
static int check_kind(const g4_package *pkg, g4_media_kind kind, const char *what) {
    if (kind == G4_MEDIA_IMAGE && (!g4_package_component(pkg, G4_COMP_VISION) || !pkg->has_image_proc))
        return g4_fail(G4_EUSER,
                       "%s: the package %s has no vision encoder (or image_processor.json), "
                       "so it cannot take an image",
                       what, pkg->dir);
    if (kind == G4_MEDIA_AUDIO && (!g4_package_component(pkg, G4_COMP_AUDIO) || !pkg->has_audio_fe))
        return g4_fail(G4_EUSER,
                       "%s: the package %s has no audio encoder (or "
                       "audio_feature_extraction.json), so it cannot take audio",
                       what, pkg->dir);
    return G4_OK;
}

// The counts and the cut of an audio input after its features.
static void audio_done(const g4_package *pkg, g4_media_input *out) {
    out->n_tokens = out->audio.n_soft_tokens;
    out->truncated = out->audio.truncated;
    out->used_seconds = (double)out->audio.n_samples / pkg->audio_fe.sampling_rate;
}

int g4_media_load(g4_media_encoder *e, g4_media_kind kind, const char *path,
                  g4_media_input *out) {
    const g4_package *pkg = e->pkg;
    memset(out, 0, sizeof *out);
    out->kind = kind;
    int rc = check_kind(pkg, kind, path);
    if (rc) return rc;
    if (kind == G4_MEDIA_IMAGE) {
        if ((rc = g4_image_features_load(&pkg->image_proc, path, &out->image))) return rc;
        out->n_tokens = out->image.n_soft_tokens;
    } else {
        if ((rc = g4_audio_features_load(&pkg->audio_fe, path, &out->audio))) return rc;
        audio_done(pkg, out);
        out->src_seconds = out->audio.src_seconds;
    }
    return G4_OK;
}

int g4_media_load_rgb(g4_media_encoder *e, const g4_image *img, const char *what,
                      g4_media_input *out) {
    memset(out, 0, sizeof *out);
    out->kind = G4_MEDIA_IMAGE;
    int rc = check_kind(e->pkg, G4_MEDIA_IMAGE, what);
    if (rc) return rc;
    if (!img->rgb || img->width < 1 || img->height < 1 ||
        (int64_t)img->width * img->height > G4_IMAGE_MAX_PIXELS)
        return g4_fail(G4_EUSER, "%s: a %d x %d RGB image: expected 1 to %lld pixels", what,
                       img->width, img->height, (long long)G4_IMAGE_MAX_PIXELS);
    if ((rc = g4_image_features_from_rgb(&e->pkg->image_proc, img, &out->image))) {
        g4_error_prefix("%s", what);
        return rc;
    }
    out->n_tokens = out->image.n_soft_tokens;
    return G4_OK;
}

int g4_media_load_pcm(g4_media_encoder *e, const float *pcm, int64_t n, int rate,
                      const char *what, g4_media_input *out) {
    const g4_package *pkg = e->pkg;
    memset(out, 0, sizeof *out);
    out->kind = G4_MEDIA_AUDIO;
    int rc = check_kind(pkg, G4_MEDIA_AUDIO, what);
    if (rc) return rc;
    if (n < 1 || !pcm)
        return g4_fail(G4_EUSER, "%s: %lld samples: expected audio samples", what, (long long)n);
    if (rate < G4_AUDIO_MIN_RATE || rate > G4_AUDIO_MAX_RATE)
        return g4_fail(G4_EUSER, "%s: a sample rate of %d Hz: expected %d to %d Hz", what, rate,
                       G4_AUDIO_MIN_RATE, G4_AUDIO_MAX_RATE);
    // Only the head the tower can use is resampled (its window and one second more for the
    // resampler's look-ahead, as g4_audio_load decodes a file's head): memory bounded by the
    // window, not by the caller's length. The features see the same first window.
    const int target = pkg->audio_fe.sampling_rate;
    const double head = ceil(((double)G4_AUDIO_MAX_SAMPLES + 1 + target) * rate / target);
    const int64_t n_used = head < (double)n ? (int64_t)head : n;
    for (int64_t i = 0; i < n_used; i++)
        if (!isfinite(pcm[i]))
            return g4_fail(G4_EUSER, "%s: sample %lld is not finite: expected finite audio samples",
                           what, (long long)i);
    float *res = NULL;
    int64_t m = n_used;
    if (rate != target && (rc = g4_audio_resample(pcm, n_used, rate, target, &res, &m))) {
        g4_error_prefix("%s", what);
        return rc;
    }
    g4_logmel lm;
    if (!(rc = g4_logmel_init(&pkg->audio_fe, &lm))) {
        rc = g4_logmel_compute(&lm, res ? res : pcm, m, what, &out->audio);
        g4_logmel_free(&lm);
    }
    free(res);
    if (rc) return rc;
    audio_done(pkg, out);
    out->src_seconds = (double)n / rate;
    return G4_OK;
}

int g4_media_encode(g4_media_encoder *e, g4_backend *ex, const g4_media_input *in,
                    const char *path, g4_buf *rows) {
    if (!ex) ex = e->be;
    int rc = in->kind == G4_MEDIA_IMAGE ? e->image_tower(e->image_ctx, ex, &in->image, rows)
                                        : e->audio_tower(e->audio_ctx, ex, &in->audio, rows);
    if (rc) g4_error_prefix("%s", path);
    return rc;
}
