// test_report.c: the pieces under `g4cu compare`'s reports, on inputs whose answers are known
// by hand: the logits KL (fidelity/kl.h), the named tolerances (fidelity/tolerance.h), the
// classification of hook names onto the chart, and a report with a text decoder and a vision
// tower rendered to SVG (one panel each), Markdown and JSON. The end-to-end checks on the tiny
// fixture are in test_fidelity.c.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "fidelity/compare.h"
#include "fidelity/kl.h"
#include "fidelity/report.h"
#include "fidelity/svg.h"
#include "fidelity/tolerance.h"
#include "tests/test_util.h"

static void test_kl(void) {
    // p = softmax(0, ln 3) = (1/4, 3/4), q = softmax(0, 0) = (1/2, 1/2):
    // KL = 1/4 ln(1/2) + 3/4 ln(3/2) = 0.130812035941137...
    const float ref[] = {0, logf(3), 5, 5, 1000, -1000, 0, 0};
    const float test[] = {0, 0, 5, 5, -1000, 1000, 0, NAN};
    g4_kl_stats k = g4_kl_rows(ref, test, 4, 2);
    const double want0 = 0.25 * log(0.5) + 0.75 * log(1.5);
    // ref row 0 holds logf(3) (float): its exact softmax shifts KL by ~1e-8 at most.
    CHECK_MSG(fabs(k.kl[0] - want0) < 1e-7, "KL %.17g, expected %.17g", k.kl[0], want0);
    CHECK_MSG(k.kl[1] == 0, "equal rows: KL %g", k.kl[1]);
    // p = (1, e^-2000), q = (e^-2000, 1): KL = 2000 (nats), finite despite the huge logits.
    CHECK_MSG(fabs(k.kl[2] - 2000) < 1e-9, "extreme logits: KL %.17g, expected 2000", k.kl[2]);
    CHECK_MSG(isnan(k.kl[3]) && k.nonfinite_rows == 1 && isnan(k.kl_mean) && isnan(k.kl_max),
              "NaN row: KL %g, %d non-finite, mean %g", k.kl[3], k.nonfinite_rows, k.kl_mean);
    CHECK_INT(k.top1_ref[0], 1);
    CHECK_INT(k.top1_test[0], 0);
    CHECK_INT(k.top1_ref[2], 0);
    CHECK_INT(k.top1_test[2], 1);
    CHECK_INT(k.top1_agree, 2); // rows 1 (tie: both first) and 3 (NaN never wins: first index)
    g4_kl_free(&k);

    // Three finite rows: the mean and the max with its row.
    k = g4_kl_rows(ref, test, 3, 2);
    CHECK_MSG(fabs(k.kl_mean - (want0 + 0 + 2000) / 3) < 1e-7 && k.kl_max == k.kl[2] &&
                  k.kl_max_row == 2 && k.nonfinite_rows == 0,
              "mean %.17g max %g at %d", k.kl_mean, k.kl_max, k.kl_max_row);
    g4_kl_free(&k);
}

static void test_classify(void) {
    struct {
        const char *name, *comp, *kind;
        int at, layer;
    } cases[] = {
        {"q_3", "text", "q", G4_REPORT_AT_LAYER, 3},
        {"layer_12", "text", "layer", G4_REPORT_AT_LAYER, 12},
        {"embeds", "text", "embeds", G4_REPORT_AT_IN, -1},
        {"per_layer_inputs", "text", "per_layer_inputs", G4_REPORT_AT_IN, -1},
        {"final_norm", "text", "final_norm", G4_REPORT_AT_OUT, -1},
        {"logits", "text", "logits", G4_REPORT_AT_OUT, -1},
        {"vision_layer_1", "vision", "layer", G4_REPORT_AT_LAYER, 1},
        {"vision_patch_embeds", "vision", "patch_embeds", G4_REPORT_AT_IN, -1},
        {"vision_soft_tokens", "vision", "soft_tokens", G4_REPORT_AT_OUT, -1},
        {"audio_ffn1_0", "audio", "ffn1", G4_REPORT_AT_LAYER, 0},
        {"audio_subsample", "audio", "subsample", G4_REPORT_AT_IN, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char comp[16], kind[32];
        int layer;
        const int at =
            g4_report_classify(cases[i].name, comp, sizeof comp, kind, sizeof kind, &layer);
        CHECK_MSG(at == cases[i].at && layer == cases[i].layer && !strcmp(comp, cases[i].comp) &&
                      !strcmp(kind, cases[i].kind),
                  "%s -> %s/%s at %d layer %d", cases[i].name, comp, kind, at, layer);
    }
}

static void add(g4_cmp_report *r, const char *name, double rel) {
    g4_cmp_row row = {0};
    snprintf(row.name, sizeof row.name, "%s", name);
    snprintf(row.tol_name, sizeof row.tol_name, "t");
    row.tol = 1e-2;
    row.shape_ok = 1;
    row.s.rel = rel;
    row.s.cosine = 1;
    row.s.n = 4;
    row.s.argmax_agree_rows = -1;
    row.pass = rel <= row.tol;
    g4_cmp_report_add(r, &row);
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++) n++;
    return n;
}

