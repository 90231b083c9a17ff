// g4cu inspect PKG [--tensor NAME] [--summary]: what the package holds and what it implies.
// Opening the package already validates every tensor and cross-checks the configs, so a
// successful inspect is also the check; it also reads every weight for NaN/Inf (which the
// engine refuses as it binds them), and lists what it finds, and problems that do not stop
// opening (overlapping data), at the end (exit 1 when there are any).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loader/package.h"
#include "tools/cli.h"

static void print_bytes(uint64_t b) {
    if (b >= (1ull << 30)) printf("%.2f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20)) printf("%.2f MiB", (double)b / (1ull << 20));
    else if (b >= 1024) printf("%.1f KiB", (double)b / 1024);
    else printf("%llu B", (unsigned long long)b);
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
static int report_layout(const g4_component *c) {
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
            printf("  inconsistency: %s: tensors '%s' and '%s' overlap in the data file\n",
                   c->onnx_path, r[i - 1].name, r[i].name);
            issues++;
        }
    free(r);
    return issues;
}

// NaN or Inf in a weight or table (what the engine refuses to bind; see
// g4_tensor_check_finite). Infinite scalars are graph constants, not weights (ClippableLinear
// bounds of +-inf, fill values), and stay allowed; a NaN is wrong anywhere.
static int report_nonfinite(const g4_component *c) {
    const g4_onnx_model *m = c->model;
    int issues = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const g4_tensor *t = &m->tensors[i];
        if (t->numel <= 1 && !(g4_tensor_nonfinite(t, NULL) && isnan(g4_tensor_get(t, 0))))
            continue;
        if (g4_tensor_check_finite(t, c->onnx_path)) {
            printf("  inconsistency: %s\n", g4_error());
            issues++;
        }
    }
    return issues;
}

static void print_tensor_table(const g4_component *c) {
    const g4_onnx_model *m = c->model;
    printf("  %-72s %-8s %-22s %s\n", "tensor", "dtype", "shape", "where");
    for (int i = 0; i < m->n_tensors; i++) {
        const g4_tensor *t = &m->tensors[i];
        if (t->kind != G4_TENSOR_INITIALIZER) continue;
        char shp[128];
        g4_tensor_shape_str(t, shp, sizeof shp);
        if (t->external)
            printf("  %-72s %-8s %-22s %s @%llu +%llu\n", t->name, g4_dtype_name(t->dtype), shp,
                   t->location, (unsigned long long)t->offset, (unsigned long long)t->nbytes);
        else
            printf("  %-72s %-8s %-22s inline %llu B\n", t->name, g4_dtype_name(t->dtype), shp,
                   (unsigned long long)t->nbytes);
    }
}

static void print_component(const g4_component *c, int table) {
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
        if (t->external) n_ext++;
        else inline_bytes += t->nbytes;
        if (t->dtype >= 0 && t->dtype < 32) {
            dt_count[t->dtype]++;
            dt_bytes[t->dtype] += t->nbytes;
        }
    }
    printf("\n%s: %s (producer '%s', ir %lld, %d nodes)\n", c->name, c->onnx_path, m->producer,
           (long long)m->ir_version, m->n_nodes);
    printf("  initializers %d (%d external, %d inline), constants %d; external ", n_init, n_ext,
           n_init - n_ext, n_const);
    print_bytes(m->external_bytes);
    printf(" (%llu bytes), inline %llu bytes\n", (unsigned long long)m->external_bytes,
           (unsigned long long)inline_bytes);
    printf("  dtypes:");
    for (int d = 0; d < 32; d++)
        if (dt_count[d]) {
            printf(" %s x%d (", g4_dtype_name(d), dt_count[d]);
            print_bytes(dt_bytes[d]);
            printf(")");
        }
    printf("\n  inputs:");
    for (int i = 0; i < m->n_inputs; i++) {
        const g4_value_info *v = &m->inputs[i];
        printf("%s %s:%s[", i ? "," : "", v->name, g4_dtype_name(v->elem_type));
        for (int d = 0; d < v->ndim; d++) {
            if (v->dim_params[d]) printf("%s%s", d ? "," : "", v->dim_params[d]);
            else printf("%s%lld", d ? "," : "", (long long)v->dims[d]);
        }
        printf("]");
    }
    printf("\n  outputs:");
    for (int i = 0; i < m->n_outputs; i++) printf("%s %s", i ? "," : "", m->outputs[i].name);
    printf("\n");
    if (table) print_tensor_table(c);
}

