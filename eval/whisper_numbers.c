// whisper_numbers.c: Whisper's EnglishNumberNormalizer (whisper/normalizers/english.py, MIT),
// ported step for step: preprocess (" and a half", digit/letter boundaries), process_words (the
// word-by-word state machine), postprocess (cents, "1" -> "one").
//
// Python keeps the pending number `value` as None, an int (arbitrary size: "one decillion
// decillion" is exact) or a str (digits glued together, "1.5", "007"). Here it is a tagged
// string: ints are canonical ASCII decimals and every int operation the normaliser needs (+ a
// small number, % 10 / 100 / 1000, // 1000 * 1000, * a power of ten) is done on the digits.
// Fraction(value) is needed only for strings made of Unicode digits and '.', so only that part
// of Fraction's grammar is implemented (see parse_decimal).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "eval/pyre.h"
#include "eval/pystr.h"
#include "eval/whisper_norm.h"

// --- the vocabulary (built as EnglishNumberNormalizer.__init__ builds it) ---------------------
typedef enum {
    W_ZERO = 1,     // zeros: o oh zero
    W_ONE,          // ones: one .. nineteen
    W_ONE_SUFFIXED, // ones_plural + ones_ordinal: "ones", "sixes", "first", "nineth", ...
    W_TEN,          // tens: twenty .. ninety
    W_TEN_SUFFIXED, // "twenties", "twentieth", ...
    W_MULT,         // multipliers: hundred .. decillion (value = power of ten)
    W_MULT_SUFFIXED,
    W_PRECEDING, // minus negative plus positive
    W_FOLLOWING, // pound(s) euro(s) dollar(s) cent(s)
    W_SUFFIXER,  // per (with "cent") and percent
    W_SPECIAL,   // and double triple point
} word_kind;

typedef struct {
    char *word;
    word_kind kind;
    int value;          // ones/tens value, or the multiplier's power of ten
    const char *suffix; // "s" / "th" / ... for the suffixed kinds; the symbol for prefixers
} vocab_entry;

static const char *const ONES[] = {"one",     "two",       "three",    "four",     "five",
                                   "six",     "seven",     "eight",    "nine",     "ten",
                                   "eleven",  "twelve",    "thirteen", "fourteen", "fifteen",
                                   "sixteen", "seventeen", "eighteen", "nineteen"};
static const char *const TENS[] = {"twenty", "thirty",  "forty",  "fifty",
                                   "sixty",  "seventy", "eighty", "ninety"};
static const struct {
    const char *name;
    int pow10;
} MULTS[] = {{"hundred", 2},     {"thousand", 3},     {"million", 6},      {"billion", 9},
             {"trillion", 12},   {"quadrillion", 15}, {"quintillion", 18}, {"sextillion", 21},
             {"septillion", 24}, {"octillion", 27},   {"nonillion", 30},   {"decillion", 33}};

static vocab_entry *vocab;
static size_t vocab_n, vocab_cap;
static g4_strmap vocab_map;

enum {
    RE_AND_HALF,
    RE_LETTER_DIGIT,
    RE_DIGIT_LETTER,
    RE_NUM_SUFFIX,
    RE_CENTS_COMBINE,
    RE_CENTS_EXTRACT,
    RE_ONE,
    RE_NUMERIC,
    RE_COUNT
};
static g4_re *re_num[RE_COUNT];
static pthread_once_t num_once = PTHREAD_ONCE_INIT;

// The eleven word sets are disjoint (139 words in self.words, checked against Python), so one
// kind per word is enough; they are added in the order of process_words' elif chain anyway.
static void vocab_add(char *word, word_kind kind, int value, const char *suffix) {
    if (vocab_n == vocab_cap)
        vocab = g4_realloc(vocab, (vocab_cap = vocab_cap ? vocab_cap * 2 : 256) * sizeof *vocab);
    vocab[vocab_n++] = (vocab_entry){word, kind, value, suffix};
}

