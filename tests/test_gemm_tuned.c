// test_gemm_tuned.c: the tuned prefill GEMM table (kernels/gemm_tuned.inc, which AUTO follows for
// M > 8) holds only choices the kernels can run, on the CPU (no GPU needed): each entry is
// mma.sync, or wgmma at a tile width of 128/192/256 and a split-K of 1/2/4/8 that fits its K
// steps (K / 64, rounded up), never the fused fp16 kernel at width 192 (it has none); shapes are
// ones the GEMMs take (N, K multiples of 8; Q4 N % 16 and K % 64), M > 8 (GEMV below), and no
// key (q4, fused, N, K, M) appears twice. tests/test_gemm_plan_regen.sh checks that the table is
// what tools/python/gemm_plan.py makes of the committed sweep.
#include <stdio.h>

#include "kernels/gemm_f16.cuh"
#include "tests/test_util.h"

typedef struct {
    int q4, fused, N, K, M;
    g4_gemm_algo algo;
    int bn, split;
} tuned_entry;

static const tuned_entry TUNED[] = {
#include "kernels/gemm_tuned.inc"
};

int main(void) {
    const int n = (int)(sizeof TUNED / sizeof TUNED[0]);
    CHECK_MSG(n > 0, "the table is empty");
    CHECK_INT(G4_GEMM_TUNED_SMS > 0, 1);
    for (int i = 0; i < n; i++) {
        const tuned_entry *e = &TUNED[i];
        char what[96];
        snprintf(what, sizeof what, "entry %d (q4 %d fused %d N %d K %d M %d)", i, e->q4,
                 e->fused, e->N, e->K, e->M);
        CHECK_MSG((e->q4 == 0 || e->q4 == 1) && (e->fused == 0 || e->fused == 1), "%s", what);
        CHECK_MSG(e->M > 8, "%s: M <= 8 is the GEMV's", what);
        CHECK_MSG(e->N >= 8 && e->N % 8 == 0 && e->K >= 8 && e->K % 8 == 0, "%s", what);
        if (e->q4) CHECK_MSG(e->N % 16 == 0 && e->K % 64 == 0, "%s: not a Q4 shape", what);
        if (e->algo == G4_GEMM_MMA) {
            CHECK_MSG(e->bn == 0 && e->split == 0, "%s: mma.sync has no bn / split", what);
        } else {
            CHECK_MSG(e->algo == G4_GEMM_WGMMA, "%s: algo %d", what, (int)e->algo);
            CHECK_MSG(e->bn == 128 || e->bn == 192 || e->bn == 256, "%s: bn %d", what, e->bn);
            CHECK_MSG(e->split == 1 || e->split == 2 || e->split == 4 || e->split == 8,
                      "%s: split %d", what, e->split);
            CHECK_MSG(e->split <= (e->K + 63) / 64, "%s: split %d over %d k steps", what,
                      e->split, (e->K + 63) / 64);
            CHECK_MSG(!(e->bn == 192 && e->fused && !e->q4), "%s: no fused fp16 at 192", what);
        }
        for (int j = 0; j < i; j++) {
            const tuned_entry *o = &TUNED[j];
            CHECK_MSG(!(o->q4 == e->q4 && o->fused == e->fused && o->N == e->N && o->K == e->K &&
                        o->M == e->M),
                      "%s: the same key as entry %d", what, j);
        }
    }
    printf("test_gemm_tuned: %d entries\n", n);
    return g4t_finish("test_gemm_tuned");
}
