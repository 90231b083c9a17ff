// step_plan.c: the decode step's instruction plan and its static checks (engine/step_plan.h).
#include "engine/step_plan.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/text_model.h"

enum { TILE = 16 }; // features a GEMV tile (the kernels' 16-feature tiles)

// --- building ---------------------------------------------------------------------------------

typedef struct {
    g4_step_plan *p;
    const g4_text_config *c;
    const g4_sp_flags *f;
    int step, keys;
    int prev; // kernel plan: the counter the next instruction waits on (-1: none)
    int group_tiles, chunk_tiles, lm_group_tiles;
} bld;

static int add(bld *b, int kind, int weight, int layer) {
    g4_step_plan *p = b->p;
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->ins = g4_realloc(p->ins, sizeof *p->ins * (size_t)p->cap);
    }
    g4_sp_instr *in = &p->ins[p->n];
    memset(in, 0, sizeof *in);
    in->kind = (uint8_t)kind;
    in->weight = (uint8_t)weight;
    in->step = (uint8_t)b->step;
    in->layer = (int16_t)layer;
    in->t0 = in->t1 = in->k0 = in->k1 = -1;
    in->signal = -1;
    return p->n++;
}

static void rd(bld *b, int i, int buf, int64_t lo, int64_t hi) {
    g4_sp_instr *in = &b->p->ins[i];
    G4_ASSERT(in->n_rd < G4_SP_MAX_RD);
    in->rd[in->n_rd++] = (g4_sp_region){buf, (int32_t)lo, (int32_t)hi};
}

static void wr(bld *b, int i, int buf, int64_t lo, int64_t hi) {
    g4_sp_instr *in = &b->p->ins[i];
    G4_ASSERT(in->n_wr < G4_SP_MAX_WR);
    in->wr[in->n_wr++] = (g4_sp_region){buf, (int32_t)lo, (int32_t)hi};
}

static void wait_on(bld *b, int i, int counter, int target) {
    g4_sp_instr *in = &b->p->ins[i];
    G4_ASSERT(in->n_wait < G4_SP_MAX_WAIT);
    in->wait[in->n_wait++] = (g4_sp_wait){counter, target};
}

static int new_counter(bld *b, int layer, const char *what) {
    g4_step_plan *p = b->p;
    if (p->n_counters == p->cap_counters) {
        p->cap_counters = p->cap_counters ? 2 * p->cap_counters : 64;
        p->ctr = g4_realloc(p->ctr, sizeof *p->ctr * (size_t)p->cap_counters);
    }
    p->ctr[p->n_counters] = (g4_sp_counter){(int16_t)layer, (uint8_t)b->step, what};
    return p->n_counters++;
}

// Kernel plan: instruction i runs after the one before it (stream order) and signals its own
// counter.
static void chain(bld *b, int i) {
    if (b->prev >= 0) wait_on(b, i, b->prev, 1);
    b->p->ins[i].signal = b->prev = new_counter(b, b->p->ins[i].layer, "kernel");
}

static int kc_buf(const g4_text_config *c, int slot, int g) {
    return G4_SB_KV0 + 2 * (slot * c->n_kv_heads + g);
}

// The caches' rows [r0, r1) of every KV head of slot (hd wide), read or written.
static void cache_rows(bld *b, int i, int slot, int hd, int r0, int r1, int write) {
    for (int g = 0; g < b->c->n_kv_heads; g++)
        for (int kv = 0; kv < 2; kv++) {
            const int buf = kc_buf(b->c, slot, g) + kv;
            if (write)
                wr(b, i, buf, (int64_t)r0 * hd, (int64_t)r1 * hd);
            else if (r1 > r0)
                rd(b, i, buf, (int64_t)r0 * hd, (int64_t)r1 * hd);
        }
}

int g4_sp_splits(int keys, int window, int split_keys, int max_splits, int *lo, int *per) {
    const int l0 = window > 0 && keys > window ? keys - window : 0, nk = keys - l0;
    int s = (nk + split_keys - 1) / split_keys;
    if (s > max_splits) s = max_splits;
    if (s < 1) s = 1;
    const int pk = (nk + s - 1) / s;
    if (lo) *lo = l0;
    if (per) *per = pk;
    return (nk + pk - 1) / pk; // (no empty split)
}

// The step's first instruction: the token's embedding (the second step of a two-step plan takes
// the token the first one sampled and advances the position on the device).
static int embed_instr(bld *b) {
    const int H = b->c->hidden;
    const int i = add(b, G4_SP_EMBED, G4_SW_NONE, -1);
    if (b->step == 0) {
        rd(b, i, G4_SB_IDS, 0, 1);
    } else {
        rd(b, i, G4_SB_NEXT, 0, 1);
        rd(b, i, G4_SB_POS, 0, 1);
        wr(b, i, G4_SB_IDS, 0, 1);
        wr(b, i, G4_SB_POS, 0, 1);
    }
    wr(b, i, G4_SB_X, 0, H);
    return i;
}

// --- the kernel plan: compute() of engine/text_decoder.c for one token, op by op ---------------

typedef struct {
    int hcur; // G4_SB_H or G4_SB_H2
    int r;    // the pending add's block output buffer, or -1
} kstate;

static int other_h(int h) {
    return h == G4_SB_H ? G4_SB_H2 : G4_SB_H;
}

// The pending add in place (add_rmsnorm_next: apply_pending), an instruction of layer.
static void k_apply(bld *b, kstate *k, int layer) {
    if (k->r < 0) return;
    const int H = b->c->hidden;
    const int i = add(b, G4_SP_ADD_NORM, G4_SW_NONE, layer);
    rd(b, i, k->hcur, 0, H);
    rd(b, i, k->r, 0, H);
    wr(b, i, k->hcur, 0, H);
    wr(b, i, G4_SB_X, 0, H);
    chain(b, i);
    k->r = -1;
}

// The pending add for the op that reads x next: 1 when that op takes it in its prologue (a
// fused forward: k_take on it), else it is applied first and 0.
static int k_prologue(bld *b, kstate *k, int layer) {
    if (b->f->fuse && k->r >= 0) return 1;
    k_apply(b, k, layer);
    return 0;
}

static void k_take(bld *b, kstate *k, int i) {
    const int H = b->c->hidden;
    rd(b, i, k->hcur, 0, H);
    rd(b, i, k->r, 0, H);
    k->hcur = other_h(k->hcur);
    wr(b, i, k->hcur, 0, H);
    wr(b, i, G4_SB_X, 0, H);
    k->r = -1;
}

// linear_x: y [ybuf lo, hi) = x @ W (gelu_mul with the PLE slice when mul_lo >= 0).
static void k_linear_x(bld *b, kstate *k, int layer, int weight, int ybuf, int64_t ylo, int64_t yhi,
                       int64_t mul_lo) {
    const int H = b->c->hidden, P = b->c->ple_dim;
    if (k_prologue(b, k, layer)) {
        const int i = add(b, G4_SP_ADD_NORM_LINEAR, weight, layer);
        k_take(b, k, i);
        if (mul_lo >= 0) rd(b, i, G4_SB_PLE, mul_lo, mul_lo + P);
        wr(b, i, ybuf, ylo, yhi);
        chain(b, i);
        return;
    }
    const int i =
        add(b, weight == G4_SW_GATE_UP ? G4_SP_LINEAR_GELU_MUL : G4_SP_LINEAR, weight, layer);
    rd(b, i, G4_SB_X, 0, H);
    wr(b, i, ybuf, ylo, yhi);
    chain(b, i);
    if (mul_lo >= 0) {
        const int j = add(b, G4_SP_GELU_MUL, G4_SW_NONE, layer);
        rd(b, j, ybuf, ylo, yhi);
        rd(b, j, G4_SB_PLE, mul_lo, mul_lo + P);
        wr(b, j, ybuf, ylo, yhi);
        chain(b, j);
    }
}

