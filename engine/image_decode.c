// image_decode.c: PNG (libpng) and JPEG (libjpeg) files -> 8-bit RGB the way PIL's
// Image.open(f).convert("RGB") gives them to the HF image processor. See image_fe.h for the
// conversions. Both libraries report errors by longjmp; everything allocated between setjmp
// and the jump lives in a struct reached through a pointer, so nothing is lost or freed twice.
#include <stddef.h>
#include <stdio.h> // before jpeglib.h, which uses size_t and FILE without including them
#include <stdlib.h>

#include <jpeglib.h>
#include <jerror.h> // after jpeglib.h: the message codes (JWRN_JPEG_EOF)
#include <png.h>
#include <setjmp.h>

#include "base/base.h"
#include "engine/image_fe.h"

void g4_image_free(g4_image *img) {
    free(img->rgb);
    memset(img, 0, sizeof *img);
}

static int check_size(const char *what, const char *kind, uint64_t w, uint64_t h) {
    if (w == 0 || h == 0)
        return g4_fail(G4_EUSER, "%s: %s of %llux%llu pixels, expected a non-empty image", what,
                       kind, (unsigned long long)w, (unsigned long long)h);
    if (w > (uint64_t)G4_IMAGE_MAX_PIXELS || h > (uint64_t)G4_IMAGE_MAX_PIXELS ||
        w * h > (uint64_t)G4_IMAGE_MAX_PIXELS)
        return g4_fail(G4_EUSER,
                       "%s: %s of %llux%llu pixels exceeds the %lld-pixel limit (PIL's "
                       "decompression-bomb limit)",
                       what, kind, (unsigned long long)w, (unsigned long long)h,
                       G4_IMAGE_MAX_PIXELS);
    return G4_OK;
}

// --- PNG ------------------------------------------------------------------------------------
typedef struct {
    const uint8_t *data;
    size_t size, pos;
    char msg[256];
    uint8_t *pixels; // decoded rows (libpng output format), owned until converted
    png_bytep *rows;
} png_job;

static void png_read_cb(png_structp png, png_bytep out, size_t n) {
    png_job *j = png_get_io_ptr(png);
    if (n > j->size - j->pos) png_error(png, "file ends early (truncated)");
    memcpy(out, j->data + j->pos, n);
    j->pos += n;
}

static void png_error_cb(png_structp png, png_const_charp msg) {
    png_job *j = png_get_error_ptr(png);
    snprintf(j->msg, sizeof j->msg, "%s", msg);
    png_longjmp(png, 1); // back to setjmp(png_jmpbuf) without libpng printing anything
}

// Ancillary-chunk problems (bad CRC in tEXt, unknown chunks) are warnings libpng recovers from;
// PIL decodes such files too.
static void png_warning_cb(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static int decode_png(const uint8_t *data, size_t size, const char *what, g4_image *out) {
    png_job job = {.data = data, .size = size};
    png_job *j = &job;
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, j, png_error_cb, png_warning_cb);
    if (!png) return g4_fail(G4_EINTERNAL, "%s: libpng could not allocate a reader", what);
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return g4_fail(G4_EINTERNAL, "%s: libpng could not allocate a reader", what);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(j->rows);
        free(j->pixels);
        return g4_fail(G4_EUSER, "%s: truncated or corrupt PNG (libpng: %s)", what, j->msg);
    }
    png_set_read_fn(png, j, png_read_cb);
    // Our own pixel limit below replaces libpng's (1e6 x 1e6) so the error names it.
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, color, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &color, &interlace, NULL, NULL);
    int rc = check_size(what, "PNG", w, h);
    if (rc) {
        png_destroy_read_struct(&png, &info, NULL);
        return rc;
    }
    // PIL's convert("RGB"): palette -> its RGB entries (tRNS ignored: no png_set_tRNS_to_alpha),
    // low-depth gray scaled to 8 bits, alpha dropped, gray replicated, 16 bits -> high byte,
    // except 16-bit gray without alpha (PIL "I;16"), clipped to 255 below.
    const int gray16 = color == PNG_COLOR_TYPE_GRAY && depth == 16;
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16 && !gray16) png_set_strip_16(png); // truncates: the high byte
    // png_set_palette_to_rgb also turns a tRNS chunk into alpha; stripping alpha cancels that.
    if ((color & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS))
        png_set_strip_alpha(png);
    if ((color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) && !gray16)
        png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const size_t rowbytes = png_get_rowbytes(png, info);
    const int channels = png_get_channels(png, info);
    const size_t want = gray16 ? (size_t)w * 2 : (size_t)w * 3;
    if (rowbytes != want || channels != (gray16 ? 1 : 3)) {
        png_destroy_read_struct(&png, &info, NULL);
        return g4_fail(G4_EINTERNAL,
                       "%s: libpng gave %zu bytes x %d channels per row, expected %zu", what,
                       rowbytes, channels, want);
    }
    j->pixels = g4_malloc(rowbytes * h);
    j->rows = g4_malloc(sizeof(png_bytep) * h);
    for (png_uint_32 y = 0; y < h; y++) j->rows[y] = j->pixels + (size_t)y * rowbytes;
    png_read_image(png, j->rows);
    png_read_end(png, NULL); // checks the trailing chunks (a file cut after IDAT fails here)
    png_destroy_read_struct(&png, &info, NULL);
    free(j->rows);
    out->width = (int)w;
    out->height = (int)h;
    if (gray16) { // big-endian 16-bit samples; PIL's I;16 -> L conversion clips at 255
        out->rgb = g4_malloc((size_t)w * h * 3);
        for (size_t i = 0; i < (size_t)w * h; i++) {
            unsigned v = ((unsigned)j->pixels[2 * i] << 8) | j->pixels[2 * i + 1];
            uint8_t c = v > 255 ? 255 : (uint8_t)v;
            out->rgb[3 * i] = out->rgb[3 * i + 1] = out->rgb[3 * i + 2] = c;
        }
        free(j->pixels);
    } else {
        out->rgb = j->pixels;
    }
    return G4_OK;
}

