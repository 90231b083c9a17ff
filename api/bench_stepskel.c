// bench_stepskel.c: `g4cu bench --kernels --filter stepskel` (an area of g4cu_dev_bench_kernels.c;
// here, above the engine, because it builds the step plan): the persistent skeleton of the whole
// decode step (kernels/step_skeleton.cuh) on E2B's shape (engine/step_queue.h g4_sp_shape_e2b,
// made in code), its tile plan at STEPSKEL_KEYS keys, with Q4 and f16 weight bytes, each prefetch
// form, for every CTA that fits co-resident (the occupancy API's count) and for 2 a SM. A row's
// ms is one step (graph-replayed, STEPSKEL_STEPS launches a graph); its baseline
// `stream` is the same weight bytes streamed by one plain kernel of the same grid and loads (the
// ceiling). No rotation is needed: a step streams every weight byte once (1.32 GB Q4, 4.56 GB f16
// on E2B, far past the 50 MB L2), so each byte comes from DRAM. Beside the table, a line a row:
// us a step and a layer, bytes a step, GB/s against the H200's 4.25 TB/s and the H100's
// 3.35 TB/s, counters waited a step (all, and those found short), and every counter's value after
// the timed steps checked (the row's label says FAIL if one is off).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/step_plan.h"
#include "engine/step_queue.h"
#include "kernels/bench/kbench.h"

#ifdef G4_NO_CUDA
int g4_kbench_stepskel(const char *filter, int reps, g4_kbench_row *rows, int max);
int g4_kbench_stepskel(const char *filter, int reps, g4_kbench_row *rows, int max) {
    (void)filter, (void)reps, (void)rows, (void)max;
    return 0;
}
#else
#include "kernels/step_skeleton.cuh"

int g4_kbench_stepskel(const char *filter, int reps, g4_kbench_row *rows, int max);

enum {
    STEPSKEL_KEYS = 512,       // keys the step's attention sees
    STEPSKEL_SPLIT_KEYS = 128, // keys an attention split at most: 4 splits a KV head
    STEPSKEL_STEPS = 8         // launches a graph
};

typedef struct {
    g4_step_skel *s;
    int pf;
} skel_ctx;

static void one_step(void *ctx, int rep, void *stream) {
    (void)rep;
    const skel_ctx *c = ctx;
    if (g4_step_skel_launch(c->s, c->pf, (cudaStream_t)stream)) fprintf(stderr, "%s\n", g4_error());
}

static void one_stream(void *ctx, int rep, void *stream) {
    (void)rep;
    const skel_ctx *c = ctx;
    if (g4_step_skel_stream(c->s, (cudaStream_t)stream)) fprintf(stderr, "%s\n", g4_error());
}

static int matches(const char *filter, const char *shape) {
    return !filter || !*filter || strstr("stepskel", filter) || strstr(shape, filter);
}

// A row's shape (the filter matches it; every one starts "E2B ": g4_kbench_stepskel's test).
static void row_shape(char *s, size_t n, const char *dn, int pf, int G) {
    snprintf(s, n, "E2B %s pf=%d G=%d keys=%d/%d", dn, pf, G, STEPSKEL_KEYS, STEPSKEL_SPLIT_KEYS);
}

