// test_fidelity.c: `g4cu compare` fidelity reports (two packages, mixed precision, HF dump) and
// the sensitivity ranking on the tiny fixture, through the command and its --json / --md /
// --svg files. Every check is an invariant that a wrong report breaks:
//   - f16 vs itself: every tensor err 0, cosine 1, KL 0, top-1 all; the chart says nothing
//     could be drawn on its log axis rather than drawing nothing silently;
//   - onnxruntime's Q4 decoder vs f16: the embedding tensors (not quantized) exactly 0, every
//     decoder tensor > 0; KL(p_f16 || p_q4) per position and top-1 agreement equal to our own
//     computation here from the two `g4cu logits` outputs (long double, p/q ratio form);
//   - mixed precision (`g4cu quantize --keep 'model.layers.*'`: only lm_head in Q4): every
//     tensor before the logits exactly 0; its KL equals the sensitivity run's lm_head KL (the
//     in-memory binding and the written package must give the same bytes);
//   - sensitivity: exactly the linears onnxruntime's quantizer turned into MatMulNBits, ranked
//     by KL; the top entry re-run alone (--only) reproduces its KL, and a package that
//     quantizes only it (`g4cu quantize` + `g4cu logits` + our KL) gives it too; the cut of
//     --sensitivity-top runs the screen order and reproduces the full run's numbers;
//   - --prompt with a tokenizer runs the ids `g4cu tokenize` gives;
//   - JSON parses (cJSON) with every row; Markdown holds every row; SVG is well-formed XML
//     (the small checker below: nesting, quoting, entities, one <svg> root).
// Tolerances: values compared between two runs of the same deterministic CPU computation must
// be equal to 1e-12 relative (they are bit-identical in practice); our KL here is computed in
// long double by another formula, so it agrees with the command's double log-sum-exp to
// rounding: 1e-9 relative + 1e-15 absolute (KL here is ~1e-3, its double sum ~1e-16).
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "fidelity/dump_run.h"
#include "fidelity/npy.h"
#include "loader/onnx_model.h"
#include "tests/test_util.h"

static const char *g4cu, *tmp;

// Runs `g4cu ARGS` with stdout/stderr to <tmp>/<tag>.out / .err; returns the exit code.
static int run(const char *tag, const char *fmt, ...) {
    char args[3072];
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    // g4t_sh's command buffer is 4096 bytes: a longer command would be cut silently
    CHECK_MSG(k < (int)sizeof args, "%s: command of %d bytes is too long", tag, k);
    return g4t_sh("'%s' %s >'%s/%s.out' 2>'%s/%s.err'", g4cu, args, tmp, tag, tmp, tag);
}

static char *slurp(const char *tag, const char *ext) {
    char *path = g4_sprintf("%s/%s.%s", tmp, tag, ext), *text = NULL;
    size_t n;
    if (g4_read_file(path, &text, &n)) text = NULL;
    free(path);
    return text;
}

static cJSON *load_json(const char *tag) {
    char *text = slurp(tag, "json");
    CHECK_MSG(text, "%s.json not written", tag);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    CHECK_MSG(!text || j, "%s.json does not parse as JSON", tag);
    free(text);
    return j;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}
static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}
static const cJSON *arr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsArray(v) ? v : NULL;
}
static int close_rel(double a, double b, double rel, double abs_tol) {
    return isfinite(a) && isfinite(b) && fabs(a - b) <= abs_tol + rel * fabs(b);
}

// --- a small well-formedness check for XML (what an SVG viewer's parser requires) -----------
static int xml_name(const char **p, char *out, size_t n) {
    size_t k = 0;
    if (!(isalpha((unsigned char)**p) || **p == '_' || **p == ':')) return 0;
    while (isalnum((unsigned char)**p) || **p == '_' || **p == ':' || **p == '-' || **p == '.') {
        if (k + 1 < n) out[k++] = **p;
        (*p)++;
    }
    out[k] = 0;
    return 1;
}

