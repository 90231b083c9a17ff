// audio_fe.h: the Gemma-4 audio front end: a sound file -> mono float32 at the model's rate ->
// log-mel features [T, 128] + frame mask [T] + the number of audio soft tokens.
//
// What the HF pipeline does, and what we reproduce (spec gemma4-architecture.md 5.1, 5.2, 9.11;
// transformers 5.17 feature_extraction_gemma4.py, processing_gemma4.py):
//   load:     the processor loads a path with librosa.load(path, sr=16000): libsndfile samples
//             as float32 (int PCM / 2^(bits-1), unsigned 8-bit as (u - 128) / 128), channels
//             averaged in float32 (librosa.to_mono = np.mean over channels), then, when the file's
//             rate differs, soxr.resample(quality "soxr_hq") and librosa's fix_length to
//             ceil(n * target / source) samples. The feature extractor itself never resamples,
//             so this libsoxr recipe (SOXR_HQ, float32 in/out, default flags) is the reference.
//   extract:  truncate to 480000 samples (the extractor's call default max_length, truncation on),
//             zero-pad to a multiple of 128 samples (mask 0 there), prepend frame_length/2 = 160
//             zeros (semicausal), unfold frames of frame_length + 1 = 321 samples every hop = 160
//             and keep the first 320 (preemphasis 0), multiply by a periodic Hann window (float32,
//             as HF casts it), |rfft(n = 512)|, times the HTK mel bank [257, 128] (no norm), then
//             ln(mel + mel_floor); frame i is valid iff padded-mask[i * hop + frame_length] is 1;
//             invalid frames are zeroed.
//   tokens:   the two stride-2 convs keep mask[::2] twice: tokens = valid frames at i % 4 == 0.
// Precision: HF runs frame * window and the FFT in float32 (numpy 2 keeps float32 through rfft)
// and the mel product and log in float64. We take the float32 samples and window as HF has
// them and do everything after in float64, i.e. HF's own algorithm on a float64 array (the
// fixture's "oracle"); the difference to HF's float32 output is its FFT rounding (see
// tests/fixtures/frontends/README.md for the measured size).
#ifndef G4_AUDIO_FE_H
#define G4_AUDIO_FE_H

#include <stdint.h>

#include "engine/fft.h"
#include "loader/model_config.h"

// Gemma4AudioFeatureExtractor.__call__ defaults (not in the package's JSON).
#define G4_AUDIO_MAX_SAMPLES  480000 // max_length, in samples (30 s at 16 kHz); longer is cut
#define G4_AUDIO_PAD_MULTIPLE 128    // pad_to_multiple_of, in samples

// Mono audio at one rate.
typedef struct {
    float *samples; // [n_samples]
    int64_t n_samples;
    int sample_rate;    // Hz (the target rate after g4_audio_load)
    int src_rate;       // the file's rate
    int src_channels;   // the file's channel count (averaged to mono)
    int64_t src_frames; // the file's length in frames (all of it, even when only a head is read)
} g4_audio;

// Decodes path with libsndfile (WAV, FLAC, and whatever else it reads), mixes to mono and
// resamples to target_rate as described above. max_samples > 0 decodes only the head of a long
// file: enough input for max_samples output samples plus one second (the resampler's filter
// reaches a few ms ahead, so those max_samples are the same as from the whole file, and any
// length of file costs bounded memory); 0 decodes everything. Errors name the file: not a
// sound file, no samples, a decoder or resampler failure.
int g4_audio_load(const char *path, int target_rate, int64_t max_samples, g4_audio *out);
void g4_audio_free(g4_audio *a);

// Sample rates accepted from a file or a caller's PCM: a header that claims 1 Hz would make
// 50,000 samples 14 hours of audio (800 M samples at 16 kHz), so rates outside this range are
// refused as broken rather than resampled.
#define G4_AUDIO_MIN_RATE 1000
#define G4_AUDIO_MAX_RATE 768000
// The most samples one decode or resample holds (float32: 4 GiB; 18.6 h at 16 kHz).
#define G4_AUDIO_MAX_HELD (1ll << 30)

// Mono float32 resampling with libsoxr SOXR_HQ (as soxr.resample(x, in, out, "soxr_hq")),
// followed by librosa's fix_length: the output has exactly ceil(n * out_rate / in_rate) samples
// (trimmed, or zero-padded at the end). *out is malloc'ed (NULL when *n_out is 0). Rates
// outside [G4_AUDIO_MIN_RATE, G4_AUDIO_MAX_RATE] and outputs over G4_AUDIO_MAX_HELD samples are
// user errors.
int g4_audio_resample(const float *in, int64_t n, int in_rate, int out_rate, float **out,
                      int64_t *n_out);

// The extractor's parameters derived from g4_audio_fe_config, and its fixed tables.
typedef struct {
    int sample_rate;  // 16000
    int frame_length; // round(rate * frame_length_ms / 1000) = 320 (Python round: half to even)
    int hop_length;   // 160
    int fft_length;   // next power of two >= frame_length (x2 with fft_overdrive) = 512
    int n_bins;       // fft_length / 2 + 1 = 257
    int n_mel;        // feature_size = 128
    double preemphasis;
    double mel_floor; // 1e-3
    float *window;    // [frame_length] periodic Hann, float32 as HF stores it
    double *mel_bank; // [n_bins, n_mel] HTK triangular filters, float64 as HF computes them
    g4_fft_plan fft;
} g4_logmel;

int g4_logmel_init(const g4_audio_fe_config *c, g4_logmel *lm);
void g4_logmel_free(g4_logmel *lm);

typedef struct {
    float *features;   // [n_frames, n_mel] log-mel, 0 on invalid frames
    uint8_t *mask;     // [n_frames] 1 = valid frame (the valid frames are a prefix)
    int n_frames;      // T
    int n_mel;         // 128
    int n_valid;       // sum(mask)
    int n_soft_tokens; // audio soft tokens after the two stride-2 convs (mask[::2][::2] sum)
    int64_t n_samples; // samples used (after truncation)
    int truncated;     // 1 when the input had more than G4_AUDIO_MAX_SAMPLES samples
    double src_seconds; // g4_audio_features_load: the file's whole length, in seconds
} g4_audio_features;

// Log-mel features of wave[0..n) at lm->sample_rate. n == 0, or audio too short for one valid
// frame (fewer than frame_length/2 + 1 = 161 samples), is a user error naming `what`.
int g4_logmel_compute(const g4_logmel *lm, const float *wave, int64_t n, const char *what,
                      g4_audio_features *out);
void g4_audio_features_free(g4_audio_features *f);

// Frames and soft tokens HF produces for n samples (no audio needed): the same arithmetic as
// g4_logmel_compute, exposed for prompt building and tests. Returns 0 frames when too short.
void g4_logmel_counts(const g4_logmel *lm, int64_t n, int *n_frames, int *n_valid,
                      int *n_soft_tokens);

// The whole front end: g4_audio_load at the config's rate (the first G4_AUDIO_MAX_SAMPLES + 1
// samples are all the extractor uses), then g4_logmel_compute.
int g4_audio_features_load(const g4_audio_fe_config *c, const char *path, g4_audio_features *out);

#endif
