// test_towers.c: the vision / audio towers and the multimodal merge on the CPU backend, beyond
// the layer-by-layer dumps of test_towers_vs_hf.sh:
//   1. g4_mm_merge places image and audio rows at their placeholders in prompt order and
//      rejects a count mismatch (expected rows written out by hand);
//   2. the production path from the media files (our image and audio front ends, towers, merge,
//      decoder) against HF's multimodal logits: argmax equal at every position, the stored
//      logits rows within rel err 1e-4 (tolerance "cpu-f32": the only differences to HF are
//      fp32 summation order, libm, and our float64 log-mel vs HF's float32 FFT, measured
//      ~5e-7 relative on these clips);
//   3. the ClippableLinear bounds bite: on the clipped dump the towers' soft tokens match HF
//      (rel <= 1e-4) only with the dump's bounds set, and miss by > 1e-3 with the package's
//      +-inf (so the clamps are applied, where HF applies them);
//   4. tower inputs the front end would never make are user errors, not crashes;
//   5. the towers' kept workspaces carry nothing from one run to the next;
//   6. a run given a handle (the eval's text state's) sends every compute op to it, none to the
//      root handle the tower was loaded on (a spy backend counts them).
#include <math.h>
#include <stdlib.h>

#include "engine/multimodal.h"
#include "fidelity/compare.h"
#include "fidelity/dump_run.h"
#include "fidelity/tolerance.h"
#include "tests/test_util.h"

static const char *fixtures;

// --- 0. the tower configs derived from the packages ---------------------------------------
// Expected values from the HF config.json beside each package (vision rope_theta 100;
// audio attention_chunk_size 12, attention_context_left 13 -> 12 keys, logit cap 50,
// residual_weight 0.5), which the loader never reads.
static void test_config(const char *model) {
    char *dir = g4_sprintf("%s/%s/package", fixtures, model);
    g4_package *p;
    if (g4_package_open(dir, &p)) {
        CHECK_MSG(0, "%s", g4_error());
        free(dir);
        return;
    }
    CHECK_MSG(p->vision.rope_theta == 100.0, "%s: vision rope theta %g", model,
              p->vision.rope_theta);
    CHECK_INT(p->vision.rope_n_freq, p->vision.head_dim / 4);
    for (int j = 0; j < p->vision.rope_n_freq; j++) {
        const double want = 1.0 / pow(100.0, 2.0 * j / (p->vision.head_dim / 2));
        CHECK_MSG(fabs(p->vision.rope_inv_freq[j] - want) <= 1e-7 * want, "inv_freq[%d]", j);
    }
    CHECK_INT(p->audio.chunk, 12);
    CHECK_INT(p->audio.band, 12);
    CHECK(p->audio.logit_cap == 50.0f);
    CHECK(p->audio.residual_weight == 0.5f);
    CHECK(p->audio.invalid_logit == -1e9f);
    g4_package_close(p);
    free(dir);
}

// --- 1. merge ---------------------------------------------------------------------------------
static void test_merge(void) {
    g4_text_config c = {0};
    c.hidden = 2;
    c.image_token_id = 100;
    c.audio_token_id = 101;
    const int32_t ids[] = {5, 101, 100, 100, 7, 101};
    const float img[] = {1, 2, 3, 4}, aud[] = {10, 11, 12, 13};
    g4_soft_tokens s;
    g4_backend *be = g4_backend_cpu(); // (host memory: the rows can be read in place)
    CHECK_MSG(g4_mm_merge(be, &c, ids, 6, img, 2, aud, 2, &s) == G4_OK, "%s", g4_error());
    const float want[] = {10, 11, 1, 2, 3, 4, 12, 13}; // aud0, img0, img1, aud1
    CHECK_INT(s.n, 4);
    CHECK(s.rows.type == G4_F32 && s.rows.rows == 4 && s.rows.cols == 2);
    for (int i = 0; i < 8 && s.rows.data; i++)
        CHECK_MSG(((const float *)s.rows.data)[i] == want[i], "row value %d", i);
    g4_mm_soft_free(be, &s);
    CHECK(g4_mm_merge(be, &c, ids, 6, img, 1, aud, 2, &s) == G4_EUSER);
    CHECK_MSG(strstr(g4_error(), "2 image placeholder ids (100) but the image gives 1") != NULL,
              "%s", g4_error());
    CHECK(s.rows.data == NULL);
    CHECK(g4_mm_merge(be, &c, ids, 6, img, 2, aud, 3, &s) == G4_EUSER);
    CHECK_MSG(strstr(g4_error(), "2 audio placeholder ids (101) but the audio gives 3") != NULL,
              "%s", g4_error());
    CHECK(g4_mm_merge(be, &c, ids, 6, NULL, 0, aud, 2, &s) == G4_EUSER);
    CHECK_MSG(strstr(g4_error(), "2 image placeholder ids (100) but no image was given") != NULL,
              "%s", g4_error());
    CHECK(g4_mm_merge(be, &c, ids, 1, NULL, 0, NULL, 0, &s) == G4_OK && s.n == 0 &&
          !s.rows.data);
}

