// test_bench_formats.c: `g4cu bench -o md|csv|json` on the tiny fixture (CPU): one row per
// measurement, the same rows in the three formats, and the numbers checked against the --json
// file the same run writes (medians, computed apart from the rows' means): with 2 repetitions
// the median is the mean of the two, so each rate / time row's mean equals its median; the
// standard deviations are finite and >= 0, and 0 with one repetition. Bad -o values are
// one-line usage errors. CPU only: runs in CI.
//
// Under ASan+UBSan (-O0, 10x slower) the three runs take --filter pp128: the rows of the 128-token
// prompt only (pp128, tg128 @ pp128, ttft pp128, sampled), the same option parsing and the same
// three writers; the filter is checked (no other row, the skipped medians -1). The media and the
// longer prefill rows, whose checks are the same in every build, run in the optimised build.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tests/test_util.h"

static const char *g4cu, *pkg;
static char *tmp;

static const cJSON *row(const cJSON *rows, const char *test) {
    for (const cJSON *r = rows ? rows->child : NULL; r; r = r->next)
        if (!strcmp(cJSON_GetObjectItem(r, "test")->valuestring, test)) return r;
    return NULL;
}

#if defined(__SANITIZE_ADDRESS__)
#define FILTER " --filter pp128"
#else
#define FILTER ""
#endif

static int lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

