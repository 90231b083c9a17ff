// pyre.c: Python re.sub / re.match / re.split over PCRE2 (see pyre.h).
#include "eval/pyre.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

struct g4_re {
    pcre2_code *code;
    char *pattern; // for error messages
};

g4_re *g4_re_compile(const char *pattern) {
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    G4_ASSERT(cc);
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    int err;
    PCRE2_SIZE at;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP, &err, &at, cc);
    pcre2_compile_context_free(cc);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        fprintf(stderr, "g4cu: internal error: regex '%s' does not compile at %zu: %s\n", pattern,
                (size_t)at, (const char *)msg);
        abort();
    }
    g4_re *re = g4_malloc(sizeof *re);
    re->code = code;
    re->pattern = g4_strdup(pattern);
    return re;
}

char *g4_re_group(const g4_re_match *m, int i) {
    if (i >= m->ngroups || m->ovector[2 * i] == PCRE2_UNSET) return g4_strdup("");
    return g4_strndup(m->subject + m->ovector[2 * i], m->ovector[2 * i + 1] - m->ovector[2 * i]);
}

static void put_group(g4_sb *out, const g4_re_match *m, int i) {
    if (i >= m->ngroups || m->ovector[2 * i] == PCRE2_UNSET) return;
    g4_sb_put(out, m->subject + m->ovector[2 * i], m->ovector[2 * i + 1] - m->ovector[2 * i]);
}

typedef struct {
    const char *tmpl;
} tmpl_ctx;

static int expand_template(g4_sb *out, const g4_re_match *m, void *ctx) {
    for (const char *t = ((const tmpl_ctx *)ctx)->tmpl; *t; t++) {
        if (t[0] == '\\' && t[1] >= '0' && t[1] <= '9') {
            put_group(out, m, t[1] - '0');
            t++;
        } else {
            g4_sb_putc(out, *t);
        }
    }
    return G4_OK;
}

static int match_error(const g4_re *re, int rc, size_t len) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return g4_fail(G4_EINTERNAL, "regex '%s' failed on a %zu-byte string: %s", re->pattern, len,
                   (const char *)msg);
}

int g4_re_sub_fn(const g4_re *re, const char *s, g4_re_fn fn, void *ctx, char **out) {
    size_t len = strlen(s), pos = 0;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->code, NULL);
    G4_ASSERT(md);
    g4_sb b = {0};
    g4_sb_put(&b, "", 0);
    int rc = G4_OK;
    while (pos <= len) {
        int r = pcre2_match(re->code, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (r == PCRE2_ERROR_NOMATCH) break;
        if (r < 0) {
            rc = match_error(re, r, len);
            break;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        // An empty match would need Python's special rules; none of our patterns has one.
        G4_ASSERT(ov[1] > ov[0]);
        g4_sb_put(&b, s + pos, ov[0] - pos);
        g4_re_match m = {s, ov, (int)pcre2_get_ovector_count(md)};
        if (r < m.ngroups) m.ngroups = r; // groups past the last one set did not take part
        if ((rc = fn(&b, &m, ctx)) != G4_OK) break;
        pos = ov[1];
    }
    pcre2_match_data_free(md);
    if (rc != G4_OK) {
        g4_sb_free(&b);
        return rc;
    }
    if (pos < len) g4_sb_put(&b, s + pos, len - pos);
    *out = g4_sb_take(&b);
    return G4_OK;
}

int g4_re_sub(const g4_re *re, const char *s, const char *tmpl, char **out) {
    tmpl_ctx c = {tmpl};
    return g4_re_sub_fn(re, s, expand_template, &c, out);
}

int g4_re_matches(const g4_re *re, const char *s) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->code, NULL);
    G4_ASSERT(md);
    int r = pcre2_match(re->code, (PCRE2_SPTR)s, strlen(s), 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                        md, NULL);
    pcre2_match_data_free(md);
    return r >= 0;
}

int g4_re_split(const g4_re *re, const char *s, char ***pieces, size_t *n) {
    size_t len = strlen(s), pos = 0, count = 0, cap = 4;
    char **p = g4_malloc(cap * sizeof *p);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->code, NULL);
    G4_ASSERT(md);
    int rc = G4_OK;
    for (;;) {
        int r = pcre2_match(re->code, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (r == PCRE2_ERROR_NOMATCH) break;
        if (r < 0) {
            rc = match_error(re, r, len);
            break;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        G4_ASSERT(ov[1] > ov[0]);
        if (count + 1 >= cap) p = g4_realloc(p, (cap *= 2) * sizeof *p);
        p[count++] = g4_strndup(s + pos, ov[0] - pos);
        pos = ov[1];
    }
    pcre2_match_data_free(md);
    if (rc != G4_OK) {
        g4_py_words_free(p, count);
        return rc;
    }
    p[count++] = g4_strndup(s + pos, len - pos);
    *pieces = p;
    *n = count;
    return G4_OK;
}
