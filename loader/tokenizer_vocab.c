// tokenizer_vocab.c: reads model.vocab and model.merges of a tokenizer.json, the two sections
// that are nearly all of the real file (262144 pieces, ~514k merges, ~32 MB).
//
// Why not cJSON for these: cJSON builds one heap node per value, ~1.8M nodes for the real file,
// and spends ~0.6 s parsing and ~0.15 s freeing them on our CI machine, which leaves no room in
// the 1 s load budget. Here one pass over the document skips every other value (without checking
// it: cJSON does, later) and reads the two sections strictly, straight into the arena and the
// hash tables; tokenizer.c then hands the rest of the document, with those two values replaced
// by {} and [], to cJSON. Merges need the vocabulary: when a file lists them first they are read
// after the pass.
#include <stdlib.h>
#include <utf8proc.h>

#include "loader/tokenizer_impl.h"

typedef struct {
    const char *s;
    size_t n, i;
    const char *name; // file name for messages
} js_cur;

static void js_ws(js_cur *c) {
    while (c->i < c->n) {
        char ch = c->s[c->i];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') break;
        c->i++;
    }
}

static int js_err(js_cur *c, const char *what) {
    return g4_fail(G4_EUSER, "%s: %s at byte %zu", c->name, what, c->i);
}

// A growable byte buffer for decoded strings.
typedef struct {
    char *p;
    size_t n, cap;
} js_buf;

static void buf_reserve(js_buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) cap *= 2;
    b->p = g4_realloc(b->p, cap);
    b->cap = cap;
}

static int hex4(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char h = s[k];
        v <<= 4;
        if (h >= '0' && h <= '9')
            v |= (uint32_t)(h - '0');
        else if (h >= 'a' && h <= 'f')
            v |= (uint32_t)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F')
            v |= (uint32_t)(h - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

// Decodes the JSON string at the cursor (which is on its opening quote) and appends its UTF-8
// to b. Refuses what serde_json refuses: control characters, bad escapes, lone surrogates and
// invalid UTF-8.
static int js_string(js_cur *c, js_buf *b) {
    if (c->i >= c->n || c->s[c->i] != '"') return js_err(c, "expected a string");
    c->i++;
    for (;;) {
        // Copy the plain ASCII run in one go (the common case: most pieces are short ASCII).
        size_t j = c->i;
        while (j < c->n) {
            unsigned char ch = (unsigned char)c->s[j];
            if (ch == '"' || ch == '\\' || ch < 0x20 || ch >= 0x80) break;
            j++;
        }
        buf_reserve(b, j - c->i + 4);
        memcpy(b->p + b->n, c->s + c->i, j - c->i);
        b->n += j - c->i;
        c->i = j;
        if (c->i >= c->n) return js_err(c, "unterminated string");
        unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == '"') {
            c->i++;
            return G4_OK;
        }
        if (ch < 0x20) return js_err(c, "control character inside a string");
        if (ch >= 0x80) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)c->s + c->i,
                                                  (utf8proc_ssize_t)(c->n - c->i), &cp);
            if (k <= 0) return js_err(c, "invalid UTF-8 inside a string");
            memcpy(b->p + b->n, c->s + c->i, (size_t)k);
            b->n += (size_t)k;
            c->i += (size_t)k;
            continue;
        }
        // An escape.
        if (c->i + 1 >= c->n) return js_err(c, "unterminated escape");
        char e = c->s[c->i + 1];
        const char *simple = "\"\\/bfnrt";
        const char *repl = "\"\\/\b\f\n\r\t";
        const char *at = e ? strchr(simple, e) : NULL;
        if (at) {
            b->p[b->n++] = repl[at - simple];
            c->i += 2;
            continue;
        }
        if (e != 'u') return js_err(c, "invalid escape");
        uint32_t cp;
        if (c->i + 6 > c->n || !hex4(c->s + c->i + 2, &cp)) return js_err(c, "invalid \\u escape");
        c->i += 6;
        if (cp >= 0xdc00 && cp <= 0xdfff) return js_err(c, "lone low surrogate in \\u escape");
        if (cp >= 0xd800 && cp <= 0xdbff) {
            uint32_t lo;
            if (c->i + 6 > c->n || c->s[c->i] != '\\' || c->s[c->i + 1] != 'u' ||
                !hex4(c->s + c->i + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                return js_err(c, "lone high surrogate in \\u escape");
            c->i += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        b->n += (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)b->p + b->n);
    }
}

