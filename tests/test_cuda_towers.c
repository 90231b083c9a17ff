// test_cuda_towers.c: the vision and audio tower ops on the CUDA backend against the CPU backend
// (the oracle), through the op tables (be->op), so the backend's mapping onto the kernels is what
// is tested (the kernels themselves have their tables in test_cuda_attention/_conv/_ops):
//
//   1. op cases, each at tiny, odd and real E2B shapes, the same fp16-representable inputs on both
//      backends: clamp, silu, glu, transpose, linear (ClippableLinear: input/output bounds, f16
//      and f32 y, x left untouched), linear_gelu_mul (clipped gate/up), rope_2d,
//      attention_bidir, vision_posemb, vision_pool, sscp_conv (both E2B layers, frame masks),
//      dwconv1d_causal, audio_attention (frame masks), and the mixed-type add/convert the towers
//      use between the f32 residual stream and f16 activations. Outputs lie between guard zones
//      that must come back unchanged and are poisoned with NaN first; a NaN or inf where the
//      reference is finite fails. Cases with bounds also check that the bounds change the
//      reference (so a backend that ignored them would fail).
//   2. a tower the kernels cannot take (the mobius-tiny fixture's) is refused at load with a
//      user error (CUDA only).
//   3. towers: the vision tower on two images and the audio tower on a speech clip (once with
//      its own mask, once with the last 30% of the frames masked) of the gpu-tiny package
//      (tools/python/make_package.py --preset gpu-tiny, made at test time on the GPU machine:
//      G4_GPU_TINY_PKG), every hooked tensor and the soft tokens; once with the package's clip
//      bounds (+-inf: random init) and once with finite bounds on every ClippableLinear that
//      change the CPU's soft tokens by > 10x the tolerance.
//
// Named tolerances, |got - want| <= atol + rtol * |want| per element:
//   exact      (0, 0)        clamp, transpose: comparisons and copies of the same values.
//   f16-out    (1e-4, 1e-3)  one fp16 rounding (2^-11 = 4.9e-4 relative, 2x) of an fp32 result
//                            computed from the same inputs (silu, glu, rope_2d, dwconv1d,
//                            sscp_conv, convert); atol for fp32 sums that cancel near 0.
//   f32-out    (1e-5, 1e-5)  fp32 results, only the summation order differs (posemb, pool, add).
//   linear     (1e-3, 1e-3)  fp32 accumulation of <= 3072 fp16 products (|terms| <= 0.3, error
//                            ~1e-5) and the fp16 output rounding; the output clamp of a value
//                            within that error of a bound moves it by no more.
//   gelu-mul   (1e-3, 2e-3)  the gate and up halves each rounded to fp16 before the product (as
//                            HF's fp16 model does), then the product: three roundings.
//   attn       (1e-3, 2e-3)  fp16 P in the P V product (<= 2^-11 * max|v|, |v| <= 1) + rounding
//                            (as test_cuda_attention).
//   audio-attn (2e-4, 1e-3)  fp32 end to end, fp16 output (as test_cuda_attention).
//   tower      rel err ||cuda - cpu|| / ||cpu|| <= 1e-2 per hooked tensor (as test_cuda_engine):
//                            fp16 activations round every op's output (4.9e-4) and a layer has
//                            ~20 ops (the conformer ~40). An emulation of fp16 storage (the CPU
//                            ops with every f16 buffer rounded) gave <= 7.1e-4 on a gpu-tiny
//                            package made on a CPU; ignoring the clip bounds gave >= 3.3e-1.
//
// Usage: test_cuda_towers [--op S] [--shape S] [--dut cpu]. --dut cpu runs the CPU backend
// against itself (a harness self-check: errors must be 0), without a GPU.
// No GPU: exit 77. No G4_GPU_TINY_PKG: the op cases run, then exit 77 (1 if one failed).
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/audio_tower.h"
#include "engine/vision_tower.h"
#include "fidelity/compare.h"
#include "kernels/backend_select.h"
#include "kernels/cuda_util.h"
#include "kernels/ops.h"
#include "loader/package.h"
#include "tests/test_util.h"

#define NAME "test_cuda_towers"

typedef struct {
    const char *name;
    double atol, rtol;
} tol;
static const tol TOL_EXACT = {"exact", 0, 0};
static const tol TOL_F16 = {"f16-out", 1e-4, 1e-3};
static const tol TOL_F32 = {"f32-out", 1e-5, 1e-5};
static const tol TOL_LINEAR = {"linear", 1e-3, 1e-3};
static const tol TOL_GELU = {"gelu-mul", 1e-3, 2e-3};
static const tol TOL_ATTN = {"attn", 1e-3, 2e-3};
static const tol TOL_AUDIO = {"audio-attn", 2e-4, 1e-3};
#define TOL_TOWER 1e-2

static g4_backend *cpu, *dut;
static const char *op_filter, *shape_filter;
static int cases_run, cases_failed, case_open, case_fail_mark;

// Ends the current case: it failed when any check failed since it began.
static void close_case(void) {
    if (case_open && g4t_failures > case_fail_mark) cases_failed++;
    case_open = 0;
}

// Whether a case runs; prints its header line when it does.
static int want_case(const char *op, const char *fmt, ...) G4_PRINTF(2, 3);
static int want_case(const char *op, const char *fmt, ...) {
    close_case();
    char shape[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(shape, sizeof shape, fmt, ap);
    va_end(ap);
    if (op_filter && !strstr(op, op_filter)) return 0;
    if (shape_filter && !strstr(shape, shape_filter)) return 0;
    printf("case %-16s %s\n", op, shape);
    fflush(stdout);
    cases_run++;
    case_open = 1;
    case_fail_mark = g4t_failures;
    return 1;
}

// --- host data --------------------------------------------------------------------------------
// n random values in [lo, hi), rounded to fp16 (so both backends start from the same values),
// never zero.
static float *rnd(unsigned long long *s, size_t n, float lo, float hi) {
    float *f = g4_malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        float v = g4t_rand_uniform(s, lo, hi);
        f[i] = g4_round_f16(v == 0.0f ? 0.5f * hi : v);
    }
    return f;
}

static uint16_t *f16_bits(const float *x, size_t n) {
    uint16_t *b = g4_malloc(2 * (n ? n : 1));
    for (size_t i = 0; i < n; i++) b[i] = g4_f32_to_f16(x[i]);
    return b;
}

static float *dup_f(const float *x, size_t n) {
    float *d = g4_malloc(sizeof(float) * (n ? n : 1));
    memcpy(d, x, sizeof(float) * n);
    return d;
}

// Patch positions of a gw x gh grid in row-major patch order: (x, y) = (i % gw, i / gw).
static int32_t *grid_pos(int gw, int gh) {
    int32_t *p = g4_malloc(sizeof(int32_t) * 2 * (size_t)gw * gh);
    for (int i = 0; i < gw * gh; i++) p[2 * i] = i % gw, p[2 * i + 1] = i / gw;
    return p;
}

// A host F32 / I32 buffer for the CPU backend (it computes in host memory).
static g4_buf hb(float *data, int rows, int cols) {
    return (g4_buf){data, G4_F32, rows, cols};
}
static g4_buf hbi(int32_t *data, int rows, int cols) {
    return (g4_buf){data, G4_I32, rows, cols};
}

// Rows of a [T, .] output that the CPU reference computes: all for small T, else the first and
// last 16 and 32 spread between (the op's mapping is the same for every row).
static int pick_rows(int T, int *rows) {
    int n = 0;
    if (T <= 96) {
        for (int t = 0; t < T; t++) rows[n++] = t;
        return n;
    }
    for (int t = 0; t < 16; t++) rows[n++] = t;
    for (int i = 0; i < 32; i++) rows[n++] = 16 + (int)((long long)(T - 32) * (2 * i + 1) / 64);
    for (int t = T - 16; t < T; t++) rows[n++] = t;
    return n;
}

