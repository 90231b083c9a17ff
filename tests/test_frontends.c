// test_frontends.c: the image and audio front ends (engine/image_fe.h, engine/audio_fe.h)
// against HF's own processors, then the bad media that must give a one-line error and never
// crash. Every expected value comes from tests/fixtures/frontends, written by
// tools/python/make_frontend_fixture.py with transformers 5.17 / torch / PIL / soundfile /
// soxr (see the README there); nothing here is computed by the code under test.
#include <math.h>
#include <sndfile.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/audio_fe.h"
#include "engine/fft.h"
#include "engine/image_fe.h"
#include "fidelity/npy.h"
#include "loader/package.h"
#include "tests/test_util.h"

// Tolerances, by what each comparison can differ in (measured on the fixture: pixels, samples
// and log-mel vs the float64 oracle all 0; log-mel vs HF's float32 output 3.4e-4).
// pixel_values: the resampler repeats torch's integer arithmetic and the rescale is the same
// float32 product, so they are equal, not close.
#define TOL_PIXEL 0.0f
// Samples of a file already at 16 kHz: libsndfile's float conversion is the code
// python-soundfile runs.
#define TOL_WAVE_NATIVE 0.0f
// Resampled samples (|x| <= 1): the system libsoxr 0.1.3 vs the 0.1.3-14 python-soxr bundles;
// the same HQ filter, but a differently built float32 pipeline may round differently.
#define TOL_WAVE_RESAMPLED 1e-6f
// Log-mel vs HF's own code run on float64 samples (the oracle): both float64 up to the final
// float32 cast (|x| < 10, ulp <= 9.5e-7); libm (log, pow, cos) and the summation order of the
// mel product may differ: a few ulps.
#define TOL_LOGMEL_ORACLE 5e-6
// Log-mel vs HF's real output: numpy 2 runs frame * window and the rfft in float32, which moves
// low-energy bins (mel near the 1e-3 floor) by up to 3.4e-4 on these clips.
#define TOL_LOGMEL_HF 1e-3
// Resampled clips vs the oracle: sample differences within TOL_WAVE_RESAMPLED can move
// low-energy bins as much as the float32 FFT does.
#define TOL_LOGMEL_RESAMPLED 1e-3
// Mel filters in [0, 1], float64 on both sides (libm ulps).
#define TOL_MELBANK 1e-12

static char *fx; // tests/fixtures/frontends
static g4_package *pkg;
static g4_npz *npz_images, *npz_decode, *npz_resize, *npz_audio, *npz_melbank;

static char *fx_path(const char *rel) {
    return g4_sprintf("%s/%s", fx, rel);
}

static const g4_array *member(g4_npz *z, const char *name, int dtype) {
    const g4_array *a = NULL;
    int rc = g4_npz_get(z, name, &a);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (rc) return NULL;
    CHECK_MSG(a->dtype == dtype, "%s: dtype %d, expected %d", name, a->dtype, dtype);
    return a->dtype == dtype ? a : NULL;
}

// Undoes the fixture's delta coding of uint8 blocks [n, rows, cols, ch] in place: running sums
// along cols, then along rows, mod 256 (the inverse of make_frontend_fixture.py's delta2d).
static void undelta(uint8_t *a, size_t n, int rows, int cols, int ch) {
    for (size_t b = 0; b < n; b++) {
        uint8_t *blk = a + b * (size_t)rows * cols * ch;
        for (int r = 0; r < rows; r++)
            for (int c = 1; c < cols; c++)
                for (int k = 0; k < ch; k++)
                    blk[(r * cols + c) * ch + k] += blk[(r * cols + c - 1) * ch + k];
        for (int r = 1; r < rows; r++)
            for (int i = 0; i < cols * ch; i++)
                blk[r * cols * ch + i] += blk[(r - 1) * cols * ch + i];
    }
}

// A delta-coded uint8 [h, w, 3] member, decoded into a fresh buffer.
static uint8_t *rgb_member(g4_npz *z, const char *name, int *h, int *w) {
    const g4_array *a = member(z, name, G4_DT_UINT8);
    if (!a) return NULL;
    CHECK_MSG(a->ndim == 3 && a->shape[2] == 3, "%s: expected [h, w, 3]", name);
    if (a->ndim != 3 || a->shape[2] != 3) return NULL;
    *h = (int)a->shape[0];
    *w = (int)a->shape[1];
    uint8_t *p = g4_malloc(a->nbytes);
    memcpy(p, a->data, a->nbytes);
    undelta(p, 1, *h, *w, 3);
    return p;
}

