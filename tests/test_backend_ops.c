// test_backend_ops.c: every op of the op table (kernels/ops.h) through the table, on the CPU
// backend and on the CUDA backend, against a second, naive implementation written here (plain
// loops in double, from the op's contract in ops.h and ../shared/spec/, sharing no code with
// kernels/ref/), in the style of ggml's test-backend-ops:
//
//  * each op runs at tiny, odd and real Gemma-4 E2B shapes (hidden 1536, 8 query heads over 1 KV
//    head of 256 / 512 dims, FFN 6144, 35 x 256 per-layer inputs, vocabulary 262144; vision 768
//    wide, 12 x 64 heads, 2520 patches, a 10240-row position table; audio 1024 wide, 8 x 128
//    heads, chunk 12 / band 12, the two subsampling layers, a 5-tap depthwise conv); sequence
//    lengths are cut where the naive loops would take too long on a CI core;
//  * inputs are seeded random values rounded to fp16, so both backends (fp32 activations on the
//    CPU, fp16 on CUDA) start from the same numbers; outputs are poisoned with NaN before the op
//    and framed by guard zones that must come back unchanged (a write past either end fails;
//    tests/backend_buf.h);
//  * comparisons use g4t_compare (tests/test_util.h): |got - want| <= atol + rtol |want| with a
//    named tolerance per op and activation type, and a NaN or inf on either side fails;
//  * a list check: the table below names every field of struct g4_backend (its bytes must tile
//    the struct, so a new field is caught) and how it is covered; after an unfiltered run every
//    op field must have been called by a case, so a new op cannot be left without one;
//  * `--break`: every case runs with its reference perturbed and must fail (the comparison of
//    each case can fail); the harness's own guard, poison and NaN rules are checked on every
//    run (a write past the end, an unwritten output and a NaN reference each fail);
//  * `perf`: after its check, each case times its op (--reps N calls, synchronised) and prints
//    ms per call.
//
// Named tolerances (atol, rtol), for a backend with f32 activations / with f16 activations:
//   exact      (0, 0) / (0, 0)              copies, gathers, comparisons (transpose, scatter,
//                                           clamp, embed of fp16 rows, conversions' roundings)
//   elem       (1e-6, 1e-5) / (1e-4, 1e-3)  one elementwise function: libm vs double (a few
//                                           fp32 ulp); f16: one output rounding (2^-11 = 4.9e-4
//                                           relative, 2x) and atol for results near 0
//   reduce     (1e-5, 1e-5) / (1e-4, 1e-3)  norms, RoPE, convolutions, pooling: fp32 sums in
//                                           another order than the double ones here
//   f32-out    (1e-5, 1e-5) / (1e-5, 1e-5)  f32 outputs on both (residual stream, logits,
//                                           pooled soft tokens), fp32 sums
//   dot        (1e-4, 1e-4) / (1e-3, 1e-3)  linear: fp32 accumulation of <= 6144 products of
//                                           |x| <= 3, |w| <= 0.1 (~1e-5) + the f16 rounding
//   gelu-dot   (1e-4, 1e-4) / (1e-3, 2e-3)  linear_gelu_mul: gate and up each rounded to fp16
//                                           before the product on CUDA (three roundings)
//   attn       (1e-5, 1e-5) / (1e-3, 2e-3)  attention: fp16 P in the P V product on CUDA
//   audio-attn (1e-5, 1e-5) / (2e-4, 1e-3)  audio attention: fp32 end to end, fp16 output
//
// Usage: test_backend_ops [perf] [--reps N] [--break] [--backend cpu|cuda] [--op S] [--shape S]
// Without --backend both halves run; the CUDA half prints why it is skipped without a GPU (the
// CPU half still decides the exit status). Exit 0 pass, 1 fail.
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "kernels/cuda_util.h"
#include "kernels/ops.h"
#include "tests/backend_buf.h"
#include "tests/test_util.h"

#define NAME "test_backend_ops"

static g4_backend *be;  // the backend under test
static g4t_cases cases; // tests/backend_buf.h
static int perf_mode, perf_reps = 20, break_mode;
static int case_reports; // comparisons in the open case (--break: each case needs one)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// --- the list check: every field of g4_backend and how it is covered --------------------------
typedef enum {
    K_OP,       // an op: a case below must call it
    K_MEMORY,   // memory and helpers: every case calls them (their own case checks them too)
    K_OPTIONAL, // optional (NULL on the CPU): called by a case where the backend has it
    K_MODEL,    // model-level, tested with a model elsewhere (the reason says where)
    K_DATA,     // not a function
} field_kind;

typedef struct {
    const char *name;
    size_t offset, size;
    field_kind kind;
    const char *why; // K_MODEL: where it is tested
    int calls;       // cases that called it in this run
} field;

#define FIELD(f, kind, why)                                                                        \
    { #f, offsetof(g4_backend, f), sizeof(((g4_backend *)0)->f), kind, why, 0 }
static field fields[] = {
    FIELD(name, K_DATA, NULL),
    FIELD(host_memory, K_DATA, NULL),
    FIELD(act_type, K_DATA, NULL),
    FIELD(kv_type, K_DATA, NULL),
    FIELD(check_text, K_MODEL, "a model config's refusals: tests/test_cuda_supported.c"),
    FIELD(exec_new, K_MODEL, "a text state's handle: tests/test_cuda_engine.c, state_check.h"),
    FIELD(exec_free, K_MODEL, "a text state's handle: tests/test_cuda_engine.c, state_check.h"),
    FIELD(exec_reserve_rows, K_MODEL,
          "the batch step's graphs: test_batch on CUDA with G4_BATCH_GRAPH=1 (run.sh batch_cuda)"),
    FIELD(set_keys, K_MODEL,
          "the step's long-range graph: test_cuda_attention (form classes, auto mode) and "
          "test_cuda_engine with G4_ATTN_MERGE_LONG=8 (run.sh amerge)"),
    FIELD(alloc_count, K_MEMORY, NULL),
    FIELD(alloc, K_MEMORY, NULL),
    FIELD(free, K_MEMORY, NULL),
    FIELD(upload, K_MEMORY, NULL),
    FIELD(download, K_MEMORY, NULL),
    FIELD(sync, K_MEMORY, NULL),
    FIELD(alloc_mapped, K_OPTIONAL, NULL),
    FIELD(free_mapped, K_OPTIONAL, NULL),
    FIELD(convert, K_OP, NULL),
    FIELD(linear, K_OP, NULL),
    FIELD(prepare_linear, K_OPTIONAL, NULL),
    FIELD(release_linear, K_OPTIONAL, NULL),
    FIELD(linear_gelu_mul, K_OP, NULL),
    FIELD(rmsnorm, K_OP, NULL),
    FIELD(add_rmsnorm, K_OP, NULL),
    FIELD(add_rmsnorm_next, K_OP, NULL),
    FIELD(add_norm_linear, K_OP, NULL),
    FIELD(mlp_block, K_OP, NULL),
    FIELD(ple_block, K_OP, NULL),
    FIELD(gelu_mul, K_OP, NULL),
    FIELD(scale, K_OP, NULL),
    FIELD(add, K_OP, NULL),
    FIELD(qkv_prep, K_OP, NULL),
    FIELD(attention, K_OP, NULL),
    FIELD(qkv_prep_rows, K_OP, NULL),
    FIELD(attention_rows, K_OP, NULL),
    FIELD(qkv_attention, K_OP, NULL),
    FIELD(qkv_attention_rows, K_OP, NULL),
    FIELD(ple_inputs, K_OP, NULL),
    FIELD(embed, K_OP, NULL),
    FIELD(softcap, K_OP, NULL),
    FIELD(sample, K_OP, NULL),
    FIELD(sample_rows, K_OP, NULL),
    FIELD(scatter_rows, K_OP, NULL),
    FIELD(graph_begin, K_OPTIONAL, NULL),
    FIELD(graph_end, K_OPTIONAL, NULL),
    FIELD(graph_launch, K_OPTIONAL, NULL),
    FIELD(graph_free, K_OPTIONAL, NULL),
    FIELD(ctx, K_DATA, NULL),
    FIELD(clamp, K_OP, NULL),
    FIELD(silu, K_OP, NULL),
    FIELD(glu, K_OP, NULL),
    FIELD(transpose, K_OP, NULL),
    FIELD(rope_2d, K_OP, NULL),
    FIELD(attention_bidir, K_OP, NULL),
    FIELD(vision_posemb, K_OP, NULL),
    FIELD(vision_pool, K_OP, NULL),
    FIELD(sscp_conv, K_OP, NULL),
    FIELD(dwconv1d_causal, K_OP, NULL),
    FIELD(audio_attention, K_OP, NULL),
    FIELD(check_vision, K_MODEL, "a vision config's refusals: tests/test_cuda_towers.c"),
    FIELD(check_audio, K_MODEL, "an audio config's refusals: tests/test_cuda_towers.c"),
};
#define N_FIELDS ((int)(sizeof fields / sizeof fields[0]))

static field *find_field(const char *name) {
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(fields[i].name, name)) return &fields[i];
    return NULL;
}

// Counts a call of field `name` by the current case (the list check reads it).
static void called(const char *name) {
    field *f = find_field(name);
    if (!f) {
        fprintf(stderr, "%s: internal error: no field %s in the list\n", NAME, name);
        exit(2);
    }
    f->calls++;
}

// The table's fields tile struct g4_backend: in order, no overlap, and no gap but alignment
// padding (< 8 bytes before an 8-aligned field). A field added to ops.h and not here leaves a
// gap (every op is an 8-byte pointer) and fails.
static void check_field_list(void) {
    size_t end = 0;
    int ok = 1;
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        const size_t gap = f->offset - end;
        if (f->offset < end || gap >= 8 || (gap && f->offset % 8)) {
            printf("  list: %zu unlisted bytes before field %s (offset %zu): a field of "
                   "g4_backend is missing from this test's table\n",
                   f->offset - end, f->name, f->offset);
            ok = 0;
        }
        end = f->offset + f->size;
    }
    if (sizeof(g4_backend) - end >= 8) {
        printf("  list: %zu unlisted bytes after the last field %s\n", sizeof(g4_backend) - end,
               fields[N_FIELDS - 1].name);
        ok = 0;
    }
    CHECK_MSG(ok, "the field table does not tile struct g4_backend (%zu bytes, %d fields)",
              sizeof(g4_backend), N_FIELDS);
    printf("list: %d fields of g4_backend listed (%zu bytes)\n", N_FIELDS, sizeof(g4_backend));
}

// After an unfiltered run of one backend: every op field was called, and every optional field
// the backend has.
static void check_coverage(void) {
    int ops = 0;
    for (int i = 0; i < N_FIELDS; i++) {
        field *f = &fields[i];
        void *fp = NULL;
        if (f->kind != K_DATA) memcpy(&fp, (const char *)be + f->offset, sizeof fp);
        if (f->kind == K_OP || f->kind == K_MEMORY || (f->kind == K_OPTIONAL && fp)) {
            if (f->kind == K_OP) ops++;
            CHECK_MSG(f->calls > 0, "%s: op %s has no case in %s", be->name, f->name, NAME);
            CHECK_MSG(fp != NULL || f->kind == K_OPTIONAL, "%s: op %s is NULL", be->name, f->name);
        } else if (f->kind == K_MODEL) {
            printf("  list: %-16s tested elsewhere: %s\n", f->name, f->why);
        } else if (f->kind == K_OPTIONAL) {
            printf("  list: %-16s NULL on %s\n", f->name, be->name);
        }
        f->calls = 0;
    }
    printf("list: %s: %d ops, each called by a case\n", be->name, ops);
}

// --- cases ------------------------------------------------------------------------------------
static void close_case(void) {
    if (cases.open && break_mode && case_reports == 0) { // every case must be able to fail
        g4t_checks++, g4t_failures++;
        printf("  FAIL: --break: the case has no comparison a perturbed reference could fail\n");
    }
    g4t_case_close(&cases);
}

// Whether a case runs; prints its backend, op and parameters when it does.
#define want_case(op, ...)                                                                         \
    (close_case(), g4t_case_open(&cases, be->name, op, __VA_ARGS__) ? (case_started(op), 1) : 0)
static void case_started(const char *op) {
    case_reports = 0;
    if (find_field(op)) called(op); // "memory" and "graph" cases cover several fields
}

// Times `stmt` (the case's op call) in perf mode, after the case's check.
#define PERF(op, stmt)                                                                             \
    do {                                                                                           \
        if (perf_mode) {                                                                           \
            be->sync(be);                                                                          \
            const double t0_ = now_ms();                                                           \
            for (int r_ = 0; r_ < perf_reps; r_++) {                                               \
                stmt;                                                                              \
            }                                                                                      \
            be->sync(be);                                                                          \
            printf("  perf %-16s %10.4f ms/call  (%s, %d calls)\n", op,                            \
                   (now_ms() - t0_) / perf_reps, be->name, perf_reps);                             \
        }                                                                                          \
    } while (0)

typedef struct {
    const char *name;
    double atol, rtol;
} tol;
typedef struct {
    tol f32, f16; // for a backend with f32 / f16 activations
} op_tol;
static const op_tol TOL_EXACT = {{"exact", 0, 0}, {"exact", 0, 0}};
static const op_tol TOL_ELEM = {{"elem", 1e-6, 1e-5}, {"elem", 1e-4, 1e-3}};
static const op_tol TOL_REDUCE = {{"reduce", 1e-5, 1e-5}, {"reduce", 1e-4, 1e-3}};
static const op_tol TOL_F32OUT = {{"f32-out", 1e-5, 1e-5}, {"f32-out", 1e-5, 1e-5}};
static const op_tol TOL_DOT = {{"dot", 1e-4, 1e-4}, {"dot", 1e-3, 1e-3}};
static const op_tol TOL_GELU_DOT = {{"gelu-dot", 1e-4, 1e-4}, {"gelu-dot", 1e-3, 2e-3}};
static const op_tol TOL_ATTN = {{"attn", 1e-5, 1e-5}, {"attn", 1e-3, 2e-3}};
static const op_tol TOL_AUDIO = {{"audio-attn", 1e-5, 1e-5}, {"audio-attn", 2e-4, 1e-3}};

// Compares one output with the naive result and records one check. --break: the reference is
// perturbed first (one element moved far outside any tolerance) and the check must fail.
static void report(const char *what, const float *got, const float *want, size_t n,
                   const op_tol *ot, int guards_ok, int flags) {
    const tol t = be->act_type == G4_F32 ? ot->f32 : ot->f16;
    float *w = NULL;
    case_reports++;
    if (break_mode && n) {
        w = g4_malloc(sizeof(float) * n);
        memcpy(w, want, sizeof(float) * n);
        w[n / 2] += 1.0f + 4.0f * fabsf(w[n / 2]);
        want = w;
    }
    const g4t_cmp c = g4t_compare(got, want, n, t.atol, t.rtol, flags);
    const int ok = c.bad == 0 && guards_ok;
    g4t_checks++;
    if (ok == break_mode) g4t_failures++;
    printf("  %-22s %s  max|err| %.3g  worst/tol %.3g  (%s: atol %.0e rtol %.0e)%s%s%s\n", what,
           break_mode ? (ok ? "FAIL (a perturbed reference passed)" : "ok (caught)")
           : ok       ? "ok"
                      : "FAIL",
           c.max_err, c.max_ratio, t.name, t.atol, t.rtol, guards_ok ? "" : "  GUARD",
           c.nonfinite ? "  NONFINITE" : "", c.ref_nonfinite ? "  REF-NONFINITE" : "");
    if (c.bad && !break_mode)
        printf("    %zu bad of %zu; worst [%zu] got %.7g want %.7g\n", c.bad, n, c.worst,
               got[c.worst], want[c.worst]);
    fflush(stdout);
    free(w);
}

// Records an exact integer comparison (ids); --break perturbs the expectation.
static void report_ids(const char *what, const int32_t *got, const int32_t *want, int n) {
    int bad = 0, first = -1;
    case_reports++;
    for (int i = 0; i < n; i++) {
        const int32_t w = break_mode && i == n / 2 ? want[i] + 1 : want[i];
        if (got[i] != w) bad++, first = first < 0 ? i : first;
    }
    g4t_checks++;
    if ((bad == 0) == break_mode) g4t_failures++;
    printf("  %-22s %s  (%d ids)\n", what,
           break_mode ? (bad ? "ok (caught)" : "FAIL (a perturbed reference passed)")
           : bad      ? "FAIL"
                      : "ok",
           n);
    if (bad && !break_mode)
        printf("    %d wrong; first [%d] got %d want %d\n", bad, first, got[first], want[first]);
}

// --- host data --------------------------------------------------------------------------------
static float *rnd(unsigned long long *s, size_t n, float lo, float hi) {
    return g4t_rand_f16(s, n, lo, hi);
}
static uint16_t *f16_bits(const float *x, size_t n) {
    return g4t_f16_bits(x, n);
}
static float *zeros(size_t n) {
    return g4_calloc(n ? n : 1, sizeof(float));
}
static float *dup(const float *x, size_t n) {
    float *d = g4_malloc(sizeof(float) * (n ? n : 1));
    memcpy(d, x, sizeof(float) * n);
    return d;
}
// The value a backend with activations of type t holds for x (f16 activations round).
static float act_round(float x) {
    return be->act_type == G4_F16 ? g4_round_f16(x) : x;
}
static float kv_round(float x) {
    return be->kv_type == G4_F16 ? g4_round_f16(x) : x;
}

// --- backend buffers between guard zones (tests/backend_buf.h) -------------------------------
typedef g4t_bbuf tbuf;

static void *be_alloc(size_t bytes) {
    const uint64_t before = be->alloc_count(be);
    void *p = be->alloc(be, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "%s: %s: out of memory for %zu bytes\n", NAME, be->name, bytes);
        exit(2);
    }
    CHECK_MSG(be->alloc_count(be) > before, "%s: alloc_count did not count an allocation",
              be->name);
    called("alloc"), called("alloc_count");
    return p;
}

// A [rows, cols] buffer of type t, poisoned, between guards.
static tbuf tb_new(g4_type t, int rows, int cols) {
    const uint64_t before = be->alloc_count(be);
    tbuf d = g4t_bbuf_new(be, t, rows, cols, 0);
    CHECK_MSG(be->alloc_count(be) > before, "%s: alloc_count did not count an allocation",
              be->name);
    called("alloc"), called("alloc_count"), called("upload"), called("sync");
    return d;
}
// A buffer of type t holding x (converted), or the raw I32 values v.
static tbuf tb_from(g4_type t, int rows, int cols, const float *x) {
    tbuf d = tb_new(t, rows, cols);
    g4t_bbuf_set(&d, x);
    return d;
}
static tbuf tb_i32(int rows, int cols, const int32_t *v) {
    tbuf d = tb_new(G4_I32, rows, cols);
    g4t_bbuf_set_raw(&d, v);
    return d;
}
// The buffer's values as floats (a new array).
static float *tb_get(const tbuf *d) {
    called("download");
    return g4t_bbuf_get(d);
}
static int tb_guards_ok(const tbuf *d, const char *what) {
    return g4t_bbuf_guards_ok(d, what);
}
static void tb_free(tbuf *d) {
    if (d->base) called("free");
    g4t_bbuf_free(d);
}
// Raw bytes placed in backend memory (weights, tables, frequencies, parameters).
static void *be_copy(const void *host, size_t bytes) {
    void *p = be_alloc(bytes);
    be->upload(be, p, host, bytes);
    return p;
}

// --- the naive implementations (double) ---------------------------------------------------------
static double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}
static double sigmoid(double x) {
    return 1.0 / (1.0 + exp(-x));
}