static void k_linear(bld *b, int layer, int weight, int xbuf, int64_t xn, int ybuf, int64_t yn) {
    const int i = add(b, G4_SP_LINEAR, weight, layer);
    rd(b, i, xbuf, 0, xn);
    wr(b, i, ybuf, 0, yn);
    chain(b, i);
}

// A block op (mlp_block, ple_block) of layer l reading x: the pending add in its prologue, or
// applied before it.
static int k_block(bld *b, kstate *k, int l, int kind, int weight) {
    const int fused = k_prologue(b, k, l);
    const int i = add(b, kind, weight, l);
    if (fused)
        k_take(b, k, i);
    else
        rd(b, i, G4_SB_X, 0, b->c->hidden);
    return i;
}

static void k_layer(bld *b, kstate *k, int l) {
    const g4_text_config *c = b->c;
    const g4_layer_config *lc = &c->layer[l];
    const int H = c->hidden, P = c->ple_dim, hd = lc->head_dim, nh = c->n_heads,
              nkv = c->n_kv_heads, own = lc->kv_source == l, pos = b->keys - 1;
    // q, k, v: column ranges of the qkv buffer (one linear) or their own buffers
    int qb = G4_SB_Q, kb = G4_SB_K, vb = G4_SB_V;
    int64_t q0 = 0, k0 = 0, v0 = 0;
    if (own && b->f->qkv && b->f->qkv[l]) {
        qb = kb = vb = G4_SB_QKV;
        k0 = (int64_t)nh * hd;
        v0 = (int64_t)(nh + nkv) * hd;
        k_linear_x(b, k, l, G4_SW_QKV, G4_SB_QKV, 0, (int64_t)(nh + 2 * nkv) * hd, -1);
    } else {
        k_linear_x(b, k, l, G4_SW_Q, G4_SB_Q, 0, (int64_t)nh * hd, -1);
        if (own) {
            k_linear(b, l, G4_SW_K, G4_SB_X, H, G4_SB_K, (int64_t)nkv * hd);
            k_linear(b, l, G4_SW_V, G4_SB_X, H, G4_SB_V, (int64_t)nkv * hd);
        }
    }
    const int64_t qn = (int64_t)nh * hd, kn = (int64_t)nkv * hd;
    const int lo = lc->window > 0 && b->keys > lc->window ? b->keys - lc->window : 0;
    if (b->f->attn_fused) {
        // the new row comes from k, v themselves: the caches are read below it
        const int i = add(b, G4_SP_QKV_ATTENTION, G4_SW_NONE, l);
        rd(b, i, qb, q0, q0 + qn);
        if (own) {
            rd(b, i, kb, k0, k0 + kn);
            rd(b, i, vb, v0, v0 + kn);
        }
        rd(b, i, G4_SB_POS, 0, 1);
        cache_rows(b, i, lc->kv_slot, hd, lo, own ? pos : pos + 1, 0);
        wr(b, i, qb, q0, q0 + qn); // (left unspecified by the op)
        if (own) cache_rows(b, i, lc->kv_slot, hd, pos, pos + 1, 1);
        wr(b, i, G4_SB_ATTN, 0, qn);
        chain(b, i);
    } else {
        int i = add(b, G4_SP_QKV_PREP, G4_SW_NONE, l);
        rd(b, i, qb, q0, q0 + qn);
        if (own) {
            rd(b, i, kb, k0, k0 + kn);
            rd(b, i, vb, v0, v0 + kn);
        }
        rd(b, i, G4_SB_POS, 0, 1);
        wr(b, i, qb, q0, q0 + qn);
        if (own) cache_rows(b, i, lc->kv_slot, hd, pos, pos + 1, 1);
        chain(b, i);
        i = add(b, G4_SP_ATTENTION, G4_SW_NONE, l);
        rd(b, i, qb, q0, q0 + qn);
        rd(b, i, G4_SB_POS, 0, 1);
        cache_rows(b, i, lc->kv_slot, hd, lo, pos + 1, 0);
        wr(b, i, G4_SB_ATTN, 0, qn);
        chain(b, i);
    }
    k_linear(b, l, G4_SW_O, G4_SB_ATTN, qn, G4_SB_O, H);
    k->r = G4_SB_O; // post-attention norm, then the pre-FF norm

    if (b->f->mlp_block) {
        const int i = k_block(b, k, l, G4_SP_MLP_BLOCK, G4_SW_MLP);
        wr(b, i, G4_SB_MLP, 0, lc->ffn);
        wr(b, i, G4_SB_O, 0, H); // (y over the r its add read)
        chain(b, i);
    } else {
        k_linear_x(b, k, l, G4_SW_GATE_UP, G4_SB_MLP, 0, lc->ffn, -1);
        k_linear(b, l, G4_SW_DOWN, G4_SB_MLP, lc->ffn, G4_SB_O, H);
    }
    k->r = G4_SB_O; // post-FF norm, no next norm

    const int64_t ple0 = (int64_t)l * P;
    if (b->f->ple_block) {
        const int i = k_block(b, k, l, G4_SP_PLE_BLOCK, G4_SW_PLE);
        rd(b, i, G4_SB_PLE, ple0, ple0 + P);
        wr(b, i, G4_SB_PG, 0, P);
        wr(b, i, G4_SB_PY, 0, H);
        chain(b, i);
        k->r = G4_SB_PY;
    } else {
        k_linear_x(b, k, l, G4_SW_PLE_GATE, G4_SB_PG, 0, P, ple0);
        k_linear(b, l, G4_SW_PLE_PROJ, G4_SB_PG, P, G4_SB_O, H);
        k->r = G4_SB_O;
    }
    // post-PLE norm and layer scalar, then the next layer's input norm (or the final norm)
    if (!b->f->fuse) k_apply(b, k, l);
}

static void kernel_step(bld *b) {
    const g4_text_config *c = b->c;
    const int H = c->hidden, LP = c->n_layers * c->ple_dim;
    kstate k = {G4_SB_H, -1};
    int i = embed_instr(b);
    chain(b, i);
    i = add(b, G4_SP_CONVERT, G4_SW_NONE, -1);
    rd(b, i, G4_SB_X, 0, H);
    wr(b, i, G4_SB_H, 0, H);
    chain(b, i);
    k_linear(b, -1, G4_SW_PLE_MODEL_PROJ, G4_SB_X, H, G4_SB_PLE, LP);
    i = add(b, G4_SP_PLE_INPUTS, G4_SW_NONE, -1);
    rd(b, i, G4_SB_PLE, 0, LP);
    rd(b, i, G4_SB_IDS, 0, 1);
    wr(b, i, G4_SB_PLE, 0, LP);
    chain(b, i);
    i = add(b, G4_SP_RMSNORM, G4_SW_NONE, -1);
    rd(b, i, G4_SB_H, 0, H);
    wr(b, i, G4_SB_X, 0, H);
    chain(b, i);
    for (int l = 0; l < c->n_layers; l++) k_layer(b, &k, l);
    k_apply(b, &k, c->n_layers); // (the last layer's add, fused: the final norm into x)
    i = add(b, G4_SP_LINEAR, G4_SW_LM_HEAD, c->n_layers);
    rd(b, i, G4_SB_X, 0, H);
    wr(b, i, G4_SB_LOGITS, 0, c->vocab);
    chain(b, i);
    i = add(b, G4_SP_SAMPLE, G4_SW_NONE, c->n_layers);
    rd(b, i, G4_SB_LOGITS, 0, c->vocab);
    rd(b, i, G4_SB_SAMP, 0, 1);
    rd(b, i, G4_SB_POS, 0, 1);
    wr(b, i, G4_SB_LOGITS, 0, c->vocab); // (the soft-cap in place)
    wr(b, i, G4_SB_NEXT, 0, 1);
    chain(b, i);
}

