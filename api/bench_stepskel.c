// bench_stepskel.c: `g4cu bench --kernels --filter stepskel` (an area of g4cu_dev_bench_kernels.c;
// here, above the engine, because it builds the step plan): the persistent skeleton of the whole
// decode step (kernels/step_skeleton.cuh) on E2B's shape (engine/step_queue.h g4_sp_shape_e2b,
// made in code), its tile plans at G4_SP_BENCH_KEYS keys, with Q4 and f16 weight bytes. Rows (a
// row's ms is one step, graph-replayed, STEPSKEL_STEPS launches a graph; its baseline `stream`
// is the same weight bytes streamed by one plain kernel of the same grid and loads: the
// ceiling): each prefetch form (pf 0 / 1 / 2) at the first run's G (5 CTAs an SM) and at 2 a SM;
// at the first G also the ablations of the design (pf=2 without waits / activation traffic /
// weights / all three; 8 activation loads in flight) and pf=3 (a two-deep lookahead into
// registers: an upper bound, labelled " ub"); pf=2 at every CTA that fits when more than 5 an SM
// do. No rotation is needed: a step streams every weight byte once (1.32 GB Q4, 4.56 GB f16 on
// E2B, far past the 50 MB L2), so each byte comes from DRAM. Beside the table, a line a row: us a
// step and a layer, bytes a step, GB/s against the H200's 4.25 TB/s and the H100's 3.35 TB/s,
// counters waited a step (all, and those found short), and every counter's value after the
// timed steps checked (the row's label says FAIL if one is off). Then, at the first G, one
// stamped step each of pf=2, pf=2 nowts, pf=2 with every part off and pf=0 taken apart
// (engine/step_timeline.h; lines "stepskel-tl ..."): the critical path's segments a layer, by
// op, and each op's own segments. Last for each plan g4_sp_bench_plans marks `math`, at the CTAs
// the math fits (G4_SK_MATH, 4 an SM): pf=2 without and with the GEMV math, and the math on
// words never loaded (" math held ub"); Q4's stamped step with math on each such plan but the
// baseline.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/step_plan.h"
#include "engine/step_queue.h"
#include "engine/step_timeline.h"
#include "kernels/bench/kbench.h"

#ifdef G4_NO_CUDA
int g4_kbench_stepskel(const char *filter, int reps, g4_kbench_row *rows, int max);
int g4_kbench_stepskel(const char *filter, int reps, g4_kbench_row *rows, int max) {
    (void)filter, (void)reps, (void)rows, (void)max;
    return 0;
}
#else
#include <cuda_runtime_api.h>

#include "kernels/step_skeleton.cuh"

int g4_kbench_stepskel(const char *filter, int reps, g4_kbench_row *rows, int max);

enum {
    STEPSKEL_STEPS = 8, // launches a graph
    // CTAs an SM of the first run (session 30: 44 registers a thread, 5 CTAs an SM, G = 660 on
    // 132 SMs): its rows are repeated at this G, whatever the kernel's registers allow now
    STEPSKEL_BASE_PER_SM = 5
};

typedef struct {
    g4_step_skel *s;
    int pf, mode;
} skel_ctx;

static void one_step(void *ctx, int rep, void *stream) {
    (void)rep;
    const skel_ctx *c = ctx;
    if (g4_step_skel_launch(c->s, c->pf, c->mode, (cudaStream_t)stream))
        fprintf(stderr, "%s\n", g4_error());
}

static void one_stream(void *ctx, int rep, void *stream) {
    (void)rep;
    const skel_ctx *c = ctx;
    if (g4_step_skel_stream(c->s, (cudaStream_t)stream)) fprintf(stderr, "%s\n", g4_error());
}

static int matches(const char *filter, const char *shape) {
    return !filter || !*filter || strstr("stepskel", filter) || strstr(shape, filter);
}