static void num_init(void) {
    vocab_add(g4_strdup("o"), W_ZERO, 0, NULL);
    vocab_add(g4_strdup("oh"), W_ZERO, 0, NULL);
    vocab_add(g4_strdup("zero"), W_ZERO, 0, NULL);
    for (int i = 0; i < 19; i++) vocab_add(g4_strdup(ONES[i]), W_ONE, i + 1, NULL);
    // ones_plural: "sixes" for six, else name + "s"
    for (int i = 0; i < 19; i++)
        vocab_add(strcmp(ONES[i], "six") == 0 ? g4_strdup("sixes") : g4_sprintf("%ss", ONES[i]),
                  W_ONE_SUFFIXED, i + 1, "s");
    // ones_ordinal: the irregular ones, then name + ("h" if it ends in "t" else "th") for the
    // rest above three ("eighth", and "nineth", which is Whisper's spelling, not "ninth")
    vocab_add(g4_strdup("zeroth"), W_ONE_SUFFIXED, 0, "th");
    vocab_add(g4_strdup("first"), W_ONE_SUFFIXED, 1, "st");
    vocab_add(g4_strdup("second"), W_ONE_SUFFIXED, 2, "nd");
    vocab_add(g4_strdup("third"), W_ONE_SUFFIXED, 3, "rd");
    vocab_add(g4_strdup("fifth"), W_ONE_SUFFIXED, 5, "th");
    vocab_add(g4_strdup("twelfth"), W_ONE_SUFFIXED, 12, "th");
    for (int i = 0; i < 19; i++) {
        int v = i + 1;
        if (v <= 3 || v == 5 || v == 12) continue;
        size_t len = strlen(ONES[i]);
        vocab_add(g4_sprintf("%s%s", ONES[i], ONES[i][len - 1] == 't' ? "h" : "th"), W_ONE_SUFFIXED,
                  v, "th");
    }
    for (int i = 0; i < 8; i++) vocab_add(g4_strdup(TENS[i]), W_TEN, 20 + 10 * i, NULL);
    for (int i = 0; i < 8; i++) { // name.replace("y", "ies") / ("y", "ieth"): y is last
        size_t len = strlen(TENS[i]);
        vocab_add(g4_sprintf("%.*sies", (int)(len - 1), TENS[i]), W_TEN_SUFFIXED, 20 + 10 * i, "s");
    }
    for (int i = 0; i < 8; i++) {
        size_t len = strlen(TENS[i]);
        vocab_add(g4_sprintf("%.*sieth", (int)(len - 1), TENS[i]), W_TEN_SUFFIXED, 20 + 10 * i,
                  "th");
    }
    for (size_t i = 0; i < sizeof MULTS / sizeof MULTS[0]; i++)
        vocab_add(g4_strdup(MULTS[i].name), W_MULT, MULTS[i].pow10, NULL);
    for (size_t i = 0; i < sizeof MULTS / sizeof MULTS[0]; i++)
        vocab_add(g4_sprintf("%ss", MULTS[i].name), W_MULT_SUFFIXED, MULTS[i].pow10, "s");
    for (size_t i = 0; i < sizeof MULTS / sizeof MULTS[0]; i++)
        vocab_add(g4_sprintf("%sth", MULTS[i].name), W_MULT_SUFFIXED, MULTS[i].pow10, "th");
    vocab_add(g4_strdup("minus"), W_PRECEDING, 0, "-");
    vocab_add(g4_strdup("negative"), W_PRECEDING, 0, "-");
    vocab_add(g4_strdup("plus"), W_PRECEDING, 0, "+");
    vocab_add(g4_strdup("positive"), W_PRECEDING, 0, "+");
    vocab_add(g4_strdup("pound"), W_FOLLOWING, 0, "\xc2\xa3"); // £
    vocab_add(g4_strdup("pounds"), W_FOLLOWING, 0, "\xc2\xa3");
    vocab_add(g4_strdup("euro"), W_FOLLOWING, 0, "\xe2\x82\xac"); // €
    vocab_add(g4_strdup("euros"), W_FOLLOWING, 0, "\xe2\x82\xac");
    vocab_add(g4_strdup("dollar"), W_FOLLOWING, 0, "$");
    vocab_add(g4_strdup("dollars"), W_FOLLOWING, 0, "$");
    vocab_add(g4_strdup("cent"), W_FOLLOWING, 0, "\xc2\xa2"); // ¢
    vocab_add(g4_strdup("cents"), W_FOLLOWING, 0, "\xc2\xa2");
    vocab_add(g4_strdup("per"), W_SUFFIXER, 0, NULL); // {"cent": "%"}
    vocab_add(g4_strdup("percent"), W_SUFFIXER, 0, "%");
    vocab_add(g4_strdup("and"), W_SPECIAL, 0, NULL);
    vocab_add(g4_strdup("double"), W_SPECIAL, 0, NULL);
    vocab_add(g4_strdup("triple"), W_SPECIAL, 0, NULL);
    vocab_add(g4_strdup("point"), W_SPECIAL, 0, NULL);
    G4_ASSERT(vocab_n == 139); // len(self.words) in Python
    g4_strmap_init(&vocab_map, vocab_n);
    for (size_t i = 0; i < vocab_n; i++) g4_strmap_put(&vocab_map, vocab[i].word, (int)i);

    re_num[RE_AND_HALF] = g4_re_compile("\\band" G4_PY_S "+a" G4_PY_S "+half\\b");
    re_num[RE_LETTER_DIGIT] = g4_re_compile("([a-z])([0-9])");
    re_num[RE_DIGIT_LETTER] = g4_re_compile("([0-9])([a-z])");
    re_num[RE_NUM_SUFFIX] = g4_re_compile("([0-9])" G4_PY_S "+(st|nd|rd|th|s)\\b");
    re_num[RE_CENTS_COMBINE] = g4_re_compile("([€£$])([0-9]+) (?:and )?¢([0-9]{1,2})\\b");
    re_num[RE_CENTS_EXTRACT] = g4_re_compile("[€£$]0.([0-9]{1,2})\\b");
    re_num[RE_ONE] = g4_re_compile("\\b1(s?)\\b");
    re_num[RE_NUMERIC] = g4_re_compile("^\\d+(\\.\\d+)?$");
}

