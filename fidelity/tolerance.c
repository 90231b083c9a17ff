// tolerance.c: the named tolerances against an HF dump (see tolerance.h).
#include "fidelity/tolerance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "fidelity/capture.h"
#include "fidelity/compare.h"
#include "fidelity/dump_run.h"

const g4_tol g4_tol_cpu_f32 = {"cpu-f32", 1e-4};
const g4_tol g4_tol_cuda_f16 = {"cuda-f16", 2e-2};

static const g4_tol_rule tol_rules[] = {
    {"float16", "hf-fp16x3", 3, 1e-3, {"float32", "float64"}},
    {"float32", "hf-fp32x8", 8, 1e-5, {"float64", NULL}},
};

const g4_tol *g4_tol_for_backend(const g4_backend *be) {
    return be->host_memory ? &g4_tol_cpu_f32 : &g4_tol_cuda_f16;
}

static g4_tol rule_tol(const g4_tol_rule *r, double e) {
    g4_tol t = {r->name, r->factor * e > r->floor ? r->factor * e : r->floor};
    return t;
}

g4_tol g4_tol_hf_fp16x3(double e16) { return rule_tol(&tol_rules[0], e16); }

// The dtype HF ran in, from the dump's hf_dtype member (ASCII bytes), or def when absent.
static int dump_dtype(g4_npz *z, const char *path, const char *def, char *buf, size_t n) {
    snprintf(buf, n, "%s", def);
    if (g4_npz_find(z, "hf_dtype") < 0) return G4_OK;
    const g4_array *a;
    int rc = g4_npz_get(z, "hf_dtype", &a);
    if (rc) return rc;
    if (a->dtype != G4_DT_UINT8 || a->ndim != 1 || a->numel == 0 || a->numel >= n)
        return g4_fail(G4_EUSER, "%s: hf_dtype must be a short uint8 string (\"float32\")", path);
    memcpy(buf, a->data, (size_t)a->numel);
    buf[a->numel] = 0;
    return G4_OK;
}

int g4_tol_dump_open(const char *path, const char *ref_path, g4_npz *ref, const int32_t *ids,
                     int n, g4_npz **out, const g4_tol_rule **rule) {
    char tdt[32], rdt[32];
    int32_t *tids = NULL;
    int tn = 0;
    int rc = g4_npz_open(path, out);
    if (!rc) rc = dump_dtype(*out, path, "float16", tdt, sizeof tdt);
    if (!rc) rc = dump_dtype(ref, ref_path, "float32", rdt, sizeof rdt);
    if (rc) return rc;
    *rule = NULL;
    for (size_t i = 0; i < sizeof tol_rules / sizeof tol_rules[0]; i++)
        if (!strcmp(tdt, tol_rules[i].dump_dtype)) *rule = &tol_rules[i];
    if (!*rule)
        return g4_fail(G4_EUSER,
                       "--tol-from %s: HF ran in %s there; a tolerance dump is a float16 run "
                       "(for an fp16 engine) or a float32 run (for the CPU backend)",
                       path, tdt);
    const g4_tol_rule *r = *rule;
    if (strcmp(rdt, r->ref_dtypes[0]) && (!r->ref_dtypes[1] || strcmp(rdt, r->ref_dtypes[1])))
        return g4_fail(G4_EUSER,
                       "--tol-from %s: a %s tolerance dump needs a %s reference, but %s is a %s "
                       "run (make_reference.py --dtype %s)",
                       path, tdt, r->ref_dtypes[1] ? "float32 or float64" : "float64", ref_path,
                       rdt, r->ref_dtypes[0]);
    if ((rc = g4_dump_input_ids(*out, path, &tids, &tn))) return rc;
    int same = tn == n;
    for (int i = 0; same && i < n; i++) same = tids[i] == ids[i];
    free(tids);
    if (!same)
        return g4_fail(G4_EUSER,
                       "--tol-from %s: its input_ids (%d tokens) are not %s's (%d tokens): a "
                       "tolerance dump must be the same case",
                       path, tn, ref_path, n);
    return G4_OK;
}

int g4_tol_derived(g4_npz *tol_dump, const char *tol_path, const g4_tol_rule *rule,
                   const char *name, const g4_array *a, const float *r, g4_tol *out) {
    const g4_array *h;
    char s1[64], s2[64];
    if (g4_npz_find(tol_dump, name) < 0)
        return g4_fail(G4_EUSER,
                       "--tol-from %s: no tensor '%s' (the reference has it): not a dump of the "
                       "same case",
                       tol_path, name);
    int rc = g4_npz_get(tol_dump, name, &h);
    if (rc) return rc;
    int same = h->ndim == a->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = h->shape[d] == a->shape[d];
    if (!same)
        return g4_fail(G4_EUSER,
                       "--tol-from %s: tensor '%s' is %s there but %s in the reference: another "
                       "model?",
                       tol_path, name, g4_array_shape_str(h, s1, sizeof s1),
                       g4_array_shape_str(a, s2, sizeof s2));
    float *hv = g4_malloc(sizeof(float) * (size_t)h->numel + 1);
    g4_array_to_f32(h, hv);
    const g4_cmp_stats st = g4_cmp(hv, r, (size_t)h->numel, 0);
    free(hv);
    if (st.nan)
        return g4_fail(G4_EUSER,
                       "--tol-from %s: tensor '%s' has %zu NaN/Inf values: no tolerance can be "
                       "derived from it",
                       tol_path, name, st.nan);
    // (a non-finite reference makes st.rel infinite: the tensor's row fails on its own)
    *out = rule_tol(rule, st.rel);
    return G4_OK;
}
