// test_step_plan.c: the decode step as a plan of instructions with dependency counters
// (engine/step_plan.h), checked on the CPU.
//   1. exact instruction and counter counts of a small config worked out by hand (both
//      granularities; the kernel plan with the add-norms fused and apart);
//   2. the kernel plan against a real CPU step: every op call of one g4_text_step (recorded by
//      a wrapping backend, the outermost call only) has the plan instruction's kind, weight and
//      exactly its read and written buffer regions, on the tiny f16 fixture (with and without
//      q|k|v weights), its Q4 decoder and alt-tiny, under every combination of G4_QKV, G4_FUSE,
//      G4_FUSE_ATTN, G4_PERSIST_MLP and G4_PLE_FUSED;
//   3. both granularities, one step and two, pass the hazard check and run without deadlock
//      for G = 1, 2, 3, 132, 264 CTAs (round robin), random and reversed assignments, on the
//      fixtures' configs and configs made in memory (E2B's shape, hidden 2048 / 2560, GQA 4:1,
//      another layer pattern, KV-shared layers), at several sequence lengths;
//   4. mutations the checker must catch: a dropped dependency, a region reused too early (a
//      down chunk's partials over the o partials; the residual written in place), a split
//      count that does not follow the sequence length (above and below), a waiting instruction
//      before its producer in the same CTA queue;
//   5. the step skeleton's queues (engine/step_queue.h) for every plan above, G 1, 3 and 264, Q4
//      and f16 bytes: every instruction assigned once, queues in plan order by the rule, two
//      steps simulated to the end with every counter at twice its signals, the weight bytes
//      those of the config (each byte streamed once where the tiles align), a wait one above
//      its target reported as the first stuck instruction, a forward wait refused.
// Prints the E2B-shaped config's per-layer counts (bench/NOTES.md quotes them).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/step_plan.h"
#include "engine/step_queue.h"
#include "engine/text_model.h"
#include "tests/test_util.h"

// --- configs made in memory -----------------------------------------------------------------

// (the shapes and their configs: engine/step_queue.h, shared with the step skeleton's bench)
typedef g4_sp_shape shape;

static g4_text_config make_cfg(const shape *sh) {
    g4_text_config c;
    g4_sp_shape_config(sh, &c);
    return c;
}

#define E2B g4_sp_shape_e2b // (its counts are quoted in bench/NOTES.md)
static const shape SHAPES[] = {
    {"hidden 2048, GQA 4:1", 2048, 12, 8, 2, 128, 256, 4, 4, 4096, 8192, 128, 32768, 256},
    {"hidden 2560, GQA 4:1, period 6", 2560, 14, 16, 4, 128, 256, 6, 6, 6912, 6912, 256, 16384,
     1024},
    {"no sharing, period 3, odd ffn", 512, 7, 4, 2, 64, 128, 3, 0, 1360, 1360, 64, 4096, 64},
};

static g4_sp_flags flags_all(const g4_text_config *c, int qkv, int fuse, int attn, int mlp,
                             int ple) {
    g4_sp_flags f = {fuse, attn, mlp, ple, g4_calloc((size_t)c->n_layers, 1)};
    for (int l = 0; l < c->n_layers; l++) f.qkv[l] = qkv && c->layer[l].kv_source == l;
    return f;
}

// --- the checks on one plan ---------------------------------------------------------------------

static int plan_clean(const g4_step_plan *p, const char *what) {
    g4_sp_report r;
    const int e = g4_sp_check(p, &r);
    CHECK_MSG(e == 0, "%s: %d hazard-check errors", what, e);
    if (e) g4_sp_report_print(&r, stdout);
    return e == 0;
}

// Deadlock-free for every G and assignment mode asked here; returns the runs checked.
static int plan_runs(const g4_step_plan *p, const char *what) {
    static const int Gs[] = {1, 2, 3, 132, 264};
    int *cta = g4_calloc((size_t)p->n, sizeof(int)), *order = g4_calloc((size_t)p->n, sizeof(int));
    int runs = 0;
    for (size_t k = 0; k < sizeof Gs / sizeof Gs[0]; k++)
        for (int mode = 0; mode < 3; mode++) {
            g4_sp_assign(p, Gs[k], (g4_sp_assign_mode)mode, 7u + (uint32_t)k, cta, order);
            g4_sp_report r;
            memset(&r, 0, sizeof r);
            const int done = g4_sp_simulate(p, Gs[k], cta, order, &r);
            CHECK_MSG(done == p->n && r.deadlock == 0, "%s: G %d mode %d: %d of %d run: %s", what,
                      Gs[k], mode, done, p->n, r.first[9]);
            runs++;
        }
    free(cta);
    free(order);
    return runs;
}

// --- 5. the step skeleton's queues (engine/step_queue.h)
// -------------------------------------------

static int queues_checked, queue_sims;

// Weight bytes of an N x K matrix in the repacked layout, worked out here from the format: Q4
// 592 bytes a 16 x 64 tile (512 of codes, 64 of fp16 scales, 16 of zero points), f16 2 bytes a
// weight; N in 16-feature tile rows, K in 64-wide blocks (Q4).
static int64_t mat_bytes(g4_sq_dtype dt, int64_t N, int64_t K) {
    const int64_t rows = (N + 15) / 16;
    return dt == G4_SQ_F16 ? rows * 16 * K * 2 : rows * ((K + 63) / 64) * 592;
}

// A step's weight bytes from the config alone: the PLE model projection, each layer's q|k|v (k
// and v on the layers that own their cache), o, gate and up, down, the PLE gate and projection,
// and the LM head.
static int64_t step_bytes(const g4_text_config *c, g4_sq_dtype dt) {
    const int64_t H = c->hidden, P = c->ple_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    int64_t b = mat_bytes(dt, (int64_t)c->n_layers * P, H) + mat_bytes(dt, c->vocab, H);
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *lc = &c->layer[l];
        const int64_t hd = lc->head_dim, own = lc->kv_source == l;
        b += mat_bytes(dt, (nh + 2 * nkv * own) * hd, H) + mat_bytes(dt, H, nh * hd);
        b += 2 * mat_bytes(dt, lc->ffn, H) + mat_bytes(dt, H, lc->ffn);
        b += mat_bytes(dt, P, H) + mat_bytes(dt, H, P);
    }
    return b;
}

// 1 when every group boundary of the tile plan falls on a 16-feature tile row (heads, PLE
// slices, MLP widths, the hidden width) and, for Q4, every K-range boundary on a 64-wide block
// (o's KV-head ranges, down's 512-wide chunks).
static int tiles_aligned(const g4_text_config *c, g4_sq_dtype dt) {
    int ok = c->hidden % 16 == 0 && c->ple_dim % 16 == 0;
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *lc = &c->layer[l];
        ok &= lc->head_dim % 16 == 0 && lc->ffn % 16 == 0;
        if (dt == G4_SQ_Q4) ok &= c->n_heads / c->n_kv_heads * lc->head_dim % 64 == 0;
    }
    return ok;
}

typedef struct {
    int64_t lo, hi;
} span;
static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

