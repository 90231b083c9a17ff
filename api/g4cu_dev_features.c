// g4cu_dev_features.c: `g4cu features` (include/g4cu_dev.h g4cu_dev_features): the image or
// audio front end (engine/image_fe.h, engine/audio_fe.h) with the package's processor configs;
// the shapes and soft-token counts, and optionally what the tower would get as .npy files.
#include <g4cu_dev.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "engine/audio_fe.h"
#include "engine/image_fe.h"
#include "fidelity/npy.h"
#include "loader/package.h"

// "<out without .npy>.<suffix>.npy"
static char *aux_path(const char *out, const char *suffix) {
    size_t n = strlen(out);
    if (n > 4 && !strcmp(out + n - 4, ".npy")) n -= 4;
    return g4_sprintf("%.*s.%s.npy", (int)n, out, suffix);
}

static int run_image(FILE *rep, const g4_package *p, const char *path, const char *out) {
    if (!p->has_image_proc)
        return g4_fail(G4_EUSER, "%s: the package has no image_processor.json", p->dir);
    g4_image_features f;
    int rc = g4_image_features_load(&p->image_proc, path, &f);
    if (rc) return rc;
    fprintf(rep,
            "image %s: %dx%d -> %dx%d pixels (w x h), %dx%d patches of %d values (HF pads to %d), "
            "%d soft tokens\n",
            path, f.src_width, f.src_height, f.width, f.height, f.grid_w, f.grid_h, f.patch_dim,
            f.max_patches, f.n_soft_tokens);
    if (out) {
        char *pos = aux_path(out, "positions");
        rc = g4_npy_write(out, G4_DT_FLOAT, 2, (int64_t[]){f.n_patches, f.patch_dim},
                          f.pixel_values);
        if (!rc)
            rc = g4_npy_write(pos, G4_DT_INT32, 2, (int64_t[]){f.n_patches, 2}, f.position_ids);
        if (!rc) fprintf(rep, "wrote %s (pixel_values) and %s (positions)\n", out, pos);
        free(pos);
    }
    g4_image_features_free(&f);
    return rc;
}

static int run_audio(FILE *rep, const g4_package *p, const char *path, const char *out) {
    if (!p->has_audio_fe)
        return g4_fail(G4_EUSER, "%s: the package has no audio_feature_extraction.json", p->dir);
    g4_logmel lm;
    int rc = g4_logmel_init(&p->audio_fe, &lm);
    if (rc) return rc;
    g4_audio a;
    g4_audio_features f = {0};
    rc = g4_audio_load(path, lm.sample_rate, G4_AUDIO_MAX_SAMPLES + 1, &a);
    if (!rc) rc = g4_logmel_compute(&lm, a.samples, a.n_samples, path, &f);
    if (!rc) {
        fprintf(rep, "audio %s: %d Hz, %d channel(s), %lld frames -> %lld samples at %d Hz%s\n",
                path, a.src_rate, a.src_channels, (long long)a.src_frames, (long long)a.n_samples,
                a.sample_rate, f.truncated ? " (truncated to the first 30 s, as HF does)" : "");
        fprintf(rep, "log-mel [%d, %d], %d valid frames, %d soft tokens\n", f.n_frames, f.n_mel,
                f.n_valid, f.n_soft_tokens);
    }
    if (!rc && out) {
        char *mpath = aux_path(out, "mask");
        int32_t *mask = g4_malloc(sizeof(int32_t) * (size_t)f.n_frames);
        for (int t = 0; t < f.n_frames; t++) mask[t] = f.mask[t];
        rc = g4_npy_write(out, G4_DT_FLOAT, 2, (int64_t[]){f.n_frames, f.n_mel}, f.features);
        if (!rc) rc = g4_npy_write(mpath, G4_DT_INT32, 1, (int64_t[]){f.n_frames}, mask);
        if (!rc) fprintf(rep, "wrote %s (input_features) and %s (mask)\n", out, mpath);
        free(mask);
        free(mpath);
    }
    g4_audio_features_free(&f);
    g4_audio_free(&a);
    g4_logmel_free(&lm);
    return rc;
}

void g4cu_dev_features_params_default(g4cu_dev_features_params *p) {
    *p = (g4cu_dev_features_params){0};
}

int g4cu_dev_features(const char *dir, const g4cu_dev_features_params *p, FILE *out) {
    if (!p || !p->image == !p->audio)
        return g4_api_code(
            g4_fail(G4_EUSER, "features: give exactly one of an image, an audio file"));
    if (!dir || !out)
        return g4_api_code(g4_fail(G4_EUSER, "g4cu_dev_features: dir or out is NULL"));
    g4_package *pkg;
    int rc = g4_package_open(dir, &pkg);
    if (rc) return g4_api_code(rc);
    rc = p->image ? run_image(out, pkg, p->image, p->out) : run_audio(out, pkg, p->audio, p->out);
    g4_package_close(pkg);
    return g4_api_code(rc);
}
