// test_api_dev.c: the developer part of the public C API (include/g4cu_dev.h), one case or
// more per function, on the fixtures, with expected values from independent sources:
//   inspect   tests/fixtures/tiny2's config as tools/python/make_tiny2.py built it (hidden 80,
//             7 layers, ...: what test_tiny2_inspect.sh pins), a NaN written into a weight
//             (found through the loader's tensor table) reported as one issue;
//   features  HF's counts for the front-end fixtures (tests/fixtures/frontends/manifest.txt:
//             big_down.png 640x480 -> 912x672, 57x42 patches, 266 soft tokens; a 31 s clip cut
//             to 2999 frames, 750 soft tokens) and the .npy files' sizes;
//   quantize  the written package opens as a Q4 one (the loader's weights_q4) with the counts
//             the writer reports in its stats line, and the error contract;
//   compare   a package against HF's own dump (tests/fixtures/refdumps, make_reference.py)
//             passes, against the other model's dump fails, against itself has KL exactly 0;
//   bench     the tiny package on the CPU (every row of the csv table finite and positive);
//             the kernels without a GPU: G4CU_EINTERNAL naming why.
// Each report goes to a memory stream; the library writes nowhere else.
#include <g4cu_dev.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loader/package.h"
#include "tests/test_util.h"

static const char *fix, *tiny;

// A report written to a memory stream: call open_report, pass r->f, then close_report (the
// text in r->buf, NUL-terminated; free it).
typedef struct {
    FILE *f;
    char *buf;
    size_t len;
} report;

static void open_report(report *r) {
    r->buf = NULL;
    r->len = 0;
    r->f = open_memstream(&r->buf, &r->len);
    G4_ASSERT(r->f);
}

static void close_report(report *r) {
    fclose(r->f);
}

static int has(const report *r, const char *s) {
    return r->buf && strstr(r->buf, s) != NULL;
}

