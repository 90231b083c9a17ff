// model_config.h: the model hyper-parameters, all derived from a package (never assumed).
//
// Each field says where it comes from and its Gemma-4 E2B value. Derivation and the checks
// that the JSON, the tensor table and the graph agree live in model_config.c.
#ifndef G4_MODEL_CONFIG_H
#define G4_MODEL_CONFIG_H

#include <stdint.h>

#define G4_MAX_ROPE 4
#define G4_MAX_VISION_ROPE 64 // vision head_dim / 4 (16 for E2B)

typedef enum {
    G4_ATTN_SLIDING = 0, // causal, at most `window` keys including the query itself
    G4_ATTN_FULL = 1,    // causal over the whole context
} g4_attn_type;

// Rotary frequencies of one cos/sin table in the package, recovered from the table itself.
// Pairs are split-half (dim j with j + head_dim/2); a zero frequency leaves its pair as is.
typedef struct {
    char *cos_name;      // decoder initializer the frequencies were read from
    int head_dim;        // rotated head width (2 x table columns): 256 local, 512 global
    int n_freq;          // head_dim / 2
    int n_rotating;      // pairs with a non-zero frequency: 128 local, 64 global
    float *inv_freq;     // [n_freq] radians per position
    double theta;        // base of inv_freq[i] = theta^(-2i/head_dim), fitted, then the roundest
                         // value that reproduces the table: 1e4 / 1e6 (0: the table is not of
                         // that form and the raw recovered frequencies are used)
    int max_positions;   // table rows (context the exporter prepared): 131072
} g4_rope_freqs;

typedef struct {
    g4_attn_type type;
    int head_dim;  // q/k/v head width: 256 sliding, 512 full (q_norm.weight length)
    int window;    // sliding window in keys (GQA local_window_size): 512; 0 for full layers
    int ffn;       // MLP width (gate_proj.weight_t columns): 6144, 12288 on KV-shared layers
    int kv_slot;   // KV-cache slot this layer reads (past_key_values.<slot>)
    int kv_source; // layer that computes that slot's K/V (itself for non-shared layers)
    int rope;      // index into g4_text_config.rope
} g4_layer_config;

typedef struct g4_text_config_s {
    int hidden;          // genai decoder.hidden_size = embed_tokens.weight cols: 1536
    int n_layers;        // genai decoder.num_hidden_layers = layers with q_proj: 35
    int n_heads;         // genai num_attention_heads = GQA num_heads: 8
    int n_kv_heads;      // genai num_key_value_heads = GQA kv_num_heads: 1
    int vocab;           // genai vocab_size = embed_tokens rows = lm_head cols: 262144
    int vocab_ple;       // embed_tokens_per_layer rows: 262144
    int ple_dim;         // per_layer_input_gate.weight_t cols: 256
    int n_kv_layers;     // layers owning a KV cache (past_key_values inputs): 15
    int n_kv_shared;     // n_layers - n_kv_layers: 20
    int context_length;  // genai context_length, capped at the RoPE tables' rows: 131072
    int context_from_rope; // 1 when the RoPE tables capped it
    float rms_eps;       // RMSNormalization epsilon in the decoder graph: 1e-6
    float final_softcap; // logits = c*tanh(logits/c), c from the decoder's Tanh node: 30 (0 = none)
    float attn_scale;    // GQA scale attribute: 1.0
    float embed_scale;   // the embedding graph's multiplier of embed_tokens rows, in the
                         // weight dtype: fp16(sqrt(1536)) = 39.1875
    float ple_token_scale;   // multiplier of embed_tokens_per_layer rows: sqrt(256) = 16
    float ple_proj_scale;    // multiplier of the per-layer projection: 1536^-0.5
    float ple_combine_scale; // multiplier of (projection + token part): 2^-0.5
    int weights_q4;      // 1 when the decoder linears are MatMulNBits (4-bit, block 32)
    int bos_id, pad_id;  // 2, 0
    int n_eos;           // [1, 106]
    int eos_ids[16];
    int image_token_id;  // 258880 (-1 when absent)
    int audio_token_id;  // 258881
    g4_layer_config *layer; // [n_layers]
    int n_rope;
    g4_rope_freqs rope[G4_MAX_ROPE];
} g4_text_config;

