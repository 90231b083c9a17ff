// audio_decode.c: a sound file -> mono float32 at the model's rate (libsndfile + libsoxr), the
// way librosa.load(path, sr=16000) gives it to the HF processor. See audio_fe.h for the recipe.
#include <math.h>
#include <sndfile.h>
#include <soxr.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "engine/audio_fe.h"

void g4_audio_free(g4_audio *a) {
    free(a->samples);
    memset(a, 0, sizeof *a);
}

// libsndfile's messages end in a period or newline; keep the error on one line.
static const char *sndfile_msg(SNDFILE *sf, char *buf, size_t n) {
    snprintf(buf, n, "%s", sf_strerror(sf));
    size_t len = strlen(buf);
    for (size_t i = 0; i < len; i++)
        if (buf[i] == '\n' || buf[i] == '\r') buf[i] = ' ';
    while (len && (buf[len - 1] == ' ' || buf[len - 1] == '.')) buf[--len] = 0;
    return buf;
}

int g4_audio_resample(const float *in, int64_t n, int in_rate, int out_rate, float **out,
                      int64_t *n_out) {
    *out = NULL;
    *n_out = 0;
    if (in_rate < G4_AUDIO_MIN_RATE || in_rate > G4_AUDIO_MAX_RATE || out_rate < G4_AUDIO_MIN_RATE ||
        out_rate > G4_AUDIO_MAX_RATE)
        return g4_fail(G4_EUSER, "resample %d Hz -> %d Hz: expected rates from %d to %d Hz",
                       in_rate, out_rate, G4_AUDIO_MIN_RATE, G4_AUDIO_MAX_RATE);
    if (n < 0 || n > G4_AUDIO_MAX_HELD)
        return g4_fail(G4_EUSER, "resample: %lld samples: expected 0 to %lld", (long long)n,
                       (long long)G4_AUDIO_MAX_HELD);
    // librosa.resample(fix=True): the result has exactly ceil(n * target / orig) samples.
    const double ratio = (double)out_rate / (double)in_rate;
    const int64_t n_fixed = (int64_t)ceil((double)n * ratio);
    if (n == 0) return G4_OK;
    if (n_fixed > G4_AUDIO_MAX_HELD)
        return g4_fail(G4_EUSER,
                       "resample %d Hz -> %d Hz: %lld samples would become %lld, over the "
                       "%lld-sample limit (%.1f h at %d Hz): split the audio",
                       in_rate, out_rate, (long long)n, (long long)n_fixed,
                       (long long)G4_AUDIO_MAX_HELD, (double)G4_AUDIO_MAX_HELD / out_rate / 3600,
                       out_rate);

    soxr_error_t err = NULL;
    const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    const soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0); // librosa "soxr_hq"
    soxr_t s = soxr_create(in_rate, out_rate, 1, &err, &io, &q, NULL);
    if (!s || err)
        return g4_fail(G4_EINTERNAL, "resample %d Hz -> %d Hz: soxr_create failed (%s)", in_rate,
                       out_rate, err ? err : "no resampler");
    // The buffer python-soxr gives libsoxr (n * out / in + 1 samples) and its input chunking
    // (48000 output samples' worth per call), so the resampler sees the same calls.
    const size_t olen = (size_t)((double)n * out_rate / in_rate) + 1;
    size_t chunk = (size_t)(48000.0 * in_rate / out_rate);
    if (chunk == 0) chunk = 1;
    // One zeroed buffer of max(olen, n_fixed): fix_length's zero padding is already there.
    float *y = g4_calloc(olen > (size_t)n_fixed ? olen : (size_t)n_fixed, sizeof(float));
    size_t pos = 0, odone = 0;
    for (size_t i = 0; i < (size_t)n && !err; i += chunk) {
        size_t len = (size_t)n - i < chunk ? (size_t)n - i : chunk;
        err = soxr_process(s, in + i, len, NULL, y + pos, olen - pos, &odone);
        pos += odone;
    }
    if (!err) { // end of input: flush the filter's tail
        err = soxr_process(s, NULL, 0, NULL, y + pos, olen - pos, &odone);
        pos += odone;
    }
    soxr_delete(s);
    if (err) {
        free(y);
        return g4_fail(G4_EINTERNAL, "resample %d Hz -> %d Hz: soxr_process failed (%s)", in_rate,
                       out_rate, err);
    }
    // fix_length: trim (the tail past n_fixed is ignored), or pad with the buffer's zeros.
    *out = y;
    *n_out = n_fixed;
    return G4_OK;
}

