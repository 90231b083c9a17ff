// asr_cues.h: subtitle cues for `g4cu asr --srt / --vtt` (tools/asr_long.c): one long-form
// segment's text split into short cues.
#ifndef G4_ASR_CUES_H
#define G4_ASR_CUES_H

// A subtitle cue: seconds [start, end) and one line of text.
typedef struct {
    double start, end;
    char *text;
} g4_asr_cue;

// The cues of one segment's text spanning [t0, t1) seconds, after whisper.cpp's short cues:
// split after each sentence (. ! ? ... or a line break), and where a sentence would run past
// max_s seconds, after its last pause (, ; : or a dash) before that, else after the last word
// that fits. Without word timestamps the span is shared out over the words in proportion to
// their characters, so a cue is at most max_s long unless one word's share is longer. The
// words are joined by single spaces (no blank line, no line break inside a cue); a text with
// no words gives no cue. *out is malloc'ed (g4_asr_cues_free); the count is returned.
int g4_asr_cues(const char *text, double t0, double t1, double max_s, g4_asr_cue **out);
void g4_asr_cues_free(g4_asr_cue *c, int n);

#endif
