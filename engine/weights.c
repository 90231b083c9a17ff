// weights.c: see weights.h.
#include "engine/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "quant/q4.h"

void g4_binder_init(g4_binder *b, g4_backend *be, const g4_component *c) {
    memset(b, 0, sizeof *b);
    b->be = be;
    b->c = c;
}

void g4_binder_component(g4_binder *b, const g4_component *c) { b->c = c; }

void g4_binder_free(g4_binder *b) {
    for (int i = 0; i < b->n_prepared; i++) b->be->release_linear(b->be, b->prepared[i]);
    for (int i = 0; i < b->n_owned; i++) b->be->free(b->be, b->owned[i]);
    free(b->prepared);
    free(b->owned);
    free(b->clipped);
    memset(b, 0, sizeof *b);
}

int g4_binder_oom(const g4_binder *b, const char *what) {
    if (!b->oom_bytes) return G4_OK;
    return g4_fail(G4_EUSER,
                   "%s: %s backend out of memory: %llu of %llu bytes of %s weights did "
                   "not fit",
                   b->c->onnx_path, b->be->name, (unsigned long long)b->oom_bytes,
                   (unsigned long long)b->weight_bytes, what);
}

void *g4_binder_alloc(g4_binder *b, size_t bytes) {
    void *p = b->be->alloc(b->be, bytes ? bytes : 1);
    if (!p) {
        b->oom_bytes += bytes;
        return NULL;
    }
    b->owned = g4_realloc(b->owned, sizeof(void *) * (size_t)(b->n_owned + 1));
    b->owned[b->n_owned++] = p;
    return p;
}

const void *g4_binder_place(g4_binder *b, const void *data, size_t bytes, size_t align) {
    b->weight_bytes += bytes;
    if (b->be->host_memory && ((uintptr_t)data % align) == 0) return data;
    void *p = g4_binder_alloc(b, bytes);
    if (p) b->be->upload(b->be, p, data, bytes);
    return p;
}

int g4_bind_f16(g4_binder *b, const char *name, int ndim, const int64_t *dims, const void **out) {
    const g4_tensor *t;
    int rc = g4_component_get(b->c, name, G4_DT_FLOAT16, ndim, dims, &t);
    if (rc) return rc;
    *out = g4_binder_place(b, t->data, (size_t)t->nbytes, 2);
    return G4_OK;
}

int g4_bind_vec(g4_binder *b, const char *name, int64_t n, const void **out) {
    return g4_bind_f16(b, name, 1, &n, out);
}

int g4_has_clip_bounds(const g4_component *c, const char *base) {
    char nm[160];
    snprintf(nm, sizeof nm, "%s.input_min", base);
    return g4_component_find(c, nm) != NULL;
}

// One clip bound: a one-element float tensor "<base>.<what>" (fp16 in the packages; -inf / inf
// where HF's buffer kept its default).
static int clip_scalar(const g4_component *c, const char *base, const char *what, float *out) {
    char nm[160];
    snprintf(nm, sizeof nm, "%s.%s", base, what);
    const g4_tensor *t = g4_component_find(c, nm);
    if (!t)
        return g4_fail(G4_EUSER, "%s: clip bound '%s%s' is missing (its linear has the others)",
                       c->onnx_path, c->prefix, nm);
    if (t->numel != 1 ||
        !(t->dtype == G4_DT_FLOAT16 || t->dtype == G4_DT_BFLOAT16 || t->dtype == G4_DT_FLOAT))
        return g4_fail(G4_EUSER, "%s: clip bound '%s': expected one float value, found %s x %llu",
                       c->onnx_path, t->name, g4_dtype_name(t->dtype),
                       (unsigned long long)t->numel);
    *out = (float)g4_tensor_get(t, 0);
    if (isnan(*out)) return g4_fail(G4_EUSER, "%s: clip bound '%s' is NaN", c->onnx_path, t->name);
    return G4_OK;
}

// g4_binder_place, but always a backend copy (never the host pointer itself).
static const void *place_copy(g4_binder *b, const void *data, size_t bytes, size_t align) {
    (void)align;
    b->weight_bytes += bytes;
    void *p = g4_binder_alloc(b, bytes);
    if (p) b->be->upload(b->be, p, data, bytes);
    return p;
}