static const vocab_entry *lookup(const char *w) {
    if (!w) return NULL;
    int i = g4_strmap_get(&vocab_map, w);
    return i < 0 ? NULL : &vocab[i];
}
static int is_kind(const char *w, word_kind k) {
    const vocab_entry *e = lookup(w);
    return e && e->kind == k;
}
// self.decimals = ones | tens | zeros
static int is_decimal_word(const char *w) {
    return is_kind(w, W_ONE) || is_kind(w, W_TEN) || is_kind(w, W_ZERO);
}
static int is_numeric(const char *w) {
    return w && g4_re_matches(re_num[RE_NUMERIC], w);
}

// --- Python int on canonical decimal strings --------------------------------------------------
static int int_is_zero(const char *a) {
    return strcmp(a, "0") == 0;
}

// a % m for m in {10, 100, 1000}
static int int_mod(const char *a, int m) {
    size_t n = strlen(a), k = m == 10 ? 1 : m == 100 ? 2 : 3;
    G4_ASSERT(m == 10 || m == 100 || m == 1000);
    int r = 0;
    for (size_t i = n > k ? n - k : 0; i < n; i++) r = r * 10 + (a[i] - '0');
    return r;
}

static char *int_add(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b), n = (na > nb ? na : nb) + 1;
    char *r = g4_malloc(n + 1);
    r[n] = 0;
    int carry = 0;
    for (size_t i = 0; i < n; i++) {
        int d = carry + (i < na ? a[na - 1 - i] - '0' : 0) + (i < nb ? b[nb - 1 - i] - '0' : 0);
        r[n - 1 - i] = (char)('0' + d % 10);
        carry = d / 10;
    }
    size_t z = 0;
    while (z + 1 < n && r[z] == '0') z++;
    memmove(r, r + z, n - z + 1);
    return r;
}

static char *int_small(long v) {
    return g4_sprintf("%ld", v);
}

// digits * 10^k, canonical ("0" stays "0")
static char *int_shift(const char *digits, int k) {
    while (digits[0] == '0' && digits[1]) digits++;
    if (int_is_zero(digits)) return g4_strdup("0");
    g4_sb b = {0};
    g4_sb_puts(&b, digits);
    for (int i = 0; i < k; i++) g4_sb_putc(&b, '0');
    return g4_sb_take(&b);
}

// value // 1000 * 1000 + (value % 1000) * 10^k
static char *int_apply_multiplier(const char *v, int k) {
    size_t n = strlen(v);
    char *before = n > 3 ? g4_sprintf("%.*s000", (int)(n - 3), v) : g4_strdup("0");
    char *res = int_small(int_mod(v, 1000));
    char *scaled = int_shift(res, k);
    char *sum = int_add(before, scaled);
    free(before);
    free(res);
    free(scaled);
    return sum;
}

