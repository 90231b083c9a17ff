// whisper_norm.c: Whisper's EnglishTextNormalizer, EnglishSpellingNormalizer and
// BasicTextNormalizer (whisper/normalizers/english.py and basic.py, MIT), step for step.
// The number normaliser is in whisper_numbers.c, the spelling table in whisper_spelling.c.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/base.h"
#include "eval/pyre.h"
#include "eval/pystr.h"
#include "eval/whisper_norm.h"

// EnglishTextNormalizer.replacers, in the dict's (insertion) order: contractions, titles,
// perfect tenses, then general contractions. Only the ASCII apostrophe is handled, as in Python.
static const char *const REPLACERS[][2] = {
    {"\\bwon't\\b", "will not"},
    {"\\bcan't\\b", "can not"},
    {"\\blet's\\b", "let us"},
    {"\\bain't\\b", "aint"},
    {"\\by'all\\b", "you all"},
    {"\\bwanna\\b", "want to"},
    {"\\bgotta\\b", "got to"},
    {"\\bgonna\\b", "going to"},
    {"\\bi'ma\\b", "i am going to"},
    {"\\bimma\\b", "i am going to"},
    {"\\bwoulda\\b", "would have"},
    {"\\bcoulda\\b", "could have"},
    {"\\bshoulda\\b", "should have"},
    {"\\bma'am\\b", "madam"},
    {"\\bmr\\b", "mister "},
    {"\\bmrs\\b", "missus "},
    {"\\bst\\b", "saint "},
    {"\\bdr\\b", "doctor "},
    {"\\bprof\\b", "professor "},
    {"\\bcapt\\b", "captain "},
    {"\\bgov\\b", "governor "},
    {"\\bald\\b", "alderman "},
    {"\\bgen\\b", "general "},
    {"\\bsen\\b", "senator "},
    {"\\brep\\b", "representative "},
    {"\\bpres\\b", "president "},
    {"\\brev\\b", "reverend "},
    {"\\bhon\\b", "honorable "},
    {"\\basst\\b", "assistant "},
    {"\\bassoc\\b", "associate "},
    {"\\blt\\b", "lieutenant "},
    {"\\bcol\\b", "colonel "},
    {"\\bjr\\b", "junior "},
    {"\\bsr\\b", "senior "},
    {"\\besq\\b", "esquire "},
    {"'d been\\b", " had been"},
    {"'s been\\b", " has been"},
    {"'d gone\\b", " had gone"},
    {"'s gone\\b", " has gone"},
    {"'d done\\b", " had done"},
    {"'s got\\b", " has got"},
    {"n't\\b", " not"},
    {"'re\\b", " are"},
    {"'s\\b", " is"},
    {"'d\\b", " would"},
    {"'ll\\b", " will"},
    {"'t\\b", " not"},
    {"'ve\\b", " have"},
    {"'m\\b", " am"},
};
#define N_REPLACERS (sizeof REPLACERS / sizeof REPLACERS[0])

// basic.py ADDITIONAL_DIACRITICS: letters that NFKD does not split into base + mark.
static const char *const DIACRITICS[][2] = {
    {"œ", "oe"}, {"Œ", "OE"}, {"ø", "o"}, {"Ø", "O"}, {"æ", "ae"}, {"Æ", "AE"},
    {"ß", "ss"}, {"ẞ", "SS"}, {"đ", "d"}, {"Đ", "D"}, {"ð", "d"},  {"Ð", "D"},
    {"þ", "th"}, {"Þ", "th"}, {"ł", "l"}, {"Ł", "L"},
};

enum {
    RE_BRACKETS,
    RE_PARENS,
    RE_FILLERS,
    RE_SPACE_APOS,
    RE_DIGIT_COMMA,
    RE_PERIOD,
    RE_SYM_BEFORE,
    RE_PCT_AFTER,
    RE_WS,
    RE_COUNT
};
static g4_re *re_en[RE_COUNT];
static g4_re *re_replacers[N_REPLACERS];
static pthread_once_t norm_once = PTHREAD_ONCE_INIT;

