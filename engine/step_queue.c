// step_queue.c: a step plan as per-CTA queues of device records (engine/step_queue.h).
#include "engine/step_queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

_Static_assert((int)G4_SQ_MAX_WAIT == (int)G4_SP_MAX_WAIT, "one wait array size");

enum { TILE = 16, Q4_BLOCK = 64, Q4_TILE_BYTES = 592 }; // 16 x 64 weights: 512 + 64 + 16 bytes

int64_t g4_sq_row_bytes(g4_sq_dtype dt, int k0, int k1) {
    if (k1 <= k0) return 0;
    if (dt == G4_SQ_F16) return (int64_t)(k1 - k0) * TILE * 2;
    return (int64_t)((k1 + Q4_BLOCK - 1) / Q4_BLOCK - k0 / Q4_BLOCK) * Q4_TILE_BYTES;
}

// Bytes an element of plan buffer b: fp32 for the residual, the logits, the K-chunk and split
// partials and the integer scalars; fp16 for the rest (x, q, k, v, attention output, block
// outputs, the MLP and PLE vectors, the KV caches), as the engine's decode buffers are.
static int64_t elem_bytes(int b) {
    switch (b) {
    case G4_SB_IDS:
    case G4_SB_POS:
    case G4_SB_SAMP:
    case G4_SB_H:
    case G4_SB_H2:
    case G4_SB_LOGITS:
    case G4_SB_NEXT:
    case G4_SB_APART:
    case G4_SB_OPART:
    case G4_SB_DPART:
        return 4;
    default:
        return 2;
    }
}

// A GEMV instruction's matrix: its layer and weight (the same matrix in every step of the plan).
static int has_weight(const g4_sp_instr *in) {
    return in->weight != G4_SW_NONE && in->t0 >= 0 && in->t1 > in->t0 && in->k0 >= 0 &&
           in->k1 > in->k0;
}

static int matrix_of(const g4_sp_instr *in) {
    return (in->layer + 1) * G4_SW_N + in->weight; // layer -1 .. n_layers
}

