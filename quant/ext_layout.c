// ext_layout.c: onnx_ir's external-data placement rule (see ext_layout.h).
#include "quant/ext_layout.h"

#include <stdlib.h>

#include "base/base.h"

typedef struct {
    uint64_t size;
    int index;
} ext_item;

// Ascending size; equal sizes keep initializer order (Python's sort is stable).
static int item_cmp(const void *a, const void *b) {
    const ext_item *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

uint64_t g4_ext_layout(const uint64_t *sizes, int n, uint64_t *offsets) {
    ext_item *items = g4_malloc(sizeof *items * (size_t)(n > 0 ? n : 1));
    int m = 0;
    for (int i = 0; i < n; i++) {
        offsets[i] = G4_EXT_INLINE;
        if (sizes[i] > G4_EXT_INLINE_MAX) items[m++] = (ext_item){sizes[i], i};
    }
    qsort(items, (size_t)m, sizeof *items, item_cmp);
    uint64_t off = 0;
    for (int j = 0; j < m; j++) {
        if (items[j].size > G4_EXT_ALIGN_ABOVE)
            off = (off + G4_EXT_ALIGN - 1) / G4_EXT_ALIGN * G4_EXT_ALIGN;
        offsets[items[j].index] = off;
        off += items[j].size;
    }
    free(items);
    return off;
}