// --- the tile plan -------------------------------------------------------------------------------

// GEMV tile groups over output features [n0, n1), at most gt tiles of 16 each, never across a
// multiple of seg features from n0 (a head, a down chunk, a PLE slice; a segment's last tile
// may be short): calls emit for each group's features [f0, f1) and returns the group count.
typedef void (*emit_fn)(bld *b, void *ctx, int64_t f0, int64_t f1, int first);
static int tile_groups(bld *b, int64_t n0, int64_t n1, int64_t seg, int gt, emit_fn emit,
                       void *ctx) {
    int groups = 0;
    for (int64_t s = n0; s < n1; s += seg) {
        const int64_t e = s + seg < n1 ? s + seg : n1;
        for (int64_t f = s; f < e; f += (int64_t)gt * TILE) {
            if (emit)
                emit(b, ctx, f, f + (int64_t)gt * TILE < e ? f + (int64_t)gt * TILE : e,
                     groups == 0);
            groups++;
        }
    }
    return groups;
}

// What the add-norm in a GEMV group's prologue reads: the residual hin and the block output
// (r: buffer, its K-chunk partials r_parts x H summed in chunk order); the op's first group
// writes hout (-1: the norm alone, on layer 0's input, writes nothing).
typedef struct {
    int kind, weight, layer;
    int hin, hout, r, r_parts;
    int ybuf;
    int64_t ybase;    // y element of feature 0 (feature f -> ybuf[ybase + f])
    int64_t mul_base; // PLE slice multiplier element of feature 0, or -1
    int xbuf;         // input read directly (no prologue): xbuf [k0, k1); -1 with a prologue
    int64_t k0, k1;
    int wait[2], target[2], n_wait;
    int signal;               // counter, or -1: signal_of_seg picks it
    const int *signal_of_seg; // per segment (seg features) counter
    int64_t seg;
} gemv_ctx;

static void gemv_emit(bld *b, void *vctx, int64_t f0, int64_t f1, int first) {
    gemv_ctx *g = vctx;
    const int H = b->c->hidden;
    const int i = add(b, g->kind, g->weight, g->layer);
    g4_sp_instr *in = &b->p->ins[i];
    in->t0 = (int32_t)f0;
    in->t1 = (int32_t)f1;
    if (g->xbuf >= 0) {
        in->k0 = (int32_t)g->k0;
        in->k1 = (int32_t)g->k1;
        rd(b, i, g->xbuf, g->k0, g->k1);
    } else {
        in->k0 = 0;
        in->k1 = H;
        rd(b, i, g->hin, 0, H);
        if (g->r >= 0) rd(b, i, g->r, 0, (int64_t)g->r_parts * H);
        if (first && g->hout >= 0) wr(b, i, g->hout, 0, H);
    }
    if (g->mul_base >= 0) rd(b, i, G4_SB_PLE, g->mul_base + f0, g->mul_base + f1);
    wr(b, i, g->ybuf, g->ybase + f0, g->ybase + f1);
    for (int w = 0; w < g->n_wait; w++) wait_on(b, i, g->wait[w], g->target[w]);
    b->p->ins[i].signal = g->signal >= 0 ? g->signal : g->signal_of_seg[f0 / g->seg];
}

static int gemv_groups(bld *b, gemv_ctx *g, int64_t n, int64_t seg, int gt) {
    return tile_groups(b, 0, n, seg, gt, gemv_emit, g);
}

typedef struct {
    int hcur;                        // the residual buffer the next add-norm reads
    int r, r_parts, r_ctr, r_target; // the pending block output, its counter and target
} tstate;

