// model_config.c: derive the text, vision and audio configs from a package and cross-check
// genai_config.json, the tensor tables and the graphs. Nothing here assumes a model size: every
// count and width is read from the files, and every pair that must agree is compared.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loader/package.h"

void g4_text_config_free(g4_text_config *c) {
    free(c->layer);
    for (int i = 0; i < c->n_rope; i++) {
        free(c->rope[i].cos_name);
        free(c->rope[i].inv_freq);
    }
    memset(c, 0, sizeof *c);
}

// --- small graph helpers -------------------------------------------------------------------

// The single consumer of value, skipping shape-only ops (Reshape, Unsqueeze, Squeeze, Cast,
// Identity). NULL when there is none or more than one.
static const g4_node *next_op(const g4_onnx_model *m, const char *value) {
    for (int hop = 0; hop < 8; hop++) {
        const g4_node *cons[2];
        if (g4_onnx_consumers(m, value, cons, 2) != 1) return NULL;
        const char *op = cons[0]->op_type;
        if (strcmp(op, "Reshape") && strcmp(op, "Unsqueeze") && strcmp(op, "Squeeze") &&
            strcmp(op, "Cast") && strcmp(op, "Identity"))
            return cons[0];
        if (cons[0]->n_outputs < 1) return NULL;
        value = cons[0]->outputs[0];
    }
    return NULL;
}

// The producer of value, skipping shape-only ops.
static const g4_node *prev_op(const g4_onnx_model *m, const char *value) {
    for (int hop = 0; hop < 8; hop++) {
        const g4_node *n = g4_onnx_producer(m, value);
        if (!n) return NULL;
        const char *op = n->op_type;
        if (strcmp(op, "Reshape") && strcmp(op, "Unsqueeze") && strcmp(op, "Squeeze") &&
            strcmp(op, "Cast") && strcmp(op, "Identity") && strcmp(op, "Transpose"))
            return n;
        if (n->n_inputs < 1) return NULL;
        value = n->inputs[0];
    }
    return NULL;
}

// The value of a one-element constant: an initializer, a Constant node, or either through
// Cast/CastLike/Identity nodes (Cast to fp16/bf16 rounds the value as the cast does).
static int const_scalar(const g4_onnx_model *m, const char *value, double *c) {
    for (int hop = 0; hop < 4; hop++) {
        const g4_tensor *t = g4_onnx_tensor(m, value);
        if (t) {
            if (t->numel != 1 || g4_dtype_bits(t->dtype) < 8) return 0;
            *c = g4_tensor_get(t, 0);
            return 1;
        }
        const g4_node *n = g4_onnx_producer(m, value);
        if (n && !strcmp(n->op_type, "Constant")) { // value_float / value_int attributes
            const g4_attr *a = g4_node_attr(n, "value_float");
            if (a && a->type == G4_ATTR_FLOAT) return *c = a->f, 1;
            if ((a = g4_node_attr(n, "value_int")) && a->type == G4_ATTR_INT)
                return *c = (double)a->i, 1;
            return 0;
        }
        if (!n || n->n_inputs < 1) return 0;
        if (strcmp(n->op_type, "Cast") && strcmp(n->op_type, "CastLike") &&
            strcmp(n->op_type, "Identity"))
            return 0;
        if (!strcmp(n->op_type, "Cast")) {
            double v;
            if (!const_scalar(m, n->inputs[0], &v)) return 0;
            int64_t to = g4_node_attr_int(n, "to", 0);
            *c = to == G4_DT_FLOAT16 ? g4_round_f16((float)v)
                 : to == G4_DT_BFLOAT16 ? g4_bf16_to_f32((uint16_t)(g4_bf16_round((float)v)))
                 : v;
            return 1;
        }
        value = n->inputs[0];
    }
    return 0;
}

// If node is a Mul/Div by a one-element constant, stores that constant in *c.
static int scalar_operand(const g4_onnx_model *m, const g4_node *n, double *c) {
    if (!n || n->n_inputs != 2) return 0;
    for (int k = 0; k < 2; k++)
        if (const_scalar(m, n->inputs[k], c)) return 1;
    return 0;
}

// The constant that multiplies the output of the node consuming `weight` (Gather / MatMul).
static int multiplier_after_weight(const g4_component *c, const char *weight_name, float *out) {
    const g4_tensor *w = g4_component_find(c, weight_name);
    if (!w) return 0;
    const g4_node *cons[4];
    int n = g4_onnx_consumers(c->model, w->name, cons, 4);
    for (int i = 0; i < n && i < 4; i++) {
        if (cons[i]->n_outputs < 1) continue;
        const g4_node *mul = next_op(c->model, cons[i]->outputs[0]);
        double v;
        if (mul && strcmp(mul->op_type, "Mul") == 0 && scalar_operand(c->model, mul, &v)) {
            *out = (float)v;
            return 1;
        }
    }
    return 0;
}

// --- linear weights: fp16 "<name>.weight_t" [in, out] or Q4 MatMulNBits ------------------

typedef struct {
    const g4_tensor *t; // fp16 [in, out] or the _Q4 tensor
    int q4;
    int64_t in, out;
} g4_linear_info;

static int find_linear(const g4_component *c, const char *fmt, int layer, g4_linear_info *li) {
    char name[256];
    memset(li, 0, sizeof *li);
    snprintf(name, sizeof name - 10, fmt, layer);
    size_t n = strlen(name);
    if ((li->t = g4_component_find(c, name))) {
        if (li->t->ndim != 2)
            return g4_fail(G4_EUSER, "%s: tensor '%s': expected 2 dims [in, out], found %d",
                           c->onnx_path, li->t->name, li->t->ndim);
        li->in = li->t->dims[0];
        li->out = li->t->dims[1];
        return 1;
    }
    // Olive names the packed weight "<W>_Q4", onnxruntime's quantizer "<W>_Q4G<block>".
    memcpy(name + n, "_Q4", 4);
    if (!(li->t = g4_component_find(c, name))) {
        memcpy(name + n, "_Q4G32", 7);
        li->t = g4_component_find(c, name);
    }
    if (li->t) {
        // K and N come from the MatMulNBits node that consumes it.
        const g4_node *cons[1];
        if (g4_onnx_consumers(c->model, li->t->name, cons, 1) < 1 ||
            strcmp(cons[0]->op_type, "MatMulNBits"))
            return g4_fail(G4_EUSER, "%s: tensor '%s' is not consumed by a MatMulNBits node",
                           c->onnx_path, li->t->name);
        li->q4 = 1;
        li->in = g4_node_attr_int(cons[0], "K", -1);
        li->out = g4_node_attr_int(cons[0], "N", -1);
        if (li->in <= 0 || li->out <= 0)
            return g4_fail(G4_EUSER, "%s: MatMulNBits node '%s' lacks positive K and N attributes",
                           c->onnx_path, cons[0]->name);
        return 1;
    }
    return 0;
}

