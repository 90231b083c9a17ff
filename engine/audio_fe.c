// audio_fe.c: the Gemma-4 log-mel feature extractor (HF Gemma4AudioFeatureExtractor), the
// frame mask and the audio soft-token count. See audio_fe.h for the recipe and the precision.
#include "engine/audio_fe.h"

#include <math.h>
#include <stdlib.h>

#include "base/base.h"

// HTK mel scale, as transformers.audio_utils.hertz_to_mel / mel_to_hertz (mel_scale="htk").
static double hz_to_mel_htk(double f) {
    return 2595.0 * log10(1.0 + (f / 700.0));
}
static double mel_to_hz_htk(double m) {
    return 700.0 * (pow(10.0, m / 2595.0) - 1.0);
}

// numpy.linspace(start, stop, num) with endpoint: start + i * step, the last value exactly stop.
static void linspace(double start, double stop, int num, double *out) {
    double step = (stop - start) / (num - 1);
    for (int i = 0; i < num; i++) out[i] = (double)i * step + start;
    out[num - 1] = stop;
}

// Python's round() for the frame and hop lengths: half to even (the default FE_TONEAREST mode).
static int round_half_even(double x) {
    return (int)nearbyint(x);
}

void g4_logmel_free(g4_logmel *lm) {
    free(lm->window);
    free(lm->mel_bank);
    g4_fft_plan_free(&lm->fft);
    memset(lm, 0, sizeof *lm);
}

int g4_logmel_init(const g4_audio_fe_config *c, g4_logmel *lm) {
    memset(lm, 0, sizeof *lm);
    if (c->sampling_rate <= 0 || c->feature_size <= 0 || c->feature_size > 4096 ||
        c->frame_length_ms <= 0 || c->hop_length_ms <= 0 || c->mel_floor <= 0 ||
        c->min_frequency < 0 || c->max_frequency <= c->min_frequency || c->preemphasis < 0 ||
        c->preemphasis >= 1)
        return g4_fail(G4_EUSER,
                       "audio feature config: rate %d, %d mel bins, frame %g ms, hop %g ms, "
                       "%g..%g Hz, preemphasis %g, mel_floor %g out of range",
                       c->sampling_rate, c->feature_size, c->frame_length_ms, c->hop_length_ms,
                       c->min_frequency, c->max_frequency, c->preemphasis, c->mel_floor);
    lm->sample_rate = c->sampling_rate;
    double fl = c->sampling_rate * c->frame_length_ms / 1000.0;
    double hl = c->sampling_rate * c->hop_length_ms / 1000.0;
    if (fl < 2 || fl > 65536 || hl < 1 || hl > 65536)
        return g4_fail(
            G4_EUSER, "audio feature config: frame %g / hop %g samples, expected 2..65536", fl, hl);
    lm->frame_length = round_half_even(fl);
    lm->hop_length = round_half_even(hl);
    int fft = 1;
    while (fft < lm->frame_length) fft *= 2; // 2 ** ceil(log2(frame_length))
    if (c->fft_overdrive) fft *= 2;
    lm->fft_length = fft;
    lm->n_bins = fft / 2 + 1;
    lm->n_mel = c->feature_size;
    lm->preemphasis = c->preemphasis;
    lm->mel_floor = c->mel_floor;
    int rc = g4_fft_plan_init(&lm->fft, fft);
    if (rc) return rc;

    // window_function(frame_length, "hann", periodic=True) = np.hanning(L + 1)[:-1], which numpy
    // evaluates as 0.5 + 0.5 cos(pi k / L) at k = -L, -L+2, ..., then HF casts it to float32.
    const int L = lm->frame_length;
    lm->window = g4_malloc(sizeof(float) * (size_t)L);
    const double pi = 3.14159265358979323846264338327950288;
    for (int i = 0; i < L; i++) {
        double k = (double)(-L + 2 * i);
        lm->window[i] = (float)(0.5 + 0.5 * cos(pi * k / (double)L));
    }

    // mel_filter_bank(n_bins, n_mel, fmin, fmax, rate, norm=None, mel_scale="htk"): n_mel + 2
    // points evenly spaced in mel, back to Hz; FFT bin frequencies linspace(0, rate // 2, n_bins);
    // triangle m at bin f: max(0, min((f - f_m) / (f_m+1 - f_m), (f_m+2 - f) / (f_m+2 - f_m+1))),
    // with the operations in HF's order (slope = f_m - f, down = -slope / diff).
    const int nb = lm->n_bins, nm = lm->n_mel;
    double *mel_pts = g4_malloc(sizeof(double) * (size_t)(nm + 2));
    double *filt = g4_malloc(sizeof(double) * (size_t)(nm + 2));
    double *fft_f = g4_malloc(sizeof(double) * (size_t)nb);
    linspace(hz_to_mel_htk(c->min_frequency), hz_to_mel_htk(c->max_frequency), nm + 2, mel_pts);
    for (int i = 0; i < nm + 2; i++) filt[i] = mel_to_hz_htk(mel_pts[i]);
    linspace(0.0, (double)(c->sampling_rate / 2), nb, fft_f);
    lm->mel_bank = g4_malloc(sizeof(double) * (size_t)nb * (size_t)nm);
    for (int b = 0; b < nb; b++) {
        for (int m = 0; m < nm; m++) {
            double down = -(filt[m] - fft_f[b]) / (filt[m + 1] - filt[m]);
            double up = (filt[m + 2] - fft_f[b]) / (filt[m + 2] - filt[m + 1]);
            double v = down < up ? down : up;
            lm->mel_bank[(size_t)b * nm + m] = v > 0.0 ? v : 0.0;
        }
    }
    free(mel_pts);
    free(filt);
    free(fft_f);
    return G4_OK;
}