// Skips one value without checking its syntax (only to find where it ends; whatever is skipped is
// either parsed strictly later or handed to cJSON, which checks it). Never reads out of bounds.
static int js_skip(js_cur *c) {
    js_ws(c);
    if (c->i >= c->n) return js_err(c, "unexpected end of file");
    int depth = 0;
    do {
        if (c->i >= c->n) return js_err(c, "unexpected end of file");
        char ch = c->s[c->i];
        if (ch == '"') {
            c->i++;
            while (c->i < c->n && c->s[c->i] != '"') c->i += c->s[c->i] == '\\' ? 2 : 1;
            if (c->i >= c->n) return js_err(c, "unterminated string");
            c->i++;
        } else if (ch == '{' || ch == '[') {
            depth++;
            c->i++;
        } else if (ch == '}' || ch == ']') {
            if (depth == 0) return js_err(c, "unexpected bracket");
            depth--;
            c->i++;
        } else if (depth > 0) {
            c->i++;
        } else { // a scalar at top level: up to the next delimiter
            while (c->i < c->n && !strchr(",}] \t\n\r", c->s[c->i])) c->i++;
        }
    } while (depth > 0);
    return G4_OK;
}

// Iterates the members of the object at the cursor, calling fn(key, value cursor) for each, with
// the cursor on the value; fn must leave the cursor after the value.
typedef int (*js_member_fn)(js_cur *c, const char *key, size_t key_len, void *ctx);
static int js_object(js_cur *c, js_member_fn fn, void *ctx) {
    js_ws(c);
    if (c->i >= c->n || c->s[c->i] != '{') return js_err(c, "expected an object");
    c->i++;
    js_ws(c);
    if (c->i < c->n && c->s[c->i] == '}') {
        c->i++;
        return G4_OK;
    }
    js_buf key = {0};
    int rc = G4_OK;
    for (;;) {
        js_ws(c);
        key.n = 0;
        if ((rc = js_string(c, &key))) break;
        js_ws(c);
        if (c->i >= c->n || c->s[c->i] != ':') {
            rc = js_err(c, "expected ':'");
            break;
        }
        c->i++;
        js_ws(c);
        if ((rc = fn(c, key.p, key.n, ctx))) break;
        js_ws(c);
        if (c->i < c->n && c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->i < c->n && c->s[c->i] == '}') {
            c->i++;
            break;
        }
        rc = js_err(c, "expected ',' or '}'");
        break;
    }
    free(key.p);
    return rc;
}

static int key_is(const char *key, size_t n, const char *want) {
    return n == strlen(want) && memcmp(key, want, n) == 0;
}

// --- model.vocab: {"piece": id, ...} ---------------------------------------------------------
static int js_id(js_cur *c, uint32_t *out) {
    size_t start = c->i;
    uint64_t v = 0;
    if (c->i < c->n && c->s[c->i] == '-') return js_err(c, "negative id in model.vocab");
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
        v = v * 10 + (uint64_t)(c->s[c->i] - '0');
        if (v >= TOK_MAX_IDS) return js_err(c, "id in model.vocab is too large (limit 16777216)");
        c->i++;
    }
    if (c->i == start || (c->i < c->n && strchr(".eE", c->s[c->i])))
        return js_err(c, "expected an integer id in model.vocab");
    *out = (uint32_t)v;
    return G4_OK;
}

// The id-indexed table of pieces and its index, from the (piece, id) list of the file.
static int build_model_vocab(g4_tokenizer *t, const tok_str *pieces, const uint32_t *ids,
                             size_t count) {
    uint32_t max_id = 0;
    for (size_t k = 0; k < count; k++) max_id = ids[k] > max_id ? ids[k] : max_id;
    int n_ids = count ? (int)max_id + 1 : 0;
    t->n_vocab = n_ids;
    t->model = g4_malloc(((size_t)n_ids + 1) * sizeof *t->model);
    for (int i = 0; i < n_ids; i++) t->model[i] = (tok_str){0, TOK_NONE};
    for (size_t k = 0; k < count; k++) {
        if (t->model[ids[k]].len != TOK_NONE)
            return g4_fail(G4_EUSER,
                           "%s: model.vocab: id %u is given to two pieces ('%.*s' and "
                           "'%.*s')",
                           t->name, ids[k], (int)t->model[ids[k]].len, tok_s(t, t->model[ids[k]]),
                           (int)pieces[k].len, tok_s(t, pieces[k]));
        t->model[ids[k]] = pieces[k];
    }
    int64_t dup = tok_index_build(&t->model_index, t, t->model, (size_t)n_ids);
    if (dup >= 0)
        return g4_fail(G4_EUSER, "%s: model.vocab: piece '%.*s' appears twice", t->name,
                       (int)t->model[dup].len, tok_s(t, t->model[dup]));
    return G4_OK;
}

