// test_fidelity_readers.c: fidelity/npy.h (.npy, .npz) on files written by numpy
// (tests/fixtures/readers, made by tools/python/make_reader_fixtures.py), checked value by value
// against the script's plain-text sidecar expected.txt (floats as exact hex) or its generator
// formula; the .npy writer checked byte for byte against numpy's own files; then malformed files
// this test writes itself (truncated at every length, bad magic, wrong headers, corrupt zip data)
// and seeded random mutations, each of which must give one error line naming the file.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fidelity/npy.h"
#include "tests/test_util.h"

static char fixtures[4096];
static char *tmpdir;

static char *fx(const char *name) {
    return g4_sprintf("%s/%s", fixtures, name);
}

static uint8_t *slurp(const char *path, size_t *n) {
    char *d = NULL;
    if (g4_read_file(path, &d, n) != G4_OK) {
        fprintf(stderr, "FAIL cannot read %s: %s\n", path, g4_error());
        exit(1);
    }
    return (uint8_t *)d;
}

static char *write_tmp(const char *name, const void *bytes, size_t n) {
    char *p = g4_path_join(tmpdir, name);
    if (g4_write_file_atomic(p, bytes, n) != G4_OK) {
        fprintf(stderr, "FAIL cannot write %s: %s\n", p, g4_error());
        exit(1);
    }
    return p;
}

// The error contract: one non-empty line that names the file (or the name given for errors).
static int one_line_naming(const char *err, const char *path) {
    return err[0] && !strchr(err, '\n') && strstr(err, path) != NULL;
}

#define CHECK_ERR(rc, path, substr)                                                                \
    do {                                                                                           \
        const char *e_ = g4_error();                                                               \
        CHECK_MSG((rc) == G4_EUSER && one_line_naming(e_, (path)) && strstr(e_, (substr)),         \
                  "rc %d, error '%s' (wanted one line naming %s with '%s')", (rc), e_, (path),     \
                  (substr));                                                                       \
    } while (0)

// --- values against the sidecar ---------------------------------------------------------------

static int64_t raw_int(const g4_tensor *t, uint64_t i) {
    const uint8_t *p = t->data + i * (uint64_t)(g4_dtype_bits(t->dtype) / 8);
    switch (t->dtype) {
    case G4_DT_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    case G4_DT_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default:
        return *p; // uint8, bool
    }
}

static int is_float(int dtype) {
    return dtype == G4_DT_FLOAT || dtype == G4_DT_FLOAT16 || dtype == G4_DT_BFLOAT16 ||
           dtype == G4_DT_DOUBLE;
}

// Checks tensor t against one sidecar line's dtype, shape, sum and values.
static void check_against_line(const g4_tensor *t, const char *where, char *dtype, char *shape,
                               char *sum, char *values) {
    CHECK_MSG(!strcmp(g4_dtype_name(t->dtype), dtype), "%s: dtype %s, expected %s", where,
              g4_dtype_name(t->dtype), dtype);
    int nd = 0;
    int64_t dims[G4_MAX_DIMS];
    if (strcmp(shape, "()")) {
        for (char *s = strtok(shape, ","); s && nd < G4_MAX_DIMS; s = strtok(NULL, ","))
            dims[nd++] = strtoll(s, NULL, 10);
    }
    int shape_ok = t->ndim == nd;
    uint64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        shape_ok = shape_ok && t->dims[i] == dims[i];
        numel *= (uint64_t)dims[i];
    }
    CHECK_MSG(shape_ok && t->numel == numel,
              "%s: shape/numel mismatch (ndim %d vs %d, numel %llu "
              "vs %llu)",
              where, t->ndim, nd, (unsigned long long)t->numel, (unsigned long long)numel);
    if (!shape_ok || t->numel != numel) return;
    if (strcmp(sum, "-")) {
        uint64_t s = 0; // wrapping sum, as numpy's int64 sum
        for (uint64_t i = 0; i < t->numel; i++) s += (uint64_t)raw_int(t, i);
        CHECK_MSG((int64_t)s == strtoll(sum, NULL, 10), "%s: sum %lld, expected %s", where,
                  (long long)(int64_t)s, sum);
    }
    if (!strncmp(values, "formula:", 8)) {
        CHECK_MSG(!strcmp(values + 8, "u8mod") && t->dtype == G4_DT_UINT8, "%s: formula %s", where,
                  values);
        uint64_t bad = 0;
        for (uint64_t i = 0; i < t->numel; i++)
            bad += raw_int(t, i) != (int64_t)((7 * i + 3) % 256);
        CHECK_MSG(bad == 0, "%s: %llu elements differ from (7i+3)%%256", where,
                  (unsigned long long)bad);
        return;
    }
    uint64_t i = 0, bad = 0;
    char *save = NULL;
    for (char *v = strtok_r(values, " ", &save); v; v = strtok_r(NULL, " ", &save), i++) {
        if (i >= t->numel) break;
        if (is_float(t->dtype)) {
            double want = strtod(v, NULL), got = g4_tensor_get(t, i);
            int ok = isnan(want) ? isnan(got) : (got == want && signbit(got) == signbit(want));
            if (!ok && bad++ < 3)
                fprintf(stderr, "  %s[%llu] = %a, expected %a\n", where, (unsigned long long)i, got,
                        want);
        } else {
            long long want = strtoll(v, NULL, 10);
            if (raw_int(t, i) != want && bad++ < 3)
                fprintf(stderr, "  %s[%llu] = %lld, expected %lld\n", where, (unsigned long long)i,
                        (long long)raw_int(t, i), want);
        }
    }
    CHECK_MSG(i == t->numel && bad == 0, "%s: %llu values listed for %llu elements, %llu differ",
              where, (unsigned long long)i, (unsigned long long)t->numel, (unsigned long long)bad);
}

