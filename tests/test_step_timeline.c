// test_step_timeline.c: the stamped step's host analysis (engine/step_timeline.h) on a timeline
// made by hand, every expected number worked out by hand below (not by the code under test).
//
// Five instructions on two CTAs (one step): i0 (CTA 0) and i1 (CTA 1) signal counter 0; i2 (CTA 0)
// waits on counter 0 (2 signals) and signals 1; i3 (CTA 1) waits on 1, signals 2; i4 (CTA 0)
// waits on 2. Queues: CTA 0 = i0 i2 i4, CTA 1 = i1 i3. Stamps (ns) begin, pre, waited, wts,
// read, signal:
//   i0 100 110 120 120 150 170   (w_post 0: the one zero delta)
//   i1 105 115 125 135 160 200
//   i2 180 190 230 240 260 280   (held up: i1 signalled at 200, after its pre 190)
//   i3 210 300 310 320 330 350   (not held: i2 signalled at 280, before its pre 300)
//   i4 290 295 370 380 390 400   (held up: i3 signalled at 350 > 295)
// The path from i4 (last signal, 400): i4 <- i3 by a hand-over (370 - 350 = 20), i3 <- i1 by its
// queue (i2's signal came before i3's pre), i1 starts its queue (105 - 100 = 5). Segments:
//   i4: handover 20, w_post 10, read 10, write 10                      =  50
//   i3: queue 10, w_pre 90, wait 10, w_post 10, read 10, write 20      = 150
//   i1: start 5, w_pre 10, wait 10, w_post 10, read 25, write 40       = 100
// total 300 = the span 400 - 100. Without waits (G4_SK_NO_WAIT) the path is CTA 0's queue:
//   i4: queue 10, w_pre 5, wait 75, w_post 10, read 10, write 10       = 120
//   i2: queue 10, w_pre 10, wait 40, w_post 10, read 20, write 20      = 110
//   i0: start 0, w_pre 10, wait 10, w_post 0, read 30, write 20        =  70
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/step_timeline.h"
#include "tests/test_util.h"

static const uint64_t T[5][G4_TL_STAMPS] = {
    {100, 110, 120, 120, 150, 170}, {105, 115, 125, 135, 160, 200}, {180, 190, 230, 240, 260, 280},
    {210, 300, 310, 320, 330, 350}, {290, 295, 370, 380, 390, 400},
};

static g4_sq_instr instr(int id, int wait_ctr, int wait_tgt, int signal) {
    g4_sq_instr in;
    memset(&in, 0, sizeof in);
    in.id = id, in.signal = signal;
    if (wait_ctr >= 0) {
        in.n_wait = 1, in.wait_ctr[0] = wait_ctr, in.wait_tgt[0] = wait_tgt, in.wait_step[0] = 1;
    }
    return in;
}

static void check_segs(const g4_tl_node *nd, int ins, int via, int from, const int64_t *want) {
    CHECK_INT(nd->ins, ins);
    CHECK_INT(nd->via, via);
    CHECK_INT(nd->from, from);
    for (int k = 0; k < G4_TL_N; k++)
        CHECK_MSG(nd->seg[k] == want[k], "instruction %d, %s: %lld, want %lld", ins,
                  g4_tl_seg_name(k), (long long)nd->seg[k], (long long)want[k]);
}

