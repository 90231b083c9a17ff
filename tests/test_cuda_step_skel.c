// test_cuda_step_skel.c: the persistent step skeleton (kernels/step_skeleton.cuh) run on the GPU
// a few steps on small configs made in code (engine/step_queue.h g4_sp_shape_config): the tile
// plan's queues for the co-resident CTA count (the occupancy API's), 3 CTAs and 1 CTA, Q4 and
// f16 bytes, one-step and two-step plans, every prefetch form in turn (step s takes s % 3).
// Checked after the steps: no launch failed (a wait that never ends traps, and the sync reports
// it), the epoch is the steps run, the exit counter is back at 0, and every counter holds steps x
// its signals a step (counted here from the plan); then the plain stream kernel runs, and queues
// for one CTA more than fit are refused. Skips (exit 77) without a GPU or below sm_90.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/step_plan.h"
#include "engine/step_queue.h"
#include "kernels/cuda_util.h"
#include "kernels/step_skeleton.cuh"
#include "tests/test_util.h"

enum { STEPS = 6 };

static void run_plan(const g4_step_plan *p, int G, g4_sq_dtype dt, const char *what) {
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
    for (int st = 0; st < STEPS; st++) CHECK(g4_step_skel_launch(s, st % 3, 0) == 0);
    int *sig = g4_calloc((size_t)p->n_counters + 1, sizeof(int));
    int *ctr = g4_calloc((size_t)p->n_counters + 1, sizeof(int));
    for (int i = 0; i < p->n; i++)
        if (p->ins[i].signal >= 0) sig[p->ins[i].signal]++;
    int epoch = -1, exitc = -1;
    long long sw = -1;
    const int rr = g4_step_skel_read(s, ctr, &epoch, &exitc, &sw);
    CHECK_MSG(rr == 0, "%s: %s", what, g4_error());
    int off = 0;
    for (int c = 0; c < p->n_counters; c++) off += ctr[c] != STEPS * sig[c];
    CHECK_MSG(rr == 0 && epoch == STEPS && exitc == 0 && off == 0 && sw >= 0,
              "%s: epoch %d of %d, exit counter %d, %d of %d counters off", what, epoch, STEPS,
              exitc, off, p->n_counters);
    printf("  %s: G %d, %d instructions, %.2f MB of weights a step, %d steps: counters as "
           "expected, %lld waits found short of %d\n",
           what, G, q.n, q.w_bytes / 1e6, epoch, sw, STEPS * q.waits);
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
    int G = 0;
    CHECK(g4_step_skel_max_ctas(&G) == 0);
    printf("  %d CTAs fit co-resident\n", G);
    static const g4_sp_shape shapes[] = {
        {"3 layers, hidden 64", 64, 3, 2, 1, 32, 64, 2, 1, 128, 256, 32, 512, 8},
        {"7 layers, hidden 512, GQA 2:1", 512, 7, 4, 2, 64, 128, 3, 2, 1024, 2048, 64, 4096, 64},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        g4_text_config c;
        g4_sp_shape_config(&shapes[k], &c);
        g4_sp_flags f = {1, 0, 0, 0, g4_calloc((size_t)c.n_layers, 1)};
        for (int l = 0; l < c.n_layers; l++) f.qkv[l] = c.layer[l].kv_source == l;
        for (int steps = 1; steps <= 2; steps++) {
            // (two steps in one plan: the fixed split count, as the plan's checks want)
            const g4_sp_opts o = {G4_SP_TILE, 10, steps, 0, 0, 0, 0, 0, steps == 2};
            g4_step_plan p;
            CHECK(g4_sp_build(&c, &f, &o, &p) == 0);
            const int Gs[] = {G, 3, 1};
            for (int g = 0; g < 3; g++)
                for (int dt = 0; dt < 2; dt++) {
                    char what[160];
                    snprintf(what, sizeof what, "%s, %d-step plan, %s", shapes[k].name, steps,
                             dt ? "f16" : "Q4");
                    run_plan(&p, Gs[g], (g4_sq_dtype)dt, what);
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