static float *gather_rows(const float *x, int cols, const int *rows, int n) {
    float *o = g4_malloc(sizeof(float) * (size_t)n * cols + 1);
    for (int i = 0; i < n; i++)
        memcpy(o + (size_t)i * cols, x + (size_t)rows[i] * cols, sizeof(float) * cols);
    return o;
}

// --- device (DUT) buffers -----------------------------------------------------------------------
#define GUARD      256
#define GUARD_BYTE 0xA5

typedef struct {
    g4_buf b;
    char *base;
    size_t bytes; // of b
} dbuf;

static void host_from_f32(void *dst, g4_type t, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) switch (t) {
        case G4_F32:
            ((float *)dst)[i] = src[i];
            break;
        case G4_F16:
            ((uint16_t *)dst)[i] = g4_f32_to_f16(src[i]);
            break;
        case G4_BF16:
            ((uint16_t *)dst)[i] = g4_bf16_round(src[i]);
            break;
        case G4_I32:
            ((int32_t *)dst)[i] = (int32_t)src[i];
            break;
        }
}

static void host_to_f32(float *dst, g4_type t, const void *src, size_t n) {
    for (size_t i = 0; i < n; i++) switch (t) {
        case G4_F32:
            dst[i] = ((const float *)src)[i];
            break;
        case G4_F16:
            dst[i] = g4_f16_to_f32(((const uint16_t *)src)[i]);
            break;
        case G4_BF16:
            dst[i] = g4_bf16_to_f32(((const uint16_t *)src)[i]);
            break;
        case G4_I32:
            dst[i] = (float)((const int32_t *)src)[i];
            break;
        }
}

// A [rows, cols] buffer of type t on the DUT between two guard zones, poisoned with NaN (fp
// types) or 0x7fc00000 (I32). misalign: the data starts one element past a 16-byte boundary
// (the kernels' scalar fallbacks).
static dbuf dbuf_new(g4_type t, int rows, int cols, int misalign) {
    dbuf d;
    const size_t es = g4_type_size(t), off = misalign ? es : 0;
    d.b = (g4_buf){NULL, t, rows, cols};
    d.bytes = g4_buf_bytes(&d.b);
    d.base = dut->alloc(dut, d.bytes + off + 2 * GUARD);
    if (!d.base) {
        fprintf(stderr, "%s: out of memory for %zu bytes\n", NAME, d.bytes);
        exit(2);
    }
    d.b.data = d.base + GUARD + off;
    uint8_t *g = g4_malloc(GUARD + off);
    memset(g, GUARD_BYTE, GUARD + off);
    dut->upload(dut, d.base, g, GUARD + off);
    dut->upload(dut, (char *)d.b.data + d.bytes, g, GUARD);
    free(g);
    uint8_t *p = g4_malloc(d.bytes + 1);
    for (size_t i = 0; i < d.bytes / es; i++) {
        if (es == 2) ((uint16_t *)p)[i] = t == G4_BF16 ? 0x7FC0 : 0x7E00;
        if (es == 4) ((uint32_t *)p)[i] = 0x7fc00000u;
    }
    dut->upload(dut, d.b.data, p, d.bytes);
    dut->sync(dut);
    free(p);
    return d;
}

// Sets the buffer from host floats (converted to its type; I32 from integral floats).
static void dbuf_set(dbuf *d, const float *x) {
    const size_t n = (size_t)d->b.rows * d->b.cols;
    void *h = g4_malloc(d->bytes + 1);
    host_from_f32(h, d->b.type, x, n);
    dut->upload(dut, d->b.data, h, d->bytes);
    dut->sync(dut);
    free(h);
}

static void dbuf_set_i32(dbuf *d, const int32_t *v) {
    G4_ASSERT(d->b.type == G4_I32);
    dut->upload(dut, d->b.data, v, d->bytes);
    dut->sync(dut);
}

// The buffer as host floats (new array).
static float *dbuf_get(dbuf *d) {
    const size_t n = (size_t)d->b.rows * d->b.cols;
    void *h = g4_malloc(d->bytes + 1);
    dut->sync(dut);
    dut->download(dut, h, d->b.data, d->bytes);
    float *f = g4_malloc(sizeof(float) * n + 1);
    host_to_f32(f, d->b.type, h, n);
    free(h);
    return f;
}

static int dbuf_guards_ok(dbuf *d, const char *what) {
    const size_t off = (size_t)((char *)d->b.data - d->base) - GUARD;
    uint8_t *g = g4_malloc(2 * GUARD + off);
    dut->download(dut, g, d->base, GUARD + off);
    dut->download(dut, g + GUARD + off, (char *)d->b.data + d->bytes, GUARD);
    int ok = 1;
    for (size_t i = 0; i < 2 * GUARD + off && ok; i++)
        if (g[i] != GUARD_BYTE) {
            printf("    %s: guard byte %zu of the %s zone overwritten\n", what,
                   i < GUARD + off ? i : i - GUARD - off, i < GUARD + off ? "leading" : "trailing");
            ok = 0;
        }
    free(g);
    return ok;
}

static void dbuf_free(dbuf *d) {
    if (d->base) dut->free(dut, d->base);
    d->base = NULL;
}

// Host bytes placed on the DUT (weights, tables, frequencies); free with dut->free.
static void *dev_copy(const void *host, size_t bytes) {
    void *p = dut->alloc(dut, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "%s: out of memory for %zu bytes\n", NAME, bytes);
        exit(2);
    }
    dut->upload(dut, p, host, bytes);
    dut->sync(dut);
    return p;
}

// --- comparison -------------------------------------------------------------------------------
// Compares got with want (n values) under t and records one check. NaN in want must be NaN in
// got (torch.clamp keeps NaN), an infinite want must be matched exactly, and a NaN or inf in got
// where want is finite always fails (poisoned outputs that were never written).
static void report(const char *what, const float *got, const float *want, size_t n, tol t,
                   int extra_ok) {
    size_t bad = 0, worst = 0, nonfinite = 0;
    double max_err = 0, max_ratio = 0;
    for (size_t i = 0; i < n; i++) {
        double ratio; // |err| / allowed; INFINITY for a mismatched NaN or inf
        if (isnan(want[i]) || isinf(want[i])) {
            ratio = (isnan(want[i]) ? isnan(got[i]) : got[i] == want[i]) ? 0 : INFINITY;
        } else if (!isfinite(got[i])) {
            ratio = INFINITY;
            nonfinite++;
        } else {
            const double d = fabs((double)got[i] - want[i]), lim = t.atol + t.rtol * fabs(want[i]);
            if (d > max_err) max_err = d;
            ratio = lim > 0 ? d / lim : d > 0 ? INFINITY : 0;
        }
        if (ratio > max_ratio) max_ratio = ratio, worst = i;
        if (ratio > 1) bad++;
    }
    const int ok = bad == 0 && extra_ok;
    g4t_checks++;
    if (!ok) g4t_failures++;
    printf("  %-26s %s  max|err| %.3g  worst/tol %.3g  (%s: atol %.0e rtol %.0e)%s%s\n", what,
           ok ? "ok  " : "FAIL", max_err, max_ratio, t.name, t.atol, t.rtol,
           extra_ok ? "" : "  GUARD/INPUT", nonfinite ? "  NONFINITE" : "");
    if (bad)
        printf("    %zu bad of %zu; worst [%zu] got %.7g want %.7g\n", bad, n, worst, got[worst],
               want[worst]);
    fflush(stdout);
}

// The largest |a - b| (a "does this setting change the result" measure).
static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