// A row: the prefetch form, the ablation bits (G4_SK_*) and the name they add to the shape.
// The first three are the baseline (every G); the rest run at the largest G only: the ablations
// at pf=2 (the design), then pf=3, whose label says it is an upper bound (the lookahead's weights
// go into registers and are dropped: a shared-memory staging design pays capacity and copies).
typedef struct {
    int pf, mode;
    const char *label;
} skel_variant;
static const skel_variant stepskel_variants[] = {
    {0, 0, ""},
    {1, 0, ""},
    {2, 0, ""},
    {2, G4_SK_NO_WAIT, " nowait"},
    {2, G4_SK_NO_ACT, " noact"},
    {2, G4_SK_NO_WEIGHTS, " nowts"},
    {2, G4_SK_NO_WAIT | G4_SK_NO_ACT | G4_SK_NO_WEIGHTS, " nowait+noact+nowts"},
    {2, G4_SK_ACT8, " act8"},
    {3, 0, " ub"},
    {3, G4_SK_ACT8, " act8 ub"},
};
// The math rows (issue 30: what the GEMV arithmetic adds to the floor), at the CTAs the math
// instantiations fit (g4_step_skel_max_ctas_math: 4 an SM), on the baseline plan and the cost
// model's best: the design without math at that G (the comparison's baseline), with it, and with
// it on words never loaded (" ub": the arithmetic alone, an upper bound for a design that keeps
// the pre-wait stream's words until after the wait).
static const skel_variant stepskel_math_variants[] = {
    {2, 0, ""},
    {2, G4_SK_MATH, " math"},
    {2, G4_SK_MATH | G4_SK_MATH_HELD, " math held ub"},
};
// Q4's stamped step with math (the math falls in the write segment: on the path or not).
static const skel_variant stepskel_math_timelines[] = {{2, G4_SK_MATH, " math"}};
enum {
    STEPSKEL_BASE_VARIANTS = 3, // pf 0 / 1 / 2, no ablation: [0, 3)
    STEPSKEL_DESIGN = 2,        // pf=2, no ablation
    STEPSKEL_TL_WARM = 3,       // launches before the timed ones of a timeline
    STEPSKEL_TL_PLAIN = 5       // single launches timed without stamps
};
// The stamped steps (the first G): the design (pf=2); it without weights (are the path's reads
// as slow, ~30 GB/s a CTA, with no weight stream beside them?); it with nothing but the queue
// walk (where its 4 us an instruction go: the cost model's largest miss); no prefetch. (The
// session-30 run stamped act8 and pf=3 too: neither moved the path.)
static const skel_variant stepskel_timelines[] = {
    {2, 0, ""},
    {2, G4_SK_NO_WEIGHTS, " nowts"},
    {2, G4_SK_NO_WAIT | G4_SK_NO_ACT | G4_SK_NO_WEIGHTS, " nowait+noact+nowts"},
    {0, 0, ""}};

// A row's shape (the filter matches it; every one starts "E2B ": g4_kbench_stepskel's test).
static void row_shape(char *s, size_t n, const char *dn, const skel_variant *v, int G,
                      const g4_sp_bench_plan *pl) {
    char chunk[24] = "", group[40] = "";
    if (pl->chunk) snprintf(chunk, sizeof chunk, " chunk=%d", pl->chunk * 16);
    if (pl->group || pl->lm) snprintf(group, sizeof group, " group=%d lm=%d", pl->group, pl->lm);
    snprintf(s, n, "E2B %s pf=%d G=%d keys=%d/%d%s%s%s", dn, v->pf, G, G4_SP_BENCH_KEYS, pl->split,
             chunk, group, v->label);
}

// After a device sync: the counters each equal to the steps run x their signals a step and the
// exit counter 0 (every mode signals). Returns the counters off (-1: the launches failed, said
// on stderr); *epoch the steps run, *sw the waits found short so far.
static int counters_off(g4_step_skel *s, const g4_sq *q, int *ctr, int *epoch, long long *sw,
                        const char *shape) {
    int exitc = 0;
    if (g4_step_skel_read(s, ctr, epoch, &exitc, sw)) {
        fprintf(stderr, "stepskel %s: FAIL: %s\n", shape, g4_error());
        return -1;
    }
    int bad = exitc != 0;
    for (int k = 0; k < q->n_counters; k++) bad += ctr[k] != *epoch * q->per_step[k];
    if (bad)
        fprintf(stderr, "stepskel %s: FAIL: %d counters off after %d steps\n", shape, bad, *epoch);
    return bad;
}

#define TL_CHECK(call)                                                                             \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                                     \
            return g4_fail(G4_EINTERNAL, "%s: %s", #call, cudaGetErrorString(e_));                 \
    } while (0)