static void tile_layer(bld *b, tstate *t, int l, const int *pli) {
    const g4_text_config *c = b->c;
    const g4_layer_config *lc = &c->layer[l];
    const int H = c->hidden, P = c->ple_dim, hd = lc->head_dim, nh = c->n_heads,
              nkv = c->n_kv_heads, gs = nh / nkv, own = lc->kv_source == l, gt = b->group_tiles,
              pos = b->keys - 1;
    const int one = own && b->f->qkv && b->f->qkv[l];
    // q|k|v: groups per head, each signalling its KV head's counter
    int qkv_ctr[G4_SP_MAX_KV], qkv_n[G4_SP_MAX_KV];
    for (int g = 0; g < nkv; g++) qkv_ctr[g] = new_counter(b, l, "qkv"), qkv_n[g] = 0;
    const int hin = t->hcur, hout = t->r >= 0 ? other_h(hin) : -1;
    // the heads: q head h (KV head h / gs), then k head g, v head g
    const int n_heads_out = nh + (own ? 2 * nkv : 0);
    for (int h = 0; h < n_heads_out; h++) {
        const int g = h < nh ? h / gs : (h - nh) % nkv;
        int buf = G4_SB_Q, w = G4_SW_Q;
        int64_t base = (int64_t)h * hd; // the head's first feature in its buffer
        if (one) {
            buf = G4_SB_QKV, w = G4_SW_QKV;
        } else if (h >= nh) {
            buf = h < nh + nkv ? G4_SB_K : G4_SB_V;
            w = h < nh + nkv ? G4_SW_K : G4_SW_V;
            base = (int64_t)((h - nh) % nkv) * hd;
        }
        gemv_ctx q = {.kind = G4_SP_LINEAR,
                      .weight = w,
                      .layer = l,
                      .hin = hin,
                      .hout = h == 0 ? hout : -1,
                      .r = t->r,
                      .r_parts = t->r_parts,
                      .ybuf = buf,
                      .ybase = 0,
                      .mul_base = -1,
                      .xbuf = -1,
                      .wait = {t->r_ctr},
                      .target = {t->r_target},
                      .n_wait = 1,
                      .signal = qkv_ctr[g],
                      .seg = hd};
        qkv_n[g] += tile_groups(b, base, base + hd, hd, gt, gemv_emit, &q);
    }
    if (t->r >= 0) t->hcur = hout;
    // attention: per KV head, its splits (the head preparation in each split's prologue; the
    // split holding row pos of an owner stores the new k, v rows there)
    int lo, per;
    // (fixed_splits: max_splits a KV head whatever the length, those past the keys empty but
    // still signalling, so that the counts never depend on the position)
    const int S_len =
        g4_sp_splits(b->keys, lc->window, b->p->split_keys, b->p->max_splits, &lo, &per);
    const int S = b->p->fixed_splits ? b->p->max_splits : S_len;
    const int gw = gs * (hd + 2); // one split's partials for the group's heads
    int att_ctr[G4_SP_MAX_KV];
    for (int g = 0; g < nkv; g++) {
        att_ctr[g] = new_counter(b, l, "att");
        for (int j = 0; j < S; j++) {
            const int r0 = lo + j * per < b->keys ? lo + j * per : b->keys,
                      r1 = r0 + per < b->keys ? r0 + per : b->keys;
            const int last = r0 <= pos && pos < r1; // the split holding the new row
            const int i = add(b, G4_SP_ATTENTION, G4_SW_NONE, l);
            b->p->ins[i].t0 = g;
            b->p->ins[i].t1 = j;
            const int qb = one ? G4_SB_QKV : G4_SB_Q;
            rd(b, i, qb, (int64_t)g * gs * hd, (int64_t)(g + 1) * gs * hd);
            if (own && last) { // raw k, v of this token
                const int64_t k0 = one ? (int64_t)(nh + g) * hd : (int64_t)g * hd;
                const int64_t v0 = one ? (int64_t)(nh + nkv + g) * hd : (int64_t)g * hd;
                rd(b, i, one ? G4_SB_QKV : G4_SB_K, k0, k0 + hd);
                rd(b, i, one ? G4_SB_QKV : G4_SB_V, v0, v0 + hd);
            }
            rd(b, i, G4_SB_POS, 0, 1);
            const int kb = kc_buf(c, lc->kv_slot, g);
            const int re = own && last ? pos : r1; // (an owner's new row: from k, v above)
            if (re > r0) {
                rd(b, i, kb, (int64_t)r0 * hd, (int64_t)re * hd);
                rd(b, i, kb + 1, (int64_t)r0 * hd, (int64_t)re * hd);
            }
            if (own && last) {
                wr(b, i, kb, (int64_t)pos * hd, (int64_t)(pos + 1) * hd);
                wr(b, i, kb + 1, (int64_t)pos * hd, (int64_t)(pos + 1) * hd);
            }
            const int64_t a0 = ((int64_t)g * b->p->max_splits + j) * gw;
            wr(b, i, G4_SB_APART, a0, a0 + gw);
            wait_on(b, i, qkv_ctr[g], qkv_n[g]);
            b->p->ins[i].signal = att_ctr[g];
        }
    }
    // o: K chunk per KV head (its heads), the splits merged in the prologue
    const int o_ctr = new_counter(b, l, "o");
    int o_n = 0;
    for (int g = 0; g < nkv; g++) {
        const int64_t a0 = (int64_t)g * b->p->max_splits * gw;
        gemv_ctx o = {.kind = G4_SP_LINEAR,
                      .weight = G4_SW_O,
                      .layer = l,
                      .hin = -1,
                      .hout = -1,
                      .r = -1,
                      .r_parts = 0,
                      .ybuf = G4_SB_OPART,
                      .ybase = (int64_t)g * H,
                      .mul_base = -1,
                      .xbuf = G4_SB_APART,
                      .k0 = a0,
                      .k1 = a0 + (int64_t)S * gw,
                      .wait = {att_ctr[g]},
                      .target = {S},
                      .n_wait = 1,
                      .signal = o_ctr,
                      .seg = H};
        const int first = b->p->n;
        o_n += gemv_groups(b, &o, H, H, gt);
        for (int i = first; i < b->p->n; i++) { // (K: this KV head's heads of the attention)
            b->p->ins[i].k0 = g * gs * hd;
            b->p->ins[i].k1 = (g + 1) * gs * hd;
        }
    }
    // gate|up: groups within the down K chunks, each chunk its own counter
    const int64_t ck = (int64_t)b->chunk_tiles * TILE;
    const int nch = (int)((lc->ffn + ck - 1) / ck);
    int *gu_ctr = g4_calloc((size_t)nch, sizeof(int)), *gu_n = g4_calloc((size_t)nch, sizeof(int));
    for (int ch = 0; ch < nch; ch++) {
        gu_ctr[ch] = new_counter(b, l, "gu");
        const int64_t e = (ch + 1) * ck < lc->ffn ? (ch + 1) * ck : lc->ffn;
        gu_n[ch] = tile_groups(b, ch * ck, e, ck, gt, NULL, NULL);
    }
    {
        const int hi2 = t->hcur, ho2 = other_h(hi2);
        gemv_ctx gu = {.kind = G4_SP_LINEAR,
                       .weight = G4_SW_GATE_UP,
                       .layer = l,
                       .hin = hi2,
                       .hout = ho2,
                       .r = G4_SB_OPART,
                       .r_parts = nkv,
                       .ybuf = G4_SB_MLP,
                       .ybase = 0,
                       .mul_base = -1,
                       .xbuf = -1,
                       .wait = {o_ctr},
                       .target = {o_n},
                       .n_wait = 1,
                       .signal = -1,
                       .signal_of_seg = gu_ctr,
                       .seg = ck};
        gemv_groups(b, &gu, lc->ffn, ck, gt);
        t->hcur = ho2;
    }
    // down: K chunk x output groups, each waiting for its chunk's gate|up groups only
    const int d_ctr = new_counter(b, l, "down");
    int d_n = 0;
    for (int ch = 0; ch < nch; ch++) {
        const int64_t e = (ch + 1) * ck < lc->ffn ? (ch + 1) * ck : lc->ffn;
        gemv_ctx d = {.kind = G4_SP_LINEAR,
                      .weight = G4_SW_DOWN,
                      .layer = l,
                      .hin = -1,
                      .hout = -1,
                      .r = -1,
                      .r_parts = 0,
                      .ybuf = G4_SB_DPART,
                      .ybase = (int64_t)ch * H,
                      .mul_base = -1,
                      .xbuf = G4_SB_MLP,
                      .k0 = ch * ck,
                      .k1 = e,
                      .wait = {gu_ctr[ch]},
                      .target = {gu_n[ch]},
                      .n_wait = 1,
                      .signal = d_ctr,
                      .seg = H};
        d_n += gemv_groups(b, &d, H, H, gt);
    }
    free(gu_ctr);
    free(gu_n);
    // PLE gate (no next norm: its input is the new residual itself), times the layer's slice
    const int pg_ctr = new_counter(b, l, "pg");
    int pg_n;
    {
        const int hi2 = t->hcur, ho2 = other_h(hi2);
        gemv_ctx pg = {.kind = G4_SP_LINEAR,
                       .weight = G4_SW_PLE_GATE,
                       .layer = l,
                       .hin = hi2,
                       .hout = ho2,
                       .r = G4_SB_DPART,
                       .r_parts = nch,
                       .ybuf = G4_SB_PG,
                       .ybase = 0,
                       .mul_base = (int64_t)l * P,
                       .xbuf = -1,
                       .wait = {d_ctr, pli[l]},
                       .target = {d_n, 1},
                       .n_wait = 2,
                       .signal = pg_ctr,
                       .seg = P};
        pg_n = gemv_groups(b, &pg, P, P, gt);
        t->hcur = ho2;
    }
    const int pp_ctr = new_counter(b, l, "pp");
    gemv_ctx pp = {.kind = G4_SP_LINEAR,
                   .weight = G4_SW_PLE_PROJ,
                   .layer = l,
                   .hin = -1,
                   .hout = -1,
                   .r = -1,
                   .r_parts = 0,
                   .ybuf = G4_SB_PY,
                   .ybase = 0,
                   .mul_base = -1,
                   .xbuf = G4_SB_PG,
                   .k0 = 0,
                   .k1 = P,
                   .wait = {pg_ctr},
                   .target = {pg_n},
                   .n_wait = 1,
                   .signal = pp_ctr,
                   .seg = H};
    t->r = G4_SB_PY;
    t->r_parts = 1;
    t->r_ctr = pp_ctr;
    t->r_target = gemv_groups(b, &pp, H, H, gt);
}

