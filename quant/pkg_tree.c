// pkg_tree.c: copy and remove directory trees (see pkg_tree.h).
#include "quant/pkg_tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

// A copy of src as the new file dst: a reflink (FICLONE: the file system shares the blocks
// copy-on-write, so it costs no space or time and an edit of either file leaves the other
// alone) where the file system can, else the bytes.
static int copy_file(const char *src, const char *dst) {
    int in;
    uint64_t size;
    int rc = g4_open_input(src, G4_NO_MAX_BYTES, &in, &size);
    if (rc) return rc;
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        rc = g4_fail(G4_EUSER, "%s: cannot create: %s", dst, strerror(errno));
        close(in);
        return rc;
    }
    if (ioctl(out, FICLONE, in) == 0) {
        close(in);
        if (close(out) != 0) return g4_fail(G4_EUSER, "%s: write failed: %s", dst, strerror(errno));
        return G4_OK;
    }
    enum { CHUNK = 1 << 20 };
    char *buf = g4_malloc(CHUNK);
    for (;;) {
        ssize_t n = read(in, buf, CHUNK);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            rc = g4_fail(G4_EUSER, "%s: read failed: %s", src, strerror(errno));
            break;
        }
        for (ssize_t put = 0; put < n;) {
            ssize_t w = write(out, buf + put, (size_t)(n - put));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) {
                rc = g4_fail(G4_EUSER, "%s: write failed: %s", dst, strerror(errno));
                break;
            }
            put += w;
        }
        if (rc) break;
    }
    free(buf);
    close(in);
    if (close(out) != 0 && rc == G4_OK)
        rc = g4_fail(G4_EUSER, "%s: write failed: %s", dst, strerror(errno));
    return rc;
}

static int tree_rec(const char *src, const char *dst, const char *rel, g4_tree_skip_fn skip,
                    void *ctx) {
    DIR *d = opendir(src);
    if (!d) return g4_fail(G4_EUSER, "%s: cannot read directory: %s", src, strerror(errno));
    int rc = G4_OK;
    struct dirent *e;
    while (rc == G4_OK && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *s = g4_path_join(src, e->d_name), *t = g4_path_join(dst, e->d_name);
        char *r = rel[0] ? g4_sprintf("%s/%s", rel, e->d_name) : g4_strdup(e->d_name);
        struct stat st;
        if (stat(s, &st) != 0) {
            rc = g4_fail(G4_EUSER, "%s: cannot stat: %s", s, strerror(errno));
        } else if (skip && skip(r, ctx)) {
            // left out
        } else if (S_ISDIR(st.st_mode)) {
            if (mkdir(t, 0755) != 0)
                rc = g4_fail(G4_EUSER, "%s: cannot create: %s", t, strerror(errno));
            else
                rc = tree_rec(s, t, r, skip, ctx);
        } else if (S_ISREG(st.st_mode)) {
            // Never a hard link: an in-place edit of the new package (an editor, a patch,
            // json.dump into an open file) would change the source package with it.
            rc = copy_file(s, t); // a symlinked file gets its target's bytes
        }
        // other file types (sockets, devices) are not package content: left out
        free(s);
        free(t);
        free(r);
    }
    closedir(d);
    return rc;
}

int g4_tree_copy(const char *src, const char *dst, g4_tree_skip_fn skip, void *ctx) {
    return tree_rec(src, dst, "", skip, ctx);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 ? 0 : -1;
}

int g4_tree_remove(const char *path) {
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return g4_fail(G4_EUSER, "%s: cannot remove: %s", path, strerror(errno));
    return G4_OK;
}