// An int member as int32 (new array), its length in *n.
static int32_t *member_ints(g4_npz *z, const char *name, int *n) {
    const g4_array *a;
    if (g4_npz_get(z, name, &a)) return NULL;
    g4_tensor v = g4_array_view(a);
    int32_t *o = g4_malloc(sizeof(int32_t) * (size_t)a->numel + 1);
    for (uint64_t i = 0; i < a->numel; i++) o[i] = (int32_t)g4_tensor_get(&v, i);
    *n = (int)a->numel;
    return o;
}

static float *member_f32(g4_npz *z, const char *name, size_t *n) {
    const g4_array *a;
    if (g4_npz_get(z, name, &a)) return NULL;
    float *o = g4_malloc(sizeof(float) * (size_t)a->numel + 1);
    g4_array_to_f32(a, o);
    *n = (size_t)a->numel;
    return o;
}

// --- 2. the production path from the media files ----------------------------------------------
static void test_from_files(const char *model, const char *dump_name) {
    char *pkg_dir = g4_sprintf("%s/%s/package", fixtures, model);
    char *dump = g4_sprintf("%s/refdumps/mm/%s", fixtures, dump_name);
    g4_npz *z = NULL;
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_text_state *s = NULL;
    g4_mm_towers tw = {0};
    g4_image_features imf = {0};
    g4_audio_features auf = {0};
    g4_soft_tokens soft = {0};
    char *image = NULL, *audio = NULL;
    int32_t *ids = NULL, *argmax = NULL, *rows = NULL;
    float *logits = NULL, *ref = NULL, *img = NULL, *aud = NULL;
    int n = 0, n_am = 0, n_rows = 0;
    size_t n_ref = 0;
    int rc = g4_npz_open(dump, &z);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (rc) goto done;
    ids = member_ints(z, "input_ids", &n);
    argmax = member_ints(z, "logits_argmax", &n_am);
    rows = member_ints(z, "logits.rows", &n_rows);
    ref = member_f32(z, "logits", &n_ref);
    int n_budget = 0;
    int32_t *budget = member_ints(z, "image_max_soft_tokens", &n_budget);
    CHECK(ids && argmax && rows && ref && budget && n_am == n);
    if (!(ids && argmax && rows && ref && budget)) {
        free(budget);
        goto done;
    }
    CHECK((rc = g4_dump_media_path(z, dump, "image_file", &image)) == 0);
    CHECK((rc = g4_dump_media_path(z, dump, "audio_file", &audio)) == 0);
    CHECK_MSG((rc = g4_package_open(pkg_dir, &p)) == 0, "%s", g4_error());
    if (rc || !image || !audio) {
        free(budget);
        goto done;
    }
    g4_image_proc_config ic = p->image_proc;
    ic.max_soft_tokens = budget[0];
    free(budget);
    const int H = p->text.hidden, V = p->text.vocab;
    g4_backend *be = g4_backend_cpu();
    CHECK_MSG((rc = g4_text_model_load(p, be, &m)) == 0, "%s", g4_error());
    if (!rc) CHECK_MSG((rc = g4_text_state_new(m, n, n, &s)) == 0, "%s", g4_error());
    if (!rc) CHECK_MSG((rc = g4_image_features_load(&ic, image, &imf)) == 0, "%s", g4_error());
    if (!rc)
        CHECK_MSG((rc = g4_audio_features_load(&p->audio_fe, audio, &auf)) == 0, "%s", g4_error());
    if (rc) goto done;
    g4_mm_towers_init(&tw, p, be);
    img = g4_malloc(sizeof(float) * (size_t)imf.n_soft_tokens * H);
    aud = g4_malloc(sizeof(float) * (size_t)auf.n_soft_tokens * H);
    CHECK_MSG((rc = g4_mm_image_tower(&tw, &imf, img)) == 0, "%s", g4_error());
    if (!rc) CHECK_MSG((rc = g4_mm_audio_tower(&tw, &auf, aud)) == 0, "%s", g4_error());
    if (!rc)
        CHECK_MSG((rc = g4_mm_merge(be, &p->text, ids, n, img, imf.n_soft_tokens, aud,
                                    auf.n_soft_tokens, &soft)) == 0,
                  "%s", g4_error());
    if (rc) goto done;
    logits = g4_malloc(sizeof(float) * (size_t)n * V);
    CHECK_MSG((rc = g4_text_forward(s, ids, n, &soft, logits, 1)) == 0, "%s", g4_error());
    if (rc) goto done;
    int agree = 0;
    for (int t = 0; t < n; t++) {
        int best = 0;
        for (int j = 1; j < V; j++)
            if (logits[(size_t)t * V + j] > logits[(size_t)t * V + best]) best = j;
        agree += best == argmax[t];
    }
    CHECK_MSG(agree == n, "%s: argmax agrees at %d of %d positions", dump_name, agree, n);
    CHECK((size_t)n_rows * V == n_ref);
    float *ours = g4_malloc(sizeof(float) * (size_t)n_rows * V + 1);
    for (int r = 0; r < n_rows && (size_t)n_rows * V == n_ref; r++) {
        CHECK(rows[r] >= 0 && rows[r] < n);
        if (rows[r] >= 0 && rows[r] < n)
            memcpy(ours + (size_t)r * V, logits + (size_t)rows[r] * V, sizeof(float) * V);
    }
    g4_cmp_stats st = g4_cmp(ours, ref, (size_t)n_rows * V, (size_t)V);
    const g4_tol *tol = &g4_tol_cpu_f32;
    CHECK_MSG(st.nan == 0 && st.rel <= tol->rel, "%s: logits rel err %.3g (%zu non-finite)",
              dump_name, st.rel, st.nan);
    printf("%s from %s + %s: %d image + %d audio soft tokens, argmax %d/%d, logits rel err "
           "%.3g (tolerance %s %g)\n",
           model, strrchr(image, '/') + 1, strrchr(audio, '/') + 1, imf.n_soft_tokens,
           auf.n_soft_tokens, agree, n, st.rel, tol->name, tol->rel);
    free(ours);
done:
    free(ids), free(argmax), free(rows), free(ref), free(logits), free(img), free(aud);
    free(image), free(audio), free(pkg_dir), free(dump);
    g4_mm_soft_free(g4_backend_cpu(), &soft);
    g4_image_features_free(&imf);
    g4_audio_features_free(&auf);
    g4_mm_towers_free(&tw);
    g4_text_state_free(s);
    g4_text_model_free(m);
    g4_package_close(p);
    if (z) g4_npz_close(z);
}