static g4_image_proc_config image_cfg(int max_soft_tokens) {
    g4_image_proc_config c = pkg->image_proc;
    c.max_soft_tokens = max_soft_tokens;
    return c;
}

// --- FFT --------------------------------------------------------------------------------------
// Against the O(n^2) DFT in long double; radix-2 rounding grows like log2(n) eps |x|_1.
static void test_fft(void) {
    unsigned long long seed = 11;
    const int sizes[] = {2, 8, 64, 512, 1024};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s], len = n == 512 ? 320 : n; // the 512 case zero-pads 320 samples
        g4_fft_plan p;
        CHECK(g4_fft_plan_init(&p, n) == 0);
        double *x = g4_malloc(sizeof(double) * n), *re = g4_malloc(sizeof(double) * (n / 2 + 1)),
               *im = g4_malloc(sizeof(double) * (n / 2 + 1));
        double l1 = 0;
        for (int i = 0; i < len; i++) l1 += fabs(x[i] = g4t_rand_uniform(&seed, -1, 1));
        g4_rfft(&p, x, len, re, im);
        double worst = 0;
        for (int k = 0; k <= n / 2; k++) {
            long double sr = 0, si = 0;
            for (int j = 0; j < len; j++) {
                long double ang = -2.0L * 3.14159265358979323846264338327950288L * j * k / n;
                sr += x[j] * cosl(ang);
                si += x[j] * sinl(ang);
            }
            double e = fmax(fabs(re[k] - (double)sr), fabs(im[k] - (double)si));
            if (!(e <= worst)) worst = e; // NaN sticks
        }
        double tol = 4e-16 * (s + 3) * l1;
        CHECK_MSG(worst <= tol, "rfft n=%d: max err %.3g > %.3g", n, worst, tol);
        printf("fft n=%d len=%d: max |err| %.2g (tol %.2g)\n", n, len, worst, tol);
        free(x);
        free(re);
        free(im);
        g4_fft_plan_free(&p);
    }
    g4_fft_plan p;
    CHECK(g4_fft_plan_init(&p, 300) == G4_EUSER); // not a power of two
}

// --- window and mel bank -------------------------------------------------------------------
static void test_melbank(void) {
    g4_logmel lm;
    int rc = g4_logmel_init(&pkg->audio_fe, &lm);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (rc) return;
    CHECK_INT(lm.frame_length, 320);
    CHECK_INT(lm.hop_length, 160);
    CHECK_INT(lm.fft_length, 512);
    const g4_array *w = member(npz_melbank, "window", G4_DT_FLOAT);
    const g4_array *mb = member(npz_melbank, "mel_filters", G4_DT_DOUBLE);
    if (w && mb) {
        CHECK_INT(w->numel, lm.frame_length);
        int diff = 0;
        for (int i = 0; i < lm.frame_length && (uint64_t)i < w->numel; i++)
            diff += lm.window[i] != ((const float *)w->data)[i];
        CHECK_MSG(diff == 0, "%d of %d window values differ from HF's float32 window", diff,
                  lm.frame_length);
        CHECK(mb->ndim == 2 && mb->shape[0] == lm.n_bins && mb->shape[1] == lm.n_mel);
        double worst = 0;
        int support = 0;
        for (uint64_t i = 0; i < mb->numel && i < (uint64_t)lm.n_bins * lm.n_mel; i++) {
            double r = ((const double *)mb->data)[i], o = lm.mel_bank[i];
            double e = fabs(o - r);
            if (!(e <= worst)) worst = e;
            support += (o == 0) != (r == 0); // the triangles cover the same bins
        }
        CHECK_MSG(worst <= TOL_MELBANK, "mel bank max err %.3g", worst);
        CHECK_INT(support, 0);
        printf("mel bank [%d, %d]: max |err| %.2g (tol %.0g), window exact\n", lm.n_bins, lm.n_mel,
               worst, TOL_MELBANK);
    }
    g4_logmel_free(&lm);
}

