// backend_select.c: pick a backend by name for the commands ("cpu" or "cuda").
#include "engine/backend_select.h"

#include <string.h>

#include "base/base.h"

int g4_backend_by_name(const char *name, g4_backend **out) {
    *out = NULL;
    if (!name || !strcmp(name, "cpu")) {
        *out = g4_backend_cpu();
        return G4_OK;
    }
    if (!strcmp(name, "cuda")) {
        const char *why = "unknown reason";
        *out = g4_backend_cuda(&why);
        if (!*out) return g4_fail(G4_EUSER, "--backend cuda: no usable GPU (%s)", why);
        return G4_OK;
    }
    return g4_fail(G4_EUSER, "--backend '%s': expected cpu or cuda", name);
}

void g4_buf_to_host_f32(g4_backend *be, const g4_buf *b, float *dst) {
    size_t n = (size_t)b->rows * b->cols;
    if (b->type == G4_F32) {
        be->download(be, dst, b->data, n * sizeof(float));
        return;
    }
    g4_buf tmp = g4_buf_new(be, G4_F32, b->rows, b->cols);
    G4_ASSERT(tmp.data);
    be->convert(be, &tmp, b);
    be->download(be, dst, tmp.data, n * sizeof(float));
    g4_buf_free(be, &tmp);
}
