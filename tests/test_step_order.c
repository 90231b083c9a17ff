// test_step_order.c: the decode step's weight order that the engine hands the backend
// (engine/text_decoder.c step_order, set_step_order under G4_L2_NEXT: while op i runs, its GEMV
// prefetches the next ops' weights into L2) is the order of the weight-bearing calls a real
// one-token step makes. The CPU backend's linear, linear_gelu_mul, add_norm_linear, mlp_block and
// ple_block are wrapped by a recorder (the outermost call only: the CPU's block ops run the ops
// apart through the same table) and its set_step_order by a stub that keeps what it is handed;
// then one g4_text_step after a prefill (and the order handed over again, the same, when
// g4_text_state_reserve grows the state: on CUDA a new handle, whose graphs are captured again), on
// three packages (the tiny f16 fixture, loaded with and without q|k|v weights; its Q4 decoder;
// alt-tiny, another shape) under every combination of G4_QKV, G4_FUSE, G4_PERSIST_MLP and
// G4_PLE_FUSED: the recorded ops must equal the handed ones in count and in every weight's
// identity, and the count must be the one the config implies.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text_model.h"
#include "tests/test_util.h"

enum { MAX_OPS = 4096 };

static const g4_backend *cpu_ops;
static g4_backend rec;
static g4_step_op got[MAX_OPS], want[MAX_OPS];
static int n_got, n_want, want_depth, n_set, recording, nest, overflow;

static void rec_op(const g4_linear *a, const g4_linear *b, const g4_linear *c) {
    if (!recording || nest) return;
    if (n_got == MAX_OPS) {
        overflow = 1;
        return;
    }
    got[n_got++] = (g4_step_op){{a, b, c}};
}
static void rec_linear(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w, int acc) {
    rec_op(w, NULL, NULL);
    nest++;
    cpu_ops->linear(be, y, x, w, acc);
    nest--;
}
static void rec_linear_gelu_mul(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *wg,
                                const g4_linear *wu) {
    rec_op(wg, wu, NULL);
    nest++;
    cpu_ops->linear_gelu_mul(be, y, x, wg, wu);
    nest--;
}
static void rec_add_norm_linear(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *y,
                                const g4_linear *w, const g4_linear *wu, const g4_buf *mul,
                                int mul_col0) {
    rec_op(w, wu, NULL);
    nest++;
    cpu_ops->add_norm_linear(be, a, x, y, w, wu, mul, mul_col0);
    nest--;
}
static void rec_mlp_block(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *mlp, g4_buf *y,
                          const g4_linear *wg, const g4_linear *wu, const g4_linear *wd) {
    rec_op(wg, wu, wd);
    nest++;
    cpu_ops->mlp_block(be, a, x, mlp, y, wg, wu, wd);
    nest--;
}
static void rec_ple_block(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *pg, g4_buf *y,
                          const g4_linear *wg, const g4_linear *wp, const g4_buf *ple,
                          int ple_col0) {
    rec_op(wg, wp, NULL);
    nest++;
    cpu_ops->ple_block(be, a, x, pg, y, wg, wp, ple, ple_col0);
    nest--;
}
static void rec_set_step_order(g4_backend *be, const g4_step_op *ops, int n, int depth) {
    (void)be;
    n_set++;
    CHECK_MSG(n >= 0 && n <= MAX_OPS, "set_step_order: %d ops", n);
    n_want = n < 0 ? 0 : n > MAX_OPS ? MAX_OPS : n;
    memcpy(want, ops, sizeof(g4_step_op) * (size_t)n_want);
    want_depth = depth;
}

// The step's op count from the config alone: per layer q|k|v (an owner with the weight and
// qkv on) or q (+ k, v on an owner), o, the MLP (1 or 2 ops), the PLE block (1 or 2); the PLE
// model projection before and the LM head after.
static int expected_ops(const g4_text_model *m, int qkv, int persist, int ple) {
    const g4_text_config *c = m->cfg;
    int n = 2;
    for (int l = 0; l < c->n_layers; l++) {
        const int own = c->layer[l].kv_source == l;
        n += own ? (qkv && m->layers[l].qkv.in ? 1 : 3) : 1;
        n += 1 + (persist ? 1 : 2) + (ple ? 1 : 2);
    }
    return n;
}

static const char *weight_name(const g4_text_model *m, const g4_linear *w, char *buf, size_t n) {
    if (!w) return "-";
    if (w == &m->ple_model_proj) return "ple_model_proj";
    if (w == &m->lm_head) return "lm_head";
    for (int l = 0; l < m->cfg->n_layers; l++) {
        const g4_text_layer *t = &m->layers[l];
        const struct {
            const g4_linear *w;
            const char *name;
        } all[] = {{&t->q, "q"},
                   {&t->k, "k"},
                   {&t->v, "v"},
                   {&t->qkv, "qkv"},
                   {&t->o, "o"},
                   {&t->gate, "gate"},
                   {&t->up, "up"},
                   {&t->down, "down"},
                   {&t->ple_gate, "ple_gate"},
                   {&t->ple_proj, "ple_proj"}};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (all[i].w == w) {
                snprintf(buf, n, "layer %d %s", l, all[i].name);
                return buf;
            }
    }
    return "?";
}

