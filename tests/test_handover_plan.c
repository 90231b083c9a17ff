// test_handover_plan.c: the host-side plan of the hand-over bench rows (kernels/bench/
// handover_plan.h, no GPU needed): the layouts and byte counts of the rows the bench runs, every
// refusal (grid past the resident count, too few or too many steps, odd vector sizes, a join
// with a producer that consumes nothing, a working set past L2), and the value functions'
// exactness claims (fp16-exact values; the join's sums of squares exact in fp32 in any order).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/bench/handover_plan.h"
#include "tests/test_util.h"

// fp16 round trip of a float through the nearest value with 11 significant bits (enough for
// the magnitudes here: no subnormals, no overflow): equal iff the value is fp16-exact.
static int f16_exact(float v) {
    if (v == 0.0f) return 1;
    int e;
    const float m = frexpf(fabsf(v), &e); // v = m 2^e, m in [0.5, 1)
    const float q = ldexpf(m, 11);        // 11 significant bits
    return q == floorf(q) && e <= 16;
}

static void chain_plans(void) {
    g4_ho_chain_plan p;
    // the bench's rows (132 SMs): 1,536 halves, flag in its own line
    CHECK(g4_ho_chain_make(132, 512, 1536, 0, 1056, &p) == NULL);
    CHECK_INT(p.slot_bytes, 3072);
    CHECK_INT(p.data_off, 0);
    CHECK_INT(p.flag_stride, 128);
    CHECK_INT(p.slots_bytes, 512 * 3072);
    CHECK_INT(p.ctr_bytes, 513 * 128);
    // beside: the flag, then the vector 16 bytes on, in the same line; one line more a slot
    CHECK(g4_ho_chain_make(132, 512, 1536, 1, 1056, &p) == NULL);
    CHECK_INT(p.data_off, 16);
    CHECK_INT(p.slot_bytes, 3200);
    CHECK_INT(p.flag_stride, 3200);
    CHECK_INT(p.ctr_bytes, 128);
    CHECK_INT(p.data_off % 16, 0); // 16-byte vector accesses
    // the MLP's vector: 24,576 bytes a slot, 12.6 MB in all
    CHECK(g4_ho_chain_make(132, 512, 12288, 0, 1056, &p) == NULL);
    CHECK_INT(p.slots_bytes, 512 * 24576);
    CHECK(g4_ho_chain_make(264, 512, 1536, 0, 264, &p) == NULL); // exactly the resident count
    CHECK(g4_ho_chain_make(1, 2, 8, 0, 1, &p) == NULL);
    CHECK_INT(p.slot_bytes, 128);
    // refusals
    CHECK(g4_ho_chain_make(265, 512, 1536, 0, 264, &p) != NULL); // not all resident
    CHECK(g4_ho_chain_make(0, 512, 1536, 0, 264, &p) != NULL);
    CHECK(g4_ho_chain_make(132, 131, 1536, 0, 264, &p) != NULL);  // a CTA with no step
    CHECK(g4_ho_chain_make(1, 1, 1536, 0, 264, &p) != NULL);      // no hand-over
    CHECK(g4_ho_chain_make(132, 1025, 1536, 0, 264, &p) != NULL); // past exact fp16
    CHECK(g4_ho_chain_make(132, 1024, 1536, 0, 264, &p) == NULL);
    CHECK(g4_ho_chain_make(132, 512, 1540, 0, 264, &p) != NULL); // not a multiple of 8
    CHECK(g4_ho_chain_make(132, 512, 0, 0, 264, &p) != NULL);
    CHECK(g4_ho_chain_make(132, 512, 16392, 0, 264, &p) != NULL);
    // 1024 x 32 KB slots: past the 32 MB L2 budget
    CHECK(g4_ho_chain_make(132, 1024, 16384, 0, 264, &p) != NULL);
    // every value a chain can reach is an exact fp16 integer: start < 576, + 1024 steps
    int bad = 0;
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < G4_HO_MAX_HALVES; i++)
            for (int r = 0; r <= G4_HO_MAX_CHAIN; r += 64)
                bad += !f16_exact(g4_ho_chain_start(i, c) + r);
    CHECK_INT(bad, 0);
    CHECK(f16_exact(2048.0f) && !f16_exact(2049.0f)); // (the check itself can fail)
    CHECK(g4_ho_chain_start(5, 1) - g4_ho_chain_start(5, 0) == 512.0f);
}

static void join_plans(void) {
    g4_ho_join_plan p;
    CHECK(g4_ho_join_make(96, 192, 256, 1056, &p) == NULL);
    CHECK_INT(p.vec_bytes, 96 * 16 * 2);
    CHECK_INT(p.vecs_bytes, 256 * 3072);
    CHECK_INT(p.ctr_bytes, 257 * 128);
    CHECK_INT(p.sums_bytes, 256 * 192 * 4);
    CHECK(g4_ho_join_make(192, 192, 256, 192, &p) == NULL);
    CHECK(g4_ho_join_make(192, 96, 256, 1056, &p) != NULL); // a producer consuming nothing
    CHECK(g4_ho_join_make(0, 96, 256, 1056, &p) != NULL);
    CHECK(g4_ho_join_make(96, 193, 256, 192, &p) != NULL); // not all resident
    CHECK(g4_ho_join_make(96, 96, 0, 1056, &p) != NULL);
    CHECK(g4_ho_join_make(96, 96, 8193, 1056, &p) != NULL);
    CHECK(g4_ho_join_make(1025, 1100, 16, 2000, &p) != NULL);   // 16,400 halves
    CHECK(g4_ho_join_make(1024, 1024, 1024, 2000, &p) != NULL); // 32 MB of vectors
    // values: multiples of 0.25 in [-1.5, 1.5], fp16-exact, and two launch copies that differ
    // at every element (a stale read always shows)
    int bad = 0, same = 0;
    int smaller = 0; // copy 1's square above copy 0's everywhere: a stale element moves the sum
    for (int r = 0; r < 256; r++)
        for (int k = 0; k < G4_HO_MAX_HALVES; k++) {
            const float v = g4_ho_join_value(r, k, 0), w = g4_ho_join_value(r, k, 1);
            bad += !f16_exact(v) || v < -1.5f || v > 1.5f || v * 4 != floorf(v * 4);
            bad += !f16_exact(w) || w < 0.25f || w > 1.75f || w * 4 != floorf(w * 4);
            same += v == w;
            smaller += w * w <= v * v;
        }
    CHECK_INT(bad, 0);
    CHECK_INT(same, 0);
    CHECK_INT(smaller, 0);
    // the largest sum of squares (16,384 values of at most 1.75^2) below 2^20: exact in fp32
    // whatever the order: summed forwards and backwards in float, equal to the double sum
    float fw = 0.0f, bw = 0.0f;
    double d = 0.0;
    for (int k = 0; k < G4_HO_MAX_HALVES; k++) {
        const float a = g4_ho_join_value(7, k, 1),
                    b = g4_ho_join_value(7, G4_HO_MAX_HALVES - 1 - k, 1);
        fw += a * a, bw += b * b, d += (double)a * a;
    }
    CHECK(fw == bw && (double)fw == d);
}

int main(void) {
    chain_plans();
    join_plans();
    return g4t_finish("test_handover_plan");
}
