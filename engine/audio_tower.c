// audio_tower.c: bind the audio encoder weights by name and run the conformer (see
// audio_tower.h for the formulas and hook names).
#include "engine/audio_tower.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static int need_ops(const g4_backend *be) {
    if (be->clamp && be->silu && be->glu && be->sscp_conv && be->dwconv1d_causal &&
        be->audio_attention)
        return G4_OK;
    return g4_fail(G4_EUSER, "the %s backend does not implement the audio tower ops yet", be->name);
}

// HF Gemma4AudioRelPositionalEncoding in fp32 (as the float32 model computes it): row d of
// out [n, A] is [sin(d * ts_i), cos(d * ts_i)], i < A/2, ts_i = exp(-i ln(1e4) / max(A/2 - 1,
// 1)), for distance d = 0..n-1 (HF lists the same rows from distance n-1 down to 0).
static void rel_sinusoid(float *out, int n, int A) {
    const int half = A / 2;
    const float step = (float)-(log(10000.0) / (half - 1 > 1 ? half - 1 : 1));
    for (int d = 0; d < n; d++)
        for (int i = 0; i < half; i++) {
            const float ts = expf((float)i * step); // torch: float32 arange x float32 scalar
            const float ang = (float)d * ts;
            out[(size_t)d * A + i] = sinf(ang);
            out[(size_t)d * A + half + i] = cosf(ang);
        }
}

// The package's pos_embed [n_rel, A] must be that sinusoid in HF's row order (distance
// n_rel - 1 - row), rounded to its dtype: otherwise it is a different encoding.
static int check_pos_embed(const g4_component *c, const g4_audio_config *a, const float *sin_tab) {
    const g4_tensor *pe = g4_component_find(c, "encoder.layers.0.self_attn.pos_embed");
    if (!pe || pe->ndim != 2 || pe->dims[0] != a->n_rel_pos || pe->dims[1] != a->hidden ||
        g4_dtype_bits(pe->dtype) < 16)
        return g4_fail(G4_EUSER, "%s: self_attn.pos_embed must be float [%d, %d]", c->onnx_path,
                       a->n_rel_pos, a->hidden);
    for (int r = 0; r < a->n_rel_pos; r++)
        for (int j = 0; j < a->hidden; j++) {
            const double got = g4_tensor_get(pe, (uint64_t)r * a->hidden + j);
            const double want = sin_tab[(size_t)(a->n_rel_pos - 1 - r) * a->hidden + j];
            if (fabs(got - want) > 1e-3) // fp16 rounding of |v| <= 1: <= 2^-11
                return g4_fail(G4_EUSER,
                               "%s: self_attn.pos_embed[%d][%d] = %g, expected the relative "
                               "position sinusoid of distance %d (%g)",
                               c->onnx_path, r, j, got, a->n_rel_pos - 1 - r, want);
        }
    return G4_OK;
}

// The largest finite value of an activation type (HF clamps to min(1e10, finfo(dtype).max)).
static float type_max(g4_type t) {
    switch (t) {
    case G4_F16:
        return 65504.0f;
    case G4_BF16:
        return 3.3895313892515355e38f;
    default:
        return FLT_MAX;
    }
}

// A conformer linear: clipped exactly when the package kept HF's bounds for it.
static int conformer_linear(g4_binder *b, const char *base, int in, int out, g4_linear *w) {
    return g4_bind_linear(b, base, in, out, g4_has_clip_bounds(b->c, base), NULL, w);
}