// --- 3. clip bounds -------------------------------------------------------------------------
// rel err of the tower's soft tokens against the dump's member (at its stored rows).
static double soft_rel(g4_npz *z, const char *name, const float *ours, int n_rows, int H) {
    size_t n_ref = 0;
    float *ref = member_f32(z, name, &n_ref);
    char rn[64];
    snprintf(rn, sizeof rn, "%s.rows", name);
    int k = n_rows, *dummy = NULL;
    int32_t *rows = g4_npz_find(z, rn) >= 0 ? member_ints(z, rn, &k) : NULL;
    (void)dummy;
    float *sel = g4_malloc(sizeof(float) * (size_t)k * H + 1);
    for (int r = 0; r < k; r++) {
        const int src = rows ? rows[r] : r;
        G4_ASSERT(src >= 0 && src < n_rows);
        memcpy(sel + (size_t)r * H, ours + (size_t)src * H, sizeof(float) * H);
    }
    double rel = INFINITY;
    if (ref && n_ref == (size_t)k * H) {
        g4_cmp_stats st = g4_cmp(sel, ref, n_ref, 0);
        rel = st.nan ? INFINITY : st.rel;
    }
    free(ref), free(rows), free(sel);
    return rel;
}

static void test_clip_bounds(void) {
    char *pkg_dir = g4_sprintf("%s/tiny2/package", fixtures);
    char *dump = g4_sprintf("%s/refdumps/mm/tiny2-clipped.npz", fixtures);
    g4_npz *z = NULL;
    g4_package *p = NULL;
    g4_mm_towers tw = {0};
    g4_image_features imf = {0};
    g4_audio_features auf = {0};
    char *image = NULL;
    float *img = NULL, *aud = NULL;
    int rc;
    if ((rc = g4_npz_open(dump, &z)) || (rc = g4_package_open(pkg_dir, &p)) ||
        (rc = g4_dump_media_path(z, dump, "image_file", &image))) {
        CHECK_MSG(0, "%s", g4_error());
        goto done;
    }
    g4_image_proc_config ic = p->image_proc;
    ic.max_soft_tokens = 70; // the dump's budget (image_max_soft_tokens)
    const int H = p->text.hidden;
    g4_mm_towers_init(&tw, p, g4_backend_cpu());
    CHECK_MSG((rc = g4_image_features_load(&ic, image, &imf)) == 0, "%s", g4_error());
    // The audio tower on the dump's own log-mel (as compare runs it).
    size_t nf = 0, nm = 0;
    float *feat = member_f32(z, "input_features", &nf),
          *mask = member_f32(z, "input_features_mask", &nm);
    CHECK(feat && mask && nm > 0 && nf % nm == 0);
    if (rc || !feat || !mask) {
        free(feat), free(mask);
        goto done;
    }
    auf.n_frames = (int)nm;
    auf.n_mel = (int)(nf / nm);
    auf.features = feat;
    auf.mask = g4_malloc(nm);
    for (size_t i = 0; i < nm; i++) {
        auf.mask[i] = mask[i] != 0;
        auf.n_soft_tokens += auf.mask[i] && i % 4 == 0;
    }
    free(mask);
    img = g4_malloc(sizeof(float) * (size_t)imf.n_soft_tokens * H);
    aud = g4_malloc(sizeof(float) * (size_t)auf.n_soft_tokens * H);
    double rel[2][2]; // [without, with bounds][vision, audio]
    for (int with = 0; with < 2; with++) {
        if (with) CHECK_MSG(g4_dump_apply_clip_bounds(&tw, z, dump) == 0, "%s", g4_error());
        CHECK_MSG(g4_mm_image_tower(&tw, &imf, img) == 0, "%s", g4_error());
        CHECK_MSG(g4_mm_audio_tower(&tw, &auf, aud) == 0, "%s", g4_error());
        rel[with][0] = soft_rel(z, "vision_soft_tokens", img, imf.n_soft_tokens, H);
        rel[with][1] = soft_rel(z, "audio_soft_tokens", aud, auf.n_soft_tokens, H);
    }
    printf("clipped dump: soft tokens rel err vision %.3g / audio %.3g with the dump's bounds, "
           "%.3g / %.3g with the package's +-inf\n",
           rel[1][0], rel[1][1], rel[0][0], rel[0][1]);
    const double tol = g4_tol_cpu_f32.rel;
    CHECK_MSG(rel[1][0] <= tol && rel[1][1] <= tol, "with bounds: %g %g", rel[1][0], rel[1][1]);
    CHECK_MSG(rel[0][0] > 1e-3 && rel[0][1] > 1e-3, "without bounds: %g %g", rel[0][0], rel[0][1]);
    CHECK(tw.vision && tw.vision->w.n_clipped == 7 * tw.vision->cfg->n_layers);
    CHECK(tw.audio && tw.audio->w.n_clipped == 10 * tw.audio->cfg->n_layers);
done:
    free(img), free(aud), free(image), free(pkg_dir), free(dump);
    g4_image_features_free(&imf);
    g4_audio_features_free(&auf);
    g4_mm_towers_free(&tw);
    g4_package_close(p);
    if (z) g4_npz_close(z);
}

