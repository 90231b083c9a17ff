// dump_run.c: see dump_run.h.
#include "fidelity/dump_run.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "engine/multimodal.h"

int g4_dump_member_is_meta(const char *name) {
    static const char *const meta[] = {
        "input_ids",       "image_file",    "audio_file", "image_max_soft_tokens",
        "clip_names",      "clip_bounds",   "hf_dtype",   "logits_top_ids",
        "logits_top_vals", "logits_row_rms"}; // (the last three: what compare judges logits_argmax
                                              // by)
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++)
        if (!strcmp(name, meta[i])) return 1;
    const size_t n = strlen(name);
    return n > 5 && !strcmp(name + n - 5, ".rows");
}

static void add_item(g4_capture *c, const char *name, int rows, int cols, const float *data) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->items = g4_realloc(c->items, sizeof(g4_capture_item) * (size_t)c->cap);
    }
    g4_capture_item *it = &c->items[c->n++];
    it->name = g4_strdup(name);
    it->rows = rows;
    it->cols = cols;
    it->pos = NULL; // (g4_capture_mark_tokens)
    it->data = g4_malloc(sizeof(float) * (size_t)rows * (size_t)cols + 1);
    memcpy(it->data, data, sizeof(float) * (size_t)rows * (size_t)cols);
}

// (g4_buf_to_host_f32 of kernels/ops.h plus a sync.)
static void hook(void *ctx, const char *name, g4_backend *be, const g4_buf *b) {
    g4_capture *c = ctx;
    float *tmp = g4_malloc(sizeof(float) * (size_t)b->rows * (size_t)b->cols + 1);
    if (b->type == G4_F32) {
        be->download(be, tmp, b->data, g4_buf_bytes(b));
    } else {
        g4_buf f = g4_buf_new(be, G4_F32, b->rows, b->cols);
        G4_ASSERT(f.data); // a capture buffer the size of one activation
        be->convert(be, &f, b);
        be->download(be, tmp, f.data, g4_buf_bytes(&f));
        g4_buf_free(be, &f);
    }
    be->sync(be);
    add_item(c, name, b->rows, b->cols, tmp);
    free(tmp);
}

int g4_dump_media_path(g4_npz *ref, const char *ref_path, const char *name, char **out) {
    const g4_array *a;
    int rc = g4_npz_get(ref, name, &a);
    if (rc) return rc;
    if (a->dtype != G4_DT_UINT8 || a->ndim != 1 || a->numel == 0 || a->numel > 4096)
        return g4_fail(G4_EUSER, "%s: member '%s' must be a uint8 [n] path (1..4096 bytes)",
                       ref_path, name);
    char *rel = g4_strndup((const char *)a->data, (size_t)a->numel);
    if (strlen(rel) != a->numel) {
        free(rel);
        return g4_fail(G4_EUSER, "%s: member '%s' holds a NUL byte", ref_path, name);
    }
    const char *slash = strrchr(ref_path, '/');
    char *dir = slash ? g4_strndup(ref_path, (size_t)(slash - ref_path)) : g4_strdup(".");
    *out = rel[0] == '/' ? g4_strdup(rel) : g4_path_join(dir, rel);
    free(dir);
    free(rel);
    return G4_OK;
}

// A one-element integer member, or def when absent.
static int member_int(g4_npz *ref, const char *ref_path, const char *name, long def, long *out) {
    *out = def;
    if (g4_npz_find(ref, name) < 0) return G4_OK;
    const g4_array *a;
    int rc = g4_npz_get(ref, name, &a);
    if (rc) return rc;
    if (a->numel != 1 || (a->dtype != G4_DT_INT64 && a->dtype != G4_DT_INT32))
        return g4_fail(G4_EUSER, "%s: member '%s' must be one integer", ref_path, name);
    g4_tensor v = g4_array_view(a);
    *out = (long)g4_tensor_get(&v, 0);
    return G4_OK;
}