// --- manifest-driven cases -------------------------------------------------------------------
static void test_target(const char *line) {
    int h, w, mst, th, tw, oh = -1, ow = -1;
    if (sscanf(line, "target %d %d %d %d %d", &h, &w, &mst, &th, &tw) != 5) {
        CHECK_MSG(0, "bad manifest line: %s", line);
        return;
    }
    g4_image_proc_config c = image_cfg(mst);
    int rc = g4_image_target_size(&c, h, w, &oh, &ow);
    CHECK_MSG(rc == 0 && oh == th && ow == tw,
              "target %dx%d (h x w) at %d tokens: ours %dx%d, HF %dx%d", h, w, mst, oh, ow, th, tw);
}

static void test_resize_case(const char *line) {
    char name[64], key[96];
    if (sscanf(line, "resize %63s", name) != 1) return;
    int h, w, oh, ow;
    snprintf(key, sizeof key, "%s.ind", name);
    uint8_t *in = rgb_member(npz_resize, key, &h, &w);
    snprintf(key, sizeof key, "%s.outd", name);
    uint8_t *ref = rgb_member(npz_resize, key, &oh, &ow);
    if (in && ref) {
        g4_image src = {.rgb = in, .width = w, .height = h}, dst;
        int rc = g4_image_resize(&src, oh, ow, &dst);
        CHECK_MSG(rc == 0, "%s", g4_error());
        if (!rc) {
            int bad = 0, worst = 0;
            for (size_t i = 0; i < (size_t)oh * ow * 3; i++) {
                int d = abs((int)dst.rgb[i] - (int)ref[i]);
                bad += d != 0;
                if (d > worst) worst = d;
            }
            CHECK_MSG(bad == 0, "resize %s %dx%d -> %dx%d: %d values differ from torch (max %d)",
                      name, w, h, ow, oh, bad, worst);
            printf("resize %s: %dx%d -> %dx%d (w x h): %d values differ from torch\n", name, w, h,
                   ow, oh, bad);
            g4_image_free(&dst);
        }
    }
    free(in);
    free(ref);
}

static void test_decode_case(const char *line) {
    char name[64], file[256], key[96];
    if (sscanf(line, "decode %63s %255s", name, file) != 2) return;
    char *path = fx_path(file);
    int h, w;
    snprintf(key, sizeof key, "%s.rgbd", name);
    uint8_t *ref = rgb_member(npz_decode, key, &h, &w);
    g4_image img;
    int rc = g4_image_load(path, &img);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (!rc && ref) {
        CHECK_MSG(img.width == w && img.height == h, "%s: %dx%d, PIL %dx%d", file, img.width,
                  img.height, w, h);
        int bad = 0;
        if (img.width == w && img.height == h)
            for (size_t i = 0; i < (size_t)w * h * 3; i++) bad += img.rgb[i] != ref[i];
        CHECK_MSG(bad == 0, "%s: %d of %d decoded values differ from PIL's convert(\"RGB\")", file,
                  bad, w * h * 3);
        printf("decode %s: %dx%d, %d values differ from PIL\n", file, w, h, bad);
    }
    if (!rc) g4_image_free(&img);
    free(ref);
    free(path);
}