// Queues for G CTAs: every instruction once (counted), each queue in plan order and by the rule
// (i % G), two steps simulated to the end with every counter at twice its signals (counted
// from the plan here), the weight bytes those of the config, streamed once each (no two runs
// overlap: one-step tile plans), and broken waits (a target + 1) reported as stuck.
static void queue_checks(const g4_step_plan *p, const g4_text_config *c, const g4_sp_flags *f,
                         const char *what) {
    (void)f;
    static const int Gs[] = {1, 3, 264};
    int *seen = g4_calloc((size_t)p->n + 1, sizeof(int));
    int *sig = g4_calloc((size_t)p->n_counters + 1, sizeof(int));
    int *ctr = g4_calloc((size_t)p->n_counters + 1, sizeof(int));
    int stuck[8], n_stuck;
    char why[200];
    for (int i = 0; i < p->n; i++)
        if (p->ins[i].signal >= 0) sig[p->ins[i].signal]++;
    for (size_t gi = 0; gi < sizeof Gs / sizeof Gs[0]; gi++) {
        const int G = Gs[gi];
        for (int dt = 0; dt < 2; dt++) {
            g4_sq q;
            const int rc = g4_sq_build(p, G, (g4_sq_dtype)dt, &q);
            CHECK_MSG(rc == 0, "%s: queues for G %d: %s", what, G, g4_error());
            if (rc) continue;
            memset(seen, 0, sizeof(int) * (size_t)p->n);
            int bad_order = 0, bad_rule = 0, total = 0;
            int64_t streamed = 0;
            for (int b = 0; b < G; b++)
                for (int k = q.start[b]; k < q.start[b + 1]; k++) {
                    const int id = q.ins[k].id;
                    total++;
                    if (id >= 0 && id < p->n) seen[id]++;
                    bad_order += k > q.start[b] && q.ins[k - 1].id >= id;
                    bad_rule += id % G != b;
                    streamed += (int64_t)q.ins[k].w_runs * q.ins[k].w_run;
                }
            int once = 0;
            for (int i = 0; i < p->n; i++) once += seen[i] == 1;
            CHECK_MSG(total == p->n && once == p->n && q.start[0] == 0 && q.start[G] == p->n,
                      "%s G %d: %d records, %d of %d instructions assigned exactly once", what, G,
                      total, once, p->n);
            CHECK_MSG(bad_order == 0 && bad_rule == 0,
                      "%s G %d: %d queue entries out of plan order, %d off the rule", what, G,
                      bad_order, bad_rule);
            const int run = g4_sq_simulate(&q, 2, ctr, stuck, 8, &n_stuck, why, sizeof why);
            int off = 0;
            for (int k = 0; k < p->n_counters; k++) off += ctr[k] != 2 * sig[k];
            CHECK_MSG(run == 2 * p->n && n_stuck == 0 && off == 0,
                      "%s G %d: %d of %d run over two steps, %d counters off: %s", what, G, run,
                      2 * p->n, off, why);
            queue_sims++;
            // the bytes: the config's, each step of the plan once (where a group boundary can
            // fall inside a 16-feature tile row or a 64-wide Q4 block, that row or block is read
            // by both groups, as the GEMV kernels would: then at least once)
            const int64_t want = p->grain == G4_SP_TILE ? step_bytes(c, (g4_sq_dtype)dt) : 0;
            const int exact = tiles_aligned(c, (g4_sq_dtype)dt);
            CHECK_MSG(q.w_bytes == want && (exact || !want ? streamed == p->steps * want
                                                           : streamed > p->steps * want),
                      "%s G %d %s: arena %lld, streamed %lld bytes, the config's %lld a step", what,
                      G, dt ? "f16" : "q4", (long long)q.w_bytes, (long long)streamed,
                      (long long)want);
            if (gi == 0 && exact && p->grain == G4_SP_TILE && p->steps == 1) { // none twice
                int64_t nr = 0;
                for (int k = 0; k < q.n; k++) nr += q.ins[k].w_runs;
                span *sp = g4_calloc((size_t)nr + 1, sizeof(span));
                int64_t m = 0;
                for (int k = 0; k < q.n; k++)
                    for (int r = 0; r < q.ins[k].w_runs; r++, m++) {
                        sp[m].lo = q.ins[k].w_off + r * q.ins[k].w_stride;
                        sp[m].hi = sp[m].lo + q.ins[k].w_run;
                    }
                qsort(sp, (size_t)nr, sizeof(span), span_cmp);
                int64_t overlap = 0, end = 0;
                for (int64_t k = 0; k < nr; k++) {
                    overlap += sp[k].lo < end;
                    if (sp[k].hi > end) end = sp[k].hi;
                }
                CHECK_MSG(overlap == 0 && end == q.w_bytes,
                          "%s %s: %lld runs overlap, the last ends at %lld of %lld", what,
                          dt ? "f16" : "q4", (long long)overlap, (long long)end,
                          (long long)q.w_bytes);
                free(sp);
            }
            // broken waits: a target one above what its producers give, at a few instructions
            // spread over the plan: the simulation stops and names each as stuck
            if (dt == 0) {
                int tried = 0;
                for (int k = 0; k < q.n && tried < 4; k += q.n / 4 + 1) {
                    int j = k;
                    while (j < q.n && q.ins[j].n_wait == 0) j++;
                    if (j == q.n) break;
                    q.ins[j].wait_tgt[0]++;
                    const int r2 = g4_sq_simulate(&q, 2, ctr, stuck, 8, &n_stuck, why, sizeof why);
                    // (the earliest stuck one is it: everything before it can run)
                    const int named = n_stuck > 0 && stuck[0] == q.ins[j].id;
                    CHECK_MSG(r2 < 2 * p->n && named,
                              "%s G %d: instruction #%d waiting one above its target: %d of %d "
                              "run, stuck not named (%s)",
                              what, G, q.ins[j].id, r2, 2 * p->n, why);
                    q.ins[j].wait_tgt[0]--;
                    tried++;
                }
            }
            g4_sq_free(&q);
        }
    }
    queues_checked++;
    free(seen);
    free(sig);
    free(ctr);
}

static int plans_checked, sims_run;

static void check_cfg(const g4_text_config *c, const g4_sp_flags *f, g4_sp_grain grain, int keys,
                      int steps, const char *what) {
    g4_step_plan p;
    // (a tile plan of two steps takes the fixed split count: every count the same each step)
    const g4_sp_opts o = {grain, keys, steps, 0, 0, 0, 0, 0, grain == G4_SP_TILE && steps == 2};
    char name[160];
    snprintf(name, sizeof name, "%s (%s, %d keys, %d step%s%s)", what, grain ? "tile" : "kernel",
             keys, steps, steps > 1 ? "s" : "", o.fixed_splits ? ", fixed splits" : "");
    const int rc = g4_sp_build(c, f, &o, &p);
    CHECK_MSG(rc == 0, "%s: %s", name, g4_error());
    if (rc) return;
    plan_clean(&p, name);
    sims_run += plan_runs(&p, name);
    queue_checks(&p, c, f, name);
    plans_checked++;
    g4_sp_free(&p);
}

// --- 1. counts worked out by hand ---------------------------------------------------------------

// hidden 64, 3 layers: 0 sliding (hd 32), 1 full (hd 64), 2 sliding sharing layer 0's cache; 2
// heads over 1 KV head; ffn 128, 128, 256; ple 32; vocab 512; window 8; at 10 keys.
static g4_text_config small_cfg(void) {
    const shape s = {"small", 64, 3, 2, 1, 32, 64, 2, 1, 128, 256, 32, 512, 8};
    return make_cfg(&s);
}