static void test_two_panels(void) {
    g4_cmp_report rep = {0};
    add(&rep, "embeds", 0); // 0: cannot sit on a log axis, must be named in the note
    for (int l = 0; l < 3; l++) {
        char nm[32];
        snprintf(nm, sizeof nm, "q_%d", l);
        add(&rep, nm, 1e-3 * (l + 1));
        snprintf(nm, sizeof nm, "layer_%d", l);
        add(&rep, nm, 2e-3 * (l + 1));
    }
    add(&rep, "logits", 5e-2); // over the tolerance
    add(&rep, "vision_patch_embeds", 1e-6);
    add(&rep, "vision_layer_0", 1e-5);
    add(&rep, "vision_layer_1", NAN); // non-finite: skipped and counted
    add(&rep, "vision_soft_tokens", 3e-5);
    const int32_t ids[] = {2, 5, 7};
    g4_report r = {.mode = G4_REPORT_HF_DUMP,
                   .reference = "dir/ref.npz",
                   .test = "a/b/pkg",
                   .backend = "cpu",
                   .ids = ids,
                   .n_ids = 3,
                   .n_layers = 3,
                   .tensors = &rep,
                   .has_tolerance = 1};
    char *svg = g4_report_svg(&r);
    CHECK(svg && count(svg, "<svg") == 1 && count(svg, "</svg>") == 1);
    CHECK_MSG(strstr(svg, ">text decoder<") && strstr(svg, ">vision tower<"),
              "expected one panel per component");
    CHECK_MSG(count(svg, "<clipPath") == 2, "%d clip paths (panels)", count(svg, "<clipPath"));
    CHECK(strstr(svg, "not drawn (0 or non-finite):") != NULL);
    CHECK(strstr(svg, "embeddings: 1 value") != NULL &&
          strstr(svg, "layer output: 1 value") != NULL);
    CHECK(strstr(svg, "layer") != NULL && strstr(svg, "patch_embeds") != NULL);
    CHECK(strstr(svg, "stroke-dasharray") != NULL); // the tolerance line
    // the decades from 1e-6 (vision) to 5e-2: ticks 1e-6 .. 0.1 on the vision panel
    CHECK(strstr(svg, ">1e-6<") != NULL || strstr(svg, ">1e-06<") != NULL);
    free(svg);

    char *md = g4_report_md(&r);
    CHECK(md && strstr(md, "| `logits` |") && strstr(md, "**FAIL**") &&
          strstr(md, "| `vision_layer_0` |"));
    free(md);
    char *js = g4_report_json(&r);
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    CHECK_MSG(j, "JSON does not parse");
    if (j) {
        const cJSON *ts = cJSON_GetObjectItem(j, "tensors");
        CHECK_INT(cJSON_GetArraySize(ts), rep.n);
        const cJSON *v1 = cJSON_GetArrayItem(ts, 10);
        CHECK(v1 && !strcmp(cJSON_GetObjectItem(v1, "name")->valuestring, "vision_layer_1"));
        CHECK(v1 && cJSON_IsNull(cJSON_GetObjectItem(v1, "rel"))); // NaN -> null
        CHECK(v1 && !strcmp(cJSON_GetObjectItem(v1, "component")->valuestring, "vision"));
        cJSON_Delete(j);
    }
    free(js);
    g4_cmp_report_free(&rep);
}

static void test_sens_sort(void) {
    g4_sens_row rows[4] = {0};
    const char *names[] = {"b", "a", "c", "d"};
    const double kl[] = {1e-3, 1e-3, 5e-3, 0};
    for (int i = 0; i < 4; i++) {
        snprintf(rows[i].name, sizeof rows[i].name, "%s", names[i]);
        rows[i].kl_mean = kl[i];
        rows[i].evaluated = i < 3;
        rows[i].out_rel = 1;
    }
    g4_report_sort_sens(rows, 4);
    CHECK(!strcmp(rows[0].name, "c") && !strcmp(rows[1].name, "a") && !strcmp(rows[2].name, "b") &&
          !strcmp(rows[3].name, "d"));
    CHECK(g4_report_cmp_desc(NAN, 1) < 0 && g4_report_cmp_desc(1, NAN) > 0 &&
          g4_report_cmp_desc(2, 1) < 0 && g4_report_cmp_desc(1, 1) == 0);
}

