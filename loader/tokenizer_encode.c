// tokenizer_encode.c: text -> ids (see tokenizer.h for the pipeline). Each stage follows HF
// `tokenizers` 0.23: AddedVocabulary::find_matches / extract_and_normalize, the Replace and
// Prepend normalizers, the Split pre-tokenizer, BPE::merge_word and Word::merge_all.
#include <stdlib.h>
#include <utf8proc.h>

#include "loader/tokenizer_impl.h"

// A piece of a string: [start, end), with the added token it is (-1: plain text).
typedef struct {
    size_t start, end;
    int added;
} seg;

typedef struct {
    seg *v;
    size_t n, cap;
} seg_list;

static void seg_push(seg_list *l, size_t start, size_t end, int added) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = g4_realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (seg){start, end, added};
}

// --- normalizer ---------------------------------------------------------------------------------
// Replaces every non-overlapping occurrence of pat (left to right) in s[0..n) by rep.
static char *replace_all(const char *s, size_t n, const char *pat, size_t np, const char *rep,
                         size_t nr, size_t *out_n) {
    size_t count = 0;
    for (const char *p = s, *e = s + n; (p = memmem(p, (size_t)(e - p), pat, np)); p += np) count++;
    size_t m = n - count * np + count * nr;
    char *out = g4_malloc(m + 1), *o = out;
    const char *p = s, *e = s + n;
    for (const char *q; (q = memmem(p, (size_t)(e - p), pat, np)); p = q + np) {
        memcpy(o, p, (size_t)(q - p)), o += q - p;
        memcpy(o, rep, nr), o += nr;
    }
    memcpy(o, p, (size_t)(e - p)), o += e - p;
    *o = 0;
    *out_n = m;
    return out;
}

char *tok_normalize(const g4_tokenizer *t, const char *s, size_t n, size_t *out_n) {
    char *cur = g4_strndup(s, n);
    for (int k = 0; k < t->n_norm; k++) {
        const tok_norm_step *st = &t->norm[k];
        char *next;
        if (st->kind == TOK_NORM_REPLACE) {
            next = replace_all(cur, n, tok_s(t, st->pattern), st->pattern.len,
                               tok_s(t, st->content), st->content.len, &n);
        } else { // PREPEND, only to a non-empty string (as HF)
            if (n == 0) continue;
            next = g4_malloc(st->content.len + n + 1);
            memcpy(next, tok_s(t, st->content), st->content.len);
            memcpy(next + st->content.len, cur, n + 1);
            n += st->content.len;
        }
        free(cur);
        cur = next;
    }
    *out_n = n;
    return cur;
}

// --- added tokens ------------------------------------------------------------------------------
static int32_t cp_at(const char *s, size_t n, size_t i) {
    utf8proc_int32_t cp = -1;
    utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    return cp;
}

// Start of the character that ends at byte i (s is valid UTF-8, i > 0).
static size_t char_before(const char *s, size_t i) {
    do i--;
    while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80);
    return i;
}

// The longest pattern of m starting at s[i], as a position in m->pat, or -1.
static int match_at(const g4_tokenizer *t, const tok_matcher *m, const char *s, size_t n,
                    size_t i) {
    uint8_t b = (uint8_t)s[i];
    if (!(m->first[b >> 3] & (1u << (b & 7)))) return -1;
    for (int k = 0; k < m->n_lengths; k++) {
        size_t len = (size_t)m->lengths[k];
        if (len > n - i) continue;
        int64_t p = tok_index_find(&m->index, t, m->pat, s + i, len);
        if (p >= 0) return (int)p;
    }
    return -1;
}