// Fraction(s) for s made of Unicode decimal digits and '.', i.e. the regex
// (?=\d|\.\d)\d*(\.\d*)? over the whole string (sign, '/', exponent, '_' and spaces cannot occur
// in the normaliser's values: they start with a digit or '.', and hold only digits, '.' and
// the prefix symbols glued on after a '.', which make them invalid). On success *digits is the
// ASCII digits of int and fraction parts with the fraction's trailing zeros dropped and *scale
// the number of fraction digits left, so the number is digits / 10^scale in lowest terms as far
// as powers of ten go (enough to test p.denominator == 1 for p = f * 10^k).
static int parse_decimal(const char *s, char **digits, int *scale) {
    size_t n;
    int32_t *cp = g4_py_decode(s, &n);
    int ok = 0;
    size_t i = 0;
    if (n && (g4_py_decimal(cp[0]) >= 0 || (cp[0] == '.' && n > 1 && g4_py_decimal(cp[1]) >= 0))) {
        g4_sb b = {0};
        g4_sb_put(&b, "", 0);
        int frac = 0, dot = 0;
        for (; i < n; i++) {
            int d = g4_py_decimal(cp[i]);
            if (d >= 0) {
                g4_sb_putc(&b, (char)('0' + d));
                frac += dot;
            } else if (cp[i] == '.' && !dot) {
                dot = 1;
            } else {
                break;
            }
        }
        if (i == n) {
            while (frac > 0 && b.n > 0 && b.p[b.n - 1] == '0') b.p[--b.n] = 0, frac--;
            if (b.n == 0) g4_sb_putc(&b, '0');
            *digits = g4_sb_take(&b);
            *scale = frac;
            ok = 1;
        } else {
            g4_sb_free(&b);
        }
    }
    free(cp);
    return ok;
}

// --- process_words --------------------------------------------------------------------------
typedef enum { V_NONE, V_INT, V_STR } value_kind;

typedef struct {
    g4_sb out;          // the output words joined by single spaces
    size_t nout;        // words written
    const char *prefix; // pending prefix symbol (NULL = None); points at static or owned text
    char prefix_buf[8]; // current[0] when the prefix comes from a "$5"-style token
    value_kind vk;
    char *v; // the value's text (ints canonical)
} num_state;

static void set_value(num_state *st, value_kind k, char *text) {
    free(st->v);
    st->vk = k;
    st->v = text;
}

// output(result): prefix + str(result) becomes the next word; value and prefix are reset.
static void output(num_state *st, const char *result) {
    if (st->nout++) g4_sb_putc(&st->out, ' ');
    if (st->prefix) g4_sb_puts(&st->out, st->prefix);
    g4_sb_puts(&st->out, result);
    st->prefix = NULL;
    set_value(st, V_NONE, NULL);
}

static void output_value(num_state *st) {
    char *v = st->v;
    st->v = NULL; // output() frees the value; keep the text alive while it is copied
    output(st, v);
    free(v);
}

static void output_cat(num_state *st, const char *a, const char *b, const char *c) {
    char *s = g4_sprintf("%s%s%s", a, b, c ? c : "");
    output(st, s);
    free(s);
}

// Python truthiness of `value` for `str(value or "")`: None, 0 and "" are falsy.
static const char *value_or_empty(const num_state *st) {
    if (st->vk == V_NONE) return "";
    if (st->vk == V_INT && int_is_zero(st->v)) return "";
    return st->v;
}

static void value_str_append(num_state *st, const char *base, const char *tail) {
    set_value(st, V_STR, g4_sprintf("%s%s", base, tail));
}

// The first code point of w, when it is one of the prefix symbols - + £ € $ ¢.
static size_t prefix_len(const char *w) {
    static const char *const syms[] = {"-", "+", "\xc2\xa3", "\xe2\x82\xac", "$", "\xc2\xa2"};
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (strncmp(w, syms[i], strlen(syms[i])) == 0) return strlen(syms[i]);
    return 0;
}

