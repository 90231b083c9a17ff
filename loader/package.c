// package.c: open a package directory: JSON configs (cJSON), the four components, weight lookup.
#include "loader/package.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "loader/json.h"

int g4_derive_text_config(g4_package *p);
int g4_derive_vision_config(g4_package *p);
int g4_derive_audio_config(g4_package *p);

static const char *const comp_names[G4_COMP_COUNT] = {"decoder", "embedding", "vision_encoder",
                                                      "audio_encoder"};
static const char *const comp_prefixes[G4_COMP_COUNT] = {"decoder.", "embedding.",
                                                         "vision_encoder.", "audio_encoder."};

static int read_genai(g4_package *p) {
    char *path = g4_path_join(p->dir, "genai_config.json");
    g4_json j;
    int rc = g4_json_open(path, &j);
    free(path);
    if (rc) return rc;
    g4_genai_config *g = &p->genai;
    const cJSON *r = j.root;
    // Required: what the text model cannot run without.
    if ((rc = g4_json_str(&j, r, "model.type", 1, &g->model_type)) ||
        (rc = g4_json_int(&j, r, "model.vocab_size", 1, -1, &g->vocab_size)) ||
        (rc = g4_json_int(&j, r, "model.context_length", 1, -1, &g->context_length)) ||
        (rc = g4_json_int(&j, r, "model.bos_token_id", 1, -1, &g->bos_token_id)) ||
        (rc = g4_json_int(&j, r, "model.pad_token_id", 0, 0, &g->pad_token_id)) ||
        (rc = g4_json_int_list(&j, r, "model.eos_token_id", 1, g->eos_token_ids, 16, &g->n_eos)) ||
        (rc = g4_json_int(&j, r, "model.image_token_id", 0, -1, &g->image_token_id)) ||
        (rc = g4_json_int(&j, r, "model.audio_token_id", 0, -1, &g->audio_token_id)) ||
        (rc = g4_json_int(&j, r, "model.boa_token_id", 0, -1, &g->boa_token_id)) ||
        (rc = g4_json_str(&j, r, "model.decoder.filename", 1, &g->decoder_file)) ||
        (rc = g4_json_int(&j, r, "model.decoder.head_size", 1, -1, &g->head_size)) ||
        (rc = g4_json_int(&j, r, "model.decoder.hidden_size", 1, -1, &g->hidden_size)) ||
        (rc = g4_json_int(&j, r, "model.decoder.num_attention_heads", 1, -1,
                          &g->num_attention_heads)) ||
        (rc = g4_json_int(&j, r, "model.decoder.num_key_value_heads", 1, -1,
                          &g->num_key_value_heads)) ||
        (rc = g4_json_int(&j, r, "model.decoder.num_hidden_layers", 1, -1,
                          &g->num_hidden_layers)) ||
        (rc = g4_json_str(&j, r, "model.decoder.inputs.past_key_names", 0, &g->past_key_fmt)) ||
        (rc = g4_json_str(&j, r, "model.decoder.inputs.past_value_names", 0,
                          &g->past_value_fmt)) ||
        (rc = g4_json_str(&j, r, "model.embedding.filename", 1, &g->embedding_file)) ||
        (rc = g4_json_str(&j, r, "model.vision.filename", 0, &g->vision_file)) ||
        (rc = g4_json_str(&j, r, "model.vision.config_filename", 0, &g->vision_config_file)) ||
        (rc = g4_json_str(&j, r, "model.speech.filename", 0, &g->speech_file)) ||
        (rc = g4_json_str(&j, r, "model.speech.config_filename", 0, &g->speech_config_file)) ||
        (rc = g4_json_int(&j, r, "search.max_length", 0, -1, &g->search_max_length)) ||
        (rc = g4_json_int(&j, r, "search.top_k", 0, -1, &g->search_top_k)) ||
        (rc = g4_json_num(&j, r, "search.top_p", 0, 1.0, &g->search_top_p)) ||
        (rc = g4_json_num(&j, r, "search.temperature", 0, 1.0, &g->search_temperature)) ||
        (rc = g4_json_bool(&j, r, "search.do_sample", 0, 0, &g->search_do_sample))) {
        g4_json_close(&j);
        return rc;
    }
    // model.type: the mobius exporter writes "gemma4_text"; onnxruntime-genai 0.18 runs a
    // package with an embedding component only as "gemma4" (the multimodal type), so packages
    // made for it say that. Both name these same files; anything else is another model.
    if (!rc && strcmp(g->model_type, "gemma4") && strcmp(g->model_type, "gemma4_text"))
        rc = g4_fail(G4_EUSER, "%s: model.type is '%s'; expected 'gemma4' or 'gemma4_text'",
                     j.path, g->model_type);
    if (!g->past_key_fmt) g->past_key_fmt = g4_strdup("past_key_values.%d.key");
    if (!g->past_value_fmt) g->past_value_fmt = g4_strdup("past_key_values.%d.value");
    // The formats are used with one int: insist on exactly one %d and nothing else.
    const char *fmts[2] = {g->past_key_fmt, g->past_value_fmt};
    for (int i = 0; i < 2; i++) {
        const char *f = fmts[i], *pct = strchr(f, '%');
        if (!pct || pct[1] != 'd' || strchr(pct + 2, '%'))
            rc = g4_fail(G4_EUSER,
                         "%s: model.decoder.inputs.past_*_names: '%s' must contain exactly one %%d",
                         j.path, f);
    }
    const struct {
        const char *name;
        int v;
    } positive[] = {{"model.vocab_size", g->vocab_size},
                    {"model.context_length", g->context_length},
                    {"model.decoder.head_size", g->head_size},
                    {"model.decoder.hidden_size", g->hidden_size},
                    {"model.decoder.num_attention_heads", g->num_attention_heads},
                    {"model.decoder.num_key_value_heads", g->num_key_value_heads},
                    {"model.decoder.num_hidden_layers", g->num_hidden_layers}};
    for (size_t i = 0; !rc && i < sizeof positive / sizeof positive[0]; i++)
        if (positive[i].v <= 0)
            rc = g4_fail(G4_EUSER, "%s: %s must be a positive integer, got %d", j.path,
                         positive[i].name, positive[i].v);
    g4_json_close(&j);
    return rc;
}