static void test_svg_escape(void) {
    const double x[] = {0, 1}, y[] = {1, 10};
    g4_svg_series s = {"a<b & \"c\"", G4_SVG_LINE, 2, x, y};
    g4_svg_panel p = {.title = "t&t",
                      .x_label = "x",
                      .y_label = "y",
                      .log_y = 1,
                      .x_min = 0,
                      .x_max = 1,
                      .n_series = 1,
                      .series = &s};
    char *svg = g4_svg_render("title <1>", NULL, &p, 1);
    CHECK(strstr(svg, "a&lt;b &amp; &quot;c&quot;") && strstr(svg, "t&amp;t") &&
          strstr(svg, "title &lt;1&gt;") && !strstr(svg, "a<b"));
    free(svg);
}

// The comparison policy: cpu-f32 / cuda-f16 by backend, hf-fp16x3 from an fp16 dump's member
// (tests/fixtures/readers/stored.npz "arr_0" = -1, -0.5, 0, 0.5, 1, written by numpy).
static void test_tolerance(void) {
    CHECK(g4_tol_for_backend(g4_backend_cpu()) == &g4_tol_cpu_f32);
    CHECK(!strcmp(g4_tol_cpu_f32.name, "cpu-f32") && g4_tol_cpu_f32.rel == 1e-4);
    CHECK(!strcmp(g4_tol_cuda_f16.name, "cuda-f16") && g4_tol_cuda_f16.rel == 2e-2);
    g4_tol t = g4_tol_hf_fp16x3(1e-5); // 3e-5 is below the floor
    CHECK_MSG(!strcmp(t.name, "hf-fp16x3") && t.rel == 1e-3, "%s %g", t.name, t.rel);
    t = g4_tol_hf_fp16x3(0.01);
    CHECK_MSG(fabs(t.rel - 0.03) < 1e-15, "3 x 0.01: %.17g", t.rel);
    char *path = g4_path_join(g4t_env("G4_FIXTURES"), "readers/stored.npz");
    g4_npz *z;
    CHECK_INT(g4_npz_open(path, &z), G4_OK);
    // ref: the fp32 reference; the dump's arr_0: HF's fp16 run. Only the last value differs:
    // e16 = ||arr_0 - ref|| / ||ref|| = (r - 1) / sqrt(1 + 0.25 + 0 + 0.25 + r^2), r = 1.1f.
    const float ref[] = {-1, -0.5f, 0, 0.5f, 1.1f};
    // The fp16 rule (a dump without hf_dtype is an fp16 dump) on member arr_0.
    const g4_tol_rule rule = {"float16", "hf-fp16x3", 3, 1e-3, {"float32", "float64"}};
    const g4_array *a0;
    CHECK_INT(g4_npz_get(z, "arr_0", &a0), G4_OK);
    CHECK_INT(g4_tol_derived(z, path, &rule, "arr_0", a0, ref, &t), G4_OK);
    const double r = 1.1f, want = 3 * (r - 1) / sqrt(1.5 + r * r);
    CHECK_MSG(!strcmp(t.name, "hf-fp16x3") && fabs(t.rel - want) < 1e-6 * want,
              "%s %.17g, expected %.17g", t.name, t.rel, want);
    // A tensor the dump does not hold is refused, never silently given the backend's tolerance.
    CHECK_INT(g4_tol_derived(z, path, &rule, "missing", a0, ref, &t), G4_EUSER);
    CHECK_MSG(strstr(g4_error(), "no tensor 'missing'"), "%s", g4_error());
    g4_npz_close(z);
    free(path);
}

