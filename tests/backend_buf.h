// backend_buf.h: what the op harnesses that run ops through a g4_backend share
// (tests/test_backend_ops.c, test_cuda_towers.c): the case table's bookkeeping (--op / --shape
// filters, one header line per case, a case fails when a check failed inside it), fp16-rounded
// random inputs, and guarded, NaN-poisoned buffers on any backend (through its op table: alloc,
// upload, download). Static functions: include once per binary.
//
//  * a buffer lies between two guard zones of G4T_GUARD bytes of G4T_GUARD_BYTE that must come
//    back unchanged (a write past either end);
//  * it is poisoned before use: fp16 / bf16 / fp32 NaN, or 0x7fc00000 in I32 buffers (an
//    unwritten output is caught by g4t_compare's NaN rule);
//  * misalign: the data starts one element past the guard's 16-byte boundary (the kernels'
//    scalar paths).
#ifndef G4_BACKEND_BUF_H
#define G4_BACKEND_BUF_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/ops.h"
#include "tests/test_util.h"

#define G4T_GUARD      256
#define G4T_GUARD_BYTE 0xA5

// --- cases -------------------------------------------------------------------------------------
typedef struct {
    const char *op_filter, *shape_filter; // --op / --shape substrings, or NULL
    int run, failed;                      // cases run, cases with a failed check
    int open, fail_mark;                  // a case is open; g4t_failures when it began
} g4t_cases;

// Ends the open case: it failed when any check failed since it began.
static inline void g4t_case_close(g4t_cases *c) {
    if (c->open && g4t_failures > c->fail_mark) c->failed++;
    c->open = 0;
}

// Closes the previous case; whether case (op, shape) runs under the filters. When it does, it
// prints "case [<label>] <op> <shape>" (label: the backend, or NULL) and opens it.
static inline int g4t_case_open(g4t_cases *c, const char *label, const char *op, const char *fmt,
                                ...) G4_PRINTF(4, 5);
static inline int g4t_case_open(g4t_cases *c, const char *label, const char *op, const char *fmt,
                                ...) {
    g4t_case_close(c);
    char shape[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(shape, sizeof shape, fmt, ap);
    va_end(ap);
    if (c->op_filter && !strstr(op, c->op_filter)) return 0;
    if (c->shape_filter && !strstr(shape, c->shape_filter)) return 0;
    if (label)
        printf("case %-4s %-16s %s\n", label, op, shape);
    else
        printf("case %-16s %s\n", op, shape);
    fflush(stdout);
    c->run++;
    c->open = 1;
    c->fail_mark = g4t_failures;
    return 1;
}

// --- host data -------------------------------------------------------------------------------
// n random values in [lo, hi) rounded to fp16 (so every backend starts from the same values),
// never zero.
static inline float *g4t_rand_f16(unsigned long long *s, size_t n, float lo, float hi) {
    float *f = g4_malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        const float v = g4t_rand_uniform(s, lo, hi);
        f[i] = g4_round_f16(v == 0.0f ? 0.5f * hi : v);
    }
    return f;
}
// The fp16 encodings of n floats (a new array).
static inline uint16_t *g4t_f16_bits(const float *x, size_t n) {
    uint16_t *b = g4_malloc(2 * (n ? n : 1));
    for (size_t i = 0; i < n; i++) b[i] = g4_f32_to_f16(x[i]);
    return b;
}

// --- buffers ---------------------------------------------------------------------------------
typedef struct {
    g4_backend *be;
    g4_buf b;
    char *base;
    size_t bytes; // of b
} g4t_bbuf;

// n floats as type t (I32 from integral floats), and back.
static inline void g4t_to_type(void *dst, g4_type t, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) switch (t) {
        case G4_F32:
            ((float *)dst)[i] = src[i];
            break;
        case G4_F16:
            ((uint16_t *)dst)[i] = g4_f32_to_f16(src[i]);
            break;
        case G4_BF16:
            ((uint16_t *)dst)[i] = g4_bf16_round(src[i]);
            break;
        case G4_I32:
            ((int32_t *)dst)[i] = (int32_t)src[i];
            break;
        }
}
static inline void g4t_from_type(float *dst, g4_type t, const void *src, size_t n) {
    for (size_t i = 0; i < n; i++) switch (t) {
        case G4_F32:
            dst[i] = ((const float *)src)[i];
            break;
        case G4_F16:
            dst[i] = g4_f16_to_f32(((const uint16_t *)src)[i]);
            break;
        case G4_BF16:
            dst[i] = g4_bf16_to_f32(((const uint16_t *)src)[i]);
            break;
        case G4_I32:
            dst[i] = (float)((const int32_t *)src)[i];
            break;
        }
}

