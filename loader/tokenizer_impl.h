// tokenizer_impl.h: the tokenizer's tables, shared by tokenizer.c (loading, lookups),
// tokenizer_vocab.c (the vocab and merges sections of the file), tokenizer_encode.c and
// tokenizer_decode.c. Not part of the public API (see tokenizer.h).
// defines: g4_tokenizer, tok_* helpers.
#ifndef G4_TOKENIZER_IMPL_H
#define G4_TOKENIZER_IMPL_H

#include <stdint.h>

#include "base/base.h"
#include "loader/tokenizer.h"

#define TOK_NONE    UINT32_MAX // "no string" length marker / "no id"
#define TOK_MAX_IDS (1 << 24)  // ids above this are refused (the real vocabulary has 262144)

// A string stored in the tokenizer's arena.
typedef struct {
    uint32_t off, len; // len == TOK_NONE: absent
} tok_str;

// Open-addressing index from strings to their position in a tok_str array. A slot holds the
// upper 32 bits of the string's hash and position + 1 (0 = empty), so most probes of a miss are
// decided without touching the strings.
typedef struct {
    uint64_t *slot;
    uint32_t mask;
} tok_index;

// (left id, right id) -> (rank, merged id), open addressing keyed by the packed pair; one entry
// per cache access.
typedef struct {
    uint64_t key; // (left << 32 | right) + 1; 0 = empty
    uint32_t rank, merged;
} tok_merge_entry;
typedef struct {
    tok_merge_entry *e;
    uint64_t mask;
    uint32_t n;
} tok_merge_map;

typedef struct {
    tok_str content;
    int id;
    int special, normalized, lstrip, rstrip, single_word;
    tok_str pattern; // what is searched for: content, or content through the normalizer
} tok_added;

// Cuts added tokens out of a string: leftmost-longest among the patterns of one kind
// (normalized=false ones on raw text, normalized=true ones on normalized text).
typedef struct {
    int n;        // patterns in this matcher
    int *lengths; // distinct pattern lengths, longest first
    int n_lengths;
    uint8_t first[32]; // bit set of the patterns' first bytes (a quick reject)
    tok_str *pat;      // [n]
    int *added;        // [n] index into t->added
    tok_index index;   // pattern bytes -> position in pat
} tok_matcher;

typedef enum { TOK_NORM_REPLACE, TOK_NORM_PREPEND } tok_norm_kind;
typedef struct {
    tok_norm_kind kind;
    tok_str pattern, content; // REPLACE: pattern -> content; PREPEND: content
} tok_norm_step;

typedef enum {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_WITH_PREVIOUS,
    TOK_SPLIT_MERGED_WITH_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;
typedef struct {
    tok_str pattern;
    tok_split_behavior behavior;
    int invert;
} tok_split_step;

typedef enum { TOK_DEC_REPLACE, TOK_DEC_BYTE_FALLBACK, TOK_DEC_FUSE, TOK_DEC_STRIP } tok_dec_kind;
typedef struct {
    tok_dec_kind kind;
    tok_str pattern, content; // REPLACE
    uint32_t strip_char;      // STRIP: the code point removed
    int strip_start, strip_stop;
} tok_dec_step;

struct g4_tokenizer {
    char *name;  // file name for messages
    char *arena; // every string below points in here
    size_t arena_len, arena_cap;

    int n_vocab;    // max id + 1 over the model vocabulary and the added tokens
    tok_str *model; // [n_vocab] model piece of each id (len TOK_NONE when none)
    tok_index model_index;
    int *added_of_id; // [n_vocab] index into added, or -1
    uint8_t *special; // [n_vocab] 1: decode with skip_special drops the id (mark_special)

    tok_merge_map merges;
    int n_merges;
    int byte_id[256]; // id of "<0xHH>", -1 when the vocabulary lacks it
    int unk_id;       // -1: no unk_token (unknown characters are dropped, as HF)
    int unk_missing;  // unk_token named but absent from the vocabulary (error when needed)
    int byte_fallback, fuse_unk, ignore_merges;

    tok_added *added;
    int n_added;
    tok_str *added_contents; // [n_added] the contents again, for added_index
    tok_index added_index;   // content -> index in added
    tok_matcher raw_matcher, norm_matcher;

    tok_norm_step *norm;
    int n_norm;
    tok_split_step *split;
    int n_split;
    int has_decoder; // 0: tokens are joined with " " (HF without a decoder)
    tok_dec_step *dec;
    int n_dec;
    g4_ids prefix, suffix; // post-processor tokens around a single sequence
};

static inline const char *tok_s(const g4_tokenizer *t, tok_str s) {
    return t->arena + s.off;
}

// Hashes and index lookups (tokenizer.c).
uint64_t tok_hash(const char *s, size_t n);
// Indexes strs[0..count) (entries with len TOK_NONE skipped). Returns -1, or the position of
// the first string already present (the earlier one stays: first wins, as HF's matchers).
int64_t tok_index_build(tok_index *ix, const g4_tokenizer *t, const tok_str *strs, size_t count);
// The position of the string s[0..n) in strs, or -1.
int64_t tok_index_find(const tok_index *ix, const g4_tokenizer *t, const tok_str *strs,
                       const char *s, size_t n);
// The model vocabulary id of s[0..n), or -1.
static inline int tok_model_id(const g4_tokenizer *t, const char *s, size_t n) {
    return (int)tok_index_find(&t->model_index, t, t->model, s, n);
}
// 1 and (rank, merged) when (a, b) is a merge.
int tok_merge_get(const tok_merge_map *m, uint32_t a, uint32_t b, uint32_t *rank, uint32_t *merged);

// Sizes the map for about n entries (optional; it grows by itself).
void tok_merge_reserve(tok_merge_map *m, uint64_t n);
void tok_merge_put(tok_merge_map *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t merged);

// tokenizer_encode.c: the normalizer applied to s[0..n) (a new string, *out_n bytes).
char *tok_normalize(const g4_tokenizer *t, const char *s, size_t n, size_t *out_n);

// tokenizer_vocab.c: the big sections of the file, read without cJSON.
// Reads model.vocab (into t->model, t->model_index, t->n_vocab) and model.merges (into
// t->merges; ranks are positions in the list, as HF) in one pass over the document, and gives
// the byte spans [start, end) of the two values (SIZE_MAX when absent) so that the rest can be
// handed to cJSON. Fails on a document that is not an object or has either key twice.
int tok_read_big_sections(g4_tokenizer *t, const char *js, size_t n, size_t vocab[2],
                          size_t merges[2]);

// Byte length of the UTF-8 sequence starting with lead byte c (input already validated).
static inline size_t tok_utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}
// Unicode White_Space (what Rust's char::is_whitespace and regex \s match).
int tok_is_space(int32_t cp);
// Rust regex \w: alphabetic, marks, decimal digits, connector punctuation, joiners.
int tok_is_word(int32_t cp);

#endif