static void test_sidecar(void) {
    char *path = fx("expected.txt");
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    free(path);
    if (!f) return;
    static char line[1 << 16];
    int n_lines = 0, n_npy = 0, n_npz = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = 0;
        char *save = NULL;
        char *file = strtok_r(line, "\t", &save), *member = strtok_r(NULL, "\t", &save);
        char *dtype = strtok_r(NULL, "\t", &save), *shape = strtok_r(NULL, "\t", &save);
        char *sum = strtok_r(NULL, "\t", &save), *values = strtok_r(NULL, "\t", &save);
        if (!values) values = (char *)"";
        if (!sum) continue;
        n_lines++;
        char *fp = fx(file);
        char where[256];
        snprintf(where, sizeof where, "%s:%s", file, member);
        size_t fl = strlen(file);
        if (fl > 4 && !strcmp(file + fl - 4, ".npy")) {
            g4_array a;
            int rc = g4_npy_read(fp, &a);
            CHECK_MSG(rc == G4_OK, "%s: %s", where, g4_error());
            if (rc == G4_OK) {
                g4_tensor t = g4_array_view(&a);
                check_against_line(&t, where, dtype, shape, sum, values);
                n_npy++;
            }
            g4_array_free(&a);
        } else if (fl > 4 && !strcmp(file + fl - 4, ".npz")) {
            g4_npz *z;
            int rc = g4_npz_open(fp, &z);
            CHECK_MSG(rc == G4_OK, "%s: %s", where, g4_error());
            if (rc == G4_OK) {
                const g4_array *a;
                rc = g4_npz_get(z, member, &a);
                CHECK_MSG(rc == G4_OK, "%s: %s", where, g4_error());
                if (rc == G4_OK) {
                    CHECK(!strcmp(a->name, member));
                    g4_tensor t = g4_array_view(a);
                    check_against_line(&t, where, dtype, shape, sum, values);
                    n_npz++;
                }
                g4_npz_close(z);
            }
        } else {
            CHECK_MSG(0, "%s: expected a .npy or .npz file", where);
        }
        free(fp);
    }
    fclose(f);
    printf("sidecar: %d arrays (%d .npy, %d .npz members)\n", n_lines, n_npy, n_npz);
    CHECK(n_lines >= 24 && n_npy >= 6 && n_npz >= 18);
}

// --- npz API: names, order, suffixes, missing members ----------------------------------------

