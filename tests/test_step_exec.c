// test_step_exec.c: the tile plan of engine/step_plan.h run for real on the CPU, as a
// persistent kernel's CTAs would run it: G worker threads each run their static queue of
// instructions in order, waiting on C11 atomic counters (acquire) and signalling them (release,
// after the instruction's stores), with random delays; every instruction computes its tile with
// the CPU reference's arithmetic (kernels/ref) on the tiny f16 fixture's weights.
//   - exact form (one down K chunk, one attention split: no partial sums the sequential step
//     does not make): the logits, the chosen token and the KV rows written equal the sequential
//     CPU step's bit for bit, for G = 1, 2, 3, 5, 8 and round-robin / random / reversed queues;
//     and a plan of two steps (the second takes the first's token on the device) equals two
//     sequential steps the same way (the second's logits and token, both steps' KV rows);
//   - split form (several down K chunks, several attention splits, small groups): the logits
//     within 1e-5 of the sequential step's largest, the token the same, and bit for bit the same
//     at every G, assignment and delay pattern as the one-thread run in list order;
//   - a dropped dependency with its producer delayed: the logits differ (the harness sees a race).
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "engine/step_plan.h"
#include "engine/text_model.h"
#include "kernels/ref/ref.h"
#include "tests/test_util.h"

enum { LINE_INTS = 32 }; // one counter per 128-byte line

typedef struct {
    const g4_step_plan *p;
    const g4_text_model *m;
    const g4_text_state *s; // its sampler and its caches before the step
    float **buf;            // [n_bufs] (ids, pos and next hold int32 bits)
    _Atomic int *ctr;       // [n_counters * LINE_INTS]
    const int *cta, *order;
    int G, delay_us, slow_instr, slow_us; // slow_instr: one instruction delayed slow_us first
    atomic_int failed;
} exec;

static float *B(const exec *e, int buf) {
    return e->buf[buf];
}

static int32_t geti(const exec *e, int buf) {
    int32_t v;
    memcpy(&v, e->buf[buf], sizeof v);
    return v;
}

static void seti(const exec *e, int buf, int32_t v) {
    memcpy(e->buf[buf], &v, sizeof v);
}

static void delay(int us) {
    if (us <= 0) return;
    struct timespec t = {0, (long)us * 1000};
    nanosleep(&t, NULL);
}

// y[f - f0] = x[0 .. k1 - k0) @ W[k0 .. k1, f0 .. f1): fp32 in k order, as ref_linear_f16.
static void gemv_tile(float *y, const float *x, const g4_linear *w, int k0, int k1, int f0,
                      int f1) {
    G4_ASSERT(w->kind == G4_W_F16 && !w->bias && k1 <= w->in && f1 <= w->out);
    const uint16_t *wt = w->w;
    for (int f = f0; f < f1; f++) y[f - f0] = 0.0f;
    for (int k = k0; k < k1; k++) {
        const float xv = x[k - k0];
        const uint16_t *row = wt + (size_t)k * w->out;
        for (int f = f0; f < f1; f++) y[f - f0] += xv * ref_h2f(row[f]);
    }
}

