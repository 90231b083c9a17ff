// logits.c: the reference of logits.cu: the logit soft-cap and the sample op (ops.h `sample`,
// exact arithmetic in kernels/ref/sample_math.h): soft-cap, then the next token of each row, greedy
// or sampled in HF's order (temperature, top-k, top-p, one draw), written for clarity: a full
// sort of the row. Compiled with -ffp-contract=off (CMakeLists.txt): the weights must be the
// plain IEEE products and sums the CUDA kernel computes.
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "kernels/ref/ref.h"

void ref_softcap(float *x, size_t n, float c) {
    for (size_t i = 0; i < n; i++) x[i] = c * tanhf(x[i] / c);
}

// (key desc, id asc) as one integer: larger first.
static uint64_t order_key(float x, int id) {
    return ((uint64_t)g4_sample_key(x) << 32) | (uint32_t)~(uint32_t)id;
}

#define ORD_ID(o) ((int32_t) ~(uint32_t)((o) & 0xffffffffu))

static int cmp_desc(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x < y) - (x > y);
}

// The kept set of a sampled pick: the tokens in (key desc, id asc) order (ord[V]), how many of
// them top-k and top-p keep (*m, a prefix), their weights (w[m], allocated) and its mass *z.
static void kept_prefix(const float *x, int V, const g4_sample_params *p, float mx, uint64_t *ord,
                        uint64_t **w_out, int *m_out, uint64_t *z_out) {
    for (int i = 0; i < V; i++) ord[i] = order_key(x[i], i);
    qsort(ord, (size_t)V, sizeof *ord, cmp_desc);
    // Top-k: every token whose logit is >= the k-th largest (ties at the k-th all stay).
    int m = V;
    if (p->top_k > 0 && p->top_k < V) {
        const uint64_t kk = ord[p->top_k - 1] >> 32;
        m = p->top_k;
        while (m < V && (ord[m] >> 32) == kk) m++;
    }
    // Weights and their total; top-p keeps the prefix up to the token holding its mass point.
    const double inv_t = 1.0 / (double)p->temperature;
    uint64_t *w = g4_malloc(sizeof(uint64_t) * (size_t)m), z = 0;
    for (int j = 0; j < m; j++) z += w[j] = g4_sample_weight(x[ORD_ID(ord[j])], mx, inv_t);
    if (p->top_p < 1.0f) {
        const uint64_t t = g4_sample_top_p_point(p->top_p, z);
        uint64_t a = 0;
        for (int j = 0; j < m; j++) {
            a += w[j];
            if (a > t) {
                m = j + 1;
                z = a;
                break;
            }
        }
    }
    *w_out = w;
    *m_out = m;
    *z_out = z;
}

// The first maximum (torch.argmax), or -1 when the row holds a NaN.
static int32_t first_max(const float *x, int V) {
    int32_t best = 0;
    for (int i = 0; i < V; i++) {
        if (isnan(x[i])) return -1;
        if (x[i] > x[best]) best = i;
    }
    return best;
}

int32_t ref_sample_row(const float *x, int V, const g4_sample_params *p, uint32_t n) {
    const int32_t best = first_max(x, V);
    if (best < 0) return -1;                // a broken forward pass, never a distribution
    if (!(p->temperature > 0)) return best; // greedy
    uint64_t *ord = g4_malloc(sizeof(uint64_t) * (size_t)V), *w, z;
    int m;
    kept_prefix(x, V, p, x[best], ord, &w, &m, &z);
    // The draw: the token holding mass point floor(u * z).
    const uint64_t seed = (uint64_t)p->seed_lo | (uint64_t)p->seed_hi << 32;
    const uint64_t r = g4_sample_point(g4_sample_u64(seed, n), z);
    int32_t id = ORD_ID(ord[m - 1]);
    uint64_t a = 0;
    for (int j = 0; j < m; j++) {
        a += w[j];
        if (r < a) {
            id = ORD_ID(ord[j]);
            break;
        }
    }
    free(w);
    free(ord);
    return id;
}

int ref_sample_kept(const float *x, int V, const g4_sample_params *p, int32_t *ids) {
    const int32_t best = first_max(x, V);
    if (best < 0) return -1;
    if (!(p->temperature > 0)) {
        ids[0] = best;
        return 1;
    }
    uint64_t *ord = g4_malloc(sizeof(uint64_t) * (size_t)V), *w, z;
    int m, n = 0;
    kept_prefix(x, V, p, x[best], ord, &w, &m, &z);
    for (int j = 0; j < m; j++)
        if (w[j]) ids[n++] = ORD_ID(ord[j]);
    free(w);
    free(ord);
    return n;
}

void ref_sample(int32_t *next, float *logits, int rows, int V, float cap,
                const g4_sample_params *p, const int32_t *counter) {
    for (int r = 0; r < rows; r++) {
        float *x = logits + (size_t)r * V;
        if (cap > 0) ref_softcap(x, (size_t)V, cap);
        next[r] = ref_sample_row(x, V, p, (uint32_t)counter[r]);
    }
}

void ref_sample_rows(int32_t *next, float *logits, int rows, int V, float cap,
                     const g4_sample_params *const *p, const int32_t *counter) {
    for (int r = 0; r < rows; r++) // each row alone with its own sampler: the one-row op
        ref_sample(next + r, logits + (size_t)r * V, 1, V, cap, p[r], counter + r);
}