static void test_inspect(void) {
    char *t2 = g4_sprintf("%s/tiny2/package", fix);
    g4cu_dev_inspect_params p;
    g4cu_dev_inspect_params_default(&p);
    report r;
    int n_issues = -1;
    open_report(&r);
    CHECK_INT(g4cu_dev_inspect(t2, &p, r.f, &n_issues), G4CU_OK);
    close_report(&r);
    CHECK_INT(n_issues, 0);
    CHECK(has(&r, "hidden 80, layers 7, heads 3, kv heads 1, vocab 256, ple dim 32 (table rows "
                  "256)"));
    CHECK(has(&r, "kv layers 4, kv-shared layers 3"));
    CHECK(has(&r, "\n  4      full     96        0       64      shared 2 <- 2         1\n"));
    CHECK(has(&r, "consistent: all checks passed"));
    CHECK(has(&r, "  tensor ")); // the full tables
    free(r.buf);

    p.summary = 1;
    open_report(&r);
    CHECK_INT(g4cu_dev_inspect(t2, &p, r.f, &n_issues), G4CU_OK);
    close_report(&r);
    CHECK(!has(&r, "  tensor ") && has(&r, "consistent: all checks passed"));
    free(r.buf);

    p.summary = 0;
    p.json = 1;
    open_report(&r);
    CHECK_INT(g4cu_dev_inspect(t2, &p, r.f, &n_issues), G4CU_OK);
    close_report(&r);
    cJSON *j = cJSON_Parse(r.buf);
    CHECK(j != NULL);
    const cJSON *text = cJSON_GetObjectItem(j, "text");
    CHECK_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(text, "hidden")), 80);
    CHECK_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(text, "layers")), 7);
    CHECK_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(text, "kv_shared_layers")), 3);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "consistent")));
    cJSON_Delete(j);
    free(r.buf);

    // One tensor, and one that is not there (a user error naming it; nothing written).
    p.json = 0;
    p.tensor = "decoder.model.layers.0.mlp.up_proj.weight_t";
    open_report(&r);
    CHECK_INT(g4cu_dev_inspect(t2, &p, r.f, &n_issues), G4CU_OK);
    close_report(&r);
    CHECK(has(&r, "decoder.model.layers.0.mlp.up_proj.weight_t (decoder): float16 [80, 32]"));
    CHECK(has(&r, "NaN 0  Inf 0"));
    free(r.buf);
    p.tensor = "no.such.tensor";
    open_report(&r);
    CHECK_INT(g4cu_dev_inspect(t2, &p, r.f, &n_issues), G4CU_EUSER);
    close_report(&r);
    CHECK(strstr(g4cu_last_error(), "no tensor named 'no.such.tensor'") != NULL);
    CHECK_INT(r.len, 0);
    free(r.buf);
    CHECK_INT(g4cu_dev_inspect("/no/such/package", NULL, stdout, &n_issues), G4CU_EUSER);
    free(t2);

    // A NaN in a decoder weight: one issue, naming the tensor (its offset from the loader).
    char *tmp = g4t_tmpdir();
    CHECK_INT(g4t_sh("cp -r '%s' '%s/pkg'", tiny, tmp), 0);
    char *pkg = g4_sprintf("%s/pkg", tmp);
    g4_package *pk = NULL;
    const char *name = "decoder.model.layers.1.mlp.up_proj.weight_t";
    uint64_t off = 0;
    if (g4_package_open(pkg, &pk) == G4_OK) {
        const g4_component *c = g4_package_component(pk, G4_COMP_DECODER);
        for (int i = 0; c && i < c->model->n_tensors; i++)
            if (!strcmp(c->model->tensors[i].name, name)) off = c->model->tensors[i].offset;
        g4_package_close(pk);
    }
    CHECK(off > 0);
    char *data = g4_sprintf("%s/decoder/model.onnx.data", pkg);
    FILE *f = fopen(data, "r+b");
    CHECK(f != NULL);
    if (f) {
        const unsigned char nan16[2] = {0x00, 0x7e}; // element 5 = 0x7e00, an fp16 NaN
        fseek(f, (long)off + 10, SEEK_SET);
        fwrite(nan16, 1, 2, f);
        fclose(f);
    }
    g4cu_dev_inspect_params_default(&p);
    open_report(&r);
    CHECK_INT(g4cu_dev_inspect(pkg, &p, r.f, &n_issues), G4CU_OK);
    close_report(&r);
    CHECK_INT(n_issues, 1);
    CHECK(has(&r, "tensor 'decoder.model.layers.1.mlp.up_proj.weight_t' holds 1 NaN/Inf value "
                  "(the first at element 5: nan)"));
    CHECK(has(&r, "inconsistencies found (see above)"));
    free(r.buf);
    free(data);
    free(pkg);
    g4t_rmtree(tmp);
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void test_features(void) {
    char *img = g4_sprintf("%s/frontends/media/big_down.png", fix);
    char *aud = g4_sprintf("%s/frontends/media/long_31s.flac", fix);
    char *tmp = g4t_tmpdir(), *npy = g4_sprintf("%s/pv.npy", tmp);
    char *pos = g4_sprintf("%s/pv.positions.npy", tmp);
    g4cu_dev_features_params p;
    g4cu_dev_features_params_default(&p);
    p.image = img;
    p.out = npy;
    report r;
    open_report(&r);
    CHECK_INT(g4cu_dev_features(tiny, &p, r.f), G4CU_OK);
    close_report(&r);
    CHECK(has(&r, "640x480 -> 912x672 pixels (w x h), 57x42 patches of 768 values (HF pads to "
                  "2520), 266 soft tokens"));
    // .npy v1.0: a header of a multiple of 64 bytes, then 57 * 42 = 2394 rows
    const long a = file_size(npy), b = file_size(pos);
    CHECK(a > 2394 * 768 * 4 && (a - 2394 * 768 * 4) % 64 == 0);
    CHECK(b > 2394 * 2 * 4 && (b - 2394 * 2 * 4) % 64 == 0);
    free(r.buf);

    g4cu_dev_features_params_default(&p);
    p.audio = aud;
    open_report(&r);
    CHECK_INT(g4cu_dev_features(tiny, &p, r.f), G4CU_OK);
    close_report(&r);
    CHECK(has(&r, "log-mel [2999, 128], 2999 valid frames, 750 soft tokens"));
    CHECK(has(&r, "truncated to the first 30 s"));
    free(r.buf);

    // Both, neither, and a file that is no image: user errors.
    p.image = img;
    CHECK_INT(g4cu_dev_features(tiny, &p, stdout), G4CU_EUSER);
    g4cu_dev_features_params_default(&p);
    CHECK_INT(g4cu_dev_features(tiny, &p, stdout), G4CU_EUSER);
    char *manifest = g4_sprintf("%s/frontends/manifest.txt", fix);
    p.image = manifest;
    CHECK_INT(g4cu_dev_features(tiny, &p, stdout), G4CU_EUSER);
    CHECK(strstr(g4cu_last_error(), "manifest.txt: not a PNG or JPEG") != NULL);
    free(manifest);
    free(img), free(aud), free(npy), free(pos);
    g4t_rmtree(tmp);
}