// y[T, out] (+)= x[T, in] @ W[in, out] (+ bias), W given as floats.
static void n_matmul(float *y, const float *x, const float *W, const float *bias, int T, int in,
                     int out, int accumulate) {
    for (int t = 0; t < T; t++)
        for (int o = 0; o < out; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int i = 0; i < in; i++)
                s += (double)x[(size_t)t * in + i] * W[(size_t)i * out + o];
            y[(size_t)t * out + o] = (float)(accumulate ? y[(size_t)t * out + o] + s : s);
        }
}

// x / sqrt(mean(x^2) + eps) * w over groups of `group` (w floats or NULL), into y.
static void n_rmsnorm(float *y, const float *x, const float *w, int rows, int cols, int group,
                      float eps) {
    for (int r = 0; r < rows; r++)
        for (int g = 0; g < cols / group; g++) {
            const float *xg = x + (size_t)r * cols + (size_t)g * group;
            double ss = 0;
            for (int i = 0; i < group; i++) ss += (double)xg[i] * xg[i];
            const double inv = 1.0 / sqrt(ss / group + eps);
            for (int i = 0; i < group; i++)
                y[(size_t)r * cols + (size_t)g * group + i] =
                    (float)(xg[i] * inv * (w ? w[i] : 1.0));
        }
}

// Split-half RoPE of one head vector v[hd] at position p (angle: the fp32 product, as HF).
static void n_rope_head(float *v, int hd, int p, const float *inv) {
    for (int j = 0; j < hd / 2; j++) {
        const double a = (double)((float)p * inv[j]), x0 = v[j], x1 = v[j + hd / 2];
        v[j] = (float)(x0 * cos(a) - x1 * sin(a));
        v[j + hd / 2] = (float)(x1 * cos(a) + x0 * sin(a));
    }
}

// --- memory, conversion, graphs, mapped memory
// ----------------------------------------------------
static void case_memory(size_t bytes, unsigned long long seed) {
    if (!want_case("memory", "bytes=%zu", bytes)) return;
    unsigned long long s = seed;
    uint8_t *h = g4_malloc(bytes + 1), *back = g4_malloc(bytes + 1);
    for (size_t i = 0; i < bytes; i++) h[i] = (uint8_t)g4t_rand_u64(&s);
    void *p = be_copy(h, bytes);
    be->sync(be);
    be->download(be, back, p, bytes);
    if (break_mode) h[bytes / 2] ^= 1;
    const int same = memcmp(h, back, bytes) == 0;
    case_reports++;
    g4t_checks++;
    if (same == break_mode) g4t_failures++;
    printf("  %-22s %s\n", "bytes back",
           break_mode ? (same ? "FAIL (a perturbed reference passed)" : "ok (caught)")
           : same     ? "ok"
                      : "FAIL");
    be->free(be, p);
    called("free"), called("download"), called("upload"), called("sync");
    free(h), free(back);
}

static void case_convert(g4_type from, g4_type to, int rows, int cols, unsigned long long seed) {
    if (!want_case("convert", "%s -> %s [%d, %d]", g4_type_name(from), g4_type_name(to), rows,
                   cols))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    // f32 sources: values that are not fp16-representable, so the rounding is what is checked
    float *x = g4_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        x[i] = g4t_rand_uniform(&s, -300, 300);
        if (from == G4_F16) x[i] = g4_round_f16(x[i]);
        if (from == G4_BF16) x[i] = g4_bf16_to_f32(g4_bf16_round(x[i]));
    }
    float *want = g4_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        want[i] = to == G4_F16    ? g4_f16_to_f32(g4_f32_to_f16(x[i]))
                  : to == G4_BF16 ? g4_bf16_to_f32(g4_bf16_round(x[i]))
                                  : x[i];
    tbuf dx = tb_from(from, rows, cols, x), dy = tb_new(to, rows, cols);
    be->convert(be, &dy.b, &dx.b);
    float *got = tb_get(&dy);
    report("y vs rounding", got, want, n, &TOL_EXACT, tb_guards_ok(&dy, "y"), 0);
    PERF("convert", be->convert(be, &dy.b, &dx.b));
    tb_free(&dx), tb_free(&dy);
    free(x), free(want), free(got);
}

// A graph of two scale calls, replayed twice: x * s^4.
static void case_graph(int rows, int cols, unsigned long long seed) {
    if (!be->graph_begin) return;
    if (!want_case("graph", "scale x2 captured, replayed x2 [%d, %d]", rows, cols)) return;
    called("graph_begin"), called("graph_end"), called("graph_launch"), called("graph_free");
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -2, 2), *want = g4_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        for (int k = 0; k < 4; k++) v = act_round((float)(v * 0.5));
        want[i] = (float)v;
    }
    tbuf dx = tb_from(be->act_type, rows, cols, x);
    be->sync(be);
    be->graph_begin(be);
    be->scale(be, &dx.b, 0.5f);
    be->scale(be, &dx.b, 0.5f);
    void *g = be->graph_end(be);
    be->graph_launch(be, g);
    be->graph_launch(be, g);
    float *got = tb_get(&dx);
    report("x vs x * 0.5^4", got, want, n, &TOL_EXACT, tb_guards_ok(&dx, "x"), 0);
    PERF("graph_launch", be->graph_launch(be, g));
    be->graph_free(be, g);
    tb_free(&dx);
    free(x), free(want), free(got);
}

// --- linear algebra
// ------------------------------------------------------------------------------- A linear weight
// in host memory: fp16 [in, out] or MatMulNBits Q4 (block 32, layout of quant/linear.h), its float
// values W[in, out] in *Wf (decoded here from the layout's description), optional bias.
typedef struct {
    g4_linear l;
    void *w, *scales, *zp, *bias;
    float *Wf, *biasf;
} host_linear;

static host_linear make_linear(unsigned long long *s, g4_weight_kind kind, int in, int out,
                               int bias) {
    host_linear h;
    memset(&h, 0, sizeof h);
    h.Wf = g4_malloc(sizeof(float) * (size_t)in * out);
    h.l.kind = kind, h.l.in = in, h.l.out = out;
    if (kind == G4_W_F16) {
        float *w = rnd(s, (size_t)in * out, -0.1f, 0.1f);
        h.w = f16_bits(w, (size_t)in * out);
        memcpy(h.Wf, w, sizeof(float) * (size_t)in * out);
        free(w);
    } else {
        const int B = 32, kb = in / B, zrow = (kb + 1) / 2;
        uint8_t *q = g4_malloc((size_t)out * kb * (B / 2)), *zp = g4_malloc((size_t)out * zrow);
        uint16_t *sc = g4_malloc(2 * (size_t)out * kb);
        for (size_t i = 0; i < (size_t)out * kb * (B / 2); i++) q[i] = (uint8_t)g4t_rand_u64(s);
        for (size_t i = 0; i < (size_t)out * zrow; i++) zp[i] = (uint8_t)g4t_rand_u64(s);
        for (size_t i = 0; i < (size_t)out * kb; i++)
            sc[i] = g4_f32_to_f16(g4t_rand_uniform(s, 0.002f, 0.02f));
        for (int n = 0; n < out; n++)
            for (int k = 0; k < in; k++) {
                const int b = k / B, e = k % B;
                const uint8_t qb = q[((size_t)n * kb + b) * (B / 2) + e / 2];
                const int v = e % 2 ? qb >> 4 : qb & 15;
                const uint8_t zb = zp[(size_t)n * zrow + b / 2];
                const int z = b % 2 ? zb >> 4 : zb & 15;
                // MatMulNBits dequantizes B into A's type (T1): on a backend whose
                // activations are fp16 the weight fed to the product is fp16((q - zp) * scale),
                // one rounding, as onnxruntime's fp16 path and ours compute it.
                const float wv = (float)((v - z) * (double)g4_f16_to_f32(sc[(size_t)n * kb + b]));
                h.Wf[(size_t)k * out + n] = act_round(wv);
            }
        h.w = q, h.scales = sc, h.zp = zp;
        h.l.block = B, h.l.scales = sc, h.l.zp = zp;
    }
    h.l.w = h.w;
    if (bias) {
        h.biasf = rnd(s, (size_t)out, -0.5f, 0.5f);
        h.bias = f16_bits(h.biasf, (size_t)out);
        h.l.bias = h.bias;
    }
    return h;
}
static void free_linear(host_linear *h) {
    free(h->w), free(h->scales), free(h->zp), free(h->bias), free(h->Wf), free(h->biasf);
}
// The backend's copy of a host linear (prepare_linear places it; the CPU uses it in place).
static g4_linear be_linear(const g4_linear *host) {
    g4_linear d = *host;
    if (be->prepare_linear) {
        called("prepare_linear");
        if (be->prepare_linear(be, &d)) {
            fprintf(stderr, "%s: prepare_linear: %s\n", NAME, g4_error());
            exit(2);
        }
    }
    return d;
}
static void be_linear_free(g4_linear *d) {
    if (be->release_linear) be->release_linear(be, d), called("release_linear");
}

static float clampf(float x, float lo, float hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

// y = x @ W (+ bias), y f32 or act, accumulate or not; clip: a ClippableLinear
// (clamp(clamp(x, +-1.5) @ W, +-0.5)).
static void case_linear(g4_weight_kind kind, int T, int in, int out, int bias, int y_f32,
                        int accumulate, int clip, unsigned long long seed) {
    if (!want_case("linear", "%s T=%d in=%d out=%d bias=%d y=%s acc=%d clip=%d",
                   kind == G4_W_Q4 ? "q4" : "f16", T, in, out, bias, y_f32 ? "f32" : "act",
                   accumulate, clip))
        return;
    unsigned long long s = seed;
    host_linear h = make_linear(&s, kind, in, out, bias);
    if (clip)
        h.l.clipped = 1, h.l.in_lo = -1.5f, h.l.in_hi = 1.5f, h.l.out_lo = -0.5f, h.l.out_hi = 0.5f;
    float *x = rnd(&s, (size_t)T * in, -3, 3), *y0 = rnd(&s, (size_t)T * out, -1, 1);
    float *xc = dup(x, (size_t)T * in), *want = dup(y0, (size_t)T * out);
    if (clip)
        for (size_t i = 0; i < (size_t)T * in; i++) xc[i] = clampf(xc[i], -1.5f, 1.5f);
    n_matmul(want, xc, h.Wf, h.biasf, T, in, out, accumulate);
    const g4_type yt = y_f32 ? G4_F32 : be->act_type;
    if (clip)
        for (size_t i = 0; i < (size_t)T * out; i++) want[i] = clampf(want[i], -0.5f, 0.5f);
    g4_linear l = be_linear(&h.l);
    tbuf dx = tb_from(be->act_type, T, in, x);
    tbuf dy = accumulate ? tb_from(yt, T, out, y0) : tb_new(yt, T, out);
    be->linear(be, &dy.b, &dx.b, &l, accumulate);
    float *got = tb_get(&dy), *x_after = tb_get(&dx);
    report("y vs naive", got, want, (size_t)T * out, &TOL_DOT, tb_guards_ok(&dy, "y"), 0);
    CHECK_MSG(memcmp(x_after, x, sizeof(float) * (size_t)T * in) == 0, "linear changed x");
    PERF("linear", be->linear(be, &dy.b, &dx.b, &l, 0));
    be_linear_free(&l);
    tb_free(&dx), tb_free(&dy);
    free_linear(&h);
    free(x), free(y0), free(xc), free(want), free(got), free(x_after);
}

static void case_linear_gelu_mul(g4_weight_kind kind, int T, int in, int F,
                                 unsigned long long seed) {
    if (!want_case("linear_gelu_mul", "%s T=%d in=%d F=%d", kind == G4_W_Q4 ? "q4" : "f16", T, in,
                   F))
        return;
    unsigned long long s = seed;
    host_linear g = make_linear(&s, kind, in, F, 0), u = make_linear(&s, kind, in, F, 0);
    float *x = rnd(&s, (size_t)T * in, -3, 3);
    float *a = zeros((size_t)T * F), *b = zeros((size_t)T * F), *want = zeros((size_t)T * F);
    n_matmul(a, x, g.Wf, NULL, T, in, F, 0);
    n_matmul(b, x, u.Wf, NULL, T, in, F, 0);
    for (size_t i = 0; i < (size_t)T * F; i++) want[i] = (float)(gelu_tanh(a[i]) * b[i]);
    g4_linear lg = be_linear(&g.l), lu = be_linear(&u.l);
    tbuf dx = tb_from(be->act_type, T, in, x), dy = tb_new(be->act_type, T, F);
    be->linear_gelu_mul(be, &dy.b, &dx.b, &lg, &lu);
    float *got = tb_get(&dy);
    report("y vs naive", got, want, (size_t)T * F, &TOL_GELU_DOT, tb_guards_ok(&dy, "y"), 0);
    PERF("linear_gelu_mul", be->linear_gelu_mul(be, &dy.b, &dx.b, &lg, &lu));
    be_linear_free(&lg), be_linear_free(&lu);
    tb_free(&dx), tb_free(&dy);
    free_linear(&g), free_linear(&u);
    free(x), free(a), free(b), free(want), free(got);
}

// --- norms and elementwise
// ------------------------------------------------------------------------
static void case_rmsnorm(int rows, int cols, int group, int weighted, int in_place,
                         unsigned long long seed) {
    if (!want_case("rmsnorm", "rows=%d cols=%d group=%d weighted=%d in_place=%d", rows, cols, group,
                   weighted, in_place))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -3, 3), *w = rnd(&s, (size_t)group, 0.5f, 2.0f), *want = zeros(n);
    n_rmsnorm(want, x, weighted ? w : NULL, rows, cols, group, 1e-6f);
    uint16_t *wb = f16_bits(w, (size_t)group);
    void *dw = be_copy(wb, 2 * (size_t)group);
    tbuf dx = tb_from(be->act_type, rows, cols, x),
         dy = in_place ? dx : tb_new(be->act_type, rows, cols);
    be->rmsnorm(be, &dy.b, &dx.b, weighted ? dw : NULL, group, 1e-6f);
    float *got = tb_get(&dy);
    report("y vs naive", got, want, n, &TOL_REDUCE, tb_guards_ok(&dy, "y"), 0);
    PERF("rmsnorm", be->rmsnorm(be, &dy.b, &dx.b, weighted ? dw : NULL, group, 1e-6f));
    be->free(be, dw);
    tb_free(&dx);
    if (!in_place) tb_free(&dy);
    free(x), free(w), free(wb), free(want), free(got);
}

// h = (h + rmsnorm(x) w) * scale (h f32); next: 0 none (add_rmsnorm), 1 norm, 2 copy
// (add_rmsnorm_next, next_w NULL when next == 3: a norm without scale).
static void case_add_rmsnorm(int rows, int cols, int next, int with_scale,
                             unsigned long long seed) {
    static const char *nn[] = {"none", "norm", "copy", "norm-unweighted"};
    if (!want_case(next ? "add_rmsnorm_next" : "add_rmsnorm", "rows=%d cols=%d next=%s scale=%d",
                   rows, cols, nn[next], with_scale))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -3, 3), *h = rnd(&s, n, -20, 20), *w = rnd(&s, (size_t)cols, 0.5f, 2.0f);
    float *w2 = rnd(&s, (size_t)cols, 0.5f, 2.0f), *nx = zeros(n), *want = dup(h, n);
    const float sc = with_scale ? g4_round_f16(0.4434f) : 1.0f;
    n_rmsnorm(nx, x, w, rows, cols, cols, 1e-6f);
    for (size_t i = 0; i < n; i++) want[i] = (float)(((double)h[i] + nx[i]) * sc);
    float *want_next = zeros(n);
    if (next == 1 || next == 3)
        n_rmsnorm(want_next, want, next == 1 ? w2 : NULL, rows, cols, cols, 1e-6f);
    uint16_t *wb = f16_bits(w, (size_t)cols), *w2b = f16_bits(w2, (size_t)cols),
             scb = g4_f32_to_f16(sc);
    void *dw = be_copy(wb, 2 * (size_t)cols), *dw2 = be_copy(w2b, 2 * (size_t)cols),
         *dsc = be_copy(&scb, 2);
    tbuf dx = tb_from(be->act_type, rows, cols, x), dh = tb_from(G4_F32, rows, cols, h);
    tbuf dn = tb_new(be->act_type, rows, cols);
    if (next)
        be->add_rmsnorm_next(be, &dh.b, &dx.b, dw, 1e-6f, with_scale ? dsc : NULL, &dn.b, next != 2,
                             next == 1 ? dw2 : NULL);
    else
        be->add_rmsnorm(be, &dh.b, &dx.b, dw, 1e-6f, with_scale ? dsc : NULL);
    float *got = tb_get(&dh);
    report("h vs naive", got, want, n, &TOL_F32OUT, tb_guards_ok(&dh, "h"), 0);
    if (next == 2) // a copy of the backend's own new h, in next's type
        for (size_t i = 0; i < n; i++) want_next[i] = act_round(got[i]);
    if (next) {
        float *gn = tb_get(&dn);
        report("next vs naive", gn, want_next, n, next == 2 ? &TOL_EXACT : &TOL_REDUCE,
               tb_guards_ok(&dn, "next"), 0);
        free(gn);
    }
    if (next)
        PERF("add_rmsnorm_next",
             be->add_rmsnorm_next(be, &dh.b, &dx.b, dw, 1e-6f, dsc, &dn.b, 1, dw2));
    else
        PERF("add_rmsnorm", be->add_rmsnorm(be, &dh.b, &dx.b, dw, 1e-6f, dsc));
    be->free(be, dw), be->free(be, dw2), be->free(be, dsc);
    tb_free(&dx), tb_free(&dh), tb_free(&dn);
    free(x), free(h), free(w), free(w2), free(nx), free(want), free(want_next), free(wb), free(w2b),
        free(got);
}