// Requires the linear with the given [in, out] (-1 = any); stores the found shape.
static int need_linear(const g4_component *c, const char *fmt, int layer, int64_t in, int64_t out,
                       g4_linear_info *li) {
    int rc = find_linear(c, fmt, layer, li);
    if (rc < 0) return rc;
    char name[256];
    snprintf(name, sizeof name, fmt, layer);
    if (rc == 0)
        return g4_fail(G4_EUSER, "%s: tensor '%s%s' (or its _Q4 form) is missing", c->onnx_path,
                       c->prefix, name);
    if ((in >= 0 && li->in != in) || (out >= 0 && li->out != out))
        return g4_fail(G4_EUSER, "%s: tensor '%s': expected [in, out] = [%lld, %lld], found [%lld, %lld]",
                       c->onnx_path, li->t->name, (long long)in, (long long)out, (long long)li->in,
                       (long long)li->out);
    return G4_OK;
}

static int count_layers(const g4_component *c, const char *fmt) {
    int n = 0;
    g4_linear_info li;
    while (n < 4096 && find_linear(c, fmt, n, &li) == 1) n++;
    return n;
}

// A 1-D weight of length len (-1 = any); returns its length.
static int need_vector(const g4_component *c, const char *fmt, int layer, int64_t len,
                       int64_t *got) {
    char name[256];
    snprintf(name, sizeof name, fmt, layer);
    const g4_tensor *t = g4_component_find(c, name);
    if (!t)
        return g4_fail(G4_EUSER, "%s: tensor '%s%s' is missing", c->onnx_path, c->prefix, name);
    if (t->ndim != 1 || (len >= 0 && t->dims[0] != len))
        return g4_fail(G4_EUSER, "%s: tensor '%s': expected a vector of %lld, found %d dims (%lld)",
                       c->onnx_path, t->name, (long long)len, t->ndim,
                       (long long)(t->ndim ? t->dims[0] : 0));
    if (got) *got = t->dims[0];
    return G4_OK;
}

static float first_norm_eps(const g4_onnx_model *m) {
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].op_type, "RMSNormalization") == 0 ||
            strcmp(m->nodes[i].op_type, "SimplifiedLayerNormalization") == 0 ||
            strcmp(m->nodes[i].op_type, "SkipSimplifiedLayerNormalization") == 0)
            return g4_node_attr_float(&m->nodes[i], "epsilon", 1e-5f); // ONNX default
    return 1e-6f;
}

// --- RoPE: recover the frequencies from the package's own cos/sin tables ------------------

static double table_angle(const g4_tensor *cos_t, const g4_tensor *sin_t, int64_t pos, int64_t j) {
    uint64_t i = (uint64_t)(pos * cos_t->dims[1] + j);
    return atan2(g4_tensor_get(sin_t, i), g4_tensor_get(cos_t, i));
}

// Largest |table - cos/sin(pos x inv_freq)| over probe rows, in units of the allowed error
// (fp16 rounding of the table plus the exporter's own fp32 angle rounding); > 1 is a mismatch.
static double rope_misfit(const g4_tensor *ct, const g4_tensor *st, const float *inv_freq,
                          int n_freq, int64_t *bad_row, int *bad_col) {
    int64_t probe[96];
    int np = 0;
    for (int64_t p = 1; p < ct->dims[0] && np < 40; p *= 2) probe[np++] = p;
    probe[np++] = ct->dims[0] - 1;
    uint64_t s = 0x2545F4914F6CDD1Dull; // fixed pseudo-random rows
    while (np < 96) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        probe[np++] = (int64_t)(s % (uint64_t)ct->dims[0]);
    }
    double worst = 0;
    for (int q = 0; q < np; q++) {
        int64_t p = probe[q];
        for (int j = 0; j < n_freq; j++) {
            double ang = (double)p * (double)inv_freq[j];
            double tol = 2e-3 + fabs(ang) * 2.4e-7;
            uint64_t i = (uint64_t)(p * ct->dims[1] + j);
            double dc = fabs(g4_tensor_get(ct, i) - cos(ang)) / tol;
            double ds = fabs(g4_tensor_get(st, i) - sin(ang)) / tol;
            double d = dc > ds ? dc : ds;
            if (d > worst) {
                worst = d;
                *bad_row = p;
                *bad_col = j;
            }
        }
    }
    return worst;
}

// Gemma's form inv_freq[i] = theta^(-2i/dim) for the first n_rot pairs (0 after), theta fitted
// to the recovered frequencies raw[1..n_rot) (weighted least squares on log frequency; weights
// f^2 since the absolute error is uniform). The roundest theta (fewest significant digits) that
// reproduces the table is preferred to the fitted one: a table of few rows or few rotating
// pairs pins theta only loosely (alt-tiny's 48 rows: 10000.4 for HF's 10000 on a 16-wide head,
// which turns its pairs by ~1e-5 relative at 16 positions, as much as HF fp32's own error; 6
// pairs of a 48-wide head: 999945 for 1e6), HF's configs use round bases, and a long table
// (E2B's 131072 rows) admits only values within ~1e-6 of the true one. Returns the misfit
// (INFINITY when no theta could be fitted); *theta and inv_freq[n_freq] hold the last candidate
// tried.
static double fit_rope_theta(const g4_tensor *ct, const g4_tensor *st, const double *raw,
                             int n_freq, int n_rot, int dim, double *theta, float *inv_freq,
                             int64_t *row, int *col) {
    double sxy = 0, sxx = 0, misfit = INFINITY;
    for (int i = 1; i < n_rot; i++) {
        if (raw[i] <= 0) continue;
        double x = 2.0 * i / dim, w = raw[i] * raw[i];
        sxy += w * x * log(raw[i]);
        sxx += w * x * x;
    }
    if (!(sxx > 0)) return misfit;
    const double fitted = exp(-sxy / sxx);
    if (!(fitted > 1) || !isfinite(fitted)) return misfit;
    const double e = floor(log10(fitted));
    for (int digits = 1; digits <= 16 && !(misfit <= 1.0); digits++) {
        // digits 16: the fitted value itself
        const double unit = pow(10.0, e - digits + 1);
        const double c = digits < 16 ? nearbyint(fitted / unit) * unit : fitted;
        if (!(c > 1)) continue;
        *theta = c;
        for (int i = 0; i < n_freq; i++)
            inv_freq[i] = i < n_rot ? (float)(1.0 / pow(c, 2.0 * i / dim)) : 0.0f;
        misfit = rope_misfit(ct, st, inv_freq, n_freq, row, col);
    }
    return misfit;
}

