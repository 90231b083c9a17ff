// test_cuda_supported.c: what each CUDA op takes, said once: the supported() predicates of the
// kernels (kernels/<op>.cuh) and the CUDA backend's load checks built on them
// (g4_cuda_check_text / _vision / _audio, kernels/backend_cuda.cu). Host code only: it runs
// without a GPU (no skip).
//   1. each predicate at its boundaries: E2B's shapes pass, the neighbours the kernels do not
//      take are refused with what they take;
//   2. the load checks accept E2B's and gpu-tiny's configs, and refuse, with one line naming
//      the op, the shape and what the kernel takes, the shapes that the old load checks passed
//      and the kernels then aborted on in the first forward: a per-layer input width of 768
//      (the old check asked for a multiple of 256; the PLE kernel takes 256 or 512), an audio
//      conv with 96 channels (old: a multiple of 32 up to 256; the kernel takes 32, 64, 128,
//      256) and an audio head_dim of 96 (old: a multiple of 32; the kernel takes 32, 64, 128,
//      256); and a vision 2-D RoPE head_dim of 192 (the launcher's own check said multiples of
//      64, the kernel takes 64, 128, 256, 512).
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_audio.cuh"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/conv_dw1d.cuh"
#include "kernels/conv_sscp.cuh"
#include "kernels/cuda_util.h"
#include "kernels/embed.cuh"
#include "kernels/gelu_mul.cuh"
#include "kernels/gemm_f16.cuh"
#include "kernels/logits.cuh"
#include "kernels/ple.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/vision_pool.cuh"
#include "kernels/vision_posemb.cuh"
#include "base/base.h"
#include "loader/model_config.h"
#include "loader/package.h"
#include "tests/test_util.h"

#define OK(expr) CHECK_MSG((expr) == NULL, "%s refused: %s", #expr, (expr))
#define NO(expr) CHECK_MSG((expr) != NULL, "%s accepted", #expr)

static void test_predicates(void) {
    OK(g4_attn_decode_supported(8, 1, 256));
    OK(g4_attn_decode_supported(8, 1, 512));
    NO(g4_attn_decode_supported(8, 1, 384));
    NO(g4_attn_decode_supported(8, 1, 128));
    NO(g4_attn_decode_supported(8, 3, 256)); // heads not a multiple of the KV heads
    OK(g4_attn_prefill_supported(8, 1, 512));
    OK(g4_attn_prefill_supported(8, 2, 64));
    NO(g4_attn_prefill_supported(8, 1, 128));
    OK(g4_attn_bidir_supported(12, 64));
    NO(g4_attn_bidir_supported(12, 256)); // built and tested for the vision tower's 64 only
    OK(g4_qkv_rope_supported(8, 256));
    OK(g4_qkv_rope_supported(12, 64));
    NO(g4_qkv_rope_supported(8, 192));
    NO(g4_qkv_rope_supported(8, 1024));
    OK(g4_ple_supported(256));
    OK(g4_ple_supported(512));
    NO(g4_ple_supported(768));
    NO(g4_ple_supported(128));
    OK(g4_rmsnorm_supported(1536, 1536));
    OK(g4_rmsnorm_supported(768, 64));
    NO(g4_rmsnorm_supported(1536, 4));
    NO(g4_rmsnorm_supported(100, 100));
    OK(g4_add_rmsnorm_supported(1536));
    NO(g4_add_rmsnorm_supported(1540));
    OK(g4_embed_supported(1536));
    NO(g4_embed_supported(1537));
    OK(g4_gelu_mul_supported(256));
    NO(g4_gelu_mul_supported(250));
    OK(g4_gemm_f16_supported(262144, 1536));
    NO(g4_gemm_f16_supported(12, 1536));
    NO(g4_gemm_f16_supported(1536, 4));
    OK(g4_logits_supported(262144));
    OK(g4_logits_supported(1001));
    NO(g4_logits_supported(1 << 24));
    NO(g4_logits_supported(0));
    OK(g4_sscp_conv_supported(1, 128, 128, 1));  // E2B conv0 (f32 log-mel in)
    OK(g4_sscp_conv_supported(128, 32, 64, 0));  // E2B conv1
    NO(g4_sscp_conv_supported(1, 96, 128, 1));   // 96 output channels
    NO(g4_sscp_conv_supported(300, 32, 64, 0));  // more than 256 inputs
    NO(g4_sscp_conv_supported(256, 256, 64, 0)); // weights beyond shared memory
    OK(g4_dwconv1d_supported(1024, 5));
    NO(g4_dwconv1d_supported(2056, 5));
    NO(g4_dwconv1d_supported(1024, 9));
    OK(g4_attn_audio_supported(8, 128, 12, 12));
    NO(g4_attn_audio_supported(8, 96, 12, 12));
    NO(g4_attn_audio_supported(33, 128, 12, 12));
    OK(g4_vision_pool_supported(768, 3));
    NO(g4_vision_pool_supported(768, 33));
    NO(g4_vision_pool_supported(766, 3));
    OK(g4_vision_posemb_supported(768));
    NO(g4_vision_posemb_supported(764));
}

