// state_check.h: what test_generate.c (CPU) and test_cuda_engine.c (GPU) both run on text
// states: n tokens one step at a time, two states with their steps interleaved, and the old
// path's greedy algorithm (eager forwards, logits on the host, the first argmax) that the one
// decode step must reproduce.
#ifndef G4_TESTS_STATE_CHECK_H
#define G4_TESTS_STATE_CHECK_H

#include <stdlib.h>

#include "engine/text_model.h"
#include "base/base.h"

// n tokens after prompt[0..P) on s (its sampler set), one step at a time: the first from the
// prefill's last row, each next from the step on the previous.
static inline int sc_steps(g4_text_state *s, const int32_t *prompt, int P, int n, int32_t *out) {
    g4_text_state_reset(s);
    int32_t id;
    int rc = g4_text_step(s, prompt, P, NULL, &id);
    for (int i = 0; i < n && !rc; i++) {
        out[i] = id;
        if (i + 1 < n) rc = g4_text_step(s, &id, 1, NULL, &id);
    }
    return rc;
}

// The same on two states alive at once, a's and b's steps alternating.
static inline int sc_interleaved(g4_text_state *a, const int32_t *pa, int Pa, g4_text_state *b,
                                 const int32_t *pb, int Pb, int n, int32_t *out_a,
                                 int32_t *out_b) {
    g4_text_state_reset(a);
    g4_text_state_reset(b);
    int32_t ia, ib;
    int rc = g4_text_step(a, pa, Pa, NULL, &ia);
    if (!rc) rc = g4_text_step(b, pb, Pb, NULL, &ib);
    for (int i = 0; i < n && !rc; i++) {
        out_a[i] = ia, out_b[i] = ib;
        if (i + 1 == n) break;
        if (!(rc = g4_text_step(a, &ia, 1, NULL, &ia))) rc = g4_text_step(b, &ib, 1, NULL, &ib);
    }
    return rc;
}

// The old path's algorithm (before the one decode step): eager forwards on a fresh state, the
// last row's logits downloaded, the first argmax on the host, until an EOS id (the config's or
// eos[0..n_eos)) or n tokens. Returns the count, -1 on an error.
static inline int sc_old_greedy(g4_text_model *m, const int32_t *prompt, int P, const int *eos,
                                int n_eos, int n, int *out) {
    const int V = m->cfg->vocab;
    g4_text_state *s;
    if (g4_text_state_new(m, P + n, P, &s)) return -1;
    float *lg = g4_malloc(sizeof(float) * (size_t)V);
    int got = 0, rc = g4_text_forward(s, prompt, P, NULL, lg, 0);
    while (!rc && got < n) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (lg[i] > lg[best]) best = i;
        out[got++] = best;
        int stop = 0;
        for (int i = 0; i < m->cfg->n_eos; i++) stop |= m->cfg->eos_ids[i] == best;
        for (int i = 0; i < n_eos; i++) stop |= eos[i] == best;
        if (stop || got == n) break;
        const int32_t fed = best;
        rc = g4_text_forward(s, &fed, 1, NULL, lg, 0);
    }
    free(lg);
    g4_text_state_free(s);
    return rc ? -1 : got;
}

// Index of the first difference of two id lists (-1 when equal).
static inline int sc_first_diff(const int *a, int na, const int *b, int nb) {
    const int k = na < nb ? na : nb;
    for (int i = 0; i < k; i++)
        if (a[i] != b[i]) return i;
    return na == nb ? -1 : k;
}

#endif