static int xml_entity(const char **p) { // at '&'
    static const char *const ents[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
    for (size_t i = 0; i < 5; i++)
        if (!strncmp(*p, ents[i], strlen(ents[i]))) {
            *p += strlen(ents[i]);
            return 1;
        }
    if ((*p)[1] == '#') {
        const char *q = *p + 2;
        int hex = *q == 'x';
        q += hex;
        const char *d = q;
        while (hex ? isxdigit((unsigned char)*q) : isdigit((unsigned char)*q)) q++;
        if (q > d && *q == ';') {
            *p = q + 1;
            return 1;
        }
    }
    return 0;
}

// Returns NULL when well-formed with one root element named root, else why not.
static const char *xml_check(const char *s, const char *root, int *n_elems) {
    static char why[160];
    char stack[64][32];
    int depth = 0, roots = 0;
    *n_elems = 0;
    const char *p = s;
    if (!strncmp(p, "<?xml", 5)) {
        p = strstr(p, "?>");
        if (!p) return "unterminated XML declaration";
        p += 2;
    }
    while (*p) {
        if (*p == '<') {
            if (!strncmp(p, "<!--", 4)) {
                const char *e = strstr(p + 4, "-->");
                if (!e) return "unterminated comment";
                p = e + 3;
                continue;
            }
            char name[32];
            if (p[1] == '/') {
                p += 2;
                if (!xml_name(&p, name, sizeof name)) return "bad end tag name";
                while (isspace((unsigned char)*p)) p++;
                if (*p != '>') return "end tag not closed by '>'";
                p++;
                if (depth == 0 || strcmp(stack[depth - 1], name)) {
                    snprintf(why, sizeof why, "</%s> does not close <%s>", name,
                             depth ? stack[depth - 1] : "(nothing)");
                    return why;
                }
                depth--;
                continue;
            }
            p++;
            if (!xml_name(&p, name, sizeof name)) return "bad element name";
            if (depth == 0) {
                roots++;
                if (strcmp(name, root)) return "root element is not the expected one";
            }
            (*n_elems)++;
            char seen[32][32];
            int n_seen = 0;
            for (;;) {
                const int sp = isspace((unsigned char)*p);
                while (isspace((unsigned char)*p)) p++;
                if (*p == '>' || (p[0] == '/' && p[1] == '>')) break;
                char an[32];
                if (!sp) return "attributes not separated by white space";
                if (!xml_name(&p, an, sizeof an)) return "bad attribute name";
                for (int i = 0; i < n_seen; i++)
                    if (!strcmp(seen[i], an)) return "duplicate attribute";
                if (n_seen < 32) snprintf(seen[n_seen++], 32, "%s", an);
                while (isspace((unsigned char)*p)) p++;
                if (*p++ != '=') return "attribute without '='";
                while (isspace((unsigned char)*p)) p++;
                const char q = *p++;
                if (q != '"' && q != '\'') return "unquoted attribute value";
                while (*p && *p != q) {
                    if (*p == '<') return "'<' inside an attribute value";
                    if (*p == '&') {
                        if (!xml_entity(&p)) return "bad entity in an attribute";
                    } else {
                        p++;
                    }
                }
                if (*p++ != q) return "unterminated attribute value";
            }
            if (*p == '/') {
                p += 2;
            } else {
                p++;
                if (depth == 64) return "nesting too deep";
                snprintf(stack[depth++], 32, "%s", name);
            }
        } else if (*p == '&') {
            if (!xml_entity(&p)) return "bad entity in text";
        } else {
            if (depth == 0 && !isspace((unsigned char)*p)) return "text outside the root element";
            if ((unsigned char)*p < 0x20 && !isspace((unsigned char)*p)) return "control character";
            p++;
        }
    }
    if (depth) return "unclosed element at end of document";
    if (roots != 1) return "not exactly one root element";
    return NULL;
}

static void check_svg(const char *tag, const char *const *must_contain) {
    char *svg = slurp(tag, "svg");
    CHECK_MSG(svg, "%s.svg not written", tag);
    if (!svg) return;
    int n_elems;
    const char *why = xml_check(svg, "svg", &n_elems);
    CHECK_MSG(!why, "%s.svg is not well-formed XML: %s", tag, why);
    CHECK_MSG(strstr(svg, "xmlns=\"http://www.w3.org/2000/svg\"") && strstr(svg, "viewBox="),
              "%s.svg lacks the SVG namespace or viewBox", tag);
    for (int i = 0; must_contain && must_contain[i]; i++)
        CHECK_MSG(strstr(svg, must_contain[i]), "%s.svg lacks '%s'", tag, must_contain[i]);
    CHECK_MSG(n_elems > 30, "%s.svg has only %d elements", tag, n_elems);
    free(svg);
}

// A deliberately broken document must be rejected (the checker itself can fail).
static void check_xml_checker(void) {
    int n;
    CHECK(xml_check("<svg a=\"1\"><g><text>x &amp; y</text></g></svg>", "svg", &n) == NULL);
    CHECK(xml_check("<svg><g></svg></g>", "svg", &n) != NULL);
    CHECK(xml_check("<svg a=1></svg>", "svg", &n) != NULL);
    CHECK(xml_check("<svg><text>a & b</text></svg>", "svg", &n) != NULL);
    CHECK(xml_check("<svg a=\"1\" a=\"2\"/>", "svg", &n) != NULL);
    CHECK(xml_check("<svg/><svg/>", "svg", &n) != NULL);
}

// --- independent KL from two logits files ------------------------------------------------------
typedef struct {
    int rows;
    long double kl[512];
    int agree;
} kl_ref;

static int kl_from_files(const char *a_path, const char *b_path, kl_ref *out) {
    g4_array a = {0}, b = {0};
    int ok = g4_npy_read(a_path, &a) == G4_OK && g4_npy_read(b_path, &b) == G4_OK &&
             a.dtype == G4_DT_FLOAT && b.dtype == G4_DT_FLOAT && a.ndim == 2 &&
             b.numel == a.numel && a.shape[0] <= 512;
    CHECK_MSG(ok, "cannot read float32 [S, V] logits %s / %s", a_path, b_path);
    if (ok) {
        const int S = (int)a.shape[0], V = (int)a.shape[1];
        const float *x = a.data, *y = b.data;
        out->rows = S;
        out->agree = 0;
        long double *p = malloc(sizeof(long double) * V), *q = malloc(sizeof(long double) * V);
        for (int s = 0; s < S; s++) {
            const float *xr = x + (size_t)s * V, *yr = y + (size_t)s * V;
            long double sp = 0, sq = 0;
            int ax = 0, ay = 0;
            for (int v = 0; v < V; v++) {
                p[v] = expl(
                    (long double)xr[v]); // tiny-model logits are soft-capped at 30: no overflow
                q[v] = expl((long double)yr[v]);
                sp += p[v], sq += q[v];
                if (xr[v] > xr[ax]) ax = v;
                if (yr[v] > yr[ay]) ay = v;
            }
            long double kl = 0;
            for (int v = 0; v < V; v++) {
                const long double pv = p[v] / sp, qv = q[v] / sq;
                if (pv > 0) kl += pv * logl(pv / qv);
            }
            out->kl[s] = kl;
            out->agree += ax == ay;
        }
        free(p), free(q);
    }
    g4_array_free(&a), g4_array_free(&b);
    return ok;
}

static long double kl_mean(const kl_ref *k) {
    long double s = 0;
    for (int i = 0; i < k->rows; i++) s += k->kl[i];
    return k->rows ? s / k->rows : 0;
}

// --- the expected tensor names and linears (from sources g4cu did not write) ------------------
typedef struct {
    char **v;
    int n;
} names;

static void names_add(names *s, const char *x) {
    s->v = realloc(s->v, sizeof(char *) * (size_t)(s->n + 1));
    s->v[s->n++] = g4_strdup(x);
}
static int names_has(const names *s, const char *x) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], x)) return 1;
    return 0;
}
static void names_free(names *s) {
    for (int i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
}

// The HF reference dump's members (minus input_ids): the tensors a run must report.
static void dump_names(const char *npz_path, names *out) {
    g4_npz *z;
    int rc = g4_npz_open(npz_path, &z);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc) return;
    for (int i = 0; i < g4_npz_count(z); i++)
        if (!g4_dump_member_is_meta(g4_npz_name(z, i))) names_add(out, g4_npz_name(z, i));
    g4_npz_close(z);
}

