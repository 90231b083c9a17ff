// test_step_skel_math.c: the walk of the skeleton's G4_SK_MATH (kernels/step_skel_math.h) on the
// CPU. The kernel's warps call skm_start / skm_next on the device; here the same functions run
// for each of a CTA's SKM_WARPS warps over every weight-carrying instruction of real queues
// (E2B's tile plan, the bench's plans that run the math, and the GPU test's two small shapes;
// Q4 and f16) and two hand-made ones, against the units listed independently (two loops over
// run r and unit c): warp w's j-th unit must be unit w + SKM_WARPS j of that list (so every unit
// is taken exactly once, the warps' counts differing by at most one), with its run's bytes left
// from it; a Q4 run must be whole tiles (the skeleton's precondition), every unit inside the
// arena, and the units' bytes (an f16 run's last unit cut at the run's end) must add up to the
// bytes the instruction streams.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/step_plan.h"
#include "engine/step_queue.h"
#include "kernels/step_skel_math.h"
#include "tests/test_util.h"

static long walked; // instructions walked (printed)

// One instruction's walk checked against its listed units; the arena has w_bytes bytes.
static void walk_checks(const g4_sq_instr *in, int dt, int64_t w_bytes, const char *what) {
    const int unit = dt == G4_SQ_F16 ? 2048 : 592;
    if (dt == G4_SQ_Q4)
        CHECK_MSG(in->w_run % 592 == 0, "%s #%d: a Q4 run of %d bytes (not whole tiles)", what,
                  in->id, in->w_run);
    // the list: run r's unit c at w_off + r stride + c unit, bytes left w_run - c unit
    int n = 0;
    for (int c = 0; c < in->w_run; c += unit) n++;
    const int upr = n;
    n *= in->w_runs;
    CHECK_MSG(upr == skm_units_a_run(dt, in->w_run), "%s #%d: %d units a run, the header says %d",
              what, in->id, upr, skm_units_a_run(dt, in->w_run));
    int64_t *off = g4_malloc(sizeof(int64_t) * ((size_t)n + 1));
    int *left = g4_malloc(sizeof(int) * ((size_t)n + 1));
    int k = 0;
    for (int r = 0; r < in->w_runs; r++)
        for (int c = 0; c * unit < in->w_run; c++, k++) {
            off[k] = in->w_off + (int64_t)r * in->w_stride + (int64_t)c * unit;
            left[k] = in->w_run - c * unit;
        }
    int bad = 0, taken = 0, mmin = n, mmax = 0;
    int64_t bytes = 0;
    for (int w = 0; w < SKM_WARPS; w++) {
        const int m = skm_warp_units(n, w);
        mmin = m < mmin ? m : mmin, mmax = m > mmax ? m : mmax;
        skm_cursor cur = skm_start(in, dt, w);
        for (int j = 0; j < m; j++) {
            int l = -1;
            const int64_t o = skm_next(&cur, &l);
            const int i = w + SKM_WARPS * j;
            const int64_t end = o + (l < unit ? l : unit);
            bad += i >= n || o != off[i] || l != left[i] || o < 0 || end > w_bytes;
            if (i < n && bad) {
                CHECK_MSG(0,
                          "%s #%d: warp %d unit %d at %lld, %d left: listed %lld, %d (arena %lld)",
                          what, in->id, w, j, (long long)o, l, (long long)off[i], left[i],
                          (long long)w_bytes);
                break;
            }
            taken++;
            bytes += l < unit ? l : unit;
        }
    }
    CHECK_MSG(
        bad == 0 && taken == n && mmax - mmin <= 1 && bytes == (int64_t)in->w_runs * in->w_run,
        "%s #%d: %d of %d units taken (%d wrong), %d..%d a warp, %lld bytes of %lld", what, in->id,
        taken, n, bad, mmin, mmax, (long long)bytes, (long long)in->w_runs * in->w_run);
    free(off);
    free(left);
    walked++;
}

static void plan_checks(const g4_sp_shape *sh, const g4_sp_opts *o, const char *what) {
    g4_text_config c;
    g4_sp_shape_config(sh, &c);
    g4_sp_flags f;
    g4_sp_flags_owner_qkv(&c, &f);
    g4_step_plan p;
    const int rc = g4_sp_build(&c, &f, o, &p);
    CHECK_MSG(rc == 0, "%s: %s", what, g4_error());
    for (int dt = 0; dt < 2 && rc == 0; dt++) {
        g4_sq q;
        CHECK_MSG(g4_sq_build(&p, 1, (g4_sq_dtype)dt, &q) == 0, "%s: %s", what, g4_error());
        CHECK_INT(q.dt, dt);
        char w2[120];
        snprintf(w2, sizeof w2, "%s %s", what, dt ? "f16" : "Q4");
        int n_w = 0;
        for (int k = 0; k < q.n; k++)
            if (q.ins[k].w_runs > 0) walk_checks(&q.ins[k], dt, q.w_bytes, w2), n_w++;
        CHECK_MSG(n_w > 0, "%s: no weight-carrying instruction", w2);
        g4_sq_free(&q);
    }
    if (rc == 0) g4_sp_free(&p);
    free(f.qkv);
    free(c.layer);
}