// Reads the vocab object at the cursor: pieces into the arena, then the tables.
static int read_vocab(g4_tokenizer *t, js_cur *c) {
    js_buf arena = {t->arena, t->arena_len, t->arena_cap};
    size_t n = 0, cap = 1024;
    tok_str *ps = g4_malloc(cap * sizeof *ps);
    uint32_t *is = g4_malloc(cap * sizeof *is);
    int rc = G4_OK;
    if (c->i >= c->n || c->s[c->i] != '{') {
        rc = js_err(c, "model.vocab: expected an object of piece -> id");
        goto done;
    }
    c->i++;
    js_ws(c);
    if (c->i < c->n && c->s[c->i] == '}') {
        c->i++;
        goto done;
    }
    for (;;) {
        js_ws(c);
        size_t start = arena.n;
        if ((rc = js_string(c, &arena))) goto done;
        if (arena.n > UINT32_MAX / 2) {
            rc = js_err(c, "model.vocab: pieces too large");
            goto done;
        }
        js_ws(c);
        if (c->i >= c->n || c->s[c->i] != ':') {
            rc = js_err(c, "model.vocab: expected ':'");
            goto done;
        }
        c->i++;
        js_ws(c);
        uint32_t id = 0;
        if ((rc = js_id(c, &id))) goto done;
        if (n == cap) {
            cap *= 2;
            ps = g4_realloc(ps, cap * sizeof *ps);
            is = g4_realloc(is, cap * sizeof *is);
        }
        ps[n] = (tok_str){(uint32_t)start, (uint32_t)(arena.n - start)};
        is[n++] = id;
        js_ws(c);
        if (c->i < c->n && c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->i < c->n && c->s[c->i] == '}') {
            c->i++;
            break;
        }
        rc = js_err(c, "model.vocab: expected ',' or '}'");
        goto done;
    }
done:
    t->arena = arena.p;
    t->arena_len = arena.n;
    t->arena_cap = arena.cap;
    if (!rc) rc = build_model_vocab(t, ps, is, n);
    free(ps);
    free(is);
    return rc;
}

// --- model.merges: ["a b", ...] (legacy) or [["a", "b"], ...] ---------------------------------
// Adds one merge (a, b) with the given rank, as HF's BpeBuilder::build: a, b and a+b must all be
// pieces of the vocabulary.
static int add_merge(g4_tokenizer *t, js_cur *c, const char *a, size_t na, const char *b, size_t nb,
                     js_buf *cat, uint32_t rank) {
    int ia = tok_model_id(t, a, na), ib = tok_model_id(t, b, nb);
    cat->n = 0;
    buf_reserve(cat, na + nb);
    memcpy(cat->p, a, na);
    memcpy(cat->p + na, b, nb);
    cat->n = na + nb;
    int im = tok_model_id(t, cat->p, cat->n);
    if (ia < 0 || ib < 0 || im < 0) {
        const char *miss = ia < 0 ? a : ib < 0 ? b : cat->p;
        size_t nm = ia < 0 ? na : ib < 0 ? nb : cat->n;
        return g4_fail(G4_EUSER,
                       "%s: model.merges[%u] near byte %zu: piece '%.*s' is not in "
                       "model.vocab (every merge part and result must be)",
                       t->name, rank, c->i, (int)(nm > 200 ? 200 : nm), miss);
    }
    tok_merge_put(&t->merges, (uint32_t)ia, (uint32_t)ib, rank, (uint32_t)im);
    return G4_OK;
}

