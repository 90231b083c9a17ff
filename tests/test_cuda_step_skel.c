// test_cuda_step_skel.c: the persistent step skeleton (kernels/step_skeleton.cuh) run on the GPU
// a few steps on small configs made in code (engine/step_queue.h g4_sp_shape_config): the tile
// plan's queues for the co-resident CTA count (the occupancy API's), 3 CTAs and 1 CTA, Q4 and
// f16 bytes, one-step and two-step plans, every prefetch form and ablation mode the bench runs in
// turn (RUNS; G4_SK_MATH's refused in one line on queues for more CTAs than its instantiations
// fit, so those plans also run at that count), then a step without waits (the waits found short
// must not grow), then two stamped steps (pf=2, and pf=3 without waits; a third with the math
// where it fits): every instruction stamped in order, on its own queue's
// CTA, its waits found short summing to the step's, the critical path's segments summing to the
// span (engine/step_timeline.h). Checked after the steps: no launch failed (a wait that never
// ends traps, and the sync reports it), the epoch is the steps run, the exit counter is back at
// 0, and every counter holds steps x its signals a step (counted here from the plan); then the
// plain stream kernel runs, a bad prefetch or mode (G4_SK_MATH_HELD alone too) is refused, and
// queues for one CTA more than fit are refused. Skips (exit 77) without a GPU or below sm_90.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/step_plan.h"
#include "engine/step_queue.h"
#include "engine/step_timeline.h"
#include "kernels/cuda_util.h"
#include "kernels/step_skeleton.cuh"
#include "tests/test_util.h"

// (prefetch, mode) of each step in turn: every form and every ablation bit, alone and together
static const int RUNS[][2] = {
    {0, 0},
    {1, 0},
    {2, 0},
    {3, 0},
    {2, G4_SK_NO_WAIT},
    {2, G4_SK_NO_ACT},
    {2, G4_SK_NO_WEIGHTS},
    {2, G4_SK_NO_WAIT | G4_SK_NO_ACT | G4_SK_NO_WEIGHTS},
    {2, G4_SK_ACT8},
    {3, G4_SK_ACT8},
    {1, G4_SK_NO_WEIGHTS},
    {0, G4_SK_NO_ACT | G4_SK_ACT8},
    // the math (its own instantiations: refused on queues for more CTAs than they fit)
    {2, G4_SK_MATH},
    {2, G4_SK_MATH | G4_SK_MATH_HELD},
    {0, G4_SK_MATH},
    {1, G4_SK_MATH | G4_SK_NO_ACT},
    {3, G4_SK_MATH | G4_SK_ACT8},
    {2, G4_SK_MATH | G4_SK_NO_WAIT},
    {2, G4_SK_MATH | G4_SK_NO_WEIGHTS},
    {2, G4_SK_MATH | G4_SK_MATH_HELD | G4_SK_NO_WAIT | G4_SK_NO_ACT},
};
enum { N_RUNS = sizeof RUNS / sizeof RUNS[0] };

// A stamped step's timeline checked: g4_tl_check (every stamp set, in order, after the queue
// predecessor's), each instruction on its own queue's CTA, the waits found short summing to
// `short_waits`, and the critical path's segments summing to the span.
static void check_timeline(const g4_sq *q, const g4_sq_stamp *tl, int ignore_waits,
                           long long short_waits, const char *what) {
    uint64_t t0 = 0, t1 = 0;
    int64_t md = 0;
    int zd = 0;
    CHECK_MSG(g4_tl_check(q, tl, &t0, &t1, &md, &zd) == 0, "%s: %s", what, g4_error());
    int wrong_cta = 0;
    long long sw = 0;
    for (int b = 0; b < q->G; b++)
        for (int k = q->start[b]; k < q->start[b + 1]; k++) {
            wrong_cta += tl[q->ins[k].id].cta != b;
            sw += tl[q->ins[k].id].n_short;
        }
    CHECK_MSG(wrong_cta == 0 && sw == short_waits,
              "%s: %d instructions stamped by another CTA; %lld waits found short, the step's "
              "count says %lld",
              what, wrong_cta, sw, short_waits);
    g4_tl_node *path = g4_malloc(sizeof(g4_tl_node) * (size_t)q->n);
    int n = 0;
    CHECK_MSG(g4_tl_path(q, tl, ignore_waits, path, &n) == 0 && n >= 1, "%s: %s", what, g4_error());
    int64_t sum = 0;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < G4_TL_N; k++) sum += path[j].seg[k];
    CHECK_MSG(sum == (int64_t)(t1 - t0), "%s: the path sums to %lld ns, the span is %lld", what,
              (long long)sum, (long long)(t1 - t0));
    printf("    %s, stamped: span %.1f us, path %d instructions, timer step >= %lld ns\n", what,
           (t1 - t0) / 1e3, n, (long long)md);
    free(path);
}