// The frequencies, recovered from the package's cos/sin tables:
// 1. angle(pos) = pos x inv_freq[j]: start at pos 1 (|angle| < pi), then double the position and
//    unwrap; each step halves the error, so the last power-of-two row fixes each frequency to
//    about 1e-3 / max_pos radians.
// 2. Gemma's rope (default and proportional alike) is inv_freq[i] = theta^(-2i/head_dim) for the
//    first n_rotating pairs and 0 after. Fit theta (fit_rope_theta) and, when that form
//    reproduces the table, use it: it is what HF computes, exact to fp32.
//    Otherwise the raw recovered frequencies are used, if they reproduce the table.
static int derive_rope(const g4_component *dec, const char *cos_name, const char *sin_name,
                       g4_rope_freqs *r) {
    const g4_tensor *ct = g4_onnx_tensor(dec->model, cos_name);
    const g4_tensor *st = g4_onnx_tensor(dec->model, sin_name);
    if (!ct || !st)
        return g4_fail(G4_EUSER, "%s: rotary table '%s' / '%s' is not an initializer",
                       dec->onnx_path, cos_name, sin_name);
    int is_float = ct->dtype == G4_DT_FLOAT16 || ct->dtype == G4_DT_BFLOAT16 ||
                   ct->dtype == G4_DT_FLOAT || ct->dtype == G4_DT_DOUBLE;
    if (!is_float || ct->dtype != st->dtype || ct->ndim != 2 || st->ndim != 2 ||
        ct->dims[0] != st->dims[0] || ct->dims[1] != st->dims[1] || ct->dims[0] < 2 ||
        ct->dims[1] < 1)
        return g4_fail(G4_EUSER,
                       "%s: rotary tables '%s' and '%s' must be float [positions >= 2, dim/2] "
                       "of equal shape",
                       dec->onnx_path, ct->name, st->name);
    r->cos_name = g4_strdup(cos_name);
    r->n_freq = (int)ct->dims[1];
    r->head_dim = 2 * r->n_freq;
    r->max_positions = (int)ct->dims[0];
    r->inv_freq = g4_calloc((size_t)r->n_freq, sizeof(float));
    double *raw = g4_calloc((size_t)r->n_freq, sizeof(double));
    const double two_pi = 2.0 * M_PI;
    for (int j = 0; j < r->n_freq; j++) {
        double est = table_angle(ct, st, 1, j);
        for (int64_t p = 2; p < ct->dims[0]; p *= 2) {
            double a = table_angle(ct, st, p, j);
            double k = nearbyint((p * est - a) / two_pi);
            est = (a + two_pi * k) / (double)p;
        }
        raw[j] = est;
    }
    // Rotating pairs: a prefix of frequencies clearly above the recovery noise.
    double noise = 4e-3 / (double)ct->dims[0];
    while (r->n_rotating < r->n_freq && fabs(raw[r->n_rotating]) > noise) r->n_rotating++;
    int64_t row = 0;
    int col = 0;
    double misfit = fit_rope_theta(ct, st, raw, r->n_freq, r->n_rotating, r->head_dim, &r->theta,
                                   r->inv_freq, &row, &col);
    if (!(misfit <= 1.0)) { // not Gemma's form: keep the raw frequencies if they fit
        r->theta = 0;
        for (int i = 0; i < r->n_freq; i++)
            r->inv_freq[i] = i < r->n_rotating ? (float)raw[i] : 0.0f;
        misfit = rope_misfit(ct, st, r->inv_freq, r->n_freq, &row, &col);
    }
    free(raw);
    if (!(misfit <= 1.0)) {
        free(r->cos_name);
        free(r->inv_freq);
        r->cos_name = NULL;
        r->inv_freq = NULL;
        return g4_fail(G4_EUSER,
                       "%s: rotary table '%s' row %lld col %d is not cos/sin of position x "
                       "frequency (off by %.3g x the fp16 tolerance)",
                       dec->onnx_path, ct->name, (long long)row, col, misfit);
    }
    return G4_OK;
}

// --- the text decoder ------------------------------------------------------------------------

// Finds the GroupQueryAttention node feeding layer l's o_proj.
static int layer_attention_node(const g4_component *dec, int l, const g4_linear_info *o,
                                const g4_node **out) {
    const g4_node *cons[1];
    if (g4_onnx_consumers(dec->model, o->t->name, cons, 1) < 1)
        return g4_fail(G4_EUSER, "%s: layer %d: o_proj weight '%s' is not used by any node",
                       dec->onnx_path, l, o->t->name);
    const g4_node *gqa = prev_op(dec->model, cons[0]->inputs[0]);
    if (!gqa || strcmp(gqa->op_type, "GroupQueryAttention"))
        return g4_fail(G4_EUSER,
                       "%s: layer %d: o_proj does not read a GroupQueryAttention output (found %s)",
                       dec->onnx_path, l, gqa ? gqa->op_type : "no producer");
    if (gqa->n_inputs < 9)
        return g4_fail(G4_EUSER,
                       "%s: layer %d: GroupQueryAttention node '%s' has %d inputs, expected 9 "
                       "(q, k, v, past k/v, seqlens, total length, cos, sin)",
                       dec->onnx_path, l, gqa->name, gqa->n_inputs);
    *out = gqa;
    return G4_OK;
}

// past_key input name -> slot: "past_key_values.%d.key" (owner) or "present.%d.key" (reader).
static int kv_slot_of(const char *fmt, const char *name, int *slot) {
    const char *pct = strstr(fmt, "%d");
    size_t pre = (size_t)(pct - fmt);
    const char *post = pct + 2;
    if (strncmp(name, fmt, pre) != 0) return 0;
    const char *p = name + pre;
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v > 100000 || strcmp(end, post) != 0) return 0;
    *slot = (int)v;
    return 1;
}

