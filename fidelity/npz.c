// npz.c: the .npz (zip) layer of npy.h: central directory, zip64, stored/deflated members.
//
// Layout read (PKWARE APPNOTE 6.3, the subset Python's zipfile writes):
//   [local header 30 B + name + extra][data] ... [central directory entries 46 B + name +
//   extra + comment] ... [zip64 end record 56 B][zip64 locator 20 B] [end record 22 B + comment]
// Sizes and offsets come from the central directory (the local header is used only to find
// where the data starts, since numpy's local headers may carry 0xffffffff and a zip64 extra).
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#include "fidelity/npy.h"
#include "fidelity/printable.h"

#define ZIP_EOCD_SIG   0x06054b50u
#define ZIP64_LOC_SIG  0x07064b50u
#define ZIP64_EOCD_SIG 0x06064b50u
#define ZIP_CDIR_SIG   0x02014b50u
#define ZIP_LOCAL_SIG  0x04034b50u
#define ZIP_EOCD_LEN   22u
#define ZIP64_LOC_LEN  20u
#define ZIP64_EOCD_LEN 56u
#define ZIP_CDIR_LEN   46u
#define ZIP_LOCAL_LEN  30u
// Deflate cannot expand data by more than about 1032:1; a larger claimed ratio is a bad or
// hostile archive, rejected before allocating.
#define ZIP_MAX_RATIO 1032u

typedef struct {
    char *zip_name; // as stored ("layer_0.npy"), made printable: used only in messages
    char *name;     // without ".npy"
    int method;     // 0 stored, 8 deflated
    uint32_t crc;
    uint64_t csize, usize, local_off;
    int loaded;
    g4_array arr;
} npz_member;

