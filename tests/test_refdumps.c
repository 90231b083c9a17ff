// test_refdumps.c: the committed HF reference dumps (tests/fixtures/refdumps/<model>/len<S>.npz,
// HF in float32, and <model>/float64/len<S>.npz, HF in float64 with float64 members; made by
// tools/python/make_reference.py) hold exactly the members the C side relies on, the hf_dtype
// they say they were run in (which g4cu compare --tol-from derives tolerances from), with
// shapes that agree with the config our loader derives from the matching package; and three
// values that tie the dump to the package bit for bit or nearly:
//   embeds     == fp16 embed_tokens row (embedding graph) x the graph's fp16 embed scale: HF
//                 made one float32 multiply of the same two numbers, so equality is exact;
//   v_<i>      is a weightless RMSNorm output: mean(v^2) over head_dim is m / (m + eps) for the
//                 pre-norm mean square m, within 1e-3 of 1 for m >= 1e-3 (random-init
//                 projections give m ~ 1e-2); an un-normalised v would be ~1e-2 itself;
//   logits     == 30 tanh((final_norm @ decoder.lm_head.weight_t) / 30), recomputed here in
//                 double: |diff| <= 1e-5 + 1e-5 |x| (a float32 dot product of hidden <= 1536
//                 terms of size ~1 is good to ~1e-6; the tie would break by ~1e-3 if the
//                 lm_head or the soft-cap differed).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fidelity/npy.h"
#include "loader/package.h"
#include "tests/test_util.h"

static const char *fixtures;

static const g4_array *member(g4_npz *z, const char *name, int dtype, int ndim,
                              const int64_t *dims) {
    const g4_array *a;
    if (g4_npz_get(z, name, &a) != G4_OK) {
        CHECK_MSG(0, "%s", g4_error());
        return NULL;
    }
    int ok = a->dtype == dtype && a->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = a->shape[i] == dims[i];
    char shp[128];
    CHECK_MSG(ok, "%s: %s %s, expected %s with %d dims", name, g4_dtype_name(a->dtype),
              g4_array_shape_str(a, shp, sizeof shp), g4_dtype_name(dtype), ndim);
    if (!ok) return NULL;
    if (dtype == G4_DT_FLOAT || dtype == G4_DT_DOUBLE) {
        float *f = g4_malloc(sizeof(float) * (size_t)a->numel + 1);
        g4_array_to_f32(a, f);
        uint64_t bad = 0;
        for (uint64_t i = 0; i < a->numel; i++) bad += !isfinite(f[i]);
        free(f);
        CHECK_MSG(bad == 0, "%s: %llu NaN/inf values", name, (unsigned long long)bad);
    }
    return a;
}

// Member values as float32 (a new array; NULL for NULL).
static float *values(const g4_array *a) {
    if (!a) return NULL;
    float *f = g4_malloc(sizeof(float) * (size_t)a->numel + 1);
    g4_array_to_f32(a, f);
    return f;
}