// Splits s[0..n) into added tokens of matcher m and the text between them: leftmost-longest
// matches, scanned without overlap (as Aho-Corasick's find_iter), then HF's rules: a single_word
// token must not touch a word character on either side; lstrip / rstrip tokens swallow the
// whitespace beside them. Empty text pieces are left out, as HF drops empty splits.
static void find_added(const g4_tokenizer *t, const tok_matcher *m, const char *s, size_t n,
                       seg_list *out) {
    size_t start_offset = 0, pos = 0;
    while (m->n && pos < n) {
        size_t i = pos;
        int p = -1;
        for (; i < n; i++)
            if ((p = match_at(t, m, s, n, i)) >= 0) break;
        if (p < 0) break;
        const tok_added *a = &t->added[m->added[p]];
        size_t start = i, stop = i + m->pat[p].len;
        pos = stop; // the scan resumes after the match whatever the rules below decide
        if (a->single_word) {
            int start_space = start == 0 || !tok_is_word(cp_at(s, n, char_before(s, start)));
            int stop_space = stop == n || !tok_is_word(cp_at(s, n, stop));
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t c = char_before(s, ns);
                if (!tok_is_space(cp_at(s, n, c))) break;
                ns = c;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip)
            while (stop < n && tok_is_space(cp_at(s, n, stop)))
                stop += tok_utf8_len((uint8_t)s[stop]);
        if (start_offset < start) seg_push(out, start_offset, start, -1);
        seg_push(out, start, stop, m->added[p]);
        start_offset = stop;
    }
    if (start_offset < n) seg_push(out, start_offset, n, -1);
}

// --- pre-tokenizer ------------------------------------------------------------------------------
// One Split step over the pieces in, appended to out (HF's NormalizedString::split).
static void split_step(const g4_tokenizer *t, const tok_split_step *st, const char *s,
                       const seg_list *in, seg_list *out) {
    const char *pat = tok_s(t, st->pattern);
    size_t np = st->pattern.len;
    seg_list parts = {0};
    for (size_t k = 0; k < in->n; k++) {
        size_t a = in->v[k].start, e = in->v[k].end;
        // The piece cut at every occurrence: (start, end, is_match) covering [a, e).
        parts.n = 0;
        for (const char *q; a < e && (q = memmem(s + a, e - a, pat, np));
             a = (size_t)(q - s) + np) {
            size_t qs = (size_t)(q - s);
            if (qs > a) seg_push(&parts, a, qs, 0);
            seg_push(&parts, qs, qs + np, 1);
        }
        if (a < e) seg_push(&parts, a, e, 0);
        if (st->invert)
            for (size_t i = 0; i < parts.n; i++) parts.v[i].added ^= 1;
        size_t first = out->n;
        int prev_match = 0;
        switch (st->behavior) {
        case TOK_SPLIT_REMOVED:
            for (size_t i = 0; i < parts.n; i++)
                if (!parts.v[i].added) seg_push(out, parts.v[i].start, parts.v[i].end, -1);
            break;
        case TOK_SPLIT_ISOLATED:
            for (size_t i = 0; i < parts.n; i++)
                seg_push(out, parts.v[i].start, parts.v[i].end, -1);
            break;
        case TOK_SPLIT_MERGED_WITH_PREVIOUS: // a match joins the piece before it
            for (size_t i = 0; i < parts.n; i++) {
                if (parts.v[i].added && !prev_match && out->n > first)
                    out->v[out->n - 1].end = parts.v[i].end;
                else
                    seg_push(out, parts.v[i].start, parts.v[i].end, -1);
                prev_match = parts.v[i].added;
            }
            break;
        case TOK_SPLIT_MERGED_WITH_NEXT: // a match joins the piece after it (built backwards)
            for (size_t i = parts.n; i-- > 0;) {
                if (parts.v[i].added && !prev_match && out->n > first)
                    out->v[out->n - 1].start = parts.v[i].start;
                else
                    seg_push(out, parts.v[i].start, parts.v[i].end, -1);
                prev_match = parts.v[i].added;
            }
            for (size_t i = first, j = out->n - 1; i < j; i++, j--) {
                seg x = out->v[i];
                out->v[i] = out->v[j];
                out->v[j] = x;
            }
            break;
        case TOK_SPLIT_CONTIGUOUS: // runs of matches (and of non-matches) stay together
            for (size_t i = 0; i < parts.n; i++) {
                if (parts.v[i].added == prev_match && out->n > first)
                    out->v[out->n - 1].end = parts.v[i].end;
                else
                    seg_push(out, parts.v[i].start, parts.v[i].end, -1);
                prev_match = parts.v[i].added;
            }
            break;
        }
    }
    free(parts.v);
}