static void test_counts(void) {
    g4_text_config c = small_cfg();
    CHECK_INT(c.layer[2].kv_source, 0);
    CHECK_INT(c.layer[1].type, G4_ATTN_FULL);
    g4_sp_flags f = flags_all(&c, 1, 1, 0, 0, 0);
    g4_step_plan p;
    // tile plan: groups of 2 tiles, down chunks of 4 tiles (64 features), LM groups of 8, splits
    // of at most 4 keys
    g4_sp_opts o = {G4_SP_TILE, 10, 1, 2, 4, 8, 4, 16, 0};
    CHECK(g4_sp_build(&c, &f, &o, &p) == 0);
    // before: embed 1 + PLE projection 6 tiles / 2 = 3 + PLE inputs 3 = 7 (counters: embed, 3
    // projection slices, 3 inputs = 7)
    // layer 0: qkv 4 heads-worth of 2 tiles = 4, splits (window 8 of 10 keys, 4 a split) 2, o 2,
    //   gate|up 2 chunks x 2 = 4, down 2 chunks x 2 = 4, PLE gate 1, PLE proj 2: 19 (counters
    //   qkv, att, o, gu x 2, down, pg, pp: 8)
    // layer 1: qkv 2 heads x 2 + k 2 + v 2 = 8, splits 3 (10 keys: 4, 4, 2), o 2, gate|up 4,
    //   down 4, 1, 2: 24 (8 counters)
    // layer 2 (shared, ffn 256): q 2, splits 2, o 2, gate|up 4 chunks x 2 = 8, down 8, 1, 2: 25
    //   (counters: gu x 4: 10)
    // after: final norm 1, LM head 32 tiles / 8 = 4, sample 1: 6 (3 counters)
    CHECK_INT(p.n, 7 + 19 + 24 + 25 + 6);
    CHECK_INT(p.n_counters, 7 + 8 + 8 + 10 + 3);
    g4_sp_layer_count lc[5];
    const int crit = g4_sp_count(&p, lc);
    CHECK_INT(lc[0].instr, 7);
    CHECK_INT(lc[1].instr, 19);
    CHECK_INT(lc[2].instr, 24);
    CHECK_INT(lc[3].instr, 25);
    CHECK_INT(lc[4].instr, 6);
    CHECK_INT(lc[3].counters, 10);
    // critical path: embed -> PLE projection -> PLE inputs (2 before the first layer's PLE gate
    // needs them); per layer qkv, att, o, gate|up, down, PLE gate, PLE proj = 7 hand-overs (layer
    // 0's qkv waits on the embedding only: 6 + 1 from the embed); final, LM, sample = 3
    CHECK_INT(lc[0].handovers, 2);
    CHECK_INT(lc[1].handovers, 5);
    CHECK_INT(lc[2].handovers, 7);
    CHECK_INT(lc[3].handovers, 7);
    CHECK_INT(lc[4].handovers, 3);
    CHECK_INT(crit, 2 + 5 + 7 + 7 + 3);
    plan_clean(&p, "small tile");
    plan_runs(&p, "small tile");
    g4_sp_free(&p);

    // kernel plan, add-norms fused: 5 before (embed, convert, PLE projection, PLE inputs, input
    // norm), 8 a layer (q|k|v or q, prep, attention, o, gate|up, down, PLE gate, PLE proj), 3
    // after (final add-norm, LM head, sample); one counter each
    o = (g4_sp_opts){G4_SP_KERNEL, 10, 1, 0, 0, 0, 0, 0, 0};
    CHECK(g4_sp_build(&c, &f, &o, &p) == 0);
    CHECK_INT(p.n, 5 + 3 * 8 + 3);
    CHECK_INT(p.n_counters, p.n);
    CHECK_INT(g4_sp_count(&p, lc), p.n - 1);
    CHECK_INT(lc[2].handovers, 8);
    plan_clean(&p, "small kernel");
    g4_sp_free(&p);
    // apart (G4_FUSE=0): + an add-norm before gate|up, before the PLE gate (and its gelu_mul),
    // and at the end of each layer: 12 a layer, nothing pending after the last
    f.fuse = 0;
    CHECK(g4_sp_build(&c, &f, &o, &p) == 0);
    CHECK_INT(p.n, 5 + 3 * 12 + 2);
    plan_clean(&p, "small kernel, apart");
    g4_sp_free(&p);
    // every op fused that can be (q|k|v off: q, k, v on owners): layer 0 q k v, qkv_attention,
    // o, mlp_block, ple_block = 7; layer 1 the same; layer 2 (shared) q, qkv_attention, o, mlp,
    // ple = 5
    g4_sp_flags f2 = flags_all(&c, 0, 1, 1, 1, 1);
    CHECK(g4_sp_build(&c, &f2, &o, &p) == 0);
    CHECK_INT(p.n, 5 + 7 + 7 + 5 + 3);
    plan_clean(&p, "small kernel, blocks");
    g4_sp_free(&p);
    // two steps: twice the instructions, the second's counters a bank of their own
    o.steps = 2;
    CHECK(g4_sp_build(&c, &f2, &o, &p) == 0);
    CHECK_INT(p.n, 2 * (5 + 7 + 7 + 5 + 3));
    CHECK_INT(p.n_counters, p.n);
    plan_clean(&p, "small kernel, blocks, two steps");
    g4_sp_free(&p);
    o = (g4_sp_opts){G4_SP_TILE, 10, 2, 2, 4, 8, 4, 16, 0};
    CHECK(g4_sp_build(&c, &f, &o, &p) == 0);
    // the second step at 11 keys: layer 1 still 3 splits (4, 4, 3), the sliding ones 2
    CHECK_INT(p.n, 2 * 81);
    CHECK_INT(p.n_counters, 2 * 36);
    plan_clean(&p, "small tile, two steps");
    plan_runs(&p, "small tile, two steps");
    g4_sp_free(&p);
    // fixed splits: 4 a KV head at any length (+2, +1, +2 on the three layers), the same
    // instructions, waits and signals at 5 keys as at 13
    o = (g4_sp_opts){G4_SP_TILE, 10, 1, 2, 4, 8, 4, 4, 1};
    CHECK(g4_sp_build(&c, &f, &o, &p) == 0);
    CHECK_INT(p.n, 81 + 2 + 1 + 2);
    CHECK_INT(p.n_counters, 36);
    plan_clean(&p, "small tile, fixed splits");
    plan_runs(&p, "small tile, fixed splits");
    g4_sp_free(&p);
    g4_step_plan p5, p13;
    o.keys = 5;
    CHECK(g4_sp_build(&c, &f, &o, &p5) == 0);
    o.keys = 13;
    CHECK(g4_sp_build(&c, &f, &o, &p13) == 0);
    CHECK_INT(p5.n, p13.n);
    int differ = 0;
    for (int i = 0; i < p5.n && i < p13.n; i++) {
        const g4_sp_instr *a = &p5.ins[i], *z = &p13.ins[i];
        differ += a->kind != z->kind || a->signal != z->signal || a->n_wait != z->n_wait ||
                  memcmp(a->wait, z->wait, sizeof a->wait) != 0;
    }
    CHECK_INT(differ, 0);
    plan_clean(&p5, "small tile, fixed splits, 5 keys");
    plan_clean(&p13, "small tile, fixed splits, 13 keys");
    g4_sp_free(&p5);
    g4_sp_free(&p13);
    free(f.qkv);
    free(f2.qkv);
    free(c.layer);
}

// --- 4. mutations
// ---------------------------------------------------------------------------------

static int find(const g4_step_plan *p, int kind, int weight, int layer, int nth) {
    for (int i = 0; i < p->n; i++)
        if (p->ins[i].kind == kind && p->ins[i].weight == weight && p->ins[i].layer == layer &&
            nth-- == 0)
            return i;
    return -1;
}