// The dump's own audio features (input_features [T, mel] float, input_features_mask [T]) as a
// g4_audio_features with the token count HF's processor would give (mask[::2][::2] sum).
static int dump_audio_features(g4_npz *ref, const char *ref_path, g4_audio_features *f) {
    memset(f, 0, sizeof *f);
    const g4_array *x, *m;
    int rc;
    if ((rc = g4_npz_get(ref, "input_features", &x)) ||
        (rc = g4_npz_get(ref, "input_features_mask", &m)))
        return rc;
    if (x->ndim != 2 || x->shape[0] < 1 || x->shape[1] < 1 || x->shape[0] > 1000000 ||
        x->shape[1] > 4096 || m->numel != (uint64_t)x->shape[0])
        return g4_fail(G4_EUSER, "%s: input_features must be [T, mel] and input_features_mask [T]",
                       ref_path);
    f->n_frames = (int)x->shape[0];
    f->n_mel = (int)x->shape[1];
    f->features = g4_malloc(sizeof(float) * (size_t)x->numel);
    g4_array_to_f32(x, f->features);
    f->mask = g4_malloc((size_t)f->n_frames);
    g4_tensor mv = g4_array_view(m);
    for (int i = 0; i < f->n_frames; i++) {
        f->mask[i] = g4_tensor_get(&mv, (uint64_t)i) != 0;
        f->n_valid += f->mask[i];
        f->n_soft_tokens += f->mask[i] && i % 4 == 0;
    }
    return G4_OK;
}

int g4_dump_apply_clip_bounds(g4_mm_towers *tw, g4_npz *ref, const char *ref_path) {
    const g4_array *names, *bounds;
    int rc;
    if ((rc = g4_npz_get(ref, "clip_names", &names)) ||
        (rc = g4_npz_get(ref, "clip_bounds", &bounds)))
        return rc;
    if (names->dtype != G4_DT_UINT8 || names->ndim != 1 || bounds->ndim != 2 ||
        bounds->shape[1] != 4)
        return g4_fail(G4_EUSER, "%s: clip_names must be uint8 text and clip_bounds [n, 4]",
                       ref_path);
    if (g4_package_component(tw->pkg, G4_COMP_VISION) && !tw->vision &&
        (rc = g4_vision_tower_load(tw->pkg, tw->be, &tw->vision)))
        return rc;
    if (g4_package_component(tw->pkg, G4_COMP_AUDIO) && !tw->audio &&
        (rc = g4_audio_tower_load(tw->pkg, tw->be, &tw->audio)))
        return rc;
    float *b = g4_malloc(sizeof(float) * (size_t)bounds->numel + 1);
    g4_array_to_f32(bounds, b);
    char *text = g4_strndup((const char *)names->data, (size_t)names->numel);
    int row = 0;
    rc = G4_OK;
    for (char *save = NULL, *nm = strtok_r(text, "\n", &save); nm && !rc;
         nm = strtok_r(NULL, "\n", &save), row++) {
        const g4_binder *w = !strncmp(nm, "vision:", 7) && tw->vision ? &tw->vision->w
                             : !strncmp(nm, "audio:", 6) && tw->audio ? &tw->audio->w
                                                                      : NULL;
        const char *base = strchr(nm, ':') ? strchr(nm, ':') + 1 : nm;
        g4_linear *lin = NULL;
        for (int i = 0; w && i < w->n_clipped && !lin; i++)
            if (!strcmp(w->clipped[i].name, base)) lin = w->clipped[i].lin;
        if (row >= bounds->shape[0])
            rc = g4_fail(G4_EUSER, "%s: more clip_names than clip_bounds rows (%lld)", ref_path,
                         (long long)bounds->shape[0]);
        else if (!lin)
            rc = g4_fail(G4_EUSER, "%s: clip_names '%s' is not a clipped linear of the package",
                         ref_path, nm);
        else {
            lin->in_lo = b[4 * row], lin->in_hi = b[4 * row + 1];
            lin->out_lo = b[4 * row + 2], lin->out_hi = b[4 * row + 3];
        }
    }
    if (!rc && row != bounds->shape[0])
        rc = g4_fail(G4_EUSER, "%s: %d clip_names for %lld clip_bounds rows", ref_path, row,
                     (long long)bounds->shape[0]);
    free(text);
    free(b);
    return rc;
}

