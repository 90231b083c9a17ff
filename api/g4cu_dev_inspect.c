// g4cu_dev_inspect.c: `g4cu inspect` (include/g4cu_dev.h g4cu_dev_inspect). Opening the package
// already validates every tensor and cross-checks the configs, so a successful inspect is also
// the check; it also reads every weight for NaN/Inf (which the engine refuses as it binds them),
// and lists what it finds, and problems that do not stop opening (overlapping data), at the end.
// The JSON form is api/g4cu_dev_inspect_json.c (the keys are listed in api/g4cu_dev_inspect.h).
#include <g4cu_dev.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/api_internal.h"
#include "api/g4cu_dev_inspect.h"
#include "loader/package.h"

static void print_bytes(FILE *f, uint64_t b) {
    if (b >= (1ull << 30))
        fprintf(f, "%.2f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20))
        fprintf(f, "%.2f MiB", (double)b / (1ull << 20));
    else if (b >= 1024)
        fprintf(f, "%.1f KiB", (double)b / 1024);
    else
        fprintf(f, "%llu B", (unsigned long long)b);
}

typedef struct {
    uint64_t lo, hi;
    const char *name;
} range;

static int range_cmp(const void *a, const void *b) {
    const range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

// Overlapping external ranges and the unused bytes of each data file: not errors the loader
// stops on, but signs of a corrupt or hand-edited package.
// An inconsistency: printed, or (json != NULL) added to that array.
static void issue(FILE *f, cJSON *json, const char *fmt, ...) G4_PRINTF(3, 4);
static void issue(FILE *f, cJSON *json, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (json)
        cJSON_AddItemToArray(json, cJSON_CreateString(buf));
    else
        fprintf(f, "  inconsistency: %s\n", buf);
}

static int report_layout(FILE *f, const g4_component *c, cJSON *json) {
    const g4_onnx_model *m = c->model;
    range *r = g4_calloc((size_t)m->n_tensors, sizeof *r);
    int n = 0, issues = 0;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].external && m->tensors[i].nbytes)
            r[n++] = (range){m->tensors[i].offset, m->tensors[i].offset + m->tensors[i].nbytes,
                             m->tensors[i].name};
    qsort(r, (size_t)n, sizeof *r, range_cmp);
    for (int i = 1; i < n; i++)
        if (r[i].lo < r[i - 1].hi) {
            issue(f, json, "%s: tensors '%s' and '%s' overlap in the data file", c->onnx_path,
                  r[i - 1].name, r[i].name);
            issues++;
        }
    free(r);
    return issues;
}

// NaN or Inf in a weight or table (what the engine refuses to bind; see
// g4_tensor_check_finite). Infinite scalars are graph constants, not weights (ClippableLinear
// bounds of +-inf, fill values), and stay allowed; a NaN is wrong anywhere.
static int report_nonfinite(FILE *f, const g4_component *c, cJSON *json) {
    const g4_onnx_model *m = c->model;
    int issues = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const g4_tensor *t = &m->tensors[i];
        if (t->numel <= 1 && !(g4_tensor_nonfinite(t, NULL) && isnan(g4_tensor_get(t, 0))))
            continue;
        if (g4_tensor_check_finite(t, c->onnx_path)) {
            issue(f, json, "%s", g4_error());
            issues++;
        }
    }
    return issues;
}

static void print_tensor_table(FILE *f, const g4_component *c) {
    const g4_onnx_model *m = c->model;
    fprintf(f, "  %-72s %-8s %-22s %s\n", "tensor", "dtype", "shape", "where");
    for (int i = 0; i < m->n_tensors; i++) {
        const g4_tensor *t = &m->tensors[i];
        if (t->kind != G4_TENSOR_INITIALIZER) continue;
        char shp[128];
        g4_tensor_shape_str(t, shp, sizeof shp);
        if (t->external)
            fprintf(f, "  %-72s %-8s %-22s %s @%llu +%llu\n", t->name, g4_dtype_name(t->dtype), shp,
                    t->location, (unsigned long long)t->offset, (unsigned long long)t->nbytes);
        else
            fprintf(f, "  %-72s %-8s %-22s inline %llu B\n", t->name, g4_dtype_name(t->dtype), shp,
                    (unsigned long long)t->nbytes);
    }
}