// Reads the merges array at the cursor (the vocabulary is already known).
static int read_merges(g4_tokenizer *t, js_cur *c) {
    js_buf s1 = {0}, s2 = {0}, cat = {0};
    uint32_t rank = 0;
    int rc = G4_OK;
    // Real files have about two merges per piece; the map grows if there are more.
    tok_merge_reserve(&t->merges, 2 * (uint64_t)t->n_vocab + 64);
    if (c->i >= c->n || c->s[c->i] != '[') {
        rc = js_err(c, "model.merges: expected an array");
        goto done;
    }
    c->i++;
    js_ws(c);
    if (c->i < c->n && c->s[c->i] == ']') {
        c->i++;
        goto done;
    }
    for (;;) {
        js_ws(c);
        s1.n = s2.n = 0;
        if (c->i < c->n && c->s[c->i] == '"') { // "a b": exactly one space, as HF's split(' ')
            if ((rc = js_string(c, &s1))) goto done;
            if (s1.n >= 8 && memcmp(s1.p, "#version", 8) == 0) goto next; // HF skips these
            const char *sp = memchr(s1.p, ' ', s1.n);
            if (!sp || memchr(sp + 1, ' ', s1.n - (size_t)(sp + 1 - s1.p))) {
                rc = g4_fail(G4_EUSER,
                             "%s: model.merges[%u] near byte %zu: expected \"a b\" "
                             "(two pieces and one space), got '%.*s'",
                             t->name, rank, c->i, (int)(s1.n > 200 ? 200 : s1.n), s1.p);
                goto done;
            }
            size_t na = (size_t)(sp - s1.p);
            if ((rc = add_merge(t, c, s1.p, na, sp + 1, s1.n - na - 1, &cat, rank))) goto done;
        } else if (c->i < c->n && c->s[c->i] == '[') { // ["a", "b"]
            c->i++;
            js_ws(c);
            if ((rc = js_string(c, &s1))) goto done;
            js_ws(c);
            if (c->i >= c->n || c->s[c->i] != ',') {
                rc = js_err(c, "model.merges: expected a pair [\"a\", \"b\"]");
                goto done;
            }
            c->i++;
            js_ws(c);
            if ((rc = js_string(c, &s2))) goto done;
            js_ws(c);
            if (c->i >= c->n || c->s[c->i] != ']') {
                rc = js_err(c, "model.merges: expected a pair [\"a\", \"b\"]");
                goto done;
            }
            c->i++;
            if ((rc = add_merge(t, c, s1.p, s1.n, s2.p, s2.n, &cat, rank))) goto done;
        } else {
            rc = js_err(c, "model.merges: expected \"a b\" or [\"a\", \"b\"]");
            goto done;
        }
        rank++;
    next:
        js_ws(c);
        if (c->i < c->n && c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->i < c->n && c->s[c->i] == ']') {
            c->i++;
            break;
        }
        rc = js_err(c, "model.merges: expected ',' or ']'");
        goto done;
    }
done:
    t->n_merges = (int)rank;
    free(s1.p);
    free(s2.p);
    free(cat.p);
    return rc;
}

// --- one pass over the document ------------------------------------------------------------------
typedef struct {
    g4_tokenizer *t;
    size_t *vocab, *merges; // [2] spans, [0] == SIZE_MAX while not found
    int have_vocab;         // vocab read: merges can be read where they are met
} sections_ctx;

static int model_member(js_cur *c, const char *key, size_t n, void *ctx) {
    sections_ctx *sc = ctx;
    int is_vocab = key_is(key, n, "vocab"), is_merges = key_is(key, n, "merges");
    size_t *span = is_vocab ? sc->vocab : is_merges ? sc->merges : NULL;
    if (span && span[0] != SIZE_MAX)
        return g4_fail(G4_EUSER, "%s: model.%.*s appears twice", c->name, (int)n, key);
    size_t start = c->i;
    int rc;
    if (is_vocab) {
        rc = read_vocab(sc->t, c);
        sc->have_vocab = !rc;
    } else if (is_merges && sc->have_vocab) {
        rc = read_merges(sc->t, c);
    } else { // merges before vocab (read after the pass), or another key
        rc = js_skip(c);
    }
    if (!rc && span) {
        span[0] = start;
        span[1] = c->i;
    }
    return rc;
}

static int root_member(js_cur *c, const char *key, size_t n, void *ctx) {
    if (!key_is(key, n, "model")) return js_skip(c);
    if (c->i < c->n && c->s[c->i] == '{') return js_object(c, model_member, ctx);
    return js_skip(c); // not an object: tokenizer.c reports it with cJSON's view
}

int tok_read_big_sections(g4_tokenizer *t, const char *js, size_t n, size_t vocab[2],
                          size_t merges[2]) {
    js_cur c = {js, n, 0, t->name};
    vocab[0] = vocab[1] = merges[0] = merges[1] = SIZE_MAX;
    sections_ctx sc = {t, vocab, merges, 0};
    // Skip a UTF-8 byte order mark, which some editors add.
    if (n >= 3 && memcmp(js, "\xef\xbb\xbf", 3) == 0) c.i = 3;
    int rc = js_object(&c, root_member, &sc);
    if (!rc && sc.have_vocab && merges[0] != SIZE_MAX && !t->merges.e) {
        js_cur m = {js, merges[1], merges[0], t->name};
        rc = read_merges(t, &m);
    }
    return rc;
}