int main(void) {
    g4cu = g4t_env("G4CU");
    pkg = g4t_env("G4_TINY_PKG");
    tmp = g4t_tmpdir();
    int rc = g4t_sh("'%s' bench '%s' --backend cpu --reps 2 --json '%s/b.json' -o json" FILTER
                    " >'%s/rows.json' 2>'%s/err'",
                    g4cu, pkg, tmp, tmp, tmp);
    CHECK_INT(rc, 0);
    char *rows_s = g4t_slurp("%s/rows.json", tmp), *file_s = g4t_slurp("%s/b.json", tmp),
         *err = g4t_slurp("%s/err", tmp);
    cJSON *rows = cJSON_Parse(rows_s), *file = cJSON_Parse(file_s);
    CHECK_MSG(rows && cJSON_IsArray(rows), "-o json: not a JSON array: %.200s", rows_s);
    CHECK(file != NULL);
    CHECK_MSG(strstr(err, "decode ") != NULL, "-o: the summary line goes to stderr");
    const cJSON *f16 = cJSON_GetObjectItem(cJSON_GetObjectItem(file, "packages"), "f16");
    const struct {
        const char *test, *key, *unit;
    } same[] = {{"tg128 @ pp128", "decode_tok_s", "tok/s"},
                {"ttft pp128", "ttft_128_ms", "ms"},
                {"tg128 @ pp128 sampled", "decode_sampled_tok_s", "tok/s"},
                {"vision 768x768", "vision_768_ms", "ms"},
                {"audio 30 s", "audio_30s_ms", "ms"}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        if (!strstr(same[i].test, "pp128") && *FILTER) { // filtered out: not run, -1
            const double med = cJSON_GetObjectItem(f16, same[i].key)->valuedouble;
            CHECK_MSG(!row(rows, same[i].test) && med == -1, "%s: a row or %g despite --filter",
                      same[i].test, med);
            continue;
        }
        const cJSON *r = row(rows, same[i].test);
        CHECK_MSG(r != NULL, "no row '%s'", same[i].test);
        if (!r || !f16) continue;
        const double mean = cJSON_GetObjectItem(r, "mean")->valuedouble;
        const double med = cJSON_GetObjectItem(f16, same[i].key)->valuedouble;
        // the file prints %.2f / %.4f: its rounding is the tolerance
        CHECK_MSG(fabs(mean - med) <= 0.006 + 1e-9 * fabs(med), "%s: mean %.6f vs median %.6f",
                  same[i].test, mean, med);
        CHECK(!strcmp(cJSON_GetObjectItem(r, "unit")->valuestring, same[i].unit));
        CHECK_INT(cJSON_GetObjectItem(r, "reps")->valueint, 2);
    }
    int n_rows = cJSON_GetArraySize(rows), ok = n_rows >= (*FILTER ? 4 : 9);
    for (const cJSON *r = rows ? rows->child : NULL; r; r = r->next) {
        const double sd = cJSON_GetObjectItem(r, "sd")->valuedouble;
        const double mean = cJSON_GetObjectItem(r, "mean")->valuedouble;
        ok &= isfinite(sd) && sd >= 0 && isfinite(mean) && mean > 0;
        ok &= !*FILTER || strstr(cJSON_GetObjectItem(r, "test")->valuestring, "pp128");
        ok &= !strcmp(cJSON_GetObjectItem(r, "package")->valuestring, "f16") &&
              !strcmp(cJSON_GetObjectItem(r, "backend")->valuestring, "cpu");
    }
    CHECK_MSG(ok, "%d rows: each with package f16, backend cpu, finite mean > 0 and sd >= 0",
              n_rows);
    if (*FILTER)
        CHECK(row(rows, "pp128") && !row(rows, "pp512") && !row(rows, "pp2048"));
    else
        CHECK(row(rows, "pp128") && row(rows, "pp512") && row(rows, "pp2048"));

    // md and csv, one repetition: the same rows, sd 0
    rc = g4t_sh("'%s' bench '%s' --backend cpu --reps 1 -o md" FILTER " >'%s/rows.md' 2>/dev/null",
                g4cu, pkg, tmp);
    CHECK_INT(rc, 0);
    char *md = g4t_slurp("%s/rows.md", tmp);
    CHECK_INT(lines(md), n_rows + 2);
    CHECK(!strncmp(md, "| package | backend | test | reps | mean \xc2\xb1 sd | unit |\n", 52));
    for (const cJSON *r = rows ? rows->child : NULL; r; r = r->next) {
        char want[128];
        snprintf(want, sizeof want, "| f16 | cpu | %s | 1 | ",
                 cJSON_GetObjectItem(r, "test")->valuestring);
        const char *at = strstr(md, want);
        CHECK_MSG(at && strstr(at, " \xc2\xb1 0.00 | "), "md: no row '%s' with sd 0", want);
    }
    rc =
        g4t_sh("'%s' bench '%s' --backend cpu --reps 1 -o csv" FILTER " >'%s/rows.csv' 2>/dev/null",
               g4cu, pkg, tmp);
    CHECK_INT(rc, 0);
    char *csv = g4t_slurp("%s/rows.csv", tmp);
    CHECK_INT(lines(csv), n_rows + 1);
    CHECK(!strncmp(csv, "package,dir,backend,test,reps,mean,sd,unit\n", 43));
    char want[256];
    snprintf(want, sizeof want, "f16,\"%s\",cpu,pp128,1,", pkg);
    CHECK_MSG(strstr(csv, want) != NULL, "csv: no '%s'", want);

    // a filter that names no row: nothing measured, the header alone (fast in every build)
    rc = g4t_sh("'%s' bench '%s' --backend cpu --reps 1 -o csv --filter no-such-row >'%s/none.csv' "
                "2>/dev/null",
                g4cu, pkg, tmp);
    CHECK_INT(rc, 0);
    char *none = g4t_slurp("%s/none.csv", tmp);
    CHECK_MSG(!strcmp(none, "package,dir,backend,test,reps,mean,sd,unit\n"),
              "--filter no-such-row: %.200s", none);
    free(none);

    rc = g4t_sh("'%s' bench '%s' --backend cpu -o yaml >/dev/null 2>'%s/err'", g4cu, pkg, tmp);
    char *e = g4t_slurp("%s/err", tmp);
    CHECK_INT(rc, 1);
    CHECK(strstr(e, "-o expects md, csv or json, got 'yaml'") && lines(e) == 1);
    rc = g4t_sh("'%s' bench --kernels -o md >/dev/null 2>/dev/null", g4cu);
    CHECK_INT(rc, 1);
    free(e), free(md), free(csv), free(rows_s), free(file_s), free(err);
    cJSON_Delete(rows);
    cJSON_Delete(file);
    g4t_rmtree(tmp);
    return g4t_finish("test_bench_formats");
}
