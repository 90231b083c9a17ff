// asr_long.h: long-form `g4cu asr` (tools/asr_long.c): g4cu_transcribe_long's windows and
// stitching (include/g4cu.h), printed.
#ifndef G4_ASR_LONG_H
#define G4_ASR_LONG_H

#include "tools/gen_cli.h"

typedef enum { G4_ASR_TEXT, G4_ASR_JSON, G4_ASR_SRT, G4_ASR_VTT } g4_asr_format;

// Transcribes pcm[0..n) (path's samples at the model's audio rate, rate_hz) window by window on
// s with the options rq (its text is the prompt) and prints it: the text, each window's segment
// as it finishes; --json at the end {input, text, seconds, window_s, overlap_s, backend,
// segments: [{start, end, window_start, window_end (seconds), text, tokens (kept),
// window_tokens, dropped_tokens, prefill_ms, decode_ms}]}; SubRip or WebVTT cues of at most
// ~7 s (tools/asr_cues.h), each window's as it finishes. A line per window on stderr. Returns an
// API code (errors name path).
int g4_asr_long(const g4_gen_cli *o, g4cu_state *s, const g4cu_request *rq, const char *path,
                const float *pcm, size_t n, int rate_hz, g4_asr_format format);

#endif
