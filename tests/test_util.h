// test_util.h: a minimal test harness: checks that record and continue, a summary, env access.
// A test binary returns 0 when every check passed, 1 otherwise, 77 when skipped (ctest
// SKIP_RETURN_CODE) after printing why.
#ifndef G4_TEST_UTIL_H
#define G4_TEST_UTIL_H

#include <stddef.h>
#include <stdio.h>

extern int g4t_checks, g4t_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        g4t_checks++;                                                                              \
        if (!(cond)) {                                                                             \
            g4t_failures++;                                                                        \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        g4t_checks++;                                                                              \
        if (!(cond)) {                                                                             \
            g4t_failures++;                                                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

#define CHECK_INT(a, b)                                                                            \
    do {                                                                                           \
        long long g4t_a_ = (long long)(a), g4t_b_ = (long long)(b);                                \
        CHECK_MSG(g4t_a_ == g4t_b_, "%lld != %lld", g4t_a_, g4t_b_);                               \
    } while (0)

// Prints the summary line and returns the process exit code.
int g4t_finish(const char *name);
// Prints "SKIP <name>: <why>" and returns 77.
int g4t_skip(const char *name, const char *why);
// An environment variable the test needs (exits 1 with a message when unset).
const char *g4t_env(const char *var);
// A fresh temporary directory; g4t_rmtree removes it and frees the string.
char *g4t_tmpdir(void);
void g4t_rmtree(char *dir);
// The first line of a text file, without its line end, into buf (size n); exits 1 with a
// message when the file cannot be read.
void g4t_read_line(const char *path, char *buf, size_t n);
// A whole file (its path printf-style), NUL-terminated (free it); "" when it cannot be read
// (the check that follows then fails on its content).
char *g4t_slurp(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// A JSON file parsed with cJSON (cJSON_Delete it), or NULL when unreadable or invalid.
struct cJSON *g4t_read_json(const char *path);
// Runs a shell command; returns its exit status.
int g4t_sh(const char *fmt, ...);
// The tiny fixture's Q4 package in dir (made if absent): the f16 package f16_pkg's entries
// linked, but its decoder, which is onnxruntime's Q4 decoder (fixtures/q4/decoder); returns the
// shell's exit status (0: made).
int g4t_q4_package(const char *dir, const char *f16_pkg, const char *fixtures);
// fn(m, what) on the text model of each of four packages loaded on backend be: the tiny f16
// fixture, the same loaded without q|k|v weights (G4_QKV=0 at load), alt-tiny (another shape)
// and the tiny fixture with its Q4 decoder (tests/fixtures/q4); returns the sum of what fn
// returned (a package that does not load is a failed check).
struct g4_backend;
struct g4_text_model;
int g4t_step_packages(struct g4_backend *be, int (*fn)(struct g4_text_model *m, const char *what));
// A seeded xorshift generator for test inputs (never zeros unless asked).
unsigned long long g4t_rand_u64(unsigned long long *state);
float g4t_rand_uniform(unsigned long long *state, float lo, float hi);

// The one element-wise comparison of the op harnesses (test_backend_ops, test_cuda_ops /
// _attention / _conv through tests/attnops_harness.h, test_cuda_towers): element i passes when
// |got - want| <= atol + rtol * |want|. The NaN rule, the same everywhere: a NaN or inf in `got`
// where want is finite fails (a poisoned output that was never written), and a NaN or inf in
// `want` fails too (a broken reference must not pass), unless the op's contract passes
// non-finite inputs through (torch.clamp keeps NaN) and the case says so with G4T_NONFINITE_SAME:
// then a non-finite want must be matched exactly (NaN by NaN, inf by the same inf).
#define G4T_NONFINITE_SAME 1
typedef struct {
    double max_err, max_ratio; // largest finite |got - want|, largest |got - want| / tol
    size_t bad, worst;         // failing elements, the index of the worst one
    size_t nonfinite;          // non-finite got where want is finite
    size_t ref_nonfinite;      // non-finite want (failures unless G4T_NONFINITE_SAME)
} g4t_cmp;
g4t_cmp g4t_compare(const float *got, const float *want, size_t n, double atol, double rtol,
                    int flags);
// The same rule for one element against an allowed error lim (>= 0; 0: exact): 1 when it fails.
int g4t_elem_bad(double got, double want, double lim);

#endif