// Places a bound linear's arrays (host memory) on the backend: its prepare_linear, or each array
// placed (copy: always copied, for host arrays that are freed after this call). `what` names the
// weight in an error.
static int place_linear(g4_binder *b, g4_linear *w, const char *what, int copy) {
    const int in = w->in, out = w->out;
    const size_t kb = w->kind == G4_W_Q4 ? (size_t)(in + w->block - 1) / w->block : 0;
    if (b->be->prepare_linear) { // the backend lays it out itself (device copy, Q4 repack)
        b->weight_bytes +=
            (w->bias ? (uint64_t)out * 2 : 0) +
            (w->kind == G4_W_F16
                 ? (uint64_t)in * out * 2
                 : (uint64_t)out * (kb * (size_t)(w->block / 2) + kb * 2 + (kb + 1) / 2));
        int rc = b->be->prepare_linear(b->be, w);
        if (rc) {
            g4_error_prefix("%s: '%s%s'", b->c->onnx_path, b->c->prefix, what);
            return rc;
        }
        b->prepared = g4_realloc(b->prepared, sizeof(g4_linear *) * (size_t)(b->n_prepared + 1));
        b->prepared[b->n_prepared++] = w;
        return G4_OK;
    }
    const void *(*put)(g4_binder *, const void *, size_t, size_t) =
        copy ? place_copy : g4_binder_place;
    if (w->kind == G4_W_F16) {
        w->w = put(b, w->w, (size_t)in * out * 2, 2);
    } else {
        w->w = put(b, w->w, (size_t)out * kb * (size_t)(w->block / 2), 1);
        w->scales = put(b, w->scales, (size_t)out * kb * 2, 2);
        if (w->zp) w->zp = put(b, w->zp, (size_t)out * ((kb + 1) / 2), 1);
    }
    if (w->bias) w->bias = put(b, w->bias, (size_t)out * 2, 2);
    if (copy) b->be->sync(b->be); // the host arrays are freed after this call
    return G4_OK;
}

int g4_bind_linear(g4_binder *b, const char *base, int in, int out, int clipped,
                   const char *bias_name, g4_linear *w) {
    char nm[160];
    snprintf(nm, sizeof nm, "%s.weight_t", base);
    int rc = g4_linear_get(b->c, nm, in, out, w);
    if (rc) return rc;
    const g4_tensor *bias = NULL;
    if (bias_name && (rc = g4_get(b->c, bias_name, G4_DT_FLOAT16, &bias, out))) return rc;
    if (bias) w->bias = bias->data; // else the linear's own bias (Q4 node input), if any
    if ((rc = place_linear(b, w, nm, 0))) return rc;
    if (!clipped) return G4_OK;
    if ((rc = clip_scalar(b->c, base, "input_min", &w->in_lo)) ||
        (rc = clip_scalar(b->c, base, "input_max", &w->in_hi)) ||
        (rc = clip_scalar(b->c, base, "output_min", &w->out_lo)) ||
        (rc = clip_scalar(b->c, base, "output_max", &w->out_hi)))
        return rc;
    if (!(w->in_lo <= w->in_hi) || !(w->out_lo <= w->out_hi))
        return g4_fail(G4_EUSER,
                       "%s: clip bounds of '%s%s': input [%g, %g], output [%g, %g]: "
                       "expected min <= max",
                       b->c->onnx_path, b->c->prefix, base, w->in_lo, w->in_hi, w->out_lo,
                       w->out_hi);
    w->clipped = 1;
    b->clipped = g4_realloc(b->clipped, sizeof(g4_named_linear) * (size_t)(b->n_clipped + 1));
    g4_named_linear *nl = &b->clipped[b->n_clipped++];
    snprintf(nl->name, sizeof nl->name, "%s", base);
    nl->lin = w;
    return G4_OK;
}

