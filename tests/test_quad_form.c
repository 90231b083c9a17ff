// test_quad_form.c: the quadratic forms x^T H x of quant/quad_form.h (g4_quad_forms: the one
// layer-output error sum of GPTQ's damping search, the equalize search and the fidelity report)
// against a plain double triple loop over the whole of H, on odd shapes: K = 1, 2, 3, 7, 8, 9,
// 17, 31, 33, 64, 65, 100 (odd K: the two-row pass's last row alone; K not a multiple of the
// lanes) and n = 1 .. 33 vectors (a last group of 1 .. 8 lanes), each shape on 1 and 2 threads.
// 1. Small integers (H in -3..3, x in -2..2): every partial sum is an integer below 2^53, so any
//    order of the sums gives the exact value: equality, no tolerance (catches a lane, row or
//    triangle indexing slip that a tolerance could hide).
// 2. Random floats, H = X^T X of correlated rows (positive definite, as the callers' X^T X), the
//    vectors random: |got - want| <= QUAD_TOL x sum_ab |x_a H_ab x_b| (two orders of the same
//    double sums differ by at most ~K x 2^-53 of the sum of the terms' sizes).
// 3. For both: 1 and 2 threads give the same bits; each vector's source is called exactly once;
//    the slot past out[n - 1] (a sentinel) is untouched. The values compared are counted against
//    the count the shapes give.
// 4. Bad arguments: one-line errors; n = 0 is no work.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/parallel.h"
#include "quant/quad_form.h"
#include "tests/test_util.h"

// Relative to the terms' sizes: reordered double sums of K <= 100 terms of products agree to
// ~2 K x 2^-53 = 2.2e-14 of sum |terms|; 1e-13 leaves 4x (and is 1e6 x tighter than a float sum).
#define QUAD_TOL 1e-13

static const int KS[] = {1, 2, 3, 7, 8, 9, 17, 31, 33, 64, 65, 100};
#define N_KS  ((int)(sizeof KS / sizeof KS[0]))
#define MAX_N 33