static void print_text_config(const g4_package *p) {
    const g4_text_config *c = &p->text;
    printf("\ntext decoder (derived):\n");
    printf("  hidden %d, layers %d, heads %d, kv heads %d, vocab %d, ple dim %d (table rows %d)\n",
           c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab, c->ple_dim, c->vocab_ple);
    printf("  kv layers %d, kv-shared layers %d, context %d%s, weights %s\n", c->n_kv_layers,
           c->n_kv_shared, c->context_length,
           c->context_from_rope ? " (limited by the RoPE tables)" : "",
           c->weights_q4 ? "Q4 (MatMulNBits)" : "fp16");
    printf("  rms eps %g, attention scale %g, final soft-cap %g\n", c->rms_eps, c->attn_scale,
           c->final_softcap);
    printf("  embed scale %.9g, ple token scale %.9g, ple projection scale %.9g, ple combine "
           "scale %.9g\n",
           c->embed_scale, c->ple_token_scale, c->ple_proj_scale, c->ple_combine_scale);
    printf("  bos %d, pad %d, eos", c->bos_id, c->pad_id);
    for (int i = 0; i < c->n_eos; i++) printf(" %d", c->eos_ids[i]);
    printf(", image token %d, audio token %d\n", c->image_token_id, c->audio_token_id);
    for (int r = 0; r < c->n_rope; r++) {
        const g4_rope_freqs *f = &c->rope[r];
        printf("  rope %d: %s, head_dim %d, rotating pairs %d of %d, theta %.6g, positions %d\n", r,
               f->cos_name, f->head_dim, f->n_rotating, f->n_freq, f->theta, f->max_positions);
    }
    printf("  layer  type     head_dim  window  ffn     kv (slot <- layer)  rope\n");
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *L = &c->layer[l];
        printf("  %-5d  %-7s  %-8d  %-6d  %-6d  %s %d <- %-8d  %d\n", l,
               L->type == G4_ATTN_SLIDING ? "sliding" : "full", L->head_dim, L->window, L->ffn,
               L->kv_source == l ? "own" : "shared", L->kv_slot, L->kv_source, L->rope);
    }
}

static void print_media_configs(const g4_package *p) {
    if (p->has_image_proc)
        printf("\nimage processor: patch %d, max soft tokens %d, pooling %d\n",
               p->image_proc.patch_size, p->image_proc.max_soft_tokens,
               p->image_proc.pooling_kernel_size);
    if (g4_package_component(p, G4_COMP_VISION)) {
        const g4_vision_config *v = &p->vision;
        printf("vision tower: hidden %d, layers %d, heads %d x %d, ffn %d, patch dim %d, position "
               "table %d, output %d, clipped linears %s, rms eps %g\n",
               v->hidden, v->n_layers, v->n_heads, v->head_dim, v->ffn, v->patch_dim, v->pos_size,
               v->out_dim, v->clipped ? "yes" : "no", v->rms_eps);
    }
    if (p->has_audio_fe)
        printf("\naudio features: %d mel, %d Hz, frame %g ms, hop %g ms, %g-%g Hz, mel floor %g\n",
               p->audio_fe.feature_size, p->audio_fe.sampling_rate, p->audio_fe.frame_length_ms,
               p->audio_fe.hop_length_ms, p->audio_fe.min_frequency, p->audio_fe.max_frequency,
               p->audio_fe.mel_floor);
    if (g4_package_component(p, G4_COMP_AUDIO)) {
        const g4_audio_config *a = &p->audio;
        printf("audio tower: mel %d, conv channels %d/%d, hidden %d, layers %d, heads %d x %d, ffn "
               "%d, conv kernel %d, rel positions %d, output %d -> %d, rms eps %g\n",
               a->n_mel, a->conv0_ch, a->conv1_ch, a->hidden, a->n_layers, a->n_heads,
               a->head_dim, a->ffn, a->conv_kernel, a->n_rel_pos, a->out_hidden, a->out_dim,
               a->rms_eps);
    }
}