int g4_bind_linear_cat(g4_binder *b, const char *const *bases, int n, int in, const int *outs,
                       g4_linear *w) {
    memset(w, 0, sizeof *w);
    G4_ASSERT(n >= 1 && n <= G4_CAT_MAX);
    g4_linear part[G4_CAT_MAX];
    char nm[160];
    int N = 0, any_zp = 0;
    for (int i = 0; i < n; i++) {
        snprintf(nm, sizeof nm, "%s.weight_t", bases[i]);
        int rc = g4_linear_get(b->c, nm, in, outs[i], &part[i]);
        if (rc) return rc;
        // one weight kind and block, no bias (a bias would need its own concatenation)
        if (part[i].bias || part[i].kind != part[0].kind || part[i].block != part[0].block)
            return G4_OK;
        any_zp |= part[i].zp != NULL;
        N += outs[i];
    }
    g4_linear cat = {.kind = part[0].kind, .in = in, .out = N, .block = part[0].block};
    uint8_t *q = NULL, *sc = NULL, *zp = NULL;
    if (cat.kind == G4_W_F16) { // [K, N] row-major: row k is the parts' rows k side by side
        const size_t row = (size_t)N * 2;
        q = g4_malloc((size_t)in * row);
        for (int k = 0; k < in; k++) {
            size_t off = 0;
            for (int i = 0; i < n; i++) {
                const size_t pr = (size_t)outs[i] * 2;
                memcpy(q + (size_t)k * row + off, (const uint8_t *)part[i].w + (size_t)k * pr, pr);
                off += pr;
            }
        }
    } else { // Q4: q, scales and zero points are column-major (per output n): appended
        const size_t kb = (size_t)g4_q4_kblocks(in, cat.block);
        const size_t qc = kb * (size_t)(cat.block / 2), sc_c = kb * 2,
                     zc = (size_t)g4_q4_zp_row_bytes((int)kb);
        q = g4_malloc((size_t)N * qc);
        sc = g4_malloc((size_t)N * sc_c);
        if (any_zp) zp = g4_malloc((size_t)N * zc);
        size_t col = 0;
        for (int i = 0; i < n; i++) {
            const size_t c = (size_t)outs[i];
            memcpy(q + col * qc, part[i].w, c * qc);
            memcpy(sc + col * sc_c, part[i].scales, c * sc_c);
            if (zp && part[i].zp)
                memcpy(zp + col * zc, part[i].zp, c * zc);
            else if (zp) // the op's default zero point 8 in both nibbles
                memset(zp + col * zc, 0x88, c * zc);
            col += c;
        }
        cat.scales = sc;
        cat.zp = zp;
    }
    cat.w = q;
    snprintf(nm, sizeof nm, "%s.weight_t and %d more (concatenated)", bases[0], n - 1);
    *w = cat;
    const int rc = place_linear(b, w, nm, 1);
    free(q);
    free(sc);
    free(zp);
    if (rc) memset(w, 0, sizeof *w);
    return rc;
}

void g4_tower_ws_free(g4_backend *be, g4_tower_ws *ws) {
    for (int i = 0; i < G4_TOWER_WS_MAX; i++)
        if (ws->data[i]) be->free(be, ws->data[i]);
    if (ws->host_mapped)
        be->free_mapped(be, ws->host);
    else
        free(ws->host);
    const int busy = ws->busy;
    memset(ws, 0, sizeof *ws);
    ws->busy = busy;
}

// Grows ws to shape[0 .. n) and host_bytes of staging; 0 when out of memory.
static int ws_grow(g4_backend *be, g4_tower_ws *ws, const g4_ws_shape *shape, int n,
                   size_t host_bytes) {
    G4_ASSERT(n <= G4_TOWER_WS_MAX);
    for (int i = 0; i < n; i++) {
        const g4_buf b = {NULL, shape[i].type, shape[i].rows, shape[i].cols};
        const size_t bytes = g4_buf_bytes(&b) ? g4_buf_bytes(&b) : 1;
        if (ws->data[i] && ws->bytes[i] >= bytes) continue;
        if (ws->data[i]) be->free(be, ws->data[i]);
        ws->bytes[i] = 0;
        if (!(ws->data[i] = be->alloc(be, bytes))) return 0;
        ws->bytes[i] = bytes;
    }
    if (ws->host_bytes < host_bytes) {
        if (ws->host_mapped)
            be->free_mapped(be, ws->host);
        else
            free(ws->host);
        ws->host_mapped = be->alloc_mapped && (ws->host = be->alloc_mapped(be, host_bytes));
        if (!ws->host_mapped) ws->host = g4_malloc(host_bytes);
        ws->host_bytes = host_bytes;
    }
    return 1;
}

g4_tower_ws *g4_tower_ws_take(g4_backend *be, g4_tower_ws *ws, g4_tower_ws *own,
                              const g4_ws_shape *shape, int n, size_t host_bytes, g4_buf *out) {
    g4_tower_ws *use = __atomic_exchange_n(&ws->busy, 1, __ATOMIC_ACQUIRE) ? own : ws;
    if (!ws_grow(be, use, shape, n, host_bytes)) {
        g4_tower_ws_free(be, use); // (no half-grown workspace stays)
        if (use == ws) __atomic_store_n(&ws->busy, 0, __ATOMIC_RELEASE);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        out[i] = (g4_buf){use->data[i], shape[i].type, shape[i].rows, shape[i].cols};
    return use;
}

void g4_tower_ws_done(g4_backend *be, g4_tower_ws *ws, g4_tower_ws *used) {
    if (used == ws)
        __atomic_store_n(&ws->busy, 0, __ATOMIC_RELEASE);
    else
        g4_tower_ws_free(be, used);
}

void g4_tower_emit(g4_tower_hook hook, void *ctx, g4_backend *be, const char *name, int l,
                   const g4_buf *b) {
    if (!hook) return;
    char nm[64];
    if (l >= 0)
        snprintf(nm, sizeof nm, "%s_%d", name, l);
    else
        snprintf(nm, sizeof nm, "%s", name);
    hook(ctx, nm, be, b);
}
