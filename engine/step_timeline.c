// step_timeline.c: the stamped step taken apart (step_timeline.h says the rule).
#include "engine/step_timeline.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

const char *g4_tl_seg_name(int seg) {
    static const char *const names[G4_TL_N] = {"start",    "queue",  "w_pre", "wait",
                                               "handover", "w_post", "read",  "write"};
    return seg >= 0 && seg < G4_TL_N ? names[seg] : "?";
}

// The queues' shape by plan index: pred[i] (the instruction before i in its CTA's queue, -1 for
// a queue's first) and, per counter, its signalers (sig[sig0[c] .. sig0[c + 1])).
typedef struct {
    int *pred, *sig0, *sig;
} tl_shape;

static void shape_build(const g4_sq *q, tl_shape *s) {
    s->pred = g4_malloc(sizeof(int) * ((size_t)q->n + 1));
    s->sig0 = g4_calloc((size_t)q->n_counters + 2, sizeof(int));
    s->sig = g4_malloc(sizeof(int) * ((size_t)q->n + 1));
    for (int b = 0; b < q->G; b++)
        for (int k = q->start[b]; k < q->start[b + 1]; k++)
            s->pred[q->ins[k].id] = k > q->start[b] ? q->ins[k - 1].id : -1;
    for (int k = 0; k < q->n; k++)
        if (q->ins[k].signal >= 0) s->sig0[q->ins[k].signal + 1]++;
    for (int c = 0; c < q->n_counters; c++) s->sig0[c + 1] += s->sig0[c];
    int *fill = g4_calloc((size_t)q->n_counters + 1, sizeof(int));
    for (int k = 0; k < q->n; k++) {
        const int c = q->ins[k].signal;
        if (c >= 0) s->sig[s->sig0[c] + fill[c]++] = q->ins[k].id;
    }
    free(fill);
}

static void shape_free(tl_shape *s) {
    free(s->pred);
    free(s->sig0);
    free(s->sig);
}

// The instruction's record in q (q->ins is queue by queue): by[plan index] = position.
static int *by_id(const g4_sq *q) {
    int *by = g4_malloc(sizeof(int) * ((size_t)q->n + 1));
    for (int k = 0; k < q->n; k++) by[q->ins[k].id] = k;
    return by;
}

// The latest signaler (largest signal stamp) of the counters instruction record `in` waits on,
// or -1.
static int latest_signaler(const tl_shape *s, const g4_sq_stamp *st, const g4_sq_instr *in) {
    int best = -1;
    for (int w = 0; w < in->n_wait; w++) {
        const int c = in->wait_ctr[w];
        for (int j = s->sig0[c]; j < s->sig0[c + 1]; j++)
            if (best < 0 || st[s->sig[j]].t[G4_TL_T_SIGNAL] > st[best].t[G4_TL_T_SIGNAL])
                best = s->sig[j];
    }
    return best;
}

int g4_tl_check(const g4_sq *q, const g4_sq_stamp *st, uint64_t *t0, uint64_t *t1,
                int64_t *min_delta, int *zero_deltas) {
    *t0 = UINT64_MAX, *t1 = 0, *min_delta = 0, *zero_deltas = 0;
    if (q->n < 1) return g4_fail(G4_EUSER, "timeline: no instruction");
    for (int b = 0; b < q->G; b++)
        for (int k = q->start[b]; k < q->start[b + 1]; k++) {
            const int i = q->ins[k].id;
            const uint64_t *t = st[i].t;
            for (int j = 0; j < G4_TL_STAMPS; j++) {
                if (t[j] == 0)
                    return g4_fail(G4_EUSER,
                                   "timeline: instruction %d has no stamp %d (it did "
                                   "not run, or the stamps were not copied)",
                                   i, j);
                if (j && t[j] < t[j - 1])
                    return g4_fail(G4_EUSER, "timeline: instruction %d's stamp %d before stamp %d",
                                   i, j, j - 1);
                if (j) {
                    const int64_t d = (int64_t)(t[j] - t[j - 1]);
                    if (d == 0)
                        (*zero_deltas)++;
                    else if (*min_delta == 0 || d < *min_delta)
                        *min_delta = d;
                }
            }
            if (k > q->start[b] && t[G4_TL_T_BEGIN] < st[q->ins[k - 1].id].t[G4_TL_T_SIGNAL])
                return g4_fail(G4_EUSER,
                               "timeline: instruction %d begins before its queue predecessor %d "
                               "signalled",
                               i, q->ins[k - 1].id);
            if (t[G4_TL_T_BEGIN] < *t0) *t0 = t[G4_TL_T_BEGIN];
            if (t[G4_TL_T_SIGNAL] > *t1) *t1 = t[G4_TL_T_SIGNAL];
        }
    return G4_OK;
}

