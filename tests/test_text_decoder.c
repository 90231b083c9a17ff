// test_text_decoder.c: the text model on the CPU backend: a KV-cached run (prefill, then one
// token at a time, in several splits) must equal one long prefill; bad requests fail cleanly.
// (Agreement with HF is tests/test_text_vs_hf.c.)
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text_model.h"
#include "tests/test_util.h"

// Every op of the CPU backend computes a row from that row alone (and attention from the cache
// rows up to its position), so a cached run performs the very same float operations as the full
// prefill: the logits must be bit-identical.
static void test_cache_equals_prefill(g4_text_model *m, int T, const int *splits, int n_splits) {
    const int V = m->cfg->vocab;
    int32_t *ids = g4_malloc(sizeof(int32_t) * (size_t)T);
    unsigned long long seed = 99 + (unsigned long long)T;
    for (int t = 0; t < T; t++) ids[t] = (int32_t)(g4t_rand_u64(&seed) % (unsigned)V);
    float *full = g4_malloc(sizeof(float) * (size_t)T * V);
    float *step = g4_malloc(sizeof(float) * (size_t)T * V);
    g4_text_state *s;
    CHECK(g4_text_state_new(m, T, T, &s) == 0);
    CHECK_MSG(g4_text_forward(s, ids, T, NULL, full, 1) == 0, "%s", g4_error());
    g4_text_state_reset(s);
    int t0 = 0;
    for (int i = 0; i < n_splits && t0 < T; i++) { // chunks, then single tokens
        int n = splits[i] < T - t0 ? splits[i] : T - t0;
        CHECK_MSG(g4_text_forward(s, ids + t0, n, NULL, step + (size_t)t0 * V, 1) == 0, "%s",
                  g4_error());
        t0 += n;
    }
    for (; t0 < T; t0++) // last-row-only logits, as generation uses them
        CHECK(g4_text_forward(s, ids + t0, 1, NULL, step + (size_t)t0 * V, 0) == 0);
    CHECK_INT(s->n_past, T);
    size_t bad = 0, nan = 0;
    for (size_t i = 0; i < (size_t)T * V; i++) {
        nan += isnan(full[i]) || isnan(step[i]);
        bad += full[i] != step[i];
    }
    CHECK_MSG(nan == 0, "%zu NaN logits", nan);
    CHECK_MSG(bad == 0, "T=%d: %zu of %zu cached logits differ from the full prefill", T, bad,
              (size_t)T * V);
    g4_text_state_free(s);
    free(ids);
    free(full);
    free(step);
}

// The CPU backend with its add ops counted: the fused forward must run each block's add
// in the next linear's op (3 L - 1 of them and the last layer's add_rmsnorm_next), the
// unfused one never.
static g4_backend counting;
static const g4_backend *cpu_ops;
static int n_add_norm_linear, n_add_rmsnorm_next;
static void count_add_norm_linear(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *y,
                                  const g4_linear *w, const g4_linear *wu, const g4_buf *mul,
                                  int mul_col0) {
    n_add_norm_linear++;
    cpu_ops->add_norm_linear(be, a, x, y, w, wu, mul, mul_col0);
}
static void count_add_rmsnorm_next(g4_backend *be, g4_buf *h, const g4_buf *x, const void *w,
                                   float eps, const void *scale, g4_buf *next, int next_norm,
                                   const void *next_w) {
    n_add_rmsnorm_next++;
    cpu_ops->add_rmsnorm_next(be, h, x, w, eps, scale, next, next_norm, next_w);
}

