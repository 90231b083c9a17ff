// package.h: an onnxruntime-genai Gemma-4 package directory, opened and cross-checked.
//
//   <pkg>/genai_config.json, image_processor.json, audio_feature_extraction.json
//   <pkg>/decoder/ embedding/ vision_encoder/ audio_encoder/   (model.onnx + model.onnx.data)
//
// File names come from genai_config.json (model.<component>.filename). The decoder and the
// embedding are required; vision and audio are optional (a text-only package still runs), but a
// component the config names must exist. The model configs (model_config.h) are derived from
// the JSON plus the tensor tables and graphs, and every pair that must agree is checked.
#ifndef G4_PACKAGE_H
#define G4_PACKAGE_H

#include "loader/model_config.h"
#include "loader/onnx_model.h"

typedef enum {
    G4_COMP_DECODER = 0,
    G4_COMP_EMBEDDING = 1,
    G4_COMP_VISION = 2,
    G4_COMP_AUDIO = 3,
    G4_COMP_COUNT = 4,
} g4_component_id;

typedef struct {
    g4_component_id id;
    const char *name;   // "decoder", "embedding", "vision_encoder", "audio_encoder"
    const char *prefix; // tensor-name prefix the exporter adds ("decoder.")
    char *onnx_path;    // NULL when the package has no such component
    g4_onnx_model *model;
} g4_component;

// What genai_config.json says (fields g4cu reads; -1 / NULL when absent).
typedef struct {
    char *model_type;      // model.type: "gemma4" (E2B) or "gemma4_text"
    int vocab_size;        // model.vocab_size (262144)
    int context_length;    // model.context_length (131072)
    int bos_token_id;      // 2
    int pad_token_id;      // 0
    int n_eos;             // number of model.eos_token_id values ([1, 106])
    int eos_token_ids[16];
    int image_token_id;    // 258880
    int audio_token_id;    // 258881
    int boa_token_id;      // 256000
    char *decoder_file;    // model.decoder.filename
    int head_size;         // model.decoder.head_size: sliding-layer head dim (256)
    int hidden_size;       // model.decoder.hidden_size (1536)
    int num_attention_heads;
    int num_key_value_heads;
    int num_hidden_layers;
    char *past_key_fmt;    // model.decoder.inputs.past_key_names ("past_key_values.%d.key")
    char *past_value_fmt;
    char *embedding_file;  // model.embedding.filename
    char *vision_file;     // model.vision.filename
    char *vision_config_file;
    char *speech_file;     // model.speech.filename
    char *speech_config_file;
    int search_max_length; // search.max_length
    int search_top_k;
    double search_top_p;
    double search_temperature;
    int search_do_sample;
} g4_genai_config;

typedef struct g4_package {
    char *dir;
    g4_genai_config genai;
    g4_component comp[G4_COMP_COUNT];
    g4_image_proc_config image_proc; // from image_processor.json (valid when has_image_proc)
    int has_image_proc;
    g4_audio_fe_config audio_fe;     // from audio_feature_extraction.json
    int has_audio_fe;
    g4_text_config text;
    g4_vision_config vision; // valid when comp[G4_COMP_VISION].model
    g4_audio_config audio;   // valid when comp[G4_COMP_AUDIO].model
} g4_package;

// Opens dir, parses every component and config, derives and cross-checks the model configs.
int g4_package_open(const char *dir, g4_package **out);
void g4_package_close(g4_package *p);

// The component if the package has it, else NULL.
const g4_component *g4_package_component(const g4_package *p, g4_component_id id);

// Finds weight `name` (written without the component prefix, e.g.
// "model.layers.3.self_attn.q_proj.weight_t"): first "<prefix><name>", then "<name>", then
// through the graph node that consumes it (the exporter stores identical initializers once, so
// a layer's node may read another layer's copy). NULL when absent.
const g4_tensor *g4_component_find(const g4_component *c, const char *name);

// Like g4_component_find, but requires the tensor with this dtype and shape (ndim dims). The
// error names the component file, the tensor and expected vs actual.
int g4_component_get(const g4_component *c, const char *name, int dtype, int ndim,
                     const int64_t *dims, const g4_tensor **out);
#define G4_DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define G4_NDIMS(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
// g4_get(c, "name", G4_DT_FLOAT16, &t, 1536, 2048)
#define g4_get(c, name, dtype, out, ...)                                                           \
    g4_component_get((c), (name), (dtype), G4_NDIMS(__VA_ARGS__), G4_DIMS(__VA_ARGS__), (out))

#endif