// The type a case runs in on the DUT: f16 activations become f32 on a backend computing in f32
// (the --dut cpu self-check).
static g4_type dt(g4_type t) {
    return t == G4_F16 && dut->act_type == G4_F32 ? G4_F32 : t;
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

// --- 1. op cases --------------------------------------------------------------------------------

static void case_clamp(g4_type t, int rows, int cols, float lo, float hi, int misalign,
                       unsigned long long seed) {
    t = dt(t);
    if (!want_case("clamp", "%s [%d, %d] lo=%g hi=%g misaligned=%d", g4_type_name(t), rows, cols,
                   lo, hi, misalign))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -4, 4);
    if (n >= 3) x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY; // torch.clamp: NaN stays NaN
    float *want = dup_f(x, n);
    g4_buf h = hb(want, rows, cols);
    cpu->clamp(cpu, &h, lo, hi);
    int changed = 0;
    for (size_t i = 0; i < n; i++) changed += want[i] != x[i] && !isnan(x[i]);
    CHECK_MSG(changed > 0, "clamp case with bounds that change nothing");
    dbuf d = dbuf_new(t, rows, cols, misalign);
    dbuf_set(&d, x);
    dut->clamp(dut, &d.b, lo, hi);
    float *got = dbuf_get(&d);
    report("x vs cpu", got, want, n, TOL_EXACT, dbuf_guards_ok(&d, "x"));
    dbuf_free(&d);
    free(x), free(want), free(got);
}

static void case_silu(g4_type t, int rows, int cols, int in_place, unsigned long long seed) {
    t = dt(t);
    if (!want_case("silu", "%s [%d, %d] in_place=%d", g4_type_name(t), rows, cols, in_place))
        return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -12, 12), *want = g4_malloc(sizeof(float) * n + 1);
    g4_buf hx = hb(x, rows, cols), hy = hb(want, rows, cols);
    cpu->silu(cpu, &hy, &hx);
    dbuf dx = dbuf_new(t, rows, cols, 0), dy = in_place ? dx : dbuf_new(t, rows, cols, 0);
    dbuf_set(&dx, x);
    dut->silu(dut, &dy.b, &dx.b);
    float *got = dbuf_get(&dy);
    report("y vs cpu", got, want, n, t == G4_F16 ? TOL_F16 : TOL_F32, dbuf_guards_ok(&dy, "y"));
    dbuf_free(&dx);
    if (!in_place) dbuf_free(&dy);
    free(x), free(want), free(got);
}

static void case_glu(g4_type t, int T, int C, unsigned long long seed) {
    t = dt(t);
    if (!want_case("glu", "%s T=%d C=%d", g4_type_name(t), T, C)) return;
    unsigned long long s = seed;
    const size_t nx = (size_t)T * 2 * C, ny = (size_t)T * C;
    float *x = rnd(&s, nx, -6, 6), *want = g4_malloc(sizeof(float) * ny + 1);
    g4_buf hx = hb(x, T, 2 * C), hy = hb(want, T, C);
    cpu->glu(cpu, &hy, &hx);
    dbuf dx = dbuf_new(t, T, 2 * C, 0), dy = dbuf_new(t, T, C, 0);
    dbuf_set(&dx, x);
    dut->glu(dut, &dy.b, &dx.b);
    float *got = dbuf_get(&dy);
    report("y vs cpu", got, want, ny, t == G4_F16 ? TOL_F16 : TOL_F32, dbuf_guards_ok(&dy, "y"));
    dbuf_free(&dx), dbuf_free(&dy);
    free(x), free(want), free(got);
}

static void case_transpose(g4_type t, int rows, int cols, unsigned long long seed) {
    t = dt(t);
    if (!want_case("transpose", "%s [%d, %d]", g4_type_name(t), rows, cols)) return;
    unsigned long long s = seed;
    const size_t n = (size_t)rows * cols;
    float *x = rnd(&s, n, -100, 100);
    if (t == G4_I32)
        for (size_t i = 0; i < n; i++) x[i] = (float)(int)(x[i] * 1000); // distinct integers
    float *want = g4_malloc(sizeof(float) * n + 1);
    g4_buf hx = hb(x, rows, cols), hy = hb(want, cols, rows);
    cpu->transpose(cpu, &hy, &hx); // the CPU op copies elements of any type
    dbuf dx = dbuf_new(t, rows, cols, 0), dy = dbuf_new(t, cols, rows, 0);
    dbuf_set(&dx, x);
    dut->transpose(dut, &dy.b, &dx.b);
    float *got = dbuf_get(&dy);
    report("y vs cpu", got, want, n, TOL_EXACT, dbuf_guards_ok(&dy, "y"));
    dbuf_free(&dx), dbuf_free(&dy);
    free(x), free(want), free(got);
}

// A fresh fp16 [in, out] weight on host memory (bits in *w_bits; bias bits or NULL).
static g4_linear make_linear(unsigned long long *s, int in, int out, int bias, uint16_t **w_bits,
                             uint16_t **b_bits) {
    float *w = rnd(s, (size_t)in * out, -0.1f, 0.1f);
    *w_bits = f16_bits(w, (size_t)in * out);
    free(w);
    *b_bits = NULL;
    if (bias) {
        float *b = rnd(s, (size_t)out, -0.5f, 0.5f);
        *b_bits = f16_bits(b, (size_t)out);
        free(b);
    }
    g4_linear l;
    memset(&l, 0, sizeof l);
    l.kind = G4_W_F16;
    l.in = in, l.out = out;
    l.w = *w_bits;
    l.bias = *b_bits;
    return l;
}

static void set_bounds(g4_linear *l, float in_lo, float in_hi, float out_lo, float out_hi) {
    l->clipped = 1;
    l->in_lo = in_lo, l->in_hi = in_hi, l->out_lo = out_lo, l->out_hi = out_hi;
}

// The DUT's copy of a host linear (prepare_linear places it; the CPU uses it in place).
static g4_linear dut_linear(const g4_linear *host) {
    g4_linear d = *host;
    if (dut->prepare_linear && dut->prepare_linear(dut, &d)) {
        fprintf(stderr, "%s: prepare_linear: %s\n", NAME, g4_error());
        exit(2);
    }
    return d;
}

static void dut_linear_free(g4_linear *d) {
    if (dut->release_linear) dut->release_linear(dut, d);
}

// ClippableLinear y = clamp(clamp(x, in) @ W (+ b), out); x must come back unchanged (q, k and
// v read the same x).
static void case_linear(int T, int in, int out, g4_type yt, float in_lo, float in_hi, float out_lo,
                        float out_hi, int bias, unsigned long long seed) {
    yt = dt(yt);
    if (!want_case("linear", "T=%d in=%d out=%d y=%s in=[%g, %g] out=[%g, %g] bias=%d", T, in, out,
                   g4_type_name(yt), in_lo, in_hi, out_lo, out_hi, bias))
        return;
    unsigned long long s = seed;
    uint16_t *wb, *bb;
    g4_linear l = make_linear(&s, in, out, bias, &wb, &bb);
    set_bounds(&l, in_lo, in_hi, out_lo, out_hi);
    float *x = rnd(&s, (size_t)T * in, -3, 3);
    int rows[96];
    const int nr = pick_rows(T, rows);
    float *xs = gather_rows(x, in, rows, nr);
    float *want = g4_malloc(sizeof(float) * (size_t)nr * out),
          *plain = g4_malloc(sizeof(float) * (size_t)nr * out);
    g4_buf hx = hb(xs, nr, in), hy = hb(want, nr, out), hp = hb(plain, nr, out);
    cpu->linear(cpu, &hy, &hx, &l, 0);
    g4_linear lp = l;
    lp.clipped = 0;
    cpu->linear(cpu, &hp, &hx, &lp, 0);
    const int finite_bounds =
        !(in_lo == -INFINITY && in_hi == INFINITY) || !(out_lo == -INFINITY && out_hi == INFINITY);
    const double bite = max_diff(want, plain, (size_t)nr * out);
    if (finite_bounds) CHECK_MSG(bite > 0.05, "the bounds change the reference by only %.3g", bite);

    g4_linear ld = dut_linear(&l);
    dbuf dx = dbuf_new(dut->act_type, T, in, 0), dy = dbuf_new(yt, T, out, 0);
    dbuf_set(&dx, x);
    dut->linear(dut, &dy.b, &dx.b, &ld, 0);
    float *got = dbuf_get(&dy), *x_after = dbuf_get(&dx);
    float *gs = gather_rows(got, out, rows, nr);
    const int x_same = max_diff(x_after, x, (size_t)T * in) == 0;
    if (!x_same) printf("    x was modified by the clipped linear\n");
    const int fin = all_finite(got, (size_t)T * out);
    if (!fin) printf("    non-finite values in y (rows never written?)\n");
    char what[64];
    snprintf(what, sizeof what, "y (%d rows) vs cpu", nr);
    report(what, gs, want, (size_t)nr * out, TOL_LINEAR, dbuf_guards_ok(&dy, "y") && x_same && fin);
    dut_linear_free(&ld);
    dbuf_free(&dx), dbuf_free(&dy);
    free(wb), free(bb), free(x), free(xs), free(want), free(plain), free(got), free(x_after),
        free(gs);
}