int g4_audio_load(const char *path, int target_rate, int64_t max_samples, g4_audio *out) {
    memset(out, 0, sizeof *out);
    if (target_rate <= 0)
        return g4_fail(G4_EUSER, "%s: target sample rate %d must be positive", path, target_rate);
    // Opened here (a regular file, bounded) and handed to libsndfile, which would otherwise
    // open a FIFO or a device by name and block or read forever.
    int fd;
    uint64_t fsize;
    int rc = g4_open_input(path, G4_MAX_AUDIO_BYTES, &fd, &fsize);
    if (rc) return rc;
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *sf = sf_open_fd(fd, SFM_READ, &info, 1); // closes fd
    char msg[256];
    if (!sf)
        return g4_fail(G4_EUSER, "%s: not a sound file libsndfile can read (%s)", path,
                       sndfile_msg(NULL, msg, sizeof msg));
    float *inter = NULL, *mono = NULL;
    if (info.channels <= 0 || info.samplerate <= 0) {
        rc = g4_fail(G4_EUSER,
                     "%s: %d channels at %d Hz, expected at least one channel and a "
                     "positive rate",
                     path, info.channels, info.samplerate);
        goto done;
    }
    if (info.samplerate < G4_AUDIO_MIN_RATE || info.samplerate > G4_AUDIO_MAX_RATE) {
        rc = g4_fail(G4_EUSER, "%s: a sample rate of %d Hz: expected %d to %d Hz (a broken header?)",
                     path, info.samplerate, G4_AUDIO_MIN_RATE, G4_AUDIO_MAX_RATE);
        goto done;
    }
    if (info.frames <= 0) {
        rc = g4_fail(G4_EUSER, "%s: contains no audio samples", path);
        goto done;
    }
    // The head to decode: max_samples at the target rate and one second more of input, which
    // covers the resampler's look-ahead (its output k depends on input up to a few ms past k).
    sf_count_t want = info.frames;
    if (max_samples > 0) {
        double need = ceil(((double)max_samples + target_rate) * info.samplerate / target_rate);
        if (need < (double)want) want = (sf_count_t)need;
    }
    uint64_t total; // samples over all channels: at most 2^30 (4 GiB of float32) at once
    if (!g4_mul_u64((uint64_t)want, (uint64_t)info.channels, &total) ||
        total > ((uint64_t)1 << 30)) {
        rc = g4_fail(G4_EUSER, "%s: %lld frames x %d channels is too large to decode", path,
                     (long long)want, info.channels);
        goto done;
    }
    // libsndfile's float read normalises integer PCM by 2^(bits-1) (8-bit unsigned: (u-128)/128)
    // and passes float files through: what python-soundfile (librosa's reader) returns.
    inter = g4_malloc(sizeof(float) * (size_t)total);
    sf_count_t got = sf_readf_float(sf, inter, want);
    if (got < want && sf_error(sf) != SF_ERR_NO_ERROR) {
        rc = g4_fail(G4_EUSER, "%s: decoding failed after %lld of %lld frames (%s)", path,
                     (long long)got, (long long)want, sndfile_msg(sf, msg, sizeof msg));
        goto done;
    }
    if (got <= 0) { // a header that promises frames the file does not hold
        rc = g4_fail(G4_EUSER, "%s: truncated, no audio frames could be decoded", path);
        goto done;
    }
    // A float file can hold NaN or Inf, which the log-mel would turn into NaN features and the
    // tower into NaN soft tokens: a broken recording, said so here.
    for (size_t i = 0; i < (size_t)got * (size_t)info.channels; i++)
        if (!isfinite(inter[i])) {
            rc = g4_fail(G4_EUSER,
                         "%s: sample %zu (frame %zu, channel %zu) is %s: expected finite audio "
                         "samples",
                         path, i, i / (size_t)info.channels, i % (size_t)info.channels,
                         isnan(inter[i]) ? "NaN" : "infinite");
            goto done;
        }
    // Fewer frames than the header said but no decoder error: python-soundfile returns what it
    // read, and so do we.
    // Mono as librosa.to_mono: np.mean over channels in float32, i.e. the channels summed in
    // order in float32, then divided by the count.
    mono = g4_malloc(sizeof(float) * (size_t)got);
    const int ch = info.channels;
    for (sf_count_t i = 0; i < got; i++) {
        float acc = inter[(size_t)i * ch];
        for (int c = 1; c < ch; c++) acc += inter[(size_t)i * ch + c];
        mono[i] = ch > 1 ? acc / (float)ch : acc;
    }
    free(inter);
    inter = NULL;
    out->src_rate = info.samplerate;
    out->src_channels = ch;
    out->src_frames = got < want ? got : info.frames;
    out->sample_rate = target_rate;
    if (info.samplerate == target_rate) { // librosa.resample returns the input unchanged
        out->samples = mono;
        out->n_samples = got;
        mono = NULL;
    } else {
        rc = g4_audio_resample(mono, got, info.samplerate, target_rate, &out->samples,
                               &out->n_samples);
        if (rc) g4_error_prefix("%s", path);
    }
done:
    free(inter);
    free(mono);
    sf_close(sf);
    if (rc) g4_audio_free(out);
    return rc;
}
