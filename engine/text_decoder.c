// text_decoder.c: one forward pass of the Gemma-4 text model (spec/gemma4-architecture.md
// sections 2-3): embeddings and per-layer inputs (the package's embedding model), then the
// decoder layers with KV sharing, the final norm, the tied LM head and the logit soft-cap.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/text_model.h"

static int capture_step(g4_text_state *s);

// The KV caches for s->capacity rows (NULL buffers when out of memory: the caller checks).
static void alloc_kv(g4_text_state *s) {
    const g4_text_config *c = s->m->cfg;
    s->kc = g4_calloc((size_t)c->n_kv_layers, sizeof(g4_buf));
    s->vc = g4_calloc((size_t)c->n_kv_layers, sizeof(g4_buf));
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *lc = &c->layer[l];
        if (lc->kv_source != l) continue;
        const int w = c->n_kv_heads * lc->head_dim;
        s->kc[lc->kv_slot] = g4_buf_new(s->be, s->be->kv_type, s->capacity, w);
        s->vc[lc->kv_slot] = g4_buf_new(s->be, s->be->kv_type, s->capacity, w);
    }
}

static void free_kv(g4_text_state *s) {
    for (int i = 0; s->kc && i < s->m->cfg->n_kv_layers; i++) {
        g4_buf_free(s->be, &s->kc[i]);
        g4_buf_free(s->be, &s->vc[i]);
    }
    free(s->kc);
    free(s->vc);
    s->kc = s->vc = NULL;
}

// The state's own backend handle for its capacity (exec_new), or the model's.
static int open_handle(g4_text_state *s) {
    g4_backend *root = s->m->be;
    s->be = root;
    s->own_be = 0;
    if (!root->exec_new) return G4_OK;
    g4_backend *ex = root->exec_new(root, s->m->cfg, s->capacity, s->max_tokens);
    if (!ex)
        return g4_fail(G4_EUSER, "%s backend out of memory for the decode workspaces of a "
                                 "%d-token context",
                       root->name, s->capacity);
    s->be = ex;
    s->own_be = 1;
    return G4_OK;
}

static void close_handle(g4_text_state *s) {
    if (s->own_be) s->be->exec_free(s->be);
    s->be = s->m->be;
    s->own_be = 0;
}

// Every buffer of the state (for the out-of-memory check and free).
static int state_bufs(g4_text_state *s, g4_buf **all) {
    g4_buf *b[] = {&s->h,    &s->h2,     &s->x,    &s->q,    &s->k,   &s->v,  &s->qkv,
                   &s->attn, &s->o,      &s->mlp,  &s->ple,  &s->pg,  &s->py, &s->io,
                   &s->smap, &s->logits, &s->samp, &s->next, &s->soft};
    const int n = (int)(sizeof b / sizeof b[0]);
    for (int i = 0; i < n; i++) all[i] = b[i];
    return n;
}

// One line naming what did not fit: the whole state's size.
static int state_oom(g4_text_state *s) {
    const g4_text_config *c = s->m->cfg;
    g4_buf *all[32];
    const int n = state_bufs(s, all);
    size_t bytes = 0;
    int oom = 0;
    for (int i = 0; i < n; i++) {
        bytes += g4_buf_bytes(all[i]);
        oom |= all[i]->data == NULL && all[i] != &s->soft;
    }
    for (int i = 0; i < c->n_kv_layers; i++) {
        bytes += g4_buf_bytes(&s->kc[i]) + g4_buf_bytes(&s->vc[i]);
        oom |= !s->kc[i].data || !s->vc[i].data;
    }
    if (!oom) return G4_OK;
    return g4_fail(G4_EUSER,
                   "%s backend out of memory: a context of %d tokens, up to %d per forward "
                   "call, needs %.2f GiB of KV cache and activations (ask for a shorter "
                   "context or fewer tokens per call)",
                   s->m->be->name, s->capacity, s->max_tokens, (double)bytes / (1u << 30));
}

int g4_text_state_new(g4_text_model *m, int capacity, int max_tokens, g4_text_state **out) {
    const g4_text_state_opts o = {capacity, max_tokens, max_tokens, 0};
    return g4_text_state_new_opts(m, &o, out);
}

// The batch step's row-batched ops, unless G4_BATCH_ROWS=0 (the per-row calls, for A/B). (A
// state's handle has its model's op table.)
int g4_text_batch_rows_ops(const g4_text_model *m) {
    const g4_backend *be = m->be;
    return !g4_env_is("G4_BATCH_ROWS", "0") && be->qkv_prep_rows && be->attention_rows &&
           be->sample_rows;
}