// Issue 30's consumer-side fusion (on unless G4_FUSE=0, read when a state is made): on the CPU,
// add_norm_linear is add_rmsnorm_next and the linear, so a fused forward (<= 8 rows) must give
// the unfused logits bit for bit; this checks the engine's side of it (the pending add, the two
// residual buffers, the last layer's add before the final norm), and that it did fuse.
static void test_fused_adds(g4_text_model *m) {
    const int V = m->cfg->vocab, L = m->cfg->n_layers, T = 5;
    int32_t ids[5] = {2, 17, 5, 40, 9};
    float *want = g4_malloc(sizeof(float) * T * V), *got = g4_malloc(sizeof(float) * T * V);
    g4_text_state *s;
    setenv("G4_FUSE", "0", 1);
    CHECK(g4_text_state_new(m, 16, 8, &s) == 0);
    n_add_norm_linear = n_add_rmsnorm_next = 0;
    CHECK_MSG(g4_text_forward(s, ids, T, NULL, want, 1) == 0, "%s", g4_error());
    CHECK_INT(n_add_norm_linear, 0);
    CHECK_INT(n_add_rmsnorm_next, 3 * L);
    g4_text_state_free(s);
    setenv("G4_FUSE", "1", 1);
    CHECK(g4_text_state_new(m, 16, 8, &s) == 0);
    n_add_norm_linear = n_add_rmsnorm_next = 0;
    CHECK_MSG(g4_text_forward(s, ids, T, NULL, got, 1) == 0, "%s", g4_error());
    CHECK_INT(n_add_norm_linear, 3 * L - 1);
    CHECK_INT(n_add_rmsnorm_next, 1);
    CHECK_MSG(memcmp(want, got, sizeof(float) * T * V) == 0,
              "fused: the logits of a %d-token forward differ from the unfused ones", T);
    g4_text_state_free(s);
    // a state whose forwards may exceed the second residual buffer's 8 rows: 9 rows unfused
    CHECK(g4_text_state_new(m, 16, 9, &s) == 0);
    n_add_norm_linear = 0;
    int32_t nine[9] = {2, 17, 5, 40, 9, 3, 4, 5, 6};
    CHECK(g4_text_forward(s, nine, 9, NULL, NULL, 0) == 0);
    CHECK_INT(n_add_norm_linear, 0);
    g4_text_state_free(s);
    // the KV-cached decode, one token a forward, fused, against the unfused full prefill
    const int a[] = {1}, c[] = {7, 9, 17};
    test_cache_equals_prefill(m, 40, a, 1);
    test_cache_equals_prefill(m, 40, c, 3);
    unsetenv("G4_FUSE"); // the default: fused
    CHECK(g4_text_state_new(m, 16, 8, &s) == 0);
    n_add_norm_linear = 0;
    CHECK(g4_text_forward(s, ids, T, NULL, NULL, 0) == 0);
    CHECK_INT(n_add_norm_linear, 3 * L - 1);
    g4_text_state_free(s);
    free(want);
    free(got);
}

static void test_bad_requests(g4_text_model *m) {
    g4_text_state *s;
    CHECK(g4_text_state_new(m, 8, 4, &s) == 0);
    int32_t ids[8] = {2, 3, 4, 5, 6, 7, 8, 9};
    CHECK(g4_text_forward(s, ids, 5, NULL, NULL, 0) == G4_EUSER); // more than max_tokens
    CHECK(strstr(g4_error(), "takes 1..4 per call") != NULL);
    CHECK(g4_text_forward(s, ids, 4, NULL, NULL, 0) == 0);
    CHECK(g4_text_forward(s, ids, 4, NULL, NULL, 0) == 0);
    CHECK(g4_text_forward(s, ids, 1, NULL, NULL, 0) == G4_EUSER); // context full
    CHECK(strstr(g4_error(), "exceed its capacity of 8 tokens") != NULL);
    g4_text_state_reset(s);
    int32_t bad[2] = {2, m->cfg->vocab};
    CHECK(g4_text_forward(s, bad, 2, NULL, NULL, 0) == G4_EUSER);
    CHECK(strstr(g4_error(), "outside the vocabulary") != NULL);
    int32_t img[2] = {2, m->cfg->image_token_id};
    CHECK(g4_text_forward(s, img, 2, NULL, NULL, 0) == G4_EUSER); // placeholder, no features
    CHECK(strstr(g4_error(), "1 image/audio placeholder tokens") != NULL);
    CHECK_INT(s->n_past, 0); // failed calls leave the state as it was
    g4_text_state_free(s);
    CHECK(g4_text_state_new(m, m->cfg->context_length + 1, 1, &s) == G4_EUSER);
}

int main(void) {
    g4_package *p;
    int rc = g4_package_open(g4t_env("G4_TINY_PKG"), &p);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (rc) return g4t_finish("test_text_decoder");
    g4_text_model *m;
    rc = g4_text_model_load(p, g4_backend_cpu(), &m);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (rc == 0) {
        // Longer than the sliding window (16 in the fixture) so the window is exercised.
        const int a[] = {1}, b[] = {25}, c[] = {7, 9, 17}, d[] = {3, 1, 30};
        test_cache_equals_prefill(m, 40, a, 1);
        test_cache_equals_prefill(m, 40, b, 1);
        test_cache_equals_prefill(m, 40, c, 3);
        test_cache_equals_prefill(m, 48, d, 3);
        test_bad_requests(m);
        g4_text_model_free(m);
    }
    cpu_ops = g4_backend_cpu();
    counting = *cpu_ops;
    counting.add_norm_linear = count_add_norm_linear;
    counting.add_rmsnorm_next = count_add_rmsnorm_next;
    rc = g4_text_model_load(p, &counting, &m);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (rc == 0) {
        test_fused_adds(m);
        g4_text_model_free(m);
    }
    g4_package_close(p);
    return g4t_finish("test_text_decoder");
}
