// test_text_decoder.c: the text model on the CPU backend: a KV-cached run (prefill, then one
// token at a time, in several splits) must equal one long prefill; bad requests fail cleanly.
// (Agreement with HF is tests/test_text_vs_hf.c.)
#include <math.h>
#include <stdio.h>
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
static int n_linear, n_linear_gelu_mul;
static void count_linear(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w,
                         int accumulate) {
    n_linear++;
    cpu_ops->linear(be, y, x, w, accumulate);
}
static void count_linear_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *wg,
                                  const g4_linear *wu) {
    n_linear_gelu_mul++;
    cpu_ops->linear_gelu_mul(be, y, x, wg, wu);
}
static int n_mlp_block;
static void count_mlp_block(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *mlp, g4_buf *y,
                            const g4_linear *wg, const g4_linear *wu, const g4_linear *wd) {
    n_mlp_block++;
    cpu_ops->mlp_block(be, a, x, mlp, y, wg, wu, wd);
}
static int n_ple_block;
static void count_ple_block(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *pg, g4_buf *y,
                            const g4_linear *wg, const g4_linear *wp, const g4_buf *ple,
                            int ple_col0) {
    n_ple_block++;
    cpu_ops->ple_block(be, a, x, pg, y, wg, wp, ple, ple_col0);
}
static int linears(void) {
    return n_linear + n_linear_gelu_mul + n_add_norm_linear;
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

// A decode knob of issue 30 (read when a state is made) that sends each block of a one-token
// forward through one op (the counted op, *count calls), its pending add inside when the
// forward fuses: the decode logits must be those without it bit for bit, fused adds or not
// (and, when `also` is given, with that knob on as well), and a prefill keeps the ops apart.
//   G4_PERSIST_MLP=1: each MLP block as mlp_block (on the CPU the ops apart, on CUDA one
//     persistent launch).
//   G4_PLE_FUSED=1: each per-layer-input block as ple_block into its own output buffer (on the
//     CPU the ops apart, on CUDA one launch of clusters), also beside G4_PERSIST_MLP=1.
static void test_block_knob(g4_text_model *m, const char *knob, int *count, const char *also) {
    const int V = m->cfg->vocab, L = m->cfg->n_layers;
    int32_t ids[4] = {2, 17, 5, 40};
    float *want = g4_malloc(sizeof(float) * 2 * V), *got = g4_malloc(sizeof(float) * 2 * V);
    for (int variant = 0; variant < (also ? 3 : 2); variant++) { // G4_FUSE 0, 1; 1 with `also`
        setenv("G4_FUSE", variant ? "1" : "0", 1);
        if (also) setenv(also, variant == 2 ? "1" : "0", 1);
        for (int on = 0; on < 2; on++) {
            setenv(knob, on ? "1" : "0", 1);
            g4_text_state *s;
            CHECK(g4_text_state_new(m, 16, 8, &s) == 0);
            *count = 0;
            CHECK(g4_text_forward(s, ids, 2, NULL, NULL, 0) == 0);
            CHECK_INT(*count, 0); // (prefill)
            for (int t = 2; t < 4; t++)
                CHECK_MSG(
                    g4_text_forward(s, ids + t, 1, NULL, (on ? got : want) + (t - 2) * V, 1) == 0,
                    "%s", g4_error());
            CHECK_INT(*count, on ? 2 * L : 0);
            g4_text_state_free(s);
            if (on)
                CHECK_MSG(memcmp(want, got, sizeof(float) * 2 * V) == 0,
                          "%s=1 (G4_FUSE=%d, %s=%d): the decode logits differ from the ops apart",
                          knob, variant != 0, also ? also : "-", variant == 2);
        }
    }
    unsetenv(knob);
    if (also) unsetenv(also);
    unsetenv("G4_FUSE");
    free(want);
    free(got);
}

// Issue 30: a one-token forward runs one linear over an owner layer's q|k|v weight (on unless
// G4_QKV=0, read when a state is made; prefill keeps q, k and v apart). On the CPU each output
// column is summed alone in k order, so the logits must be bit-identical either way, fused adds
// or not; and the decode step must run exactly 2 linears fewer per KV-owning layer.
static void test_qkv(g4_text_model *m, const char *what) {
    const g4_text_config *c = m->cfg;
    const int V = c->vocab, H = c->hidden, P = 5, D = 4, N = P + D;
    g4_backend *be = m->be;
    // the concatenated weights: built for the owners only, and x @ [Wq | Wk | Wv] computes the
    // three linears' columns bit for bit
    unsigned long long seed = 31;
    float *x = g4_malloc(sizeof(float) * (size_t)H);
    for (int i = 0; i < H; i++) x[i] = g4t_rand_uniform(&seed, -2.0f, 2.0f);
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *lc = &c->layer[l];
        const g4_text_layer *w = &m->layers[l];
        const int qw = c->n_heads * lc->head_dim, kvw = c->n_kv_heads * lc->head_dim;
        if (lc->kv_source != l) {
            CHECK_MSG(w->qkv.in == 0, "%s: layer %d shares its KV but has a q|k|v weight", what, l);
            continue;
        }
        CHECK_MSG(w->qkv.in == H && w->qkv.out == qw + 2 * kvw && w->qkv.kind == w->q.kind,
                  "%s: layer %d: q|k|v weight [%d, %d] kind %d, expected [%d, %d] kind %d", what, l,
                  w->qkv.in, w->qkv.out, (int)w->qkv.kind, H, qw + 2 * kvw, (int)w->q.kind);
        if (w->qkv.in != H) continue;
        float *cat = g4_malloc(sizeof(float) * (size_t)(qw + 2 * kvw));
        float *sep = g4_malloc(sizeof(float) * (size_t)(qw + 2 * kvw));
        g4_buf xb = {x, G4_F32, 1, H}, yc = {cat, G4_F32, 1, qw + 2 * kvw};
        g4_buf yq = {sep, G4_F32, 1, qw}, yk = {sep + qw, G4_F32, 1, kvw},
               yv = {sep + qw + kvw, G4_F32, 1, kvw};
        cpu_ops->linear(be, &yc, &xb, &w->qkv, 0);
        cpu_ops->linear(be, &yq, &xb, &w->q, 0);
        cpu_ops->linear(be, &yk, &xb, &w->k, 0);
        cpu_ops->linear(be, &yv, &xb, &w->v, 0);
        CHECK_MSG(memcmp(cat, sep, sizeof(float) * (size_t)(qw + 2 * kvw)) == 0,
                  "%s: layer %d: x @ [Wq | Wk | Wv] differs from the three linears", what, l);
        free(cat);
        free(sep);
    }
    free(x);

    // a P-token prefill, then D one-token forwards (all logits), under each setting
    int32_t ids[9] = {2, 17, 5, 40, 9, 3, 31, 8, 12};
    float *want = g4_malloc(sizeof(float) * (size_t)N * V),
          *got = g4_malloc(sizeof(float) * (size_t)N * V);
    int decode_linears[2][2], prefill_linears[2][2];
    for (int qkv = 0; qkv < 2; qkv++)
        for (int fuse = 0; fuse < 2; fuse++) {
            setenv("G4_FUSE", fuse ? "1" : "0", 1);
            if (qkv)
                unsetenv("G4_QKV"); // the default: on
            else
                setenv("G4_QKV", "0", 1);
            g4_text_state *s;
            CHECK(g4_text_state_new(m, 16, 8, &s) == 0);
            float *out = qkv == 0 && fuse == 0 ? want : got;
            n_linear = n_linear_gelu_mul = n_add_norm_linear = 0;
            CHECK_MSG(g4_text_forward(s, ids, P, NULL, out, 1) == 0, "%s", g4_error());
            prefill_linears[qkv][fuse] = linears();
            for (int t = P; t < N; t++) {
                n_linear = n_linear_gelu_mul = n_add_norm_linear = 0;
                CHECK_MSG(g4_text_forward(s, ids + t, 1, NULL, out + (size_t)t * V, 1) == 0, "%s",
                          g4_error());
            }
            decode_linears[qkv][fuse] = linears();
            g4_text_state_free(s);
            if (out == got)
                CHECK_MSG(memcmp(want, got, sizeof(float) * (size_t)N * V) == 0,
                          "%s: G4_QKV=%d G4_FUSE=%d: the logits differ from G4_QKV=0 G4_FUSE=0",
                          what, qkv, fuse);
        }
    unsetenv("G4_FUSE");
    unsetenv("G4_QKV");
    for (int fuse = 0; fuse < 2; fuse++) {
        CHECK_MSG(decode_linears[0][fuse] - decode_linears[1][fuse] == 2 * c->n_kv_layers,
                  "%s (G4_FUSE=%d): a decode step ran %d linears with G4_QKV=0 and %d with "
                  "q|k|v, expected %d fewer",
                  what, fuse, decode_linears[0][fuse], decode_linears[1][fuse], 2 * c->n_kv_layers);
        CHECK_INT(prefill_linears[1][fuse], prefill_linears[0][fuse]); // prefill: q, k, v apart
    }
    printf("  %s: a decode step %d linears with q|k|v, %d without (%d KV layers)\n", what,
           decode_linears[1][1], decode_linears[0][1], c->n_kv_layers);
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
    counting.linear = count_linear;
    counting.linear_gelu_mul = count_linear_gelu_mul;
    counting.mlp_block = count_mlp_block;
    counting.ple_block = count_ple_block;
    rc = g4_text_model_load(p, &counting, &m);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (rc == 0) {
        test_fused_adds(m);
        test_qkv(m, "f16");
        test_block_knob(m, "G4_PERSIST_MLP", &n_mlp_block, NULL);
        test_block_knob(m, "G4_PLE_FUSED", &n_ple_block, "G4_PERSIST_MLP");
        g4_text_model_free(m);
    }
    setenv("G4_QKV", "0", 1); // at load: no q|k|v copies, so a state runs q, k, v apart
    rc = g4_text_model_load(p, &counting, &m);
    unsetenv("G4_QKV");
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (rc == 0) {
        for (int l = 0; l < m->cfg->n_layers; l++) CHECK_INT(m->layers[l].qkv.in, 0);
        g4_text_state *s;
        int32_t ids[2] = {2, 17};
        CHECK(g4_text_state_new(m, 16, 8, &s) == 0);
        CHECK(g4_text_forward(s, ids, 1, NULL, NULL, 0) == 0);
        n_linear = n_linear_gelu_mul = n_add_norm_linear = 0;
        CHECK(g4_text_forward(s, ids + 1, 1, NULL, NULL, 0) == 0);
        // the PLE projection, then q, o, gate|up, down, PLE gate and projection a layer, k and
        // v on the owners (no logits asked: no LM head)
        CHECK_INT(linears(), 1 + 6 * m->cfg->n_layers + 2 * m->cfg->n_kv_layers);
        g4_text_state_free(s);
        g4_text_model_free(m);
    }
    g4_package_close(p);
    // the Q4 package: the f16 one with onnxruntime's Q4 decoder (tests/fixtures/q4)
    char *tmp = g4t_tmpdir(), *pkg = g4_sprintf("%s/pkg", tmp);
    rc = g4t_q4_package(pkg, g4t_env("G4_TINY_PKG"), g4t_env("G4_FIXTURES"));
    CHECK(rc == 0);
    if (rc == 0 && (rc = g4_package_open(pkg, &p)) == 0) {
        if ((rc = g4_text_model_load(p, &counting, &m)) == 0) {
            CHECK(m->layers[0].qkv.kind == G4_W_Q4);
            test_qkv(m, "q4");
            test_block_knob(m, "G4_PERSIST_MLP", &n_mlp_block, NULL);
            test_block_knob(m, "G4_PLE_FUSED", &n_ple_block, "G4_PERSIST_MLP");
            g4_text_model_free(m);
        }
        g4_package_close(p);
    }
    CHECK_MSG(rc == 0, "Q4 package: %s", g4_error());
    free(pkg);
    g4t_rmtree(tmp);
    return g4t_finish("test_text_decoder");
}