static int print_tensor_stats(const g4_package *p, const char *name) {
    const g4_tensor *t = NULL;
    const g4_component *where = NULL;
    for (int i = 0; i < G4_COMP_COUNT && !t; i++) {
        const g4_component *c = g4_package_component(p, (g4_component_id)i);
        if (!c) continue;
        t = g4_onnx_tensor(c->model, name);
        if (!t) t = g4_component_find(c, name);
        if (t) where = c;
    }
    if (!t) return g4_fail(G4_EUSER, "%s: no tensor named '%s' in any component", p->dir, name);
    char shp[128];
    printf("%s (%s): %s %s, %llu elements, %llu bytes, %s", t->name, where->name,
           g4_dtype_name(t->dtype), g4_tensor_shape_str(t, shp, sizeof shp),
           (unsigned long long)t->numel, (unsigned long long)t->nbytes,
           t->external ? "external" : "inline");
    if (t->external) printf(" at %s offset %llu", t->location, (unsigned long long)t->offset);
    printf("\n");
    if (t->dtype == G4_DT_UINT4 || t->dtype == G4_DT_INT4) {
        printf("  (packed 4-bit: no statistics)\n");
        return G4_OK;
    }
    double mn = INFINITY, mx = -INFINITY, sum = 0, asum = 0;
    uint64_t nan = 0, inf = 0, finite = 0;
    for (uint64_t i = 0; i < t->numel; i++) {
        double v = g4_tensor_get(t, i);
        if (isnan(v)) {
            nan++;
            continue;
        }
        if (isinf(v)) {
            inf++;
            continue;
        }
        finite++;
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        sum += v;
        asum += fabs(v);
    }
    if (finite)
        printf("  min %.6g  max %.6g  mean %.6g  abs-mean %.6g  NaN %llu  Inf %llu\n", mn, mx,
               sum / (double)finite, asum / (double)finite, (unsigned long long)nan,
               (unsigned long long)inf);
    else
        printf("  no finite values  NaN %llu  Inf %llu\n", (unsigned long long)nan,
               (unsigned long long)inf);
    return G4_OK;
}

static int cmd_inspect(int argc, char **argv) {
    const char *pkg_dir = NULL, *tensor = NULL;
    int summary = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tensor")) {
            if (++i >= argc) return g4_cli_usage_error("inspect", "--tensor needs a name");
            tensor = argv[i];
        } else if (!strcmp(argv[i], "--summary")) {
            summary = 1;
        } else if (argv[i][0] == '-') {
            return g4_cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        } else if (!pkg_dir) {
            pkg_dir = argv[i];
        } else {
            return g4_cli_usage_error("inspect", "unexpected argument '%s'", argv[i]);
        }
    }
    if (!pkg_dir) return g4_cli_usage_error("inspect", "missing package directory");
    g4_package *p;
    int rc = g4_package_open(pkg_dir, &p);
    if (rc) return g4_cli_fail(rc);
    if (tensor) {
        rc = print_tensor_stats(p, tensor);
        g4_package_close(p);
        return rc ? g4_cli_fail(rc) : 0;
    }
    printf("package %s: model type '%s'\n", p->dir, p->genai.model_type);
    int issues = 0;
    for (int i = 0; i < G4_COMP_COUNT; i++) {
        const g4_component *c = g4_package_component(p, (g4_component_id)i);
        if (!c) {
            printf("\n%s: absent\n", p->comp[i].name);
            continue;
        }
        print_component(c, !summary);
        issues += report_layout(c) + report_nonfinite(c);
    }
    print_text_config(p);
    print_media_configs(p);
    printf("\n%s\n", issues ? "inconsistencies found (see above)" : "consistent: all checks passed");
    g4_package_close(p);
    return issues ? 1 : 0;
}

const g4_cmd g4_cmd_inspect = {
    "inspect", cmd_inspect,
    "PKG [--tensor NAME] [--summary]   components, tensors, dtypes, derived config; checks all"};
