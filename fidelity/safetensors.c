// safetensors.c: see safetensors.h.
#include "fidelity/safetensors.h"

#include "fidelity/printable.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

// The safetensors library refuses headers above 100 MB; so do we (also bounds a fuzzer).
#define ST_MAX_HEADER (100u << 20)

struct g4_st_private {
    g4_mapped_file file; // when opened from a path
    char **names;        // owned copies (tensors[i].name points here)
    g4_strmap index;
};

static const struct {
    const char *name;
    int dtype;
} st_dtypes[] = {
    {"F32", G4_DT_FLOAT}, {"F16", G4_DT_FLOAT16}, {"BF16", G4_DT_BFLOAT16}, {"I64", G4_DT_INT64},
    {"I32", G4_DT_INT32}, {"U8", G4_DT_UINT8},    {"BOOL", G4_DT_BOOL},
};
#define ST_SUPPORTED "F32 F16 BF16 I64 I32 U8 BOOL"

void g4_safetensors_close(g4_safetensors *st) {
    if (!st) return;
    if (st->priv) {
        for (int i = 0; i < st->n_tensors; i++) free(st->priv->names[i]);
        free(st->priv->names);
        g4_strmap_free(&st->priv->index);
        if (st->priv->file.path) g4_unmap_file(&st->priv->file);
        free(st->priv);
    }
    free(st->tensors);
    free(st->path);
    free(st);
}

// A JSON number that is an exact non-negative integer below 2^53 (doubles are exact there).
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

typedef struct {
    uint64_t begin, end;
    int idx;
} st_span;

static int span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

// One header entry -> st->tensors[i].
static int parse_entry(g4_safetensors *st, const cJSON *e, uint64_t buf_size, int i) {
    char name[96]; // printable, for messages
    g4_printable(e->string, strlen(e->string), name, sizeof name);
    if (!cJSON_IsObject(e))
        return g4_fail(G4_EUSER,
                       "%s: tensor '%s': expected an object {dtype, shape, "
                       "data_offsets}",
                       st->path, name);
    g4_tensor *t = &st->tensors[i];
    st->priv->names[i] = g4_strdup(e->string);
    t->name = st->priv->names[i];
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return g4_fail(G4_EUSER, "%s: tensor '%s': expected a string 'dtype'", st->path, name);
    char pd[24];
    t->dtype = -1;
    for (size_t k = 0; k < sizeof st_dtypes / sizeof st_dtypes[0]; k++)
        if (!strcmp(dt->valuestring, st_dtypes[k].name)) t->dtype = st_dtypes[k].dtype;
    if (t->dtype < 0)
        return g4_fail(G4_EUSER,
                       "%s: tensor '%s': dtype '%s' is not supported; expected one "
                       "of " ST_SUPPORTED,
                       st->path, name, g4_printable(dt->valuestring, 16, pd, sizeof pd));
    if (!cJSON_IsArray(shape))
        return g4_fail(G4_EUSER, "%s: tensor '%s': expected a list 'shape'", st->path, name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > G4_MAX_DIMS)
        return g4_fail(G4_EUSER, "%s: tensor '%s': %d dimensions; at most %d supported", st->path,
                       name, nd, G4_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        uint64_t v;
        if (!json_u64(cJSON_GetArrayItem(shape, d), &v))
            return g4_fail(G4_EUSER, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                           st->path, name, d);
        t->dims[d] = (int64_t)v;
        if (!g4_mul_u64(numel, v, &numel))
            return g4_fail(G4_EUSER, "%s: tensor '%s': shape overflows 64 bits", st->path, name);
    }
    t->numel = numel;
    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_u64(cJSON_GetArrayItem(offs, 0), &begin) ||
        !json_u64(cJSON_GetArrayItem(offs, 1), &end))
        return g4_fail(G4_EUSER,
                       "%s: tensor '%s': expected 'data_offsets' [begin, end] of "
                       "non-negative integers",
                       st->path, name);
    if (begin > end || end > buf_size)
        return g4_fail(G4_EUSER,
                       "%s: tensor '%s': data_offsets [%llu, %llu] outside the %llu-byte "
                       "data buffer (truncated file?)",
                       st->path, name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)buf_size);
    uint64_t nbytes;
    if (!g4_mul_u64(numel, (uint64_t)(g4_dtype_bits(t->dtype) / 8), &nbytes) ||
        nbytes != end - begin) {
        char shp[128];
        return g4_fail(G4_EUSER,
                       "%s: tensor '%s': %s %s needs %llu bytes, data_offsets span "
                       "%llu",
                       st->path, name, g4_printable(dt->valuestring, 16, pd, sizeof pd),
                       g4_tensor_shape_str(t, shp, sizeof shp), (unsigned long long)nbytes,
                       (unsigned long long)(end - begin));
    }
    t->nbytes = nbytes;
    t->offset = begin; // relative to the data buffer
    return G4_OK;
}

