// capture.c: see capture.h.
#include "fidelity/capture.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "engine/text_model.h"

static void capture_hook(void *ctx, const char *name, g4_backend *be, const g4_buf *b) {
    g4_capture *c = ctx;
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->items = g4_realloc(c->items, sizeof(g4_capture_item) * (size_t)c->cap);
    }
    g4_capture_item *it = &c->items[c->n++];
    it->name = g4_strdup(name);
    it->rows = b->rows;
    it->cols = b->cols;
    it->pos = NULL; // (g4_capture_mark_tokens)
    it->data = g4_malloc(sizeof(float) * (size_t)b->rows * (size_t)b->cols + 1);
    g4_buf_to_host_f32(be, b, it->data);
}

int g4_capture_run(const char *pkg_dir, g4_backend *be, const int32_t *ids, int n,
                   g4_capture *out) {
    memset(out, 0, sizeof *out);
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_text_state *s = NULL;
    int rc;
    if ((rc = g4_package_open(pkg_dir, &p)) || (rc = g4_text_model_load(p, be, &m)) ||
        (rc = g4_text_state_new(m, n, n, &s)))
        goto done;
    out->vocab = p->text.vocab;
    out->n_layers = p->text.n_layers;
    out->hidden = p->text.hidden;
    s->hook = capture_hook;
    s->hook_ctx = out;
    if ((rc = g4_text_forward(s, ids, n, NULL, NULL, 1)))
        g4_error_prefix("%s", pkg_dir); // load errors already name the file; the run's do not
    else
        g4_capture_mark_tokens(out, 0, &p->text, ids, n);
done:
    g4_text_state_free(s);
    g4_text_model_free(m);
    g4_package_close(p);
    if (rc) g4_capture_free(out);
    return rc;
}

void g4_capture_mark_tokens(g4_capture *c, int first, const g4_text_config *cfg, const int32_t *ids,
                            int n) {
    for (int i = first; i < c->n; i++) {
        g4_capture_item *it = &c->items[i];
        if (it->rows != n || it->pos) continue;
        it->pos = g4_malloc(sizeof(int) * (size_t)n);
        for (int t = 0; t < n; t++) it->pos[t] = t;
    }
    c->n_tokens = n;
    free(c->span);
    c->span = g4_malloc((size_t)(n > 0 ? n : 1));
    int media = 0;
    for (int t = 0; t < n; t++) {
        const g4_placeholder ph = g4_placeholder_of(cfg, ids[t]);
        c->span[t] = ph == G4_PH_IMAGE   ? G4_SPAN_IMAGE
                     : ph == G4_PH_AUDIO ? G4_SPAN_AUDIO
                                         : G4_SPAN_TEXT;
        media |= c->span[t] != G4_SPAN_TEXT;
    }
    if (!media) { // (no image or audio soft token: nothing to split by)
        free(c->span);
        c->span = NULL;
    }
}

const g4_capture_item *g4_capture_find(const g4_capture *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->items[i].name, name)) return &c->items[i];
    return NULL;
}

void g4_capture_free(g4_capture *c) {
    for (int i = 0; i < c->n; i++) {
        free(c->items[i].name);
        free(c->items[i].data);
        free(c->items[i].pos);
    }
    free(c->items);
    free(c->span);
    memset(c, 0, sizeof *c);
}
