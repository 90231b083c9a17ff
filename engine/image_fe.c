// image_fe.c: Gemma-4's resize rule, rescale and patchify (HF Gemma4ImageProcessor). See
// image_fe.h; decoding is in image_decode.c and the resampler in image_resize.c.
#include "engine/image_fe.h"

#include <math.h>
#include <stdlib.h>

#include "base/base.h"

void g4_image_features_free(g4_image_features *f) {
    free(f->pixel_values);
    free(f->position_ids);
    memset(f, 0, sizeof *f);
}

static int check_cfg(const g4_image_proc_config *cfg) {
    // HF refuses any other budget (_SUPPORTED_SOFT_TOKENS in image_processing_gemma4.py).
    static const int supported[] = {70, 140, 280, 560, 1120};
    int ok = 0;
    for (size_t i = 0; i < sizeof supported / sizeof supported[0]; i++)
        ok |= cfg->max_soft_tokens == supported[i];
    if (!ok)
        return g4_fail(G4_EUSER,
                       "image processor: max_soft_tokens %d, expected one of 70, 140, 280, 560, "
                       "1120 (as HF's Gemma4ImageProcessor requires)",
                       cfg->max_soft_tokens);
    if (cfg->patch_size <= 0 || cfg->patch_size > 1024 || cfg->pooling_kernel_size <= 0 ||
        cfg->pooling_kernel_size > 64)
        return g4_fail(G4_EUSER,
                       "image processor: patch_size %d, pooling_kernel_size %d out of "
                       "range (expected 1..1024 and 1..64)",
                       cfg->patch_size, cfg->pooling_kernel_size);
    return G4_OK;
}

int g4_image_target_size(const g4_image_proc_config *cfg, int height, int width, int *out_h,
                         int *out_w) {
    int rc = check_cfg(cfg);
    if (rc) return rc;
    if (height <= 0 || width <= 0)
        return g4_fail(G4_EUSER, "image of %dx%d pixels: expected a positive size", width, height);
    const int64_t k = cfg->pooling_kernel_size, p = cfg->patch_size;
    const int64_t max_patches = (int64_t)cfg->max_soft_tokens * k * k;
    const int64_t target_px = max_patches * p * p;
    const int64_t side = k * p; // 48: both sides are whole pooling windows of patches
    // Integer operands below 2^53 convert exactly, so these doubles equal Python's floats.
    const double factor = sqrt((double)target_px / ((double)height * (double)width));
    int64_t th = (int64_t)floor(factor * height / (double)side) * side;
    int64_t tw = (int64_t)floor(factor * width / (double)side) * side;
    if (th == 0 && tw == 0)
        return g4_fail(G4_EUSER,
                       "image of %dx%d pixels: resizes to 0x0 (the sides must be "
                       "multiples of %lld)",
                       width, height, (long long)side);
    const int64_t max_side = (max_patches / (k * k)) * side;
    if (th == 0) { // very wide: one pooling row, width from the aspect ratio, capped
        th = side;
        int64_t w = (int64_t)floor((double)width / (double)height) * side;
        tw = w < max_side ? w : max_side;
    } else if (tw == 0) {
        tw = side;
        int64_t h = (int64_t)floor((double)height / (double)width) * side;
        th = h < max_side ? h : max_side;
    }
    if (th * tw > target_px)
        return g4_fail(G4_EUSER,
                       "image of %dx%d pixels: resizing to %lldx%lld exceeds %lld "
                       "patches of %lld pixels",
                       width, height, (long long)tw, (long long)th, (long long)max_patches,
                       (long long)p);
    *out_h = (int)th;
    *out_w = (int)tw;
    return G4_OK;
}

int g4_image_features_from_rgb(const g4_image_proc_config *cfg, const g4_image *img,
                               g4_image_features *out) {
    memset(out, 0, sizeof *out);
    int th, tw;
    int rc = g4_image_target_size(cfg, img->height, img->width, &th, &tw);
    if (rc) return rc;
    g4_image resized = {0};
    const g4_image *src = img;
    if (th != img->height || tw != img->width) { // HF skips the resize at the target size
        rc = g4_image_resize(img, th, tw, &resized);
        if (rc) return rc;
        src = &resized;
    }
    const int p = cfg->patch_size, k = cfg->pooling_kernel_size;
    out->grid_h = th / p;
    out->grid_w = tw / p;
    out->n_patches = out->grid_h * out->grid_w;
    out->patch_dim = 3 * p * p;
    out->height = th;
    out->width = tw;
    out->src_height = img->height;
    out->src_width = img->width;
    out->max_patches = cfg->max_soft_tokens * k * k;
    out->n_soft_tokens = out->n_patches / (k * k);
    out->pixel_values = g4_malloc(sizeof(float) * (size_t)out->n_patches * out->patch_dim);
    out->position_ids = g4_malloc(sizeof(int32_t) * 2 * (size_t)out->n_patches);
    // HF: image (a uint8 tensor) * rescale_factor -> float32 u8 * float32(1/255).
    const float rescale = (float)(1.0 / 255.0);
    for (int gy = 0; gy < out->grid_h; gy++) {
        for (int gx = 0; gx < out->grid_w; gx++) {
            const size_t patch = (size_t)gy * out->grid_w + gx;
            float *dst = out->pixel_values + patch * out->patch_dim;
            for (int py = 0; py < p; py++) {
                const uint8_t *row = src->rgb + ((size_t)(gy * p + py) * tw + (size_t)gx * p) * 3;
                for (int i = 0; i < p * 3; i++) // (px, c) are contiguous in the RGB row
                    dst[py * p * 3 + i] = (float)row[i] * rescale;
            }
            out->position_ids[2 * patch] = gx;     // x = column
            out->position_ids[2 * patch + 1] = gy; // y = row
        }
    }
    g4_image_free(&resized);
    return G4_OK;
}

int g4_image_features_load(const g4_image_proc_config *cfg, const char *path,
                           g4_image_features *out) {
    memset(out, 0, sizeof *out);
    g4_image img;
    int rc = g4_image_load(path, &img);
    if (rc) return rc;
    rc = g4_image_features_from_rgb(cfg, &img, out);
    if (rc) g4_error_prefix("%s", path);
    g4_image_free(&img);
    return rc;
}
