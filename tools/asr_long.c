// asr_long.c: `g4cu asr` on audio longer than the audio tower's window: g4cu_transcribe_long
// (consecutive windows with an overlap, each transcribed alone, stitched: include/g4cu.h) printed
// as text, --json segments, --srt or --vtt.
#include "tools/asr_long.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/cli.h"

// "HH:MM:SS<sep>mmm"
static void timestamp(char *buf, size_t n, double s, char sep) {
    long long ms = (long long)(s * 1000.0 + 0.5);
    snprintf(buf, n, "%02lld:%02lld:%02lld%c%03lld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60,
             sep, ms % 1000);
}

int g4_asr_long(const g4_gen_cli *o, g4cu_state *s, const g4cu_request *rq, const char *path,
                const float *pcm, size_t n_samples, g4_asr_format format) {
    g4cu_transcribe_long_params lp;
    g4cu_transcribe_long_params_default(&lp);
    lp.opts = rq;
    lp.name = path;
    g4cu_transcript t;
    int rc = g4cu_transcribe_long(s, pcm, n_samples, &lp, &t);
    const int rate = t.sample_rate, n = t.n_segments;
    const g4cu_segment *seg = t.segments;
    if (!rc && format == G4_ASR_TEXT) {
        printf("%s\n", t.text);
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
    } else if (!rc) { // SubRip or WebVTT
        const int vtt = format == G4_ASR_VTT;
        if (vtt) printf("WEBVTT\n\n");
        for (int k = 0; k < n; k++) {
            char t0[32], t1[32];
            timestamp(t0, sizeof t0, (double)seg[k].start / rate, vtt ? '.' : ',');
            timestamp(t1, sizeof t1, (double)seg[k].end / rate, vtt ? '.' : ',');
            if (!vtt) printf("%d\n", k + 1);
            printf("%s --> %s\n%s\n\n", t0, t1, seg[k].text);
        }
    }
    g4cu_transcript_free(&t);
    return rc;
}
