// image_resize.c: bicubic antialiased resize of 8-bit RGB, bit-identical to what HF's Gemma-4
// image processor gets from tvF.resize(uint8 tensor, BICUBIC, antialias=True) on the CPU
// (torch's uint8 _upsample_bicubic2d_aa; the AVX2 and generic loops share the arithmetic).
//
// Per axis whose size changes (the horizontal pass first, into a uint8 image, then the vertical):
//   scale = in / out; support = 2 * scale when downscaling (the antialias widening), else 2;
//   for output i: center = scale (i + 0.5); taps j from xmin = max(trunc(center - support
//   + 0.5), 0) to min(trunc(center + support + 0.5), in) - 1, weight
//   w_j = cubic((j - center + 0.5) / max(scale, 1)) with Keys a = -0.5, normalised to sum 1
//   (in double). The weights become int16 with precision p: the largest p <= 22 with
//   trunc(0.5 + w_max 2^(p+1)) < 2^15, w16 = trunc(w 2^p +- 0.5) (rounding half away from 0).
//   out = clamp((2^(p-1) + sum w16_j x_j) >> p, 0, 255).
// The weights depend only on the sizes, so they are computed once per axis.
// Test: tests/test_frontends.c (torch-resized random images of many shapes, and HF outputs).
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "engine/image_fe.h"

typedef struct {
    int out_size;
    int ksize;     // weights stored per output (2 ceil(support) + 1)
    int *xmin;     // [out_size] first input index
    int *xsize;    // [out_size] taps used (<= ksize)
    int16_t *w;    // [out_size, ksize] fixed-point weights
    int precision; // p: weights are w * 2^p
} resize_axis;

// torch's aa_filter for bicubic (Keys cubic convolution, a = -0.5, as PIL), written in the
// same operation order as its cubic_convolution1/2 so the double weights round identically.
static double cubic_aa(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0.0;
}

static void axis_free(resize_axis *a) {
    free(a->xmin);
    free(a->xsize);
    free(a->w);
}

static void axis_init(int in_size, int out_size, resize_axis *a) {
    const double scale = (double)in_size / (double)out_size;
    const double support = scale >= 1.0 ? (4 * 0.5) * scale : 4 * 0.5; // 4 taps at scale 1
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    const int ksize = (int)ceil(support) * 2 + 1;
    a->out_size = out_size;
    a->ksize = ksize;
    a->xmin = g4_malloc(sizeof(int) * (size_t)out_size);
    a->xsize = g4_malloc(sizeof(int) * (size_t)out_size);
    double *wd = g4_calloc((size_t)out_size * (size_t)ksize, sizeof(double));
    for (int i = 0; i < out_size; i++) {
        const double center = scale * (i + 0.5);
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xend = (int64_t)(center + support + 0.5);
        if (xend > in_size) xend = in_size;
        int xsize = (int)(xend - xmin);
        G4_ASSERT(xsize >= 1 && xsize <= ksize);
        double *w = wd + (size_t)i * ksize, total = 0.0;
        for (int j = 0; j < xsize; j++) {
            w[j] = cubic_aa(((double)(j + xmin) - center + 0.5) * invscale);
            total += w[j];
        }
        if (total != 0.0)
            for (int j = 0; j < xsize; j++) w[j] /= total;
        a->xmin[i] = (int)xmin;
        a->xsize[i] = xsize;
    }
    // One precision for the whole axis, from the largest weight.
    double w_max = wd[0];
    for (size_t k = 0; k < (size_t)out_size * ksize; k++)
        if (wd[k] > w_max) w_max = wd[k];
    int p = 0;
    for (p = 0; p < 22; p++) {
        int next = (int)(0.5 + w_max * (double)(1 << (p + 1)));
        if (next >= (1 << 15)) break;
    }
    a->precision = p;
    a->w = g4_malloc(sizeof(int16_t) * (size_t)out_size * ksize);
    for (size_t k = 0; k < (size_t)out_size * ksize; k++) {
        double v = wd[k] * (double)(1 << p);
        a->w[k] = (int16_t)(int)(wd[k] < 0 ? -0.5 + v : 0.5 + v);
    }
    free(wd);
}

