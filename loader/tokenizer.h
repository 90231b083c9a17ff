// tokenizer.h: the Gemma tokenizer, read from a HF `tokenizer.json`: UTF-8 text -> token ids and
// ids -> text, giving exactly what HF `tokenizers` (0.23) gives for the same file.
//
// The pipeline of Gemma-3/Gemma-4's tokenizer.json, which is what this module implements:
//   1. added tokens are cut out first, atomically: those with normalized=false (all special
//      tokens such as <bos>, <|turn>, <|image|>) on the raw text, then the rest of the text is
//      normalized and those with normalized=true are cut out of it (leftmost-longest match, with
//      HF's lstrip / rstrip / single_word rules);
//   2. normalizer: Replace(" " -> "▁" U+2581) (also Prepend and Sequence); no dummy prefix;
//   3. pre-tokenizer: Split(" ", merged_with_previous), a no-op after step 2, so the whole text
//      between added tokens is one BPE word (also Split with the other behaviours, Sequence);
//   4. BPE: characters -> vocabulary pieces, a character absent from the vocabulary -> its UTF-8
//      bytes as <0xHH> pieces (byte_fallback), else <unk> (fused with a preceding <unk> when
//      fuse_unk); then merges, lowest rank first, leftmost first among equal ranks;
//   5. post-processor (only with add_special): TemplateProcessing "<bos> $A".
// Decoding maps ids to pieces (special ones dropped on request), then the decoder sequence
// Replace("▁" -> " "), ByteFallback (a run of <0xHH> pieces becomes its bytes when they are valid
// UTF-8, else one U+FFFD per byte), Fuse (concatenate); also Strip; no decoder joins with " ".
// Anything else in the file (Unigram/WordPiece models, regex patterns, NFKC, ByteLevel...) is
// refused at load with a message naming the field, rather than tokenized differently.
//
// A loaded tokenizer is immutable; encode and decode may run from several threads at once.
#ifndef G4_TOKENIZER_H
#define G4_TOKENIZER_H

#include <stddef.h>

#include "base/base.h"

typedef struct g4_tokenizer g4_tokenizer;

// A growable list of token ids (encode appends to it, so prompts can be built in pieces).
typedef struct {
    int *v;
    size_t n, cap;
} g4_ids;
void g4_ids_push(g4_ids *a, int id);
void g4_ids_free(g4_ids *a);

// Loads path (a tokenizer.json). Errors name the file and the field or piece at fault.
int g4_tokenizer_open(const char *path, g4_tokenizer **out);
// The same from memory (tests, fuzzing); name is used in messages.
int g4_tokenizer_parse(const char *json, size_t len, const char *name, g4_tokenizer **out);
void g4_tokenizer_close(g4_tokenizer *t);

// Ids run from 0 to n_vocab - 1 (the largest id of the vocabulary or an added token, plus one).
int g4_tokenizer_n_vocab(const g4_tokenizer *t);
int g4_tokenizer_n_merges(const g4_tokenizer *t);
int g4_tokenizer_n_added(const g4_tokenizer *t);
// The id of a piece or added token ("<bos>", "▁the"), or -1 (added tokens first, as HF).
int g4_tokenizer_id(const g4_tokenizer *t, const char *piece, size_t len);
// The text of id (not NUL-terminated; *len set), or NULL when id has no piece. For an added
// token with normalized=true this is its content through the normalizer, as HF's id_to_token.
const char *g4_tokenizer_piece(const g4_tokenizer *t, int id, size_t *len);
// 1 when decode with skip_special drops id: its piece is the content of a special added token
// (all of Gemma's special tokens: <pad> <eos> <bos> <|turn> <turn|> <|image|> ...).
int g4_tokenizer_is_special(const g4_tokenizer *t, int id);

// Appends the ids of text (len bytes of UTF-8; NUL bytes allowed) to out. add_special: also the
// post-processor's tokens (<bos> for Gemma), as HF's add_special_tokens=True; chat prompts that
// already contain "<bos>" pass 0. Errors: text that is not valid UTF-8 (the byte offset is named).
int g4_tokenizer_encode(const g4_tokenizer *t, const char *text, size_t len, int add_special,
                        g4_ids *out);
// Decodes n ids into a new NUL-terminated string (*text, free() it; *len its length, which may
// include NUL bytes from <0x00>). skip_special drops special added tokens (HF's default is 1).
// An id outside [0, n_vocab) is an error (HF would drop it silently); an id inside the range with
// no piece is dropped, as HF does.
int g4_tokenizer_decode(const g4_tokenizer *t, const int *ids, size_t n, int skip_special,
                        char **text, size_t *len);

#endif