// Finds the transform/operation `type` inside an onnxruntime-extensions processor JSON.
static const cJSON *find_operation(const cJSON *node, const char *type) {
    if (!node) return NULL;
    if (cJSON_IsObject(node)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(node, "type");
        if (cJSON_IsString(t) && strcmp(t->valuestring, type) == 0) return node;
    }
    for (const cJSON *c = node->child; c; c = c->next) {
        const cJSON *f = find_operation(c, type);
        if (f) return f;
    }
    return NULL;
}

static int read_image_proc(g4_package *p) {
    const char *name = p->genai.vision_config_file ? p->genai.vision_config_file
                                                   : "image_processor.json";
    char *path = g4_path_join(p->dir, name);
    if (!g4_is_file(path)) {
        int rc = G4_OK;
        if (p->comp[G4_COMP_VISION].model)
            rc = g4_fail(G4_EUSER, "%s: missing (the package has a vision encoder)", path);
        free(path);
        return rc;
    }
    g4_json j;
    int rc = g4_json_open(path, &j);
    free(path);
    if (rc) return rc;
    const cJSON *op = find_operation(j.root, "Gemma4ImageTransform");
    g4_image_proc_config *c = &p->image_proc;
    if (!op) {
        rc = g4_fail(G4_EUSER, "%s: no Gemma4ImageTransform operation", j.path);
    } else if (!(rc = g4_json_int(&j, op, "attrs.patch_size", 1, -1, &c->patch_size)) &&
               !(rc = g4_json_int(&j, op, "attrs.max_soft_tokens", 1, -1, &c->max_soft_tokens)) &&
               !(rc = g4_json_int(&j, op, "attrs.pooling_kernel_size", 1, -1,
                                  &c->pooling_kernel_size))) {
        if (c->patch_size <= 0 || c->max_soft_tokens <= 0 || c->pooling_kernel_size <= 0)
            rc = g4_fail(G4_EUSER, "%s: Gemma4ImageTransform attrs must be positive", j.path);
        else
            p->has_image_proc = 1;
    }
    g4_json_close(&j);
    return rc;
}

