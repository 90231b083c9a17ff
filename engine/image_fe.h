// image_fe.h: the Gemma-4 image front end: a PNG or JPEG file -> 8-bit RGB -> aspect-preserving
// bicubic resize -> x/255 -> 16x16 patches + (x, y) patch positions + the soft-token count.
//
// What HF does (transformers 5.17; spec gemma4-architecture.md 4.1, 4.7, 9.12) and we reproduce:
//   AutoProcessor gives Gemma4ImageProcessor, the torchvision backend (image_processing_gemma4.py;
//   the PIL backend is Gemma4ImageProcessorPil, not the default). For a PIL image it calls
//   image.convert("RGB"), pil_to_tensor (uint8 [3, H, W]), then
//   tvF.resize(uint8, [Ht, Wt], BICUBIC, antialias=True) unless the size is unchanged. On the
//   CPU that is torch's native uint8 path (_upsample_bicubic2d_aa on uint8, AVX2 or generic
//   loop, same integer arithmetic): separable, horizontal pass first (when the width changes)
//   into a uint8 image, then vertical; each output = clamp((2^(p-1) + sum w16_i x_i) >> p, 0,
//   255) with the Keys cubic (a = -0.5) weights over support 2 * max(scale, 1), normalised in
//   double, then rounded to int16 with p the largest precision (<= 22) that keeps
//   round(w_max * 2^(p+1)) < 2^15. image_resize.c implements exactly that, so the resized
//   pixels are bit-identical to HF's. Then pixel = float32(u8) * float32(1/255)
//   (rescale_factor 1/255, no normalisation); patches in row-major patch order, each vector in
//   (py, px, c) order; position (x = patch column, y = patch row). HF pads to max_patches with
//   zero patches at position (-1, -1); we return only the real patches and say how many HF
//   would pad to.
//   Target size (get_aspect_ratio_preserving_size): max_patches = max_soft_tokens * k^2,
//   factor = sqrt(max_patches * p^2 / (H W)), side = k p (48), Ht = floor(factor H / side) side,
//   Wt likewise; a side that rounds to 0 becomes `side` and the other
//   min(floor(long / short) side, max_patches / k^2 * side). Up- and downscaling both happen.
// Decoding follows PIL's convert("RGB") (what HF calls on PIL images): gray is replicated,
// palette looked up (transparency ignored), alpha dropped (not composited), 1/2/4-bit gray
// scaled to 0..255, 16-bit RGB(A) and gray+alpha keep the high byte (PIL's ;16B raw modes),
// 16-bit gray ("I;16") is clipped to 0..255 (PIL's I;16 -> L conversion clips, it does not
// scale). JPEG: libjpeg with its defaults (islow IDCT, fancy upsampling), as PIL decodes;
// CMYK / YCCK JPEGs are rejected (PIL's Adobe inversion heuristics are not reproduced). EXIF
// orientation is not applied (HF applies it only when it loads a path itself via load_image).
#ifndef G4_IMAGE_FE_H
#define G4_IMAGE_FE_H

#include <stddef.h>
#include <stdint.h>

#include "loader/model_config.h"

// Largest decoded image accepted: PIL's decompression-bomb error threshold (2 x 89478485 pixels).
#define G4_IMAGE_MAX_PIXELS 178956970LL

// 8-bit RGB, row-major, interleaved.
typedef struct {
    uint8_t *rgb; // [height, width, 3]
    int width, height;
} g4_image;

// Decodes a PNG or JPEG file (recognised by its signature) to RGB as described above. Errors
// name the file: not PNG/JPEG, truncated or corrupt (with the decoder's message), CMYK JPEG,
// too many pixels.
int g4_image_load(const char *path, g4_image *out);
// The same from memory; `what` names the bytes in errors.
int g4_image_decode(const uint8_t *data, size_t size, const char *what, g4_image *out);
void g4_image_free(g4_image *img);

// Gemma-4's resized size for an image of height x width under cfg (G4_EUSER when the config is
// invalid: max_soft_tokens must be one of 70, 140, 280, 560, 1120 as HF requires, or the rule
// has no solution).
int g4_image_target_size(const g4_image_proc_config *cfg, int height, int width, int *out_h,
                         int *out_w);

// torchvision's uint8 bicubic antialiased resize (see above); out is allocated. Sizes >= 1.
int g4_image_resize(const g4_image *in, int out_h, int out_w, g4_image *out);

typedef struct {
    float *pixel_values;   // [n_patches, patch_dim] u8 / 255, vector order (py, px, c)
    int32_t *position_ids; // [n_patches, 2] (x = patch column, y = patch row), row-major patches
    int n_patches;         // grid_h * grid_w
    int patch_dim;         // 3 * patch^2 = 768
    int grid_h, grid_w;    // patch rows / columns (multiples of the pooling kernel)
    int height, width;     // resized image size (grid * patch)
    int src_height, src_width;
    int max_patches;   // max_soft_tokens * k^2: HF pads pixel_values to this many rows
    int n_soft_tokens; // n_patches / k^2: <|image|> tokens in the prompt
} g4_image_features;

// Resize + rescale + patchify of an RGB image.
int g4_image_features_from_rgb(const g4_image_proc_config *cfg, const g4_image *img,
                               g4_image_features *out);
// The whole front end for one file.
int g4_image_features_load(const g4_image_proc_config *cfg, const char *path,
                           g4_image_features *out);
void g4_image_features_free(g4_image_features *f);

#endif
