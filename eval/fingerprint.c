// fingerprint.c: see fingerprint.h.
#include "eval/fingerprint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "loader/package.h"

static uint64_t hash_str(uint64_t h, const char *s) {
    return g4_hash64(h, s ? s : "", s ? strlen(s) + 1 : 1); // the NUL separates fields
}

static uint64_t hash_u64(uint64_t h, uint64_t v) {
    return g4_hash64(h, &v, sizeof v);
}

// A whole file's bytes; an absent optional file hashes as "absent".
static int hash_file(uint64_t *h, const char *path, int optional) {
    if (optional && !g4_is_file(path)) {
        *h = hash_str(*h, "absent");
        return G4_OK;
    }
    g4_mapped_file f;
    int rc = g4_map_file(path, &f);
    if (rc) return rc;
    *h = hash_u64(*h, f.size);
    if (f.size) *h = g4_hash64(*h, f.data, (size_t)f.size);
    g4_unmap_file(&f);
    return G4_OK;
}

static int hash_package(const char *dir, uint64_t *out) {
    uint64_t h = G4_HASH64_INIT;
    static const char *const configs[] = {"genai_config.json", "image_processor.json",
                                          "audio_feature_extraction.json"};
    int rc = G4_OK;
    for (size_t i = 0; i < sizeof configs / sizeof configs[0] && !rc; i++) {
        char *p = g4_path_join(dir, configs[i]);
        h = hash_str(h, configs[i]);
        rc = hash_file(&h, p, i > 0);
        free(p);
    }
    g4_package *pkg = NULL;
    if (!rc) rc = g4_package_open(dir, &pkg);
    for (int c = 0; !rc && c < G4_COMP_COUNT; c++) {
        const g4_component *comp = g4_package_component(pkg, (g4_component_id)c);
        h = hash_str(h, pkg->comp[c].name);
        if (!comp) continue;
        const g4_onnx_model *m = comp->model;
        h = hash_u64(h, (uint64_t)m->n_tensors);
        for (int i = 0; i < m->n_tensors; i++) {
            const g4_tensor *t = &m->tensors[i];
            h = hash_str(h, t->name);
            h = hash_u64(h, (uint64_t)t->dtype);
            for (int d = 0; d < t->ndim; d++) h = hash_u64(h, (uint64_t)t->dims[d]);
            h = hash_u64(h, t->nbytes);
            if (!t->external) continue;
            h = hash_str(h, t->location);
            h = hash_u64(h, t->offset);
        }
        // the sizes of the data files the table names (each once, in first-use order)
        for (int i = 0; i < m->n_tensors; i++) {
            const g4_tensor *t = &m->tensors[i];
            int first = t->external;
            for (int k = 0; first && k < i; k++)
                first = !(m->tensors[k].external && !strcmp(m->tensors[k].location, t->location));
            if (!first) continue;
            char *p = g4_path_join(m->dir, t->location);
            struct stat st;
            h = hash_u64(h, stat(p, &st) == 0 ? (uint64_t)st.st_size : 0);
            free(p);
        }
    }
    g4_package_close(pkg);
    *out = h;
    return rc;
}

int g4_eval_fingerprint_make(const g4_eval_run_opts *o, g4_eval_fingerprint *out) {
    memset(out, 0, sizeof *out);
    uint64_t hp = 0, ht = G4_HASH64_INIT;
    int rc = hash_package(o->package, &hp);
    char *tok = o->tokenizer ? g4_strdup(o->tokenizer) : g4_path_join(o->package, "tokenizer.json");
    if (!rc) rc = hash_file(&ht, tok, 0);
    free(tok);
    if (rc) return rc;
    out->options = g4_sprintf("task=%s max_new=%d keep_stop=%d backend=%s", o->task->name,
                              o->max_new > 0 ? o->max_new : o->task->max_new, o->keep_stop ? 1 : 0,
                              o->backend ? o->backend : "cpu");
    uint64_t hv = hash_u64(hash_u64(hash_str(G4_HASH64_INIT, out->options), hp), ht);
    snprintf(out->package, sizeof out->package, "%016llx", (unsigned long long)hp);
    snprintf(out->tokenizer, sizeof out->tokenizer, "%016llx", (unsigned long long)ht);
    snprintf(out->value, sizeof out->value, "%016llx", (unsigned long long)hv);
    return G4_OK;
}

void g4_eval_fingerprint_free(g4_eval_fingerprint *f) {
    free(f->options);
    memset(f, 0, sizeof *f);
}

int g4_eval_fingerprint_check(const char *what_line, const char *got,
                              const g4_eval_fingerprint *want,
                              const g4_eval_fingerprint *recorded) {
    if (got && !strcmp(got, want->value)) return G4_OK;
    if (!got)
        return g4_fail(G4_EUSER,
                       "%s: the prediction has no fingerprint (made by another tool or an older "
                       "g4cu): cannot tell what made it; start a new --out",
                       what_line);
    const char *part = "the package, tokenizer or settings";
    if (recorded && !strcmp(got, recorded->value)) {
        if (strcmp(recorded->package, want->package))
            part = "another package";
        else if (strcmp(recorded->tokenizer, want->tokenizer))
            part = "another tokenizer";
        else if (recorded->options && want->options && strcmp(recorded->options, want->options))
            part = "other settings";
    }
    return g4_fail(G4_EUSER,
                   "%s: predicted with %s (fingerprint %s, this run's is %s: %s); resume with the "
                   "same ones or start a new --out",
                   what_line, part, got, want->value, want->options ? want->options : "");
}