int g4_derive_text_config(g4_package *p) {
    g4_text_config *c = &p->text;
    const g4_genai_config *g = &p->genai;
    const g4_component *dec = &p->comp[G4_COMP_DECODER], *emb = &p->comp[G4_COMP_EMBEDDING];
    const char *gpath = "genai_config.json";
    int rc;
    c->hidden = g->hidden_size;
    c->n_heads = g->num_attention_heads;
    c->n_kv_heads = g->num_key_value_heads;
    c->vocab = g->vocab_size;
    c->context_length = g->context_length;
    c->bos_id = g->bos_token_id;
    c->pad_id = g->pad_token_id;
    c->n_eos = g->n_eos;
    memcpy(c->eos_ids, g->eos_token_ids, sizeof c->eos_ids);
    c->image_token_id = g->image_token_id;
    c->audio_token_id = g->audio_token_id;
    if (c->n_heads % c->n_kv_heads)
        return g4_fail(G4_EUSER, "%s/%s: num_attention_heads %d is not a multiple of "
                                 "num_key_value_heads %d",
                       p->dir, gpath, c->n_heads, c->n_kv_heads);

    // Layers: every layer has a q_proj; the count must match the config.
    const char *q_fmt = "model.layers.%d.self_attn.q_proj.weight_t";
    int n_found = count_layers(dec, q_fmt);
    if (n_found != g->num_hidden_layers)
        return g4_fail(G4_EUSER,
                       "%s: %d decoder layers have a q_proj, but genai_config.json says "
                       "num_hidden_layers = %d",
                       dec->onnx_path, n_found, g->num_hidden_layers);
    c->n_layers = n_found;
    if (c->n_layers > 4096) return g4_fail(G4_EUSER, "%s: too many layers", dec->onnx_path);

    // Embedding tables.
    const g4_tensor *et = g4_component_find(emb, "embed_tokens.weight");
    if (!et || et->ndim != 2)
        return g4_fail(G4_EUSER, "%s: tensor 'embedding.embed_tokens.weight' [vocab, hidden] is "
                                 "missing or not 2-D",
                       emb->onnx_path);
    if (et->dims[0] != c->vocab || et->dims[1] != c->hidden)
        return g4_fail(G4_EUSER,
                       "%s: tensor '%s' is [%lld, %lld], but genai_config.json says vocab_size "
                       "%d and hidden_size %d",
                       emb->onnx_path, et->name, (long long)et->dims[0], (long long)et->dims[1],
                       c->vocab, c->hidden);
    g4_linear_info li;
    if ((rc = need_linear(dec, "lm_head.weight_t", 0, c->hidden, c->vocab, &li))) return rc;
    c->weights_q4 = li.q4;

    c->layer = g4_calloc((size_t)c->n_layers, sizeof(g4_layer_config));
    int64_t ple = -1;
    float attn_scale = NAN;
    int slot_owner[4096];
    for (int s = 0; s < 4096; s++) slot_owner[s] = -1;
    int n_slots = 0;
    for (int l = 0; l < c->n_layers; l++) {
        g4_layer_config *L = &c->layer[l];
        int64_t hd;
        if ((rc = need_vector(dec, "model.layers.%d.self_attn.q_norm.weight", l, -1, &hd)))
            return rc;
        L->head_dim = (int)hd;
        int64_t qw = (int64_t)c->n_heads * hd;
        g4_linear_info q, o, gate;
        if ((rc = need_linear(dec, q_fmt, l, c->hidden, qw, &q)) ||
            (rc = need_linear(dec, "model.layers.%d.self_attn.o_proj.weight_t", l, qw, c->hidden,
                              &o)) ||
            (rc = need_linear(dec, "model.layers.%d.mlp.gate_proj.weight_t", l, c->hidden, -1,
                              &gate)))
            return rc;
        L->ffn = (int)gate.out;
        if ((rc = need_linear(dec, "model.layers.%d.mlp.up_proj.weight_t", l, c->hidden, L->ffn,
                              &li)) ||
            (rc = need_linear(dec, "model.layers.%d.mlp.down_proj.weight_t", l, L->ffn, c->hidden,
                              &li)) ||
            (rc = need_linear(dec, "model.layers.%d.per_layer_input_gate.weight_t", l, c->hidden,
                              ple, &li)))
            return rc;
        ple = li.out;
        if ((rc = need_linear(dec, "model.layers.%d.per_layer_projection.weight_t", l, ple,
                              c->hidden, &li)))
            return rc;
        static const char *const norms[] = {
            "model.layers.%d.input_layernorm.weight", "model.layers.%d.post_attention_layernorm.weight",
            "model.layers.%d.pre_feedforward_layernorm.weight",
            "model.layers.%d.post_feedforward_layernorm.weight",
            "model.layers.%d.post_per_layer_input_norm.weight"};
        for (size_t k = 0; k < sizeof norms / sizeof norms[0]; k++)
            if ((rc = need_vector(dec, norms[k], l, c->hidden, NULL))) return rc;
        if ((rc = need_vector(dec, "model.layers.%d.layer_scalar", l, 1, NULL))) return rc;

        const g4_node *gqa = NULL;
        if ((rc = layer_attention_node(dec, l, &o, &gqa))) return rc;
        int nh = (int)g4_node_attr_int(gqa, "num_heads", -1);
        int nkv = (int)g4_node_attr_int(gqa, "kv_num_heads", -1);
        if (nh != c->n_heads || nkv != c->n_kv_heads)
            return g4_fail(G4_EUSER,
                           "%s: layer %d: GroupQueryAttention has num_heads %d, kv_num_heads %d; "
                           "genai_config.json says %d and %d",
                           dec->onnx_path, l, nh, nkv, c->n_heads, c->n_kv_heads);
        if (g4_node_attr_int(gqa, "do_rotary", 0) != 1 ||
            g4_node_attr_int(gqa, "rotary_interleaved", 0) != 0)
            return g4_fail(G4_EUSER,
                           "%s: layer %d: GroupQueryAttention must use do_rotary=1 with "
                           "rotary_interleaved=0 (split-half pairs)",
                           dec->onnx_path, l);
        if (g4_node_attr(gqa, "softcap") && g4_node_attr_float(gqa, "softcap", 0) != 0)
            return g4_fail(G4_EUSER, "%s: layer %d: attention softcap is not supported",
                           dec->onnx_path, l);
        float sc = g4_node_attr_float(gqa, "scale", 0.0f);
        if (sc == 0.0f) sc = 1.0f / sqrtf((float)hd); // GQA's default when scale is unset
        if (l > 0 && sc != attn_scale)
            return g4_fail(G4_EUSER, "%s: layer %d: attention scale %g differs from layer 0's %g",
                           dec->onnx_path, l, sc, attn_scale);
        attn_scale = sc;
        int64_t win = g4_node_attr_int(gqa, "local_window_size", -1);
        L->type = win > 0 ? G4_ATTN_SLIDING : G4_ATTN_FULL;
        L->window = win > 0 ? (int)win : 0;

        // KV slot: owners read past_key_values.N, shared layers read present.N.
        int slot;
        if (kv_slot_of(g->past_key_fmt, gqa->inputs[3], &slot)) {
            if (slot >= 4096 || slot_owner[slot] >= 0)
                return g4_fail(G4_EUSER, "%s: KV slot %d is owned by layers %d and %d",
                               dec->onnx_path, slot, slot < 4096 ? slot_owner[slot] : -1, l);
            slot_owner[slot] = l;
            L->kv_slot = slot;
            L->kv_source = l;
            n_slots++;
            g4_linear_info kp;
            if ((rc = need_linear(dec, "model.layers.%d.self_attn.k_proj.weight_t", l, c->hidden,
                                  (int64_t)c->n_kv_heads * hd, &kp)) ||
                (rc = need_linear(dec, "model.layers.%d.self_attn.v_proj.weight_t", l, c->hidden,
                                  (int64_t)c->n_kv_heads * hd, &kp)) ||
                (rc = need_vector(dec, "model.layers.%d.self_attn.k_norm.weight", l, hd, NULL)))
                return rc;
        } else if (kv_slot_of("present.%d.key", gqa->inputs[3], &slot) && slot < 4096 &&
                   slot_owner[slot] >= 0) {
            L->kv_slot = slot;
            L->kv_source = slot_owner[slot];
        } else {
            return g4_fail(G4_EUSER,
                           "%s: layer %d: GroupQueryAttention past_key input '%s' is neither a "
                           "'%s' graph input nor the present key of an earlier layer",
                           dec->onnx_path, l, gqa->inputs[3], g->past_key_fmt);
        }

        // Rotary frequencies: one entry per distinct cos table.
        const char *cos_name = gqa->inputs[7], *sin_name = gqa->inputs[8];
        int ri = -1;
        for (int k = 0; k < c->n_rope; k++)
            if (strcmp(c->rope[k].cos_name, cos_name) == 0) ri = k;
        if (ri < 0) {
            if (c->n_rope == G4_MAX_ROPE)
                return g4_fail(G4_EUSER, "%s: more than %d rotary tables", dec->onnx_path,
                               G4_MAX_ROPE);
            if ((rc = derive_rope(dec, cos_name, sin_name, &c->rope[c->n_rope]))) return rc;
            ri = c->n_rope++;
        }
        L->rope = ri;
        if (c->rope[ri].head_dim != L->head_dim)
            return g4_fail(G4_EUSER,
                           "%s: layer %d: rotary table '%s' covers %d dims, head_dim is %d",
                           dec->onnx_path, l, cos_name, c->rope[ri].head_dim, L->head_dim);
    }
    c->attn_scale = attn_scale;
    // Positions beyond the rows of the package's RoPE tables were never prepared by the
    // exporter: cap the usable context there (tiny packages write 4096 with 128-row tables).
    for (int r = 0; r < c->n_rope; r++)
        if (c->rope[r].max_positions < c->context_length) {
            c->context_length = c->rope[r].max_positions;
            c->context_from_rope = 1;
        }
    c->ple_dim = (int)ple;
    c->n_kv_layers = n_slots;
    c->n_kv_shared = c->n_layers - n_slots;

    // Cross-checks of the sharing structure.
    for (int s = 0; s < n_slots; s++)
        if (slot_owner[s] < 0)
            return g4_fail(G4_EUSER, "%s: KV slots are not 0..%d (slot %d has no owner)",
                           dec->onnx_path, n_slots - 1, s);
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *L = &c->layer[l], *S = &c->layer[L->kv_source];
        if (S->head_dim != L->head_dim || S->type != L->type || S->window != L->window)
            return g4_fail(G4_EUSER,
                           "%s: layer %d reads the KV of layer %d, whose attention differs "
                           "(head_dim %d vs %d)",
                           dec->onnx_path, l, L->kv_source, L->head_dim, S->head_dim);
        if (l < n_slots && L->kv_source != l)
            return g4_fail(G4_EUSER,
                           "%s: layer %d does not own a KV cache, but later layers do (the first "
                           "%d layers must own slots)",
                           dec->onnx_path, l, n_slots);
        // The owner's graph inputs declare the cache shape [batch, kv_heads, past, head_dim].
        if (L->kv_source == l) {
            char nm[128];
            snprintf(nm, sizeof nm, g->past_key_fmt, L->kv_slot);
            const g4_value_info *vi = g4_onnx_input(dec->model, nm);
            if (!vi)
                return g4_fail(G4_EUSER, "%s: graph input '%s' is missing", dec->onnx_path, nm);
            if (vi->ndim == 4 && ((vi->dims[1] >= 0 && vi->dims[1] != c->n_kv_heads) ||
                                  (vi->dims[3] >= 0 && vi->dims[3] != L->head_dim)))
                return g4_fail(G4_EUSER,
                               "%s: graph input '%s' is [.., %lld, .., %lld], expected kv heads "
                               "%d and head_dim %d",
                               dec->onnx_path, nm, (long long)vi->dims[1], (long long)vi->dims[3],
                               c->n_kv_heads, L->head_dim);
        }
    }
    if (c->layer[0].head_dim != g->head_size) {
        // genai head_size is the sliding-layer head dim; check against the first sliding layer.
        int ok = 0;
        for (int l = 0; l < c->n_layers; l++)
            if (c->layer[l].type == G4_ATTN_SLIDING) {
                ok = c->layer[l].head_dim == g->head_size;
                break;
            }
        if (!ok)
            return g4_fail(G4_EUSER,
                           "%s/%s: model.decoder.head_size %d matches no sliding layer's q_norm "
                           "width",
                           p->dir, gpath, g->head_size);
    }

    // Embedding model: PLE tables and the multipliers the graph applies.
    const g4_tensor *t;
    int64_t ple_all = (int64_t)c->n_layers * c->ple_dim;
    t = g4_component_find(emb, "embed_tokens_per_layer.weight");
    if (!t || t->ndim != 2 || t->dims[1] != ple_all)
        return g4_fail(G4_EUSER,
                       "%s: tensor 'embedding.embed_tokens_per_layer.weight' must be [vocab, "
                       "layers x ple_dim = %lld]",
                       emb->onnx_path, (long long)ple_all);
    c->vocab_ple = (int)t->dims[0];
    if ((rc = need_linear(emb, "per_layer_model_projection.weight_t", 0, c->hidden, ple_all, &li)))
        return rc;
    if ((rc = need_vector(emb, "per_layer_projection_norm.weight", 0, c->ple_dim, NULL))) return rc;
    if ((rc = need_vector(dec, "model.norm.weight", 0, c->hidden, NULL))) return rc;
    if (!multiplier_after_weight(emb, "embed_tokens.weight", &c->embed_scale) ||
        !multiplier_after_weight(emb, "embed_tokens_per_layer.weight", &c->ple_token_scale) ||
        !multiplier_after_weight(emb, "per_layer_model_projection.weight_t", &c->ple_proj_scale))
        return g4_fail(G4_EUSER,
                       "%s: cannot find the constant multipliers of embed_tokens, "
                       "embed_tokens_per_layer and per_layer_model_projection in the graph",
                       emb->onnx_path);
    // The combine multiplier follows the Add of the two PLE parts.
    c->ple_combine_scale = NAN;
    {
        const g4_tensor *pt = g4_component_find(emb, "embed_tokens_per_layer.weight");
        const g4_node *cons[1];
        if (g4_onnx_consumers(emb->model, pt->name, cons, 1) == 1) {
            const g4_node *mul = next_op(emb->model, cons[0]->outputs[0]);
            const g4_node *add = mul ? next_op(emb->model, mul->outputs[0]) : NULL;
            const g4_node *mul2 = add && strcmp(add->op_type, "Add") == 0
                                      ? next_op(emb->model, add->outputs[0])
                                      : NULL;
            double v;
            if (mul2 && strcmp(mul2->op_type, "Mul") == 0 && scalar_operand(emb->model, mul2, &v))
                c->ple_combine_scale = (float)v;
        }
        if (isnan(c->ple_combine_scale))
            return g4_fail(G4_EUSER,
                           "%s: cannot find the multiplier after the sum of the two per-layer "
                           "input parts",
                           emb->onnx_path);
    }

    // Decoder norms' epsilon and the final logit soft-cap (Tanh between Div/Mul by c).
    c->rms_eps = first_norm_eps(dec->model);
    c->final_softcap = 0.0f;
    for (int i = 0; i < dec->model->n_nodes; i++) {
        const g4_node *n = &dec->model->nodes[i];
        if (strcmp(n->op_type, "Tanh")) continue;
        const g4_node *pre = g4_onnx_producer(dec->model, n->inputs[0]);
        double v;
        if (!pre || !scalar_operand(dec->model, pre, &v))
            return g4_fail(G4_EUSER, "%s: Tanh node '%s' is not a logit soft-cap x/c", dec->onnx_path,
                           n->name);
        c->final_softcap = strcmp(pre->op_type, "Div") == 0 ? (float)v : (float)(1.0 / v);
    }
    return G4_OK;
}