void g4_audio_features_free(g4_audio_features *f) {
    free(f->features);
    free(f->mask);
    memset(f, 0, sizeof *f);
}

// Samples after truncation and the padding to a multiple of 128; frames of the semicausally
// padded signal; valid frames (those whose last window sample is real audio: frame i covers
// padded samples [i*hop, i*hop + L], and padded index i*hop + L is original sample
// i*hop + L - L/2); soft tokens = valid frames left after mask[::2] twice.
void g4_logmel_counts(const g4_logmel *lm, int64_t n, int *n_frames, int *n_valid,
                      int *n_soft_tokens) {
    if (n > G4_AUDIO_MAX_SAMPLES) n = G4_AUDIO_MAX_SAMPLES;
    const int64_t L = lm->frame_length, hop = lm->hop_length, left = L / 2;
    int64_t padded =
        (n + G4_AUDIO_PAD_MULTIPLE - 1) / G4_AUDIO_PAD_MULTIPLE * G4_AUDIO_PAD_MULTIPLE;
    int64_t span = padded + left - (L + 1); // unfold of L + 1 samples
    int64_t frames = span < 0 ? 0 : span / hop + 1;
    int64_t valid = 0, tokens = 0;
    for (int64_t i = 0; i < frames; i++) {
        int ok = i * hop + L - left < n;
        valid += ok;
        tokens += ok && i % 4 == 0; // mask[::2][::2] keeps frames 0, 4, 8, ...
    }
    *n_frames = (int)frames;
    *n_valid = (int)valid;
    *n_soft_tokens = (int)tokens;
}

int g4_logmel_compute(const g4_logmel *lm, const float *wave, int64_t n, const char *what,
                      g4_audio_features *out) {
    memset(out, 0, sizeof *out);
    if (n <= 0) return g4_fail(G4_EUSER, "%s: contains no audio samples", what);
    int truncated = n > G4_AUDIO_MAX_SAMPLES;
    if (truncated) n = G4_AUDIO_MAX_SAMPLES;
    int n_frames, n_valid, n_tokens;
    g4_logmel_counts(lm, n, &n_frames, &n_valid, &n_tokens);
    if (n_valid == 0)
        return g4_fail(G4_EUSER,
                       "%s: %lld samples at %d Hz is too short: at least %d samples make one "
                       "feature frame",
                       what, (long long)n, lm->sample_rate,
                       lm->frame_length - lm->frame_length / 2 + 1);

    const int L = lm->frame_length, hop = lm->hop_length, left = L / 2, nb = lm->n_bins,
              nm = lm->n_mel;
    out->n_frames = n_frames;
    out->n_mel = nm;
    out->n_valid = n_valid;
    out->n_soft_tokens = n_tokens;
    out->n_samples = n;
    out->truncated = truncated;
    out->features = g4_calloc((size_t)n_frames * (size_t)nm, sizeof(float));
    out->mask = g4_calloc((size_t)n_frames, 1);

    double *frame = g4_malloc(sizeof(double) * (size_t)L);
    double *re = g4_malloc(sizeof(double) * (size_t)nb),
           *im = g4_malloc(sizeof(double) * (size_t)nb);
    double *mag = g4_malloc(sizeof(double) * (size_t)nb);
    for (int t = 0; t < n_frames; t++) {
        // Sample j of the padded signal is wave[j - left] inside [0, n), zero outside (the left
        // semicausal pad and the right pad to a multiple of 128 are both zeros).
        const int64_t start = (int64_t)t * hop - left;
#define SAMPLE(j) ((j) >= 0 && (j) < n ? (double)wave[(j)] : 0.0)
        if (lm->preemphasis > 0) {
            // HTK flavour (preemphasis_htk_flavor, HF's default): y0 = x0 (1 - p),
            // yk = xk - p x(k-1) for k = 1 .. L-1, over the first L of the L + 1 samples.
            frame[0] = SAMPLE(start) * (1.0 - lm->preemphasis);
            for (int k = 1; k < L; k++)
                frame[k] = SAMPLE(start + k) - lm->preemphasis * SAMPLE(start + k - 1);
        } else {
            for (int k = 0; k < L; k++) frame[k] = SAMPLE(start + k);
        }
#undef SAMPLE
        // float32 sample x float32 window is exact in double.
        for (int k = 0; k < L; k++) frame[k] *= (double)lm->window[k];
        g4_rfft(&lm->fft, frame, L, re, im);
        for (int b = 0; b < nb; b++) mag[b] = hypot(re[b], im[b]);
        int valid = (int64_t)t * hop + L - left < n;
        out->mask[t] = (uint8_t)valid;
        if (!valid) continue; // HF multiplies invalid frames by the mask: zeros
        float *dst = out->features + (size_t)t * nm;
        for (int m = 0; m < nm; m++) {
            double acc = 0.0;
            for (int b = 0; b < nb; b++) acc += mag[b] * lm->mel_bank[(size_t)b * nm + m];
            dst[m] = (float)log(acc + lm->mel_floor);
        }
    }
    free(frame);
    free(re);
    free(im);
    free(mag);
    return G4_OK;
}

int g4_audio_features_load(const g4_audio_fe_config *c, const char *path, g4_audio_features *out) {
    memset(out, 0, sizeof *out);
    g4_logmel lm;
    int rc = g4_logmel_init(c, &lm);
    if (rc) return rc;
    g4_audio a;
    rc = g4_audio_load(path, lm.sample_rate, G4_AUDIO_MAX_SAMPLES + 1, &a);
    if (!rc) rc = g4_logmel_compute(&lm, a.samples, a.n_samples, path, out);
    if (!rc) out->src_seconds = (double)a.src_frames / a.src_rate;
    g4_audio_free(&a);
    g4_logmel_free(&lm);
    return rc;
}
