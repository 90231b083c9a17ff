// test_l2_next.c: the host-side arithmetic of the next-op L2 prefetch (kernels/l2_next.h, no GPU
// needed). g4_l2n_slice, which kernels/pdl.cuh g4_prefetch_l2_next runs in thread 0 of every
// CTA: over all CTAs of a grid the shares partition every region exactly once (each 16-byte unit
// requested by one CTA), in CTA order, at most ceil(total / ctas) units a CTA, at E2B's grids and
// odd ones. g4_l2n_fill, which builds the descriptors (CUDA backend, kernel bench):
// unusable regions left out, sizes cut to 16 bytes, the cap shared in proportion, at most
// G4_L2N_MAX regions, sizes that fit the u32 field. g4_l2n_plan, the step's hints the CUDA
// backend keys by op: the next 1 or 2 ops' regions, wrapping to the next step, none for an op
// over the L2.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/l2_next.h"
#include "tests/test_util.h"

// Every CTA's share of every region, checked against a running cursor: contiguous with what
// the CTAs before it took, inside the region, at most ceil(total / ctas) units a CTA, every
// region covered to its end; 1 when all hold.
static int check_partition(const g4_l2n *d, uint32_t ctas) {
    uint32_t total = 0, next[G4_L2N_MAX] = {0};
    for (int r = 0; r < d->n; r++) total += d->bytes[r] >> 4;
    const uint32_t per = (total + ctas - 1) / ctas;
    int ok = 1;
    for (uint32_t b = 0; b < ctas && ok; b++) {
        uint32_t mine = 0;
        for (int r = 0; r < G4_L2N_MAX; r++) {
            uint32_t off = 99;
            const uint32_t n = g4_l2n_slice(d->bytes, d->n, b, ctas, r, &off);
            if (r >= d->n) {
                ok &= n == 0;
                continue;
            }
            if (n) {
                ok &= off == next[r] && off + n <= (d->bytes[r] >> 4);
                next[r] = off + n;
            }
            mine += n;
        }
        ok &= mine <= per;
        CHECK_MSG(ok, "ctas %u: CTA %u's share breaks the partition (%u units, at most %u)", ctas,
                  b, mine, per);
    }
    for (int r = 0; r < d->n && ok; r++) {
        ok &= next[r] == d->bytes[r] >> 4;
        CHECK_MSG(ok, "ctas %u: region %d covered to unit %u of %u", ctas, r, next[r],
                  d->bytes[r] >> 4);
    }
    return ok;
}

static void test_slice(void) {
    static char buf[64];
    const void *a = buf; // (never dereferenced: only the arithmetic is under test)
    const g4_l2n descs[] = {
        {{a}, {16}, 1},
        {{a}, {10924032}, 1},              // down_wide Q4
        {{a, a}, {21848064, 10924032}, 2}, // fused gate/up 12288's pair, then down
        {{a, a, a, a}, {48, 1048576 + 16, 16, 33554432}, 4}, // odd sizes, 1 MB + 16, 32 MB
        {{a, a, a}, {0xfffffff0u, 0xfffffff0u, 64}, 3},      // the largest sizes the field holds
    };
    const uint32_t grids[] = {1, 2, 3, 7, 96, 132, 192, 256, 264, 1000, 4096, 65536};
    int cases = 0;
    for (size_t i = 0; i < sizeof descs / sizeof descs[0]; i++)
        for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++)
            cases += check_partition(&descs[i], grids[g]);
    CHECK_INT(cases, 5 * 12);
    // n = 0 and out-of-range regions ask nothing
    const g4_l2n none = {{a}, {4096}, 0};
    uint32_t off = 7;
    CHECK(g4_l2n_slice(none.bytes, none.n, 0, 1, 0, &off) == 0 && off == 0);
    CHECK(g4_l2n_slice(descs[1].bytes, descs[1].n, 0, 1, -1, &off) == 0);
    CHECK(g4_l2n_slice(descs[1].bytes, descs[1].n, 0, 0, 0, &off) == 0); // (no CTAs)
    // one CTA takes everything; the chunk count of a 32 MB region at 64 KB a request
    CHECK(g4_l2n_slice(descs[3].bytes, descs[3].n, 0, 1, 3, &off) == 33554432 / 16 && off == 0);
    CHECK_INT((int)((33554432 + G4_L2N_CHUNK - 1) / G4_L2N_CHUNK), 512);
    printf("  slice: %d descriptor x grid cases partition their regions\n", cases);
}

