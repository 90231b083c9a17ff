// test_threads.c: the CPU backend's threads (base/parallel.h). g4_parallel_for visits every
// item exactly once over contiguous ranges on more than one thread; and the threaded reference
// ops (linear f16 / Q4, causal / bidirectional / audio attention, the SSCP and depthwise convs)
// give the same bits on 1, 3, 7 and all-cores threads at odd shapes, each big enough that the
// work is split (checked through g4_parallel_last_split, not assumed). CPU only: runs in CI.
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/parallel.h"
#include "kernels/ref/ref.h"
#include "tests/test_util.h"

// --- g4_parallel_for itself ----------------------------------------------------------------
#define N_ITEMS 1000
typedef struct {
    int hits[N_ITEMS];
    pthread_t who[N_ITEMS];
    int nested_serial; // a nested call ran on its caller's thread
} visit_ctx;

static void nested(void *ctx, int lo, int hi) {
    pthread_t *caller = ctx;
    for (int i = lo; i < hi; i++)
        if (!pthread_equal(*caller, pthread_self())) *caller = (pthread_t)0;
}

static void visit(void *ctx, int lo, int hi) {
    visit_ctx *v = ctx;
    for (int i = lo; i < hi; i++) {
        __atomic_add_fetch(&v->hits[i], 1, __ATOMIC_RELAXED);
        v->who[i] = pthread_self();
    }
    pthread_t me = pthread_self();
    g4_parallel_for(64, 1e9, nested, &me);
    if (pthread_equal(me, pthread_self()))
        __atomic_add_fetch(&v->nested_serial, 1, __ATOMIC_RELAXED);
}

// Distinct threads over the items, or -1 when a thread's items are not one contiguous range.
static int count_ranges(const visit_ctx *v) {
    int ranges = 1;
    for (int i = 1; i < N_ITEMS; i++)
        if (!pthread_equal(v->who[i], v->who[i - 1])) {
            for (int j = 0; j < i - 1; j++)
                if (pthread_equal(v->who[j], v->who[i])) return -1;
            ranges++;
        }
    return ranges;
}

static void test_parallel_for(void) {
    static visit_ctx v;
    const int counts[] = {1, 3, 7};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        memset(&v, 0, sizeof v);
        g4_set_threads(counts[c]);
        CHECK_INT(g4_threads(), counts[c]);
        g4_parallel_for(N_ITEMS, 1e6, visit, &v); // plenty of work: every thread gets a range
        int once = 1;
        for (int i = 0; i < N_ITEMS; i++) once &= v.hits[i] == 1;
        CHECK_MSG(once, "threads %d: an item was not visited exactly once", counts[c]);
        CHECK_MSG(count_ranges(&v) == counts[c], "threads %d: %d ranges", counts[c],
                  count_ranges(&v));
        CHECK_INT(v.nested_serial, counts[c]);
    }
    // Too little work for a second thread: one range, on the caller.
    memset(&v, 0, sizeof v);
    g4_set_threads(7);
    g4_parallel_for(N_ITEMS, 1, visit, &v);
    CHECK_INT(count_ranges(&v), 1);
    CHECK(pthread_equal(v.who[0], pthread_self()));
    g4_set_threads(0);
    CHECK_INT(g4_threads(), g4_cores());
}

// --- the reference ops: the same bits for every thread count -------------------------------
static unsigned long long seed = 0x5eed7412ull;

static float *rand_f32(size_t n, float lo, float hi) {
    float *x = g4_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = g4t_rand_uniform(&seed, lo, hi);
    return x;
}

static uint16_t *rand_f16(size_t n, float lo, float hi) {
    uint16_t *x = g4_malloc(sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++) x[i] = g4_f32_to_f16(g4t_rand_uniform(&seed, lo, hi));
    return x;
}

static uint8_t *rand_u8(size_t n) {
    uint8_t *x = g4_malloc(n);
    for (size_t i = 0; i < n; i++) x[i] = (uint8_t)g4t_rand_u64(&seed);
    return x;
}