int g4_audio_tower_load(const g4_package *pkg, g4_backend *be, g4_audio_tower **out) {
    *out = NULL;
    const g4_component *c = g4_package_component(pkg, G4_COMP_AUDIO);
    if (!c) return g4_fail(G4_EUSER, "%s: the package has no audio encoder", pkg->dir);
    int rc = need_ops(be);
    if (rc) return rc;
    const g4_audio_config *cfg = &pkg->audio;
    if (be->check_audio && (rc = be->check_audio(be, cfg))) return rc;
    g4_audio_tower *t = g4_calloc(1, sizeof *t);
    t->pkg = pkg;
    t->cfg = cfg;
    t->be = be;
    t->text_hidden = cfg->out_dim;
    t->clip = cfg->grad_clip < type_max(be->act_type) ? cfg->grad_clip : type_max(be->act_type);
    g4_binder_init(&t->w, be, c);
    g4_binder *b = &t->w;
    const int A = cfg->hidden, F = cfg->ffn, hd = cfg->head_dim, K = cfg->conv_kernel;
    const int C0 = cfg->conv0_ch, C1 = cfg->conv1_ch;
    const int mel4 = ((cfg->n_mel + 1) / 2 + 1) / 2;
    float *sin_tab = g4_malloc(sizeof(float) * (size_t)cfg->n_rel_pos * A);
    float *pds = g4_malloc(sizeof(float) * (size_t)hd);
    g4_buf sin32 = {0}, sin_a = {0};
    char nm[160];
    if ((rc = g4_bind_f16(b, "encoder.subsample_conv_projection.conv0.weight", 4,
                          G4_DIMS(C0, 1, 3, 3), &t->conv0_w)) ||
        (rc = g4_bind_f16(b, "encoder.subsample_conv_projection.conv1.weight", 4,
                          G4_DIMS(C1, C0, 3, 3), &t->conv1_w)) ||
        (rc = g4_bind_vec(b, "encoder.subsample_conv_projection.norm0.weight", C0, &t->norm0_w)) ||
        (rc = g4_bind_vec(b, "encoder.subsample_conv_projection.norm1.weight", C1, &t->norm1_w)) ||
        (rc = g4_bind_linear(b, "encoder.subsample_conv_projection.input_proj_linear", mel4 * C1, A,
                             0, NULL, &t->input_proj)) ||
        (rc = g4_bind_linear(b, "encoder.output_proj", A, cfg->out_hidden, 0,
                             "encoder.output_proj.bias", &t->output_proj)) ||
        (rc =
             g4_bind_linear(b, "projector", cfg->out_hidden, cfg->out_dim, 0, NULL, &t->projector)))
        goto done;
    rel_sinusoid(sin_tab, cfg->n_rel_pos, A);
    if ((rc = check_pos_embed(c, cfg, sin_tab))) goto done;
    // The sinusoid rows of distances 0 .. band-1, on the backend in the activation type.
    sin32 = g4_buf_new(be, G4_F32, cfg->band, A);
    sin_a = g4_buf_new(be, be->act_type, cfg->band, A);
    if (!sin32.data || !sin_a.data) {
        rc = g4_fail(G4_EUSER, "%s backend out of memory for the audio position table", be->name);
        goto done;
    }
    be->upload(be, sin32.data, sin_tab, g4_buf_bytes(&sin32));
    be->convert(be, &sin_a, &sin32);

    t->layers = g4_calloc((size_t)cfg->n_layers, sizeof(g4_audio_layer));
    for (int l = 0; l < cfg->n_layers; l++) {
        g4_audio_layer *w = &t->layers[l];
#define NM(fmt)                (snprintf(nm, sizeof nm, "encoder.layers.%d." fmt, l), nm)
#define LIN(fmt, in, out, dst) conformer_linear(b, NM(fmt), in, out, dst)
        for (int f = 0; f < 2; f++) {
            char n1[128], n2[128], n3[128], n4[128];
            snprintf(n1, sizeof n1, "encoder.layers.%d.feed_forward%d.ffw_layer_1", l, f + 1);
            snprintf(n2, sizeof n2, "encoder.layers.%d.feed_forward%d.ffw_layer_2", l, f + 1);
            snprintf(n3, sizeof n3, "encoder.layers.%d.feed_forward%d.pre_layer_norm.weight", l,
                     f + 1);
            snprintf(n4, sizeof n4, "encoder.layers.%d.feed_forward%d.post_layer_norm.weight", l,
                     f + 1);
            if ((rc = conformer_linear(b, n1, A, F, &w->ffn_1[f])) ||
                (rc = conformer_linear(b, n2, F, A, &w->ffn_2[f])) ||
                (rc = g4_bind_vec(b, n3, A, &w->ffn_pre[f])) ||
                (rc = g4_bind_vec(b, n4, A, &w->ffn_post[f])))
                goto done;
        }
        if ((rc = LIN("self_attn.q_proj", A, A, &w->q)) ||
            (rc = LIN("self_attn.k_proj", A, A, &w->k)) ||
            (rc = LIN("self_attn.v_proj", A, A, &w->v)) ||
            (rc = LIN("self_attn.post", A, A, &w->post)) ||
            (rc = g4_bind_linear(b, NM("self_attn.relative_k_proj"), A, A, 0, NULL, &w->rel_k)) ||
            (rc = LIN("lconv1d.linear_start", A, 2 * A, &w->lin_start)) ||
            (rc = LIN("lconv1d.linear_end", A, A, &w->lin_end)) ||
            (rc = g4_bind_f16(b, NM("lconv1d.depthwise_conv1d.weight"), 3, G4_DIMS(A, 1, K),
                              &w->dw)) ||
            (rc = g4_bind_vec(b, NM("lconv1d.pre_layer_norm.weight"), A, &w->conv_pre_norm)) ||
            (rc = g4_bind_vec(b, NM("lconv1d.conv_norm.weight"), A, &w->conv_norm)) ||
            (rc = g4_bind_vec(b, NM("norm_pre_attn.weight"), A, &w->norm_pre_attn)) ||
            (rc = g4_bind_vec(b, NM("norm_post_attn.weight"), A, &w->norm_post_attn)) ||
            (rc = g4_bind_vec(b, NM("norm_out.weight"), A, &w->norm_out)))
            goto done;
        if (w->q.clipped != w->post.clipped || w->q.clipped != w->ffn_1[0].clipped) {
            rc = g4_fail(G4_EUSER,
                         "%s: layer %d: some conformer linears have clip bounds and some not "
                         "(HF use_clipped_linears applies to all)",
                         c->onnx_path, l);
            goto done;
        }
#undef LIN
        // per_dim_scale as float; the relative keys rel_k(sinusoid(d)) once, at load.
        const g4_tensor *ps;
        if ((rc = g4_get(c, NM("self_attn.per_dim_scale"), G4_DT_FLOAT16, &ps, hd))) goto done;
        for (int i = 0; i < hd; i++) pds[i] = (float)g4_tensor_get(ps, (uint64_t)i);
        float *pd = g4_binder_alloc(b, sizeof(float) * (size_t)hd);
        if (pd) be->upload(be, pd, pds, sizeof(float) * (size_t)hd);
        w->per_dim_scale = pd;
        w->rel = (g4_buf){NULL, be->act_type, cfg->band, A};
        w->rel.data = g4_binder_alloc(b, g4_buf_bytes(&w->rel));
        if ((rc = g4_binder_oom(b, "audio"))) goto done;
        be->linear(be, &w->rel, &sin_a, &w->rel_k, 0);
#undef NM
    }
    be->sync(be);
    rc = g4_binder_oom(b, "audio");
done:
    g4_buf_free(be, &sin32);
    g4_buf_free(be, &sin_a);
    free(sin_tab);
    free(pds);
    if (rc) {
        g4_audio_tower_free(t);
        return rc;
    }
    *out = t;
    return G4_OK;
}

