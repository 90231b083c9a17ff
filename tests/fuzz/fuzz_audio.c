// fuzz_audio.c: libFuzzer target for the audio front end (engine/audio_fe.h): the input is a
// sound file (WAV, FLAC, or anything else libsndfile recognises) that goes through
// g4_audio_features_load exactly as `g4cu asr` / `--audio F` use it: libsndfile decode of the
// head, mono mix, libsoxr resampling to 16 kHz, then the Gemma-4 log-mel and mask.
// g4_audio_load reads a path, so the bytes live in a memfd (no disk I/O) opened through
// /proc/self/fd. Seeds: tests/fixtures/frontends/media/*.wav *.flac (tests/fuzz/build.sh).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/audio_fe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// audio_feature_extraction.json of the Gemma-4 packages (Gemma4LogMel attrs).
static const g4_audio_fe_config fe = {
    .feature_size = 128,
    .sampling_rate = 16000,
    .frame_length_ms = 20.0,
    .hop_length_ms = 10.0,
    .min_frequency = 0.0,
    .max_frequency = 8000.0,
    .preemphasis = 0.0,
    .mel_floor = 1e-3,
    .fft_overdrive = 0,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("g4-fuzz-audio", 0);
        if (fd < 0) {
            perror("fuzz_audio: memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz_audio: writing the memfd");
        abort();
    }
    g4_audio_features f;
    if (g4_audio_features_load(&fe, path, &f) == G4_OK) {
        // The contract the tower relies on: the valid frames are a prefix, counts agree.
        int valid = 0;
        for (int t = 0; t < f.n_frames; t++) valid += f.mask[t];
        if (valid != f.n_valid || f.n_soft_tokens > f.n_frames || f.n_frames < 1) abort();
        for (int t = 0; t < f.n_valid; t++)
            if (!f.mask[t]) abort();
        g4_audio_features_free(&f);
    } else if (strchr(g4_error(), '\n') || !*g4_error()) {
        abort(); // every error is one non-empty line
    }
    return 0;
}
