// asr_long.c: `g4cu asr` on audio longer than the audio tower's window: g4cu_transcribe_long
// (consecutive windows with an overlap, each transcribed alone, stitched: include/g4cu.h) printed
// as text, --json segments, --srt or --vtt. Text and cues are printed window by window as each
// finishes (a stopped run keeps what it printed), with a progress line per window on stderr;
// --json is one document at the end.
#include "tools/asr_long.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/asr_cues.h"
#include "tools/cli.h"

// The longest cue (seconds): whisper.cpp-style short subtitles.
#define G4_ASR_CUE_MAX_S 7.0

// "HH:MM:SS<sep>mmm"
static void timestamp(char *buf, size_t n, double s, char sep) {
    long long ms = (long long)(s * 1000.0 + 0.5);
    snprintf(buf, n, "%02lld:%02lld:%02lld%c%03lld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60,
             sep, ms % 1000);
}

typedef struct {
    g4_asr_format format;
    int rate, n_cues;
    size_t n_samples;
} asr_out;

// Segment k of n is final: its text or its cues on stdout (flushed), a progress line on stderr.
static int on_segment(void *user, const g4cu_segment *sg, int k, int n) {
    asr_out *o = user;
    if (o->format == G4_ASR_TEXT) {
        fputs(sg->text, stdout);
    } else if (o->format == G4_ASR_SRT || o->format == G4_ASR_VTT) {
        const int vtt = o->format == G4_ASR_VTT;
        g4_asr_cue *c;
        const int nc = g4_asr_cues(sg->text, (double)sg->start / o->rate,
                                   (double)sg->end / o->rate, G4_ASR_CUE_MAX_S, &c);
        for (int i = 0; i < nc; i++) {
            char t0[32], t1[32];
            timestamp(t0, sizeof t0, c[i].start, vtt ? '.' : ',');
            timestamp(t1, sizeof t1, c[i].end, vtt ? '.' : ',');
            if (!vtt) printf("%d\n", ++o->n_cues);
            printf("%s --> %s\n%s\n\n", t0, t1, c[i].text);
        }
        g4_asr_cues_free(c, nc);
    }
    fflush(stdout);
    fprintf(stderr, "asr: window %d/%d done (%.1f of %.1f s)\n", k + 1, n,
            (double)sg->window_end / o->rate, (double)o->n_samples / o->rate);
    return 0;
}

int g4_asr_long(const g4_gen_cli *o, g4cu_state *s, const g4cu_request *rq, const char *path,
                const float *pcm, size_t n_samples, int rate_hz, g4_asr_format format) {
    g4cu_transcribe_long_params lp;
    g4cu_transcribe_long_params_default(&lp);
    lp.opts = rq;
    lp.name = path;
    asr_out ao = {format, rate_hz, 0, n_samples};
    if (format == G4_ASR_VTT) printf("WEBVTT\n\n");
    lp.on_segment = on_segment;
    lp.user = &ao;
    g4cu_transcript t;
    int rc = g4cu_transcribe_long(s, pcm, n_samples, &lp, &t);
    const int rate = t.sample_rate, n = t.n_segments;
    const g4cu_segment *seg = t.segments;
    if (!rc && format == G4_ASR_TEXT) {
        printf("\n");
    } else if (!rc && format == G4_ASR_JSON) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "input", path);
        cJSON_AddStringToObject(j, "text", t.text);
        cJSON_AddNumberToObject(j, "seconds", (double)t.n_samples / rate);
        cJSON_AddNumberToObject(j, "window_s", (double)t.window / rate);
        cJSON_AddNumberToObject(j, "overlap_s", (double)t.overlap / rate);
        cJSON_AddStringToObject(j, "backend", o->backend);
        cJSON *segs = cJSON_AddArrayToObject(j, "segments");
        for (int k = 0; k < n; k++) {
            cJSON *sj = cJSON_CreateObject();
            cJSON_AddNumberToObject(sj, "start", (double)seg[k].start / rate);
            cJSON_AddNumberToObject(sj, "end", (double)seg[k].end / rate);
            cJSON_AddNumberToObject(sj, "window_start", (double)seg[k].window_start / rate);
            cJSON_AddNumberToObject(sj, "window_end", (double)seg[k].window_end / rate);
            cJSON_AddStringToObject(sj, "text", seg[k].text);
            cJSON *toks = cJSON_AddArrayToObject(sj, "tokens");
            for (int i = 0; i < seg[k].n_tokens; i++)
                cJSON_AddItemToArray(toks, cJSON_CreateNumber(seg[k].tokens[i]));
            cJSON_AddNumberToObject(sj, "window_tokens", seg[k].window_tokens);
            cJSON_AddNumberToObject(sj, "dropped_tokens", seg[k].dropped_tokens);
            cJSON_AddNumberToObject(sj, "prefill_ms", seg[k].prefill_ms);
            cJSON_AddNumberToObject(sj, "decode_ms", seg[k].decode_ms);
            cJSON_AddItemToArray(segs, sj);
        }
        char *js = cJSON_PrintUnformatted(j);
        printf("%s\n", js);
        free(js);
        cJSON_Delete(j);
    }
    g4cu_transcript_free(&t);
    return rc;
}
