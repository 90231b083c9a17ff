// npy.c: .npy parse/write and the array helpers (see npy.h). The .npz zip layer is in npz.c.
#include "fidelity/npy.h"

#include "fidelity/printable.h"

#include <stdio.h>
#include <stdlib.h>

void g4_array_free(g4_array *a) {
    if (!a) return;
    free(a->name);
    free(a->data);
    memset(a, 0, sizeof *a);
}

g4_tensor g4_array_view(const g4_array *a) {
    g4_tensor t;
    memset(&t, 0, sizeof t);
    t.name = a->name;
    t.dtype = a->dtype;
    t.ndim = a->ndim;
    memcpy(t.dims, a->shape, sizeof t.dims);
    t.numel = a->numel;
    t.nbytes = a->nbytes;
    t.data = a->data;
    return t;
}

void g4_array_to_f32(const g4_array *a, float *dst) {
    if (a->dtype == G4_DT_FLOAT) {
        if (a->nbytes) memcpy(dst, a->data, (size_t)a->nbytes);
        return;
    }
    g4_tensor t = g4_array_view(a);
    for (uint64_t i = 0; i < a->numel; i++) dst[i] = (float)g4_tensor_get(&t, i);
}

const char *g4_array_shape_str(const g4_array *a, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < a->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

// --- .npy header --------------------------------------------------------------------------

// The dtypes we read: numpy descr -> ONNX dtype enum and element size.
static const struct {
    const char *descr;
    int dtype;
    int size;
} npy_dtypes[] = {
    {"<f4", G4_DT_FLOAT, 4}, {"<f2", G4_DT_FLOAT16, 2}, {"<f8", G4_DT_DOUBLE, 8},
    {"<i8", G4_DT_INT64, 8}, {"<i4", G4_DT_INT32, 4},   {"|b1", G4_DT_BOOL, 1},
    {"|u1", G4_DT_UINT8, 1},
};
#define NPY_SUPPORTED "<f4 <f2 <f8 <i8 <i4 |b1 |u1"

typedef struct {
    const char *p, *end;
    const char *what; // for messages
} npy_lex;

static void lex_ws(npy_lex *l) {
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
        l->p++;
}

// A short printable excerpt of the remaining header for messages.
static const char *lex_excerpt(const npy_lex *l, char *buf, size_t n) {
    size_t k = 0;
    for (const char *q = l->p; q < l->end && k + 1 < n && k < 24; q++)
        buf[k++] = (*q >= 32 && *q < 127) ? *q : '?';
    buf[k] = 0;
    return k ? buf : "<end of header>";
}

static int lex_fail(const npy_lex *l, const char *expected) {
    char ex[32];
    return g4_fail(G4_EUSER, "%s: .npy header: expected %s, found '%s'", l->what, expected,
                   lex_excerpt(l, ex, sizeof ex));
}

// A Python string literal in single or double quotes (no escapes: numpy never writes them).
static int lex_string(npy_lex *l, char *out, size_t cap) {
    lex_ws(l);
    if (l->p >= l->end || (*l->p != '\'' && *l->p != '"')) return lex_fail(l, "a quoted string");
    char q = *l->p++;
    size_t k = 0;
    while (l->p < l->end && *l->p != q) {
        if (*l->p == '\\' || k + 1 >= cap) return lex_fail(l, "a short string without escapes");
        out[k++] = *l->p++;
    }
    if (l->p >= l->end) return lex_fail(l, "a closing quote");
    l->p++;
    out[k] = 0;
    return G4_OK;
}

static int lex_char(npy_lex *l, char c, const char *expected) {
    lex_ws(l);
    if (l->p >= l->end || *l->p != c) return lex_fail(l, expected);
    l->p++;
    return G4_OK;
}

// A shape tuple: "()", "(5,)", "(2, 3)"; Python 2 'L' suffixes accepted.
static int lex_shape(npy_lex *l, int *ndim, int64_t *shape) {
    if (lex_char(l, '(', "'(' starting the shape tuple")) return G4_EUSER;
    *ndim = 0;
    for (;;) {
        lex_ws(l);
        if (l->p < l->end && *l->p == ')') {
            l->p++;
            return G4_OK;
        }
        if (l->p >= l->end || *l->p < '0' || *l->p > '9')
            return lex_fail(l, "a non-negative integer dimension or ')'");
        uint64_t v = 0;
        while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
            v = v * 10 + (uint64_t)(*l->p++ - '0');
            if (v > (uint64_t)INT64_MAX / 16) return lex_fail(l, "a dimension below 2^59");
        }
        if (l->p < l->end && *l->p == 'L') l->p++;
        if (*ndim >= G4_MAX_DIMS)
            return g4_fail(G4_EUSER, "%s: .npy header: more than %d dimensions", l->what,
                           G4_MAX_DIMS);
        shape[(*ndim)++] = (int64_t)v;
        lex_ws(l);
        if (l->p < l->end && *l->p == ',') {
            l->p++;
            continue;
        }
        if (l->p < l->end && *l->p == ')') continue;
        return lex_fail(l, "',' or ')' in the shape tuple");
    }
}