// Warm-up steps, STEPSKEL_TL_PLAIN event-timed single launches (ms into plain[]), then the
// stamped one (*stamped) and its timeline copied into tl. G4_OK or the error.
static int tl_steps(g4_step_skel *s, const skel_variant *v, cudaStream_t st, cudaEvent_t e0,
                    cudaEvent_t e1, float *plain, float *stamped, g4_sq_stamp *tl) {
    for (int w = 0; w < STEPSKEL_TL_WARM; w++)
        if (g4_step_skel_launch(s, v->pf, v->mode, st)) return G4_EINTERNAL;
    for (int r = 0; r <= STEPSKEL_TL_PLAIN; r++) { // (the last one stamped)
        TL_CHECK(cudaEventRecord(e0, st));
        const int rc = r < STEPSKEL_TL_PLAIN ? g4_step_skel_launch(s, v->pf, v->mode, st)
                                             : g4_step_skel_launch_timeline(s, v->pf, v->mode, st);
        if (rc) return rc;
        TL_CHECK(cudaEventRecord(e1, st));
        TL_CHECK(cudaEventSynchronize(e1));
        TL_CHECK(cudaEventElapsedTime(r < STEPSKEL_TL_PLAIN ? &plain[r] : stamped, e0, e1));
    }
    return g4_step_skel_timeline(s, tl);
}

// One stamped step after warm-up, taken apart (engine/step_timeline.h), with the step's time
// without stamps (the median of single event-timed launches) and with them (one launch), so that
// the stamps' own cost is on the line.
static void timeline(g4_step_skel *s, const g4_step_plan *p, const g4_sq *q, int *ctr,
                     const char *shape, const skel_variant *v) {
    cudaStream_t st = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    g4_sq_stamp *tl = g4_malloc(sizeof(g4_sq_stamp) * (size_t)q->n);
    float plain[STEPSKEL_TL_PLAIN] = {0}, stamped = 0;
    char prefix[112];
    snprintf(prefix, sizeof prefix, "stepskel-tl %s:", shape);
    int rc = cudaStreamCreate(&st) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
                     cudaEventCreate(&e1) != cudaSuccess
                 ? g4_fail(G4_EINTERNAL, "a stream or event not created")
                 : tl_steps(s, v, st, e0, e1, plain, &stamped, tl);
    if (!rc) {
        for (int a = 1; a < STEPSKEL_TL_PLAIN; a++) // (insertion sort: the median)
            for (int b = a; b > 0 && plain[b] < plain[b - 1]; b--) {
                const float t = plain[b];
                plain[b] = plain[b - 1], plain[b - 1] = t;
            }
        int epoch = 0;
        long long sw = 0;
        const int off = counters_off(s, q, ctr, &epoch, &sw, shape);
        const float med = plain[STEPSKEL_TL_PLAIN / 2];
        printf("%s the step %.1f us without stamps (median of %d single launches, event-timed, "
               "launch included), %.1f us stamped (one launch): the stamps cost %.1f us; counters "
               "after %d steps: %s%s\n",
               prefix, med * 1e3, STEPSKEL_TL_PLAIN, stamped * 1e3, (stamped - med) * 1e3, epoch,
               off ? "FAIL" : "all as expected",
               v->pf == 3 ? " (pf=3: the lookahead's weights into registers: an upper bound)" : "");
        rc = g4_tl_report(p, q, tl, (v->mode & G4_SK_NO_WAIT) != 0, prefix, stdout);
        fflush(stdout);
    }
    if (rc) fprintf(stderr, "%s FAIL: %s\n", prefix, g4_error());
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (st) cudaStreamDestroy(st);
    free(tl);
}