// The weights onnxruntime's quantizer replaced by MatMulNBits in the Q4 fixture (input 1,
// "<prefix><weight>_Q4"), without the component prefix.
static void ort_linears(const char *model_path, names *out) {
    g4_onnx_model *m;
    int rc = g4_onnx_open(model_path, &m);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc) return;
    for (int i = 0; i < m->n_nodes; i++) {
        const g4_node *nd = &m->nodes[i];
        if (strcmp(nd->op_type, "MatMulNBits") || nd->n_inputs < 2) continue;
        char w[256];
        snprintf(w, sizeof w, "%s", nd->inputs[1]);
        const size_t k = strlen(w);
        if (k > 3 && !strcmp(w + k - 3, "_Q4")) w[k - 3] = 0;
        names_add(out, strncmp(w, "decoder.", 8) ? w : w + 8);
    }
    g4_onnx_close(m);
}

// --- the checks ------------------------------------------------------------------------------
static const cJSON *tensor_by_name(const cJSON *j, const char *name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, arr(j, "tensors")) if (!strcmp(str(t, "name"), name)) return t;
    return NULL;
}

// Every expected tensor exactly once, nothing else; every row in the Markdown too.
static void check_rows(const char *tag, const cJSON *j, const names *want) {
    const cJSON *ts = arr(j, "tensors");
    CHECK_MSG(ts && cJSON_GetArraySize(ts) == want->n, "%s: %d tensors in the JSON, expected %d",
              tag, ts ? cJSON_GetArraySize(ts) : -1, want->n);
    const cJSON *t;
    cJSON_ArrayForEach(t, ts) CHECK_MSG(names_has(want, str(t, "name")),
                                        "%s: unexpected tensor '%s'", tag, str(t, "name"));
    char *md = slurp(tag, "md");
    CHECK_MSG(md, "%s.md not written", tag);
    for (int i = 0; md && i < want->n; i++) {
        char cell[96];
        snprintf(cell, sizeof cell, "| `%s` |", want->v[i]);
        CHECK_MSG(tensor_by_name(j, want->v[i]), "%s: tensor %s missing from the JSON", tag,
                  want->v[i]);
        CHECK_MSG(strstr(md, cell), "%s.md: no row for %s", tag, want->v[i]);
    }
    free(md);
}