// E2B's text config (loader/model_config.h comments), layers with head_dim 256 (sliding) and 512.
static g4_layer_config layers[35];
static g4_text_config e2b_text(void) {
    g4_text_config c;
    memset(&c, 0, sizeof c);
    c.hidden = 1536, c.n_layers = 35, c.n_heads = 8, c.n_kv_heads = 1, c.vocab = 262144;
    c.vocab_ple = 262144, c.ple_dim = 256, c.context_length = 131072;
    for (int l = 0; l < 35; l++) layers[l] = (g4_layer_config){0, l % 5 == 4 ? 512 : 256, 512, 6144, 0, 0, 0};
    c.layer = layers;
    return c;
}

static g4_vision_config e2b_vision(void) {
    g4_vision_config v;
    memset(&v, 0, sizeof v);
    v.hidden = 768, v.patch_dim = 768, v.n_layers = 16, v.head_dim = 64, v.n_heads = 12;
    v.ffn = 3072, v.pos_size = 10240, v.out_dim = 1536;
    return v;
}

static g4_audio_config e2b_audio(void) {
    g4_audio_config a;
    memset(&a, 0, sizeof a);
    a.n_mel = 128, a.conv0_ch = 128, a.conv1_ch = 32, a.hidden = 1024, a.n_layers = 12;
    a.head_dim = 128, a.n_heads = 8, a.ffn = 4096, a.conv_kernel = 5, a.n_rel_pos = 13;
    a.out_hidden = 1536, a.out_dim = 1536, a.chunk = 12, a.band = 12;
    return a;
}

// rc is a user error whose one-line message holds each of the strings.
static void refused(const char *what, int rc, const char *a, const char *b) {
    const char *e = g4_error();
    CHECK_MSG(rc == G4_EUSER && !strchr(e, '\n') && strstr(e, a) && strstr(e, b) &&
                  strstr(e, "--backend cpu"),
              "%s: rc %d, '%s' (expected '%s' and '%s')", what, rc, e, a, b);
    printf("  %-34s %s\n", what, e);
}