// gelu_tanh(clip_g(x Wg)) * clip_u(x Wu) with different bounds on gate and up.
static void case_gelu_mul(int T, int in, int F, int clip_gate, int clip_up,
                          unsigned long long seed) {
    if (!want_case("linear_gelu_mul", "T=%d in=%d F=%d clipped gate=%d up=%d", T, in, F, clip_gate,
                   clip_up))
        return;
    unsigned long long s = seed;
    uint16_t *wgb, *wub, *nb1, *nb2;
    g4_linear lg = make_linear(&s, in, F, 0, &wgb, &nb1),
              lu = make_linear(&s, in, F, 0, &wub, &nb2);
    if (clip_gate) set_bounds(&lg, -1.5f, 1.25f, -0.75f, 0.5f);
    if (clip_up) set_bounds(&lu, -1.0f, 2.0f, -1.0f, 1.0f);
    float *x = rnd(&s, (size_t)T * in, -3, 3);
    int rows[96];
    const int nr = pick_rows(T, rows);
    float *xs = gather_rows(x, in, rows, nr);
    float *want = g4_malloc(sizeof(float) * (size_t)nr * F),
          *plain = g4_malloc(sizeof(float) * (size_t)nr * F);
    g4_buf hx = hb(xs, nr, in), hy = hb(want, nr, F), hp = hb(plain, nr, F);
    cpu->linear_gelu_mul(cpu, &hy, &hx, &lg, &lu);
    g4_linear pg = lg, pu = lu;
    pg.clipped = pu.clipped = 0;
    cpu->linear_gelu_mul(cpu, &hp, &hx, &pg, &pu);
    const double bite = max_diff(want, plain, (size_t)nr * F);
    CHECK_MSG(bite > 0.05, "the bounds change the reference by only %.3g", bite);

    g4_linear dg = dut_linear(&lg), du = dut_linear(&lu);
    dbuf dx = dbuf_new(dut->act_type, T, in, 0), dy = dbuf_new(dut->act_type, T, F, 0);
    dbuf_set(&dx, x);
    dut->linear_gelu_mul(dut, &dy.b, &dx.b, &dg, &du);
    float *got = dbuf_get(&dy);
    float *gs = gather_rows(got, F, rows, nr);
    const int fin = all_finite(got, (size_t)T * F);
    if (!fin) printf("    non-finite values in y (rows never written?)\n");
    char what[64];
    snprintf(what, sizeof what, "y (%d rows) vs cpu", nr);
    report(what, gs, want, (size_t)nr * F, TOL_GELU, dbuf_guards_ok(&dy, "y") && fin);
    dut_linear_free(&dg), dut_linear_free(&du);
    dbuf_free(&dx), dbuf_free(&dy);
    free(wgb), free(wub), free(x), free(xs), free(want), free(plain), free(got), free(gs);
}

// inv_freq [hd/4] = 100^(-2j / (hd/2)) in fp32 (the E2B vision RoPE).
static float *vision_inv_freq(int hd) {
    float *f = g4_malloc(sizeof(float) * (size_t)(hd / 4));
    for (int j = 0; j < hd / 4; j++) f[j] = (float)pow(100.0, -2.0 * j / (hd / 2));
    return f;
}

static void case_rope_2d(int gw, int gh, int nh, int hd, unsigned long long seed) {
    const int T = gw * gh, w = nh * hd;
    if (!want_case("rope_2d", "grid %dx%d (T=%d) heads=%d hd=%d", gw, gh, T, nh, hd)) return;
    unsigned long long s = seed;
    float *x = rnd(&s, (size_t)T * w, -2, 2), *want = dup_f(x, (size_t)T * w);
    int32_t *pos = grid_pos(gw, gh);
    float *inv = vision_inv_freq(hd);
    g4_buf hx = hb(want, T, w), hp = hbi(pos, T, 2);
    cpu->rope_2d(cpu, &hx, nh, hd, &hp, inv);
    float *dinv = dev_copy(inv, sizeof(float) * (size_t)(hd / 4));
    dbuf dx = dbuf_new(dut->act_type, T, w, 0), dp = dbuf_new(G4_I32, T, 2, 0);
    dbuf_set(&dx, x);
    dbuf_set_i32(&dp, pos);
    dut->rope_2d(dut, &dx.b, nh, hd, &dp.b, dinv);
    float *got = dbuf_get(&dx);
    report("x vs cpu", got, want, (size_t)T * w, TOL_F16, dbuf_guards_ok(&dx, "x"));
    dut->free(dut, dinv);
    dbuf_free(&dx), dbuf_free(&dp);
    free(x), free(want), free(pos), free(inv), free(got);
}

static void case_bidir(int N, int nh, int hd, float scale, unsigned long long seed) {
    if (!want_case("attention_bidir", "N=%d heads=%d hd=%d scale=%g", N, nh, hd, scale)) return;
    unsigned long long s = seed;
    const int w = nh * hd;
    float *q = rnd(&s, (size_t)N * w, -1, 1), *k = rnd(&s, (size_t)N * w, -0.5f, 0.5f),
          *v = rnd(&s, (size_t)N * w, -1, 1);
    int rows[96];
    const int nr = pick_rows(N, rows);
    float *qs = gather_rows(q, w, rows, nr), *want = g4_malloc(sizeof(float) * (size_t)nr * w);
    g4_buf hq = hb(qs, nr, w), hk = hb(k, N, w), hv = hb(v, N, w), ho = hb(want, nr, w);
    cpu->attention_bidir(cpu, &ho, &hq, &hk, &hv, nh, hd, scale); // sampled query rows
    const g4_type at = dut->act_type;
    dbuf dq = dbuf_new(at, N, w, 0), dk = dbuf_new(at, N, w, 0), dv = dbuf_new(at, N, w, 0),
         dout = dbuf_new(at, N, w, 0);
    dbuf_set(&dq, q), dbuf_set(&dk, k), dbuf_set(&dv, v);
    dut->attention_bidir(dut, &dout.b, &dq.b, &dk.b, &dv.b, nh, hd, scale);
    float *got = dbuf_get(&dout), *gs = gather_rows(got, w, rows, nr);
    const int fin = all_finite(got, (size_t)N * w);
    if (!fin) printf("    non-finite values in out (rows never written?)\n");
    char what[64];
    snprintf(what, sizeof what, "out (%d rows) vs cpu", nr);
    report(what, gs, want, (size_t)nr * w, TOL_ATTN, dbuf_guards_ok(&dout, "out") && fin);
    dbuf_free(&dq), dbuf_free(&dk), dbuf_free(&dv), dbuf_free(&dout);
    free(q), free(k), free(v), free(qs), free(want), free(got), free(gs);
}