int g4_text_state_new_opts(g4_text_model *m, const g4_text_state_opts *o, g4_text_state **out) {
    *out = NULL;
    const g4_text_config *c = m->cfg;
    const int logit_rows = o->logit_rows ? o->logit_rows : o->max_tokens;
    if (o->capacity < 1 || o->max_tokens < 1 || logit_rows < 1 || logit_rows > o->max_tokens)
        return g4_fail(G4_EUSER,
                       "state: capacity %d, max_tokens %d and logit rows %d must be positive "
                       "(logit rows at most max_tokens)",
                       o->capacity, o->max_tokens, logit_rows);
    if (o->capacity > c->context_length)
        return g4_fail(G4_EUSER, "context of %d tokens exceeds the model's context_length %d",
                       o->capacity, c->context_length);
    g4_text_state *s = g4_calloc(1, sizeof *s);
    s->m = m;
    s->capacity = o->capacity;
    s->max_tokens = o->max_tokens;
    s->logit_rows = logit_rows;
    // G4_EAGER=1 (read here): no state captures its decode step; every step runs op by op (an
    // A/B of the graph replay against the same ops enqueued one by one: tools/gpu/run.sh
    // mm_deccheck)
    s->eager = o->eager || g4_env_is("G4_EAGER", "1");
    int rc = open_handle(s);
    if (rc) {
        free(s);
        return rc;
    }
    g4_backend *be = s->be;
    int hd_max = 0, ffn_max = 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer[l].head_dim > hd_max) hd_max = c->layer[l].head_dim;
        if (c->layer[l].ffn > ffn_max) ffn_max = c->layer[l].ffn;
    }
    alloc_kv(s);
    const int T = s->max_tokens, H = c->hidden, LP = c->n_layers * c->ple_dim;
    s->h = g4_buf_new(be, G4_F32, T, H);
    s->h2 = g4_buf_new(be, G4_F32, T < 8 ? T : 8, H);
    s->hcur = &s->h;
    // on unless G4_FUSE=0 (measured on the H200: Q4 decode 524 -> 560 tok/s, f16 equal)
    s->fuse_norm = !g4_env_is("G4_FUSE", "0") && be->add_norm_linear;
    s->qkv_on = !g4_env_is("G4_QKV", "0"); // (issue 30: q|k|v one linear)
    s->attn_fused = !g4_env_is("G4_FUSE_ATTN", "0"); // (issue 30: qkv_prep inside attention)
    s->attn_fused_one = g4_env_is("G4_FUSE_ATTN", "1");
    // (issue 30 stage 2, off by default: the MLP block as one persistent launch, persist_mlp.cu)
    s->persist_mlp = g4_env_is("G4_PERSIST_MLP", "1");
    // (issue 30, off by default until measured: the PLE block as one op, ple_block.cu)
    s->ple_fused = g4_env_is("G4_PLE_FUSED", "1") && be->ple_block;
    s->batch_rows_ops = g4_text_batch_rows_ops(m);
    // the batch step in a graph per row count (on by default: the serve load's step 4.65-4.73
    // ms vs 4.86 op by op, Q4 on the H200; G4_BATCH_GRAPH=0 steps op by op)
    s->batch_graph = !g4_env_is("G4_BATCH_GRAPH", "0") && s->batch_rows_ops && be->graph_begin &&
                     be->exec_reserve_rows;
    s->x = g4_buf_new(be, be->act_type, T, H);
    s->q = g4_buf_new(be, be->act_type, T, c->n_heads * hd_max);
    s->k = g4_buf_new(be, be->act_type, T, c->n_kv_heads * hd_max);
    s->v = g4_buf_new(be, be->act_type, T, c->n_kv_heads * hd_max);
    s->qkv = g4_buf_new(be, be->act_type, 1, (c->n_heads + 2 * c->n_kv_heads) * hd_max);
    s->attn = g4_buf_new(be, be->act_type, T, c->n_heads * hd_max);
    s->o = g4_buf_new(be, be->act_type, T, H);
    s->mlp = g4_buf_new(be, be->act_type, T, ffn_max);
    s->ple = g4_buf_new(be, be->act_type, T, LP);
    s->pg = g4_buf_new(be, be->act_type, T, c->ple_dim);
    s->py = g4_buf_new(be, be->act_type, 1, H);
    s->io = g4_buf_new(be, G4_I32, 2 * T, 1);
    s->ids = g4_buf_view(&s->io, T, 1);
    s->pos = g4_buf_view(&s->io, T, 1);
    s->smap = g4_buf_new(be, G4_I32, T, 1);
    s->logits = g4_buf_new(be, G4_F32, s->logit_rows, c->vocab);
    s->samp = g4_buf_new(be, G4_I32, (int)(sizeof(g4_sample_params) / 4), 1);
    s->next = g4_buf_new(be, G4_I32, T, 1); // (a batch step: one per row)
    s->host_io = g4_malloc(sizeof(int32_t) * 3 * (size_t)T); // [ids | positions | soft map]
    if ((rc = state_oom(s))) {
        g4_text_state_free(s);
        return rc;
    }
    const g4_sampler greedy = {0, 0, 1.0f};
    g4_text_state_set_sampler(s, &greedy, 0);
    if ((rc = capture_step(s))) {
        g4_text_state_free(s);
        return rc;
    }
    *out = s;
    return G4_OK;
}

// The one-token step's graphs: freed.
static void free_step_graphs(g4_text_state *s) {
    for (int f = 0; f < 2; f++) {
        if (s->graph[f]) s->be->graph_free(s->be, s->graph[f]);
        s->graph[f] = NULL;
    }
}

// The form class of the forwards enqueued next when they see `keys` keys (the backend's
// set_keys, which also tells its kernels; 0 without one).
static int set_keys(g4_text_state *s, int keys) {
    return s->be->set_keys ? s->be->set_keys(s->be, keys) : 0;
}

// The batch step's graphs (they hold the handle's workspaces): freed.
static void free_batch_graphs(g4_text_state *s) {
    for (int n = 0; s->bgraph && n <= s->max_tokens; n++)
        if (s->bgraph[n]) s->be->graph_free(s->be, s->bgraph[n]);
    free(s->bgraph);
    free(s->bseen);
    s->bgraph = NULL;
    s->bseen = NULL;
}

void g4_text_state_free(g4_text_state *s) {
    if (!s) return;
    g4_backend *be = s->be;
    free_step_graphs(s);
    free_batch_graphs(s);
    free_kv(s);
    g4_buf *all[32];
    const int n = state_bufs(s, all);
    for (int i = 0; i < n; i++) g4_buf_free(be, all[i]);
    free(s->host_io);
    if (s->tab) be->free(be, s->tab);
    free(s->host_tab);
    free(s->host_pos);
    close_handle(s);
    free(s);
}