void g4_audio_tower_free(g4_audio_tower *t) {
    if (!t) return;
    g4_tower_ws_free(t->be, &t->ws);
    g4_binder_free(&t->w);
    free(t->layers);
    free(t);
}

// Every 2nd entry of a 0/1 mask of n: HF's mask[:, ::2] after each stride-2 conv.
static int32_t *mask_half(const int32_t *m, int n, int *n_out) {
    *n_out = (n + 1) / 2;
    int32_t *o = g4_malloc(sizeof(int32_t) * (size_t)(*n_out) + 1);
    for (int i = 0; i < *n_out; i++) o[i] = m[2 * i];
    return o;
}

// FFN half step: h += residual_weight * post_norm(clip(ffw2(silu(ffw1(pre_norm(clip h)))))).
// be: the handle the clip runs on (the caller's queue), never t->be: an op on the root handle's
// stream would race the rest of the clip on the state's (the thirty-sixth session's bug).
static void ffn(g4_audio_tower *t, g4_backend *be, const g4_audio_layer *w, int f, g4_buf *h,
                g4_buf *x, g4_buf *big, g4_buf *y) {
    const g4_audio_config *c = t->cfg;
    be->convert(be, x, h);
    be->clamp(be, x, -t->clip, t->clip);
    be->rmsnorm(be, x, x, w->ffn_pre[f], c->hidden, c->rms_eps);
    be->linear(be, big, x, &w->ffn_1[f], 0);
    be->silu(be, big, big);
    be->linear(be, y, big, &w->ffn_2[f], 0);
    be->clamp(be, y, -t->clip, t->clip);
    be->rmsnorm(be, y, y, w->ffn_post[f], c->hidden, c->rms_eps);
    be->scale(be, y, c->residual_weight);
    be->add(be, h, y);
}