int main(void) {
    int start[3] = {0, 3, 5}, per_step[3] = {2, 1, 1};
    g4_sq_instr ins[5] = {instr(0, -1, 0, 0), instr(2, 0, 2, 1), instr(4, 2, 1, -1),
                          instr(1, -1, 0, 0), instr(3, 1, 1, 2)};
    // i2 streams 2 runs of 1,600 weight bytes and reads regions of 1,024 and 976 bytes
    ins[1].w_runs = 2, ins[1].w_run = 1600, ins[1].w_stride = 1600, ins[1].n_rd = 2;
    g4_sq_region reg[2] = {{0, 1024, 0}, {1024, 976, 0}};
    g4_sq q;
    memset(&q, 0, sizeof q);
    q.reg = reg, q.n_reg = 2;
    q.G = 2, q.n = 5, q.start = start, q.ins = ins, q.n_counters = 3, q.per_step = per_step;
    g4_sq_stamp st[5];
    memset(st, 0, sizeof st);
    for (int i = 0; i < 5; i++) memcpy(st[i].t, T[i], sizeof T[i]);

    uint64_t t0 = 0, t1 = 0;
    int64_t md = 0;
    int zd = 0;
    CHECK(g4_tl_check(&q, st, &t0, &t1, &md, &zd) == G4_OK);
    CHECK_INT(t0, 100);
    CHECK_INT(t1, 400);
    CHECK_INT(md, 5); // (i4: 295 - 290)
    CHECK_INT(zd, 1); // (i0: wts - waited)

    g4_tl_node path[5];
    int n = 0;
    CHECK(g4_tl_path(&q, st, 0, path, &n) == G4_OK);
    CHECK_INT(n, 3);
    if (n == 3) {
        //                          start queue w_pre wait hand w_post read write
        const int64_t w1[G4_TL_N] = {5, 0, 10, 10, 0, 10, 25, 40};
        const int64_t w3[G4_TL_N] = {0, 10, 90, 10, 0, 10, 10, 20};
        const int64_t w4[G4_TL_N] = {0, 0, 0, 0, 20, 10, 10, 10};
        check_segs(&path[0], 1, G4_TL_VIA_START, -1, w1);
        check_segs(&path[1], 3, G4_TL_VIA_QUEUE, 1, w3);
        check_segs(&path[2], 4, G4_TL_VIA_SIGNAL, 3, w4);
        // by group: i0 i1 in 0, i2 i3 in 1, i4 in 2; group 9 is outside and skipped
        const int group[5] = {0, 0, 1, 1, 2};
        double out[3 * G4_TL_N];
        g4_tl_sum_by(path, n, group, 3, out);
        CHECK(out[0 * G4_TL_N + G4_TL_START] == 5 && out[0 * G4_TL_N + G4_TL_WRITE] == 40);
        CHECK(out[1 * G4_TL_N + G4_TL_W_PRE] == 90 && out[1 * G4_TL_N + G4_TL_QUEUE] == 10);
        CHECK(out[2 * G4_TL_N + G4_TL_HANDOVER] == 20 && out[2 * G4_TL_N + G4_TL_W_PRE] == 0);
        const int group2[5] = {9, 9, 9, 9, 0};
        double out2[G4_TL_N];
        g4_tl_sum_by(path, n, group2, 1, out2);
        CHECK(out2[G4_TL_HANDOVER] == 20 && out2[G4_TL_START] == 0);
    }
    CHECK(g4_tl_path(&q, st, 1, path, &n) == G4_OK); // without waits: CTA 0's queue
    CHECK_INT(n, 3);
    if (n == 3) {
        const int64_t w0[G4_TL_N] = {0, 0, 10, 10, 0, 0, 30, 20};
        const int64_t w2[G4_TL_N] = {0, 10, 10, 40, 0, 10, 20, 20};
        const int64_t w4[G4_TL_N] = {0, 10, 5, 75, 0, 10, 10, 10};
        check_segs(&path[0], 0, G4_TL_VIA_START, -1, w0);
        check_segs(&path[1], 2, G4_TL_VIA_QUEUE, 0, w2);
        check_segs(&path[2], 4, G4_TL_VIA_QUEUE, 2, w4);
    }

    // one instruction's own segments: i2 held up (230 - 200), i3 not
    int64_t seg[G4_TL_N];
    int held = -1;
    g4_tl_own(&q, st, 0, 2, seg, &held);
    CHECK(held == 1 && seg[G4_TL_HANDOVER] == 30 && seg[G4_TL_QUEUE] == 10 &&
          seg[G4_TL_WAIT] == 40);
    g4_tl_own(&q, st, 0, 3, seg, &held);
    CHECK(held == 0 && seg[G4_TL_HANDOVER] == 0 && seg[G4_TL_W_PRE] == 90);
    g4_tl_own(&q, st, 1, 2, seg, &held);
    CHECK(held == 0 && seg[G4_TL_HANDOVER] == 0);

    // the report: i0 i1 before the layers, i2 i3 layer 0, i4 after (1 layer)
    g4_sp_instr pins[5];
    memset(pins, 0, sizeof pins);
    const int16_t layer[5] = {-1, -1, 0, 0, 1};
    const uint8_t kind[5] = {G4_SP_EMBED, G4_SP_EMBED, G4_SP_LINEAR, G4_SP_ATTENTION, G4_SP_SAMPLE};
    for (int i = 0; i < 5; i++) pins[i].layer = layer[i], pins[i].kind = kind[i];
    pins[2].weight = G4_SW_O;
    g4_step_plan p;
    memset(&p, 0, sizeof p);
    p.n = 5, p.ins = pins, p.n_layers = 1;
    st[2].n_short = 1;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f && g4_tl_report(&p, &q, st, 0, "tl", f) == G4_OK);
    if (f) fclose(f);
    if (text) {
        printf("%s", text);
        CHECK(strstr(text, "tl span 0.3 us") != NULL);
        CHECK(strstr(text, "smallest nonzero delta 5 ns, 1 of 25 deltas 0") != NULL);
        CHECK(strstr(text, "critical path: 3 instructions, 1 hand-overs, 0.3 us: start 0.005 queue "
                           "0.010 w_pre 0.100 wait 0.020 handover 0.020 w_post 0.030 read 0.045 "
                           "write 0.070") != NULL);
        // layer 0's path is i3 alone: 150 ns
        CHECK(strstr(text, "path a layer (mean of 1; 0.0 hand-overs a layer): 0.15 us:") != NULL);
        CHECK(strstr(text, "path after the layers (final norm, LM head): 0.05 us:") != NULL);
        CHECK(strstr(text, "path before the layers: 0.10 us:") != NULL);
        CHECK(strstr(text, "path by op attention (1 on the path): start 0.000 queue 0.010 w_pre "
                           "0.090") != NULL);
        // i2 (linear, weight o): held up 30 ns, its one wait found short
        CHECK(strstr(text, "op linear:o: 1 instructions, 3.2 KB of weights and 2.0 KB of "
                           "activations read each, waits 1 (1 found short), held up by a "
                           "hand-over 1; mean/max us: queue 0.010/0.010 w_pre 0.010/0.010 wait "
                           "0.040/0.040 handover 0.030/0.030") != NULL);
    }
    free(text);
    p.n = 4; // a plan of other instructions
    CHECK(g4_tl_report(&p, &q, st, 0, "tl", stdout) == G4_EUSER);

    // broken timelines refused in one line naming the instruction
    st[3].t[G4_TL_T_READ] = 0;
    CHECK(g4_tl_path(&q, st, 0, path, &n) == G4_EUSER && n == 0);
    CHECK(strstr(g4_error(), "instruction 3 has no stamp 4") != NULL);
    st[3].t[G4_TL_T_READ] = 305; // before its wts 320
    CHECK(g4_tl_check(&q, st, &t0, &t1, &md, &zd) == G4_EUSER);
    CHECK(strstr(g4_error(), "instruction 3's stamp 4 before stamp 3") != NULL);
    st[3].t[G4_TL_T_READ] = 330;
    st[2].t[G4_TL_T_BEGIN] = 160; // before i0's signal at 170
    CHECK(g4_tl_check(&q, st, &t0, &t1, &md, &zd) == G4_EUSER);
    CHECK(strstr(g4_error(), "instruction 2 begins before its queue predecessor 0") != NULL);
    return g4t_finish("test_step_timeline");
}