struct g4_npz {
    char *path;
    g4_mapped_file file; // when opened from a path
    const uint8_t *bytes;
    uint64_t size;
    uint64_t data_end; // first byte of the central directory: member data must end before it
    int n;
    npz_member *m;
    g4_strmap index; // name without ".npy" -> member
};

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) {
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

void g4_npz_close(g4_npz *z) {
    if (!z) return;
    for (int i = 0; i < z->n; i++) {
        free(z->m[i].zip_name);
        free(z->m[i].name);
        g4_array_free(&z->m[i].arr);
    }
    free(z->m);
    g4_strmap_free(&z->index);
    if (z->file.path) g4_unmap_file(&z->file);
    free(z->path);
    free(z);
}

// Finds the end-of-central-directory record: the last signature whose comment length reaches
// exactly the end of the file.
static int find_eocd(const g4_npz *z, uint64_t *pos) {
    if (z->size < ZIP_EOCD_LEN)
        return g4_fail(G4_EUSER,
                       "%s: %llu bytes: too short for a zip archive (.npz); "
                       "expected an end-of-central-directory record",
                       z->path, (unsigned long long)z->size);
    uint64_t lo = z->size > ZIP_EOCD_LEN + 0xffffu ? z->size - ZIP_EOCD_LEN - 0xffffu : 0;
    for (uint64_t p = z->size - ZIP_EOCD_LEN + 1; p-- > lo;) {
        const uint8_t *e = z->bytes + p;
        if (rd32(e) == ZIP_EOCD_SIG && p + ZIP_EOCD_LEN + rd16(e + 20) == z->size) {
            *pos = p;
            return G4_OK;
        }
    }
    return g4_fail(G4_EUSER,
                   "%s: no zip end-of-central-directory record: not a .npz archive "
                   "or truncated",
                   z->path);
}

// Reads the zip64 fields of a central-directory entry's extra block, in APPNOTE order, for
// each 32-bit field that holds 0xffffffff.
static int read_zip64_extra(const g4_npz *z, const char *mname, const uint8_t *extra, uint32_t elen,
                            uint64_t *usize, uint64_t *csize, uint64_t *off) {
    uint32_t k = 0;
    while (k + 4 <= elen) {
        uint16_t id = rd16(extra + k), len = rd16(extra + k + 2);
        if ((uint64_t)k + 4 + len > elen)
            return g4_fail(G4_EUSER, "%s: member '%s': extra field runs past its block", z->path,
                           mname);
        if (id == 0x0001) {
            const uint8_t *f = extra + k + 4;
            uint32_t need = (*usize == 0xffffffffu) * 8u + (*csize == 0xffffffffu) * 8u +
                            (*off == 0xffffffffu) * 8u;
            if (len < need)
                return g4_fail(G4_EUSER, "%s: member '%s': zip64 extra of %u bytes, expected %u",
                               z->path, mname, len, need);
            if (*usize == 0xffffffffu) *usize = rd64(f), f += 8;
            if (*csize == 0xffffffffu) *csize = rd64(f), f += 8;
            if (*off == 0xffffffffu) *off = rd64(f);
            return G4_OK;
        }
        k += 4u + len;
    }
    if (*usize == 0xffffffffu || *csize == 0xffffffffu || *off == 0xffffffffu)
        return g4_fail(G4_EUSER,
                       "%s: member '%s': size or offset 0xffffffff without a zip64 "
                       "extra field",
                       z->path, mname);
    return G4_OK;
}

static int parse_central_directory(g4_npz *z) {
    uint64_t eocd = 0;
    int rc = find_eocd(z, &eocd);
    if (rc) return rc;
    const uint8_t *e = z->bytes + eocd;
    uint64_t disk = rd16(e + 4), cd_disk = rd16(e + 6), n_disk = rd16(e + 8), n = rd16(e + 10);
    uint64_t cd_size = rd32(e + 12), cd_off = rd32(e + 16);
    uint64_t cd_limit = eocd; // the central directory ends before the record(s) after it
    if (n == 0xffffu || n_disk == 0xffffu || cd_size == 0xffffffffu || cd_off == 0xffffffffu) {
        // zip64: a locator right before the end record points at the zip64 end record.
        if (eocd < ZIP64_LOC_LEN || rd32(z->bytes + eocd - ZIP64_LOC_LEN) != ZIP64_LOC_SIG)
            return g4_fail(G4_EUSER,
                           "%s: end record has zip64 markers but no zip64 locator "
                           "before it",
                           z->path);
        uint64_t z64 = rd64(z->bytes + eocd - ZIP64_LOC_LEN + 8);
        if (z64 > eocd - ZIP64_LOC_LEN || eocd - ZIP64_LOC_LEN - z64 < ZIP64_EOCD_LEN ||
            rd32(z->bytes + z64) != ZIP64_EOCD_SIG)
            return g4_fail(G4_EUSER,
                           "%s: zip64 locator points at offset %llu, which holds no "
                           "zip64 end record",
                           z->path, (unsigned long long)z64);
        const uint8_t *e64 = z->bytes + z64;
        disk = rd32(e64 + 16);
        cd_disk = rd32(e64 + 20);
        n_disk = rd64(e64 + 24);
        n = rd64(e64 + 32);
        cd_size = rd64(e64 + 40);
        cd_off = rd64(e64 + 48);
        cd_limit = z64;
    }
    if (disk != 0 || cd_disk != 0 || n_disk != n)
        return g4_fail(G4_EUSER, "%s: multi-disk zip archive (disk %llu); expected one file",
                       z->path, (unsigned long long)disk);
    if (cd_off > cd_limit || cd_size > cd_limit - cd_off)
        return g4_fail(G4_EUSER,
                       "%s: central directory at %llu + %llu bytes runs past its end "
                       "record at %llu (truncated or not a plain zip)",
                       z->path, (unsigned long long)cd_off, (unsigned long long)cd_size,
                       (unsigned long long)cd_limit);
    if (n > cd_size / ZIP_CDIR_LEN || n > 0x7fffffffu)
        return g4_fail(G4_EUSER, "%s: %llu members cannot fit a %llu-byte central directory",
                       z->path, (unsigned long long)n, (unsigned long long)cd_size);
    z->data_end = cd_off;
    z->n = (int)n;
    z->m = g4_calloc(n ? (size_t)n : 1, sizeof *z->m);
    g4_strmap_init(&z->index, (size_t)n * 2 + 4);
    const uint8_t *p = z->bytes + cd_off, *end = p + cd_size;
    for (uint64_t i = 0; i < n; i++) {
        if (end - p < (ptrdiff_t)ZIP_CDIR_LEN || rd32(p) != ZIP_CDIR_SIG)
            return g4_fail(G4_EUSER,
                           "%s: central directory entry %llu: expected signature "
                           "PK\\1\\2 at offset %llu",
                           z->path, (unsigned long long)i, (unsigned long long)(p - z->bytes));
        uint16_t flags = rd16(p + 8), method = rd16(p + 10);
        uint32_t crc = rd32(p + 16);
        uint64_t csize = rd32(p + 20), usize = rd32(p + 24);
        uint32_t nlen = rd16(p + 28), elen = rd16(p + 30), clen = rd16(p + 32);
        uint64_t mdisk = rd16(p + 34), off = rd32(p + 42);
        if ((uint64_t)(end - p) < ZIP_CDIR_LEN + (uint64_t)nlen + elen + clen)
            return g4_fail(G4_EUSER,
                           "%s: central directory entry %llu: name/extra/comment run "
                           "past the directory",
                           z->path, (unsigned long long)i);
        const char *nm = (const char *)p + ZIP_CDIR_LEN;
        if (nlen == 0 || memchr(nm, 0, nlen))
            return g4_fail(G4_EUSER,
                           "%s: central directory entry %llu: empty name or a NUL in "
                           "the name",
                           z->path, (unsigned long long)i);
        npz_member *m = &z->m[i];
        char pn[96];
        m->zip_name = g4_strdup(g4_printable(nm, nlen, pn, sizeof pn));
        m->name = g4_strndup(nm, nlen >= 4 && !memcmp(nm + nlen - 4, ".npy", 4) ? nlen - 4 : nlen);
        rc = read_zip64_extra(z, m->zip_name, p + ZIP_CDIR_LEN + nlen, elen, &usize, &csize, &off);
        if (rc) return rc;
        if (mdisk != 0 && mdisk != 0xffffu)
            return g4_fail(G4_EUSER, "%s: member '%s' starts on disk %llu; expected one file",
                           z->path, m->zip_name, (unsigned long long)mdisk);
        if (flags & 1u)
            return g4_fail(G4_EUSER, "%s: member '%s' is encrypted; expected a plain archive",
                           z->path, m->zip_name);
        if (method != 0 && method != 8)
            return g4_fail(G4_EUSER,
                           "%s: member '%s' uses compression method %u; expected 0 "
                           "(stored) or 8 (deflated)",
                           z->path, m->zip_name, method);
        if (off >= cd_off || csize > cd_off - off)
            return g4_fail(G4_EUSER,
                           "%s: member '%s': data at %llu + %llu bytes overlaps the "
                           "central directory at %llu",
                           z->path, m->zip_name, (unsigned long long)off, (unsigned long long)csize,
                           (unsigned long long)cd_off);
        if ((method == 0 && usize != csize) || (method == 8 && usize / ZIP_MAX_RATIO > csize + 1))
            return g4_fail(G4_EUSER,
                           "%s: member '%s': %llu bytes from %llu compressed is not "
                           "possible for method %u",
                           z->path, m->zip_name, (unsigned long long)usize,
                           (unsigned long long)csize, method);
        m->method = method;
        m->crc = crc;
        m->csize = csize;
        m->usize = usize;
        m->local_off = off;
        if (!g4_strmap_put(&z->index, m->name, (int)i))
            return g4_fail(G4_EUSER, "%s: member '%s' appears twice", z->path, m->zip_name);
        p += ZIP_CDIR_LEN + nlen + elen + clen;
    }
    return G4_OK;
}

int g4_npz_parse(const uint8_t *bytes, size_t size, const char *path_for_errors, g4_npz **out) {
    *out = NULL;
    g4_npz *z = g4_calloc(1, sizeof *z);
    z->path = g4_strdup(path_for_errors);
    z->bytes = bytes;
    z->size = size;
    int rc = parse_central_directory(z);
    if (rc) {
        g4_npz_close(z);
        return rc;
    }
    *out = z;
    return G4_OK;
}

int g4_npz_open(const char *path, g4_npz **out) {
    *out = NULL;
    g4_mapped_file f;
    int rc = g4_map_file(path, &f);
    if (rc) return rc;
    static const uint8_t empty[1];
    rc = g4_npz_parse(f.data ? f.data : empty, (size_t)f.size, path, out);
    if (rc) {
        g4_unmap_file(&f);
        return rc;
    }
    (*out)->file = f;
    return G4_OK;
}

int g4_npz_count(const g4_npz *z) {
    return z->n;
}

const char *g4_npz_name(const g4_npz *z, int i) {
    G4_ASSERT(i >= 0 && i < z->n);
    return z->m[i].name;
}

int g4_npz_find(const g4_npz *z, const char *name) {
    size_t k = strlen(name);
    if (k >= 4 && !strcmp(name + k - 4, ".npy")) {
        char *base = g4_strndup(name, k - 4);
        int i = g4_strmap_get(&z->index, base);
        free(base);
        if (i >= 0) return i;
    }
    return g4_strmap_get(&z->index, name);
}

// Inflates a raw deflate stream of csize bytes into exactly usize bytes.
static int inflate_member(const g4_npz *z, const npz_member *m, const uint8_t *src, uint8_t *dst) {
    z_stream s;
    memset(&s, 0, sizeof s);
    if (inflateInit2(&s, -MAX_WBITS) != Z_OK)
        return g4_fail(G4_EINTERNAL, "%s: member '%s': zlib inflateInit2 failed", z->path,
                       m->zip_name);
    uint64_t in_left = m->csize, out_left = m->usize;
    s.next_in = (Bytef *)src;
    s.next_out = dst;
    int zr = Z_OK;
    while (zr == Z_OK) {
        // zlib counts in 32-bit uInt: feed at most 1 GiB per call.
        if (s.avail_in == 0 && in_left) {
            s.avail_in = (uInt)(in_left < (1u << 30) ? in_left : (1u << 30));
            in_left -= s.avail_in;
        }
        if (s.avail_out == 0 && out_left) {
            s.avail_out = (uInt)(out_left < (1u << 30) ? out_left : (1u << 30));
            out_left -= s.avail_out;
        }
        uInt before_in = s.avail_in, before_out = s.avail_out;
        zr = inflate(&s, Z_NO_FLUSH);
        if (zr == Z_BUF_ERROR && (before_in == s.avail_in && before_out == s.avail_out)) break;
        if (zr == Z_BUF_ERROR) zr = Z_OK;
    }
    uint64_t produced = m->usize - out_left - s.avail_out;
    inflateEnd(&s);
    if (zr != Z_STREAM_END)
        return g4_fail(G4_EUSER,
                       "%s: member '%s': deflate data is corrupt or truncated (zlib "
                       "%d after %llu of %llu bytes)",
                       z->path, m->zip_name, zr, (unsigned long long)produced,
                       (unsigned long long)m->usize);
    if (produced != m->usize)
        return g4_fail(G4_EUSER,
                       "%s: member '%s': inflated to %llu bytes, the directory says "
                       "%llu",
                       z->path, m->zip_name, (unsigned long long)produced,
                       (unsigned long long)m->usize);
    return G4_OK;
}

static int load_member(g4_npz *z, npz_member *m) {
    uint64_t off = m->local_off;
    if (off > z->data_end || z->data_end - off < ZIP_LOCAL_LEN ||
        rd32(z->bytes + off) != ZIP_LOCAL_SIG)
        return g4_fail(G4_EUSER, "%s: member '%s': no local header (PK\\3\\4) at offset %llu",
                       z->path, m->zip_name, (unsigned long long)off);
    const uint8_t *lh = z->bytes + off;
    uint64_t data = off + ZIP_LOCAL_LEN + rd16(lh + 26) + rd16(lh + 28);
    if (data > z->data_end || m->csize > z->data_end - data)
        return g4_fail(G4_EUSER,
                       "%s: member '%s': %llu data bytes at offset %llu run past the "
                       "central directory (truncated)",
                       z->path, m->zip_name, (unsigned long long)m->csize,
                       (unsigned long long)data);
    const uint8_t *src = z->bytes + data;
    uint8_t *buf = NULL;
    const uint8_t *raw = src;
    if (m->method == 8) {
        if (m->usize > SIZE_MAX / 2)
            return g4_fail(G4_EUSER, "%s: member '%s': %llu bytes is too large", z->path,
                           m->zip_name, (unsigned long long)m->usize);
        buf = g4_malloc(m->usize ? (size_t)m->usize : 1);
        int rc = inflate_member(z, m, src, buf);
        if (rc) {
            free(buf);
            return rc;
        }
        raw = buf;
    }
    // CRC-32 over the uncompressed bytes, in chunks (crc32's length is a uInt).
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t k = 0; k < m->usize;) {
        uInt c = (uInt)(m->usize - k < (1u << 30) ? m->usize - k : (1u << 30));
        crc = crc32(crc, raw + k, c);
        k += c;
    }
    if ((uint32_t)crc != m->crc) {
        free(buf);
        return g4_fail(G4_EUSER,
                       "%s: member '%s': CRC-32 %08x, the directory says %08x "
                       "(corrupt data)",
                       z->path, m->zip_name, (unsigned)crc, (unsigned)m->crc);
    }
    char *what = g4_sprintf("%s: member '%s'", z->path, m->zip_name);
    int rc = g4_npy_parse(raw, (size_t)m->usize, what, m->name, &m->arr);
    free(what);
    free(buf);
    if (rc) return rc;
    m->loaded = 1;
    return G4_OK;
}

int g4_npz_get_index(g4_npz *z, int i, const g4_array **out) {
    *out = NULL;
    G4_ASSERT(i >= 0 && i < z->n);
    npz_member *m = &z->m[i];
    if (!m->loaded) {
        int rc = load_member(z, m);
        if (rc) return rc;
    }
    *out = &m->arr;
    return G4_OK;
}

int g4_npz_get(g4_npz *z, const char *name, const g4_array **out) {
    *out = NULL;
    int i = g4_npz_find(z, name);
    if (i < 0)
        return g4_fail(G4_EUSER, "%s: no member '%s' in the archive (%d members)", z->path, name,
                       z->n);
    return g4_npz_get_index(z, i, out);
}