static void test_image_case(const char *line) {
    char name[64], file[256];
    int mst, sw, sh, tw, th, gw, gh, nsoft, maxp, stride;
    long long checksum;
    if (sscanf(line, "image %63s %255s %d %d %d %d %d %d %d %d %d %d %lld", name, file, &mst, &sw,
               &sh, &tw, &th, &gw, &gh, &nsoft, &maxp, &stride, &checksum) != 13) {
        CHECK_MSG(0, "bad manifest line: %s", line);
        return;
    }
    char *path = fx_path(file);
    g4_image_proc_config c = image_cfg(mst);
    g4_image_features f;
    int rc = g4_image_features_load(&c, path, &f);
    CHECK_MSG(rc == 0, "%s", g4_error());
    free(path);
    if (rc) return;
    CHECK_MSG(f.src_width == sw && f.src_height == sh && f.width == tw && f.height == th &&
                  f.grid_w == gw && f.grid_h == gh && f.n_soft_tokens == nsoft &&
                  f.max_patches == maxp && f.n_patches == gw * gh && f.patch_dim == 768,
              "%s: ours %dx%d -> %dx%d grid %dx%d soft %d pad %d; HF %dx%d -> %dx%d grid %dx%d "
              "soft %d pad %d",
              name, f.src_width, f.src_height, f.width, f.height, f.grid_w, f.grid_h,
              f.n_soft_tokens, f.max_patches, sw, sh, tw, th, gw, gh, nsoft, maxp);
    char key[96];
    snprintf(key, sizeof key, "%s.pos", name);
    const g4_array *pos = member(npz_images, key, G4_DT_INT32);
    if (pos && pos->numel == 2 * (uint64_t)f.n_patches) {
        int bad = 0;
        for (int i = 0; i < 2 * f.n_patches; i++)
            bad += f.position_ids[i] != ((int32_t *)pos->data)[i];
        CHECK_MSG(bad == 0, "%s: %d position ids differ from HF", name, bad);
    } else {
        CHECK_MSG(0, "%s: HF has %llu position values, we have %d patches", name,
                  pos ? (unsigned long long)pos->numel : 0ull, f.n_patches);
    }
    // Every value must be k/255 exactly; the checksum then covers all patches.
    const float rescale = (float)(1.0 / 255.0);
    long long sum = 0;
    int off_grid = 0, nan = 0;
    for (size_t i = 0; i < (size_t)f.n_patches * f.patch_dim; i++) {
        float v = f.pixel_values[i];
        nan += isnan(v);
        long u = lrintf(v * 255.0f);
        off_grid += u < 0 || u > 255 || (float)u * rescale != v;
        sum += (long long)u * (long long)(i % 251 + 1);
    }
    CHECK_MSG(nan == 0 && off_grid == 0, "%s: %d NaN, %d values not uint8/255", name, nan,
              off_grid);
    CHECK_MSG(sum == checksum, "%s: pixel checksum %lld, HF %lld", name, sum, checksum);
    // The stored patches, value by value.
    snprintf(key, sizeof key, "%s.pixd", name);
    const g4_array *pd = member(npz_images, key, G4_DT_UINT8);
    float worst = 0;
    int compared = 0;
    if (pd && pd->ndim == 2 && pd->shape[1] == f.patch_dim) {
        uint8_t *u8 = g4_malloc(pd->nbytes);
        memcpy(u8, pd->data, pd->nbytes);
        undelta(u8, (size_t)pd->shape[0], 16, 16, 3);
        for (int r = 0; r < (int)pd->shape[0]; r++) {
            int patch = r * stride < f.n_patches - 1 ? r * stride : f.n_patches - 1;
            for (int j = 0; j < f.patch_dim; j++) {
                float ref = (float)u8[(size_t)r * f.patch_dim + j] * rescale;
                float e = fabsf(f.pixel_values[(size_t)patch * f.patch_dim + j] - ref);
                if (!(e <= worst)) worst = e;
            }
            compared++;
        }
        free(u8);
    }
    int expect = (f.n_patches - 1) / stride + 1 + ((f.n_patches - 1) % stride != 0);
    CHECK_MSG(compared == expect, "%s: compared %d patches, expected %d", name, compared, expect);
    CHECK_MSG(worst <= TOL_PIXEL, "%s: pixel_values max |err| %g > %g", name, worst, TOL_PIXEL);
    printf("image %-15s %5dx%-5d -> %4dx%-4d %3d soft tokens: %d patches compared, max |err| %g, "
           "checksum %s\n",
           name, sw, sh, tw, th, nsoft, compared, worst, sum == checksum ? "equal" : "DIFFERS");
    g4_image_features_free(&f);
}

static float max_err_f32(const float *a, const float *b, size_t n) {
    float worst = 0;
    for (size_t i = 0; i < n; i++) {
        float e = fabsf(a[i] - b[i]);
        if (!(e <= worst)) worst = e; // NaN sticks
    }
    return worst;
}

