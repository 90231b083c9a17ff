// vision_tower.h: the Gemma-4 vision tower (spec gemma4-architecture.md 4.2-4.6; HF
// Gemma4VisionModel + embed_vision) on a backend: an image's patches -> soft tokens in the text
// model's width.
//
//   h = (2 p - 1) @ input_proj + T[0][x] + T[1][y]                     patch embedding [N, D]
//   per layer: h += post_attn_norm(o(attn(rope2d(q_norm(q x)), rope2d(k_norm(k x)), v_norm(v x))))
//              h += post_ff_norm(down(gelu_tanh(gate x) * up x)),  x = the pre-norms of h
//              (every q/k/v/o/gate/up/down is a ClippableLinear; attention scale 1, bidirectional)
//   pooled = 3x3 means of h over the patch grid * sqrt(D)             [n_soft, D]
//   soft   = rmsnorm_noscale(pooled) @ projector                      [n_soft, text hidden]
//
// Only the real patches run (HF pads to max_soft_tokens x 9 rows at position (-1, -1); those
// rows are masked as keys and dropped by the pooler, so the real rows are the same).
// Hook names (rows as HF's real patches / valid bins): "vision_patch_embeds" [N, D],
// "vision_layer_<i>" [N, D], "vision_pooled" [n_soft, D], "vision_soft_tokens" [n_soft, H].
#ifndef G4_VISION_TOWER_H
#define G4_VISION_TOWER_H

#include "engine/image_fe.h"
#include "engine/weights.h"

typedef struct {
    g4_linear q, k, v, o;   // [D, D] (heads * head_dim = D), clipped
    g4_linear gate, up;     // [D, F], clipped
    g4_linear down;         // [F, D], clipped
    const void *input_norm; // fp16 [D] (and the three below)
    const void *post_attn_norm;
    const void *pre_ff_norm;
    const void *post_ff_norm;
    const void *q_norm, *k_norm; // fp16 [head_dim]
} g4_vision_layer;

typedef struct g4_vision_tower {
    const g4_package *pkg;
    const g4_vision_config *cfg;
    g4_backend *be;
    g4_linear patch_proj;    // [patch_dim, D] (no clip, no bias)
    const void *pos_table;   // fp16 [2, pos_size, D]
    g4_vision_layer *layers; // [n_layers]
    g4_linear projector;     // [D, text hidden] (embed_vision.embedding_projection)
    const float *inv_freq;   // backend float [head_dim / 4]: the 2-D RoPE frequencies
    int pool_k;              // pooling kernel: 3 (image_processor.json)
    int text_hidden;         // soft-token width
    g4_binder w;             // owns the backend copies; w.clipped lists the clipped linears
    g4_tower_ws ws;          // the activations kept between runs (weights.h)
} g4_vision_tower;

// Binds every vision weight of pkg (vision_encoder component) on be. Errors name the tensor;
// a package without a vision encoder, or a backend without the tower ops, is a user error.
int g4_vision_tower_load(const g4_package *pkg, g4_backend *be, g4_vision_tower **out);
void g4_vision_tower_free(g4_vision_tower *t);

// Runs the tower on one image's patches (f from the image front end: real patches only, grid
// sides multiples of pool_k) on handle ex (NULL: the tower's backend; a text state's handle
// puts the work on that state's queue). Writes f->n_soft_tokens rows of text-width soft
// tokens to out (F32 [n_soft, text_hidden] in backend memory, e.g. a state's soft rows): they
// stay on the backend, and are complete when it returns. hook may be NULL. Activations are
// the tower's kept ones (t->ws, grown to the image), or the call's own while another run holds
// those.
int g4_vision_tower_run(g4_vision_tower *t, g4_backend *ex, const g4_image_features *f,
                        g4_buf *out, g4_tower_hook hook, void *hook_ctx);
// The same into host rows soft_out [n_soft, text_hidden] (for tools and tests that read them).
int g4_vision_tower_forward(g4_vision_tower *t, const g4_image_features *f, float *soft_out,
                            g4_tower_hook hook, void *hook_ctx);

#endif