// add_norm_linear (issue 30's fused add-norm + linear): h_out = (h_in + rmsnorm(r) w) * scale,
// x = rmsnorm(h_out) w2 (next 1), h_out (next 0), then y = x @ W, gelu(x @ Wg) * (x @ Wu)
// (gated 1) or gelu(x @ W) * m[:, N : 2N] with m [T, 3N] (gated 2: the PLE gate's multiplier).
// Each output against the naive result of its own inputs: h_out and x from h_in and r, y from
// the backend's own x (so a rounding of x does not count twice); h_in and r unchanged.
static void case_add_norm_linear(g4_weight_kind kind, int T, int in, int out, int gated, int next,
                                 int with_scale, unsigned long long seed) {
    if (!want_case("add_norm_linear", "%s T=%d in=%d out=%d gated=%d next=%s scale=%d",
                   kind == G4_W_Q4 ? "q4" : "f16", T, in, out, gated, next ? "norm" : "copy",
                   with_scale))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)T * in, ny = (size_t)T * out;
    host_linear g = make_linear(&s, kind, in, out, 0);
    host_linear u = gated == 1 ? make_linear(&s, kind, in, out, 0) : (host_linear){0};
    float *mul = gated == 2 ? rnd(&s, ny * 3, -2, 2) : NULL;
    float *r = rnd(&s, n, -3, 3), *h = rnd(&s, n, -20, 20), *w = rnd(&s, (size_t)in, 0.5f, 2.0f);
    float *w2 = rnd(&s, (size_t)in, 0.5f, 2.0f), *nr = zeros(n), *want_h = dup(h, n);
    const float sc = with_scale ? g4_round_f16(0.4434f) : 1.0f;
    n_rmsnorm(nr, r, w, T, in, in, 1e-6f);
    for (size_t i = 0; i < n; i++) want_h[i] = (float)(((double)h[i] + nr[i]) * sc);
    float *want_x = dup(want_h, n);
    if (next) n_rmsnorm(want_x, want_h, w2, T, in, in, 1e-6f);
    uint16_t *wb = f16_bits(w, (size_t)in), *w2b = f16_bits(w2, (size_t)in),
             scb = g4_f32_to_f16(sc);
    void *dw = be_copy(wb, 2 * (size_t)in), *dw2 = be_copy(w2b, 2 * (size_t)in),
         *dsc = be_copy(&scb, 2);
    g4_linear lg = be_linear(&g.l), lu = gated == 1 ? be_linear(&u.l) : (g4_linear){0};
    tbuf dm = mul ? tb_from(be->act_type, T, 3 * out, mul) : tb_new(be->act_type, 1, 1);
    tbuf dhi = tb_from(G4_F32, T, in, h), dr = tb_from(be->act_type, T, in, r);
    tbuf dho = tb_new(G4_F32, T, in), dx = tb_new(be->act_type, T, in);
    tbuf dy = tb_new(be->act_type, T, out);
    const g4_add_norm a = {&dhi.b, &dho.b,           &dr.b, dw, with_scale ? dsc : NULL, 1e-6f,
                           next,   next ? dw2 : NULL};
    be->add_norm_linear(be, &a, &dx.b, &dy.b, &lg, gated == 1 ? &lu : NULL, mul ? &dm.b : NULL,
                        out);
    float *got_h = tb_get(&dho), *got_x = tb_get(&dx), *got_y = tb_get(&dy);
    float *hi_after = tb_get(&dhi), *r_after = tb_get(&dr);
    report("h_out vs naive", got_h, want_h, n, &TOL_F32OUT, tb_guards_ok(&dho, "h_out"), 0);
    if (!next) // a copy of the backend's own h_out, in x's type
        for (size_t i = 0; i < n; i++) want_x[i] = act_round(got_h[i]);
    report("x vs naive", got_x, want_x, n, next ? &TOL_REDUCE : &TOL_EXACT, tb_guards_ok(&dx, "x"),
           0);
    float *a0 = zeros(ny), *want_y = zeros(ny);
    n_matmul(a0, got_x, g.Wf, NULL, T, in, out, 0);
    if (gated == 2) {
        for (size_t i = 0; i < ny; i++) {
            const size_t row = i / out, col = i % out;
            want_y[i] =
                (float)(gelu_tanh(act_round(a0[i])) * act_round(mul[row * 3 * out + out + col]));
        }
    } else if (gated) {
        float *b0 = zeros(ny);
        n_matmul(b0, got_x, u.Wf, NULL, T, in, out, 0);
        for (size_t i = 0; i < ny; i++) want_y[i] = (float)(gelu_tanh(a0[i]) * b0[i]);
        free(b0);
    } else {
        memcpy(want_y, a0, sizeof(float) * ny);
    }
    report("y vs naive", got_y, want_y, ny, gated ? &TOL_GELU_DOT : &TOL_DOT,
           tb_guards_ok(&dy, "y"), 0);
    float *h_act = zeros(n); // the inputs as the backend holds them
    for (size_t i = 0; i < n; i++) h_act[i] = act_round(r[i]);
    CHECK_MSG(memcmp(hi_after, h, sizeof(float) * n) == 0, "add_norm_linear changed h_in");
    CHECK_MSG(memcmp(r_after, h_act, sizeof(float) * n) == 0, "add_norm_linear changed r");
    PERF("add_norm_linear", be->add_norm_linear(be, &a, &dx.b, &dy.b, &lg, gated == 1 ? &lu : NULL,
                                                mul ? &dm.b : NULL, out));
    be->free(be, dw), be->free(be, dw2), be->free(be, dsc);
    be_linear_free(&lg);
    if (gated == 1) be_linear_free(&lu), free_linear(&u);
    tb_free(&dm);
    free(mul);
    free_linear(&g);
    tb_free(&dhi), tb_free(&dr), tb_free(&dho), tb_free(&dx), tb_free(&dy);
    free(r), free(h), free(w), free(w2), free(nr), free(want_h), free(want_x), free(wb), free(w2b),
        free(got_h), free(got_x), free(got_y), free(hi_after), free(r_after), free(a0),
        free(want_y), free(h_act);
}

// A two-output op run by run(ctx) again: twice eagerly and, where the backend has graphs,
// captured once and replayed 3 times, its outputs o1 and o2 poisoned (NaN) before each run; each
// run's outputs bit-identical to the first run's (w1, w2): a fused kernel's counters, clusters
// and workspaces leave nothing behind that changes the next launch.
static void check_repeat(void (*run)(void *), void *ctx, tbuf *o1, const char *n1, const float *w1,
                         tbuf *o2, const char *n2, const float *w2) {
    const size_t k1 = (size_t)o1->b.rows * o1->b.cols, k2 = (size_t)o2->b.rows * o2->b.cols;
    float *nan1 = zeros(k1), *nan2 = zeros(k2);
    for (size_t i = 0; i < k1; i++) nan1[i] = NAN;
    for (size_t i = 0; i < k2; i++) nan2[i] = NAN;
    char what[64];
    void *gr = NULL;
    for (int k = 0; k < 5; k++) { // runs 2, 3 eager; then replays 1..3 of one capture
        const int replay = k >= 2;
        if (replay && !be->graph_begin) break;
        g4t_bbuf_set(o1, nan1), g4t_bbuf_set(o2, nan2);
        if (k == 2) {
            be->graph_begin(be);
            run(ctx);
            gr = be->graph_end(be);
            called("graph_begin"), called("graph_end"), called("graph_launch"),
                called("graph_free");
        }
        if (replay)
            be->graph_launch(be, gr);
        else
            run(ctx);
        float *r1 = tb_get(o1), *r2 = tb_get(o2);
        snprintf(what, sizeof what, replay ? "%s, replay %d == run 1" : "%s, run %d == run 1", n1,
                 replay ? k - 1 : k + 2);
        report(what, r1, w1, k1, &TOL_EXACT, tb_guards_ok(o1, n1), 0);
        snprintf(what, sizeof what, replay ? "%s, replay %d == run 1" : "%s, run %d == run 1", n2,
                 replay ? k - 1 : k + 2);
        report(what, r2, w2, k2, &TOL_EXACT, tb_guards_ok(o2, n2), 0);
        free(r1), free(r2);
    }
    if (gr) be->graph_free(be, gr);
    free(nan1), free(nan2);
}

typedef struct {
    const g4_add_norm *a;
    g4_buf *x, *mlp, *y;
    const g4_linear *wg, *wu, *wd;
} mlp_call;
static void run_mlp_block(void *ctx) {
    mlp_call *c = ctx;
    be->mlp_block(be, c->a, c->x, c->mlp, c->y, c->wg, c->wu, c->wd);
}

typedef struct {
    const g4_add_norm *a;
    g4_buf *x, *pg, *y;
    const g4_linear *wg, *wp;
    const g4_buf *ple;
    int col0;
} ple_call;
static void run_ple_block(void *ctx) {
    ple_call *c = ctx;
    be->ple_block(be, c->a, c->x, c->pg, c->y, c->wg, c->wp, c->ple, c->col0);
}

// The pending add-norm outputs of a block op (mlp_block, ple_block): h_out and x against the
// naive ones when it ran, else x untouched (its activation-rounded input).
static void check_block_prologue(int norm, tbuf *dho, tbuf *dx, const float *got_x,
                                 const float *want_h, const float *want_x, const float *x, size_t n,
                                 const char *op) {
    if (norm) {
        float *got_h = tb_get(dho);
        report("h_out vs naive", got_h, want_h, n, &TOL_F32OUT, tb_guards_ok(dho, "h_out"), 0);
        report("x vs naive", got_x, want_x, n, &TOL_REDUCE, tb_guards_ok(dx, "x"), 0);
        free(got_h);
    } else {
        float *x_act = zeros(n);
        for (size_t i = 0; i < n; i++) x_act[i] = act_round(x[i]);
        CHECK_MSG(memcmp(got_x, x_act, sizeof(float) * n) == 0, "%s changed x", op);
        free(x_act);
    }
}

// mlp_block (issue 30 stage 2; CUDA: one persistent launch for one row of Q4 weights): with
// norm, the add-norm of add_norm_linear first (h_out, x; next 1: the MLP's pre-FF norm);
// mlp = gelu(x Wg) * (x Wu), y = mlp Wd. Each output against the naive result of the
// backend's own input (x, then mlp), as add_norm_linear's case. alias: y is r's buffer (the
// engine writes the block's output over the attention output its add reads). repeat: the op
// again twice with y and mlp poisoned, and, where the backend has graphs, captured once and
// replayed 3 times: y and mlp bit-identical every time (its counters reset themselves).
static void case_mlp_block(g4_weight_kind kind, int T, int H, int F, int norm, int alias,
                           int repeat, unsigned long long seed) {
    if (!want_case("mlp_block", "%s T=%d H=%d F=%d norm=%d y_is_r=%d repeat=%d",
                   kind == G4_W_Q4 ? "q4" : "f16", T, H, F, norm, alias, repeat))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)T * H, nm = (size_t)T * F;
    host_linear g = make_linear(&s, kind, H, F, 0), u = make_linear(&s, kind, H, F, 0);
    host_linear d = make_linear(&s, kind, F, H, 0);
    float *r = rnd(&s, n, -3, 3), *h = rnd(&s, n, -20, 20), *w = rnd(&s, (size_t)H, 0.5f, 2.0f);
    // x of rms ~12 / sqrt(H) (through the pre-FF norm's weight, or x itself): gate and up (Q4
    // weights of rms ~0.07) are then O(1) at every H, so mlp, the down linear's input, stays
    // within the dot tolerance's premise (|input| <= 3) and far above its atol
    const float c = 12.0f / sqrtf((float)H);
    float *w2 = rnd(&s, (size_t)H, 0.5f * c, 1.5f * c), *x = rnd(&s, n, -1.7f * c, 1.7f * c);
    float *nr = zeros(n);
    float *want_h = dup(h, n);
    n_rmsnorm(nr, r, w, T, H, H, 1e-6f);
    for (size_t i = 0; i < n; i++) want_h[i] = (float)((double)h[i] + nr[i]);
    float *want_x = zeros(n);
    if (norm) n_rmsnorm(want_x, want_h, w2, T, H, H, 1e-6f);
    uint16_t *wb = f16_bits(w, (size_t)H), *w2b = f16_bits(w2, (size_t)H);
    void *dw = be_copy(wb, 2 * (size_t)H), *dw2 = be_copy(w2b, 2 * (size_t)H);
    g4_linear lg = be_linear(&g.l), lu = be_linear(&u.l), ld = be_linear(&d.l);
    tbuf dhi = tb_from(G4_F32, T, H, h), dr = tb_from(be->act_type, T, H, r);
    tbuf dho = tb_new(G4_F32, T, H);
    tbuf dx = norm ? tb_new(be->act_type, T, H) : tb_from(be->act_type, T, H, x);
    tbuf dm = tb_new(be->act_type, T, F), dy = alias ? dr : tb_new(be->act_type, T, H);
    const g4_add_norm a = {&dhi.b, &dho.b, &dr.b, dw, NULL, 1e-6f, 1, dw2};
    const g4_add_norm *pa = norm ? &a : NULL;
    be->mlp_block(be, pa, &dx.b, &dm.b, &dy.b, &lg, &lu, &ld);
    float *got_x = tb_get(&dx), *got_m = tb_get(&dm), *got_y = tb_get(&dy);
    check_block_prologue(norm, &dho, &dx, got_x, want_h, want_x, x, n, "mlp_block");
    float *a0 = zeros(nm), *b0 = zeros(nm), *want_m = zeros(nm), *want_y = zeros(n);
    n_matmul(a0, got_x, g.Wf, NULL, T, H, F, 0);
    n_matmul(b0, got_x, u.Wf, NULL, T, H, F, 0);
    for (size_t i = 0; i < nm; i++) want_m[i] = (float)(gelu_tanh(a0[i]) * b0[i]);
    double rm = 0, ry = 0;
    for (size_t i = 0; i < nm; i++) rm += (double)want_m[i] * want_m[i];
    report("mlp vs naive", got_m, want_m, nm, &TOL_GELU_DOT, tb_guards_ok(&dm, "mlp"), 0);
    n_matmul(want_y, got_m, d.Wf, NULL, T, F, H, 0);
    for (size_t i = 0; i < n; i++) ry += (double)want_y[i] * want_y[i];
    report("y vs naive", got_y, want_y, n, &TOL_DOT, tb_guards_ok(&dy, "y"), 0);
    printf("  (rms of the naive mlp %.3g, y %.3g)\n", sqrt(rm / nm), sqrt(ry / n));
    if (!alias) {
        float *hi_after = tb_get(&dhi), *r_after = tb_get(&dr), *r_act = zeros(n);
        for (size_t i = 0; i < n; i++) r_act[i] = act_round(r[i]);
        CHECK_MSG(memcmp(hi_after, h, sizeof(float) * n) == 0, "mlp_block changed h_in");
        CHECK_MSG(memcmp(r_after, r_act, sizeof(float) * n) == 0, "mlp_block changed r");
        free(hi_after), free(r_after), free(r_act);
    }
    if (repeat) { // (alias: the op would read its own output as r; not repeated)
        mlp_call call = {pa, &dx.b, &dm.b, &dy.b, &lg, &lu, &ld};
        check_repeat(run_mlp_block, &call, &dy, "y", got_y, &dm, "mlp", got_m);
    }
    if (!alias) PERF("mlp_block", be->mlp_block(be, pa, &dx.b, &dm.b, &dy.b, &lg, &lu, &ld));
    be->free(be, dw), be->free(be, dw2);
    be_linear_free(&lg), be_linear_free(&lu), be_linear_free(&ld);
    tb_free(&dhi), tb_free(&dr), tb_free(&dho), tb_free(&dx), tb_free(&dm);
    if (!alias) tb_free(&dy);
    free_linear(&g), free_linear(&u), free_linear(&d);
    free(r), free(h), free(w), free(w2), free(x), free(nr), free(want_h), free(want_x), free(wb),
        free(w2b), free(got_x), free(got_m), free(got_y), free(a0), free(b0), free(want_m),
        free(want_y);
}

// y = gelu_tanh(a) * b[:, b_col0 : b_col0 + n] (b ldb wide).
static void case_gelu_mul(int T, int n, int ldb, int b_col0, unsigned long long seed) {
    if (!want_case("gelu_mul", "T=%d n=%d b_cols=%d b_col0=%d", T, n, ldb, b_col0)) return;
    unsigned long long s = seed;
    float *a = rnd(&s, (size_t)T * n, -4, 4), *b = rnd(&s, (size_t)T * ldb, -2, 2);
    float *want = zeros((size_t)T * n);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++)
            want[(size_t)t * n + i] =
                (float)(gelu_tanh(a[(size_t)t * n + i]) * b[(size_t)t * ldb + b_col0 + i]);
    tbuf da = tb_from(be->act_type, T, n, a), db = tb_from(be->act_type, T, ldb, b),
         dy = tb_new(be->act_type, T, n);
    be->gelu_mul(be, &dy.b, &da.b, &db.b, b_col0);
    float *got = tb_get(&dy);
    report("y vs naive", got, want, (size_t)T * n, &TOL_ELEM, tb_guards_ok(&dy, "y"), 0);
    PERF("gelu_mul", be->gelu_mul(be, &dy.b, &da.b, &db.b, b_col0));
    tb_free(&da), tb_free(&db), tb_free(&dy);
    free(a), free(b), free(want), free(got);
}

static void case_scale(int rows, int cols, float sc, unsigned long long seed) {
    if (!want_case("scale", "rows=%d cols=%d s=%g", rows, cols, sc)) return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -3, 3), *want = zeros(n);
    for (size_t i = 0; i < n; i++) want[i] = (float)((double)x[i] * sc);
    tbuf dx = tb_from(be->act_type, rows, cols, x);
    be->scale(be, &dx.b, sc);
    float *got = tb_get(&dx);
    report("x vs naive", got, want, n, &TOL_ELEM, tb_guards_ok(&dx, "x"), 0);
    PERF("scale", be->scale(be, &dx.b, 1.0f));
    tb_free(&dx);
    free(x), free(want), free(got);
}

// y += x: y of the activation type, or the f32 residual stream += an activation.
static void case_add(int rows, int cols, int y_f32, unsigned long long seed) {
    if (!want_case("add", "rows=%d cols=%d y=%s", rows, cols, y_f32 ? "f32" : "act")) return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -3, 3), *y = rnd(&s, n, -20, 20), *want = zeros(n);
    for (size_t i = 0; i < n; i++) want[i] = (float)((double)y[i] + x[i]);
    tbuf dx = tb_from(be->act_type, rows, cols, x),
         dy = tb_from(y_f32 ? G4_F32 : be->act_type, rows, cols, y);
    be->add(be, &dy.b, &dx.b);
    float *got = tb_get(&dy);
    report("y vs naive", got, want, n, y_f32 ? &TOL_F32OUT : &TOL_ELEM, tb_guards_ok(&dy, "y"), 0);
    PERF("add", be->add(be, &dy.b, &dx.b));
    tb_free(&dx), tb_free(&dy);
    free(x), free(y), free(want), free(got);
}

// --- attention
// -------------------------------------------------------------------------------------- rope: 0
// default (theta 1e4, every pair), 1 proportional (theta 1e6, a quarter of the pairs).
static float *text_inv_freq(int hd, int rope) {
    float *inv = g4_malloc(sizeof(float) * (size_t)hd / 2);
    const double theta = rope ? 1e6 : 1e4;
    const int rotated = rope ? hd / 8 : hd / 2;
    for (int j = 0; j < hd / 2; j++)
        inv[j] = j < rotated ? (float)(1.0 / pow(theta, 2.0 * j / hd)) : 0.0f;
    return inv;
}

// The naive head preparation (ops.h qkv_prep) of T rows into wq, wk, wv: per-head RMSNorm (q and
// k with their weights, v without), then RoPE at pos[t] on q and k.
static void n_qkv_prep(float *wq, float *wk, float *wv, const float *q, const float *k,
                       const float *v, const float *qwf, const float *kwf, const int32_t *pos,
                       const float *inv, int T, int nh, int nkv, int hd) {
    const int qw = nh * hd, kw = nkv * hd;
    n_rmsnorm(wq, q, qwf, T, qw, hd, 1e-6f);
    n_rmsnorm(wk, k, kwf, T, kw, hd, 1e-6f);
    n_rmsnorm(wv, v, NULL, T, kw, hd, 1e-6f);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < nh; h++)
            n_rope_head(wq + (size_t)t * qw + (size_t)h * hd, hd, pos[t], inv);
        for (int h = 0; h < nkv; h++)
            n_rope_head(wk + (size_t)t * kw + (size_t)h * hd, hd, pos[t], inv);
    }
}