// Gm: the CTAs G4_SK_MATH fits (g4_step_skel_max_ctas_math): above it every math step is
// refused in one line and not run.
static void run_plan(const g4_step_plan *p, int G, int Gm, g4_sq_dtype dt, const char *what) {
    g4_sq q;
    const int rc = g4_sq_build(p, G, dt, &q);
    CHECK_MSG(rc == 0, "%s: %s", what, g4_error());
    if (rc) return;
    g4_step_skel *s = NULL;
    if (g4_step_skel_create(&q, &s)) {
        CHECK_MSG(0, "%s: %s", what, g4_error());
        g4_sq_free(&q);
        return;
    }
    const int math = G <= Gm;
    int steps = 0;
    for (int st = 0; st < N_RUNS; st++) {
        const int rc = g4_step_skel_launch(s, RUNS[st][0], RUNS[st][1], 0);
        if ((RUNS[st][1] & G4_SK_MATH) && !math) {
            CHECK_MSG(rc == G4_EUSER && strstr(g4_error(), "G4_SK_MATH fits") != NULL,
                      "%s: a math step on %d CTAs (%d fit) not refused: %d", what, G, Gm, rc);
        } else {
            CHECK_MSG(rc == 0, "%s: pf %d mode 0x%x: %s", what, RUNS[st][0], RUNS[st][1],
                      rc ? g4_error() : "");
            steps++;
        }
    }
    int *sig = g4_calloc((size_t)p->n_counters + 1, sizeof(int));
    int *ctr = g4_calloc((size_t)p->n_counters + 1, sizeof(int));
    for (int i = 0; i < p->n; i++)
        if (p->ins[i].signal >= 0) sig[p->ins[i].signal]++;
    int epoch = -1, exitc = -1;
    long long sw = -1, sw1 = -1, sw2 = -1, sw3 = -1;
    CHECK_MSG(g4_step_skel_read(s, ctr, &epoch, &exitc, &sw1) == 0, "%s: %s", what, g4_error());
    CHECK(g4_step_skel_launch(s, 0, G4_SK_NO_WAIT, 0) == 0); // (no wait: none found short)
    steps++;
    CHECK_MSG(g4_step_skel_read(s, ctr, &epoch, &exitc, &sw2) == 0, "%s: %s", what, g4_error());
    CHECK_MSG(sw2 == sw1, "%s: a step without waits found %lld short", what, sw2 - sw1);
    g4_sq_stamp *tl = g4_calloc((size_t)q.n + 1, sizeof(g4_sq_stamp));
    CHECK(g4_step_skel_launch_timeline(s, 2, 0, 0) == 0);
    CHECK_MSG(g4_step_skel_timeline(s, tl) == 0, "%s: %s", what, g4_error());
    CHECK_MSG(g4_step_skel_read(s, ctr, &epoch, &exitc, &sw3) == 0, "%s: %s", what, g4_error());
    check_timeline(&q, tl, 0, sw3 - sw2, what);
    CHECK(g4_step_skel_launch_timeline(s, 3, G4_SK_NO_WAIT | G4_SK_ACT8, 0) == 0);
    CHECK_MSG(g4_step_skel_timeline(s, tl) == 0, "%s: %s", what, g4_error());
    check_timeline(&q, tl, 1, 0, what);
    steps += 2;
    if (math) { // the stamped math step
        long long sw4 = -1, sw5 = -1;
        CHECK_MSG(g4_step_skel_read(s, ctr, &epoch, &exitc, &sw4) == 0, "%s: %s", what, g4_error());
        CHECK(g4_step_skel_launch_timeline(s, 2, G4_SK_MATH, 0) == 0);
        CHECK_MSG(g4_step_skel_timeline(s, tl) == 0, "%s: %s", what, g4_error());
        CHECK_MSG(g4_step_skel_read(s, ctr, &epoch, &exitc, &sw5) == 0, "%s: %s", what, g4_error());
        check_timeline(&q, tl, 0, sw5 - sw4, what);
        steps++;
    }
    free(tl);
    CHECK(g4_step_skel_launch(s, 4, 0, 0) == G4_EUSER); // refused, nothing launched
    CHECK(g4_step_skel_launch(s, 2, G4_SK_MODES + 1, 0) == G4_EUSER);
    CHECK(g4_step_skel_launch(s, 2, G4_SK_MATH_HELD, 0) == G4_EUSER); // (without G4_SK_MATH)
    CHECK(strstr(g4_error(), "G4_SK_MATH_HELD without") != NULL);
    const int rr = g4_step_skel_read(s, ctr, &epoch, &exitc, &sw);
    CHECK_MSG(rr == 0, "%s: %s", what, g4_error());
    int off = 0;
    for (int c = 0; c < p->n_counters; c++) off += ctr[c] != steps * sig[c];
    CHECK_MSG(rr == 0 && epoch == steps && exitc == 0 && off == 0 && sw >= 0,
              "%s: epoch %d of %d, exit counter %d, %d of %d counters off", what, epoch, steps,
              exitc, off, p->n_counters);
    printf("  %s: G %d, %d instructions, %.2f MB of weights a step, %d steps (%s): counters as "
           "expected, %lld waits found short of %d\n",
           what, G, q.n, q.w_bytes / 1e6, epoch, math ? "math among them" : "math refused", sw,
           steps * q.waits);
    CHECK(g4_step_skel_stream(s, 0) == 0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    g4_step_skel_free(s);
    g4_sq_free(&q);
    free(sig);
    free(ctr);
}

int main(void) {
    const char *why = NULL;
    if (g4_cuda_device_count(&why) == 0) return g4t_skip("test_cuda_step_skel", why);
    int major = 0;
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
    if (major < 9) return g4t_skip("test_cuda_step_skel", "the kernels are built for sm_90a");
    int G = 0, Gm = 0;
    CHECK(g4_step_skel_max_ctas(&G) == 0);
    CHECK(g4_step_skel_max_ctas_math(&Gm) == 0);
    CHECK_MSG(Gm >= 1 && Gm <= G, "the math fits %d CTAs, the skeleton %d", Gm, G);
    printf("  %d CTAs fit co-resident (%d with G4_SK_MATH)\n", G, Gm);
    static const g4_sp_shape shapes[] = {
        {"3 layers, hidden 64", 64, 3, 2, 1, 32, 64, 2, 1, 128, 256, 32, 512, 8},
        {"7 layers, hidden 512, GQA 2:1", 512, 7, 4, 2, 64, 128, 3, 2, 1024, 2048, 64, 4096, 64},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        g4_text_config c;
        g4_sp_shape_config(&shapes[k], &c);
        g4_sp_flags f;
        g4_sp_flags_owner_qkv(&c, &f);
        for (int steps = 1; steps <= 2; steps++) {
            // (two steps in one plan: the fixed split count, as the plan's checks want)
            const g4_sp_opts o = {G4_SP_TILE, 10, steps, 0, 0, 0, 0, 0, steps == 2};
            g4_step_plan p;
            CHECK(g4_sp_build(&c, &f, &o, &p) == 0);
            const int Gs[] = {G, Gm, 3, 1}; // (Gm: the math at all it fits; skipped when = G)
            for (int g = 0; g < 4; g++)
                for (int dt = 0; dt < 2 && (g != 1 || Gm < G); dt++) {
                    char what[160];
                    snprintf(what, sizeof what, "%s, %d-step plan, %s", shapes[k].name, steps,
                             dt ? "f16" : "Q4");
                    run_plan(&p, Gs[g], Gm, (g4_sq_dtype)dt, what);
                }
            if (k == 0 && steps == 1) { // one CTA more than fit: refused in one line
                g4_sq q;
                CHECK(g4_sq_build(&p, G + 1, G4_SQ_Q4, &q) == 0);
                g4_step_skel *s = NULL;
                CHECK(g4_step_skel_create(&q, &s) == G4_EUSER && s == NULL);
                CHECK(strstr(g4_error(), "fit co-resident") != NULL);
                g4_sq_free(&q);
            }
            g4_sp_free(&p);
        }
        free(f.qkv);
        free(c.layer);
    }
    return g4t_finish("test_cuda_step_skel");
}