static void test_mutations(void) {
    g4_text_config c = small_cfg();
    g4_sp_flags f = flags_all(&c, 1, 1, 0, 0, 0);
    const g4_sp_opts o = {G4_SP_TILE, 10, 2, 2, 4, 8, 4, 16, 0};
    g4_step_plan p;
    g4_sp_report r;
    CHECK(g4_sp_build(&c, &f, &o, &p) == 0);
    CHECK_INT(g4_sp_check(&p, &r), 0);
    int *cta = g4_calloc((size_t)p.n, sizeof(int)), *order = g4_calloc((size_t)p.n, sizeof(int));

    // a dropped dependency: layer 1's first attention split no longer waits on q|k|v
    int i = find(&p, G4_SP_ATTENTION, G4_SW_NONE, 1, 0);
    CHECK(i >= 0 && p.ins[i].n_wait == 1);
    g4_sp_instr keep = p.ins[i];
    p.ins[i].n_wait = 0;
    g4_sp_check(&p, &r);
    CHECK_MSG(r.raw > 0, "dropped wait: RAW %d", r.raw);
    p.ins[i] = keep;
    // ... and a PLE gate group that no longer waits for the down partials
    i = find(&p, G4_SP_LINEAR, G4_SW_PLE_GATE, 2, 0);
    CHECK(i >= 0 && p.ins[i].n_wait == 2);
    keep = p.ins[i];
    p.ins[i].wait[0] = p.ins[i].wait[1];
    p.ins[i].n_wait = 1;
    g4_sp_check(&p, &r);
    CHECK_MSG(r.raw > 0 && r.war > 0, "dropped down wait: RAW %d WAR %d", r.raw, r.war);
    p.ins[i] = keep;

    // a region reused too early: layer 0's first down group (chunk 0) writes its partials over
    // the o partials, which the gate|up groups of chunk 1 may still be reading
    i = find(&p, G4_SP_LINEAR, G4_SW_DOWN, 0, 0);
    CHECK(i >= 0 && p.ins[i].wr[0].buf == G4_SB_DPART && p.ins[i].wr[0].lo == 0);
    keep = p.ins[i];
    p.ins[i].wr[0].buf = G4_SB_OPART;
    g4_sp_check(&p, &r);
    CHECK_MSG(r.war > 0, "down over opart: WAR %d", r.war);
    p.ins[i] = keep;
    // ... and the residual written in place by the first gate|up group of layer 1: its
    // siblings after it in the list read the new value (RAW), and the last group writing it
    // too overwrites what the siblings before it read (WAR)
    i = find(&p, G4_SP_LINEAR, G4_SW_GATE_UP, 1, 0);
    CHECK(i >= 0 && p.ins[i].n_wr == 2 && p.ins[i].wr[0].buf != p.ins[i].rd[0].buf);
    keep = p.ins[i];
    p.ins[i].wr[0].buf = p.ins[i].rd[0].buf;
    g4_sp_check(&p, &r);
    CHECK_MSG(r.raw > 0 && r.war == 0, "residual in place: RAW %d WAR %d", r.raw, r.war);
    p.ins[i] = keep;
    const int last = find(&p, G4_SP_LINEAR, G4_SW_GATE_UP, 1, 3);
    CHECK(last > i && p.ins[last].step == 0 &&
          p.ins[find(&p, G4_SP_LINEAR, G4_SW_GATE_UP, 1, 4)].step == 1);
    keep = p.ins[last];
    p.ins[last].wr[p.ins[last].n_wr++] = keep.rd[0];
    g4_sp_check(&p, &r);
    CHECK_MSG(r.war > 0 && r.raw == 0, "residual in place, last group: RAW %d WAR %d", r.raw,
              r.war);
    p.ins[last] = keep;

    // split counts that do not follow the sequence length: layer 1's o groups wait for the
    // splits of a 4x longer sequence (never reached: deadlock) or of 1 key (ordered after no
    // particular split: RAW on the partials)
    int lo, per;
    const int S = g4_sp_splits(10, 0, 4, 16, &lo, &per);
    CHECK_INT(S, 3);
    const int S_long = g4_sp_splits(40, 0, 4, 16, NULL, NULL),
              S_short = g4_sp_splits(1, 0, 4, 16, NULL, NULL);
    CHECK_INT(S_long, 10);
    CHECK_INT(S_short, 1);
    for (int pass = 0; pass < 2; pass++) {
        const int target = pass ? S_short : S_long;
        g4_step_plan m;
        CHECK(g4_sp_build(&c, &f, &o, &m) == 0);
        int changed = 0;
        for (int k = 0; k < m.n; k++)
            if (m.ins[k].weight == G4_SW_O && m.ins[k].layer == 1 && m.ins[k].step == 0) {
                CHECK_INT(m.ins[k].wait[0].target, S);
                m.ins[k].wait[0].target = target;
                changed++;
            }
        CHECK_INT(changed, 2);
        g4_sp_check(&m, &r);
        if (pass == 0) {
            CHECK_MSG(r.unreached == 2, "long split count: unreached %d", r.unreached);
            for (int G = 1; G <= 264; G = G == 1 ? 3 : G * 88) {
                memset(&r, 0, sizeof r);
                g4_sp_assign(&m, G, G4_SP_ROUND_ROBIN, 0, cta, order);
                const int done = g4_sp_simulate(&m, G, cta, order, &r);
                CHECK_MSG(r.deadlock == 1 && done < m.n,
                          "long split count G %d: deadlock %d, %d "
                          "of %d run",
                          G, r.deadlock, done, m.n);
            }
        } else {
            CHECK_MSG(r.partial == 2 && r.raw > 0, "short split count: partial %d RAW %d",
                      r.partial, r.raw);
        }
        g4_sp_free(&m);
    }

    // the second step no longer waits for the first one's sample: it reads the token before it
    // is chosen and overwrites x, h, ids and pos under the first step's readers
    i = find(&p, G4_SP_EMBED, G4_SW_NONE, -1, 1);
    CHECK(i >= 0 && p.ins[i].step == 1 && p.ins[i].n_wait == 1);
    p.ins[i].n_wait = 0;
    g4_sp_check(&p, &r);
    CHECK_MSG(r.raw > 0 && r.war > 0, "steps unordered: RAW %d WAR %d", r.raw, r.war);
    p.ins[i].n_wait = 1;
    CHECK_INT(g4_sp_check(&p, &r), 0);
    // ... or waits for the LM head instead: the sample is left out of the join
    const int smp = find(&p, G4_SP_SAMPLE, G4_SW_NONE, 3, 0);
    CHECK(smp >= 0 && p.ins[smp].n_wait == 1);
    const g4_sp_wait w1 = p.ins[i].wait[0];
    p.ins[i].wait[0] = p.ins[smp].wait[0];
    g4_sp_check(&p, &r);
    // (RAW: next; WAR: pos, and the 4 LM groups' logits the second step's LM head rewrites)
    CHECK_MSG(r.unjoined == 1 && r.raw == 1 && r.war == 5,
              "second step after the LM head: unjoined %d RAW %d WAR %d", r.unjoined, r.raw, r.war);
    p.ins[i].wait[0] = w1;
    // an attention split that reads one cache row past the position: nothing wrote it
    i = find(&p, G4_SP_ATTENTION, G4_SW_NONE, 2, 1);
    CHECK(i >= 0 && p.ins[i].rd[2].buf >= G4_SB_KV0);
    p.ins[i].rd[2].hi += 32; // (hd 32: one row)
    g4_sp_check(&p, &r);
    CHECK_MSG(r.unwritten > 0, "row past the position: unwritten %d", r.unwritten);
    p.ins[i].rd[2].hi -= 32;

    // the kernel plan with one stream-order edge dropped (layer 1's down linear no longer waits
    // for gate|up)
    {
        g4_step_plan k;
        const g4_sp_opts ko = {G4_SP_KERNEL, 10, 2, 0, 0, 0, 0, 0, 0};
        CHECK(g4_sp_build(&c, &f, &ko, &k) == 0);
        CHECK_INT(g4_sp_check(&k, &r), 0);
        const int d = find(&k, G4_SP_LINEAR, G4_SW_DOWN, 1, 0);
        CHECK(d >= 0 && k.ins[d].n_wait == 1);
        k.ins[d].n_wait = 0;
        g4_sp_check(&k, &r);
        CHECK_MSG(r.raw > 0 && r.war > 0, "kernel plan, dropped edge: RAW %d WAR %d", r.raw, r.war);
        g4_sp_free(&k);
    }

    // a waiting instruction before its producer in the same CTA queue: G = 1 (and G = 2 with
    // both on CTA 1) with layer 1's first split moved ahead of the q|k|v group it waits on
    const int a = find(&p, G4_SP_ATTENTION, G4_SW_NONE, 1, 0),
              q = find(&p, G4_SP_LINEAR, G4_SW_QKV, 1, 0);
    CHECK(a > q && q >= 0);
    for (int G = 1; G <= 2; G++) {
        g4_sp_assign(&p, G, G4_SP_ROUND_ROBIN, 0, cta, order);
        cta[a] = cta[q] = G - 1;
        memset(&r, 0, sizeof r);
        CHECK_INT(g4_sp_simulate(&p, G, cta, order, &r), p.n); // in list order: runs
        CHECK_INT(r.deadlock, 0);
        order[q] = a; // (order is the identity: swap the two)
        order[a] = q;
        memset(&r, 0, sizeof r);
        const int done = g4_sp_simulate(&p, G, cta, order, &r);
        CHECK_MSG(r.deadlock == 1 && done < p.n, "consumer first, G %d: deadlock %d", G,
                  r.deadlock);
    }
    free(cta);
    free(order);
    g4_sp_free(&p);
    free(f.qkv);
    free(c.layer);
}

