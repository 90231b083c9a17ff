// g4cu_dev_inspect_json.c: `g4cu inspect --json` (the keys: api/g4cu_dev_inspect.h).
#include "api/g4cu_dev_inspect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const g4_tensor *g4_inspect_find(const g4_package *p, const char *name,
                                 const g4_component **where) {
    for (int i = 0; i < G4_COMP_COUNT; i++) {
        const g4_component *c = g4_package_component(p, (g4_component_id)i);
        if (!c) continue;
        const g4_tensor *t = g4_onnx_tensor(c->model, name);
        if (!t) t = g4_component_find(c, name);
        if (t) {
            *where = c;
            return t;
        }
    }
    return NULL;
}

void g4_inspect_tensor_stats(const g4_tensor *t, g4_inspect_stats *st) {
    double mn = INFINITY, mx = -INFINITY, sum = 0, asum = 0;
    *st = (g4_inspect_stats){0};
    for (uint64_t i = 0; i < t->numel; i++) {
        double v = g4_tensor_get(t, i);
        if (isnan(v)) {
            st->nan++;
            continue;
        }
        if (isinf(v)) {
            st->inf++;
            continue;
        }
        st->finite++;
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        sum += v;
        asum += fabs(v);
    }
    if (st->finite) {
        st->min = mn, st->max = mx;
        st->mean = sum / (double)st->finite, st->abs_mean = asum / (double)st->finite;
    }
}

static cJSON *shape_of(const int64_t *dims, int ndim, const char *const *params) {
    cJSON *a = cJSON_CreateArray();
    for (int d = 0; d < ndim; d++)
        cJSON_AddItemToArray(a, params && params[d] ? cJSON_CreateString(params[d])
                                                    : cJSON_CreateNumber((double)dims[d]));
    return a;
}

static void add_location(cJSON *o, const g4_tensor *t) {
    cJSON_AddNumberToObject(o, "nbytes", (double)t->nbytes);
    cJSON_AddBoolToObject(o, "external", t->external);
    if (t->external) {
        cJSON_AddStringToObject(o, "location", t->location);
        cJSON_AddNumberToObject(o, "offset", (double)t->offset);
    }
}

static cJSON *component_json(const g4_component *c, int tables) {
    const g4_onnx_model *m = c->model;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "onnx", c->onnx_path);
    cJSON_AddStringToObject(o, "producer", m->producer);
    cJSON_AddNumberToObject(o, "ir_version", (double)m->ir_version);
    cJSON_AddNumberToObject(o, "nodes", m->n_nodes);
    int n_init = 0, n_ext = 0, n_const = 0;
    uint64_t inline_bytes = 0;
    cJSON *dtypes = cJSON_CreateObject(), *tensors = tables ? cJSON_CreateArray() : NULL;
    for (int i = 0; i < m->n_tensors; i++) {
        const g4_tensor *t = &m->tensors[i];
        if (t->kind == G4_TENSOR_CONSTANT) {
            n_const++;
            continue;
        }
        n_init++;
        if (t->external)
            n_ext++;
        else
            inline_bytes += t->nbytes;
        const char *dn = g4_dtype_name(t->dtype);
        cJSON *d = cJSON_GetObjectItemCaseSensitive(dtypes, dn);
        if (!d) {
            d = cJSON_AddObjectToObject(dtypes, dn);
            cJSON_AddNumberToObject(d, "count", 0);
            cJSON_AddNumberToObject(d, "bytes", 0);
        }
        cJSON *cnt = cJSON_GetObjectItemCaseSensitive(d, "count");
        cJSON *by = cJSON_GetObjectItemCaseSensitive(d, "bytes");
        cJSON_SetNumberValue(cnt, cnt->valuedouble + 1);
        cJSON_SetNumberValue(by, by->valuedouble + (double)t->nbytes);
        if (tensors) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", t->name);
            cJSON_AddStringToObject(e, "dtype", dn);
            cJSON_AddItemToObject(e, "shape", shape_of(t->dims, t->ndim, NULL));
            add_location(e, t);
            cJSON_AddItemToArray(tensors, e);
        }
    }
    cJSON_AddNumberToObject(o, "initializers", n_init);
    cJSON_AddNumberToObject(o, "external_initializers", n_ext);
    cJSON_AddNumberToObject(o, "constants", n_const);
    cJSON_AddNumberToObject(o, "external_bytes", (double)m->external_bytes);
    cJSON_AddNumberToObject(o, "inline_bytes", (double)inline_bytes);
    cJSON_AddItemToObject(o, "dtypes", dtypes);
    cJSON *in = cJSON_AddArrayToObject(o, "inputs");
    for (int i = 0; i < m->n_inputs; i++) {
        const g4_value_info *v = &m->inputs[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", v->name);
        cJSON_AddStringToObject(e, "dtype", g4_dtype_name(v->elem_type));
        cJSON_AddItemToObject(e, "shape", shape_of(v->dims, v->ndim, v->dim_params));
        cJSON_AddItemToArray(in, e);
    }
    cJSON *out = cJSON_AddArrayToObject(o, "outputs");
    for (int i = 0; i < m->n_outputs; i++)
        cJSON_AddItemToArray(out, cJSON_CreateString(m->outputs[i].name));
    if (tensors) cJSON_AddItemToObject(o, "tensors", tensors);
    return o;
}

