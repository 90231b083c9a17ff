// tokenizer_decode.c: ids -> text. Pieces go through the decoder steps of the file in order, as
// HF's Decoder::decode_chain (each step maps a list of strings to a list of strings), then are
// concatenated; without a decoder HF joins the pieces with spaces.
#include <stdlib.h>
#include <utf8proc.h>

#include "loader/tokenizer_impl.h"

typedef struct {
    char *p;
    size_t n;
} dstr;

typedef struct {
    dstr *v;
    size_t n, cap;
} dlist;

static void dlist_push(dlist *l, char *p, size_t n) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = g4_realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (dstr){p, n};
}

static void dlist_free(dlist *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i].p);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static char *join(const dlist *l, const char *sep, size_t *out_n) {
    size_t ns = strlen(sep), n = 0;
    for (size_t i = 0; i < l->n; i++) n += l->v[i].n + (i ? ns : 0);
    char *out = g4_malloc(n + 1), *o = out;
    for (size_t i = 0; i < l->n; i++) {
        if (i) memcpy(o, sep, ns), o += ns;
        memcpy(o, l->v[i].p, l->v[i].n), o += l->v[i].n;
    }
    *o = 0;
    *out_n = n;
    return out;
}

static char *replace_all(const char *s, size_t n, const char *pat, size_t np, const char *rep,
                         size_t nr, size_t *out_n) {
    size_t m = 0;
    char *out = g4_malloc(n / np * nr + n + 1), *o = out; // n/np matches at most
    const char *p = s, *e = s + n;
    for (const char *q; (q = memmem(p, (size_t)(e - p), pat, np)); p = q + np) {
        memcpy(o, p, (size_t)(q - p)), o += q - p;
        memcpy(o, rep, nr), o += nr;
    }
    memcpy(o, p, (size_t)(e - p)), o += e - p;
    m = (size_t)(o - out);
    *o = 0;
    *out_n = m;
    return out;
}

// "<0xHH>" -> the byte, or -1. HF: six bytes, "<0x" ... ">", and u8::from_str_radix(HH, 16),
// which also takes a '+' sign ("<0x+A>").
static int byte_piece(const dstr *s) {
    if (s->n != 6 || memcmp(s->p, "<0x", 3) != 0 || s->p[5] != '>') return -1;
    int v = 0, digits = 0;
    for (int k = 3; k < 5; k++) {
        char c = s->p[k];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) {
            if (k == 3 && c == '+') continue;
            return -1;
        }
        v = v * 16 + d;
        digits++;
    }
    return digits ? v : -1;
}

static int valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

// A run of byte pieces becomes one string when its bytes are valid UTF-8 as a whole, else one
// U+FFFD per byte (HF's ByteFallback: String::from_utf8 on the run, no partial recovery).
static void flush_bytes(dlist *out, char *bytes, size_t *nb) {
    if (!*nb) return;
    if (valid_utf8(bytes, *nb)) {
        dlist_push(out, g4_strndup(bytes, *nb), *nb);
    } else {
        for (size_t i = 0; i < *nb; i++) dlist_push(out, g4_strndup("\xef\xbf\xbd", 3), 3);
    }
    *nb = 0;
}

static void step_byte_fallback(dlist *l) {
    dlist out = {0};
    char *bytes = g4_malloc(l->n + 1);
    size_t nb = 0;
    for (size_t i = 0; i < l->n; i++) {
        int b = byte_piece(&l->v[i]);
        if (b >= 0) {
            bytes[nb++] = (char)b;
            free(l->v[i].p);
            continue;
        }
        flush_bytes(&out, bytes, &nb);
        dlist_push(&out, l->v[i].p, l->v[i].n);
    }
    flush_bytes(&out, bytes, &nb);
    free(bytes);
    free(l->v);
    *l = out;
}

// Strip: removes up to start leading and up to stop trailing copies of one character from each
// piece (HF's Strip decoder works on characters).
static void step_strip(const tok_dec_step *st, dstr *s) {
    size_t a = 0, e = s->n;
    for (int k = 0; k < st->strip_start && a < e; k++) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t len =
            utf8proc_iterate((const utf8proc_uint8_t *)s->p + a, (utf8proc_ssize_t)(e - a), &cp);
        if (len <= 0 || (uint32_t)cp != st->strip_char) break;
        a += (size_t)len;
    }
    for (int k = 0; k < st->strip_stop && e > a; k++) {
        size_t c = e - 1;
        while (c > a && ((unsigned char)s->p[c] & 0xc0) == 0x80) c--;
        utf8proc_int32_t cp;
        utf8proc_iterate((const utf8proc_uint8_t *)s->p + c, (utf8proc_ssize_t)(e - c), &cp);
        if ((uint32_t)cp != st->strip_char) break;
        e = c;
    }
    memmove(s->p, s->p + a, e - a);
    s->n = e - a;
    s->p[s->n] = 0;
}

int g4_tokenizer_decode(const g4_tokenizer *t, const int *ids, size_t n, int skip_special,
                        char **text, size_t *len) {
    *text = NULL;
    if (len) *len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return g4_fail(G4_EUSER,
                           "decode: token id %d at position %zu is outside the "
                           "vocabulary of %s [0, %d)",
                           ids[i], i, t->name, t->n_vocab);
    dlist l = {0};
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = g4_tokenizer_piece(t, ids[i], &pl);
        if (!p || (skip_special && t->special[ids[i]])) continue;
        dlist_push(&l, g4_strndup(p, pl), pl);
    }
    size_t out_n;
    char *out;
    if (!t->has_decoder) {
        out = join(&l, " ", &out_n);
        dlist_free(&l);
        *text = out;
        if (len) *len = out_n;
        return G4_OK;
    }
    for (int k = 0; k < t->n_dec; k++) {
        const tok_dec_step *st = &t->dec[k];
        switch (st->kind) {
        case TOK_DEC_REPLACE:
            for (size_t i = 0; i < l.n; i++) {
                size_t m;
                char *r = replace_all(l.v[i].p, l.v[i].n, tok_s(t, st->pattern), st->pattern.len,
                                      tok_s(t, st->content), st->content.len, &m);
                free(l.v[i].p);
                l.v[i] = (dstr){r, m};
            }
            break;
        case TOK_DEC_BYTE_FALLBACK:
            step_byte_fallback(&l);
            break;
        case TOK_DEC_FUSE: {
            size_t m;
            char *all = join(&l, "", &m);
            dlist_free(&l);
            dlist_push(&l, all, m);
            break;
        }
        case TOK_DEC_STRIP:
            for (size_t i = 0; i < l.n; i++) step_strip(st, &l.v[i]);
            break;
        }
    }
    out = join(&l, "", &out_n);
    dlist_free(&l);
    *text = out;
    if (len) *len = out_n;
    return G4_OK;
}