static void tile_step(bld *b, int prev_sample) {
    const g4_text_config *c = b->c;
    const int H = c->hidden, P = c->ple_dim, L = c->n_layers, gt = b->group_tiles;
    int i = embed_instr(b);
    wr(b, i, G4_SB_H, 0, H);
    if (prev_sample >= 0) wait_on(b, i, prev_sample, 1);
    const int emb = b->p->ins[i].signal = new_counter(b, -1, "embed");
    // the PLE model projection in groups within each layer's slice, then each slice's inputs
    int *plp = g4_calloc((size_t)L, sizeof(int)), *pli = g4_calloc((size_t)L, sizeof(int));
    for (int l = 0; l < L; l++) plp[l] = new_counter(b, -1, "ple_proj");
    gemv_ctx pm = {.kind = G4_SP_LINEAR,
                   .weight = G4_SW_PLE_MODEL_PROJ,
                   .layer = -1,
                   .hin = -1,
                   .hout = -1,
                   .r = -1,
                   .r_parts = 0,
                   .ybuf = G4_SB_PLE,
                   .ybase = 0,
                   .mul_base = -1,
                   .xbuf = G4_SB_X,
                   .k0 = 0,
                   .k1 = H,
                   .wait = {emb},
                   .target = {1},
                   .n_wait = 1,
                   .signal = -1,
                   .signal_of_seg = plp,
                   .seg = P};
    gemv_groups(b, &pm, (int64_t)L * P, P, gt);
    const int per_slice = tile_groups(b, 0, P, P, gt, NULL, NULL);
    for (int l = 0; l < L; l++) {
        pli[l] = new_counter(b, -1, "ple_in");
        i = add(b, G4_SP_PLE_INPUTS, G4_SW_NONE, -1);
        b->p->ins[i].t0 = l;
        rd(b, i, G4_SB_PLE, (int64_t)l * P, (int64_t)(l + 1) * P);
        rd(b, i, G4_SB_IDS, 0, 1);
        wr(b, i, G4_SB_PLE, (int64_t)l * P, (int64_t)(l + 1) * P);
        wait_on(b, i, plp[l], per_slice);
        b->p->ins[i].signal = pli[l];
    }
    tstate t = {G4_SB_H, -1, 0, emb, 1};
    for (int l = 0; l < L; l++) tile_layer(b, &t, l, pli);
    free(plp);
    free(pli);
    // the final norm, the LM head, the sample
    i = add(b, G4_SP_ADD_NORM, G4_SW_NONE, L);
    rd(b, i, t.hcur, 0, H);
    rd(b, i, t.r, 0, H);
    wr(b, i, other_h(t.hcur), 0, H);
    wr(b, i, G4_SB_X, 0, H);
    wait_on(b, i, t.r_ctr, t.r_target);
    const int fin = b->p->ins[i].signal = new_counter(b, L, "final");
    const int lm = new_counter(b, L, "lm");
    gemv_ctx head = {G4_SP_LINEAR, G4_SW_LM_HEAD, L, -1, -1,    -1,  0, G4_SB_LOGITS, 0,
                     -1,           G4_SB_X,       0, H,  {fin}, {1}, 1, lm,           NULL,
                     c->vocab};
    const int n_lm = gemv_groups(b, &head, c->vocab, c->vocab, b->lm_group_tiles);
    i = add(b, G4_SP_SAMPLE, G4_SW_NONE, L);
    rd(b, i, G4_SB_LOGITS, 0, c->vocab);
    rd(b, i, G4_SB_SAMP, 0, 1);
    rd(b, i, G4_SB_POS, 0, 1);
    wr(b, i, G4_SB_NEXT, 0, 1);
    wait_on(b, i, lm, n_lm);
    b->p->ins[i].signal = new_counter(b, L, "sample");
}

// --- plan ------------------------------------------------------------------------------------

void g4_sp_flags_of_state(const g4_text_state *s, g4_sp_flags *f) {
    const g4_text_config *c = s->m->cfg;
    memset(f, 0, sizeof *f);
    f->fuse = s->fuse_norm;
    f->attn_fused = s->attn_fused_one && s->be->qkv_attention;
    f->mlp_block = s->persist_mlp && s->be->mlp_block;
    f->ple_block = s->ple_fused;
    f->qkv = g4_calloc((size_t)c->n_layers, 1);
    for (int l = 0; l < c->n_layers; l++)
        f->qkv[l] = c->layer[l].kv_source == l && s->qkv_on && s->m->layers[l].qkv.in;
}

void g4_sp_flags_owner_qkv(const g4_text_config *c, g4_sp_flags *f) {
    memset(f, 0, sizeof *f);
    f->fuse = 1;
    f->qkv = g4_calloc((size_t)c->n_layers, 1);
    for (int l = 0; l < c->n_layers; l++) f->qkv[l] = c->layer[l].kv_source == l;
}

int g4_sp_build(const g4_text_config *c, const g4_sp_flags *f, const g4_sp_opts *o,
                g4_step_plan *p) {
    memset(p, 0, sizeof *p);
    const int steps = o->steps ? o->steps : 1;
    bld b = {p,
             c,
             f,
             0,
             o->keys,
             -1,
             o->group_tiles ? o->group_tiles : 4,
             o->chunk_tiles ? o->chunk_tiles : 32,
             o->lm_group_tiles ? o->lm_group_tiles : 64};
    p->grain = o->grain;
    p->n_layers = c->n_layers;
    p->keys = o->keys;
    p->steps = steps;
    p->n_kv = c->n_kv_heads;
    p->split_keys = o->split_keys ? o->split_keys : 512;
    p->max_splits = o->max_splits ? o->max_splits : 16;
    p->fixed_splits = o->fixed_splits;
    if (o->keys < 1 || steps < 1 || steps > 2 || o->keys + steps - 1 > c->context_length)
        return g4_fail(G4_EUSER, "step plan: %d keys over %d step(s) (1..%d keys, 1 or 2 steps)",
                       o->keys, steps, c->context_length);
    // (a negative count would step the tile loops backwards: they would never end)
    if (o->group_tiles < 0 || o->chunk_tiles < 0 || o->lm_group_tiles < 0)
        return g4_fail(G4_EUSER,
                       "step plan: group_tiles %d, chunk_tiles %d, lm_group_tiles %d (0: the "
                       "default, or a positive count of 16-feature tiles)",
                       o->group_tiles, o->chunk_tiles, o->lm_group_tiles);
    if (c->n_kv_heads < 1 || c->n_kv_heads > G4_SP_MAX_KV || c->n_heads % c->n_kv_heads)
        return g4_fail(G4_EUSER,
                       "step plan: %d heads over %d KV heads (1..%d KV heads dividing "
                       "the heads)",
                       c->n_heads, c->n_kv_heads, G4_SP_MAX_KV);
    int hd_max = 0, ffn_max = 0, ch_max = 0;
    const int64_t ck = (int64_t)b.chunk_tiles * TILE;
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *lc = &c->layer[l];
        if (lc->head_dim < 1 || lc->ffn < 1)
            return g4_fail(G4_EUSER, "step plan: layer %d head_dim %d, ffn %d (positive)", l,
                           lc->head_dim, lc->ffn);
        if (lc->head_dim > hd_max) hd_max = lc->head_dim;
        if (lc->ffn > ffn_max) ffn_max = lc->ffn;
        const int nch = (int)((lc->ffn + ck - 1) / ck);
        if (nch > ch_max) ch_max = nch;
    }
    const int rows = o->keys + steps - 1; // cache rows the plan touches
    if ((int64_t)rows * hd_max >= INT32_MAX || (int64_t)c->n_layers * c->ple_dim >= INT32_MAX)
        return g4_fail(G4_EUSER, "step plan: %d cache rows of %d: beyond 2^31 elements", rows,
                       hd_max);
    p->n_bufs = G4_SB_KV0 + 2 * c->n_kv_layers * c->n_kv_heads;
    p->buf_elems = g4_calloc((size_t)p->n_bufs, sizeof(int64_t));
    const int64_t H = c->hidden, nh = c->n_heads, nkv = c->n_kv_heads;
    const int64_t sizes[G4_SB_KV0] = {
        [G4_SB_IDS] = 1,
        [G4_SB_POS] = 1,
        [G4_SB_SAMP] = 1,
        [G4_SB_H] = H,
        [G4_SB_H2] = H,
        [G4_SB_X] = H,
        [G4_SB_Q] = nh * hd_max,
        [G4_SB_K] = nkv * hd_max,
        [G4_SB_V] = nkv * hd_max,
        [G4_SB_QKV] = (nh + 2 * nkv) * hd_max,
        [G4_SB_ATTN] = nh * hd_max,
        [G4_SB_O] = H,
        [G4_SB_MLP] = ffn_max,
        [G4_SB_PLE] = (int64_t)c->n_layers * c->ple_dim,
        [G4_SB_PG] = c->ple_dim,
        [G4_SB_PY] = H,
        [G4_SB_LOGITS] = c->vocab,
        [G4_SB_NEXT] = 1,
        [G4_SB_APART] = nkv * p->max_splits * (nh / nkv) * (hd_max + 2),
        [G4_SB_OPART] = nkv * H,
        [G4_SB_DPART] = (int64_t)ch_max * H,
    };
    memcpy(p->buf_elems, sizes, sizeof sizes);
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *lc = &c->layer[l];
        if (lc->kv_source != l) continue;
        for (int g = 0; g < nkv; g++)
            for (int kv = 0; kv < 2; kv++)
                p->buf_elems[kc_buf(c, lc->kv_slot, g) + kv] = (int64_t)rows * lc->head_dim;
    }
    int prev_sample = -1;
    for (int s = 0; s < steps; s++) {
        b.step = s;
        b.keys = o->keys + s;
        if (o->grain == G4_SP_KERNEL) {
            kernel_step(&b);
        } else {
            tile_step(&b, prev_sample);
            prev_sample = p->ins[p->n - 1].signal;
        }
    }
    return G4_OK;
}