// --- vision tower ---------------------------------------------------------------------------

// The vision 2-D RoPE frequencies from layer 0's cos/sin_cache [positions, head_dim/2]: HF's
// axial rope uses the same head_dim/4 frequencies for both axes, so the table is
// cat(cos(p f), cos(p f)). Recover f as derive_rope does, check the two halves agree, fit
// inv_freq[j] = theta^(-2j / (head_dim/2)) and prefer the roundest theta that reproduces the
// table (fit_rope_theta: the fp16 table of a few hundred positions pins theta only to ~1e-3
// relative, which would rotate the last pair of a 64-wide grid by ~1e-3 rad; HF's configs use
// round bases: 100 for E2B).
static int derive_vision_rope(const g4_component *c, g4_vision_config *v) {
    const g4_tensor *ct = g4_component_find(c, "encoder.layers.0.self_attn.cos_cache");
    const g4_tensor *st = g4_component_find(c, "encoder.layers.0.self_attn.sin_cache");
    const int half = v->head_dim / 2, nf = v->head_dim / 4;
    if (!ct || !st || ct->ndim != 2 || st->ndim != 2 || ct->dims[1] != half ||
        st->dims[1] != half || ct->dims[0] != st->dims[0] || ct->dims[0] < 2 ||
        g4_dtype_bits(ct->dtype) < 16 || v->head_dim % 4 || nf > G4_MAX_VISION_ROPE)
        return g4_fail(G4_EUSER,
                       "%s: encoder.layers.0.self_attn.cos_cache / sin_cache must be float "
                       "[positions >= 2, head_dim/2 = %d] (head_dim %d a multiple of 4, at most "
                       "%d)",
                       c->onnx_path, half, v->head_dim, 4 * G4_MAX_VISION_ROPE);
    v->rope_n_freq = nf;
    const double two_pi = 2.0 * M_PI;
    double raw[G4_MAX_VISION_ROPE];
    for (int j = 0; j < nf; j++) {
        double est = table_angle(ct, st, 1, j);
        for (int64_t p = 2; p < ct->dims[0]; p *= 2) {
            double a = table_angle(ct, st, p, j);
            double k = nearbyint((p * est - a) / two_pi);
            est = (a + two_pi * k) / (double)p;
        }
        raw[j] = est;
    }
    for (int64_t p = 0; p < ct->dims[0]; p++)
        for (int j = 0; j < nf; j++) {
            const uint64_t a = (uint64_t)(p * half + j), b = a + (uint64_t)nf;
            if (fabs(g4_tensor_get(ct, a) - g4_tensor_get(ct, b)) > 1e-3 ||
                fabs(g4_tensor_get(st, a) - g4_tensor_get(st, b)) > 1e-3)
                return g4_fail(G4_EUSER,
                               "%s: vision cos/sin_cache row %lld: column %d differs from column "
                               "%d (expected the same frequencies for the x and y halves)",
                               c->onnx_path, (long long)p, j + nf, j);
        }
    int64_t row = 0;
    int col = 0;
    const double misfit =
        fit_rope_theta(ct, st, raw, nf, nf, half, &v->rope_theta, v->rope_inv_freq, &row, &col);
    if (!(misfit <= 1.0))
        return g4_fail(G4_EUSER,
                       "%s: vision rotary table '%s' row %lld col %d is not cos/sin of position x "
                       "theta^(-2j/%d) for any theta (off by %.3g x the fp16 tolerance)",
                       c->onnx_path, ct->name, (long long)row, col, half, misfit);
    return G4_OK;
}

