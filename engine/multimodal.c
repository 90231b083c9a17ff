// multimodal.c: see multimodal.h.
#include "engine/multimodal.h"

#include <stdlib.h>

#include "base/base.h"

void g4_mm_towers_init(g4_mm_towers *m, const g4_package *pkg, g4_backend *be) {
    memset(m, 0, sizeof *m);
    m->pkg = pkg;
    m->be = be;
}

void g4_mm_towers_free(g4_mm_towers *m) {
    g4_vision_tower_free(m->vision);
    g4_audio_tower_free(m->audio);
    m->vision = NULL;
    m->audio = NULL;
}

int g4_mm_image_tower(void *ctx, const g4_image_features *f, float *rows) {
    g4_mm_towers *m = ctx;
    int rc;
    if (!m->vision && (rc = g4_vision_tower_load(m->pkg, m->be, &m->vision))) return rc;
    return g4_vision_tower_forward(m->vision, f, rows, m->hook, m->hook_ctx);
}

int g4_mm_audio_tower(void *ctx, const g4_audio_features *f, float *rows) {
    g4_mm_towers *m = ctx;
    int rc;
    if (!m->audio && (rc = g4_audio_tower_load(m->pkg, m->be, &m->audio))) return rc;
    return g4_audio_tower_forward(m->audio, f, rows, m->hook, m->hook_ctx);
}

int g4_mm_merge(const g4_text_config *c, const int32_t *ids, int n, const float *img, int n_img,
                const float *aud, int n_aud, g4_soft_tokens *out) {
    memset(out, 0, sizeof *out);
    int ph_img = 0, ph_aud = 0;
    for (int t = 0; t < n; t++) {
        ph_img += c->image_token_id >= 0 && ids[t] == c->image_token_id;
        ph_aud += c->audio_token_id >= 0 && ids[t] == c->audio_token_id;
    }
    if (ph_img && !img)
        return g4_fail(G4_EUSER,
                       "the prompt has %d image placeholder ids (%d) but no image was given",
                       ph_img, c->image_token_id);
    if (ph_aud && !aud)
        return g4_fail(G4_EUSER,
                       "the prompt has %d audio placeholder ids (%d) but no audio was given",
                       ph_aud, c->audio_token_id);
    if (ph_img != n_img)
        return g4_fail(G4_EUSER,
                       "the prompt has %d image placeholder ids (%d) but the image gives %d soft "
                       "tokens: expected <|image> + %d x %d + <image|>",
                       ph_img, c->image_token_id, n_img, n_img, c->image_token_id);
    if (ph_aud != n_aud)
        return g4_fail(G4_EUSER,
                       "the prompt has %d audio placeholder ids (%d) but the audio gives %d soft "
                       "tokens: expected <|audio> + %d x %d + <audio|>",
                       ph_aud, c->audio_token_id, n_aud, n_aud, c->audio_token_id);
    if (n_img + n_aud == 0) return G4_OK;
    const int H = c->hidden;
    float *rows = g4_malloc(sizeof(float) * (size_t)(n_img + n_aud) * H);
    for (int t = 0, k = 0, ki = 0, ka = 0; t < n; t++) {
        const float *src = NULL;
        if (c->image_token_id >= 0 && ids[t] == c->image_token_id)
            src = img + (size_t)(ki++) * H;
        else if (c->audio_token_id >= 0 && ids[t] == c->audio_token_id)
            src = aud + (size_t)(ka++) * H;
        if (src) memcpy(rows + (size_t)(k++) * H, src, sizeof(float) * (size_t)H);
    }
    out->rows = rows;
    out->n = n_img + n_aud;
    return G4_OK;
}

void g4_mm_soft_free(g4_soft_tokens *s) {
    free((void *)s->rows);
    s->rows = NULL;
    s->n = 0;
}