static void test_audio_case(const char *line) {
    char name[64], file[256];
    double pre;
    long long n16;
    int T, nvalid, ntok, resampled;
    if (sscanf(line, "audio %63s %255s %lf %lld %d %d %d %d", name, file, &pre, &n16, &T, &nvalid,
               &ntok, &resampled) != 8) {
        CHECK_MSG(0, "bad manifest line: %s", line);
        return;
    }
    char *path = fx_path(file);
    g4_audio_fe_config cfg = pkg->audio_fe;
    cfg.preemphasis = pre;
    g4_audio a;
    int rc = g4_audio_load(path, cfg.sampling_rate, 0, &a); // the whole file, as HF reads it
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (rc) {
        free(path);
        return;
    }
    CHECK_MSG(a.n_samples == n16, "%s: %lld samples at 16 kHz, HF %lld", name,
              (long long)a.n_samples, n16);
    char key[96];
    snprintf(key, sizeof key, "%s.wave_at", name);
    const g4_array *at = member(npz_audio, key, G4_DT_INT32);
    snprintf(key, sizeof key, "%s.wave", name);
    const g4_array *wv = member(npz_audio, key, G4_DT_FLOAT);
    float wave_err = -1;
    if (at && wv && at->numel == wv->numel) {
        wave_err = 0;
        for (uint64_t i = 0; i < at->numel; i++) {
            int32_t k = ((const int32_t *)at->data)[i];
            float ours = k < a.n_samples ? a.samples[k] : NAN;
            float e = fabsf(ours - ((const float *)wv->data)[i]);
            if (!(e <= wave_err)) wave_err = e;
        }
        float tol = resampled ? TOL_WAVE_RESAMPLED : TOL_WAVE_NATIVE;
        CHECK_MSG(wave_err <= tol, "%s: waveform max |err| %g > %g", name, wave_err, tol);
    }

    g4_logmel lm;
    rc = g4_logmel_init(&cfg, &lm);
    CHECK_MSG(rc == 0, "%s", g4_error());
    g4_audio_features f = {0};
    if (!rc) rc = g4_logmel_compute(&lm, a.samples, a.n_samples, path, &f);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (!rc) {
        CHECK_MSG(f.n_frames == T && f.n_valid == nvalid && f.n_soft_tokens == ntok &&
                      f.n_mel == 128,
                  "%s: ours T %d valid %d tokens %d, HF T %d valid %d tokens %d", name, f.n_frames,
                  f.n_valid, f.n_soft_tokens, T, nvalid, ntok);
        CHECK_INT(f.truncated, n16 > G4_AUDIO_MAX_SAMPLES);
        int cnt_f, cnt_v, cnt_t; // the sample-count arithmetic alone
        g4_logmel_counts(&lm, a.n_samples, &cnt_f, &cnt_v, &cnt_t);
        CHECK(cnt_f == T && cnt_v == nvalid && cnt_t == ntok);
        snprintf(key, sizeof key, "%s.mask", name);
        const g4_array *mk = member(npz_audio, key, G4_DT_UINT8);
        if (mk && mk->numel == (uint64_t)f.n_frames)
            CHECK_MSG(!memcmp(mk->data, f.mask, (size_t)f.n_frames), "%s: mask differs", name);
        else
            CHECK_MSG(0, "%s: HF mask has %llu frames", name,
                      mk ? (unsigned long long)mk->numel : 0ull);
        int zero_bad = 0;
        for (int t = 0; t < f.n_frames; t++)
            for (int m = 0; m < f.n_mel && !f.mask[t]; m++)
                zero_bad += f.features[(size_t)t * 128 + m] != 0;
        CHECK_MSG(zero_bad == 0, "%s: invalid frames not zeroed", name);
        snprintf(key, sizeof key, "%s.frames", name);
        const g4_array *fr = member(npz_audio, key, G4_DT_INT32);
        snprintf(key, sizeof key, "%s.hf", name);
        const g4_array *hf = member(npz_audio, key, G4_DT_FLOAT);
        snprintf(key, sizeof key, "%s.oracle", name);
        const g4_array *orc = member(npz_audio, key, G4_DT_FLOAT);
        if (fr && hf && orc && hf->numel == fr->numel * 128 && orc->numel == hf->numel) {
            float e_hf = 0, e_or = 0;
            float *ours = g4_malloc(sizeof(float) * hf->numel);
            for (uint64_t r = 0; r < fr->numel; r++) {
                int t = ((const int32_t *)fr->data)[r];
                for (int m = 0; m < 128; m++)
                    ours[r * 128 + m] = t < f.n_frames ? f.features[(size_t)t * 128 + m] : NAN;
            }
            e_hf = max_err_f32(ours, hf->data, hf->numel);
            e_or = max_err_f32(ours, orc->data, orc->numel);
            free(ours);
            double tol_or = resampled ? TOL_LOGMEL_RESAMPLED : TOL_LOGMEL_ORACLE;
            double tol_hf = resampled ? TOL_LOGMEL_RESAMPLED + TOL_LOGMEL_HF : TOL_LOGMEL_HF;
            CHECK_MSG(e_or <= tol_or, "%s: log-mel vs float64 HF max |err| %g > %g", name, e_or,
                      tol_or);
            CHECK_MSG(e_hf <= tol_hf, "%s: log-mel vs HF max |err| %g > %g", name, e_hf, tol_hf);
            printf(
                "audio %-15s %6lld samples (%d Hz, %d ch) T %4d valid %4d tokens %3d: wave |err| "
                "%.2g, log-mel |err| vs float64 HF %.2g (tol %.0g), vs HF %.2g (tol %.0g), %llu "
                "frames\n",
                name, (long long)a.n_samples, a.src_rate, a.src_channels, f.n_frames, f.n_valid,
                f.n_soft_tokens, wave_err, e_or, tol_or, e_hf, tol_hf,
                (unsigned long long)fr->numel);
        } else {
            CHECK_MSG(0, "%s: fixture arrays missing or mis-shaped", name);
        }
    }
    g4_audio_features_free(&f);
    g4_logmel_free(&lm);
    g4_audio_free(&a);
    free(path);
}

