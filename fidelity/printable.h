// printable.h: names taken from untrusted files, made safe to quote in a one-line error.
#ifndef G4_PRINTABLE_H
#define G4_PRINTABLE_H

#include <stddef.h>

// Copies up to len bytes of s (stopping at a NUL) into buf (size n >= 4) with every byte
// outside printable ASCII replaced by '?', cut with "..." when longer than n - 1. Returns buf.
const char *g4_printable(const char *s, size_t len, char *buf, size_t n);

#endif