int g4_text_state_reserve(g4_text_state *s, int capacity) {
    s->n_past = 0;
    if (capacity <= s->capacity) return G4_OK;
    if (capacity > s->m->cfg->context_length)
        return g4_fail(G4_EUSER, "context of %d tokens exceeds the model's context_length %d",
                       capacity, s->m->cfg->context_length);
    // The KV cache and the handle's workspaces depend on the capacity; the graph holds both.
    s->be->sync(s->be);
    free_step_graphs(s);
    free_batch_graphs(s);
    free_kv(s);
    g4_backend *old = s->be;
    const int old_own = s->own_be;
    s->capacity = capacity;
    int rc = open_handle(s); // (the buffers stay: every handle of a backend shares its memory)
    if (rc) {
        s->be = old, s->own_be = old_own;
        return rc;
    }
    if (old_own) old->exec_free(old);
    alloc_kv(s);
    if ((rc = state_oom(s))) return rc;
    return capture_step(s);
}

void g4_text_state_set_sampler(g4_text_state *s, const g4_sampler *smp, uint64_t seed) {
    g4_sample_params p;
    memset(&p, 0, sizeof p);
    p.temperature = smp->temperature > 0 ? smp->temperature : 0.0f;
    p.top_k = smp->top_k;
    p.top_p = smp->top_p;
    p.seed_lo = (uint32_t)seed;
    p.seed_hi = (uint32_t)(seed >> 32);
    s->be->upload(s->be, s->samp.data, &p, sizeof p);
    s->be->sync(s->be); // p is on this stack frame
}

