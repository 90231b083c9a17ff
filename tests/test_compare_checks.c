// test_compare_checks.c: `g4cu compare` never passes on broken data. Made here from the
// committed tiny2 dumps (refdumps/tiny2/float64/len7.npz, the reference, and len7.npz, HF's
// fp32 run, the --tol-from dump), rewritten as plain zip archives with one thing broken:
//   a NaN in the reference's logits / layer_3: exit 1, the verdict names the tensor (a NaN
//     reference used to read as rel err 0, "all within tolerance");
//   a --tol-from dump of other ids, of another shape (another model), missing a tensor, or
//     with a NaN: refused with one line on stderr (it used to be ignored tensor by tensor);
//   a fp32 reference with a fp32 tolerance dump: refused (the reference must be float64).
// The unbroken pair passes (the control).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fidelity/npy.h"
#include "tests/test_util.h"

static const char *g4cu, *fixtures;

// --- a stored (uncompressed) .npz writer ---------------------------------------------------
typedef struct {
    char *name;
    uint8_t *bytes; // the .npy file
    size_t n;
} member;

static const char *descr_of(int dtype) {
    return dtype == G4_DT_FLOAT    ? "<f4"
           : dtype == G4_DT_DOUBLE ? "<f8"
           : dtype == G4_DT_INT64  ? "<i8"
           : dtype == G4_DT_INT32  ? "<i4"
           : dtype == G4_DT_UINT8  ? "|u1"
                                   : NULL;
}

// a as .npy bytes (format 1.0), with shape overridden when ndim >= 0.
static member npy_of(const g4_array *a, int ndim, const int64_t *shape) {
    if (ndim < 0) ndim = a->ndim, shape = a->shape;
    char dict[256];
    int k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr_of(a->dtype));
    for (int d = 0; d < ndim; d++)
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%lld%s", (long long)shape[d],
                      ndim == 1      ? ","
                      : d + 1 < ndim ? ", "
                                     : "");
    k += snprintf(dict + k, sizeof dict - (size_t)k, "), }");
    size_t hlen = (size_t)k + 1; // + '\n'
    while ((10 + hlen) % 64) hlen++;
    member m = {g4_sprintf("%s.npy", a->name), NULL, 10 + hlen + (size_t)a->nbytes};
    m.bytes = g4_malloc(m.n);
    memcpy(m.bytes, "\x93NUMPY\x01\x00", 8);
    m.bytes[8] = (uint8_t)(hlen & 0xff), m.bytes[9] = (uint8_t)(hlen >> 8);
    memset(m.bytes + 10, ' ', hlen);
    memcpy(m.bytes + 10, dict, (size_t)k);
    m.bytes[10 + hlen - 1] = '\n';
    if (a->nbytes) memcpy(m.bytes + 10 + hlen, a->data, (size_t)a->nbytes);
    return m;
}

static void put16(FILE *f, unsigned v) {
    fputc(v & 0xff, f), fputc(v >> 8 & 0xff, f);
}
static void put32(FILE *f, unsigned long v) {
    put16(f, v & 0xffff), put16(f, v >> 16 & 0xffff);
}

static void write_zip(const char *path, member *m, int n) {
    FILE *f = fopen(path, "wb");
    unsigned long *off = g4_calloc((size_t)n, sizeof *off),
                  *crc = g4_calloc((size_t)n, sizeof *crc);
    for (int i = 0; i < n; i++) {
        off[i] = (unsigned long)ftell(f);
        crc[i] = crc32(0, m[i].bytes, (uInt)m[i].n);
        put32(f, 0x04034b50), put16(f, 20), put16(f, 0), put16(f, 0), put16(f, 0), put16(f, 0);
        put32(f, crc[i]), put32(f, (unsigned long)m[i].n), put32(f, (unsigned long)m[i].n);
        put16(f, (unsigned)strlen(m[i].name)), put16(f, 0);
        fputs(m[i].name, f);
        fwrite(m[i].bytes, 1, m[i].n, f);
    }
    unsigned long cd = (unsigned long)ftell(f);
    for (int i = 0; i < n; i++) {
        put32(f, 0x02014b50), put16(f, 20), put16(f, 20), put16(f, 0), put16(f, 0);
        put16(f, 0), put16(f, 0), put32(f, crc[i]), put32(f, (unsigned long)m[i].n);
        put32(f, (unsigned long)m[i].n), put16(f, (unsigned)strlen(m[i].name)), put16(f, 0);
        put16(f, 0), put16(f, 0), put16(f, 0), put32(f, 0), put32(f, off[i]);
        fputs(m[i].name, f);
    }
    unsigned long cd_size = (unsigned long)ftell(f) - cd;
    put32(f, 0x06054b50), put16(f, 0), put16(f, 0), put16(f, (unsigned)n), put16(f, (unsigned)n);
    put32(f, cd_size), put32(f, cd), put16(f, 0);
    fclose(f);
    free(off), free(crc);
}

// What to change while copying a dump: one member made NaN at element 3, one dropped, one
// reshaped to its first half along the last axis.
typedef struct {
    const char *nan, *drop, *halve;
} edit;