// Keeps only the rows "<name>.rows" lists, for every item the dump holds a subset of.
static int reduce_rows(g4_capture *c, g4_npz *ref, const char *ref_path) {
    char nm[128];
    for (int i = 0; i < c->n; i++) {
        g4_capture_item *it = &c->items[i];
        snprintf(nm, sizeof nm, "%s.rows", it->name);
        if (g4_npz_find(ref, nm) < 0) continue;
        const g4_array *a;
        int rc = g4_npz_get(ref, nm, &a);
        if (rc) return rc;
        if (a->ndim != 1 || (a->dtype != G4_DT_INT32 && a->dtype != G4_DT_INT64))
            return g4_fail(G4_EUSER, "%s: member '%s' must be an int [k] row list", ref_path, nm);
        g4_tensor v = g4_array_view(a);
        const int k = (int)a->numel;
        float *d = g4_malloc(sizeof(float) * (size_t)k * it->cols + 1);
        for (int r = 0; r < k; r++) {
            const double src = g4_tensor_get(&v, (uint64_t)r);
            if (!(src >= 0 && src < it->rows)) {
                free(d);
                return g4_fail(G4_EUSER, "%s: %s[%d] = %g is not a row of '%s' (%d rows)", ref_path,
                               nm, r, src, it->name, it->rows);
            }
            memcpy(d + (size_t)r * it->cols, it->data + (size_t)src * it->cols,
                   sizeof(float) * (size_t)it->cols);
        }
        if (it->pos) { // (the positions of the kept rows)
            int *pos = g4_malloc(sizeof(int) * (size_t)(k > 0 ? k : 1));
            for (int r = 0; r < k; r++) pos[r] = it->pos[(int)g4_tensor_get(&v, (uint64_t)r)];
            free(it->pos);
            it->pos = pos;
        }
        free(it->data);
        it->data = d;
        it->rows = k;
    }
    return G4_OK;
}

int g4_dump_input_ids(g4_npz *ref, const char *ref_path, int32_t **ids, int *n) {
    const g4_array *a;
    int rc = g4_npz_get(ref, "input_ids", &a);
    if (rc) return rc;
    if (a->ndim != 1 || (a->dtype != G4_DT_INT64 && a->dtype != G4_DT_INT32) || a->numel == 0 ||
        a->numel > 0x7fffffff)
        return g4_fail(G4_EUSER, "%s: input_ids must be a 1-D int64/int32 array", ref_path);
    *n = (int)a->numel;
    *ids = g4_malloc(sizeof(int32_t) * (size_t)*n);
    g4_tensor v = g4_array_view(a);
    for (int i = 0; i < *n; i++) (*ids)[i] = (int32_t)g4_tensor_get(&v, (uint64_t)i);
    return G4_OK;
}