static void case_posemb(int gw, int gh, int D, int table_rows, unsigned long long seed) {
    const int N = gw * gh;
    if (!want_case("vision_posemb", "grid %dx%d (N=%d) D=%d table_rows=%d", gw, gh, N, D,
                   table_rows))
        return;
    unsigned long long s = seed;
    float *h = rnd(&s, (size_t)N * D, -2, 2), *want = dup_f(h, (size_t)N * D);
    float *tab = rnd(&s, (size_t)2 * table_rows * D, -1, 1);
    uint16_t *tb = f16_bits(tab, (size_t)2 * table_rows * D);
    int32_t *pos = grid_pos(gw, gh);
    g4_buf hh = hb(want, N, D), hp = hbi(pos, N, 2);
    cpu->vision_posemb(cpu, &hh, tb, table_rows, &hp);
    void *dtab = dev_copy(tb, (size_t)2 * table_rows * D * 2);
    dbuf dh = dbuf_new(G4_F32, N, D, 0), dp = dbuf_new(G4_I32, N, 2, 0);
    dbuf_set(&dh, h);
    dbuf_set_i32(&dp, pos);
    dut->vision_posemb(dut, &dh.b, dtab, table_rows, &dp.b);
    float *got = dbuf_get(&dh);
    report("h vs cpu", got, want, (size_t)N * D, TOL_F32, dbuf_guards_ok(&dh, "h"));
    dut->free(dut, dtab);
    dbuf_free(&dh), dbuf_free(&dp);
    free(h), free(want), free(tab), free(tb), free(pos), free(got);
}

static void case_pool(int gw, int gh, int D, int k, unsigned long long seed) {
    const int N = gw * gh, bins = (gw / k) * (gh / k);
    if (!want_case("vision_pool", "grid %dx%d (N=%d) D=%d k=%d bins=%d", gw, gh, N, D, k, bins))
        return;
    unsigned long long s = seed;
    float *x = rnd(&s, (size_t)N * D, -3, 3), *want = g4_malloc(sizeof(float) * (size_t)bins * D);
    int32_t *pos = grid_pos(gw, gh);
    const float scale = (float)sqrt((double)D);
    g4_buf hx = hb(x, N, D), hp = hbi(pos, N, 2), ho = hb(want, bins, D);
    cpu->vision_pool(cpu, &ho, &hx, &hp, k, scale);
    dbuf dx = dbuf_new(G4_F32, N, D, 0), dp = dbuf_new(G4_I32, N, 2, 0),
         dout = dbuf_new(G4_F32, bins, D, 0);
    dbuf_set(&dx, x);
    dbuf_set_i32(&dp, pos);
    dut->vision_pool(dut, &dout.b, &dx.b, &dp.b, k, scale);
    float *got = dbuf_get(&dout);
    report("out vs cpu", got, want, (size_t)bins * D, TOL_F32, dbuf_guards_ok(&dout, "out"));
    dbuf_free(&dx), dbuf_free(&dp), dbuf_free(&dout);
    free(x), free(want), free(pos), free(got);
}

// valid_mode: 0 none (NULL), 1 all valid, 2 the last quarter of the rows invalid, 3 scattered.
static int32_t *make_valid(unsigned long long *s, int n, int mode) {
    int32_t *v = g4_malloc(sizeof(int32_t) * (size_t)n + 4);
    for (int i = 0; i < n; i++)
        v[i] = mode <= 1 ? 1 : mode == 2 ? i < n - n / 4 : (g4t_rand_u64(s) % 4) != 0;
    return v;
}
static const char *valid_name(int mode) {
    static const char *const n[] = {"none", "all", "trailing", "scattered"};
    return n[mode];
}

// One SSCP layer, channels last: x [H*W, C_in] (f32 for layer 0, the act type for layer 1).
static void case_sscp(int H, int W, int C_in, int C_out, g4_type xt, int valid_mode,
                      unsigned long long seed) {
    if (!want_case("sscp_conv", "H=%d W=%d C_in=%d C_out=%d x=%s valid=%s", H, W, C_in, C_out,
                   g4_type_name(xt), valid_name(valid_mode)))
        return;
    unsigned long long s = seed;
    const int Ho = (H + 1) / 2, Wo = (W + 1) / 2;
    const size_t nx = (size_t)H * W * C_in, ny = (size_t)Ho * Wo * C_out;
    float *x = rnd(&s, nx, -2, 2), *want = g4_malloc(sizeof(float) * ny);
    float *w = rnd(&s, (size_t)C_out * C_in * 9, -0.5f, 0.5f),
          *lw = rnd(&s, (size_t)C_out, 0.5f, 1.5f);
    uint16_t *wb = f16_bits(w, (size_t)C_out * C_in * 9), *lwb = f16_bits(lw, (size_t)C_out);
    int32_t *valid = make_valid(&s, H, valid_mode);
    g4_buf hx = hb(x, H * W, C_in), hy = hb(want, Ho * Wo, C_out), hv = hbi(valid, H, 1);
    cpu->sscp_conv(cpu, &hy, &hx, valid_mode ? &hv : NULL, wb, lwb, H, W, 1e-6f);
    void *dw = dev_copy(wb, (size_t)C_out * C_in * 9 * 2), *dlw = dev_copy(lwb, (size_t)C_out * 2);
    dbuf dx = dbuf_new(xt, H * W, C_in, 0), dy = dbuf_new(dut->act_type, Ho * Wo, C_out, 0),
         dv = dbuf_new(G4_I32, H, 1, 0);
    dbuf_set(&dx, x);
    dbuf_set_i32(&dv, valid);
    dut->sscp_conv(dut, &dy.b, &dx.b, valid_mode ? &dv.b : NULL, dw, dlw, H, W, 1e-6f);
    float *got = dbuf_get(&dy);
    report("y vs cpu", got, want, ny, TOL_F16, dbuf_guards_ok(&dy, "y"));
    dut->free(dut, dw), dut->free(dut, dlw);
    dbuf_free(&dx), dbuf_free(&dy), dbuf_free(&dv);
    free(x), free(want), free(w), free(lw), free(wb), free(lwb), free(valid), free(got);
}

static void case_dwconv(int T, int C, int K, unsigned long long seed) {
    if (!want_case("dwconv1d_causal", "T=%d C=%d K=%d", T, C, K)) return;
    unsigned long long s = seed;
    const size_t n = (size_t)T * C;
    float *x = rnd(&s, n, -2, 2), *want = g4_malloc(sizeof(float) * n);
    float *w = rnd(&s, (size_t)C * K, -0.5f, 0.5f);
    uint16_t *wb = f16_bits(w, (size_t)C * K);
    g4_buf hx = hb(x, T, C), hy = hb(want, T, C);
    cpu->dwconv1d_causal(cpu, &hy, &hx, wb, K);
    void *dw = dev_copy(wb, (size_t)C * K * 2);
    dbuf dx = dbuf_new(dut->act_type, T, C, 0), dy = dbuf_new(dut->act_type, T, C, 0);
    dbuf_set(&dx, x);
    dut->dwconv1d_causal(dut, &dy.b, &dx.b, dw, K);
    float *got = dbuf_get(&dy);
    report("y vs cpu", got, want, n, TOL_F16, dbuf_guards_ok(&dy, "y"));
    dut->free(dut, dw);
    dbuf_free(&dx), dbuf_free(&dy);
    free(x), free(want), free(w), free(wb), free(got);
}

