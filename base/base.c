// base.c: error buffer, checked allocation, file helpers (see base.h).
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

void g4_error_rename(const char *from, const char *to) {
    const size_t nf = strlen(from), nt = strlen(to), cap = sizeof g4_err_buf;
    if (!nf) return;
    char old[sizeof g4_err_buf];
    memcpy(old, g4_err_buf, sizeof old);
    size_t k = 0;
    for (const char *p = old; *p && k + 1 < cap;) {
        const int hit = !strncmp(p, from, nf);
        const char *src = hit ? to : p;
        size_t n = hit ? nt : 1;
        if (n > cap - 1 - k) n = cap - 1 - k; // (cut at the buffer's end, as g4_fail does)
        memcpy(g4_err_buf + k, src, n);
        k += n;
        p += hit ? nf : 1;
    }
    g4_err_buf[k] = 0;
}

void g4_assert_failed(const char *what, const char *file, int line) {
    fprintf(stderr, "g4cu: internal error: assertion '%s' failed at %s:%d\n", what, file, line);
    abort();
}

void g4_require_failed(const char *cond, const char *file, int line, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "g4cu: internal error: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, ": requires %s (%s:%d)\n", cond, file, line);
    exit(2);
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

int g4_env_is(const char *name, const char *value) {
    const char *s = getenv(name);
    return s && strcmp(s, value) == 0;
}

int g4_env_int(const char *name, int def, int lo, int hi, int *out) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return G4_OK;
    char *end;
    errno = 0;
    const long x = strtol(v, &end, 10);
    if (*end || errno || x < lo || x > hi)
        return g4_fail(G4_EUSER, "%s '%s': expected an integer %d to %d", name, v, lo, hi);
    *out = (int)x;
    return G4_OK;
}

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

// --- inputs ---------------------------------------------------------------------------------
// What this process has read (files) and reads from (package directories), by device and
// inode, for g4_check_output and g4_check_output_dir.
typedef struct {
    dev_t dev;
    ino_t ino;
    char *path; // as first opened, for messages
} g4_file_id;

static struct {
    pthread_mutex_t lock;
    g4_file_id *files, *dirs;
    size_t n_files, n_dirs, cap_files, cap_dirs;
} g4_inputs = {.lock = PTHREAD_MUTEX_INITIALIZER};

// Remembers st under path (the latest name an inode was opened by).
static void note_id(g4_file_id **v, size_t *n, size_t *cap, const struct stat *st,
                    const char *path) {
    pthread_mutex_lock(&g4_inputs.lock);
    size_t i = 0;
    while (i < *n && !((*v)[i].dev == st->st_dev && (*v)[i].ino == st->st_ino)) i++;
    if (i < *n) {
        free((*v)[i].path);
        (*v)[i].path = g4_strdup(path);
    } else {
        if (*n == *cap) *v = g4_realloc(*v, sizeof **v * (*cap = *cap ? 2 * *cap : 16));
        (*v)[(*n)++] = (g4_file_id){st->st_dev, st->st_ino, g4_strdup(path)};
    }
    pthread_mutex_unlock(&g4_inputs.lock);
}

