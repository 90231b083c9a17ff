// text_decoder.c: one forward pass of the Gemma-4 text model (spec/gemma4-architecture.md
// sections 2-3): embeddings and per-layer inputs (the package's embedding model), then the
// decoder layers with KV sharing, the final norm, the tied LM head and the logit soft-cap.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "engine/text_model.h"

int g4_text_state_new(g4_text_model *m, int capacity, int max_tokens, g4_text_state **out) {
    *out = NULL;
    const g4_text_config *c = m->cfg;
    if (capacity < 1 || max_tokens < 1)
        return g4_fail(G4_EUSER, "state: capacity %d and max_tokens %d must be positive", capacity,
                       max_tokens);
    if (capacity > c->context_length)
        return g4_fail(G4_EUSER, "context of %d tokens exceeds the model's context_length %d",
                       capacity, c->context_length);
    g4_backend *be = m->be;
    g4_text_state *s = g4_calloc(1, sizeof *s);
    s->m = m;
    s->be = be;
    s->capacity = capacity;
    s->max_tokens = max_tokens;
    int hd_max = 0, ffn_max = 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer[l].head_dim > hd_max) hd_max = c->layer[l].head_dim;
        if (c->layer[l].ffn > ffn_max) ffn_max = c->layer[l].ffn;
    }
    s->kc = g4_calloc((size_t)c->n_kv_layers, sizeof(g4_buf));
    s->vc = g4_calloc((size_t)c->n_kv_layers, sizeof(g4_buf));
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *lc = &c->layer[l];
        if (lc->kv_source != l) continue;
        s->kc[lc->kv_slot] = g4_buf_new(be, be->kv_type, capacity, c->n_kv_heads * lc->head_dim);
        s->vc[lc->kv_slot] = g4_buf_new(be, be->kv_type, capacity, c->n_kv_heads * lc->head_dim);
    }
    const int T = max_tokens, H = c->hidden, LP = c->n_layers * c->ple_dim;
    s->h = g4_buf_new(be, G4_F32, T, H);
    s->x = g4_buf_new(be, be->act_type, T, H);
    s->q = g4_buf_new(be, be->act_type, T, c->n_heads * hd_max);
    s->k = g4_buf_new(be, be->act_type, T, c->n_kv_heads * hd_max);
    s->v = g4_buf_new(be, be->act_type, T, c->n_kv_heads * hd_max);
    s->attn = g4_buf_new(be, be->act_type, T, c->n_heads * hd_max);
    s->o = g4_buf_new(be, be->act_type, T, H);
    s->mlp = g4_buf_new(be, be->act_type, T, ffn_max);
    s->ple = g4_buf_new(be, be->act_type, T, LP);
    s->pg = g4_buf_new(be, be->act_type, T, c->ple_dim);
    s->ids = g4_buf_new(be, G4_I32, T, 1);
    s->pos = g4_buf_new(be, G4_I32, T, 1);
    s->logits = g4_buf_new(be, G4_F32, T, c->vocab);
    // Out of memory shows up as NULL buffers: report the whole state's size.
    size_t bytes = 0;
    int oom = 0;
    const g4_buf *all[] = {&s->h,   &s->x,   &s->q,       &s->k,  &s->v,   &s->attn,
                           &s->o,   &s->mlp, &s->ple,     &s->pg, &s->ids,
                           &s->pos, &s->logits};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        bytes += g4_buf_bytes(all[i]);
        oom |= all[i]->data == NULL;
    }
    for (int i = 0; i < c->n_kv_layers; i++) {
        bytes += g4_buf_bytes(&s->kc[i]) + g4_buf_bytes(&s->vc[i]);
        oom |= !s->kc[i].data || !s->vc[i].data;
    }
    if (oom) {
        g4_text_state_free(s);
        return g4_fail(G4_EUSER,
                       "%s backend out of memory: a context of %d tokens, up to %d per forward "
                       "call, needs %.2f GiB of KV cache and activations (ask for a shorter "
                       "context or fewer tokens per call)",
                       be->name, capacity, max_tokens, (double)bytes / (1u << 30));
    }
    *out = s;
    return G4_OK;
}

void g4_text_state_free(g4_text_state *s) {
    if (!s) return;
    g4_backend *be = s->be;
    if (s->graph) be->graph_free(be, s->graph);
    for (int i = 0; i < s->m->cfg->n_kv_layers; i++) {
        g4_buf_free(be, &s->kc[i]);
        g4_buf_free(be, &s->vc[i]);
    }
    free(s->kc);
    free(s->vc);
    g4_buf *bufs[] = {&s->h,   &s->x,       &s->q,  &s->k,   &s->v,   &s->attn,  &s->o,
                      &s->mlp, &s->ple,     &s->pg, &s->ids, &s->pos, &s->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) g4_buf_free(be, bufs[i]);
    free(s);
}