// --- 2. the kernel plan against a real CPU step
// ---------------------------------------------------

enum { MAX_CALLS = 2048, MAX_REG = 40 };
typedef struct {
    int kind, weight, n_rd, n_wr;
    g4_sp_region rd[MAX_REG], wr[MAX_REG];
} call;

static const g4_backend *cpu;
static g4_backend rec;
static const g4_text_state *cur; // the state being recorded
static call calls[MAX_CALLS];
static int n_calls, recording, nest, unmapped;

static int weight_of(const void *w) {
    const g4_text_model *m = cur->m;
    if (w == &m->ple_model_proj) return G4_SW_PLE_MODEL_PROJ;
    if (w == &m->lm_head) return G4_SW_LM_HEAD;
    for (int l = 0; l < m->cfg->n_layers; l++) {
        const g4_text_layer *t = &m->layers[l];
        const void *ws[] = {&t->qkv,  &t->q,    &t->k,        &t->v,       &t->o,
                            &t->gate, &t->down, &t->ple_gate, &t->ple_proj};
        const int ids[] = {G4_SW_QKV,     G4_SW_Q,    G4_SW_K,        G4_SW_V,       G4_SW_O,
                           G4_SW_GATE_UP, G4_SW_DOWN, G4_SW_PLE_GATE, G4_SW_PLE_PROJ};
        for (int k = 0; k < 9; k++)
            if (w == ws[k]) return ids[k];
    }
    return -1;
}

// The plan buffer and element range of bytes [p, p + n) of the state's memory.
static void map_region(call *cl, int write, const void *p, size_t n) {
    const g4_text_state *s = cur;
    const g4_buf *bufs[] = {&s->h,   &s->h2,     &s->x,    &s->q,   &s->k,   &s->v,
                            &s->qkv, &s->attn,   &s->o,    &s->mlp, &s->ple, &s->pg,
                            &s->py,  &s->logits, &s->next, &s->samp};
    const int ids[] = {G4_SB_H,   G4_SB_H2,     G4_SB_X,    G4_SB_Q,   G4_SB_K,   G4_SB_V,
                       G4_SB_QKV, G4_SB_ATTN,   G4_SB_O,    G4_SB_MLP, G4_SB_PLE, G4_SB_PG,
                       G4_SB_PY,  G4_SB_LOGITS, G4_SB_NEXT, G4_SB_SAMP};
    const char *c = p;
    g4_sp_region *out = write ? &cl->wr[cl->n_wr] : &cl->rd[cl->n_rd];
    int *cnt = write ? &cl->n_wr : &cl->n_rd;
    if (*cnt == MAX_REG) {
        unmapped++;
        return;
    }
    if (c == (const char *)s->io.data || c == (const char *)s->io.data + 4) { // ids, pos (T 1)
        *out = (g4_sp_region){c == s->io.data ? G4_SB_IDS : G4_SB_POS, 0, 1};
        ++*cnt;
        return;
    }
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) {
        const char *b = bufs[k]->data;
        const size_t es = g4_type_size(bufs[k]->type), bytes = g4_buf_bytes(bufs[k]);
        if (c >= b && c + n <= b + bytes && n) {
            *out = (g4_sp_region){ids[k], (int32_t)((size_t)(c - b) / es),
                                  (int32_t)((size_t)(c - b + n) / es)};
            ++*cnt;
            return;
        }
    }
    unmapped++;
}

static void map_buf(call *cl, int write, const g4_buf *b) {
    map_region(cl, write, b->data, g4_buf_bytes(b));
}

// Cache rows [r0, r1) of a slot's K and V caches (every KV head), as the plan names them.
static void map_cache(call *cl, int write, const g4_buf *kc, int r0, int r1) {
    const g4_text_config *c = cur->m->cfg;
    int slot = -1;
    for (int j = 0; j < c->n_kv_layers; j++)
        if (kc->data == cur->kc[j].data) slot = j;
    if (slot < 0 || r1 <= r0) {
        unmapped += slot < 0;
        return;
    }
    const int hd = kc->cols / c->n_kv_heads;
    for (int g = 0; g < c->n_kv_heads; g++)
        for (int kv = 0; kv < 2; kv++) {
            g4_sp_region *out = write ? &cl->wr[cl->n_wr++] : &cl->rd[cl->n_rd++];
            *out = (g4_sp_region){G4_SB_KV0 + 2 * (slot * c->n_kv_heads + g) + kv, (int32_t)r0 * hd,
                                  (int32_t)r1 * hd};
        }
}

static call *begin(int kind, const void *w) {
    if (!recording || nest++ || n_calls == MAX_CALLS) return NULL;
    call *cl = &calls[n_calls++];
    memset(cl, 0, sizeof *cl);
    cl->kind = kind;
    cl->weight = w ? weight_of(w) : G4_SW_NONE;
    return cl;
}
#define END() nest -= recording && nest > 0

