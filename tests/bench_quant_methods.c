// bench_quant_methods.c: where `g4cu quantize --method gptq|fit` spends its time at one linear's
// shape (issue 33), on synthetic data: X [rows, K] with correlated channels, H = X^T X
// (g4_xtx_add, timed), W [K, N] fp32. Times the X^T X accumulation, GPTQ's damped Cholesky and
// triangular inverse (g4_q4_gptq on a single output column: its column work is K^2 / 2 against
// the factorisation's K^3 / 3), GPTQ on all N columns (with and without act-order), fit and
// gptq_imx (GPTQ with the imatrix search's block parameters and its screen); and
// prints an FNV-1a hash of every output (H and the Q4 arrays), so that two builds can be
// compared byte for byte. Not a test (nothing is judged); built beside them.
//
//   bench_quant_methods K N [rows [threads [parts]]]    parts: any of x g a f m e (default
//   "xgafm"; m: gptq_imx), or i: GPTQ's factorisation alone (the one-column run, without
//   act-order); c s d: --imatrix's 32 covariance directions as measured (g4_cov_dirs), shrunk
//   (g4_cov_dirs_shrunk), and the imatrix search with the shrunk ones (d: times s too). With any
//   of c s d the rows also carry COV_SPIKES factors of decaying strength (a spiked covariance,
//   ~32 of them past the sampling noise at 2048 rows, as the proxy's linears), so their X^T X
//   hash differs from a run without them.
//   BENCH_DUMP=PREFIX: also writes GPTQ's U (PREFIX.U0, .U1 with act-order, K x K floats) and
//   the Q4 arrays (PREFIX.g0, .g1, .f, .m: q, scales, zp back to back), to see what differs.
//   e: the layer-output error sum alone (methods.h g4_q4_out_err over quad_form.h), on RTN's
//   arrays: its wall and CPU time, its value to 17 digits (to compare two builds' sums).
//   BENCH_LOSS=1: also prints each method's layer-output error sum_n (q_n - w_n)^T H (q_n - w_n)
//   (K^2 N multiply-adds: minutes at the largest shapes on two cores).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "base/parallel.h"
#include "fidelity/sensitivity.h"
#include "quant/kquant.h"
#include "quant/linear.h"
#include "quant/methods.h"
#include "quant/q4.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The process's CPU seconds (all threads): on a shared machine the wall time of a run includes
// the other processes' turns, its CPU time does not.
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned long long fnv(unsigned long long h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static float gauss(unsigned long long *s) {
    double u = 0;
    for (int i = 0; i < 12; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        u += (double)(*s >> 11) / 9007199254740992.0;
    }
    return (float)(u - 6);
}

typedef struct {
    uint8_t *q, *zp;
    uint16_t *sc;
    g4_q4_shape sh;
} out4;

static void dump(const char *suffix, const void *a, size_t na, const void *b, size_t nb,
                 const void *c, size_t nc) {
    const char *pre = getenv("BENCH_DUMP");
    if (!pre) return;
    char path[512];
    snprintf(path, sizeof path, "%s.%s", pre, suffix);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(a, 1, na, f);
    if (b) fwrite(b, 1, nb, f);
    if (c) fwrite(c, 1, nc, f);
    fclose(f);
}

// sum_n (q_n - w_n)^T H (q_n - w_n) over the columns of the quantized weight.
static double out_loss(const out4 *o, const float *W, const float *H, int K, int N) {
    if (!getenv("BENCH_LOSS")) return NAN;
    const g4_linear l = {.kind = G4_W_Q4,
                         .in = K,
                         .out = N,
                         .block = G4_Q4_BLOCK,
                         .w = o->q,
                         .scales = o->sc,
                         .zp = o->zp};
    float *col = g4_malloc(sizeof(float) * (size_t)K);
    double *d = g4_malloc(sizeof(double) * (size_t)K), e = 0;
    for (int n = 0; n < N; n++) {
        g4_q4_dequant_col(&l, n, col);
        for (int k = 0; k < K; k++) d[k] = (double)col[k] - W[(size_t)k * N + n];
        for (int a = 0; a < K; a++) {
            double r = 0;
            for (int b = 0; b < K; b++) r += (double)H[(size_t)a * K + b] * d[b];
            e += d[a] * r;
        }
    }
    free(col), free(d);
    return e;
}

static unsigned long long out_hash(const out4 *o) {
    unsigned long long h = 1469598103934665603ull;
    h = fnv(h, o->q, o->sh.q_bytes);
    h = fnv(h, o->sc, sizeof(uint16_t) * o->sh.n_scales);
    return fnv(h, o->zp, o->sh.zp_bytes);
}

// The covariance parts' spikes: factor f (strength 0.1 / (1 + f / 8)) along a random unit-scale
// loading u_f [K], a fresh gaussian amount per row.
#define COV_SPIKES 40
static void add_spikes(float *X, int R, int K, unsigned long long *rng) {
    float *u = g4_malloc(sizeof(float) * (size_t)COV_SPIKES * K);
    for (size_t i = 0; i < (size_t)COV_SPIKES * K; i++) u[i] = gauss(rng);
    for (int r = 0; r < R; r++)
        for (int f = 0; f < COV_SPIKES; f++) {
            const float a = gauss(rng) * 0.1f / (1 + f / 8.0f);
            for (int k = 0; k < K; k++)
                X[(size_t)r * K + k] += a * u[(size_t)f * K + k] *
                                        (0.2f + 2.8f * (float)((k * 37) % K) / (float)K);
        }
    free(u);
}

// --imatrix's directions (parts c, s) and search (d) on H from R rows of X (cov_dirs_r, as
// quantize's imatrix_dirs: 32, K at most).
static void bench_cov(const char *parts, const float *H, const float *X, const float *W, int K,
                      int N, int R, out4 *o) {
    const int r = K < 32 ? K : 32;
    float *mean = g4_calloc((size_t)K, sizeof(float)), *imp = g4_malloc(sizeof(float) * (size_t)K),
          *V = g4_malloc(sizeof(float) * (size_t)r * K);
    double *acc = g4_calloc((size_t)K, sizeof(double));
    for (int i = 0; i < R; i++)
        for (int k = 0; k < K; k++) acc[k] += X[(size_t)i * K + k];
    for (int k = 0; k < K; k++) {
        mean[k] = (float)(acc[k] / R);
        imp[k] = (float)(H[(size_t)k * K + k] / R);
    }
    if (strchr(parts, 'c')) {
        const double t0 = now(), c0 = cpu_now();
        const int rc = g4_cov_dirs(H, R, mean, K, r, V);
        const double t = now() - t0, c = cpu_now() - c0;
        if (rc) fprintf(stderr, "cov_dirs: %s\n", g4_error());
        printf("  cov_dirs   %8.3f s (cpu %8.3f s)  r %d  V hash %016llx\n", t, c, r,
               fnv(1469598103934665603ull, V, sizeof(float) * (size_t)r * K));
    }
    if (strchr(parts, 's') || strchr(parts, 'd')) {
        int kept = 0;
        double t0 = now(), c0 = cpu_now();
        int rc = g4_cov_dirs_shrunk(H, R, mean, K, r, V, &kept);
        const double t = now() - t0, c = cpu_now() - c0;
        if (rc) fprintf(stderr, "cov_dirs_shrunk: %s\n", g4_error());
        printf("  cov_shrunk %8.3f s (cpu %8.3f s)  r %d kept %d  V hash %016llx\n", t, c, r, kept,
               fnv(1469598103934665603ull, V, sizeof(float) * (size_t)kept * K));
        if (strchr(parts, 'd')) {
            t0 = now(), c0 = cpu_now();
            rc = g4_q4_quantize_imx_dirs(W, G4_DT_FLOAT, K, N, G4_Q4_BLOCK, g4_threads(), imp,
                                         mean, kept, V, o->q, o->sc, o->zp);
            const double ts = now() - t0, cs = cpu_now() - c0;
            if (rc) fprintf(stderr, "imatrix: %s\n", g4_error());
            printf("  imx search %8.3f s (cpu %8.3f s)  %d dirs  out hash %016llx\n", ts, cs, kept,
                   out_hash(o));
        }
    }
    free(mean), free(imp), free(V), free(acc);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_quant_methods K N [rows [threads [parts]]]\n");
        return 2;
    }
    const int K = atoi(argv[1]), N = atoi(argv[2]), R = argc > 3 ? atoi(argv[3]) : 2048;
    if (argc > 4) g4_set_threads(atoi(argv[4]));
    const char *parts = argc > 5 ? argv[5] : "xgafm";
    unsigned long long rng = 20261203;
    // Rows: independent channels at scales 0.2 .. 3, plus a shared factor per row and a
    // neighbour term (correlations within and across blocks).
    float *X = g4_malloc(sizeof(float) * (size_t)R * K);
    for (int r = 0; r < R; r++) {
        const float common = gauss(&rng);
        float prev = 0;
        for (int k = 0; k < K; k++) {
            const float z = gauss(&rng);
            X[(size_t)r * K + k] = (z + 0.5f * prev + 0.3f * common) *
                                   (0.2f + 2.8f * (float)((k * 37) % K) / (float)K);
            prev = z;
        }
    }
    const int cov = strchr(parts, 'c') || strchr(parts, 's') || strchr(parts, 'd');
    if (cov) add_spikes(X, R, K, &rng);
    float *H = g4_calloc((size_t)K * K, sizeof(float)),
          *H2 = g4_malloc(sizeof(float) * (size_t)K * K);
    double t0 = now(), c0 = cpu_now();
    for (int r0 = 0; r0 < R; r0 += 512) // in pieces, as forwards of a few rows hand them over
        g4_xtx_add(H, X + (size_t)r0 * K, R - r0 < 512 ? R - r0 : 512, K);
    const double t_x = now() - t0, c_x = cpu_now() - c0;
    printf("K %d N %d rows %d threads %d\n", K, N, R, g4_threads());
    if (strchr(parts, 'x'))
        printf("  xtx        %8.3f s (cpu %8.3f s)  H hash %016llx\n", t_x, c_x,
               fnv(1469598103934665603ull, H, sizeof(float) * (size_t)K * K));
    float *W = g4_malloc(sizeof(float) * (size_t)K * N);
    for (size_t i = 0; i < (size_t)K * N; i++) W[i] = 0.05f * gauss(&rng);
    out4 o = {0};
    o.sh = g4_q4_shape_of(K, N, G4_Q4_BLOCK);
    o.q = g4_malloc(o.sh.q_bytes), o.sc = g4_malloc(sizeof(uint16_t) * o.sh.n_scales);
    o.zp = g4_malloc(o.sh.zp_bytes);
    for (int act = 0; act <= 1; act++) {
        const int only_inv = !act && strchr(parts, 'i') && !strchr(parts, 'g');
        if (!strchr(parts, act ? 'a' : 'g') && !only_inv) continue;
        g4_gptq_opts go = {0.01f, act, 0, NULL, NULL, 0, 0};
        // One column: the factorisation (and its set-up) alone, to the column work's K^2 / 2.
        out4 o1 = {0};
        o1.sh = g4_q4_shape_of(K, 1, G4_Q4_BLOCK);
        o1.q = g4_malloc(o1.sh.q_bytes), o1.sc = g4_malloc(sizeof(uint16_t) * o1.sh.n_scales);
        o1.zp = g4_malloc(o1.sh.zp_bytes);
        float *W1 = g4_malloc(sizeof(float) * (size_t)K);
        for (int k = 0; k < K; k++) W1[k] = W[(size_t)k * N];
        memcpy(H2, H, sizeof(float) * (size_t)K * K);
        t0 = now();
        int rc = g4_q4_gptq(W1, G4_DT_FLOAT, K, 1, G4_Q4_BLOCK, H2, &go, o1.q, o1.sc, o1.zp);
        const double t_inv = now() - t0;
        const unsigned long long hu =
            fnv(1469598103934665603ull, H2, sizeof(float) * (size_t)K * K);
        dump(act ? "U1" : "U0", H2, sizeof(float) * (size_t)K * K, NULL, 0, NULL, 0);
        if (only_inv) {
            printf("  gptq     chol+inverse %8.3f s (U hash %016llx)\n", t_inv, hu);
            free(o1.q), free(o1.sc), free(o1.zp), free(W1);
            continue;
        }
        memcpy(H2, H, sizeof(float) * (size_t)K * K);
        t0 = now();
        rc |= g4_q4_gptq(W, G4_DT_FLOAT, K, N, G4_Q4_BLOCK, H2, &go, o.q, o.sc, o.zp);
        const double t_all = now() - t0;
        if (rc) fprintf(stderr, "gptq: %s\n", g4_error());
        dump(act ? "g1" : "g0", o.q, o.sh.q_bytes, o.sc, sizeof(uint16_t) * o.sh.n_scales, o.zp,
             o.sh.zp_bytes);
        printf("  gptq%s chol+inverse %8.3f s (U hash %016llx), all %8.3f s, columns %8.3f s  "
               "out hash %016llx  loss %.6g\n",
               act ? " act" : "    ", t_inv, hu, t_all, t_all - t_inv, out_hash(&o),
               out_loss(&o, W, H, K, N));
        free(o1.q), free(o1.sc), free(o1.zp), free(W1);
    }
    if (strchr(parts, 'f')) {
        t0 = now();
        int rc = g4_q4_fit(W, G4_DT_FLOAT, K, N, G4_Q4_BLOCK, H, o.q, o.sc, o.zp);
        const double t_fit = now() - t0;
        if (rc) fprintf(stderr, "fit: %s\n", g4_error());
        dump("f", o.q, o.sh.q_bytes, o.sc, sizeof(uint16_t) * o.sh.n_scales, o.zp, o.sh.zp_bytes);
        printf("  fit        %8.3f s  out hash %016llx  loss %.6g\n", t_fit, out_hash(&o),
               out_loss(&o, W, H, K, N));
    }
    if (strchr(parts, 'm')) { // as `quantize --method gptq_imx`: X^T X's diagonal as importance
        float *imp = g4_malloc(sizeof(float) * (size_t)K);
        for (int k = 0; k < K; k++) imp[k] = H[(size_t)k * K + k];
        g4_gptq_opts go = {0.01f, 0, 0, imp, NULL, 1, 0};
        memcpy(H2, H, sizeof(float) * (size_t)K * K);
        t0 = now();
        int rc = g4_q4_gptq(W, G4_DT_FLOAT, K, N, G4_Q4_BLOCK, H2, &go, o.q, o.sc, o.zp);
        const double t_gi = now() - t0;
        if (rc) fprintf(stderr, "gptq_imx: %s\n", g4_error());
        dump("m", o.q, o.sh.q_bytes, o.sc, sizeof(uint16_t) * o.sh.n_scales, o.zp, o.sh.zp_bytes);
        printf("  gptq_imx   %8.3f s  out hash %016llx  loss %.6g\n", t_gi, out_hash(&o),
               out_loss(&o, W, H, K, N));
        free(imp);
    }
    if (strchr(parts, 'e')) {
        int rc = g4_q4_quantize_rtn(W, G4_DT_FLOAT, K, N, G4_Q4_BLOCK, o.q, o.sc, o.zp);
        t0 = now(), c0 = cpu_now();
        const double e = g4_q4_out_err(W, G4_DT_FLOAT, K, N, G4_Q4_BLOCK, o.q, o.sc, o.zp, H);
        const double t_e = now() - t0, c_e = cpu_now() - c0;
        if (rc || !isfinite(e)) fprintf(stderr, "out_err: %s\n", g4_error());
        printf("  out_err    %8.3f s (cpu %8.3f s)  e %.17g  (K^2 N / wall: %.2f G/s)\n", t_e, c_e,
               e, (double)K * K * N / t_e * 1e-9);
    }
    if (cov) bench_cov(parts, H, X, W, K, N, R, &o);
    free(X), free(H), free(H2), free(W), free(o.q), free(o.sc), free(o.zp);
    return 0;
}
