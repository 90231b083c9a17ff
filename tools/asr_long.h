// asr_long.h: long-form `g4cu asr` (tools/asr_long.c; the windows and the stitching rule:
// engine/asr_window.h).
#ifndef G4_ASR_LONG_H
#define G4_ASR_LONG_H

#include "tools/gen_cli.h"

typedef enum { G4_ASR_TEXT, G4_ASR_JSON, G4_ASR_SRT, G4_ASR_VTT } g4_asr_format;

// Transcribes the audio a (path's samples at the front end's rate) window by window on pl and
// prints it: the stitched text; --json {input, text, seconds, window_s, overlap_s, backend,
// segments: [{start, end, window_start, window_end (seconds), text, tokens (kept),
// window_tokens, dropped_tokens, prefill_ms, decode_ms}]}; SubRip or WebVTT cues, one a
// segment. Returns a library code (errors name path).
int g4_asr_long(g4_gen_cli *o, g4_pipeline *pl, const char *path, const char *prompt,
                const g4_audio *a, g4_asr_format format);

#endif