static void test_npz_api(void) {
    // np.savez stores keyword arrays first, then the positional ones as arr_<i>
    static const char *want[] = {"x", "ids", "big", "scalar", "mask", "h", "layer.0", "arr_0"};
    for (int k = 0; k < 2; k++) {
        char *p = fx(k ? "deflated.npz" : "stored.npz");
        g4_npz *z;
        int rc = g4_npz_open(p, &z);
        CHECK_MSG(rc == G4_OK, "%s", g4_error());
        if (rc) {
            free(p);
            continue;
        }
        CHECK_INT(g4_npz_count(z), 8);
        for (int i = 0; i < 8 && i < g4_npz_count(z); i++)
            CHECK_MSG(!strcmp(g4_npz_name(z, i), want[i]), "member %d is %s", i, g4_npz_name(z, i));
        CHECK_INT(g4_npz_find(z, "x"), 0);
        CHECK_INT(g4_npz_find(z, "x.npy"), 0);
        CHECK_INT(g4_npz_find(z, "layer.0.npy"), 6);
        CHECK_INT(g4_npz_find(z, "arr_0"), 7);
        CHECK_INT(g4_npz_find(z, "nope"), -1);
        const g4_array *a1, *a2;
        CHECK(g4_npz_get(z, "ids.npy", &a1) == G4_OK && g4_npz_get(z, "ids", &a2) == G4_OK &&
              a1 == a2 && a1->dtype == G4_DT_INT64);
        const g4_array *s;
        CHECK(g4_npz_get(z, "scalar", &s) == G4_OK && s->ndim == 0 && s->numel == 1 &&
              s->nbytes == 8);
        float buf[6];
        const g4_array *h;
        if (g4_npz_get(z, "h", &h) == G4_OK) {
            g4_array_to_f32(h, buf); // fp16 -> f32 is exact
            uint16_t h0;
            memcpy(&h0, h->data, 2);
            CHECK(buf[0] == g4_f16_to_f32(h0));
        }
        rc = g4_npz_get(z, "layer_99", &a1);
        CHECK_ERR(rc, p, "no member 'layer_99'");
        g4_npz_close(z);
        free(p);
    }
    // a .npy is not a zip
    char *p = fx("f32_2d.npy");
    g4_npz *z;
    CHECK_ERR(g4_npz_open(p, &z), p, "end-of-central-directory");
    free(p);
    p = fx("no_such_file.npz");
    CHECK_ERR(g4_npz_open(p, &z), p, "cannot open");
    free(p);
}

// --- .npy writer: byte-identical to numpy's np.save ------------------------------------------

static void test_npy_writer(void) {
    float f[6];
    for (int i = 0; i < 6; i++) f[i] = (float)i * 0.5f - 1.0f;
    int32_t i32[4];
    for (int i = 0; i < 4; i++) i32[i] = i * i - 3;
    int64_t i64 = -123456789012LL;
    struct {
        const char *name;
        int dtype, ndim;
        int64_t shape[2];
        const void *data;
    } cases[] = {
        {"w_f32.npy", G4_DT_FLOAT, 2, {2, 3}, f},
        {"w_i32.npy", G4_DT_INT32, 1, {4, 0}, i32},
        {"w_i64.npy", G4_DT_INT64, 0, {0, 0}, &i64},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *ours = g4_path_join(tmpdir, cases[c].name), *ref = fx(cases[c].name);
        int rc = g4_npy_write(ours, cases[c].dtype, cases[c].ndim, cases[c].shape, cases[c].data);
        CHECK_MSG(rc == G4_OK, "%s", g4_error());
        size_t na, nb;
        uint8_t *a = slurp(ours, &na), *b = slurp(ref, &nb);
        CHECK_MSG(na == nb && !memcmp(a, b, na), "%s: our bytes (%zu) differ from numpy's (%zu)",
                  cases[c].name, na, nb);
        g4_array back;
        rc = g4_npy_read(ours, &back);
        CHECK(rc == G4_OK && back.dtype == cases[c].dtype && back.ndim == cases[c].ndim &&
              strlen(back.name) + 4 == strlen(cases[c].name) &&
              !strncmp(back.name, cases[c].name, strlen(back.name)) &&
              !memcmp(back.data, cases[c].data, back.nbytes));
        g4_array_free(&back);
        free(a);
        free(b);
        free(ours);
        free(ref);
    }
    // Only float32/int32/int64; a bad dtype is an internal (caller) error, not a crash.
    char *p = g4_path_join(tmpdir, "bad.npy");
    CHECK(g4_npy_write(p, G4_DT_FLOAT16, 1, (int64_t[]){1}, f) == G4_EINTERNAL);
    CHECK(!g4_is_file(p));
    free(p);
}