int g4_sq_build(const g4_step_plan *p, int G, g4_sq_dtype dt, g4_sq *q) {
    memset(q, 0, sizeof *q);
    if (G < 1 || G > (1 << 20)) return g4_fail(G4_EUSER, "step queues: %d CTAs (1 .. 2^20)", G);
    if (dt != G4_SQ_Q4 && dt != G4_SQ_F16)
        return g4_fail(G4_EUSER, "step queues: weight type %d (Q4 or f16)", (int)dt);
    // every wait points backwards: the last signaler of each counter comes before the waiter
    int *last = g4_malloc(sizeof(int) * ((size_t)p->n_counters + 1));
    for (int c = 0; c < p->n_counters; c++) last[c] = -1;
    for (int i = 0; i < p->n; i++)
        if (p->ins[i].signal >= 0 && p->ins[i].signal < p->n_counters) last[p->ins[i].signal] = i;
    for (int i = 0; i < p->n; i++) {
        const g4_sp_instr *in = &p->ins[i];
        for (int w = 0; w < in->n_wait; w++) {
            const int c = in->wait[w].counter;
            if (c < 0 || c >= p->n_counters || last[c] >= i) {
                const int at = c >= 0 && c < p->n_counters ? last[c] : -1;
                free(last);
                return g4_fail(G4_EUSER,
                               "step queues: instruction #%d waits on counter %d, signalled by "
                               "#%d at or after it: not a topological order",
                               i, c, at);
            }
        }
    }
    free(last);
    // the matrices: rows (16-feature tile rows) and K of each from its instructions
    const int n_mat = (p->n_layers + 2) * G4_SW_N;
    int *mat_n = g4_calloc((size_t)n_mat, sizeof(int)),
        *mat_k = g4_calloc((size_t)n_mat, sizeof(int));
    int64_t *mat_off = g4_calloc((size_t)n_mat, sizeof(int64_t));
    for (int i = 0; i < p->n; i++) {
        const g4_sp_instr *in = &p->ins[i];
        if (!has_weight(in)) continue;
        const int m = matrix_of(in);
        if (in->t1 > mat_n[m]) mat_n[m] = in->t1;
        if (in->k1 > mat_k[m]) mat_k[m] = in->k1;
    }
    int64_t off = 0;
    for (int m = 0; m < n_mat; m++) {
        mat_off[m] = off;
        const int mult = m % G4_SW_N == G4_SW_GATE_UP ? 2 : 1; // gate and up
        off += (int64_t)(mat_n[m] + TILE - 1) / TILE * mult * g4_sq_row_bytes(dt, 0, mat_k[m]);
    }
    q->w_bytes = off;
    // the activation arena: every buffer from a 128-byte line, its elements as the engine keeps
    // them (elem_bytes)
    int64_t *buf_off = g4_calloc((size_t)p->n_bufs + 1, sizeof(int64_t));
    int64_t a = 0;
    for (int b = 0; b < p->n_bufs; b++) {
        buf_off[b] = a;
        a += (p->buf_elems[b] * elem_bytes(b) + 127) / 128 * 128;
    }
    q->act_bytes = a > 0 ? a : 128;
    // signals a step
    q->n_counters = p->n_counters;
    q->per_step = g4_calloc((size_t)p->n_counters + 1, sizeof(int));
    for (int i = 0; i < p->n; i++)
        if (p->ins[i].signal >= 0) q->per_step[p->ins[i].signal]++;
    // the queues: CTA i % G, plan order
    q->G = G;
    q->dt = dt;
    q->n = p->n;
    q->n_layers = p->n_layers;
    q->start = g4_calloc((size_t)G + 1, sizeof(int));
    q->ins = g4_calloc((size_t)p->n + 1, sizeof *q->ins);
    int n_reg = 0;
    for (int i = 0; i < p->n; i++) {
        q->start[i % G + 1]++;
        n_reg += p->ins[i].n_rd + p->ins[i].n_wr;
    }
    for (int b = 0; b < G; b++) q->start[b + 1] += q->start[b];
    q->reg = g4_calloc((size_t)n_reg + 1, sizeof *q->reg);
    int *fill = g4_calloc((size_t)G, sizeof(int));
    for (int i = 0; i < p->n; i++) {
        const g4_sp_instr *in = &p->ins[i];
        g4_sq_instr *r = &q->ins[q->start[i % G] + fill[i % G]++];
        r->id = i;
        r->signal = in->signal;
        r->n_wait = in->n_wait;
        for (int w = 0; w < in->n_wait; w++) {
            r->wait_ctr[w] = in->wait[w].counter;
            r->wait_tgt[w] = in->wait[w].target;
            r->wait_step[w] = q->per_step[in->wait[w].counter];
        }
        q->waits += in->n_wait;
        if (has_weight(in)) {
            const int m = matrix_of(in), mult = in->weight == G4_SW_GATE_UP ? 2 : 1;
            const int64_t row = mult * g4_sq_row_bytes(dt, 0, mat_k[m]);
            const int64_t k0b = dt == G4_SQ_F16 ? (int64_t)in->k0 * TILE * 2
                                                : (int64_t)(in->k0 / Q4_BLOCK) * Q4_TILE_BYTES;
            r->w_off = mat_off[m] + (int64_t)(in->t0 / TILE) * row + k0b * mult;
            r->w_stride = row;
            r->w_runs = (in->t1 - in->t0 / TILE * TILE + TILE - 1) / TILE;
            r->w_run = (int32_t)(mult * g4_sq_row_bytes(dt, in->k0, in->k1));
            // (gate|up's two matrices side by side in a tile row: one run covers both K ranges
            // only when the range is the whole row, which is the plan's gate|up)
            if (mult == 2 && (in->k0 != 0 || in->k1 != mat_k[m])) {
                const int K = mat_k[m];
                free(fill), free(mat_n), free(mat_k), free(mat_off), free(buf_off);
                g4_sq_free(q);
                return g4_fail(G4_EUSER,
                               "step queues: instruction #%d: gate|up over K [%d, %d) of %d (the "
                               "whole row expected)",
                               i, in->k0, in->k1, K);
            }
        }
        r->reg0 = q->n_reg;
        r->n_rd = in->n_rd;
        r->n_wr = in->n_wr;
        for (int k = 0; k < in->n_rd + in->n_wr; k++) {
            const g4_sp_region *rg = k < in->n_rd ? &in->rd[k] : &in->wr[k - in->n_rd];
            // (rounded out to 16 bytes: the device moves 16-byte vectors; a group's boundary is
            // a whole 16-feature tile, so only a region's ends in the cache rows move)
            const int64_t eb = elem_bytes(rg->buf), lo = (buf_off[rg->buf] + rg->lo * eb) / 16 * 16,
                          hi = (buf_off[rg->buf] + rg->hi * eb + 15) / 16 * 16;
            q->reg[q->n_reg++] = (g4_sq_region){lo, (int32_t)(hi - lo), 0};
            if (k < in->n_rd)
                q->rd_bytes += hi - lo;
            else
                q->wr_bytes += hi - lo;
        }
    }
    free(fill);
    free(mat_n);
    free(mat_k);
    free(mat_off);
    free(buf_off);
    return G4_OK;
}