static void r_embed(g4_backend *be, g4_buf *y, const void *t, int rows, const g4_buf *ids,
                    float sc) {
    call *cl = begin(G4_SP_EMBED, NULL);
    if (cl) map_buf(cl, 0, ids), map_buf(cl, 1, y);
    cpu->embed(be, y, t, rows, ids, sc);
    END();
}
static void r_convert(g4_backend *be, g4_buf *d, const g4_buf *s) {
    call *cl = begin(G4_SP_CONVERT, NULL);
    if (cl) map_buf(cl, 0, s), map_buf(cl, 1, d);
    cpu->convert(be, d, s);
    END();
}
static void r_linear(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w, int acc) {
    call *cl = begin(G4_SP_LINEAR, w);
    if (cl) map_buf(cl, 0, x), map_buf(cl, 1, y);
    cpu->linear(be, y, x, w, acc);
    END();
}
static void r_ple_inputs(g4_backend *be, g4_buf *ple, const void *t, int rows, const g4_buf *ids,
                         const void *nw, int D, float a, float b2, float c2, float eps) {
    call *cl = begin(G4_SP_PLE_INPUTS, NULL);
    if (cl) map_buf(cl, 0, ple), map_buf(cl, 0, ids), map_buf(cl, 1, ple);
    cpu->ple_inputs(be, ple, t, rows, ids, nw, D, a, b2, c2, eps);
    END();
}
static void r_rmsnorm(g4_backend *be, g4_buf *y, const g4_buf *x, const void *w, int g, float e) {
    call *cl = begin(G4_SP_RMSNORM, NULL);
    if (cl) map_buf(cl, 0, x), map_buf(cl, 1, y);
    cpu->rmsnorm(be, y, x, w, g, e);
    END();
}
static void r_add_rmsnorm_next(g4_backend *be, g4_buf *h, const g4_buf *x, const void *w, float e,
                               const void *sc, g4_buf *next, int nn, const void *nw) {
    call *cl = begin(G4_SP_ADD_NORM, NULL);
    if (cl) map_buf(cl, 0, h), map_buf(cl, 0, x), map_buf(cl, 1, h), map_buf(cl, 1, next);
    cpu->add_rmsnorm_next(be, h, x, w, e, sc, next, nn, nw);
    END();
}
static void map_add(call *cl, const g4_add_norm *a, g4_buf *x) {
    map_buf(cl, 0, a->h_in);
    map_buf(cl, 0, a->r);
    map_buf(cl, 1, a->h_out);
    map_buf(cl, 1, x);
}
static void r_add_norm_linear(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *y,
                              const g4_linear *w, const g4_linear *wu, const g4_buf *mul, int c0) {
    call *cl = begin(G4_SP_ADD_NORM_LINEAR, w);
    if (cl) {
        map_add(cl, a, x);
        if (mul) {
            const size_t es = g4_type_size(mul->type);
            map_region(cl, 0, (const char *)mul->data + (size_t)c0 * es, (size_t)y->cols * es);
        }
        map_buf(cl, 1, y);
    }
    cpu->add_norm_linear(be, a, x, y, w, wu, mul, c0);
    END();
}
static void r_linear_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *wg,
                              const g4_linear *wu) {
    call *cl = begin(G4_SP_LINEAR_GELU_MUL, wg);
    if (cl) map_buf(cl, 0, x), map_buf(cl, 1, y);
    cpu->linear_gelu_mul(be, y, x, wg, wu);
    END();
}
static void r_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *a, const g4_buf *b, int c0) {
    call *cl = begin(G4_SP_GELU_MUL, NULL);
    if (cl) {
        const size_t es = g4_type_size(b->type);
        map_buf(cl, 0, a);
        map_region(cl, 0, (const char *)b->data + (size_t)c0 * es, (size_t)a->cols * es);
        map_buf(cl, 1, y);
    }
    cpu->gelu_mul(be, y, a, b, c0);
    END();
}
static void r_qkv_prep(g4_backend *be, g4_buf *q, g4_buf *k, g4_buf *v, g4_buf *kc, g4_buf *vc,
                       const void *qw, const void *kw, const g4_buf *pos, const float *f, int nh,
                       int nkv, int hd, float e) {
    call *cl = begin(G4_SP_QKV_PREP, NULL);
    if (cl) {
        const int p = ((const int32_t *)pos->data)[0];
        map_buf(cl, 0, q);
        if (k) map_buf(cl, 0, k), map_buf(cl, 0, v);
        map_buf(cl, 0, pos);
        map_buf(cl, 1, q);
        if (k) map_cache(cl, 1, kc, p, p + 1);
    }
    cpu->qkv_prep(be, q, k, v, kc, vc, qw, kw, pos, f, nh, nkv, hd, e);
    END();
}
static void map_attention(call *cl, const g4_buf *kc, const g4_buf *pos, int window, int own) {
    const int p = ((const int32_t *)pos->data)[0],
              lo = window > 0 && p + 1 > window ? p + 1 - window : 0;
    map_buf(cl, 0, pos);
    map_cache(cl, 0, kc, lo, own ? p : p + 1);
}
static void r_attention(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_buf *kc,
                        const g4_buf *vc, const g4_buf *pos, int nh, int nkv, int hd, int window,
                        float sc) {
    call *cl = begin(G4_SP_ATTENTION, NULL);
    if (cl) map_buf(cl, 0, q), map_attention(cl, kc, pos, window, 0), map_buf(cl, 1, out);
    cpu->attention(be, out, q, kc, vc, pos, nh, nkv, hd, window, sc);
    END();
}
static void r_qkv_attention(g4_backend *be, g4_buf *out, g4_buf *q, g4_buf *k, g4_buf *v,
                            g4_buf *kc, g4_buf *vc, const void *qw, const void *kw,
                            const g4_buf *pos, const float *f, int nh, int nkv, int hd, float e,
                            int window, float sc) {
    call *cl = begin(G4_SP_QKV_ATTENTION, NULL);
    if (cl) {
        const int p = ((const int32_t *)pos->data)[0];
        map_buf(cl, 0, q);
        if (k) map_buf(cl, 0, k), map_buf(cl, 0, v);
        map_attention(cl, kc, pos, window, k != NULL);
        map_buf(cl, 1, q);
        if (k) map_cache(cl, 1, kc, p, p + 1);
        map_buf(cl, 1, out);
    }
    cpu->qkv_attention(be, out, q, k, v, kc, vc, qw, kw, pos, f, nh, nkv, hd, e, window, sc);
    END();
}
static void r_mlp_block(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *mlp, g4_buf *y,
                        const g4_linear *wg, const g4_linear *wu, const g4_linear *wd) {
    call *cl = begin(G4_SP_MLP_BLOCK, NULL);
    if (cl) {
        cl->weight = G4_SW_MLP;
        if (a)
            map_add(cl, a, x);
        else
            map_buf(cl, 0, x);
        map_buf(cl, 1, mlp), map_buf(cl, 1, y);
    }
    cpu->mlp_block(be, a, x, mlp, y, wg, wu, wd);
    END();
}
static void r_ple_block(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *pg, g4_buf *y,
                        const g4_linear *wg, const g4_linear *wp, const g4_buf *ple, int c0) {
    call *cl = begin(G4_SP_PLE_BLOCK, NULL);
    if (cl) {
        cl->weight = G4_SW_PLE;
        const size_t es = g4_type_size(ple->type);
        if (a)
            map_add(cl, a, x);
        else
            map_buf(cl, 0, x);
        map_region(cl, 0, (const char *)ple->data + (size_t)c0 * es, (size_t)pg->cols * es);
        map_buf(cl, 1, pg), map_buf(cl, 1, y);
    }
    cpu->ple_block(be, a, x, pg, y, wg, wp, ple, c0);
    END();
}
static void r_sample(g4_backend *be, g4_buf *next, g4_buf *logits, float cap, const void *params,
                     const g4_buf *counter) {
    call *cl = begin(G4_SP_SAMPLE, NULL);
    if (cl) {
        map_buf(cl, 0, logits);
        map_region(cl, 0, params, 4);
        map_buf(cl, 0, counter);
        map_buf(cl, 1, logits);
        map_buf(cl, 1, next);
    }
    cpu->sample(be, next, logits, cap, params, counter);
    END();
}

static int cmp_region(const void *a, const void *b) {
    const g4_sp_region *x = a, *y = b;
    if (x->buf != y->buf) return x->buf < y->buf ? -1 : 1;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return x->hi < y->hi ? -1 : x->hi > y->hi;
}

// The samp buffer's first element stands for the whole parameter block in the plan.
static int same_regions(g4_sp_region *a, int na, const g4_sp_region *b0, int nb) {
    g4_sp_region b[MAX_REG];
    if (na != nb || nb > MAX_REG) return 0;
    memcpy(b, b0, sizeof *b * (size_t)nb);
    qsort(a, (size_t)na, sizeof *a, cmp_region);
    qsort(b, (size_t)nb, sizeof *b, cmp_region);
    return memcmp(a, b, sizeof *a * (size_t)na) == 0;
}

static void print_regions(const g4_step_plan *p, const char *tag, const g4_sp_region *r, int n) {
    char nm[32];
    printf("    %s:", tag);
    for (int k = 0; k < n; k++)
        printf(" %s[%d,%d)", g4_sp_buf_name(p, r[k].buf, nm, sizeof nm), r[k].lo, r[k].hi);
    printf("\n");
}