static void test_fill(void) {
    static char buf[256] __attribute__((aligned(16)));
    const void *p[6] = {buf, NULL, buf + 8, buf + 16, buf + 32, buf + 48};
    const size_t b[6] = {1000, 4096, 4096, 8, 40 << 20, 24 << 20};
    g4_l2n d;
    // (NULL, misaligned and < 16 bytes left out; 1000 -> 992; no cap reached)
    g4_l2n_fill(&d, p, b, 6, (size_t)1 << 30);
    CHECK_INT(d.n, 3);
    CHECK(d.p[0] == buf && d.p[1] == buf + 32 && d.p[2] == buf + 48);
    CHECK_INT((int)d.bytes[0], 992);
    CHECK_INT((int)d.bytes[1], 40 << 20);
    CHECK_INT((int)d.bytes[2], 24 << 20);
    // a cap of 32 MB over 64 MB + 992 bytes: each region its share, multiples of 16, within it
    g4_l2n_fill(&d, p, b, 6, (size_t)32 << 20);
    CHECK_INT(d.n, 3);
    uint64_t sum = 0;
    for (int i = 0; i < d.n; i++) {
        CHECK(d.bytes[i] % 16 == 0);
        sum += d.bytes[i];
    }
    CHECK(sum <= (32u << 20) && sum > (32u << 20) - 64);
    CHECK(d.bytes[1] > d.bytes[2] && d.bytes[1] < (40u << 20)); // (40 : 24, both cut)
    // at most G4_L2N_MAX regions, in order
    const void *q[6] = {buf, buf + 16, buf + 32, buf + 48, buf + 64, buf + 80};
    const size_t qb[6] = {16, 32, 48, 64, 80, 96};
    g4_l2n_fill(&d, q, qb, 6, (size_t)1 << 30);
    CHECK_INT(d.n, G4_L2N_MAX);
    CHECK(d.p[3] == buf + 48 && d.bytes[3] == 64);
    // a region past the u32 field (only with a cap past 4 GB) is clamped, not wrapped
    const size_t huge[1] = {(size_t)5 << 30};
    g4_l2n_fill(&d, p, huge, 1, (size_t)8 << 30);
    CHECK_INT(d.n, 1);
    CHECK(d.bytes[0] == 0xfffffff0u);
    // the environment's cap: G4_L2_NEXT_MB, default 32, out of range -> 32
    unsetenv("G4_L2_NEXT_MB");
    CHECK(g4_l2n_cap() == (size_t)32 << 20);
    setenv("G4_L2_NEXT_MB", "16", 1);
    CHECK(g4_l2n_cap() == (size_t)16 << 20);
    setenv("G4_L2_NEXT_MB", "0", 1);
    CHECK(g4_l2n_cap() == (size_t)32 << 20);
    unsetenv("G4_L2_NEXT_MB");
    printf("  fill: regions left out, cut, capped and clamped as documented\n");
}

// The step's hints (g4_l2n_plan, the CUDA backend's set_step_order): five ops as in a layer,
// an LM head over the L2 among them.
static void test_plan(void) {
    static char buf[6][64] __attribute__((aligned(16)));
    const size_t MB = (size_t)1 << 20, L2 = 50 * MB, CAP = 32 * MB;
    // o (1 region), the fused gate/up (2), down (1), an LM head of 230 MB (1), the PLE gate (1)
    const void *const p[5][3] = {{buf[0]}, {buf[1], buf[2]}, {buf[3]}, {buf[4]}, {buf[5]}};
    const size_t b[5][3] = {{1 * MB}, {21 * MB, 21 * MB}, {10 * MB}, {230 * MB}, {7 * MB}};
    g4_l2n h[5];
    g4_l2n_plan(p, b, 5, 1, L2, CAP, h);
    CHECK_INT(h[0].n, 2); // the gate/up pair, 42 MB cut to 16 + 16
    CHECK(h[0].p[0] == buf[1] && h[0].p[1] == buf[2]);
    CHECK(h[0].bytes[0] == 16 * MB && h[0].bytes[1] == 16 * MB);
    CHECK(h[1].n == 1 && h[1].p[0] == buf[3] && h[1].bytes[0] == 10 * MB);
    CHECK(h[2].n == 1 && h[2].p[0] == buf[4] && h[2].bytes[0] == CAP);    // the LM head's start
    CHECK_INT(h[3].n, 0);                                                 // the LM head: none
    CHECK(h[4].n == 1 && h[4].p[0] == buf[0] && h[4].bytes[0] == 1 * MB); // wraps to op 0
    g4_l2n_plan(p, b, 5, 2, L2, CAP, h);
    CHECK(h[0].n == 3 && h[0].p[2] == buf[3]); // gate/up and down, 52 MB cut to 32
    CHECK(h[0].bytes[0] + h[0].bytes[1] + h[0].bytes[2] <= CAP &&
          h[0].bytes[0] + h[0].bytes[1] + h[0].bytes[2] > CAP - 48);
    CHECK(h[2].n == 2 && h[2].p[0] == buf[4] && h[2].p[1] == buf[5]);
    CHECK_INT(h[3].n, 0);
    CHECK(h[4].n == 3 && h[4].p[0] == buf[0] && h[4].p[1] == buf[1] && h[4].p[2] == buf[2]);
    // a step of one op cannot prefetch itself; of two, depth 2 is the other op once
    g4_l2n_plan(p, b, 1, 2, L2, CAP, h);
    CHECK_INT(h[0].n, 0);
    g4_l2n_plan(p, b, 2, 2, L2, CAP, h);
    CHECK(h[0].n == 2 && h[1].n == 1 && h[1].p[0] == buf[0]);
    printf("  plan: the next ops' regions, wrapped, capped, none for the LM head\n");
}

int main(void) {
    test_slice();
    test_fill();
    test_plan();
    return g4t_finish("test_l2_next");
}
