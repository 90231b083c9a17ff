// test_util.c: see test_util.h.
#include "tests/test_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/base.h"
#include "engine/text_model.h"

int g4t_checks = 0, g4t_failures = 0;

int g4t_finish(const char *name) {
    printf("%s: %d checks, %d failed\n", name, g4t_checks, g4t_failures);
    return g4t_failures ? 1 : 0;
}

int g4t_skip(const char *name, const char *why) {
    printf("SKIP %s: %s\n", name, why);
    return 77;
}

const char *g4t_env(const char *var) {
    const char *v = getenv(var);
    if (!v || !*v) {
        fprintf(stderr, "test: environment variable %s is not set (run through ctest)\n", var);
        exit(1);
    }
    return v;
}

char *g4t_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char *t = g4_sprintf("%s/g4t.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(t)) {
        perror("mkdtemp");
        exit(1);
    }
    return t;
}

void g4t_rmtree(char *dir) {
    if (dir && strncmp(dir, "/", 1) == 0 && strstr(dir, "g4t.")) g4t_sh("rm -rf '%s'", dir);
    free(dir);
}

int g4t_sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return rc == -1 ? -1 : (rc >> 8) & 0xff;
}

int g4t_q4_package(const char *dir, const char *f16_pkg, const char *fixtures) {
    return g4t_sh("mkdir -p '%s' && cd '%s' && for f in '%s'/*; do b=$(basename \"$f\"); "
                  "[ \"$b\" = decoder ] || ln -s \"$f\" \"$b\"; done && "
                  "ln -s '%s/q4/decoder' decoder",
                  dir, dir, f16_pkg, fixtures);
}

static int with_text_model(const char *dir, const char *what, const char *qkv_at_load,
                           g4_backend *be, int (*fn)(g4_text_model *m, const char *what)) {
    g4_package *p;
    int rc = g4_package_open(dir, &p), out = 0;
    CHECK_MSG(rc == 0, "%s: %s", what, g4_error());
    if (rc) return 0;
    if (qkv_at_load) setenv("G4_QKV", qkv_at_load, 1);
    g4_text_model *m;
    rc = g4_text_model_load(p, be, &m);
    if (qkv_at_load) unsetenv("G4_QKV");
    CHECK_MSG(rc == 0, "%s: %s", what, g4_error());
    if (rc == 0) {
        out = fn(m, what);
        g4_text_model_free(m);
    }
    g4_package_close(p);
    return out;
}

int g4t_step_packages(g4_backend *be, int (*fn)(g4_text_model *m, const char *what)) {
    int n = with_text_model(g4t_env("G4_TINY_PKG"), "f16", NULL, be, fn);
    n += with_text_model(g4t_env("G4_TINY_PKG"), "f16, no q|k|v weights", "0", be, fn);
    char *alt = g4_sprintf("%s/alt-tiny/package", g4t_env("G4_FIXTURES"));
    n += with_text_model(alt, "alt-tiny", NULL, be, fn);
    free(alt);
    // the Q4 package: the f16 one with onnxruntime's Q4 decoder (tests/fixtures/q4)
    char *tmp = g4t_tmpdir(), *pkg = g4_sprintf("%s/pkg", tmp);
    const int rc = g4t_q4_package(pkg, g4t_env("G4_TINY_PKG"), g4t_env("G4_FIXTURES"));
    CHECK(rc == 0);
    if (rc == 0) n += with_text_model(pkg, "q4", NULL, be, fn);
    free(pkg);
    g4t_rmtree(tmp);
    return n;
}

unsigned long long g4t_rand_u64(unsigned long long *s) {
    unsigned long long x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

float g4t_rand_uniform(unsigned long long *s, float lo, float hi) {
    double u = (double)(g4t_rand_u64(s) >> 11) / 9007199254740992.0;
    return (float)(lo + (hi - lo) * u);
}

g4t_cmp g4t_compare(const float *got, const float *want, size_t n, double atol, double rtol,
                    int flags) {
    g4t_cmp c = {0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        double ratio; // |err| / allowed; INFINITY for a non-finite mismatch
        if (!isfinite(want[i])) {
            const int same = isnan(want[i]) ? isnan(got[i]) : got[i] == want[i];
            ratio = (flags & G4T_NONFINITE_SAME) && same ? 0 : INFINITY;
            if (!(flags & G4T_NONFINITE_SAME)) c.ref_nonfinite++;
        } else if (!isfinite(got[i])) {
            ratio = INFINITY;
            c.nonfinite++;
        } else {
            const double d = fabs((double)got[i] - want[i]), lim = atol + rtol * fabs(want[i]);
            if (d > c.max_err) c.max_err = d;
            ratio = lim > 0 ? d / lim : d > 0 ? INFINITY : 0;
        }
        if (ratio > c.max_ratio) c.max_ratio = ratio, c.worst = i;
        if (ratio > 1) c.bad++;
    }
    return c;
}

int g4t_elem_bad(double got, double want, double lim) {
    return !isfinite(got) || !isfinite(want) || !(fabs(got - want) <= lim);
}

void g4t_read_line(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, (int)n, f)) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    buf[strcspn(buf, "\r\n")] = 0;
}

char *g4t_slurp(const char *fmt, ...) {
    char path[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    char *buf = NULL;
    size_t n = 0;
    if (g4_read_file(path, &buf, &n)) buf = g4_strdup("");
    return buf;
}

struct cJSON *g4t_read_json(const char *path) {
    char *text;
    size_t n;
    if (g4_read_file(path, &text, &n)) return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    return j;
}