// One step of every switch combination on model m: the kernel plan equals the recorded calls,
// and both plans of the state's flags check clean; returns the combinations.
static int check_model(g4_text_model *m, const char *what) {
    int combos = 0;
    for (int mask = 0; mask < 32; mask++) {
        const int qkv = mask & 1, fuse = mask >> 1 & 1, attn = mask >> 2 & 1,
                  persist = mask >> 3 & 1, ple = mask >> 4 & 1;
        setenv("G4_QKV", qkv ? "1" : "0", 1);
        setenv("G4_FUSE", fuse ? "1" : "0", 1);
        setenv("G4_FUSE_ATTN", attn ? "1" : "0", 1);
        setenv("G4_PERSIST_MLP", persist ? "1" : "0", 1);
        setenv("G4_PLE_FUSED", ple ? "1" : "0", 1);
        g4_text_state *s;
        CHECK_MSG(g4_text_state_new(m, 16, 8, &s) == 0, "%s", g4_error());
        const int32_t ids[4] = {2, 17, 5, 40};
        CHECK_MSG(g4_text_forward(s, ids, 3, NULL, NULL, 0) == 0, "%s", g4_error());
        cur = s;
        n_calls = unmapped = 0;
        recording = 1;
        int32_t next = -1;
        CHECK_MSG(g4_text_step(s, ids + 3, 1, NULL, &next) == 0, "%s", g4_error());
        recording = 0;
        CHECK_INT(nest, 0);
        CHECK_INT(unmapped, 0);
        g4_sp_flags f;
        g4_sp_flags_of_state(s, &f);
        CHECK_INT(f.fuse, fuse);
        CHECK_INT(f.attn_fused, attn);
        CHECK_INT(f.mlp_block, persist);
        CHECK_INT(f.ple_block, ple);
        g4_step_plan p;
        const g4_sp_opts o = {G4_SP_KERNEL, 4, 1, 0, 0, 0, 0, 0, 0};
        CHECK(g4_sp_build(m->cfg, &f, &o, &p) == 0);
        CHECK_MSG(p.n == n_calls, "%s (mask %d): %d plan instructions, %d op calls", what, mask,
                  p.n, n_calls);
        int bad = 0;
        for (int i = 0; i < p.n && i < n_calls; i++) {
            call *cl = &calls[i];
            g4_sp_instr *in = &p.ins[i];
            const int ok = cl->kind == in->kind && cl->weight == in->weight &&
                           same_regions(cl->rd, cl->n_rd, in->rd, in->n_rd) &&
                           same_regions(cl->wr, cl->n_wr, in->wr, in->n_wr);
            if (!ok && bad++ == 0) {
                CHECK_MSG(0, "%s (mask %d): op %d is %s(%s) in the step, %s(%s) in the plan", what,
                          mask, i, g4_sp_kind_name(cl->kind), g4_sp_weight_name(cl->weight),
                          g4_sp_kind_name(in->kind), g4_sp_weight_name(in->weight));
                print_regions(&p, "step reads", cl->rd, cl->n_rd);
                print_regions(&p, "plan reads", in->rd, in->n_rd);
                print_regions(&p, "step writes", cl->wr, cl->n_wr);
                print_regions(&p, "plan writes", in->wr, in->n_wr);
            }
        }
        CHECK_INT(bad, 0);
        if (mask == 0 && p.n > 0) { // the comparison sees a region one element off
            g4_sp_instr *in = &p.ins[p.n / 2];
            in->wr[0].hi--;
            CHECK(!same_regions(calls[p.n / 2].wr, calls[p.n / 2].n_wr, in->wr, in->n_wr));
            in->wr[0].hi++;
        }
        plan_clean(&p, what);
        g4_sp_free(&p);
        // both granularities at this state's flags and config, one step and two
        for (int grain = 0; grain < 2; grain++)
            for (int steps = 1; steps <= 2; steps++)
                check_cfg(m->cfg, &f, (g4_sp_grain)grain, 4, steps, what);
        free(f.qkv);
        g4_text_state_free(s);
        combos++;
    }
    unsetenv("G4_QKV");
    unsetenv("G4_FUSE");
    unsetenv("G4_FUSE_ATTN");
    unsetenv("G4_PERSIST_MLP");
    unsetenv("G4_PLE_FUSED");
    printf("  %s: %d layers, %d switch combinations: the kernel plan is the step's op calls\n",
           what, m->cfg->n_layers, combos);
    return combos;
}

// --- 3. configs of other shapes, and E2B's counts ------------------------------------------------

static void print_counts(const g4_text_config *c, const g4_sp_flags *f, g4_sp_grain grain,
                         int keys) {
    g4_step_plan p;
    const g4_sp_opts o = {grain, keys, 1, 0, 0, 0, 0, 0, 0};
    if (g4_sp_build(c, f, &o, &p)) return;
    g4_sp_layer_count *lc = g4_calloc((size_t)c->n_layers + 2, sizeof *lc);
    const int crit = g4_sp_count(&p, lc);
    printf("  E2B %s plan at %d keys: %d instructions, %d counters (128-byte lines), %d "
           "hand-overs on the critical path\n",
           grain ? "tile" : "kernel", keys, p.n, p.n_counters, crit);
    printf("    before the layers: %d instructions, %d counters, %d hand-overs\n", lc[0].instr,
           lc[0].counters, lc[0].handovers);
    for (int l = 0; l < c->n_layers; l++)
        if (l == 0 || l == 1 || l == 4 || l == 14 || l == 15 || l == 19 || l == 34)
            printf("    layer %2d (%s, %s, ffn %d): %d instructions, %d counters, %d hand-overs\n",
                   l, c->layer[l].type == G4_ATTN_FULL ? "full" : "sliding",
                   c->layer[l].kv_source == l ? "owner" : "shared", c->layer[l].ffn,
                   lc[l + 1].instr, lc[l + 1].counters, lc[l + 1].handovers);
    printf("    after the layers: %d instructions, %d counters, %d hand-overs\n",
           lc[c->n_layers + 1].instr, lc[c->n_layers + 1].counters, lc[c->n_layers + 1].handovers);
    free(lc);
    g4_sp_free(&p);
}