// One op at one shape: fn(args, y) writes y[n]; `init` (NULL: NaN poison) is y's starting value
// (the accumulate forms read it).
typedef void (*op_fn)(const void *args, float *y);

static void check_op(const char *name, op_fn fn, const void *args, size_t n, const float *init) {
    const int counts[] = {1, 3, 7, 0}; // 0: the default, every core
    float *ref = g4_malloc(sizeof(float) * n), *y = g4_malloc(sizeof(float) * n);
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        g4_set_threads(counts[c]);
        float *dst = c == 0 ? ref : y;
        if (init)
            memcpy(dst, init, sizeof(float) * n);
        else
            memset(dst, 0xff, sizeof(float) * n); // NaN: an element left unwritten shows
        fn(args, dst);
        const int split = g4_parallel_last_split();
        if (counts[c] == 1) CHECK_INT(split, 1);
        if (counts[c] > 1)
            CHECK_MSG(split > 1, "%s: %d threads asked, the work ran on %d", name, counts[c],
                      split);
        if (c == 0) {
            int finite = 1;
            for (size_t i = 0; i < n; i++) finite &= isfinite(ref[i]) != 0;
            CHECK_MSG(finite, "%s: 1 thread left a NaN or inf", name);
        } else {
            CHECK_MSG(memcmp(ref, y, sizeof(float) * n) == 0, "%s: %d threads differ from 1", name,
                      g4_threads());
        }
    }
    g4_set_threads(0);
    printf("  %-34s n=%zu: 1/3/7/%d threads bit-identical\n", name, n, g4_cores());
    free(ref), free(y);
}

typedef struct {
    const float *x;
    const uint16_t *w, *bias;
    const uint8_t *q, *zp;
    const uint16_t *scales;
    int T, K, N, block, accumulate;
} lin_args;

static void run_f16(const void *p, float *y) {
    const lin_args *a = p;
    ref_linear_f16(y, a->x, a->w, a->bias, a->T, a->K, a->N, a->accumulate);
}

static void run_q4(const void *p, float *y) {
    const lin_args *a = p;
    ref_linear_q4(y, a->x, a->q, a->scales, a->zp, a->bias, a->T, a->K, a->N, a->block,
                  a->accumulate);
}

static void test_linears(void) {
    // Odd shapes: K not a multiple of the Q4 block, N not a multiple of anything.
    const int T = 5, K = 301, N = 1001, block = 32, kb = (K + block - 1) / block;
    float *x = rand_f32((size_t)T * K, -1, 1), *y0 = rand_f32((size_t)T * N, -1, 1);
    uint16_t *w = rand_f16((size_t)K * N, -0.2f, 0.2f), *bias = rand_f16((size_t)N, -1, 1);
    uint8_t *q = rand_u8((size_t)N * kb * block / 2), *zp = rand_u8((size_t)N * ((kb + 1) / 2));
    uint16_t *scales = rand_f16((size_t)N * kb, 0.001f, 0.02f);
    for (int acc = 0; acc < 2; acc++) {
        lin_args a = {x, w, acc ? NULL : bias, q, zp, scales, T, K, N, block, acc};
        check_op(acc ? "linear_f16 accumulate" : "linear_f16 + bias", run_f16, &a, (size_t)T * N,
                 acc ? y0 : NULL);
        check_op(acc ? "linear_q4 accumulate" : "linear_q4 + bias", run_q4, &a, (size_t)T * N,
                 acc ? y0 : NULL);
        a.zp = NULL; // the default zero point
        check_op("linear_q4 no zero points", run_q4, &a, (size_t)T * N, acc ? y0 : NULL);
    }
    // Decode: one row, the split over columns alone.
    lin_args d = {x, w, bias, q, zp, scales, 1, K, N, block, 0};
    check_op("linear_f16 T=1", run_f16, &d, (size_t)N, NULL);
    check_op("linear_q4 T=1", run_q4, &d, (size_t)N, NULL);
    free(x), free(y0), free(w), free(bias), free(q), free(zp), free(scales);
}

typedef struct {
    const float *q, *k, *v, *rel, *pds;
    const int32_t *pos;
    const uint8_t *valid;
    int T, N, n_heads, n_kv, hd, window, chunk, band;
} attn_args;