static void test_self(const char *f16, const char *ids, const names *want) {
    int rc = run("self",
                 "compare '%s' '%s' --ids %s --json '%s/self.json' --md '%s/self.md' "
                 "--svg '%s/self.svg'",
                 f16, f16, ids, tmp, tmp, tmp);
    CHECK_MSG(rc == 0, "compare f16 f16 exited %d", rc);
    cJSON *j = load_json("self");
    if (!j) return;
    CHECK(!strcmp(str(j, "mode"), "packages"));
    check_rows("self", j, want);
    const cJSON *t;
    cJSON_ArrayForEach(t, arr(j, "tensors")) {
        CHECK_MSG(num(t, "rel") == 0 && num(t, "max_abs") == 0 &&
                      fabs(num(t, "cosine") - 1) < 1e-12,
                  "self: %s rel %g max_abs %g cosine %.17g", str(t, "name"), num(t, "rel"),
                  num(t, "max_abs"), num(t, "cosine"));
    }
    const cJSON *lg = cJSON_GetObjectItemCaseSensitive(j, "logits");
    CHECK_MSG(num(lg, "kl_mean") == 0 && num(lg, "kl_max") == 0, "self: KL mean %g max %g",
              num(lg, "kl_mean"), num(lg, "kl_max"));
    CHECK_MSG(num(lg, "top1_agree") == num(lg, "positions") && num(lg, "top1_agreement") == 1,
              "self: top-1 %g of %g", num(lg, "top1_agree"), num(lg, "positions"));
    printf("  f16 vs itself: %d tensors all 0 err, KL mean %g, top-1 %g\n",
           cJSON_GetArraySize(arr(j, "tensors")), num(lg, "kl_mean"), num(lg, "top1_agreement"));
    const char *svg_has[] = {"no value above 0 to draw on a log scale", NULL};
    check_svg("self", svg_has);
    cJSON_Delete(j);
}

static void test_q4(const char *f16, const char *q4, const char *ids, const names *want) {
    int rc = run("q4",
                 "compare '%s' '%s' --ids %s --json '%s/q4.json' --md '%s/q4.md' "
                 "--svg '%s/q4.svg'",
                 f16, q4, ids, tmp, tmp, tmp);
    CHECK_MSG(rc == 0, "compare f16 q4 exited %d", rc);
    cJSON *j = load_json("q4");
    if (!j) return;
    check_rows("q4", j, want);
    const cJSON *t;
    cJSON_ArrayForEach(t, arr(j, "tensors")) {
        const char *n = str(t, "name");
        const double rel = num(t, "rel"), cs = num(t, "cosine");
        if (!strcmp(n, "embeds") || !strcmp(n, "per_layer_inputs")) // embedding: not quantized
            CHECK_MSG(rel == 0 && num(t, "max_abs") == 0, "q4: %s rel %g (expected 0)", n, rel);
        else
            CHECK_MSG(rel > 0 && isfinite(rel) && cs > 0 && cs < 1 && num(t, "max_abs") > 0,
                      "q4: %s rel %g cosine %g (expected > 0, < 1)", n, rel, cs);
    }
    // Our own KL from `g4cu logits` of both packages.
    rc = run("l16", "logits '%s' --ids %s --out '%s/l16.npy'", f16, ids, tmp);
    CHECK_MSG(rc == 0, "logits f16 exited %d", rc);
    rc = run("lq4", "logits '%s' --ids %s --out '%s/lq4.npy'", q4, ids, tmp);
    CHECK_MSG(rc == 0, "logits q4 exited %d", rc);
    char *a = g4_sprintf("%s/l16.npy", tmp), *b = g4_sprintf("%s/lq4.npy", tmp);
    kl_ref k;
    const cJSON *lg = cJSON_GetObjectItemCaseSensitive(j, "logits");
    const cJSON *kl = arr(lg, "kl");
    if (kl_from_files(a, b, &k)) {
        CHECK_MSG(kl && cJSON_GetArraySize(kl) == k.rows, "q4: %d KL positions, expected %d",
                  kl ? cJSON_GetArraySize(kl) : -1, k.rows);
        for (int i = 0; kl && i < k.rows && i < cJSON_GetArraySize(kl); i++) {
            const double v = cJSON_GetArrayItem(kl, i)->valuedouble;
            CHECK_MSG(close_rel(v, (double)k.kl[i], 1e-9, 1e-15),
                      "q4: KL at %d: %.17g vs ours %.17g", i, v, (double)k.kl[i]);
        }
        const double mean = (double)kl_mean(&k);
        CHECK_MSG(num(lg, "kl_mean") > 0 && close_rel(num(lg, "kl_mean"), mean, 1e-9, 1e-15),
                  "q4: KL mean %.17g vs ours %.17g", num(lg, "kl_mean"), mean);
        CHECK_MSG(num(lg, "top1_agree") == k.agree, "q4: top-1 %g vs ours %d",
                  num(lg, "top1_agree"), k.agree);
        printf("  Q4 (onnxruntime) vs f16: KL mean %.6e (ours %.6e), max %.6e, top-1 %d/%d\n",
               num(lg, "kl_mean"), mean, num(lg, "kl_max"), k.agree, k.rows);
    }
    free(a), free(b);
    const char *svg_has[] = {"q (normed, RoPE)", "k (normed, RoPE)", "v (normed)",
                             "layer output",     "final norm",       "logits",
                             "<polyline",        "decoder layer",    NULL};
    check_svg("q4", svg_has);
    cJSON_Delete(j);
}