void g4_sp_free(g4_step_plan *p) {
    free(p->ins);
    free(p->ctr);
    free(p->buf_elems);
    memset(p, 0, sizeof *p);
}

// --- names and the report ----------------------------------------------------------------------

const char *g4_sp_kind_name(int kind) {
    static const char *const names[G4_SP_N_KINDS] = {
        "embed",     "convert",         "ple_inputs",      "rmsnorm",   "add_norm",
        "linear",    "add_norm_linear", "linear_gelu_mul", "gelu_mul",  "qkv_prep",
        "attention", "qkv_attention",   "mlp_block",       "ple_block", "sample"};
    return kind >= 0 && kind < G4_SP_N_KINDS ? names[kind] : "?";
}

const char *g4_sp_weight_name(int w) {
    static const char *const names[G4_SW_N] = {
        "-",       "ple_model_proj", "qkv",      "q",        "k",       "v",   "o",
        "gate_up", "down",           "ple_gate", "ple_proj", "lm_head", "mlp", "ple"};
    return w >= 0 && w < G4_SW_N ? names[w] : "?";
}

const char *g4_sp_buf_name(const g4_step_plan *p, int buf, char *s, size_t n) {
    static const char *const names[G4_SB_KV0] = {
        "ids", "pos", "samp", "h",  "h2", "x",      "q",    "k",     "v",     "qkv",  "attn",
        "o",   "mlp", "ple",  "pg", "py", "logits", "next", "apart", "opart", "dpart"};
    if (buf >= 0 && buf < G4_SB_KV0) return names[buf];
    const int c = buf - G4_SB_KV0, nkv = p->n_kv > 0 ? p->n_kv : 1;
    snprintf(s, n, "%s%d.%d", c % 2 ? "vc" : "kc", c / 2 / nkv, c / 2 % nkv);
    return s;
}

int g4_sp_report_errors(const g4_sp_report *r) {
    return r->bounds + r->unreached + r->partial + r->cycle + r->unwritten + r->raw + r->war +
           r->waw + r->unjoined + r->deadlock;
}

void g4_sp_report_print(const g4_sp_report *r, FILE *f) {
    fprintf(f,
            "bounds %d, unreached %d, partial %d, cycle %d, unwritten %d, RAW %d, WAR %d, WAW "
            "%d, unjoined %d, deadlock %d\n",
            r->bounds, r->unreached, r->partial, r->cycle, r->unwritten, r->raw, r->war, r->waw,
            r->unjoined, r->deadlock);
    for (int k = 0; k < 12; k++)
        if (r->first[k][0]) fprintf(f, "  %s\n", r->first[k]);
}

enum {
    R_BOUNDS,
    R_UNREACHED,
    R_PARTIAL,
    R_CYCLE,
    R_UNWRITTEN,
    R_RAW,
    R_WAR,
    R_WAW,
    R_UNJOINED,
    R_DEADLOCK
};

static void note(g4_sp_report *r, int cls, const char *fmt, ...) G4_PRINTF(3, 4);
static void note(g4_sp_report *r, int cls, const char *fmt, ...) {
    int *const cnt[] = {&r->bounds, &r->unreached, &r->partial, &r->cycle,    &r->unwritten,
                        &r->raw,    &r->war,       &r->waw,     &r->unjoined, &r->deadlock};
    if ((*cnt[cls])++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->first[cls], sizeof r->first[cls], fmt, ap);
        va_end(ap);
    }
}

// "step 0 layer 3 linear(o) tiles [0, 4)"
static const char *describe(const g4_step_plan *p, int i, char *s, size_t n) {
    const g4_sp_instr *in = &p->ins[i];
    snprintf(s, n, "#%d step %d layer %d %s(%s) [%d, %d)", i, in->step, in->layer,
             g4_sp_kind_name(in->kind), g4_sp_weight_name(in->weight), in->t0, in->t1);
    return s;
}

// --- static checks ------------------------------------------------------------------------------

typedef struct {
    int *start, *list; // signalers of counter c: list[start[c] .. start[c + 1])
} sigs;

static void sigs_build(const g4_step_plan *p, sigs *s) {
    s->start = g4_calloc((size_t)p->n_counters + 1, sizeof(int));
    s->list = g4_calloc((size_t)p->n + 1, sizeof(int));
    for (int i = 0; i < p->n; i++) {
        const int c = p->ins[i].signal;
        if (c >= 0 && c < p->n_counters) s->start[c + 1]++;
    }
    for (int c = 0; c < p->n_counters; c++) s->start[c + 1] += s->start[c];
    int *fill = g4_calloc((size_t)p->n_counters + 1, sizeof(int));
    for (int i = 0; i < p->n; i++) {
        const int c = p->ins[i].signal;
        if (c >= 0 && c < p->n_counters) s->list[s->start[c] + fill[c]++] = i;
    }
    free(fill);
}

static void sigs_free(sigs *s) {
    free(s->start);
    free(s->list);
}

static int n_sig(const sigs *s, int c) {
    return s->start[c + 1] - s->start[c];
}

// A wait that orders: its counter valid and its target all of the counter's signalers.
static int full_wait(const g4_step_plan *p, const sigs *s, const g4_sp_wait *w) {
    return w->counter >= 0 && w->counter < p->n_counters && w->target == n_sig(s, w->counter) &&
           w->target > 0;
}

// Happens-before through counters: anc[c] (bitset over counters) holds every counter all of
// whose signalers finished before any wait on c with the full target returns (c included).
typedef struct {
    const g4_step_plan *p;
    const sigs *s;
    int words;
    uint64_t *anc;
    uint8_t *state; // 0 new, 1 on the stack, 2 done
    int cycle;
} hb;

static uint64_t *anc_of(hb *h, int c) {
    return h->anc + (size_t)c * h->words;
}

static void hb_visit(hb *h, int c) {
    if (h->state[c] == 2) return;
    if (h->state[c] == 1) {
        h->cycle = 1;
        return;
    }
    h->state[c] = 1;
    uint64_t *a = anc_of(h, c);
    a[c / 64] |= 1ull << (c % 64);
    for (int k = h->s->start[c]; k < h->s->start[c + 1]; k++) {
        const g4_sp_instr *in = &h->p->ins[h->s->list[k]];
        for (int w = 0; w < in->n_wait; w++) {
            if (!full_wait(h->p, h->s, &in->wait[w])) continue;
            const int d = in->wait[w].counter;
            hb_visit(h, d);
            if (h->state[d] != 2) continue; // (a cycle: reported)
            const uint64_t *ad = anc_of(h, d);
            for (int x = 0; x < h->words; x++) a[x] |= ad[x];
        }
    }
    h->state[c] = 2;
}