static int read_audio_fe(g4_package *p) {
    const char *name = p->genai.speech_config_file ? p->genai.speech_config_file
                                                   : "audio_feature_extraction.json";
    char *path = g4_path_join(p->dir, name);
    if (!g4_is_file(path)) {
        int rc = G4_OK;
        if (p->comp[G4_COMP_AUDIO].model)
            rc = g4_fail(G4_EUSER, "%s: missing (the package has an audio encoder)", path);
        free(path);
        return rc;
    }
    g4_json j;
    int rc = g4_json_open(path, &j);
    free(path);
    if (rc) return rc;
    const cJSON *op = find_operation(j.root, "Gemma4LogMel");
    g4_audio_fe_config *c = &p->audio_fe;
    if (!op) {
        rc = g4_fail(G4_EUSER, "%s: no Gemma4LogMel operation", j.path);
    } else if (!(rc = g4_json_int(&j, op, "attrs.feature_size", 1, -1, &c->feature_size)) &&
               !(rc = g4_json_int(&j, op, "attrs.sampling_rate", 1, -1, &c->sampling_rate)) &&
               !(rc = g4_json_num(&j, op, "attrs.frame_length_ms", 1, 0, &c->frame_length_ms)) &&
               !(rc = g4_json_num(&j, op, "attrs.hop_length_ms", 1, 0, &c->hop_length_ms)) &&
               !(rc = g4_json_num(&j, op, "attrs.min_frequency", 0, 0, &c->min_frequency)) &&
               !(rc = g4_json_num(&j, op, "attrs.max_frequency", 1, 0, &c->max_frequency)) &&
               !(rc = g4_json_num(&j, op, "attrs.preemphasis", 0, 0, &c->preemphasis)) &&
               !(rc = g4_json_num(&j, op, "attrs.mel_floor", 1, 0, &c->mel_floor)) &&
               !(rc = g4_json_int(&j, op, "attrs.fft_overdrive", 0, 0, &c->fft_overdrive))) {
        if (c->feature_size <= 0 || c->sampling_rate <= 0 || c->frame_length_ms <= 0 ||
            c->hop_length_ms <= 0 || c->max_frequency <= c->min_frequency)
            rc = g4_fail(G4_EUSER,
                         "%s: Gemma4LogMel attrs out of range (feature_size, sampling_rate, "
                         "frame/hop length must be positive, max_frequency > min_frequency)",
                         j.path);
        else
            p->has_audio_fe = 1;
    }
    g4_json_close(&j);
    return rc;
}

static int open_component(g4_package *p, g4_component_id id, const char *file, int required) {
    g4_component *c = &p->comp[id];
    if (!file) {
        if (required)
            return g4_fail(G4_EUSER, "%s/genai_config.json: no filename for the %s component",
                           p->dir, comp_names[id]);
        return G4_OK;
    }
    c->onnx_path = g4_path_join(p->dir, file);
    const char *slash = strrchr(c->onnx_path, '/');
    char *cdir = g4_strndup(c->onnx_path, (size_t)(slash - c->onnx_path));
    int is_dir = g4_is_dir(cdir);
    free(cdir);
    // Missing when absent; anything that is there but not a regular file (a FIFO, a device)
    // is g4_onnx_open's to refuse, as every input is.
    if (!is_dir || access(c->onnx_path, F_OK) != 0)
        return g4_fail(G4_EUSER, "%s: missing %s component (genai_config.json names '%s')",
                       c->onnx_path, comp_names[id], file);
    return g4_onnx_open(c->onnx_path, &c->model);
}

int g4_package_open(const char *dir, g4_package **out) {
    *out = NULL;
    if (!g4_is_dir(dir)) return g4_fail(G4_EUSER, "%s: not a package directory", dir);
    g4_package *p = g4_calloc(1, sizeof *p);
    p->dir = g4_strdup(dir);
    for (int i = 0; i < G4_COMP_COUNT; i++) {
        p->comp[i].id = (g4_component_id)i;
        p->comp[i].name = comp_names[i];
        p->comp[i].prefix = comp_prefixes[i];
    }
    int rc = read_genai(p);
    if (!rc) rc = open_component(p, G4_COMP_DECODER, p->genai.decoder_file, 1);
    if (!rc) rc = open_component(p, G4_COMP_EMBEDDING, p->genai.embedding_file, 1);
    if (!rc) rc = open_component(p, G4_COMP_VISION, p->genai.vision_file, 0);
    if (!rc) rc = open_component(p, G4_COMP_AUDIO, p->genai.speech_file, 0);
    if (!rc) rc = read_image_proc(p);
    if (!rc) rc = read_audio_fe(p);
    if (!rc) rc = g4_derive_text_config(p);
    if (!rc && p->comp[G4_COMP_VISION].model) rc = g4_derive_vision_config(p);
    if (!rc && p->comp[G4_COMP_AUDIO].model) rc = g4_derive_audio_config(p);
    if (rc) {
        g4_package_close(p);
        return rc;
    }
    g4_note_input_dir(dir); // an output directory may not lie inside it (g4_check_output_dir)
    *out = p;
    return G4_OK;
}

