// vision_tower.c: bind the vision encoder weights by name and run the tower (see
// vision_tower.h for the formulas and hook names).
#include "engine/vision_tower.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"

// The ops the tower calls beyond the text model's (a backend may not have them yet).
static int need_ops(const g4_backend *be) {
    if (be->rope_2d && be->attention_bidir && be->vision_posemb && be->vision_pool) return G4_OK;
    return g4_fail(G4_EUSER, "the %s backend does not implement the vision tower ops yet",
                   be->name);
}

int g4_vision_tower_load(const g4_package *pkg, g4_backend *be, g4_vision_tower **out) {
    *out = NULL;
    const g4_component *c = g4_package_component(pkg, G4_COMP_VISION);
    if (!c) return g4_fail(G4_EUSER, "%s: the package has no vision encoder", pkg->dir);
    if (!pkg->has_image_proc)
        return g4_fail(G4_EUSER, "%s: the package has no image_processor.json", pkg->dir);
    int rc = need_ops(be);
    if (rc) return rc;
    const g4_vision_config *cfg = &pkg->vision;
    if (be->check_vision &&
        (rc = be->check_vision(be, cfg, pkg->image_proc.pooling_kernel_size)))
        return rc;
    g4_vision_tower *t = g4_calloc(1, sizeof *t);
    t->pkg = pkg;
    t->cfg = cfg;
    t->be = be;
    t->pool_k = pkg->image_proc.pooling_kernel_size;
    t->text_hidden = cfg->out_dim;
    g4_binder_init(&t->w, be, c);
    g4_binder *b = &t->w;
    const int D = cfg->hidden, F = cfg->ffn, hd = cfg->head_dim;
    if (t->pool_k < 1) {
        rc = g4_fail(G4_EUSER, "%s: image_processor.json pooling_kernel_size %d, expected >= 1",
                     pkg->dir, t->pool_k);
        goto fail;
    }
    if ((rc = g4_bind_linear(b, "encoder.patch_embedder.input_proj", cfg->patch_dim, D, 0, NULL,
                             &t->patch_proj)) ||
        (rc = g4_bind_f16(b, "encoder.patch_embedder.position_embedding_table", 3,
                          G4_DIMS(2, cfg->pos_size, D), &t->pos_table)) ||
        (rc = g4_bind_linear(b, "projector", D, cfg->out_dim, 0, NULL, &t->projector)))
        goto fail;
    t->layers = g4_calloc((size_t)cfg->n_layers, sizeof(g4_vision_layer));
    for (int l = 0; l < cfg->n_layers; l++) {
        g4_vision_layer *w = &t->layers[l];
        char nm[128];
        static const char *const lin[7] = {
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
        g4_linear *dst[7] = {&w->q, &w->k, &w->v, &w->o, &w->gate, &w->up, &w->down};
        const int in[7] = {D, D, D, D, D, D, F}, outd[7] = {D, D, D, D, F, F, D};
        for (int i = 0; i < 7; i++) {
            snprintf(nm, sizeof nm, "encoder.layers.%d.%s", l, lin[i]);
            // HF use_clipped_linears: the package keeps the bounds exactly when it is set
            const int clipped = g4_has_clip_bounds(c, nm);
            if (clipped != cfg->clipped) {
                rc = g4_fail(G4_EUSER, "%s: '%s%s' %s clip bounds, unlike layer 0's q_proj",
                             c->onnx_path, c->prefix, nm, clipped ? "has" : "lacks");
                goto fail;
            }
            if ((rc = g4_bind_linear(b, nm, in[i], outd[i], clipped, NULL, dst[i]))) goto fail;
        }
        static const char *const norm[6] = {
            "input_layernorm",           "post_attention_layernorm",
            "pre_feedforward_layernorm", "post_feedforward_layernorm",
            "self_attn.q_norm",          "self_attn.k_norm"};
        const void **ndst[6] = {&w->input_norm,   &w->post_attn_norm, &w->pre_ff_norm,
                                &w->post_ff_norm, &w->q_norm,         &w->k_norm};
        for (int i = 0; i < 6; i++) {
            snprintf(nm, sizeof nm, "encoder.layers.%d.%s.weight", l, norm[i]);
            if ((rc = g4_bind_vec(b, nm, i < 4 ? D : hd, ndst[i]))) goto fail;
        }
    }
    t->inv_freq = g4_binder_place(b, cfg->rope_inv_freq, sizeof(float) * (size_t)cfg->rope_n_freq,
                                  sizeof(float));
    if ((rc = g4_binder_oom(b, "vision"))) goto fail;
    *out = t;
    return G4_OK;
fail:
    g4_vision_tower_free(t);
    return rc;
}

void g4_vision_tower_free(g4_vision_tower *t) {
    if (!t) return;
    g4_tower_ws_free(t->be, &t->ws);
    g4_binder_free(&t->w);
    free(t->layers);
    free(t);
}

int g4_vision_tower_forward(g4_vision_tower *t, const g4_image_features *f, float *soft_out,
                            g4_tower_hook hook, void *hook_ctx) {
    g4_buf out = g4_buf_new(t->be, G4_F32, f->n_soft_tokens, t->text_hidden);
    if (!out.data)
        return g4_fail(G4_EUSER, "%s backend out of memory for %d soft tokens", t->be->name,
                       f->n_soft_tokens);
    int rc = g4_vision_tower_run(t, NULL, f, &out, hook, hook_ctx);
    if (!rc) t->be->download(t->be, soft_out, out.data, g4_buf_bytes(&out));
    g4_buf_free(t->be, &out);
    return rc;
}

int g4_vision_tower_run(g4_vision_tower *t, g4_backend *ex, const g4_image_features *f,
                        g4_buf *out, g4_tower_hook hook, void *hook_ctx) {
    const g4_vision_config *c = t->cfg;
    g4_backend *be = ex ? ex : t->be;
    const int N = f->n_patches, D = c->hidden, hd = c->head_dim, nh = c->n_heads, k = t->pool_k;
    if (f->patch_dim != c->patch_dim)
        return g4_fail(G4_EUSER, "image patches of %d values, but the vision encoder takes %d",
                       f->patch_dim, c->patch_dim);
    if (N < 1 || f->grid_w % k || f->grid_h % k || f->grid_w * f->grid_h != N)
        return g4_fail(G4_EUSER,
                       "image patch grid %d x %d (%d patches): expected a non-empty grid with "
                       "sides that are multiples of the pooling kernel %d",
                       f->grid_w, f->grid_h, N, k);
    if (f->grid_w > c->pos_size || f->grid_h > c->pos_size)
        return g4_fail(G4_EUSER,
                       "image patch grid %d x %d (w x h) exceeds the vision position table of "
                       "%d positions per axis (the image is too long and thin for this model)",
                       f->grid_w, f->grid_h, c->pos_size);
    const int n_soft = (f->grid_w / k) * (f->grid_h / k);
    for (int i = 0; i < N; i++) {
        const int32_t x = f->position_ids[2 * i], y = f->position_ids[2 * i + 1];
        if (x < 0 || y < 0 || x >= f->grid_w || y >= f->grid_h)
            return g4_fail(G4_EUSER, "image patch %d at (%d, %d) is outside its %d x %d grid", i, x,
                           y, f->grid_w, f->grid_h);
    }
    if (n_soft != f->n_soft_tokens)
        return g4_fail(G4_EINTERNAL, "image front end reports %d soft tokens, the grid gives %d",
                       f->n_soft_tokens, n_soft);
    if (out->type != G4_F32 || out->rows != n_soft || out->cols != t->text_hidden || !out->data)
        return g4_fail(G4_EINTERNAL, "vision tower output: expected f32 [%d, %d], got %s [%d, %d]",
                       n_soft, t->text_hidden, g4_type_name(out->type), out->rows, out->cols);

    // Buffers for this image ([N, .] activations, [n_soft, .] pooled): the tower's kept ones
    // (allocated through its root handle: they outlive ex's queue).
    const g4_type at = be->act_type;
    const g4_ws_shape shape[] = {
        {G4_F32, N, c->patch_dim}, {at, N, c->patch_dim}, {G4_I32, N, 2},  {G4_F32, N, D},
        {at, N, D},                {at, N, D},            {at, N, D},      {at, N, D},
        {at, N, D},                {at, N, D},            {at, N, c->ffn}, {G4_F32, n_soft, D},
        {at, n_soft, D},           {at, n_soft, t->text_hidden}};
    enum { NB = sizeof shape / sizeof shape[0] };
    g4_buf vw[NB];
    g4_tower_ws own = {0};
    const size_t pix_bytes = sizeof(float) * (size_t)N * c->patch_dim;
    g4_tower_ws *ws = g4_tower_ws_take(t->be, &t->ws, &own, shape, NB, pix_bytes, vw);
    if (!ws)
        return g4_fail(G4_EUSER, "%s backend out of memory for the vision tower on %d patches",
                       be->name, N);
    g4_buf pix32 = vw[0], pix = vw[1], pos = vw[2], h = vw[3], x = vw[4], o = vw[5], q = vw[6],
           kk = vw[7], v = vw[8], attn = vw[9], mlp = vw[10], pooled = vw[11],
           pooled_a = vw[12], soft = vw[13];

    // Patch embedding: the model's own 2 (p - 0.5) (HF does it in fp32 before input_proj),
    // staged in pinned memory where the backend has it (one fast copy).
    float *p = ws->host;
    for (size_t i = 0; i < (size_t)N * c->patch_dim; i++) p[i] = 2.0f * (f->pixel_values[i] - 0.5f);
    be->upload(be, pix32.data, p, g4_buf_bytes(&pix32));
    be->upload(be, pos.data, f->position_ids, g4_buf_bytes(&pos));
    be->convert(be, &pix, &pix32);
    be->linear(be, &x, &pix, &t->patch_proj, 0);
    be->convert(be, &h, &x);
    be->vision_posemb(be, &h, t->pos_table, c->pos_size, &pos);
    g4_tower_emit(hook, hook_ctx, be, "vision_patch_embeds", -1, &h);

    // Each post-norm residual add also makes the next block's normed input in the same pass
    // (add_rmsnorm_next): x = rmsnorm(h) * pre_ff_norm after attention, * the next layer's
    // input_norm after the MLP; only layer 0's input norm stands alone.
    be->rmsnorm(be, &x, &h, t->layers[0].input_norm, D, c->rms_eps);
    for (int l = 0; l < c->n_layers; l++) {
        const g4_vision_layer *w = &t->layers[l];
        // Attention block: q/k normed per head and rotated, v normed without weight, scale 1.
        be->linear(be, &q, &x, &w->q, 0);
        be->rmsnorm(be, &q, &q, w->q_norm, hd, c->rms_eps);
        be->rope_2d(be, &q, nh, hd, &pos, t->inv_freq);
        be->linear(be, &kk, &x, &w->k, 0);
        be->rmsnorm(be, &kk, &kk, w->k_norm, hd, c->rms_eps);
        be->rope_2d(be, &kk, nh, hd, &pos, t->inv_freq);
        be->linear(be, &v, &x, &w->v, 0);
        be->rmsnorm(be, &v, &v, NULL, hd, c->rms_eps);
        be->attention_bidir(be, &attn, &q, &kk, &v, nh, hd, 1.0f);
        be->linear(be, &o, &attn, &w->o, 0);
        be->add_rmsnorm_next(be, &h, &o, w->post_attn_norm, c->rms_eps, NULL, &x, 1,
                             w->pre_ff_norm);
        // MLP block: down(gelu_tanh(gate x) * up x).
        be->linear_gelu_mul(be, &mlp, &x, &w->gate, &w->up);
        be->linear(be, &o, &mlp, &w->down, 0);
        if (l + 1 < c->n_layers)
            be->add_rmsnorm_next(be, &h, &o, w->post_ff_norm, c->rms_eps, NULL, &x, 1,
                                 t->layers[l + 1].input_norm);
        else
            be->add_rmsnorm(be, &h, &o, w->post_ff_norm, c->rms_eps, NULL);
        g4_tower_emit(hook, hook_ctx, be, "vision_layer", l, &h);
    }

    // Pool k x k patches per soft token, scale by sqrt(D) (HF: fp32 math, python float scale),
    // weightless RMSNorm, project to the text width.
    be->vision_pool(be, &pooled, &h, &pos, k, (float)sqrt((double)D));
    g4_tower_emit(hook, hook_ctx, be, "vision_pooled", -1, &pooled);
    be->rmsnorm(be, &pooled_a, &pooled, NULL, D, c->rms_eps);
    be->linear(be, &soft, &pooled_a, &t->projector, 0);
    be->convert(be, out, &soft);
    g4_tower_emit(hook, hook_ctx, be, "vision_soft_tokens", -1, out);
    be->sync(be); // (the caller's next work may be on another queue)

    g4_tower_ws_done(t->be, &t->ws, ws);
    return G4_OK;
}