static void test_load_checks(void) {
    g4_text_config t = e2b_text();
    CHECK_MSG(g4_cuda_check_text(&t) == G4_OK, "E2B text: %s", g4_error());
    g4_vision_config v = e2b_vision();
    CHECK_MSG(g4_cuda_check_vision(&v, 3) == G4_OK, "E2B vision: %s", g4_error());
    g4_audio_config a = e2b_audio();
    CHECK_MSG(g4_cuda_check_audio(&a) == G4_OK, "E2B audio: %s", g4_error());
    // gpu-tiny (tools/python/make_package.py --preset gpu-tiny): E2B's head_dims, small widths
    t.hidden = 256, t.n_layers = 5, t.n_heads = 2, t.vocab = 512, t.vocab_ple = 512;
    CHECK_MSG(g4_cuda_check_text(&t) == G4_OK, "gpu-tiny text: %s", g4_error());
    t = e2b_text();

    printf("refused at load (each passed the old load check, then aborted in a forward):\n");
    t.ple_dim = 768;
    refused("PLE width 768", g4_cuda_check_text(&t), "per-layer inputs of width 768",
            "256 or 512");
    t = e2b_text();
    a.conv0_ch = 96;
    refused("audio conv 96 channels", g4_cuda_check_audio(&a), "conv 0 (1 -> 96 channels",
            "32, 64, 128 or 256 output channels");
    a = e2b_audio();
    a.conv1_ch = 96;
    refused("audio conv1 96 channels", g4_cuda_check_audio(&a), "conv 1 (128 -> 96 channels",
            "32, 64, 128 or 256 output channels");
    a = e2b_audio();
    a.head_dim = 96;
    a.n_heads = 8;
    refused("audio head_dim 96", g4_cuda_check_audio(&a), "audio attention (8 heads of 96",
            "head_dim 32, 64, 128 or 256");
    a = e2b_audio();
    printf("refused at load (the kernels take none of these either):\n");
    layers[7].head_dim = 384;
    refused("text head_dim 384", g4_cuda_check_text(&t), "layer 7 decode attention",
            "head_dim 256 or 512");
    layers[7].head_dim = 256;
    t.vocab = 1 << 24;
    refused("vocabulary 2^24", g4_cuda_check_text(&t), "vocabulary of 16777216", "2^24");
    t = e2b_text();
    v.head_dim = 192;
    v.n_heads = 4;
    refused("vision head_dim 192", g4_cuda_check_vision(&v, 3), "vision 2-D RoPE (4 heads of 192)",
            "64, 128, 256 or 512");
    v = e2b_vision();
    refused("vision pooling 40x40", g4_cuda_check_vision(&v, 40), "kernel 40", "32 x 32");
    a.conv_kernel = 11;
    refused("audio light conv kernel 11", g4_cuda_check_audio(&a), "kernel 11", "1 .. 8 taps");
}

// n layers, every period-th full (head_dim 512, RoPE table 1) and the rest sliding (256, window);
// MLP ffn, ffn_wide from layer wide_from on.
static void pattern_layers(g4_layer_config *ls, int n, int period, int window, int ffn,
                           int wide_from, int ffn_wide) {
    for (int l = 0; l < n; l++) {
        const int full = l % period == period - 1;
        ls[l] = (g4_layer_config){full ? G4_ATTN_FULL : G4_ATTN_SLIDING,
                                  full ? 512 : 256,
                                  full ? 0 : window,
                                  l >= wide_from ? ffn_wide : ffn,
                                  0,
                                  0,
                                  full};
    }
}

// A decoder of these widths over the layer table ls (the PLE table as wide as the vocabulary).
static g4_text_config text_shape(int hidden, int n_layers, int n_heads, int n_kv_heads, int vocab,
                                 int ple_dim, int context, g4_layer_config *ls) {
    g4_text_config t;
    memset(&t, 0, sizeof t);
    t.hidden = hidden, t.n_layers = n_layers, t.n_heads = n_heads, t.n_kv_heads = n_kv_heads;
    t.vocab = vocab, t.vocab_ple = vocab, t.ple_dim = ple_dim, t.context_length = context;
    t.layer = ls;
    return t;
}