static void own_seg(const g4_sq *q, const tl_shape *s, const int *by, const g4_sq_stamp *st,
                    int ignore_waits, int ins, int64_t *seg, int *held) {
    const uint64_t *t = st[ins].t;
    memset(seg, 0, sizeof(int64_t) * G4_TL_N);
    seg[G4_TL_W_PRE] = (int64_t)(t[G4_TL_T_PRE] - t[G4_TL_T_BEGIN]);
    seg[G4_TL_WAIT] = (int64_t)(t[G4_TL_T_WAITED] - t[G4_TL_T_PRE]);
    seg[G4_TL_W_POST] = (int64_t)(t[G4_TL_T_WTS] - t[G4_TL_T_WAITED]);
    seg[G4_TL_READ] = (int64_t)(t[G4_TL_T_READ] - t[G4_TL_T_WTS]);
    seg[G4_TL_WRITE] = (int64_t)(t[G4_TL_T_SIGNAL] - t[G4_TL_T_READ]);
    if (s->pred[ins] >= 0)
        seg[G4_TL_QUEUE] = (int64_t)(t[G4_TL_T_BEGIN] - st[s->pred[ins]].t[G4_TL_T_SIGNAL]);
    const int P = ignore_waits ? -1 : latest_signaler(s, st, &q->ins[by[ins]]);
    *held = P >= 0 && st[P].t[G4_TL_T_SIGNAL] > t[G4_TL_T_PRE];
    if (*held) seg[G4_TL_HANDOVER] = (int64_t)(t[G4_TL_T_WAITED] - st[P].t[G4_TL_T_SIGNAL]);
}

void g4_tl_own(const g4_sq *q, const g4_sq_stamp *st, int ignore_waits, int ins, int64_t *seg,
               int *held) {
    tl_shape s;
    shape_build(q, &s);
    int *by = by_id(q);
    own_seg(q, &s, by, st, ignore_waits, ins, seg, held);
    free(by);
    shape_free(&s);
}

int g4_tl_path(const g4_sq *q, const g4_sq_stamp *st, int ignore_waits, g4_tl_node *path, int *n) {
    *n = 0;
    uint64_t t0, t1;
    int64_t md;
    int zd;
    const int rc = g4_tl_check(q, st, &t0, &t1, &md, &zd);
    if (rc) return rc;
    tl_shape s;
    shape_build(q, &s);
    int *by = by_id(q);
    int i = q->ins[0].id; // the instruction that finished last
    for (int k = 0; k < q->n; k++)
        if (st[q->ins[k].id].t[G4_TL_T_SIGNAL] > st[i].t[G4_TL_T_SIGNAL]) i = q->ins[k].id;
    int m = 0;
    while (i >= 0 && m < q->n) { // (each step goes to an earlier signal stamp: no cycle)
        const uint64_t *t = st[i].t;
        g4_tl_node *nd = &path[m++];
        memset(nd, 0, sizeof *nd);
        nd->ins = i;
        nd->seg[G4_TL_W_POST] = (int64_t)(t[G4_TL_T_WTS] - t[G4_TL_T_WAITED]);
        nd->seg[G4_TL_READ] = (int64_t)(t[G4_TL_T_READ] - t[G4_TL_T_WTS]);
        nd->seg[G4_TL_WRITE] = (int64_t)(t[G4_TL_T_SIGNAL] - t[G4_TL_T_READ]);
        const int P = ignore_waits ? -1 : latest_signaler(&s, st, &q->ins[by[i]]);
        if (P >= 0 && st[P].t[G4_TL_T_SIGNAL] > t[G4_TL_T_PRE]) {
            nd->via = G4_TL_VIA_SIGNAL, nd->from = P;
            nd->seg[G4_TL_HANDOVER] = (int64_t)(t[G4_TL_T_WAITED] - st[P].t[G4_TL_T_SIGNAL]);
        } else {
            nd->seg[G4_TL_W_PRE] = (int64_t)(t[G4_TL_T_PRE] - t[G4_TL_T_BEGIN]);
            nd->seg[G4_TL_WAIT] = (int64_t)(t[G4_TL_T_WAITED] - t[G4_TL_T_PRE]);
            nd->from = s.pred[i];
            if (nd->from >= 0) {
                nd->via = G4_TL_VIA_QUEUE;
                nd->seg[G4_TL_QUEUE] = (int64_t)(t[G4_TL_T_BEGIN] - st[nd->from].t[G4_TL_T_SIGNAL]);
            } else {
                nd->via = G4_TL_VIA_START;
                nd->seg[G4_TL_START] = (int64_t)(t[G4_TL_T_BEGIN] - t0);
            }
        }
        i = nd->from;
    }
    for (int a = 0, b = m - 1; a < b; a++, b--) { // first instruction first
        const g4_tl_node tmp = path[a];
        path[a] = path[b], path[b] = tmp;
    }
    *n = m;
    free(by);
    shape_free(&s);
    return G4_OK;
}

