// base.c: error buffer, checked allocation, file helpers (see base.h).
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static _Thread_local char g4_err_buf[1024];

int g4_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g4_err_buf, sizeof g4_err_buf, fmt, ap);
    va_end(ap);
    return code;
}

const char *g4_error(void) { return g4_err_buf; }

void g4_error_prefix(const char *fmt, ...) {
    char pre[512], old[sizeof g4_err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, g4_err_buf, sizeof old);
    size_t k = strlen(pre);
    if (k + 2 >= sizeof g4_err_buf) k = sizeof g4_err_buf - 3;
    memcpy(g4_err_buf, pre, k);
    memcpy(g4_err_buf + k, ": ", 2);
    size_t rest = sizeof g4_err_buf - k - 3;
    size_t n = strlen(old) < rest ? strlen(old) : rest;
    memcpy(g4_err_buf + k + 2, old, n);
    g4_err_buf[k + 2 + n] = 0;
}

void g4_assert_failed(const char *what, const char *file, int line) {
    fprintf(stderr, "g4cu: internal error: assertion '%s' failed at %s:%d\n", what, file, line);
    abort();
}

static void g4_oom(size_t n) {
    fprintf(stderr, "g4cu: out of host memory allocating %zu bytes\n", n);
    abort();
}

void *g4_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) g4_oom(n);
    return p;
}

void *g4_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) g4_oom(n * size);
    return p;
}

void *g4_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) g4_oom(n);
    return q;
}

char *g4_strdup(const char *s) { return g4_strndup(s, strlen(s)); }

char *g4_strndup(const char *s, size_t n) {
    char *d = g4_malloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *g4_sprintf(const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    G4_ASSERT(n >= 0);
    char *s = g4_malloc((size_t)n + 1);
    vsnprintf(s, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return s;
}

int g4_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a != 0 && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

int g4_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (b > UINT64_MAX - a) return 0;
    *out = a + b;
    return 1;
}

int g4_map_file(const char *path, g4_mapped_file *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return g4_fail(G4_EUSER, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return g4_fail(G4_EUSER, "%s: not a regular file", path);
    }
    out->size = (uint64_t)st.st_size;
    if (out->size > 0) {
        void *p = mmap(NULL, (size_t)out->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return g4_fail(G4_EUSER, "%s: mmap of %llu bytes failed: %s", path,
                           (unsigned long long)out->size, strerror(e));
        }
        out->data = p;
    }
    close(fd);
    out->path = g4_strdup(path);
    return G4_OK;
}

void g4_unmap_file(g4_mapped_file *m) {
    if (m->data) munmap((void *)m->data, (size_t)m->size);
    free(m->path);
    memset(m, 0, sizeof *m);
}

int g4_read_file(const char *path, char **data, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return g4_fail(G4_EUSER, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = g4_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = g4_realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return g4_fail(G4_EUSER, "%s: read error", path);
    }
    buf[n] = 0;
    *data = buf;
    if (size) *size = n;
    return G4_OK;
}

int g4_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int g4_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *g4_path_join(const char *dir, const char *name) {
    size_t n = strlen(dir);
    if (n > 0 && dir[n - 1] == '/') return g4_sprintf("%s%s", dir, name);
    return g4_sprintf("%s/%s", dir, name);
}

int g4_write_file_atomic(const char *path, const void *data, size_t size) {
    char *tmp = g4_sprintf("%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int rc = g4_fail(G4_EUSER, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    size_t put = size ? fwrite(data, 1, size, f) : 0;
    int bad = put != size;
    bad |= fflush(f) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int rc = g4_fail(G4_EUSER, "%s: write failed: %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    return G4_OK;
}

static uint64_t g4_hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

void g4_strmap_init(g4_strmap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap *= 2;
    m->keys = g4_calloc(cap, sizeof *m->keys);
    m->vals = g4_calloc(cap, sizeof *m->vals);
    m->cap = cap;
    m->n = 0;
}

void g4_strmap_free(g4_strmap *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static void g4_strmap_grow(g4_strmap *m) {
    g4_strmap big;
    g4_strmap_init(&big, m->cap);
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) g4_strmap_put(&big, m->keys[i], m->vals[i]);
    g4_strmap_free(m);
    *m = big;
}

int g4_strmap_put(g4_strmap *m, const char *key, int val) {
    if ((m->n + 1) * 2 > m->cap) g4_strmap_grow(m);
    size_t i = (size_t)g4_hash_str(key) & (m->cap - 1);
    while (m->keys[i]) {
        if (strcmp(m->keys[i], key) == 0) return 0;
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->n++;
    return 1;
}

int g4_strmap_get(const g4_strmap *m, const char *key) {
    if (!m->cap) return -1;
    size_t i = (size_t)g4_hash_str(key) & (m->cap - 1);
    while (m->keys[i]) {
        if (strcmp(m->keys[i], key) == 0) return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}