static void run_manifest(void) {
    char *path = fx_path("manifest.txt");
    FILE *m = fopen(path, "r");
    CHECK_MSG(m != NULL, "cannot open %s", path);
    free(path);
    if (!m) return;
    char line[1024];
    int n[5] = {0};
    while (fgets(line, sizeof line, m)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "target ", 7))
            test_target(line), n[0]++;
        else if (!strncmp(line, "resize ", 7))
            test_resize_case(line), n[1]++;
        else if (!strncmp(line, "decode ", 7))
            test_decode_case(line), n[2]++;
        else if (!strncmp(line, "image ", 6))
            test_image_case(line), n[3]++;
        else if (!strncmp(line, "audio ", 6))
            test_audio_case(line), n[4]++;
    }
    fclose(m);
    printf("manifest: %d target sizes, %d resizes, %d decodes, %d images, %d clips\n", n[0], n[1],
           n[2], n[3], n[4]);
    CHECK(n[0] >= 100 && n[1] >= 10 && n[2] >= 10 && n[3] >= 15 && n[4] >= 8);
}

// --- bad media ---------------------------------------------------------------------------------
static char *tmp;

static char *write_tmp(const char *name, const void *data, size_t n) {
    char *p = g4_sprintf("%s/%s", tmp, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        if (n) CHECK(fwrite(data, 1, n, f) == n);
        fclose(f);
    }
    return p;
}

static char *copy_prefix(const char *src_rel, const char *name, size_t keep) {
    char *src = fx_path(src_rel), *data = NULL;
    size_t n = 0;
    CHECK(g4_read_file(src, &data, &n) == 0);
    free(src);
    char *p = write_tmp(name, data, keep < n ? keep : n);
    free(data);
    return p;
}

// rc must be the user-error code and the message one line naming the file and containing want.
static void expect_error(int rc, const char *path, const char *want, const char *what) {
    const char *e = g4_error();
    CHECK_MSG(rc == G4_EUSER, "%s: rc %d (expected a user error)", what, rc);
    CHECK_MSG(strstr(e, path) != NULL, "%s: message does not name the file: %s", what, e);
    CHECK_MSG(strstr(e, want) != NULL, "%s: message lacks '%s': %s", what, want, e);
    CHECK_MSG(strchr(e, '\n') == NULL, "%s: message is not one line: %s", what, e);
    printf("  %-28s -> %s\n", what, e);
}

// The PNG chunk CRC (CRC-32 over the chunk type and data), for hand-made headers.
static uint32_t png_crc(const uint8_t *p, size_t n) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
    }
    return crc ^ 0xffffffffu;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