// --- 4. bad tower inputs ----------------------------------------------------------------------
static void test_bad_inputs(const char *pkg_dir) {
    g4_package *p;
    if (g4_package_open(pkg_dir, &p)) {
        CHECK_MSG(0, "%s", g4_error());
        return;
    }
    g4_vision_tower *vt = NULL;
    g4_audio_tower *at = NULL;
    CHECK_MSG(g4_vision_tower_load(p, g4_backend_cpu(), &vt) == 0, "%s", g4_error());
    CHECK_MSG(g4_audio_tower_load(p, g4_backend_cpu(), &at) == 0, "%s", g4_error());
    if (vt && at) {
        const int pos_size = p->vision.pos_size, D = p->vision.patch_dim;
        // A grid wider than the position table (a 20000x10 strip at 280 tokens is 840 x 3).
        g4_image_features f = {0};
        f.grid_w = (pos_size / 3 + 1) * 3; // > pos_size, a multiple of the kernel
        f.grid_h = 3;
        f.n_patches = f.grid_w * f.grid_h;
        f.patch_dim = D;
        f.n_soft_tokens = f.n_patches / 9;
        f.pixel_values = g4_calloc((size_t)f.n_patches * D, sizeof(float));
        f.position_ids = g4_malloc(sizeof(int32_t) * 2 * (size_t)f.n_patches);
        for (int i = 0; i < f.n_patches; i++) {
            f.position_ids[2 * i] = i % f.grid_w;
            f.position_ids[2 * i + 1] = i / f.grid_w;
        }
        float *out = g4_malloc(sizeof(float) * (size_t)f.n_patches * p->text.hidden);
        CHECK(g4_vision_tower_forward(vt, &f, out, NULL, NULL) == G4_EUSER);
        CHECK_MSG(strstr(g4_error(), "exceeds the vision position table") != NULL, "%s",
                  g4_error());
        // A grid side that is not a multiple of the pooling kernel.
        f.grid_w = 4;
        f.n_patches = 12;
        CHECK(g4_vision_tower_forward(vt, &f, out, NULL, NULL) == G4_EUSER);
        CHECK_MSG(strstr(g4_error(), "multiples of the pooling kernel") != NULL, "%s", g4_error());
        // A position outside the grid.
        f.grid_w = 3;
        f.n_patches = 9;
        f.n_soft_tokens = 1;
        for (int i = 0; i < 9; i++) {
            f.position_ids[2 * i] = i % 3;
            f.position_ids[2 * i + 1] = i / 3;
        }
        f.position_ids[0] = 7;
        CHECK(g4_vision_tower_forward(vt, &f, out, NULL, NULL) == G4_EUSER);
        CHECK_MSG(strstr(g4_error(), "outside its 3 x 3 grid") != NULL, "%s", g4_error());
        f.position_ids[0] = 0;
        CHECK_MSG(g4_vision_tower_forward(vt, &f, out, NULL, NULL) == G4_OK, "%s", g4_error());
        size_t bad = 0;
        for (int i = 0; i < p->text.hidden; i++) bad += !isfinite(out[i]);
        CHECK_INT(bad, 0);
        g4_image_features_free(&f);
        // Audio features of the wrong width.
        g4_audio_features a = {0};
        a.n_frames = 8;
        a.n_mel = p->audio.n_mel + 1;
        a.features = g4_calloc((size_t)a.n_frames * a.n_mel, sizeof(float));
        a.mask = g4_calloc((size_t)a.n_frames, 1);
        CHECK(g4_audio_tower_forward(at, &a, out, NULL, NULL) == G4_EUSER);
        CHECK_MSG(strstr(g4_error(), "mel bins") != NULL, "%s", g4_error());
        // All frames padding: no soft tokens, no crash, no NaN rows written.
        a.n_mel = p->audio.n_mel;
        CHECK_MSG(g4_audio_tower_forward(at, &a, out, NULL, NULL) == G4_OK, "%s", g4_error());
        g4_audio_features_free(&a);
        free(out);
    }
    g4_vision_tower_free(vt);
    g4_audio_tower_free(at);
    g4_package_close(p);
}

