// str.h: a string builder and UTF-8 helpers every layer uses (the chat template, stop strings,
// the scorers): validation, code points, and Python's str.isspace() / str.strip() (utf8proc).
// eval/pystr.h adds the rest of Python's str semantics the scorers need.
//
// Every function but g4_py_check_utf8 expects valid UTF-8 (check it once at the API boundary);
// returned strings are new allocations the caller frees.
#ifndef G4_STR_H
#define G4_STR_H

#include <stddef.h>
#include <stdint.h>

// A growable byte string (always NUL-terminated once anything was put in it).
typedef struct {
    char *p;
    size_t n, cap;
} g4_sb;

void g4_sb_put(g4_sb *b, const char *s, size_t n);
void g4_sb_puts(g4_sb *b, const char *s);
void g4_sb_putc(g4_sb *b, char c);
void g4_sb_put_cp(g4_sb *b, int32_t cp); // one code point, UTF-8 encoded
// The buffer's string (an empty string when nothing was put); the builder is reset.
char *g4_sb_take(g4_sb *b);
void g4_sb_free(g4_sb *b);

// G4_OK when s is valid UTF-8 (no surrogates, no overlongs); otherwise G4_EUSER with
// "<what>: not valid UTF-8 at byte N".
int g4_py_check_utf8(const char *s, const char *what);

// Code points of a valid UTF-8 string (new array, *n set; never NULL).
int32_t *g4_py_decode(const char *s, size_t *n);
// UTF-8 of n code points (new string).
char *g4_py_encode(const int32_t *cp, size_t n);

// str.isspace() of one character: category Zs, or bidirectional class WS, B or S (the
// definition CPython's makeunicodedata.py uses). Also what `\s` and split() use.
int g4_py_isspace(int32_t cp);
// s.strip() (Unicode whitespace on both ends).
char *g4_py_strip(const char *s);

#endif