// Only lm_head quantized: everything before the logits must be bit-identical to f16.
static double test_mixed(const char *f16, const char *ids, const names *want) {
    double kl = NAN;
    char *out = g4_sprintf("%s/mixed", tmp);
    int rc = run("quant_mixed", "quantize '%s' '%s' --keep 'model.layers.*'", f16, out);
    CHECK_MSG(rc == 0, "quantize --keep exited %d", rc);
    rc = run("mixed", "compare '%s' '%s' --ids %s --json '%s/mixed.json' --md '%s/mixed.md'", f16,
             out, ids, tmp, tmp);
    CHECK_MSG(rc == 0, "compare f16 mixed exited %d", rc);
    cJSON *j = load_json("mixed");
    if (j) {
        check_rows("mixed", j, want);
        const cJSON *t;
        cJSON_ArrayForEach(t, arr(j, "tensors")) {
            const char *n = str(t, "name");
            if (strcmp(n, "logits"))
                CHECK_MSG(num(t, "rel") == 0, "mixed: %s rel %g (only lm_head is Q4)", n,
                          num(t, "rel"));
            else
                CHECK_MSG(num(t, "rel") > 0, "mixed: logits rel %g", num(t, "rel"));
        }
        kl = num(cJSON_GetObjectItemCaseSensitive(j, "logits"), "kl_mean");
        CHECK_MSG(kl > 0, "mixed: KL %g", kl);
        printf("  mixed precision (only lm_head Q4): KL mean %.6e, all tensors before the logits "
               "exact\n",
               kl);
        cJSON_Delete(j);
    }
    free(out);
    return kl;
}

static const cJSON *sens_by_name(const cJSON *j, const char *name) {
    const cJSON *s;
    cJSON_ArrayForEach(s, arr(j, "sensitivity")) if (!strcmp(str(s, "name"), name)) return s;
    return NULL;
}