int g4_derive_vision_config(g4_package *p) {
    g4_vision_config *v = &p->vision;
    const g4_component *c = &p->comp[G4_COMP_VISION];
    g4_linear_info li;
    int rc;
    if ((rc = need_linear(c, "encoder.patch_embedder.input_proj.weight_t", 0, -1, -1, &li)))
        return rc;
    v->patch_dim = (int)li.in;
    v->hidden = (int)li.out;
    if (p->has_image_proc &&
        v->patch_dim != 3 * p->image_proc.patch_size * p->image_proc.patch_size)
        return g4_fail(G4_EUSER,
                       "%s: input_proj takes %d values per patch, but image_processor.json "
                       "patch_size %d gives 3 x %d^2 = %d",
                       c->onnx_path, v->patch_dim, p->image_proc.patch_size,
                       p->image_proc.patch_size,
                       3 * p->image_proc.patch_size * p->image_proc.patch_size);
    const g4_tensor *pos = g4_component_find(c, "encoder.patch_embedder.position_embedding_table");
    if (!pos || pos->ndim != 3 || pos->dims[0] != 2 || pos->dims[2] != v->hidden)
        return g4_fail(G4_EUSER,
                       "%s: position_embedding_table must be [2, positions, %d]", c->onnx_path,
                       v->hidden);
    v->pos_size = (int)pos->dims[1];
    v->n_layers = count_layers(c, "encoder.layers.%d.self_attn.q_proj.weight_t");
    if (v->n_layers == 0) return g4_fail(G4_EUSER, "%s: no vision encoder layers", c->onnx_path);
    int64_t hd;
    if ((rc = need_vector(c, "encoder.layers.%d.self_attn.q_norm.weight", 0, -1, &hd))) return rc;
    v->head_dim = (int)hd;
    if (hd <= 0 || v->hidden % hd)
        return g4_fail(G4_EUSER, "%s: vision q_norm width %lld does not divide hidden %d",
                       c->onnx_path, (long long)hd, v->hidden);
    v->n_heads = v->hidden / v->head_dim;
    if ((rc = need_linear(c, "encoder.layers.%d.mlp.gate_proj.weight_t", 0, v->hidden, -1, &li)))
        return rc;
    v->ffn = (int)li.out;
    for (int l = 0; l < v->n_layers; l++) {
        static const char *const sq[] = {"encoder.layers.%d.self_attn.q_proj.weight_t",
                                         "encoder.layers.%d.self_attn.k_proj.weight_t",
                                         "encoder.layers.%d.self_attn.v_proj.weight_t",
                                         "encoder.layers.%d.self_attn.o_proj.weight_t"};
        for (int k = 0; k < 4; k++)
            if ((rc = need_linear(c, sq[k], l, v->hidden, v->hidden, &li))) return rc;
        if ((rc = need_linear(c, "encoder.layers.%d.mlp.gate_proj.weight_t", l, v->hidden, v->ffn,
                              &li)) ||
            (rc = need_linear(c, "encoder.layers.%d.mlp.up_proj.weight_t", l, v->hidden, v->ffn,
                              &li)) ||
            (rc = need_linear(c, "encoder.layers.%d.mlp.down_proj.weight_t", l, v->ffn, v->hidden,
                              &li)) ||
            (rc = need_vector(c, "encoder.layers.%d.self_attn.q_norm.weight", l, hd, NULL)) ||
            (rc = need_vector(c, "encoder.layers.%d.self_attn.k_norm.weight", l, hd, NULL)))
            return rc;
    }
    if ((rc = need_linear(c, "projector.weight_t", 0, v->hidden, p->text.hidden, &li))) return rc;
    v->out_dim = (int)li.out;
    v->clipped = g4_component_find(c, "encoder.layers.0.self_attn.q_proj.input_min") != NULL;
    v->rms_eps = first_norm_eps(c->model);
    return derive_vision_rope(c, v);
}