// --- BPE ---------------------------------------------------------------------------------------
typedef struct {
    uint32_t id;
    int32_t prev, next; // neighbours in the word (-1: none)
    uint32_t len;       // bytes covered; 0 once merged into its left neighbour
} bpe_sym;

typedef struct {
    uint32_t rank, pos, merged;
} bpe_merge;

typedef struct {
    bpe_sym *sym;
    size_t n, cap;
    bpe_merge *heap; // min-heap on (rank, pos): lowest rank first, leftmost among equals
    size_t hn, hcap;
} bpe_work;

static void sym_add(bpe_work *w, uint32_t id, uint32_t len) {
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 64;
        w->sym = g4_realloc(w->sym, w->cap * sizeof *w->sym);
    }
    if (w->n) w->sym[w->n - 1].next = (int32_t)w->n;
    w->sym[w->n] = (bpe_sym){id, (int32_t)w->n - 1, -1, len};
    w->n++;
}

static int merge_before(bpe_merge a, bpe_merge b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(bpe_work *w, bpe_merge m) {
    if (w->hn == w->hcap) {
        w->hcap = w->hcap ? w->hcap * 2 : 64;
        w->heap = g4_realloc(w->heap, w->hcap * sizeof *w->heap);
    }
    size_t i = w->hn++;
    while (i > 0 && merge_before(m, w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = m;
}

static bpe_merge heap_pop(bpe_work *w) {
    bpe_merge top = w->heap[0], last = w->heap[--w->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->hn) break;
        if (c + 1 < w->hn && merge_before(w->heap[c + 1], w->heap[c])) c++;
        if (!merge_before(w->heap[c], last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->hn) w->heap[i] = last;
    return top;
}

static void push_pair(const g4_tokenizer *t, bpe_work *w, size_t pos) {
    const bpe_sym *s = &w->sym[pos];
    uint32_t rank, merged;
    if (s->next >= 0 && tok_merge_get(&t->merges, s->id, w->sym[s->next].id, &rank, &merged))
        heap_push(w, (bpe_merge){rank, (uint32_t)pos, merged});
}

// One word -> ids appended to out (HF BPE::merge_word + Word::merge_all).
static int bpe_word(const g4_tokenizer *t, const char *s, size_t n, bpe_work *w, g4_ids *out) {
    if (t->ignore_merges) { // a word that is a piece is taken whole
        int id = tok_model_id(t, s, n);
        if (id >= 0) {
            g4_ids_push(out, id);
            return G4_OK;
        }
    }
    w->n = 0;
    w->hn = 0;
    int unk_pending = 0;
    uint32_t unk_len = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = tok_utf8_len((uint8_t)s[i]);
        int id = tok_model_id(t, s + i, cl);
        if (id >= 0) {
            if (unk_pending) sym_add(w, (uint32_t)t->unk_id, unk_len);
            unk_pending = 0;
            sym_add(w, (uint32_t)id, (uint32_t)cl);
            i += cl;
            continue;
        }
        if (t->byte_fallback) {
            int all = 1;
            for (size_t k = 0; k < cl; k++) all &= t->byte_id[(uint8_t)s[i + k]] >= 0;
            if (all) {
                // HF adds the byte pieces without first flushing a pending <unk>, so the <unk>
                // lands after them; reproduced as is.
                for (size_t k = 0; k < cl; k++)
                    sym_add(w, (uint32_t)t->byte_id[(uint8_t)s[i + k]], 1);
                i += cl;
                continue;
            }
        }
        if (t->unk_id >= 0) {
            if (unk_pending && t->fuse_unk) {
                unk_len += (uint32_t)cl;
            } else {
                if (unk_pending) sym_add(w, (uint32_t)t->unk_id, unk_len);
                unk_pending = 1;
                unk_len = (uint32_t)cl;
            }
        } else if (t->unk_missing) { // HF looks the unk_token up only when it needs it
            return g4_fail(G4_EUSER,
                           "%s: model.unk_token is not in model.vocab, and character "
                           "U+%04X of the text needs it",
                           t->name, (unsigned)cp_at(s, n, i));
        } // without an unk_token the character is dropped, as HF does
        i += cl;
    }
    if (unk_pending) sym_add(w, (uint32_t)t->unk_id, unk_len);

    for (size_t i = 0; i + 1 < w->n; i++) push_pair(t, w, i);
    while (w->hn) {
        bpe_merge top = heap_pop(w);
        bpe_sym *cur = &w->sym[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        bpe_sym right = w->sym[cur->next];
        uint32_t rank, merged;
        // An entry is stale when the pair at pos no longer merges into the same piece (HF
        // compares only the merged id, not the rank: kept identical).
        if (!tok_merge_get(&t->merges, cur->id, right.id, &rank, &merged) || merged != top.merged)
            continue;
        w->sym[cur->next].len = 0;
        cur->id = top.merged;
        cur->len += right.len;
        cur->next = right.next;
        if (right.next >= 0) w->sym[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0) push_pair(t, w, (size_t)cur->prev);
        push_pair(t, w, top.pos);
    }
    for (size_t i = 0; i < w->n; i++)
        if (w->sym[i].len) g4_ids_push(out, (int)w->sym[i].id);
    return G4_OK;
}

// --- the pipeline --------------------------------------------------------------------------------
// Text between raw added tokens: normalize, cut normalized added tokens, pre-tokenize, BPE.
static int encode_plain(const g4_tokenizer *t, const char *s, size_t n, bpe_work *w, g4_ids *out) {
    size_t nn;
    char *norm = tok_normalize(t, s, n, &nn);
    seg_list segs = {0}, words = {0}, next = {0};
    find_added(t, &t->norm_matcher, norm, nn, &segs);
    int rc = G4_OK;
    for (size_t k = 0; k < segs.n && !rc; k++) {
        if (segs.v[k].added >= 0) {
            g4_ids_push(out, t->added[segs.v[k].added].id);
            continue;
        }
        words.n = 0;
        seg_push(&words, segs.v[k].start, segs.v[k].end, -1);
        for (int p = 0; p < t->n_split; p++) {
            next.n = 0;
            split_step(t, &t->split[p], norm, &words, &next);
            seg_list x = words;
            words = next;
            next = x;
        }
        for (size_t i = 0; i < words.n && !rc; i++)
            if (words.v[i].end > words.v[i].start)
                rc =
                    bpe_word(t, norm + words.v[i].start, words.v[i].end - words.v[i].start, w, out);
    }
    free(segs.v);
    free(words.v);
    free(next.v);
    free(norm);
    return rc;
}

int g4_tokenizer_encode(const g4_tokenizer *t, const char *text, size_t len, int add_special,
                        g4_ids *out) {
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k <= 0)
            return g4_fail(G4_EUSER, "text to tokenize: invalid UTF-8 at byte %zu (byte 0x%02X)", i,
                           (unsigned)(uint8_t)text[i]);
        i += (size_t)k;
    }
    size_t n0 = out->n;
    if (add_special)
        for (size_t i = 0; i < t->prefix.n; i++) g4_ids_push(out, t->prefix.v[i]);
    seg_list segs = {0};
    find_added(t, &t->raw_matcher, text, len, &segs);
    bpe_work w = {0};
    int rc = G4_OK;
    for (size_t k = 0; k < segs.n && !rc; k++) {
        if (segs.v[k].added >= 0)
            g4_ids_push(out, t->added[segs.v[k].added].id);
        else
            rc = encode_plain(t, text + segs.v[k].start, segs.v[k].end - segs.v[k].start, &w, out);
    }
    if (add_special && !rc)
        for (size_t i = 0; i < t->suffix.n; i++) g4_ids_push(out, t->suffix.v[i]);
    free(segs.v);
    free(w.sym);
    free(w.heap);
    if (rc) out->n = n0;
    return rc;
}
