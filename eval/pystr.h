// pystr.h: the few Python `str` operations the lmms-eval scorers rely on, on UTF-8 C strings,
// with Python 3.11's semantics (code points, not bytes), built on utf8proc.
//
// Why not plain C: the scorers call str.lower(), .upper(), .strip(), .split() and float(), all
// of which are Unicode-aware in Python. Each function below says which Python call it mirrors
// and where it can differ (only in characters new in Unicode 15, which utf8proc 2.8 knows and
// Python 3.11's Unicode 14 does not, and the "cased" property noted at g4_py_lower).
//
// Every function here expects valid UTF-8 (check it once at the API boundary with
// g4_py_check_utf8); returned strings are new allocations the caller frees.
#ifndef G4_PYSTR_H
#define G4_PYSTR_H

#include <stddef.h>
#include <stdint.h>

#include "base/str.h" // g4_sb, UTF-8 checks and code points, isspace, strip

// unicodedata.decimal(c): 0..9 for a character of category Nd, else -1. Unicode assigns Nd
// characters in runs of ten, 0 to 9, so the value is the distance to the run's start mod 10.
int g4_py_decimal(int32_t cp);

// s.lower(): full lowercase mapping (U+0130 -> "i" U+0307) and the Final_Sigma rule for
// U+03A3. "Cased" is approximated from utf8proc's categories and case mappings; it misses
// U+00AA, U+00BA and U+1F130..1F189 (Other_Lowercase / Other_Uppercase without mappings),
// which matters only for a capital sigma right after one of them.
char *g4_py_lower(const char *s);
// len(s.upper()) in code points. The full uppercase mapping has the length of the full case
// folding for every character but U+0130 and U+1E9E (checked over all of Unicode against
// Python 3.11), so the length comes from utf8proc's case folding with those two fixed.
size_t g4_py_upper_len(const char *s);

// s.split() (runs of Unicode whitespace): *words is a new array of new strings.
size_t g4_py_split(const char *s, char ***words);
void g4_py_words_free(char **words, size_t n);
// " ".join(s.split()).
char *g4_py_collapse_ws(const char *s);
// s.replace(old, new) for ASCII/UTF-8 literals (byte-wise is exact on valid UTF-8).
char *g4_py_replace(const char *s, const char *old, const char *new_);

// float(s): 1 and *out when Python's float() accepts s, 0 when it raises ValueError.
// Follows CPython: non-ASCII whitespace becomes ' ', Nd digits become ASCII digits, any other
// non-ASCII character is rejected; '_' only between two digits; then ASCII whitespace is
// stripped and the rest must be a whole decimal literal ([+-] digits [. digits] [e[+-]digits],
// ".5" and "5." allowed) or inf / infinity / nan in any case, with an optional sign.
// Overflow gives +-inf and underflow 0, as in Python; correctly rounded (strtod).
int g4_py_float(const char *s, double *out);

#endif