void g4_sq_free(g4_sq *q) {
    free(q->start);
    free(q->ins);
    free(q->reg);
    free(q->per_step);
    memset(q, 0, sizeof *q);
}

int g4_sq_first_unmet(const int *ctr, const g4_sq_instr *in, int s) {
    int w = 0;
    while (w < in->n_wait && ctr[in->wait_ctr[w]] >= s * in->wait_step[w] + in->wait_tgt[w]) w++;
    return w;
}

int g4_sq_simulate(const g4_sq *q, int steps, int *ctr, int *stuck, int max_stuck, int *n_stuck,
                   char *why, size_t why_n) {
    memset(ctr, 0, sizeof(int) * (size_t)q->n_counters);
    *n_stuck = 0;
    if (why_n) why[0] = 0;
    int *head = g4_calloc((size_t)q->G, sizeof(int));
    int run = 0;
    for (int s = 0; s < steps; s++) {
        for (int b = 0; b < q->G; b++) head[b] = q->start[b];
        int left = q->n, progress = 1;
        while (left && progress) {
            progress = 0;
            for (int b = 0; b < q->G; b++) { // one instruction a CTA a round
                if (head[b] == q->start[b + 1]) continue;
                const g4_sq_instr *in = &q->ins[head[b]];
                if (g4_sq_first_unmet(ctr, in, s) < in->n_wait) continue;
                if (in->signal >= 0) ctr[in->signal]++;
                head[b]++;
                left--;
                run++;
                progress = 1;
            }
        }
        if (!left) continue;
        // the stuck CTAs' heads, the earliest in plan order first: the root (every instruction
        // before it ran, so its own waits are what cannot be met)
        int root = -1;
        for (int b = 0; b < q->G; b++)
            if (head[b] < q->start[b + 1] &&
                (root < 0 || q->ins[head[b]].id < q->ins[head[root]].id))
                root = b;
        if (max_stuck > 0) stuck[(*n_stuck)++] = q->ins[head[root]].id;
        for (int b = 0; b < q->G; b++)
            if (b != root && head[b] < q->start[b + 1] && *n_stuck < max_stuck)
                stuck[(*n_stuck)++] = q->ins[head[b]].id;
        if (why_n) {
            const g4_sq_instr *in = &q->ins[head[root]];
            const int w = g4_sq_first_unmet(ctr, in, s);
            snprintf(why, why_n,
                     "step %d: %d instructions left; the first stuck: CTA %d at instruction #%d, "
                     "counter %d at %d of %d",
                     s, left, root, in->id, w < in->n_wait ? in->wait_ctr[w] : -1,
                     w < in->n_wait ? ctr[in->wait_ctr[w]] : 0,
                     w < in->n_wait ? s * in->wait_step[w] + in->wait_tgt[w] : 0);
        }
        break;
    }
    free(head);
    return run;
}

// --- configs of a shape --------------------------------------------------------------------------