static void emit(g4_text_state *s, const char *name, const g4_buf *b) {
    if (s->hook) s->hook(s->hook_ctx, name, s->be, b);
}

static void emit_layer(g4_text_state *s, const char *what, int l, const g4_buf *b) {
    if (!s->hook) return;
    char name[32];
    snprintf(name, sizeof name, "%s_%d", what, l);
    s->hook(s->hook_ctx, name, s->be, b);
}

// Host side of a forward: validates the ids, replaces image/audio placeholders by the pad id
// for the table lookups, and uploads ids and positions into the state's device buffers.
static int stage_inputs(g4_text_state *s, const int32_t *ids, int T, const g4_soft_tokens *soft) {
    const g4_text_config *c = s->m->cfg;
    g4_backend *be = s->be;
    int32_t *buf = g4_malloc(sizeof(int32_t) * 2 * (size_t)T); // [lookup ids | positions]
    int n_soft = 0;
    for (int t = 0; t < T; t++) {
        int32_t id = ids[t];
        int placeholder = (c->image_token_id >= 0 && id == c->image_token_id) ||
                          (c->audio_token_id >= 0 && id == c->audio_token_id);
        if (placeholder) {
            n_soft++;
            id = c->pad_id;
        } else if (id < 0 || id >= c->vocab || id >= c->vocab_ple) {
            free(buf);
            return g4_fail(G4_EUSER, "token id %d at position %d is outside the vocabulary [0, %d)",
                           ids[t], t, c->vocab < c->vocab_ple ? c->vocab : c->vocab_ple);
        }
        buf[t] = id;
        buf[T + t] = s->n_past + t;
    }
    if (n_soft != (soft ? soft->n : 0)) {
        free(buf);
        return g4_fail(G4_EUSER,
                       "%d image/audio placeholder tokens in the input, but %d soft tokens given",
                       n_soft, soft ? soft->n : 0);
    }
    be->upload(be, s->ids.data, buf, sizeof(int32_t) * (size_t)T);
    be->upload(be, s->pos.data, buf + T, sizeof(int32_t) * (size_t)T);
    be->sync(be); // buf is pageable host memory about to be freed
    free(buf);
    return G4_OK;
}

// Embeddings and per-layer inputs for T tokens (the package's embedding model):
//   h   = embed_tokens[ids'] * embed_scale, soft-token rows replaced by the features
//   ple = (rmsnorm_P(h @ W_plmp * proj_scale) + embed_tokens_per_layer[ids'] * tok_scale)
//         * combine_scale                                       [T, L*P], layer l at cols l*P
// where ids' (staged in s->ids) has the image/audio placeholders replaced by the pad id.
static void embed(g4_text_state *s, const int32_t *ids, int T, const g4_soft_tokens *soft) {
    g4_text_model *m = s->m;
    const g4_text_config *c = m->cfg;
    g4_backend *be = s->be;
    const int H = c->hidden, LP = c->n_layers * c->ple_dim;
    g4_buf ids_b = g4_buf_view(&s->ids, T, 1);
    g4_buf h = g4_buf_view(&s->h, T, H);
    g4_buf x = g4_buf_view(&s->x, T, H);
    // The embedding model computes in the activation type; the residual stream is F32.
    be->embed(be, &x, m->embed_tokens, c->vocab, &ids_b, c->embed_scale);
    be->convert(be, &h, &x);
    if (soft && soft->n) { // overwrite placeholder rows with the soft tokens, in order
        float *rows = g4_malloc(sizeof(float) * (size_t)T * H);
        be->download(be, rows, h.data, sizeof(float) * (size_t)T * H);
        for (int t = 0, k = 0; t < T; t++)
            if (ids[t] == c->image_token_id || ids[t] == c->audio_token_id)
                memcpy(rows + (size_t)t * H, soft->rows + (size_t)(k++) * H, sizeof(float) * H);
        be->upload(be, h.data, rows, sizeof(float) * (size_t)T * H);
        be->sync(be);
        free(rows);
        be->convert(be, &x, &h);
    }
    emit(s, "embeds", &h);

    g4_buf ple = g4_buf_view(&s->ple, T, LP);
    be->linear(be, &ple, &x, &m->ple_model_proj, 0);
    be->ple_inputs(be, &ple, m->embed_ple, c->vocab_ple, &ids_b, m->ple_proj_norm, c->ple_dim,
                   c->ple_proj_scale, c->ple_token_scale, c->ple_combine_scale, c->rms_eps);
    emit(s, "per_layer_inputs", &ple);
}