static void norm_init(void) {
    re_en[RE_BRACKETS] = g4_re_compile("[<\\[][^>\\]]*[>\\]]"); // remove words between brackets
    re_en[RE_PARENS] = g4_re_compile("\\(([^)]+?)\\)");         // ... and between parentheses
    re_en[RE_FILLERS] = g4_re_compile("\\b(hmm|mm|mhm|mmm|uh|um)\\b");
    re_en[RE_SPACE_APOS] = g4_re_compile(G4_PY_S "+'"); // a space before an apostrophe
    re_en[RE_DIGIT_COMMA] = g4_re_compile("(\\d),(\\d)");
    re_en[RE_PERIOD] = g4_re_compile("\\.([^0-9]|$)"); // periods not followed by numbers
    re_en[RE_SYM_BEFORE] = g4_re_compile("[.$¢€£]([^0-9])");
    re_en[RE_PCT_AFTER] = g4_re_compile("([^0-9])%");
    re_en[RE_WS] = g4_re_compile(G4_PY_S "+");
    for (size_t i = 0; i < N_REPLACERS; i++) re_replacers[i] = g4_re_compile(REPLACERS[i][0]);
}

// *s = re.sub(re, tmpl, *s)
static int sub_inplace(char **s, const g4_re *re, const char *tmpl) {
    char *t;
    int rc = g4_re_sub(re, *s, tmpl, &t);
    if (rc != G4_OK) return rc;
    free(*s);
    *s = t;
    return G4_OK;
}

static void replace_with(char **s, char *t) {
    free(*s);
    *s = t;
}

// unicodedata.normalize(form, s) through utf8proc (flags as utf8proc_NFKD / utf8proc_NFKC).
static int normalize(const char *s, int compose, char **out) {
    utf8proc_uint8_t *r = NULL;
    utf8proc_option_t opt =
        UTF8PROC_STABLE | UTF8PROC_COMPAT | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE);
    utf8proc_ssize_t n =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)strlen(s), &r, opt);
    if (n < 0)
        return g4_fail(G4_EINTERNAL, "Unicode normalisation (NFK%c) failed: %s",
                       compose ? 'C' : 'D', utf8proc_errmsg(n));
    *out = (char *)r;
    return G4_OK;
}

static int category_is_msp(int32_t c) {
    const char *cat = utf8proc_category_string(c);
    return cat[0] == 'M' || cat[0] == 'S' || cat[0] == 'P';
}

int g4_whisper_remove_symbols_and_diacritics(const char *s, const char *keep, char **out) {
    int rc = g4_py_check_utf8(s, "normaliser input");
    if (rc == G4_OK) rc = g4_py_check_utf8(keep, "normaliser keep set");
    char *nfkd = NULL;
    if (rc == G4_OK) rc = normalize(s, 0, &nfkd);
    if (rc != G4_OK) return rc;
    size_t n, nkeep;
    int32_t *cp = g4_py_decode(nfkd, &n), *kp = g4_py_decode(keep, &nkeep);
    g4_sb b = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t c = cp[i];
        int kept = 0;
        for (size_t k = 0; k < nkeep && !kept; k++) kept = kp[k] == c;
        if (kept) {
            g4_sb_put_cp(&b, c);
            continue;
        }
        const char *mapped = NULL;
        for (size_t d = 0; d < sizeof DIACRITICS / sizeof DIACRITICS[0] && !mapped; d++) {
            int32_t dc;
            utf8proc_iterate((const utf8proc_uint8_t *)DIACRITICS[d][0], -1, &dc);
            if (dc == c) mapped = DIACRITICS[d][1];
        }
        if (mapped)
            g4_sb_puts(&b, mapped);
        else if (utf8proc_category(c) == UTF8PROC_CATEGORY_MN)
            continue; // drop diacritics
        else if (category_is_msp(c))
            g4_sb_putc(&b, ' ');
        else
            g4_sb_put_cp(&b, c);
    }
    free(cp);
    free(kp);
    free(nfkd);
    *out = g4_sb_take(&b);
    return G4_OK;
}

