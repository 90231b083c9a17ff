// asr_cues.c: a segment's text -> subtitle cues (tools/asr_cues.h).
#include "tools/asr_cues.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// UTF-8 characters in s[0, n) (continuation bytes are not counted).
static double chars(const char *s, size_t n) {
    double c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

// How a word ends a stretch of speech: 2 after a sentence (. ! ? and their CJK / ellipsis
// forms, or a line break), 1 after a pause (, ; : and the dashes), else 0.
static int word_break(const char *w, size_t n, int newline_after) {
    if (newline_after) return 2;
    static const char *const sentence[] = {".", "!", "?", "\xe2\x80\xa6", "\xe3\x80\x82",
                                           "\xef\xbc\x81", "\xef\xbc\x9f"};
    static const char *const pause[] = {",", ";", ":", "\xe2\x80\x94", "\xe2\x80\x93",
                                        "\xe3\x80\x81", "\xef\xbc\x8c"};
    // (a closing quote or bracket after the mark still ends the sentence)
    while (n && (w[n - 1] == '"' || w[n - 1] == '\'' || w[n - 1] == ')' || w[n - 1] == ']')) n--;
    for (size_t k = 0; k < sizeof sentence / sizeof *sentence; k++) {
        size_t m = strlen(sentence[k]);
        if (n >= m && !memcmp(w + n - m, sentence[k], m)) return 2;
    }
    for (size_t k = 0; k < sizeof pause / sizeof *pause; k++) {
        size_t m = strlen(pause[k]);
        if (n >= m && !memcmp(w + n - m, pause[k], m)) return 1;
    }
    return 0;
}

int g4_asr_cues(const char *text, double t0, double t1, double max_s, g4_asr_cue **out) {
    *out = NULL;
    // the words: [start, end) byte ranges, their weight (characters + one for the gap after)
    // and the break after each
    size_t n_words = 0, cap = 16, len = strlen(text);
    size_t *ws = g4_malloc(sizeof(size_t) * cap), *we = g4_malloc(sizeof(size_t) * cap);
    int *brk = g4_malloc(sizeof(int) * cap);
    for (size_t i = 0; i < len;) {
        while (i < len && is_space(text[i])) i++;
        if (i == len) break;
        size_t j = i;
        while (j < len && !is_space(text[j])) j++;
        int nl = 0;
        for (size_t k = j; k < len && is_space(text[k]); k++) nl |= text[k] == '\n';
        if (n_words == cap) {
            cap *= 2;
            ws = g4_realloc(ws, sizeof(size_t) * cap);
            we = g4_realloc(we, sizeof(size_t) * cap);
            brk = g4_realloc(brk, sizeof(int) * cap);
        }
        ws[n_words] = i, we[n_words] = j, brk[n_words] = word_break(text + i, j - i, nl);
        n_words++;
        i = j;
    }
    if (!n_words) {
        free(ws), free(we), free(brk);
        return 0;
    }
    // times by characters: the segment's span shared out over the words in proportion
    double *at = g4_malloc(sizeof(double) * (n_words + 1)); // at[i]: where word i starts
    double total = 0;
    for (size_t i = 0; i < n_words; i++) total += chars(text + ws[i], we[i] - ws[i]) + 1;
    at[0] = t0;
    double acc = 0;
    for (size_t i = 0; i < n_words; i++) {
        acc += chars(text + ws[i], we[i] - ws[i]) + 1;
        at[i + 1] = i + 1 == n_words ? t1 : t0 + (t1 - t0) * acc / total;
    }
    g4_asr_cue *c = g4_calloc(n_words, sizeof *c); // at most one cue a word
    int n = 0;
    for (size_t a = 0; a < n_words;) {
        // the cue starting at word a: through the first sentence end, or, when that would
        // run past max_s, through the last pause before the limit (else the last word that
        // fits; at least one word)
        size_t b = a, last_pause = SIZE_MAX;
        for (;;) {
            if (brk[b] == 2 || b + 1 == n_words) break;
            if (brk[b] == 1) last_pause = b;
            if (at[b + 2] - at[a] > max_s) {
                if (last_pause != SIZE_MAX) b = last_pause;
                break;
            }
            b++;
        }
        char *s = g4_malloc(we[b] - ws[a] + 1), *p = s;
        for (size_t i = a; i <= b; i++) { // the words joined by single spaces
            if (i > a) *p++ = ' ';
            memcpy(p, text + ws[i], we[i] - ws[i]);
            p += we[i] - ws[i];
        }
        *p = 0;
        c[n++] = (g4_asr_cue){at[a], at[b + 1], s};
        a = b + 1;
    }
    free(ws), free(we), free(brk), free(at);
    *out = c;
    return n;
}

void g4_asr_cues_free(g4_asr_cue *c, int n) {
    for (int i = 0; i < n; i++) free(c[i].text);
    free(c);
}