int g4_capture_dump(const char *pkg_dir, g4_backend *be, g4_npz *ref, const char *ref_path,
                    g4_capture *out) {
    memset(out, 0, sizeof *out);
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_text_state *s = NULL;
    g4_mm_towers tw;
    g4_image_features imf = {0};
    g4_audio_features ours = {0}, theirs = {0};
    g4_soft_tokens soft = {0};
    float *img = NULL, *aud = NULL, *logits = NULL;
    int32_t *ids = NULL;
    char *image_path = NULL, *audio_path = NULL;
    int n = 0, n_img = 0, n_aud = 0, rc;
    memset(&tw, 0, sizeof tw);
    if ((rc = g4_dump_input_ids(ref, ref_path, &ids, &n))) goto done;
    if ((rc = g4_package_open(pkg_dir, &p)) || (rc = g4_text_model_load(p, be, &m)) ||
        (rc = g4_text_state_new(m, n, n, &s)))
        goto done;
    out->vocab = p->text.vocab;
    out->n_layers = p->text.n_layers;
    out->hidden = p->text.hidden;
    g4_mm_towers_init(&tw, p, be);
    tw.hook = hook;
    tw.hook_ctx = out;
    if (g4_npz_find(ref, "clip_names") >= 0 && (rc = g4_dump_apply_clip_bounds(&tw, ref, ref_path)))
        goto done;

    if (g4_npz_find(ref, "image_file") >= 0) {
        long budget;
        if ((rc = g4_dump_media_path(ref, ref_path, "image_file", &image_path)) ||
            (rc = member_int(ref, ref_path, "image_max_soft_tokens",
                             p->has_image_proc ? p->image_proc.max_soft_tokens : 0, &budget)))
            goto done;
        if (!p->has_image_proc) {
            rc = g4_fail(G4_EUSER, "%s: the package has no image_processor.json", pkg_dir);
            goto done;
        }
        g4_image_proc_config ic = p->image_proc;
        ic.max_soft_tokens = (int)budget;
        if ((rc = g4_image_features_load(&ic, image_path, &imf))) goto done;
        add_item(out, "pixel_values", imf.n_patches, imf.patch_dim, imf.pixel_values);
        float *pos = g4_malloc(sizeof(float) * 2 * (size_t)imf.n_patches);
        for (int i = 0; i < 2 * imf.n_patches; i++) pos[i] = (float)imf.position_ids[i];
        add_item(out, "pixel_position_ids", imf.n_patches, 2, pos);
        free(pos);
        n_img = imf.n_soft_tokens;
        img = g4_malloc(sizeof(float) * (size_t)(n_img > 0 ? n_img : 1) * p->text.hidden);
        if ((rc = g4_mm_image_tower(&tw, &imf, img))) goto done;
    }
    if (g4_npz_find(ref, "audio_file") >= 0) {
        if ((rc = g4_dump_media_path(ref, ref_path, "audio_file", &audio_path))) goto done;
        if (!p->has_audio_fe) {
            rc = g4_fail(G4_EUSER, "%s: the package has no audio_feature_extraction.json", pkg_dir);
            goto done;
        }
        if ((rc = g4_audio_features_load(&p->audio_fe, audio_path, &ours))) goto done;
        add_item(out, "input_features", ours.n_frames, ours.n_mel, ours.features);
        float *mk = g4_malloc(sizeof(float) * (size_t)ours.n_frames + 1);
        for (int i = 0; i < ours.n_frames; i++) mk[i] = ours.mask[i];
        add_item(out, "input_features_mask", ours.n_frames, 1, mk);
        free(mk);
        // The tower runs on the dump's features when it has them (isolating the tower).
        const int own = g4_npz_find(ref, "input_features") >= 0;
        if (own && (rc = dump_audio_features(ref, ref_path, &theirs))) goto done;
        const g4_audio_features *f = own ? &theirs : &ours;
        n_aud = f->n_soft_tokens;
        aud = g4_malloc(sizeof(float) * (size_t)(n_aud > 0 ? n_aud : 1) * p->text.hidden);
        if ((rc = g4_mm_audio_tower(&tw, f, aud))) goto done;
    }
    if ((rc = g4_mm_merge(be, &p->text, ids, n, img, n_img, aud, n_aud, &soft))) goto done;
    s->hook = hook;
    s->hook_ctx = out;
    logits = g4_malloc(sizeof(float) * (size_t)n * p->text.vocab);
    const int first_text = out->n; // (the forward's items follow the towers')
    if ((rc = g4_text_forward(s, ids, n, &soft, logits, 1))) {
        g4_error_prefix("%s", pkg_dir); // the run's errors do not name the package
        goto done;
    }
    // the spans: the ids the forward took, its placeholders where g4_mm_merge put soft tokens
    g4_capture_mark_tokens(out, first_text, &p->text, ids, n);
    if (g4_npz_find(ref, "logits_argmax") >= 0) {
        float *am = g4_malloc(sizeof(float) * (size_t)n);
        for (int t = 0; t < n; t++) {
            const float *r = logits + (size_t)t * p->text.vocab;
            int best = 0;
            for (int j = 1; j < p->text.vocab; j++)
                if (r[j] > r[best]) best = j;
            am[t] = (float)best;
        }
        add_item(out, "logits_argmax", n, 1, am);
        free(am);
    }
    rc = reduce_rows(out, ref, ref_path);
done:
    free(ids), free(img), free(aud), free(logits), free(image_path), free(audio_path);
    g4_mm_soft_free(be, &soft);
    g4_image_features_free(&imf);
    g4_audio_features_free(&ours);
    free(theirs.features);
    free(theirs.mask);
    g4_mm_towers_free(&tw);
    g4_text_state_free(s);
    g4_text_model_free(m);
    g4_package_close(p);
    if (rc) { // (what g4_capture_free does)
        for (int i = 0; i < out->n; i++)
            free(out->items[i].name), free(out->items[i].data), free(out->items[i].pos);
        free(out->items);
        free(out->span);
        memset(out, 0, sizeof *out);
    }
    return rc;
}