// Synthetic image features: a gw x gh patch grid (sides multiples of 3) of seeded pixels.
static g4_image_features synth_image(int gw, int gh, int patch_dim, unsigned long long seed) {
    g4_image_features f = {0};
    f.grid_w = gw, f.grid_h = gh, f.n_patches = gw * gh, f.patch_dim = patch_dim;
    f.n_soft_tokens = f.n_patches / 9;
    f.pixel_values = g4_malloc(sizeof(float) * (size_t)f.n_patches * patch_dim);
    for (size_t i = 0; i < (size_t)f.n_patches * patch_dim; i++)
        f.pixel_values[i] = g4t_rand_uniform(&seed, 0.0f, 1.0f);
    f.position_ids = g4_malloc(sizeof(int32_t) * 2 * (size_t)f.n_patches);
    for (int i = 0; i < f.n_patches; i++) {
        f.position_ids[2 * i] = i % gw;
        f.position_ids[2 * i + 1] = i / gw;
    }
    return f;
}

// The vision tower keeps its activations between runs (t->ws, grown to the largest image):
// a small image, a larger one (the workspace grows), the small one again, and the larger one
// while the workspace is marked busy (the call's own buffers) give the same soft tokens, bit
// for bit, as each image's first run: the kept buffers carry nothing from one run to the next.
static void test_kept_activations(const char *pkg_dir) {
    g4_package *p;
    if (g4_package_open(pkg_dir, &p)) {
        CHECK_MSG(0, "%s", g4_error());
        return;
    }
    g4_vision_tower *vt = NULL;
    CHECK_MSG(g4_vision_tower_load(p, g4_backend_cpu(), &vt) == 0, "%s", g4_error());
    if (vt) {
        const int H = p->text.hidden;
        g4_image_features a = synth_image(3, 3, p->vision.patch_dim, 0xa11),
                          b = synth_image(6, 3, p->vision.patch_dim, 0xb22);
        float *oa = g4_malloc(sizeof(float) * (size_t)H * 2), *oa2 = g4_malloc(sizeof(float) * H),
              *ob = g4_malloc(sizeof(float) * (size_t)H * 2),
              *ob2 = g4_malloc(sizeof(float) * (size_t)H * 2);
        int ok = g4_vision_tower_forward(vt, &a, oa, NULL, NULL) == G4_OK;
        const size_t bytes9 = vt->ws.bytes[0]; // pix32 [9, patch_dim]
        ok &= g4_vision_tower_forward(vt, &b, ob, NULL, NULL) == G4_OK;
        CHECK_MSG(vt->ws.bytes[0] == 2 * bytes9, "the workspace did not grow to 18 patches");
        ok &= g4_vision_tower_forward(vt, &a, oa2, NULL, NULL) == G4_OK;
        vt->ws.busy = 1; // as if another thread's run held the workspace
        ok &= g4_vision_tower_forward(vt, &b, ob2, NULL, NULL) == G4_OK;
        CHECK_INT(vt->ws.busy, 1); // (the run did not take or release it)
        vt->ws.busy = 0;
        CHECK_MSG(ok, "%s", g4_error());
        CHECK_MSG(ok && memcmp(oa, oa2, sizeof(float) * H) == 0,
                  "the small image after the larger one differs from its first run");
        CHECK_MSG(ok && memcmp(ob, ob2, sizeof(float) * (size_t)H * 2) == 0,
                  "the run on its own buffers differs from the run on the kept ones");
        size_t bad = 0;
        for (int i = 0; i < 2 * H; i++) bad += !isfinite(ob[i]);
        CHECK_INT(bad, 0);
        free(oa), free(oa2), free(ob), free(ob2);
        g4_image_features_free(&a);
        g4_image_features_free(&b);
    }
    g4_vision_tower_free(vt);
    // The audio tower the same way: 40 frames, 80, 40 again, 80 on the call's own buffers.
    g4_audio_tower *at = NULL;
    CHECK_MSG(g4_audio_tower_load(p, g4_backend_cpu(), &at) == 0, "%s", g4_error());
    if (at) {
        const int H = p->text.hidden, n_mel = p->audio.n_mel;
        g4_audio_features a[2] = {{0}, {0}};
        unsigned long long s = 0xa0d;
        for (int j = 0; j < 2; j++) {
            a[j].n_frames = 40 * (j + 1), a[j].n_mel = n_mel;
            a[j].n_valid = a[j].n_frames; // every frame valid
            a[j].n_soft_tokens = (a[j].n_frames / 2 + 1) / 2;
            a[j].features = g4_malloc(sizeof(float) * (size_t)a[j].n_frames * n_mel);
            for (int i = 0; i < a[j].n_frames * n_mel; i++)
                a[j].features[i] = g4t_rand_uniform(&s, -4.0f, 1.0f);
            a[j].mask = g4_malloc((size_t)a[j].n_frames);
            memset(a[j].mask, 1, (size_t)a[j].n_frames);
        }
        float *o[4];
        for (int j = 0; j < 4; j++) o[j] = g4_malloc(sizeof(float) * (size_t)H * 20);
        int ok = g4_audio_tower_forward(at, &a[0], o[0], NULL, NULL) == G4_OK;
        ok &= g4_audio_tower_forward(at, &a[1], o[1], NULL, NULL) == G4_OK;
        ok &= g4_audio_tower_forward(at, &a[0], o[2], NULL, NULL) == G4_OK;
        at->ws.busy = 1;
        ok &= g4_audio_tower_forward(at, &a[1], o[3], NULL, NULL) == G4_OK;
        at->ws.busy = 0;
        CHECK_MSG(ok, "%s", g4_error());
        CHECK_MSG(ok && memcmp(o[0], o[2], sizeof(float) * (size_t)H * 10) == 0,
                  "audio: the short clip after the longer one differs from its first run");
        CHECK_MSG(ok && memcmp(o[1], o[3], sizeof(float) * (size_t)H * 20) == 0,
                  "audio: the run on its own buffers differs from the run on the kept ones");
        for (int j = 0; j < 4; j++) free(o[j]);
        for (int j = 0; j < 2; j++) g4_audio_features_free(&a[j]);
    }
    g4_audio_tower_free(at);
    g4_package_close(p);
}