// The add-norm a GEMV group's prologue recomputes: x (scratch) from the residual hin and the
// block output (the sum of r_parts K-chunk partials, in chunk order); the new residual into
// hout when the instruction writes it.
static void prologue(const exec *e, const g4_sp_instr *in, float *x, float *hnew) {
    const g4_text_config *c = e->m->cfg;
    const g4_text_layer *L = e->m->layers;
    const int H = c->hidden, l = in->layer;
    const float *hin = B(e, in->rd[0].buf);
    if (in->n_rd == 1) { // layer 0's input norm, no add
        ref_rmsnorm(x, hin, L[0].input_norm, 1, H, H, c->rms_eps);
        return;
    }
    const g4_sp_region *rr = &in->rd[1];
    const int parts = (rr->hi - rr->lo) / H;
    float *r = x; // (the sum of the partials, then x over it)
    memcpy(r, B(e, rr->buf) + rr->lo, sizeof(float) * (size_t)H);
    for (int k = 1; k < parts; k++)
        for (int i = 0; i < H; i++) r[i] += B(e, rr->buf)[rr->lo + (size_t)k * H + i];
    const void *w, *scale = NULL, *next_w = NULL;
    int next_norm = 1;
    if (in->weight == G4_SW_GATE_UP) {
        w = L[l].post_attn_norm, next_w = L[l].pre_ff_norm;
    } else if (in->weight == G4_SW_PLE_GATE) {
        w = L[l].post_ff_norm, next_norm = 0;
    } else { // q|k|v of layer l > 0, or the final norm (l = n_layers)
        w = L[l - 1].post_ple_norm, scale = L[l - 1].layer_scalar;
        next_w = l < c->n_layers ? L[l].input_norm : e->m->final_norm;
    }
    memcpy(hnew, hin, sizeof(float) * (size_t)H);
    ref_add_rmsnorm(hnew, r, w, 1, H, c->rms_eps,
                    scale ? g4_f16_to_f32(*(const uint16_t *)scale) : 1.0f);
    if (next_norm)
        ref_rmsnorm(x, hnew, next_w, 1, H, H, c->rms_eps);
    else
        memcpy(x, hnew, sizeof(float) * (size_t)H);
    for (int k = 0; k < in->n_wr; k++) // (the op's first group writes the new residual)
        if (in->wr[k].buf == G4_SB_H || in->wr[k].buf == G4_SB_H2)
            memcpy(B(e, in->wr[k].buf), hnew, sizeof(float) * (size_t)H);
}

static const g4_linear *weight(const exec *e, int w, int l) {
    const g4_text_layer *L = &e->m->layers[l < 0 ? 0 : l];
    switch (w) {
    case G4_SW_PLE_MODEL_PROJ:
        return &e->m->ple_model_proj;
    case G4_SW_LM_HEAD:
        return &e->m->lm_head;
    case G4_SW_QKV:
        return &L->qkv;
    case G4_SW_Q:
        return &L->q;
    case G4_SW_K:
        return &L->k;
    case G4_SW_V:
        return &L->v;
    case G4_SW_O:
        return &L->o;
    case G4_SW_GATE_UP:
        return &L->gate;
    case G4_SW_DOWN:
        return &L->down;
    case G4_SW_PLE_GATE:
        return &L->ple_gate;
    case G4_SW_PLE_PROJ:
        return &L->ple_proj;
    default:
        G4_ASSERT(!"no weight");
        return NULL;
    }
}