static cJSON *ints(const int *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static cJSON *text_json(const g4_text_config *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "hidden", c->hidden);
    cJSON_AddNumberToObject(o, "layers", c->n_layers);
    cJSON_AddNumberToObject(o, "heads", c->n_heads);
    cJSON_AddNumberToObject(o, "kv_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(o, "vocab", c->vocab);
    cJSON_AddNumberToObject(o, "ple_dim", c->ple_dim);
    cJSON_AddNumberToObject(o, "ple_table_rows", c->vocab_ple);
    cJSON_AddNumberToObject(o, "kv_layers", c->n_kv_layers);
    cJSON_AddNumberToObject(o, "kv_shared_layers", c->n_kv_shared);
    cJSON_AddNumberToObject(o, "context", c->context_length);
    cJSON_AddBoolToObject(o, "context_from_rope", c->context_from_rope);
    cJSON_AddStringToObject(o, "weights", c->weights_q4 ? "q4" : "f16");
    cJSON_AddNumberToObject(o, "rms_eps", c->rms_eps);
    cJSON_AddNumberToObject(o, "attention_scale", c->attn_scale);
    cJSON_AddNumberToObject(o, "final_softcap", c->final_softcap);
    cJSON_AddNumberToObject(o, "embed_scale", c->embed_scale);
    cJSON_AddNumberToObject(o, "ple_token_scale", c->ple_token_scale);
    cJSON_AddNumberToObject(o, "ple_projection_scale", c->ple_proj_scale);
    cJSON_AddNumberToObject(o, "ple_combine_scale", c->ple_combine_scale);
    cJSON_AddNumberToObject(o, "bos", c->bos_id);
    cJSON_AddNumberToObject(o, "pad", c->pad_id);
    cJSON_AddItemToObject(o, "eos", ints(c->eos_ids, c->n_eos));
    cJSON_AddNumberToObject(o, "image_token", c->image_token_id);
    cJSON_AddNumberToObject(o, "audio_token", c->audio_token_id);
    cJSON *rope = cJSON_AddArrayToObject(o, "rope");
    for (int r = 0; r < c->n_rope; r++) {
        const g4_rope_freqs *f = &c->rope[r];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "cos", f->cos_name);
        cJSON_AddNumberToObject(e, "head_dim", f->head_dim);
        cJSON_AddNumberToObject(e, "rotating_pairs", f->n_rotating);
        cJSON_AddNumberToObject(e, "pairs", f->n_freq);
        cJSON_AddNumberToObject(e, "theta", f->theta);
        cJSON_AddNumberToObject(e, "positions", f->max_positions);
        cJSON_AddItemToArray(rope, e);
    }
    cJSON *layers = cJSON_AddArrayToObject(o, "per_layer");
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *L = &c->layer[l];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "type", L->type == G4_ATTN_SLIDING ? "sliding" : "full");
        cJSON_AddNumberToObject(e, "head_dim", L->head_dim);
        cJSON_AddNumberToObject(e, "window", L->window);
        cJSON_AddNumberToObject(e, "ffn", L->ffn);
        cJSON_AddNumberToObject(e, "kv_slot", L->kv_slot);
        cJSON_AddNumberToObject(e, "kv_source", L->kv_source);
        cJSON_AddNumberToObject(e, "rope", L->rope);
        cJSON_AddItemToArray(layers, e);
    }
    return o;
}

