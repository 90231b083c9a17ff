// text_model.c: bind the text weights of a package by name and place them on a backend.
#include "engine/text_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "quant/q4.h"

// The weights are bound through the one binder of engine/weights.h (dtype and exact shape
// checked, placed on the backend, released by g4_binder_free).
static int vec(g4_text_model *m, const g4_component *c, const char *name, int64_t n,
               const void **out) {
    g4_binder_component(&m->bind, c);
    return g4_bind_vec(&m->bind, name, n, out);
}

// A linear weight "<base>" ([in, out] fp16 "<base>.weight_t") or its Q4 MatMulNBits form.
static int linear(g4_text_model *m, const g4_component *c, const char *base, int in, int out,
                  g4_linear *w) {
    g4_binder_component(&m->bind, c);
    return g4_bind_linear(&m->bind, base, in, out, 0, NULL, w);
}

int g4_text_model_load(const g4_package *pkg, g4_backend *be, g4_text_model **out) {
    return g4_text_model_load_opts(pkg, be, NULL, out);
}

int g4_text_model_load_opts(const g4_package *pkg, g4_backend *be, const g4_text_load_opts *o,
                            g4_text_model **out) {
    *out = NULL;
    const g4_text_load_opts defaults = {0};
    if (!o) o = &defaults;
    if (o->ple_host && !be->alloc_mapped)
        return g4_fail(G4_EUSER, "%s: the per-layer embedding table in pinned host memory "
                                 "(--ple-host) needs a GPU backend, not %s",
                       pkg->dir, be->name);
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
    g4_binder_init(&m->bind, be, emb);
    const int H = cfg->hidden, L = cfg->n_layers, P = cfg->ple_dim;
    const g4_tensor *t;
    char nm[256];
#define NAME(fmt) (snprintf(nm, sizeof nm, fmt, l), nm)

    if ((rc = g4_get(emb, "embed_tokens.weight", G4_DT_FLOAT16, &t, cfg->vocab, H))) goto fail;
    m->embed_tokens = g4_binder_place(&m->bind, t->data, (size_t)t->nbytes, 2);
    if ((rc = g4_get(emb, "embed_tokens_per_layer.weight", G4_DT_FLOAT16, &t, cfg->vocab_ple,
                     (int64_t)L * P)))
        goto fail;
    if (o->ple_host) { // the kernels read the few rows a step needs in place
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
        m->embed_ple = g4_binder_place(&m->bind, t->data, (size_t)t->nbytes, 2);
    }
    if ((rc = linear(m, emb, "per_layer_model_projection", H, L * P, &m->ple_model_proj)) ||
        (rc = vec(m, emb, "per_layer_projection_norm.weight", P, &m->ple_proj_norm)) ||
        (rc = vec(m, dec, "model.norm.weight", H, &m->final_norm)) ||
        (rc = linear(m, dec, "lm_head", H, cfg->vocab, &m->lm_head)))
        goto fail;

    m->layers = g4_calloc((size_t)L, sizeof(g4_text_layer));
    // G4_QKV=0 at load: no q|k|v copies (their memory saved; every state then runs q, k, v apart)
    const int qkv = !g4_env_is("G4_QKV", "0");
    for (int l = 0; l < L; l++) {
        const g4_layer_config *lc = &cfg->layer[l];
        g4_text_layer *w = &m->layers[l];
        const int hd = lc->head_dim, qw = cfg->n_heads * hd, kvw = cfg->n_kv_heads * hd;
        if ((rc = linear(m, dec, NAME("model.layers.%d.self_attn.q_proj"), H, qw, &w->q)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.self_attn.o_proj"), qw, H, &w->o)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.mlp.gate_proj"), H, lc->ffn,
                         &w->gate)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.mlp.up_proj"), H, lc->ffn, &w->up)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.mlp.down_proj"), lc->ffn, H,
                         &w->down)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.per_layer_input_gate"), H, P,
                         &w->ple_gate)) ||
            (rc = linear(m, dec, NAME("model.layers.%d.per_layer_projection"), P, H,
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
            ((rc = linear(m, dec, NAME("model.layers.%d.self_attn.k_proj"), H, kvw,
                          &w->k)) ||
             (rc = linear(m, dec, NAME("model.layers.%d.self_attn.v_proj"), H, kvw,
                          &w->v)) ||
             (rc = vec(m, dec, NAME("model.layers.%d.self_attn.k_norm.weight"), hd, &w->k_norm))))
            goto fail;
        if (lc->kv_source == l && qkv) { // the decode's q|k|v (a copy; prefill reads q, k, v)
            char qn[96], kn[96], vn[96];
            snprintf(qn, sizeof qn, "model.layers.%d.self_attn.q_proj", l);
            snprintf(kn, sizeof kn, "model.layers.%d.self_attn.k_proj", l);
            snprintf(vn, sizeof vn, "model.layers.%d.self_attn.v_proj", l);
            const char *parts[3] = {qn, kn, vn};
            const int outs[3] = {qw, kvw, kvw};
            g4_binder_component(&m->bind, dec);
            if ((rc = g4_bind_linear_cat(&m->bind, parts, 3, H, outs, &w->qkv))) goto fail;
        }
    }
#undef NAME
    for (int r = 0; r < cfg->n_rope; r++)
        m->inv_freq[r] = g4_binder_place(&m->bind, cfg->rope[r].inv_freq,
                                         sizeof(float) * (size_t)cfg->rope[r].n_freq, 4);
    m->weight_bytes = m->bind.weight_bytes;
    if ((rc = g4_binder_oom(&m->bind, "text"))) goto fail;
    be->sync(be); // the uploads are complete before any state's queue reads the weights
    *out = m;
    return G4_OK;
fail:
    g4_text_model_free(m);
    return rc;
}

void g4_text_model_free(g4_text_model *m) {
    if (!m) return;
    g4_binder_free(&m->bind); // prepared linears and backend copies
    if (m->ple_mapped) m->be->free_mapped(m->be, m->ple_mapped);
    free(m->layers);
    free(m);
}