static void test_bad_images(void) {
    printf("bad images:\n");
    g4_image img;
    g4_image_features f;
    g4_image_proc_config c = image_cfg(280);
    char *p = copy_prefix("media/square_rgb.png", "cut.png", 2000);
    expect_error(g4_image_load(p, &img), p, "truncated", "truncated PNG (in IDAT)");
    free(p);
    p = copy_prefix("media/square_rgb.png", "cut_header.png", 20);
    expect_error(g4_image_load(p, &img), p, "PNG", "truncated PNG (in IHDR)");
    free(p);
    p = copy_prefix("media/photo.jpg", "cut.jpg", 1500);
    expect_error(g4_image_features_load(&c, p, &f), p, "truncated", "truncated JPEG");
    free(p);
    p = copy_prefix("media/photo.jpg", "cut_header.jpg", 100);
    expect_error(g4_image_load(p, &img), p, "JPEG", "truncated JPEG (in the header)");
    free(p);
    p = fx_path("manifest.txt");
    expect_error(g4_image_load(p, &img), p, "not a PNG or JPEG", "text file");
    free(p);
    p = write_tmp("empty.png", "", 0);
    expect_error(g4_image_load(p, &img), p, "empty", "empty file");
    free(p);
    p = g4_sprintf("%s/missing.png", tmp);
    expect_error(g4_image_load(p, &img), p, "cannot open", "missing file");
    free(p);
    p = fx_path("media/cmyk.jpg");
    expect_error(g4_image_load(p, &img), p, "CMYK", "CMYK JPEG");
    free(p);
    { // a corrupt IDAT (the CRC no longer matches)
        char *src = fx_path("media/square_rgb.png"), *data = NULL;
        size_t n = 0;
        CHECK(g4_read_file(src, &data, &n) == 0);
        for (size_t i = 200; i < 260 && i < n; i++) data[i] ^= 0x5a;
        p = write_tmp("corrupt.png", data, n);
        expect_error(g4_image_load(p, &img), p, "corrupt", "corrupt PNG data");
        free(p);
        free(data);
        free(src);
    }
    { // a header announcing 100000 x 100000 pixels (then an empty IDAT, so libpng stops
      // reading there): refused before any pixel memory is allocated
        uint8_t buf[8 + 25 + 12] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
        static const uint8_t ihdr[17] = {'I',  'H', 'D', 'R',  0,    1, 0x86,
                                         0xa0, 0,   1,   0x86, 0xa0, 8, 2};
        buf[11] = 13;
        memcpy(buf + 12, ihdr, sizeof ihdr);
        put_be32(buf + 29, png_crc(buf + 12, 17));
        memcpy(buf + 37, "IDAT", 4);
        put_be32(buf + 41, png_crc(buf + 37, 4));
        p = write_tmp("huge.png", buf, sizeof buf);
        expect_error(g4_image_load(p, &img), p, "pixel limit", "100000x100000 PNG header");
        free(p);
    }
    { // a budget HF refuses
        g4_image_proc_config bad = image_cfg(100);
        int th, tw;
        CHECK(g4_image_target_size(&bad, 10, 10, &th, &tw) == G4_EUSER);
        CHECK(strstr(g4_error(), "max_soft_tokens 100") != NULL);
    }
}

static void test_bad_audio(void) {
    printf("bad audio:\n");
    g4_audio a;
    g4_audio_features f;
    const g4_audio_fe_config *c = &pkg->audio_fe;
    char *p = fx_path("media/square_rgb.png");
    expect_error(g4_audio_load(p, 16000, 0, &a), p, "not a sound file", "PNG as audio");
    free(p);
    p = fx_path("manifest.txt");
    expect_error(g4_audio_features_load(c, p, &f), p, "not a sound file", "text file as audio");
    free(p);
    p = write_tmp("empty.wav", "", 0);
    expect_error(g4_audio_load(p, 16000, 0, &a), p, "not a sound file", "empty file");
    free(p);
    p = g4_sprintf("%s/missing.wav", tmp);
    expect_error(g4_audio_load(p, 16000, 0, &a), p, "cannot open: No such file", "missing file");
    free(p);
    p = g4_strdup(tmp);
    expect_error(g4_audio_load(p, 16000, 0, &a), p, "directory", "a directory");
    free(p);
    { // a valid 16-bit WAV header with a 0-byte data chunk
        uint8_t h[44];
        memcpy(h,
               "RIFF\x24\0\0\0WAVEfmt "
               "\x10\0\0\0\x01\0\x01\0\x80\x3e\0\0\0\x7d\0\0\x02\0\x10\0data\0\0\0\0",
               44);
        p = write_tmp("zero.wav", h, sizeof h);
        expect_error(g4_audio_features_load(c, p, &f), p, "no audio samples", "0-length WAV");
        free(p);
    }
    { // 50 samples: fewer than one feature frame
        uint8_t h[44 + 100] = {0};
        memcpy(h,
               "RIFF\x88\0\0\0WAVEfmt "
               "\x10\0\0\0\x01\0\x01\0\x80\x3e\0\0\0\x7d\0\0\x02\0\x10\0data\x64\0\0\0",
               44);
        p = write_tmp("short.wav", h, sizeof h);
        expect_error(g4_audio_features_load(c, p, &f), p, "too short", "50-sample WAV");
        free(p);
    }
    // A WAV cut mid-data: python-soundfile returns the frames that are there, and so do we.
    p = copy_prefix("media/silence_1s.wav", "cut.wav", 44 + 2 * 5000 + 1);
    int rc = g4_audio_load(p, 16000, 0, &a);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (!rc) {
        CHECK_INT(a.n_samples, 5000);
        printf("  %-28s -> %lld samples decoded\n", "WAV cut after 5000 samples",
               (long long)a.n_samples);
        g4_audio_free(&a);
    }
    free(p);
    CHECK(g4_audio_load("/dev/null", 0, 0, &a) == G4_EUSER); // bad target rate
}

