// sample.c: the PRNG and one token from logits: greedy, or temperature + top-k + top-p
// sampling in HF's order (see generate.h).
#include <math.h>
#include <stdlib.h>

#include "engine/generate.h"

// --- xoshiro256** seeded by SplitMix64 (public-domain algorithms by Blackman and Vigna) -------
static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

void g4_rng_seed(g4_rng *r, uint64_t seed) {
    uint64_t z = seed;
    for (int i = 0; i < 4; i++) { // SplitMix64: never four zero words
        z += 0x9e3779b97f4a7c15ull;
        uint64_t x = z;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        r->s[i] = x ^ (x >> 31);
    }
}

uint64_t g4_rng_next(g4_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double g4_rng_uniform(g4_rng *r) {
    return (double)(g4_rng_next(r) >> 11) * 0x1.0p-53;
}

// --- sampling ---------------------------------------------------------------------------------
typedef struct {
    float logit;
    int id;
} cand;

// Larger logit first; the smaller id first among equals (a deterministic order).
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

// Min-heap on (logit, -id): the root is the candidate the next better one replaces.
static int heap_less(const cand *a, const cand *b) {
    return a->logit < b->logit || (a->logit == b->logit && a->id > b->id);
}

static void heap_down(cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && heap_less(&h[l], &h[m])) m = l;
        if (r < n && heap_less(&h[r], &h[m])) m = r;
        if (m == i) return;
        cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

int g4_sample(const g4_sampler *s, const float *logits, int V, g4_rng *rng, int *token) {
    if (V < 1) return g4_fail(G4_EINTERNAL, "sample: empty vocabulary");
    for (int i = 0; i < V; i++)
        if (isnan(logits[i]))
            return g4_fail(G4_EINTERNAL, "sample: logit of token %d is NaN (broken forward pass)",
                           i);
    if (!(s->temperature > 0)) { // greedy: torch.argmax takes the first maximum
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        *token = best;
        return G4_OK;
    }
    if (s->top_k < 0) return g4_fail(G4_EUSER, "top_k %d: expected >= 0", s->top_k);
    if (!(s->top_p > 0)) return g4_fail(G4_EUSER, "top_p %g: expected > 0", (double)s->top_p);
    // Top-k candidates (all when top_k is 0 or >= V), best first.
    int k = (s->top_k > 0 && s->top_k < V) ? s->top_k : V;
    cand *c = g4_malloc(sizeof(cand) * (size_t)k);
    if (k == V) {
        for (int i = 0; i < V; i++) c[i] = (cand){logits[i], i};
    } else {
        for (int i = 0; i < k; i++) c[i] = (cand){logits[i], i};
        for (int i = k / 2 - 1; i >= 0; i--) heap_down(c, k, i);
        for (int i = k; i < V; i++) {
            cand x = {logits[i], i};
            if (heap_less(&c[0], &x)) {
                c[0] = x;
                heap_down(c, k, 0);
            }
        }
    }
    qsort(c, (size_t)k, sizeof(cand), cand_cmp);
    // Softmax of logit / T over the candidates, in double. An -inf logit gets probability 0;
    // +inf logits share all of it.
    double *p = g4_malloc(sizeof(double) * (size_t)k);
    const double inv_t = 1.0 / (double)s->temperature;
    double mx = (double)c[0].logit * inv_t, z = 0;
    for (int i = 0; i < k; i++) {
        double x = (double)c[i].logit * inv_t;
        p[i] = isinf(mx) ? (x == mx ? 1.0 : 0.0) : exp(x - mx);
        z += p[i];
    }
    // Top-p: keep token i while the mass of the tokens before it is below top_p.
    int keep = k;
    if (s->top_p < 1) {
        double above = 0;
        for (int i = 0; i < k; i++) {
            if (i > 0 && above / z >= (double)s->top_p) {
                keep = i;
                break;
            }
            above += p[i];
        }
    }
    double zk = 0;
    for (int i = 0; i < keep; i++) zk += p[i];
    double u = g4_rng_uniform(rng) * zk, acc = 0;
    int pick = keep - 1;
    for (int i = 0; i < keep; i++) {
        acc += p[i];
        if (u < acc) {
            pick = i;
            break;
        }
    }
    // A zero-probability tail can only be reached through rounding: step back to a real one.
    while (pick > 0 && p[pick] == 0) pick--;
    *token = c[pick].id;
    free(p);
    free(c);
    return G4_OK;
}