// --- malformed .npy ---------------------------------------------------------------------------

// A .npy with the given version, header text (padded and terminated as numpy does) and nbytes
// of data (value bytes 0x11).
static uint8_t *make_npy(int major, const char *dict, size_t nbytes, size_t *n) {
    size_t pre = major == 1 ? 10 : 12, hl = strlen(dict) + 1;
    size_t total = (pre + hl + 63) / 64 * 64;
    hl = total - pre;
    uint8_t *b = g4_malloc(total + nbytes);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (uint8_t)major;
    b[7] = 0;
    b[8] = (uint8_t)hl;
    b[9] = (uint8_t)(hl >> 8);
    if (major != 1) b[10] = b[11] = 0;
    memset(b + pre, ' ', hl);
    memcpy(b + pre, dict, strlen(dict));
    b[total - 1] = '\n';
    memset(b + total, 0x11, nbytes);
    *n = total + nbytes;
    return b;
}

static void test_bad_npy(void) {
    // every truncation of a valid file fails cleanly
    char *src = fx("f32_2d.npy");
    size_t n;
    uint8_t *good = slurp(src, &n);
    free(src);
    int trunc_ok = 1;
    for (size_t k = 0; k < n; k++) {
        g4_array a;
        int rc = g4_npy_parse(good, k, "cut.npy", "cut", &a);
        if (rc != G4_EUSER || !one_line_naming(g4_error(), "cut.npy")) {
            trunc_ok = 0;
            fprintf(stderr, "  truncation at %zu: rc %d '%s'\n", k, rc, g4_error());
            g4_array_free(&a);
            break;
        }
    }
    CHECK_MSG(trunc_ok, "every truncation of f32_2d.npy must fail with one line");
    // ... and through a file, the error names the path
    char *p = write_tmp("trunc.npy", good, n - 7);
    g4_array a;
    CHECK_ERR(g4_npy_read(p, &a), p, "truncated");
    free(p);
    uint8_t bad_magic[200];
    memcpy(bad_magic, good, n);
    bad_magic[1] = 'M';
    p = write_tmp("magic.npy", bad_magic, n);
    CHECK_ERR(g4_npy_read(p, &a), p, "magic");
    free(p);
    free(good);

    p = fx("fortran.npy");
    CHECK_ERR(g4_npy_read(p, &a), p, "Fortran order");
    free(p);

    static const struct {
        int major;
        const char *dict;
        size_t nbytes;
        const char *err;
    } bad[] = {
        {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, "big-endian"},
        {1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, "not supported"},
        {1, "{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }", 4, "'<i2' is not"},
        {1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, "structured"},
        {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, "Fortran"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 5), }", 60, "truncated"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12, "trailing"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 4, "dimension"},
        {1, "{'descr': '<f4', 'fortran_order': False, }", 4, "exactly once"},
        {1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4,
         "exactly once"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1, }", 4,
         "unknown key"},
        {1, "{'descr': '<f4', 'fortran_order': maybe, 'shape': (1,), }", 4, "True or False"},
        {1, "['descr', '<f4']", 4, "'{'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,2,3,4,5,6,7,8,9), }", 4,
         "more than 8"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 4,
         "below 2^59"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1 << 40, 1 << 40), }", 4,
         "',' or ')'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (576460752303423487, 64), }", 4,
         "overflows"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk", 8, "only spaces"},
        {4, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, "version 4.0"},
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        size_t len;
        uint8_t *b = make_npy(bad[c].major, bad[c].dict, bad[c].nbytes, &len);
        int rc = g4_npy_parse(b, len, "bad.npy", "bad", &a);
        CHECK_ERR(rc, "bad.npy", bad[c].err);
        if (rc == G4_OK) g4_array_free(&a);
        free(b);
    }
    // the same header in versions 1, 2 and 3 parses; a header length past the end does not
    for (int v = 1; v <= 3; v++) {
        size_t len;
        uint8_t *b = make_npy(v, "{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (3L,)}",
                              12, &len);
        int rc = g4_npy_parse(b, len, "ok.npy", "ok", &a);
        CHECK_MSG(rc == G4_OK && a.ndim == 1 && a.shape[0] == 3 && a.dtype == G4_DT_INT32,
                  "version %d: %s", v, g4_error());
        if (rc == G4_OK) g4_array_free(&a);
        b[8] = 0xff;
        b[9] = 0xff;
        CHECK_ERR(g4_npy_parse(b, len, "hl.npy", "hl", &a), "hl.npy", "runs past the end");
        free(b);
    }
}

