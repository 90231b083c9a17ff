// pyre.h: Python `re` calls (sub, sub with a function, match, split) over PCRE2, for porting
// the Whisper / lmms-eval normalisers line by line.
//
// Patterns are compiled with PCRE2_UTF | PCRE2_UCP and newline = LF, which gives Python's
// meaning on str for `\w`, `\d` and `\b` (Unicode classes), `.` (anything but "\n") and `$`
// (the end, or before a final "\n"), while explicit ranges like [a-z] and [0-9] stay ASCII.
// One class differs: PCRE2's `\s` lacks U+001C..U+001F and has U+180E, so patterns that port
// a Python `\s` use G4_PY_S instead (checked over all of Unicode against Python 3.11).
//
// Compiled patterns are immutable and may be shared between threads.
#ifndef G4_PYRE_H
#define G4_PYRE_H

#include <stddef.h>

#include "eval/pystr.h"

// Python's `\s` on str (= str.isspace()), as a PCRE2 group; quantify it like an atom.
#define G4_PY_S "(?:[^\\S\\x{180e}]|[\\x{1c}-\\x{1f}])"

typedef struct g4_re g4_re;

// Compiles a constant pattern; a pattern that does not compile is a bug, so this aborts with
// PCRE2's message rather than returning. Compiled patterns live for the whole process.
g4_re *g4_re_compile(const char *pattern);

// One match handed to a replacement function: group i spans subject[start(i), end(i)).
typedef struct {
    const char *subject;
    const size_t *ovector; // 2 * ngroups offsets; PCRE2_UNSET for a group that did not take part
    int ngroups;           // including group 0
} g4_re_match;

// Group i of m as a new string ("" when the group did not take part).
char *g4_re_group(const g4_re_match *m, int i);

// Appends the replacement for one match; returns G4_OK or an error code (g4_fail).
typedef int (*g4_re_fn)(g4_sb *out, const g4_re_match *m, void *ctx);

// re.sub(pattern, tmpl, s): tmpl may hold \1..\9 (a group that did not take part gives "", as
// in Python 3.5+). *out is a new string. Errors (G4_EINTERNAL) only when PCRE2 itself fails,
// e.g. a match limit on a pathological input. The patterns used must not match "".
int g4_re_sub(const g4_re *re, const char *s, const char *tmpl, char **out);
// re.sub(pattern, fn, s).
int g4_re_sub_fn(const g4_re *re, const char *s, g4_re_fn fn, void *ctx, char **out);
// bool(re.match(pattern, s)): 1 when the pattern matches at the start of s, else 0.
int g4_re_matches(const g4_re *re, const char *s);
// re.split(pattern, s) for a pattern without capture groups: *pieces is a new array of new
// strings (free with g4_py_words_free); returns the count through *n.
int g4_re_split(const g4_re *re, const char *s, char ***pieces, size_t *n);

#endif