static inline uint8_t fixed_to_u8(int64_t acc, int p) {
    if (acc < 0) return 0; // any negative sum clamps to 0 (torch: arithmetic shift, then clamp)
    acc >>= p;
    return acc > 255 ? 255 : (uint8_t)acc;
}

// in [h, w_in, 3] -> out [h, a->out_size, 3]
static void pass_horizontal(const uint8_t *in, int h, int w_in, const resize_axis *a,
                            uint8_t *out) {
    const int w_out = a->out_size;
    for (int y = 0; y < h; y++) {
        const uint8_t *row = in + (size_t)y * w_in * 3;
        uint8_t *dst = out + (size_t)y * w_out * 3;
        for (int x = 0; x < w_out; x++) {
            const int16_t *k = a->w + (size_t)x * a->ksize;
            const uint8_t *src = row + (size_t)a->xmin[x] * 3;
            for (int c = 0; c < 3; c++) {
                int64_t acc = (int64_t)1 << (a->precision - 1); // the + 0.5 of rounding
                for (int j = 0; j < a->xsize[x]; j++) acc += (int64_t)k[j] * src[j * 3 + c];
                dst[x * 3 + c] = fixed_to_u8(acc, a->precision);
            }
        }
    }
}

// in [h_in, w, 3] -> out [a->out_size, w, 3]
static void pass_vertical(const uint8_t *in, int w, const resize_axis *a, uint8_t *out) {
    const size_t stride = (size_t)w * 3;
    for (int y = 0; y < a->out_size; y++) {
        const int16_t *k = a->w + (size_t)y * a->ksize;
        const uint8_t *src = in + (size_t)a->xmin[y] * stride;
        uint8_t *dst = out + (size_t)y * stride;
        for (size_t i = 0; i < stride; i++) {
            int64_t acc = (int64_t)1 << (a->precision - 1);
            for (int j = 0; j < a->xsize[y]; j++) acc += (int64_t)k[j] * src[j * stride + i];
            dst[i] = fixed_to_u8(acc, a->precision);
        }
    }
}

int g4_image_resize(const g4_image *in, int out_h, int out_w, g4_image *out) {
    memset(out, 0, sizeof *out);
    if (in->width <= 0 || in->height <= 0 || out_h <= 0 || out_w <= 0 ||
        (int64_t)out_h * out_w > G4_IMAGE_MAX_PIXELS)
        return g4_fail(G4_EUSER,
                       "resize %dx%d -> %dx%d: sizes must be positive and at most %lld "
                       "pixels",
                       in->width, in->height, out_w, out_h, G4_IMAGE_MAX_PIXELS);
    const uint8_t *cur = in->rgb;
    uint8_t *tmp = NULL;
    int cur_w = in->width;
    if (out_w != in->width) {
        resize_axis ax;
        axis_init(in->width, out_w, &ax);
        tmp = g4_malloc((size_t)in->height * out_w * 3);
        pass_horizontal(in->rgb, in->height, in->width, &ax, tmp);
        axis_free(&ax);
        cur = tmp;
        cur_w = out_w;
    }
    out->width = out_w;
    out->height = out_h;
    if (out_h != in->height) {
        resize_axis ay;
        axis_init(in->height, out_h, &ay);
        out->rgb = g4_malloc((size_t)out_h * out_w * 3);
        pass_vertical(cur, cur_w, &ay, out->rgb);
        axis_free(&ay);
        free(tmp);
    } else if (tmp) {
        out->rgb = tmp;
    } else { // same size: a copy, as torch returns the input unchanged
        out->rgb = g4_malloc((size_t)out_h * out_w * 3);
        memcpy(out->rgb, in->rgb, (size_t)out_h * out_w * 3);
    }
    return G4_OK;
}
