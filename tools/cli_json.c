// cli_json.c: a JSON string of n bytes that may hold NUL or invalid UTF-8 (a token's piece, the
// text of a few ids), which cJSON's NUL-terminated strings cannot carry.
#include <stdio.h>

#include "tools/cli.h"

// The length of the valid UTF-8 sequence at s (at most n bytes), or 0.
static size_t utf8_len(const unsigned char *s, size_t n) {
    const unsigned c = s[0];
    size_t len = c < 0x80             ? 1
                 : (c & 0xe0) == 0xc0 ? 2
                 : (c & 0xf0) == 0xe0 ? 3
                 : (c & 0xf8) == 0xf0 ? 4
                                      : 0;
    if (!len || len > n) return 0;
    unsigned cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const unsigned min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

void g4_cli_json_string(FILE *f, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        const unsigned c = p[i];
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
            i++;
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
            i++;
        } else {
            size_t len = utf8_len(p + i, n - i);
            if (len) {
                fwrite(p + i, 1, len, f);
                i += len;
            } else {
                fputs("\\ufffd", f); // an invalid byte: the replacement character
                i++;
            }
        }
    }
    fputc('"', f);
}