void g4_package_close(g4_package *p) {
    if (!p) return;
    for (int i = 0; i < G4_COMP_COUNT; i++) {
        g4_onnx_close(p->comp[i].model);
        free(p->comp[i].onnx_path);
    }
    g4_genai_config *g = &p->genai;
    free(g->model_type);
    free(g->decoder_file);
    free(g->past_key_fmt);
    free(g->past_value_fmt);
    free(g->embedding_file);
    free(g->vision_file);
    free(g->vision_config_file);
    free(g->speech_file);
    free(g->speech_config_file);
    g4_text_config_free(&p->text);
    free(p->dir);
    free(p);
}

const g4_component *g4_package_component(const g4_package *p, g4_component_id id) {
    return p->comp[id].model ? &p->comp[id] : NULL;
}

// "model.layers.7.self_attn.q_proj" -> "model/layers.7/self_attn/q_proj": the exporter's node
// names join module scopes with '/', and a numeric part belongs to the list before it.
static char *scope_to_node_prefix(const char *comp, const char *scope) {
    size_t n = strlen(scope);
    char *s = g4_malloc(strlen(comp) + n + 3);
    size_t k = (size_t)sprintf(s, "%s/", comp);
    for (size_t i = 0; i < n; i++) {
        char ch = scope[i];
        if (ch == '.' && !(scope[i + 1] >= '0' && scope[i + 1] <= '9')) ch = '/';
        s[k++] = ch;
    }
    s[k++] = '/';
    s[k] = 0;
    return s;
}

const g4_tensor *g4_component_find(const g4_component *c, const char *name) {
    if (!c || !c->model) return NULL;
    char *full = g4_sprintf("%s%s", c->prefix, name);
    const g4_tensor *t = g4_onnx_tensor(c->model, full);
    free(full);
    if (t) return t;
    if ((t = g4_onnx_tensor(c->model, name))) return t;
    // Through the consuming node: a node in the weight's module scope that reads an
    // initializer with the same leaf name.
    const char *dot = strrchr(name, '.');
    if (!dot) return NULL;
    char *scope = g4_strndup(name, (size_t)(dot - name));
    char *prefix = scope_to_node_prefix(c->name, scope);
    const char *leaf = dot + 1;
    size_t plen = strlen(prefix), llen = strlen(leaf);
    const g4_tensor *found = NULL;
    int ambiguous = 0;
    for (int i = 0; i < c->model->n_nodes && !ambiguous; i++) {
        const g4_node *nd = &c->model->nodes[i];
        if (strncmp(nd->name, prefix, plen) != 0) continue;
        for (int k = 0; k < nd->n_inputs; k++) {
            const char *in = nd->inputs[k];
            size_t il = strlen(in);
            if (il <= llen || in[il - llen - 1] != '.' || strcmp(in + il - llen, leaf) != 0)
                continue;
            const g4_tensor *cand = g4_onnx_tensor(c->model, in);
            if (!cand || cand->kind != G4_TENSOR_INITIALIZER) continue;
            if (found && found != cand) ambiguous = 1;
            found = cand;
        }
    }
    free(scope);
    free(prefix);
    return ambiguous ? NULL : found;
}

int g4_component_get(const g4_component *c, const char *name, int dtype, int ndim,
                     const int64_t *dims, const g4_tensor **out) {
    *out = NULL;
    const g4_tensor *t = g4_component_find(c, name);
    g4_tensor want = {.ndim = ndim};
    for (int d = 0; d < ndim; d++) want.dims[d] = dims[d];
    char ws[160], hs[160];
    g4_tensor_shape_str(&want, ws, sizeof ws);
    if (!t)
        return g4_fail(G4_EUSER, "%s: tensor '%s%s' is missing (expected %s %s)",
                       c ? c->onnx_path : "(no component)", c ? c->prefix : "", name,
                       g4_dtype_name(dtype), ws);
    int same = t->dtype == dtype && t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->dims[d] == dims[d];
    if (!same)
        return g4_fail(G4_EUSER, "%s: tensor '%s': expected %s %s, found %s %s", c->onnx_path,
                       t->name, g4_dtype_name(dtype), ws, g4_dtype_name(t->dtype),
                       g4_tensor_shape_str(t, hs, sizeof hs));
    // A weight with NaN/Inf would poison every output (a corrupt download, a bad export): bound
    // weights are checked here, once, as they are bound (engine binders, towers, the quantizer).
    int rc = g4_tensor_check_finite(t, c->onnx_path);
    if (rc) return rc;
    *out = t;
    return G4_OK;
}