int g4_text_state_soft_rows(g4_text_state *s, int n, g4_soft_tokens *out) {
    const int H = s->m->cfg->hidden;
    if (n > s->soft.rows || !s->soft.data) {
        s->be->sync(s->be); // queued work may still read the old rows
        g4_buf_free(s->be, &s->soft);
        const int rows = n > 0 ? (n + 255) / 256 * 256 : 1; // headroom against regrowth
        s->soft = g4_buf_new(s->be, G4_F32, rows, H);
        if (!s->soft.data) {
            s->soft.rows = 0;
            return g4_fail(G4_EUSER, "%s backend out of memory for %d soft tokens",
                           s->m->be->name, n);
        }
    }
    out->rows = g4_buf_view(&s->soft, n, H);
    out->n = n;
    return G4_OK;
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
// for the table lookups, maps each placeholder row to its soft-token row, and stages ids and
// positions in one copy into the state's buffer (views s->ids, s->pos for this T).
static int stage_inputs(g4_text_state *s, const int32_t *ids, int T, const g4_soft_tokens *soft) {
    const g4_text_config *c = s->m->cfg;
    g4_backend *be = s->be;
    int32_t *buf = s->host_io, *map = s->host_io + 2 * (size_t)s->max_tokens;
    int n_soft = 0;
    for (int t = 0; t < T; t++) {
        int32_t id = ids[t];
        const int placeholder = g4_placeholder_of(c, id) != G4_PH_NONE;
        map[t] = -1;
        if (placeholder) {
            map[t] = n_soft++;
            id = c->pad_id;
        } else if (id < 0 || id >= c->vocab || id >= c->vocab_ple) {
            return g4_fail(G4_EUSER, "token id %d at position %d is outside the vocabulary [0, %d)",
                           ids[t], t, c->vocab < c->vocab_ple ? c->vocab : c->vocab_ple);
        }
        buf[t] = id;
        buf[T + t] = s->rows ? s->host_pos[t] : s->n_past + t;
    }
    if (n_soft != (soft ? soft->n : 0)) {
        return g4_fail(G4_EUSER,
                       "%d image/audio placeholder tokens in the input, but %d soft tokens given",
                       n_soft, soft ? soft->n : 0);
    }
    if (n_soft && (soft->rows.type != G4_F32 || soft->rows.cols != c->hidden ||
                   soft->rows.rows < n_soft || !soft->rows.data))
        return g4_fail(G4_EINTERNAL, "soft tokens: expected f32 [%d, %d] rows, got %s [%d, %d]",
                       n_soft, c->hidden, g4_type_name(soft->rows.type), soft->rows.rows,
                       soft->rows.cols);
    s->ids = (g4_buf){s->io.data, G4_I32, T, 1};
    s->pos = (g4_buf){(int32_t *)s->io.data + T, G4_I32, T, 1};
    // (host_io belongs to the state: a pageable copy is staged before the call returns)
    be->upload(be, s->io.data, buf, sizeof(int32_t) * 2 * (size_t)T);
    if (n_soft) be->upload(be, s->smap.data, map, sizeof(int32_t) * (size_t)T);
    return G4_OK;
}

// Embeddings and per-layer inputs for T tokens (the package's embedding model):
//   h   = embed_tokens[ids'] * embed_scale, soft-token rows put in place (scatter_rows)
//   ple = (rmsnorm_P(h @ W_plmp * proj_scale) + embed_tokens_per_layer[ids'] * tok_scale)
//         * combine_scale                                       [T, L*P], layer l at cols l*P
// where ids' (staged in s->ids) has the image/audio placeholders replaced by the pad id.
static void embed(g4_text_state *s, int T, const g4_soft_tokens *soft) {
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
    if (soft && soft->n) { // placeholder rows take the soft tokens, in order (on the backend)
        g4_buf rows = g4_buf_view(&soft->rows, soft->n, H), map = g4_buf_view(&s->smap, T, 1);
        be->scatter_rows(be, &h, &rows, &map);
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

// Columns [c0, c0 + n) of a one-row buffer as a [1, n] view (contiguous only because it is one
// row).
static g4_buf col_view(const g4_buf *b, int c0, int n) {
    G4_ASSERT(b->rows == 1 && c0 >= 0 && c0 + n <= b->cols);
    g4_buf v = *b;
    v.data = (char *)b->data + (size_t)c0 * g4_type_size(b->type);
    v.cols = n;
    return v;
}

// Row r of a [T, cols] buffer as a [1, cols] view.
static g4_buf row_view(const g4_buf *b, int r) {
    g4_buf v = *b;
    v.data = (char *)b->data + (size_t)r * b->cols * g4_type_size(b->type);
    v.rows = 1;
    return v;
}

// The batch step's row tables for n rows (text_model.h, s->tab): uint64 block b of n entries
// (2j: KV slot j's K cache pointers, 2j + 1: its V, 2 n_kv_layers: the rows' samplers), then
// the I32 [n] cache rows; their bytes.
static uint64_t *row_tab(void *tab, int b, int n) {
    return (uint64_t *)tab + (size_t)b * n;
}
static int32_t *row_caps(void *tab, int nkvl, int n) {
    return (int32_t *)row_tab(tab, 2 * nkvl + 1, n);
}
static size_t row_tab_bytes(int nkvl, int n) {
    return (sizeof(uint64_t) * (size_t)(2 * nkvl + 1) + sizeof(int32_t)) * (size_t)n;
}

// A batch step's attention of layer l (s->rows set: row r is sequence s->rows[r] at its own
// position pos[r]): the head preparation and the decode attention of each row over that
// sequence's own KV cache, one row per op call (the ops take one cache; q, k, v and attn hold
// the batch's T rows, computed by the linears with M = T).
static void batch_attention(g4_text_state *s, int l, int T, const g4_buf *q, const g4_buf *k,
                            const g4_buf *v) {
    const g4_text_config *c = s->m->cfg;
    const g4_layer_config *lc = &c->layer[l];
    const g4_text_layer *w = &s->m->layers[l];
    g4_backend *be = s->be;
    const int hd = lc->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    const int own = lc->kv_source == l;
    g4_buf attn = g4_buf_view(&s->attn, T, nh * hd);
    g4_buf pos = g4_buf_view(&s->pos, T, 1);
    if (s->batch_rows_ops) { // every row in one call each, through the step's tables
        const int nkvl = c->n_kv_layers, j = lc->kv_slot;
        g4_buf cap = {row_caps(s->tab, nkvl, T), G4_I32, T, 1};
        const g4_kv_rows kv = {row_tab(s->tab, 2 * j, T), row_tab(s->tab, 2 * j + 1, T), &cap};
        g4_buf qq = *q, kk = *k, vv = *v; // (views: the op takes them writable)
        if (s->attn_fused && be->qkv_attention_rows && !s->rows_prompt) {
            be->qkv_attention_rows(be, &attn, &qq, own ? &kk : NULL, own ? &vv : NULL, &kv,
                                   w->q_norm, own ? w->k_norm : NULL, &pos,
                                   s->m->inv_freq[lc->rope], nh, nkv, hd, c->rms_eps, lc->window,
                                   c->attn_scale);
            return;
        }
        be->qkv_prep_rows(be, &qq, own ? &kk : NULL, own ? &vv : NULL, &kv, w->q_norm,
                          own ? w->k_norm : NULL, &pos, s->m->inv_freq[lc->rope], nh, nkv, hd,
                          c->rms_eps);
        be->attention_rows(be, &attn, &qq, &kv, &pos, nh, nkv, hd, lc->window, c->attn_scale);
        return;
    }
    for (int r = 0; r < T; r++) {
        g4_text_state *rs = s->rows[r];
        g4_buf *kc = &rs->kc[lc->kv_slot], *vc = &rs->vc[lc->kv_slot];
        g4_buf qr = row_view(q, r), ar = row_view(&attn, r), pr = row_view(&pos, r);
        g4_buf kr = row_view(k, r), vr = row_view(v, r);
        be->qkv_prep(be, &qr, own ? &kr : NULL, own ? &vr : NULL, own ? kc : NULL,
                     own ? vc : NULL, w->q_norm, own ? w->k_norm : NULL, &pr,
                     s->m->inv_freq[lc->rope], nh, nkv, hd, c->rms_eps);
        be->attention(be, &ar, &qr, kc, vc, &pr, nh, nkv, hd, lc->window, c->attn_scale);
    }
}

// The post-norm residual add a block ends with (spec 2.4: h = (h + rmsnorm(r) * w) * scale,
// then the next op's input x = rmsnorm(h) * next_w, or h itself), left pending until the next
// linear that reads x. Unfused, it runs there as add_rmsnorm_next in place; fused (s->fuse),
// the linear's own op applies it (add_norm_linear), from the current residual buffer into the
// other one.
static void set_pending(g4_text_state *s, const g4_buf *r, const void *w, const void *scale,
                        int next_norm, const void *next_w) {
    s->pending.r = *r;
    s->pending.w = w;
    s->pending.scale = scale;
    s->pending.next_norm = next_norm;
    s->pending.next_w = next_w;
}

static void apply_pending(g4_text_state *s, int T) {
    if (!s->pending.r.data) return;
    g4_buf h = g4_buf_view(s->hcur, T, s->m->cfg->hidden);
    g4_buf x = g4_buf_view(&s->x, T, s->m->cfg->hidden);
    s->be->add_rmsnorm_next(s->be, &h, &s->pending.r, s->pending.w, s->m->cfg->rms_eps,
                            s->pending.scale, &x, s->pending.next_norm, s->pending.next_w);
    s->pending.r.data = NULL;
}

// The pending add as the prologue of the op that reads x next (a fused forward): 1 and a set
// from the current residual buffer hi into the other one, ho (views the caller keeps for the
// call); 0 when nothing is pending or the forward is not fused. After the op: pending_taken.
static int pending_prologue(g4_text_state *s, int T, g4_buf *hi, g4_buf *ho, g4_add_norm *a) {
    if (!s->fuse || !s->pending.r.data) return 0;
    const int H = s->m->cfg->hidden;
    *hi = g4_buf_view(s->hcur, T, H);
    *ho = g4_buf_view(s->hcur == &s->h ? &s->h2 : &s->h, T, H);
    const g4_add_norm an = {hi,
                            ho,
                            &s->pending.r,
                            s->pending.w,
                            s->pending.scale,
                            s->m->cfg->rms_eps,
                            s->pending.next_norm,
                            s->pending.next_w};
    *a = an;
    return 1;
}

// The op that took the pending add wrote the other residual buffer: it is the current one.
static void pending_taken(g4_text_state *s) {
    s->hcur = s->hcur == &s->h ? &s->h2 : &s->h;
    s->pending.r.data = NULL;
}

// y = x @ W (gelu_tanh(x @ W) * (x @ Wu) when wu; then gelu_tanh(y) * mul[:, col0 ..] when
// mul), after the pending add.
static void linear_x(g4_text_state *s, int T, g4_buf *y, const g4_linear *w, const g4_linear *wu,
                     const g4_buf *mul, int mul_col0) {
    g4_backend *be = s->be;
    g4_buf x = g4_buf_view(&s->x, T, s->m->cfg->hidden), hi, ho;
    g4_add_norm a;
    if (pending_prologue(s, T, &hi, &ho, &a)) {
        be->add_norm_linear(be, &a, &x, y, w, wu, mul, mul_col0);
        pending_taken(s);
        return;
    }
    apply_pending(s, T);
    if (wu)
        be->linear_gelu_mul(be, y, &x, w, wu);
    else
        be->linear(be, y, &x, w, 0);
    if (mul) be->gelu_mul(be, y, y, mul, mul_col0);
}

// The pending add for a block op that takes it in its prologue: a (filled) when this forward
// fuses, and the caller calls pending_taken after the op; else the add is applied now and NULL.
// hi, ho: the residual views a points to, kept by the caller for the call.
static const g4_add_norm *block_pending(g4_text_state *s, int T, g4_buf *hi, g4_buf *ho,
                                        g4_add_norm *a) {
    if (pending_prologue(s, T, hi, ho, a)) return a;
    apply_pending(s, T);
    return NULL;
}

// The MLP block as one op (mlp_block): mlp = gelu_tanh(gate(x)) * up(x), y = down(mlp), after
// the pending add, which the op applies itself when this forward fuses (as linear_x does).
static void mlp_x(g4_text_state *s, int T, g4_buf *mlp, g4_buf *y, const g4_text_layer *w) {
    g4_buf x = g4_buf_view(&s->x, T, s->m->cfg->hidden), hi, ho;
    g4_add_norm a;
    const g4_add_norm *pa = block_pending(s, T, &hi, &ho, &a);
    s->be->mlp_block(s->be, pa, &x, mlp, y, &w->gate, &w->up, &w->down);
    if (pa) pending_taken(s);
}

// The PLE block as one op (ple_block): pg = gelu_tanh(gate(x)) * ple[:, col0 ..], y = proj(pg),
// after the pending add, as mlp_x. y must not be the pending add's r (s->o): the caller passes
// s->py.
static void ple_x(g4_text_state *s, int T, g4_buf *pg, g4_buf *y, const g4_text_layer *w,
                  const g4_buf *ple, int col0) {
    g4_buf x = g4_buf_view(&s->x, T, s->m->cfg->hidden), hi, ho;
    g4_add_norm a;
    const g4_add_norm *pa = block_pending(s, T, &hi, &ho, &a);
    s->be->ple_block(s->be, pa, &x, pg, y, &w->ple_gate, &w->ple_proj, ple, col0);
    if (pa) pending_taken(s);
}

// One decoder layer on h [T, H] (spec 2.4): attention, MLP and PLE blocks, each ending with a
// post-normed residual add that also produces the next op's input in x (the next block's
// pre-norm, the PLE gate's input, the next layer's input norm or, after the last layer, the
// final norm), so no norm runs on its own. On entry x holds this layer's input-normed h, or the
// previous layer's add is pending (a fused forward); unfused, every add is applied by the end.
static void layer(g4_text_state *s, int l, int T) {
    g4_text_model *m = s->m;
    const g4_text_config *c = m->cfg;
    const g4_layer_config *lc = &c->layer[l];
    const g4_text_layer *w = &m->layers[l];
    g4_backend *be = s->be;
    const int H = c->hidden, hd = lc->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    g4_buf x = g4_buf_view(&s->x, T, H), o = g4_buf_view(&s->o, T, H);
    g4_buf q = g4_buf_view(&s->q, T, nh * hd), attn = g4_buf_view(&s->attn, T, nh * hd);
    g4_buf pos = g4_buf_view(&s->pos, T, 1);
    g4_buf *kc = &s->kc[lc->kv_slot], *vc = &s->vc[lc->kv_slot];

    // Attention block. Layers that own a KV slot compute K/V and store them at rows pos[t];
    // KV-shared layers read the slot their source layer filled earlier in this same pass.
    g4_buf k = g4_buf_view(&s->k, T, nkv * hd), v = g4_buf_view(&s->v, T, nkv * hd);
    if (lc->kv_source == l && T == 1 && s->qkv_on && w->qkv.in) {
        // one linear for the three; one row, so q, k, v are its column ranges back to back
        g4_buf qkv = g4_buf_view(&s->qkv, 1, (nh + 2 * nkv) * hd);
        linear_x(s, T, &qkv, &w->qkv, NULL, NULL, 0);
        q = col_view(&qkv, 0, nh * hd);
        k = col_view(&qkv, nh * hd, nkv * hd);
        v = col_view(&qkv, (nh + nkv) * hd, nkv * hd);
    } else {
        linear_x(s, T, &q, &w->q, NULL, NULL, 0);
        if (lc->kv_source == l) {
            be->linear(be, &k, &x, &w->k, 0);
            be->linear(be, &v, &x, &w->v, 0);
        }
    }
    // one token, no layer hook: the head preparation inside the attention (one launch fewer)
    const int prep_in_attn =
        !s->rows && T == 1 && !s->hook && s->attn_fused_one && be->qkv_attention;
    if (prep_in_attn) {
        const int own = lc->kv_source == l;
        be->qkv_attention(be, &attn, &q, own ? &k : NULL, own ? &v : NULL, kc, vc, w->q_norm,
                          own ? w->k_norm : NULL, &pos, m->inv_freq[lc->rope], nh, nkv, hd,
                          c->rms_eps, lc->window, c->attn_scale);
    } else if (lc->kv_source == l) {
        if (!s->rows) { // (a batch prepares each row into its own cache: batch_attention)
            be->qkv_prep(be, &q, &k, &v, kc, vc, w->q_norm, w->k_norm, &pos,
                         m->inv_freq[lc->rope], nh, nkv, hd, c->rms_eps);
            if (s->hook) {
                g4_buf kr = cache_rows(s, kc, T), vr = cache_rows(s, vc, T);
                emit_layer(s, "q", l, &q);
                emit_layer(s, "k", l, &kr);
                emit_layer(s, "v", l, &vr);
            }
        }
    } else if (!s->rows) {
        be->qkv_prep(be, &q, NULL, NULL, NULL, NULL, w->q_norm, NULL, &pos,
                     m->inv_freq[lc->rope], nh, nkv, hd, c->rms_eps);
        emit_layer(s, "q", l, &q);
    }
    if (s->rows)
        batch_attention(s, l, T, &q, &k, &v);
    else if (!prep_in_attn)
        be->attention(be, &attn, &q, kc, vc, &pos, nh, nkv, hd, lc->window, c->attn_scale);
    be->linear(be, &o, &attn, &w->o, 0);
    set_pending(s, &o, w->post_attn_norm, NULL, 1, w->pre_ff_norm);

    // MLP block: down(gelu_tanh(gate(x)) * up(x)); x becomes h for the PLE gate.
    g4_buf mlp = g4_buf_view(&s->mlp, T, lc->ffn);
    if (T == 1 && !s->rows && s->persist_mlp && be->mlp_block) {
        mlp_x(s, T, &mlp, &o, w); // (G4_PERSIST_MLP=1: one op, on CUDA one launch)
    } else {
        linear_x(s, T, &mlp, &w->gate, &w->up, NULL, 0);
        be->linear(be, &o, &mlp, &w->down, 0);
    }
    set_pending(s, &o, w->post_ff_norm, NULL, 0, NULL);

    // Per-layer-input block: proj(gelu_tanh(gate(h)) * ple[:, l]), then the layer scalar.
    g4_buf pg = g4_buf_view(&s->pg, T, c->ple_dim), ple = g4_buf_view(&s->ple, T, c->n_layers * c->ple_dim);
    g4_buf *py = &o;
    if (T == 1 && !s->rows && !s->hook && s->ple_fused) {
        py = &s->py; // (G4_PLE_FUSED=1: one op, on CUDA one launch; its own output buffer)
        ple_x(s, T, &pg, py, w, &ple, l * c->ple_dim);
    } else {
        linear_x(s, T, &pg, &w->ple_gate, NULL, &ple, l * c->ple_dim);
        be->linear(be, &o, &pg, &w->ple_proj, 0);
    }
    const void *next_w = l + 1 < c->n_layers ? m->layers[l + 1].input_norm : m->final_norm;
    set_pending(s, py, w->post_ple_norm, w->layer_scalar, 1, next_w);
    if (!s->fuse) apply_pending(s, T); // (fused: the next layer's q linear applies it)
    if (s->hook) {
        g4_buf h = g4_buf_view(s->hcur, T, H);
        emit_layer(s, "layer", l, &h);
    }
}

// The device work of a forward over T staged tokens: embeddings, layers, final norm and LM
// head (logits of every row, or of the last row only; none when `logits` is 0: a prefill chunk
// whose logits nobody reads). No soft-cap: the caller's op does it (softcap, or sample). No
// host work, so a decode step (T = 1, no soft tokens, no hook) can be captured in a graph.
static g4_buf compute(g4_text_state *s, int T, const g4_soft_tokens *soft, int all_logits,
                      int logits) {
    g4_text_model *m = s->m;
    const g4_text_config *c = m->cfg;
    g4_backend *be = s->be;
    embed(s, T, soft);
    g4_buf h = g4_buf_view(&s->h, T, c->hidden);
    g4_buf x = g4_buf_view(&s->x, T, c->hidden);
    s->hcur = &s->h;
    s->pending.r.data = NULL;
    s->fuse = s->fuse_norm && !s->hook && T <= s->h2.rows;
    be->rmsnorm(be, &x, &h, m->layers[0].input_norm, c->hidden, c->rms_eps);
    for (int l = 0; l < c->n_layers; l++) layer(s, l, T);
    apply_pending(s, T); // the last layer's add (fused): the final norm into x
    emit(s, "final_norm", &x);
    const int rows = all_logits ? T : 1;
    g4_buf out = g4_buf_view(&s->logits, logits ? rows : 0, c->vocab);
    if (!logits) return out;
    g4_buf xl = x;
    if (!all_logits) { // the last row only
        xl.data = (char *)x.data + (size_t)(T - 1) * c->hidden * g4_type_size(x.type);
        xl.rows = 1;
    }
    be->linear(be, &out, &xl, &m->lm_head, 0);
    return out;
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
    if ((rc = check_request(s, T))) return rc;
    if (all_logits && T > s->logit_rows)
        return g4_fail(G4_EUSER, "forward of %d tokens with every row's logits: this state keeps "
                                 "%d rows of logits",
                       T, s->logit_rows);
    if ((rc = stage_inputs(s, ids, T, soft))) return rc;
    set_keys(s, s->n_past + T); // (the kernels' form for this context, as a step's)
    const int want = logits_out || s->hook;
    g4_buf logits = compute(s, T, soft, all_logits, want);
    if (want && s->m->cfg->final_softcap > 0) be->softcap(be, &logits, s->m->cfg->final_softcap);
    if (want) emit(s, "logits", &logits);
    if (logits_out) be->download(be, logits_out, logits.data, g4_buf_bytes(&logits));
    be->sync(be);
    s->n_past += T;
    return G4_OK;
}

// The step's device work on T staged rows: the forward, then the sample op on the last row
// (its draw index: that row's position, the last entry of s->pos) into s->next.
static void step_work(g4_text_state *s, int T, const g4_soft_tokens *soft) {
    g4_backend *be = s->be;
    g4_buf logits = compute(s, T, soft, 0, 1);
    g4_buf counter = {(int32_t *)s->pos.data + (T - 1), G4_I32, 1, 1};
    g4_buf next = g4_buf_view(&s->next, 1, 1);
    be->sample(be, &next, &logits, s->m->cfg->final_softcap, s->samp.data, &counter);
    emit(s, "logits", &logits);
}

// On a backend with graphs (and not eager): one warm-up step at position 0 (it loads every
// kernel; the KV row it writes is rewritten by any request before it is read), then the same
// step captured, once for each form class the backend's set_keys distinguishes (short key
// ranges, and the most keys: the long-range forms). A request replays the graph of its step's
// class with its own staged id, position and sampler.
static int capture_step(g4_text_state *s) {
    g4_backend *be = s->be;
    if (s->eager || !be->graph_begin) return G4_OK;
    const int32_t pad = s->m->cfg->pad_id;
    const int n_past = s->n_past;
    s->n_past = 0;
    int rc = stage_inputs(s, &pad, 1, NULL);
    s->n_past = n_past;
    if (rc) return rc;
    const int keys[2] = {1, s->capacity};
    for (int i = 0; i < 2; i++) {
        const int f = set_keys(s, keys[i]);
        if (f < 0 || f > 1 || s->graph[f]) continue;
        step_work(s, 1, NULL);
        be->graph_begin(be);
        step_work(s, 1, NULL);
        s->graph[f] = be->graph_end(be);
    }
    set_keys(s, 1);
    be->sync(be);
    return G4_OK;
}

int g4_text_step(g4_text_state *s, const int32_t *ids, int T, const g4_soft_tokens *soft,
                 int32_t *next) {
    g4_backend *be = s->be;
    int rc;
    if ((rc = check_request(s, T)) || (rc = stage_inputs(s, ids, T, soft))) return rc;
    const int f = set_keys(s, s->n_past + T);
    void *graph = f == 0 || f == 1 ? s->graph[f] : NULL;
    if (T == 1 && !(soft && soft->n) && !s->hook && graph)
        be->graph_launch(be, graph);
    else
        step_work(s, T, soft);
    be->download(be, next, s->next.data, sizeof(int32_t)); // (synchronises)
    if (*next < 0)
        return g4_fail(G4_EINTERNAL,
                       "the logits after position %d hold a NaN (a broken forward pass)",
                       s->n_past + T - 1);
    s->n_past += T;
    return G4_OK;
}

// The batch step's tables for rows[0..n) (text_model.h, s->tab): every KV slot's cache pointers
// of each row, each row's sampler and cache rows, staged and uploaded in one copy (made at the
// first batch step of s, for s->max_tokens rows).
static int stage_row_tables(g4_text_state *s, g4_text_state *const *rows, int n) {
    g4_backend *be = s->be;
    const int nkvl = s->m->cfg->n_kv_layers;
    if (!s->tab) {
        const size_t bytes = row_tab_bytes(nkvl, s->max_tokens);
        s->tab = be->alloc(be, bytes);
        if (!s->tab)
            return g4_fail(G4_EUSER,
                           "%s backend out of memory for a batch step's row tables "
                           "(%zu bytes)",
                           s->m->be->name, bytes);
        s->host_tab = g4_malloc(bytes);
    }
    void *h = s->host_tab;
    for (int j = 0; j < nkvl; j++)
        for (int r = 0; r < n; r++) {
            row_tab(h, 2 * j, n)[r] = (uint64_t)(uintptr_t)rows[r]->kc[j].data;
            row_tab(h, 2 * j + 1, n)[r] = (uint64_t)(uintptr_t)rows[r]->vc[j].data;
        }
    for (int r = 0; r < n; r++) {
        row_tab(h, 2 * nkvl, n)[r] = (uint64_t)(uintptr_t)rows[r]->samp.data;
        row_caps(h, nkvl, n)[r] = rows[r]->kc[0].rows;
    }
    // (host_tab belongs to the state: a pageable copy is staged before the call returns)
    be->upload(be, s->tab, h, row_tab_bytes(nkvl, n));
    return G4_OK;
}

// The device work of a batch step of n rows staged (ids, positions, tables): the forward and
// one sample_rows call over the first nl rows (each row with its own sampler, drawn at its
// position; nl < n: the LM head on those rows only, nl 0: none). No host work: it can be
// captured.
static void batch_work(g4_text_state *s, int n, int nl) {
    g4_backend *be = s->be;
    const g4_text_config *c = s->m->cfg;
    g4_buf logits;
    if (nl == n) {
        logits = compute(s, n, NULL, 1, 1);
    } else { // the rows that sample are the first nl (g4_text_batch_step_rows): contiguous
        compute(s, n, NULL, 1, 0);
        if (!nl) return;
        g4_buf x = g4_buf_view(&s->x, nl, c->hidden);
        logits = g4_buf_view(&s->logits, nl, c->vocab);
        be->linear(be, &logits, &x, &s->m->lm_head, 0);
    }
    g4_buf nx = g4_buf_view(&s->next, nl, 1), pos = g4_buf_view(&s->pos, nl, 1);
    const uint64_t *smp = row_tab(s->tab, 2 * c->n_kv_layers, n);
    be->sample_rows(be, &nx, &logits, c->final_softcap, smp, &pos);
}

// The error of a batch step whose row r (< nl of n) sampled no id (-1): its logits (row r of
// s->logits, capped by the sample op) read back to tell a broken forward pass (a NaN there)
// from a sample op that failed on finite logits.
static int bad_row(g4_text_state *s, int r, int n, int nl) {
    const int V = s->m->cfg->vocab;
    float *x = g4_malloc(sizeof(float) * (size_t)V);
    g4_buf lr = row_view(&s->logits, r);
    g4_buf_to_host_f32(s->be, &lr, x);
    int nan = 0;
    for (int i = 0; i < V; i++) nan += isnan(x[i]) != 0;
    free(x);
    if (nan)
        return g4_fail(G4_EINTERNAL,
                       "the logits of batch row %d after position %d hold a NaN (%d of %d; a "
                       "broken forward pass; a step of %d rows, %d sampled)",
                       r, s->host_pos[r], nan, V, n, nl);
    return g4_fail(G4_EINTERNAL,
                   "batch row %d after position %d sampled no id though its logits are finite (the "
                   "sample op failed; a step of %d rows, %d sampled)",
                   r, s->host_pos[r], n, nl);
}

// The batch step (text_model.h): s is the batch's own state (its activations hold the rows,
// its KV cache is not used); rows[r] is the sequence of row r, ids[r] its id.
int g4_text_batch_step(g4_text_state *s, g4_text_state *const *rows, const int32_t *ids, int n,
                       int32_t *next) {
    return g4_text_batch_step_rows(s, rows, ids, n, n, next);
}

int g4_text_batch_step_rows(g4_text_state *s, g4_text_state *const *rows, const int32_t *ids, int n,
                            int nl, int32_t *next) {
    g4_backend *be = s->be;
    if (n < 1 || n > s->max_tokens || nl < 0 || nl > n || nl > s->logit_rows)
        return g4_fail(G4_EUSER,
                       "batch step of %d rows, %d of them sampled: this batch takes "
                       "1..%d rows, at most %d sampled",
                       n, nl, s->max_tokens, s->logit_rows);
    if (nl < n && !s->batch_rows_ops)
        return g4_fail(G4_EUSER, "batch step with prompt rows: needs the row-batched ops (not "
                                 "G4_BATCH_ROWS=0)");
    for (int r = 0; r < n; r++)
        if (!rows[r] || rows[r]->m != s->m)
            return g4_fail(G4_EINTERNAL, "batch step: row %d is not a state of the batch's model", r);
    for (int r = 0; r < nl; r++) // (the prompt rows after nl may share a sequence)
        for (int j = 0; j < r; j++)
            if (rows[j] == rows[r])
                return g4_fail(G4_EINTERNAL, "batch step: rows %d and %d are one state", j, r);
    if (!s->host_pos) s->host_pos = g4_malloc(sizeof(int32_t) * (size_t)s->max_tokens);
    // positions (text_model.h): each sequence's rows after nl in order, then its row before nl
    for (int r = 0; r < n; r++) rows[r]->bnext = rows[r]->n_past;
    for (int r = nl; r < n; r++) s->host_pos[r] = rows[r]->bnext++;
    for (int r = 0; r < nl; r++) s->host_pos[r] = rows[r]->bnext++;
    for (int r = 0; r < n; r++)
        if (s->host_pos[r] >= rows[r]->capacity)
            return g4_fail(G4_EUSER,
                           "batch step: row %d at position %d in a context of %d: no room for "
                           "it",
                           r, s->host_pos[r], rows[r]->capacity);
    s->rows = rows;
    s->rows_prompt = nl < n;
    int rc = stage_inputs(s, ids, n, NULL);
    if (!rc && s->batch_rows_ops) rc = stage_row_tables(s, rows, n);
    if (!rc && s->batch_graph && !s->bgraph) { // workspaces for every row count, then graphs
        be->exec_reserve_rows(be, s->m->cfg, s->max_tokens);
        s->bgraph = g4_calloc((size_t)s->max_tokens + 1, sizeof *s->bgraph);
        s->bseen = g4_calloc((size_t)s->max_tokens + 1, 1);
    }
    if (!rc && nl == n && s->bgraph && (s->bgraph[n] || s->bseen[n])) {
        if (!s->bgraph[n]) { // the second step of n rows: captured, then replayed
            be->graph_begin(be);
            batch_work(s, n, n);
            s->bgraph[n] = be->graph_end(be);
        }
        be->graph_launch(be, s->bgraph[n]);
    } else if (!rc && s->batch_rows_ops) {
        if (s->bseen && nl == n) s->bseen[n] = 1;
        batch_work(s, n, nl);
    } else if (!rc) { // G4_BATCH_ROWS=0: one sample call per row
        g4_buf logits = compute(s, n, NULL, 1, 1);
        for (int r = 0; r < n; r++) {
            g4_buf lr = row_view(&logits, r), nr = row_view(&s->next, r);
            g4_buf pr = row_view(&s->pos, r);
            be->sample(be, &nr, &lr, s->m->cfg->final_softcap, rows[r]->samp.data, &pr);
        }
    }
    if (!rc && nl) // (synchronises)
        be->download(be, next, s->next.data, sizeof(int32_t) * (size_t)nl);
    else if (!rc)
        be->sync(be);
    s->rows = NULL;
    s->rows_prompt = 0;
    if (rc) return rc;
    for (int r = 0; r < nl; r++)
        if (next[r] < 0) return bad_row(s, r, n, nl);
    for (int r = 0; r < n; r++) rows[r]->n_past = rows[r]->bnext;
    return G4_OK;
}