int main(void) {
    // hand-made: 3 runs of 4 Q4 tiles, not contiguous (a stride of 4 tiles + 16 bytes).
    // Units 0..11; warp 0 takes 0 and 8 (run 0 tile 0, run 2 tile 0), warp 5 takes 5 (run 1
    // tile 1), warp 7 takes 7 (run 1 tile 3) only.
    g4_sq_instr in;
    memset(&in, 0, sizeof in);
    in.w_off = 32, in.w_runs = 3, in.w_run = 4 * 592, in.w_stride = 4 * 592 + 16;
    CHECK_INT(skm_warp_units(12, 0), 2);
    CHECK_INT(skm_warp_units(12, 3), 2);
    CHECK_INT(skm_warp_units(12, 4), 1);
    CHECK_INT(skm_warp_units(12, 7), 1);
    CHECK_INT(skm_warp_units(3, 5), 0);
    int l = 0;
    skm_cursor k0 = skm_start(&in, G4_SQ_Q4, 0), k5 = skm_start(&in, G4_SQ_Q4, 5),
               k7 = skm_start(&in, G4_SQ_Q4, 7);
    CHECK_INT(skm_next(&k0, &l), 32);
    CHECK_INT(l, 2368);
    CHECK_INT(skm_next(&k0, &l), 32 + 2 * 2384);
    CHECK_INT(skm_next(&k5, &l), 32 + 2384 + 592);
    CHECK_INT(l, 1776);
    CHECK_INT(skm_next(&k7, &l), 32 + 2384 + 3 * 592);
    CHECK_INT(l, 592);
    walk_checks(&in, G4_SQ_Q4, 32 + 3 * 2384, "hand Q4");
    // f16: 2 runs of 3,000 bytes (a whole step and one of 952 bytes), contiguous: units 0..3
    in.w_off = 0, in.w_runs = 2, in.w_run = 3000, in.w_stride = 3000;
    skm_cursor k1 = skm_start(&in, G4_SQ_F16, 1), k3 = skm_start(&in, G4_SQ_F16, 3);
    CHECK_INT(skm_units_a_run(G4_SQ_F16, 3000), 2);
    CHECK_INT(skm_next(&k1, &l), 2048);
    CHECK_INT(l, 952);
    CHECK_INT(skm_next(&k3, &l), 3000 + 2048);
    CHECK_INT(l, 952);
    walk_checks(&in, G4_SQ_F16, 6000, "hand f16");
    // runs of no bytes (refused by the skeleton, but the walk must not hang): no unit
    in.w_run = 0;
    const skm_cursor k9 = skm_start(&in, G4_SQ_F16, 7);
    CHECK_INT(k9.r, 0);
    CHECK_INT(skm_warp_units(in.w_runs * skm_units_a_run(G4_SQ_F16, 0), 0), 0);

    // the bench's plans of E2B that run the math (engine/step_queue.h g4_sp_bench_plans, math 1:
    // the baseline, the cost model's best, its best with the math, its held-words plan)
    int n_math = 0;
    for (int k = 0; k < g4_sp_n_bench_plans; k++) {
        const g4_sp_bench_plan *b = &g4_sp_bench_plans[k];
        if (!b->math) continue;
        const g4_sp_opts o = g4_sp_bench_opts(b);
        char what[80];
        snprintf(what, sizeof what, "E2B bench plan %d/%d/%d/%d", b->split, b->chunk, b->group,
                 b->lm);
        plan_checks(&g4_sp_shape_e2b, &o, what);
        n_math++;
    }
    CHECK_MSG(n_math > 0, "no bench plan runs the math");
    // the GPU test's shapes (tests/test_cuda_step_skel.c), two-step plans
    static const g4_sp_shape shapes[] = {
        {"3 layers, hidden 64", 64, 3, 2, 1, 32, 64, 2, 1, 128, 256, 32, 512, 8},
        {"7 layers, hidden 512, GQA 2:1", 512, 7, 4, 2, 64, 128, 3, 2, 1024, 2048, 64, 4096, 64},
    };
    const g4_sp_opts small = {G4_SP_TILE, 10, 2, 0, 0, 0, 0, 0, 1};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        plan_checks(&shapes[k], &small, shapes[k].name);
    printf("  %ld instructions walked\n", walked);
    return g4t_finish("test_step_skel_math");
}
