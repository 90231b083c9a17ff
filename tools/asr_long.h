// asr_long.h: long-form `g4cu asr` (tools/asr_long.c): g4cu_transcribe_long's windows and
// stitching (include/g4cu.h), printed.
#ifndef G4_ASR_LONG_H
#define G4_ASR_LONG_H

#include "tools/gen_cli.h"

typedef enum { G4_ASR_TEXT, G4_ASR_JSON, G4_ASR_SRT, G4_ASR_VTT } g4_asr_format;

// Transcribes pcm[0..n) (path's samples at the model's audio rate) window by window on s with
// the options rq (its text is the prompt) and prints it: the stitched text; --json {input, text,
// seconds, window_s, overlap_s, backend, segments: [{start, end, window_start, window_end
// (seconds), text, tokens (kept), window_tokens, dropped_tokens, prefill_ms, decode_ms}]};
// SubRip or WebVTT cues, one a segment. Returns an API code (errors name path).
int g4_asr_long(const g4_gen_cli *o, g4cu_state *s, const g4cu_request *rq, const char *path,
                const float *pcm, size_t n, g4_asr_format format);

#endif
