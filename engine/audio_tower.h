// audio_tower.h: the Gemma-4 audio tower (spec gemma4-architecture.md 5.3-5.6; HF
// Gemma4AudioModel + embed_audio, a USM-style conformer) on a backend: log-mel features ->
// soft tokens in the text model's width, one per valid frame after 4x subsampling.
//
//   subsample: 2 x [mask rows, conv 3x3 stride 2 pad 1, LayerNorm over channels, ReLU] on
//              [1, T, mel] (mask[::2] after each), flatten [T/4, mel/4 * C1] (index mel * C1 +
//              ch), input_proj_linear                                        [T4, A]
//   conformer layer: h = FFN1(h); h += norm_post(post(ATTN(norm_pre(clip h))));
//              h += linear_end(silu(conv_norm(clip(dwconv5(glu(linear_start(pre_norm h)))))));
//              h = FFN2(h); h = norm_out(clip h)
//              FFN(h) = h + 0.5 * post_norm(clip(ffw2(silu(ffw1(pre_norm(clip h))))))
//              ATTN = chunked local attention with relative positions (12-key causal band,
//              per-dim scale, soft-cap 50): kernels/ref/attention_audio.c
//   out:       output_proj (with bias) [T4, A_out]; soft = rmsnorm_noscale(out) @ projector,
//              rows of the valid frames only                                  [m, text hidden]
// clip = clamp to +-min(gradient_clipping 1e10, the activation type's max): a no-op in fp32.
// Every linear of the conformer except relative_k_proj is a ClippableLinear.
//
// Hook names: "audio_subsample" [T4, A], per layer i "audio_ffn1_<i>", "audio_attn_<i>" (the
// `post` output, before its clip / norm / residual), "audio_lconv_<i>", "audio_ffn2_<i>",
// "audio_layer_<i>" (all [T4, A], padding frames included), "audio_output_proj" [T4, A_out],
// "audio_soft_tokens" [m, text hidden].
#ifndef G4_AUDIO_TOWER_H
#define G4_AUDIO_TOWER_H

#include "engine/audio_fe.h"
#include "engine/weights.h"

typedef struct {
    g4_linear ffn_1[2], ffn_2[2];         // feed_forward1/2: ffw_layer_1 [A, F], ffw_layer_2 [F, A]
    const void *ffn_pre[2], *ffn_post[2]; // fp16 [A]: their pre/post_layer_norm
    g4_linear q, k, v, post;              // [A, A] clipped
    g4_linear rel_k;                      // relative_k_proj [A, A] (not clipped)
    const float *per_dim_scale;           // backend float [head_dim]
    g4_buf rel;                           // act [band, A]: rel_k(sinusoid(d)) for distance d
    g4_linear lin_start;                  // [A, 2A]
    g4_linear lin_end;                    // [A, A]
    const void *dw;                       // fp16 [A, K]: depthwise conv weight [A, 1, K]
    const void *conv_pre_norm, *conv_norm;                 // fp16 [A]
    const void *norm_pre_attn, *norm_post_attn, *norm_out; // fp16 [A]
} g4_audio_layer;

typedef struct g4_audio_tower {
    const g4_package *pkg;
    const g4_audio_config *cfg;
    g4_backend *be;
    const void *conv0_w, *conv1_w; // fp16 [C0, 1, 3, 3], [C1, C0, 3, 3]
    const void *norm0_w, *norm1_w; // fp16 [C0], [C1]: the LayerNorm weights (no bias)
    g4_linear input_proj;          // [mel/4 * C1, A]
    g4_audio_layer *layers;        // [n_layers]
    g4_linear output_proj;         // [A, A_out] with bias
    g4_linear projector;           // [A_out, text hidden] (embed_audio.embedding_projection)
    float clip;                    // the conformer's clamp bound for this backend's activations
    int text_hidden;
    g4_binder w;    // owns the backend copies; w.clipped lists the clipped linears
    g4_tower_ws ws; // the activations kept between runs (weights.h)
} g4_audio_tower;

// Binds every audio weight of pkg (audio_encoder component) on be and precomputes each layer's
// relative-position keys (checking the package's sinusoid table against HF's formula). Errors
// name the tensor; a package without an audio encoder, or a backend without the tower ops, is a
// user error.
int g4_audio_tower_load(const g4_package *pkg, g4_backend *be, g4_audio_tower **out);
void g4_audio_tower_free(g4_audio_tower *t);

// Runs the tower on log-mel features f (from the audio front end or a dump: f->features
// [n_frames, n_mel], f->mask, f->n_soft_tokens) on handle ex (NULL: the tower's backend).
// Writes f->n_soft_tokens rows of text-width soft tokens (the valid frames after subsampling,
// in order, picked on the backend) to out (F32 [n_soft, text_hidden] in backend memory),
// complete when it returns. hook may be NULL. Activations are the tower's kept ones (t->ws,
// grown to the clip), or the call's own while another run holds those.
int g4_audio_tower_run(g4_audio_tower *t, g4_backend *ex, const g4_audio_features *f,
                       g4_buf *out, g4_tower_hook hook, void *hook_ctx);
// The same into host rows soft_out [n_soft, text_hidden].
int g4_audio_tower_forward(g4_audio_tower *t, const g4_audio_features *f, float *soft_out,
                           g4_tower_hook hook, void *hook_ctx);

#endif