static void case_audio_attn(int T, int nh, int hd, int valid_mode, unsigned long long seed) {
    if (!want_case("audio_attention", "T=%d heads=%d hd=%d valid=%s", T, nh, hd,
                   valid_name(valid_mode)))
        return;
    unsigned long long s = seed;
    const int w = nh * hd, chunk = 12, band = 12;
    const size_t n = (size_t)T * w;
    float *q = rnd(&s, n, -1, 1), *k = rnd(&s, n, -1, 1), *v = rnd(&s, n, -1, 1);
    float *rel = rnd(&s, (size_t)band * w, -0.5f, 0.5f), *pds = g4_malloc(sizeof(float) * hd);
    for (int i = 0; i < hd; i++) pds[i] = g4t_rand_uniform(&s, -1.5f, 1.5f);
    int32_t *valid = make_valid(&s, T, valid_mode);
    float *want = g4_malloc(sizeof(float) * n);
    g4_buf hq = hb(q, T, w), hk = hb(k, T, w), hv = hb(v, T, w), hr = hb(rel, band, w),
           ho = hb(want, T, w), hval = hbi(valid, T, 1);
    cpu->audio_attention(cpu, &ho, &hq, &hk, &hv, &hr, pds, valid_mode ? &hval : NULL, nh, hd,
                         chunk, band, 50.0f, -1e9f);
    const g4_type at = dut->act_type;
    dbuf dq = dbuf_new(at, T, w, 0), dk = dbuf_new(at, T, w, 0), dv = dbuf_new(at, T, w, 0),
         dr = dbuf_new(at, band, w, 0), dout = dbuf_new(at, T, w, 0),
         dval = dbuf_new(G4_I32, T, 1, 0);
    dbuf_set(&dq, q), dbuf_set(&dk, k), dbuf_set(&dv, v), dbuf_set(&dr, rel);
    dbuf_set_i32(&dval, valid);
    float *dpds = dev_copy(pds, sizeof(float) * hd);
    dut->audio_attention(dut, &dout.b, &dq.b, &dk.b, &dv.b, &dr.b, dpds,
                         valid_mode ? &dval.b : NULL, nh, hd, chunk, band, 50.0f, -1e9f);
    float *got = dbuf_get(&dout);
    report("out vs cpu", got, want, n, TOL_AUDIO, dbuf_guards_ok(&dout, "out"));
    dut->free(dut, dpds);
    dbuf_free(&dq), dbuf_free(&dk), dbuf_free(&dv), dbuf_free(&dr), dbuf_free(&dout),
        dbuf_free(&dval);
    free(q), free(k), free(v), free(rel), free(pds), free(valid), free(want), free(got);
}

// The mixed types between the towers' f32 residual stream and f16 activations: h += y (f32 +=
// act), convert both ways, scale of an activation.
static void case_mixed(int T, int D, unsigned long long seed) {
    if (!want_case("mixed_types", "T=%d D=%d", T, D)) return;
    unsigned long long s = seed;
    const size_t n = (size_t)T * D;
    const g4_type at = dut->act_type;
    float *h = rnd(&s, n, -50, 50), *y = rnd(&s, n, -2, 2);
    float *want_add = dup_f(h, n), *want_scale = dup_f(y, n);
    g4_buf hh = hb(want_add, T, D), hy = hb(y, T, D), hs = hb(want_scale, T, D);
    cpu->add(cpu, &hh, &hy);
    cpu->scale(cpu, &hs, 0.5f);
    float *want_act = g4_malloc(sizeof(float) * n); // act(h): the rounding a convert does
    for (size_t i = 0; i < n; i++) want_act[i] = at == G4_F16 ? g4_round_f16(h[i]) : h[i];
    dbuf dh = dbuf_new(G4_F32, T, D, 0), dy = dbuf_new(at, T, D, 0), da = dbuf_new(at, T, D, 0),
         db = dbuf_new(G4_F32, T, D, 0);
    dbuf_set(&dh, h), dbuf_set(&dy, y);
    dut->convert(dut, &da.b, &dh.b); // f32 -> act
    dut->convert(dut, &db.b, &dy.b); // act -> f32 (exact)
    dut->add(dut, &dh.b, &dy.b);     // f32 += act
    dut->scale(dut, &dy.b, 0.5f);
    float *g_add = dbuf_get(&dh), *g_act = dbuf_get(&da), *g_back = dbuf_get(&db),
          *g_scale = dbuf_get(&dy);
    report("add h(f32) += y", g_add, want_add, n, TOL_F32, dbuf_guards_ok(&dh, "h"));
    report("convert f32 -> act", g_act, want_act, n, TOL_EXACT, dbuf_guards_ok(&da, "act"));
    report("convert act -> f32", g_back, y, n, TOL_EXACT, dbuf_guards_ok(&db, "f32"));
    report("scale act", g_scale, want_scale, n, TOL_F16, dbuf_guards_ok(&dy, "y"));
    dbuf_free(&dh), dbuf_free(&dy), dbuf_free(&da), dbuf_free(&db);
    free(h), free(y), free(want_add), free(want_scale), free(want_act), free(g_add), free(g_act),
        free(g_back), free(g_scale);
}

static void run_op_cases(void) {
    // tiny, odd (unaligned counts: the scalar tails), real (E2B audio [750, 1024], vision 2520 x
    // 768); misaligned pointers take the scalar paths
    case_clamp(G4_F16, 1, 3, -1.5f, 2.25f, 0, 1);
    case_clamp(G4_F16, 17, 33, -1.5f, 2.25f, 1, 2);
    case_clamp(G4_F32, 17, 33, -1.5f, 2.25f, 1, 3);
    case_clamp(G4_F16, 750, 1024, -65504.0f, 65504.0f, 0, 4); // the conformer's fp16 clip
    case_clamp(G4_F16, 750, 1024, -1.0f, 0.5f, 0, 5);
    case_clamp(G4_F32, 750, 1024, -3.0f, 3.0f, 0, 6);

    case_silu(G4_F16, 1, 1, 0, 10);
    case_silu(G4_F16, 13, 37, 0, 11);
    case_silu(G4_F16, 750, 4096, 1, 12); // in place, as the FFN calls it
    case_silu(G4_F32, 33, 17, 1, 13);

    case_glu(G4_F16, 1, 1, 20);
    case_glu(G4_F16, 7, 13, 21); // C % 8 != 0: the scalar path
    case_glu(G4_F16, 750, 1024, 22);
    case_glu(G4_F32, 17, 40, 23);

    case_transpose(G4_F16, 1, 1, 30);
    case_transpose(G4_F16, 17, 33, 31);
    case_transpose(G4_F32, 33, 17, 32);
    case_transpose(G4_I32, 1000, 3, 33);
    case_transpose(G4_F16, 24000, 32, 34); // E2B: 750 frames x 32 mel of 32 channels

    case_linear(1, 16, 8, G4_F16, -1.5f, 1.5f, -0.25f, 0.25f, 0, 40);
    case_linear(17, 72, 40, G4_F16, -1.0f, 2.0f, -0.5f, 0.375f, 1, 41);
    case_linear(33, 64, 48, G4_F32, -1.5f, 1.5f, -0.5f, 0.5f, 0, 42);
    case_linear(40, 64, 64, G4_F16, -INFINITY, INFINITY, -0.5f, 0.5f, 0, 43);  // output only
    case_linear(40, 64, 64, G4_F16, -0.5f, 0.75f, -INFINITY, INFINITY, 0, 44); // input only
    case_linear(40, 64, 64, G4_F16, -INFINITY, INFINITY, -INFINITY, INFINITY, 0, 45);
    case_linear(576, 128, 128, G4_F16, -1.5f, 1.5f, -0.5f, 0.5f, 0, 46);   // gpu-tiny vision
    case_linear(2520, 768, 768, G4_F16, -1.5f, 1.5f, -0.5f, 0.5f, 0, 47);  // E2B vision q
    case_linear(750, 1024, 4096, G4_F16, -2.0f, 2.0f, -1.0f, 1.0f, 0, 48); // E2B ffw_layer_1

    case_gelu_mul(1, 64, 64, 1, 1, 50);
    case_gelu_mul(17, 128, 256, 1, 0, 51);
    case_gelu_mul(33, 128, 256, 0, 1, 52);
    case_gelu_mul(300, 768, 3072, 1, 1, 53); // E2B vision MLP widths

    case_rope_2d(1, 1, 1, 64, 60);
    case_rope_2d(5, 3, 2, 64, 61);
    case_rope_2d(24, 24, 2, 64, 62); // gpu-tiny on square_rgb
    case_rope_2d(11, 3, 3, 128, 63);
    case_rope_2d(42, 60, 12, 64, 64); // E2B, 2520 patches

    case_bidir(1, 1, 64, 1.0f, 70);
    case_bidir(17, 2, 64, 1.0f, 71);
    case_bidir(33, 3, 64, 0.125f, 72);
    case_bidir(576, 2, 64, 1.0f, 73);
    case_bidir(2520, 12, 64, 1.0f, 74);

    case_posemb(1, 1, 8, 1, 80);
    case_posemb(7, 5, 40, 16, 81);
    case_posemb(24, 24, 128, 64, 82);
    case_posemb(42, 60, 768, 10240, 83);

    case_pool(3, 3, 4, 3, 90);
    case_pool(9, 6, 40, 3, 91);
    case_pool(24, 24, 128, 3, 92);
    case_pool(42, 60, 768, 3, 93);

    case_sscp(1, 1, 1, 32, G4_F32, 0, 100);
    case_sscp(7, 9, 1, 128, G4_F32, 2, 101);
    case_sscp(3000, 128, 1, 128, G4_F32, 2, 102);        // E2B layer 0, 30 s
    case_sscp(19, 64, 128, 32, dut->act_type, 3, 103);   // layer 1 (tensor cores on CUDA)
    case_sscp(1500, 64, 128, 32, dut->act_type, 2, 104); // E2B layer 1, 30 s
    case_sscp(9, 10, 32, 64, dut->act_type, 1, 105);     // fp16 x on CUDA cores

    case_dwconv(1, 8, 5, 110);
    case_dwconv(7, 40, 5, 111);
    case_dwconv(33, 256, 3, 112);
    case_dwconv(750, 1024, 5, 113);

    case_audio_attn(1, 1, 32, 0, 120);
    case_audio_attn(13, 8, 32, 1, 121); // gpu-tiny
    case_audio_attn(100, 2, 64, 3, 122);
    case_audio_attn(750, 8, 128, 2, 123); // E2B, 30 s

    case_mixed(1, 8, 130);
    case_mixed(750, 1024, 131);
}