// Parses the dict literal; fills descr, fortran order and shape.
static int npy_parse_dict(npy_lex *l, char *descr, size_t dcap, int *fortran, int *ndim,
                          int64_t *shape) {
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    if (lex_char(l, '{', "'{' starting the header dict")) return G4_EUSER;
    for (;;) {
        lex_ws(l);
        if (l->p < l->end && *l->p == '}') {
            l->p++;
            break;
        }
        char key[32], pk[40];
        if (lex_string(l, key, sizeof key)) return G4_EUSER;
        if (lex_char(l, ':', "':' after a key")) return G4_EUSER;
        lex_ws(l);
        if (!strcmp(key, "descr")) {
            if (l->p < l->end && *l->p == '[')
                return g4_fail(G4_EUSER, "%s: .npy header: structured dtype; expected one of %s",
                               l->what, NPY_SUPPORTED);
            if (lex_string(l, descr, dcap)) return G4_EUSER;
            have_descr++;
        } else if (!strcmp(key, "fortran_order")) {
            if (l->end - l->p >= 4 && !memcmp(l->p, "True", 4)) {
                *fortran = 1;
                l->p += 4;
            } else if (l->end - l->p >= 5 && !memcmp(l->p, "False", 5)) {
                *fortran = 0;
                l->p += 5;
            } else {
                return lex_fail(l, "True or False for 'fortran_order'");
            }
            have_fortran++;
        } else if (!strcmp(key, "shape")) {
            if (lex_shape(l, ndim, shape)) return G4_EUSER;
            have_shape++;
        } else {
            return g4_fail(
                G4_EUSER,
                "%s: .npy header: unknown key '%s' (expected descr, fortran_order, shape)", l->what,
                g4_printable(key, sizeof key, pk, sizeof pk));
        }
        lex_ws(l);
        if (l->p < l->end && *l->p == ',') {
            l->p++;
            continue;
        }
        if (l->p < l->end && *l->p == '}') continue;
        return lex_fail(l, "',' or '}' after a value");
    }
    lex_ws(l);
    if (l->p != l->end) return lex_fail(l, "only spaces and a newline after the header dict");
    if (have_descr != 1 || have_fortran != 1 || have_shape != 1)
        return g4_fail(G4_EUSER,
                       "%s: .npy header: expected each of 'descr', 'fortran_order', 'shape' "
                       "exactly once (found %d, %d, %d)",
                       l->what, have_descr, have_fortran, have_shape);
    return G4_OK;
}

int g4_npy_parse(const uint8_t *bytes, size_t size, const char *what, const char *name,
                 g4_array *out) {
    memset(out, 0, sizeof *out);
    static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (size < 10 || memcmp(bytes, magic, 6) != 0)
        return g4_fail(G4_EUSER,
                       "%s: not a .npy file: expected the magic \\x93NUMPY and a "
                       "version (%zu bytes)",
                       what, size);
    int major = bytes[6], minor = bytes[7];
    uint64_t hlen, pre;
    if (major == 1) {
        hlen = (uint64_t)bytes[8] | (uint64_t)bytes[9] << 8;
        pre = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12)
            return g4_fail(G4_EUSER, "%s: .npy version %d.%d truncated in its preamble", what,
                           major, minor);
        hlen = (uint64_t)bytes[8] | (uint64_t)bytes[9] << 8 | (uint64_t)bytes[10] << 16 |
               (uint64_t)bytes[11] << 24;
        pre = 12;
    } else {
        return g4_fail(G4_EUSER, "%s: .npy version %d.%d; expected 1.x, 2.x or 3.x", what, major,
                       minor);
    }
    if (hlen > size - pre)
        return g4_fail(G4_EUSER,
                       "%s: .npy header of %llu bytes runs past the end (%zu bytes): "
                       "truncated",
                       what, (unsigned long long)hlen, size);
    npy_lex l = {(const char *)bytes + pre, (const char *)bytes + pre + hlen, what};
    char descr[16];
    int fortran = 0, ndim = 0;
    int64_t shape[G4_MAX_DIMS] = {0};
    if (npy_parse_dict(&l, descr, sizeof descr, &fortran, &ndim, shape)) return G4_EUSER;
    int dtype = -1, esize = 0;
    for (size_t i = 0; i < sizeof npy_dtypes / sizeof npy_dtypes[0]; i++)
        if (!strcmp(descr, npy_dtypes[i].descr)) {
            dtype = npy_dtypes[i].dtype;
            esize = npy_dtypes[i].size;
        }
    char pd[24];
    if (dtype < 0)
        return g4_fail(G4_EUSER, "%s: .npy dtype '%s' is not supported; expected one of %s%s", what,
                       g4_printable(descr, sizeof descr, pd, sizeof pd), NPY_SUPPORTED,
                       descr[0] == '>' ? " (big-endian data: save it little-endian)" : "");
    if (fortran)
        return g4_fail(G4_EUSER,
                       "%s: .npy array is in Fortran order; expected C order "
                       "(save np.ascontiguousarray(x))",
                       what);
    uint64_t numel = 1, nbytes;
    for (int i = 0; i < ndim; i++)
        if (!g4_mul_u64(numel, (uint64_t)shape[i], &numel))
            return g4_fail(G4_EUSER, "%s: .npy shape overflows 64 bits", what);
    if (!g4_mul_u64(numel, (uint64_t)esize, &nbytes))
        return g4_fail(G4_EUSER, "%s: .npy data size overflows 64 bits", what);
    uint64_t have = size - pre - hlen;
    if (have != nbytes) {
        g4_array tmp = {.ndim = ndim};
        memcpy(tmp.shape, shape, sizeof shape);
        char shp[128];
        return g4_fail(G4_EUSER, "%s: .npy %s %s needs %llu data bytes, found %llu%s", what,
                       g4_printable(descr, sizeof descr, pd, sizeof pd),
                       g4_array_shape_str(&tmp, shp, sizeof shp), (unsigned long long)nbytes,
                       (unsigned long long)have,
                       have < nbytes ? " (truncated)" : " (trailing bytes)");
    }
    out->name = g4_strdup(name);
    out->dtype = dtype;
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof shape);
    out->numel = numel;
    out->nbytes = nbytes;
    if (nbytes) {
        out->data = g4_malloc((size_t)nbytes);
        memcpy(out->data, bytes + pre + hlen, (size_t)nbytes);
    }
    return G4_OK;
}

