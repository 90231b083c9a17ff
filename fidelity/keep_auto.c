// keep_auto.c: the --keep-auto choice (see keep_auto.h).
#include "fidelity/keep_auto.h"

#include <stdlib.h>

#include "base/base.h"

uint64_t g4_keep_auto_extra_bytes(int K, int N, int block) {
    const uint64_t kb = ((uint64_t)K + (uint64_t)block - 1) / (uint64_t)block;
    const uint64_t q4 = (uint64_t)N * kb * (uint64_t)block / 2 + 2 * (uint64_t)N * kb +
                        (uint64_t)N * ((kb + 1) / 2);
    const uint64_t f16 = 2 * (uint64_t)K * (uint64_t)N;
    return f16 > q4 ? f16 - q4 : 0;
}

typedef struct {
    double density;
    int row;
} pick_item;

static int by_density(const void *a, const void *b) {
    const pick_item *x = a, *y = b;
    int c = g4_report_cmp_desc(x->density, y->density);
    return c ? c : (x->row > y->row) - (x->row < y->row);
}

int g4_keep_auto_pick(const g4_sens_row *rows, int n, uint64_t budget, int block, int *picked,
                      uint64_t *used) {
    pick_item *it = g4_malloc(sizeof *it * (size_t)(n > 0 ? n : 1));
    int m = 0, kept = 0;
    for (int i = 0; i < n; i++) {
        picked[i] = 0;
        if (!rows[i].evaluated) continue;
        const uint64_t extra = g4_keep_auto_extra_bytes(rows[i].K, rows[i].N, block);
        it[m].density = extra ? rows[i].kl_mean / (double)extra : 0;
        it[m++].row = i;
    }
    qsort(it, (size_t)m, sizeof *it, by_density);
    *used = 0;
    for (int j = 0; j < m; j++) {
        const g4_sens_row *r = &rows[it[j].row];
        const uint64_t extra = g4_keep_auto_extra_bytes(r->K, r->N, block);
        if (!(r->kl_mean > 0) || *used + extra > budget) continue;
        picked[it[j].row] = 1;
        *used += extra;
        kept++;
    }
    free(it);
    return kept;
}