// --- 6. every op of a tower's run goes to the handle it was given ----------------------------
// The eval runs a tower on the text state's handle (its own stream on CUDA) while the tower was
// loaded on the model's root handle; an op sent to the root handle instead races the clip's
// other ops on another stream. The thirty-sixth session found the audio conformer's FFN doing
// that (compute-sanitizer initcheck: its convert read h before it was written); one stream on
// the CPU cannot show the race, so this test spies: the towers load on `spy_root`, a copy of
// the CPU backend whose compute ops count their calls, per handle, before doing the CPU's work,
// and run with ex = another copy with the same spies. A run on ex must count all its compute ops
// on ex and none on the root; the same run with ex = NULL (everything on the root) must count
// as many on the root (the spy sees every op of the tower) and give the same soft tokens bit
// for bit.
static g4_backend spy_cpu, spy_root;
static long spy_calls[2]; // [0]: on any other handle, [1]: on spy_root
#define SPY(op, P, A)                                                                             \
    static void spy_##op P {                                                                     \
        spy_calls[be == &spy_root]++;                                                             \
        spy_cpu.op A;                                                                             \
    }
SPY(convert, (g4_backend *be, g4_buf *d, const g4_buf *x), (be, d, x))
SPY(clamp, (g4_backend *be, g4_buf *x, float lo, float hi), (be, x, lo, hi))
SPY(rmsnorm, (g4_backend *be, g4_buf *y, const g4_buf *x, const void *w, int g, float e),
    (be, y, x, w, g, e))