int g4_audio_tower_forward(g4_audio_tower *t, const g4_audio_features *f, float *soft_out,
                           g4_tower_hook hook, void *hook_ctx) {
    g4_buf out = g4_buf_new(t->be, G4_F32, f->n_soft_tokens, t->text_hidden);
    if (!out.data)
        return g4_fail(G4_EUSER, "%s backend out of memory for %d soft tokens", t->be->name,
                       f->n_soft_tokens);
    int rc = g4_audio_tower_run(t, NULL, f, &out, hook, hook_ctx);
    if (!rc) t->be->download(t->be, soft_out, out.data, g4_buf_bytes(&out));
    g4_buf_free(t->be, &out);
    return rc;
}

int g4_audio_tower_run(g4_audio_tower *t, g4_backend *ex, const g4_audio_features *f,
                       g4_buf *out, g4_tower_hook hook, void *hook_ctx) {
    const g4_audio_config *c = t->cfg;
    g4_backend *be = ex ? ex : t->be;
    const int T = f->n_frames, M = f->n_mel, A = c->hidden, C0 = c->conv0_ch, C1 = c->conv1_ch;
    if (M != c->n_mel)
        return g4_fail(G4_EUSER, "audio features have %d mel bins, the audio encoder takes %d", M,
                       c->n_mel);
    if (T < 1) return g4_fail(G4_EUSER, "audio features have no frames");
    const int T1 = (T + 1) / 2, M1 = (M + 1) / 2, T2 = (T1 + 1) / 2, M2 = (M1 + 1) / 2;
    G4_ASSERT(M2 * C1 == t->input_proj.in);

    // Masks: the frame mask, then [::2] after each conv (the output mask picks the soft tokens).
    int32_t *m0 = g4_malloc(sizeof(int32_t) * (size_t)T), *m1, *m2;
    for (int i = 0; i < T; i++) m0[i] = f->mask[i] != 0;
    int n1, n2, n_valid = 0;
    m1 = mask_half(m0, T, &n1);
    m2 = mask_half(m1, n1, &n2);
    G4_ASSERT(n1 == T1 && n2 == T2);
    for (int i = 0; i < T2; i++) n_valid += m2[i];
    if (n_valid != f->n_soft_tokens) {
        free(m0), free(m1), free(m2);
        return g4_fail(G4_EINTERNAL,
                       "audio front end reports %d soft tokens, the subsampled mask gives %d",
                       f->n_soft_tokens, n_valid);
    }
    if (out->type != G4_F32 || out->rows != n_valid || out->cols != t->text_hidden ||
        (n_valid && !out->data)) {
        free(m0), free(m1), free(m2);
        return g4_fail(G4_EINTERNAL, "audio tower output: expected f32 [%d, %d], got %s [%d, %d]",
                       n_valid, t->text_hidden, g4_type_name(out->type), out->rows, out->cols);
    }

    // Buffers for this clip: the tower's kept ones (allocated through its root handle: they
    // outlive ex's queue), the features staged in pinned memory where the backend has it.
    const g4_type at = be->act_type;
    const int wide = c->ffn > 2 * A ? c->ffn : 2 * A;
    const g4_ws_shape shape[] = {
        {G4_F32, T * M, 1}, // feat32: conv0 reads f32 (CUDA rounds it to f16)
        {G4_I32, T, 1},          {G4_I32, T1, 1},     {G4_I32, T2, 1},          // v0, v1, vout
        {at, T1 * M1, C0},       {at, T2 * M2, C1},                             // y0, y1
        {G4_F32, T2, A},                                                        // h: residual
        {at, T2, A},             {at, T2, A},         {at, T2, A},              // x, y, q
        {at, T2, A},             {at, T2, A},         {at, T2, A},              // k, v, attn
        {at, T2, wide},          {at, T2, c->out_hidden},                       // big, outp
        {at, T2, t->text_hidden}, {G4_F32, T2, t->text_hidden},                 // soft, soft32
        {G4_I32, n_valid, 1}}; // keep: the valid frames' rows of soft32
    enum { NB = sizeof shape / sizeof shape[0] };
    g4_buf vw[NB];
    g4_tower_ws own = {0};
    const size_t feat_bytes = sizeof(float) * (size_t)T * M;
    g4_tower_ws *ws = g4_tower_ws_take(t->be, &t->ws, &own, shape, NB, feat_bytes, vw);
    if (!ws) {
        free(m0), free(m1), free(m2);
        return g4_fail(G4_EUSER, "%s backend out of memory for the audio tower on %d frames",
                       be->name, T);
    }
    g4_buf feat32 = vw[0], v0 = vw[1], v1 = vw[2], vout = vw[3], y0 = vw[4], y1 = vw[5],
           h = vw[6], x = vw[7], y = vw[8], q = vw[9], k = vw[10], v = vw[11], attn = vw[12],
           big = vw[13], outp = vw[14], soft = vw[15], soft32 = vw[16], keep = vw[17];

    // Subsampling, channels last: [T, M, 1] -> conv0 -> [T1, M1, C0] -> conv1 -> [T2, M2, C1],
    // which viewed [T2, M2 x C1] is input_proj's input (HF: permute(0, 2, 3, 1) + reshape).
    memcpy(ws->host, f->features, feat_bytes);
    be->upload(be, feat32.data, ws->host, feat_bytes);
    be->upload(be, v0.data, m0, sizeof(int32_t) * (size_t)T);
    be->upload(be, v1.data, m1, sizeof(int32_t) * (size_t)T1);
    be->upload(be, vout.data, m2, sizeof(int32_t) * (size_t)T2);
    be->sscp_conv(be, &y0, &feat32, &v0, t->conv0_w, t->norm0_w, T, M, c->rms_eps);
    be->sscp_conv(be, &y1, &y0, &v1, t->conv1_w, t->norm1_w, T1, M1, c->rms_eps);
    g4_buf flat = g4_buf_view(&y1, T2, M2 * C1);
    be->linear(be, &x, &flat, &t->input_proj, 0);
    be->convert(be, &h, &x);
    g4_tower_emit(hook, hook_ctx, be, "audio_subsample", -1, &h);

    g4_buf glu_in = g4_buf_view(&big, T2, 2 * A), ffn_mid = g4_buf_view(&big, T2, c->ffn);
    for (int l = 0; l < c->n_layers; l++) {
        const g4_audio_layer *w = &t->layers[l];
        ffn(t, be, w, 0, &h, &x, &ffn_mid, &y);
        g4_tower_emit(hook, hook_ctx, be, "audio_ffn1", l, &h);

        // Attention block.
        be->convert(be, &x, &h);
        be->clamp(be, &x, -t->clip, t->clip);
        be->rmsnorm(be, &x, &x, w->norm_pre_attn, A, c->rms_eps);
        be->linear(be, &q, &x, &w->q, 0);
        be->linear(be, &k, &x, &w->k, 0);
        be->linear(be, &v, &x, &w->v, 0);
        be->audio_attention(be, &attn, &q, &k, &v, &w->rel, w->per_dim_scale, &vout, c->n_heads,
                            c->head_dim, c->chunk, c->band, c->logit_cap, c->invalid_logit);
        be->linear(be, &y, &attn, &w->post, 0);
        g4_tower_emit(hook, hook_ctx, be, "audio_attn", l, &y);
        be->clamp(be, &y, -t->clip, t->clip);
        be->add_rmsnorm(be, &h, &y, w->norm_post_attn, c->rms_eps, NULL);

        // Light conv block: GLU, causal depthwise conv, norm, SiLU, linear_end, residual.
        be->rmsnorm(be, &x, &h, w->conv_pre_norm, A, c->rms_eps);
        be->linear(be, &glu_in, &x, &w->lin_start, 0);
        be->glu(be, &y, &glu_in);
        be->dwconv1d_causal(be, &attn, &y, w->dw, c->conv_kernel);
        be->clamp(be, &attn, -t->clip, t->clip);
        be->rmsnorm(be, &attn, &attn, w->conv_norm, A, c->rms_eps);
        be->silu(be, &attn, &attn);
        be->linear(be, &y, &attn, &w->lin_end, 0);
        be->add(be, &h, &y);
        g4_tower_emit(hook, hook_ctx, be, "audio_lconv", l, &h);

        ffn(t, be, w, 1, &h, &x, &ffn_mid, &y);
        g4_tower_emit(hook, hook_ctx, be, "audio_ffn2", l, &h);
        be->clamp(be, &h, -t->clip, t->clip);
        be->rmsnorm(be, &x, &h, w->norm_out, A, c->rms_eps); // norms write the activation type
        be->convert(be, &h, &x);
        g4_tower_emit(hook, hook_ctx, be, "audio_layer", l, &h);
    }

    // Output projection (bias), weightless RMSNorm, projection; keep the valid frames.
    be->convert(be, &x, &h);
    be->linear(be, &outp, &x, &t->output_proj, 0);
    g4_tower_emit(hook, hook_ctx, be, "audio_output_proj", -1, &outp);
    be->rmsnorm(be, &outp, &outp, NULL, c->out_hidden, c->rms_eps);
    be->linear(be, &soft, &outp, &t->projector, 0);
    be->convert(be, &soft32, &soft);
    if (n_valid > 0) { // out[j] = soft32[j-th valid frame], on the backend
        int32_t *rows = g4_malloc(sizeof(int32_t) * (size_t)n_valid);
        for (int i = 0, j = 0; i < T2; i++)
            if (m2[i]) rows[j++] = i;
        be->upload(be, keep.data, rows, sizeof(int32_t) * (size_t)n_valid);
        be->sync(be); // rows is freed below
        free(rows);
        be->scatter_rows(be, out, &soft32, &keep);
        g4_tower_emit(hook, hook_ctx, be, "audio_soft_tokens", -1, out);
    }
    be->sync(be); // (the caller's next work may be on another queue)
    free(m0), free(m1), free(m2);
    g4_tower_ws_done(t->be, &t->ws, ws);
    return G4_OK;
}
