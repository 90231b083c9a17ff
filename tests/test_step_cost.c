// test_step_cost.c: the step skeleton's cost model (engine/step_cost.h) on hand-made queues, every
// expected number worked out by hand below (not by the code under test); its parameter checks;
// the report's shape (`g4cu bench --step-model`).
//
// Parameters (jitter 0, red 0 unless said): rounds of 16,384 bytes, w_lat 0.5 us, DRAM 16.384
// GB/s (16,384 bytes a us: one CTA with a full round in flight saturates it: a round takes
// 16384 / 16384 = 1.0 us > 0.5), queue 0.2, wait 0.1, hand-over 0.4, read 0.05 + 0.25 a region +
// bytes at 1 GB/s busy (1,000 bytes a us) / 2 GB/s idle, write 0.3 + 0.1 a region + bytes at
// 1 GB/s, launch 1.0.
// Queues: CTA 0 = i0, i2; CTA 1 = i1.
//   i0: weights one contiguous range of 32,768 bytes (2 rounds of 16,384), no wait, reads 1
//       region of 1,000 bytes, writes 1 of 500, signals counter 0
//   i1: no weights, waits counter 0 >= 1, reads 1 region of 2,000 bytes, writes none, signals 1
//   i2: weights 2 runs of 16,384 bytes 32,768 apart (strided: run by run, 2 rounds), waits
//       counter 1 >= 1, reads and writes nothing, signals nothing
// pf=2, the design (us):
//   CTA 1: i1 begins 0, no weights: pre 0, counter 0 short: blocked
//   CTA 0: i0 begins 0, streams alone: in flight 16,384 -> a round 1.0 us: pre 2.0; wait 0.1 ->
//          2.1; read (nothing streams: idle) 0.05 + 0.25 + 1000/2000 = 0.8 -> 2.9; write 0.3 +
//          0.1 + 500/1000 = 0.9 -> 3.8: signal 0
//   CTA 1: woken 3.8 + 0.4 = 4.2; read while CTA 0 streams (busy) 0.05 + 0.25 + 2000/1000 = 2.3
//          -> 6.5; write 0.3 -> 6.8: signal 1
//   CTA 0: i2 begins 3.8 + 0.2 = 4.0; 2 rounds of 16,384 (saturating): 1.0 each -> pre 6.0;
//          counter 1 short: blocked; woken 6.8 + 0.4 = 7.2; read 0.05 -> 7.25; write 0.3 -> 7.55
//   step = 7.55 + 1.0 = 8.55 us; 2 waits found short. Stamps (ns, from 1,000), begin pre waited
//   wts read signal: i0 1000 3000 3100 3100 3900 4800; i1 1000 1000 5200 5200 7500 7800;
//   i2 5000 7000 8200 8200 8250 8550. The path: i2 <- i1 <- i0 by hand-overs (6,800 after i2's
//   pre 7,000 - 1,000; 3,800 after i1's pre 0).
// NO_WEIGHTS: i0 wait 0.1, read (idle) 0.8 -> 0.9, write 0.9 -> 1.8; i1 woken 2.2, read (idle:
//   nothing streams) 0.05 + 0.25 + 1.0 = 1.3 -> 3.5, write 0.3 -> 3.8; i2 begins 2.0, blocked,
//   woken 4.2, read 0.05, write 0.3 -> 4.55: step 5.55.
// NO_WAIT | NO_ACT | NO_WEIGHTS: each instruction wait 0.1 + read 0.05 + write 0.3 = 0.45; CTA 0:
//   i0 0.45, queue 0.2, i2 0.65 + 0.45 = 1.1: step 2.1.
// red 0.5 (pf=2): i0's signal 3.8 + 0.5 = 4.3; i1 woken 4.7; i2 begins 4.5, pre 4.5 -> 6.5 (so
//   i1's read at 4.7 is busy: 2.3 -> 7.0); i1 write -> 7.3, its red -> 7.8; i2 woken 8.2, read
//   -> 8.25, write -> 8.55 (no signal): step 9.55.
// pf=0: i0 wait 0.1, then its 2 rounds 0.1 -> 2.1, read (its own stream over: idle) 0.8 -> 2.9,
//   write -> 3.8; i1 woken 4.2, read: CTA 0's i2 (begun 4.0) waits first (blocked: counter 1),
//   nothing streams: idle 1.3 -> 5.5, write -> 5.8; i2 woken 6.2, streams 2 rounds -> 8.2, read
//   0.05 -> 8.25, write 0.3 -> 8.55: step 9.55.
// G4_SK_MATH on a 1-instruction queue (one CTA; math_unit 0.5 us, ring 4 unless said): i weighs
//   one run of 11,840 bytes (20 Q4 tiles of 592), no wait, no region, no signal. Warp 0 of the
//   walk takes tiles 0, 8, 16: k = 3. pf=2: 1 round of 11,840 in flight: 11840 / 16384 =
//   0.72265625 us (> 0.5); wait 0.1 -> 0.82265625; read 0.05 -> 0.87265625; no math: write 0.3
//   -> 1.17265625, step 2.17265625. The math (its own stream over: the round latency 0.5):
//   held 3 x 0.5 = 1.5 -> step 3.67265625; re-read, ring 4: max(1.5, ceil(3 / 4) x 0.5) = 1.5
//   (the same); unit 0.1: max(0.3, 0.5) = 0.5 -> 2.67265625; ring 1: 3 x (0.5 + 0.5) = 3.0 ->
//   5.17265625. f16 queues (2 KB steps): ceil(11840 / 2048) = 6 units, warp 0 takes 1: held 0.5
//   -> 2.67265625. NO_WEIGHTS | MATH: no stream, no math: 0.1 + 0.05 + 0.3 + 1 = 1.45. 17 tiles
//   (10,064 bytes; warp 0 takes 0, 8, 16: 3, the other warps 2), held: pre 10064 / 16384 =
//   0.6142578125, wait, read -> 0.7642578125, math 1.5, write 0.3: step 3.5642578125.
// The 3-instruction queues, pf=2, MATH | HELD (Q4): i0 32,768 bytes = 55 tiles, warp 0 7: 3.5
//   us; i2 2 runs of 27 tiles = 54, warp 0 7: 3.5; i1 no weights: none. CTA 0: i0 pre 2.0,
//   wait -> 2.1, read -> 2.9, math -> 6.4, write -> 7.3: signal 0; i2 begins 7.5, streams to
//   9.5, blocked. CTA 1: i1 woken 7.7, read (busy: CTA 0 streams) 2.3 -> 10.0, write -> 10.3:
//   signal 1. i2 woken 10.7, read -> 10.75, math -> 14.25, write -> 14.55: step 15.55.
// The re-read at the latency of the moment (MATH, ring 4, unit 0.1; 2 CTAs, no wait, no region,
//   no signal): CTA 0's a: one run of 65,536 bytes (4 rounds; 110 tiles, warp 0 14); CTA 1's b:
//   11,840 (1 round; 20 tiles, warp 0 3). Both stream from 0: 16,384 + 11,840 = 28,224 in
//   flight: a round 1.72265625 us; b's pre ends there, a has 3 rounds left at 1.0 each (16,384
//   in flight) -> 4.72265625. b: wait -> 1.82265625, read -> 1.87265625 (stamp 2873), math while
//   a streams: max(0.3, ceil(3 / 4) x 1.0) = 1.0 -> 2.87265625, write -> 3.17265625 (stamp
//   4173; at the unloaded 0.5 it would be 3673). a: wait, read -> 4.87265625, math (nothing
//   streams: 0.5) max(1.4, ceil(14 / 4) x 0.5 = 2.0) -> 6.87265625, write -> 7.17265625: step
//   8.17265625.
// The re-read's own round (math_lat_us, not the stream's w_lat_us; the 1-instruction queue, 20
//   tiles, k = 3, its stream over: lat = math_lat_us): math_lat 0.3, ring 1, unit 0.5: 3 x (0.5 +
//   0.3) = 2.4 -> step 2.17265625 + 2.4 = 4.57265625 (w_lat_us 0.5 in its place: 5.17265625;
//   unit - lat: 2.77265625); ring 2, unit 0.1: max(3 x 0.1, ceil(3 / 2) x 0.3) = 0.6 -> 2.77265625
//   (k / ring without the ceil: 2.62265625; ring 1's sum: 3.37265625).
// The math carries no jitter (jitter 1: every other timed segment all exponential): held, unit
//   0.5, no write cost (wr_fix_us 0, no region): the read's end to the signal is the math alone,
//   3 x 0.5 = 1.5 us exactly (1500 ns of stamps); the step still differs from 3.67265625 (the
//   wait and the read are drawn).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/step_cost.h"
#include "engine/step_queue.h"
#include "engine/step_timeline.h"
#include "tests/test_util.h"