static void case_qkv_prep(int T, int nh, int nkv, int hd, int rope, int with_kv, int p0,
                          unsigned long long seed) {
    if (!want_case("qkv_prep", "T=%d heads=%d kv=%d hd=%d rope=%s kv_in=%d pos0=%d", T, nh, nkv, hd,
                   rope ? "proportional" : "default", with_kv, p0))
        return;
    unsigned long long s = seed;
    const int qw = nh * hd, kw = nkv * hd, cap = p0 + T + 3;
    float *q = rnd(&s, (size_t)T * qw, -2, 2), *k = rnd(&s, (size_t)T * kw, -2, 2),
          *v = rnd(&s, (size_t)T * kw, -2, 2);
    float *qwf = rnd(&s, (size_t)hd, 0.5f, 1.5f), *kwf = rnd(&s, (size_t)hd, 0.05f, 0.2f);
    float *inv = text_inv_freq(hd, rope);
    int32_t *pos = g4_malloc(sizeof(int32_t) * (size_t)T);
    for (int t = 0; t < T; t++) pos[t] = p0 + T - 1 - t; // out of order: rows land by pos[t]
    float *wq = zeros((size_t)T * qw), *wk = zeros((size_t)T * kw), *wv = zeros((size_t)T * kw);
    n_qkv_prep(wq, wk, wv, q, k, v, qwf, kwf, pos, inv, T, nh, nkv, hd);
    uint16_t *qwb = f16_bits(qwf, (size_t)hd), *kwb = f16_bits(kwf, (size_t)hd);
    void *dqw = be_copy(qwb, 2 * (size_t)hd), *dkw = be_copy(kwb, 2 * (size_t)hd),
         *dinv = be_copy(inv, sizeof(float) * (size_t)hd / 2);
    tbuf dq = tb_from(be->act_type, T, qw, q), dk = tb_from(be->act_type, T, kw, k),
         dv = tb_from(be->act_type, T, kw, v), dpos = tb_i32(T, 1, pos);
    tbuf dkc = tb_new(be->kv_type, cap, kw), dvc = tb_new(be->kv_type, cap, kw);
    be->qkv_prep(be, &dq.b, with_kv ? &dk.b : NULL, with_kv ? &dv.b : NULL, with_kv ? &dkc.b : NULL,
                 with_kv ? &dvc.b : NULL, dqw, dkw, &dpos.b, dinv, nh, nkv, hd, 1e-6f);
    float *gq = tb_get(&dq);
    report("q vs naive", gq, wq, (size_t)T * qw, &TOL_REDUCE, tb_guards_ok(&dq, "q"), 0);
    if (with_kv) {
        float *ck = tb_get(&dkc), *cv = tb_get(&dvc);
        float *gk = zeros((size_t)T * kw), *gv = zeros((size_t)T * kw);
        for (int t = 0; t < T; t++) {
            memcpy(gk + (size_t)t * kw, ck + (size_t)pos[t] * kw, sizeof(float) * kw);
            memcpy(gv + (size_t)t * kw, cv + (size_t)pos[t] * kw, sizeof(float) * kw);
        }
        int stray = 0; // cache rows other than pos[t] stay poisoned
        for (int r = 0; r < cap; r++) {
            if (r >= p0 && r < p0 + T) continue;
            for (int i = 0; i < kw; i++)
                stray += !isnan(ck[(size_t)r * kw + i]) || !isnan(cv[(size_t)r * kw + i]);
        }
        CHECK_MSG(stray == 0, "qkv_prep: %d cache values written outside rows pos[t]", stray);
        report("kcache[pos] vs naive", gk, wk, (size_t)T * kw, &TOL_REDUCE,
               tb_guards_ok(&dkc, "kcache"), 0);
        report("vcache[pos] vs naive", gv, wv, (size_t)T * kw, &TOL_REDUCE,
               tb_guards_ok(&dvc, "vcache"), 0);
        free(ck), free(cv), free(gk), free(gv);
    }
    PERF("qkv_prep", be->qkv_prep(be, &dq.b, with_kv ? &dk.b : NULL, with_kv ? &dv.b : NULL,
                                  with_kv ? &dkc.b : NULL, with_kv ? &dvc.b : NULL, dqw, dkw,
                                  &dpos.b, dinv, nh, nkv, hd, 1e-6f));
    be->free(be, dqw), be->free(be, dkw), be->free(be, dinv);
    tb_free(&dq), tb_free(&dk), tb_free(&dv), tb_free(&dpos), tb_free(&dkc), tb_free(&dvc);
    free(q), free(k), free(v), free(qwf), free(kwf), free(inv), free(pos), free(wq), free(wk),
        free(wv), free(qwb), free(kwb), free(gq);
}

// Causal (sliding when window > 0) attention over a cache of `cap` rows, queries at p0 + t.
static void case_attention(int T, int nh, int nkv, int hd, int window, int p0,
                           unsigned long long seed) {
    if (!want_case("attention", "T=%d heads=%d kv=%d hd=%d window=%d pos0=%d", T, nh, nkv, hd,
                   window, p0))
        return;
    unsigned long long s = seed;
    const int qw = nh * hd, kw = nkv * hd, cap = p0 + T;
    const float scale = 1.0f; // Gemma-4: q and k are normed, scaling 1
    float *q = rnd(&s, (size_t)T * qw, -0.5f, 0.5f), *kc = rnd(&s, (size_t)cap * kw, -0.5f, 0.5f),
          *vc = rnd(&s, (size_t)cap * kw, -1, 1), *want = zeros((size_t)T * qw);
    int32_t *pos = g4_malloc(sizeof(int32_t) * (size_t)T);
    for (int t = 0; t < T; t++) pos[t] = p0 + t;
    double *z = g4_malloc(sizeof(double) * (size_t)cap);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const int g = h / (nh / nkv);
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < cap; j++) {
                const int visible = j <= pos[t] && (window <= 0 || pos[t] - j < window);
                if (!visible) {
                    z[j] = -INFINITY;
                    continue;
                }
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)q[(size_t)t * qw + (size_t)h * hd + e] *
                         kc[(size_t)j * kw + (size_t)g * hd + e];
                z[j] = d * scale;
                if (z[j] > mx) mx = z[j];
            }
            for (int j = 0; j < cap; j++) sum += z[j] == -INFINITY ? 0 : exp(z[j] - mx);
            for (int e = 0; e < hd; e++) {
                double acc = 0;
                for (int j = 0; j < cap; j++)
                    if (z[j] != -INFINITY)
                        acc += exp(z[j] - mx) * vc[(size_t)j * kw + (size_t)g * hd + e];
                want[(size_t)t * qw + (size_t)h * hd + e] = (float)(acc / sum);
            }
        }
    tbuf dq = tb_from(be->act_type, T, qw, q), dkc = tb_from(be->kv_type, cap, kw, kc),
         dvc = tb_from(be->kv_type, cap, kw, vc), dpos = tb_i32(T, 1, pos),
         dout = tb_new(be->act_type, T, qw);
    be->attention(be, &dout.b, &dq.b, &dkc.b, &dvc.b, &dpos.b, nh, nkv, hd, window, scale);
    float *got = tb_get(&dout);
    report("out vs naive", got, want, (size_t)T * qw, &TOL_ATTN, tb_guards_ok(&dout, "out"), 0);
    PERF("attention",
         be->attention(be, &dout.b, &dq.b, &dkc.b, &dvc.b, &dpos.b, nh, nkv, hd, window, scale));
    tb_free(&dq), tb_free(&dkc), tb_free(&dvc), tb_free(&dpos), tb_free(&dout);
    free(q), free(kc), free(vc), free(want), free(pos), free(z), free(got);
}

// --- row-batched attention (a batch decode step: each row a sequence of its own) ---------------
// The naive attention of one query row q[nh * hd] at position p over a cache kc / vc
// [>= p + 1, nkv * hd] (the last `window` keys when window > 0) into out[nh * hd]: the one-row
// op's contract, applied per row below.
static void n_attention_row(float *out, const float *q, const float *kc, const float *vc, int p,
                            int nh, int nkv, int hd, int window, float scale) {
    const int kw = nkv * hd, lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    double *z = g4_malloc(sizeof(double) * (size_t)(p + 1));
    for (int h = 0; h < nh; h++) {
        const int g = h / (nh / nkv);
        double mx = -INFINITY, sum = 0;
        for (int j = lo; j <= p; j++) {
            double d = 0;
            for (int e = 0; e < hd; e++)
                d += (double)q[(size_t)h * hd + e] * kc[(size_t)j * kw + (size_t)g * hd + e];
            z[j] = d * scale;
            if (z[j] > mx) mx = z[j];
        }
        for (int j = lo; j <= p; j++) sum += exp(z[j] - mx);
        for (int e = 0; e < hd; e++) {
            double acc = 0;
            for (int j = lo; j <= p; j++)
                acc += exp(z[j] - mx) * vc[(size_t)j * kw + (size_t)g * hd + e];
            out[(size_t)h * hd + e] = (float)(acc / sum);
        }
    }
    free(z);
}

// Row r's position in the rows cases: row 0 at 0 (one key), row 1 past the window (or deep
// into the cache without one), the others spread over [0, maxpos]; its cache has 1 + r % 3 rows
// more than it needs (never read: poisoned).
static int rows_pos(int r, int window, int maxpos, unsigned long long seed) {
    if (r == 0) return 0;
    if (r == 1) return window > 0 ? (2 * window + 3 < maxpos ? 2 * window + 3 : maxpos) : maxpos;
    return (int)((r * 7919ull + seed * 31ull) % (unsigned long long)(maxpos + 1));
}

// A per-row cache table on the backend (uint64 [T] of the caches' data pointers).
static void *rows_table(const tbuf *c, int T) {
    uint64_t *h = g4_malloc(sizeof(uint64_t) * (size_t)T);
    for (int t = 0; t < T; t++) h[t] = (uint64_t)(uintptr_t)c[t].b.data;
    void *d = be_copy(h, sizeof(uint64_t) * (size_t)T);
    free(h);
    return d;
}

// qkv_prep_rows: each row's q (and k, v into its own caches at row pos[t]) against the naive
// norms and RoPE of that row alone; cache rows other than pos[t] stay poisoned; with 3+ rows,
// row 2 sits at its cache's end (pos == cap): it stores nothing.
static void case_qkv_prep_rows(int T, int nh, int nkv, int hd, int rope, int with_kv,
                               unsigned long long seed) {
    if (!want_case("qkv_prep_rows", "T=%d heads=%d kv=%d hd=%d rope=%s kv_in=%d", T, nh, nkv, hd,
                   rope ? "proportional" : "default", with_kv))
        return;
    unsigned long long s = seed;
    const int qw = nh * hd, kw = nkv * hd;
    float *q = rnd(&s, (size_t)T * qw, -2, 2), *k = rnd(&s, (size_t)T * kw, -2, 2),
          *v = rnd(&s, (size_t)T * kw, -2, 2);
    float *qwf = rnd(&s, (size_t)hd, 0.5f, 1.5f), *kwf = rnd(&s, (size_t)hd, 0.05f, 0.2f);
    float *inv = text_inv_freq(hd, rope);
    int32_t *pos = g4_malloc(sizeof(int32_t) * (size_t)T), *cap = g4_malloc(sizeof(int32_t) * T);
    for (int t = 0; t < T; t++) {
        pos[t] = rows_pos(t, 0, 200, seed);
        cap[t] = pos[t] + 1 + t % 3;
        if (t == 2) cap[t] = pos[t]; // outside its cache: nothing stored
    }
    float *wq = zeros((size_t)T * qw), *wk = zeros((size_t)T * kw), *wv = zeros((size_t)T * kw);
    n_qkv_prep(wq, wk, wv, q, k, v, qwf, kwf, pos, inv, T, nh, nkv, hd);
    uint16_t *qwb = f16_bits(qwf, (size_t)hd), *kwb = f16_bits(kwf, (size_t)hd);
    void *dqw = be_copy(qwb, 2 * (size_t)hd), *dkw = be_copy(kwb, 2 * (size_t)hd),
         *dinv = be_copy(inv, sizeof(float) * (size_t)hd / 2);
    tbuf dq = tb_from(be->act_type, T, qw, q), dk = tb_from(be->act_type, T, kw, k),
         dv = tb_from(be->act_type, T, kw, v), dpos = tb_i32(T, 1, pos), dcap = tb_i32(T, 1, cap);
    tbuf *kc = g4_calloc((size_t)T, sizeof(tbuf)), *vc = g4_calloc((size_t)T, sizeof(tbuf));
    for (int t = 0; t < T; t++)
        kc[t] = tb_new(be->kv_type, cap[t], kw), vc[t] = tb_new(be->kv_type, cap[t], kw);
    void *ktab = rows_table(kc, T), *vtab = rows_table(vc, T);
    const g4_kv_rows kv = {ktab, vtab, &dcap.b};
    be->qkv_prep_rows(be, &dq.b, with_kv ? &dk.b : NULL, with_kv ? &dv.b : NULL, &kv, dqw, dkw,
                      &dpos.b, dinv, nh, nkv, hd, 1e-6f);
    float *gq = tb_get(&dq);
    report("q vs naive per row", gq, wq, (size_t)T * qw, &TOL_REDUCE, tb_guards_ok(&dq, "q"), 0);
    if (with_kv) {
        float *gk = zeros((size_t)T * kw), *gv = zeros((size_t)T * kw);
        int stray = 0, guards = 1;
        for (int t = 0; t < T; t++) {
            float *ck = tb_get(&kc[t]), *cv = tb_get(&vc[t]);
            guards &= tb_guards_ok(&kc[t], "kcache") && tb_guards_ok(&vc[t], "vcache");
            for (int r = 0; r < cap[t]; r++) {
                if (r == pos[t]) continue; // every other row stays poisoned
                for (int i = 0; i < kw; i++)
                    stray += !isnan(ck[(size_t)r * kw + i]) || !isnan(cv[(size_t)r * kw + i]);
            }
            if (pos[t] < cap[t]) {
                memcpy(gk + (size_t)t * kw, ck + (size_t)pos[t] * kw, sizeof(float) * kw);
                memcpy(gv + (size_t)t * kw, cv + (size_t)pos[t] * kw, sizeof(float) * kw);
            } else { // nothing stored: compared as equal
                memcpy(gk + (size_t)t * kw, wk + (size_t)t * kw, sizeof(float) * kw);
                memcpy(gv + (size_t)t * kw, wv + (size_t)t * kw, sizeof(float) * kw);
            }
            free(ck), free(cv);
        }
        CHECK_MSG(stray == 0, "qkv_prep_rows: %d cache values written outside rows pos[t]", stray);
        report("kcache[t][pos] vs naive", gk, wk, (size_t)T * kw, &TOL_REDUCE, guards, 0);
        report("vcache[t][pos] vs naive", gv, wv, (size_t)T * kw, &TOL_REDUCE, guards, 0);
        free(gk), free(gv);
    }
    PERF("qkv_prep_rows",
         be->qkv_prep_rows(be, &dq.b, with_kv ? &dk.b : NULL, with_kv ? &dv.b : NULL, &kv, dqw, dkw,
                           &dpos.b, dinv, nh, nkv, hd, 1e-6f));
    be->free(be, dqw), be->free(be, dkw), be->free(be, dinv), be->free(be, ktab),
        be->free(be, vtab);
    for (int t = 0; t < T; t++) tb_free(&kc[t]), tb_free(&vc[t]);
    tb_free(&dq), tb_free(&dk), tb_free(&dv), tb_free(&dpos), tb_free(&dcap);
    free(kc), free(vc), free(q), free(k), free(v), free(qwf), free(kwf), free(inv), free(pos),
        free(cap), free(wq), free(wk), free(wv), free(qwb), free(kwb), free(gq);
}

// attention_rows: each row over its own cache (rows past its position poisoned: never read)
// against the naive one-row attention of that row alone; positions from rows_pos (a row with
// one key, one past the window, the rest spread up to maxpos).
static void case_attention_rows(int T, int nh, int nkv, int hd, int window, int maxpos,
                                unsigned long long seed) {
    if (!want_case("attention_rows", "T=%d heads=%d kv=%d hd=%d window=%d maxpos=%d", T, nh, nkv,
                   hd, window, maxpos))
        return;
    unsigned long long s = seed;
    const int qw = nh * hd, kw = nkv * hd;
    const float scale = 1.0f;
    float *q = rnd(&s, (size_t)T * qw, -0.5f, 0.5f), *want = zeros((size_t)T * qw);
    int32_t *pos = g4_malloc(sizeof(int32_t) * (size_t)T), *cap = g4_malloc(sizeof(int32_t) * T);
    tbuf dq = tb_from(be->act_type, T, qw, q), dout = tb_new(be->act_type, T, qw);
    tbuf *kc = g4_calloc((size_t)T, sizeof(tbuf)), *vc = g4_calloc((size_t)T, sizeof(tbuf));
    for (int t = 0; t < T; t++) {
        pos[t] = rows_pos(t, window, maxpos, seed);
        cap[t] = pos[t] + 1 + t % 3;
        float *k = rnd(&s, (size_t)cap[t] * kw, -0.5f, 0.5f),
              *v = rnd(&s, (size_t)cap[t] * kw, -1, 1);
        n_attention_row(want + (size_t)t * qw, q + (size_t)t * qw, k, v, pos[t], nh, nkv, hd,
                        window, scale);
        for (size_t i = (size_t)(pos[t] + 1) * kw; i < (size_t)cap[t] * kw; i++)
            k[i] = v[i] = NAN; // past the row's position: must not be read
        kc[t] = tb_from(be->kv_type, cap[t], kw, k), vc[t] = tb_from(be->kv_type, cap[t], kw, v);
        free(k), free(v);
    }
    tbuf dpos = tb_i32(T, 1, pos), dcap = tb_i32(T, 1, cap);
    void *ktab = rows_table(kc, T), *vtab = rows_table(vc, T);
    const g4_kv_rows kv = {ktab, vtab, &dcap.b};
    be->attention_rows(be, &dout.b, &dq.b, &kv, &dpos.b, nh, nkv, hd, window, scale);
    float *got = tb_get(&dout);
    report("out vs naive per row", got, want, (size_t)T * qw, &TOL_ATTN, tb_guards_ok(&dout, "out"),
           0);
    PERF("attention_rows",
         be->attention_rows(be, &dout.b, &dq.b, &kv, &dpos.b, nh, nkv, hd, window, scale));
    be->free(be, ktab), be->free(be, vtab);
    for (int t = 0; t < T; t++) tb_free(&kc[t]), tb_free(&vc[t]);
    tb_free(&dq), tb_free(&dout), tb_free(&dpos), tb_free(&dcap);
    free(kc), free(vc), free(q), free(want), free(pos), free(cap), free(got);
}