// (its per-layer counts are quoted in bench/NOTES.md; tests/test_step_plan.c checks it)
const g4_sp_shape g4_sp_shape_e2b = {"E2B", 1536, 35,   8,     1,   256,    512,
                                     5,     20,   6144, 12288, 256, 262144, 512};

// The first is the baseline; the others move the two reads the session-30 timeline put on the
// path (attention 5.9 us a layer: one CTA reads a split's 128 keys of K and V, 162 KB; the PLE
// gate 3.8 us: 12-24 down K-chunk partials of 6 KB), then the CPU cost model's best
// (`g4cu bench --step-model --grid`: fewer, larger instructions). math 1: the baseline, session
// 31's best measured plan (whose rows bench/NOTES.md's skmath prediction names) and the model's
// best with the math and held-words plan. (splits of <= 128 keys: one CTA reading all 512 rows
// of a KV head's fp16 K and V, 0.5-1 MB, would sit on every layer's critical path)
const g4_sp_bench_plan g4_sp_bench_plans[] = {
    {128, 0, 0, 0, 1}, // the baseline: 4 splits a KV head
    {64, 0, 0, 0, 0},
    {32, 0, 0, 0, 0},
    {128, 128, 0, 0, 0},
    {128, 128, 8, 128, 0},
    {64, 128, 8, 128, 1},
    // the cost model's best two past its old grid's edge (--grid, branch skgrid): 3072-feature
    // down chunks, groups of 16, LM groups of 64 / 128
    {64, 192, 16, 64, 0},
    {64, 192, 16, 128, 0},
    // the cost model's best with the GEMV math (--grid's math ranking, branch skmodelmath):
    // groups of 2 tiles, less math on each path instruction
    {64, 128, 2, 64, 1},
    // a held-words plan of the cost model whose largest instruction fits a CTA's shared memory
    // at 4 an SM with room for x (--grid's held ranking, branch skheld: groups of 1 tile, LM
    // groups of 2; o's 37 KB of 56; LM groups of 4 model 2.5 us faster at 55.5 KB: no room)
    {128, 128, 1, 2, 1},
};
const int g4_sp_n_bench_plans = (int)(sizeof g4_sp_bench_plans / sizeof g4_sp_bench_plans[0]);

g4_sp_opts g4_sp_bench_opts(const g4_sp_bench_plan *b) {
    return (g4_sp_opts){.grain = G4_SP_TILE,
                        .keys = G4_SP_BENCH_KEYS,
                        .steps = 1,
                        .group_tiles = b->group,
                        .chunk_tiles = b->chunk,
                        .lm_group_tiles = b->lm,
                        .split_keys = b->split};
}

void g4_sp_shape_config(const g4_sp_shape *sh, g4_text_config *c) {
    memset(c, 0, sizeof *c);
    c->hidden = sh->hidden;
    c->n_layers = sh->n_layers;
    c->n_heads = sh->heads;
    c->n_kv_heads = sh->kv;
    c->vocab = c->vocab_ple = sh->vocab;
    c->ple_dim = sh->ple;
    c->context_length = 1 << 17;
    c->layer = g4_calloc((size_t)sh->n_layers, sizeof *c->layer);
    const int owners = sh->n_layers - sh->shared;
    int last[2] = {-1, -1}, slots = 0;
    for (int l = 0; l < sh->n_layers; l++) {
        g4_layer_config *lc = &c->layer[l];
        const int full = l % sh->period == sh->period - 1;
        lc->type = full ? G4_ATTN_FULL : G4_ATTN_SLIDING;
        lc->head_dim = full ? sh->hd_global : sh->hd_local;
        lc->window = full ? 0 : sh->window;
        lc->ffn = l < owners ? sh->ffn : sh->ffn_shared;
        if (l < owners) {
            lc->kv_source = l;
            lc->kv_slot = slots++;
            last[full] = l;
        } else {
            lc->kv_source = last[full];
            lc->kv_slot = c->layer[last[full]].kv_slot;
        }
    }
    c->n_kv_layers = slots;
    c->n_kv_shared = sh->n_layers - slots;
}
