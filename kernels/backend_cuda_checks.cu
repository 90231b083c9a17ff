// backend_cuda_checks.cu: the CUDA backend's load checks (check_text, check_vision, check_audio
// of the op table; g4_cuda_check_* in kernels/cuda_util.h): every op's supported() predicate
// with the model's shapes.
//
// The same predicates the launchers assert, so a package is refused here, with the op, the
// shape and what the kernel takes, exactly when a forward would otherwise abort. The GEMMs are
// checked per tensor when prepare_linear lays each weight out (fp16: g4_gemm_f16_supported;
// Q4: g4_q4_repack), which names the tensor.
#include <stdarg.h>
#include <stdio.h>

#include "base/base.h"
#include "kernels/attention_audio.cuh"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/conv_dw1d.cuh"
#include "kernels/conv_sscp.cuh"
#include "kernels/cuda_util.h"
#include "kernels/embed.cuh"
#include "kernels/gelu_mul.cuh"
#include "kernels/logits.cuh"
#include "kernels/ple.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/vision_pool.cuh"
#include "kernels/vision_posemb.cuh"
#include "loader/model_config.h"

// "cuda backend: <what>: the kernel takes <why> (use --backend cpu)"
static int refuse(const char *why, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return g4_fail(G4_EUSER, "cuda backend: %s: the kernel takes %s (use --backend cpu)", what,
                   why);
}

#define REFUSE_IF(why_expr, ...)                                                                   \
    do {                                                                                           \
        const char *why_ = (why_expr);                                                             \
        if (why_) return refuse(why_, __VA_ARGS__);                                                \
    } while (0)

extern "C" int g4_cuda_check_text(const g4_text_config *c) {
    const int H = c->hidden;
    for (int l = 0; l < c->n_layers; l++) {
        const int hd = c->layer[l].head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
        REFUSE_IF(g4_attn_decode_supported(nh, nkv, hd),
                  "layer %d decode attention (%d heads, %d KV heads, head_dim %d)", l, nh, nkv, hd);
        REFUSE_IF(g4_attn_prefill_supported(nh, nkv, hd),
                  "layer %d prefill attention (%d heads, %d KV heads, head_dim %d)", l, nh, nkv,
                  hd);
        REFUSE_IF(g4_qkv_rope_supported(nh, hd), "layer %d q/k/v norm + RoPE (head_dim %d)", l, hd);
    }
    REFUSE_IF(g4_embed_supported(H), "token embedding of width %d", H);
    REFUSE_IF(g4_rmsnorm_supported(H, H), "RMS norm over the hidden size %d", H);
    REFUSE_IF(g4_add_rmsnorm_supported(H), "residual add + RMS norm over the hidden size %d", H);
    REFUSE_IF(g4_ple_supported(c->ple_dim), "per-layer inputs of width %d", c->ple_dim);
    REFUSE_IF(g4_gelu_mul_supported(c->ple_dim), "per-layer input gate of width %d", c->ple_dim);
    REFUSE_IF(g4_logits_supported(c->vocab), "next-token pick over a vocabulary of %d", c->vocab);
    return G4_OK;
}

extern "C" int g4_cuda_check_vision(const g4_vision_config *c, int pool_k) {
    const int D = c->hidden, hd = c->head_dim, nh = c->n_heads;
    REFUSE_IF(g4_vision_posemb_supported(D), "vision position embedding of width %d", D);
    REFUSE_IF(g4_rmsnorm_supported(D, D), "vision RMS norm over the width %d", D);
    REFUSE_IF(g4_rmsnorm_supported(D, hd), "vision per-head RMS norm (%d heads of %d)", nh, hd);
    REFUSE_IF(g4_add_rmsnorm_supported(D), "vision residual add + RMS norm of width %d", D);
    REFUSE_IF(g4_qkv_rope_supported(nh, hd), "vision 2-D RoPE (%d heads of %d)", nh, hd);
    REFUSE_IF(g4_attn_bidir_supported(nh, hd), "vision attention (%d heads of %d)", nh, hd);
    REFUSE_IF(g4_gelu_mul_supported(c->ffn), "vision MLP gate of width %d", c->ffn);
    REFUSE_IF(g4_vision_pool_supported(D, pool_k), "vision pooling of width %d, kernel %d", D,
              pool_k);
    return G4_OK;
}

extern "C" int g4_cuda_check_audio(const g4_audio_config *c) {
    const int m1 = (c->n_mel + 1) / 2;
    REFUSE_IF(g4_sscp_conv_supported(1, c->conv0_ch, c->n_mel, 1),
              "audio subsampling conv 0 (1 -> %d channels over %d mel bins)", c->conv0_ch,
              c->n_mel);
    REFUSE_IF(g4_sscp_conv_supported(c->conv0_ch, c->conv1_ch, m1, 0),
              "audio subsampling conv 1 (%d -> %d channels over %d columns)", c->conv0_ch,
              c->conv1_ch, m1);
    REFUSE_IF(g4_attn_audio_supported(c->n_heads, c->head_dim, c->chunk, c->band),
              "audio attention (%d heads of %d, chunk %d, band %d)", c->n_heads, c->head_dim,
              c->chunk, c->band);
    REFUSE_IF(g4_dwconv1d_supported(c->hidden, c->conv_kernel),
              "audio light conv (%d channels, kernel %d)", c->hidden, c->conv_kernel);
    REFUSE_IF(g4_rmsnorm_supported(c->hidden, c->hidden), "audio RMS norm over the width %d",
              c->hidden);
    REFUSE_IF(g4_add_rmsnorm_supported(c->hidden), "audio residual add + RMS norm of width %d",
              c->hidden);
    REFUSE_IF(g4_rmsnorm_supported(c->out_hidden, c->out_hidden),
              "audio output RMS norm over the width %d", c->out_hidden);
    return G4_OK;
}