static void run_causal(const void *p, float *y) {
    const attn_args *a = p;
    ref_attention(y, a->q, a->k, a->v, a->pos, a->T, a->n_heads, a->n_kv, a->hd, a->window, 0.125f);
}

static void run_bidir(const void *p, float *y) {
    const attn_args *a = p;
    ref_attention_bidir(y, a->q, a->T, a->k, a->v, a->valid, a->N, a->n_heads, a->hd, 0.1f);
}

static void run_audio(const void *p, float *y) {
    const attn_args *a = p;
    ref_audio_attention(y, a->q, a->k, a->v, a->rel, a->pds, a->valid, a->T, a->n_heads, a->hd,
                        a->chunk, a->band, 50.0f, -1e9f);
}

static void test_attention(void) {
    const int T = 17, H = 8, KV = 2, hd = 40, cap = 61;
    float *q = rand_f32((size_t)cap * H * hd, -1, 1), *k = rand_f32((size_t)cap * H * hd, -1, 1);
    float *v = rand_f32((size_t)cap * H * hd, -1, 1), *rel = rand_f32((size_t)cap * H * hd, -1, 1);
    float *pds = rand_f32((size_t)hd, -1, 1);
    int32_t pos[T];
    for (int t = 0; t < T; t++) pos[t] = 40 + t; // a prefill chunk after 40 cached rows
    uint8_t valid[cap];
    for (int i = 0; i < cap; i++) valid[i] = i % 7 != 3; // some padding keys / frames
    attn_args a = {q, k, v, rel, pds, pos, valid, T, cap, H, KV, hd, 0, 12, 13};
    check_op("attention causal", run_causal, &a, (size_t)T * H * hd, NULL);
    a.window = 19;
    check_op("attention sliding 19", run_causal, &a, (size_t)T * H * hd, NULL);
    a.T = cap - 2; // Nq < N
    a.n_heads = 3;
    check_op("attention_bidir masked", run_bidir, &a, (size_t)a.T * 3 * hd, NULL);
    a.T = cap;
    a.n_heads = 4;
    check_op("audio_attention chunk 12 band 13", run_audio, &a, (size_t)cap * 4 * hd, NULL);
    free(q), free(k), free(v), free(rel), free(pds);
}

typedef struct {
    const float *x;
    const uint8_t *valid;
    const uint16_t *w, *ln_w;
    int C_in, H, W, C_out, T, C, K;
} conv_args;

static void run_sscp(const void *p, float *y) {
    const conv_args *a = p;
    ref_sscp_conv(y, a->x, a->valid, a->w, a->ln_w, a->C_in, a->H, a->W, a->C_out, 1e-6f);
}

static void run_dw(const void *p, float *y) {
    const conv_args *a = p;
    ref_dwconv1d_causal(y, a->x, a->w, a->T, a->C, a->K);
}

static void test_convs(void) {
    const int C_in = 8, H = 21, W = 17, C_out = 32, T = 1001, C = 97, K = 5;
    float *x = rand_f32((size_t)T * C, -1, 1); // >= C_in * H * W
    uint16_t *w = rand_f16((size_t)C_out * C_in * 9 + (size_t)C * K, -0.3f, 0.3f);
    uint16_t *ln_w = rand_f16((size_t)C_out, 0.5f, 1.5f);
    uint8_t valid[H];
    for (int i = 0; i < H; i++) valid[i] = i < H - 4; // the last frames masked
    conv_args a = {x, valid, w, ln_w, C_in, H, W, C_out, T, C, K};
    check_op("sscp_conv 8->32 21x17", run_sscp, &a, (size_t)C_out * ((H + 1) / 2) * ((W + 1) / 2),
             NULL);
    check_op("dwconv1d_causal T=1001 C=97 K=5", run_dw, &a, (size_t)T * C, NULL);
    free(x), free(w), free(ln_w);
}

int main(void) {
    test_parallel_for();
    test_linears();
    test_attention();
    test_convs();
    return g4t_finish("test_threads");
}