// qkv_attention (rows_form 0: one token over one cache) and qkv_attention_rows (each of T rows
// over its own cache): out against the naive preparation then attention of each row alone, the
// stored k, v row against the naive preparation, every other cache row as it was (earlier rows
// their values, later rows poisoned: never read), and out, q's and the caches' bits equal to
// the backend's own two ops (qkv_prep then attention) on copies of the same inputs.
static void case_qkv_attention(int rows_form, int T, int nh, int nkv, int hd, int rope, int with_kv,
                               int window, int maxpos, unsigned long long seed) {
    const char *name = rows_form ? "qkv_attention_rows" : "qkv_attention";
    if (!want_case(name, "T=%d heads=%d kv=%d hd=%d rope=%s kv_in=%d window=%d maxpos=%d", T, nh,
                   nkv, hd, rope ? "proportional" : "default", with_kv, window, maxpos))
        return;
    unsigned long long s = seed;
    const int qw = nh * hd, kw = nkv * hd;
    const float scale = 1.0f;
    float *q = rnd(&s, (size_t)T * qw, -2, 2), *k = rnd(&s, (size_t)T * kw, -2, 2),
          *v = rnd(&s, (size_t)T * kw, -2, 2);
    float *qwf = rnd(&s, (size_t)hd, 0.5f, 1.5f), *kwf = rnd(&s, (size_t)hd, 0.05f, 0.2f);
    float *inv = text_inv_freq(hd, rope);
    int32_t *pos = g4_malloc(sizeof(int32_t) * (size_t)T), *cap = g4_malloc(sizeof(int32_t) * T);
    for (int t = 0; t < T; t++) {
        pos[t] = rows_form ? rows_pos(t, window, maxpos, seed) : maxpos;
        cap[t] = pos[t] + 1 + t % 3;
    }
    float *wq = zeros((size_t)T * qw), *wk = zeros((size_t)T * kw), *wv = zeros((size_t)T * kw);
    n_qkv_prep(wq, wk, wv, q, k, v, qwf, kwf, pos, inv, T, nh, nkv, hd);
    uint16_t *qwb = f16_bits(qwf, (size_t)hd), *kwb = f16_bits(kwf, (size_t)hd);
    void *dqw = be_copy(qwb, 2 * (size_t)hd), *dkw = be_copy(kwb, 2 * (size_t)hd),
         *dinv = be_copy(inv, sizeof(float) * (size_t)hd / 2);
    // two of everything the ops write: [0] the fused op's, [1] the two ops'
    tbuf dq[2], dk[2], dv[2], dout[2], *kc[2], *vc[2];
    float **init_k = g4_calloc((size_t)T, sizeof(float *)),
          **init_v = g4_calloc((size_t)T, sizeof(float *));
    for (int t = 0; t < T; t++) { // earlier rows random, row pos random when nothing is stored
        const size_t n = (size_t)cap[t] * kw, own = (size_t)pos[t] * kw;
        init_k[t] = rnd(&s, n, -0.5f, 0.5f), init_v[t] = rnd(&s, n, -1, 1);
        for (size_t i = own + (with_kv ? 0 : kw); i < n; i++) init_k[t][i] = init_v[t][i] = NAN;
    }
    for (int c = 0; c < 2; c++) {
        dq[c] = tb_from(be->act_type, T, qw, q), dk[c] = tb_from(be->act_type, T, kw, k);
        dv[c] = tb_from(be->act_type, T, kw, v), dout[c] = tb_new(be->act_type, T, qw);
        kc[c] = g4_calloc((size_t)T, sizeof(tbuf)), vc[c] = g4_calloc((size_t)T, sizeof(tbuf));
        for (int t = 0; t < T; t++) {
            kc[c][t] = tb_from(be->kv_type, cap[t], kw, init_k[t]);
            vc[c][t] = tb_from(be->kv_type, cap[t], kw, init_v[t]);
        }
    }
    tbuf dpos = tb_i32(T, 1, pos), dcap = tb_i32(T, 1, cap);
    void *ktab[2] = {rows_table(kc[0], T), rows_table(kc[1], T)},
         *vtab[2] = {rows_table(vc[0], T), rows_table(vc[1], T)};
    const g4_kv_rows kv[2] = {{ktab[0], vtab[0], &dcap.b}, {ktab[1], vtab[1], &dcap.b}};
    // the cache contents as uploaded (the backend's type), before any op
    float **had_k = g4_calloc((size_t)T, sizeof(float *)),
          **had_v = g4_calloc((size_t)T, sizeof(float *));
    for (int t = 0; t < T; t++) had_k[t] = tb_get(&kc[0][t]), had_v[t] = tb_get(&vc[0][t]);
    const int kvn = with_kv; // (the layer owns its KV)
#define KV(c) (kvn ? &dk[c].b : NULL), (kvn ? &dv[c].b : NULL)
    // the fused op (on copy 0; the check and the perf loop), then the two ops on copy 1
#define FUSED()                                                                                    \
    (rows_form                                                                                     \
         ? be->qkv_attention_rows(be, &dout[0].b, &dq[0].b, KV(0), &kv[0], dqw, kvn ? dkw : NULL,  \
                                  &dpos.b, dinv, nh, nkv, hd, 1e-6f, window, scale)                \
         : be->qkv_attention(be, &dout[0].b, &dq[0].b, KV(0), &kc[0][0].b, &vc[0][0].b, dqw,       \
                             kvn ? dkw : NULL, &dpos.b, dinv, nh, nkv, hd, 1e-6f, window, scale))
    FUSED();
    if (rows_form) {
        be->qkv_prep_rows(be, &dq[1].b, KV(1), &kv[1], dqw, kvn ? dkw : NULL, &dpos.b, dinv, nh,
                          nkv, hd, 1e-6f);
        be->attention_rows(be, &dout[1].b, &dq[1].b, &kv[1], &dpos.b, nh, nkv, hd, window, scale);
    } else {
        be->qkv_prep(be, &dq[1].b, KV(1), kvn ? &kc[1][0].b : NULL, kvn ? &vc[1][0].b : NULL, dqw,
                     kvn ? dkw : NULL, &dpos.b, dinv, nh, nkv, hd, 1e-6f);
        be->attention(be, &dout[1].b, &dq[1].b, &kc[1][0].b, &vc[1][0].b, &dpos.b, nh, nkv, hd,
                      window, scale);
    }
    // the naive: each row's prepared q over its cache with row pos = the prepared k, v
    float *want = zeros((size_t)T * qw), *gk = zeros((size_t)T * kw), *gv = zeros((size_t)T * kw),
          *nk = zeros((size_t)T * kw), *nv = zeros((size_t)T * kw);
    int stray = 0, differ = 0, guards = 1;
    for (int t = 0; t < T; t++) {
        float *ck = tb_get(&kc[0][t]), *cv = tb_get(&vc[0][t]);
        float *ck1 = tb_get(&kc[1][t]), *cv1 = tb_get(&vc[1][t]);
        guards &= tb_guards_ok(&kc[0][t], "kcache") && tb_guards_ok(&vc[0][t], "vcache");
        const size_t own = (size_t)pos[t] * kw, n = (size_t)cap[t] * kw;
        for (size_t i = 0; i < n; i++) {
            if (i >= own && i < own + kw) continue; // row pos: compared below
            // every other row as uploaded (NaN rows stay NaN): bits, not a tolerance
            stray += memcmp(&ck[i], &had_k[t][i], sizeof(float)) != 0 ||
                     memcmp(&cv[i], &had_v[t][i], sizeof(float)) != 0;
        }
        differ +=
            memcmp(ck, ck1, sizeof(float) * n) != 0 || memcmp(cv, cv1, sizeof(float) * n) != 0;
        memcpy(gk + (size_t)t * kw, ck + own, sizeof(float) * kw);
        memcpy(gv + (size_t)t * kw, cv + own, sizeof(float) * kw);
        if (with_kv) { // the naive cache: the uploaded rows, row pos the naive k, v as the
            // cache type holds them (the op stores them there before attending)
            for (int i = 0; i < kw; i++) {
                ck[own + i] = kv_round(wk[(size_t)t * kw + i]);
                cv[own + i] = kv_round(wv[(size_t)t * kw + i]);
            }
            memcpy(nk + (size_t)t * kw, wk + (size_t)t * kw, sizeof(float) * kw);
            memcpy(nv + (size_t)t * kw, wv + (size_t)t * kw, sizeof(float) * kw);
        } else { // nothing stored: row pos as uploaded
            memcpy(nk + (size_t)t * kw, had_k[t] + own, sizeof(float) * kw);
            memcpy(nv + (size_t)t * kw, had_v[t] + own, sizeof(float) * kw);
        }
        float *qr = dup(wq + (size_t)t * qw, (size_t)qw); // the prepared q as the op holds it
        for (int i = 0; i < qw; i++) qr[i] = act_round(qr[i]);
        n_attention_row(want + (size_t)t * qw, qr, ck, cv, pos[t], nh, nkv, hd, window, scale);
        free(qr), free(ck), free(cv), free(ck1), free(cv1);
    }
    float *got = tb_get(&dout[0]), *got1 = tb_get(&dout[1]);
    CHECK_MSG(stray == 0, "%s: %d cache values changed outside rows pos[t]", name, stray);
    differ += memcmp(got, got1, sizeof(float) * (size_t)T * qw) != 0;
    CHECK_MSG(differ == 0, "%s: %d of out and the %d rows' caches differ from qkv_prep + attention",
              name, differ, T);
    report("out vs naive", got, want, (size_t)T * qw, &TOL_ATTN, tb_guards_ok(&dout[0], "out"), 0);
    report("kcache[pos] vs naive", gk, nk, (size_t)T * kw, &TOL_REDUCE, guards, 0);
    report("vcache[pos] vs naive", gv, nv, (size_t)T * kw, &TOL_REDUCE, guards, 0);
    PERF(name, FUSED());
#undef FUSED
#undef KV
    be->free(be, dqw), be->free(be, dkw), be->free(be, dinv);
    for (int c = 0; c < 2; c++) {
        be->free(be, ktab[c]), be->free(be, vtab[c]);
        tb_free(&dq[c]), tb_free(&dk[c]), tb_free(&dv[c]), tb_free(&dout[c]);
        for (int t = 0; t < T; t++) tb_free(&kc[c][t]), tb_free(&vc[c][t]);
        free(kc[c]), free(vc[c]);
    }
    for (int t = 0; t < T; t++) free(init_k[t]), free(init_v[t]), free(had_k[t]), free(had_v[t]);
    tb_free(&dpos), tb_free(&dcap);
    free(init_k), free(init_v), free(had_k), free(had_v), free(q), free(k), free(v), free(qwf),
        free(kwf), free(inv), free(pos), free(cap), free(wq), free(wk), free(wv), free(qwb),
        free(kwb), free(want), free(gk), free(gv), free(nk), free(nv), free(got), free(got1);
}

// --- embedding and logits -----------------------------------------------------------------------
static void case_ple_inputs(int T, int L, int D, int vocab, unsigned long long seed) {
    if (!want_case("ple_inputs", "T=%d layers=%d D=%d vocab=%d", T, L, D, vocab)) return;
    unsigned long long s = seed;
    const int w = L * D;
    const size_t n = (size_t)T * w;
    float *proj = rnd(&s, n, -30, 30), *table = rnd(&s, (size_t)vocab * w, -0.1f, 0.1f);
    float *nw = rnd(&s, (size_t)D, 0.5f, 1.5f), *want = zeros(n);
    int32_t *ids = g4_malloc(sizeof(int32_t) * (size_t)T);
    for (int t = 0; t < T; t++) ids[t] = (int32_t)(g4t_rand_u64(&s) % (unsigned long long)vocab);
    ids[0] = vocab - 1;
    const float ps = 1.0f / sqrtf(1536.0f), ts = 16.0f, os = 1.0f / sqrtf(2.0f);
    for (int t = 0; t < T; t++)
        for (int l = 0; l < L; l++) {
            double ss = 0;
            const float *p = proj + (size_t)t * w + (size_t)l * D;
            for (int d = 0; d < D; d++) ss += ((double)p[d] * ps) * ((double)p[d] * ps);
            const double inv = 1.0 / sqrt(ss / D + 1e-6);
            for (int d = 0; d < D; d++)
                want[(size_t)t * w + (size_t)l * D + d] =
                    (float)(((double)p[d] * ps * inv * nw[d] +
                             (double)table[(size_t)ids[t] * w + (size_t)l * D + d] * ts) *
                            os);
        }
    uint16_t *tb = f16_bits(table, (size_t)vocab * w), *nb = f16_bits(nw, (size_t)D);
    void *dt = be_copy(tb, 2 * (size_t)vocab * w), *dn = be_copy(nb, 2 * (size_t)D);
    tbuf dp = tb_from(be->act_type, T, w, proj), di = tb_i32(T, 1, ids);
    be->ple_inputs(be, &dp.b, dt, vocab, &di.b, dn, D, ps, ts, os, 1e-6f);
    float *got = tb_get(&dp);
    report("ple vs naive", got, want, n, &TOL_REDUCE, tb_guards_ok(&dp, "ple"), 0);
    PERF("ple_inputs", be->ple_inputs(be, &dp.b, dt, vocab, &di.b, dn, D, ps, ts, os, 1e-6f));
    be->free(be, dt), be->free(be, dn);
    tb_free(&dp), tb_free(&di);
    free(proj), free(table), free(nw), free(want), free(ids), free(tb), free(nb), free(got);
}

// y = table[ids] * scale; mapped: the table in pinned host memory (alloc_mapped).
static void case_embed(int T, int rows, int cols, int y_f32, int mapped, unsigned long long seed) {
    if (mapped && !be->alloc_mapped) return;
    if (!want_case("embed", "T=%d rows=%d cols=%d y=%s table=%s", T, rows, cols,
                   y_f32 ? "f32" : "act", mapped ? "mapped" : "backend"))
        return;
    unsigned long long s = seed;
    float *table = rnd(&s, (size_t)rows * cols, -0.2f, 0.2f), *want = zeros((size_t)T * cols);
    int32_t *ids = g4_malloc(sizeof(int32_t) * (size_t)T);
    for (int t = 0; t < T; t++) ids[t] = (int32_t)(g4t_rand_u64(&s) % (unsigned long long)rows);
    ids[T - 1] = rows - 1;
    const float sc = 39.1875f; // sqrt(1536) as fp16 rounds it
    const g4_type yt = y_f32 ? G4_F32 : be->act_type;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < cols; c++) {
            const float v = (float)((double)table[(size_t)ids[t] * cols + c] * sc);
            want[(size_t)t * cols + c] = yt == G4_F16 ? g4_round_f16(v) : v;
        }
    uint16_t *tb = f16_bits(table, (size_t)rows * cols);
    void *dt;
    if (mapped) {
        called("alloc_mapped"), called("free_mapped");
        dt = be->alloc_mapped(be, 2 * (size_t)rows * cols);
        if (!dt) {
            printf("  (the host cannot pin the table: case skipped)\n");
            free(table), free(want), free(ids), free(tb);
            return;
        }
        memcpy(dt, tb, 2 * (size_t)rows * cols);
    } else {
        dt = be_copy(tb, 2 * (size_t)rows * cols);
    }
    tbuf di = tb_i32(T, 1, ids), dy = tb_new(yt, T, cols);
    be->embed(be, &dy.b, dt, rows, &di.b, sc);
    float *got = tb_get(&dy);
    // fp32: the one product; f16: its rounding, if the kernel rounds the same product (else one
    // ulp: the elem tolerance)
    report("y vs naive", got, want, (size_t)T * cols, yt == G4_F32 ? &TOL_EXACT : &TOL_ELEM,
           tb_guards_ok(&dy, "y"), 0);
    PERF("embed", be->embed(be, &dy.b, dt, rows, &di.b, sc));
    if (mapped)
        be->free_mapped(be, dt);
    else
        be->free(be, dt);
    tb_free(&di), tb_free(&dy);
    free(table), free(want), free(ids), free(tb), free(got);
}

static void case_softcap(int rows, int cols, float c, unsigned long long seed) {
    if (!want_case("softcap", "rows=%d cols=%d cap=%g", rows, cols, c)) return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -80, 80), *want = zeros(n);
    for (size_t i = 0; i < n; i++) want[i] = (float)(c * tanh((double)x[i] / c));
    tbuf dx = tb_from(G4_F32, rows, cols, x);
    be->softcap(be, &dx.b, c);
    float *got = tb_get(&dx);
    report("x vs naive", got, want, n, &TOL_F32OUT, tb_guards_ok(&dx, "x"), 0);
    PERF("softcap", be->softcap(be, &dx.b, c));
    tb_free(&dx);
    free(x), free(want), free(got);
}

// The next token: greedy (temperature 0) or top-k 1 (temperature 1: the same pick) must be the
// argmax of the capped row (the smallest id among equal values; -1 for a row holding a NaN);
// the capped logits within f32-out of cap tanh(x / cap). quantized: multiples of 1/8 (ties).
static void case_sample(int rows, int V, float cap, int top_k1, int quantized, int nan_row,
                        unsigned long long seed) {
    if (!want_case("sample", "rows=%d V=%d cap=%g pick=%s quantized=%d nan_row=%d", rows, V, cap,
                   top_k1 ? "top-k 1" : "greedy", quantized, nan_row))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * V;
    float *x = g4_malloc(sizeof(float) * n), *want = zeros(n);
    for (size_t i = 0; i < n; i++) {
        x[i] = g4t_rand_uniform(&s, -40, 40);
        if (quantized) x[i] = floorf(x[i] * 8.0f) / 8.0f;
    }
    if (nan_row) x[(size_t)V * (rows - 1) + (size_t)V / 3] = NAN;
    for (size_t i = 0; i < n; i++)
        want[i] = cap > 0 ? (float)(cap * tanh((double)x[i] / cap)) : x[i];
    const g4_sample_params p = {top_k1 ? 1.0f : 0.0f, top_k1 ? 1 : 0, 1.0f, (uint32_t)seed, 0, {0}};
    int32_t *cnt = g4_malloc(sizeof(int32_t) * (size_t)rows),
            *next = g4_malloc(sizeof(int32_t) * (size_t)rows);
    for (int r = 0; r < rows; r++) cnt[r] = 100 + r;
    void *dp = be_copy(&p, sizeof p);
    tbuf dx = tb_from(G4_F32, rows, V, x), dc = tb_i32(rows, 1, cnt), dn = tb_new(G4_I32, rows, 1);
    be->sample(be, &dn.b, &dx.b, cap, dp, &dc.b);
    be->sync(be);
    be->download(be, next, dn.b.data, sizeof(int32_t) * (size_t)rows);
    float *got = tb_get(&dx);
    int32_t *exp_id = g4_malloc(sizeof(int32_t) * (size_t)rows);
    for (int r = 0; r < rows; r++) { // argmax of the backend's own capped row
        const float *g = got + (size_t)r * V;
        int best = 0, has_nan = 0;
        for (int i = 0; i < V; i++) {
            if (isnan(g[i]))
                has_nan = 1;
            else if (g[i] > g[best] || isnan(g[best]))
                best = i;
        }
        exp_id[r] = has_nan ? -1 : best;
    }
    report_ids("next vs argmax", next, exp_id, rows);
    if (nan_row) { // the NaN stays NaN on both sides; the rest of the row is compared
        const size_t i = (size_t)V * (rows - 1) + (size_t)V / 3;
        CHECK_MSG(isnan(got[i]), "sample: the NaN logit came back as %g", got[i]);
        got[i] = want[i] = 0;
    }
    report("capped logits", got, want, n, &TOL_F32OUT,
           tb_guards_ok(&dx, "logits") && tb_guards_ok(&dn, "next"), 0);
    PERF("sample", be->sample(be, &dn.b, &dx.b, 0.0f, dp, &dc.b));
    be->free(be, dp);
    tb_free(&dx), tb_free(&dc), tb_free(&dn);
    free(x), free(want), free(cnt), free(next), free(got), free(exp_id);
}

// The one-row sample op on one row of logits alone (its own sampler params dp on the device,
// its draw counter cnt): the id it picks, the sample_rows cases' reference.
static int32_t sample_alone(const float *x, int V, float cap, void *dp, int32_t cnt) {
    tbuf ox = tb_from(G4_F32, 1, V, x), oc = tb_i32(1, 1, &cnt), on = tb_new(G4_I32, 1, 1);
    int32_t id;
    be->sample(be, &on.b, &ox.b, cap, dp, &oc.b);
    be->sync(be);
    be->download(be, &id, on.b.data, sizeof(int32_t));
    tb_free(&ox), tb_free(&oc), tb_free(&on);
    return id;
}

// Row r's sampler in the sample_rows cases (every >= 2): rows r % every == 1 sample (temperature
// 0.8 or 1.3, top-k 40 on every other one of them, top-p 0.9 on the rest's every other), the others
// greedy; seeded from the case's seed and r.
static g4_sample_params row_sampler(int r, int every, unsigned long long seed) {
    g4_sample_params p;
    memset(&p, 0, sizeof p);
    p.top_p = 1.0f; // greedy
    if (r % every == 1) {
        p.temperature = r % 3 ? 0.8f : 1.3f;
        p.top_k = r % (2 * every) == 1 ? 40 : 0;
        p.top_p = r % (2 * every) == every + 1 ? 0.9f : 1.0f;
    }
    p.seed_lo = (uint32_t)(seed * 1000 + (unsigned)r), p.seed_hi = (uint32_t)r;
    return p;
}