static void test_shapes(void) {
    g4_text_config e = make_cfg(&E2B);
    CHECK_INT(e.n_kv_layers, 15);
    CHECK_INT(e.layer[15].kv_source, 13);
    CHECK_INT(e.layer[19].kv_source, 14);
    g4_sp_flags f = flags_all(&e, 1, 1, 0, 0, 0);
    { // the skeleton's switches (g4_sp_flags_owner_qkv): these, q|k|v on the 15 owner layers
        g4_sp_flags o;
        g4_sp_flags_owner_qkv(&e, &o);
        int owners = 0, same = o.fuse == 1 && !o.attn_fused && !o.mlp_block && !o.ple_block;
        for (int l = 0; l < e.n_layers; l++) owners += o.qkv[l], same &= o.qkv[l] == f.qkv[l];
        CHECK_INT(owners, 15);
        CHECK_MSG(same, "g4_sp_flags_owner_qkv differs from q|k|v on the owners, norms fused");
        free(o.qkv);
    }
    // the default switches; every block op; q|k|v apart
    check_cfg(&e, &f, G4_SP_KERNEL, 128, 2, "E2B");
    check_cfg(&e, &f, G4_SP_TILE, 128, 2, "E2B");
    check_cfg(&e, &f, G4_SP_TILE, 4096, 1, "E2B");
    check_cfg(&e, &f, G4_SP_TILE, 16384, 2, "E2B");
    check_cfg(&e, &f, G4_SP_TILE, 1, 1, "E2B");
    g4_sp_flags f2 = flags_all(&e, 0, 0, 1, 1, 1);
    check_cfg(&e, &f2, G4_SP_KERNEL, 512, 2, "E2B, blocks, apart");
    check_cfg(&e, &f2, G4_SP_TILE, 513, 2, "E2B, q|k|v apart");
    print_counts(&e, &f, G4_SP_KERNEL, 128);
    print_counts(&e, &f, G4_SP_TILE, 128);
    print_counts(&e, &f, G4_SP_TILE, 16384);
    // The step skeleton's bytes a step (bench/NOTES.md quotes them): the plans of its bench
    // (engine/step_queue.h g4_sp_bench_plans: the baseline rows' splits of <= 128 keys, then the
    // others), each clean, deadlock-free, queues right.
    // Then the largest values the cost model's grid tried (engine/step_cost.c: chunks of the whole
    // K of the wide layers' down, 12288 features; groups of 32; LM groups of 512, since pruned as
    // dominated) in one plan: the builder takes them.
    const g4_sp_bench_plan grid_edge = {32, 768, 32, 512, 0};
    for (int k = 0; k <= g4_sp_n_bench_plans; k++) {
        const g4_sp_bench_plan *b = k < g4_sp_n_bench_plans ? &g4_sp_bench_plans[k] : &grid_edge;
        const g4_sp_opts o = g4_sp_bench_opts(b);
        char name[128];
        snprintf(name, sizeof name,
                 "E2B step skeleton at %d keys, splits of %d, chunk tiles %d, group tiles %d, "
                 "LM group tiles %d",
                 G4_SP_BENCH_KEYS, b->split, b->chunk, b->group, b->lm);
        g4_step_plan p;
        const int rc = g4_sp_build(&e, &f, &o, &p);
        CHECK_MSG(rc == 0, "%s: %s", name, g4_error());
        if (rc) continue;
        plan_clean(&p, name);
        sims_run += plan_runs(&p, name);
        queue_checks(&p, &e, &f, name);
        for (int dt = 0; dt < 2; dt++) {
            g4_sq q;
            CHECK(g4_sq_build(&p, 264, (g4_sq_dtype)dt, &q) == 0);
            printf("  %s, %s: %d instructions, %.1f MB of weights, %.2f MB of activations read, "
                   "%.2f MB written, %d waits a step\n",
                   name, dt ? "f16" : "Q4", q.n, q.w_bytes / 1e6, q.rd_bytes / 1e6,
                   q.wr_bytes / 1e6, q.waits);
            g4_sq_free(&q);
        }
        g4_sp_free(&p);
    }
    free(f.qkv);
    free(f2.qkv);
    free(e.layer);
    for (size_t k = 0; k < sizeof SHAPES / sizeof SHAPES[0]; k++) {
        g4_text_config c = make_cfg(&SHAPES[k]);
        for (int qkv = 0; qkv < 2; qkv++) {
            g4_sp_flags g = flags_all(&c, qkv, 1 - qkv, qkv, qkv, 1 - qkv);
            const int keys[] = {1, 300, 2049};
            for (int t = 0; t < 3; t++) {
                check_cfg(&c, &g, G4_SP_KERNEL, keys[t], 2, SHAPES[k].name);
                check_cfg(&c, &g, G4_SP_TILE, keys[t], 1 + (t != 1), SHAPES[k].name);
            }
            free(g.qkv);
        }
        free(c.layer);
        printf("  %s: both plans clean at 1, 300 and 2049 keys\n", SHAPES[k].name);
    }
    // a shape the plan cannot take is refused in one line
    shape bad = SHAPES[2];
    bad.kv = 3;
    g4_text_config c = make_cfg(&bad);
    g4_sp_flags g = flags_all(&c, 1, 1, 0, 0, 0);
    g4_step_plan p;
    const g4_sp_opts o = {G4_SP_TILE, 8, 1, 0, 0, 0, 0, 0, 0};
    CHECK(g4_sp_build(&c, &g, &o, &p) == G4_EUSER);
    CHECK(strstr(g4_error(), "4 heads over 3 KV heads") != NULL);
    g4_sp_free(&p);
    free(g.qkv);
    free(c.layer);
    // a negative tile count (it would step the tile loops backwards, never ending) is refused
    c = make_cfg(&SHAPES[2]);
    g = flags_all(&c, 1, 1, 0, 0, 0);
    for (int k = 0; k < 3; k++) {
        g4_sp_opts neg = {G4_SP_TILE, 8, 1, 0, 0, 0, 0, 0, 0};
        *(k == 0 ? &neg.group_tiles : k == 1 ? &neg.chunk_tiles : &neg.lm_group_tiles) = -1;
        CHECK(g4_sp_build(&c, &g, &neg, &p) == G4_EUSER);
        CHECK(strstr(g4_error(), "-1") != NULL && strstr(g4_error(), "tiles") != NULL);
        g4_sp_free(&p);
    }
    free(g.qkv);
    free(c.layer);
}

// A plan whose wait points forwards (a counter signalled after the waiter) is refused by the
// queue builder in one line: its queues could deadlock (engine/step_queue.h).
static void test_queue_refusal(void) {
    g4_text_config c = small_cfg();
    g4_sp_flags f = flags_all(&c, 1, 1, 0, 0, 0);
    const g4_sp_opts o = {G4_SP_TILE, 10, 1, 0, 0, 0, 0, 0, 0};
    g4_step_plan p;
    CHECK(g4_sp_build(&c, &f, &o, &p) == 0);
    g4_sq q;
    CHECK(g4_sq_build(&p, 5, G4_SQ_Q4, &q) == 0);
    g4_sq_free(&q);
    int i = 1;
    while (i < p.n && p.ins[i].n_wait == 0) i++;
    CHECK(i < p.n - 1);
    const g4_sp_wait keep = p.ins[i].wait[0];
    p.ins[i].wait[0] = (g4_sp_wait){p.ins[p.n - 1].signal, 1}; // (the sample's counter)
    CHECK(g4_sq_build(&p, 5, G4_SQ_Q4, &q) == G4_EUSER);
    CHECK(strstr(g4_error(), "not a topological order") != NULL);
    p.ins[i].wait[0] = keep;
    CHECK(g4_sq_build(&p, 0, G4_SQ_Q4, &q) == G4_EUSER);
    g4_sp_free(&p);
    free(f.qkv);
    free(c.layer);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--dump") == 0) { // the hand-counted config's tile plan
        g4_text_config c = small_cfg();
        g4_sp_flags f = flags_all(&c, 1, 1, 0, 0, 0);
        const g4_sp_opts o = {argc > 2 ? G4_SP_KERNEL : G4_SP_TILE, 10, 1, 2, 4, 8, 4, 16, 0};
        g4_step_plan p;
        if (g4_sp_build(&c, &f, &o, &p) == 0) g4_sp_print(&p, stdout);
        g4_sp_free(&p);
        free(f.qkv);
        free(c.layer);
        return 0;
    }
    test_counts();
    test_mutations();
    test_shapes();
    test_queue_refusal();
    cpu = g4_backend_cpu();
    rec = *cpu;
    rec.embed = r_embed;
    rec.convert = r_convert;
    rec.linear = r_linear;
    rec.ple_inputs = r_ple_inputs;
    rec.rmsnorm = r_rmsnorm;
    rec.add_rmsnorm_next = r_add_rmsnorm_next;
    rec.add_norm_linear = r_add_norm_linear;
    rec.linear_gelu_mul = r_linear_gelu_mul;
    rec.gelu_mul = r_gelu_mul;
    rec.qkv_prep = r_qkv_prep;
    rec.attention = r_attention;
    rec.qkv_attention = r_qkv_attention;
    rec.mlp_block = r_mlp_block;
    rec.ple_block = r_ple_block;
    rec.sample = r_sample;
    const int combos = g4t_step_packages(&rec, check_model);
    CHECK_INT(combos, 4 * 32);
    printf("  %d plans checked clean, %d simulated runs without deadlock\n", plans_checked,
           sims_run);
    printf("  step skeleton queues: %d plans x G 1, 3, 264 x Q4 / f16, %d two-step simulations "
           "to the end, broken waits named\n",
           queues_checked, queue_sims);
    return g4t_finish("test_step_plan");
}
