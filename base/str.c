// str.c: string builder and UTF-8 helpers (see str.h).
#include "base/str.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/base.h"

// --- string builder -------------------------------------------------------------------------
void g4_sb_put(g4_sb *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = g4_realloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void g4_sb_puts(g4_sb *b, const char *s) {
    g4_sb_put(b, s, strlen(s));
}
void g4_sb_putc(g4_sb *b, char c) {
    g4_sb_put(b, &c, 1);
}

void g4_sb_put_cp(g4_sb *b, int32_t cp) {
    utf8proc_uint8_t buf[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, buf);
    g4_sb_put(b, (const char *)buf, (size_t)k);
}

char *g4_sb_take(g4_sb *b) {
    char *s = b->p ? b->p : g4_strdup("");
    b->p = NULL;
    b->n = b->cap = 0;
    return s;
}

void g4_sb_free(g4_sb *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

// --- UTF-8 ------------------------------------------------------------------------------------
int g4_py_check_utf8(const char *s, const char *what) {
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    size_t off = 0, len = strlen(s);
    while (off < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p + off, (utf8proc_ssize_t)(len - off), &cp);
        if (k <= 0 || cp < 0)
            return g4_fail(G4_EUSER, "%s: not valid UTF-8 at byte %zu (0x%02x)", what, off, p[off]);
        off += (size_t)k;
    }
    return G4_OK;
}

int32_t *g4_py_decode(const char *s, size_t *n) {
    size_t len = strlen(s), k = 0, off = 0;
    int32_t *cp = g4_malloc((len + 1) * sizeof *cp);
    while (off < len) {
        utf8proc_int32_t c;
        utf8proc_ssize_t step =
            utf8proc_iterate((const utf8proc_uint8_t *)s + off, (utf8proc_ssize_t)(len - off), &c);
        G4_ASSERT(step > 0); // callers validated the string
        cp[k++] = c;
        off += (size_t)step;
    }
    *n = k;
    return cp;
}

char *g4_py_encode(const int32_t *cp, size_t n) {
    g4_sb b = {0};
    for (size_t i = 0; i < n; i++) g4_sb_put_cp(&b, cp[i]);
    return g4_sb_take(&b);
}

// --- whitespace -------------------------------------------------------------------------------
int g4_py_isspace(int32_t cp) {
    const utf8proc_property_t *p = utf8proc_get_property(cp);
    return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
           p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

char *g4_py_strip(const char *s) {
    size_t n;
    int32_t *cp = g4_py_decode(s, &n);
    size_t a = 0, z = n;
    while (a < z && g4_py_isspace(cp[a])) a++;
    while (z > a && g4_py_isspace(cp[z - 1])) z--;
    char *r = g4_py_encode(cp + a, z - a);
    free(cp);
    return r;
}
