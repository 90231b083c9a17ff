// pystr.c: Python str semantics on UTF-8 (see pystr.h).
#include "eval/pystr.h"

#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/base.h"

// --- character properties ---------------------------------------------------------------------
int g4_py_decimal(int32_t cp) {
    if (utf8proc_category(cp) != UTF8PROC_CATEGORY_ND) return -1;
    int32_t start = cp;
    while (start > 0 && utf8proc_category(start - 1) == UTF8PROC_CATEGORY_ND) start--;
    return (int)((cp - start) % 10);
}

// CPython's _PyUnicode_IsCased: Lowercase, Uppercase or Lt (see the header for what the
// category/mapping approximation misses).
static int py_is_cased(int32_t c) {
    utf8proc_category_t cat = utf8proc_category(c);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
           cat == UTF8PROC_CATEGORY_LT || utf8proc_tolower(c) != c || utf8proc_toupper(c) != c;
}

// CPython's _PyUnicode_IsCaseIgnorable: Mn, Me, Cf, Lm, Sk, or Word_Break MidLetter /
// MidNumLet / Single_Quote (those 17 code points are listed because utf8proc has no Word_Break).
static int py_is_case_ignorable(int32_t c) {
    utf8proc_category_t cat = utf8proc_category(c);
    if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME || cat == UTF8PROC_CATEGORY_CF ||
        cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_SK)
        return 1;
    static const int32_t word_break_mid[] = {0x27,   0x2e,   0x3a,   0xb7,   0x387,  0x55f,
                                             0x5f4,  0x2018, 0x2019, 0x2024, 0x2027, 0xfe13,
                                             0xfe52, 0xfe55, 0xff07, 0xff0e, 0xff1a};
    for (size_t i = 0; i < sizeof word_break_mid / sizeof word_break_mid[0]; i++)
        if (word_break_mid[i] == c) return 1;
    return 0;
}

// CPython's handle_capital_sigma: U+03A3 lowercases to final sigma U+03C2 when a cased letter
// precedes it and none follows it (case-ignorable characters skipped on both sides).
static int32_t lower_sigma(const int32_t *cp, size_t n, size_t i) {
    size_t j = i;
    int32_t c = 0;
    int found = 0;
    while (j > 0) {
        c = cp[--j];
        if (!py_is_case_ignorable(c)) {
            found = 1;
            break;
        }
    }
    int final = found && py_is_cased(c);
    if (final && i + 1 < n) {
        size_t k = i + 1;
        for (; k < n; k++)
            if (!py_is_case_ignorable(cp[k])) break;
        final = k == n || !py_is_cased(cp[k]);
    }
    return final ? 0x3c2 : 0x3c3;
}

char *g4_py_lower(const char *s) {
    size_t n;
    int32_t *cp = g4_py_decode(s, &n);
    g4_sb b = {0};
    g4_sb_put(&b, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (cp[i] == 0x130) { // the one unconditional multi-character lowercase mapping
            g4_sb_put_cp(&b, 0x69);
            g4_sb_put_cp(&b, 0x307);
        } else if (cp[i] == 0x3a3) {
            g4_sb_put_cp(&b, lower_sigma(cp, n, i));
        } else {
            g4_sb_put_cp(&b, utf8proc_tolower(cp[i]));
        }
    }
    free(cp);
    return g4_sb_take(&b);
}

size_t g4_py_upper_len(const char *s) {
    size_t n, total = 0;
    int32_t *cp = g4_py_decode(s, &n);
    for (size_t i = 0; i < n; i++) {
        if (cp[i] == 0x130 || cp[i] == 0x1e9e) { // upper() keeps them; folding expands them
            total += 1;
            continue;
        }
        utf8proc_int32_t buf[8];
        int boundclass = 0;
        utf8proc_ssize_t k = utf8proc_decompose_char(cp[i], buf, 8, UTF8PROC_CASEFOLD, &boundclass);
        total += k > 0 ? (size_t)k : 1;
    }
    free(cp);
    return total;
}

// --- split ----------------------------------------------------------------------------------
size_t g4_py_split(const char *s, char ***words) {
    size_t n, count = 0, cap = 8;
    int32_t *cp = g4_py_decode(s, &n);
    char **w = g4_malloc(cap * sizeof *w);
    for (size_t i = 0; i < n;) {
        while (i < n && g4_py_isspace(cp[i])) i++;
        if (i == n) break;
        size_t j = i;
        while (j < n && !g4_py_isspace(cp[j])) j++;
        if (count == cap) w = g4_realloc(w, (cap *= 2) * sizeof *w);
        w[count++] = g4_py_encode(cp + i, j - i);
        i = j;
    }
    free(cp);
    *words = w;
    return count;
}