static void test_sensitivity(const char *f16, const char *ids, const names *linears,
                             double mixed_kl) {
    int rc = run("sens",
                 "compare '%s' --sensitivity --ids %s --json '%s/sens.json' "
                 "--md '%s/sens.md' --svg '%s/sens.svg'",
                 f16, ids, tmp, tmp, tmp);
    CHECK_MSG(rc == 0, "compare --sensitivity exited %d", rc);
    cJSON *j = load_json("sens");
    if (!j) return;
    CHECK(!strcmp(str(j, "mode"), "sensitivity"));
    const cJSON *rows = arr(j, "sensitivity");
    const int n = rows ? cJSON_GetArraySize(rows) : 0;
    CHECK_MSG(n == linears->n,
              "sensitivity: %d rows, expected the %d linears onnxruntime "
              "quantized",
              n, linears->n);
    char *md = slurp("sens", "md");
    double prev = INFINITY;
    int rank = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, rows) {
        const char *name = str(s, "name");
        const double kl = num(s, "kl_mean");
        rank++;
        CHECK_MSG(names_has(linears, name), "sensitivity: '%s' is not a quantized linear", name);
        CHECK_MSG(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "evaluated")) &&
                      num(s, "rank") == rank,
                  "sensitivity: %s not run or rank %g != %d", name, num(s, "rank"), rank);
        CHECK_MSG(kl > 0 && isfinite(kl) && kl <= prev, "sensitivity: %s KL %g after %g", name, kl,
                  prev);
        CHECK_MSG(num(s, "kl_max") >= kl && num(s, "out_rel") > 0 && num(s, "w_rel") > 0 &&
                      num(s, "layer_kl") > 0,
                  "sensitivity: %s kl_max %g out_rel %g w_rel %g layer_kl %g", name,
                  num(s, "kl_max"), num(s, "out_rel"), num(s, "w_rel"), num(s, "layer_kl"));
        prev = kl;
        char cell[160];
        snprintf(cell, sizeof cell, "| %d | `%s` |", rank, name);
        CHECK_MSG(md && strstr(md, cell), "sens.md: no row '%s'", cell);
    }
    free(md);
    for (int i = 0; i < linears->n; i++)
        CHECK_MSG(sens_by_name(j, linears->v[i]), "sensitivity: %s not ranked", linears->v[i]);

    // lm_head: its layer group is itself; and the written mixed package gives the same KL.
    const cJSON *lm = sens_by_name(j, "lm_head.weight_t");
    CHECK_MSG(lm && num(lm, "layer_kl") == num(lm, "kl_mean"), "lm_head: layer_kl %g != kl %g",
              num(lm, "layer_kl"), num(lm, "kl_mean"));
    CHECK_MSG(lm && close_rel(num(lm, "kl_mean"), mixed_kl, 1e-12, 0),
              "lm_head KL %.17g in memory vs %.17g from the written package", num(lm, "kl_mean"),
              mixed_kl);

    // The top entry alone: --only, and a package quantizing only it.
    const cJSON *top = cJSON_GetArrayItem(rows, 0);
    const char *top_name = top ? str(top, "name") : "";
    const double top_kl = top ? num(top, "kl_mean") : NAN;
    printf("  sensitivity: %d linears; top %s KL %.6e; last %.6e\n", n, top_name, top_kl, prev);
    rc = run("one", "compare '%s' --sensitivity --ids %s --only '%s' --json '%s/one.json'", f16,
             ids, top_name, tmp);
    CHECK_MSG(rc == 0, "--only exited %d", rc);
    cJSON *one = load_json("one");
    const cJSON *o1 = one ? cJSON_GetArrayItem(arr(one, "sensitivity"), 0) : NULL;
    CHECK_MSG(
        one && cJSON_GetArraySize(arr(one, "sensitivity")) == 1 && o1 &&
            !strcmp(str(o1, "name"), top_name) && close_rel(num(o1, "kl_mean"), top_kl, 1e-12, 0),
        "--only %s: KL %.17g, expected %.17g", top_name, o1 ? num(o1, "kl_mean") : NAN, top_kl);
    cJSON_Delete(one);

    // --keep every other linear: whole layers by glob, the top entry's own layer one by one.
    int top_layer = -1;
    sscanf(top_name, "model.layers.%d.", &top_layer);
    char *keep = g4_calloc(1, 128 * (size_t)linears->n + 1);
    for (int i = 0; i < linears->n; i++) {
        int l = -1;
        sscanf(linears->v[i], "model.layers.%d.", &l);
        char pat[160];
        if (l >= 0 && l != top_layer)
            snprintf(pat, sizeof pat, " --keep 'model.layers.%d.*'", l);
        else
            snprintf(pat, sizeof pat, " --keep '%s'", linears->v[i]);
        if (strcmp(linears->v[i], top_name) && !strstr(keep, pat)) strcat(keep, pat);
    }
    char *pkg = g4_sprintf("%s/only_top", tmp);
    rc = run("quant_top", "quantize '%s' '%s' %s", f16, pkg, keep);
    CHECK_MSG(rc == 0, "quantize (all but the top kept) exited %d", rc);
    char *out = slurp("quant_top", "out");
    CHECK_MSG(out && strstr(out, " 1 linears quantized"),
              "quantize did not quantize exactly one "
              "linear: %s",
              out ? out : "");
    free(out);
    rc = run("ltop", "logits '%s' --ids %s --out '%s/ltop.npy'", pkg, ids, tmp);
    CHECK_MSG(rc == 0, "logits (top only) exited %d", rc);
    char *a = g4_sprintf("%s/l16.npy", tmp), *b = g4_sprintf("%s/ltop.npy", tmp);
    kl_ref k;
    if (kl_from_files(a, b, &k))
        CHECK_MSG(close_rel(top_kl, (double)kl_mean(&k), 1e-9, 1e-15),
                  "top entry KL %.17g vs %.17g from a package quantizing only it", top_kl,
                  (double)kl_mean(&k));
    free(a), free(b), free(pkg), free(keep);

    // The cut: the first 5 in the screen order (layer_kl, then out_rel, descending), same numbers.
    rc = run("top5",
             "compare '%s' --sensitivity --ids %s --sensitivity-top 5 --json "
             "'%s/top5.json' --md '%s/top5.md' --svg '%s/top5.svg'",
             f16, ids, tmp, tmp, tmp);
    CHECK_MSG(rc == 0, "--sensitivity-top 5 exited %d", rc);
    cJSON *t5 = load_json("top5");
    if (t5) {
        int n_eval = 0;
        cJSON_ArrayForEach(s, arr(t5, "sensitivity")) {
            const cJSON *full = sens_by_name(j, str(s, "name"));
            CHECK_MSG(full && num(s, "out_rel") == num(full, "out_rel") &&
                          num(s, "layer_kl") == num(full, "layer_kl"),
                      "top5: %s screen values differ from the full run", str(s, "name"));
            if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "evaluated"))) continue;
            n_eval++;
            CHECK_MSG(full && num(s, "kl_mean") == num(full, "kl_mean"),
                      "top5: %s KL %.17g vs %.17g in the full run", str(s, "name"),
                      num(s, "kl_mean"), full ? num(full, "kl_mean") : NAN);
            // nothing outside the cut may come before it in the screen order
            const cJSON *x;
            cJSON_ArrayForEach(x, arr(t5, "sensitivity")) {
                if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "evaluated"))) continue;
                const int before = num(x, "layer_kl") > num(s, "layer_kl") ||
                                   (num(x, "layer_kl") == num(s, "layer_kl") &&
                                    num(x, "out_rel") > num(s, "out_rel"));
                CHECK_MSG(!before, "top5: %s (not run) screens before %s (run)", str(x, "name"),
                          str(s, "name"));
            }
        }
        CHECK_MSG(n_eval == 5 && cJSON_GetArraySize(arr(t5, "sensitivity")) == linears->n,
                  "top5: %d run of %d rows", n_eval, cJSON_GetArraySize(arr(t5, "sensitivity")));
        cJSON_Delete(t5);
    }
    const char *svg_has[] = {"q_proj",    "down_proj", "lm_head", "all of the layer together",
                             "<polyline", NULL};
    check_svg("sens", svg_has);
    check_svg("top5", NULL);
    cJSON_Delete(j);
}

