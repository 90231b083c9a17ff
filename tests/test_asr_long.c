// test_asr_long.c: long-form `g4cu asr` (engine/asr_window.h's rule, tools/asr_long.c):
//   1. the windows (count, bounds, overlap, segment boundaries in the middle of each overlap,
//      segments tiling the audio) at several lengths, and the stitch (the longest suffix of a
//      window's tokens that the next one starts with is dropped) on built token lists, where
//      duplicated text is known;
//   2. on a 63 s WAV made here from the fixture clips (31 s + 1 s + 31 s, 16 kHz): --json has
//      the three windows the rule gives, their segment times, and per window the tokens that
//      window gets when it is cut here (by this test's own loop, written as a float WAV) and
//      transcribed alone with `g4cu asr` (the weights are random: the words mean nothing, the
//      windowing and the stitching are what is checked), stitched as the rule says; --srt and
//      --vtt carry the same segments as cues.
// CPU only: runs in CI.
#include <cjson/cJSON.h>
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/asr_window.h"
#include "engine/audio_fe.h"
#include "tests/test_util.h"

static void test_windows(void) {
    const int64_t W = 480000, O = W / 6;
    const int64_t lengths[] = {1, 1000, W, W + 1, 63 * 16000, 1600000, 10 * 60 * 16000 + 7};
    for (size_t c = 0; c < sizeof lengths / sizeof lengths[0]; c++) {
        const int64_t n = lengths[c];
        g4_asr_window *w;
        int k = g4_asr_windows(n, W, O, &w);
        // the count: the fewest windows of step W - O that reach n
        int want = 1;
        while ((int64_t)(want - 1) * (W - O) + W < n) want++;
        CHECK_MSG(k == want, "n %lld: %d windows, expected %d", (long long)n, k, want);
        int ok =
            w[0].start == 0 && w[k - 1].end == n && w[0].seg_start == 0 && w[k - 1].seg_end == n;
        for (int i = 0; i < k; i++) {
            ok &= w[i].end - w[i].start <= W && w[i].end > w[i].start;
            ok &= w[i].seg_start >= w[i].start && w[i].seg_end <= w[i].end;
            if (i) {
                ok &= w[i].start == w[i - 1].start + (W - O); // consecutive, overlap O
                ok &= w[i - 1].end - w[i].start == O || i == k - 1;
                ok &= w[i].seg_start == w[i - 1].seg_end; // segments tile the audio
                ok &= w[i].seg_start == (w[i].start + w[i - 1].end) / 2;
            }
        }
        CHECK_MSG(ok, "n %lld: window bounds", (long long)n);
        free(w);
    }
    const struct {
        int32_t a[6], b[6];
        int na, nb, want;
    } cases[] = {
        {{1, 2, 3, 4}, {3, 4, 5}, 4, 3, 2},          // "3 4" heard twice
        {{1, 2}, {3}, 2, 1, 0},                      // nothing shared
        {{5, 5, 5}, {5, 5}, 3, 2, 2},                // the longest
        {{1, 2, 3}, {2, 9, 3}, 3, 3, 0},             // a match must be a suffix and a prefix
        {{7, 8}, {7, 8}, 2, 2, 2},                   // all of it
        {{0}, {1}, 0, 1, 0},                         // an empty window
        {{4, 1, 2, 1, 2}, {1, 2, 1, 2, 6}, 5, 5, 4}, // the longest of several (2 and 4)
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        CHECK_INT(g4_asr_overlap(cases[c].a, cases[c].na, cases[c].b, cases[c].nb), cases[c].want);
}

static const char *g4cu, *pkg, *tok;
static char *tmp;

static float *read_sound(const char *path, int64_t *n) {
    SF_INFO info = {0};
    SNDFILE *sf = sf_open(path, SFM_READ, &info);
    CHECK_MSG(sf && info.channels == 1 && info.samplerate == 16000, "%s: 16 kHz mono", path);
    if (!sf) exit(g4t_finish("test_asr_long"));
    float *x = g4_malloc(sizeof(float) * (size_t)info.frames);
    *n = sf_readf_float(sf, x, info.frames);
    sf_close(sf);
    return x;
}

static void write_wav(const char *path, const float *x, int64_t n) {
    SF_INFO info = {.samplerate = 16000, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_FLOAT};
    SNDFILE *sf = sf_open(path, SFM_WRITE, &info);
    CHECK(sf && sf_writef_float(sf, x, n) == n);
    if (sf) sf_close(sf);
}

// `g4cu asr` on one window alone: its tokens without the EOS that ended it.
static int window_tokens(const char *wav, int32_t *out, int cap) {
    char *res = g4_sprintf("%s/alone.json", tmp);
    int rc = g4t_sh("'%s' asr '%s' '%s' --tokenizer '%s' --max-new 3 --json >'%s' 2>/dev/null",
                    g4cu, pkg, wav, tok, res);
    CHECK_INT(rc, 0);
    char *s = g4t_slurp("%s", res);
    cJSON *j = cJSON_Parse(s);
    const cJSON *t = cJSON_GetObjectItem(j, "tokens");
    int n = 0;
    for (const cJSON *e = t ? t->child : NULL; e && n < cap; e = e->next) out[n++] = e->valueint;
    const cJSON *stop = cJSON_GetObjectItem(j, "stop_reason");
    if (n && cJSON_IsString(stop) && !strcmp(stop->valuestring, "eos")) n--;
    cJSON_Delete(j);
    free(s), free(res);
    return n;
}

static void test_cli(void) {
    char *media = g4_sprintf("%s/frontends/media", g4t_env("G4_FIXTURES"));
    char *path_a = g4_sprintf("%s/long_31s.flac", media);
    char *path_b = g4_sprintf("%s/tone_1s_f32.wav", media);
    int64_t n31, n1;
    float *a = read_sound(path_a, &n31);
    float *b = read_sound(path_b, &n1);
    free(path_a), free(path_b), free(media);
    const int64_t n = 2 * n31 + n1;
    float *x = g4_malloc(sizeof(float) * (size_t)n);
    memcpy(x, a, sizeof(float) * (size_t)n31);
    memcpy(x + n31, b, sizeof(float) * (size_t)n1);
    memcpy(x + n31 + n1, a, sizeof(float) * (size_t)n31);
    char *longwav = g4_sprintf("%s/long.wav", tmp);
    write_wav(longwav, x, n);

    // The windows by the rule, written out here; each transcribed alone.
    const int64_t W = G4_AUDIO_MAX_SAMPLES, O = W / 6;
    int64_t start[8], end[8];
    int k = 0;
    for (int64_t s = 0;; s += W - O) {
        start[k] = s;
        end[k] = s + W < n ? s + W : n;
        k++;
        if (s + W >= n) break;
    }
    CHECK_INT(k, 3);
    int32_t toks[8][64], kept[8][64];
    int nt[8], nk[8], drop[8];
    for (int i = 0; i < k; i++) {
        char *wav = g4_sprintf("%s/w%d.wav", tmp, i);
        write_wav(wav, x + start[i], end[i] - start[i]);
        nt[i] = window_tokens(wav, toks[i], 64);
        // the stitch, by this test's own loop: the longest suffix of the previous window's
        // tokens that this window starts with
        drop[i] = 0;
        for (int m = i ? (nt[i - 1] < nt[i] ? nt[i - 1] : nt[i]) : 0; m > 0 && !drop[i]; m--)
            if (!memcmp(toks[i - 1] + nt[i - 1] - m, toks[i], sizeof(int32_t) * (size_t)m))
                drop[i] = m;
        nk[i] = nt[i] - drop[i];
        memcpy(kept[i], toks[i] + drop[i], sizeof(int32_t) * (size_t)nk[i]);
        free(wav);
    }

    char *res = g4_sprintf("%s/long.json", tmp);
    int rc = g4t_sh("'%s' asr '%s' '%s' --tokenizer '%s' --max-new 3 --json >'%s' 2>'%s/err'", g4cu,
                    pkg, longwav, tok, res, tmp);
    CHECK_INT(rc, 0);
    char *s = g4t_slurp("%s", res);
    cJSON *j = cJSON_Parse(s);
    CHECK_MSG(j != NULL, "asr --json on the long file: %.200s", s);
    const cJSON *segs = cJSON_GetObjectItem(j, "segments");
    CHECK_INT(cJSON_GetArraySize(segs), k);
    CHECK(fabs(cJSON_GetObjectItem(j, "seconds")->valuedouble - (double)n / 16000) < 1e-9);
    CHECK(cJSON_GetObjectItem(j, "window_s")->valuedouble == 30.0 &&
          cJSON_GetObjectItem(j, "overlap_s")->valuedouble == 5.0);
    int i = 0;
    for (const cJSON *g = segs ? segs->child : NULL; g && i < k; g = g->next, i++) {
        const double want_start = i ? (start[i] + end[i - 1]) / 2 / 16000.0 : 0;
        const double want_end = i + 1 < k ? (start[i + 1] + end[i]) / 2 / 16000.0 : n / 16000.0;
        CHECK_MSG(fabs(cJSON_GetObjectItem(g, "start")->valuedouble - want_start) < 1e-6 &&
                      fabs(cJSON_GetObjectItem(g, "end")->valuedouble - want_end) < 1e-6,
                  "segment %d: %g-%g, expected %g-%g", i,
                  cJSON_GetObjectItem(g, "start")->valuedouble,
                  cJSON_GetObjectItem(g, "end")->valuedouble, want_start, want_end);
        CHECK(fabs(cJSON_GetObjectItem(g, "window_start")->valuedouble - start[i] / 16000.0) <
              1e-9);
        CHECK_INT(cJSON_GetObjectItem(g, "window_tokens")->valueint, nt[i]);
        CHECK_INT(cJSON_GetObjectItem(g, "dropped_tokens")->valueint, drop[i]);
        const cJSON *t = cJSON_GetObjectItem(g, "tokens");
        int same = cJSON_GetArraySize(t) == nk[i], q = 0;
        for (const cJSON *e = t ? t->child : NULL; e && same; e = e->next, q++)
            same = e->valueint == kept[i][q];
        CHECK_MSG(same, "segment %d: the tokens of the window run alone, stitched", i);
    }
    CHECK(nt[0] > 0);
    char *err = g4t_slurp("%s/err", tmp);
    CHECK_MSG(!strstr(err, "only the first"), "long-form: no audio dropped");
    free(err);

    // --srt / --vtt: the same segments as cues
    const char *fmts[2] = {"srt", "vtt"};
    // cue times from the segment bounds (samples at 16 kHz): the middles of the overlaps, the
    // end of the audio
    const int64_t bound[4] = {0, (start[1] + end[0]) / 2, (start[2] + end[1]) / 2, n};
    for (int f = 0; f < 2; f++) {
        char *out = g4_sprintf("%s/long.%s", tmp, fmts[f]);
        rc = g4t_sh("'%s' asr '%s' '%s' --tokenizer '%s' --max-new 3 --%s >'%s' 2>/dev/null", g4cu,
                    pkg, longwav, tok, fmts[f], out);
        CHECK_INT(rc, 0);
        char *c = g4t_slurp("%s", out);
        CHECK(f == 0 ? !strncmp(c, "1\n00:00:00,000 --> ", 19) : !strncmp(c, "WEBVTT\n\n", 8));
        i = 0;
        for (const cJSON *g = segs ? segs->child : NULL; g && i < 3; g = g->next, i++) {
            char t[2][32];
            for (int e = 0; e < 2; e++) {
                const long long ms = (long long)((double)bound[i + e] / 16.0 + 0.5);
                snprintf(t[e], sizeof t[e], "%02lld:%02lld:%02lld%c%03lld", ms / 3600000,
                         ms / 60000 % 60, ms / 1000 % 60, f == 0 ? ',' : '.', ms % 1000);
            }
            char num[16] = "";
            if (f == 0) snprintf(num, sizeof num, "%d\n", i + 1);
            char *want = g4_sprintf("%s%s --> %s\n%s\n\n", num, t[0], t[1],
                                    cJSON_GetObjectItem(g, "text")->valuestring);
            CHECK_MSG(strstr(c, want) != NULL, "%s: no cue '%s'", fmts[f], want);
            free(want);
        }
        free(c), free(out);
    }
    rc = g4t_sh("'%s' asr '%s' '%s' '%s' --srt >/dev/null 2>&1", g4cu, pkg, longwav, longwav);
    CHECK_INT(rc, 1);
    cJSON_Delete(j);
    free(s), free(res), free(x), free(a), free(b), free(longwav);
}

int main(void) {
    test_windows();
    g4cu = g4t_env("G4CU");
    pkg = g4t_env("G4_TINY_PKG");
    tok = g4_sprintf("%s/chat/chat_bpe.json", g4t_env("G4_FIXTURES"));
    tmp = g4t_tmpdir();
    test_cli();
    g4t_rmtree(tmp);
    return g4t_finish("test_asr_long");
}
