// sample.c: one token from host logits with the sample op's reference (kernels/ref/logits.c),
// for callers that hold a host row (see generate.h).
#include <math.h>

#include "engine/generate.h"
#include "kernels/ref/ref.h"

int g4_sample(const g4_sampler *s, const float *logits, int V, uint64_t seed, uint32_t n,
              int *token) {
    if (V < 1) return g4_fail(G4_EINTERNAL, "sample: empty vocabulary");
    if (s->temperature > 0 && s->top_k < 0)
        return g4_fail(G4_EUSER, "top_k %d: expected >= 0", s->top_k);
    if (s->temperature > 0 && !(s->top_p > 0))
        return g4_fail(G4_EUSER, "top_p %g: expected > 0", (double)s->top_p);
    g4_sample_params p = {0};
    p.temperature = s->temperature > 0 ? s->temperature : 0.0f;
    p.top_k = s->top_k;
    p.top_p = s->top_p;
    p.seed_lo = (uint32_t)seed;
    p.seed_hi = (uint32_t)(seed >> 32);
    const int32_t id = ref_sample_row(logits, V, &p, n);
    if (id < 0) {
        for (int i = 0; i < V; i++)
            if (isnan(logits[i]))
                return g4_fail(G4_EINTERNAL,
                               "sample: logit of token %d is NaN (broken forward pass)", i);
    }
    *token = id;
    return G4_OK;
}