// logits_argmax's rows judged by the reference's own margins (g4_ids_judge): equal, a near tie
// (our id in its top k within margin_rel x RMS of its best, the bound included) or real.
static void test_ids_judge(void) {
    // Row 0 equal; 1 our id 7 is its second at 10 - 9.75 = 0.25 <= 2 x 0.25 x 0.5 = 0.25 (the
    // bound, exact in binary); 2 the same but 9.5: gap 0.5 > 0.25; 3 our id not in its top 2;
    // 4 our id NaN; 5 equal.
    const float ref[] = {1, 3, 5, 6, 8, 9}, test[] = {1, 7, 2, 4, NAN, 9};
    const float top_ids[] = {1, 0, 3, 7, 5, 2, 6, 5, 8, 0, 9, 1};
    const float top_vals[] = {10, 1, 10, 9.75f, 10, 9.5f, 10, 9.99f, 10, 9.99f, 10, 0};
    const float rms[] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    const g4_ids_ties tie = {top_ids, top_vals, rms, 2};
    g4_ids_stats s = g4_ids_judge(test, ref, 6, &tie, 2 * 0.25);
    CHECK_INT(s.rows, 6);
    CHECK_INT(s.equal, 2);
    CHECK_INT(s.near_ties, 1);
    CHECK_INT(s.real, 3);
    CHECK_INT(s.first_real, 2);
    // Without the reference's margins every differing row is real.
    const g4_ids_ties none = {0};
    s = g4_ids_judge(test, ref, 6, &none, 2 * 0.25);
    CHECK_INT(s.equal, 2);
    CHECK_INT(s.near_ties, 0);
    CHECK_INT(s.real, 4);
    CHECK_INT(s.first_real, 1);
    // A zero margin allows no tie, however close.
    s = g4_ids_judge(test, ref, 6, &tie, 0);
    CHECK_INT(s.near_ties, 0);
    CHECK_INT(s.real, 4);
}