// A [T, cols] view of cache rows n_past .. n_past+T-1 (what this call stored there).
static g4_buf cache_rows(const g4_text_state *s, const g4_buf *cache, int T) {
    g4_buf v = *cache;
    v.data = (char *)cache->data + (size_t)s->n_past * cache->cols * g4_type_size(cache->type);
    v.rows = T;
    return v;
}

// One decoder layer on h [T, H] (spec 2.4): attention, MLP and PLE blocks, each a post-normed
// residual add that also produces the next op's input in x (the next block's pre-norm, the PLE
// gate's input, the next layer's input norm or, after the last layer, the final norm), so no
// norm runs on its own. On entry x holds this layer's input-normed h.
static void layer(g4_text_state *s, int l, int T) {
    g4_text_model *m = s->m;
    const g4_text_config *c = m->cfg;
    const g4_layer_config *lc = &c->layer[l];
    const g4_text_layer *w = &m->layers[l];
    g4_backend *be = s->be;
    const int H = c->hidden, hd = lc->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    g4_buf h = g4_buf_view(&s->h, T, H), x = g4_buf_view(&s->x, T, H), o = g4_buf_view(&s->o, T, H);
    g4_buf q = g4_buf_view(&s->q, T, nh * hd), attn = g4_buf_view(&s->attn, T, nh * hd);
    g4_buf pos = g4_buf_view(&s->pos, T, 1);
    g4_buf *kc = &s->kc[lc->kv_slot], *vc = &s->vc[lc->kv_slot];

    // Attention block. Layers that own a KV slot compute K/V and store them at rows pos[t];
    // KV-shared layers read the slot their source layer filled earlier in this same pass.
    be->linear(be, &q, &x, &w->q, 0);
    if (lc->kv_source == l) {
        g4_buf k = g4_buf_view(&s->k, T, nkv * hd), v = g4_buf_view(&s->v, T, nkv * hd);
        be->linear(be, &k, &x, &w->k, 0);
        be->linear(be, &v, &x, &w->v, 0);
        be->qkv_prep(be, &q, &k, &v, kc, vc, w->q_norm, w->k_norm, &pos, m->inv_freq[lc->rope],
                     nh, nkv, hd, c->rms_eps);
        if (s->hook) {
            g4_buf kr = cache_rows(s, kc, T), vr = cache_rows(s, vc, T);
            emit_layer(s, "q", l, &q);
            emit_layer(s, "k", l, &kr);
            emit_layer(s, "v", l, &vr);
        }
    } else {
        be->qkv_prep(be, &q, NULL, NULL, NULL, NULL, w->q_norm, NULL, &pos,
                     m->inv_freq[lc->rope], nh, nkv, hd, c->rms_eps);
        emit_layer(s, "q", l, &q);
    }
    be->attention(be, &attn, &q, kc, vc, &pos, nh, nkv, hd, lc->window, c->attn_scale);
    be->linear(be, &o, &attn, &w->o, 0);
    be->add_rmsnorm_next(be, &h, &o, w->post_attn_norm, c->rms_eps, NULL, &x, 1, w->pre_ff_norm);

    // MLP block: down(gelu_tanh(gate(x)) * up(x)); x becomes h for the PLE gate.
    g4_buf mlp = g4_buf_view(&s->mlp, T, lc->ffn);
    be->linear_gelu_mul(be, &mlp, &x, &w->gate, &w->up);
    be->linear(be, &o, &mlp, &w->down, 0);
    be->add_rmsnorm_next(be, &h, &o, w->post_ff_norm, c->rms_eps, NULL, &x, 0, NULL);

    // Per-layer-input block: proj(gelu_tanh(gate(h)) * ple[:, l]), then the layer scalar.
    g4_buf pg = g4_buf_view(&s->pg, T, c->ple_dim), ple = g4_buf_view(&s->ple, T, c->n_layers * c->ple_dim);
    be->linear(be, &pg, &x, &w->ple_gate, 0);
    be->gelu_mul(be, &pg, &pg, &ple, l * c->ple_dim);
    be->linear(be, &o, &pg, &w->ple_proj, 0);
    const void *next_w = l + 1 < c->n_layers ? m->layers[l + 1].input_norm : m->final_norm;
    be->add_rmsnorm_next(be, &h, &o, w->post_ple_norm, c->rms_eps, w->layer_scalar, &x, 1,
                         next_w);
    emit_layer(s, "layer", l, &h);
}

