// asr_long.c: `g4cu asr` on audio longer than the audio tower's window: consecutive windows
// with an overlap, each transcribed alone, stitched as engine/asr_window.h describes; text,
// --json segments, --srt or --vtt.
#include "tools/asr_long.h"

#include <cjson/cJSON.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/asr_window.h"
#include "tools/cli.h"

// One window's samples as a float WAV (read back exactly: same rate, no resampling).
static int write_wav(const char *path, const float *x, int64_t n, int rate) {
    SF_INFO info = {.samplerate = rate, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_FLOAT};
    SNDFILE *sf = sf_open(path, SFM_WRITE, &info);
    if (!sf) return g4_fail(G4_EINTERNAL, "%s: cannot write: %s", path, sf_strerror(NULL));
    const sf_count_t w = sf_writef_float(sf, x, n);
    sf_close(sf);
    return w == n ? G4_OK : g4_fail(G4_EINTERNAL, "%s: short write", path);
}

// "HH:MM:SS<sep>mmm"
static void timestamp(char *buf, size_t n, double s, char sep) {
    long long ms = (long long)(s * 1000.0 + 0.5);
    snprintf(buf, n, "%02lld:%02lld:%02lld%c%03lld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60,
             sep, ms % 1000);
}

typedef struct {
    g4_ids kept;  // the window's tokens after the stitch (no EOS)
    int n_tokens; // the window's own tokens (no EOS)
    int dropped;  // of them, the ones the previous window had already
    char *text;   // kept, decoded (special tokens skipped)
    double prefill_ms, decode_ms;
} segment;

int g4_asr_long(g4_gen_cli *o, g4_pipeline *pl, const char *path, const char *prompt,
                const g4_audio *a, g4_asr_format format) {
    const int rate = a->sample_rate;
    const int64_t window = G4_AUDIO_MAX_SAMPLES, overlap = window / 6;
    g4_asr_window *w;
    const int n = g4_asr_windows(a->n_samples, window, overlap, &w);
    segment *seg = g4_calloc((size_t)n, sizeof *seg);
    char dir[] = "/tmp/g4cu-asr-XXXXXX";
    int rc = mkdtemp(dir) ? G4_OK : g4_fail(G4_EINTERNAL, "cannot make a temporary directory");
    g4_ids prev = {0};
    for (int k = 0; k < n && !rc; k++) {
        char *wav = g4_sprintf("%s/window-%d.wav", dir, k);
        rc = write_wav(wav, a->samples + w[k].start, w[k].end - w[k].start, rate);
        const char *audio[1] = {wav};
        g4_prompt pr = {.system = o->system,
                        .system_as_parts = 1,
                        .audio = audio,
                        .n_audio = 1,
                        .text = prompt};
        g4_gen_params p;
        g4_gen_cli_params(o, &p);
        p.on_text = NULL; // the segments are printed once stitched
        g4_gen_result r = {0};
        if (!rc && !(rc = g4_pipeline_generate(pl, &pr, &p, &r))) {
            int nt = (int)r.tokens.n;
            if (r.stop == G4_STOP_EOS && nt) nt--; // the EOS that ended the window
            seg[k].n_tokens = nt;
            seg[k].dropped = k ? g4_asr_overlap(prev.v, (int)prev.n, r.tokens.v, nt) : 0;
            for (int i = seg[k].dropped; i < nt; i++) g4_ids_push(&seg[k].kept, r.tokens.v[i]);
            size_t len;
            rc = g4_tokenizer_decode(pl->tok, seg[k].kept.v, seg[k].kept.n, 1, &seg[k].text, &len);
            seg[k].prefill_ms = r.prefill_ms, seg[k].decode_ms = r.decode_ms;
            prev.n = 0;
            for (int i = 0; i < nt; i++) g4_ids_push(&prev, r.tokens.v[i]);
        }
        g4_gen_result_free(&r);
        unlink(wav);
        free(wav);
    }
    rmdir(dir);
    g4_ids_free(&prev);
    if (rc) g4_error_prefix("%s", path);
    // The whole text: the kept tokens of every window, decoded together.
    g4_ids all = {0};
    for (int k = 0; k < n && !rc; k++)
        for (size_t i = 0; i < seg[k].kept.n; i++) g4_ids_push(&all, seg[k].kept.v[i]);
    char *text = NULL;
    size_t len = 0;
    if (!rc) rc = g4_tokenizer_decode(pl->tok, all.v, all.n, 1, &text, &len);
    if (!rc && format == G4_ASR_TEXT) {
        printf("%s\n", text);
    } else if (!rc && format == G4_ASR_JSON) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "input", path);
        cJSON_AddStringToObject(j, "text", text);
        cJSON_AddNumberToObject(j, "seconds", (double)a->n_samples / rate);
        cJSON_AddNumberToObject(j, "window_s", (double)window / rate);
        cJSON_AddNumberToObject(j, "overlap_s", (double)overlap / rate);
        cJSON_AddStringToObject(j, "backend", o->backend);
        cJSON *segs = cJSON_AddArrayToObject(j, "segments");
        for (int k = 0; k < n; k++) {
            cJSON *s = cJSON_CreateObject();
            cJSON_AddNumberToObject(s, "start", (double)w[k].seg_start / rate);
            cJSON_AddNumberToObject(s, "end", (double)w[k].seg_end / rate);
            cJSON_AddNumberToObject(s, "window_start", (double)w[k].start / rate);
            cJSON_AddNumberToObject(s, "window_end", (double)w[k].end / rate);
            cJSON_AddStringToObject(s, "text", seg[k].text);
            cJSON *t = cJSON_AddArrayToObject(s, "tokens");
            for (size_t i = 0; i < seg[k].kept.n; i++)
                cJSON_AddItemToArray(t, cJSON_CreateNumber(seg[k].kept.v[i]));
            cJSON_AddNumberToObject(s, "window_tokens", seg[k].n_tokens);
            cJSON_AddNumberToObject(s, "dropped_tokens", seg[k].dropped);
            cJSON_AddNumberToObject(s, "prefill_ms", seg[k].prefill_ms);
            cJSON_AddNumberToObject(s, "decode_ms", seg[k].decode_ms);
            cJSON_AddItemToArray(segs, s);
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
            timestamp(t0, sizeof t0, (double)w[k].seg_start / rate, vtt ? '.' : ',');
            timestamp(t1, sizeof t1, (double)w[k].seg_end / rate, vtt ? '.' : ',');
            if (!vtt) printf("%d\n", k + 1);
            printf("%s --> %s\n%s\n\n", t0, t1, seg[k].text);
        }
    }
    free(text);
    g4_ids_free(&all);
    for (int k = 0; k < n; k++) g4_ids_free(&seg[k].kept), free(seg[k].text);
    free(seg);
    free(w);
    return rc;
}