// 1 when instruction a finishes before instruction b starts, through counters alone.
static int hb_before(const hb *h, int a, int b) {
    const int s = h->p->ins[a].signal;
    if (s < 0 || s >= h->p->n_counters) return 0;
    const g4_sp_instr *in = &h->p->ins[b];
    for (int w = 0; w < in->n_wait; w++) {
        if (!full_wait(h->p, h->s, &in->wait[w])) continue;
        const uint64_t *ad = h->anc + (size_t)in->wait[w].counter * h->words;
        if (ad[s / 64] >> (s % 64) & 1) return 1;
    }
    return 0;
}

// The access history of one buffer: segments [lo, hi) with their last writer (-1: nothing wrote
// it, -2: written before the step) and the readers since.
typedef struct {
    int32_t lo, hi;
    int writer, nr, cap;
    int *readers;
} seg;
typedef struct {
    int n, cap;
    seg *s;
} segs;

static void segs_push(segs *v, int32_t lo, int32_t hi, int writer) {
    if (lo >= hi) return;
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 8;
        v->s = g4_realloc(v->s, sizeof *v->s * (size_t)v->cap);
    }
    v->s[v->n++] = (seg){lo, hi, writer, 0, 0, NULL};
}

// The index of the segment starting at `at`, splitting the one that holds it.
static int segs_split(segs *v, int32_t at) {
    int a = 0, z = v->n; // first segment with hi > at
    while (a < z) {
        const int m = (a + z) / 2;
        if (v->s[m].hi <= at)
            a = m + 1;
        else
            z = m;
    }
    if (a == v->n || v->s[a].lo == at) return a;
    if (v->n == v->cap) {
        v->cap = 2 * v->cap;
        v->s = g4_realloc(v->s, sizeof *v->s * (size_t)v->cap);
    }
    memmove(&v->s[a + 2], &v->s[a + 1], sizeof *v->s * (size_t)(v->n - a - 1));
    v->n++;
    seg *l = &v->s[a], *r = &v->s[a + 1];
    *r = *l;
    r->lo = at;
    l->hi = at;
    r->cap = r->nr;
    r->readers = r->nr ? g4_malloc(sizeof(int) * (size_t)r->nr) : NULL;
    if (r->nr) memcpy(r->readers, l->readers, sizeof(int) * (size_t)r->nr);
    return a + 1;
}

static void seg_read(seg *s, int i) {
    if (s->nr && s->readers[s->nr - 1] == i) return;
    if (s->nr == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4;
        s->readers = g4_realloc(s->readers, sizeof(int) * (size_t)s->cap);
    }
    s->readers[s->nr++] = i;
}

static void access_region(const g4_step_plan *p, const hb *h, segs *v, int i,
                          const g4_sp_region *rg, int write, g4_sp_report *r) {
    char a[96], b[96], nm[32];
    const int s0 = segs_split(v, rg->lo), s1 = segs_split(v, rg->hi);
    const char *bn = g4_sp_buf_name(p, rg->buf, nm, sizeof nm);
    for (int k = s0; k < s1; k++) {
        seg *s = &v->s[k];
        if (!write) {
            if (s->writer == -1)
                note(r, R_UNWRITTEN, "%s reads %s [%d, %d) that nothing wrote",
                     describe(p, i, a, sizeof a), bn, s->lo, s->hi);
            else if (s->writer >= 0 && s->writer != i && !hb_before(h, s->writer, i))
                note(r, R_RAW, "RAW: %s reads %s [%d, %d) written by %s, not ordered before it",
                     describe(p, i, a, sizeof a), bn, s->lo, s->hi,
                     describe(p, s->writer, b, sizeof b));
            seg_read(s, i);
            continue;
        }
        if (s->writer >= 0 && s->writer != i && !hb_before(h, s->writer, i))
            note(r, R_WAW, "WAW: %s writes %s [%d, %d) after %s, not ordered after it",
                 describe(p, i, a, sizeof a), bn, s->lo, s->hi,
                 describe(p, s->writer, b, sizeof b));
        for (int x = 0; x < s->nr; x++)
            if (s->readers[x] != i && !hb_before(h, s->readers[x], i))
                note(r, R_WAR, "WAR: %s writes %s [%d, %d) that %s reads, not ordered before it",
                     describe(p, i, a, sizeof a), bn, s->lo, s->hi,
                     describe(p, s->readers[x], b, sizeof b));
        s->writer = i;
        s->nr = 0;
    }
}

static int region_ok(const g4_step_plan *p, const g4_sp_region *rg) {
    return rg->buf >= 0 && rg->buf < p->n_bufs && rg->lo >= 0 && rg->lo < rg->hi &&
           rg->hi <= p->buf_elems[rg->buf];
}

int g4_sp_check(const g4_step_plan *p, g4_sp_report *r) {
    memset(r, 0, sizeof *r);
    char a[96], nm[32];
    // bounds and counters
    for (int i = 0; i < p->n; i++) {
        const g4_sp_instr *in = &p->ins[i];
        for (int k = 0; k < in->n_rd + in->n_wr; k++) {
            const g4_sp_region *rg = k < in->n_rd ? &in->rd[k] : &in->wr[k - in->n_rd];
            if (!region_ok(p, rg))
                note(r, R_BOUNDS, "%s: region %s [%d, %d) outside the buffer",
                     describe(p, i, a, sizeof a),
                     rg->buf >= 0 && rg->buf < p->n_bufs ? g4_sp_buf_name(p, rg->buf, nm, sizeof nm)
                                                         : "?",
                     rg->lo, rg->hi);
        }
        if (in->signal >= p->n_counters || in->signal < -1)
            note(r, R_BOUNDS, "%s signals counter %d of %d", describe(p, i, a, sizeof a),
                 in->signal, p->n_counters);
        for (int w = 0; w < in->n_wait; w++)
            if (in->wait[w].counter < 0 || in->wait[w].counter >= p->n_counters ||
                in->wait[w].target < 1)
                note(r, R_BOUNDS, "%s waits on counter %d for %d", describe(p, i, a, sizeof a),
                     in->wait[w].counter, in->wait[w].target);
    }
    if (r->bounds) return g4_sp_report_errors(r);
    sigs s;
    sigs_build(p, &s);
    for (int i = 0; i < p->n; i++) {
        const g4_sp_instr *in = &p->ins[i];
        for (int w = 0; w < in->n_wait; w++) {
            const int c = in->wait[w].counter, t = in->wait[w].target, ns = n_sig(&s, c);
            if (t > ns)
                note(r, R_UNREACHED, "%s waits for %d on counter %d, which %d instructions signal",
                     describe(p, i, a, sizeof a), t, c, ns);
            else if (t < ns)
                note(r, R_PARTIAL, "%s waits for %d on counter %d, which %d instructions signal",
                     describe(p, i, a, sizeof a), t, c, ns);
        }
    }
    hb h = {p, &s, (p->n_counters + 63) / 64, NULL, NULL, 0};
    h.anc = g4_calloc((size_t)p->n_counters * h.words + 1, sizeof(uint64_t));
    h.state = g4_calloc((size_t)p->n_counters + 1, 1);
    for (int c = 0; c < p->n_counters; c++) hb_visit(&h, c);
    if (h.cycle) note(r, R_CYCLE, "counters wait on each other in a cycle");
    // the accesses in the sequential order
    segs *v = g4_calloc((size_t)p->n_bufs, sizeof(segs));
    for (int bf = 0; bf < p->n_bufs; bf++) {
        const int64_t e = p->buf_elems[bf];
        if (bf == G4_SB_IDS || bf == G4_SB_POS || bf == G4_SB_SAMP) {
            segs_push(&v[bf], 0, (int32_t)e, -2);
        } else if (bf >= G4_SB_KV0) { // rows before the first step's position: earlier steps
            const int64_t hd = e / (p->keys + p->steps - 1), before = (int64_t)(p->keys - 1) * hd;
            segs_push(&v[bf], 0, (int32_t)before, -2);
            segs_push(&v[bf], (int32_t)before, (int32_t)e, -1);
        } else {
            segs_push(&v[bf], 0, (int32_t)e, -1);
        }
    }
    for (int i = 0; i < p->n; i++) {
        const g4_sp_instr *in = &p->ins[i];
        for (int k = 0; k < in->n_rd; k++)
            access_region(p, &h, &v[in->rd[k].buf], i, &in->rd[k], 0, r);
        for (int k = 0; k < in->n_wr; k++)
            access_region(p, &h, &v[in->wr[k].buf], i, &in->wr[k], 1, r);
    }
    // two steps: the first step joins before the second begins
    int first2 = -1;
    for (int i = 0; i < p->n && first2 < 0; i++)
        if (p->ins[i].step == 1) first2 = i;
    for (int i = 0; first2 >= 0 && i < first2; i++)
        if (!hb_before(&h, i, first2))
            note(r, R_UNJOINED, "%s is not ordered before the next step's first instruction",
                 describe(p, i, a, sizeof a));
    for (int bf = 0; bf < p->n_bufs; bf++) {
        for (int k = 0; k < v[bf].n; k++) free(v[bf].s[k].readers);
        free(v[bf].s);
    }
    free(v);
    free(h.anc);
    free(h.state);
    sigs_free(&s);
    return g4_sp_report_errors(r);
}