// image_processor.json, Gemma4ImageTransform attrs.
typedef struct {
    int patch_size;          // 16
    int max_soft_tokens;     // 280
    int pooling_kernel_size; // 3
} g4_image_proc_config;

// audio_feature_extraction.json, Gemma4LogMel attrs.
typedef struct {
    int feature_size;      // mel bins: 128
    int sampling_rate;     // 16000
    double frame_length_ms; // 20 -> 320 samples
    double hop_length_ms;   // 10 -> 160 samples
    double min_frequency;  // 0
    double max_frequency;  // 8000
    double preemphasis;    // 0
    double mel_floor;      // 1e-3
    int fft_overdrive;     // 0
} g4_audio_fe_config;

// Vision tower, from the vision_encoder tensor table.
typedef struct g4_vision_config_s {
    int hidden;        // input_proj.weight_t cols: 768
    int patch_dim;     // input_proj.weight_t rows = 3 x patch^2: 768
    int n_layers;      // 16
    int head_dim;      // q_norm.weight length: 64
    int n_heads;       // hidden / head_dim: 12
    int ffn;           // gate_proj cols: 3072
    int pos_size;      // position_embedding_table rows per axis: 10240
    int out_dim;       // projector.weight_t cols = text hidden: 1536
    int clipped;       // 1 when the linears carry input/output clip bounds
    float rms_eps;     // 1e-6
    // 2-D RoPE, recovered from layer 0's cos/sin_cache [positions, head_dim/2] (the same
    // head_dim/4 frequencies for the x and the y half, as HF's axial rope):
    int rope_n_freq;   // head_dim / 4: 16
    double rope_theta; // inv_freq[j] = theta^(-2j / (head_dim/2)): 100 (fitted, then the
                       // roundest value that reproduces the table as well)
    float rope_inv_freq[G4_MAX_VISION_ROPE]; // [rope_n_freq] in fp32, as HF computes them
} g4_vision_config;

// Audio tower (conformer), from the audio_encoder tensor table.
typedef struct g4_audio_config_s {
    int n_mel;          // input_features width: 128
    int conv0_ch;       // subsample conv0 out channels: 128
    int conv1_ch;       // conv1 out channels: 32
    int hidden;         // input_proj_linear cols: 1024
    int n_layers;       // 12
    int head_dim;       // per_dim_scale length: 128
    int n_heads;        // hidden / head_dim: 8
    int ffn;            // ffw_layer_1 cols: 4096
    int conv_kernel;    // depthwise_conv1d kernel: 5
    int n_rel_pos;      // pos_embed rows: 13
    int out_hidden;     // output_proj cols: 1536 (E2B) / 64 (tiny)
    int out_dim;        // projector cols = text hidden: 1536
    float rms_eps;      // 1e-6
    // Chunked local attention (spec 5.5). The package's graph is the dense banded form, so the
    // block size is HF's Gemma4AudioConfig default; the band follows from the relative positions
    // HF makes: n_rel_pos = (chunk + band) / 2 + 1 (context_right 0).
    int chunk;          // attention_chunk_size: 12 (HF default; only padding frames depend on it)
    int band;           // keys per query, self included: attention_context_left - 1 = 12
    float logit_cap;    // attention soft-cap, from the graph's Tanh: 50
    float invalid_logit; // masked-logit value: -1e9 (HF attention_invalid_logits_value default)
    float residual_weight; // FFN half step, the graph's multiplier after post_layer_norm: 0.5
    float grad_clip;    // HF gradient_clipping: 1e10 (clamps only where it is below the
                        // activation type's range: a no-op in fp32, +-65504 in fp16)
} g4_audio_config;

void g4_text_config_free(g4_text_config *c);

// Which media placeholder a token id is: the one test of "is this a soft-token position" (a
// model without an image or audio placeholder has -1 there, which no id matches).
typedef enum { G4_PH_NONE = 0, G4_PH_IMAGE = 1, G4_PH_AUDIO = 2 } g4_placeholder;
g4_placeholder g4_placeholder_of(const g4_text_config *c, int32_t id);
// The input id of a generated token fed back to the model: a placeholder the model generated
// has no medium behind it, so it is looked up as the pad id (spec 2.3, as HF's decode steps
// embed it); every other id as is.
int32_t g4_fed_back_id(const g4_text_config *c, int32_t id);

#endif