static void print_component(FILE *f, const g4_component *c, int table) {
    const g4_onnx_model *m = c->model;
    int n_init = 0, n_ext = 0, n_const = 0;
    uint64_t inline_bytes = 0;
    int dt_count[32] = {0};
    uint64_t dt_bytes[32] = {0};
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
        if (t->dtype >= 0 && t->dtype < 32) {
            dt_count[t->dtype]++;
            dt_bytes[t->dtype] += t->nbytes;
        }
    }
    fprintf(f, "\n%s: %s (producer '%s', ir %lld, %d nodes)\n", c->name, c->onnx_path, m->producer,
            (long long)m->ir_version, m->n_nodes);
    fprintf(f, "  initializers %d (%d external, %d inline), constants %d; external ", n_init, n_ext,
            n_init - n_ext, n_const);
    print_bytes(f, m->external_bytes);
    fprintf(f, " (%llu bytes), inline %llu bytes\n", (unsigned long long)m->external_bytes,
            (unsigned long long)inline_bytes);
    fprintf(f, "  dtypes:");
    for (int d = 0; d < 32; d++)
        if (dt_count[d]) {
            fprintf(f, " %s x%d (", g4_dtype_name(d), dt_count[d]);
            print_bytes(f, dt_bytes[d]);
            fprintf(f, ")");
        }
    fprintf(f, "\n  inputs:");
    for (int i = 0; i < m->n_inputs; i++) {
        const g4_value_info *v = &m->inputs[i];
        fprintf(f, "%s %s:%s[", i ? "," : "", v->name, g4_dtype_name(v->elem_type));
        for (int d = 0; d < v->ndim; d++) {
            if (v->dim_params[d])
                fprintf(f, "%s%s", d ? "," : "", v->dim_params[d]);
            else
                fprintf(f, "%s%lld", d ? "," : "", (long long)v->dims[d]);
        }
        fprintf(f, "]");
    }
    fprintf(f, "\n  outputs:");
    for (int i = 0; i < m->n_outputs; i++) fprintf(f, "%s %s", i ? "," : "", m->outputs[i].name);
    fprintf(f, "\n");
    if (table) print_tensor_table(f, c);
}

static void print_text_config(FILE *f, const g4_package *p) {
    const g4_text_config *c = &p->text;
    fprintf(f, "\ntext decoder (derived):\n");
    fprintf(f,
            "  hidden %d, layers %d, heads %d, kv heads %d, vocab %d, ple dim %d (table rows %d)\n",
            c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab, c->ple_dim, c->vocab_ple);
    fprintf(f, "  kv layers %d, kv-shared layers %d, context %d%s, weights %s\n", c->n_kv_layers,
            c->n_kv_shared, c->context_length,
            c->context_from_rope ? " (limited by the RoPE tables)" : "",
            c->weights_q4 ? "Q4 (MatMulNBits)" : "fp16");
    fprintf(f, "  rms eps %g, attention scale %g, final soft-cap %g\n", c->rms_eps, c->attn_scale,
            c->final_softcap);
    fprintf(f,
            "  embed scale %.9g, ple token scale %.9g, ple projection scale %.9g, ple combine "
            "scale %.9g\n",
            c->embed_scale, c->ple_token_scale, c->ple_proj_scale, c->ple_combine_scale);
    fprintf(f, "  bos %d, pad %d, eos", c->bos_id, c->pad_id);
    for (int i = 0; i < c->n_eos; i++) fprintf(f, " %d", c->eos_ids[i]);
    fprintf(f, ", image token %d, audio token %d\n", c->image_token_id, c->audio_token_id);
    for (int r = 0; r < c->n_rope; r++) {
        const g4_rope_freqs *rf = &c->rope[r];
        fprintf(
            f, "  rope %d: %s, head_dim %d, rotating pairs %d of %d, theta %.6g, positions %d\n", r,
            rf->cos_name, rf->head_dim, rf->n_rotating, rf->n_freq, rf->theta, rf->max_positions);
    }
    fprintf(f, "  layer  type     head_dim  window  ffn     kv (slot <- layer)  rope\n");
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *L = &c->layer[l];
        fprintf(f, "  %-5d  %-7s  %-8d  %-6d  %-6d  %s %d <- %-8d  %d\n", l,
                L->type == G4_ATTN_SLIDING ? "sliding" : "full", L->head_dim, L->window, L->ffn,
                L->kv_source == l ? "own" : "shared", L->kv_slot, L->kv_source, L->rope);
    }
}

static void print_media_configs(FILE *f, const g4_package *p) {
    if (p->has_image_proc)
        fprintf(f, "\nimage processor: patch %d, max soft tokens %d, pooling %d\n",
                p->image_proc.patch_size, p->image_proc.max_soft_tokens,
                p->image_proc.pooling_kernel_size);
    if (g4_package_component(p, G4_COMP_VISION)) {
        const g4_vision_config *v = &p->vision;
        fprintf(f,
                "vision tower: hidden %d, layers %d, heads %d x %d, ffn %d, patch dim %d, position "
                "table %d, output %d, clipped linears %s, rms eps %g\n",
                v->hidden, v->n_layers, v->n_heads, v->head_dim, v->ffn, v->patch_dim, v->pos_size,
                v->out_dim, v->clipped ? "yes" : "no", v->rms_eps);
    }
    if (p->has_audio_fe)
        fprintf(f,
                "\naudio features: %d mel, %d Hz, frame %g ms, hop %g ms, %g-%g Hz, mel floor %g\n",
                p->audio_fe.feature_size, p->audio_fe.sampling_rate, p->audio_fe.frame_length_ms,
                p->audio_fe.hop_length_ms, p->audio_fe.min_frequency, p->audio_fe.max_frequency,
                p->audio_fe.mel_floor);
    if (g4_package_component(p, G4_COMP_AUDIO)) {
        const g4_audio_config *a = &p->audio;
        fprintf(
            f,
            "audio tower: mel %d, conv channels %d/%d, hidden %d, layers %d, heads %d x %d, ffn "
            "%d, conv kernel %d, rel positions %d, output %d -> %d, rms eps %g\n",
            a->n_mel, a->conv0_ch, a->conv1_ch, a->hidden, a->n_layers, a->n_heads, a->head_dim,
            a->ffn, a->conv_kernel, a->n_rel_pos, a->out_hidden, a->out_dim, a->rms_eps);
    }
}

