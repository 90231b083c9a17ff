// multimodal.h: the multimodal merge (spec gemma4-architecture.md 3): a package's vision and
// audio towers for a request, and the placement of their soft tokens at the placeholder ids.
//
// HF Gemma4Model.forward: image soft tokens go, in order, to the positions holding the image
// placeholder id (258880 in E2B), audio soft tokens to the audio placeholder id (258881); the
// number of placeholders of each kind must equal the number of soft tokens of that kind. The
// embedding of a placeholder position (and the token part of its per-layer input) uses the pad
// id, which g4_text_forward does; this module runs the towers and builds the g4_soft_tokens
// rows in prompt order.
#ifndef G4_MULTIMODAL_H
#define G4_MULTIMODAL_H

#include "engine/audio_tower.h"
#include "engine/text_model.h"
#include "engine/vision_tower.h"

// The towers of one package on one backend, each loaded when first needed.
typedef struct {
    const g4_package *pkg;
    g4_backend *be;
    g4_vision_tower *vision; // NULL until the first image
    g4_audio_tower *audio;   // NULL until the first audio
    g4_tower_hook hook;      // optional: every tower intermediate (names in the towers' headers)
    void *hook_ctx;
} g4_mm_towers;

void g4_mm_towers_init(g4_mm_towers *m, const g4_package *pkg, g4_backend *be);
void g4_mm_towers_free(g4_mm_towers *m);

// Features -> soft tokens [f->n_soft_tokens, text hidden] in backend memory (rows: F32 of that
// shape, e.g. a state's soft rows), run on handle ex (NULL: the towers' backend). The
// signatures of media.h's g4_image_tower_fn / g4_audio_tower_fn with ctx = g4_mm_towers *, so
// g4_media_encoder_set_towers(e, g4_mm_image_tower_run, g4_mm_audio_tower_run, &towers) plugs
// them in.
int g4_mm_image_tower_run(void *ctx, g4_backend *ex, const g4_image_features *f, g4_buf *rows);
int g4_mm_audio_tower_run(void *ctx, g4_backend *ex, const g4_audio_features *f, g4_buf *rows);
// The same into host rows [f->n_soft_tokens, text hidden] allocated by the caller (tools and
// tests that read or merge them on the host).
int g4_mm_image_tower(void *ctx, const g4_image_features *f, float *rows);
int g4_mm_audio_tower(void *ctx, const g4_audio_features *f, float *rows);

// The soft tokens for ids [n] in prompt order from host rows: the k-th image placeholder takes
// image row k, the k-th audio placeholder audio row k. A count mismatch is a user error that
// names both counts and the placeholder id. out->rows is a new buffer on be (none when
// n_img + n_aud == 0); g4_mm_soft_free releases it.
int g4_mm_merge(g4_backend *be, const g4_text_config *c, const int32_t *ids, int n,
                const float *img, int n_img, const float *aud, int n_aud, g4_soft_tokens *out);
void g4_mm_soft_free(g4_backend *be, g4_soft_tokens *s);

#endif
