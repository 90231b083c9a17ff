// asr_window.h: long-form speech recognition's windows and stitching (`g4cu asr` on audio
// longer than the audio tower's window), after HF's chunked ASR pipeline
// (transformers AutomaticSpeechRecognitionPipeline with chunk_length_s and stride_length_s):
//   - windows of `window` samples (the tower's window: G4_AUDIO_MAX_SAMPLES, 30 s), each
//     overlapping the next by `overlap` samples (HF's default stride: a sixth of the window on
//     each side of a chunk boundary, so 5 s); window k starts at k * (window - overlap); the
//     last one ends at the end of the audio; audio no longer than a window is one window;
//   - each window is transcribed alone; consecutive windows' tokens are stitched by dropping
//     from the later one its longest prefix that is also a suffix of the earlier one (the
//     words both heard in the overlap: HF's _find_longest_common_sequence for chunks without
//     timestamps, in its exact-match form);
//   - segment k spans from the middle of its overlap with window k - 1 (0 for the first) to
//     the middle of its overlap with window k + 1 (the end of the audio for the last).
#ifndef G4_ASR_WINDOW_H
#define G4_ASR_WINDOW_H

#include <stdint.h>

typedef struct {
    int64_t start, end;         // samples of the window, [start, end)
    int64_t seg_start, seg_end; // the segment it gives, in samples
} g4_asr_window;

// The windows over n samples (n >= 1; window > overlap >= 0): a new array in *out, the count
// returned.
int g4_asr_windows(int64_t n, int64_t window, int64_t overlap, g4_asr_window **out);

// How many of next's first tokens repeat prev's last ones (the longest suffix of prev that is
// a prefix of next; 0 when none).
int g4_asr_overlap(const int32_t *prev, int n_prev, const int32_t *next, int n_next);

#endif