// The attention split (KV head g, split j): the group's query heads prepared (norm, RoPE), the
// new k, v row prepared and stored when the split holds it, then each head's scores over the
// split's rows in double as ref_attention; the partial [o (normalised) | m | l] per head.
static void attention_split(const exec *e, const g4_sp_instr *in, float *scr) {
    const g4_text_config *c = e->m->cfg;
    const int l = in->layer, g = in->t0, j = in->t1;
    const g4_layer_config *lc = &c->layer[l];
    const g4_text_layer *L = &e->m->layers[l];
    const int hd = lc->head_dim, gs = c->n_heads / c->n_kv_heads, pos = geti(e, G4_SB_POS);
    const float *inv = e->m->inv_freq[lc->rope];
    float *q = scr, *kn = scr + (size_t)gs * hd, *vn = kn + hd;
    memcpy(q, B(e, in->rd[0].buf) + in->rd[0].lo, sizeof(float) * (size_t)gs * hd);
    ref_rmsnorm(q, q, L->q_norm, 1, gs * hd, hd, c->rms_eps);
    ref_rope(q, 1, gs, hd, &pos, inv);
    int new_row = 0, kb = -1;
    for (int k = 0; k < in->n_wr; k++)
        if (in->wr[k].buf >= G4_SB_KV0 && !new_row) new_row = 1, kb = in->wr[k].buf; // (K, then V)
    if (new_row) { // rd: q, k, v, pos, ...
        memcpy(kn, B(e, in->rd[1].buf) + in->rd[1].lo, sizeof(float) * (size_t)hd);
        memcpy(vn, B(e, in->rd[2].buf) + in->rd[2].lo, sizeof(float) * (size_t)hd);
        ref_rmsnorm(kn, kn, L->k_norm, 1, hd, hd, c->rms_eps);
        ref_rope(kn, 1, 1, hd, &pos, inv);
        ref_rmsnorm(vn, vn, NULL, 1, hd, hd, c->rms_eps);
        memcpy(B(e, kb) + (size_t)pos * hd, kn, sizeof(float) * (size_t)hd);
        memcpy(B(e, kb + 1) + (size_t)pos * hd, vn, sizeof(float) * (size_t)hd);
    }
    // the split's rows, from the plan's split rule (the cache regions it reads stop at pos for
    // the split that prepares the new row)
    int lo, per;
    g4_sp_splits(pos + 1, lc->window, e->p->split_keys, e->p->max_splits, &lo, &per);
    const int r0 = lo + j * per < pos + 1 ? lo + j * per : pos + 1,
              r1 = r0 + per < pos + 1 ? r0 + per : pos + 1;
    const int slot_buf = G4_SB_KV0 + 2 * (lc->kv_slot * c->n_kv_heads + g);
    const float *kc = B(e, slot_buf), *vc = B(e, slot_buf + 1);
    float *out = B(e, G4_SB_APART) + in->wr[in->n_wr - 1].lo;
    double *p = (double *)(vn + hd + 2), *acc = p + (r1 > r0 ? r1 - r0 : 1);
    for (int h = 0; h < gs; h++) {
        const float *qh = q + (size_t)h * hd;
        float *o = out + (size_t)h * (hd + 2);
        double mx = -INFINITY, sum = 0;
        for (int r = r0; r < r1; r++) {
            const float *kr = r == pos && new_row ? kn : kc + (size_t)r * hd;
            double d = 0;
            for (int x = 0; x < hd; x++) d += (double)qh[x] * kr[x];
            p[r - r0] = d * c->attn_scale;
            if (p[r - r0] > mx) mx = p[r - r0];
        }
        for (int r = r0; r < r1; r++) sum += (p[r - r0] = exp(p[r - r0] - mx));
        for (int x = 0; x < hd; x++) acc[x] = 0;
        for (int r = r0; r < r1; r++) {
            const float *vr = r == pos && new_row ? vn : vc + (size_t)r * hd;
            for (int x = 0; x < hd; x++) acc[x] += p[r - r0] * vr[x];
        }
        for (int x = 0; x < hd; x++) o[x] = r1 > r0 ? (float)(acc[x] / sum) : 0.0f;
        o[hd] = r1 > r0 ? (float)mx : -INFINITY; // (an empty split weighs nothing)
        o[hd + 1] = (float)sum;
    }
}

// The o GEMV's input for KV head g: its heads' splits merged (one split: its output as is).
static void merge_splits(const exec *e, const g4_sp_instr *in, float *a) {
    const g4_text_config *c = e->m->cfg;
    const int hd = c->layer[in->layer].head_dim, gs = c->n_heads / c->n_kv_heads;
    const float *ap = B(e, G4_SB_APART) + in->rd[0].lo;
    const int S = (in->rd[0].hi - in->rd[0].lo) / (gs * (hd + 2));
    for (int h = 0; h < gs; h++) {
        float *o = a + (size_t)h * hd;
        if (S == 1) {
            memcpy(o, ap + (size_t)h * (hd + 2), sizeof(float) * (size_t)hd);
            continue;
        }
        double M = -INFINITY, den = 0;
        for (int j = 0; j < S; j++) {
            const float *pj = ap + ((size_t)j * gs + h) * (hd + 2);
            if (pj[hd] > M) M = pj[hd];
        }
        for (int j = 0; j < S; j++) {
            const float *pj = ap + ((size_t)j * gs + h) * (hd + 2);
            den += pj[hd] == -INFINITY ? 0 : pj[hd + 1] * exp(pj[hd] - M);
        }
        for (int x = 0; x < hd; x++) {
            double num = 0;
            for (int j = 0; j < S; j++) {
                const float *pj = ap + ((size_t)j * gs + h) * (hd + 2);
                if (pj[hd] != -INFINITY) num += pj[hd + 1] * exp(pj[hd] - M) * pj[x];
            }
            o[x] = (float)(num / den);
        }
    }
}