// --- malformed .npz ---------------------------------------------------------------------------

// Opens bytes as an archive and loads every member; returns the first error code (0 if all ok).
static int npz_load_all(const uint8_t *b, size_t n, const char *name) {
    g4_npz *z;
    int rc = g4_npz_parse(b, n, name, &z);
    if (rc) return rc;
    for (int i = 0; i < g4_npz_count(z) && !rc; i++) {
        const g4_array *a;
        rc = g4_npz_get_index(z, i, &a);
    }
    g4_npz_close(z);
    return rc;
}

// Offset of the first central-directory entry whose name is `name` (searching from the end
// record's directory offset); 0 when not found.
static size_t cdir_entry(const uint8_t *b, size_t n, const char *name) {
    for (size_t i = 0; i + 46 < n; i++)
        if (!memcmp(b + i, "PK\1\2", 4) && b[i + 28] == strlen(name) &&
            !memcmp(b + i + 46, name, strlen(name)))
            return i;
    return 0;
}

static void test_bad_npz(void) {
    const char *names[] = {"stored.npz", "deflated.npz", "zip64.npz"};
    for (int k = 0; k < 3; k++) {
        char *p = fx(names[k]);
        size_t n;
        uint8_t *good = slurp(p, &n);
        free(p);
        CHECK_MSG(npz_load_all(good, n, names[k]) == G4_OK, "%s: %s", names[k], g4_error());
        // truncations: every length for the small archives, a stride for the 72 kB one
        size_t step = n > 10000 ? 97 : 1;
        int ok = 1;
        for (size_t cut = 0; cut < n && ok; cut += step) {
            int rc = npz_load_all(good, cut, "cut.npz");
            if (rc != G4_EUSER || !one_line_naming(g4_error(), "cut.npz")) {
                fprintf(stderr, "  %s cut at %zu: rc %d '%s'\n", names[k], cut, rc, g4_error());
                ok = 0;
            }
        }
        CHECK_MSG(ok, "%s: every truncation must fail with one line", names[k]);
        free(good);
    }

    // stored.npz: a flipped data byte of member x -> CRC error on x only
    char *p = fx("stored.npz");
    size_t n;
    uint8_t *b = slurp(p, &n);
    free(p);
    size_t cd = cdir_entry(b, n, "x.npy");
    CHECK(cd != 0);
    if (cd) {
        uint32_t off = (uint32_t)b[cd + 42] | (uint32_t)b[cd + 43] << 8 |
                       (uint32_t)b[cd + 44] << 16 | (uint32_t)b[cd + 45] << 24;
        size_t data =
            off + 30 + b[off + 26] + (b[off + 27] << 8) + b[off + 28] + (b[off + 29] << 8);
        uint8_t *m = g4_malloc(n);
        memcpy(m, b, n);
        m[data + 130] ^= 0x40;
        char *path = write_tmp("crc.npz", m, n);
        g4_npz *z;
        int rc = g4_npz_open(path, &z);
        CHECK_MSG(rc == G4_OK, "%s", g4_error());
        if (rc == G4_OK) {
            const g4_array *a;
            CHECK_ERR(g4_npz_get(z, "x", &a), path, "CRC-32");
            CHECK(g4_npz_get(z, "ids", &a) == G4_OK);
            g4_npz_close(z);
        }
        free(path);
        // unsupported compression method in the directory -> error at open
        memcpy(m, b, n);
        m[cd + 10] = 12; // bzip2
        path = write_tmp("method.npz", m, n);
        CHECK_ERR(g4_npz_open(path, &z), path, "compression method 12");
        free(path);
        // encrypted flag
        memcpy(m, b, n);
        m[cd + 8] |= 1;
        path = write_tmp("enc.npz", m, n);
        CHECK_ERR(g4_npz_open(path, &z), path, "encrypted");
        free(path);
        // local header offset pointing at garbage
        memcpy(m, b, n);
        m[cd + 42] ^= 0x5;
        CHECK_ERR(npz_load_all(m, n, "local.npz"), "local.npz", "x.npy");
        // two members with the same name
        memcpy(m, b, n);
        size_t cd2 = cdir_entry(b, n, "ids.npy");
        if (cd2) {
            memcpy(m + cd2 + 46, "x.npy\0\0", 7);
            m[cd2 + 28] = 5;
            CHECK_ERR(npz_load_all(m, n, "dup.npz"), "dup.npz", "");
        }
        free(m);
    }
    free(b);

    // deflated.npz: corrupt deflate data -> zlib or CRC error, never a crash
    p = fx("deflated.npz");
    b = slurp(p, &n);
    free(p);
    cd = cdir_entry(b, n, "x.npy");
    CHECK(cd != 0);
    if (cd) {
        uint32_t off = (uint32_t)b[cd + 42] | (uint32_t)b[cd + 43] << 8;
        size_t data = off + 30 + b[off + 26] + b[off + 28];
        int all_fail = 1;
        for (int k = 0; k < 16; k++) {
            uint8_t *m = g4_malloc(n);
            memcpy(m, b, n);
            m[data + 3 + k * 5] ^= (uint8_t)(0x5a + k);
            g4_npz *z;
            int rc = g4_npz_parse(m, n, "inflate.npz", &z);
            if (rc == G4_OK) {
                const g4_array *a;
                rc = g4_npz_get(z, "x", &a);
                g4_npz_close(z);
            }
            if (rc != G4_EUSER || !one_line_naming(g4_error(), "inflate.npz")) all_fail = 0;
            free(m);
        }
        CHECK_MSG(all_fail, "corrupt deflate data must give a one-line error");
    }
    free(b);
}