int g4_whisper_remove_symbols(const char *s, char **out) {
    int rc = g4_py_check_utf8(s, "normaliser input");
    char *nfkc = NULL;
    if (rc == G4_OK) rc = normalize(s, 1, &nfkc);
    if (rc != G4_OK) return rc;
    size_t n;
    int32_t *cp = g4_py_decode(nfkc, &n);
    g4_sb b = {0};
    for (size_t i = 0; i < n; i++) {
        if (category_is_msp(cp[i]))
            g4_sb_putc(&b, ' ');
        else
            g4_sb_put_cp(&b, cp[i]);
    }
    free(cp);
    free(nfkc);
    *out = g4_sb_take(&b);
    return G4_OK;
}

static int spelling_cmp(const void *key, const void *entry) {
    return strcmp((const char *)key, ((const char *const *)entry)[0]);
}

const char *g4_whisper_spelling_lookup(const char *word) {
    const char *const *e = bsearch(word, g4_whisper_spelling, g4_whisper_spelling_n,
                                   sizeof g4_whisper_spelling[0], spelling_cmp);
    return e ? e[1] : NULL;
}

// EnglishSpellingNormalizer: " ".join(mapping.get(word, word) for word in s.split())
static char *spelling_normalize(const char *s) {
    char **w;
    size_t n = g4_py_split(s, &w);
    g4_sb b = {0};
    for (size_t i = 0; i < n; i++) {
        const char *us = g4_whisper_spelling_lookup(w[i]);
        if (i) g4_sb_putc(&b, ' ');
        g4_sb_puts(&b, us ? us : w[i]);
    }
    g4_py_words_free(w, n);
    return g4_sb_take(&b);
}

int g4_whisper_english(const char *in, char **out) {
    int rc = g4_py_check_utf8(in, "English normaliser input");
    if (rc != G4_OK) return rc;
    pthread_once(&norm_once, norm_init);
    char *s = g4_py_lower(in), *t = NULL;
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_BRACKETS], "");
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_PARENS], "");
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_FILLERS], "");
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_SPACE_APOS], "'");
    for (size_t i = 0; i < N_REPLACERS && rc == G4_OK; i++)
        rc = sub_inplace(&s, re_replacers[i], REPLACERS[i][1]);
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_DIGIT_COMMA], "\\1\\2"); // commas in numbers
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_PERIOD], " \\1");
    // keep numeric symbols
    if (rc == G4_OK && (rc = g4_whisper_remove_symbols_and_diacritics(s, ".%$¢€£", &t)) == G4_OK)
        replace_with(&s, t);
    if (rc == G4_OK && (rc = g4_whisper_numbers(s, &t)) == G4_OK) replace_with(&s, t);
    if (rc == G4_OK) replace_with(&s, spelling_normalize(s));
    // now remove prefix/suffix symbols that are not preceded/followed by numbers
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_SYM_BEFORE], " \\1");
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_PCT_AFTER], "\\1 ");
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_WS], " "); // successive whitespace -> one space
    if (rc != G4_OK) {
        free(s);
        return rc;
    }
    *out = s;
    return G4_OK;
}

int g4_whisper_basic(const char *in, char **out) {
    int rc = g4_py_check_utf8(in, "basic normaliser input");
    if (rc != G4_OK) return rc;
    pthread_once(&norm_once, norm_init);
    char *s = g4_py_lower(in), *t = NULL;
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_BRACKETS], "");
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_PARENS], "");
    if (rc == G4_OK && (rc = g4_whisper_remove_symbols(s, &t)) == G4_OK) {
        replace_with(&s, g4_py_lower(t));
        free(t);
    }
    if (rc == G4_OK) rc = sub_inplace(&s, re_en[RE_WS], " ");
    if (rc != G4_OK) {
        free(s);
        return rc;
    }
    *out = s;
    return G4_OK;
}