// g4_cmp_rows / g4_cmp_spans on a tensor whose error sits only in known rows, against values
// worked out by hand: 8 rows of 4, the reference all ones; rows 0-1 and 5 text, 2-4 image,
// 6-7 audio; the test equals it but for +0.5 at (2, 0) and -1.5 at (4, 3).
static void test_cmp_spans(void) {
    float b[32], a[32];
    for (int i = 0; i < 32; i++) a[i] = b[i] = 1;
    a[2 * 4 + 0] = 1.5f, a[4 * 4 + 3] = -0.5f;
    const unsigned char kind[8] = {G4_SPAN_TEXT,  G4_SPAN_TEXT, G4_SPAN_IMAGE, G4_SPAN_IMAGE,
                                   G4_SPAN_IMAGE, G4_SPAN_TEXT, G4_SPAN_AUDIO, G4_SPAN_AUDIO};
    g4_cmp_stats sp[G4_SPAN_KINDS];
    g4_cmp_spans(a, b, 4, kind, 8, sp);
    // image: ||d||^2 = 0.25 + 2.25 = 2.5 over ||b||^2 = 12 (3 rows of 4 ones); <a, b> = 10 +
    // 1.5 - 0.5 = 11, ||a||^2 = 10 + 2.25 + 0.25 = 12.5
    CHECK_INT(sp[G4_SPAN_IMAGE].rows, 3);
    CHECK_INT(sp[G4_SPAN_IMAGE].n, 12);
    CHECK_MSG(sp[G4_SPAN_IMAGE].rel == sqrt(2.5 / 12), "image rel %.17g, expected %.17g",
              sp[G4_SPAN_IMAGE].rel, sqrt(2.5 / 12));
    CHECK_MSG(fabs(sp[G4_SPAN_IMAGE].cosine - 11 / sqrt(12.5 * 12)) < 1e-15, "image cosine %.17g",
              sp[G4_SPAN_IMAGE].cosine);
    CHECK(sp[G4_SPAN_IMAGE].max_abs == 1.5);
    // text (two runs: rows 0-1 and 5) and audio: no error at all, exactly
    CHECK_INT(sp[G4_SPAN_TEXT].rows, 3);
    CHECK_INT(sp[G4_SPAN_TEXT].n, 12);
    CHECK_INT(sp[G4_SPAN_AUDIO].rows, 2);
    CHECK_INT(sp[G4_SPAN_AUDIO].n, 8);
    for (int k = 0; k < G4_SPAN_KINDS; k += 2)
        CHECK_MSG(sp[k].rel == 0 && sp[k].max_abs == 0 && sp[k].cosine == 1, "%s: rel %g",
                  g4_span_names[k], sp[k].rel);
    // the whole tensor: ||d||^2 = 2.5 over ||b||^2 = 32, as before the split
    const g4_cmp_stats w = g4_cmp(a, b, 32, 0);
    CHECK_MSG(w.rel == sqrt(2.5 / 32) && w.max_abs == 1.5 && w.n == 32, "whole rel %.17g", w.rel);
    // one range of every row is g4_cmp bit for bit
    const g4_row_range all = {0, 8};
    const g4_cmp_stats o = g4_cmp_rows(a, b, 4, &all, 1);
    CHECK(o.rel == w.rel && o.cosine == w.cosine && o.max_abs == w.max_abs && o.n == w.n &&
          o.rows == 8);
    // no row of a kind: nothing compared; a NaN in an audio row spoils audio alone
    const unsigned char no_audio[8] = {0, 0, 1, 1, 1, 0, 0, 0};
    g4_cmp_spans(a, b, 4, no_audio, 8, sp);
    CHECK(sp[G4_SPAN_AUDIO].rows == 0 && sp[G4_SPAN_AUDIO].n == 0);
    CHECK_INT(sp[G4_SPAN_TEXT].rows, 5);
    a[7 * 4 + 1] = NAN;
    g4_cmp_spans(a, b, 4, kind, 8, sp);
    CHECK(isinf(sp[G4_SPAN_AUDIO].rel) && sp[G4_SPAN_AUDIO].nan == 1);
    CHECK(sp[G4_SPAN_TEXT].rel == 0 && sp[G4_SPAN_IMAGE].rel == sqrt(2.5 / 12));

    a[7 * 4 + 1] = 1;

    // The reports: the split only on a row that has it, the prompt's spans only with media.
    g4_cmp_report rep = {0};
    add(&rep, "vision_soft_tokens", 1e-6);
    add(&rep, "layer_0", 1e-3);
    rep.rows[1].has_spans = 1;
    g4_cmp_spans(a, b, 4, no_audio, 8, rep.rows[1].span);
    const int32_t ids[] = {2, 9, 7, 7, 8, 3, 6, 6};
    g4_report r = {.mode = G4_REPORT_HF_DUMP,
                   .reference = "mm.npz",
                   .test = "pkg",
                   .backend = "cpu",
                   .ids = ids,
                   .n_ids = 8,
                   .span = kind,
                   .n_layers = 1,
                   .tensors = &rep,
                   .has_tolerance = 1};
    char sum[200];
    g4_span_summary(kind, 8, sum, sizeof sum);
    CHECK_MSG(!strcmp(sum, "text 3 (0-1, 5), image 3 (2-4), audio 2 (6-7)"), "%s", sum);
    char *js = g4_report_json(&r);
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    CHECK_MSG(j, "JSON does not parse");
    if (j) {
        const cJSON *ts = cJSON_GetObjectItem(j, "tensors"), *sp0 = cJSON_GetObjectItem(j, "spans");
        CHECK(!cJSON_GetObjectItem(cJSON_GetArrayItem(ts, 0), "spans"));
        const cJSON *s1 = cJSON_GetObjectItem(cJSON_GetArrayItem(ts, 1), "spans");
        const cJSON *im = cJSON_GetObjectItem(s1, "image"), *au = cJSON_GetObjectItem(s1, "audio");
        CHECK(im && cJSON_GetObjectItem(im, "rows")->valueint == 3 &&
              cJSON_GetObjectItem(im, "rel")->valuedouble == sqrt(2.5 / 12));
        CHECK(au && cJSON_GetObjectItem(au, "rows")->valueint == 0 &&
              !cJSON_GetObjectItem(au, "rel")); // nothing compared: no numbers
        const cJSON *tx = cJSON_GetObjectItem(sp0, "text");
        CHECK(tx && cJSON_GetObjectItem(tx, "positions")->valueint == 3);
        const cJSON *rg = cJSON_GetObjectItem(tx, "ranges");
        CHECK(cJSON_GetArraySize(rg) == 2 &&
              cJSON_GetArrayItem(cJSON_GetArrayItem(rg, 1), 0)->valueint == 5);
        cJSON_Delete(j);
    }
    free(js);
    char *md = g4_report_md(&r);
    CHECK(md && strstr(md, "## Per span") && strstr(md, "| `layer_0` | 5 | 0.0000e+00 |") &&
          !strstr(md, "| `vision_soft_tokens` | 5"));
    free(md);
    // without media: no trace of spans in either
    r.span = NULL;
    rep.rows[1].has_spans = 0;
    js = g4_report_json(&r);
    md = g4_report_md(&r);
    CHECK(js && !strstr(js, "spans") && md && !strstr(md, "span"));
    free(js), free(md);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    g4_cmp_report_print_spans(&rep, kind, 8, f);
    fclose(f);
    CHECK_INT(len, 0);
    free(buf);
    g4_cmp_report_free(&rep);
}

int main(void) {
    test_kl();
    test_ids_judge();
    test_cmp_spans();
    test_tolerance();
    test_classify();
    test_two_panels();
    test_sens_sort();
    test_svg_escape();
    return g4t_finish("test_report");
}