// set: "" (HF float32) or "float64/" (HF float64: members in float64).
static void check_case(const g4_package *p, const char *model, const char *set, const char *cas) {
    const int FT = set[0] ? G4_DT_DOUBLE : G4_DT_FLOAT;
    const char *want_dtype = set[0] ? "float64" : "float32";
    char *path = g4_sprintf("%s/refdumps/%s/%s%s.npz", fixtures, model, set, cas);
    g4_npz *z;
    int rc = g4_npz_open(path, &z);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    free(path);
    if (rc) return;
    const g4_text_config *tc = &p->text;
    int64_t H = tc->hidden, L = tc->n_layers, V = tc->vocab;
    const g4_array *ids;
    if (g4_npz_get(z, "input_ids", &ids) != G4_OK || ids->dtype != G4_DT_INT64 || ids->ndim != 1) {
        CHECK_MSG(0, "%s/%s: input_ids missing or not int64 [S]", model, cas);
        g4_npz_close(z);
        return;
    }
    int64_t S = ids->shape[0];
    const int64_t *id = ids->data;
    for (int64_t s = 0; s < S; s++) CHECK_MSG(id[s] >= 0 && id[s] < V, "id %lld", (long long)id[s]);

    int expected_members = 2; // input_ids, hf_dtype
    const g4_array *hd;
    if (g4_npz_get(z, "hf_dtype", &hd) == G4_OK && hd->dtype == G4_DT_UINT8 && hd->ndim == 1)
        CHECK_MSG(hd->numel == strlen(want_dtype) && !memcmp(hd->data, want_dtype, hd->numel),
                  "%s/%s%s: hf_dtype is not '%s'", model, set, cas, want_dtype);
    else
        CHECK_MSG(0, "%s/%s%s: no uint8 hf_dtype member", model, set, cas);
    const g4_array *emb = member(z, "embeds", FT, 2, G4_DIMS(S, H));
    member(z, "per_layer_inputs", FT, 3, G4_DIMS(S, L, tc->ple_dim));
    const g4_array *fin = member(z, "final_norm", FT, 2, G4_DIMS(S, H));
    const g4_array *lg = member(z, "logits", FT, 2, G4_DIMS(S, V));
    expected_members += 4;
    char name[64];
    for (int i = 0; i < L; i++) {
        const g4_layer_config *lc = &tc->layer[i];
        snprintf(name, sizeof name, "layer_%d", i);
        member(z, name, FT, 2, G4_DIMS(S, H));
        snprintf(name, sizeof name, "q_%d", i);
        member(z, name, FT, 3, G4_DIMS(S, tc->n_heads, lc->head_dim));
        expected_members += 2;
        int own = lc->kv_source == i;
        snprintf(name, sizeof name, "k_%d", i);
        CHECK_MSG((g4_npz_find(z, name) >= 0) == own, "%s/%s: %s %s", model, cas, name,
                  own ? "missing" : "present on a KV-shared layer");
        if (!own) continue;
        member(z, name, FT, 3, G4_DIMS(S, tc->n_kv_heads, lc->head_dim));
        snprintf(name, sizeof name, "v_%d", i);
        const g4_array *v = member(z, name, FT, 3, G4_DIMS(S, tc->n_kv_heads, lc->head_dim));
        expected_members += 2;
        if (v) { // weightless RMSNorm rows
            float *f = values(v);
            double worst = 0;
            for (uint64_t r = 0; r < v->numel / (uint64_t)lc->head_dim; r++) {
                double ms = 0;
                for (int j = 0; j < lc->head_dim; j++)
                    ms += (double)f[r * lc->head_dim + j] * f[r * lc->head_dim + j];
                ms /= lc->head_dim;
                worst = fmax(worst, fabs(ms - 1.0));
            }
            CHECK_MSG(worst < 1e-3, "%s/%s: %s mean square off 1 by %g", model, cas, name, worst);
            free(f);
        }
    }
    CHECK_MSG(g4_npz_count(z) == expected_members, "%s/%s: %d members, expected %d", model, cas,
              g4_npz_count(z), expected_members);
    snprintf(name, sizeof name, "layer_%lld", (long long)L);
    CHECK(g4_npz_find(z, name) < 0);

    // embeds: exact fp16 row x fp16 scale (one float32 multiply on both sides)
    const g4_component *ec = g4_package_component(p, G4_COMP_EMBEDDING);
    const g4_tensor *et = g4_component_find(ec, "embed_tokens.weight");
    CHECK(et != NULL && et->dtype == G4_DT_FLOAT16 && et->dims[1] == H);
    if (emb && et && et->dtype == G4_DT_FLOAT16) {
        float *e = values(emb); // exact in float32 too: an fp16 x fp16 product
        uint64_t bad = 0;
        for (int64_t s = 0; s < S; s++)
            for (int64_t j = 0; j < H; j++) {
                float w = (float)g4_tensor_get(et, (uint64_t)(id[s] * H + j));
                bad += e[s * H + j] != w * tc->embed_scale;
            }
        CHECK_MSG(bad == 0, "%s/%s: %llu embeds differ from embed_tokens x %g", model, cas,
                  (unsigned long long)bad, tc->embed_scale);
        free(e);
    }
    // logits from final_norm through the package's lm_head and soft-cap
    const g4_component *dc = g4_package_component(p, G4_COMP_DECODER);
    const g4_tensor *lm = g4_component_find(dc, "lm_head.weight_t"); // [H, V] fp16
    CHECK(lm != NULL && lm->dtype == G4_DT_FLOAT16 && lm->dims[0] == H && lm->dims[1] == V);
    if (fin && lg && lm && lm->dtype == G4_DT_FLOAT16 && tc->final_softcap > 0) {
        float *w = g4_malloc((size_t)(H * V) * sizeof *w);
        g4_tensor_to_f32(lm, w);
        float *x = values(fin), *y = values(lg);
        double worst = 0, c = tc->final_softcap;
        for (int64_t s = 0; s < S; s++)
            for (int64_t v = 0; v < V; v++) {
                double acc = 0;
                for (int64_t j = 0; j < H; j++) acc += (double)x[s * H + j] * w[j * V + v];
                double want = c * tanh(acc / c), got = y[s * V + v];
                worst = fmax(worst, fabs(got - want) / (1e-5 + 1e-5 * fabs(want)));
            }
        free(w), free(x), free(y);
        CHECK_MSG(worst <= 1.0, "%s/%s: logits off the recomputed soft-capped lm_head by %g x tol",
                  model, cas, worst);
    }
    g4_npz_close(z);
    printf("%s/%s%s: S %lld, %d members ok\n", model, set, cas, (long long)S, expected_members);
}

int main(void) {
    fixtures = g4t_env("G4_FIXTURES");
    // alt-tiny (GQA 8:2, a full layer every 3rd, head_dim 16 / 48) keeps one case: its
    // fixture stays within ~2.5 MB
    static const char *models[] = {"mobius-tiny-f16", "tiny2", "alt-tiny"};
    static const char *cases[3][3] = {
        {"len1", "len7", "len40"}, {"len1", "len7", "len40"}, {"len16"}};
    for (int m = 0; m < 3; m++) {
        char *pkg = g4_sprintf("%s/%s/package", fixtures, models[m]);
        g4_package *p;
        int rc = g4_package_open(pkg, &p);
        CHECK_MSG(rc == G4_OK, "%s", g4_error());
        free(pkg);
        if (rc) continue;
        for (int c = 0; c < 3 && cases[m][c]; c++) {
            check_case(p, models[m], "", cases[m][c]);
            check_case(p, models[m], "float64/", cases[m][c]);
        }
        g4_package_close(p);
    }
    return g4t_finish("test_refdumps");
}
