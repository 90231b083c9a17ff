// fuzz_image.c: libFuzzer target for the image front end (engine/image_fe.h): the input is an
// image file decoded by g4_image_decode (PNG through libpng, JPEG through libjpeg, by
// signature; g4_image_load maps the file and calls it), then, when it decodes, the target
// size under every budget HF allows (70 .. 1120 soft tokens), and resized and cut into patches
// as `g4cu vqa` / `--image F` do at the smallest budget (70: the resize code is the same at
// every budget, and a 280-token resize costs 4x the time per input). Seeds:
// tests/fixtures/frontends/media/*.png *.jpg and tests/fixtures/refdumps/mm/media
// (tests/fuzz/build.sh).
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/image_fe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// Decoded images above this many pixels are only decoded, not resized: the resize of a
// 20-Mpixel image takes seconds and finds nothing a small one would not, while the decoder
// itself is what such inputs test.
#define FUZZ_MAX_RESIZE_PIXELS (1 << 21)

static void features(const g4_image *img, int budget) {
    const g4_image_proc_config cfg = {.patch_size = 16, .max_soft_tokens = budget,
                                      .pooling_kernel_size = 3};
    g4_image_features f;
    if (g4_image_features_from_rgb(&cfg, img, &f) != G4_OK) {
        if (strchr(g4_error(), '\n') || !*g4_error()) abort();
        return;
    }
    // What the tower and the prompt rely on: the grid is whole pooling windows, within budget.
    if (f.n_patches != f.grid_h * f.grid_w || f.grid_h % 3 || f.grid_w % 3 ||
        f.n_soft_tokens * 9 != f.n_patches || f.n_soft_tokens > budget || f.n_soft_tokens < 1)
        abort();
    volatile float sink = f.pixel_values[(size_t)f.n_patches * f.patch_dim - 1];
    (void)sink;
    g4_image_features_free(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_image img;
    if (g4_image_decode(data, size, "fuzz.img", &img) != G4_OK) {
        if (strchr(g4_error(), '\n') || !*g4_error()) abort(); // one non-empty line
        return 0;
    }
    if (img.width < 1 || img.height < 1) abort();
    // every decoded byte is initialised (MSan would say so; here a read catches OOB sizes)
    volatile uint8_t sink = img.rgb[(size_t)img.width * img.height * 3 - 1];
    (void)sink;
    static const int budgets[] = {70, 140, 280, 560, 1120};
    for (int i = 0; i < 5; i++) {
        const g4_image_proc_config cfg = {.patch_size = 16, .max_soft_tokens = budgets[i],
                                          .pooling_kernel_size = 3};
        int th, tw;
        if (g4_image_target_size(&cfg, img.height, img.width, &th, &tw) == G4_OK &&
            (th < 48 || tw < 48 || th % 48 || tw % 48 ||
             (long long)(th / 48) * (tw / 48) > budgets[i]))
            abort();
    }
    if ((long long)img.width * img.height <= FUZZ_MAX_RESIZE_PIXELS) features(&img, 70);
    g4_image_free(&img);
    return 0;
}
