// ops.c: backend-independent helpers of the op interface (see ops.h).
#include "kernels/ops.h"

#include "base/base.h"

size_t g4_type_size(g4_type t) {
    switch (t) {
    case G4_F32: return 4;
    case G4_F16: return 2;
    case G4_BF16: return 2;
    case G4_I32: return 4;
    }
    G4_ASSERT(!"unknown g4_type");
    return 0;
}

const char *g4_type_name(g4_type t) {
    switch (t) {
    case G4_F32: return "f32";
    case G4_F16: return "f16";
    case G4_BF16: return "bf16";
    case G4_I32: return "i32";
    }
    return "?";
}

size_t g4_buf_bytes(const g4_buf *b) { return (size_t)b->rows * (size_t)b->cols * g4_type_size(b->type); }

g4_buf g4_buf_new(g4_backend *be, g4_type type, int rows, int cols) {
    G4_ASSERT(rows >= 0 && cols >= 0);
    g4_buf b = {NULL, type, rows, cols};
    b.data = be->alloc(be, g4_buf_bytes(&b) ? g4_buf_bytes(&b) : 1); // NULL: out of memory
    return b;
}

void g4_buf_free(g4_backend *be, g4_buf *b) {
    if (b->data) be->free(be, b->data);
    b->data = NULL;
}

g4_buf g4_buf_view(const g4_buf *b, int rows, int cols) {
    G4_ASSERT(rows >= 0 && cols >= 0 && (size_t)rows * cols <= (size_t)b->rows * b->cols);
    g4_buf v = {b->data, b->type, rows, cols};
    return v;
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

void g4_mlp_block_apart(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *mlp, g4_buf *y,
                        const g4_linear *wg, const g4_linear *wu, const g4_linear *wd) {
    if (a)
        be->add_norm_linear(be, a, x, mlp, wg, wu, NULL, 0);
    else
        be->linear_gelu_mul(be, mlp, x, wg, wu);
    be->linear(be, y, mlp, wd, 0);
}

void g4_ple_block_apart(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *pg, g4_buf *y,
                        const g4_linear *wg, const g4_linear *wp, const g4_buf *ple, int ple_col0) {
    if (a) {
        be->add_norm_linear(be, a, x, pg, wg, NULL, ple, ple_col0);
    } else {
        be->linear(be, pg, x, wg, 0);
        be->gelu_mul(be, pg, pg, ple, ple_col0);
    }
    be->linear(be, y, pg, wp, 0);
}