// sample_rows: rows with their own samplers (greedy and sampled rows mixed: temperature, top-k,
// top-p, seeds, draw indices of their own), each against the one-row sample op on that row
// alone with its sampler and counter, greedy rows also against the argmax of the naive capped
// row; with nan_row the last row holds a NaN (-1).
static void case_sample_rows(int rows, int V, float cap, int nan_row, unsigned long long seed) {
    if (!want_case("sample_rows", "rows=%d V=%d cap=%g nan_row=%d", rows, V, cap, nan_row)) return;
    called("sample");
    unsigned long long s = seed;
    const size_t n = (size_t)rows * V;
    float *x = g4_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = floorf(g4t_rand_uniform(&s, -40, 40) * 16.0f) / 16.0f;
    if (nan_row) x[(size_t)V * (rows - 1) + (size_t)V / 3] = NAN;
    g4_sample_params *p = g4_calloc((size_t)rows, sizeof *p);
    void **dp = g4_calloc((size_t)rows, sizeof *dp);
    uint64_t *ptab = g4_malloc(sizeof(uint64_t) * (size_t)rows);
    int32_t *cnt = g4_malloc(sizeof(int32_t) * (size_t)rows);
    for (int r = 0; r < rows; r++) {
        p[r] = row_sampler(r, 2, seed);
        cnt[r] = 17 + 13 * r;
        dp[r] = be_copy(&p[r], sizeof p[r]);
        ptab[r] = (uint64_t)(uintptr_t)dp[r];
    }
    void *dtab = be_copy(ptab, sizeof(uint64_t) * (size_t)rows);
    tbuf dx = tb_from(G4_F32, rows, V, x), dc = tb_i32(rows, 1, cnt), dn = tb_new(G4_I32, rows, 1);
    be->sample_rows(be, &dn.b, &dx.b, cap, dtab, &dc.b);
    be->sync(be);
    int32_t *next = g4_malloc(sizeof(int32_t) * (size_t)rows),
            *one = g4_malloc(sizeof(int32_t) * (size_t)rows);
    be->download(be, next, dn.b.data, sizeof(int32_t) * (size_t)rows);
    // the one-row op on each row alone (from the same uncapped logits)
    for (int r = 0; r < rows; r++) {
        one[r] = sample_alone(x + (size_t)r * V, V, cap, dp[r], cnt[r]);
    }
    report_ids("next vs one row alone", next, one, rows);
    // greedy rows: the argmax of the naive capped row (sampled rows keep the one-row answer)
    int32_t *am = g4_malloc(sizeof(int32_t) * (size_t)rows);
    for (int r = 0; r < rows; r++) {
        am[r] = one[r];
        if (p[r].temperature > 0) continue;
        const float *g = x + (size_t)r * V;
        int best = 0, has_nan = 0;
        double bv = -INFINITY;
        for (int i = 0; i < V; i++) {
            const double c = cap > 0 ? cap * tanh((double)g[i] / cap) : g[i];
            if (isnan(g[i]))
                has_nan = 1;
            else if ((float)c > bv)
                bv = (float)c, best = i;
        }
        am[r] = has_nan ? -1 : best;
    }
    report_ids("greedy rows vs argmax", next, am, rows);
    CHECK_MSG(tb_guards_ok(&dn, "next") && tb_guards_ok(&dx, "logits"),
              "sample_rows: a guard zone was written");
    PERF("sample_rows", be->sample_rows(be, &dn.b, &dx.b, 0.0f, dtab, &dc.b));
    for (int r = 0; r < rows; r++) be->free(be, dp[r]);
    be->free(be, dtab);
    tb_free(&dx), tb_free(&dc), tb_free(&dn);
    free(x), free(p), free(dp), free(ptab), free(cnt), free(next), free(one), free(am);
}

// sample_rows on ONE handle over launches of varying row counts, as a batch step's sampled rows
// change from step to step (32, then fewer, then more: 29 -> 31 and 16 -> 17 are row counts
// whose new rows found the smaller launch's leftovers in the workspace before issue 31's fix),
// greedy rows and a sampled row in eight (temperature, top-k, top-p): every launch's id of row r
// equals the one-row op's on row r alone (the same logits, sampler and counter in every
// launch), greedy rows also the argmax of the naive capped row.
static void case_sample_rows_counts(int V, float cap, unsigned long long seed) {
    enum { RMAX = 32 };
    static const int counts[] = {32, 29, 31, 16, 17};
    const int n_launch = (int)(sizeof counts / sizeof counts[0]);
    if (!want_case("sample_rows", "row counts 32 29 31 16 17 on one handle, V=%d cap=%g", V, cap))
        return;
    called("sample");
    unsigned long long s = seed;
    const size_t n = (size_t)RMAX * V;
    float *x = g4_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = floorf(g4t_rand_uniform(&s, -40, 40) * 16.0f) / 16.0f;
    g4_sample_params p[RMAX];
    void *dp[RMAX];
    uint64_t ptab[RMAX];
    int32_t cnt[RMAX], one[RMAX], am[RMAX];
    memset(p, 0, sizeof p);
    for (int r = 0; r < RMAX; r++) {
        p[r] = row_sampler(r, 8, seed); // (few sampled rows: the CPU reference's cost)
        cnt[r] = 29 + 7 * r;
        dp[r] = be_copy(&p[r], sizeof p[r]);
        ptab[r] = (uint64_t)(uintptr_t)dp[r];
    }
    void *dtab = be_copy(ptab, sizeof ptab);
    int total = 0;
    for (int k = 0; k < n_launch; k++) total += counts[k];
    int32_t *got = g4_malloc(sizeof(int32_t) * (size_t)total),
            *want = g4_malloc(sizeof(int32_t) * (size_t)total),
            *want_am = g4_malloc(sizeof(int32_t) * (size_t)total);
    int32_t poison[RMAX];
    for (int r = 0; r < RMAX; r++) poison[r] = -2; // (a row the op leaves unwritten is wrong)
    tbuf dc = tb_i32(RMAX, 1, cnt), dn = tb_new(G4_I32, RMAX, 1);
    for (int k = 0, at = 0; k < n_launch; at += counts[k], k++) { // (the op caps in place)
        const int R = counts[k];
        tbuf dx = tb_from(G4_F32, R, V, x);
        be->upload(be, dn.b.data, poison, sizeof poison);
        g4_buf nx = g4_buf_view(&dn.b, R, 1), c = g4_buf_view(&dc.b, R, 1);
        be->sample_rows(be, &nx, &dx.b, cap, dtab, &c);
        be->sync(be);
        be->download(be, got + at, dn.b.data, sizeof(int32_t) * (size_t)R);
        tb_free(&dx);
    }
    // the one-row op on each row alone (from the same uncapped logits), after every launch
    for (int r = 0; r < RMAX; r++) {
        one[r] = sample_alone(x + (size_t)r * V, V, cap, dp[r], cnt[r]);
        am[r] = one[r];
        if (p[r].temperature > 0) continue;
        const float *g = x + (size_t)r * V;
        int best = 0;
        double bv = -INFINITY;
        for (int i = 0; i < V; i++) {
            const double cv = cap > 0 ? cap * tanh((double)g[i] / cap) : g[i];
            if ((float)cv > bv) bv = (float)cv, best = i;
        }
        am[r] = best;
    }
    for (int k = 0, at = 0; k < n_launch; at += counts[k], k++)
        for (int r = 0; r < counts[k]; r++) want[at + r] = one[r], want_am[at + r] = am[r];
    report_ids("next vs one row alone", got, want, total);
    report_ids("greedy rows vs argmax", got, want_am, total);
    CHECK_MSG(tb_guards_ok(&dn, "next"), "sample_rows: a guard zone was written");
    for (int r = 0; r < RMAX; r++) be->free(be, dp[r]);
    be->free(be, dtab);
    tb_free(&dc), tb_free(&dn);
    free(x), free(got), free(want), free(want_am);
}

// dst[t] = src[idx[t]] where idx[t] >= 0 (every other row), the rest unchanged.
static void case_scatter_rows(int T, int n_src, int cols, unsigned long long seed) {
    if (!want_case("scatter_rows", "T=%d src=%d cols=%d", T, n_src, cols)) return;
    unsigned long long s = seed;
    float *dst = rnd(&s, (size_t)T * cols, -1, 1), *src = rnd(&s, (size_t)n_src * cols, 2, 3);
    int32_t *idx = g4_malloc(sizeof(int32_t) * (size_t)T);
    for (int t = 0, k = 0; t < T; t++) idx[t] = (t % 2 && k < n_src) ? k++ : -1;
    float *want = dup(dst, (size_t)T * cols);
    for (int t = 0; t < T; t++)
        if (idx[t] >= 0)
            memcpy(want + (size_t)t * cols, src + (size_t)idx[t] * cols, sizeof(float) * cols);
    tbuf dd = tb_from(G4_F32, T, cols, dst), ds = tb_from(G4_F32, n_src, cols, src),
         di = tb_i32(T, 1, idx);
    be->scatter_rows(be, &dd.b, &ds.b, &di.b);
    float *got = tb_get(&dd);
    report("dst vs naive", got, want, (size_t)T * cols, &TOL_EXACT, tb_guards_ok(&dd, "dst"), 0);
    PERF("scatter_rows", be->scatter_rows(be, &dd.b, &ds.b, &di.b));
    tb_free(&dd), tb_free(&ds), tb_free(&di);
    free(dst), free(src), free(idx), free(want), free(got);
}

// --- vision and audio towers
// ---------------------------------------------------------------------- with_nan: the first values
// are NaN, +inf, -inf (torch.clamp: NaN stays NaN, infs clamp).
static void case_clamp(int rows, int cols, float lo, float hi, int with_nan,
                       unsigned long long seed) {
    if (!want_case("clamp", "rows=%d cols=%d lo=%g hi=%g nonfinite_in=%d", rows, cols, lo, hi,
                   with_nan))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -4, 4), *want = zeros(n);
    if (with_nan && n >= 3) x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY;
    for (size_t i = 0; i < n; i++)
        want[i] = isnan(x[i]) ? x[i] : x[i] < lo ? lo : x[i] > hi ? hi : x[i];
    tbuf dx = tb_from(be->act_type, rows, cols, x);
    be->clamp(be, &dx.b, lo, hi);
    float *got = tb_get(&dx);
    report("x vs naive", got, want, n, &TOL_EXACT, tb_guards_ok(&dx, "x"),
           with_nan ? G4T_NONFINITE_SAME : 0);
    PERF("clamp", be->clamp(be, &dx.b, lo, hi));
    tb_free(&dx);
    free(x), free(want), free(got);
}

static void case_silu(int rows, int cols, int in_place, unsigned long long seed) {
    if (!want_case("silu", "rows=%d cols=%d in_place=%d", rows, cols, in_place)) return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -12, 12), *want = zeros(n);
    for (size_t i = 0; i < n; i++) want[i] = (float)(x[i] * sigmoid(x[i]));
    tbuf dx = tb_from(be->act_type, rows, cols, x),
         dy = in_place ? dx : tb_new(be->act_type, rows, cols);
    be->silu(be, &dy.b, &dx.b);
    float *got = tb_get(&dy);
    report("y vs naive", got, want, n, &TOL_ELEM, tb_guards_ok(&dy, "y"), 0);
    PERF("silu", be->silu(be, &dy.b, &dx.b));
    tb_free(&dx);
    if (!in_place) tb_free(&dy);
    free(x), free(want), free(got);
}

static void case_glu(int T, int C, unsigned long long seed) {
    if (!want_case("glu", "T=%d C=%d", T, C)) return;
    unsigned long long s = seed;
    float *x = rnd(&s, (size_t)T * 2 * C, -6, 6), *want = zeros((size_t)T * C);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            want[(size_t)t * C + c] =
                (float)(x[(size_t)t * 2 * C + c] * sigmoid(x[(size_t)t * 2 * C + C + c]));
    tbuf dx = tb_from(be->act_type, T, 2 * C, x), dy = tb_new(be->act_type, T, C);
    be->glu(be, &dy.b, &dx.b);
    float *got = tb_get(&dy);
    report("y vs naive", got, want, (size_t)T * C, &TOL_ELEM, tb_guards_ok(&dy, "y"), 0);
    PERF("glu", be->glu(be, &dy.b, &dx.b));
    tb_free(&dx), tb_free(&dy);
    free(x), free(want), free(got);
}

static void case_transpose(g4_type t, int rows, int cols, unsigned long long seed) {
    if (t == G4_F16) t = be->act_type;
    if (!want_case("transpose", "%s rows=%d cols=%d", g4_type_name(t), rows, cols)) return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -100, 100), *want = zeros(n);
    if (t == G4_I32)
        for (size_t i = 0; i < n; i++) x[i] = floorf(x[i] * 1000.0f);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) want[(size_t)c * rows + r] = x[(size_t)r * cols + c];
    tbuf dx = tb_from(t, rows, cols, x), dy = tb_new(t, cols, rows);
    be->transpose(be, &dy.b, &dx.b);
    float *got = tb_get(&dy);
    report("y vs naive", got, want, n, &TOL_EXACT, tb_guards_ok(&dy, "y"), 0);
    PERF("transpose", be->transpose(be, &dy.b, &dx.b));
    tb_free(&dx), tb_free(&dy);
    free(x), free(want), free(got);
}

static int32_t *grid_pos(int gw, int gh) {
    int32_t *p = g4_malloc(sizeof(int32_t) * 2 * (size_t)gw * gh);
    for (int i = 0; i < gw * gh; i++) p[2 * i] = i % gw, p[2 * i + 1] = i / gw;
    return p;
}

// Vision 2-D RoPE: dims [0, hd/2) turn by x, [hd/2, hd) by y, pairs (j, j + hd/4), theta 100.
static void case_rope_2d(int gw, int gh, int nh, int hd, unsigned long long seed) {
    if (!want_case("rope_2d", "grid=%dx%d heads=%d hd=%d", gw, gh, nh, hd)) return;
    unsigned long long s = seed;
    const int T = gw * gh, w = nh * hd;
    float *x = rnd(&s, (size_t)T * w, -2, 2), *want = dup(x, (size_t)T * w);
    float *inv = g4_malloc(sizeof(float) * (size_t)hd / 4);
    for (int j = 0; j < hd / 4; j++) inv[j] = (float)(1.0 / pow(100.0, 2.0 * j / (hd / 2)));
    int32_t *pos = grid_pos(gw, gh);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++)
            for (int axis = 0; axis < 2; axis++) // each half is a split-half RoPE of hd/2 dims
                n_rope_head(want + (size_t)t * w + (size_t)h * hd + axis * hd / 2, hd / 2,
                            pos[2 * t + axis], inv);
    void *dinv = be_copy(inv, sizeof(float) * (size_t)hd / 4);
    tbuf dx = tb_from(be->act_type, T, w, x), dp = tb_i32(T, 2, pos);
    be->rope_2d(be, &dx.b, nh, hd, &dp.b, dinv);
    float *got = tb_get(&dx);
    report("x vs naive", got, want, (size_t)T * w, &TOL_REDUCE, tb_guards_ok(&dx, "x"), 0);
    PERF("rope_2d", be->rope_2d(be, &dx.b, nh, hd, &dp.b, dinv));
    be->free(be, dinv);
    tb_free(&dx), tb_free(&dp);
    free(x), free(want), free(inv), free(pos), free(got);
}

static void case_attention_bidir(int N, int nh, int hd, float scale, unsigned long long seed) {
    if (!want_case("attention_bidir", "N=%d heads=%d hd=%d scale=%g", N, nh, hd, scale)) return;
    unsigned long long s = seed;
    const int w = nh * hd;
    const size_t n = (size_t)N * w;
    float *q = rnd(&s, n, -1, 1), *k = rnd(&s, n, -1, 1), *v = rnd(&s, n, -1, 1), *want = zeros(n);
    double *z = g4_malloc(sizeof(double) * (size_t)N),
           *acc = g4_malloc(sizeof(double) * (size_t)hd);
    for (int i = 0; i < N; i++)
        for (int h = 0; h < nh; h++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < N; j++) {
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)q[(size_t)i * w + (size_t)h * hd + e] *
                         k[(size_t)j * w + (size_t)h * hd + e];
                z[j] = d * scale;
                mx = z[j] > mx ? z[j] : mx;
            }
            for (int e = 0; e < hd; e++) acc[e] = 0;
            for (int j = 0; j < N; j++) {
                const double p = exp(z[j] - mx);
                sum += p;
                for (int e = 0; e < hd; e++) acc[e] += p * v[(size_t)j * w + (size_t)h * hd + e];
            }
            for (int e = 0; e < hd; e++)
                want[(size_t)i * w + (size_t)h * hd + e] = (float)(acc[e] / sum);
        }
    tbuf dq = tb_from(be->act_type, N, w, q), dk = tb_from(be->act_type, N, w, k),
         dv = tb_from(be->act_type, N, w, v), dout = tb_new(be->act_type, N, w);
    be->attention_bidir(be, &dout.b, &dq.b, &dk.b, &dv.b, nh, hd, scale);
    float *got = tb_get(&dout);
    report("out vs naive", got, want, n, &TOL_ATTN, tb_guards_ok(&dout, "out"), 0);
    PERF("attention_bidir", be->attention_bidir(be, &dout.b, &dq.b, &dk.b, &dv.b, nh, hd, scale));
    tb_free(&dq), tb_free(&dk), tb_free(&dv), tb_free(&dout);
    free(q), free(k), free(v), free(want), free(z), free(acc), free(got);
}

static void case_vision_posemb(int gw, int gh, int D, int table_rows, unsigned long long seed) {
    if (!want_case("vision_posemb", "grid=%dx%d D=%d table=%d", gw, gh, D, table_rows)) return;
    unsigned long long s = seed;
    const int N = gw * gh;
    float *h = rnd(&s, (size_t)N * D, -3, 3), *table = rnd(&s, (size_t)2 * table_rows * D, -1, 1);
    float *want = dup(h, (size_t)N * D);
    int32_t *pos = grid_pos(gw, gh);
    for (int i = 0; i < N; i++)
        for (int d = 0; d < D; d++)
            want[(size_t)i * D + d] =
                (float)((double)h[(size_t)i * D + d] +
                        ((double)table[(size_t)pos[2 * i] * D + d] +
                         table[((size_t)table_rows + pos[2 * i + 1]) * D + d]));
    uint16_t *tb = f16_bits(table, (size_t)2 * table_rows * D);
    void *dt = be_copy(tb, 4 * (size_t)table_rows * D);
    tbuf dh = tb_from(G4_F32, N, D, h), dp = tb_i32(N, 2, pos);
    be->vision_posemb(be, &dh.b, dt, table_rows, &dp.b);
    float *got = tb_get(&dh);
    report("h vs naive", got, want, (size_t)N * D, &TOL_F32OUT, tb_guards_ok(&dh, "h"), 0);
    PERF("vision_posemb", be->vision_posemb(be, &dh.b, dt, table_rows, &dp.b));
    be->free(be, dt);
    tb_free(&dh), tb_free(&dp);
    free(h), free(table), free(want), free(pos), free(tb), free(got);
}

// Pooling of a gw x gh grid (multiples of k) into (gw/k) x (gh/k) bins, times sqrt(D).
static void case_vision_pool(int gw, int gh, int D, int k, unsigned long long seed) {
    const int N = gw * gh, bins = (gw / k) * (gh / k);
    if (!want_case("vision_pool", "grid=%dx%d D=%d k=%d bins=%d", gw, gh, D, k, bins)) return;
    unsigned long long s = seed;
    float *x = rnd(&s, (size_t)N * D, -5, 5), *want = zeros((size_t)bins * D);
    int32_t *pos = grid_pos(gw, gh);
    const double sc = sqrt((double)D);
    for (int by = 0; by < gh / k; by++)
        for (int bx = 0; bx < gw / k; bx++)
            for (int d = 0; d < D; d++) {
                double acc = 0;
                for (int dy = 0; dy < k; dy++)
                    for (int dx = 0; dx < k; dx++)
                        acc += x[((size_t)(by * k + dy) * gw + bx * k + dx) * D + d];
                want[((size_t)by * (gw / k) + bx) * D + d] = (float)(acc / (k * k) * sc);
            }
    tbuf dx = tb_from(G4_F32, N, D, x), dp = tb_i32(N, 2, pos), dout = tb_new(G4_F32, bins, D);
    be->vision_pool(be, &dout.b, &dx.b, &dp.b, k, (float)sc);
    float *got = tb_get(&dout);
    report("out vs naive", got, want, (size_t)bins * D, &TOL_F32OUT, tb_guards_ok(&dout, "out"), 0);
    PERF("vision_pool", be->vision_pool(be, &dout.b, &dx.b, &dp.b, k, (float)sc));
    tb_free(&dx), tb_free(&dp), tb_free(&dout);
    free(x), free(want), free(pos), free(got);
}