static void test_dump(const char *f16, const char *npz, const names *want) {
    int rc = run("hf", "compare '%s' '%s' --json '%s/hf.json' --md '%s/hf.md' --svg '%s/hf.svg'",
                 f16, npz, tmp, tmp, tmp);
    CHECK_MSG(rc == 0, "compare with the HF dump exited %d", rc);
    cJSON *j = load_json("hf");
    if (!j) return;
    CHECK(!strcmp(str(j, "mode"), "hf-dump"));
    check_rows("hf", j, want);
    const cJSON *t;
    cJSON_ArrayForEach(t, arr(j, "tensors"))
        CHECK_MSG(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "pass")) &&
                      num(t, "rel") <= num(t, "max_rel"),
                  "hf: %s rel %g over %g", str(t, "name"), num(t, "rel"), num(t, "max_rel"));
    CHECK(arr(j, "missing") && cJSON_GetArraySize(arr(j, "missing")) == 0);
    const cJSON *lg = cJSON_GetObjectItemCaseSensitive(j, "logits");
    CHECK_MSG(num(lg, "top1_agreement") == 1 && num(lg, "kl_mean") >= 0 &&
                  num(lg, "kl_mean") < 1e-9,
              "hf: logits KL %g top-1 %g", num(lg, "kl_mean"), num(lg, "top1_agreement"));
    const char *svg_has[] = {"tolerance", "HF", NULL};
    check_svg("hf", svg_has);
    cJSON_Delete(j);
}

// --prompt through a tokenizer gives the ids `g4cu tokenize --bos` gives, and the same report
// as --ids with them. (The tokenizer fixture's ids for this text are below the tiny model's
// vocabulary of 1024.)
static void test_prompt(const char *f16, const char *q4, const char *fixtures) {
    char *tok = g4_sprintf("%s/tokenizer/gemma_bpe.json", fixtures);
    int rc = run("tok", "tokenize '%s' --bos 'a b c'", tok);
    char *ids = slurp("tok", "out");
    CHECK_MSG(rc == 0 && ids, "tokenize exited %d", rc);
    if (ids) ids[strcspn(ids, "\r\n")] = 0;
    rc =
        run("prompt", "compare '%s' '%s' --prompt 'a b c' --tokenizer '%s' --json '%s/prompt.json'",
            f16, q4, tok, tmp);
    CHECK_MSG(rc == 0, "compare --prompt exited %d", rc);
    rc = run("prompt_ids", "compare '%s' '%s' --ids %s --json '%s/prompt_ids.json'", f16, q4,
             ids ? ids : "", tmp);
    CHECK_MSG(rc == 0, "compare --ids (tokenized) exited %d", rc);
    cJSON *a = load_json("prompt"), *b = load_json("prompt_ids");
    if (a && b && ids) {
        char got[256] = "";
        const cJSON *v;
        cJSON_ArrayForEach(v, arr(a, "ids")) {
            const size_t k = strlen(got);
            snprintf(got + k, sizeof got - k, "%s%d", k ? "," : "", v->valueint);
        }
        CHECK_MSG(!strcmp(got, ids), "--prompt ids %s, tokenize gives %s", got, ids);
        const double ka = num(cJSON_GetObjectItemCaseSensitive(a, "logits"), "kl_mean");
        const double kb = num(cJSON_GetObjectItemCaseSensitive(b, "logits"), "kl_mean");
        CHECK_MSG(ka > 0 && ka == kb, "--prompt KL %.17g vs --ids %.17g", ka, kb);
    }
    cJSON_Delete(a), cJSON_Delete(b);
    free(ids), free(tok);
}