static g4_sc_params hand_params(void) {
    g4_sc_params p;
    memset(&p, 0, sizeof p);
    p.dram_gbs = 16.384, p.w_round_bytes = 16384, p.w_lat_us = 0.5;
    p.queue_us = 0.2, p.wait_us = 0.1, p.handover_us = 0.4;
    p.rd_fix_us = 0.05, p.rd_lat_us = 0.25, p.rd_busy_gbs = 1, p.rd_idle_gbs = 2;
    p.wr_fix_us = 0.3, p.wr_lat_us = 0.1, p.wr_gbs = 1, p.launch_us = 1;
    p.math_unit_us = 0.5, p.math_ring = 4, p.math_lat_us = 0.5;
    return p;
}

static g4_sq_instr instr(int id, int wait_ctr, int signal) {
    g4_sq_instr in;
    memset(&in, 0, sizeof in);
    in.id = id, in.signal = signal;
    if (wait_ctr >= 0) {
        in.n_wait = 1, in.wait_ctr[0] = wait_ctr, in.wait_tgt[0] = 1, in.wait_step[0] = 1;
    }
    return in;
}

static void near(double got, double want, const char *what) {
    CHECK_MSG(fabs(got - want) < 1e-9, "%s: %.12g, want %.12g", what, got, want);
}