static void run_instr(exec *e, int i, float *scr) {
    const g4_sp_instr *in = &e->p->ins[i];
    const g4_text_model *m = e->m;
    const g4_text_config *c = m->cfg;
    const int H = c->hidden, P = c->ple_dim, LP = c->n_layers * P;
    switch (in->kind) {
    case G4_SP_EMBED:
        if (in->step) { // the second step: the token the first chose, one position on
            seti(e, G4_SB_IDS, geti(e, G4_SB_NEXT));
            seti(e, G4_SB_POS, geti(e, G4_SB_POS) + 1);
        }
        ref_embed(B(e, G4_SB_X), m->embed_tokens, H, (const int32_t *)B(e, G4_SB_IDS), 1,
                  c->embed_scale);
        memcpy(B(e, G4_SB_H), B(e, G4_SB_X), sizeof(float) * (size_t)H);
        return;
    case G4_SP_PLE_INPUTS: { // cpu_ple_inputs on one layer's slice
        float *x = B(e, G4_SB_PLE) + (size_t)in->t0 * P, *tok = scr;
        for (int k = 0; k < P; k++) x[k] *= c->ple_proj_scale;
        ref_rmsnorm(x, x, m->ple_proj_norm, 1, P, P, c->rms_eps);
        const uint16_t *row =
            (const uint16_t *)m->embed_ple + (size_t)geti(e, G4_SB_IDS) * LP + (size_t)in->t0 * P;
        ref_embed(tok, row, P, &(int32_t){0}, 1, c->ple_token_scale);
        for (int k = 0; k < P; k++) x[k] = (x[k] + tok[k]) * c->ple_combine_scale;
        return;
    }
    case G4_SP_ATTENTION:
        attention_split(e, in, scr);
        return;
    case G4_SP_ADD_NORM: // the final norm: the new residual and x
        prologue(e, in, B(e, G4_SB_X), scr);
        return;
    case G4_SP_SAMPLE: {
        float *lg = scr;
        memcpy(lg, B(e, G4_SB_LOGITS), sizeof(float) * (size_t)c->vocab);
        if (c->final_softcap > 0) ref_softcap(lg, (size_t)c->vocab, c->final_softcap);
        seti(e, G4_SB_NEXT,
             ref_sample_row(lg, c->vocab, (const g4_sample_params *)e->s->samp.data,
                            (uint32_t)geti(e, G4_SB_POS)));
        return;
    }
    case G4_SP_LINEAR:
        break;
    default:
        G4_ASSERT(!"unexpected instruction kind");
    }
    const g4_sp_region *y = &in->wr[in->n_wr - 1];
    const int f0 = in->t0, f1 = in->t1, n = f1 - f0;
    float *x = scr, *t = scr + 2 * (size_t)H + 4096, *u = t + n, *hnew = scr + H;
    const g4_linear *w = weight(e, in->weight, in->layer);
    switch (in->weight) {
    case G4_SW_QKV:
    case G4_SW_Q:
    case G4_SW_K:
    case G4_SW_V:
    case G4_SW_GATE_UP:
    case G4_SW_PLE_GATE:
        prologue(e, in, x, hnew);
        gemv_tile(t, x, w, 0, H, f0, f1);
        if (in->weight == G4_SW_GATE_UP) {
            gemv_tile(u, x, &m->layers[in->layer].up, 0, H, f0, f1);
            ref_gelu_mul(t, t, u, (size_t)n);
        } else if (in->weight == G4_SW_PLE_GATE) {
            ref_gelu_mul(t, t, B(e, G4_SB_PLE) + (size_t)in->layer * P + f0, (size_t)n);
        }
        break;
    case G4_SW_O:
        merge_splits(e, in, x);
        gemv_tile(t, x, w, in->k0, in->k1, f0, f1);
        break;
    default: // input read as is: rd[0] = [k0, k1) of it
        gemv_tile(t, B(e, in->rd[0].buf) + in->rd[0].lo, w, in->k0, in->k1, f0, f1);
    }
    memcpy(B(e, y->buf) + y->lo, t, sizeof(float) * (size_t)n);
}