static int print_tensor_stats(FILE *f, const g4_package *p, const char *name) {
    const g4_component *where = NULL;
    const g4_tensor *t = g4_inspect_find(p, name, &where);
    if (!t) return g4_fail(G4_EUSER, "%s: no tensor named '%s' in any component", p->dir, name);
    char shp[128];
    fprintf(f, "%s (%s): %s %s, %llu elements, %llu bytes, %s", t->name, where->name,
            g4_dtype_name(t->dtype), g4_tensor_shape_str(t, shp, sizeof shp),
            (unsigned long long)t->numel, (unsigned long long)t->nbytes,
            t->external ? "external" : "inline");
    if (t->external) fprintf(f, " at %s offset %llu", t->location, (unsigned long long)t->offset);
    fprintf(f, "\n");
    if (t->dtype == G4_DT_UINT4 || t->dtype == G4_DT_INT4) {
        fprintf(f, "  (packed 4-bit: no statistics)\n");
        return G4_OK;
    }
    g4_inspect_stats st;
    g4_inspect_tensor_stats(t, &st);
    if (st.finite)
        fprintf(f, "  min %.6g  max %.6g  mean %.6g  abs-mean %.6g  NaN %llu  Inf %llu\n", st.min,
                st.max, st.mean, st.abs_mean, (unsigned long long)st.nan,
                (unsigned long long)st.inf);
    else
        fprintf(f, "  no finite values  NaN %llu  Inf %llu\n", (unsigned long long)st.nan,
                (unsigned long long)st.inf);
    return G4_OK;
}

void g4cu_dev_inspect_params_default(g4cu_dev_inspect_params *p) {
    *p = (g4cu_dev_inspect_params){0};
}

static int inspect(const char *dir, const g4cu_dev_inspect_params *o, FILE *f, int *n_issues) {
    g4_package *p;
    int rc = g4_package_open(dir, &p);
    if (rc) return rc;
    if (o->json) {
        cJSON *issues = cJSON_CreateArray();
        for (int i = 0; i < G4_COMP_COUNT; i++) {
            const g4_component *c = g4_package_component(p, (g4_component_id)i);
            if (c && !o->tensor) report_layout(f, c, issues), report_nonfinite(f, c, issues);
        }
        rc = g4_inspect_json(f, p, o->tensor, !o->summary, issues);
        *n_issues = cJSON_GetArraySize(issues);
        cJSON_Delete(issues);
        g4_package_close(p);
        return rc;
    }
    if (o->tensor) {
        rc = print_tensor_stats(f, p, o->tensor);
        g4_package_close(p);
        return rc;
    }
    fprintf(f, "package %s: model type '%s'\n", p->dir, p->genai.model_type);
    int issues = 0;
    for (int i = 0; i < G4_COMP_COUNT; i++) {
        const g4_component *c = g4_package_component(p, (g4_component_id)i);
        if (!c) {
            fprintf(f, "\n%s: absent\n", p->comp[i].name);
            continue;
        }
        print_component(f, c, !o->summary);
        issues += report_layout(f, c, NULL) + report_nonfinite(f, c, NULL);
    }
    print_text_config(f, p);
    print_media_configs(f, p);
    fprintf(f, "\n%s\n",
            issues ? "inconsistencies found (see above)" : "consistent: all checks passed");
    g4_package_close(p);
    *n_issues = issues;
    return G4_OK;
}

int g4cu_dev_inspect(const char *dir, const g4cu_dev_inspect_params *p, FILE *out, int *n_issues) {
    g4cu_dev_inspect_params d;
    if (!p) g4cu_dev_inspect_params_default(&d), p = &d;
    int unused;
    if (!n_issues) n_issues = &unused;
    *n_issues = 0;
    if (!dir || !out) return g4_api_code(g4_fail(G4_EUSER, "g4cu_dev_inspect: dir or out is NULL"));
    return g4_api_code(inspect(dir, p, out, n_issues));
}