// Audio subsampling layer, channels last: masked rows, conv 3x3 stride 2 pad 1, LayerNorm over
// the output channels (weight only), ReLU. x_f32: the first layer's f32 input.
static void case_sscp_conv(int H, int W, int C_in, int C_out, int x_f32, int masked,
                           unsigned long long seed) {
    if (!want_case("sscp_conv", "H=%d W=%d C_in=%d C_out=%d x=%s masked=%d", H, W, C_in, C_out,
                   x_f32 ? "f32" : "act", masked))
        return;
    unsigned long long s = seed;
    const int Ho = (H + 1) / 2, Wo = (W + 1) / 2;
    float *x = rnd(&s, (size_t)H * W * C_in, -2, 2);
    float *w = rnd(&s, (size_t)C_out * C_in * 9, -0.3f, 0.3f),
          *lw = rnd(&s, (size_t)C_out, 0.5f, 1.5f);
    int32_t *valid = g4_malloc(sizeof(int32_t) * (size_t)H);
    for (int h = 0; h < H; h++) valid[h] = !masked || h < H - H / 3; // the last third masked
    float *want = zeros((size_t)Ho * Wo * C_out);
    double *acc = g4_malloc(sizeof(double) * (size_t)C_out);
    for (int oh = 0; oh < Ho; oh++)
        for (int ow = 0; ow < Wo; ow++) {
            double mean = 0, var = 0;
            for (int co = 0; co < C_out; co++) {
                double a = 0;
                for (int ky = 0; ky < 3; ky++)
                    for (int kx = 0; kx < 3; kx++) {
                        const int ih = 2 * oh - 1 + ky, iw = 2 * ow - 1 + kx;
                        if (ih < 0 || iw < 0 || ih >= H || iw >= W || !valid[ih]) continue;
                        for (int ci = 0; ci < C_in; ci++)
                            a += (double)x[((size_t)ih * W + iw) * C_in + ci] *
                                 w[(((size_t)co * C_in + ci) * 3 + ky) * 3 + kx];
                    }
                acc[co] = a;
                mean += a / C_out;
            }
            for (int co = 0; co < C_out; co++) var += (acc[co] - mean) * (acc[co] - mean) / C_out;
            for (int co = 0; co < C_out; co++) {
                const double v = (acc[co] - mean) / sqrt(var + 1e-6) * lw[co];
                want[((size_t)oh * Wo + ow) * C_out + co] = (float)(v > 0 ? v : 0);
            }
        }
    uint16_t *wb = f16_bits(w, (size_t)C_out * C_in * 9), *lb = f16_bits(lw, (size_t)C_out);
    void *dw = be_copy(wb, 2 * (size_t)C_out * C_in * 9), *dl = be_copy(lb, 2 * (size_t)C_out);
    tbuf dx = tb_from(x_f32 ? G4_F32 : be->act_type, H * W, C_in, x), dv = tb_i32(H, 1, valid),
         dy = tb_new(be->act_type, Ho * Wo, C_out);
    be->sscp_conv(be, &dy.b, &dx.b, masked ? &dv.b : NULL, dw, dl, H, W, 1e-6f);
    float *got = tb_get(&dy);
    report("y vs naive", got, want, (size_t)Ho * Wo * C_out, &TOL_REDUCE, tb_guards_ok(&dy, "y"),
           0);
    PERF("sscp_conv", be->sscp_conv(be, &dy.b, &dx.b, masked ? &dv.b : NULL, dw, dl, H, W, 1e-6f));
    be->free(be, dw), be->free(be, dl);
    tb_free(&dx), tb_free(&dv), tb_free(&dy);
    free(x), free(w), free(lw), free(valid), free(want), free(acc), free(wb), free(lb), free(got);
}

static void case_dwconv1d_causal(int T, int C, int K, unsigned long long seed) {
    if (!want_case("dwconv1d_causal", "T=%d C=%d K=%d", T, C, K)) return;
    unsigned long long s = seed;
    float *x = rnd(&s, (size_t)T * C, -2, 2), *w = rnd(&s, (size_t)C * K, -0.5f, 0.5f),
          *want = zeros((size_t)T * C);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double a = 0;
            for (int j = 0; j < K; j++) { // tap j reads frame t - j; tap K-1-j of the kernel
                if (t - j < 0) break;
                a += (double)w[(size_t)c * K + (K - 1 - j)] * x[(size_t)(t - j) * C + c];
            }
            want[(size_t)t * C + c] = (float)a;
        }
    uint16_t *wb = f16_bits(w, (size_t)C * K);
    void *dw = be_copy(wb, 2 * (size_t)C * K);
    tbuf dx = tb_from(be->act_type, T, C, x), dy = tb_new(be->act_type, T, C);
    be->dwconv1d_causal(be, &dy.b, &dx.b, dw, K);
    float *got = tb_get(&dy);
    report("y vs naive", got, want, (size_t)T * C, &TOL_REDUCE, tb_guards_ok(&dy, "y"), 0);
    PERF("dwconv1d_causal", be->dwconv1d_causal(be, &dy.b, &dx.b, dw, K));
    be->free(be, dw);
    tb_free(&dx), tb_free(&dy);
    free(x), free(w), free(want), free(wb), free(got);
}

// Gemma-4 audio attention (spec 5.5) as the ops.h contract states it, written per query over
// HF's block context: queries in blocks of `chunk`; block b's context is keys
// u = b*chunk - band + j, j < chunk + band; key u is visible to t iff 0 <= t - u < band, u is
// inside [0, T) and valid; logits cap * tanh((q' . k' + q' . rel[t - u]) / cap) with
// q' = q hd^-0.5 / ln 2 * softplus(per_dim_scale), k' = k ln(1 + e) / ln 2; others get
// invalid_logit; entries outside [0, T) have zero values.
static void case_audio_attention(int T, int nh, int hd, int masked, unsigned long long seed) {
    if (!want_case("audio_attention", "T=%d heads=%d hd=%d masked=%d", T, nh, hd, masked)) return;
    unsigned long long s = seed;
    const int w = nh * hd, chunk = 12, band = 12, ctx = chunk + band;
    const float cap = 50.0f, invalid = -1e9f;
    const size_t n = (size_t)T * w;
    float *q = rnd(&s, n, -1, 1), *k = rnd(&s, n, -1, 1), *v = rnd(&s, n, -1, 1);
    float *rel = rnd(&s, (size_t)band * w, -0.5f, 0.5f),
          *pds = g4_malloc(sizeof(float) * (size_t)hd);
    for (int e = 0; e < hd; e++) pds[e] = g4t_rand_uniform(&s, -1.5f, 1.5f);
    int32_t *valid = g4_malloc(sizeof(int32_t) * (size_t)T);
    for (int t = 0; t < T; t++) valid[t] = !masked || (t % 7 != 3 && t < T - T / 4);
    float *want = zeros(n);
    double *z = g4_malloc(sizeof(double) * ctx), *qs = g4_malloc(sizeof(double) * (size_t)hd);
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < T; t++) {
            const int b = t / chunk;
            for (int e = 0; e < hd; e++)
                qs[e] = q[(size_t)t * w + (size_t)h * hd + e] / sqrt((double)hd) / log(2.0) *
                        log(1.0 + exp((double)pds[e]));
            double mx = -INFINITY;
            for (int j = 0; j < ctx; j++) {
                const int u = b * chunk - band + j;
                z[j] = invalid;
                if (u < 0 || u >= T || t - u < 0 || t - u >= band || !valid[u]) continue;
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += qs[e] * ((double)k[(size_t)u * w + (size_t)h * hd + e] *
                                      log(1.0 + exp(1.0)) / log(2.0) +
                                  rel[(size_t)(t - u) * w + (size_t)h * hd + e]);
                z[j] = cap * tanh(d / cap);
            }
            for (int j = 0; j < ctx; j++) mx = z[j] > mx ? z[j] : mx;
            double sum = 0;
            for (int j = 0; j < ctx; j++) sum += exp(z[j] - mx);
            for (int e = 0; e < hd; e++) {
                double a = 0;
                for (int j = 0; j < ctx; j++) {
                    const int u = b * chunk - band + j;
                    if (u >= 0 && u < T)
                        a += exp(z[j] - mx) * v[(size_t)u * w + (size_t)h * hd + e];
                }
                want[(size_t)t * w + (size_t)h * hd + e] = (float)(a / sum);
            }
        }
    void *dpds = be_copy(pds, sizeof(float) * (size_t)hd);
    tbuf dq = tb_from(be->act_type, T, w, q), dk = tb_from(be->act_type, T, w, k),
         dv = tb_from(be->act_type, T, w, v), dr = tb_from(be->act_type, band, w, rel),
         dval = tb_i32(T, 1, valid), dout = tb_new(be->act_type, T, w);
    be->audio_attention(be, &dout.b, &dq.b, &dk.b, &dv.b, &dr.b, dpds, masked ? &dval.b : NULL, nh,
                        hd, chunk, band, cap, invalid);
    float *got = tb_get(&dout);
    report("out vs naive", got, want, n, &TOL_AUDIO, tb_guards_ok(&dout, "out"), 0);
    PERF("audio_attention",
         be->audio_attention(be, &dout.b, &dq.b, &dk.b, &dv.b, &dr.b, dpds, masked ? &dval.b : NULL,
                             nh, hd, chunk, band, cap, invalid));
    be->free(be, dpds);
    tb_free(&dq), tb_free(&dk), tb_free(&dv), tb_free(&dr), tb_free(&dval), tb_free(&dout);
    free(q), free(k), free(v), free(rel), free(pds), free(valid), free(want), free(z), free(qs),
        free(got);
}

// --- the harness's own rules can fail -----------------------------------------------------------
// A write one byte past a buffer, an output that was never written (still poisoned) and a NaN
// in a reference must each be caught. Not cases: they check the checks, on every run.
static void check_harness(void) {
    tbuf d = tb_new(be->act_type, 3, 5);
    const uint8_t stray = 0;
    be->upload(be, (char *)d.b.data + d.bytes, &stray, 1);
    CHECK_MSG(!tb_guards_ok(&d, NULL), "%s: a write past the end of a buffer was not caught",
              be->name);
    float *got = tb_get(&d), *want = zeros(15);
    g4t_cmp c = g4t_compare(got, want, 15, 1e9, 1e9, 0);
    CHECK_MSG(c.bad == 15 && c.nonfinite == 15, "%s: an unwritten (poisoned) output passed",
              be->name);
    want[7] = NAN;
    c = g4t_compare(want, want, 15, 1e9, 1e9, 0);
    CHECK_MSG(c.bad == 1 && c.ref_nonfinite == 1, "a NaN in the reference passed");
    tb_free(&d);
    free(got), free(want);
}

// ple_block (issue 30; CUDA: one launch of thread-block clusters for one row of Q4 or fp16
// weights):
// with norm, the add-norm of add_norm_linear first (h_out, x; next 1, the engine's pre-PLE
// form: x = rmsnorm(h_out) * w2); pg = gelu(x Wg) * ple[:, P : 2P] (ple [T, 3P]: the layer's
// slice in the middle), y = pg Wp, y a buffer of its own. Each output against the naive result
// of the backend's own input (x, then pg), as add_norm_linear's case; h_in and r unchanged.
// repeat: the op again twice with y and pg poisoned, and, where the backend has graphs, captured
// once and replayed 3 times: bit-identical every time.
static void case_ple_block(g4_weight_kind kind, int T, int H, int P, int norm, int repeat,
                           unsigned long long seed) {
    if (!want_case("ple_block", "%s T=%d H=%d P=%d norm=%d repeat=%d",
                   kind == G4_W_Q4 ? "q4" : "f16", T, H, P, norm, repeat))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)T * H, np = (size_t)T * P;
    host_linear g = make_linear(&s, kind, H, P, 0), pj = make_linear(&s, kind, P, H, 0);
    float *r = rnd(&s, n, -3, 3), *h = rnd(&s, n, -20, 20), *w = rnd(&s, (size_t)H, 0.5f, 2.0f);
    // x of rms ~12 / sqrt(H) (as mlp_block's): the gate is O(1) at every H, so pg, the
    // projection's input, stays within the dot tolerance's premise (|input| <= 3)
    const float c = 12.0f / sqrtf((float)H);
    float *w2 = rnd(&s, (size_t)H, 0.5f * c, 1.5f * c), *x = rnd(&s, n, -1.7f * c, 1.7f * c);
    float *mul = rnd(&s, np * 3, -2, 2), *nr = zeros(n), *want_h = dup(h, n);
    n_rmsnorm(nr, r, w, T, H, H, 1e-6f);
    for (size_t i = 0; i < n; i++) want_h[i] = (float)((double)h[i] + nr[i]);
    float *want_x = zeros(n);
    if (norm) n_rmsnorm(want_x, want_h, w2, T, H, H, 1e-6f);
    uint16_t *wb = f16_bits(w, (size_t)H), *w2b = f16_bits(w2, (size_t)H);
    void *dw = be_copy(wb, 2 * (size_t)H), *dw2 = be_copy(w2b, 2 * (size_t)H);
    g4_linear lg = be_linear(&g.l), lp = be_linear(&pj.l);
    tbuf dhi = tb_from(G4_F32, T, H, h), dr = tb_from(be->act_type, T, H, r);
    tbuf dho = tb_new(G4_F32, T, H), dm = tb_from(be->act_type, T, 3 * P, mul);
    tbuf dx = norm ? tb_new(be->act_type, T, H) : tb_from(be->act_type, T, H, x);
    tbuf dp = tb_new(be->act_type, T, P), dy = tb_new(be->act_type, T, H);
    const g4_add_norm a = {&dhi.b, &dho.b, &dr.b, dw, NULL, 1e-6f, 1, dw2};
    const g4_add_norm *pa = norm ? &a : NULL;
    be->ple_block(be, pa, &dx.b, &dp.b, &dy.b, &lg, &lp, &dm.b, P);
    float *got_x = tb_get(&dx), *got_p = tb_get(&dp), *got_y = tb_get(&dy);
    check_block_prologue(norm, &dho, &dx, got_x, want_h, want_x, x, n, "ple_block");
    float *a0 = zeros(np), *want_p = zeros(np), *want_y = zeros(n);
    n_matmul(a0, got_x, g.Wf, NULL, T, H, P, 0);
    for (size_t i = 0; i < np; i++) {
        const size_t row = i / P, col = i % P;
        want_p[i] = (float)(gelu_tanh(act_round(a0[i])) * act_round(mul[row * 3 * P + P + col]));
    }
    double rp = 0, ry = 0;
    for (size_t i = 0; i < np; i++) rp += (double)want_p[i] * want_p[i];
    report("pg vs naive", got_p, want_p, np, &TOL_GELU_DOT, tb_guards_ok(&dp, "pg"), 0);
    n_matmul(want_y, got_p, pj.Wf, NULL, T, P, H, 0);
    for (size_t i = 0; i < n; i++) ry += (double)want_y[i] * want_y[i];
    report("y vs naive", got_y, want_y, n, &TOL_DOT, tb_guards_ok(&dy, "y"), 0);
    printf("  (rms of the naive pg %.3g, y %.3g)\n", sqrt(rp / np), sqrt(ry / n));
    float *hi_after = tb_get(&dhi), *r_after = tb_get(&dr), *r_act = zeros(n);
    for (size_t i = 0; i < n; i++) r_act[i] = act_round(r[i]);
    CHECK_MSG(memcmp(hi_after, h, sizeof(float) * n) == 0, "ple_block changed h_in");
    CHECK_MSG(memcmp(r_after, r_act, sizeof(float) * n) == 0, "ple_block changed r");
    free(hi_after), free(r_after), free(r_act);
    if (repeat) {
        ple_call call = {pa, &dx.b, &dp.b, &dy.b, &lg, &lp, &dm.b, P};
        check_repeat(run_ple_block, &call, &dy, "y", got_y, &dp, "pg", got_p);
    }
    PERF("ple_block", be->ple_block(be, pa, &dx.b, &dp.b, &dy.b, &lg, &lp, &dm.b, P));
    be->free(be, dw), be->free(be, dw2);
    be_linear_free(&lg), be_linear_free(&lp);
    tb_free(&dhi), tb_free(&dr), tb_free(&dho), tb_free(&dm), tb_free(&dx), tb_free(&dp),
        tb_free(&dy);
    free_linear(&g), free_linear(&pj);
    free(r), free(h), free(w), free(w2), free(x), free(mul), free(nr), free(want_h), free(want_x),
        free(wb), free(w2b), free(got_x), free(got_p), free(got_y), free(a0), free(want_p),
        free(want_y);
}

// --- the cases ----------------------------------------------------------------------------------
// Shapes: tiny, odd (counts that are not multiples of the kernels' tiles), E2B. The CUDA kernels'
// supported() predicates (kernels/*.cuh) bound the odd ones: GEMMs take K, N multiples of 8 (Q4:
// N % 16, K % 64), the vision position embedding D % 8.
// mlp_block's Q4 cases (one row: on CUDA the persistent launch): tiny, odd (3 of 8 warps hold
// k tiles in phase 1; 65 k tiles of down in 3 uneven chunks; 20 phase-1 units), E2B (both
// widths, the engine's form: the add-norm, y over r), repeated and graph-replayed.
static void mlp_block_q4_cases(void) {
    case_mlp_block(G4_W_Q4, 1, 64, 64, 1, 0, 1, 64);
    case_mlp_block(G4_W_Q4, 1, 192, 320, 0, 0, 1, 65);
    case_mlp_block(G4_W_Q4, 1, 64, 4160, 1, 0, 0, 66);
    case_mlp_block(G4_W_Q4, 1, 1536, 6144, 1, 0, 1, 67);
    case_mlp_block(G4_W_Q4, 1, 1536, 6144, 0, 0, 0, 68);
    case_mlp_block(G4_W_Q4, 1, 1536, 6144, 1, 1, 0, 69);
    case_mlp_block(G4_W_Q4, 1, 1536, 12288, 1, 1, 0, 70);
    case_mlp_block(G4_W_Q4, 1, 1536, 12288, 1, 0, 1, 71);
}

// ple_block's cases, Q4 and fp16 alike, one row (on CUDA the cluster launch): tiny (H 64: most
// gate warps hold no k tile; fp16: 8 gate rows a CTA over 32 row phases), odd (P 192: 12 gate
// feature tiles of 5 warps each, 3 projection k tiles a feature tile, 2 feature tiles a pass;
// fp16: 24 column vectors x 10 row phases, 16 threads idle; H 1088: 17 gate k tiles, 68
// projection tiles; fp16: 136 gate rows a CTA, 34 projection units over 40 CTAs), E2B (hidden
// 1536, P 256), the largest taken (H 2048, P 512; fp16: 64 gate rows a thread, 8 steps), with
// and without the add-norm; then the ops apart: several rows, a P past the kernel's 512, fp16
// P 96 and H 1000 (outside the kernel's multiples of 64), fp16 several rows.
static void ple_block_cases(void) {
    for (int f = 0; f < 2; f++) {
        const g4_weight_kind k = f ? G4_W_F16 : G4_W_Q4;
        const unsigned long long s = f ? 170 : 80;
        case_ple_block(k, 1, 64, 64, 1, 1, s);
        case_ple_block(k, 1, 128, 64, 0, 0, s + 1);
        case_ple_block(k, 1, 192, 192, 1, 0, s + 2);
        case_ple_block(k, 1, 1088, 256, 1, 1, s + 3);
        case_ple_block(k, 1, 1536, 256, 1, 1, s + 4);
        case_ple_block(k, 1, 1536, 256, 0, 0, s + 5);
        case_ple_block(k, 1, 2048, 512, 1, 1, s + 6);
        case_ple_block(k, 1, 2048, 64, 1, 0, s + 7);
    }
    case_ple_block(G4_W_Q4, 3, 1536, 256, 1, 0, 88);
    case_ple_block(G4_W_Q4, 8, 256, 128, 0, 0, 89);
    case_ple_block(G4_W_Q4, 1, 256, 640, 1, 0, 90);
    case_ple_block(G4_W_F16, 1, 136, 96, 1, 0, 92);
    case_ple_block(G4_W_F16, 1, 1000, 64, 0, 0, 93);
    case_ple_block(G4_W_F16, 2, 1536, 256, 1, 0, 94);
}