static void media_json(cJSON *root, const g4_package *p) {
    if (p->has_image_proc) {
        cJSON *o = cJSON_AddObjectToObject(root, "image_processor");
        cJSON_AddNumberToObject(o, "patch_size", p->image_proc.patch_size);
        cJSON_AddNumberToObject(o, "max_soft_tokens", p->image_proc.max_soft_tokens);
        cJSON_AddNumberToObject(o, "pooling_kernel_size", p->image_proc.pooling_kernel_size);
    }
    if (g4_package_component(p, G4_COMP_VISION)) {
        const g4_vision_config *v = &p->vision;
        cJSON *o = cJSON_AddObjectToObject(root, "vision");
        cJSON_AddNumberToObject(o, "hidden", v->hidden);
        cJSON_AddNumberToObject(o, "layers", v->n_layers);
        cJSON_AddNumberToObject(o, "heads", v->n_heads);
        cJSON_AddNumberToObject(o, "head_dim", v->head_dim);
        cJSON_AddNumberToObject(o, "ffn", v->ffn);
        cJSON_AddNumberToObject(o, "patch_dim", v->patch_dim);
        cJSON_AddNumberToObject(o, "position_table", v->pos_size);
        cJSON_AddNumberToObject(o, "output", v->out_dim);
        cJSON_AddBoolToObject(o, "clipped_linears", v->clipped);
        cJSON_AddNumberToObject(o, "rms_eps", v->rms_eps);
    }
    if (p->has_audio_fe) {
        const g4_audio_fe_config *f = &p->audio_fe;
        cJSON *o = cJSON_AddObjectToObject(root, "audio_features");
        cJSON_AddNumberToObject(o, "mel", f->feature_size);
        cJSON_AddNumberToObject(o, "sampling_rate", f->sampling_rate);
        cJSON_AddNumberToObject(o, "frame_ms", f->frame_length_ms);
        cJSON_AddNumberToObject(o, "hop_ms", f->hop_length_ms);
        cJSON_AddNumberToObject(o, "min_hz", f->min_frequency);
        cJSON_AddNumberToObject(o, "max_hz", f->max_frequency);
        cJSON_AddNumberToObject(o, "mel_floor", f->mel_floor);
    }
    if (g4_package_component(p, G4_COMP_AUDIO)) {
        const g4_audio_config *a = &p->audio;
        cJSON *o = cJSON_AddObjectToObject(root, "audio");
        cJSON_AddNumberToObject(o, "mel", a->n_mel);
        cJSON_AddNumberToObject(o, "conv0_channels", a->conv0_ch);
        cJSON_AddNumberToObject(o, "conv1_channels", a->conv1_ch);
        cJSON_AddNumberToObject(o, "hidden", a->hidden);
        cJSON_AddNumberToObject(o, "layers", a->n_layers);
        cJSON_AddNumberToObject(o, "heads", a->n_heads);
        cJSON_AddNumberToObject(o, "head_dim", a->head_dim);
        cJSON_AddNumberToObject(o, "ffn", a->ffn);
        cJSON_AddNumberToObject(o, "conv_kernel", a->conv_kernel);
        cJSON_AddNumberToObject(o, "rel_positions", a->n_rel_pos);
        cJSON_AddNumberToObject(o, "out_hidden", a->out_hidden);
        cJSON_AddNumberToObject(o, "output", a->out_dim);
        cJSON_AddNumberToObject(o, "rms_eps", a->rms_eps);
    }
}

static cJSON *tensor_json(const g4_tensor *t, const g4_component *where) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", t->name);
    cJSON_AddStringToObject(o, "component", where->name);
    cJSON_AddStringToObject(o, "dtype", g4_dtype_name(t->dtype));
    cJSON_AddItemToObject(o, "shape", shape_of(t->dims, t->ndim, NULL));
    cJSON_AddNumberToObject(o, "numel", (double)t->numel);
    add_location(o, t);
    const int packed = t->dtype == G4_DT_UINT4 || t->dtype == G4_DT_INT4;
    cJSON_AddBoolToObject(o, "packed_4bit", packed);
    if (!packed) {
        g4_inspect_stats st;
        g4_inspect_tensor_stats(t, &st);
        cJSON *s = cJSON_AddObjectToObject(o, "stats");
        cJSON_AddNumberToObject(s, "finite", (double)st.finite);
        cJSON_AddNumberToObject(s, "nan", (double)st.nan);
        cJSON_AddNumberToObject(s, "inf", (double)st.inf);
        if (st.finite) {
            cJSON_AddNumberToObject(s, "min", st.min);
            cJSON_AddNumberToObject(s, "max", st.max);
            cJSON_AddNumberToObject(s, "mean", st.mean);
            cJSON_AddNumberToObject(s, "abs_mean", st.abs_mean);
        }
    }
    return o;
}

static void print_json(FILE *f, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    G4_ASSERT(s);
    fprintf(f, "%s\n", s);
    free(s);
    cJSON_Delete(o);
}

int g4_inspect_json(FILE *f, const g4_package *p, const char *tensor, int tables, cJSON *issues) {
    if (tensor) {
        const g4_component *where = NULL;
        const g4_tensor *t = g4_inspect_find(p, tensor, &where);
        if (!t)
            return g4_fail(G4_EUSER, "%s: no tensor named '%s' in any component", p->dir, tensor);
        print_json(f, tensor_json(t, where));
        return G4_OK;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "package", p->dir);
    cJSON_AddStringToObject(root, "model_type", p->genai.model_type);
    cJSON *comps = cJSON_AddObjectToObject(root, "components");
    for (int i = 0; i < G4_COMP_COUNT; i++) {
        const g4_component *c = g4_package_component(p, (g4_component_id)i);
        cJSON_AddItemToObject(comps, p->comp[i].name,
                              c ? component_json(c, tables) : cJSON_CreateNull());
    }
    cJSON_AddItemToObject(root, "text", text_json(&p->text));
    media_json(root, p);
    const int n_issues = cJSON_GetArraySize(issues);
    cJSON_AddItemReferenceToObject(root, "issues", issues);
    cJSON_AddBoolToObject(root, "consistent", n_issues == 0);
    print_json(f, root);
    return G4_OK;
}