// --- seeded random mutations: never crash, always one line ----------------------------------

static void test_mutations(void) {
    const char *names[] = {"f32_2d.npy", "deflated.npz", "zip64.npz"};
    unsigned long long seed = 0x5eed0001ull;
    int bad_contract = 0, total = 0, accepted = 0;
    for (int k = 0; k < 3; k++) {
        char *p = fx(names[k]);
        size_t n;
        uint8_t *good = slurp(p, &n);
        free(p);
        uint8_t *m = g4_malloc(n);
        for (int it = 0; it < 1500; it++) {
            memcpy(m, good, n);
            int flips = 1 + (int)(g4t_rand_u64(&seed) % 4);
            for (int f = 0; f < flips; f++) {
                size_t at = (size_t)(g4t_rand_u64(&seed) % n);
                // bias towards headers, where the structure lives
                if (g4t_rand_u64(&seed) % 2) at %= (n < 160 ? n : 160);
                m[at] = (uint8_t)g4t_rand_u64(&seed);
            }
            int rc;
            if (k == 0) {
                g4_array a;
                rc = g4_npy_parse(m, n, "mut.npy", "mut", &a);
                if (rc == G4_OK) g4_array_free(&a);
            } else {
                rc = npz_load_all(m, n, "mut.npz");
            }
            total++;
            if (rc == G4_OK)
                accepted++;
            else if (rc != G4_EUSER || !one_line_naming(g4_error(), "mut.")) {
                if (bad_contract++ < 3)
                    fprintf(stderr, "  %s mutation %d: rc %d '%s'\n", names[k], it, rc, g4_error());
            }
        }
        free(m);
        free(good);
    }
    printf("mutations: %d tried, %d still valid, %d broke the error contract\n", total, accepted,
           bad_contract);
    CHECK(bad_contract == 0);
    CHECK(accepted < total); // the mutations did reach the parsers' checks
}

int main(void) {
    snprintf(fixtures, sizeof fixtures, "%s/readers", g4t_env("G4_FIXTURES"));
    tmpdir = g4t_tmpdir();
    test_sidecar();
    test_npz_api();
    test_npy_writer();
    test_bad_npy();
    test_bad_npz();
    test_mutations();
    g4t_rmtree(tmpdir);
    return g4t_finish("test_fidelity_readers");
}