static int st_parse(g4_safetensors *st, const uint8_t *bytes, uint64_t size) {
    if (size < 8)
        return g4_fail(G4_EUSER,
                       "%s: %llu bytes: too short for a .safetensors file (expected an "
                       "8-byte header length)",
                       st->path, (unsigned long long)size);
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | bytes[k];
    if (hlen > ST_MAX_HEADER || hlen > size - 8)
        return g4_fail(G4_EUSER,
                       "%s: header length %llu does not fit the %llu-byte file "
                       "(limit 100 MB): not a .safetensors file or truncated",
                       st->path, (unsigned long long)hlen, (unsigned long long)size);
    if (hlen < 2 || bytes[8] != '{')
        return g4_fail(G4_EUSER, "%s: header does not start with '{': not a .safetensors file",
                       st->path);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)bytes + 8, (size_t)hlen, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return g4_fail(G4_EUSER, "%s: header is not a JSON object (%llu bytes)", st->path,
                       (unsigned long long)hlen);
    }
    // The library pads the header with spaces; anything else after the JSON is malformed.
    for (const char *q = end; q && q < (const char *)bytes + 8 + hlen; q++)
        if (*q != ' ' && *q != '\n' && *q != '\t' && *q != '\r' && *q != 0) {
            cJSON_Delete(root);
            return g4_fail(G4_EUSER, "%s: bytes after the JSON header object", st->path);
        }
    uint64_t buf_off = 8 + hlen, buf_size = size - buf_off;
    int n = 0;
    for (const cJSON *e = root->child; e; e = e->next)
        if (strcmp(e->string, "__metadata__")) n++;
    st->n_tensors = n;
    st->tensors = g4_calloc((size_t)n + 1, sizeof *st->tensors);
    st->priv->names = g4_calloc((size_t)n + 1, sizeof *st->priv->names);
    g4_strmap_init(&st->priv->index, (size_t)n * 2 + 4);
    st_span *spans = g4_calloc((size_t)n + 1, sizeof *spans);
    int i = 0, rc = G4_OK;
    for (const cJSON *e = root->child; e && !rc; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e))
                rc = g4_fail(G4_EUSER, "%s: '__metadata__' is not an object", st->path);
            continue;
        }
        rc = parse_entry(st, e, buf_size, i);
        char pn[96];
        if (!rc && !g4_strmap_put(&st->priv->index, st->tensors[i].name, i))
            rc = g4_fail(G4_EUSER, "%s: tensor '%s' appears twice in the header", st->path,
                         g4_printable(e->string, strlen(e->string), pn, sizeof pn));
        if (!rc) {
            spans[i] =
                (st_span){st->tensors[i].offset, st->tensors[i].offset + st->tensors[i].nbytes, i};
            i++;
        }
    }
    cJSON_Delete(root);
    if (!rc) {
        // Tensors may not share bytes (the library also refuses holes; we only need no overlap).
        qsort(spans, (size_t)n, sizeof *spans, span_cmp);
        for (int k = 1; k < n && !rc; k++)
            if (spans[k].begin < spans[k - 1].end) {
                const char *a = st->tensors[spans[k - 1].idx].name;
                const char *b = st->tensors[spans[k].idx].name;
                char pa[96], pb[96];
                rc = g4_fail(G4_EUSER, "%s: tensors '%s' and '%s' overlap in the data buffer",
                             st->path, g4_printable(a, strlen(a), pa, sizeof pa),
                             g4_printable(b, strlen(b), pb, sizeof pb));
            }
    }
    free(spans);
    if (rc) {
        // keep n_tensors consistent with the names allocated so far for close()
        st->n_tensors = n;
        return rc;
    }
    for (int k = 0; k < n; k++) {
        g4_tensor *t = &st->tensors[k];
        t->data = t->nbytes ? bytes + buf_off + t->offset : NULL;
        t->offset += buf_off; // absolute file offset from here on
        t->kind = G4_TENSOR_INITIALIZER;
    }
    return G4_OK;
}

int g4_safetensors_parse(const uint8_t *bytes, size_t size, const char *path_for_errors,
                         g4_safetensors **out) {
    *out = NULL;
    g4_safetensors *st = g4_calloc(1, sizeof *st);
    st->path = g4_strdup(path_for_errors);
    st->priv = g4_calloc(1, sizeof *st->priv);
    int rc = st_parse(st, bytes, size);
    if (rc) {
        g4_safetensors_close(st);
        return rc;
    }
    *out = st;
    return G4_OK;
}

int g4_safetensors_open(const char *path, g4_safetensors **out) {
    *out = NULL;
    g4_mapped_file f;
    int rc = g4_map_file(path, &f);
    if (rc) return rc;
    static const uint8_t empty[1];
    rc = g4_safetensors_parse(f.data ? f.data : empty, (size_t)f.size, path, out);
    if (rc) {
        g4_unmap_file(&f);
        return rc;
    }
    (*out)->priv->file = f;
    return G4_OK;
}

const g4_tensor *g4_safetensors_get(const g4_safetensors *st, const char *name) {
    int i = g4_strmap_get(&st->priv->index, name);
    return i < 0 ? NULL : &st->tensors[i];
}
