// report_json.c: the machine-readable form of a compare report (see report.h). Every number
// of the tables is there, unrounded (cJSON prints doubles with 17 significant digits when 15
// do not round-trip). NaN and Inf, which JSON cannot hold, become null.
//
//   {"format": "g4cu-compare", "version": 1, "mode": "hf-dump" | "packages" | "sensitivity",
//    "reference": ..., "test": ..., "backend": ..., "ids": [...], "n_layers": L,
//    "tensors": [{"name", "component", "kind", "layer" (-1 outside the layers), "position"
//                 ("in" | "layer" | "out"), "rows", "cols", "n", "max_abs", "rel", "cosine",
//                 "nonfinite", ["argmax_agree", "argmax_rows"], ["tolerance", "max_rel",
//                 "pass"], ["spans": {"text" | "image" | "audio": {"rows", ["rel", "cosine",
//                 "max_abs"] (when rows > 0)}}]}...],
//    "spans": {"text" | "image" | "audio": {"positions", "ranges": [[start, count]...]}}
//                                  (hf-dump with media: the prompt's positions of each kind;
//                                   per tensor, "spans" splits its rows by them)
//    "missing": [names]            (hf-dump)
//    "logits": {"positions", "kl_mean", "kl_max", "kl_max_position", "top1_agree",
//               "top1_agreement", "nonfinite_positions", "kl": [...], "top1_ref": [...],
//               "top1_test": [...]},
//    "sensitivity": [{"rank" (0 when not run), "name", "kind", "layer", "K", "N", "evaluated",
//                     "kl_mean", "kl_max", "top1_agree", "layer_kl", "out_rel", "w_rel"}...]}
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "base/base.h"
#include "fidelity/report.h"

static const char *mode_name(g4_report_mode m) {
    return m == G4_REPORT_HF_DUMP    ? "hf-dump"
           : m == G4_REPORT_PACKAGES ? "packages"
                                     : "sensitivity";
}

static cJSON *tensor_json(const g4_report *r, int i) {
    const g4_cmp_row *x = &r->tensors->rows[i];
    cJSON *o = cJSON_CreateObject();
    char comp[16], kind[64];
    int layer;
    const int at = g4_report_classify(x->name, comp, sizeof comp, kind, sizeof kind, &layer);
    cJSON_AddStringToObject(o, "name", x->name);
    cJSON_AddStringToObject(o, "component", comp);
    cJSON_AddStringToObject(o, "kind", kind);
    cJSON_AddNumberToObject(o, "layer", layer);
    cJSON_AddStringToObject(o, "position",
                            at == G4_REPORT_AT_IN    ? "in"
                            : at == G4_REPORT_AT_OUT ? "out"
                                                     : "layer");
    if (r->shapes) {
        cJSON_AddNumberToObject(o, "rows", r->shapes[2 * i]);
        cJSON_AddNumberToObject(o, "cols", r->shapes[2 * i + 1]);
    }
    cJSON_AddBoolToObject(o, "shape_ok", x->shape_ok);
    if (x->shape_ok) {
        cJSON_AddNumberToObject(o, "n", (double)x->s.n);
        cJSON_AddNumberToObject(o, "max_abs", x->s.max_abs);
        cJSON_AddNumberToObject(o, "rel", x->s.rel);
        cJSON_AddNumberToObject(o, "cosine", x->s.cosine);
        cJSON_AddNumberToObject(o, "nonfinite", (double)x->s.nan);
        cJSON_AddNumberToObject(o, "ref_nonfinite", (double)x->s.ref_bad);
        if (x->s.argmax_agree_rows >= 0) {
            cJSON_AddNumberToObject(o, "argmax_agree", x->s.argmax_agree_rows);
            cJSON_AddNumberToObject(o, "argmax_rows", x->s.rows);
        }
        if (x->has_ids) {
            cJSON_AddNumberToObject(o, "ids_equal", x->ids.equal);
            cJSON_AddNumberToObject(o, "ids_rows", x->ids.rows);
            cJSON_AddNumberToObject(o, "near_ties", x->ids.near_ties);
            cJSON_AddNumberToObject(o, "real_differences", x->ids.real);
        }
    }
    if (x->shape_ok && x->has_spans) {
        cJSON *sp = cJSON_AddObjectToObject(o, "spans");
        for (int k = 0; k < G4_SPAN_KINDS; k++) {
            cJSON *e = cJSON_AddObjectToObject(sp, g4_span_names[k]);
            cJSON_AddNumberToObject(e, "rows", x->span[k].rows);
            if (!x->span[k].rows) continue; // (nothing compared: no numbers)
            cJSON_AddNumberToObject(e, "rel", x->span[k].rel);
            cJSON_AddNumberToObject(e, "cosine", x->span[k].cosine);
            cJSON_AddNumberToObject(e, "max_abs", x->span[k].max_abs);
        }
    }
    if (r->has_tolerance) {
        cJSON_AddStringToObject(o, "tolerance", x->tol_name);
        cJSON_AddNumberToObject(o, "max_rel", x->tol);
        cJSON_AddBoolToObject(o, "pass", x->pass);
    }
    return o;
}