// --- assignment and simulation -------------------------------------------------------------------

static int same_op(const g4_sp_instr *a, const g4_sp_instr *b) {
    return a->kind == b->kind && a->weight == b->weight && a->layer == b->layer &&
           a->step == b->step && a->kind != G4_SP_PLE_INPUTS;
}

void g4_sp_assign(const g4_step_plan *p, int G, g4_sp_assign_mode mode, uint32_t seed, int *cta,
                  int *order) {
    uint32_t x = seed ? seed : 0x9e3779b9u;
    for (int i = 0; i < p->n; i++) {
        order[i] = i;
        if (mode == G4_SP_RANDOM) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            cta[i] = (int)(x % (uint32_t)G);
        } else if (mode == G4_SP_REVERSED) {
            cta[i] = G - 1 - i % G;
        } else {
            cta[i] = i % G;
        }
    }
    if (mode != G4_SP_REVERSED) return;
    // each op's instructions (independent of one another) dealt out last first
    for (int i = 0; i < p->n;) {
        int j = i + 1;
        while (j < p->n && same_op(&p->ins[i], &p->ins[j])) j++;
        for (int a = i, z = j - 1; a < z; a++, z--) {
            const int t = order[a];
            order[a] = order[z];
            order[z] = t;
        }
        i = j;
    }
}

int g4_sp_simulate(const g4_step_plan *p, int G, const int *cta, const int *order,
                   g4_sp_report *r) {
    int *qn = g4_calloc((size_t)G + 1, sizeof(int)), *head = g4_calloc((size_t)G, sizeof(int));
    int *q = g4_calloc((size_t)p->n + 1, sizeof(int));
    int *val = g4_calloc((size_t)p->n_counters + 1, sizeof(int));
    for (int i = 0; i < p->n; i++) qn[cta[i] + 1]++;
    for (int b = 0; b < G; b++) qn[b + 1] += qn[b];
    for (int k = 0; k < p->n; k++) { // each CTA's queue in `order`
        const int i = order[k];
        q[qn[cta[i]] + head[cta[i]]++] = i;
    }
    memset(head, 0, sizeof(int) * (size_t)G);
    int done = 0, progress = 1;
    while (progress) {
        progress = 0;
        for (int b = 0; b < G; b++)
            while (qn[b] + head[b] < qn[b + 1]) {
                const g4_sp_instr *in = &p->ins[q[qn[b] + head[b]]];
                int ready = 1;
                for (int w = 0; w < in->n_wait; w++)
                    ready &= val[in->wait[w].counter] >= in->wait[w].target;
                if (!ready) break;
                if (in->signal >= 0) val[in->signal]++;
                head[b]++;
                done++;
                progress = 1;
            }
    }
    if (done < p->n) {
        char a[96];
        for (int b = 0; b < G; b++)
            if (qn[b] + head[b] < qn[b + 1]) {
                const int i = q[qn[b] + head[b]];
                const g4_sp_instr *in = &p->ins[i];
                int c = -1, t = 0;
                for (int w = 0; w < in->n_wait && c < 0; w++)
                    if (val[in->wait[w].counter] < in->wait[w].target)
                        c = in->wait[w].counter, t = in->wait[w].target;
                note(r, R_DEADLOCK,
                     "deadlock with %d of %d instructions run (G %d): CTA %d waits at %s on "
                     "counter %d (%d of %d)",
                     done, p->n, G, b, describe(p, i, a, sizeof a), c, c >= 0 ? val[c] : 0, t);
                break;
            }
    }
    free(qn);
    free(head);
    free(q);
    free(val);
    return done;
}

// --- counts
// ----------------------------------------------------------------------------------------

int g4_sp_count(const g4_step_plan *p, g4_sp_layer_count *out) {
    const int L = p->n_layers;
    memset(out, 0, sizeof *out * (size_t)(L + 2));
    sigs s;
    sigs_build(p, &s);
    int *depth = g4_calloc((size_t)p->n + 1, sizeof(int)),
        *cdepth = g4_calloc((size_t)p->n_counters + 1, sizeof(int));
    // the longest chain of waits ending at each instruction (waits point backwards in a plan
    // that checks clean; a counter's depth: its deepest signaler's)
    int *group_max = g4_calloc((size_t)L + 2, sizeof(int));
    for (int i = 0; i < p->n; i++) {
        const g4_sp_instr *in = &p->ins[i];
        if (in->step) continue;
        int d = 0;
        for (int w = 0; w < in->n_wait; w++)
            if (in->wait[w].counter >= 0 && in->wait[w].counter < p->n_counters &&
                cdepth[in->wait[w].counter] + 1 > d)
                d = cdepth[in->wait[w].counter] + 1;
        depth[i] = d;
        if (in->signal >= 0 && d > cdepth[in->signal]) cdepth[in->signal] = d;
        const int gi = in->layer + 1;
        out[gi].instr++;
        if (d > group_max[gi]) group_max[gi] = d;
    }
    for (int c = 0; c < p->n_counters; c++)
        if (p->ctr[c].step == 0) out[p->ctr[c].layer + 1].counters++;
    int prev = 0, total = 0;
    for (int g = 0; g < L + 2; g++) {
        const int m = group_max[g] > prev ? group_max[g] : prev;
        out[g].handovers = m - prev;
        prev = m;
        total = m;
    }
    free(depth);
    free(cdepth);
    free(group_max);
    sigs_free(&s);
    return total;
}

void g4_sp_print(const g4_step_plan *p, FILE *f) {
    char a[96], nm[32];
    for (int i = 0; i < p->n; i++) {
        const g4_sp_instr *in = &p->ins[i];
        fprintf(f, "%s k [%d, %d)", describe(p, i, a, sizeof a), in->k0, in->k1);
        for (int w = 0; w < in->n_wait; w++)
            fprintf(f, " wait c%d>=%d", in->wait[w].counter, in->wait[w].target);
        fprintf(f, " signal c%d\n   rd", in->signal);
        for (int k = 0; k < in->n_rd; k++)
            fprintf(f, " %s[%d,%d)", g4_sp_buf_name(p, in->rd[k].buf, nm, sizeof nm), in->rd[k].lo,
                    in->rd[k].hi);
        fprintf(f, "\n   wr");
        for (int k = 0; k < in->n_wr; k++)
            fprintf(f, " %s[%d,%d)", g4_sp_buf_name(p, in->wr[k].buf, nm, sizeof nm), in->wr[k].lo,
                    in->wr[k].hi);
        fprintf(f, "\n");
    }
}