static void test_quantize(void) {
    char *tmp = g4t_tmpdir(), *out = g4_sprintf("%s/q4", tmp);
    g4cu_dev_quantize_params p;
    g4cu_dev_quantize_params_default(&p);
    CHECK_INT(p.keep_auto_bytes, -1);
    CHECK_INT(p.calib_tokens, 0); // each run's own (16,384 / 256): test_quant_calib.sh
    CHECK_INT(p.calib_ctx, 0);
    const char *keep[] = {"*layers.0.mlp.down_proj*"};
    p.keep = keep;
    p.n_keep = 1;
    p.n_threads = 2;
    report r;
    open_report(&r);
    CHECK_INT(g4cu_dev_quantize(tiny, out, &p, r.f), G4CU_OK);
    close_report(&r);
    int n_q = -1, n_w = -1, n_kept = -1;
    const char *line = r.buf ? strstr(r.buf, ": ") : NULL;
    CHECK(line && sscanf(line, ": %d linears quantized to 4 bits (block 32, %d weights), %d kept",
                         &n_q, &n_w, &n_kept) == 3);
    CHECK_INT(n_kept, 1); // one linear matches
    CHECK(n_q > 0 && n_w > 0);
    free(r.buf);
    // The written package: Q4 weights (its lm_head), as the loader sees it; the fp16 one not.
    g4_package *pk = NULL;
    CHECK_INT(g4_package_open(out, &pk), G4_OK);
    if (pk) {
        CHECK_INT(pk->text.weights_q4, 1);
        g4_package_close(pk);
    }
    pk = NULL;
    CHECK_INT(g4_package_open(tiny, &pk), G4_OK);
    if (pk) {
        CHECK_INT(pk->text.weights_q4, 0);
        g4_package_close(pk);
    }
    // It exists now: refused; a calibration text without its use: refused.
    CHECK_INT(g4cu_dev_quantize(tiny, out, &p, stdout), G4CU_EUSER);
    CHECK(strstr(g4cu_last_error(), "already exists") != NULL);
    char *out2 = g4_sprintf("%s/q4b", tmp);
    p.calib = "calib.txt";
    CHECK_INT(g4cu_dev_quantize(tiny, out2, &p, stdout), G4CU_EUSER);
    // calib_tokens and calib_ctx: 0 (the default) or 8 to 2^20, calib_ctx only with a
    // calibrated method (checked before any work; one line each)
    p.method = "gptq", p.calib_ctx = 4;
    CHECK_INT(g4cu_dev_quantize(tiny, out2, &p, stdout), G4CU_EUSER);
    CHECK(strstr(g4cu_last_error(), "calib_ctx 4: expected 0 (the default) or 8 to 1048576") !=
          NULL);
    CHECK(!strchr(g4cu_last_error(), '\n'));
    p.calib_ctx = 0;
    const int bad_tokens[] = {4, -1, (1 << 20) + 1};
    for (int i = 0; i < 3; i++) {
        p.calib_tokens = bad_tokens[i];
        CHECK_INT(g4cu_dev_quantize(tiny, out2, &p, stdout), G4CU_EUSER);
        char want[64];
        snprintf(want, sizeof want, "calib_tokens %d: expected 0 (the default) or 8 to 1048576",
                 bad_tokens[i]);
        CHECK_MSG(strstr(g4cu_last_error(), want) && !strchr(g4cu_last_error(), '\n'),
                  "calib_tokens %d: %s", bad_tokens[i], g4cu_last_error());
    }
    p.calib_tokens = 0;
    p.method = "rtn", p.calib_ctx = 64, p.calib = NULL;
    CHECK_INT(g4cu_dev_quantize(tiny, out2, &p, stdout), G4CU_EUSER);
    CHECK(strstr(g4cu_last_error(), "calib_ctx with method 'rtn'") != NULL);
    g4cu_dev_quantize_params_default(&p);
    CHECK_INT(p.calib_ctx, 0); // windows of 512 for the calibrated methods by default
    free(out2);
    free(out);
    g4t_rmtree(tmp);
}