SPY(linear, (g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w, int acc),
    (be, y, x, w, acc))
SPY(silu, (g4_backend *be, g4_buf *y, const g4_buf *x), (be, y, x))
SPY(scale, (g4_backend *be, g4_buf *x, float s), (be, x, s))
SPY(add, (g4_backend *be, g4_buf *y, const g4_buf *x), (be, y, x))
SPY(add_rmsnorm, (g4_backend *be, g4_buf *h, const g4_buf *x, const void *w, float e, const void *s),
    (be, h, x, w, e, s))
SPY(audio_attention,
    (g4_backend *be, g4_buf *o, const g4_buf *q, const g4_buf *k, const g4_buf *v, const g4_buf *rel,
     const float *pds, const g4_buf *valid, int nh, int hd, int chunk, int band, float cap,
     float inv),
    (be, o, q, k, v, rel, pds, valid, nh, hd, chunk, band, cap, inv))
SPY(dwconv1d_causal, (g4_backend *be, g4_buf *y, const g4_buf *x, const void *w, int K),
    (be, y, x, w, K))
SPY(glu, (g4_backend *be, g4_buf *y, const g4_buf *x), (be, y, x))
SPY(scatter_rows, (g4_backend *be, g4_buf *d, const g4_buf *x, const g4_buf *idx), (be, d, x, idx))
SPY(sscp_conv,
    (g4_backend *be, g4_buf *y, const g4_buf *x, const g4_buf *valid, const void *w, const void *lw,
     int H, int W, float e),
    (be, y, x, valid, w, lw, H, W, e))
SPY(add_rmsnorm_next,
    (g4_backend *be, g4_buf *h, const g4_buf *x, const void *w, float e, const void *s,
     g4_buf *next, int nn, const void *nw),
    (be, h, x, w, e, s, next, nn, nw))
SPY(attention_bidir,
    (g4_backend *be, g4_buf *o, const g4_buf *q, const g4_buf *k, const g4_buf *v, int nh, int hd,
     float sc),
    (be, o, q, k, v, nh, hd, sc))
SPY(linear_gelu_mul,
    (g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *wg, const g4_linear *wu),
    (be, y, x, wg, wu))
SPY(rope_2d,
    (g4_backend *be, g4_buf *x, int nh, int hd, const g4_buf *pos, const float *inv),
    (be, x, nh, hd, pos, inv))
SPY(vision_pool, (g4_backend *be, g4_buf *o, const g4_buf *x, const g4_buf *pos, int k, float sc),
    (be, o, x, pos, k, sc))
SPY(vision_posemb, (g4_backend *be, g4_buf *h, const void *t, int rows, const g4_buf *pos),
    (be, h, t, rows, pos))
#undef SPY

// The spies into spy_root (after the towers' loads: a load's own ops are the root's by design).
static void spy_install(void) {
    spy_root.convert = spy_convert, spy_root.clamp = spy_clamp, spy_root.rmsnorm = spy_rmsnorm;
    spy_root.linear = spy_linear, spy_root.silu = spy_silu, spy_root.scale = spy_scale;
    spy_root.add = spy_add, spy_root.add_rmsnorm = spy_add_rmsnorm;
    spy_root.audio_attention = spy_audio_attention, spy_root.dwconv1d_causal = spy_dwconv1d_causal;
    spy_root.glu = spy_glu, spy_root.scatter_rows = spy_scatter_rows;
    spy_root.sscp_conv = spy_sscp_conv, spy_root.add_rmsnorm_next = spy_add_rmsnorm_next;
    spy_root.attention_bidir = spy_attention_bidir, spy_root.linear_gelu_mul = spy_linear_gelu_mul;
    spy_root.rope_2d = spy_rope_2d, spy_root.vision_pool = spy_vision_pool;
    spy_root.vision_posemb = spy_vision_posemb;
}