static void run_cases(void) {
    case_memory(1, 1);
    case_memory(1000003, 2);
    case_convert(G4_F32, G4_F16, 1, 3, 3);
    case_convert(G4_F32, G4_F16, 17, 1536, 4);
    case_convert(G4_F16, G4_F32, 33, 7, 5);
    case_convert(G4_F32, G4_BF16, 5, 9, 6);
    case_convert(G4_BF16, G4_F32, 5, 9, 7);
    case_graph(17, 1536, 8);

    case_linear(G4_W_F16, 1, 16, 8, 0, 0, 0, 0, 10);
    case_linear(G4_W_F16, 17, 72, 40, 1, 0, 0, 0, 11);
    case_linear(G4_W_F16, 33, 64, 48, 0, 1, 1, 0, 12);    // f32 y += (residual add)
    case_linear(G4_W_F16, 17, 72, 40, 1, 0, 0, 1, 13);    // ClippableLinear
    case_linear(G4_W_F16, 3, 1536, 2048, 0, 0, 0, 0, 14); // E2B q_proj (8 x 256)
    case_linear(G4_W_F16, 5, 6144, 1536, 0, 1, 1, 0, 15); // E2B down_proj into the residual
    case_linear(G4_W_Q4, 1, 64, 16, 0, 0, 0, 0, 16);
    case_linear(G4_W_Q4, 17, 192, 48, 1, 0, 0, 0, 17);
    case_linear(G4_W_Q4, 2, 1536, 6144, 0, 0, 0, 0, 18); // E2B gate_proj
    case_linear(G4_W_Q4, 1, 1536, 5120, 0, 0, 0, 0, 19); // E2B q|k|v, full layer (unfused adds)
    case_linear(G4_W_F16, 1, 1536, 2560, 0, 0, 0, 0, 19); // E2B q|k|v, sliding layer
    // batched decode rows (8 < T <= 64): AUTO's skinny split-K GEMM
    case_linear(G4_W_Q4, 32, 2048, 256, 0, 1, 1, 0, 24); // o_proj-like K, into the residual
    case_linear(G4_W_F16, 16, 1536, 256, 1, 0, 0, 0, 25); // E2B k/v_proj
    case_linear_gelu_mul(G4_W_F16, 1, 64, 64, 20);
    case_linear_gelu_mul(G4_W_F16, 17, 136, 88, 21);
    case_linear_gelu_mul(G4_W_F16, 3, 1536, 6144, 22); // E2B MLP
    case_linear_gelu_mul(G4_W_Q4, 5, 1536, 6144, 23);
    case_linear_gelu_mul(G4_W_Q4, 31, 256, 512, 26); // batched decode rows (skinny)
    case_linear_gelu_mul(G4_W_F16, 64, 192, 264, 27);

    case_rmsnorm(1, 24, 8, 1, 0, 30);
    case_rmsnorm(17, 1536, 1536, 1, 0, 31);
    case_rmsnorm(33, 2048, 256, 1, 1, 32); // per-head q norm, in place
    case_rmsnorm(5, 4096, 512, 0, 0, 33);  // unweighted (v norm), global head dim
    case_rmsnorm(7, 768, 768, 1, 0, 34);   // vision width
    case_rmsnorm(2304, 768, 64, 1, 1, 35); // vision per-head q norm (sub-warp path), in place
    case_rmsnorm(5, 48, 16, 0, 0, 36);     // sub-warp path, a part-filled CTA
    case_rmsnorm(9, 72, 24, 1, 0, 37);     // 3 vectors a group: the CTA-per-group path
    case_rmsnorm(750, 1024, 1024, 1, 1, 38); // audio width (warp per row), in place
    case_rmsnorm(11, 1024, 512, 0, 0, 39);  // 512-column groups (warp per group)
    for (int next = 0; next < 4; next++) case_add_rmsnorm(1, 1536, next, next != 2, 40 + next);
    case_add_rmsnorm(33, 1536, 1, 0, 44);
    // add_norm_linear: the decode step's three adds (E2B: q after the PLE add with the layer
    // scalar, the gated MLP after the attention add, the PLE gate after the MLP add's copy),
    // tiny and odd shapes, M = 8 rows, and shapes the CUDA fused kernel leaves to the unfused
    // pair (9 rows, K > 2048, fp16 weights)
    case_add_norm_linear(G4_W_Q4, 1, 1536, 2048, 0, 1, 1, 45);
    case_add_norm_linear(G4_W_Q4, 1, 1536, 6144, 1, 1, 0, 46);
    case_add_norm_linear(G4_W_Q4, 1, 1536, 256, 2, 0, 0, 47);
    case_add_norm_linear(G4_W_Q4, 8, 1536, 256, 2, 0, 0, 48);
    case_add_norm_linear(G4_W_Q4, 3, 1536, 256, 0, 0, 0, 54);
    case_add_norm_linear(G4_W_F16, 1, 64, 32, 2, 0, 1, 55);
    case_add_norm_linear(G4_W_F16, 1, 1536, 2048, 0, 1, 1, 56); // the f16 step's three adds
    case_add_norm_linear(G4_W_F16, 1, 1536, 6144, 1, 1, 0, 57);
    case_add_norm_linear(G4_W_F16, 8, 1536, 256, 2, 0, 0, 58);
    case_add_norm_linear(G4_W_F16, 3, 1536, 256, 0, 0, 1, 59);
    case_add_norm_linear(G4_W_Q4, 1, 64, 16, 0, 1, 1, 49);
    case_add_norm_linear(G4_W_Q4, 5, 640, 48, 1, 1, 1, 50);
    case_add_norm_linear(G4_W_Q4, 9, 64, 16, 0, 1, 0, 51);
    case_add_norm_linear(G4_W_Q4, 1, 2112, 32, 0, 1, 0, 52);
    case_add_norm_linear(G4_W_F16, 2, 72, 40, 1, 1, 1, 53);
    // the decode's q|k|v as one GEMV (E2B: 8 q heads + k + v of 256, or of 512 on full layers)
    case_add_norm_linear(G4_W_Q4, 1, 1536, 2560, 0, 1, 1, 60);
    case_add_norm_linear(G4_W_Q4, 1, 1536, 5120, 0, 1, 1, 61);
    case_add_norm_linear(G4_W_F16, 1, 1536, 2560, 0, 1, 1, 62);
    case_add_norm_linear(G4_W_F16, 1, 1536, 5120, 0, 1, 1, 63);
    // mlp_block: tiny, odd (3 of 8 warps hold k tiles in phase 1; 65 k tiles of down in 3
    // uneven chunks; 20 phase-1 units), E2B (both widths, the engine's form: the add-norm, y
    // over r), repeated and graph-replayed; rows and weights CUDA runs as the ops apart
    mlp_block_q4_cases();
    ple_block_cases();
    case_mlp_block(G4_W_Q4, 2, 128, 256, 1, 0, 0, 72);
    case_mlp_block(G4_W_F16, 1, 128, 256, 1, 1, 0, 73);
    case_add_rmsnorm(7, 40, 0, 1, 45);
    // the towers' widths (the warp-per-row kernels): vision 768, audio 1024, and 512
    for (int next = 0; next < 4; next++) case_add_rmsnorm(9, 768, next, next != 2, 46 + next);
    case_add_rmsnorm(750, 1024, 0, 0, 50);
    case_add_rmsnorm(3, 512, 1, 1, 51);
    case_gelu_mul(1, 24, 24, 0, 50);
    case_gelu_mul(17, 6144, 6144, 0, 51);
    case_gelu_mul(33, 256, 35 * 256, 256 * 7, 52); // the per-layer-input slice of layer 7
    case_scale(1, 3, 0.5f, 55);
    case_scale(17, 1536, 39.1875f, 56);
    case_add(1, 3, 0, 57);
    case_add(17, 1536, 1, 58);
    case_add(33, 1024, 0, 59);

    case_qkv_prep(1, 8, 1, 256, 0, 1, 4000, 60);  // decode, sliding layer
    case_qkv_prep(1, 8, 1, 512, 1, 1, 32767, 61); // decode, global layer (proportional)
    case_qkv_prep(17, 8, 1, 256, 0, 1, 0, 62);    // prefill chunk
    case_qkv_prep(33, 8, 1, 256, 0, 0, 7, 63);    // KV-shared layer: q only
    case_qkv_prep(5, 4, 2, 128, 0, 1, 3, 64);     // GQA 2:1, hd 128
    case_attention(1, 8, 1, 256, 512, 1000, 65);  // decode, sliding window 512
    case_attention(1, 8, 1, 512, 0, 1000, 66);    // decode, global
    case_attention(17, 8, 1, 256, 512, 600, 67);  // prefill chunk across the window edge
    case_attention(33, 8, 1, 512, 0, 0, 68);
    case_attention(5, 4, 2, 256, 3, 2, 69); // GQA 2:1, a tiny window
    // the batch step's row-batched ops: 1, 2, 3, 7 and 32 rows, each its own cache and length
    // (one key, past the window, spread), E2B heads at 256 / 512, GQA
    case_qkv_prep_rows(1, 8, 1, 256, 0, 1, 140);
    case_qkv_prep_rows(2, 8, 1, 512, 1, 1, 141);
    case_qkv_prep_rows(3, 8, 1, 256, 0, 1, 142); // row 2 outside its cache
    case_qkv_prep_rows(7, 4, 2, 256, 0, 1, 143);
    case_qkv_prep_rows(32, 8, 1, 512, 1, 0, 144); // KV-shared layer: q only
    case_qkv_prep_rows(32, 8, 1, 256, 0, 1, 145);
    case_attention_rows(1, 8, 1, 256, 0, 40, 146);
    case_attention_rows(2, 8, 1, 512, 0, 300, 147);
    case_attention_rows(3, 8, 1, 256, 4, 30, 148); // a tiny window: lengths 1, past it, ...
    case_attention_rows(7, 4, 2, 256, 3, 20, 149); // GQA 2:1
    case_attention_rows(7, 8, 1, 512, 0, 90, 150);
    case_attention_rows(32, 8, 1, 256, 16, 70, 151);
    case_attention_rows(32, 8, 1, 512, 0, 40, 152);
    case_attention_rows(3, 8, 1, 256, 512, 1100, 153); // E2B sliding window, many tiles
    // the head preparation inside the decode attention (issue 30): one token (E2B heads at 256
    // sliding and 512 global, q only for a KV-shared layer, many tiles and splits, GQA 2:1) and
    // the rows form (lengths 1, past the window, spread)
    case_qkv_attention(0, 1, 8, 1, 256, 0, 1, 512, 1000, 154);
    case_qkv_attention(0, 1, 8, 1, 512, 1, 1, 0, 3000, 155);
    case_qkv_attention(0, 1, 8, 1, 512, 1, 0, 0, 700, 156); // KV-shared: q only
    case_qkv_attention(0, 1, 8, 1, 256, 0, 1, 0, 0, 157);   // the first token
    case_qkv_attention(0, 1, 4, 2, 256, 0, 1, 3, 70, 158);  // GQA 2:1, a tiny window
    case_qkv_attention(1, 3, 8, 1, 256, 0, 1, 4, 30, 159);
    case_qkv_attention(1, 7, 8, 1, 512, 1, 1, 0, 90, 160);
    case_qkv_attention(1, 7, 4, 2, 256, 0, 1, 3, 20, 161);
    case_qkv_attention(1, 32, 8, 1, 512, 1, 0, 0, 40, 162);    // KV-shared
    case_qkv_attention(1, 3, 8, 1, 256, 0, 1, 512, 1100, 163); // E2B window, many tiles
    // the alt pattern's shapes (make_package.py --preset alt; issue 30: nothing fitted to E2B):
    // GQA 8:2 (4 query heads a KV head; E2B 8:1), window 1024, hidden 2048, MLP 8192
    case_qkv_prep(1, 8, 2, 256, 0, 1, 2000, 170);
    case_qkv_prep(1, 8, 2, 512, 1, 1, 9000, 171);
    case_attention(1, 8, 2, 256, 1024, 1500, 172);  // decode past the window
    case_attention(1, 8, 2, 512, 0, 1500, 173);     // decode, global
    case_attention(17, 8, 2, 256, 1024, 1020, 174); // prefill chunk across the window edge
    case_attention_rows(7, 8, 2, 512, 0, 300, 175);
    case_attention_rows(3, 8, 2, 256, 1024, 1200, 176);
    case_qkv_attention(0, 1, 8, 2, 512, 1, 1, 0, 2000, 177);
    case_qkv_attention(0, 1, 8, 2, 256, 0, 0, 1024, 1100, 178); // KV-shared: q only
    case_qkv_attention(1, 7, 8, 2, 256, 0, 1, 1024, 1200, 179);
    case_add_norm_linear(G4_W_Q4, 1, 2048, 3072, 0, 1, 1, 180);  // q|k|v, sliding (8+2+2 x 256)
    case_add_norm_linear(G4_W_F16, 1, 2048, 6144, 0, 1, 1, 181); // q|k|v, full (8+2+2 x 512)
    case_mlp_block(G4_W_Q4, 1, 2048, 8192, 1, 0, 0, 182);

    case_ple_inputs(1, 35, 256, 100, 70);
    case_ple_inputs(17, 35, 256, 300, 71);
    case_ple_inputs(3, 2, 512, 17, 72);
    case_embed(1, 4096, 1536, 0, 0, 73);
    case_embed(17, 500, 1536, 1, 0, 74);
    case_embed(3, 17, 40, 0, 0, 75);
    case_embed(5, 700, 1536, 0, 1, 76);
    case_softcap(1, 3, 30.0f, 77);
    case_softcap(2, 262144, 30.0f, 78);
    case_sample(1, 262144, 30.0f, 0, 0, 0, 80); // E2B vocabulary, greedy
    case_sample(1, 262144, 30.0f, 1, 0, 0, 81); // top-k 1 through the sampling path
    case_sample(3, 262144, 30.0f, 0, 1, 1, 82); // ties, a NaN row
    case_sample(2, 1001, 0.0f, 0, 1, 0, 83);    // odd vocabulary, no cap
    case_sample(1, 24, 30.0f, 1, 0, 0, 84);
    case_sample_rows(1, 1001, 30.0f, 0, 154);
    case_sample_rows(2, 262144, 30.0f, 0, 155); // E2B vocabulary: a greedy and a sampled row
    case_sample_rows(3, 1001, 0.0f, 1, 156);    // a NaN row
    case_sample_rows(7, 5003, 30.0f, 0, 157);
    case_sample_rows(32, 2048, 30.0f, 0, 158);
    case_sample_rows_counts(262144, 0.0f, 159); // E2B vocabulary (128 CTAs a row), one handle
    case_scatter_rows(17, 5, 33, 85);
    case_scatter_rows(600, 280, 1536, 86);

    case_clamp(1, 3, -1.5f, 2.25f, 1, 90);
    case_clamp(17, 33, -1.5f, 2.25f, 0, 91);
    case_clamp(750, 1024, -1.0f, 0.5f, 0, 92);
    case_silu(1, 1, 0, 93);
    case_silu(13, 37, 0, 94);
    case_silu(750, 1024, 1, 95);
    case_glu(1, 1, 96);
    case_glu(7, 13, 97);
    case_glu(750, 1024, 98);
    case_transpose(G4_F16, 1, 1, 100);
    case_transpose(G4_F16, 17, 33, 101);
    case_transpose(G4_F32, 33, 17, 102);
    case_transpose(G4_I32, 1000, 3, 103);
    case_transpose(G4_F16, 24000, 32, 104); // E2B: 750 frames x 32 mel of 32 channels
    case_rope_2d(1, 1, 1, 64, 105);
    case_rope_2d(5, 3, 2, 64, 106);
    case_rope_2d(42, 60, 12, 64, 107); // E2B, 2520 patches
    case_attention_bidir(1, 1, 64, 1.0f, 110);
    case_attention_bidir(17, 2, 64, 1.0f, 111);
    case_attention_bidir(33, 3, 64, 0.125f, 112);
    case_attention_bidir(300, 12, 64, 1.0f, 113); // E2B heads, 300 patches
    case_vision_posemb(1, 1, 8, 1, 115);
    case_vision_posemb(7, 5, 40, 16, 116);
    case_vision_posemb(42, 60, 768, 10240, 117);
    case_vision_pool(3, 3, 4, 3, 120);
    case_vision_pool(9, 6, 40, 3, 121);
    case_vision_pool(42, 60, 768, 3, 122);
    case_sscp_conv(1, 1, 1, 32, 1, 0, 125);
    case_sscp_conv(7, 9, 1, 128, 1, 1, 126);
    case_sscp_conv(301, 128, 1, 128, 1, 1, 127); // E2B layer 0 (3 s)
    case_sscp_conv(19, 64, 128, 32, 0, 1, 128);  // E2B layer 1
    case_sscp_conv(9, 10, 32, 64, 0, 0, 129);
    case_dwconv1d_causal(1, 8, 5, 130);
    case_dwconv1d_causal(7, 40, 5, 131);
    case_dwconv1d_causal(750, 1024, 5, 132);
    case_audio_attention(1, 1, 32, 0, 135);
    case_audio_attention(13, 8, 32, 1, 136);
    case_audio_attention(100, 8, 128, 1, 137); // E2B heads
    close_case();
}

static void run_backend(void) {
    check_harness();
    run_cases();
    if (!cases.op_filter && !cases.shape_filter) check_coverage();
}

int main(int argc, char **argv) {
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "perf"))
            perf_mode = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            perf_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--break"))
            break_mode = 1;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc &&
                 (!strcmp(argv[i + 1], "cpu") || !strcmp(argv[i + 1], "cuda")))
            only = argv[++i];
        else if (!strcmp(argv[i], "--op") && i + 1 < argc)
            cases.op_filter = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            cases.shape_filter = argv[++i];
        else {
            fprintf(stderr,
                    "usage: %s [perf] [--reps N] [--break] [--backend cpu|cuda] [--op S] "
                    "[--shape S]\n",
                    NAME);
            return 1;
        }
    }
    if (perf_reps < 1) perf_reps = 1;
    check_field_list();
    const char *cuda_skip = NULL;
    if (!only || !strcmp(only, "cpu")) {
        be = g4_backend_cpu();
        printf("== %s half: the cpu backend vs the naive ops%s\n", NAME,
               break_mode ? " (--break: every case must fail)" : "");
        run_backend();
    }
    if (!only || !strcmp(only, "cuda")) {
        const char *why = NULL;
        be = g4_cuda_device_count(&why) > 0 ? g4_backend_cuda(&why) : NULL;
        if (!be) {
            cuda_skip = why ? why : "no CUDA device";
        } else {
            char dev[256];
            g4_cuda_describe(dev, sizeof dev);
            printf("== %s half: the cuda backend vs the naive ops, on %s%s\n", NAME, dev,
                   break_mode ? " (--break: every case must fail)" : "");
            run_backend();
        }
    }
    printf("%s: %d cases, %d failed\n", NAME, cases.run, cases.failed);
    if (cuda_skip) printf("SKIP %s cuda half: %s\n", NAME, cuda_skip);
    if (cases.run == 0) {
        if (cuda_skip && only) return g4t_skip(NAME, cuda_skip);
        printf("%s: no case matched the filters\n", NAME);
        return 1;
    }
    return g4t_finish(NAME);
}