void g4_py_words_free(char **words, size_t n) {
    for (size_t i = 0; i < n; i++) free(words[i]);
    free(words);
}

char *g4_py_collapse_ws(const char *s) {
    char **w;
    size_t n = g4_py_split(s, &w);
    g4_sb b = {0};
    for (size_t i = 0; i < n; i++) {
        if (i) g4_sb_putc(&b, ' ');
        g4_sb_puts(&b, w[i]);
    }
    g4_py_words_free(w, n);
    return g4_sb_take(&b);
}

char *g4_py_replace(const char *s, const char *old, const char *new_) {
    size_t lo = strlen(old);
    G4_ASSERT(lo > 0);
    g4_sb b = {0};
    g4_sb_put(&b, "", 0);
    const char *p = s, *q;
    while ((q = strstr(p, old))) {
        g4_sb_put(&b, p, (size_t)(q - p));
        g4_sb_puts(&b, new_);
        p = q + lo;
    }
    g4_sb_puts(&b, p);
    return g4_sb_take(&b);
}

// --- float() ----------------------------------------------------------------------------------
static int ascii_digit(char c) {
    return c >= '0' && c <= '9';
}
static int ascii_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
} // Py_ISSPACE

static int ieq(const char *a, const char *lit, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = a[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != lit[i]) return 0;
    }
    return 1;
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void c_locale_init(void) {
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

// The literal [+-](digits[.digits]|.digits)[(e|E)[+-]digits] or [+-](inf|infinity|nan) filling
// all of s[0..n): what _Py_dg_strtod / _Py_parse_inf_or_nan accept with end == last.
static int py_float_literal(const char *s, size_t n, double *out) {
    size_t i = 0;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    size_t rest = n - i;
    if ((rest == 3 && ieq(s + i, "inf", 3)) || (rest == 8 && ieq(s + i, "infinity", 8))) {
        *out = neg ? -INFINITY : INFINITY;
        return 1;
    }
    if (rest == 3 && ieq(s + i, "nan", 3)) {
        *out = neg ? -NAN : NAN;
        return 1;
    }
    size_t digits = 0;
    while (i < n && ascii_digit(s[i])) i++, digits++;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && ascii_digit(s[i])) i++, digits++;
    }
    if (digits == 0) return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t ed = 0;
        while (i < n && ascii_digit(s[i])) i++, ed++;
        if (ed == 0) return 0;
    }
    if (i != n) return 0;
    // Correctly rounded, like Python's dtoa; the "C" locale keeps '.' as the decimal point
    // whatever the process locale is.
    pthread_once(&c_locale_once, c_locale_init);
    char *tmp = g4_strndup(s, n);
    *out = c_locale ? strtod_l(tmp, NULL, c_locale) : strtod(tmp, NULL);
    free(tmp);
    return 1;
}

int g4_py_float(const char *s, double *out) {
    // 1. _PyUnicode_TransformDecimalAndSpaceToASCII
    size_t n;
    int32_t *cp = g4_py_decode(s, &n);
    char *a = g4_malloc(n + 1);
    int ok = 1, has_underscore = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = cp[i];
        if (c < 128) {
            a[i] = (char)c;
            if (c == '_') has_underscore = 1;
        } else if (g4_py_isspace(c)) {
            a[i] = ' ';
        } else {
            int d = g4_py_decimal(c);
            if (d < 0) ok = 0;
            a[i] = d < 0 ? '?' : (char)('0' + d);
        }
    }
    a[n] = 0;
    free(cp);
    // 2. _Py_string_to_number_with_underscores: '_' only between digits, then dropped
    if (ok && has_underscore) {
        char prev = 0;
        size_t k = 0;
        for (size_t i = 0; i < n && ok; i++) {
            char c = a[i];
            if (c == '_') {
                if (!ascii_digit(prev)) ok = 0;
            } else {
                if (prev == '_' && !ascii_digit(c)) ok = 0;
                a[k++] = c;
            }
            prev = c;
        }
        if (prev == '_') ok = 0;
        n = k;
        a[n] = 0;
    }
    // 3. float_from_string_inner: strip ASCII whitespace, then the whole rest must parse
    if (ok) {
        size_t lo = 0, hi = n;
        while (lo < hi && ascii_space(a[lo])) lo++;
        while (hi > lo && ascii_space(a[hi - 1])) hi--;
        ok = hi > lo && py_float_literal(a + lo, hi - lo, out);
    }
    free(a);
    return ok;
}