// A tower's run on ex, then on the root handle (ex NULL): the first's compute ops all on ex,
// the second's as many, all on the root, and the soft tokens the same.
typedef int (*tower_run_fn)(void *t, g4_backend *ex, const void *features, g4_buf *out);
static int run_audio(void *t, g4_backend *ex, const void *f, g4_buf *out) {
    return g4_audio_tower_run(t, ex, f, out, NULL, NULL);
}
static int run_vision(void *t, g4_backend *ex, const void *f, g4_buf *out) {
    return g4_vision_tower_run(t, ex, f, out, NULL, NULL);
}
static void check_run_handle(const char *kind, tower_run_fn run, void *t, const void *features,
                             g4_backend *ex, int rows, int H) {
    g4_buf o1 = g4_buf_new(ex, G4_F32, rows, H), o2 = g4_buf_new(ex, G4_F32, rows, H);
    spy_calls[0] = spy_calls[1] = 0;
    int ok = run(t, ex, features, &o1) == G4_OK;
    const long on_ex = spy_calls[0], on_root = spy_calls[1];
    spy_calls[0] = spy_calls[1] = 0;
    ok &= run(t, NULL, features, &o2) == G4_OK;
    CHECK_MSG(ok, "%s", g4_error());
    CHECK_MSG(on_root == 0, "%s: %ld compute ops of a run on ex went to the root handle", kind,
              on_root);
    CHECK_MSG(on_ex > 0 && spy_calls[1] == on_ex && spy_calls[0] == 0,
              "%s: the run on ex counted %ld ops there, the run on the root %ld there and %ld "
              "elsewhere (expected as many, all on the root)",
              kind, on_ex, spy_calls[1], spy_calls[0]);
    CHECK_MSG(ok && memcmp(o1.data, o2.data, g4_buf_bytes(&o1)) == 0,
              "%s: the run on ex differs from the run on the root handle", kind);
    g4_buf_free(ex, &o1), g4_buf_free(ex, &o2);
}

static void test_run_handle(const char *pkg_dir) {
    g4_package *p;
    if (g4_package_open(pkg_dir, &p)) {
        CHECK_MSG(0, "%s", g4_error());
        return;
    }
    spy_cpu = *g4_backend_cpu();
    spy_root = spy_cpu;
    g4_audio_tower *at = NULL;
    g4_vision_tower *vt = NULL;
    CHECK_MSG(g4_audio_tower_load(p, &spy_root, &at) == 0, "%s", g4_error());
    CHECK_MSG(g4_vision_tower_load(p, &spy_root, &vt) == 0, "%s", g4_error());
    spy_install();
    g4_backend ex = spy_root; // the state's handle stand-in: the same spies, counted apart
    const int H = p->text.hidden;
    if (at) {
        g4_audio_features a = {0};
        unsigned long long s = 0x5b1;
        a.n_frames = 44, a.n_mel = p->audio.n_mel, a.n_valid = a.n_frames;
        a.n_soft_tokens = (a.n_frames / 2 + 1) / 2; // 11
        a.features = g4_malloc(sizeof(float) * (size_t)a.n_frames * a.n_mel);
        for (int i = 0; i < a.n_frames * a.n_mel; i++) a.features[i] = g4t_rand_uniform(&s, -4, 1);
        a.mask = g4_malloc((size_t)a.n_frames);
        memset(a.mask, 1, (size_t)a.n_frames);
        check_run_handle("audio", run_audio, at, &a, &ex, a.n_soft_tokens, H);
        g4_audio_features_free(&a);
    }
    if (vt) {
        g4_image_features f = synth_image(3, 3, p->vision.patch_dim, 0x5b2);
        check_run_handle("vision", run_vision, vt, &f, &ex, f.n_soft_tokens, H);
        g4_image_features_free(&f);
    }
    g4_audio_tower_free(at);
    g4_vision_tower_free(vt);
    g4_package_close(p);
}

int main(void) {
    fixtures = g4t_env("G4_FIXTURES");
    test_config("mobius-tiny-f16");
    test_config("tiny2");
    test_merge();
    test_from_files("mobius-tiny-f16", "mobius-tiny-f16.npz");
    test_from_files("tiny2", "tiny2.npz");
    test_clip_bounds();
    test_bad_inputs(g4t_env("G4_TINY_PKG"));
    test_kept_activations(g4t_env("G4_TINY_PKG"));
    test_run_handle(g4t_env("G4_TINY_PKG"));
    return g4t_finish("test_towers");
}