// --- JPEG -----------------------------------------------------------------------------------
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX + 64];
    uint8_t *pixels;
} jpeg_job;

static void jpeg_error_exit_cb(j_common_ptr cinfo) {
    jpeg_job *j = (jpeg_job *)cinfo->err;
    char buf[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, buf);
    snprintf(j->msg, sizeof j->msg, "libjpeg: %s", buf);
    longjmp(j->jb, 1);
}

// Warnings are not printed. Running out of data is: libjpeg would pad the image with gray and
// go on, where PIL raises "image file is truncated".
static void jpeg_emit_cb(j_common_ptr cinfo, int level) {
    jpeg_job *j = (jpeg_job *)cinfo->err;
    if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
        snprintf(j->msg, sizeof j->msg, "file ends early (truncated)");
        longjmp(j->jb, 1);
    }
    if (level == -1) cinfo->err->num_warnings++;
}

static int decode_jpeg(const uint8_t *data, size_t size, const char *what, g4_image *out) {
    struct jpeg_decompress_struct cinfo;
    jpeg_job job;
    memset(&job, 0, sizeof job);
    jpeg_job *j = &job;
    cinfo.err = jpeg_std_error(&j->pub);
    j->pub.error_exit = jpeg_error_exit_cb;
    j->pub.emit_message = jpeg_emit_cb;
    if (setjmp(j->jb)) {
        jpeg_destroy_decompress(&cinfo);
        free(j->pixels);
        return g4_fail(G4_EUSER, "%s: truncated or corrupt JPEG (%s)", what, j->msg);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&cinfo);
        return g4_fail(G4_EUSER, "%s: CMYK JPEG is not supported (convert it to RGB first)", what);
    }
    int rc = check_size(what, "JPEG", cinfo.image_width, cinfo.image_height);
    if (rc) {
        jpeg_destroy_decompress(&cinfo);
        return rc;
    }
    // PIL asks libjpeg for RGB (gray JPEGs are replicated by libjpeg, as convert("RGB") does),
    // with the default islow IDCT and fancy upsampling.
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_components != 3) {
        jpeg_destroy_decompress(&cinfo);
        return g4_fail(G4_EINTERNAL, "%s: libjpeg gave %d components, expected RGB", what,
                       cinfo.output_components);
    }
    const size_t stride = (size_t)cinfo.output_width * 3;
    j->pixels = g4_malloc(stride * cinfo.output_height);
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = j->pixels + (size_t)cinfo.output_scanline * stride;
        if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) { // suspension cannot happen in memory
            snprintf(j->msg, sizeof j->msg, "no scanline decoded");
            longjmp(j->jb, 1);
        }
    }
    jpeg_finish_decompress(&cinfo);
    out->width = (int)cinfo.output_width;
    out->height = (int)cinfo.output_height;
    out->rgb = j->pixels;
    jpeg_destroy_decompress(&cinfo);
    return G4_OK;
}

// --- entry points ---------------------------------------------------------------------------
int g4_image_decode(const uint8_t *data, size_t size, const char *what, g4_image *out) {
    memset(out, 0, sizeof *out);
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (size >= 8 && !memcmp(data, png_sig, 8)) return decode_png(data, size, what, out);
    if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
        return decode_jpeg(data, size, what, out);
    if (size == 0) return g4_fail(G4_EUSER, "%s: empty file, expected a PNG or JPEG image", what);
    return g4_fail(G4_EUSER, "%s: not a PNG or JPEG image (unrecognised signature)", what);
}

int g4_image_load(const char *path, g4_image *out) {
    memset(out, 0, sizeof *out);
    g4_mapped_file m;
    int rc = g4_map_file_max(path, G4_MAX_IMAGE_BYTES, &m);
    if (rc) return rc;
    rc = g4_image_decode(m.data, (size_t)m.size, path, out);
    g4_unmap_file(&m);
    return rc;
}