// A long resampled file: decoding only the head (what g4_audio_features_load does) must give
// the same first 30 s as resampling the whole file, which is what HF does.
static void test_audio_head(void) {
    const int rate = 44100, secs = 40;
    SF_INFO info = {.samplerate = rate, .channels = 2, .format = SF_FORMAT_WAV | SF_FORMAT_PCM_16};
    char *p = g4_sprintf("%s/long_44k.wav", tmp);
    SNDFILE *sf = sf_open(p, SFM_WRITE, &info);
    CHECK_MSG(sf != NULL, "%s: %s", p, sf_strerror(NULL));
    if (!sf) {
        free(p);
        return;
    }
    unsigned long long seed = 7;
    float *buf = g4_malloc(sizeof(float) * 2 * rate);
    for (int s = 0; s < secs; s++) {
        for (int i = 0; i < rate; i++) {
            double t = (double)(s * rate + i) / rate;
            buf[2 * i] = (float)(0.3 * sin(2 * 3.14159265358979 * (200 + 50 * s) * t));
            buf[2 * i + 1] = g4t_rand_uniform(&seed, -0.2f, 0.2f);
        }
        CHECK(sf_writef_float(sf, buf, rate) == rate);
    }
    free(buf);
    sf_close(sf);
    g4_audio whole, head;
    int rc = g4_audio_load(p, 16000, 0, &whole);
    CHECK_MSG(rc == 0, "%s", g4_error());
    rc |= g4_audio_load(p, 16000, G4_AUDIO_MAX_SAMPLES + 1, &head);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (!rc) {
        CHECK_INT(whole.n_samples, (int64_t)secs * 16000);
        CHECK(head.n_samples > G4_AUDIO_MAX_SAMPLES && head.n_samples < whole.n_samples);
        CHECK_INT(head.src_frames, (int64_t)secs * rate);
        int64_t diff = 0;
        for (int64_t i = 0; i <= G4_AUDIO_MAX_SAMPLES && i < head.n_samples; i++)
            diff += head.samples[i] != whole.samples[i];
        CHECK_MSG(diff == 0, "head decode: %lld of the first 30 s of samples differ",
                  (long long)diff);
        printf("audio head: %lld of %lld samples decoded, first %d identical: %s\n",
               (long long)head.n_samples, (long long)whole.n_samples, G4_AUDIO_MAX_SAMPLES,
               diff ? "no" : "yes");
        g4_audio_free(&head);
        g4_audio_free(&whole);
    }
    free(p);
}

int main(void) {
    const char *fixtures = g4t_env("G4_FIXTURES");
    fx = g4_sprintf("%s/frontends", fixtures);
    int rc = g4_package_open(g4t_env("G4_TINY_PKG"), &pkg);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (rc) return g4t_finish("test_frontends");
    CHECK(pkg->has_image_proc && pkg->has_audio_fe);
    const char *names[] = {"images", "decode", "resize", "audio", "melbank"};
    g4_npz **zs[] = {&npz_images, &npz_decode, &npz_resize, &npz_audio, &npz_melbank};
    for (int i = 0; i < 5; i++) {
        char *p = g4_sprintf("%s/ref/%s.npz", fx, names[i]);
        rc = g4_npz_open(p, zs[i]);
        CHECK_MSG(rc == 0, "%s", g4_error());
        free(p);
        if (rc) return g4t_finish("test_frontends");
    }
    tmp = g4t_tmpdir();
    test_fft();
    test_melbank();
    run_manifest();
    test_bad_images();
    test_bad_audio();
    test_audio_head();
    g4t_rmtree(tmp);
    for (int i = 0; i < 5; i++) g4_npz_close(*zs[i]);
    g4_package_close(pkg);
    free(fx);
    return g4t_finish("test_frontends");
}