typedef struct {
    exec *e;
    int b;
} worker;

static void *work(void *arg) {
    worker *wk = arg;
    exec *e = wk->e;
    const g4_step_plan *p = e->p;
    uint32_t rnd = 0x9e3779b9u * (uint32_t)(wk->b + 1);
    const int H = e->m->cfg->hidden;
    float *scr = g4_malloc(sizeof(float) * ((size_t)e->m->cfg->vocab + 8 * (size_t)H + 65536));
    for (int k = 0; k < p->n; k++) {
        const int i = e->order[k];
        if (e->cta[i] != wk->b) continue;
        const g4_sp_instr *in = &p->ins[i];
        for (int w = 0; w < in->n_wait; w++) {
            long spins = 0;
            while (atomic_load_explicit(&e->ctr[in->wait[w].counter * LINE_INTS],
                                        memory_order_acquire) < in->wait[w].target) {
                if (++spins > 200000000L || atomic_load(&e->failed)) { // stuck: a plan bug
                    atomic_store(&e->failed, 1);
                    free(scr);
                    return NULL;
                }
                if (spins % 1024 == 0) delay(1);
            }
        }
        if (e->delay_us) {
            rnd ^= rnd << 13, rnd ^= rnd >> 17, rnd ^= rnd << 5;
            delay((int)(rnd % (uint32_t)e->delay_us));
        }
        if (i == e->slow_instr) delay(e->slow_us);
        run_instr(e, i, scr);
        if (in->signal >= 0)
            atomic_fetch_add_explicit(&e->ctr[in->signal * LINE_INTS], 1, memory_order_release);
    }
    free(scr);
    return NULL;
}

typedef struct {
    float *logits; // [V]
    int32_t next;
    float *kv; // every owner slot's new K and V rows, [slots][kv][K, V][steps][hd]
} result;