// Every flag combination on model m; returns the combinations checked.
static int check_model(g4_text_model *m, const char *what) {
    int combos = 0;
    for (int mask = 0; mask < 16; mask++) {
        const int qkv = mask & 1, fuse = (mask >> 1) & 1, persist = (mask >> 2) & 1,
                  ple = (mask >> 3) & 1, depth = 1 + ((mask ^ (mask >> 2)) & 1);
        setenv("G4_QKV", qkv ? "1" : "0", 1);
        setenv("G4_FUSE", fuse ? "1" : "0", 1);
        setenv("G4_PERSIST_MLP", persist ? "1" : "0", 1);
        setenv("G4_PLE_FUSED", ple ? "1" : "0", 1);
        setenv("G4_L2_NEXT", depth == 1 ? "1" : "2", 1);
        n_set = n_want = 0;
        g4_text_state *s;
        CHECK_MSG(g4_text_state_new(m, 16, 8, &s) == 0, "%s", g4_error());
        CHECK_INT(n_set, 1);
        CHECK_INT(want_depth, depth);
        const int32_t ids[4] = {2, 17, 5, 40};
        CHECK_MSG(g4_text_forward(s, ids, 3, NULL, NULL, 0) == 0, "%s", g4_error());
        n_got = overflow = 0;
        recording = 1;
        int32_t next = -1;
        CHECK_MSG(g4_text_step(s, ids + 3, 1, NULL, &next) == 0, "%s", g4_error());
        recording = 0;
        CHECK(!overflow);
        CHECK_INT(nest, 0);
        const int n = expected_ops(m, qkv, persist, ple);
        CHECK_MSG(n_got == n && n_want == n,
                  "%s (qkv %d fuse %d persist %d ple %d): %d ops recorded, %d handed over, %d "
                  "expected",
                  what, qkv, fuse, persist, ple, n_got, n_want, n);
        int bad = 0;
        for (int i = 0; i < n_got && i < n_want; i++)
            for (int k = 0; k < 3; k++)
                if (got[i].w[k] != want[i].w[k] && bad++ == 0) {
                    char a[64], b[64];
                    CHECK_MSG(0,
                              "%s (qkv %d fuse %d persist %d ple %d): op %d weight %d is %s in "
                              "the step, %s in the order handed over",
                              what, qkv, fuse, persist, ple, i, k,
                              weight_name(m, got[i].w[k], a, sizeof a),
                              weight_name(m, want[i].w[k], b, sizeof b));
                }
        CHECK_INT(bad, 0);
        // grown (a new backend handle on CUDA, whose graphs are captured again): the order is
        // handed over again, the same; not grown: nothing
        n_set = n_want = 0;
        CHECK_MSG(g4_text_state_reserve(s, 16) == 0, "%s", g4_error());
        CHECK_INT(n_set, 0);
        CHECK_MSG(g4_text_state_reserve(s, 32) == 0, "%s", g4_error());
        CHECK_INT(n_set, 1);
        CHECK_INT(want_depth, depth);
        CHECK_INT(n_want, n);
        for (int i = 0; i < n_got && i < n_want; i++)
            for (int k = 0; k < 3; k++) bad += got[i].w[k] != want[i].w[k];
        CHECK_MSG(bad == 0,
                  "%s (qkv %d fuse %d persist %d ple %d): %d weights differ in the "
                  "order handed over after reserve",
                  what, qkv, fuse, persist, ple, bad);
        g4_text_state_free(s);
        combos++;
    }
    // off (the default): nothing handed over
    unsetenv("G4_L2_NEXT");
    n_set = 0;
    g4_text_state *s;
    CHECK(g4_text_state_new(m, 16, 8, &s) == 0);
    CHECK_INT(n_set, 0);
    g4_text_state_free(s);
    unsetenv("G4_QKV");
    unsetenv("G4_FUSE");
    unsetenv("G4_PERSIST_MLP");
    unsetenv("G4_PLE_FUSED");
    printf("  %s: %d layers, %d flag combinations, the step's ops as handed over\n", what,
           m->cfg->n_layers, combos);
    return combos;
}

int main(void) {
    cpu_ops = g4_backend_cpu();
    CHECK(cpu_ops->set_step_order == NULL); // the CPU ignores the hints
    rec = *cpu_ops;
    rec.linear = rec_linear;
    rec.linear_gelu_mul = rec_linear_gelu_mul;
    rec.add_norm_linear = rec_add_norm_linear;
    rec.mlp_block = rec_mlp_block;
    rec.ple_block = rec_ple_block;
    rec.set_step_order = rec_set_step_order;
    const int combos = g4t_step_packages(&rec, check_model);
    CHECK_INT(combos, 4 * 16);
    return g4t_finish("test_step_order");
}
