// printable.c: see printable.h.
#include "fidelity/printable.h"

#include <string.h>

const char *g4_printable(const char *s, size_t len, char *buf, size_t n) {
    size_t k = 0, i = 0;
    for (; i < len && s[i]; i++) {
        if (k + 1 >= n) break;
        unsigned char c = (unsigned char)s[i];
        buf[k++] = (c >= 32 && c < 127) ? (char)c : '?';
    }
    buf[k] = 0;
    if (i < len && s[i] && n >= 4) memcpy(buf + n - 4, "...", 4);
    return buf;
}