// Runs plan p for the state's next token (its caches as they are: rows before pos) over G
// threads (slow_instr held back slow_us first; pin_a >= 0: slow_instr on the last CTA, pin_a on
// the first); logits (soft-capped), the token and the KV rows written come back in res.
// Returns 0, or -1 when a thread stalled.
static int run_plan(const g4_step_plan *p, const g4_text_model *m, const g4_text_state *s,
                    int32_t id, int G, g4_sp_assign_mode mode, int delay_us, int slow_instr,
                    int slow_us, int pin_a, result *res) {
    const g4_text_config *c = m->cfg;
    exec e;
    memset(&e, 0, sizeof e);
    e.p = p, e.m = m, e.s = s, e.G = G, e.delay_us = delay_us;
    e.slow_instr = slow_instr, e.slow_us = slow_us;
    e.buf = g4_calloc((size_t)p->n_bufs, sizeof(float *));
    for (int b = 0; b < p->n_bufs; b++)
        e.buf[b] = g4_calloc((size_t)p->buf_elems[b] + 1, sizeof(float));
    const int pos0 = s->n_past;
    seti(&e, G4_SB_IDS, id);
    seti(&e, G4_SB_POS, pos0);
    // the caches' rows before pos, per KV head (the state's are [capacity, kv * hd])
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *lc = &c->layer[l];
        if (lc->kv_source != l) continue;
        const int hd = lc->head_dim, kvw = c->n_kv_heads * hd;
        for (int g = 0; g < c->n_kv_heads; g++)
            for (int r = 0; r < pos0; r++) {
                const int b = G4_SB_KV0 + 2 * (lc->kv_slot * c->n_kv_heads + g);
                memcpy(e.buf[b] + (size_t)r * hd,
                       (const float *)s->kc[lc->kv_slot].data + (size_t)r * kvw + g * hd,
                       sizeof(float) * (size_t)hd);
                memcpy(e.buf[b + 1] + (size_t)r * hd,
                       (const float *)s->vc[lc->kv_slot].data + (size_t)r * kvw + g * hd,
                       sizeof(float) * (size_t)hd);
            }
    }
    e.ctr = g4_calloc((size_t)p->n_counters * LINE_INTS + 1, sizeof(_Atomic int));
    int *cta = g4_calloc((size_t)p->n, sizeof(int)), *order = g4_calloc((size_t)p->n, sizeof(int));
    g4_sp_assign(p, G, mode, 11u + (uint32_t)G, cta, order);
    if (pin_a >= 0) { // (the race test: the slow producer on the last CTA, pin_a on the first)
        cta[slow_instr] = G - 1;
        cta[pin_a] = 0;
    }
    e.cta = cta, e.order = order;
    pthread_t th[16];
    worker wk[16];
    G4_ASSERT(G >= 1 && G <= 16);
    for (int b = 0; b < G; b++) {
        wk[b] = (worker){&e, b};
        G4_ASSERT(pthread_create(&th[b], NULL, work, &wk[b]) == 0);
    }
    for (int b = 0; b < G; b++) pthread_join(th[b], NULL);
    memcpy(res->logits, e.buf[G4_SB_LOGITS], sizeof(float) * (size_t)c->vocab);
    if (c->final_softcap > 0) ref_softcap(res->logits, (size_t)c->vocab, c->final_softcap);
    res->next = geti(&e, G4_SB_NEXT);
    size_t o = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *lc = &c->layer[l];
        if (lc->kv_source != l) continue;
        for (int g = 0; g < c->n_kv_heads; g++)
            for (int kv = 0; kv < 2; kv++) {
                const int b = G4_SB_KV0 + 2 * (lc->kv_slot * c->n_kv_heads + g) + kv;
                memcpy(res->kv + o, e.buf[b] + (size_t)pos0 * lc->head_dim,
                       sizeof(float) * (size_t)lc->head_dim * (size_t)p->steps);
                o += (size_t)lc->head_dim * (size_t)p->steps;
            }
    }
    const int failed = atomic_load(&e.failed);
    for (int b = 0; b < p->n_bufs; b++) free(e.buf[b]);
    free(e.buf);
    free((void *)e.ctr);
    free(cta);
    free(order);
    return failed ? -1 : 0;
}

static size_t kv_floats(const g4_text_config *c) {
    size_t n = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer[l].kv_source == l) n += 2 * (size_t)c->n_kv_heads * c->layer[l].head_dim;
    return n;
}

// The sequential steps' KV rows pos .. pos + rows - 1, in run_plan's order.
static void state_kv(const g4_text_state *s, int pos, int rows, float *kv) {
    const g4_text_config *c = s->m->cfg;
    size_t o = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *lc = &c->layer[l];
        if (lc->kv_source != l) continue;
        const int hd = lc->head_dim, kvw = c->n_kv_heads * hd;
        for (int g = 0; g < c->n_kv_heads; g++)
            for (int kv2 = 0; kv2 < 2; kv2++)
                for (int r = pos; r < pos + rows; r++) {
                    const g4_buf *cb = kv2 ? &s->vc[lc->kv_slot] : &s->kc[lc->kv_slot];
                    memcpy(kv + o, (const float *)cb->data + (size_t)r * kvw + g * hd,
                           sizeof(float) * (size_t)hd);
                    o += (size_t)hd;
                }
    }
}