// The device work of a forward over T staged tokens: embeddings, layers, final norm, LM head
// and soft-cap (logits of every row, or of the last row only). No host work unless soft tokens
// are given, so a decode step (T = 1, no soft tokens, no hook) can be captured in a graph.
static g4_buf compute(g4_text_state *s, const int32_t *ids, int T, const g4_soft_tokens *soft,
                      int all_logits) {
    g4_text_model *m = s->m;
    const g4_text_config *c = m->cfg;
    g4_backend *be = s->be;
    embed(s, ids, T, soft);
    g4_buf h = g4_buf_view(&s->h, T, c->hidden);
    g4_buf x = g4_buf_view(&s->x, T, c->hidden);
    be->rmsnorm(be, &x, &h, m->layers[0].input_norm, c->hidden, c->rms_eps);
    for (int l = 0; l < c->n_layers; l++) layer(s, l, T); // leaves the final norm in x
    const int rows = all_logits ? T : 1;
    emit(s, "final_norm", &x);
    g4_buf xl = x;
    if (!all_logits) { // the last row only
        xl.data = (char *)x.data + (size_t)(T - 1) * c->hidden * g4_type_size(x.type);
        xl.rows = 1;
    }
    g4_buf logits = g4_buf_view(&s->logits, rows, c->vocab);
    be->linear(be, &logits, &xl, &m->lm_head, 0);
    if (c->final_softcap > 0) be->softcap(be, &logits, c->final_softcap);
    emit(s, "logits", &logits);
    return logits;
}

static int check_request(const g4_text_state *s, int T) {
    if (T < 1 || T > s->max_tokens)
        return g4_fail(G4_EUSER, "forward of %d tokens: this state takes 1..%d per call", T,
                       s->max_tokens);
    if (s->n_past + T > s->capacity)
        return g4_fail(G4_EUSER,
                       "%d tokens after %d already in the context exceed its capacity of %d "
                       "tokens (prompt longer than the context?)",
                       T, s->n_past, s->capacity);
    return G4_OK;
}

int g4_text_forward(g4_text_state *s, const int32_t *ids, int T, const g4_soft_tokens *soft,
                    float *logits_out, int all_logits) {
    g4_backend *be = s->be;
    int rc;
    if ((rc = check_request(s, T)) || (rc = stage_inputs(s, ids, T, soft))) return rc;
    g4_buf logits = compute(s, ids, T, soft, all_logits);
    if (logits_out) be->download(be, logits_out, logits.data, g4_buf_bytes(&logits));
    be->sync(be);
    s->n_past += T;
    return G4_OK;
}

// Argmax of a host row (first maximum, NaN largest, as torch.argmax).
static int32_t host_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (isnan(x[i]) ? !isnan(x[best]) : x[i] > x[best]) best = i;
    return best;
}

int g4_text_decode_greedy(g4_text_state *s, int32_t id, int32_t *next) {
    g4_backend *be = s->be;
    const g4_text_config *c = s->m->cfg;
    int rc;
    if ((rc = check_request(s, 1)) || (rc = stage_inputs(s, &id, 1, NULL))) return rc;
    if (!be->graph_begin || s->hook || c->final_softcap <= 0) {
        // Eager: the CPU backend, or when intermediates are hooked.
        g4_buf logits = compute(s, &id, 1, NULL, 0);
        float *row = g4_malloc(sizeof(float) * (size_t)c->vocab);
        be->download(be, row, logits.data, g4_buf_bytes(&logits));
        *next = host_argmax(row, c->vocab);
        free(row);
    } else {
        // The first step runs eagerly (sizing every workspace), the second captures the whole
        // step in a graph; later steps replay it with the staged id and position.
        if (!s->graph && s->eager_steps >= 1) {
            be->graph_begin(be);
            compute(s, &id, 1, NULL, 0);
            s->graph = be->graph_end(be);
        }
        if (s->graph) {
            be->graph_launch(be, s->graph);
        } else {
            compute(s, &id, 1, NULL, 0);
            s->eager_steps++;
        }
        be->download(be, next, be->argmax(be), sizeof(int32_t));
    }
    s->n_past += 1;
    return G4_OK;
}
