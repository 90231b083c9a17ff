// text_stream.c: stop strings and the streamed text of a generation (see generate.h).
//
// Why text is held back: decoding is not append-only. A run of byte-fallback pieces decodes as
// a whole (valid UTF-8, or one U+FFFD per byte), so the next byte piece can turn "\uFFFD" into
// "é", or a valid character into U+FFFDs; special tokens are dropped before the decoder, so
// they do not end such a run. And a tail that is the start of a stop string may become the
// stop string, which is not part of the text. What was passed on is never taken back, so only
// text that no later token can change is passed on.
#include <stdlib.h>
#include <string.h>

#include "engine/generate.h"

long g4_find_stop(const char *const *stop, int n, const char *text, size_t len, int *which) {
    long best = -1;
    for (int i = 0; i < n; i++) {
        const char *hit = memmem(text, len, stop[i], strlen(stop[i]));
        if (hit && (best < 0 || hit - text < best)) {
            best = hit - text;
            *which = i;
        }
    }
    return best;
}

void g4_text_stream_init(g4_text_stream *s, const g4_tokenizer *tok, const char *const *stop,
                         int n_stop, g4_gen_text_fn fn, void *ctx) {
    *s = (g4_text_stream){.tok = tok, .stop = stop, .n_stop = n_stop, .fn = fn, .ctx = ctx};
}

void g4_text_stream_free(g4_text_stream *s) {
    free(s->sent);
    s->sent = NULL;
}

// Passes on text[emitted..upto), backed off to a UTF-8 character boundary.
static void emit_upto(g4_text_stream *s, const char *text, size_t len, size_t upto) {
    while (upto > s->emitted && upto < len && ((unsigned char)text[upto] & 0xc0) == 0x80) upto--;
    if (upto <= s->emitted) return;
    // What was passed on is the start of the text by construction; should it ever not be,
    // pass on nothing more rather than text that does not follow.
    if (s->emitted && memcmp(s->sent, text, s->emitted) != 0) return;
    if (s->fn) s->fn(s->ctx, text + s->emitted, upto - s->emitted);
    s->sent = g4_realloc(s->sent, upto + 1);
    memcpy(s->sent, text, upto);
    s->emitted = upto;
}

// 1 when id is a "<0xHH>" byte-fallback piece.
static int is_byte_piece(const g4_tokenizer *tok, int id) {
    size_t n;
    const char *p = g4_tokenizer_piece(tok, id, &n);
    return p && n == 6 && !memcmp(p, "<0x", 3) && p[5] == '>';
}

int g4_text_stream_update(g4_text_stream *s, const int *ids, size_t n) {
    // the tokens before the trailing run of byte pieces (and the special tokens within it)
    size_t k = n;
    while (k > 0 &&
           (is_byte_piece(s->tok, ids[k - 1]) || g4_tokenizer_is_special(s->tok, ids[k - 1])))
        k--;
    char *text;
    size_t len;
    int rc = g4_tokenizer_decode(s->tok, ids, k, 1, &text, &len);
    if (rc) return rc;
    // up to a stop string it contains (the text ends there)
    int which;
    long cut = g4_find_stop(s->stop, s->n_stop, text, len, &which);
    if (cut >= 0) len = (size_t)cut;
    // less the longest tail that is a proper prefix of a stop string
    size_t hold = 0;
    for (int i = 0; i < s->n_stop; i++) {
        size_t sl = strlen(s->stop[i]);
        for (size_t l = sl - 1 < len ? sl - 1 : len; l > hold; l--)
            if (!memcmp(text + len - l, s->stop[i], l)) {
                hold = l;
                break;
            }
    }
    emit_upto(s, text, len, len - hold);
    free(text);
    return G4_OK;
}

void g4_text_stream_finish(g4_text_stream *s, const char *text, size_t len) {
    emit_upto(s, text, len, len);
}