static unsigned long long rng = 20261205;
static double uni(void) { // [0, 1)
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct {
    const double *X; // [n][K] the vectors
    int K;
    int *calls; // [n]
} src;

static void vec_of(void *ctx, int v, double *x, float *tmp) {
    const src *s = ctx;
    for (int k = 0; k < s->K; k++) tmp[k] = 0; // the scratch is the caller's, K floats
    memcpy(x, s->X + (size_t)v * s->K, sizeof(double) * (size_t)s->K);
    s->calls[v]++; // distinct v on distinct threads: no race
}

// want[v] = sum_a sum_b x_a H_ab x_b (the whole of H), size[v] = the same sum of |terms|.
static void direct(const float *H, const double *X, int K, int n, double *want, double *size) {
    for (int v = 0; v < n; v++) {
        const double *x = X + (size_t)v * K;
        double e = 0, a_ = 0;
        for (int a = 0; a < K; a++)
            for (int b = 0; b < K; b++) {
                const double t = x[a] * (double)H[(size_t)a * K + b] * x[b];
                e += t, a_ += fabs(t);
            }
        want[v] = e, size[v] = a_;
    }
}

// One shape of one kind (exact: the integer case); returns the values compared.
static int shape_case(int K, int n, int exact) {
    float *H = g4_malloc(sizeof(float) * (size_t)K * K);
    double *X = g4_malloc(sizeof(double) * (size_t)n * K);
    if (exact) {
        for (int a = 0; a < K; a++)
            for (int b = a; b < K; b++)
                H[(size_t)a * K + b] = H[(size_t)b * K + a] = (float)((int)(uni() * 7) - 3);
        for (int i = 0; i < n * K; i++) X[i] = (double)((int)(uni() * 5) - 2);
    } else { // X^T X of 2K rows r_t = z_t + 0.8 z_t-1 (neighbour channels correlated), scaled
        const int R = 2 * K;
        double *Z = g4_malloc(sizeof(double) * (size_t)R * K);
        for (int t = 0; t < R; t++) {
            double prev = 0;
            for (int k = 0; k < K; k++) {
                const double z = uni() - 0.5;
                Z[(size_t)t * K + k] = (z + 0.8 * prev) * (0.2 + 3.0 * k / K);
                prev = z;
            }
        }
        for (int a = 0; a < K; a++)
            for (int b = a; b < K; b++) {
                double h = 0;
                for (int t = 0; t < R; t++) h += Z[(size_t)t * K + a] * Z[(size_t)t * K + b];
                H[(size_t)a * K + b] = H[(size_t)b * K + a] = (float)h;
            }
        free(Z);
        for (int i = 0; i < n * K; i++) X[i] = 0.1 * (uni() - 0.5);
    }
    double *want = g4_malloc(sizeof(double) * (size_t)n), *size = g4_malloc(sizeof(double) * n);
    direct(H, X, K, n, want, size);
    double *out[2];
    int bad = 0, bad_calls = 0, compared = 0;
    for (int th = 0; th < 2; th++) {
        int *calls = g4_calloc((size_t)n, sizeof(int));
        out[th] = g4_malloc(sizeof(double) * (size_t)(n + 1));
        out[th][n] = -7.25; // the sentinel
        src s = {X, K, calls};
        g4_set_threads(th + 1);
        CHECK_MSG(g4_quad_forms(H, K, n, vec_of, &s, out[th]) == G4_OK, "%s", g4_error());
        CHECK_MSG(out[th][n] == -7.25, "K %d n %d threads %d: out[n] written (%g)", K, n, th + 1,
                  out[th][n]);
        for (int v = 0; v < n; v++) bad_calls += calls[v] != 1;
        free(calls);
    }
    g4_set_threads(0);
    for (int v = 0; v < n; v++) {
        const double got = out[0][v], err = fabs(got - want[v]);
        const int ok = exact ? got == want[v] : err <= QUAD_TOL * size[v];
        if (!ok && bad < 3)
            fprintf(stderr, "  K %d n %d %s vector %d: %.17g, direct %.17g (|terms| %.3g)\n", K, n,
                    exact ? "integer" : "float", v, got, want[v], size[v]);
        bad += !ok;
        compared++;
    }
    CHECK_MSG(bad == 0, "K %d n %d (%s): %d of %d values off", K, n, exact ? "integer" : "float",
              bad, n);
    CHECK_MSG(bad_calls == 0, "K %d n %d: %d vectors not asked for exactly once", K, n, bad_calls);
    CHECK_MSG(!memcmp(out[0], out[1], sizeof(double) * (size_t)n),
              "K %d n %d (%s): 1 and 2 threads differ", K, n, exact ? "integer" : "float");
    free(H), free(X), free(want), free(size), free(out[0]), free(out[1]);
    return compared;
}

static void test_shapes(void) {
    int compared = 0;
    for (int exact = 1; exact >= 0; exact--)
        for (int i = 0; i < N_KS; i++)
            for (int n = 1; n <= MAX_N; n++) compared += shape_case(KS[i], n, exact);
    // every value of every shape compared: 2 kinds x the K's x (1 + .. + 33)
    CHECK_INT(compared, 2 * N_KS * MAX_N * (MAX_N + 1) / 2);
    printf("  %d values against the direct sum (%d shapes x 2 kinds, 1 and 2 threads)\n", compared,
           N_KS * MAX_N);
}

static void test_bad_args(void) {
    float H[4] = {1, 0, 0, 1};
    double out[1] = {-1};
    int calls[1] = {0};
    const double X[2] = {1, 2};
    src s = {X, 2, calls};
    CHECK(g4_quad_forms(H, 0, 1, vec_of, &s, out) == G4_EUSER);
    CHECK(strstr(g4_error(), "quadratic forms: K 0, 1 vectors") != NULL);
    CHECK(g4_quad_forms(NULL, 2, 1, vec_of, &s, out) == G4_EUSER);
    CHECK(strstr(g4_error(), "H NULL") != NULL);
    CHECK(g4_quad_forms(H, 2, -1, vec_of, &s, out) == G4_EUSER);
    CHECK(g4_quad_forms(H, 2, 1, NULL, &s, out) == G4_EUSER);
    CHECK(strstr(g4_error(), "source NULL") != NULL);
    CHECK(g4_quad_forms(H, 2, 0, vec_of, &s, NULL) == G4_OK); // no vectors: no work
    CHECK(calls[0] == 0 && out[0] == -1);
    CHECK(g4_quad_forms(H, 2, 1, vec_of, &s, out) == G4_OK);
    CHECK(calls[0] == 1 && out[0] == 5); // 1 + 4 with H = I
}

int main(void) {
    test_shapes();
    test_bad_args();
    return g4t_finish("test_quad_form");
}