// Rows vars[v_lo .. v_hi) at G CTAs on plan p (made with pl), then timelines tls[0 .. n_tl).
static int bench_dtype(const char *filter, int reps, g4_kbench_row *rows, int n, int max,
                       const g4_step_plan *p, const g4_sp_bench_plan *pl, g4_sq_dtype dt, int G,
                       const skel_variant *vars, int v_lo, int v_hi, const skel_variant *tls,
                       int n_tl) {
    const char *dn = dt == G4_SQ_Q4 ? "q4" : "f16";
    char shape[80]; // (room for " FAIL" in the row's 96)
    char tl_shape[96];
    int any = 0;
    for (int v = v_lo; v < v_hi; v++) {
        row_shape(shape, sizeof shape, dn, &vars[v], G, pl);
        any |= matches(filter, shape);
    }
    for (int v = 0; v < n_tl; v++) {
        row_shape(shape, sizeof shape, dn, &tls[v], G, pl);
        snprintf(tl_shape, sizeof tl_shape, "%s timeline", shape);
        any |= matches(filter, tl_shape);
    }
    if (!any) return n;
    g4_sq q;
    if (g4_sq_build(p, G, dt, &q)) {
        fprintf(stderr, "stepskel %s: refused: %s\n", dn, g4_error());
        return n;
    }
    g4_step_skel *s = NULL;
    if (g4_step_skel_create(&q, &s)) {
        fprintf(stderr, "stepskel %s: refused: %s\n", dn, g4_error());
        g4_sq_free(&q);
        return n;
    }
    int *ctr = g4_calloc((size_t)q.n_counters + 1, sizeof(int));
    long long last_short = 0;
    int last_epoch = 0;
    for (int v = v_lo; v < v_hi && n < max; v++) {
        const skel_variant *var = &vars[v];
        row_shape(shape, sizeof shape, dn, var, G, pl);
        if (!matches(filter, shape)) continue;
        g4_kbench_row *r = &rows[n];
        memset(r, 0, sizeof *r);
        snprintf(r->op, sizeof r->op, "stepskel");
        snprintf(r->shape, sizeof r->shape, "%s", shape);
        r->bytes = (double)q.w_bytes;
        skel_ctx c = {s, var->pf, var->mode};
        r->ours = g4_kbench_run_graph(one_step, &c, STEPSKEL_STEPS, 3, reps);
        r->base = g4_kbench_run_graph(one_stream, &c, STEPSKEL_STEPS, 3, reps);
        snprintf(r->base_name, sizeof r->base_name, "stream");
        n++;
        int epoch = 0;
        long long sw = 0;
        const int bad = counters_off(s, &q, ctr, &epoch, &sw, shape);
        if (bad < 0) {
            snprintf(r->shape, sizeof r->shape, "%s FAIL", shape);
            break;
        }
        const int steps = epoch - last_epoch;
        const double short_a_step = steps ? (double)(sw - last_short) / steps : 0;
        last_epoch = epoch, last_short = sw;
        const double us = r->ours.median_ms * 1e3, us_c = r->base.median_ms * 1e3;
        const double gbs = (double)q.w_bytes / (us * 1e-6) / 1e9;
        const double gbs_c = (double)q.w_bytes / (us_c * 1e-6) / 1e9;
        printf("stepskel %s: %.1f us a step, %.2f us a layer (%d layers); weights %.1f MB a step, "
               "activations %.1f MB read + %.1f MB written; %.0f GB/s = %.0f%% of the H200's "
               "4250 / %.0f%% of the H100's 3350; waits %d a step, %.0f found short; stream "
               "ceiling %.1f us (%.0f GB/s; the step %.2fx it); counters after %d steps: %s%s\n",
               shape, us, us / q.n_layers, q.n_layers, q.w_bytes / 1e6, q.rd_bytes / 1e6,
               q.wr_bytes / 1e6, gbs, 100 * gbs / 4250, 100 * gbs / 3350,
               var->mode & G4_SK_NO_WAIT ? 0 : q.waits, short_a_step, us_c, gbs_c, us / us_c, epoch,
               bad ? "FAIL" : "all as expected",
               var->pf == 3 ? " (pf=3: the lookahead's weights into registers and dropped: an "
                              "upper bound for staging them in shared memory)"
                            : "");
        fflush(stdout);
        if (bad) snprintf(r->shape, sizeof r->shape, "%s FAIL", shape);
    }
    for (int v = 0; v < n_tl; v++) {
        row_shape(shape, sizeof shape, dn, &tls[v], G, pl);
        snprintf(tl_shape, sizeof tl_shape, "%s timeline", shape);
        if (matches(filter, tl_shape)) timeline(s, p, &q, ctr, shape, &tls[v]);
    }
    free(ctr);
    g4_step_skel_free(s);
    g4_sq_free(&q);
    return n;
}