static int process_words(char **words, size_t n, g4_sb *result) {
    num_state st = {0};
    g4_sb_put(&st.out, "", 0);
    int skip = 0, rc = G4_OK;
    char num[32];
    for (size_t i = 0; i < n && rc == G4_OK; i++) {
        const char *prev = i > 0 ? words[i - 1] : NULL;
        const char *cur = words[i];
        const char *next = i + 1 < n ? words[i + 1] : NULL;
        if (skip) {
            skip = 0;
            continue;
        }
        int next_is_numeric = is_numeric(next);
        size_t pl = prefix_len(cur);
        const char *cur_np = cur + pl;
        const vocab_entry *e = lookup(cur);
        if (is_numeric(cur_np)) {
            // arabic numbers (potentially with signs and fractions)
            if (st.vk != V_NONE) {
                if (st.vk == V_STR && st.v[0] && st.v[strlen(st.v) - 1] == '.') {
                    value_str_append(&st, st.v, cur); // decimals / ip address components
                    continue;
                }
                output_value(&st);
            }
            if (pl) {
                memcpy(st.prefix_buf, cur, pl);
                st.prefix_buf[pl] = 0;
                st.prefix = st.prefix_buf;
            }
            char *digits;
            int scale;
            int parsed = parse_decimal(cur_np, &digits, &scale);
            G4_ASSERT(parsed); // ^\d+(\.\d+)?$ matched, so Fraction() accepts it
            if (scale == 0) {  // f.denominator == 1: store integers as int
                set_value(&st, V_INT, int_shift(digits, 0));
                free(digits);
            } else {
                free(digits);
                set_value(&st, V_STR, g4_strdup(cur_np));
            }
        } else if (!e) {
            // non-numeric words
            if (st.vk != V_NONE) output_value(&st);
            output(&st, cur);
        } else if (e->kind == W_ZERO) {
            value_str_append(&st, value_or_empty(&st), "0");
        } else if (e->kind == W_ONE || e->kind == W_ONE_SUFFIXED) {
            // ones, and ones_suffixed (ordinal or plural: yield the number right away)
            int ones = e->value, suffixed = e->kind == W_ONE_SUFFIXED;
            snprintf(num, sizeof num, "%d", ones);
            char *text = NULL;     // the new value as a str ...
            char *int_text = NULL; // ... or as an int
            if (st.vk == V_NONE) {
                int_text = int_small(ones);
            } else if (st.vk == V_STR || is_kind(prev, W_ONE)) {
                if (is_kind(prev, W_TEN) && ones < 10) {
                    // replace the last zero with the digit: value[:-1] + str(ones). Python asserts
                    // value[-1] == "0" for the plain ones (it always holds: after a tens word
                    // the value is a str ending in its "0").
                    if (!suffixed &&
                        (st.vk != V_STR || st.v[0] == 0 || st.v[strlen(st.v) - 1] != '0')) {
                        rc = g4_fail(G4_EINTERNAL,
                                     "number normaliser: value '%s' before '%s' does not end in 0 "
                                     "(Whisper's assertion)",
                                     st.v, cur);
                        break;
                    }
                    size_t len = strlen(st.v);
                    while (len > 0 && ((unsigned char)st.v[len - 1] & 0xc0) == 0x80) len--;
                    if (len > 0) len--; // drop the last code point
                    text = g4_sprintf("%.*s%s", (int)len, st.v, num);
                } else {
                    text = g4_sprintf("%s%s", st.v, num);
                }
            } else if (ones < 10) {
                if (int_mod(st.v, 10) == 0)
                    int_text = int_add(st.v, num);
                else
                    text = g4_sprintf("%s%s", st.v, num);
            } else { // eleven to nineteen
                if (int_mod(st.v, 100) == 0)
                    int_text = int_add(st.v, num);
                else
                    text = g4_sprintf("%s%s", st.v, num);
            }
            if (suffixed) {
                output_cat(&st, int_text ? int_text : text, e->suffix, NULL);
                free(int_text);
                free(text);
            } else {
                set_value(&st, int_text ? V_INT : V_STR, int_text ? int_text : text);
            }
        } else if (e->kind == W_TEN || e->kind == W_TEN_SUFFIXED) {
            snprintf(num, sizeof num, "%d", e->value);
            const char *suffix = e->kind == W_TEN_SUFFIXED ? e->suffix : NULL;
            char *text = NULL, *int_text = NULL;
            if (st.vk == V_NONE)
                int_text = int_small(e->value);
            else if (st.vk == V_STR)
                text = g4_sprintf("%s%s", st.v, num);
            else if (int_mod(st.v, 100) == 0)
                int_text = int_add(st.v, num);
            else
                text = g4_sprintf("%s%s", st.v, num);
            if (suffix) {
                output_cat(&st, int_text ? int_text : text, suffix, NULL);
                free(int_text);
                free(text);
            } else {
                set_value(&st, int_text ? V_INT : V_STR, int_text ? int_text : text);
            }
        } else if (e->kind == W_MULT || e->kind == W_MULT_SUFFIXED) {
            int k = e->value;
            char *mult = int_shift("1", k);
            if (e->kind == W_MULT) {
                if (st.vk == V_NONE) {
                    set_value(&st, V_INT, mult);
                    mult = NULL;
                } else if (st.vk == V_STR || int_is_zero(st.v)) {
                    // f = to_fraction(value); p = f * multiplier; keep p when it is whole
                    char *digits = NULL;
                    int scale = 0;
                    if (parse_decimal(st.v, &digits, &scale) && scale <= k) {
                        set_value(&st, V_INT, int_shift(digits, k - scale));
                    } else {
                        output_value(&st);
                        set_value(&st, V_INT, mult);
                        mult = NULL;
                    }
                    free(digits);
                } else {
                    set_value(&st, V_INT, int_apply_multiplier(st.v, k));
                }
            } else {
                if (st.vk == V_NONE) {
                    output_cat(&st, mult, e->suffix, NULL);
                } else if (st.vk == V_STR) {
                    char *digits = NULL;
                    int scale = 0;
                    if (parse_decimal(st.v, &digits, &scale) && scale <= k) {
                        char *p = int_shift(digits, k - scale);
                        output_cat(&st, p, e->suffix, NULL);
                        free(p);
                    } else {
                        output_value(&st);
                        output_cat(&st, mult, e->suffix, NULL);
                    }
                    free(digits);
                } else {
                    char *p = int_apply_multiplier(st.v, k);
                    output_cat(&st, p, e->suffix, NULL);
                    free(p);
                }
                set_value(&st, V_NONE, NULL);
            }
            free(mult);
        } else if (e->kind == W_PRECEDING) {
            // apply prefix (positive, minus, etc.) if it precedes a number
            if (st.vk != V_NONE) output_value(&st);
            if (lookup(next) || next_is_numeric)
                st.prefix = e->suffix;
            else
                output(&st, cur);
        } else if (e->kind == W_FOLLOWING) {
            // apply prefix (dollars, cents, etc.) only after a number
            if (st.vk != V_NONE) {
                st.prefix = e->suffix;
                output_value(&st);
            } else {
                output(&st, cur);
            }
        } else if (e->kind == W_SUFFIXER) {
            // apply suffix symbols (percent -> '%')
            if (st.vk != V_NONE) {
                if (e->suffix == NULL) { // "per": a dict, {"cent": "%"}
                    if (next && strcmp(next, "cent") == 0) {
                        output_cat(&st, st.v, "%", NULL);
                        skip = 1;
                    } else {
                        output_value(&st);
                        output(&st, cur);
                    }
                } else {
                    output_cat(&st, st.v, e->suffix, NULL);
                }
            } else {
                output(&st, cur);
            }
        } else { // W_SPECIAL
            if (!lookup(next) && !next_is_numeric) {
                // apply special handling only if the next word can be numeric
                if (st.vk != V_NONE) output_value(&st);
                output(&st, cur);
            } else if (strcmp(cur, "and") == 0) {
                // ignore "and" after hundreds, thousands, etc.
                if (!is_kind(prev, W_MULT)) {
                    if (st.vk != V_NONE) output_value(&st);
                    output(&st, cur);
                }
            } else if (strcmp(cur, "double") == 0 || strcmp(cur, "triple") == 0) {
                if (is_kind(next, W_ONE) || is_kind(next, W_ZERO)) {
                    int repeats = cur[0] == 'd' ? 2 : 3;
                    const vocab_entry *ne = lookup(next);
                    int ones = ne->kind == W_ONE ? ne->value : 0;
                    g4_sb b = {0};
                    g4_sb_puts(&b, value_or_empty(&st));
                    for (int r = 0; r < repeats; r++) {
                        snprintf(num, sizeof num, "%d", ones);
                        g4_sb_puts(&b, num);
                    }
                    set_value(&st, V_STR, g4_sb_take(&b));
                    skip = 1;
                } else {
                    if (st.vk != V_NONE) output_value(&st);
                    output(&st, cur);
                }
            } else { // "point"
                if (is_decimal_word(next) || next_is_numeric)
                    value_str_append(&st, value_or_empty(&st), ".");
            }
        }
    }
    if (rc == G4_OK && st.vk != V_NONE) output_value(&st);
    free(st.v);
    if (rc != G4_OK) {
        g4_sb_free(&st.out);
        return rc;
    }
    *result = st.out;
    return G4_OK;
}

