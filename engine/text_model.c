// text_model.c: bind the text weights of a package by name and place them on a backend.
#include "engine/text_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "quant/q4.h"

// Bytes of a linear as the package stores it (weight, Q4 scales and zero points, bias).
static uint64_t g4_linear_bytes(const g4_linear *w) {
    uint64_t b = w->bias ? (uint64_t)w->out * 2 : 0;
    if (w->kind == G4_W_F16) return b + (uint64_t)w->in * w->out * 2;
    const uint64_t kb = (uint64_t)(w->in + w->block - 1) / w->block;
    return b + (uint64_t)w->out * (kb * (uint64_t)(w->block / 2) + kb * 2 + (kb + 1) / 2);
}

// Keeps a backend allocation for g4_text_model_free.
static void *own(g4_text_model *m, size_t bytes) {
    void *p = m->be->alloc(m->be, bytes);
    if (!p) return NULL;
    m->owned = g4_realloc(m->owned, sizeof(void *) * (size_t)(m->n_owned + 1));
    m->owned[m->n_owned++] = p;
    return p;
}

// Places host bytes on the backend: in place when the backend computes in host memory and the
// data is aligned for its element type, otherwise a copy (aligned, or on the device).
static const void *place(g4_text_model *m, const void *data, size_t bytes, size_t align) {
    m->weight_bytes += bytes;
    if (m->be->host_memory && ((uintptr_t)data % align) == 0) return data;
    void *p = own(m, bytes);
    if (!p) {
        m->oom_bytes += bytes;
        return NULL;
    }
    m->be->upload(m->be, p, data, bytes);
    return p;
}

static int vec(g4_text_model *m, const g4_component *c, const char *name, int64_t n,
               const void **out) {
    const g4_tensor *t;
    int rc = g4_get(c, name, G4_DT_FLOAT16, &t, n);
    if (rc) return rc;
    *out = place(m, t->data, (size_t)t->nbytes, 2);
    return G4_OK;
}

// A linear weight "<name>" ([in, out] fp16 "..._t") or its Q4 MatMulNBits form, placed on the
// backend (bias and Q4 scales / zero points too).
static int linear(g4_text_model *m, const g4_component *c, const char *name, int in, int out,
                  g4_linear *w) {
    int rc = g4_linear_get(c, name, in, out, w);
    if (rc) return rc;
    if (m->be->prepare_linear) { // the backend lays it out itself (device copy, Q4 repack)
        m->weight_bytes += g4_linear_bytes(w);
        if ((rc = m->be->prepare_linear(m->be, w))) {
            g4_error_prefix("%s: '%s'", c->onnx_path, name);
            return rc;
        }
        return G4_OK;
    }
    if (w->kind == G4_W_F16) {
        w->w = place(m, w->w, (size_t)in * out * 2, 2);
    } else {
        const size_t kb = (size_t)(in + w->block - 1) / w->block;
        w->w = place(m, w->w, (size_t)out * kb * (size_t)(w->block / 2), 1);
        w->scales = place(m, w->scales, (size_t)out * kb * 2, 2);
        if (w->zp) w->zp = place(m, w->zp, (size_t)out * ((kb + 1) / 2), 1);
    }
    if (w->bias) w->bias = place(m, w->bias, (size_t)out * 2, 2);
    return G4_OK;
}

