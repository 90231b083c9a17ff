// json_mask.h: constrained JSON decoding: a byte-level JSON state machine that follows a JSON
// schema (a subset), and the per-step token mask it gives over a token -> bytes table.
//
// The machine is a pushdown automaton over the bytes of the output: each frame is a value
// being written (an object, an array, a string, a number, a literal from a fixed set). It
// accepts exactly the byte strings that are prefixes of a JSON text valid under the schema
// (UTF-8 checked inside strings, control characters refused, escapes checked), with these
// choices of ours:
//   - insignificant whitespace: at most G4_JSON_MAX_WS bytes in a row (' ', \n, \r, \t), so a
//     model cannot spin on spaces forever;
//   - an object with declared properties gets only those keys, each at most once (what
//     additionalProperties allows more is never used), in any order; '}' only once every
//     required key is in; ',' only while an unused key is left;
//   - enum and const values are written as cJSON prints them (compact);
//   - the value ends where the JSON closes: a top-level object, array, string or literal is
//     complete at its last byte (g4_json_done); a top-level number needs an end of sequence
//     (g4_json_can_end).
// Schema subset (anything else: a user error naming the keyword): type object / array /
// string / number / integer / boolean / null, properties, required, additionalProperties
// (true or false), items, enum, const; the annotations title, description, default,
// examples, $schema, $comment are ignored. "json_object" mode is any JSON object.
//
// The token mask (g4_json_mask) walks the vocabulary in byte order, so tokens that share a
// prefix share its feeding (a trie walk without the trie): V = 262144 costs about one feed
// per distinct prefix byte.
#ifndef G4_JSON_MASK_H
#define G4_JSON_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "loader/tokenizer.h"

#define G4_JSON_MAX_WS    16 // whitespace bytes in a row
#define G4_JSON_MAX_DEPTH 40 // frames (an object or array level takes two)
#define G4_JSON_MAX_NEST  16 // schema levels
#define G4_JSON_MAX_SET   64 // properties of an object, values of an enum

typedef struct g4_json_schema g4_json_schema;

// The schema in text[0..len) (a JSON object: the schema itself, not OpenAI's wrapper), or any
// JSON object when text is NULL. Errors are user errors naming the keyword or value.
int g4_json_schema_compile(const char *text, size_t len, g4_json_schema **out);
void g4_json_schema_free(g4_json_schema *s);

typedef struct {
    uint8_t kind, sub, ws, a, b;
    int16_t node, key;
    uint16_t pos;
    uint64_t set, seen;
} g4_json_frame;

typedef struct {
    const g4_json_schema *sc;
    int depth, done;
    size_t n_bytes; // bytes accepted
    g4_json_frame f[G4_JSON_MAX_DEPTH];
} g4_json_state;

void g4_json_start(const g4_json_schema *sc, g4_json_state *st);
// Feeds n bytes: 1 when every one is accepted (st advanced), 0 when one is refused (st is then
// partly advanced: feed a copy to test).
int g4_json_feed(g4_json_state *st, const uint8_t *b, size_t n);
// 1 when the value is complete and nothing can follow it.
static inline int g4_json_done(const g4_json_state *st) { return st->done; }
// 1 when the bytes so far are a complete value (an end of sequence may come).
int g4_json_can_end(const g4_json_state *st);
// Copies the live part of src.
void g4_json_copy(g4_json_state *dst, const g4_json_state *src);

// The bytes of every token id: what decoding it alone gives (special tokens: none).
typedef struct {
    int n;          // ids [0, n)
    uint32_t *off;  // [n + 1]: id's bytes are bytes[off[id] .. off[id + 1])
    uint8_t *bytes; // all of them
    int32_t *order; // [n_sorted]: the ids with bytes, sorted by their bytes
    int n_sorted;
    int max_len; // the longest token's bytes
    uint8_t *plain; // [n] 1: the bytes are string content that needs no state (no quote,
                    // backslash or control byte; whole UTF-8 characters): inside a string
                    // such a token is always accepted, so the mask skips its walk
} g4_vocab_bytes;

// From a tokenizer whose decoder is Gemma's (Replace ▁ -> ' ', ByteFallback, Fuse): a piece
// <0xHH> is the byte HH, any other piece its text with ▁ as ' '; special tokens have none.
int g4_vocab_bytes_build(const g4_tokenizer *tok, g4_vocab_bytes *out);
// From an explicit table (tests): token i's bytes are bytes[off[i] .. off[i + 1]) (copied).
int g4_vocab_bytes_from(int n, const uint32_t *off, const uint8_t *bytes, g4_vocab_bytes *out);
void g4_vocab_bytes_free(g4_vocab_bytes *v);

// allowed[0..V) = 1 for each token whose bytes the machine accepts after st (ids at or past
// vb->n: 0). Returns how many. scratch: vb->max_len + 1 states.
int g4_json_mask(const g4_json_state *st, const g4_vocab_bytes *vb, uint8_t *allowed, int V,
                 g4_json_state *scratch);

#endif