static void test_compare(void) {
    char *t2 = g4_sprintf("%s/tiny2/package", fix);
    char *dump = g4_sprintf("%s/refdumps/mobius-tiny-f16/len7.npz", fix);
    char *dump2 = g4_sprintf("%s/refdumps/tiny2/len7.npz", fix);
    char *tmp = g4t_tmpdir(), *json = g4_sprintf("%s/r.json", tmp);
    g4cu_dev_compare_params p;
    g4cu_dev_compare_params_default(&p);
    CHECK_INT(p.mode, G4CU_DEV_COMPARE_DUMP);
    p.json = json;
    report r;
    int pass = -1;
    open_report(&r);
    CHECK_INT(g4cu_dev_compare(tiny, dump, &p, r.f, &pass), G4CU_OK);
    close_report(&r);
    CHECK_INT(pass, 1); // HF's own dump of this package
    CHECK(has(&r, "tensors compared, all within tolerance"));
    CHECK(file_size(json) > 0);
    free(r.buf);
    p.json = NULL;
    open_report(&r);
    CHECK_INT(g4cu_dev_compare(tiny, dump2, &p, r.f, &pass), G4CU_OK);
    close_report(&r);
    CHECK_INT(pass, 0); // the other model's dump
    CHECK(has(&r, "FAILED"));
    free(r.buf);

    // The package against itself: the same numbers, KL exactly 0, top-1 agreement everywhere.
    const int32_t ids[] = {2, 5, 17, 9};
    p.mode = G4CU_DEV_COMPARE_PACKAGES;
    p.ids = ids;
    p.n_ids = 4;
    p.max_kl = 0;
    open_report(&r);
    CHECK_INT(g4cu_dev_compare(tiny, tiny, &p, r.f, &pass), G4CU_OK);
    close_report(&r);
    CHECK_INT(pass, 1);
    CHECK(has(&r, "over 4 positions: mean 0.000000e+00, max 0.000000e+00"));
    CHECK(has(&r, "top-1 agreement 4/4"));
    free(r.buf);
    CHECK_INT(g4cu_dev_compare(tiny, t2, &p, stdout, &pass), G4CU_EUSER);
    CHECK(strstr(g4cu_last_error(), "are different models") != NULL);

    // Sensitivity: layer 0's linears, ranked.
    const int layers[] = {0};
    p.mode = G4CU_DEV_COMPARE_SENSITIVITY;
    p.max_kl = -1;
    p.layers = layers;
    p.n_layers = 1;
    p.n_threads = 2;
    open_report(&r);
    CHECK_INT(g4cu_dev_compare(tiny, NULL, &p, r.f, &pass), G4CU_OK);
    close_report(&r);
    CHECK_INT(pass, 1);
    CHECK(has(&r, "sensitivity of ") && has(&r, "model.layers.0."));
    CHECK(!has(&r, "model.layers.1."));
    free(r.buf);

    // Options of another mode, no params, no input: user errors.
    p.mode = G4CU_DEV_COMPARE_DUMP;
    CHECK_INT(g4cu_dev_compare(tiny, dump, &p, stdout, &pass), G4CU_EUSER);
    CHECK_INT(g4cu_dev_compare(tiny, dump, NULL, stdout, &pass), G4CU_EUSER);
    g4cu_dev_compare_params_default(&p);
    p.mode = G4CU_DEV_COMPARE_PACKAGES;
    CHECK_INT(g4cu_dev_compare(tiny, tiny, &p, stdout, &pass), G4CU_EUSER);
    CHECK(strstr(g4cu_last_error(), "needs the input") != NULL);
    // The linear error (its run: test_linear_error.c): its options only with it, and its
    // tests and calibration text required.
    const char *tests[1] = {tiny};
    p.tests = tests, p.n_tests = 1;
    CHECK_INT(g4cu_dev_compare(tiny, tiny, &p, stdout, &pass), G4CU_EUSER);
    CHECK(strstr(g4cu_last_error(), "apply to the linear error") != NULL);
    p.mode = G4CU_DEV_COMPARE_LINEAR_ERROR;
    CHECK_INT(g4cu_dev_compare(tiny, NULL, &p, stdout, &pass), G4CU_EUSER);
    CHECK(strstr(g4cu_last_error(), "needs tests (1 to 64, got 1) and a calibration text") != NULL);
    p.calib = tiny, p.n_tests = 0;
    CHECK_INT(g4cu_dev_compare(tiny, NULL, &p, stdout, &pass), G4CU_EUSER);
    p.n_tests = 1, p.calib_tokens = 4;
    CHECK_INT(g4cu_dev_compare(tiny, NULL, &p, stdout, &pass), G4CU_EUSER);
    CHECK(strstr(g4cu_last_error(), "calib_tokens 4: expected 8 to") != NULL);
    free(t2), free(dump), free(dump2), free(json);
    g4t_rmtree(tmp);
}