int g4_text_model_load(const g4_package *pkg, g4_backend *be, g4_text_model **out) {
    *out = NULL;
    const g4_text_config *cfg = &pkg->text;
    const g4_component *dec = g4_package_component(pkg, G4_COMP_DECODER);
    const g4_component *emb = g4_package_component(pkg, G4_COMP_EMBEDDING);
    G4_ASSERT(dec && emb); // g4_package_open requires both
    int rc;
    if (be->check_text && (rc = be->check_text(be, cfg))) return rc;
    g4_text_model *m = g4_calloc(1, sizeof *m);
    m->pkg = pkg;
    m->cfg = cfg;
    m->be = be;
    const int H = cfg->hidden, L = cfg->n_layers, P = cfg->ple_dim;
    const g4_tensor *t;
    char nm[256];
#define NAME(fmt) (snprintf(nm, sizeof nm, fmt, l), nm)

    if ((rc = g4_get(emb, "embed_tokens.weight", G4_DT_FLOAT16, &t, cfg->vocab, H))) goto fail;
    m->embed_tokens = place(m, t->data, (size_t)t->nbytes, 2);
    if ((rc = g4_get(emb, "embed_tokens_per_layer.weight", G4_DT_FLOAT16, &t, cfg->vocab_ple,
                     (int64_t)L * P)))
        goto fail;
    if (be->ple_host && be->alloc_mapped) { // the kernels read the few rows a step needs in place
        void *hp = be->alloc_mapped(be, (size_t)t->nbytes);
        if (!hp) {
            rc = g4_fail(G4_EUSER, "%s: cannot pin %llu bytes of host memory for "
                                   "embed_tokens_per_layer.weight (--ple-host)",
                         emb->onnx_path, (unsigned long long)t->nbytes);
            goto fail;
        }
        memcpy(hp, t->data, (size_t)t->nbytes);
        m->embed_ple = m->ple_mapped = hp;
        m->host_bytes += (uint64_t)t->nbytes;
    } else {
        m->embed_ple = place(m, t->data, (size_t)t->nbytes, 2);
    }
    if ((rc = linear(m, emb, "per_layer_model_projection.weight_t", H, L * P, &m->ple_model_proj)) ||
        (rc = vec(m, emb, "per_layer_projection_norm.weight", P, &m->ple_proj_norm)) ||
        (rc = vec(m, dec, "model.norm.weight", H, &m->final_norm)) ||
        (rc = linear(m, dec, "lm_head.weight_t", H, cfg->vocab, &m->lm_head)))
        goto fail;

    m->layers = g4_calloc((size_t)L, sizeof(g4_text_layer));
    for (int l = 0; l < L; l++) {
        const g4_layer_config *lc = &cfg->layer[l];
        g4_text_layer *w = &m->layers[l];
        const int hd = lc->head_dim, qw = cfg->n_heads * hd, kvw = cfg->n_kv_heads * hd;
        if ((rc = linear(m, dec, NAME("model.layers.%d.self_attn.q_proj.weight_t"), H, qw, &w->q)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.self_attn.o_proj.weight_t"), qw, H, &w->o)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.mlp.gate_proj.weight_t"), H, lc->ffn,
                         &w->gate)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.mlp.up_proj.weight_t"), H, lc->ffn, &w->up)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.mlp.down_proj.weight_t"), lc->ffn, H,
                         &w->down)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.per_layer_input_gate.weight_t"), H, P,
                         &w->ple_gate)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.per_layer_projection.weight_t"), P, H,
                         &w->ple_proj)) ||
            (rc = vec(m, dec, NAME("model.layers.%d.input_layernorm.weight"), H, &w->input_norm)) ||
            (rc = vec(m, dec, NAME("model.layers.%d.post_attention_layernorm.weight"), H,
                      &w->post_attn_norm)) ||
            (rc = vec(m, dec, NAME("model.layers.%d.pre_feedforward_layernorm.weight"), H,
                      &w->pre_ff_norm)) ||
            (rc = vec(m, dec, NAME("model.layers.%d.post_feedforward_layernorm.weight"), H,
                      &w->post_ff_norm)) ||
            (rc = vec(m, dec, NAME("model.layers.%d.post_per_layer_input_norm.weight"), H,
                      &w->post_ple_norm)) ||
            (rc = vec(m, dec, NAME("model.layers.%d.self_attn.q_norm.weight"), hd, &w->q_norm)) ||
            (rc = vec(m, dec, NAME("model.layers.%d.layer_scalar"), 1, &w->layer_scalar)))
            goto fail;
        if (lc->kv_source == l &&
            ((rc = linear(m, dec, NAME("model.layers.%d.self_attn.k_proj.weight_t"), H, kvw,
                          &w->k)) ||
             (rc = linear(m, dec, NAME("model.layers.%d.self_attn.v_proj.weight_t"), H, kvw,
                          &w->v)) ||
             (rc = vec(m, dec, NAME("model.layers.%d.self_attn.k_norm.weight"), hd, &w->k_norm))))
            goto fail;
    }
#undef NAME
    for (int r = 0; r < cfg->n_rope; r++)
        m->inv_freq[r] = place(m, cfg->rope[r].inv_freq, sizeof(float) * (size_t)cfg->rope[r].n_freq,
                               4);
    if (m->oom_bytes) {
        rc = g4_fail(G4_EUSER, "%s: %s backend out of memory: %llu of %llu bytes of text weights "
                               "did not fit",
                     pkg->dir, be->name, (unsigned long long)m->oom_bytes,
                     (unsigned long long)m->weight_bytes);
        goto fail;
    }
    *out = m;
    return G4_OK;
fail:
    g4_text_model_free(m);
    return rc;
}

// Every linear of the model (for release_linear).
static int all_linears(g4_text_model *m, g4_linear **out, int max) {
    int n = 0;
    out[n++] = &m->ple_model_proj;
    out[n++] = &m->lm_head;
    for (int l = 0; m->layers && l < m->cfg->n_layers && n + 9 <= max; l++) {
        g4_text_layer *w = &m->layers[l];
        g4_linear *ls[] = {&w->q, &w->k, &w->v, &w->o, &w->gate, &w->up, &w->down, &w->ple_gate,
                           &w->ple_proj};
        for (int i = 0; i < 9; i++) out[n++] = ls[i];
    }
    return n;
}

void g4_text_model_free(g4_text_model *m) {
    if (!m) return;
    if (m->be->release_linear) {
        int max = 2 + 9 * m->cfg->n_layers;
        g4_linear **ls = g4_malloc(sizeof(g4_linear *) * (size_t)max);
        int n = all_linears(m, ls, max);
        for (int i = 0; i < n; i++)
            if (ls[i]->w || ls[i]->packed) m->be->release_linear(m->be, ls[i]);
        free(ls);
    }
    for (int i = 0; i < m->n_owned; i++) m->be->free(m->be, m->owned[i]);
    if (m->ple_mapped) m->be->free_mapped(m->be, m->ple_mapped);
    free(m->owned);
    free(m->layers);
    free(m);
}