int main(void) {
    // queues: CTA 0 = i0 i2, CTA 1 = i1 (plan index in id)
    int start[3] = {0, 2, 3}, per_step[2] = {1, 1};
    g4_sq_instr ins[3] = {instr(0, -1, 0), instr(2, 1, -1), instr(1, 0, 1)};
    ins[0].w_runs = 1, ins[0].w_run = 32768, ins[0].w_stride = 32768;
    ins[0].reg0 = 0, ins[0].n_rd = 1, ins[0].n_wr = 1;
    ins[1].w_runs = 2, ins[1].w_run = 16384, ins[1].w_stride = 32768;
    ins[1].reg0 = 3;
    ins[2].reg0 = 2, ins[2].n_rd = 1;
    g4_sq_region reg[3] = {{0, 1000, 0}, {1024, 500, 0}, {2048, 2000, 0}};
    g4_sq q;
    memset(&q, 0, sizeof q);
    q.G = 2, q.n = 3, q.start = start, q.ins = ins, q.reg = reg, q.n_reg = 3;
    q.n_counters = 2, q.per_step = per_step;

    g4_sc_params p = hand_params();
    CHECK(g4_sc_params_check(&p) == G4_OK);
    g4_sq_stamp st[3];
    g4_sc_result r;
    CHECK(g4_sc_simulate(&q, &p, 2, 0, st, &r) == G4_OK);
    near(r.step_us, 8.55, "pf=2 step");
    CHECK_INT(r.blocked, 2);
    static const uint64_t want[3][G4_TL_STAMPS] = {{1000, 3000, 3100, 3100, 3900, 4800},
                                                   {1000, 1000, 5200, 5200, 7500, 7800},
                                                   {5000, 7000, 8200, 8200, 8250, 8550}};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < G4_TL_STAMPS; k++)
            CHECK_MSG(st[i].t[k] == want[i][k], "i%d stamp %d: %llu, want %llu", i, k,
                      (unsigned long long)st[i].t[k], (unsigned long long)want[i][k]);
    CHECK(st[0].cta == 0 && st[1].cta == 1 && st[2].cta == 0);
    g4_tl_node path[3];
    int n = 0;
    CHECK(g4_tl_path(&q, st, 0, path, &n) == G4_OK);
    CHECK_INT(n, 3);
    if (n == 3) {
        CHECK(path[0].ins == 0 && path[1].ins == 1 && path[2].ins == 2);
        CHECK(path[1].via == G4_TL_VIA_SIGNAL && path[2].via == G4_TL_VIA_SIGNAL);
        CHECK_INT(path[1].seg[G4_TL_HANDOVER], 400);
        CHECK_INT(path[1].seg[G4_TL_READ], 2300);
        CHECK_INT(path[0].seg[G4_TL_W_PRE], 2000);
    }

    CHECK(g4_sc_simulate(&q, &p, 2, G4_SK_NO_WEIGHTS, NULL, &r) == G4_OK);
    near(r.step_us, 5.55, "nowts step");
    CHECK(g4_sc_simulate(&q, &p, 2, G4_SK_NO_WAIT | G4_SK_NO_ACT | G4_SK_NO_WEIGHTS, NULL, &r) ==
          G4_OK);
    near(r.step_us, 2.1, "empty step");
    CHECK_INT(r.blocked, 0);
    CHECK(g4_sc_simulate(&q, &p, 0, 0, NULL, &r) == G4_OK);
    near(r.step_us, 9.55, "pf=0 step");
    g4_sc_params pr = p;
    pr.red_us = 0.5;
    CHECK(g4_sc_simulate(&q, &pr, 2, 0, NULL, &r) == G4_OK);
    near(r.step_us, 9.55, "red 0.5 step");

    // jitter: a fixed sequence a seed (the same twice), another seed another step
    g4_sc_params pj = p;
    pj.jitter = 0.5;
    double a = 0, b = 0, c = 0;
    CHECK(g4_sc_simulate(&q, &pj, 2, 0, NULL, &r) == G4_OK);
    a = r.step_us;
    CHECK(g4_sc_simulate(&q, &pj, 2, 0, NULL, &r) == G4_OK);
    b = r.step_us;
    pj.seed = 7;
    CHECK(g4_sc_simulate(&q, &pj, 2, 0, NULL, &r) == G4_OK);
    c = r.step_us;
    CHECK_MSG(a == b && a != c && a != 8.55, "jitter steps %g %g %g", a, b, c);

    // refused in one line: bad pf / mode, a wait never met (naming its instruction)
    CHECK(g4_sc_simulate(&q, &p, 1, 0, NULL, &r) == G4_EUSER);
    CHECK(strstr(g4_error(), "pf 1") != NULL);
    CHECK(g4_sc_simulate(&q, &p, 2, G4_SK_ACT8, NULL, &r) == G4_EUSER);
    CHECK(g4_sc_simulate(&q, &p, 2, G4_SK_MATH_HELD, NULL, &r) == G4_EUSER); // (without MATH)
    CHECK(strstr(g4_error(), "MATH_HELD without MATH") != NULL);
    ins[2].wait_tgt[0] = 2; // i1 waits for 2 signals of counter 0: only i0 signals it
    CHECK(g4_sc_simulate(&q, &p, 2, 0, NULL, &r) == G4_EUSER);
    CHECK_MSG(strstr(g4_error(), "instruction #1 waits on a count never reached") != NULL, "%s",
              g4_error());
    ins[2].wait_tgt[0] = 1;
    ins[2].wait_ctr[0] = 2; // (2 counters: 0 and 1)
    CHECK(g4_sc_simulate(&q, &p, 2, 0, NULL, &r) == G4_EUSER);
    CHECK_MSG(strstr(g4_error(), "queue entry 2 (instruction #1): an index out of range") != NULL,
              "%s", g4_error());
    ins[2].wait_ctr[0] = 0;
    CHECK(g4_sc_simulate(NULL, &p, 2, 0, NULL, &r) == G4_EUSER);

    // G4_SK_MATH on the 1-instruction queue and the 3-instruction one (worked out at the top)
    {
        int s1[2] = {0, 1}, ps1[1] = {1};
        g4_sq_instr one = instr(0, -1, -1);
        one.w_runs = 1, one.w_run = 20 * 592, one.w_stride = 20 * 592;
        g4_sq q1;
        memset(&q1, 0, sizeof q1);
        q1.G = 1, q1.n = 1, q1.start = s1, q1.ins = &one, q1.reg = reg, q1.n_reg = 0;
        q1.n_counters = 1, q1.per_step = ps1, q1.dt = G4_SQ_Q4;
        const struct {
            int mode;
            double unit, ring, step;
            g4_sq_dtype dt;
            int tiles;
        } mc[] = {
            {0, 0.5, 4, 2.17265625, G4_SQ_Q4, 20},
            {G4_SK_MATH | G4_SK_MATH_HELD, 0.5, 4, 3.67265625, G4_SQ_Q4, 20},
            {G4_SK_MATH, 0.5, 4, 3.67265625, G4_SQ_Q4, 20},
            {G4_SK_MATH, 0.1, 4, 2.67265625, G4_SQ_Q4, 20},
            {G4_SK_MATH, 0.5, 1, 5.17265625, G4_SQ_Q4, 20},
            {G4_SK_MATH | G4_SK_MATH_HELD, 0.5, 4, 2.67265625, G4_SQ_F16, 20},
            {G4_SK_MATH | G4_SK_NO_WEIGHTS, 0.5, 4, 1.45, G4_SQ_Q4, 20},
            {G4_SK_MATH | G4_SK_MATH_HELD, 0.5, 4, 3.5642578125, G4_SQ_Q4, 17},
            // the re-read's own round: math_lat_us 0.3 (below)
            {G4_SK_MATH, 0.5, 1, 4.57265625, G4_SQ_Q4, 20},
            {G4_SK_MATH, 0.1, 2, 2.77265625, G4_SQ_Q4, 20},
        };
        for (size_t k = 0; k < sizeof mc / sizeof mc[0]; k++) {
            g4_sc_params pm = p;
            pm.math_unit_us = mc[k].unit, pm.math_ring = mc[k].ring;
            if (k >= 8) pm.math_lat_us = 0.3; // (the last two: w_lat_us stays 0.5)
            q1.dt = mc[k].dt;
            one.w_run = one.w_stride = mc[k].tiles * 592;
            char what[64];
            snprintf(what, sizeof what, "math case %zu step", k);
            CHECK(g4_sc_simulate(&q1, &pm, 2, mc[k].mode, NULL, &r) == G4_OK);
            near(r.step_us, mc[k].step, what);
        }
        { // the math without jitter
            g4_sc_params pj = p;
            pj.jitter = 1, pj.wr_fix_us = 0, pj.seed = 7;
            q1.dt = G4_SQ_Q4;
            one.w_run = one.w_stride = 20 * 592;
            g4_sq_stamp sj;
            CHECK(g4_sc_simulate(&q1, &pj, 2, G4_SK_MATH | G4_SK_MATH_HELD, &sj, &r) == G4_OK);
            CHECK_MSG(sj.t[G4_TL_T_SIGNAL] - sj.t[G4_TL_T_READ] == 1500,
                      "jittered held math: %llu ns, want 1500",
                      (unsigned long long)(sj.t[G4_TL_T_SIGNAL] - sj.t[G4_TL_T_READ]));
            CHECK_MSG(fabs(r.step_us - 3.67265625) > 1e-6, "jitter 1 drew nothing: %.9g",
                      r.step_us);
        }
        q.dt = G4_SQ_Q4;
        CHECK(g4_sc_simulate(&q, &p, 2, G4_SK_MATH | G4_SK_MATH_HELD, NULL, &r) == G4_OK);
        near(r.step_us, 15.55, "3-instruction held math step");
        // the re-read while another CTA streams
        int s2[3] = {0, 1, 2};
        g4_sq_instr two[2] = {instr(0, -1, -1), instr(1, -1, -1)};
        two[0].w_runs = 1, two[0].w_run = 65536, two[0].w_stride = 65536;
        two[1].w_runs = 1, two[1].w_run = 20 * 592, two[1].w_stride = 20 * 592;
        g4_sq q2 = q1;
        q2.G = 2, q2.n = 2, q2.start = s2, q2.ins = two, q2.dt = G4_SQ_Q4;
        g4_sc_params pm = p;
        pm.math_unit_us = 0.1;
        g4_sq_stamp st2[2];
        CHECK(g4_sc_simulate(&q2, &pm, 2, G4_SK_MATH, st2, &r) == G4_OK);
        near(r.step_us, 8.17265625, "re-read step");
        CHECK_INT((int)st2[1].t[G4_TL_T_READ], 2873);
        CHECK_INT((int)st2[1].t[G4_TL_T_SIGNAL], 4173);
    }

    // the parameters: the defaults pass; each bad kind of value is refused naming its field
    for (int dt = 0; dt < 2; dt++) {
        g4_sc_params d;
        g4_sc_params_default(&d, (g4_sq_dtype)dt);
        CHECK(g4_sc_params_check(&d) == G4_OK);
    }
    g4_sc_params bad = p;
    bad.handover_us = -0.1;
    CHECK(g4_sc_params_check(&bad) == G4_EUSER && strstr(g4_error(), "handover_us") != NULL);
    bad = p, bad.rd_busy_gbs = 0;
    CHECK(g4_sc_params_check(&bad) == G4_EUSER && strstr(g4_error(), "rd_busy_gbs") != NULL);
    bad = p, bad.dram_gbs = NAN;
    CHECK(g4_sc_params_check(&bad) == G4_EUSER && strstr(g4_error(), "dram_gbs") != NULL);
    bad = p, bad.jitter = 1.5;
    CHECK(g4_sc_params_check(&bad) == G4_EUSER && strstr(g4_error(), "jitter") != NULL);
    bad = p, bad.math_ring = 0;
    CHECK(g4_sc_params_check(&bad) == G4_EUSER && strstr(g4_error(), "math_ring") != NULL);
    bad = p, bad.math_ring = 2.5;
    CHECK(g4_sc_params_check(&bad) == G4_EUSER && strstr(g4_error(), "math_ring") != NULL);
    bad = p, bad.math_unit_us = -1;
    CHECK(g4_sc_params_check(&bad) == G4_EUSER && strstr(g4_error(), "math_unit_us") != NULL);
    bad = p, bad.math_lat_us = -0.1;
    CHECK(g4_sc_params_check(&bad) == G4_EUSER && strstr(g4_error(), "math_lat_us") != NULL);
    CHECK(g4_sc_params_check(NULL) == G4_EUSER);
    CHECK(g4_sc_simulate(&q, &bad, 2, 0, NULL, &r) == G4_EUSER);

    // the report (`g4cu bench --step-model`): its lines, in order, on E2B
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (f) {
        CHECK(g4_sc_report(f, 0, 5) == G4_OK);
        CHECK(g4_sc_report(f, 0, 0) == G4_EUSER);
        rewind(f);
        char line[1024];
        int params = 0, rows = 0, paths = 0, plans = 0, other = 0, header = 0, plan_rows = 0;
        int errs = 0, same = 0, n_mr = 0, mkind[16];
        char kind[16];
        double mr[16][2], mr_meas[16], mq; // the math rows (plain, math, held: each plan's three in
                                           // order): model Q4, f16; measured Q4
        int errs32 = 0, path_lines = 0, unmeasured = 0;
        // the session-31 rows' model columns (split, chunk, group, lm, Q4, f16): each must be
        // its bench plan line's prediction (the same plan, the same seeds)
        enum { MAX_PR = 16 };
        int pr[MAX_PR][4], bl[MAX_PR][4], n_pr = 0, n_bl = 0;
        double pr_us[MAX_PR][2], bl_us[MAX_PR][2];
        while (fgets(line, sizeof line, f)) {
            const char *pc = strchr(line, '%');
            int a, b, c, d;
            double q, h;
            if (!strncmp(line, "step-model params ", 18))
                params++;
            else if (!strncmp(line, "step-model validation error, mean |off| (mean off): ", 52))
                errs += strstr(line, "all rows (15): Q4 ") != NULL;
            else if (!strncmp(line, "step-model validation", 21))
                header++;
            else if (!strncmp(line, "row (G=660", 10) || !strncmp(line, "plan (split/", 12) ||
                     !strncmp(line, "step-model math rows (", 22) ||
                     !strncmp(line, "row (split/", 11))
                header++;
            else if (!strncmp(line, "step-model math rows error, mean |off| (mean off): ", 51))
                errs32 += strstr(line, "; all (9): Q4 ") != NULL;
            else if (sscanf(line, "s32 plan %d/%d/%d/%d%15[^0-9]%lf %lf %*f%% %lf", &a, &b, &c, &d,
                            kind, &q, &mq, &h) == 8) { // (a math row)
                if (n_mr < MAX_PR) {
                    mkind[n_mr] = strstr(kind, "math held ub") ? 2 : strstr(kind, "math") ? 1 : 0;
                    mr[n_mr][0] = q, mr[n_mr][1] = h, mr_meas[n_mr++] = mq;
                }
            } else if (sscanf(line,
                              "step-model math a path unit, plan %d/%d/%d/%d (%lf units a layer "
                              "+ the LM head's %lf: %lf a step",
                              &a, &b, &c, &d, &q, &h, &mq) == 7) {
                // the path's units: one instruction an op, the op's largest, worked out by
                // hand from E2B's shape (Q4 tiles of 64 inputs; T = a hidden row's tiles):
                // a layer q|k|v (or q) g x T, o g x heads x head dim / 64 (the full layers'
                // head dim every period-th), gate|up 2 g T, down g x chunk / 4 (chunk in
                // 16-feature tiles: chunk x 16 / 64 tiles a row), PLE gate g T, PLE proj g x
                // ple / 64; before the layers the PLE model projection g T; the LM head lm T
                const g4_sp_shape *sh = &g4_sp_shape_e2b;
                const double T = sh->hidden / 64.0;
                double want = c * T + d * T; // (before, after)
                for (int l = 0; l < sh->n_layers; l++) {
                    const int hd = l % sh->period == sh->period - 1 ? sh->hd_global : sh->hd_local;
                    want += c * T + c * sh->heads * hd / 64.0 + 2 * c * T + c * b / 4.0 + c * T +
                            c * sh->ple / 64.0;
                }
                CHECK_MSG(fabs(mq - want) < 0.5 && fabs(h - d * T) < 0.5 &&
                              fabs(q - (mq - h) / sh->n_layers) < 0.05,
                          "path units of plan %d/%d/%d/%d: %g a step (LM %g, %g a layer), want %g "
                          "(LM %g)",
                          a, b, c, d, mq, h, q, want, d * T);
                path_lines++;
            } else if (sscanf(line,
                              "step-model math plan %d/%d/%d/%d (not measured), pf=2 G=528, us a "
                              "step: Q4 %lf, math %lf, math held ub %lf",
                              &a, &b, &c, &d, &q, &h, &mq) == 7) {
                CHECK_MSG(q < mq && mq < h, "unmeasured math plan: %g %g %g", q, h, mq);
                unmeasured++;
            } else if (!strncmp(line, "step-model path a layer, Q4 pf=", 31))
                paths++;
            else if (sscanf(line,
                            "step-model bench plan split_keys %d chunk_tiles %d group_tiles %d "
                            "lm_group_tiles %d: %*d instructions, pf=2 G=660: Q4 %lf us "
                            "(seeds within %*f), f16 %lf",
                            &a, &b, &c, &d, &q, &h) == 6) {
                plans++;
                if (n_bl < MAX_PR) {
                    bl[n_bl][0] = a, bl[n_bl][1] = b, bl[n_bl][2] = c, bl[n_bl][3] = d;
                    bl_us[n_bl][0] = q, bl_us[n_bl++][1] = h;
                }
            } else if (!strncmp(line, "pf=", 3) && pc &&
                       strchr(pc + 1, '%')) // (model, measured, off x2)
                rows++;
            else if (sscanf(line, "plan %d/%d/%d/%d %lf %*f %*f%% %lf", &a, &b, &c, &d, &q, &h) ==
                         6 &&
                     pc && strchr(pc + 1, '%')) {
                plan_rows++;
                if (n_pr < MAX_PR) {
                    pr[n_pr][0] = a, pr[n_pr][1] = b, pr[n_pr][2] = c, pr[n_pr][3] = d;
                    pr_us[n_pr][0] = q, pr_us[n_pr++][1] = h;
                }
            } else
                other++, fprintf(stderr, "unexpected line: %s", line);
        }
        for (int i = 0; i < n_pr; i++)
            for (int j = 0; j < n_bl; j++)
                if (!memcmp(pr[i], bl[j], sizeof pr[i]))
                    same += pr_us[i][0] == bl_us[j][0] && pr_us[i][1] == bl_us[j][1];
        CHECK_INT(params, 2);
        CHECK_INT(header, 6);
        CHECK_INT(rows, 9);
        CHECK_INT(plan_rows, 6);
        CHECK_INT(same, 6);
        CHECK_INT(errs, 1);
        CHECK_INT(paths, 8);
        CHECK_INT(plans, 10);
        CHECK_INT(errs32, 1);
        CHECK_INT(path_lines, 3);
        CHECK_INT(unmeasured, 1);
        CHECK_INT(other, 0);
        // the math rows: 3 plans x (plain, math, held), in order; for Q4 and f16 the math costs
        // (math > plain) and the held form (no re-read) is not slower than the math
        CHECK_INT(n_mr, 9);
        for (int i = 0; i + 2 < n_mr; i += 3) {
            CHECK(mkind[i] == 0 && mkind[i + 1] == 1 && mkind[i + 2] == 2);
            for (int dt = 0; dt < 2; dt++)
                CHECK_MSG(mr[i + 1][dt] > mr[i][dt] && mr[i + 2][dt] <= mr[i + 1][dt] &&
                              mr[i + 2][dt] > mr[i][dt],
                          "math rows %d dt %d: %g %g %g", i / 3, dt, mr[i][dt], mr[i + 1][dt],
                          mr[i + 2][dt]);
        }
        // and the Q4 math and held rows within 12% of session 32's H100 rows (per-unit terms from
        // those rows' differences, not fitted to them: bench/NOTES.md "skheld"; f16's held loop
        // spills, which the model does not charge: not checked)
        for (int i = 0; i < n_mr; i++)
            if (mkind[i])
                CHECK_MSG(fabs(mr[i][0] / mr_meas[i] - 1) < 0.12, "math row %d: Q4 %g, H100 %g", i,
                          mr[i][0], mr_meas[i]);
        fclose(f);
    }
    return g4t_finish("test_step_cost");
}