// A [rows, cols] buffer of type t on be, poisoned, between guards (exit 2 when out of memory).
static inline g4t_bbuf g4t_bbuf_new(g4_backend *be, g4_type t, int rows, int cols, int misalign) {
    g4t_bbuf d;
    const size_t es = g4_type_size(t), off = misalign ? es : 0;
    d.be = be;
    d.b = (g4_buf){NULL, t, rows, cols};
    d.bytes = g4_buf_bytes(&d.b);
    const size_t total = d.bytes + off + 2 * G4T_GUARD;
    d.base = be->alloc(be, total);
    if (!d.base) {
        fprintf(stderr, "%s backend: out of memory for a %zu-byte test buffer\n", be->name, total);
        exit(2);
    }
    d.b.data = d.base + G4T_GUARD + off;
    uint8_t *h = g4_malloc(total);
    memset(h, G4T_GUARD_BYTE, total);
    for (size_t i = 0; i < d.bytes / es; i++) {
        uint8_t *e = h + G4T_GUARD + off + i * es;
        const uint16_t nan16 = t == G4_BF16 ? 0x7FC0 : 0x7E00;
        const uint32_t nan32 = 0x7fc00000u;
        if (es == 2)
            memcpy(e, &nan16, 2);
        else
            memcpy(e, &nan32, 4);
    }
    be->upload(be, d.base, h, total);
    be->sync(be);
    free(h);
    return d;
}

// Sets the buffer from n = rows * cols host floats (converted to its type).
static inline void g4t_bbuf_set(g4t_bbuf *d, const float *x) {
    void *h = g4_malloc(d->bytes + 1);
    g4t_to_type(h, d->b.type, x, (size_t)d->b.rows * d->b.cols);
    d->be->upload(d->be, d->b.data, h, d->bytes);
    d->be->sync(d->be);
    free(h);
}
// Sets the buffer from raw bytes of its type (I32 ids, positions, masks).
static inline void g4t_bbuf_set_raw(g4t_bbuf *d, const void *v) {
    d->be->upload(d->be, d->b.data, v, d->bytes);
    d->be->sync(d->be);
}
// The buffer's values as host floats (a new array).
static inline float *g4t_bbuf_get(const g4t_bbuf *d) {
    const size_t n = (size_t)d->b.rows * d->b.cols;
    void *h = g4_malloc(d->bytes + 1);
    d->be->sync(d->be);
    d->be->download(d->be, h, d->b.data, d->bytes);
    float *f = g4_malloc(sizeof(float) * n + 1);
    g4t_from_type(f, d->b.type, h, n);
    free(h);
    return f;
}
// 1 when both guard zones are intact; else 0, printing which byte changed (what: the buffer's
// name, or NULL for an overwrite the caller expects).
static inline int g4t_bbuf_guards_ok(const g4t_bbuf *d, const char *what) {
    const size_t lead = (size_t)((char *)d->b.data - d->base); // guard + misalignment
    uint8_t *g = g4_malloc(lead + G4T_GUARD);
    d->be->sync(d->be);
    d->be->download(d->be, g, d->base, lead);
    d->be->download(d->be, g + lead, (char *)d->b.data + d->bytes, G4T_GUARD);
    int ok = 1;
    for (size_t i = 0; i < lead + G4T_GUARD && ok; i++)
        if (g[i] != G4T_GUARD_BYTE) {
            if (what)
                printf("    %s: guard byte %zu %s the buffer overwritten\n", what,
                       i < lead ? lead - i : i - lead + 1, i < lead ? "before" : "after");
            ok = 0;
        }
    free(g);
    return ok;
}
static inline void g4t_bbuf_free(g4t_bbuf *d) {
    if (d->base) d->be->free(d->be, d->base);
    d->base = NULL;
}

#endif