int main(void) {
    g4_package *pk;
    CHECK_MSG(g4_package_open(g4t_env("G4_TINY_PKG"), &pk) == 0, "%s", g4_error());
    g4_text_model *m;
    CHECK_MSG(g4_text_model_load(pk, g4_backend_cpu(), &m) == 0, "%s", g4_error());
    const g4_text_config *c = m->cfg;
    const int V = c->vocab;
    const size_t nkv = kv_floats(c);
    // two states at the same point: one steps sequentially (the oracle), the other's caches are
    // what the plan runs read
    g4_text_state *s, *ref;
    CHECK(g4_text_state_new(m, 32, 8, &s) == 0 && g4_text_state_new(m, 32, 8, &ref) == 0);
    const int32_t ids[6] = {2, 17, 5, 40, 9, 77};
    CHECK(g4_text_forward(s, ids, 5, NULL, NULL, 0) == 0);
    CHECK(g4_text_forward(ref, ids, 5, NULL, NULL, 0) == 0);
    float *want = g4_malloc(sizeof(float) * (size_t)V),
          *want2 = g4_malloc(sizeof(float) * (size_t)V);
    float *want_kv = g4_malloc(sizeof(float) * nkv), *want_kv2 = g4_malloc(sizeof(float) * 2 * nkv);
    int32_t want_next = -1, want_next2 = -1;
    {
        g4_text_state *r2;
        CHECK(g4_text_state_new(m, 32, 8, &r2) == 0);
        CHECK(g4_text_forward(r2, ids, 5, NULL, NULL, 0) == 0);
        CHECK(g4_text_step(r2, ids + 5, 1, NULL, &want_next) == 0);
        CHECK(g4_text_step(r2, &want_next, 1, NULL, &want_next2) == 0);
        g4_text_state_free(r2);
        CHECK(g4_text_forward(ref, ids + 5, 1, NULL, want, 0) == 0);
        state_kv(ref, 5, 1, want_kv);
        CHECK(g4_text_forward(ref, &want_next, 1, NULL, want2, 0) == 0);
        state_kv(ref, 5, 2, want_kv2);
    }
    g4_sp_flags f;
    g4_sp_flags_of_state(s, &f);
    result got = {g4_malloc(sizeof(float) * (size_t)V), -1, g4_malloc(sizeof(float) * 2 * nkv)};
    result base = {g4_malloc(sizeof(float) * (size_t)V), -1, g4_malloc(sizeof(float) * 2 * nkv)};
    int ffn_max = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer[l].ffn > ffn_max) ffn_max = c->layer[l].ffn;
    static const int Gs[] = {1, 2, 3, 5, 8};
    int runs = 0;
    for (int form = 0; form < 2; form++) {
        // exact: one down chunk, one split; split: chunks of 2 tiles, splits of 2 keys, groups
        // of 1 tile
        const g4_sp_opts o =
            form == 0 ? (g4_sp_opts){G4_SP_TILE, 6, 1, 2, (ffn_max + 15) / 16, 4, 4096, 16, 0}
                      : (g4_sp_opts){G4_SP_TILE, 6, 1, 1, 2, 1, 2, 16, form};
        g4_step_plan p;
        CHECK_MSG(g4_sp_build(c, &f, &o, &p) == 0, "%s", g4_error());
        g4_sp_report r;
        CHECK_INT(g4_sp_check(&p, &r), 0);
        CHECK(run_plan(&p, m, s, ids[5], 1, G4_SP_ROUND_ROBIN, 0, -1, 0, -1, &base) == 0);
        runs++;
        if (form == 0) {
            CHECK_MSG(memcmp(base.logits, want, sizeof(float) * (size_t)V) == 0,
                      "exact form: logits differ from the sequential step's");
            CHECK(memcmp(base.kv, want_kv, sizeof(float) * nkv) == 0);
        } else {
            double md = 0, mx = 0;
            for (int k = 0; k < V; k++) {
                md = fmax(md, fabs((double)base.logits[k] - want[k]));
                mx = fmax(mx, fabs((double)want[k]));
            }
            CHECK_MSG(md <= 1e-5 * mx, "split form: max |dlogit| %g of %g", md, mx);
            printf("  split form (%d instructions): max |logit - sequential| %.3g (of %.3g)\n", p.n,
                   md, mx);
        }
        CHECK_INT(base.next, want_next);
        for (size_t k = 0; k < sizeof Gs / sizeof Gs[0]; k++)
            for (int mode = 0; mode < 3; mode++) {
                CHECK(run_plan(&p, m, s, ids[5], Gs[k], (g4_sp_assign_mode)mode, 30, -1, 0, -1,
                               &got) == 0);
                CHECK_MSG(memcmp(got.logits, base.logits, sizeof(float) * (size_t)V) == 0 &&
                              memcmp(got.kv, base.kv, sizeof(float) * nkv) == 0 &&
                              got.next == base.next,
                          "form %d, G %d, mode %d: the run differs from the one-thread run", form,
                          Gs[k], mode);
                runs++;
            }
        if (form == 1) {
            // a dropped dependency: layer 1's first attention split stops waiting for q|k|v,
            // whose first group (on another thread) is held back 200 ms: the split reads q
            // before it is written, and the logits change
            int a = -1, q = -1;
            for (int i = 0; i < p.n && a < 0; i++)
                if (p.ins[i].kind == G4_SP_ATTENTION && p.ins[i].layer == 1) a = i;
            for (int i = 0; i < p.n && q < 0; i++)
                if (p.ins[i].kind == G4_SP_LINEAR && p.ins[i].layer == 1 &&
                    p.ins[i].signal == p.ins[a].wait[0].counter)
                    q = i;
            CHECK(a > q && q >= 0);
            p.ins[a].n_wait = 0;
            CHECK(g4_sp_check(&p, &r) > 0 && r.raw > 0);
            const int rc = run_plan(&p, m, s, ids[5], 2, G4_SP_ROUND_ROBIN, 0, q, 200000, a, &got);
            CHECK(rc == 0);
            CHECK_MSG(memcmp(got.logits, base.logits, sizeof(float) * (size_t)V) != 0,
                      "a dropped dependency went unseen");
            p.ins[a].n_wait = 1;
        }
        g4_sp_free(&p);
    }
    // two steps in one plan (the second takes the token the first chose, one position on; its
    // counters a second bank): the second step's logits and token and both steps' KV rows equal
    // the sequential steps' bit for bit
    {
        const g4_sp_opts o = {G4_SP_TILE, 6, 2, 2, (ffn_max + 15) / 16, 4, 4096, 16, 0};
        g4_step_plan p;
        CHECK_MSG(g4_sp_build(c, &f, &o, &p) == 0, "%s", g4_error());
        g4_sp_report r;
        CHECK_INT(g4_sp_check(&p, &r), 0);
        for (size_t k = 0; k < sizeof Gs / sizeof Gs[0]; k++)
            for (int mode = 0; mode < 3; mode++) {
                CHECK(run_plan(&p, m, s, ids[5], Gs[k], (g4_sp_assign_mode)mode, 30, -1, 0, -1,
                               &got) == 0);
                CHECK_MSG(memcmp(got.logits, want2, sizeof(float) * (size_t)V) == 0 &&
                              memcmp(got.kv, want_kv2, sizeof(float) * 2 * nkv) == 0 &&
                              got.next == want_next2,
                          "two steps, G %d, mode %d: differ from the sequential steps", Gs[k],
                          mode);
                runs++;
            }
        g4_sp_free(&p);
    }
    printf("  %d plan runs: exact form bit for bit the sequential step (and two steps), split "
           "form the same bits at every G and assignment\n",
           runs);
    free(f.qkv);
    free(want);
    free(want2);
    free(want_kv);
    free(want_kv2);
    free(got.logits);
    free(got.kv);
    free(base.logits);
    free(base.kv);
    g4_text_state_free(s);
    g4_text_state_free(ref);
    g4_text_model_free(m);
    g4_package_close(pk);
    return g4t_finish("test_step_exec");
}