static cJSON *kl_json(const g4_kl_stats *k) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "positions", k->rows);
    cJSON_AddNumberToObject(o, "kl_mean", k->kl_mean);
    cJSON_AddNumberToObject(o, "kl_max", k->kl_max);
    cJSON_AddNumberToObject(o, "kl_max_position", k->kl_max_row);
    cJSON_AddNumberToObject(o, "top1_agree", k->top1_agree);
    cJSON_AddNumberToObject(o, "top1_agreement", k->rows ? (double)k->top1_agree / k->rows : 0.0);
    cJSON_AddNumberToObject(o, "nonfinite_positions", k->nonfinite_rows);
    cJSON_AddItemToObject(o, "kl", cJSON_CreateDoubleArray(k->kl, k->rows));
    cJSON_AddItemToObject(o, "top1_ref", cJSON_CreateIntArray(k->top1_ref, k->rows));
    cJSON_AddItemToObject(o, "top1_test", cJSON_CreateIntArray(k->top1_test, k->rows));
    return o;
}

static cJSON *sens_json(const g4_sens_row *s, int rank) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", rank);
    cJSON_AddStringToObject(o, "name", s->name);
    cJSON_AddStringToObject(o, "kind", s->kind);
    cJSON_AddNumberToObject(o, "layer", s->layer);
    cJSON_AddNumberToObject(o, "K", s->K);
    cJSON_AddNumberToObject(o, "N", s->N);
    cJSON_AddBoolToObject(o, "evaluated", s->evaluated);
    if (s->evaluated) {
        cJSON_AddNumberToObject(o, "kl_mean", s->kl_mean);
        cJSON_AddNumberToObject(o, "kl_max", s->kl_max);
        cJSON_AddNumberToObject(o, "top1_agree", s->top1_agree);
    }
    cJSON_AddNumberToObject(o, "layer_kl", s->layer_kl);
    cJSON_AddNumberToObject(o, "out_rel", s->out_rel);
    cJSON_AddNumberToObject(o, "w_rel", s->w_rel);
    return o;
}

char *g4_report_json(const g4_report *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "g4cu-compare");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "mode", mode_name(r->mode));
    cJSON_AddStringToObject(root, "reference", r->reference ? r->reference : "");
    if (r->test) cJSON_AddStringToObject(root, "test", r->test);
    cJSON_AddStringToObject(root, "backend", r->backend ? r->backend : "");
    cJSON_AddItemToObject(root, "ids", cJSON_CreateIntArray((const int *)r->ids, r->n_ids));
    cJSON_AddNumberToObject(root, "n_layers", r->n_layers);
    if (r->tensors) {
        cJSON *a = cJSON_AddArrayToObject(root, "tensors");
        for (int i = 0; i < r->tensors->n; i++) cJSON_AddItemToArray(a, tensor_json(r, i));
    }
    if (r->mode == G4_REPORT_HF_DUMP)
        cJSON_AddItemToObject(root, "missing",
                              r->n_missing ? cJSON_CreateStringArray(r->missing, r->n_missing)
                                           : cJSON_CreateArray());
    if (r->span) {
        cJSON *sp = cJSON_AddObjectToObject(root, "spans");
        g4_row_range *run = g4_malloc(sizeof(g4_row_range) * (size_t)(r->n_ids > 0 ? r->n_ids : 1));
        for (int k = 0; k < G4_SPAN_KINDS; k++) {
            cJSON *e = cJSON_AddObjectToObject(sp, g4_span_names[k]), *ranges = cJSON_CreateArray();
            const int runs = g4_span_ranges(r->span, r->n_ids, k, run);
            int count = 0;
            for (int i = 0; i < runs; i++) {
                const int se[2] = {(int)run[i].start, (int)run[i].count};
                cJSON_AddItemToArray(ranges, cJSON_CreateIntArray(se, 2));
                count += se[1];
            }
            cJSON_AddNumberToObject(e, "positions", count);
            cJSON_AddItemToObject(e, "ranges", ranges);
        }
        free(run);
    }
    if (r->kl) cJSON_AddItemToObject(root, "logits", kl_json(r->kl));
    if (r->mode == G4_REPORT_SENSITIVITY) {
        cJSON *a = cJSON_AddArrayToObject(root, "sensitivity");
        for (int i = 0; i < r->n_sens; i++)
            cJSON_AddItemToArray(a, sens_json(&r->sens[i], r->sens[i].evaluated ? i + 1 : 0));
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return NULL;
    // cJSON allocates with malloc by default; return a string the caller frees with free().
    char *out = g4_sprintf("%s\n", text);
    cJSON_free(text);
    return out;
}