// --- preprocess / postprocess -----------------------------------------------------------------
static int preprocess(const char *s, char **out) {
    // replace "<number> and a half" with "<number> point five"
    char **seg;
    size_t nseg;
    int rc = g4_re_split(re_num[RE_AND_HALF], s, &seg, &nseg);
    if (rc != G4_OK) return rc;
    g4_sb b = {0};
    size_t nres = 0;
    for (size_t i = 0; i < nseg; i++) {
        char *stripped = g4_py_strip(seg[i]);
        int empty = stripped[0] == 0;
        free(stripped);
        if (empty) continue;
        if (nres++) g4_sb_putc(&b, ' ');
        g4_sb_puts(&b, seg[i]);
        if (i == nseg - 1) continue;
        char **w;
        size_t nw = g4_py_split(seg[i], &w); // segment.rsplit(maxsplit=2)[-1]: the last word
        const char *last = w[nw - 1];
        int numeric_end = is_decimal_word(last) || is_kind(last, W_MULT);
        g4_sb_puts(&b, numeric_end ? " point five" : " and a half");
        nres++;
        g4_py_words_free(w, nw);
    }
    g4_py_words_free(seg, nseg);
    char *t0 = g4_sb_take(&b), *t1 = NULL, *t2 = NULL;
    // put a space at number/letter boundary, but remove spaces which could be a suffix
    rc = g4_re_sub(re_num[RE_LETTER_DIGIT], t0, "\\1 \\2", &t1);
    if (rc == G4_OK) rc = g4_re_sub(re_num[RE_DIGIT_LETTER], t1, "\\1 \\2", &t2);
    if (rc == G4_OK) rc = g4_re_sub(re_num[RE_NUM_SUFFIX], t2, "\\1\\2", out);
    free(t0);
    free(t1);
    free(t2);
    return rc;
}