static void test_bench(void) {
    g4cu_dev_bench_params p;
    g4cu_dev_bench_params_default(&p);
    CHECK(!strcmp(p.backend, "cuda") && p.reps == 20);
    p.backend = "cpu";
    p.reps = 1;
    p.format = "csv";
    report out, table;
    open_report(&out);
    open_report(&table);
    const char *pkgs[] = {tiny};
    CHECK_INT(g4cu_dev_bench_model(pkgs, 1, &p, out.f, table.f), G4CU_OK);
    close_report(&out);
    close_report(&table);
    CHECK(has(&out, "TTFT(128) ") && has(&out, "decode "));
    CHECK(!has(&out, "package,dir,backend"));
    CHECK(has(&table, "package,dir,backend,test,reps,mean,sd,unit\n"));
    // Every row: f16 (the tiny package's weights), cpu, one repetition, a positive mean.
    int rows = 0, bad = 0;
    for (char *l = table.buf ? strchr(table.buf, '\n') : NULL; l && l[1]; l = strchr(l + 1, '\n')) {
        const char *c = strstr(l, ",cpu,");
        double mean = -1;
        char test[64];
        rows++;
        if (strncmp(l + 1, "f16,", 4) || !c || sscanf(c, ",cpu,%63[^,],1,%lf,", test, &mean) != 2 ||
            !(mean > 0) || !isfinite(mean))
            bad++;
    }
    CHECK(rows >= 5);
    CHECK_INT(bad, 0);
    free(out.buf);
    free(table.buf);
    p.ple_host = 1;
    CHECK_INT(g4cu_dev_bench_model(pkgs, 1, &p, stdout, stdout), G4CU_EUSER);
    CHECK(strstr(g4cu_last_error(), "--ple-host needs a GPU") != NULL);
    p.ple_host = 0;
    CHECK_INT(g4cu_dev_bench_model(pkgs, 0, &p, stdout, stdout), G4CU_EUSER);

    // The kernels: without a GPU an internal error saying why; with one, a filter that
    // matches nothing writes the device line and times nothing.
    const char *why = NULL;
    const int n_dev = g4cu_dev_cuda_device_count(&why);
    g4cu_dev_bench_kernels_params kp;
    g4cu_dev_bench_kernels_params_default(&kp);
    kp.filter = "no-such-kernel-row";
    kp.reps = 1;
    open_report(&out);
    const int rc = g4cu_dev_bench_kernels(&kp, out.f);
    close_report(&out);
    if (n_dev == 0) {
        CHECK(why != NULL && *why);
        CHECK_INT(rc, G4CU_EINTERNAL);
        CHECK(strstr(g4cu_last_error(), "no usable CUDA device") != NULL);
        CHECK_INT(out.len, 0);
    } else {
        CHECK(why == NULL);
        CHECK_INT(rc, G4CU_OK);
        CHECK(has(&out, "device: ") && has(&out, "no benchmark matched"));
    }
    free(out.buf);
}

int main(void) {
    fix = g4t_env("G4_FIXTURES");
    tiny = g4t_env("G4_TINY_PKG");
    test_inspect();
    test_features();
    test_quantize();
    test_compare();
    test_bench();
    return g4t_finish("test_api_dev");
}