// --- audio tower ----------------------------------------------------------------------------

int g4_derive_audio_config(g4_package *p) {
    g4_audio_config *a = &p->audio;
    const g4_component *c = &p->comp[G4_COMP_AUDIO];
    const g4_value_info *in = g4_onnx_input(c->model, "input_features");
    if (!in || in->ndim != 3 || in->dims[2] <= 0)
        return g4_fail(G4_EUSER, "%s: graph input 'input_features' [batch, time, mel] is missing",
                       c->onnx_path);
    a->n_mel = (int)in->dims[2];
    if (p->has_audio_fe && p->audio_fe.feature_size != a->n_mel)
        return g4_fail(G4_EUSER,
                       "%s: input_features has %d mel bins, but the feature extractor makes %d",
                       c->onnx_path, a->n_mel, p->audio_fe.feature_size);
    const g4_tensor *c0 = g4_component_find(c, "encoder.subsample_conv_projection.conv0.weight");
    const g4_tensor *c1 = g4_component_find(c, "encoder.subsample_conv_projection.conv1.weight");
    if (!c0 || !c1 || c0->ndim != 4 || c1->ndim != 4 || c0->dims[1] != 1 ||
        c1->dims[1] != c0->dims[0] || c0->dims[2] != 3 || c0->dims[3] != 3 || c1->dims[2] != 3 ||
        c1->dims[3] != 3)
        return g4_fail(G4_EUSER,
                       "%s: subsample convs must be conv0 [c0, 1, 3, 3] and conv1 [c1, c0, 3, 3]",
                       c->onnx_path);
    a->conv0_ch = (int)c0->dims[0];
    a->conv1_ch = (int)c1->dims[0];
    int mel4 = ((a->n_mel - 1) / 2 + 1 - 1) / 2 + 1; // two 3x3 stride-2 pad-1 convs
    g4_linear_info li;
    int rc;
    if ((rc = need_linear(c, "encoder.subsample_conv_projection.input_proj_linear.weight_t", 0,
                          (int64_t)mel4 * a->conv1_ch, -1, &li)))
        return rc;
    a->hidden = (int)li.out;
    a->n_layers = count_layers(c, "encoder.layers.%d.self_attn.q_proj.weight_t");
    if (a->n_layers == 0) return g4_fail(G4_EUSER, "%s: no audio encoder layers", c->onnx_path);
    int64_t hd;
    if ((rc = need_vector(c, "encoder.layers.%d.self_attn.per_dim_scale", 0, -1, &hd))) return rc;
    if (hd <= 0 || a->hidden % hd)
        return g4_fail(G4_EUSER, "%s: per_dim_scale width %lld does not divide hidden %d",
                       c->onnx_path, (long long)hd, a->hidden);
    a->head_dim = (int)hd;
    a->n_heads = a->hidden / a->head_dim;
    if ((rc = need_linear(c, "encoder.layers.%d.feed_forward1.ffw_layer_1.weight_t", 0, a->hidden,
                          -1, &li)))
        return rc;
    a->ffn = (int)li.out;
    const g4_tensor *dw = g4_component_find(c, "encoder.layers.0.lconv1d.depthwise_conv1d.weight");
    if (!dw || dw->ndim != 3 || dw->dims[0] != a->hidden || dw->dims[1] != 1)
        return g4_fail(G4_EUSER, "%s: depthwise_conv1d.weight must be [%d, 1, kernel]",
                       c->onnx_path, a->hidden);
    a->conv_kernel = (int)dw->dims[2];
    const g4_tensor *pe = g4_component_find(c, "encoder.layers.0.self_attn.pos_embed");
    if (!pe || pe->ndim != 2 || pe->dims[1] != a->hidden)
        return g4_fail(G4_EUSER, "%s: self_attn.pos_embed must be [positions, %d]", c->onnx_path,
                       a->hidden);
    a->n_rel_pos = (int)pe->dims[0];
    for (int l = 0; l < a->n_layers; l++) {
        static const char *const sq[] = {
            "encoder.layers.%d.self_attn.q_proj.weight_t", "encoder.layers.%d.self_attn.k_proj.weight_t",
            "encoder.layers.%d.self_attn.v_proj.weight_t", "encoder.layers.%d.self_attn.post.weight_t",
            "encoder.layers.%d.self_attn.relative_k_proj.weight_t",
            "encoder.layers.%d.lconv1d.linear_end.weight_t"};
        for (int k = 0; k < 6; k++)
            if ((rc = need_linear(c, sq[k], l, a->hidden, a->hidden, &li))) return rc;
        if ((rc = need_linear(c, "encoder.layers.%d.lconv1d.linear_start.weight_t", l, a->hidden,
                              2 * (int64_t)a->hidden, &li)))
            return rc;
        for (int f = 1; f <= 2; f++) {
            char f1[96], f2[96];
            snprintf(f1, sizeof f1, "encoder.layers.%%d.feed_forward%d.ffw_layer_1.weight_t", f);
            snprintf(f2, sizeof f2, "encoder.layers.%%d.feed_forward%d.ffw_layer_2.weight_t", f);
            if ((rc = need_linear(c, f1, l, a->hidden, a->ffn, &li)) ||
                (rc = need_linear(c, f2, l, a->ffn, a->hidden, &li)))
                return rc;
        }
        if ((rc = need_vector(c, "encoder.layers.%d.self_attn.per_dim_scale", l, hd, NULL)))
            return rc;
    }
    if ((rc = need_linear(c, "encoder.output_proj.weight_t", 0, a->hidden, -1, &li))) return rc;
    a->out_hidden = (int)li.out;
    if ((rc = need_linear(c, "projector.weight_t", 0, a->out_hidden, p->text.hidden, &li)))
        return rc;
    a->out_dim = (int)li.out;
    a->rms_eps = first_norm_eps(c->model);

    // Attention block and band (see model_config.h): HF's chunk of 12 queries, and the band
    // from n_rel_pos = (chunk + band) / 2 + 1.
    a->chunk = 12;
    a->band = 2 * (a->n_rel_pos - 1) - a->chunk;
    if (a->band < 1 || a->band > 2 * a->chunk)
        return g4_fail(G4_EUSER,
                       "%s: self_attn.pos_embed has %d rows; with attention chunks of %d that "
                       "gives a band of %d keys, expected 1..%d",
                       c->onnx_path, a->n_rel_pos, a->chunk, a->band, 2 * a->chunk);
    a->invalid_logit = -1e9f;
    a->grad_clip = 1e10f;
    // The attention soft-cap: Tanh(x / c) * c (the first Tanh of the graph).
    a->logit_cap = 0.0f;
    for (int i = 0; i < c->model->n_nodes && a->logit_cap == 0.0f; i++) {
        const g4_node *n = &c->model->nodes[i];
        if (strcmp(n->op_type, "Tanh")) continue;
        const g4_node *pre = g4_onnx_producer(c->model, n->inputs[0]);
        double cap;
        if (pre && scalar_operand(c->model, pre, &cap) && cap > 0)
            a->logit_cap = strcmp(pre->op_type, "Div") == 0 ? (float)cap : (float)(1.0 / cap);
    }
    if (!(a->logit_cap > 0))
        return g4_fail(G4_EUSER, "%s: no attention logit soft-cap (Tanh of x / c) in the graph",
                       c->onnx_path);
    if (!multiplier_after_weight(c, "encoder.layers.0.feed_forward1.post_layer_norm.weight",
                                 &a->residual_weight) ||
        !(a->residual_weight > 0))
        return g4_fail(G4_EUSER,
                       "%s: cannot find the residual multiplier after "
                       "feed_forward1.post_layer_norm in the graph",
                       c->onnx_path);
    return G4_OK;
}

g4_placeholder g4_placeholder_of(const g4_text_config *c, int32_t id) {
    if (c->image_token_id >= 0 && id == c->image_token_id) return G4_PH_IMAGE;
    if (c->audio_token_id >= 0 && id == c->audio_token_id) return G4_PH_AUDIO;
    return G4_PH_NONE;
}

int32_t g4_fed_back_id(const g4_text_config *c, int32_t id) {
    return g4_placeholder_of(c, id) != G4_PH_NONE ? c->pad_id : id;
}