// Bad inputs: exit 1 with one line on stderr.
static void test_errors(const char *f16, const char *q4, const char *tiny2, const char *ids) {
    struct {
        const char *tag, *args, *needle;
    } cases[] = {
        {"e_models", "compare '%s' '%s' --ids 2,5", "different models"},
        {"e_noids", "compare '%s' '%s'", "--ids"},
        {"e_ids", "compare '%s' '%s' --ids 2,x", "--ids"},
        {"e_range", "compare '%s' '%s' --ids 5000", "outside the vocabulary"},
        {"e_layers", "compare '%s' --sensitivity --ids 2 --layers 5-2 %s", "--layers"},
        {"e_sensq4", "compare '%s' --sensitivity --ids 2 %s", "no fp16 decoder linear"},
        {"e_only", "compare '%s' --sensitivity --ids 2 --only 'nothing*' %s", "no fp16 decoder"},
        {"e_opt", "compare '%s' '%s' --ids 2 --sensitivity-top 3", "need --sensitivity"},
    };
    const char *a[][2] = {{f16, tiny2}, {f16, q4}, {f16, q4}, {f16, q4},
                          {f16, ""},    {q4, ""},  {f16, ""}, {f16, q4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run(cases[i].tag, cases[i].args, a[i][0], a[i][1]);
        char *err = slurp(cases[i].tag, "err");
        int lines = 0;
        for (const char *p = err; p && *p; p++) lines += *p == '\n';
        CHECK_MSG(rc == 1 && err && strstr(err, cases[i].needle) && lines == 1,
                  "%s: exit %d, stderr '%s' (expected exit 1 and one line with '%s')", cases[i].tag,
                  rc, err ? err : "", cases[i].needle);
        free(err);
    }
    // --max-kl gates the two-package mode
    int rc = run("gate0", "compare '%s' '%s' --ids %s --max-kl 0", f16, q4, ids);
    CHECK_MSG(rc == 1, "--max-kl 0 on Q4: exit %d, expected 1", rc);
    rc = run("gate1", "compare '%s' '%s' --ids %s --max-kl 1", f16, q4, ids);
    CHECK_MSG(rc == 0, "--max-kl 1 on Q4: exit %d, expected 0", rc);
}

int main(void) {
    g4cu = g4t_env("G4CU");
    const char *f16 = g4t_env("G4_TINY_PKG"), *fixtures = g4t_env("G4_FIXTURES");
    char ids[512] = {0};
    char *ids_path = g4_sprintf("%s/q4/ids.txt", fixtures);
    g4t_read_line(ids_path, ids, sizeof ids);
    free(ids_path);
    char *tmpdir = g4t_tmpdir();
    tmp = tmpdir;

    check_xml_checker();
    // The Q4 package: the f16 package with onnxruntime's Q4 decoder (as test_q4_logits does).
    char *q4 = g4_sprintf("%s/q4pkg", tmp);
    int rc = g4t_q4_package(q4, f16, fixtures);
    CHECK(rc == 0);
    names want = {0}, linears = {0};
    char *npz = g4_sprintf("%s/refdumps/mobius-tiny-f16/len7.npz", fixtures);
    char *q4_model = g4_sprintf("%s/q4/decoder/model.onnx", fixtures);
    char *tiny2 = g4_sprintf("%s/tiny2/package", fixtures);
    dump_names(npz, &want);
    ort_linears(q4_model, &linears);
    CHECK_MSG(want.n >= 20 && linears.n >= 20, "expected tensors %d, linears %d", want.n,
              linears.n);

    test_self(f16, ids, &want);
    test_q4(f16, q4, ids, &want);
    const double mixed_kl = test_mixed(f16, ids, &want);
    test_sensitivity(f16, ids, &linears, mixed_kl);
    test_dump(f16, npz, &want);
    test_prompt(f16, q4, fixtures);
    test_errors(f16, q4, tiny2, ids);

    names_free(&want), names_free(&linears);
    free(q4), free(npz), free(q4_model), free(tiny2);
    g4t_rmtree(tmpdir);
    return g4t_finish("test_fidelity");
}