// "$2 and ¢7" -> "$2.07": f"{currency}{integer}.{cents:02d}"
static int combine_cents(g4_sb *out, const g4_re_match *m, void *ctx) {
    char *cur = g4_re_group(m, 1), *integer = g4_re_group(m, 2), *cents = g4_re_group(m, 3);
    char buf[16];
    snprintf(buf, sizeof buf, "%02d", atoi(cents)); // [0-9]{1,2}: int() cannot fail
    g4_sb_puts(out, cur);
    g4_sb_puts(out, integer);
    g4_sb_putc(out, '.');
    g4_sb_puts(out, buf);
    free(cur);
    free(integer);
    free(cents);
    return G4_OK;
}

// "$0.07" -> "¢7": f"¢{int(m.group(1))}"
static int extract_cents(g4_sb *out, const g4_re_match *m, void *ctx) {
    char *cents = g4_re_group(m, 1);
    char buf[16];
    snprintf(buf, sizeof buf, "\xc2\xa2%d", atoi(cents));
    g4_sb_puts(out, buf);
    free(cents);
    return G4_OK;
}

static int postprocess(const char *s, char **out) {
    char *t1 = NULL, *t2 = NULL;
    int rc = g4_re_sub_fn(re_num[RE_CENTS_COMBINE], s, combine_cents, NULL, &t1);
    if (rc == G4_OK) rc = g4_re_sub_fn(re_num[RE_CENTS_EXTRACT], t1, extract_cents, NULL, &t2);
    // write "one(s)" instead of "1(s)", just for the readability
    if (rc == G4_OK) rc = g4_re_sub(re_num[RE_ONE], t2, "one\\1", out);
    free(t1);
    free(t2);
    return rc;
}

int g4_whisper_numbers(const char *s, char **out) {
    int rc = g4_py_check_utf8(s, "number normaliser input");
    if (rc != G4_OK) return rc;
    pthread_once(&num_once, num_init);
    char *pre = NULL;
    if ((rc = preprocess(s, &pre)) != G4_OK) return rc;
    char **w;
    size_t nw = g4_py_split(pre, &w);
    free(pre);
    g4_sb joined = {0};
    rc = process_words(w, nw, &joined);
    g4_py_words_free(w, nw);
    if (rc != G4_OK) return rc;
    char *j = g4_sb_take(&joined);
    rc = postprocess(j, out);
    free(j);
    return rc;
}