// One plan's rows: the baseline plan (all) every variant at the first G, the baseline's at 2 a
// SM and the design's at all that fit; another plan the design row at the first G and, for Q4,
// its timeline.
static int bench_plan(const char *filter, int reps, g4_kbench_row *rows, int n, int max,
                      const g4_text_config *c, const g4_sp_flags *f, const g4_sp_bench_plan *pl,
                      int all) {
    // (splits of <= pl->split keys: engine/step_queue.c says why)
    const g4_sp_opts o = g4_sp_bench_opts(pl);
    g4_step_plan p;
    int G = 0, Gm = 0, sms = 0;
    if (g4_sp_build(c, f, &o, &p)) {
        fprintf(stderr, "stepskel: plan refused: %s\n", g4_error());
        return n;
    }
    if (g4_step_skel_max_ctas(&G) || g4_step_skel_max_ctas_math(&Gm)) {
        fprintf(stderr, "stepskel: %s\n", g4_error());
    } else if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
        fprintf(stderr, "stepskel: cudaDeviceGetAttribute(SMs) failed\n");
    } else {
        // Every row at the session-30 run's G (STEPSKEL_BASE_PER_SM a SM, or all that fit when
        // fewer), the baseline's at 2 a SM (persist_mlp's grid), and the design's (pf=2) at all
        // that fit when more do now (the kernel's registers set the count): same queue rule.
        // (The ablations, pf=3 and the timelines at the first G only.)
        const int G0 = STEPSKEL_BASE_PER_SM * sms < G ? STEPSKEL_BASE_PER_SM * sms : G;
        const int n_var = (int)(sizeof stepskel_variants / sizeof stepskel_variants[0]);
        const int n_tl = (int)(sizeof stepskel_timelines / sizeof stepskel_timelines[0]);
        const skel_variant *V = stepskel_variants, *T = stepskel_timelines;
        const int n_math = (int)(sizeof stepskel_math_variants / sizeof stepskel_math_variants[0]);
        const int Gm0 = Gm < G0 ? Gm : G0;
        for (int dt = 0; dt < 2; dt++) {
            const g4_sq_dtype d = (g4_sq_dtype)dt;
            if (!all) { // (stepskel_timelines[0] is the design's)
                n = bench_dtype(filter, reps, rows, n, max, &p, pl, d, G0, V, STEPSKEL_DESIGN,
                                STEPSKEL_DESIGN + 1, T, d == G4_SQ_Q4);
            } else {
                n = bench_dtype(filter, reps, rows, n, max, &p, pl, d, G0, V, 0, n_var, T, n_tl);
                if (2 * sms < G0)
                    n = bench_dtype(filter, reps, rows, n, max, &p, pl, d, 2 * sms, V, 0,
                                    STEPSKEL_BASE_VARIANTS, T, 0);
                if (G > G0)
                    n = bench_dtype(filter, reps, rows, n, max, &p, pl, d, G, V, STEPSKEL_DESIGN,
                                    STEPSKEL_DESIGN + 1, T, 0);
            }
            if (pl->math) // (Q4's timeline on every math plan but the baseline: !all)
                n = bench_dtype(filter, reps, rows, n, max, &p, pl, d, Gm0, stepskel_math_variants,
                                0, n_math, stepskel_math_timelines, !all && d == G4_SQ_Q4);
        }
    }
    g4_sp_free(&p);
    return n;
}

int g4_kbench_stepskel(const char *filter, int reps, g4_kbench_row *rows, int max) {
    if (filter && *filter && !strstr("stepskel", filter) && strncmp(filter, "E2B", 3))
        return 0; // (the rows' shapes all start "E2B ")
    g4_text_config c;
    g4_sp_shape_config(&g4_sp_shape_e2b, &c);
    g4_sp_flags f;
    g4_sp_flags_owner_qkv(&c, &f);
    int n = 0;
    // (the one list of the bench's plans, which the cost model predicts too)
    for (int k = 0; k < g4_sp_n_bench_plans; k++)
        n = bench_plan(filter, reps, rows, n, max, &c, &f, &g4_sp_bench_plans[k], k == 0);
    free(f.qkv);
    free(c.layer);
    return n;
}
#endif