// Another shape than E2B (issue 30): make_package.py --preset alt (hidden 2048, 24 layers S S F,
// 8 query heads over 2 KV heads, head_dim 256 / 512, MLP 8192, PLE 512, vocab 32768) is a CUDA
// shape; the committed alt-tiny (its pattern at head_dim 16 / 48, derived from the package) is
// not, and is refused at load by its first layer's decode attention, where the CPU runs it.
static void test_alt_shapes(void) {
    static g4_layer_config alt_layers[24];
    pattern_layers(alt_layers, 24, 3, 1024, 8192, 24, 0);
    g4_text_config t = text_shape(2048, 24, 8, 2, 32768, 512, 32768, alt_layers);
    CHECK_MSG(g4_cuda_check_text(&t) == G4_OK, "alt text: %s", g4_error());

    char *dir = g4_sprintf("%s/alt-tiny/package", g4t_env("G4_FIXTURES"));
    g4_package *p;
    int rc = g4_package_open(dir, &p);
    free(dir);
    CHECK_MSG(rc == G4_OK, "alt-tiny: %s", g4_error());
    if (rc) return;
    CHECK_INT(p->text.n_kv_heads, 2);
    printf("refused at load (the committed alt-tiny package):\n");
    refused("alt-tiny head_dim 16", g4_cuda_check_text(&p->text),
            "layer 0 decode attention (8 heads, 2 KV heads, head_dim 16)", "head_dim 256 or 512");
    g4_package_close(p);
}

// The multimodal proxy of issue 35 (tools/python/train_mm_proxy.py --preset proxy: the text
// proxy's decoder, vocab 4096; vision 384 wide, 6 heads of 64, MLP 1536; audio 512 wide, 8 heads
// of 64, MLP 2048, conv 128 / 32 channels, output 768) must load on CUDA: it was first exported
// on a CPU, and a refusal there would cost the GPU run its 10 training minutes. With
// G4_MM_PROXY_PKG set, that package's own configs too (the dry run's export).
static void test_mm_proxy_shapes(void) {
    static g4_layer_config mm_layers[15];
    pattern_layers(mm_layers, 15, 5, 256, 3072, 9, 6144); // layers 9.. KV-shared, MLP doubled
    g4_text_config t = text_shape(768, 15, 4, 1, 4096, 256, 4096, mm_layers);
    CHECK_MSG(g4_cuda_check_text(&t) == G4_OK, "mm proxy text: %s", g4_error());
    g4_vision_config v = e2b_vision();
    v.hidden = 384, v.n_layers = 6, v.head_dim = 64, v.n_heads = 6, v.ffn = 1536;
    v.pos_size = 128, v.out_dim = 768;
    CHECK_MSG(g4_cuda_check_vision(&v, 3) == G4_OK, "mm proxy vision: %s", g4_error());
    g4_audio_config a = e2b_audio();
    a.hidden = 512, a.n_layers = 6, a.head_dim = 64, a.n_heads = 8, a.ffn = 2048;
    a.out_hidden = 768, a.out_dim = 768;
    CHECK_MSG(g4_cuda_check_audio(&a) == G4_OK, "mm proxy audio: %s", g4_error());
    const char *dir = getenv("G4_MM_PROXY_PKG");
    if (!dir || !*dir) return;
    g4_package *p;
    int rc = g4_package_open(dir, &p);
    CHECK_MSG(rc == G4_OK, "%s: %s", dir, g4_error());
    if (rc) return;
    CHECK_MSG(g4_cuda_check_text(&p->text) == G4_OK, "%s text: %s", dir, g4_error());
    CHECK_MSG(p->comp[G4_COMP_VISION].model && p->comp[G4_COMP_AUDIO].model,
              "%s: no vision or no audio tower", dir);
    if (p->comp[G4_COMP_VISION].model)
        CHECK_MSG(g4_cuda_check_vision(&p->vision, p->image_proc.pooling_kernel_size) == G4_OK,
                  "%s vision: %s", dir, g4_error());
    if (p->comp[G4_COMP_AUDIO].model)
        CHECK_MSG(g4_cuda_check_audio(&p->audio) == G4_OK, "%s audio: %s", dir, g4_error());
    printf("mm proxy package %s: text, vision and audio pass the CUDA load checks\n", dir);
    g4_package_close(p);
}

int main(void) {
    test_predicates();
    test_load_checks();
    test_alt_shapes();
    test_mm_proxy_shapes();
    return g4t_finish("test_cuda_supported");
}