// --- 2, 3. refusals and towers -------------------------------------------------------------

#define MAX_HOOKS 256
typedef struct {
    char names[MAX_HOOKS][48];
    float *data[MAX_HOOKS];
    size_t n[MAX_HOOKS];
    int count;
} capture;

static void hook(void *ctx, const char *name, g4_backend *be, const g4_buf *b) {
    capture *c = ctx;
    if (c->count == MAX_HOOKS) return;
    const size_t n = (size_t)b->rows * b->cols;
    snprintf(c->names[c->count], sizeof c->names[0], "%s", name);
    c->data[c->count] = g4_malloc(sizeof(float) * n + 1);
    c->n[c->count] = n;
    g4_buf_to_host_f32(be, b, c->data[c->count]);
    c->count++;
}

static void capture_free(capture *c) {
    for (int i = 0; i < c->count; i++) free(c->data[i]);
    c->count = 0;
}

// Every hooked tensor of b (DUT) against a (CPU), then the soft tokens.
static void compare_captures(const char *what, const capture *a, const capture *b,
                             const float *soft_a, const float *soft_b, size_t n_soft) {
    CHECK_MSG(a->count == b->count && a->count > 0,
              "%s: %d hooked tensors on the cpu, %d on the %s", what, a->count, b->count,
              dut->name);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < a->count && i < b->count; i++) {
        const int same = !strcmp(a->names[i], b->names[i]) && a->n[i] == b->n[i];
        CHECK_MSG(same, "%s: hook %d is %s [%zu] on the cpu, %s [%zu] on the %s", what, i,
                  a->names[i], a->n[i], b->names[i], b->n[i], dut->name);
        if (!same) continue;
        g4_cmp_stats st = g4_cmp(b->data[i], a->data[i], a->n[i], 0);
        const int ok = st.nan == 0 && st.rel <= TOL_TOWER;
        CHECK_MSG(ok, "%s %s: rel err %.3e, %zu non-finite (tolerance tower %.0e)", what,
                  a->names[i], st.rel, st.nan, TOL_TOWER);
        if (st.rel > worst || st.nan) worst = st.nan ? INFINITY : st.rel, worst_name = a->names[i];
    }
    g4_cmp_stats st = g4_cmp(soft_b, soft_a, n_soft, 0);
    CHECK_MSG(st.nan == 0 && st.rel <= TOL_TOWER,
              "%s soft tokens: rel err %.3e, %zu non-finite (tolerance tower %.0e)", what, st.rel,
              st.nan, TOL_TOWER);
    printf("  %s: %d hooked tensors, worst rel err %.3e (%s); soft tokens rel err %.3e "
           "(tolerance %.0e)\n",
           what, a->count, worst, worst_name, st.rel, TOL_TOWER);
    fflush(stdout);
}

// Finite bounds on every ClippableLinear of a tower (HF's use_clipped_linears set: every q, k,
// v, o and MLP linear of the vision layers; every conformer linear but relative_k_proj), the
// same on both backends, asymmetric so that a swapped bound shows. Set on the layer structs, so
// it does not depend on whether the export kept HF's (+-inf) buffers.
#define BITE_IN_LO  -0.5f
#define BITE_IN_HI  0.75f
#define BITE_OUT_LO -0.125f
#define BITE_OUT_HI 0.09375f
static void bite(g4_linear *l) {
    set_bounds(l, BITE_IN_LO, BITE_IN_HI, BITE_OUT_LO, BITE_OUT_HI);
}

static void bite_vision(g4_vision_tower *t) {
    for (int l = 0; l < t->cfg->n_layers; l++) {
        g4_vision_layer *w = &t->layers[l];
        bite(&w->q), bite(&w->k), bite(&w->v), bite(&w->o);
        bite(&w->gate), bite(&w->up), bite(&w->down);
    }
}

static void bite_audio(g4_audio_tower *t) {
    for (int l = 0; l < t->cfg->n_layers; l++) {
        g4_audio_layer *w = &t->layers[l];
        for (int f = 0; f < 2; f++) bite(&w->ffn_1[f]), bite(&w->ffn_2[f]);
        bite(&w->q), bite(&w->k), bite(&w->v), bite(&w->post);
        bite(&w->lin_start), bite(&w->lin_end);
    }
}

static const char *fixtures_dir(void) {
    static char dir[1024];
    const char *env = getenv("G4_FIXTURES");
    if (env && *env) return env;
    char src[1024]; // this file's directory when run outside ctest (tools/gpu/run.sh)
    snprintf(src, sizeof src, "%s", __FILE__);
    snprintf(dir, sizeof dir, "%s/fixtures", dirname(src));
    return dir;
}

static void run_vision(const g4_package *p, const char *image, int bounds) {
    char what[160];
    snprintf(what, sizeof what, "vision %s bounds=%s", image, bounds ? "finite" : "package");
    if (!want_case("vision_tower", "%s", what)) return;
    char *path = g4_sprintf("%s/frontends/media/%s", fixtures_dir(), image);
    g4_image_proc_config ic = p->image_proc;
    ic.max_soft_tokens = 70; // 630 patches at most: a few hundred real ones
    g4_image_features f;
    memset(&f, 0, sizeof f);
    g4_vision_tower *tc = NULL, *tg = NULL;
    static capture a, b;
    float *sa = NULL, *sb = NULL, *sn = NULL;
    int rc;
    if ((rc = g4_image_features_load(&ic, path, &f)) || (rc = g4_vision_tower_load(p, cpu, &tc)) ||
        (rc = g4_vision_tower_load(p, dut, &tg))) {
        CHECK_MSG(0, "%s: %s", what, g4_error());
        goto done;
    }
    const size_t n_soft = (size_t)f.n_soft_tokens * tc->text_hidden;
    sa = g4_malloc(sizeof(float) * n_soft), sb = g4_malloc(sizeof(float) * n_soft);
    sn = g4_malloc(sizeof(float) * n_soft);
    if (bounds) {
        CHECK_MSG(g4_vision_tower_forward(tc, &f, sn, NULL, NULL) == 0, "%s", g4_error());
        bite_vision(tc);
        bite_vision(tg);
    }
    CHECK_MSG(g4_vision_tower_forward(tc, &f, sa, hook, &a) == 0, "%s", g4_error());
    CHECK_MSG(g4_vision_tower_forward(tg, &f, sb, hook, &b) == 0, "%s", g4_error());
    if (bounds) {
        g4_cmp_stats st = g4_cmp(sn, sa, n_soft, 0);
        printf("  the finite bounds move the cpu soft tokens by rel %.3e\n", st.rel);
        CHECK_MSG(st.rel > 10 * TOL_TOWER, "%s: the bounds change the soft tokens by only %.3e",
                  what, st.rel);
    }
    printf("  %d patches (%dx%d), %d soft tokens\n", f.n_patches, f.grid_w, f.grid_h,
           f.n_soft_tokens);
    compare_captures(what, &a, &b, sa, sb, n_soft);
done:
    capture_free(&a), capture_free(&b);
    free(sa), free(sb), free(sn), free(path);
    g4_vision_tower_free(tc);
    g4_vision_tower_free(tg);
    g4_image_features_free(&f);
}