void g4_tl_sum_by(const g4_tl_node *path, int n, const int *group, int n_groups, double *out) {
    memset(out, 0, sizeof(double) * (size_t)n_groups * G4_TL_N);
    for (int j = 0; j < n; j++) {
        const int g = group[path[j].ins];
        if (g < 0 || g >= n_groups) continue;
        for (int k = 0; k < G4_TL_N; k++) out[(size_t)g * G4_TL_N + k] += (double)path[j].seg[k];
    }
}

// "linear:o" (the op and its weight), "attention" (no weight): op = kind x G4_SW_N + weight.
static const char *op_name(int op, char *s, size_t n) {
    const int w = op % G4_SW_N;
    snprintf(s, n, "%s%s%s", g4_sp_kind_name(op / G4_SW_N), w ? ":" : "",
             w ? g4_sp_weight_name(w) : "");
    return s;
}

static void print_segs(FILE *f, const double *v, double scale) {
    for (int k = 0; k < G4_TL_N; k++) fprintf(f, " %s %.3f", g4_tl_seg_name(k), v[k] * scale);
}

int g4_tl_report(const g4_step_plan *p, const g4_sq *q, const g4_sq_stamp *st, int ignore_waits,
                 const char *prefix, FILE *f) {
    if (p->n != q->n)
        return g4_fail(G4_EUSER, "timeline: the plan has %d instructions, the queues %d", p->n,
                       q->n);
    uint64_t t0, t1;
    int64_t md;
    int zd;
    int rc = g4_tl_check(q, st, &t0, &t1, &md, &zd);
    if (rc) return rc;
    g4_tl_node *path = g4_malloc(sizeof(g4_tl_node) * (size_t)q->n);
    int n = 0;
    rc = g4_tl_path(q, st, ignore_waits, path, &n);
    if (rc) {
        free(path);
        return rc;
    }
    const int L = p->n_layers, n_lg = L + 2;
    int *layer = g4_malloc(sizeof(int) * (size_t)p->n),
        *kind = g4_malloc(sizeof(int) * (size_t)p->n);
    for (int i = 0; i < p->n; i++) {
        const int l = p->ins[i].layer;
        layer[i] = l < 0 ? 0 : l >= L ? L + 1 : l + 1;         // before / layer l / after
        kind[i] = p->ins[i].kind * G4_SW_N + p->ins[i].weight; // (the op and its weight)
    }
    const double us = 1e-3;
    int hand = 0;
    for (int j = 0; j < n; j++) hand += path[j].via == G4_TL_VIA_SIGNAL;
    fprintf(f,
            "%s span %.1f us (first begin to last signal); timer: smallest nonzero delta %lld "
            "ns, %d of %d deltas 0 (segments below that are sums of whole ticks)\n",
            prefix, (double)(t1 - t0) * us, (long long)md, zd, q->n * (G4_TL_STAMPS - 1));
    double tot[G4_TL_N] = {0}, sum = 0;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < G4_TL_N; k++) tot[k] += (double)path[j].seg[k];
    for (int k = 0; k < G4_TL_N; k++) sum += tot[k];
    fprintf(f, "%s critical path: %d instructions, %d hand-overs, %.1f us:", prefix, n, hand,
            sum * us);
    print_segs(f, tot, us);
    fprintf(f, "\n");
    double *bl = g4_malloc(sizeof(double) * (size_t)n_lg * G4_TL_N);
    g4_tl_sum_by(path, n, layer, n_lg, bl);
    double mean[G4_TL_N] = {0}, ms = 0;
    for (int l = 1; l <= L; l++)
        for (int k = 0; k < G4_TL_N; k++) mean[k] += bl[(size_t)l * G4_TL_N + k] / L;
    for (int k = 0; k < G4_TL_N; k++) ms += mean[k];
    int hl = 0; // hand-overs on the path in the layers
    for (int j = 0; j < n; j++)
        hl += path[j].via == G4_TL_VIA_SIGNAL && layer[path[j].ins] >= 1 && layer[path[j].ins] <= L;
    fprintf(f, "%s path a layer (mean of %d; %.1f hand-overs a layer): %.2f us:", prefix, L,
            (double)hl / L, ms * us);
    print_segs(f, mean, us);
    fprintf(f, "\n");
    for (int g = 0; g < n_lg; g += L + 1) {
        double s1 = 0;
        for (int k = 0; k < G4_TL_N; k++) s1 += bl[(size_t)g * G4_TL_N + k];
        fprintf(f, "%s path %s: %.2f us:", prefix,
                g ? "after the layers (final norm, LM head)" : "before the layers", s1 * us);
        print_segs(f, &bl[(size_t)g * G4_TL_N], us);
        fprintf(f, "\n");
    }
    enum { OPS = G4_SP_N_KINDS * G4_SW_N };
    char name[64];
    double *bk = g4_malloc(sizeof(double) * OPS * G4_TL_N);
    g4_tl_sum_by(path, n, kind, OPS, bk);
    int on_path[OPS] = {0};
    for (int j = 0; j < n; j++) on_path[kind[path[j].ins]]++;
    for (int o = 0; o < OPS; o++) {
        if (!on_path[o]) continue;
        fprintf(f, "%s path by op %s (%d on the path):", prefix, op_name(o, name, sizeof name),
                on_path[o]);
        print_segs(f, &bk[(size_t)o * G4_TL_N], us);
        fprintf(f, "\n");
    }
    // every instruction's own segments, by op
    double own_sum[OPS][G4_TL_N] = {{0}};
    int64_t own_max[OPS][G4_TL_N] = {{0}};
    int cnt[OPS] = {0}, held[OPS] = {0}, waits[OPS] = {0}, shorts[OPS] = {0};
    double wb[OPS] = {0}, rb[OPS] = {0}; // weight / activation bytes read (the read rate's)
    int *by = by_id(q);
    tl_shape s;
    shape_build(q, &s);
    for (int i = 0; i < q->n; i++) {
        int64_t seg[G4_TL_N];
        int h = 0;
        own_seg(q, &s, by, st, ignore_waits, i, seg, &h);
        const int o = kind[i];
        const g4_sq_instr *in = &q->ins[by[i]];
        cnt[o]++, held[o] += h, waits[o] += in->n_wait, shorts[o] += st[i].n_short;
        wb[o] += (double)in->w_runs * in->w_run;
        for (int r = 0; r < in->n_rd; r++) rb[o] += q->reg[in->reg0 + r].bytes;
        for (int k = 0; k < G4_TL_N; k++) {
            own_sum[o][k] += (double)seg[k];
            if (seg[k] > own_max[o][k]) own_max[o][k] = seg[k];
        }
    }
    for (int o = 0; o < OPS; o++) {
        if (!cnt[o]) continue;
        fprintf(f,
                "%s op %s: %d instructions, %.1f KB of weights and %.1f KB of activations read "
                "each, waits %d (%d found short), held up by a hand-over %d;"
                " mean/max us:",
                prefix, op_name(o, name, sizeof name), cnt[o], wb[o] / cnt[o] / 1e3,
                rb[o] / cnt[o] / 1e3, waits[o], shorts[o], held[o]);
        for (int k = G4_TL_QUEUE; k < G4_TL_N; k++) {
            // (the hand-over's mean over the instructions it held up; the rest over all)
            const int d = k == G4_TL_HANDOVER ? (held[o] ? held[o] : 1) : cnt[o];
            fprintf(f, " %s %.3f/%.3f", g4_tl_seg_name(k), own_sum[o][k] / d * us,
                    (double)own_max[o][k] * us);
        }
        fprintf(f, "\n");
    }
    shape_free(&s);
    free(by);
    free(bk);
    free(bl);
    free(layer);
    free(kind);
    free(path);
    return G4_OK;
}