static void copy_dump(const char *src, const char *dst, edit e) {
    g4_npz *z;
    CHECK_MSG(g4_npz_open(src, &z) == G4_OK, "%s", g4_error());
    const int n = g4_npz_count(z);
    member *m = g4_calloc((size_t)n, sizeof *m);
    int k = 0;
    for (int i = 0; i < n; i++) {
        const g4_array *a;
        CHECK(g4_npz_get_index(z, i, &a) == G4_OK);
        if (e.drop && !strcmp(a->name, e.drop)) continue;
        if (e.halve && !strcmp(a->name, e.halve)) {
            g4_array h = *a;
            int64_t shape[G4_MAX_DIMS];
            memcpy(shape, a->shape, sizeof shape);
            const int64_t last = a->shape[a->ndim - 1], rows = (int64_t)a->numel / last;
            const size_t es = (size_t)(a->nbytes / a->numel);
            shape[a->ndim - 1] = last / 2;
            h.numel = (uint64_t)(rows * (last / 2));
            h.nbytes = h.numel * es;
            h.data = g4_malloc((size_t)h.nbytes);
            for (int64_t r = 0; r < rows; r++)
                memcpy((uint8_t *)h.data + (size_t)r * (size_t)(last / 2) * es,
                       (const uint8_t *)a->data + (size_t)r * (size_t)last * es,
                       (size_t)(last / 2) * es);
            m[k++] = npy_of(&h, a->ndim, shape);
            free(h.data);
            continue;
        }
        m[k] = npy_of(a, -1, NULL);
        if (e.nan && !strcmp(a->name, e.nan)) { // element 3 of the .npy's data
            uint8_t *data = m[k].bytes + m[k].n - (size_t)a->nbytes;
            if (a->dtype == G4_DT_DOUBLE) {
                double v = NAN;
                memcpy(data + 3 * 8, &v, 8);
            } else {
                float v = NAN;
                memcpy(data + 3 * 4, &v, 4);
            }
        }
        k++;
    }
    write_zip(dst, m, k);
    for (int i = 0; i < k; i++) free(m[i].name), free(m[i].bytes);
    free(m);
    g4_npz_close(z);
}

// Runs compare; returns its exit code, stdout and stderr in the files out / err.
static int compare(const char *ref, const char *tol, const char *out, const char *err) {
    return g4t_sh("'%s' compare '%s/tiny2/package' '%s' %s%s >'%s' 2>'%s'", g4cu, fixtures, ref,
                  tol ? "--tol-from " : "", tol ? tol : "", out, err);
}

static int has(const char *file, const char *text) {
    return g4t_sh("grep -qF -- \"%s\" '%s'", text, file) == 0;
}

static int one_line(const char *file) {
    return g4t_sh("[ $(wc -l <'%s') -eq 1 ]", file) == 0;
}

int main(void) {
    g4cu = g4t_env("G4CU");
    fixtures = g4t_env("G4_FIXTURES");
    char *tmp = g4t_tmpdir();
    char *ref = g4_sprintf("%s/refdumps/tiny2/float64/len7.npz", fixtures);
    char *tol = g4_sprintf("%s/refdumps/tiny2/len7.npz", fixtures);
    char *tol40 = g4_sprintf("%s/refdumps/tiny2/len40.npz", fixtures);
    char *out = g4_sprintf("%s/out", tmp), *err = g4_sprintf("%s/err", tmp);
    char *p = g4_sprintf("%s/x.npz", tmp);

    // The control: the unbroken pair, and the pair rewritten unchanged by this writer.
    CHECK_INT(compare(ref, tol, out, err), 0);
    CHECK(has(out, "all within tolerance"));
    copy_dump(ref, p, (edit){0});
    CHECK_INT(compare(p, tol, out, err), 0);

    // NaN in the reference: exit 1, named (with and without a tolerance dump).
    copy_dump(ref, p, (edit){.nan = "logits"});
    CHECK_INT(compare(p, tol, out, err), 1);
    CHECK_MSG(has(out, "FAILED: the reference's 'logits' has 1 NaN/Inf values"), "compare said:");
    CHECK(has(out, "(1 non-finite in the reference)"));
    CHECK_INT(compare(p, NULL, out, err), 1);
    CHECK(has(out, "FAILED: the reference's 'logits' has 1 NaN/Inf values"));
    copy_dump(ref, p, (edit){.nan = "layer_3"});
    CHECK_INT(compare(p, NULL, out, err), 1);
    CHECK(has(out, "FAILED: the reference's 'layer_3' has 1 NaN/Inf values"));

    // --tol-from dumps that are not the same case: refused with one line.
    CHECK_INT(compare(ref, tol40, out, err), 1);
    CHECK(one_line(err) && has(err, "its input_ids (40 tokens) are not"));
    copy_dump(tol, p, (edit){.halve = "layer_2"}); // same ids, another shape: another model
    CHECK_INT(compare(ref, p, out, err), 1);
    CHECK(one_line(err) &&
          has(err, "tensor 'layer_2' is [7, 40] there but [7, 80] in the reference"));
    copy_dump(tol, p, (edit){.drop = "q_2"});
    CHECK_INT(compare(ref, p, out, err), 1);
    CHECK(one_line(err) && has(err, "no tensor 'q_2' (the reference has it)"));
    copy_dump(tol, p, (edit){.nan = "layer_2"});
    CHECK_INT(compare(ref, p, out, err), 1);
    CHECK(one_line(err) && has(err, "tensor 'layer_2' has 1 NaN/Inf values"));
    // an fp32 tolerance dump needs a float64 reference
    CHECK_INT(compare(tol, tol, out, err), 1);
    CHECK(one_line(err) && has(err, "a float32 tolerance dump needs a float64 reference"));
    if (g4t_failures) g4t_sh("cat '%s' '%s' >&2", out, err);

    free(ref), free(tol), free(tol40), free(out), free(err), free(p);
    g4t_rmtree(tmp);
    return g4t_finish("test_compare_checks");
}