// The audio tower on a clip; mask_tail: frames from 70% on marked invalid (and zeroed, as the
// front end leaves padding frames), so the masks reach the convs and the attention.
static void run_audio(const g4_package *p, const char *clip, int mask_tail, int bounds) {
    char what[160];
    snprintf(what, sizeof what, "audio %s mask=%s bounds=%s", clip, mask_tail ? "tail" : "own",
             bounds ? "finite" : "package");
    if (!want_case("audio_tower", "%s", what)) return;
    char *path = g4_sprintf("%s/frontends/media/%s", fixtures_dir(), clip);
    g4_audio_features f;
    memset(&f, 0, sizeof f);
    g4_audio_tower *tc = NULL, *tg = NULL;
    static capture a, b;
    float *sa = NULL, *sb = NULL, *sn = NULL;
    int rc;
    if ((rc = g4_audio_features_load(&p->audio_fe, path, &f)) ||
        (rc = g4_audio_tower_load(p, cpu, &tc)) || (rc = g4_audio_tower_load(p, dut, &tg))) {
        CHECK_MSG(0, "%s: %s", what, g4_error());
        goto done;
    }
    if (mask_tail) {
        const int from = f.n_frames * 7 / 10;
        for (int i = from; i < f.n_frames; i++) {
            f.mask[i] = 0;
            memset(f.features + (size_t)i * f.n_mel, 0, sizeof(float) * f.n_mel);
        }
        f.n_soft_tokens = f.n_valid = 0; // the stride-2 convs keep mask[::2][::2]
        for (int i = 0; i < f.n_frames; i++) f.n_valid += f.mask[i] != 0;
        for (int i = 0; i < f.n_frames; i += 4) f.n_soft_tokens += f.mask[i] != 0;
    }
    const size_t n_soft = (size_t)f.n_soft_tokens * tc->text_hidden;
    sa = g4_malloc(sizeof(float) * n_soft + 1), sb = g4_malloc(sizeof(float) * n_soft + 1);
    sn = g4_malloc(sizeof(float) * n_soft + 1);
    if (bounds) {
        CHECK_MSG(g4_audio_tower_forward(tc, &f, sn, NULL, NULL) == 0, "%s", g4_error());
        bite_audio(tc);
        bite_audio(tg);
    }
    CHECK_MSG(g4_audio_tower_forward(tc, &f, sa, hook, &a) == 0, "%s", g4_error());
    CHECK_MSG(g4_audio_tower_forward(tg, &f, sb, hook, &b) == 0, "%s", g4_error());
    if (bounds) {
        g4_cmp_stats st = g4_cmp(sn, sa, n_soft, 0);
        printf("  the finite bounds move the cpu soft tokens by rel %.3e\n", st.rel);
        CHECK_MSG(st.rel > 10 * TOL_TOWER, "%s: the bounds change the soft tokens by only %.3e",
                  what, st.rel);
    }
    printf("  %d frames (%d valid), %d soft tokens\n", f.n_frames, f.n_valid, f.n_soft_tokens);
    compare_captures(what, &a, &b, sa, sb, n_soft);
done:
    capture_free(&a), capture_free(&b);
    free(sa), free(sb), free(sn), free(path);
    g4_audio_tower_free(tc);
    g4_audio_tower_free(tg);
    g4_audio_features_free(&f);
}

// A tower whose shapes the kernels do not take is refused at load with a user error naming the
// shape (not an abort in the middle of a forward): the mobius-tiny fixture has vision heads of
// 32 and audio heads of 8.
static void run_refusals(void) {
    if (!dut->check_vision || !dut->check_audio) return; // the CPU takes every shape
    if (!want_case("refuse_shapes", "mobius-tiny towers")) return;
    char *dir = g4_sprintf("%s/mobius-tiny-f16/package", fixtures_dir());
    g4_package *p = NULL;
    if (g4_package_open(dir, &p)) {
        CHECK_MSG(0, "%s", g4_error());
        free(dir);
        return;
    }
    g4_vision_tower *v = NULL;
    g4_audio_tower *a = NULL;
    int rc = g4_vision_tower_load(p, dut, &v);
    CHECK_MSG(rc == G4_EUSER && v == NULL && strstr(g4_error(), "vision tower head_dim 32"),
              "vision: rc %d, '%s'", rc, g4_error());
    printf("  vision: %s\n", g4_error());
    rc = g4_audio_tower_load(p, dut, &a);
    CHECK_MSG(rc == G4_EUSER && a == NULL && strstr(g4_error(), "8 heads of 8"),
              "audio: rc %d, '%s'", rc, g4_error());
    printf("  audio: %s\n", g4_error());
    g4_vision_tower_free(v);
    g4_audio_tower_free(a);
    g4_package_close(p);
    free(dir);
}

static void run_towers(const char *dir) {
    g4_package *p = NULL;
    if (g4_package_open(dir, &p)) {
        CHECK_MSG(0, "%s", g4_error());
        return;
    }
    run_vision(p, "square_rgb.png", 0);
    run_vision(p, "wide_rgba.png", 1); // 48 x 12 patches: a non-square pooling grid
    run_audio(p, "speech_7.3s_8k.flac", 0, 0);
    run_audio(p, "speech_7.3s_8k.flac", 1, 1);
    g4_package_close(p);
}

int main(int argc, char **argv) {
    int dut_cpu = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--op") && i + 1 < argc)
            op_filter = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            shape_filter = argv[++i];
        else if (!strcmp(argv[i], "--dut") && i + 1 < argc && !strcmp(argv[i + 1], "cpu"))
            dut_cpu = 1, i++;
        else {
            fprintf(stderr, "usage: %s [--op SUBSTRING] [--shape SUBSTRING] [--dut cpu]\n", NAME);
            return 1;
        }
    }
    cpu = g4_backend_cpu();
    if (dut_cpu) {
        dut = cpu;
        printf("%s: harness self-check, the cpu backend against itself\n", NAME);
    } else {
        const char *why = NULL;
        if (g4_cuda_device_count(&why) == 0) return g4t_skip(NAME, why ? why : "no CUDA device");
        dut = g4_backend_cuda(&why);
        if (!dut) return g4t_skip(NAME, why ? why : "the CUDA backend is not usable");
        char dev[256];
        g4_cuda_describe(dev, sizeof dev);
        printf("%s on %s\n", NAME, dev);
    }
    run_op_cases();
    run_refusals();
    const char *pkg = getenv("G4_GPU_TINY_PKG");
    if (pkg && *pkg) run_towers(pkg);
    close_case();
    printf("%s: %d cases, %d failed\n", NAME, cases_run, cases_failed);
    if (cases_run == 0) {
        printf("%s: no case matched the filters\n", NAME);
        return 1;
    }
    if ((!pkg || !*pkg) && g4t_failures == 0)
        return g4t_skip(NAME, "the op cases passed; G4_GPU_TINY_PKG is not set, so the tower "
                              "comparison did not run (tools/gpu/run.sh stage tiny makes the "
                              "gpu-tiny package with tools/python/make_package.py --preset "
                              "gpu-tiny)");
    return g4t_finish(NAME);
}
