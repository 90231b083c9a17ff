// g4cu features PKG (--image F | --audio F) [--out F.npy]: runs the image or audio front end
// (engine/image_fe.h, engine/audio_fe.h) with the package's processor configs and prints the
// shapes and soft-token counts. --out writes what the tower would get: pixel_values float32
// [patches, 768] (and <F>.positions.npy int32 [patches, 2], x = column, y = row) or
// input_features float32 [T, 128] (and <F>.mask.npy int32 [T]).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/audio_fe.h"
#include "engine/image_fe.h"
#include "fidelity/npy.h"
#include "loader/package.h"
#include "tools/cli.h"

// "<out without .npy>.<suffix>.npy"
static char *aux_path(const char *out, const char *suffix) {
    size_t n = strlen(out);
    if (n > 4 && !strcmp(out + n - 4, ".npy")) n -= 4;
    return g4_sprintf("%.*s.%s.npy", (int)n, out, suffix);
}

static int run_image(const g4_package *p, const char *path, const char *out) {
    if (!p->has_image_proc)
        return g4_fail(G4_EUSER, "%s: the package has no image_processor.json", p->dir);
    g4_image_features f;
    int rc = g4_image_features_load(&p->image_proc, path, &f);
    if (rc) return rc;
    printf("image %s: %dx%d -> %dx%d pixels (w x h), %dx%d patches of %d values (HF pads to %d), "
           "%d soft tokens\n",
           path, f.src_width, f.src_height, f.width, f.height, f.grid_w, f.grid_h, f.patch_dim,
           f.max_patches, f.n_soft_tokens);
    if (out) {
        char *pos = aux_path(out, "positions");
        rc = g4_npy_write(out, G4_DT_FLOAT, 2, (int64_t[]){f.n_patches, f.patch_dim},
                          f.pixel_values);
        if (!rc)
            rc = g4_npy_write(pos, G4_DT_INT32, 2, (int64_t[]){f.n_patches, 2}, f.position_ids);
        if (!rc) printf("wrote %s (pixel_values) and %s (positions)\n", out, pos);
        free(pos);
    }
    g4_image_features_free(&f);
    return rc;
}

static int run_audio(const g4_package *p, const char *path, const char *out) {
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
        printf("audio %s: %d Hz, %d channel(s), %lld frames -> %lld samples at %d Hz%s\n", path,
               a.src_rate, a.src_channels, (long long)a.src_frames, (long long)a.n_samples,
               a.sample_rate, f.truncated ? " (truncated to the first 30 s, as HF does)" : "");
        printf("log-mel [%d, %d], %d valid frames, %d soft tokens\n", f.n_frames, f.n_mel,
               f.n_valid, f.n_soft_tokens);
    }
    if (!rc && out) {
        char *mpath = aux_path(out, "mask");
        int32_t *mask = g4_malloc(sizeof(int32_t) * (size_t)f.n_frames);
        for (int t = 0; t < f.n_frames; t++) mask[t] = f.mask[t];
        rc = g4_npy_write(out, G4_DT_FLOAT, 2, (int64_t[]){f.n_frames, f.n_mel}, f.features);
        if (!rc) rc = g4_npy_write(mpath, G4_DT_INT32, 1, (int64_t[]){f.n_frames}, mask);
        if (!rc) printf("wrote %s (input_features) and %s (mask)\n", out, mpath);
        free(mask);
        free(mpath);
    }
    g4_audio_features_free(&f);
    g4_audio_free(&a);
    g4_logmel_free(&lm);
    return rc;
}

static int cmd_features(int argc, char **argv) {
    const char *pkg_dir = NULL, *image = NULL, *audio = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char **dst = !strcmp(argv[i], "--image")   ? &image
                           : !strcmp(argv[i], "--audio") ? &audio
                           : !strcmp(argv[i], "--out")   ? &out
                                                         : NULL;
        if (dst) {
            if (++i >= argc) return g4_cli_usage_error("features", "%s needs a file", argv[i - 1]);
            *dst = argv[i];
        } else if (argv[i][0] == '-') {
            return g4_cli_usage_error("features", "unknown option '%s'", argv[i]);
        } else if (!pkg_dir) {
            pkg_dir = argv[i];
        } else {
            return g4_cli_usage_error("features", "unexpected argument '%s'", argv[i]);
        }
    }
    if (!pkg_dir) return g4_cli_usage_error("features", "missing package directory");
    if (!image == !audio)
        return g4_cli_usage_error("features", "give exactly one of --image, --audio");
    g4_package *p;
    int rc = g4_package_open(pkg_dir, &p);
    if (rc) return g4_cli_fail(rc);
    rc = image ? run_image(p, image, out) : run_audio(p, audio, out);
    g4_package_close(p);
    return rc ? g4_cli_fail(rc) : 0;
}

const g4_cmd g4_cmd_features = {
    "features", cmd_features,
    "PKG (--image F | --audio F) [--out F.npy]   front-end output: shapes, soft tokens"};