// The path of the remembered entry with st's device and inode (a new string), or NULL. An entry
// whose path no longer names that inode is stale (the input was deleted and the inode number
// reused, or it was replaced) and is dropped.
static char *find_id(int dirs, const struct stat *st) {
    char *hit = NULL;
    pthread_mutex_lock(&g4_inputs.lock);
    g4_file_id *v = dirs ? g4_inputs.dirs : g4_inputs.files;
    size_t *n = dirs ? &g4_inputs.n_dirs : &g4_inputs.n_files;
    for (size_t i = 0; i < *n && !hit;) {
        if (v[i].dev != st->st_dev || v[i].ino != st->st_ino) {
            i++;
            continue;
        }
        struct stat now;
        if (stat(v[i].path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino) {
            hit = g4_strdup(v[i].path);
        } else {
            free(v[i].path);
            v[i] = v[--*n];
        }
    }
    pthread_mutex_unlock(&g4_inputs.lock);
    return hit;
}

static const char *file_type(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO (named pipe)"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "a special file";
}

int g4_open_input(const char *path, uint64_t max_bytes, int *fd_out, uint64_t *size) {
    *fd_out = -1;
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return g4_fail(G4_EUSER, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = g4_fail(G4_EUSER, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return g4_fail(G4_EUSER, "%s: is %s, not a regular file", path, file_type(st.st_mode));
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return g4_fail(G4_EUSER, "%s: %llu bytes, over the %llu-byte limit for this kind of file",
                       path, (unsigned long long)st.st_size, (unsigned long long)max_bytes);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int rc = g4_fail(G4_EINTERNAL, "%s: fcntl: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    note_id(&g4_inputs.files, &g4_inputs.n_files, &g4_inputs.cap_files, &st, path);
    *fd_out = fd;
    *size = (uint64_t)st.st_size;
    return G4_OK;
}

int g4_map_file_max(const char *path, uint64_t max_bytes, g4_mapped_file *out) {
    memset(out, 0, sizeof *out);
    int fd;
    int rc = g4_open_input(path, max_bytes, &fd, &out->size);
    if (rc) return rc;
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

int g4_map_file(const char *path, g4_mapped_file *out) {
    return g4_map_file_max(path, G4_NO_MAX_BYTES, out);
}

void g4_unmap_file(g4_mapped_file *m) {
    if (m->data) munmap((void *)m->data, (size_t)m->size);
    free(m->path);
    memset(m, 0, sizeof *m);
}

int g4_read_fd(int fd, const char *what, uint64_t max_bytes, char **data, size_t *size) {
    size_t cap = 1 << 16, n = 0;
    char *buf = g4_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = g4_realloc(buf, cap *= 2);
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int rc = g4_fail(G4_EUSER, "%s: read error: %s", what, strerror(errno));
            free(buf);
            return rc;
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n > max_bytes) { // a file that grew, or a pipe that does not end
            free(buf);
            return g4_fail(G4_EUSER, "%s: more than %llu bytes, the limit for this input", what,
                           (unsigned long long)max_bytes);
        }
    }
    buf[n] = 0;
    *data = buf;
    if (size) *size = n;
    return G4_OK;
}

int g4_read_file_max(const char *path, uint64_t max_bytes, char **data, size_t *size) {
    int fd;
    uint64_t sz;
    int rc = g4_open_input(path, max_bytes, &fd, &sz);
    if (rc) return rc;
    rc = g4_read_fd(fd, path, max_bytes, data, size);
    close(fd);
    return rc;
}

int g4_read_file(const char *path, char **data, size_t *size) {
    return g4_read_file_max(path, G4_MAX_READ_BYTES, data, size);
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

void g4_forget_input(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return;
    pthread_mutex_lock(&g4_inputs.lock);
    for (size_t i = 0; i < g4_inputs.n_files; i++)
        if (g4_inputs.files[i].dev == st.st_dev && g4_inputs.files[i].ino == st.st_ino) {
            free(g4_inputs.files[i].path);
            g4_inputs.files[i] = g4_inputs.files[--g4_inputs.n_files];
            break;
        }
    pthread_mutex_unlock(&g4_inputs.lock);
}

void g4_note_input_dir(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        note_id(&g4_inputs.dirs, &g4_inputs.n_dirs, &g4_inputs.cap_dirs, &st, dir);
}

// --- outputs --------------------------------------------------------------------------------
// 1 when path names one of this process's open files by descriptor (/dev/stdout, /dev/fd/N,
// /proc/self/fd/N): written where it is (the shell's redirection), never replaced by a rename.
static int names_open_fd(const char *path) {
    char link[64];
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n > 0) {
        link[n] = 0;
        if (!strncmp(link, "/proc/self/fd/", 14) || !strncmp(link, "/dev/fd/", 8)) return 1;
    }
    const char *slash = strrchr(path, '/');
    if (!slash) return 0;
    char *dir = g4_strndup(path, (size_t)(slash - path) + (slash == path));
    char *real = realpath(dir, NULL);
    free(dir);
    int fd_dir = 0;
    if (real) {
        const char *tail = NULL;
        if (!strncmp(real, "/proc/", 6)) tail = strchr(real + 6, '/');
        fd_dir = tail && !strcmp(tail, "/fd");
        free(real);
    }
    return fd_dir;
}

// Where an output goes: 0 replaced atomically (a new or regular file), 1 written in place (a
// FIFO, a character device, or a file named by an open descriptor); a user error otherwise.
static int output_kind(const char *path, int *in_place) {
    *in_place = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return G4_OK; // a new file (a dangling symlink gets replaced)
        return g4_fail(G4_EUSER, "%s: cannot stat the output: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
        return g4_fail(G4_EUSER,
                       "%s: is %s; an output must be a new or a regular file, a FIFO or a "
                       "character device",
                       path, file_type(st.st_mode));
    *in_place = !S_ISREG(st.st_mode) || names_open_fd(path);
    if (!S_ISREG(st.st_mode)) return G4_OK; // (inputs are regular files: never one of them)
    char *in = find_id(0, &st);
    if (in) {
        int rc = g4_fail(G4_EUSER,
                         "%s: is an input of this command (the same file as %s); write the "
                         "output elsewhere",
                         path, in);
        free(in);
        return rc;
    }
    return G4_OK;
}

int g4_check_output(const char *path) {
    int in_place;
    return output_kind(path, &in_place);
}

int g4_check_output_dir(const char *dir) {
    // Start at dir when it exists, else at its parent (where it is about to be made).
    char *at = g4_strdup(dir);
    for (size_t n = strlen(at); n > 1 && at[n - 1] == '/'; n--) at[n - 1] = 0;
    struct stat st;
    if (stat(at, &st) != 0) {
        char *slash = strrchr(at, '/');
        char *parent = !slash        ? g4_strdup(".")
                       : slash == at ? g4_strdup("/")
                                     : g4_strndup(at, (size_t)(slash - at));
        free(at);
        at = parent;
        if (stat(at, &st) != 0) {
            free(at);
            return G4_OK; // no parent: the caller's mkdir reports it
        }
    }
    int rc = G4_OK;
    for (int depth = 0; depth < 4096 && rc == G4_OK; depth++) {
        char *in = find_id(1, &st);
        if (in) {
            rc = g4_fail(G4_EUSER,
                         "%s: is inside the input package %s (or is it); write the output "
                         "elsewhere",
                         dir, in);
            free(in);
            break;
        }
        char *up = g4_path_join(at, "..");
        struct stat pst;
        int ok = stat(up, &pst) == 0;
        free(at);
        at = up;
        if (!ok || (pst.st_dev == st.st_dev && pst.st_ino == st.st_ino)) break; // the root
        st = pst;
    }
    free(at);
    return rc;
}

// A new file beside path, created exclusively (never through an existing name or symlink).
static int create_temp_beside(const char *path, char **tmp_out, int *fd_out) {
    static _Atomic unsigned counter;
    for (int attempt = 0; attempt < 100; attempt++) {
        char *tmp = g4_sprintf("%s.tmp-%ld-%u", path, (long)getpid(), counter++);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (fd >= 0) {
            *tmp_out = tmp;
            *fd_out = fd;
            return G4_OK;
        }
        int e = errno;
        free(tmp);
        if (e != EEXIST)
            return g4_fail(G4_EUSER, "%s: cannot create a file beside it: %s", path, strerror(e));
    }
    return g4_fail(G4_EUSER, "%s: cannot create a temporary file beside it", path);
}

int g4_out_open(const char *path, g4_out_file *o) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    int in_place, rc = output_kind(path, &in_place);
    if (rc) return rc;
    if (in_place) {
        fflush(NULL); // what this process printed before comes first on a shared stdout
        // O_APPEND: a regular file behind /dev/stdout keeps what the shell and we wrote before
        int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) return g4_fail(G4_EUSER, "%s: cannot open for writing: %s", path, strerror(errno));
        o->fd = fd;
    } else if ((rc = create_temp_beside(path, &o->tmp, &o->fd))) {
        return rc;
    }
    o->path = g4_strdup(path);
    return G4_OK;
}

int g4_out_write(g4_out_file *o, const void *data, size_t size) {
    const uint8_t *p = data;
    for (size_t put = 0; put < size;) {
        ssize_t w = write(o->fd, p + put, size - put);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return g4_fail(G4_EUSER, "%s: write failed: %s", o->path, strerror(errno));
        put += (size_t)w;
    }
    return G4_OK;
}

int g4_out_commit(g4_out_file *o) {
    int err = close(o->fd) != 0 ? errno : 0;
    o->fd = -1;
    if (!err && o->tmp && rename(o->tmp, o->path) != 0) err = errno;
    int rc = err ? g4_fail(G4_EUSER, "%s: write failed: %s", o->path, strerror(err)) : G4_OK;
    if (err && o->tmp) unlink(o->tmp);
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
    o->fd = -1;
    return rc;
}

void g4_out_abort(g4_out_file *o) {
    if (o->fd >= 0) close(o->fd);
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
    o->fd = -1;
}

int g4_write_file_atomic(const char *path, const void *data, size_t size) {
    g4_out_file o;
    int rc = g4_out_open(path, &o);
    if (rc) return rc;
    if ((rc = g4_out_write(&o, data, size))) {
        g4_out_abort(&o);
        return rc;
    }
    return g4_out_commit(&o);
}

int g4_open_output_append(const char *path, int *fd_out) {
    *fd_out = -1;
    int rc = g4_check_output(path);
    if (rc) return rc;
    struct stat st; // (a file appended to is read back: a regular one, never a stream)
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return g4_fail(G4_EUSER, "%s: is %s; an output must be a new or a regular file (it is "
                       "appended to and read back)", path, file_type(st.st_mode));
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0666);
    if (fd < 0) return g4_fail(G4_EUSER, "%s: cannot open for writing: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { // swapped for a FIFO since the check
        close(fd);
        return g4_fail(G4_EUSER, "%s: is not a regular file; an output must be one", path);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *fd_out = fd;
    return G4_OK;
}

uint64_t g4_hash64(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull; // FNV-1a
    return h;
}

static uint64_t g4_hash_str(const char *s) {
    return g4_hash64(G4_HASH64_INIT, s, strlen(s));
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