static int bench_dtype(const char *filter, int reps, g4_kbench_row *rows, int n, int max,
                       const g4_step_plan *p, g4_sq_dtype dt, int G) {
    const char *dn = dt == G4_SQ_Q4 ? "q4" : "f16";
    char shape[80]; // (room for " FAIL" in the row's 96)
    int any = 0;
    for (int pf = 0; pf < 3; pf++) {
        row_shape(shape, sizeof shape, dn, pf, G);
        any |= matches(filter, shape);
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
    for (int pf = 0; pf < 3 && n < max; pf++) {
        row_shape(shape, sizeof shape, dn, pf, G);
        if (!matches(filter, shape)) continue;
        g4_kbench_row *r = &rows[n];
        memset(r, 0, sizeof *r);
        snprintf(r->op, sizeof r->op, "stepskel");
        snprintf(r->shape, sizeof r->shape, "%s", shape);
        r->bytes = (double)q.w_bytes;
        skel_ctx c = {s, pf};
        r->ours = g4_kbench_run_graph(one_step, &c, STEPSKEL_STEPS, 3, reps);
        r->base = g4_kbench_run_graph(one_stream, &c, STEPSKEL_STEPS, 3, reps);
        snprintf(r->base_name, sizeof r->base_name, "stream");
        n++;
        int epoch = 0, exitc = 0;
        long long sw = 0;
        if (g4_step_skel_read(s, ctr, &epoch, &exitc, &sw)) {
            fprintf(stderr, "stepskel %s: FAIL: %s\n", shape, g4_error());
            snprintf(r->shape, sizeof r->shape, "%s FAIL", shape);
            break;
        }
        int bad = exitc != 0;
        for (int k = 0; k < q.n_counters; k++) bad += ctr[k] != epoch * q.per_step[k];
        const int steps = epoch - last_epoch;
        const double short_a_step = steps ? (double)(sw - last_short) / steps : 0;
        last_epoch = epoch, last_short = sw;
        const double us = r->ours.median_ms * 1e3, us_c = r->base.median_ms * 1e3;
        const double gbs = (double)q.w_bytes / (us * 1e-6) / 1e9;
        const double gbs_c = (double)q.w_bytes / (us_c * 1e-6) / 1e9;
        printf("stepskel %s: %.1f us a step, %.2f us a layer (%d layers); weights %.1f MB a step, "
               "activations %.1f MB read + %.1f MB written; %.0f GB/s = %.0f%% of the H200's "
               "4250 / %.0f%% of the H100's 3350; waits %d a step, %.0f found short; stream "
               "ceiling %.1f us (%.0f GB/s; the step %.2fx it); counters after %d steps: %s\n",
               shape, us, us / q.n_layers, q.n_layers, q.w_bytes / 1e6, q.rd_bytes / 1e6,
               q.wr_bytes / 1e6, gbs, 100 * gbs / 4250, 100 * gbs / 3350, q.waits, short_a_step,
               us_c, gbs_c, us / us_c, epoch, bad ? "FAIL" : "all as expected");
        fflush(stdout);
        if (bad) {
            fprintf(stderr, "stepskel %s: FAIL: %d counters off after %d steps\n", shape, bad,
                    epoch);
            snprintf(r->shape, sizeof r->shape, "%s FAIL", shape);
        }
    }
    free(ctr);
    g4_step_skel_free(s);
    g4_sq_free(&q);
    return n;
}

int g4_kbench_stepskel(const char *filter, int reps, g4_kbench_row *rows, int max) {
    if (filter && *filter && !strstr("stepskel", filter) && strncmp(filter, "E2B", 3))
        return 0; // (the rows' shapes all start "E2B ")
    g4_text_config c;
    g4_sp_shape_config(&g4_sp_shape_e2b, &c);
    g4_sp_flags f = {1, 0, 0, 0, g4_calloc((size_t)c.n_layers, 1)};
    for (int l = 0; l < c.n_layers; l++) f.qkv[l] = c.layer[l].kv_source == l; // (q|k|v as one)
    // (splits of <= STEPSKEL_SPLIT_KEYS keys: one CTA reading all 512 rows of a KV head's
    // fp16 K and V, 0.5-1 MB, would sit on every layer's critical path)
    const g4_sp_opts o = {G4_SP_TILE, STEPSKEL_KEYS, 1, 0, 0, 0, STEPSKEL_SPLIT_KEYS, 0, 0};
    g4_step_plan p;
    int n = 0, G = 0;
    if (g4_sp_build(&c, &f, &o, &p)) {
        fprintf(stderr, "stepskel: plan refused: %s\n", g4_error());
    } else {
        int sms = 0;
        if (g4_step_skel_max_ctas(&G)) {
            fprintf(stderr, "stepskel: %s\n", g4_error());
        } else if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
            fprintf(stderr, "stepskel: cudaDeviceGetAttribute(SMs) failed\n");
        } else {
            // every CTA that fits, and 2 a SM (persist_mlp's grid) when fewer: same queue rule
            const int Gs[2] = {G, 2 * sms < G ? 2 * sms : 0};
            for (int dt = 0; dt < 2; dt++)
                for (int g = 0; g < 2; g++)
                    if (Gs[g])
                        n = bench_dtype(filter, reps, rows, n, max, &p, (g4_sq_dtype)dt, Gs[g]);
        }
        g4_sp_free(&p);
    }
    free(f.qkv);
    free(c.layer);
    return n;
}
#endif