int g4_npy_read(const char *path, g4_array *out) {
    memset(out, 0, sizeof *out);
    g4_mapped_file f;
    int rc = g4_map_file(path, &f);
    if (rc) return rc;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    char *name = g4_strndup(base, n >= 4 && !strcmp(base + n - 4, ".npy") ? n - 4 : n);
    static const uint8_t empty[1];
    rc = g4_npy_parse(f.data ? f.data : empty, (size_t)f.size, path, name, out);
    free(name);
    g4_unmap_file(&f);
    return rc;
}

// --- .npy writer ---------------------------------------------------------------------------

int g4_npy_write(const char *path, int dtype, int ndim, const int64_t *shape, const void *data) {
    const char *descr = dtype == G4_DT_FLOAT   ? "<f4"
                        : dtype == G4_DT_INT32 ? "<i4"
                        : dtype == G4_DT_INT64 ? "<i8"
                                               : NULL;
    if (!descr)
        return g4_fail(G4_EINTERNAL, "%s: .npy writer: dtype %s; expected float32, int32 or int64",
                       path, g4_dtype_name(dtype));
    if (ndim < 0 || ndim > G4_MAX_DIMS)
        return g4_fail(G4_EINTERNAL, "%s: .npy writer: %d dimensions; expected 0..%d", path, ndim,
                       G4_MAX_DIMS);
    char dict[512];
    int k =
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || !g4_mul_u64(numel, (uint64_t)shape[i], &numel))
            return g4_fail(G4_EINTERNAL, "%s: .npy writer: bad dimension %lld", path,
                           (long long)shape[i]);
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%lld%s", (long long)shape[i],
                      ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
    }
    k += snprintf(dict + k, sizeof dict - (size_t)k, "), }");
    // Pad with spaces so that preamble + header is a multiple of 64 (what numpy writes, so
    // the data is aligned when mapped), ending in '\n'.
    size_t hlen = (size_t)k + 1;
    size_t total_hdr = (10 + hlen + 63) / 64 * 64;
    hlen = total_hdr - 10;
    size_t esize = dtype == G4_DT_INT32 || dtype == G4_DT_FLOAT ? 4 : 8;
    uint64_t nbytes;
    if (!g4_mul_u64(numel, esize, &nbytes) || nbytes > SIZE_MAX - total_hdr)
        return g4_fail(G4_EINTERNAL, "%s: .npy writer: array too large", path);
    uint8_t *buf = g4_malloc(total_hdr + (size_t)nbytes);
    static const uint8_t magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    memcpy(buf, magic, 8);
    buf[8] = (uint8_t)(hlen & 0xff);
    buf[9] = (uint8_t)(hlen >> 8);
    memset(buf + 10, ' ', hlen);
    memcpy(buf + 10, dict, (size_t)k);
    buf[total_hdr - 1] = '\n';
    if (nbytes) memcpy(buf + total_hdr, data, (size_t)nbytes);
    int rc = g4_write_file_atomic(path, buf, total_hdr + (size_t)nbytes);
    free(buf);
    return rc;
}
